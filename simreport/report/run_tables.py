"""report.html's tables of what was run: the plan's summary, its axes and their levels, the
conditions, the runs that failed or were left out, and why the runs were made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..analysis.audit_document import AuditDoc, PurposeSection
from ..core.schema import PerturbationAxis
from ..harness.conditions import level_text
from . import naming
from .cells import IDENTICAL_NOTE, MISSING, condition_cell, display_text, in_order
from .figures import format_number

_DESIGNS = {"one_at_a_time": "one at a time", "full_factorial": "full factorial"}


def plan_summary(audit: AuditDoc) -> list[tuple[str, str]]:
    plan = audit.plan
    base = plan.base
    summary = audit.summary
    options = audit.options
    hypothesis = plan.hypothesis
    outcomes = hypothesis.outcomes if hypothesis is not None else {}
    metrics = audit.metrics
    directions = "; ".join(
        [f"{m}: {outcomes[m]}" for m in in_order(metrics, outcomes)]
        + [
            f"{m}: {direction} under {kind} {name}"
            for expectations, kind in (
                (hypothesis.axes if hypothesis is not None else {}, "axis"),
                (hypothesis.levels if hypothesis is not None else {}, "condition"),
            )
            for name, table in sorted(expectations.items())
            for m, direction in sorted(table.items())
        ]
    )
    models = plan.models
    n_bases = sum(1 for c in audit.conditions if c.is_base)
    runs = (
        f"{summary.runs} in all, {summary.used} used in the statistics; "
        f"{summary.failed} failed, {summary.incomplete} incomplete, "
        + (f"{summary.violated} invalid or without complete evidence, " if summary.violated else "")
        + f"{summary.excluded} excluded"
    )
    return [
        ("Plan", display_text(plan.id)),
        ("Title", display_text(plan.title)),
        ("Scenario", display_text((base.name if base is not None else None) or plan.base_scenario)),
        ("Base scenario file", display_text(plan.base_scenario, "inline in the plan")),
        ("World", display_text(naming.world_name(plan))),
        ("Design", _DESIGNS.get(plan.design, display_text(plan.design))),
        ("Claim type", display_text(plan.claim_type)),
        ("Replications per condition", display_text(plan.replications)),
        ("Conditions", f"{summary.conditions} ({n_bases} baseline)"),
        ("Runs", runs),
        (
            "Incomplete runs",
            "included in the statistics"
            if options.include_incomplete
            else "excluded from the statistics",
        ),
        ("Models", ", ".join(models) if models else "none (the plan lists no models)"),
        ("Metrics", ", ".join(metrics) if metrics else "none"),
        ("Expected directions", directions or "none (no hypothesis directions)"),
        ("Provider override", display_text(options.provider_override, "none")),
        (
            "Model override",
            ", ".join(f"{k}: {v}" for k, v in sorted((options.llm_override or {}).items()))
            or "none",
        ),
        ("Plan hash", display_text(plan.hash)),
    ]


def axes(audit: AuditDoc) -> list[dict[str, Any]]:
    return [
        {
            "id": display_text(axis.id),
            "code": display_text(axis.code),
            "level": display_text(axis.level),
            "kind": display_text(axis.kind),
            "dimension": display_text(axis.dimension),
            "target": display_text(axis.target),
            "levels": [_level(v, axis) for v in axis.levels],
        }
        for axis in audit.plan.axes
    ]


def _level(value: Any, axis: PerturbationAxis) -> dict[str, str]:
    """A level as written in the plan, with its display label when the axis gives one."""
    text = level_text(value)
    label = axis.labels.get(text)
    return {"value": text, "label": label if label not in (None, "", text) else ""}


def conditions(
    audit: AuditDoc, metrics: Sequence[str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for cond in audit.conditions:
        if cond.is_base:
            role = "baseline"
        elif cond.identical_to_base:
            role = IDENTICAL_NOTE
        else:
            role = ""
        rows.append(
            {
                "id": condition_cell(names, cond.id),
                "model": display_text(cond.model),
                "role": role,
                "runs": format_number(cond.runs),
                "succeeded": format_number(cond.succeeded),
                "complete": format_number(cond.complete),
                "excluded": format_number(cond.excluded),
                "means": [format_number(cond.means.get(m)) for m in metrics],
            }
        )
    return rows


def problem_runs(audit: AuditDoc, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """Runs that failed, are incomplete or were left out of the statistics, each excluded run
    with the reason audit.json gives (`excludedBecause`)."""
    rows = []
    for run in audit.runs:
        failure = run.failure
        if failure is None and run.complete and run.used:
            continue
        status = run.status
        rows.append(
            {
                "condition": condition_cell(names, run.condition),
                "replication": format_number(run.replication),
                "execution": display_text(status.execution),
                "validity": display_text(status.validity),
                "evidence": display_text(status.evidence),
                "complete": "yes" if run.complete else "no",
                "used": "yes" if run.used else "no",
                "failure": f"{failure.stage} · {failure.type}: {failure.message}"
                if failure
                else MISSING,
                "excluded_because": MISSING
                if run.used
                else display_text(run.excluded_because, "not recorded in this audit.json"),
            }
        )
    return rows


def purpose(section: PurposeSection) -> dict[str, Any] | None:
    """What the report says about why the runs were made (audit.json `purpose`): always for a
    regression audit; for an exploration, only when its runs used versions that were not
    online (unpublished), listed with a count of each kind to fold them under. None when there
    is nothing worth saying: an exploration of unversioned scenarios."""
    name = display_text(section.purpose, "exploration")
    if name != "regression" and not section.not_online:
        return None
    kinds: dict[str, int] = {}
    for v in section.not_online:
        kinds[display_text(v.kind)] = kinds.get(display_text(v.kind), 0) + 1
    return {
        "purpose": name,
        "exploration_runs": section.exploration_runs,
        "not_online": [
            f"{display_text(v.name)}@{display_text(v.version)} ({display_text(v.status)})"
            for v in section.not_online
        ],
        "not_online_kinds": [
            f"{n} {kind} {'version' if n == 1 else 'versions'}" for kind, n in sorted(kinds.items())
        ],
    }
