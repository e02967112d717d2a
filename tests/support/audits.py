"""Audits as audit.json holds them, for tests that build one with `analyse` and no directory:
`analyse_dir` adds the build's provenance beside `analyse`'s output, and readers of audit.json
(the report) check the whole document."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simreport.analysis.conclusions import undecided

PROVENANCE: dict[str, Any] = {
    "planHash": "ab" * 32,
    "kernelFingerprints": [],
    "models": [],
    "providers": [],
    "decisions": [],
    "conditions": {},
}
"""What `analyse_dir` adds beside `analyse`'s output, for audits built without a directory."""


def with_provenance(audit: Mapping[str, Any]) -> dict[str, Any]:
    """`audit` with the provenance an audit directory would have given it."""
    return {**audit, "provenance": PROVENANCE}


def comparison_row(condition: str, **changes: Any) -> dict[str, Any]:
    """A test row of audit.json with every key: by default an untested row of `condition`
    against `base`, its statistics null; `changes` set the keys a test is about."""
    row: dict[str, Any] = {
        "condition": condition,
        "baseId": "base",
        "nBase": 0,
        "nCond": 0,
        "meanBase": None,
        "meanCond": None,
        "diff": None,
        "ci95": None,
        "cohenD": None,
        "mwuP": None,
        "holmP": None,
        "w1": None,
        "cliffDelta": None,
        "directionFlip": None,
        "note": None,
        "tested": False,
        "expected": None,
        "smallSpread": False,
        **undecided(None, None),
        "mdeInUnits": None,
        "family": "primary",
        "familyP": None,
        "mde": None,
        "conclusion": "untested",
        "reason": "not tested",
    }
    row.update(changes)
    return row


def condition_row(cid: str, **changes: Any) -> dict[str, Any]:
    """A condition of audit.json with every key: by default a perturbed condition of `base`,
    labelled by its id, that ran nothing; `changes` set the rest."""
    row: dict[str, Any] = {
        "id": cid,
        "dir": cid,
        "axis": None,
        "level": None,
        "levels": {},
        "model": None,
        "baseId": "base",
        "isBase": False,
        "label": cid,
        "identicalToBase": False,
        "runs": 0,
        "succeeded": 0,
        "complete": 0,
        "excluded": 0,
        "means": {},
    }
    row.update(changes)
    return row


def hand_made_audit(plan: Mapping[str, Any], **sections: Any) -> dict[str, Any]:
    """A schema-3 audit whose every section is present and empty, with `plan` (its meaning hash
    added when it has none) and `sections` (top-level keys of audit.json) filled in: for tests
    that read a few sections as the report does, without running an analysis."""
    cost = {
        "llmCalls": 0,
        "promptTokens": 0,
        "completionTokens": 0,
        "runs": 0,
        "recordBytes": 0,
        "unattributedRuns": 0,
        "segments": {},
        "sides": {},
    }
    audit: dict[str, Any] = {
        "schemaVersion": 3,
        "software": {"simreport": "0.0.0"},
        "plan": {"hash": "ab" * 32, **plan},
        "options": {"includeIncomplete": False, "providerOverride": None, "llmOverride": None},
        "grade": {
            "grade": "weak",
            "reasons": [],
            "rule": "",
            "achieved": "weak",
            "achievedReasons": [],
            "usableMin": 0,
        },
        "verdict": {"headline": "", "details": []},
        "family": {
            "alpha": 0.05,
            "method": "Holm",
            "primaryMetrics": [],
            "secondaryMetrics": [],
            "primaryRows": 0,
            "secondaryRows": 0,
        },
        "purpose": {"purpose": "exploration", "explorationRuns": 0, "notOnline": []},
        "metrics": [],
        "summary": dict.fromkeys(
            ("conditions", "runs", "failed", "incomplete", "violated", "excluded", "used"), 0
        ),
        "conditions": [],
        "runs": [],
        "tests": {},
        "notes": {},
        "flags": [],
        "power": {
            "power": 0.8,
            "alphaFamily": 0.05,
            "method": "",
            "familySize": 0,
            "draws": 0,
            "metrics": {},
        },
        "noiseFloor": {},
        "sensitivity": [],
        "directionConsistency": {},
        "distribution": {},
        "distributionCategories": {},
        "crossModel": {},
        "integrity": {},
        "cost": {**cost, "conditions": []},
        "provenance": PROVENANCE,
    }
    audit.update(sections)
    return audit
