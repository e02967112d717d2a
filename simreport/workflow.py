"""What the Snakemake workflow calls: plans from the config, per-condition run batches, pages.

The Snakefile stays thin: at parse time it asks `load_workflow` for every plan's targets, and each
rule's `run:` block is one call into this module. Runs execute in one process pool shared by all
condition jobs of a Snakemake process, so many small jobs do not each pay for worker start-up, and
finished runs are kept in a content-addressed store so a re-executed batch (Snakemake removes a
job's outputs before running it) copies them back instead of recomputing them.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
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
from .harness.runner import validate_llm_override
from .kernel import input_hashes, kernel_fingerprint

DEFAULT_STORE = ".store"


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


def load_workflow(config: Mapping[str, Any], root: str | Path = ".") -> Workflow:
    """Every plan the config lists, validated and expanded into targets."""
    base = Path(root)
    results_dir = Path(config.get("results", "results"))
    site_dir = Path(config.get("site", "site"))
    store_dir = Path(config.get("store") or results_dir / DEFAULT_STORE)
    per_plan: Mapping[str, Mapping[str, Any]] = config.get("overrides") or {}
    plans: list[PlanTarget] = []
    seen: dict[str, Path] = {}
    for entry in config.get("plans") or []:
        plan_file = base / str(entry)
        loaded = load_plan(plan_file)
        local = {**_globals(config), **dict(per_plan.get(loaded.plan_id, {}))}
        if local.get("replications") is not None:
            loaded = load_plan(plan_file, replications=int(local["replications"]))
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
    workers = config.get("workers")
    return Workflow(
        plans=plans,
        results_dir=results_dir,
        site_dir=site_dir,
        store=RunStore(store_dir),
        title=str(config.get("title") or "simreport audits"),
        workers=int(workers) if workers else None,
    )


def _globals(config: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("replications", "provider", "model", "baseUrl", "includeIncomplete")
    return {k: config[k] for k in keys if config.get(k) is not None}


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
    plan_doc = plan_document(loaded, provider)
    if llm:
        plan_doc["llmOverride"] = llm
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
            _POOL = ProcessPoolExecutor(
                max_workers=workers, mp_context=multiprocessing.get_context("spawn")
            )
        return _POOL


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
    results = execute_jobs(jobs, _shared_pool(workers) if len(jobs) > 1 else None)
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
