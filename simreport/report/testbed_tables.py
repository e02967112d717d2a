"""report.html's tables of an agent-testbed audit: each criterion's verdict counts per
condition, the user simulator's quality, and the coverage of permissions, stages, faults and
behaviours."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis.audit_document import (
    CoverageSection,
    CriterionRow,
    TestbedSection,
    UserQualitySection,
)
from .cells import MISSING, condition_cell, display_text, format_share
from .figures import format_number


def user_quality(
    section: UserQualitySection | None, names: Mapping[str, str]
) -> dict[str, Any] | None:
    """The user simulator's quality per condition (audit.json `userQuality`): its four per-run
    checks summed and the diversity of its replications, with the condition's flags."""
    if section is None:
        return None
    rows = []
    for row in section.conditions:
        persona = row.persona_consistency
        reaction = row.reaction_compliance
        ended = row.termination
        rows.append(
            {
                "condition": condition_cell(names, row.condition),
                "modes": ", ".join(row.modes) or MISSING,
                "assessed": format_number(row.assessed),
                "persona": format_share(persona.rate),
                "review": format_number(persona.runs_for_review),
                "reaction": format_share(reaction.rate),
                "triggers": format_number(reaction.triggers),
                "reaction_violated": format_number(reaction.runs_violated),
                "visibility": format_number(row.visibility.violations),
                "disclosures": format_number(row.visibility.disclosures),
                "termination": f"{format_number(ended.compliant)} / "
                f"{format_number(ended.not_compliant)}",
                "openings": format_number(row.diversity.distinct_openings),
                "paths": format_number(row.diversity.distinct_paths),
                "flags": list(row.flags),
            }
        )
    return {"rows": rows, "note": display_text(section.note, "")}


def _criterion_cells(cell: CriterionRow | None) -> dict[str, str]:
    """One condition's verdict counts on one criterion, `–` throughout when it has none."""
    if cell is None:
        return dict.fromkeys(
            ("pass", "fail", "undecidable", "not_applicable", "rate", "bound"), MISSING
        )
    bound = cell.zero_violation_upper_bound
    return {
        "pass": format_number(cell.pass_),
        "fail": format_number(cell.fail),
        "undecidable": format_number(cell.undecidable),
        "not_applicable": format_number(cell.not_applicable),
        "rate": format_share(cell.violation_rate),
        "bound": MISSING if bound is None else f"{100 * bound:.1f}%",
    }


def testbed(table: TestbedSection | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    """The agent-testbed tables (only for audits whose runs carry evaluations): per criterion,
    each condition's verdict counts, validity exclusions and its zero-violation bound. The totals
    over conditions are counts only: no bound is shown for them."""
    if table is None:
        return None
    out = []
    for criterion in table.criteria:
        rows = [
            {
                "condition": condition_cell(names, cond.condition),
                "evaluated": format_number(cond.evaluated),
                "excluded": format_number(cond.validity_excluded),
                "evidence_excluded": format_number(cond.evidence_excluded),
                **_criterion_cells(cond.criteria.get(criterion)),
            }
            for cond in table.conditions
        ]
        total = table.totals.get(criterion)
        out.append(
            {
                "criterion": criterion,
                "rows": rows,
                "undecidable": format_number(None if total is None else total.undecidable),
            }
        )
    return {
        "criteria": out,
        "excluded": format_number(table.validity_excluded),
        "evidence_excluded": format_number(table.evidence_excluded),
        "undecidable": format_number(table.undecidable),
        "note": display_text(table.note, ""),
        "totals_note": display_text(table.totals_note, ""),
        "evaluators": [
            {
                "evaluator": f"{display_text(e.name, '?')}@{display_text(e.version, '?')}",
                "sha256": display_text(e.sha256, MISSING),
                "spec": f"{display_text(e.spec.name, '?')}@{display_text(e.spec.version, '?')}",
                "spec_sha256": display_text(e.spec.sha256, MISSING),
                "runs": format_number(e.runs),
            }
            for e in table.evaluators
        ],
        "not_evaluated": [
            (names.get(c.condition, c.condition), format_number(c.not_evaluated))
            for c in table.conditions
            if c.not_evaluated
        ],
    }


def coverage(coverage: CoverageSection | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    """audit.json `coverage` as one table per permission: a row per stage and fault, a column
    per behaviour, each cell the conditions that test it, a gap, or not applicable."""
    if coverage is None:
        return None
    axes = coverage.axes
    by_key = {(c.permission, c.stage, c.fault, c.behaviour): c for c in coverage.cells}
    tables = []
    for permission in axes.permission:
        rows = []
        for stage in axes.stage:
            for fault in axes.fault:
                cells = []
                for behaviour in axes.behaviour:
                    cell = by_key[(permission, stage, fault, behaviour)]
                    cells.append(
                        {
                            "status": cell.status,
                            "count": len(cell.conditions),
                            "title": ", ".join(names.get(c, c) for c in cell.conditions),
                        }
                    )
                rows.append({"stage": stage, "fault": fault, "cells": cells})
        tables.append({"permission": permission, "rows": rows})
    return {
        "behaviours": list(axes.behaviour),
        "tables": tables,
        "covered": coverage.covered,
        "empty_count": coverage.empty_count,
        "not_applicable": coverage.not_applicable,
        "empty": list(coverage.empty),
        "unread": [{"condition": u.condition, "reason": u.reason} for u in coverage.unread],
        "note": coverage.note,
    }
