"""Harness: audit plan → conditions → replications → run directories.

`load_plan` validates a plan completely (every condition is built and re-validated, so override
errors surface before any run); `build_conditions` lists the conditions in plan order; `run_audit`
runs every replication in a pool of worker processes and writes plan.json and conditions.json.
"""

from .axes import AXIS_CATALOG, AxisTemplate, axis_from_template, axis_template
from .conditions import (
    BASE_ID,
    Condition,
    build_conditions,
    condition_dir,
    condition_id,
    condition_id_from_dir,
    level_text,
    replication_scenarios,
)
from .plan import LoadedPlan, load_plan, plan_id_from_folder
from .runner import (
    AuditRun,
    RunJob,
    conditions_document,
    execute_jobs,
    plan_document,
    plan_jobs,
    run_audit,
    run_dir,
)
from .store import RunStore, run_key

__all__ = [
    "AXIS_CATALOG",
    "BASE_ID",
    "AuditRun",
    "AxisTemplate",
    "Condition",
    "LoadedPlan",
    "RunJob",
    "RunStore",
    "axis_from_template",
    "axis_template",
    "build_conditions",
    "condition_dir",
    "condition_id",
    "condition_id_from_dir",
    "conditions_document",
    "execute_jobs",
    "level_text",
    "load_plan",
    "plan_document",
    "plan_id_from_folder",
    "plan_jobs",
    "replication_scenarios",
    "run_audit",
    "run_dir",
    "run_key",
]
