"""report.html's tables of the comparisons: each metric's tests, the power and noise floor
behind them, the axes ranked by sensitivity, the expected directions, the means per model, and
the distributions' effects and shares."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup

from ..analysis.audit_document import AuditDoc, ComparisonRow, PowerRow, PowerSection
from . import figures, verdict
from .cells import (
    IDENTICAL_NOTE,
    MISSING,
    condition_cell,
    display_text,
    format_interval,
    format_p,
    format_share,
    in_order,
    short_number,
)
from .figures import format_number

FLIP_MARK = "✗"
NO_FLIP_MARK = "–"
EXPECTED_MARKS = {"increase": "↑ increase", "decrease": "↓ decrease"}


def _abs_d(row: ComparisonRow) -> float | None:
    d = row.cohen_d
    return None if d is None or math.isnan(d) else abs(d)


def _has_test(rows: Sequence[ComparisonRow]) -> bool:
    """Whether any row of a metric carries a test (a p value or an effect size)."""
    return any(r.mwu_p is not None or r.cohen_d is not None for r in rows)


def _test_rows(
    rows: Sequence[ComparisonRow], names: Mapping[str, str], identical: set[str]
) -> list[dict[str, Any]]:
    # Largest |d| first; rows without a d keep their plan order at the end (sorted is stable).
    ordered = sorted(rows, key=lambda r: (_abs_d(r) is None, -(_abs_d(r) or 0.0)))
    out = []
    for row in ordered:
        notes = [row.note] if row.note else []
        if row.condition in identical and not notes:
            notes.append(IDENTICAL_NOTE)
        out.append(
            {
                "condition": condition_cell(names, row.condition),
                "base": names.get(str(row.base_id), display_text(row.base_id)),
                "n": f"{format_number(row.n_base)} / {format_number(row.n_cond)}",
                "mean_base": format_number(row.mean_base),
                "mean_cond": format_number(row.mean_cond),
                "diff": format_number(row.diff),
                "ci95": format_interval(row.ci95),
                "d": format_number(row.cohen_d),
                "p": format_p(row.mwu_p),
                "holm": format_p(row.holm_p),
                "significant": verdict.is_significant(row),
                "conclusion": display_text(
                    row.conclusion, "untested" if not row.tested else MISSING
                ),
                "paired": row.paired,
                "decisive_p": format_p(row.p),
                "family_p": format_p(row.family_p),
                "equivalence_p": format_p(row.equivalence_p),
                "interval": format_interval(row.interval95),
                "interval_note": display_text(row.interval_note, ""),
                "reason": display_text(row.reason, ""),
                "expected": EXPECTED_MARKS.get(str(row.expected), MISSING),
                "flip": FLIP_MARK if row.direction_flip is True else NO_FLIP_MARK,
                "flipped": row.direction_flip is True,
                "tested": row.tested,
                "small_spread": row.small_spread,
                "note": "; ".join(notes),
            }
        )
    return out


def _measure(effect: verdict.Effect | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    if effect is None:
        return None
    return {
        "d": format_number(effect.max_abs_d),
        "small_spread": effect.small_spread,
        "metric": display_text(effect.metric),
        "condition": condition_cell(names, effect.condition) if effect.condition else None,
    }


_RANKED_BY = {
    "isolated": "isolated effect",
    "anyCell": "any cell (no isolated cell)",
    "mainEffect": "main effect over the grid",
}


def sensitivity(audit: AuditDoc, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The axes ranked, as `verdict.sensitivity` reads them."""
    return [
        {
            "rank": "unranked" if e.rank is None else str(e.rank),
            "ranked": e.rank is not None,
            "axis": e.axis,
            "code": display_text(e.code),
            "isolated": _measure(e.isolated, names),
            "any_cell": _measure(e.any_cell, names),
            "main_effect": _measure(e.main_effect, names),
            "ranked_by": _RANKED_BY.get(str(e.ranked_by), "no effect size"),
        }
        for e in verdict.sensitivity(audit)
    ]


def direction(audit: AuditDoc, metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.direction_consistency
    axes = [a.id for a in audit.plan.axes]
    return [
        {
            "metric": metric,
            "expected": display_text(table[metric].expected),
            "consistent": format_number(table[metric].consistent),
            "total": format_number(table[metric].total),
            "share": format_share(table[metric].share),
            "by_axis": [
                f"{axis} {format_number(table[metric].by_axis[axis].consistent)} of "
                f"{format_number(table[metric].by_axis[axis].total)}"
                for axis in in_order(axes, table[metric].by_axis)
            ],
        }
        for metric in in_order(metrics, table)
    ]


def power(power: PowerSection, metrics: Sequence[str], names: Mapping[str, str]) -> dict[str, Any]:
    """The minimum detectable |d| of each row (audit.json `power`): a column pair per metric,
    one row per condition, and the notes of rows without one."""
    table = power.metrics
    shown = in_order(metrics, table)
    by_condition: dict[str, dict[str, PowerRow]] = {}
    noted: dict[tuple[str, str], list[str]] = {}  # (condition, note) → metrics
    for metric in shown:
        for row in table[metric]:
            by_condition.setdefault(row.condition, {})[metric] = row
            if row.note:
                noted.setdefault((row.condition, row.note), []).append(metric)
    notes = [
        f"{names.get(condition, condition)} "
        f"({'every metric' if len(which) == len(shown) > 1 else ', '.join(which)}): {note}"
        for (condition, note), which in noted.items()
    ]
    rows = []
    for condition, cells in by_condition.items():
        values = []
        for metric in shown:
            cell = cells.get(metric)
            if cell is None:
                values += [MISSING, MISSING]
                continue
            mde = format_number(cell.mde)
            if cell.paired and cell.mde is not None:
                mde += " δ"
            values += [mde, format_p(cell.alpha)]
        rows.append({"condition": condition_cell(names, condition), "cells": values})
    return {
        "power": f"{100 * power.power:.0f}%",
        "alpha_family": short_number(power.alpha_family),
        "method": display_text(power.method, ""),
        "metrics": shown,
        "rows": rows,
        "notes": notes,
    }


def noise_floor(
    audit: AuditDoc, metrics: Sequence[str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    """How often each base differs from itself (audit.json `noiseFloor`), per metric."""
    table = audit.noise_floor
    return [
        {
            "metric": metric,
            "base": condition_cell(names, row.base),
            "n": format_number(row.n),
            "groups": MISSING if row.sizes is None else " vs ".join(str(s) for s in row.sizes),
            "compared": "the base's halves"
            if row.scope == "halves"
            else "with " + ", ".join(names.get(c, c) for c in row.companions),
            "splits": format_number(row.splits),
            "flip_rate": MISSING
            if row.flip_rate is None or not math.isfinite(row.flip_rate)
            else f"{100 * row.flip_rate:.1f}%",
            "alpha": format_p(row.alpha),
            "note": display_text(row.note, ""),
        }
        for metric in in_order(metrics, table)
        for row in table[metric]
    ]


def cross_model(audit: AuditDoc, metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.cross_model
    models = audit.plan.models
    return [
        {"model": model, "means": [format_number(table[model].get(m)) for m in metrics]}
        for model in in_order(models, table)
    ]


def distribution_effects(
    audit: AuditDoc, metrics: Sequence[str], names: Mapping[str, str]
) -> dict[str, Any]:
    """W1 and Cliff's delta: one row per condition, a column pair per metric that has tests."""
    tests = audit.tests
    tested = [m for m in in_order(metrics, tests) if _has_test(tests[m])]
    untested = [
        (m, display_text(audit.notes.get(m), "no test"))
        for m in in_order(metrics, tests)
        if m not in tested
    ]
    by_condition: dict[str, dict[str, ComparisonRow]] = {}
    for metric in tested:
        for row in tests[metric]:
            by_condition.setdefault(row.condition, {})[metric] = row
    rows = []
    for condition, cells in by_condition.items():
        values = []
        for metric in tested:
            cell = cells.get(metric)
            values += (
                [format_number(cell.w1), format_number(cell.cliff_delta)]
                if cell is not None
                else [MISSING, MISSING]
            )
        rows.append({"condition": condition_cell(names, condition), "cells": values})
    return {"metrics": tested, "rows": rows, "untested": untested}


def distributions(
    audit: AuditDoc, figure_for: Mapping[str, str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    out = []
    table = audit.distribution
    bases = {c.id: str(c.base_id) for c in audit.conditions}
    for name in sorted(table):
        target = figures.target_of(audit, name)
        categories = list(target)
        rows = []
        notes: list[str] = []
        for row in table[name]:
            shares = figures.proportions(row.counts, categories)
            total = float(sum(row.counts.values()))
            note = display_text(row.note, "")
            if note and note not in notes:
                notes.append(note)
            rows.append(
                {
                    "condition": condition_cell(names, row.condition),
                    "base": names.get(
                        bases.get(row.condition, ""), bases.get(row.condition, MISSING)
                    ),
                    "observations": format_number(int(total) if total.is_integer() else total),
                    "shares": [format_number(s) for s in shares]
                    if shares
                    else [MISSING] * len(categories),
                    "tvd": format_number(row.tvd),
                    "tvd_base": format_number(row.tvd_base),
                    "note": note,
                }
            )
        # A note every row shares is said once above the table, not in a column.
        shared = len(notes) == 1 and all(r["note"] == notes[0] for r in rows)
        out.append(
            {
                "name": name,
                "row_notes": bool(notes) and not shared,
                "categories": categories,
                "target": [format_number(target[c]) for c in categories],
                "rows": rows,
                "notes": notes,
                "figure": figure_for.get(name, ""),
            }
        )
    return out


def metric_tests(
    audit: AuditDoc,
    metrics: Sequence[str],
    by_kind: Mapping[tuple[str, str], Markup],
    names: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Per metric: its note, its table (only when some row carries a test) and its figure (only
    when some condition has a difference to draw)."""
    identical = verdict.identical_ids(audit)
    out = []
    for metric in metrics:
        rows = audit.tests.get(metric, [])
        drawn = any(r.diff is not None for r in rows)
        shown = _test_rows(rows, names, identical) if _has_test(rows) else []
        methods: dict[str, int] = {}
        for r in rows:
            if r.test:
                kind = f"{r.test} ({'paired' if r.paired else 'unpaired'})"
                methods[kind] = methods.get(kind, 0) + 1
        pairings = sorted({r.pairing for r in rows if r.pairing})
        out.append(
            {
                "metric": metric,
                "note": display_text(audit.notes.get(metric), ""),
                "methods": [
                    f"{name}: {n} row{'s' if n != 1 else ''}" for name, n in methods.items()
                ],
                "pairings": pairings,
                "family": display_text(rows[0].family if rows else None, ""),
                "rows": shown,
                "row_notes": any(r["note"] or r["small_spread"] for r in shown),
                "figure": by_kind.get(("effects", metric), "") if drawn else "",
            }
        )
    return out
