"""The report's main effects and interactions of a full-factorial audit: audit.json's
`mainEffects` and `interactions` as display rows per metric, with each metric's figure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from ..analysis.audit_document import AuditDoc, FactorialEstimate, InteractionRow, Interval
from .figures import at_model, axis_labels, format_number, level_contrast, main_effect_label

MISSING = "–"


def _interval(value: Interval | None) -> str:
    if value is None:
        return MISSING
    return f"[{format_number(value[0])}, {format_number(value[1])}]"


def _numbers(row: FactorialEstimate) -> dict[str, str]:
    return {
        "diff": format_number(row.diff),
        "ci95": _interval(row.ci95),
        "standardized": format_number(row.standardized),
        "cells": format_number(row.n_cells),
        "note": row.note or "",
    }


def _interaction_label(row: InteractionRow, names: Mapping[str, Mapping[str, str]]) -> str:
    """Its two level contrasts joined by ` × `, and `@ <model>` when the plan lists models."""
    if not (len(row.axes) == len(row.levels) == len(row.references) == 2):
        return MISSING
    parts = [
        level_contrast(axis, level, reference, names)
        for axis, level, reference in zip(row.axes, row.levels, row.references, strict=True)
    ]
    return at_model(" × ".join(parts), row.model)


def main_effects_section(
    audit: AuditDoc, figure_for: Mapping[str, Markup]
) -> dict[str, Any] | None:
    """Per metric with main effects: its main-effect rows (the level against the reference, the
    marginal means, the difference, its interval and standardized size), its interaction rows
    and its figure; with the method audit.json names. None for an audit without main effects
    (any design but a full factorial)."""
    main = audit.main_effects
    if not main:
        return None
    interactions = audit.interactions or {}
    names = axis_labels(audit)
    order = [m for m in audit.metrics if m in main]
    order += sorted(m for m in main if m not in set(order))
    metrics = []
    for metric in order:
        metrics.append(
            {
                "metric": metric,
                "main": [
                    {
                        "effect": main_effect_label(r, names),
                        "mean_level": format_number(r.mean_level),
                        "mean_reference": format_number(r.mean_reference),
                        **_numbers(r),
                    }
                    for r in main[metric]
                ],
                "interactions": [
                    {"effect": _interaction_label(r, names), **_numbers(r)}
                    for r in interactions.get(metric, [])
                ],
                "figure": figure_for.get(metric, ""),
            }
        )
    method = audit.factorial_method
    return {"metrics": metrics, "method": "" if method is None else method}
