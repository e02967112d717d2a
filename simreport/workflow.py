"""What the Snakemake workflow calls: plans from the config, per-condition run batches, pages.

The Snakefile stays thin: at parse time it asks `load_workflow` for every plan's targets, and each
rule's `run:` block is one call into this module. Runs execute in one process pool shared by all
condition jobs of a Snakemake process, so many small jobs do not each pay for worker start-up, and
finished runs are kept in a content-addressed store so a re-executed batch (Snakemake removes a
job's outputs before running it) copies them back instead of recomputing them.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from .core.canonical import content_hash, pretty_json, sha256_text
from .core.errors import InputError
from .core.files import write_atomic
from .harness import (
    Condition,
    LoadedPlan,
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
from .kernel import input_hashes, kernel_fingerprint
from .kernel.interrupt import Interrupted, request_stop

DEFAULT_STORE = ".store"
CONFIG_FILE = "config/config.yaml"
"""Where the Snakefile reads the config from; errors about the config name it."""


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


@dataclass
class ConditionTarget:
    plan_id: str
    condition: Condition
    outputs: list[str]
    key: str
    """Changes exactly when this condition's runs must be redone (Snakemake `params`)."""

    @property
    def rule_name(self) -> str:
        """A rule name that stays with the condition when others are added or removed."""
        plan = re.sub(r"[^A-Za-z0-9]", "_", self.plan_id)
        return f"run_{plan}_{sha256_text(self.condition.id)[:10]}"


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


@dataclass
class Workflow:
    plans: list[PlanTarget]
    results_dir: Path
    site_dir: Path
    store: RunStore
    title: str
    workers: int | None

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
    )


_OVERRIDES = ("replications", "maxRuns", "provider", "model", "baseUrl", "includeIncomplete")
"""The config keys that apply to every plan, and to one plan under `overrides.<plan id>`."""


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
                "scenario": condition.scenario.to_doc(),
                "id": condition.id,
                "replications": reps,
                "provider": provider,
                "llm": llm,
                "kernel": fingerprints[world],
                "inputs": input_hashes(condition.scenario, loaded.asset_root),
            }
        )
        outputs = [
            str(out_dir / "runs" / condition.dir / str(r) / "result.json") for r in range(reps)
        ]
        targets.append(ConditionTarget(loaded.plan_id, condition, outputs, key))
    plan_doc = plan_document(loaded, provider, llm)
    conditions_doc = conditions_document(loaded, conditions)
    metrics = list(loaded.plan.metrics) or sorted(loaded.metrics_available)
    targets_dist = sorted(
        (loaded.hypothesis.target_distribution or {}) if loaded.hypothesis else {}
    )
    from .report.naming import figure_names

    figures = list(figure_names({"metrics": metrics, "distribution": dict.fromkeys(targets_dist)}))
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
    """plan.json and conditions.json of one plan."""
    plan = workflow.plan(plan_id)
    write_atomic(plan.out_dir / "plan.json", pretty_json(plan.plan_doc))
    write_atomic(plan.out_dir / "conditions.json", pretty_json(plan.conditions_doc))


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


def run_condition(
    workflow: Workflow,
    plan_id: str,
    condition_id: str,
    cores: int | None,
    log: str | Path | None = None,
) -> dict[str, int]:
    """Every replication of one condition: copied from the store when finished before, otherwise
    run in the shared pool and then stored. Writes a one-line summary to `log`."""
    plan = workflow.plan(plan_id)
    target = next(t for t in plan.conditions if t.condition.id == condition_id)
    slots, jobs, _ = plan_jobs(
        plan.loaded,
        [target.condition],
        plan.out_dir,
        provider=plan.provider,
        llm=plan.llm,
        store=workflow.store,
    )
    workers = workflow.workers or default_workers(cores)
    pool = _shared_pool(workers) if len(jobs) > 1 else None
    try:
        results = execute_jobs(jobs, pool)
    except Interrupted:
        if pool is not None:
            _retire_pool(pool)
        raise
    counts = {
        "replications": len(slots),
        "computed": len(jobs),
        "fromStore": len(slots) - len(jobs),
        "failed": sum(1 for r in results.values() if not r.succeeded),
    }
    if log is not None:
        summary = " ".join(f"{k}={v}" for k, v in counts.items())
        write_atomic(log, f"{condition_id}: {summary} process={os.getpid()}\n")
    return counts


def analyse_plan(workflow: Workflow, plan_id: str) -> None:
    from .analysis.audit import analyse_dir

    plan = workflow.plan(plan_id)
    analyse_dir(plan.out_dir, include_incomplete=plan.include_incomplete)


def write_figures(workflow: Workflow, plan_id: str, outputs: Sequence[str]) -> None:
    from .core.files import read_json
    from .report.figures import figure_files

    plan = workflow.plan(plan_id)
    files = figure_files(read_json(plan.out_dir / "audit.json"))
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


def site_outputs(workflow: Workflow) -> list[str]:
    files = [str(workflow.site_dir / "index.html")]
    for plan in workflow.plans:
        for name in ("report.html", "methods.html", "methods.md", "audit.json"):
            files.append(str(workflow.site_dir / plan.id / name))
    return files
