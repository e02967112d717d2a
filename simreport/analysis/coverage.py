"""The coverage matrix of an agent-testbed audit (design §六): stage × behaviour × permission ×
fault over the audit's conditions, each cell covered (with its conditions), empty (a gap no
condition tests) or not applicable. Each condition's tool contracts are read as its runs
resolved them, checked against their sha256; a condition whose contracts cannot be read is
listed under `unread`, never guessed. The axes and their values: docs/statistics.md. They are
the refund task's: a condition in a domain written as data (`environment.domain`, world
`testbed`) brings its own tools and stages, and stays out of the matrix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.canonical import sha256_bytes
from ..core.files import load_document, read_json

STAGE_OF_OPERATION = {
    "get_order": "lookup",
    "create_refund": "submission",
    "get_refund": "status_check",
    "withdraw_refund": "withdrawal",
}
STAGES = ("lookup", "submission", "status_check", "withdrawal")
CONSULTATION = "consultation"
BEHAVIOURS = ("discloses_upfront", "discloses_on_request", "never_discloses", "withdraws")
DISCLOSURE_BEHAVIOUR = {
    "upfront": "discloses_upfront",
    "on-request": "discloses_on_request",
    "never": "never_discloses",
}
PERMISSIONS = ("submit_only", "submit_and_withdraw")
POSITIONS = ("not_sent", "sent_not_committed", "committed_response_lost")
FAULTS = (
    "none",
    *(f"{effect}@{position}" for effect in ("timeout", "error") for position in POSITIONS),
    "delay",
    "abort",
)
WRITE_OPERATIONS = {"create_refund": "submit", "withdraw_refund": "withdraw"}
NOTE = (
    "Coverage: stage × behaviour × permission × fault over the audit's conditions (design §六). "
    "Stages are the refund task's steps by tool operation, behaviours the user's disclosure of the "
    "order number and withdrawal, permissions what the tool contracts let the agent change, "
    "faults what the fault plans strike each stage with. A covered cell names the conditions that "
    "test it; an empty one is a gap no condition tests; a stage the permission does not offer is "
    "not applicable."
)


@dataclass(frozen=True)
class ConditionSpec:
    """What the coverage matrix reads of one condition: its scenario document and the tool
    contracts its runs resolved (tool name → operation), or why they could not be read."""

    id: str
    scenario: Mapping[str, Any]
    tools: Mapping[str, str] | None
    unread: str | None = None


def _permission(operations: Iterable[str]) -> str | None:
    writes = {WRITE_OPERATIONS[o] for o in operations if o in WRITE_OPERATIONS}
    if writes == {"submit"}:
        return "submit_only"
    if writes == {"submit", "withdraw"}:
        return "submit_and_withdraw"
    return None


def _fault_label(trigger: Mapping[str, Any]) -> str:
    effect = str(trigger.get("effect"))
    if effect in ("delay", "abort"):
        return effect
    position = trigger.get("position") or "committed_response_lost"
    return f"{effect}@{position}"


def _behaviours(scenario: Mapping[str, Any]) -> list[str]:
    user = scenario.get("user") or {}
    disclosure = (user.get("disclosure") or {}).get("orderNumber", "on-request")
    found = [DISCLOSURE_BEHAVIOUR.get(str(disclosure), "discloses_on_request")]
    rules = (user.get("behavior") or {}).get("reactionRules") or []
    if any(isinstance(r, Mapping) and r.get("effect") == "withdraw_request" for r in rules):
        found.append("withdraws")
    return found


def condition_cells(spec: ConditionSpec) -> set[tuple[str, str, str, str]]:
    """The (stage, behaviour, permission, fault) cells one condition tests."""
    if spec.tools is None:
        return set()
    permission = _permission(spec.tools.values())
    if permission is None:
        return set()
    scenario = spec.scenario
    stage_of_tool = {
        name: STAGE_OF_OPERATION[op] for name, op in spec.tools.items() if op in STAGE_OF_OPERATION
    }
    for participant in scenario.get("participants") or []:
        if isinstance(participant, Mapping) and participant.get("id"):
            tool = participant.get("tool") or f"ask_{participant['id']}"
            stage_of_tool[str(tool)] = CONSULTATION
    triggers = [
        t for t in ((scenario.get("events") or {}).get("triggers") or []) if isinstance(t, Mapping)
    ]
    faults: dict[str, list[str]] = {}
    for trigger in triggers:
        stage = stage_of_tool.get(str(trigger.get("target")))
        if stage is not None:
            faults.setdefault(stage, []).append(_fault_label(trigger))
    cells: set[tuple[str, str, str, str]] = set()
    for stage in sorted(set(stage_of_tool.values())):
        for behaviour in _behaviours(scenario):
            for fault in faults.get(stage) or ["none"]:
                cells.add((stage, behaviour, permission, fault))
    return cells


def cell_name(stage: str, behaviour: str, permission: str, fault: str) -> str:
    return f"stage={stage} · behaviour={behaviour} · permission={permission} · fault={fault}"


def coverage_matrix(specs: Sequence[ConditionSpec]) -> dict[str, Any]:
    """The matrix over every cell of the axes, each covered (with its conditions), empty or not
    applicable; the empty cells named; the conditions whose contracts could not be read."""
    covering: dict[tuple[str, str, str, str], list[str]] = {}
    for spec in specs:
        for cell in condition_cells(spec):
            covering.setdefault(cell, []).append(spec.id)
    stages = list(STAGES)
    if any(cell[0] == CONSULTATION for cell in covering) or any(
        spec.scenario.get("participants") for spec in specs
    ):
        stages.append(CONSULTATION)
    cells: list[dict[str, Any]] = []
    empty: list[str] = []
    for permission in PERMISSIONS:
        for stage in stages:
            for fault in FAULTS:
                for behaviour in BEHAVIOURS:
                    key = (stage, behaviour, permission, fault)
                    ids = sorted(covering.get(key, []))
                    if ids:
                        status = "covered"
                    elif stage == "withdrawal" and permission == "submit_only":
                        status = "not_applicable"
                    else:
                        status = "empty"
                        empty.append(cell_name(*key))
                    cells.append(
                        {
                            "stage": stage,
                            "behaviour": behaviour,
                            "permission": permission,
                            "fault": fault,
                            "status": status,
                            "conditions": ids,
                        }
                    )
    counts = {s: sum(1 for c in cells if c["status"] == s) for s in ("covered", "empty")}
    return {
        "axes": {
            "stage": stages,
            "behaviour": list(BEHAVIOURS),
            "permission": list(PERMISSIONS),
            "fault": list(FAULTS),
        },
        "cells": cells,
        "covered": counts["covered"],
        "emptyCount": counts["empty"],
        "notApplicable": len(cells) - counts["covered"] - counts["empty"],
        "empty": empty,
        "unread": [
            {"condition": spec.id, "reason": spec.unread}
            for spec in sorted(specs, key=lambda s: s.id)
            if spec.unread is not None
        ],
        "note": NOTE,
    }


# --------------------------------------------------------------------------- reading an audit


def _tool_contracts(run_dir: Path, scenario: Mapping[str, Any]) -> dict[str, str]:
    """Tool name → operation of the contracts a run resolved, read from the asset files its
    manifest names and checked against the sha256 it recorded."""
    manifest = read_json(run_dir / "manifest.json")
    root = manifest.get("assetRoot")
    if not root:
        raise ValueError(f"{run_dir / 'manifest.json'} names no assetRoot")
    library = Path(str(root)) / ((scenario.get("provenance") or {}).get("assetLibrary") or "assets")
    tools: dict[str, str] = {}
    resolved = manifest.get("resolved") or {}
    slots = sorted(k for k in resolved if str(k).startswith("environment.toolContracts."))
    if not slots:
        raise ValueError(f"{run_dir / 'manifest.json'} resolved no tool contract")
    for slot in slots:
        entry = resolved[slot]
        path = library / str(entry["file"])
        if not path.is_file():
            raise ValueError(f"{path} (tool contract {entry['name']}@{entry['version']}) is gone")
        if sha256_bytes(path.read_bytes()) != entry.get("sha256"):
            raise ValueError(
                f"{path} no longer matches the sha256 the run recorded for "
                f"{entry['name']}@{entry['version']}"
            )
        content = (load_document(path).data or {}).get("content") or {}
        for tool in content.get("tools") or []:
            tools[str(tool["name"])] = str(tool["operation"])
    return tools


def _in_a_domain(scenario: Mapping[str, Any]) -> bool:
    """The scenario runs in a domain asset, whose tools no refund stage names."""
    environment = scenario.get("environment")
    return isinstance(environment, Mapping) and environment.get("domain") is not None


def read_condition_specs(
    audit_dir: Path, conditions: Sequence[Mapping[str, Any]]
) -> list[ConditionSpec] | None:
    """Each testbed condition's scenario and tool contracts, from its first run that has both
    (scenario.json, manifest.json); None when the audit has no testbed condition outside a
    domain asset."""
    specs: list[ConditionSpec] = []
    for cond in conditions:
        runs = audit_dir / "runs" / str(cond["dir"])
        found = sorted(
            (p.parent for p in runs.glob("*/scenario.json") if p.parent.name.isdigit()),
            key=lambda p: int(p.name),
        )
        scenario: Mapping[str, Any] | None = None
        reason: str | None = None
        tools: dict[str, str] | None = None
        for run_dir in found:
            doc = read_json(run_dir / "scenario.json")
            if not isinstance(doc, Mapping) or doc.get("sut") is None or _in_a_domain(doc):
                break
            scenario = doc
            try:
                tools = _tool_contracts(run_dir, doc)
                reason = None
                break
            except (ValueError, KeyError, OSError) as exc:
                reason = str(exc)
        if scenario is None:
            continue
        specs.append(ConditionSpec(str(cond["id"]), scenario, tools, reason))
    return specs or None


__all__ = [
    "BEHAVIOURS",
    "FAULTS",
    "PERMISSIONS",
    "STAGES",
    "ConditionSpec",
    "cell_name",
    "condition_cells",
    "coverage_matrix",
    "read_condition_specs",
]
