"""Running an audit: plan.json and conditions.json, then every replication of every condition
through the kernel, in a pool of worker processes, each into its own run directory
(`runs/<condition dir>/<r>/`). A failed or crashed run is recorded as data and never stops the
audit; run directories of conditions no longer in the plan are left alone. The layout:
docs/harness.md.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor, as_completed, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core.canonical import content_hash, pretty_json
from ..core.errors import InputError
from ..core.files import read_json, write_atomic, write_json
from ..core.processes import fresh_processes
from ..core.redaction import redact_document
from ..core.schema import RunResult, Scenario
from ..core.versions import RunChecks, run_document
from ..kernel import input_hashes, interrupt, kernel_fingerprint, run_scenario
from ..kernel.interrupt import Interrupted
from ..kernel.testbed.assets import manifest_references
from .conditions import (
    Condition,
    build_conditions,
    declared_design,
    recorded_versions,
    replication_scenarios,
)
from .plan import LoadedPlan, bounded_workers, paths_overlap
from .store import RunStore, run_key

Progress = Callable[[int, int], None]

# A job that was still unfinished when a worker pool broke this many times is run alone, so a
# run that kills its worker process is recorded as crashed without taking others down with it.
_POOL_ATTEMPTS = 2

KEYED_CHECKS = ("purpose", "version", "derivedFrom", "specSha256")
"""What of a run's checks its store key covers: what the plan and the files decide. The ledger's
pins and statuses are not: a stored run stands for what it checked when it ran (a run that
failed them is never stored), so a build with the ledger unreachable and the next with it
reachable share their runs."""

STOP_GRACE_SECONDS = 3.0
"""After an interrupt, how long runs in flight get to end as interrupted runs before their workers
are killed."""


@dataclass(frozen=True)
class AuditRun:
    """What `run_audit` did: the conditions and one result per (condition, replication), in plan
    order."""

    out_dir: Path
    conditions: list[Condition]
    results: list[tuple[Condition, int, RunResult]]

    @property
    def failed(self) -> int:
        """Runs that did not complete."""
        return sum(1 for _, _, result in self.results if not result.succeeded)


@dataclass(frozen=True)
class RunJob:
    """One run, in a form that crosses process boundaries cheaply."""

    index: int
    condition: str
    replication: int
    scenario: dict[str, Any]
    out_dir: str
    asset_root: str
    provider: str | None
    key: str = ""
    store: str | None = None
    """Root of the run store that keeps this run once it completes."""
    checks: dict[str, Any] | None = None
    """What the run checks while loading (a RunChecks document)."""


def run_dir(out_dir: Path, condition: Condition, replication: int) -> Path:
    """Where one replication of a condition runs: `out_dir/runs/<condition dir>/<replication>`."""
    return out_dir / "runs" / condition.dir / str(replication)


def plan_document(
    loaded: LoadedPlan, provider: str | None = None, llm: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The content of plan.json: the normalised plan plus `hash`, `planFile` (as given to
    load_plan), `providerOverride` (the provider every run was forced to, or null) and, when
    given, `llmOverride` (the `llm` keys every run was forced to). Only the normalised part is
    hashed. Credentials in URLs (`baseUrl` in the base scenario, an axis level or the override)
    are redacted: plan.json is published, the runs use the real values."""
    doc: dict[str, Any] = redact_document(loaded.normalised())
    doc["hash"] = loaded.hash
    doc["planFile"] = str(loaded.plan_file)
    doc["providerOverride"] = provider
    if llm:
        doc["llmOverride"] = redact_document(dict(llm))
    # JSON files are written with sorted keys; this keeps the order in which the plan listed each
    # target distribution's categories (e.g. a scale from "strongly oppose" to "strongly support").
    targets = loaded.hypothesis.target_distribution if loaded.hypothesis is not None else None
    doc["categoryOrder"] = {name: list(dist) for name, dist in (targets or {}).items()}
    # What the world (or simulator) declares it reports: the metrics compared when the plan
    # lists none, even if every run failed and reported nothing.
    doc["declaredMetrics"] = sorted(loaded.metrics_available)
    return doc


def conditions_document(
    loaded: LoadedPlan, conditions: Iterable[Condition]
) -> list[dict[str, Any]]:
    """The content of conditions.json: one entry per condition, in plan order."""
    return [c.to_doc(loaded.plan.replications) for c in conditions]


def run_audit(
    loaded: LoadedPlan,
    out_dir: str | Path,
    *,
    provider: str | None = None,
    concurrency: int | None = None,
    progress: Progress | None = None,
    reuse: bool = False,
    store: RunStore | None = None,
    llm: Mapping[str, Any] | None = None,
    checks: RunChecks | None = None,
) -> AuditRun:
    """Write plan.json and conditions.json, then run every replication of every condition.
    Every check comes before the first file is written, so a refused audit leaves nothing.

    Args:
        loaded: the loaded plan (`load_plan`).
        out_dir: the audit directory.
        provider: forces every run onto that provider.
        concurrency: the number of worker processes (default: the plan's), capped at the
            machine's worker limit with a warning; 1 runs in this process.
        progress: called as `progress(done, total)`, once with 0 before the first run and after
            each run finishes (in completion order).
        reuse: a replication whose completed result.json exists, whose scenario.json is
            byte-identical to the one it would run and whose manifest names the current kernel
            fingerprint is not run again.
        store: finished runs are copied from it instead of being recomputed, and every
            completed run is added to it.
        llm: overrides of every run's `llm` keys (e.g. model, baseUrl; see
            `validate_llm_override`).
        checks: the ledger's pins and review statuses every run verifies while loading
            (default: none beyond the plan's purpose; see `plan_jobs`).

    Returns:
        The conditions and one result per (condition, replication), in plan order.

    Raises:
        InputError: an unknown provider or an `llm` override the plan cannot take.
        KeyboardInterrupt: a run was stopped from outside this process; the audit returns
            nothing to analyse.
    """
    out = Path(out_dir)
    # Every check before the first file is written: a refused audit leaves nothing behind.
    check_llm_access(provider, None)
    requested = concurrency if concurrency is not None else loaded.plan.concurrency
    workers, note = bounded_workers(requested)
    if note is not None:
        warnings.warn(note, stacklevel=2)
    conditions = build_conditions(loaded)
    llm = validate_llm_override(loaded, llm)
    plan_doc = plan_document(loaded, provider, llm)
    _write_if_changed(out / "plan.json", pretty_json(plan_doc))
    _write_if_changed(out / "conditions.json", pretty_json(conditions_document(loaded, conditions)))

    slots, jobs, results = plan_jobs(
        loaded, conditions, out, provider=provider, reuse=reuse, store=store, llm=llm, checks=checks
    )
    total = len(slots)
    done = len(results)

    def record(index: int, result: RunResult) -> None:
        nonlocal done
        results[index] = result
        done += 1
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(done, total)
    interrupt.reset()  # a stop requested before this audit began is not a stop of it
    if workers == 1 or len(jobs) <= 1:
        for job in jobs:
            record(job.index, _run_guarded(job))
    else:
        _run_pooled(jobs, workers, record)
    if any(_interrupted(result) for result in results.values()):
        # A run was stopped from outside this process: the audit is interrupted all the same,
        # and an interrupted audit returns nothing to analyse.
        raise KeyboardInterrupt

    ordered = [(condition, r, results[i]) for i, (condition, r) in enumerate(slots)]
    return AuditRun(out_dir=out, conditions=conditions, results=ordered)


def check_llm_access(
    provider: str | None,
    base_url: str | None,
    *,
    provider_at: str = "provider",
    base_url_at: str = "baseUrl",
    file: str | Path | None = None,
) -> None:
    """Refuse a provider override that names no registered provider, and a base URL override
    that is not an http(s) URL with a host, before anything runs (otherwise every run would fail
    with the same error).

    Args:
        provider: the provider override, or None.
        base_url: the base URL override, or None.
        provider_at: where the caller took `provider` from (an option, a config key).
        base_url_at: where the caller took `base_url` from.
        file: the file the errors name, when the overrides come from one.

    Raises:
        InputError: an unknown provider, or a base URL that is not an http(s) URL with a host
            (shown with its credentials redacted).
    """
    from ..core.redaction import redact_text
    from ..kernel.providers import PROVIDERS, ProviderError
    from ..kernel.providers.openai import chat_base_url

    if provider is not None and (not isinstance(provider, str) or provider not in PROVIDERS):
        raise InputError(
            f"unknown provider {provider!r}",
            file=file,
            path=provider_at,
            expected="one of " + ", ".join(PROVIDERS),
        )
    if base_url is None:
        return
    valid = isinstance(base_url, str)
    if valid:
        try:
            chat_base_url(base_url)
        except ProviderError:
            valid = False
    if not valid:
        # Shown, so without the credentials a mistyped URL may still carry.
        shown = repr(redact_text(base_url)) if isinstance(base_url, str) else repr(base_url)
        raise InputError(
            f"{shown} is not an http(s) URL with a host",
            file=file,
            path=base_url_at,
            expected="a URL such as http://127.0.0.1:8000/v1",
        )


def validate_llm_override(
    loaded: LoadedPlan, llm: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Check `llm` overrides (document keys such as model, baseUrl) against the plan: they must
    be `llm` keys, must not replace a plan's own `models` nor cancel an axis that varies the same
    key, a baseUrl must be an http(s) URL, and the result must validate.

    Args:
        loaded: the loaded plan.
        llm: the overrides; None values are dropped.

    Returns:
        The overrides that are set, or None when there are none.

    Raises:
        InputError: an override the plan cannot take, naming it.
    """
    if not llm:
        return None
    fields = {k: v for k, v in llm.items() if v is not None}
    if not fields:
        return None
    if "baseUrl" in fields:
        check_llm_access(None, fields["baseUrl"], base_url_at="llm.baseUrl")
    if "model" in fields and loaded.plan.models:
        raise InputError(
            "a `model` override cannot replace a plan that lists `models`",
            file=loaded.plan_file,
            path="models",
            expected="no model override for this plan",
        )
    for i, axis in enumerate(loaded.plan.axes):
        for key in fields:
            if paths_overlap(f"llm.{key}", axis.target):
                # The override would silently undo the axis: every level would run the same.
                raise InputError(
                    f"an llm.{key} override would cancel axis {axis.id!r}, which varies "
                    f"{axis.target}",
                    file=loaded.plan_file,
                    path=f"axes.{i}.target",
                    expected=f"no llm.{key} override for this plan",
                )
    doc = loaded.base.to_doc()
    unknown = sorted(set(fields) - set(doc["llm"]))
    if unknown:
        raise InputError(
            f"unknown llm override {', '.join(unknown)}",
            path="llm",
            expected="keys of the scenario's llm section: " + ", ".join(sorted(doc["llm"])),
        )
    try:
        Scenario.model_validate({**doc, "llm": {**doc["llm"], **fields}})
    except ValueError as exc:
        raise InputError(f"invalid llm override: {exc}", path="llm") from None
    return fields


def plan_jobs(
    loaded: LoadedPlan,
    conditions: Iterable[Condition],
    out: Path,
    *,
    provider: str | None = None,
    reuse: bool = False,
    store: RunStore | None = None,
    llm: Mapping[str, Any] | None = None,
    checks: RunChecks | None = None,
) -> tuple[list[tuple[Condition, int]], list[RunJob], dict[int, RunResult]]:
    """Every replication of `conditions`: its slot, and either a job to run or a result reused
    from the run directory (`reuse`) or copied from the `store`.

    Args:
        loaded: the loaded plan.
        conditions: the conditions to run, in plan order.
        out: the audit directory.
        provider: forces every run onto that provider.
        reuse: reuse a completed run directory that would run the same scenario on the current
            kernel (see `run_audit`).
        store: the run store to copy finished runs from.
        llm: overrides keys of every run's `llm` section (e.g. model, baseUrl).
        checks: what each run checks while loading (default: the plan's purpose and nothing
            the ledger holds), given with the scenario version its condition records; the
            purpose and version are part of its store key (KEYED_CHECKS), so a run is never
            reused under another purpose or as another version.

    Returns:
        The (condition, replication) slots in plan order, the jobs still to run, and the
        results already at hand by slot index.
    """
    slots: list[tuple[Condition, int]] = []
    jobs: list[RunJob] = []
    results: dict[int, RunResult] = {}
    fingerprints: dict[str | None, str] = {}
    # Each condition's keys cover only the files its own runs read (for an agent scenario, the
    # asset versions its manifest resolves): editing one asset outdates only the conditions
    # that use it. The workflow's job keys use the same inputs.
    conditions = list(conditions)
    inputs = {c.id: input_hashes(c.scenario, loaded.asset_root) for c in conditions}
    if checks is None:
        checks = RunChecks(purpose=loaded.plan.purpose)
    if loaded.base.identity is not None:
        # The reviewed version's digest, which its runs check against the ledger's pin and
        # record. An unversioned scenario has no version to check: its runs' keys then follow
        # their own scenario only, not every edit of the base (as `simreport run` does).
        checks = checks.model_copy(update={"spec_sha256": declared_design(loaded)})
    versions = recorded_versions(loaded, conditions, llm)
    condition_checks = {
        c.id: checks.for_condition(
            *versions[c.id],
            (ref.rpartition("@")[0] for _, ref, _ in manifest_references(c.scenario)),
        ).to_doc()
        for c in conditions
    }
    for condition in conditions:
        world = condition.scenario.world
        if world not in fingerprints:
            fingerprints[world] = kernel_fingerprint(world)
        # What the runs read, and so what they are keyed by and compared with when reused.
        read = replace(condition, scenario=run_scenario_of(condition.scenario, llm))
        for r, scenario in enumerate(replication_scenarios(read, loaded.plan.replications)):
            index = len(slots)
            slots.append((condition, r))
            target = run_dir(out, condition, r)
            doc = scenario.to_doc()
            key = run_key(
                doc,
                condition=condition.id,
                replication=r,
                provider=provider,
                fingerprint=fingerprints[world],
                inputs={
                    **inputs[condition.id],
                    "checks": content_hash(
                        {k: condition_checks[condition.id].get(k) for k in KEYED_CHECKS}
                    ),
                },
            )
            reused = (
                _reusable(target, scenario, provider, condition.id, r, checks.purpose)
                if reuse
                else None
            )
            if reused is None and store is not None:
                reused = store.fetch(key, target)
            if reused is not None:
                results[index] = reused
                continue
            jobs.append(
                RunJob(
                    index=index,
                    condition=condition.id,
                    replication=r,
                    scenario=doc,
                    out_dir=str(target),
                    asset_root=str(loaded.asset_root),
                    provider=provider,
                    key=key,
                    store=str(store.root) if store is not None else None,
                    checks=condition_checks[condition.id],
                )
            )
    return slots, jobs, results


def run_scenario_of(scenario: Scenario, llm: Mapping[str, Any] | None = None) -> Scenario:
    """The scenario a run of `scenario` reads (`core.versions.run_document`: keys in sorted
    order, nothing no run reads), with the `llm` overrides applied."""
    doc = scenario.to_doc()
    if llm:
        doc["llm"] = {**doc["llm"], **llm}
    return Scenario.model_validate(run_document(doc))


RUN_PRELOAD = ("simreport.harness.runner", "simreport.kernel.warm")
"""What the fork server of a pool imports once: the code a worker runs, and the kernel with its
fingerprints (nothing of the main script: see `core.processes.fresh_processes`)."""


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` fresh processes for runs. Each worker ends its runs as interrupted on
    SIGINT or SIGTERM (see `stop_pool`) and exits by itself once this process is gone."""
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=fresh_processes(RUN_PRELOAD),
        initializer=interrupt.init_worker,
    )


def tell_workers_to_stop(pool: ProcessPoolExecutor) -> list[multiprocessing.Process]:
    """Send SIGINT to every worker of `pool`: their runs in flight end as interrupted runs.
    Returns the workers."""
    processes: list[multiprocessing.Process] = list((pool._processes or {}).values())
    for process in processes:
        if process.pid is not None:
            with contextlib.suppress(OSError):  # exited already
                os.kill(process.pid, signal.SIGINT)
    return processes


def stop_pool(
    pool: ProcessPoolExecutor, futures: Mapping[Future[Any], RunJob], *, since: float
) -> None:
    """Stop `pool` after an interrupt: tell its workers to stop (their runs in flight end as
    interrupted runs and write their results), drop the jobs not yet started, wait up to
    STOP_GRACE_SECONDS (a second interrupt cuts the wait short), then kill whatever still runs
    and record its runs (those started since `since`, a time.time()) as interrupted."""
    processes: list[multiprocessing.Process] = []
    try:
        processes = tell_workers_to_stop(pool)
        # Cancelled here rather than by the shutdown: wait() would take a future the pool
        # cancels for one still pending, and wait for it in vain.
        running = [future for future in futures if not future.cancel()]
        pool.shutdown(wait=False, cancel_futures=True)
        wait(running, timeout=STOP_GRACE_SECONDS)
    except KeyboardInterrupt:
        pass  # the second interrupt: no more grace (the caller re-raises the first)
    finally:
        for process in processes:
            process.kill()
        # Every run that started and left no result: its worker was killed (by us, or by the
        # second interrupt, after which the pool may already report its future as done).
        for job in futures.values():
            if _started_since(job, since):
                _harness_failure(
                    job,
                    "Interrupted",
                    "interrupted before the run finished; its worker was stopped",
                    execution="cancelled",
                    stage="running",
                )


def execute_jobs(
    jobs: list[RunJob],
    executor: ProcessPoolExecutor | None,
    finished: Callable[[RunJob, RunResult], None] | None = None,
) -> dict[int, RunResult]:
    """Run jobs in a caller-owned pool (shared by concurrent callers) or, without one, here.
    When the shared pool breaks (a worker died), its unfinished runs end in fresh pools of their
    own, so a run that kills its process is recorded as crashed and takes nothing along.

    Args:
        jobs: the runs to execute (`plan_jobs`).
        executor: the shared pool (`worker_pool`), or None to run in this process.
        finished: called as `finished(job, result)` as each run ends, in completion order.

    Returns:
        Each job's result, by its index.

    Raises:
        Interrupted: the pool's workers were told to stop, or a run of this batch was
            interrupted.
    """
    out: dict[int, RunResult] = {}

    def record(job: RunJob, result: RunResult) -> None:
        out[job.index] = result
        if finished is not None:
            finished(job, result)

    if executor is None:
        for job in jobs:
            record(job, _run_guarded(job))
        return out
    futures: dict[Future[dict[str, Any]], RunJob] = {}
    unfinished: list[RunJob] = []
    for job in jobs:
        try:
            futures[executor.submit(_execute, job)] = job
        except (BrokenProcessPool, RuntimeError):  # broken, or shut down after breaking
            unfinished.append(job)
    try:
        for future in as_completed(futures):
            job = futures[future]
            try:
                result = RunResult.model_validate(future.result())
            except BrokenProcessPool:
                unfinished.append(job)
                continue
            except Interrupted:
                raise
            except CancelledError:
                # Another batch stopped the shared pool after an interrupt: this run never
                # started, and is no failure of its own.
                raise Interrupted("the run pool was stopped before this run started") from None
            except Exception as exc:  # failure is data: a raising run is one failed run
                result = _harness_failure(job, type(exc).__name__, str(exc) or type(exc).__name__)
            record(job, result)
            if _interrupted(result):
                raise Interrupted("runs of this batch were interrupted")
    except BaseException as exc:
        # The jobs not yet started are dropped (the shared pool serves other callers too).
        started = [future for future in futures if not future.cancel()]
        if isinstance(exc, Interrupted):
            # Runs in flight end as interrupted runs within moments; wait for them, so that
            # none writes its result after the caller (a workflow job) has cleaned up.
            wait(started, timeout=STOP_GRACE_SECONDS)
        raise
    if unfinished:
        # The shared pool broke (a worker died). Finish in fresh pools of our own, never in this
        # process: a run that kills its process is recorded as crashed and takes nothing along.
        by_index = {job.index: job for job in unfinished}
        _run_pooled(
            sorted(unfinished, key=lambda j: j.index),
            1,
            lambda index, result: record(by_index[index], result),
        )
    return out


# --------------------------------------------------------------------------- running jobs


def _execute(job: RunJob) -> dict[str, Any]:
    """Worker entry point (also used in-process): run one job, return result.json's content.
    A job reached after a stop request is not started: Interrupted, and its directory untouched."""
    interrupt.check()
    result = run_scenario(
        Scenario.model_validate(job.scenario),
        Path(job.out_dir),
        condition=job.condition,
        replication=job.replication,
        asset_root=Path(job.asset_root),
        provider=job.provider,
        checks=RunChecks.model_validate(job.checks) if job.checks is not None else None,
    )
    if job.store is not None:
        # Stored by the worker that ran it, so storing costs the calling process nothing.
        RunStore(job.store).keep(job.key, Path(job.out_dir), result)
    return result.to_doc()


def _run_guarded(job: RunJob) -> RunResult:
    try:
        return RunResult.model_validate(_execute(job))
    except Interrupted:
        raise KeyboardInterrupt from None  # never started: nothing to record
    except Exception as exc:  # failure is data: the kernel should not raise; if it does, record it
        return _harness_failure(job, type(exc).__name__, str(exc) or type(exc).__name__)


def _interrupted(result: RunResult | None) -> bool:
    return (
        result is not None and result.failure is not None and result.failure.type == "Interrupted"
    )


def _started_since(job: RunJob, since: float) -> bool:
    """Whether the kernel started this job's run since `since` and has not finished it."""
    folder = Path(job.out_dir)
    try:
        # A second of slack: file times are coarser than the clock.
        started = (folder / "scenario.json").stat().st_mtime >= since - 1.0
    except OSError:
        return False
    return started and not (folder / "result.json").exists()


def _run_pooled(jobs: list[RunJob], workers: int, record: Callable[[int, RunResult], None]) -> None:
    breaks: dict[int, int] = {}
    queue = list(jobs)
    alone: list[RunJob] = []
    while queue:
        unfinished = _pool_round(queue, workers, record)
        queue = []
        for job in unfinished:
            breaks[job.index] = breaks.get(job.index, 0) + 1
            (alone if breaks[job.index] >= _POOL_ATTEMPTS else queue).append(job)
    for job in alone:
        # Alone in a fresh one-worker pool: if this pool breaks, this job broke it.
        if _pool_round([job], 1, record):
            record(
                job.index,
                _harness_failure(
                    job, "WorkerCrashed", "the worker process running this replication died"
                ),
            )


def _pool_round(
    jobs: list[RunJob], workers: int, record: Callable[[int, RunResult], None]
) -> list[RunJob]:
    """Run `jobs` in a fresh pool; return the jobs left unfinished if the pool broke. An
    interrupt (here, or a run that reports one) stops the pool and goes on as KeyboardInterrupt."""
    unfinished: list[RunJob] = []
    since = time.time()
    pool = worker_pool(min(workers, len(jobs)))
    futures: dict[Future[dict[str, Any]], RunJob] = {}
    try:
        futures = {pool.submit(_execute, j): j for j in jobs}
        for future in as_completed(futures):
            job = futures[future]
            try:
                result = RunResult.model_validate(future.result())
            except BrokenProcessPool:
                unfinished.append(job)
                continue
            except Interrupted:
                raise KeyboardInterrupt from None  # the workers were told to stop
            except Exception as exc:  # failure is data: a raising worker is one failed run
                result = _harness_failure(job, type(exc).__name__, str(exc) or type(exc).__name__)
            record(job.index, result)
            if _interrupted(result):
                raise KeyboardInterrupt
    except BaseException:  # whatever stopped it: the pool is stopped, and it is raised
        stop_pool(pool, futures, since=since)
        raise
    pool.shutdown(wait=True)
    unfinished.sort(key=lambda j: j.index)
    return unfinished


def _harness_failure(
    job: RunJob, kind: str, message: str, *, execution: str = "crashed", stage: str = "harness"
) -> RunResult:
    """A failed result for a run the kernel could not report on (crashed, or cancelled when it
    was interrupted); also written as result.json so the run directory says what happened."""
    result = RunResult.model_validate(
        {
            "condition": job.condition,
            "replication": job.replication,
            "seedPath": list(job.scenario.get("seedPath", [])),
            "status": {"execution": execution, "validity": "unchecked", "evidence": "unchecked"},
            "integrity": {"complete": False, "counters": {}},
            "failure": {"stage": stage, "type": kind, "message": message},
        }
    )
    with contextlib.suppress(OSError):
        write_json(Path(job.out_dir) / "result.json", result.to_doc())
    return result


# --------------------------------------------------------------------------- files


def _write_if_changed(path: Path, text: str) -> None:
    """Leave an identical file untouched, so its modification time (which make-like workflows
    read) only moves when its content does."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    write_atomic(path, text)


def _reusable(
    target: Path,
    scenario: Scenario,
    provider: str | None,
    condition_id: str,
    replication: int,
    purpose: str = "exploration",
) -> RunResult | None:
    """The earlier result of this exact run, if it can stand in for running it again (made for
    the same purpose)."""
    if provider is not None:
        scenario = scenario.model_copy(
            update={"llm": scenario.llm.model_copy(update={"provider": provider})}
        )
    try:
        # scenario.json is written with URL credentials redacted; compare like with like.
        written = pretty_json(redact_document(scenario.to_doc()))
        if (target / "scenario.json").read_text(encoding="utf-8") != written:
            return None
        manifest = read_json(target / "manifest.json")
        if manifest.get("kernelFingerprint") != kernel_fingerprint(scenario.world):
            return None
        result = RunResult.model_validate(read_json(target / "result.json"))
    except (OSError, ValueError, AttributeError):
        return None
    same_run = result.condition == condition_id and result.replication == replication
    return result if same_run and result.purpose == purpose and result.final else None
