"""The Python API: the same verbs as the command line.

import simreport
simreport.validate("examples/prisoners_dilemma/audit.yaml")
simreport.audit("examples/prisoners_dilemma/audit.yaml", out="results/pd", replications=3)
"""

from ..harness.new_plan import new_plan
from .documents import PLAN_ONLY_KEYS, Validated, is_plan_document, is_workflow_config, validate
from .pages import RENDERED_PAGES, analyse, report, serve, site
from .runs import audit, conditions, evaluate, refuse_unpublished, run
from .sizing import estimate, power

__all__ = [
    "PLAN_ONLY_KEYS",
    "RENDERED_PAGES",
    "Validated",
    "analyse",
    "audit",
    "conditions",
    "estimate",
    "evaluate",
    "is_plan_document",
    "is_workflow_config",
    "new_plan",
    "power",
    "refuse_unpublished",
    "report",
    "run",
    "serve",
    "site",
    "validate",
]
