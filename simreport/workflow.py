"""What the Snakemake workflow calls: plans from the config, per-condition run batches, pages.

The Snakefile stays thin: at parse time it asks `load_workflow` for every plan's targets, and each
rule's `run:` block is one call into this module. Runs execute in one process pool shared by all
condition jobs of a Snakemake process, so many small jobs do not each pay for worker start-up, and
finished runs are kept in a content-addressed store so a re-executed batch (Snakemake removes a
job's outputs before running it) copies them back instead of recomputing them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .core.canonical import content_hash, pretty_json, sha256_text
from .core.errors import InputError, SchemaError, ValidationIssue, join_path
from .core.files import Document, check_output_dir, load_document, write_atomic
from .core.fingerprint import code_fingerprint, package_files
from .core.schema import RunResult
from .core.versions import run_document
from .harness import (
    Condition,
    LoadedPlan,
    RunJob,
    RunStore,
    build_conditions,
    conditions_document,
    execute_jobs,
    load_plan,
    plan_document,
    plan_jobs,
)
from .harness.plan import bounded_workers, plan_id_of
from .harness.runner import (
    check_llm_access,
    tell_workers_to_stop,
    validate_llm_override,
    worker_pool,
)
from .harness.store import RUN_KEY_VERSION
from .kernel import input_hashes, kernel_fingerprint
from .kernel.interrupt import Interrupted, request_stop

if TYPE_CHECKING:
    from .ledger.recording import LedgerRecorder

DEFAULT_STORE = ".store"
CONFIG_FILE = "config/config.yaml"
"""Where the Snakefile reads the config from; errors about the config name it."""
CONFIG_SCHEMA = "config/schema.yaml"
"""The JSON Schema the Snakefile validates the config against, in the workflow's folder."""


@dataclass(frozen=True)
class LLMOverride:
    """Config overrides of every run's model access."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None

    def llm_fields(self) -> dict[str, Any]:
        """The scenario `llm` keys every run gets (document form)."""
        fields: dict[str, Any] = {}
        if self.model is not None:
            fields["model"] = self.model
        if self.base_url is not None:
            fields["baseUrl"] = self.base_url
        return fields


RULE_NAME_LIMIT = 72
"""Longest readable run-rule name; a longer one is cut and ends in a short hash of the id."""


def _slug(text: str) -> str:
    """`linguistic_framing=moralised` → `linguistic_framing_moralised` (ASCII letters, digits,
    single underscores)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


@dataclass
class ConditionTarget:
    plan_id: str
    condition: Condition
    outputs: list[str]
    """One result.json per replication."""
    key: str
    """Changes exactly when this condition's runs must be redone (Snakemake `params`)."""
    state: str
    """The state file the condition's job ends with."""
    slug_shared: bool = False
    """Another condition of the plan has the same slug: the rule name carries a hash."""
    retry: int = 0
    """The retry generation this build runs the condition as (part of `key`; see `retry_token`)."""

    @property
    def requested(self) -> str:
        """What the analysis asks of this condition's job, and the job's one declared output:
        its state file, the job's last write. Every result.json of the condition is written by
        the job too, but declaring them would cost Snakemake a metadata read and more per run at
        every start (a no-op build of 10,000 runs took 4.3 s, 2.8 s of it Snakemake's own cost
        for 10,000 declared outputs; see bench/bench_workflow.py). A run deleted or rewritten
        after the job is caught by the retry token instead (see `_runs_changed`), and a single
        run can be asked for by its path (the `run_replication` rule)."""
        return self.state

    @property
    def evaluated(self) -> bool:
        """Whether the condition's runs are judged by an evaluator (an agent-testbed scenario
        with an `evaluationRef`): then an evaluation job follows its run job."""
        return self.condition.scenario.evaluation_ref is not None

    @property
    def evaluation(self) -> str:
        """The evaluation job's output: `<audit dir>/evaluations/<condition dir>.json`, the
        summary written once each run of the condition has its evaluation.json."""
        from .evaluation import CONDITION_SUMMARIES

        audit_dir = Path(self.state).parent.parent
        return str(audit_dir / CONDITION_SUMMARIES / f"{self.condition.dir}.json")

    @property
    def rule_name(self) -> str:
        """`run_<plan>_<condition slug>`: a Python identifier that depends on this condition
        alone, unless its slug is shared with another condition of the plan or too long; then
        the slug is cut and ends in a short hash of the condition id."""
        slug = _slug(self.condition.id)
        name = f"run_{_slug(self.plan_id) or 'plan'}_{slug}"
        if slug and not self.slug_shared and len(name) <= RULE_NAME_LIMIT:
            return name
        digest = sha256_text(self.condition.id)[:8]
        return f"{name[: RULE_NAME_LIMIT - len(digest) - 1].rstrip('_')}_{digest}"


@dataclass
class PlanTarget:
    id: str
    plan_file: Path
    out_dir: Path
    loaded: LoadedPlan
    conditions: list[ConditionTarget]
    figures: list[str]
    spec: str
    """Hash of plan.json and conditions.json: the plan-spec job reruns exactly when it changes."""
    provider: str | None
    llm: dict[str, Any]
    include_incomplete: bool
    plan_doc: dict[str, Any] = field(repr=False, default_factory=dict)
    conditions_doc: list[dict[str, Any]] = field(repr=False, default_factory=list)

    @property
    def results(self) -> list[str]:
        return [path for target in self.conditions for path in target.outputs]

    @property
    def requested(self) -> list[str]:
        """What the analysis asks of the condition jobs (see `ConditionTarget.requested`)."""
        return [target.requested for target in self.conditions]

    @property
    def evaluations(self) -> list[str]:
        """What the analysis asks of the evaluation jobs: one summary per evaluated condition
        (none for a plan without an evaluator)."""
        return [target.evaluation for target in self.conditions if target.evaluated]


@dataclass
class Workflow:
    plans: list[PlanTarget]
    results_dir: Path
    site_dir: Path
    store: RunStore
    title: str
    workers: int | None
    ledger: str | None = None
    """The ledger's URL (None: `ledger: null`, nothing is recorded); see `ledger_of`."""

    def plan(self, plan_id: str) -> PlanTarget:
        for plan in self.plans:
            if plan.id == plan_id:
                return plan
        raise KeyError(plan_id)


def load_workflow(
    config: Mapping[str, Any], root: str | Path = ".", *, config_file: str | Path = CONFIG_FILE
) -> Workflow:
    """Every plan the config lists, validated and expanded into targets. What the config itself
    sets (overrides, limits, workers) is checked before any plan is expanded; errors about it
    name `config_file` and the key."""
    base = Path(root)
    results_dir = Path(config.get("results", "results"))
    site_dir = Path(config.get("site", "site"))
    store_dir = Path(config.get("store") or results_dir / DEFAULT_STORE)
    shared = _globals(config, config_file)
    for key, folder in (("results", results_dir), ("site", site_dir), ("store", store_dir)):
        _check_folder(key, folder, config_file)
    plan_files = [base / str(entry) for entry in config.get("plans") or []]
    plan_ids = [plan_id_of(plan_file) for plan_file in plan_files]
    per_plan = _per_plan(config, config_file, plan_ids)
    plans: list[PlanTarget] = []
    seen: dict[str, Path] = {}
    for plan_file, plan_id in zip(plan_files, plan_ids, strict=True):
        local = {**shared, **per_plan.get(plan_id, {})}
        loaded = load_plan(
            plan_file, replications=local.get("replications"), max_runs=local.get("maxRuns")
        )
        if loaded.plan_id in seen:
            raise InputError(
                f"two plans have the id {loaded.plan_id!r} ({seen[loaded.plan_id]} and "
                f"{plan_file}); give one an `id`",
                file=plan_file,
                path="id",
                expected="unique plan ids",
            )
        seen[loaded.plan_id] = plan_file
        llm = LLMOverride(local.get("provider"), local.get("model"), local.get("baseUrl"))
        fields = validate_llm_override(loaded, llm.llm_fields()) or {}
        include = local.get("includeIncomplete")
        plans.append(
            _plan_target(
                loaded,
                results_dir / loaded.plan_id,
                provider=llm.provider,
                llm=fields,
                # Unset in the config: the plan's own setting holds.
                include_incomplete=(
                    loaded.plan.include_incomplete if include is None else bool(include)
                ),
            )
        )
    return Workflow(
        plans=plans,
        results_dir=results_dir,
        site_dir=site_dir,
        store=RunStore(store_dir),
        title=str(config.get("title") or "simreport audits"),
        workers=_workers(config.get("workers"), config_file),
        ledger=ledger_of(config, results_dir, config_file),
    )


def _check_folder(key: str, folder: Path, config_file: str | Path) -> None:
    """Refuse a config folder that cannot be one (a file, a path under a file), naming the key.
    Nothing is made to try it: other build processes may be writing there."""
    try:
        check_output_dir(folder, name=key, try_making=False)
    except InputError as exc:
        raise InputError(
            f"{folder}: {exc.message}", file=config_file, path=key, expected=exc.expected
        ) from None


def validate_config(document: Document, root: str | Path = ".") -> Workflow:
    """Check a workflow config file as a build would before its first job (`simreport validate`
    on a config from elsewhere): against the workflow's JSON Schema (`CONFIG_SCHEMA` under
    `root`, the workflow's folder, where its plan paths resolve too), then every plan it names,
    loaded and expanded. Raises SchemaError or InputError naming the file, its line and key."""
    import jsonschema

    schema_file = Path(root) / CONFIG_SCHEMA
    if not schema_file.is_file():
        raise InputError(
            "no workflow here to check the config against",
            file=schema_file,
            expected="the workflow's folder as the current folder: its Snakefile and "
            f"{CONFIG_SCHEMA} are there, and the config's plan paths resolve there",
        )
    schema = load_document(schema_file).data
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems = sorted(
        validator.iter_errors(document.data), key=lambda e: [str(p) for p in e.absolute_path]
    )
    if problems:
        issues = [
            ValidationIssue(join_path(*problem.absolute_path), problem.message)
            for problem in problems
        ]
        raise SchemaError(issues, file=document.path, line=document.line_of(issues[0].path))
    return load_workflow(document.data, root, config_file=document.path)


def ledger_of(config: Mapping[str, Any], results_dir: Path, config_file: str | Path) -> str | None:
    """The ledger the workflow records in: $SIMREPORT_LEDGER_URL, else the config's `ledger`
    (a URL or a SQLite file path; null turns recording off), else
    `sqlite:///<results>/ledger.sqlite`. A config value that cannot be one names the file."""
    from .ledger.db import UNSET, ledger_url, normalise_url

    configured = config.get("ledger", UNSET)
    if isinstance(configured, str):
        try:
            normalise_url(configured, where="ledger")
        except InputError as exc:
            raise exc.located(file=config_file) from None
    elif configured is not None and configured is not UNSET:
        raise InputError(
            f"ledger must be a URL or null, not {configured!r}",
            file=config_file,
            path="ledger",
            expected="sqlite:///PATH, postgresql+psycopg://USER@HOST/DB, or null for no ledger",
        )
    return ledger_url(results_dir=results_dir, configured=configured)


_OVERRIDES = ("replications", "maxRuns", "provider", "model", "baseUrl", "includeIncomplete")
"""The config keys that apply to every plan, and to one plan under `overrides.<plan id>`."""


_TYPED = (
    "replications",
    "maxRuns",
    "workers",
    "runThreads",
    "includeIncomplete",
    "failOnRunFailure",
    "verbose",
)
"""Config keys whose values are numbers, switches or null, never text."""


def retype_command_line(config: MutableMapping[str, Any]) -> None:
    """Give `--config` values their types back before the config is validated. Snakemake reads
    `key=value` as text unless it is a number or `True`/`False`, and a mapping's leaves always as
    text: `--config failOnRunFailure=true overrides='{echo_chamber: {replications: 5}}'` arrive
    as "true" and "5". Only the keys that are never text are converted, at the top level and
    in each plan's `overrides`; a value that still does not fit is left for the schema to refuse."""
    _retype(config)
    if isinstance(config.get("ledger"), str) and config["ledger"].strip().lower() in _NULL:
        config["ledger"] = None  # `--config ledger=null`: no ledger
    overrides = config.get("overrides")
    if isinstance(overrides, MutableMapping):
        for entry in overrides.values():
            if isinstance(entry, MutableMapping):
                _retype(entry)


def _retype(values: MutableMapping[str, Any]) -> None:
    for key in _TYPED:
        text = values.get(key)
        if not isinstance(text, str):
            continue
        word = text.strip()
        if word.lower() in ("true", "false"):
            values[key] = word.lower() == "true"
        elif word.lower() in _NULL:
            values[key] = None
        elif re.fullmatch(r"[+-]?[0-9]+", word):
            values[key] = int(word)


_NULL = ("null", "~", "")


def _globals(config: Mapping[str, Any], config_file: str | Path = CONFIG_FILE) -> dict[str, Any]:
    """The overrides the config sets for every plan, checked."""
    values = {k: config[k] for k in _OVERRIDES if config.get(k) is not None}
    _check_overrides(values, config_file, "")
    return values


def _per_plan(
    config: Mapping[str, Any], config_file: str | Path, plan_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """`overrides`, keyed by plan id, checked: each names a listed plan and sets known keys."""
    raw = config.get("overrides") or {}
    if not isinstance(raw, Mapping):
        raise InputError(
            "overrides must be a mapping", file=config_file, path="overrides", expected=_BY_ID
        )
    known = ", ".join(plan_ids) or "none: no plans are listed"
    out: dict[str, dict[str, Any]] = {}
    for plan_id, entry in raw.items():
        path = f"overrides.{plan_id}"
        if plan_id not in plan_ids:
            raise InputError(
                f"overrides for unknown plan id {plan_id!r}",
                file=config_file,
                path=path,
                expected=f"the id of a plan in `plans` ({known})",
            )
        if not isinstance(entry, Mapping):
            raise InputError(
                "a plan's overrides must be a mapping", file=config_file, path=path, expected=_BY_ID
            )
        unknown = sorted(str(k) for k in entry if k not in _OVERRIDES)
        if unknown:
            raise InputError(
                f"unknown override {unknown[0]!r}",
                file=config_file,
                path=f"{path}.{unknown[0]}",
                expected="one of " + ", ".join(_OVERRIDES),
            )
        values = {k: v for k, v in entry.items() if v is not None}
        _check_overrides(values, config_file, f"{path}.")
        out[plan_id] = values
    return out


_BY_ID = "plan id → {replications: 5, …}"


def _check_overrides(values: Mapping[str, Any], config_file: str | Path, prefix: str) -> None:
    """Refuse values every run would fail on, before any plan is expanded."""
    check_llm_access(
        values.get("provider"),
        values.get("baseUrl"),
        provider_at=f"{prefix}provider",
        base_url_at=f"{prefix}baseUrl",
        file=config_file,
    )
    for key in ("replications", "maxRuns"):
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(
                f"{key} must be a whole number, not {value!r}",
                file=config_file,
                path=f"{prefix}{key}",
                expected="an integer ≥ 1",
            )
        if value is not None and value < 1:
            raise InputError(
                f"{key} must be at least 1, not {value}",
                file=config_file,
                path=f"{prefix}{key}",
                expected="an integer ≥ 1",
            )


def _workers(value: Any, config_file: str | Path) -> int | None:
    """`workers`, checked and capped at the machine's worker limit (with a note on stderr)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(
            f"workers must be a whole number, not {value!r}",
            file=config_file,
            path="workers",
            expected="an integer ≥ 1, or null for the cores given",
        )
    try:
        workers, note = bounded_workers(value, name="workers")
    except InputError as exc:
        raise exc.located(file=config_file) from None
    if note is not None:
        print(f"simreport: note: {note}", file=sys.stderr)
    return workers


def _plan_target(
    loaded: LoadedPlan,
    out_dir: Path,
    *,
    provider: str | None,
    llm: dict[str, Any],
    include_incomplete: bool,
) -> PlanTarget:
    conditions = build_conditions(loaded)
    fingerprints: dict[str | None, str] = {}
    targets = []
    reps = loaded.plan.replications
    for condition in conditions:
        world = condition.scenario.world
        if world not in fingerprints:
            fingerprints[world] = kernel_fingerprint(world)
        key = content_hash(
            {
                "keyVersion": RUN_KEY_VERSION,
                # What the runs read: a description edit or a reordered mapping reruns nothing.
                "scenario": run_document(condition.scenario.to_doc()),
                "id": condition.id,
                "replications": reps,
                "provider": provider,
                "llm": llm,
                "kernel": fingerprints[world],
                # Only the files this condition's runs read (for an agent scenario, the asset
                # versions its own manifest resolves), as in the run store's keys.
                "inputs": input_hashes(condition.scenario, loaded.asset_root),
            }
        )
        # Text, not Path objects: a plan of 100,000 runs builds this many paths at every start.
        folder = os.path.join(out_dir, "runs", condition.dir)
        outputs = [f"{folder}{os.sep}{r}{os.sep}result.json" for r in range(reps)]
        # Failed runs left by the condition's last job, or a result.json deleted or rewritten
        # since, rerun it once per build. (Snakemake itself does not rerun a job for a deleted
        # or edited intermediate file while what depends on it is up to date; one stat per run
        # here is cheap.)
        state_path = state_file(out_dir, condition.dir)
        state = read_state(state_path)
        retry = retry_token(state, deleted=_runs_changed(outputs, state_path, state))
        if retry:
            key = f"{key}.retry{retry}"
        targets.append(
            ConditionTarget(loaded.plan_id, condition, outputs, key, str(state_path), retry=retry)
        )
    slugs = Counter(_slug(t.condition.id) for t in targets)
    for target in targets:
        target.slug_shared = slugs[_slug(target.condition.id)] > 1
    plan_doc = plan_document(loaded, provider, llm)
    conditions_doc = conditions_document(loaded, conditions)
    metrics = list(loaded.plan.metrics) or sorted(loaded.metrics_available)
    targets_dist = sorted(
        (loaded.hypothesis.target_distribution or {}) if loaded.hypothesis else {}
    )
    from .report.naming import planned_figure_names

    figures = list(planned_figure_names(metrics, loaded.plan.design, targets_dist))
    return PlanTarget(
        id=loaded.plan_id,
        plan_file=loaded.plan_file,
        out_dir=out_dir,
        loaded=loaded,
        conditions=targets,
        figures=figures,
        spec=content_hash({"plan": plan_doc, "conditions": conditions_doc}),
        provider=provider,
        llm=llm,
        include_incomplete=include_incomplete,
        plan_doc=plan_doc,
        conditions_doc=conditions_doc,
    )


# --------------------------------------------------------------------------- jobs


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


_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _shared_pool(workers: int) -> ProcessPoolExecutor | None:
    global _POOL
    if workers <= 1:
        return None
    with _POOL_LOCK:
        # A worker that died breaks the pool for good; the next job gets a fresh one.
        if _POOL is not None and getattr(_POOL, "_broken", False):
            _POOL.shutdown(wait=False, cancel_futures=True)
            _POOL = None
        if _POOL is None:
            # Workers that stop on SIGINT/SIGTERM and exit when this process dies (however it
            # dies: the pool outlives the job thread that started it).
            _POOL = worker_pool(workers)
        return _POOL


def _retire_pool(pool: ProcessPoolExecutor) -> None:
    """Drop a pool whose workers were told to stop: they would stop every later run too."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is pool:
            _POOL = None
    pool.shutdown(wait=False, cancel_futures=True)


def forward_stop_signals() -> None:
    """Make a SIGINT or SIGTERM sent to the Snakemake process alone also stop the runs in flight.

    Snakemake answers SIGTERM by waiting for its running jobs, and a job thread cannot install a
    handler; so, from the main thread once Snakemake has set its own handlers (the Snakefile's
    `onstart`), each stop signal first tells this process's runs and the shared pool's workers to
    stop (their runs end as interrupted runs, the jobs fail and Snakemake discards their
    outputs), then goes on to Snakemake's handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)

        def forward(sig: int, frame: FrameType | None, previous: Any = previous) -> None:
            request_stop()
            with _POOL_LOCK:
                pool = _POOL
            if pool is not None:
                tell_workers_to_stop(pool)
            if callable(previous):
                previous(sig, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)

        signal.signal(signum, forward)


def default_workers(cores: int | None) -> int:
    available = os.cpu_count() or 1
    return max(1, min(cores or available, available))


def _condition_jobs(
    workflow: Workflow, plan: PlanTarget, target: ConditionTarget, *, reuse: bool = False
) -> tuple[list[tuple[Condition, int]], list[RunJob], dict[int, RunResult]]:
    """The replications of one condition: their slots, the jobs left to run and the results
    taken from the run store (or, with `reuse`, from the run folders). The runs check what the
    ledger pins and holds as review status; a regression whose condition records a scenario
    version that is not online is refused before any run."""
    from .api import refuse_unpublished
    from .harness.conditions import recorded_versions
    from .ledger.recording import LedgerRecorder

    loaded = plan.loaded
    recorder = LedgerRecorder(workflow.ledger, say=_say, shared=True)
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


def run_condition(
    workflow: Workflow,
    plan_id: str,
    condition_id: str,
    cores: int | None,
    log: str | Path | None = None,
) -> dict[str, int]:
    """Every replication of one condition: copied from the store when finished before, otherwise
    run in the shared pool and then stored. Each run is logged to `log` as it ends; a job with
    failed or missing runs ends with one line per failure class, in `log` and on stderr. The
    condition's state file records what is pending, so the next build retries exactly that."""
    plan = workflow.plan(plan_id)
    target = next(t for t in plan.conditions if t.condition.id == condition_id)
    slots, jobs, fetched = _condition_jobs(workflow, plan, target)
    progress = ConditionLog(log, condition_id, total=len(slots), fetched=len(fetched))
    workers = workflow.workers or default_workers(cores)
    pool = _shared_pool(workers) if len(jobs) > 1 else None
    recorder = _ledger_recorder(workflow)
    try:
        results = {**fetched, **execute_jobs(jobs, pool, _recording(progress.finished, recorder))}
    except Interrupted:
        if recorder is not None:
            recorder.close()
        if pool is not None:
            _retire_pool(pool)
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
    summary = " ".join(f"{k}={v}" for k, v in counts.items())
    for line in state["failures"]:
        progress.line(line)
    progress.close(f"{condition_id}: {summary} process={os.getpid()}")
    _say(
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


def _ledger_recorder(workflow: Workflow) -> LedgerRecorder | None:
    if workflow.ledger is None:
        return None
    from .ledger.recording import LedgerRecorder

    return LedgerRecorder(workflow.ledger, say=_say, shared=True)


def _recording(
    finished: Callable[[RunJob, RunResult], None], recorder: LedgerRecorder | None
) -> Callable[[RunJob, RunResult], None]:
    """`finished`, then a finished run handed to the ledger's writer thread, which records it
    while the condition's other runs still run (the ledger's share of a build then mostly
    overlaps the runs, instead of following each job's last run). Its folder is complete and
    stays: only runs that did not finish are removed after an interrupt."""
    if recorder is None:
        return finished

    def finished_and_recorded(job: RunJob, result: RunResult) -> None:
        finished(job, result)
        if result.final:
            recorder.record_soon(job.out_dir)

    return finished_and_recorded


def record_in_ledger(
    workflow: Workflow,
    *,
    runs: Sequence[Path] = (),
    build: Path | None = None,
    recorder: LedgerRecorder | None = None,
    evaluations: Sequence[Path] = (),
) -> None:
    """Record a job's runs (each whole or not at all) and its analysis in the workflow's
    ledger, with `recorder` when the job has one already. What the ledger cannot record is said
    in one line each (the run, the ledger's URL with credentials redacted) and then fails the
    job: its files are complete and stay, the finished runs are in the run store, and the next
    build records them without running them again. With `ledger: null` nothing happens."""
    recorder = recorder or _ledger_recorder(workflow)
    if recorder is None:
        return
    with recorder:
        recorder.record_runs(runs)
        if evaluations:
            recorder.record_evaluations(evaluations)
        if build is not None:
            recorder.record_build(build)
    recorder.raise_if_incomplete()


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

    def __init__(self, path: str | Path | None, condition_id: str, *, total: int, fetched: int):
        self.total = total
        self.done = fetched
        self.failed = 0
        self._handle = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 (kept open while runs end)
        self.line(
            f"{condition_id}: {total} runs, {fetched} from the store, {total - fetched} to run"
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


def _say(text: str) -> None:
    """One line (or block) on the terminal from a job, at once."""
    print(text, file=sys.stderr, flush=True)


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


def _runs_changed(outputs: Sequence[str], state_path: Path, state: Mapping[str, Any]) -> bool:
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


# --------------------------------------------------------------------------- analysis


def analyse_plan(workflow: Workflow, plan_id: str) -> None:
    """audit.json and runs.parquet of one plan, from runs checked first: a result.json that is
    missing or not the one its condition job left (its sha256 differs from the state file's) is
    copied again from the verified run store, or run again, before the analysis reads it."""
    from .analysis.audit import analyse_dir

    plan = workflow.plan(plan_id)
    for target in plan.conditions:
        damaged = damaged_runs(plan, target)
        if damaged:
            repair_runs(workflow, plan, target, damaged)
            if target.evaluated:
                # A run put back is a new run folder: it is judged again before it is read.
                evaluate_condition(workflow, plan_id, target.condition.dir)
    if plan.evaluations:
        from .evaluation import write_audit_summary

        write_audit_summary(plan.out_dir)
    analyse_dir(plan.out_dir, include_incomplete=plan.include_incomplete)
    evaluated = [
        Path(output).parent
        for target in plan.conditions
        if target.evaluated
        for output in target.outputs
    ]
    record_in_ledger(workflow, build=plan.out_dir, evaluations=evaluated)


def evaluate_condition(
    workflow: Workflow, plan_id: str, condition_dir: str, log: str | Path | None = None
) -> dict[str, Any]:
    """The evaluation job of one condition: every run of it judged in this one job (a job per run
    would cost Snakemake more than the judging), its summary written last (the plan's analysis
    job links the evaluations in the workflow's ledger, all in one transaction). A run that
    could not be evaluated (its manifest altered, its evaluation spec changed since it ran) fails
    the job, naming the run."""
    from .evaluation import evaluate_batch, evaluator_named

    plan = workflow.plan(plan_id)
    target = next((t for t in plan.conditions if t.condition.dir == condition_dir), None)
    if target is None:
        raise InputError(f"plan {plan_id!r} has no condition folder {condition_dir!r}")
    condition_id = target.condition.id
    runs = [Path(output).parent for output in target.outputs]
    summary = evaluate_batch(plan.out_dir, condition_id, condition_dir, runs, evaluator_named(None))
    line = (
        f"{condition_id}: evaluated={summary['evaluated']} runs={summary['runs']} "
        f"notEvaluable={summary['notEvaluable']} errors={summary['errors']}\n"
    )
    if log is not None:
        write_atomic(Path(log), line + "".join(f"{e['reason']}\n" for e in summary["notEvaluated"]))
    errors = [item for item in summary["notEvaluated"] if item["outcome"] == "error"]
    if errors:
        raise InputError(
            f"{plan_id} · {condition_id}: {len(errors)} run(s) could not be evaluated; the "
            f"first: {errors[0]['reason']}"
        )
    _say(f"{plan_id} · {condition_id}: {summary['evaluated']} of {summary['runs']} runs evaluated")
    return summary


def evaluation_fingerprint() -> str:
    """The default evaluator's sha256 (a `params` of the evaluation rule): a change to the code
    that makes the verdicts reruns the evaluations and what follows them, never a run."""
    from .evaluation import evaluator_named

    return evaluator_named(None).sha256[:16]


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
    _say(
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
    target = next((t for t in plan.conditions if t.condition.dir == condition_dir), None)
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


def write_figures(workflow: Workflow, plan_id: str, outputs: Sequence[str]) -> None:
    from .report.document import read_audit_document
    from .report.figures import figure_files

    plan = workflow.plan(plan_id)
    files = figure_files(read_audit_document(plan.out_dir / "audit.json"))
    for path in outputs:
        write_atomic(path, files[Path(path).name])


def write_pages(workflow: Workflow, plan_id: str) -> None:
    from .report import write_report

    write_report(workflow.plan(plan_id).out_dir, draw_figures=False)


def write_methods_pages(workflow: Workflow, plan_id: str) -> None:
    from .report.methods import write_methods

    write_methods(workflow.plan(plan_id).out_dir)


def build_site(workflow: Workflow) -> None:
    from .report.site import write_site

    write_site(
        workflow.site_dir,
        [(plan.id, plan.out_dir) for plan in workflow.plans],
        title=workflow.title,
    )


# --------------------------------------------------------------------------- code fingerprints

ANALYSIS_CODE = ("analysis/*.py", "core/*.py")
"""The sources (under the package) that make audit.json and runs.parquet."""
REPORT_CODE = ("report/*.py", "report/templates/*", "harness/conditions.py", "core/*.py")
"""The sources that make the figures, the pages and the site, templates and styles included."""


def analysis_fingerprint() -> str:
    """Short hash of the analysis code's normalised sources (a `params` of the analyse rule):
    a change to it reruns the analysis and everything after it, never a run."""
    return code_fingerprint(package_files(*ANALYSIS_CODE))[:16]


def report_fingerprint() -> str:
    """Short hash of the report code's normalised sources (a `params` of the figure, page and
    site rules): a change to it reruns those, never the analysis or a run."""
    return code_fingerprint(package_files(*REPORT_CODE))[:16]


def site_outputs(workflow: Workflow) -> list[str]:
    files = [str(workflow.site_dir / "index.html")]
    for plan in workflow.plans:
        for name in ("report.html", "methods.html", "methods.md", "audit.json"):
            files.append(str(workflow.site_dir / plan.id / name))
    return files


# --------------------------------------------------------------------------- end of a build


@dataclass(frozen=True)
class PendingCondition:
    """A condition whose last job left failed or missing runs."""

    plan_id: str
    condition_id: str
    failures: list[str]
    log: str | None


def pending_conditions(workflow: Workflow) -> list[PendingCondition]:
    """Every condition of the workflow's plans with failed or missing runs, in plan order."""
    found = []
    for plan in workflow.plans:
        for target in plan.conditions:
            state = read_state(Path(target.state))
            if state.get("pending"):
                found.append(
                    PendingCondition(
                        plan.id,
                        target.condition.id,
                        [str(line) for line in state.get("failures") or []]
                        or [f"{len(state['pending'])} runs are pending"],
                        state.get("log"),
                    )
                )
    return found


def report_run_failures(
    workflow: Workflow,
    *,
    fail: bool,
    build_failed: bool = False,
    log: str | Sequence[str] | None = None,
) -> bool:
    """The end of a build (the Snakefile's onsuccess and onerror): a block on stderr naming each
    plan and condition with failed or missing runs, why, and the logs to read. Returns whether
    the build must fail because of them (`failOnRunFailure`)."""
    pending = pending_conditions(workflow)
    lines: list[str] = []
    if pending:
        runs = "error" if fail else "warning"
        lines.append(
            f"simreport {runs}: {len(pending)} condition(s) ended with failed or missing runs; "
            "the next build retries exactly those runs (the others are reused):"
        )
        for item in pending:
            lines.append(f"  {item.plan_id} · {item.condition_id}")
            lines.extend(f"    {line}" for line in item.failures)
            if item.log:
                lines.append(f"    log: {item.log}")
        if not fail:
            lines.append(
                "  Failed runs are data in audit.json (left out of the statistics unless "
                "includeIncomplete); set failOnRunFailure: true to make such a build fail."
            )
    logs = [log] if isinstance(log, str) else list(log or [])
    if (pending or build_failed) and logs:
        lines.append(f"simreport: Snakemake's log of this build: {', '.join(map(str, logs))}")
    if lines:
        _say("\n".join(lines))
    return fail and bool(pending)


# --------------------------------------------------------------------------- terminal


_SHORT_HIDES = {"job_info", "job_finished", "progress", "job_started", "resources_info"}
"""Snakemake's per-job terminal events (rule blocks, timestamps, step counts) that the short
terminal leaves to the log file; errors, warnings and simreport's own lines stay."""
_SCHEDULER_CHATTER = ("Select jobs to execute...",)


class _ShortTerminal(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if str(getattr(event, "value", event)) in _SHORT_HIDES:
            return False
        return record.getMessage() not in _SCHEDULER_CHATTER


def keep_terminal_short(logger: logging.Logger, *, verbose: bool) -> None:
    """From the start of a (non-dry) build, make Snakemake's terminal output one line per job
    (the condition jobs' run counts) plus the end-of-build summary, unless `verbose` (config
    `verbose: true`). Only terminal handlers are filtered: the log file under .snakemake/log
    keeps everything."""
    if verbose:
        return
    for handler in logger.handlers:
        stream = getattr(handler, "stream", None)
        if stream in (sys.stderr, sys.stdout) and not any(
            isinstance(f, _ShortTerminal) for f in handler.filters
        ):
            handler.addFilter(_ShortTerminal())
