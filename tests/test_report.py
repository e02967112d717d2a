"""report.html and its figures: structure, escaping, determinism, and an offline browser render."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from simreport.analysis.audit import RunRecord, analyse
from simreport.core.canonical import pretty_json
from simreport.core.files import write_json
from simreport.core.schema import RunResult
from simreport.report import figures, render_report, write_report

HOSTILE_LEVEL = "<script>alert(1)</script>"
HOSTILE_AXIS = 'size "N" & <more>'
SECTIONS = (
    "Plan summary",
    "Perturbation axes",
    "Conditions",
    "Pairwise tests against the baseline",
    "Sensitivity by axis",
    "Direction consistency and cross-model means",
    "Distribution tests",
    "Integrity and cost",
)

# --------------------------------------------------------------------------- fixture audit


def _plan() -> dict[str, Any]:
    return {
        "id": "pd-framing",
        "title": "Prisoner's dilemma & framing <audit>",
        "baseScenario": "scenario.yaml",
        "base": {
            "name": "prisoners_dilemma",
            "world": "prisoners_dilemma",
            "params": {"framing": "neutral"},
            "population": {"n": 4},
        },
        "axes": [
            {
                "id": "framing",
                "code": "R3",
                "level": "micro",
                "kind": "representation",
                "dimension": "linguistic framing",
                "target": "params.framing",
                "levels": ["moral", HOSTILE_LEVEL],
            },
            {
                "id": HOSTILE_AXIS,
                "code": "D8",
                "level": "macro",
                "kind": "design",
                "dimension": "population scale",
                "target": "population.n",
                "levels": [8, 16],
            },
            {
                "id": "memory",
                "code": "D4",
                "level": "micro",
                "kind": "design",
                "dimension": "memory and temporality",
                "target": "params.memory",
                "levels": [{"window": 3}],
            },
        ],
        "design": "one_at_a_time",
        "replications": 4,
        "models": ["model-b", "model-a"],
        "metrics": ["cooperation", "payoff", "silent"],
        "claimType": "policy",
        "hypothesis": {
            "outcomes": {"cooperation": "increase", "payoff": "decrease"},
            "targetDistribution": {
                "choice": {"defect": 0.3, "cooperate": 0.7},
                "mood": {"calm": 1.0, "angry": 1.0},
            },
        },
        "includeIncomplete": False,
        "hash": "0f3c9a1e" * 8,
    }


def _conditions(plan: dict[str, Any]) -> list[dict[str, Any]]:
    conditions: list[dict[str, Any]] = []
    for model in plan["models"]:
        cid = f"base@{model}"
        conditions.append(
            {"id": cid, "dir": cid, "axis": None, "level": None, "levels": {}, "model": model,
             "baseId": cid, "isBase": True, "identicalToBase": False}
        )
    for axis in plan["axes"]:
        for level in axis["levels"]:
            text = level if isinstance(level, str) else json.dumps(level, separators=(",", ":"))
            for model in plan["models"]:
                conditions.append(
                    {"id": f"{axis['id']}={text}@{model}", "dir": f"d{len(conditions)}",
                     "axis": axis["id"], "level": level, "levels": {axis["id"]: level},
                     "model": model, "baseId": f"base@{model}", "isBase": False,
                     "identicalToBase": axis["id"] == "memory"}
                )
    return conditions


def _result(cid: str, rep: int, index: int, **changes: Any) -> RunResult:
    model_shift = 0.05 if cid.endswith("model-a") else 0.0
    if cid.startswith("base"):
        cooperation = 0.5  # constant: a constant condition against it gives d = ±inf
    elif cid.startswith("framing=moral"):
        cooperation = 0.7
    else:
        cooperation = 0.4 + 0.03 * rep + 0.01 * index + model_shift
    doc: dict[str, Any] = {
        "condition": cid,
        "replication": rep,
        "seedPath": [7, index, rep],
        "status": {"execution": "completed", "validity": "valid", "evidence": "complete"},
        "metrics": {"cooperation": cooperation, "payoff": 3.0 - cooperation + 0.1 * rep},
        "distributions": {
            "choice": {"cooperate": 6 + (index + rep) % 3, "defect": 4 - (index + rep) % 3},
            "mood": {"calm": 5, "angry": 5 + rep % 2},
        },
        "integrity": {"complete": True, "counters": {"parse_failures": rep % 2, "retries": 1}},
        "cost": {"llmCalls": 10, "promptTokens": 1200, "completionTokens": 80},
    }
    doc.update(changes)
    return RunResult.model_validate(doc)


def build_audit() -> dict[str, Any]:
    """An audit with models, an infinite d, a failed, an incomplete and a missing run, a metric
    no run reports (so it carries a note), hostile strings and two target distributions."""
    plan = _plan()
    conditions = _conditions(plan)
    runs: list[RunRecord] = []
    for index, cond in enumerate(conditions):
        cid = cond["id"]
        for rep in range(plan["replications"]):
            result: RunResult | None = _result(cid, rep, index)
            if index == 2 and rep == 1:
                result = _result(
                    cid, rep, index,
                    status={"execution": "crashed", "validity": "unchecked", "evidence": "unchecked"},
                    metrics={},
                    failure={"stage": "running", "type": "ProviderError",
                             "message": "timeout after 60 s <b>bold</b>"},
                )
            elif index == 3 and rep == 2:
                result = _result(
                    cid, rep, index,
                    integrity={"complete": False, "counters": {"budget_exhausted": 1}},
                )
            elif index == 4 and rep == 3:
                result = None
            runs.append(RunRecord(cid, rep, result))
    return analyse(plan, conditions, runs, provider_override=None)


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    return build_audit()


@pytest.fixture(scope="module")
def html(audit: dict[str, Any]) -> str:
    return render_report(audit)


def reread(audit: dict[str, Any]) -> dict[str, Any]:
    """The audit as a reader of audit.json sees it (sorted keys, non-finite floats as strings)."""
    loaded: dict[str, Any] = json.loads(pretty_json(audit))
    return loaded
