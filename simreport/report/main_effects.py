"""The report's main effects and interactions of a full-factorial audit: audit.json's
`mainEffects` and `interactions` as display rows per metric, with each metric's figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from .figures import axis_labels, format_number, main_effect_label

MISSING = "–"


def _interval(value: Any) -> str:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        return MISSING
    return f"[{format_number(value[0])}, {format_number(value[1])}]"


def _numbers(row: Mapping[str, Any]) -> dict[str, str]:
    return {
        "diff": format_number(row.get("diff")),
        "ci95": _interval(row.get("ci95")),
        "standardized": format_number(row.get("standardized")),
        "cells": format_number(row.get("nCells")),
        "note": "" if row.get("note") in (None, "") else str(row.get("note")),
    }


def _interaction_label(row: Mapping[str, Any], names: Mapping[str, Any]) -> str:
    axes = list(row.get("axes") or [])
    levels = list(row.get("levels") or [])
    references = list(row.get("references") or [])
    if not (len(axes) == len(levels) == len(references) == 2):
        return MISSING
    parts = [
        main_effect_label({"axis": a, "level": lv, "reference": ref}, names)
        for a, lv, ref in zip(axes, levels, references, strict=True)
    ]
    model = row.get("model")
    text = " × ".join(parts)
    return text if model is None else f"{text} @ {model}"


def main_effects_section(
    audit: Mapping[str, Any], figure_for: Mapping[str, Markup]
) -> dict[str, Any] | None:
    """Per metric with main effects: its main-effect rows (the level against the reference, the
    marginal means, the difference, its interval and standardized size), its interaction rows
    and its figure; with the method audit.json names. None for an audit without main effects
    (any design but a full factorial)."""
    main = audit.get("mainEffects") or {}
    if not isinstance(main, Mapping) or not main:
        return None
    interactions = audit.get("interactions") or {}
    names = axis_labels(audit)
    order = [str(m) for m in audit.get("metrics") or [] if m in main]
    order += sorted(str(m) for m in main if m not in set(order))
    metrics = []
    for metric in order:
        rows = [r for r in main.get(metric) or [] if isinstance(r, Mapping)]
        pairs = [r for r in interactions.get(metric) or [] if isinstance(r, Mapping)]
        metrics.append(
            {
                "metric": metric,
                "main": [
                    {
                        "effect": main_effect_label(r, names),
                        "mean_level": format_number(r.get("meanLevel")),
                        "mean_reference": format_number(r.get("meanReference")),
                        **_numbers(r),
                    }
                    for r in rows
                ],
                "interactions": [
                    {"effect": _interaction_label(r, names), **_numbers(r)} for r in pairs
                ],
                "figure": figure_for.get(metric, ""),
            }
        )
    method = audit.get("factorialMethod")
    return {"metrics": metrics, "method": "" if method is None else str(method)}
