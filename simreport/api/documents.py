"""What a document is and whether it validates: a scenario, an audit plan or a workflow config
file, checked as the command line's `simreport validate` checks it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.files import load_document


@dataclass
class Validated:
    kind: str  # "scenario" | "plan" | "workflow config"
    summary: str
    details: dict[str, Any]


PLAN_ONLY_KEYS = frozenset(
    {
        "axes",
        "design",
        "replications",
        "models",
        "metrics",
        "claimType",
        "concurrency",
        "includeIncomplete",
    }
)
"""Keys only an audit plan has: a document with one of them and no `world` or `simulator` is a
plan, even when it lacks its base scenario."""


def is_plan_document(data: Any) -> bool:
    """Whether a document is an audit plan: it names a base scenario (`baseScenario`, `base`),
    or it has a key only plans have and names no world or simulator.

    Args:
        data: a parsed YAML or JSON document.

    Returns:
        True for a plan.
    """
    if not isinstance(data, dict):
        return False
    if "baseScenario" in data or "base" in data:
        return True
    engine = "world" in data or "simulator" in data
    return not engine and any(key in data for key in PLAN_ONLY_KEYS)


def is_workflow_config(data: Any) -> bool:
    """Whether a document is a workflow config: it lists `plans` and names no base scenario,
    world or simulator.

    Args:
        data: a parsed YAML or JSON document.

    Returns:
        True for a workflow config.
    """
    if not isinstance(data, dict) or "plans" not in data:
        return False
    return not any(key in data for key in ("baseScenario", "base", "world", "simulator"))


def validate(path: str | Path, *, max_runs: int | None = None) -> Validated:
    """Validate a scenario, a plan or a workflow config file, as `simreport validate` does.

    The document says which it is (`is_plan_document`, `is_workflow_config`): a plan without a
    base scenario is reported as such, not as a scenario without a world. A workflow config is
    checked as a build checks it, in the current folder (the workflow's: see
    `workflow.validate_config`); its own `maxRuns` applies to its plans.

    Args:
        path: the scenario, plan or workflow config file (YAML or JSON).
        max_runs: the most runs a plan may ask for (default: the harness's DEFAULT_MAX_RUNS).

    Returns:
        What was validated: its kind, a one-line summary and its details (a plan's id,
        conditions, runs and hashes; a scenario's world and agents; a config's plans,
        conditions and runs).

    Raises:
        InputError: the file cannot be read or does not validate (SchemaError, PlanError and the
            other InputErrors, each located in the file), or a plan asks for too many runs.
    """
    from ..harness import build_conditions, load_plan
    from ..kernel import validate_scenario

    document = load_document(path)
    if is_workflow_config(document.data):
        from ..workflow import validate_config

        workflow = validate_config(document)
        planned = sum(len(plan.conditions) for plan in workflow.plans)
        runs = sum(len(plan.results) for plan in workflow.plans)
        return Validated(
            "workflow config",
            f"workflow config: {len(workflow.plans)} plans, {planned} conditions, {runs} runs",
            {"plans": [plan.id for plan in workflow.plans], "conditions": planned, "runs": runs},
        )
    if is_plan_document(document.data):
        loaded = load_plan(path, max_runs=max_runs)
        conditions = build_conditions(loaded)
        runs = len(conditions) * loaded.plan.replications
        return Validated(
            "plan",
            f"plan {loaded.plan_id}: {len(conditions)} conditions × "
            f"{loaded.plan.replications} replications = {runs} runs",
            {
                "planId": loaded.plan_id,
                "conditions": len(conditions),
                "runs": runs,
                "hash": loaded.hash,
                "identityHash": loaded.identity_hash,
            },
        )
    scenario = validate_scenario(document.data, document=document)
    engine = scenario.world or "external simulator"
    return Validated(
        "scenario",
        f"scenario: {engine}, {scenario.population.n} agents, {scenario.steps} steps",
        {"world": scenario.world, "agents": scenario.population.n},
    )
