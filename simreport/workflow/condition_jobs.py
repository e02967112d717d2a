"""Condition jobs and their state files. One job per condition runs all of its replications
(copied from the run store when finished before, else run in the shared pool) and ends by writing
the condition's state file: its retry generation, the runs it left failed or missing and the
sha256 of every result.json. The next build reads the state to retry exactly the pending runs;
the analysis checks the runs against it and puts back a damaged one (`repair_runs`). The plan-spec
job, which removes the run folders a plan no longer has, is here too."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.canonical import pretty_json
from ..core.errors import InputError
from ..core.files import write_atomic
from ..core.schema import RunResult
from ..harness import Condition, RunJob, execute_jobs, plan_jobs
from ..kernel.interrupt import Interrupted
from .ledger import ledger_recorder, record_in_ledger, with_recording
from .pool import default_workers, retire_pool, shared_pool
from .terminal import say

if TYPE_CHECKING:
    from .targets import ConditionTarget, PlanTarget, Workflow


def write_plan_spec(workflow: Workflow, plan_id: str) -> None:
    """plan.json and conditions.json of one plan; then runs/ loses the folders the plan no
    longer has (runs once whenever the plan's spec changes, never at parse time)."""
    plan = workflow.plan(plan_id)
    write_atomic(plan.out_dir / "plan.json", pretty_json(plan.plan_doc))
    write_atomic(plan.out_dir / "conditions.json", pretty_json(plan.conditions_doc))
    remove_obsolete_runs(plan)


def remove_obsolete_runs(plan: PlanTarget) -> list[Path]:
    """Remove from `runs/` the condition folders that are not the plan's any more (an axis level
    removed) and the replication folders beyond its replication count, so the folder shows the
    plan as it is. Their finished runs stay in the run store. Only folders directly in runs/
    and numbered replication folders of current conditions go; files, links and anything else
    stay. Returns what was removed."""
    runs = plan.out_dir / "runs"
    if not runs.is_dir() or runs.is_symlink():
        return []
    wanted = {t.condition.dir: len(t.outputs) for t in plan.conditions}
    removed: list[Path] = []
    for entry in sorted(runs.iterdir()):
        if entry.is_symlink() or not entry.is_dir():
            continue
        if entry.name not in wanted:
            removed.append(entry)
            continue
        for rep in sorted(entry.iterdir()):
            if (
                rep.is_dir()
                and not rep.is_symlink()
                and rep.name.isdecimal()
                and rep.name.isascii()
                and int(rep.name) >= wanted[entry.name]
            ):
                removed.append(rep)
    for path in removed:
        shutil.rmtree(path)
    return removed


def _condition_jobs(
    workflow: Workflow, plan: PlanTarget, target: ConditionTarget, *, reuse: bool = False
) -> tuple[list[tuple[Condition, int]], list[RunJob], dict[int, RunResult]]:
    """The replications of one condition: their slots, the jobs left to run and the results
    taken from the run store (or, with `reuse`, from the run folders). The runs check what the
    ledger pins and holds as review status; a regression whose condition records a scenario
    version that is not online is refused before any run."""
    from ..api import refuse_unpublished
    from ..harness.conditions import recorded_versions
    from ..ledger.recording import LedgerRecorder

    loaded = plan.loaded
    recorder = LedgerRecorder(workflow.ledger, say=say, shared=True)
    checks = recorder.run_checks(
        loaded.base, purpose=loaded.plan.purpose, file=loaded.base_file or loaded.plan_file
    )
    version, _ = recorded_versions(loaded, [target.condition], plan.llm)[target.condition.id]
    identity = loaded.base.identity
    refuse_unpublished(
        checks,
        identity.id if identity is not None else None,
        [version] if version is not None else [],
        file=loaded.plan_file,
    )
    return plan_jobs(
        loaded,
        [target.condition],
        plan.out_dir,
        provider=plan.provider,
        llm=plan.llm,
        store=workflow.store,
        reuse=reuse,
        checks=checks,
    )


def run_conditions(
    workflow: Workflow,
    plan_id: str,
    condition_ids: Sequence[str],
    cores: int | None,
    log: str | Path | None = None,
) -> dict[str, int]:
    """One run job: its condition (`run_condition`, logged to `log`), or the conditions of a
    batch (a plan with more conditions than `runJobs`) side by side in the shared pool, each with
    its own log and state file as if it had a job of its own. A batch's `log` gets each
    condition's summary line as it ends, and its summary file is written last. Returns the run
    counts summed over the conditions; when a condition's job fails, the others still end before
    the first error is raised (and the summary is not written)."""
    plan = workflow.plan(plan_id)
    targets = [_target_of(plan, condition_id) for condition_id in condition_ids]
    if len(targets) == 1 and targets[0].batch_summary is None:
        return run_condition(workflow, plan_id, condition_ids[0], cores, log)
    workers = workflow.workers or default_workers(cores)
    totals: dict[str, int] = {}
    errors: list[BaseException] = []
    header = f"{len(targets)} conditions of {plan_id} in one job: " + ", ".join(condition_ids)
    progress = ConditionLog(log, plan_id, total=0, fetched=0, header=header)
    with ThreadPoolExecutor(max_workers=max(1, min(len(targets), workers))) as threads:
        futures = {
            threads.submit(
                run_condition, workflow, plan_id, t.condition.id, cores, t.log, pooled=True
            ): t
            for t in targets
        }
        for future in as_completed(futures):
            condition_id = futures[future].condition.id
            try:
                counts = future.result()
            except BaseException as exc:  # every condition ends; the first error is raised
                errors.append(exc)
                progress.line(f"{condition_id}: {type(exc).__name__}: {exc}")
                continue
            for name, value in counts.items():
                totals[name] = totals.get(name, 0) + value
            progress.line(f"{condition_id}: {_counts_text(counts)}")
    progress.close(f"{_counts_text(totals)} process={os.getpid()}")
    if errors:
        raise errors[0]
    summary = targets[0].batch_summary
    if summary is not None:
        # Last, once every condition's state is written: the same bytes when the same runs are
        # there, so the analysis and evaluations of a batch that ran again for nothing stay.
        states = {t.condition.id: _digest(Path(t.state)) for t in targets}
        write_atomic(Path(summary), pretty_json({"conditions": states}))
    return totals


def _counts_text(counts: Mapping[str, int]) -> str:
    """`replications=10 computed=2 fromStore=8 failed=0`: a job's counts as its log's last line
    gives them."""
    return " ".join(f"{k}={v}" for k, v in counts.items())


def _target_of(plan: PlanTarget, condition_id: str) -> ConditionTarget:
    target = plan.by_id(condition_id)
    if target is None:
        raise KeyError(condition_id)
    return target


def run_condition(
    workflow: Workflow,
    plan_id: str,
    condition_id: str,
    cores: int | None,
    log: str | Path | None = None,
    *,
    pooled: bool = False,
) -> dict[str, int]:
    """Every replication of one condition: copied from the store when finished before, otherwise
    run in the shared pool and then stored (a single run in the job's own process, unless
    `pooled`: conditions of a batch share the pool). Each run is logged to `log` as it ends; a
    job with failed or missing runs ends with one line per failure class, in `log` and on
    stderr. The condition's state file records what is pending, so the next build retries
    exactly that."""
    plan = workflow.plan(plan_id)
    target = _target_of(plan, condition_id)
    slots, jobs, fetched = _condition_jobs(workflow, plan, target)
    progress = ConditionLog(log, condition_id, total=len(slots), fetched=len(fetched))
    workers = workflow.workers or default_workers(cores)
    pool = shared_pool(workers) if len(jobs) > 1 or (pooled and jobs) else None
    recorder = ledger_recorder(workflow)
    try:
        results = {
            **fetched,
            **execute_jobs(jobs, pool, with_recording(progress.finished, recorder)),
        }
    except Interrupted:
        if recorder is not None:
            recorder.close()
        if pool is not None:
            retire_pool(pool)
        _drop_unfinished(target)
        progress.close("interrupted")
        raise
    state = _condition_state(plan, target, results, generation=target.retry, log=log)
    write_atomic(Path(target.state), pretty_json(state))
    counts = {
        "replications": len(slots),
        "computed": len(jobs),
        "fromStore": len(fetched),
        "failed": len(state["pending"]),
    }
    summary = _counts_text(counts)
    for line in state["failures"]:
        progress.line(line)
    progress.close(f"{condition_id}: {summary} process={os.getpid()}")
    say(
        f"{plan_id} · {condition_id}: {len(slots) - counts['failed']} of {len(slots)} runs "
        f"finished ({counts['fromStore']} from the store, {counts['computed']} run)"
        + "".join(f"\n  {line}" for line in state["failures"])
    )
    # Here, in the job's process, once every run's folder is complete; failed runs too (the
    # finished ones were handed over as they ended: this waits for them).
    record_in_ledger(
        workflow, runs=[Path(output).parent for output in target.outputs], recorder=recorder
    )
    return counts


def _drop_unfinished(target: ConditionTarget) -> None:
    """After an interrupted condition job: the folders of its runs that did not finish (ended
    `cancelled`), so results/ holds finished runs or nothing, and the next build runs them."""
    for output in target.outputs:
        path = Path(output)
        try:
            final = RunResult.model_validate_json(path.read_bytes()).final
        except (OSError, ValueError):
            continue
        if not final:
            shutil.rmtree(path.parent, ignore_errors=True)


class ConditionLog:
    """A condition job's log, written as its runs end (appended and flushed line by line, so
    `tail -f` follows it), ending with the job's summary line."""

    def __init__(
        self,
        path: str | Path | None,
        condition_id: str,
        *,
        total: int,
        fetched: int,
        header: str | None = None,
    ):
        self.total = total
        self.done = fetched
        self.failed = 0
        self._handle = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 (kept open while runs end)
        self.line(
            header
            or f"{condition_id}: {total} runs, {fetched} from the store, {total - fetched} to run"
        )

    def line(self, text: str) -> None:
        if self._handle is not None:
            # A log that cannot be written (disk full) must not fail the runs it reports on.
            with contextlib.suppress(OSError):
                self._handle.write(text + "\n")
                self._handle.flush()

    def finished(self, job: RunJob, result: RunResult) -> None:
        self.done += 1
        if result.final:
            what = "finished"
        else:
            self.failed += 1
            what = f"failed: {_reason(result)}"
        self.line(
            f"run {job.replication} {what} ({self.done} of {self.total} done, "
            f"{self.failed} failed so far)"
        )

    def close(self, last: str) -> None:
        self.line(last)
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _reason(result: RunResult | None) -> str:
    if result is None:
        return "Missing: no result.json"
    if result.failure is not None:
        return f"{result.failure.type}: {result.failure.message}"
    if result.lost_calls:
        return (
            f"ModelCallsLost: {result.lost_calls} model calls lost to provider errors "
            "(see the run's events.jsonl)"
        )
    return f"Incomplete: execution {result.status.execution}"


# --------------------------------------------------------------------------- condition state

STATE_DIR = "state"
"""Folder of a plan's condition state files (one per condition: what its last job ended with)."""


def state_file(out_dir: Path, condition_dir: str) -> Path:
    """`<audit dir>/state/<condition dir>.json`: the retry generation the condition's last job
    ran as, the replications it left failed or missing (`pending`), one line per failure class,
    its log and the sha256 of each run's result.json (checked before the analysis reads it)."""
    return out_dir / STATE_DIR / f"{condition_dir}.json"


def read_state(path: Path) -> dict[str, Any]:
    """A condition's state; empty when there is none or it cannot be read (read at parse time
    for every condition: one small file each)."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def runs_changed(outputs: Sequence[str], state_path: Path, state: Mapping[str, Any]) -> bool:
    """Whether a run of the condition was deleted, or its result.json rewritten, after the
    condition's job ended (its state file is the job's last write). A result.json newer than the
    state file whose sha256 is the one the state records (Snakemake touches the output of a run
    asked for by its path after it is put back) has not changed. A condition never built (no
    state, no run) has not changed."""
    try:
        ended: int | None = os.stat(state_path).st_mtime_ns
    except OSError:
        ended = None
    digests = state.get("digests") or {}
    present = False
    missing = False
    for r, path in enumerate(outputs):
        try:
            written = os.stat(path).st_mtime_ns
        except OSError:
            missing = True
            continue
        present = True
        if ended is not None and written > ended and _digest(Path(path)) != digests.get(str(r)):
            return True
    return missing and (bool(state) or present)


def retry_token(state: Mapping[str, Any], *, deleted: bool = False) -> int:
    """Part of a condition job's key. The job records the token it ran with as `generation`;
    while runs it left are pending (or a result.json of it was `deleted` since), the token is
    one more, so each build reruns the job once, and once nothing is pending it stays put, so
    nothing reruns for it."""
    generation = state.get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        generation = 0
    return generation + (1 if state.get("pending") or deleted else 0)


def _digest(path: Path) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _condition_state(
    plan: PlanTarget,
    target: ConditionTarget,
    results: Mapping[int, RunResult],
    *,
    generation: int,
    log: str | Path | None,
) -> dict[str, Any]:
    """The state a condition job leaves: a run is pending when it failed or has no result.json."""
    total = len(target.outputs)
    digests: dict[str, str] = {}
    reasons: dict[int, RunResult | None] = {}
    for r, output in enumerate(target.outputs):
        digest = _digest(Path(output))
        result = results.get(r)
        if digest is not None:
            digests[str(r)] = digest
        if digest is None:
            reasons[r] = None
        elif result is not None and not result.final:
            reasons[r] = result
    return {
        "condition": target.condition.id,
        "generation": generation,
        "pending": sorted(reasons),
        "failures": failure_lines(reasons, total),
        "log": None if log is None else str(log),
        "runs": total,
        "digests": digests,
    }


def failure_lines(reasons: Mapping[int, RunResult | None], total: int) -> list[str]:
    """One line per failure class, most frequent first:
    `3 of 10 runs failed: ConnectionFailed ×3 (first message)`; runs without a result.json are
    `missing`."""
    classes: dict[str, list[str]] = {}
    for r in sorted(reasons):
        result = reasons[r]
        kind, _, message = _reason(result).partition(": ")
        classes.setdefault(kind, []).append(message)
    lines = []
    for kind, messages in sorted(classes.items(), key=lambda item: (-len(item[1]), item[0])):
        verb = "are missing" if kind == "Missing" else "failed"
        first = " ".join(messages[0].split())
        if len(first) > 160:
            first = first[:157] + "…"
        lines.append(f"{len(messages)} of {total} runs {verb}: {kind} ×{len(messages)} ({first})")
    return lines


def damaged_runs(plan: PlanTarget, target: ConditionTarget) -> list[int]:
    """Replications whose result.json is missing or differs from the digest its condition job
    recorded (a run without a recorded digest is taken as it is)."""
    digests = read_state(Path(target.state)).get("digests") or {}
    damaged = []
    for r, output in enumerate(target.outputs):
        digest = _digest(Path(output))
        if digest is None or digests.get(str(r), digest) != digest:
            damaged.append(r)
    return damaged


def repair_runs(
    workflow: Workflow, plan: PlanTarget, target: ConditionTarget, damaged: Sequence[int]
) -> None:
    """Put back the damaged replications of one condition: from the run store when it holds
    them intact, else by running them (here, one after another: damage is rare). The other
    replications are left as they are. The state file then records the new digests, and a run
    that fails now is pending, so the next build retries it."""
    for r in damaged:
        Path(target.outputs[r]).unlink(missing_ok=True)
    # Intact replications stay untouched; only the damaged ones are fetched or run.
    _, jobs, _ = _condition_jobs(workflow, plan, target, reuse=True)
    wanted = set(damaged)
    results = execute_jobs([job for job in jobs if job.replication in wanted], None)
    path = Path(target.state)
    state = read_state(path)
    if not state:
        # The condition's job has not run: it writes the whole state when it does.
        return
    reasons: dict[int, RunResult | None] = {}
    digests = dict(state.get("digests") or {})
    for r in damaged:
        digest = _digest(Path(target.outputs[r]))
        if digest is None:
            digests.pop(str(r), None)
            reasons[r] = None
        else:
            digests[str(r)] = digest
    by_replication = {job.replication: results[job.index] for job in jobs if job.index in results}
    for r, result in by_replication.items():
        if not result.final:
            reasons[r] = result
    earlier = {int(r) for r in state.get("pending") or []}
    pending = sorted((earlier - wanted) | set(reasons))
    state.update(digests=digests, pending=pending)
    if reasons:
        state["failures"] = list(state.get("failures") or []) + failure_lines(
            reasons, len(target.outputs)
        )
    write_atomic(path, pretty_json(state))
    say(
        f"{plan.id} · {target.condition.id}: replaced {len(damaged)} damaged or missing "
        f"result.json ({', '.join(str(r) for r in damaged)})"
    )
    record_in_ledger(workflow, runs=[Path(target.outputs[r]).parent for r in damaged])


def run_replication(
    workflow: Workflow,
    plan_id: str,
    condition_dir: str,
    replication: int,
    output: str,
    log: str | Path | None = None,
) -> None:
    """One replication asked for by its path (`snakemake results/<plan>/runs/<condition
    dir>/<r>/result.json`): copied from the run store when it holds it, else run. When the
    condition's job has run, its state file records the new run, so the analysis reruns and
    the condition's job does not."""
    if plan_id not in {plan.id for plan in workflow.plans}:
        known = ", ".join(plan.id for plan in workflow.plans)
        raise InputError(f"no plan {plan_id!r} in the config (its plans: {known})")
    plan = workflow.plan(plan_id)
    target = plan.by_dir(condition_dir)
    if target is None:
        raise InputError(f"plan {plan_id!r} has no condition folder {condition_dir!r}")
    if not 0 <= replication < len(target.outputs):
        raise InputError(
            f"plan {plan_id!r} runs replications 0 to {len(target.outputs) - 1}, not {replication}"
        )
    if os.path.normpath(output) != os.path.normpath(target.outputs[replication]):
        raise InputError(
            f"{output} is not where the workflow keeps this run: {target.outputs[replication]}"
        )
    repair_runs(workflow, plan, target, [replication])
    if log is not None:
        written = Path(target.outputs[replication])
        outcome = "missing"
        if written.exists():
            result = RunResult.model_validate_json(written.read_bytes())
            outcome = "finished" if result.final else _reason(result)
        write_atomic(Path(log), f"{target.condition.id} replication {replication}: {outcome}\n")
