"""report.html: one self-contained page per audit, rendered from audit.json alone.

The page has no scripts, fonts or external resources; the figures are inlined as SVG. Every
string from the plan or the scenario reaches the page through Jinja's autoescaping; only the SVG
this package draws is marked safe. The same audit gives the same bytes (no dates, no dict order
taken from the input: audit.json is written with sorted keys, so order comes from the plan's
lists or from sorting).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ..core.errors import InputError
from ..core.files import load_document, write_atomic
from ..core.version import __version__
from ..harness.conditions import level_text
from . import figures, history, naming, verdict
from .figures import ANY_CELL_CAPTION, ISOLATED_CAPTION, format_number
from .main_effects import main_effects_section
from .templating import environment
from .verdict import as_float

TEMPLATE = "report.html.j2"
FIGURE_DIR = "figures"
MISSING = "–"
FLIP_MARK = "✗"
NO_FLIP_MARK = "–"
P_FLOOR = 0.0001

IDENTICAL_NOTE = "identical to the base, not tested"
SMALL_SPREAD_NOTE = "|d| from near-zero spread: read it with care"
SMALL_SPREAD_NAMED = 5
EXPECTED_MARKS = {"increase": "↑ increase", "decrease": "↓ decrease"}

_DESIGNS = {"one_at_a_time": "one at a time", "full_factorial": "full factorial"}
_FIGURE_PATTERNS = (
    "sensitivity.svg",
    "effects-*.svg",
    "main-effects-*.svg",
    "distribution-*.svg",
)


# --------------------------------------------------------------------------- formatting


def format_p(value: Any) -> str:
    """A p value: four decimals, `<0.0001` below that, `–` when there is none."""
    p = as_float(value)
    if p is None:
        return MISSING
    if math.isnan(p):
        return "nan"
    if p < P_FLOOR:
        return "<" + f"{P_FLOOR:.4f}"
    return f"{p:.4f}"


def format_interval(value: Any) -> str:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        return MISSING
    return f"[{format_number(value[0])}, {format_number(value[1])}]"


def format_share(value: Any) -> str:
    share = as_float(value)
    if share is None or not math.isfinite(share):
        return MISSING
    return f"{100 * share:.0f}%"


def _short_number(value: Any) -> str:
    """A setting such as α as it would be written (0.05), `–` when there is none."""
    x = as_float(value)
    return MISSING if x is None else f"{x:g}"


def _text(value: Any, missing: str = MISSING) -> str:
    return missing if value is None or value == "" else str(value)


def _abs_d(row: Mapping[str, Any]) -> float | None:
    d = as_float(row.get("cohenD"))
    return None if d is None or math.isnan(d) else abs(d)


def _in_order(keys: Sequence[str], mapping: Mapping[str, Any]) -> list[str]:
    """`keys` that `mapping` has, then its other keys sorted: a stable order whatever the
    mapping's own order (audit.json is written with sorted keys)."""
    first = [k for k in keys if k in mapping]
    return first + sorted(k for k in mapping if k not in set(first))


# --------------------------------------------------------------------------- sections


def _plan_summary(audit: Mapping[str, Any]) -> list[tuple[str, str]]:
    plan = audit.get("plan") or {}
    base = plan.get("base") or {}
    summary = audit.get("summary") or {}
    options = audit.get("options") or {}
    world = base.get("world")
    if world is None and base.get("simulator"):
        world = "external simulator"
    hypothesis = plan.get("hypothesis") or {}
    outcomes = hypothesis.get("outcomes") or {}
    metrics = [str(m) for m in audit.get("metrics") or []]
    directions = "; ".join(
        [f"{m}: {outcomes[m]}" for m in _in_order(metrics, outcomes)]
        + [
            f"{m}: {direction} under {kind} {name}"
            for key, kind in (("axes", "axis"), ("levels", "condition"))
            for name, table in sorted((hypothesis.get(key) or {}).items())
            if isinstance(table, Mapping)
            for m, direction in sorted(table.items())
        ]
    )
    models = [str(m) for m in plan.get("models") or []]
    n_bases = sum(1 for c in audit.get("conditions") or [] if c.get("isBase"))
    runs = (
        f"{summary.get('runs', 0)} in all, {summary.get('used', 0)} used in the statistics; "
        f"{summary.get('failed', 0)} failed, {summary.get('incomplete', 0)} incomplete, "
        + (
            f"{summary['violated']} invalid or without complete evidence, "
            if summary.get("violated")
            else ""
        )
        + f"{summary.get('excluded', 0)} excluded"
    )
    design = str(plan.get("design", ""))
    return [
        ("Plan", _text(plan.get("id"))),
        ("Title", _text(plan.get("title"))),
        ("Scenario", _text(base.get("name") or plan.get("baseScenario"))),
        ("Base scenario file", _text(plan.get("baseScenario"), "inline in the plan")),
        ("World", _text(world)),
        ("Design", _DESIGNS.get(design, _text(design))),
        ("Claim type", _text(plan.get("claimType"))),
        ("Replications per condition", _text(plan.get("replications"))),
        ("Conditions", f"{summary.get('conditions', 0)} ({n_bases} baseline)"),
        ("Runs", runs),
        (
            "Incomplete runs",
            "included in the statistics"
            if options.get("includeIncomplete")
            else "excluded from the statistics",
        ),
        ("Models", ", ".join(models) if models else "none (the plan lists no models)"),
        ("Metrics", ", ".join(metrics) if metrics else "none"),
        ("Expected directions", directions or "none (no hypothesis directions)"),
        ("Provider override", _text(options.get("providerOverride"), "none")),
        (
            "Model override",
            ", ".join(f"{k}: {v}" for k, v in sorted((options.get("llmOverride") or {}).items()))
            or "none",
        ),
        ("Plan hash", _text(plan.get("hash"))),
    ]


def _axes(audit: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": _text(axis.get("id")),
            "code": _text(axis.get("code")),
            "level": _text(axis.get("level")),
            "kind": _text(axis.get("kind")),
            "dimension": _text(axis.get("dimension")),
            "target": _text(axis.get("target")),
            "levels": [_level(v, axis.get("labels")) for v in axis.get("levels") or []],
        }
        for axis in (audit.get("plan") or {}).get("axes") or []
    ]


def _level(value: Any, labels: Any) -> dict[str, str]:
    """A level as written in the plan, with its display label when the axis gives one."""
    text = level_text(value)
    label = labels.get(text) if isinstance(labels, Mapping) else None
    return {"value": text, "label": str(label) if label not in (None, "", text) else ""}


def _name(names: Mapping[str, str], cid: Any) -> dict[str, str]:
    """How a table shows a condition: its name, and its id beside it when they differ."""
    text = str(cid)
    name = names.get(text, text)
    return {"name": name, "id": "" if name == text else text}


def _conditions(
    audit: Mapping[str, Any], metrics: Sequence[str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for cond in audit.get("conditions") or []:
        means = cond.get("means") or {}
        if cond.get("isBase"):
            role = "baseline"
        elif cond.get("identicalToBase"):
            role = IDENTICAL_NOTE
        else:
            role = ""
        rows.append(
            {
                "id": _name(names, cond.get("id")),
                "model": _text(cond.get("model")),
                "role": role,
                "runs": format_number(cond.get("runs")),
                "succeeded": format_number(cond.get("succeeded")),
                "complete": format_number(cond.get("complete")),
                "excluded": format_number(cond.get("excluded")),
                "means": [format_number(means.get(m)) for m in metrics],
            }
        )
    return rows


def _problem_runs(audit: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """Runs that failed, are incomplete or were left out of the statistics, each excluded run
    with the reason audit.json gives (`excludedBecause`)."""
    rows = []
    for run in audit.get("runs") or []:
        failure = run.get("failure")
        if failure is None and run.get("complete") and run.get("used"):
            continue
        status = run.get("status") or {}
        what = (
            f"{failure.get('stage')} · {failure.get('type')}: {failure.get('message')}"
            if failure
            else MISSING
        )
        rows.append(
            {
                "condition": _name(names, run.get("condition")),
                "replication": format_number(run.get("replication")),
                "execution": _text(status.get("execution")),
                "validity": _text(status.get("validity")),
                "evidence": _text(status.get("evidence")),
                "complete": "yes" if run.get("complete") else "no",
                "used": "yes" if run.get("used") else "no",
                "failure": what,
                "excluded_because": MISSING
                if run.get("used")
                else _text(run.get("excludedBecause"), "not recorded in this audit.json"),
            }
        )
    return rows


def _has_test(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any row of a metric carries a test (a p value or an effect size)."""
    return any(r.get("mwuP") is not None or r.get("cohenD") is not None for r in rows)


def _test_rows(
    rows: Sequence[Mapping[str, Any]], names: Mapping[str, str], identical: set[str]
) -> list[dict[str, Any]]:
    # Largest |d| first; rows without a d keep their plan order at the end (sorted is stable).
    ordered = sorted(rows, key=lambda r: (_abs_d(r) is None, -(_abs_d(r) or 0.0)))
    out = []
    for row in ordered:
        condition = str(row.get("condition"))
        tested = verdict.is_tested(row, identical)
        notes = [str(row["note"])] if row.get("note") else []
        if condition in identical and not notes:
            notes.append(IDENTICAL_NOTE)
        out.append(
            {
                "condition": _name(names, condition),
                "base": names.get(str(row.get("baseId")), _text(row.get("baseId"))),
                "n": f"{format_number(row.get('nBase'))} / {format_number(row.get('nCond'))}",
                "mean_base": format_number(row.get("meanBase")),
                "mean_cond": format_number(row.get("meanCond")),
                "diff": format_number(row.get("diff")),
                "ci95": format_interval(row.get("ci95")),
                "d": format_number(row.get("cohenD")),
                "p": format_p(row.get("mwuP")),
                "holm": format_p(row.get("holmP")),
                "significant": verdict.is_significant(row, identical),
                "conclusion": _text(row.get("conclusion"), "untested" if not tested else MISSING),
                "paired": row.get("paired") is True,
                "decisive_p": format_p(row.get("p")),
                "family_p": format_p(row.get("familyP")),
                "equivalence_p": format_p(row.get("equivalenceP")),
                "interval": format_interval(row.get("interval95")),
                "interval_note": _text(row.get("intervalNote"), ""),
                "reason": _text(row.get("reason"), ""),
                "expected": EXPECTED_MARKS.get(str(row.get("expected")), MISSING),
                "flip": FLIP_MARK if row.get("directionFlip") is True else NO_FLIP_MARK,
                "flipped": row.get("directionFlip") is True,
                "tested": tested,
                "small_spread": verdict.small_spread(row),
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
        "metric": _text(effect.metric),
        "condition": _name(names, effect.condition) if effect.condition else None,
    }


_RANKED_BY = {
    "isolated": "isolated effect",
    "anyCell": "any cell (no isolated cell)",
    "mainEffect": "main effect over the grid",
}


def _sensitivity(audit: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "rank": "unranked" if e.rank is None else str(e.rank),
            "ranked": e.rank is not None,
            "axis": e.axis,
            "code": _text(e.code),
            "isolated": _measure(e.isolated, names),
            "any_cell": _measure(e.any_cell, names),
            "main_effect": _measure(e.main_effect, names),
            "ranked_by": _RANKED_BY.get(str(e.ranked_by), "no effect size"),
        }
        for e in verdict.sensitivity(audit)
    ]


def _direction(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.get("directionConsistency") or {}
    return [
        {
            "metric": metric,
            "expected": _text(table[metric].get("expected")),
            "consistent": format_number(table[metric].get("consistent")),
            "total": format_number(table[metric].get("total")),
            "share": format_share(table[metric].get("share")),
            "by_axis": [
                f"{axis} {format_number(cell.get('consistent'))} of "
                f"{format_number(cell.get('total'))}"
                for axis, cell in _axis_order(audit, table[metric].get("byAxis") or {})
            ],
        }
        for metric in _in_order(metrics, table)
    ]


def _axis_order(audit: Mapping[str, Any], by_axis: Mapping[str, Any]) -> list[tuple[str, Any]]:
    axes = [str(a.get("id")) for a in (audit.get("plan") or {}).get("axes") or []]
    return [(axis, by_axis[axis] or {}) for axis in _in_order(axes, by_axis)]


def _power(
    audit: Mapping[str, Any], metrics: Sequence[str], names: Mapping[str, str]
) -> dict[str, Any] | None:
    """The minimum detectable |d| of each row (audit.json `power`): a column pair per metric,
    one row per condition, and the notes of rows without one."""
    power = audit.get("power")
    if not isinstance(power, Mapping):
        return None
    table = power.get("metrics") or {}
    shown = [m for m in _in_order(metrics, table) if isinstance(table.get(m), list)]
    by_condition: dict[str, dict[str, Mapping[str, Any]]] = {}
    noted: dict[tuple[str, str], list[str]] = {}  # (condition, note) → metrics
    for metric in shown:
        for row in table[metric]:
            condition = str(row.get("condition"))
            by_condition.setdefault(condition, {})[metric] = row
            if row.get("note"):
                noted.setdefault((condition, str(row["note"])), []).append(metric)
    notes = [
        f"{names.get(condition, condition)} "
        f"({'every metric' if len(which) == len(shown) > 1 else ', '.join(which)}): {note}"
        for (condition, note), which in noted.items()
    ]
    rows = []
    for condition, cells in by_condition.items():
        values = []
        for metric in shown:
            row = cells.get(metric) or {}
            mde = format_number(row.get("mde"))
            if row.get("paired") and row.get("mde") is not None:
                mde += " δ"
            values += [mde, format_p(row.get("alpha"))]
        rows.append({"condition": _name(names, condition), "cells": values})
    level = as_float(power.get("power"))
    return {
        "power": MISSING if level is None else f"{100 * level:.0f}%",
        "alpha_family": _short_number(power.get("alphaFamily")),
        "method": _text(power.get("method"), ""),
        "metrics": shown,
        "rows": rows,
        "notes": notes,
    }


def _noise_floor(
    audit: Mapping[str, Any], metrics: Sequence[str], names: Mapping[str, str]
) -> list[dict[str, Any]] | None:
    """How often each base differs from itself (audit.json `noiseFloor`), per metric."""
    table = audit.get("noiseFloor")
    if not isinstance(table, Mapping):
        return None
    rows = []
    for metric in _in_order(metrics, table):
        for row in table[metric] or []:
            rate = as_float(row.get("flipRate"))
            rows.append(
                {
                    "metric": metric,
                    "base": _name(names, row.get("base")),
                    "n": format_number(row.get("n")),
                    "splits": format_number(row.get("splits")),
                    "flip_rate": MISSING
                    if rate is None or not math.isfinite(rate)
                    else f"{100 * rate:.1f}%",
                    "alpha": format_p(row.get("alpha")),
                    "note": _text(row.get("note"), ""),
                }
            )
    return rows


def _cross_model(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.get("crossModel") or {}
    models = [str(m) for m in (audit.get("plan") or {}).get("models") or []]
    return [
        {"model": model, "means": [format_number((table[model] or {}).get(m)) for m in metrics]}
        for model in _in_order(models, table)
    ]


def _distribution_effects(
    audit: Mapping[str, Any], metrics: Sequence[str], names: Mapping[str, str]
) -> dict[str, Any]:
    """W1 and Cliff's delta: one row per condition, a column pair per metric that has tests."""
    tests = audit.get("tests") or {}
    notes = audit.get("notes") or {}
    tested = [m for m in _in_order(metrics, tests) if _has_test(tests.get(m) or [])]
    untested = [
        (m, _text(notes.get(m), "no test")) for m in _in_order(metrics, tests) if m not in tested
    ]
    by_condition: dict[str, dict[str, Mapping[str, Any]]] = {}
    for metric in tested:
        for row in tests.get(metric) or []:
            by_condition.setdefault(str(row.get("condition")), {})[metric] = row
    rows = []
    for condition, cells in by_condition.items():
        values = []
        for metric in tested:
            row = cells.get(metric) or {}
            values += [format_number(row.get("w1")), format_number(row.get("cliffDelta"))]
        rows.append({"condition": _name(names, condition), "cells": values})
    return {"metrics": tested, "rows": rows, "untested": untested}


def _distributions(
    audit: Mapping[str, Any], figure_for: Mapping[str, str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    out = []
    table = audit.get("distribution") or {}
    bases = {str(c.get("id")): str(c.get("baseId")) for c in audit.get("conditions") or []}
    for name in sorted(table):
        target = figures.target_of(audit, name)
        categories = list(target)
        rows = []
        notes: list[str] = []
        for row in table[name] or []:
            counts = row.get("counts") or {}
            shares = figures.proportions(counts, categories)
            total = sum((as_float(v) or 0.0 for v in counts.values()), 0.0)
            note = _text(row.get("note"), "")
            if note and note not in notes:
                notes.append(note)
            condition = str(row.get("condition"))
            rows.append(
                {
                    "condition": _name(names, condition),
                    "base": names.get(bases.get(condition, ""), bases.get(condition, MISSING)),
                    "observations": format_number(int(total) if total.is_integer() else total),
                    "shares": [format_number(s) for s in shares]
                    if shares
                    else [MISSING] * len(categories),
                    "tvd": format_number(row.get("tvd")),
                    "tvd_base": format_number(row.get("tvdBase")),
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


def _tests(
    audit: Mapping[str, Any],
    metrics: Sequence[str],
    by_kind: Mapping[tuple[str, str], Markup],
    names: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Per metric: its note, its table (only when some row carries a test) and its figure (only
    when some condition has a difference to draw)."""
    tests = audit.get("tests") or {}
    notes = audit.get("notes") or {}
    identical = verdict.identical_ids(audit)
    out = []
    for metric in metrics:
        rows = tests.get(metric) or []
        drawn = any(r.get("diff") is not None for r in rows)
        shown = _test_rows(rows, names, identical) if _has_test(rows) else []
        methods: dict[str, int] = {}
        for r in rows:
            if r.get("test"):
                kind = f"{r['test']} ({'paired' if r.get('paired') else 'unpaired'})"
                methods[kind] = methods.get(kind, 0) + 1
        pairings = sorted({str(r["pairing"]) for r in rows if r.get("pairing")})
        out.append(
            {
                "metric": metric,
                "note": _text(notes.get(metric), ""),
                "methods": [
                    f"{name}: {n} row{'s' if n != 1 else ''}" for name, n in methods.items()
                ],
                "pairings": pairings,
                "family": _text((rows[0] if rows else {}).get("family"), ""),
                "rows": shown,
                "row_notes": any(r["note"] or r["small_spread"] for r in shown),
                "figure": by_kind.get(("effects", metric), "") if drawn else "",
            }
        )
    return out


def _user_quality(audit: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any] | None:
    """The user simulator's quality per condition (audit.json `userQuality`): its four per-run
    checks summed and the diversity of its replications, with the condition's flags."""
    section = audit.get("userQuality")
    if not isinstance(section, Mapping):
        return None
    rows = []
    for row in section.get("conditions") or []:
        persona = row.get("personaConsistency") or {}
        reaction = row.get("reactionCompliance") or {}
        seen = row.get("visibility") or {}
        ended = row.get("termination") or {}
        diversity = row.get("diversity") or {}
        rows.append(
            {
                "condition": _name(names, row.get("condition")),
                "modes": ", ".join(str(m) for m in row.get("modes") or []) or MISSING,
                "assessed": format_number(row.get("assessed")),
                "persona": format_share(persona.get("rate")),
                "review": format_number(persona.get("runsForReview")),
                "reaction": format_share(reaction.get("rate")),
                "triggers": format_number(reaction.get("triggers")),
                "reaction_violated": format_number(reaction.get("runsViolated")),
                "visibility": format_number(seen.get("violations")),
                "disclosures": format_number(seen.get("disclosures")),
                "termination": f"{format_number(ended.get('compliant'))} / "
                f"{format_number(ended.get('notCompliant'))}",
                "openings": format_number(diversity.get("distinctOpenings")),
                "paths": format_number(diversity.get("distinctPaths")),
                "flags": [str(f) for f in row.get("flags") or []],
            }
        )
    return {"rows": rows, "note": _text(section.get("note"), "")}


def _testbed(audit: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any] | None:
    """The agent-testbed tables (only for audits whose runs carry evaluations): per criterion,
    each condition's verdict counts, validity exclusions and its zero-violation bound. The totals
    over conditions are counts only: no bound is shown for them."""
    table = audit.get("testbed")
    if not isinstance(table, Mapping):
        return None
    criteria = [str(c) for c in table.get("criteria") or []]
    conditions = list(table.get("conditions") or [])
    out = []
    for criterion in criteria:
        rows = []
        for cond in conditions:
            cell = (cond.get("criteria") or {}).get(criterion) or {}
            bound = as_float(cell.get("zeroViolationUpperBound"))
            rows.append(
                {
                    "condition": _name(names, cond.get("condition")),
                    "evaluated": format_number(cond.get("evaluated")),
                    "excluded": format_number(cond.get("validityExcluded")),
                    "evidence_excluded": format_number(cond.get("evidenceExcluded")),
                    "pass": format_number(cell.get("pass")),
                    "fail": format_number(cell.get("fail")),
                    "undecidable": format_number(cell.get("undecidable")),
                    "not_applicable": format_number(cell.get("notApplicable")),
                    "rate": format_share(cell.get("violationRate")),
                    "bound": MISSING if bound is None else f"{100 * bound:.1f}%",
                }
            )
        total = (table.get("totals") or {}).get(criterion) or {}
        out.append(
            {
                "criterion": criterion,
                "rows": rows,
                "undecidable": format_number(total.get("undecidable")),
            }
        )
    return {
        "criteria": out,
        "excluded": format_number(table.get("validityExcluded")),
        "evidence_excluded": format_number(table.get("evidenceExcluded")),
        "undecidable": format_number(table.get("undecidable")),
        "note": _text(table.get("note"), ""),
        "totals_note": _text(table.get("totalsNote"), ""),
        "evaluators": [
            {
                "evaluator": f"{_text(e.get('name'), '?')}@{_text(e.get('version'), '?')}",
                "sha256": _text(e.get("sha256"), MISSING),
                "spec": f"{_text((e.get('spec') or {}).get('name'), '?')}@"
                f"{_text((e.get('spec') or {}).get('version'), '?')}",
                "spec_sha256": _text((e.get("spec") or {}).get("sha256"), MISSING),
                "runs": format_number(e.get("runs")),
            }
            for e in table.get("evaluators") or []
            if isinstance(e, Mapping)
        ],
        "not_evaluated": [
            (
                names.get(str(c.get("condition")), str(c.get("condition"))),
                format_number(c.get("notEvaluated")),
            )
            for c in conditions
            if c.get("notEvaluated")
        ],
    }


# --------------------------------------------------------------------------- rendering


def _small_spread(audit: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any] | None:
    """The tested comparisons whose |d| comes from near-zero spread, the first few named."""
    rows = [
        f"{metric} · {names.get(str(row.get('condition')), str(row.get('condition')))}"
        for metric, row in verdict.small_spread_rows(audit)
    ]
    if not rows:
        return None
    return {
        "count": len(rows),
        "named": rows[:SMALL_SPREAD_NAMED],
        "more": rows[SMALL_SPREAD_NAMED:],
    }


def _headline(audit: Mapping[str, Any]) -> str:
    """The audit's own headline (schema 3), else the sentence read from its rows (older ones)."""
    stated = (audit.get("verdict") or {}).get("headline")
    return str(stated) if isinstance(stated, str) and stated else verdict.headline(audit)


def _verdict_details(audit: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The small table under the headline: per metric, how many rows each conclusion took."""
    out = []
    for detail in (audit.get("verdict") or {}).get("details") or []:
        largest = detail.get("largest") or {}
        out.append(
            {
                "metric": _text(detail.get("metric")),
                "family": _text(detail.get("family"), MISSING),
                "tested": format_number(detail.get("tested")),
                "moved": len(detail.get("moved") or []),
                "unchanged": len(detail.get("unchanged") or []),
                "inconclusive": len(detail.get("inconclusive") or []),
                "untested": len(detail.get("untested") or []),
                "largest": format_number(largest.get("diff")) if largest else MISSING,
                "detectable": format_number(detail.get("detectable")),
                "margin": format_number(detail.get("margin"))
                if detail.get("margin") is not None
                else (
                    f"none (suggested {format_number(detail.get('suggestedMargin'))})"
                    if detail.get("suggestedMargin") is not None
                    else "none"
                ),
            }
        )
    return out


def _figure_markup(svgs: Mapping[str, str]) -> dict[str, Markup]:
    """Each generated SVG inlined, its ids prefixed by its position so figures never share one."""
    markup: dict[str, Markup] = {}
    for index, (filename, svg) in enumerate(svgs.items()):
        # Our own matplotlib output: text is drawn as paths and the <title> is escaped.
        markup[filename] = Markup(figures.inline(svg, id_prefix=f"fig{index}"))
    return markup


def context(
    audit: Mapping[str, Any], svgs: Mapping[str, str], changes: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Everything the template shows, as display strings (and figure markup) in page order.
    `changes` is what moved since the previous build of the audit (`history.diff_audits`)."""
    plan = audit.get("plan") or {}
    metrics = [str(m) for m in audit.get("metrics") or []]
    figure_names = naming.figure_names(audit)
    markup = _figure_markup(svgs)
    by_kind: dict[tuple[str, str], Markup] = {
        key: markup[filename] for filename, key in figure_names.items() if filename in markup
    }
    grade = audit.get("grade") or {}
    integrity = audit.get("integrity") or {}
    cost = audit.get("cost") or {}
    title = _text(plan.get("title") or plan.get("id"), "untitled audit")
    names = naming.condition_names(audit)
    return {
        "title": title,
        "stamp": naming.audit_fingerprint(audit),
        "verdict": _headline(audit),
        "verdict_details": _verdict_details(audit),
        "decisions": verdict.decisions(audit),
        "purpose": _purpose(audit),
        "changes": Markup(history.diff_html(changes, level=3)) if changes is not None else None,
        "small_spread": _small_spread(audit, names),
        "plan_id": _text(plan.get("id")),
        "plan_hash": _text(plan.get("hash")),
        "version": __version__,
        "audit_version": _text((audit.get("software") or {}).get("simreport")),
        "schema_version": _text(audit.get("schemaVersion")),
        "summary": _plan_summary(audit),
        "grade": {
            "grade": _text(grade.get("grade"), "unknown"),
            "reasons": [str(r) for r in grade.get("reasons") or []],
            "rule": _text(grade.get("rule"), ""),
            "achieved": _text(grade.get("achieved"), ""),
            "achieved_reasons": [str(r) for r in grade.get("achievedReasons") or []],
        },
        "axes": _axes(audit),
        "metrics": metrics,
        "conditions": _conditions(audit, metrics, names),
        "problem_runs": _problem_runs(audit, names),
        "has_models": any(c.get("model") is not None for c in audit.get("conditions") or []),
        "several_bases": sum(1 for c in audit.get("conditions") or [] if c.get("isBase")) > 1,
        "tests": _tests(audit, metrics, by_kind, names),
        "power": _power(audit, metrics, names),
        "noise_floor": _noise_floor(audit, metrics, names),
        "sensitivity": _sensitivity(audit, names),
        "small_spread_note": SMALL_SPREAD_NOTE,
        "isolated_caption": ISOLATED_CAPTION,
        "any_cell_caption": ANY_CELL_CAPTION,
        "sensitivity_figure": by_kind.get(("sensitivity", ""), ""),
        "factorial": main_effects_section(
            audit, {name: fig for (kind, name), fig in by_kind.items() if kind == "mainEffects"}
        ),
        "direction": _direction(audit, metrics),
        "cross_model": _cross_model(audit, metrics),
        "distribution_effects": _distribution_effects(audit, metrics, names),
        "distributions": _distributions(
            audit,
            {name: fig for (kind, name), fig in by_kind.items() if kind == "distribution"},
            names,
        ),
        "integrity": [(k, format_number(integrity[k])) for k in sorted(integrity)],
        "testbed": _testbed(audit, names),
        "user_quality": _user_quality(audit, names),
        "cost": [
            ("LLM calls", format_number(cost.get("llmCalls", 0))),
            ("Prompt tokens", format_number(cost.get("promptTokens", 0))),
            ("Completion tokens", format_number(cost.get("completionTokens", 0))),
            *(
                [("Bytes of records stored", format_number(cost["recordBytes"]))]
                if "recordBytes" in cost
                else []
            ),
        ],
        "cost_split": _cost_split(cost, names),
        "coverage": _coverage(audit, names),
    }


def _coverage(audit: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any] | None:
    """audit.json `coverage` as one table per permission: a row per stage and fault, a column
    per behaviour, each cell the conditions that test it, a gap, or not applicable."""
    coverage = audit.get("coverage")
    if not isinstance(coverage, Mapping):
        return None
    axes = coverage["axes"]
    by_key = {
        (c["permission"], c["stage"], c["fault"], c["behaviour"]): c for c in coverage["cells"]
    }
    tables = []
    for permission in axes["permission"]:
        rows = []
        for stage in axes["stage"]:
            for fault in axes["fault"]:
                cells = []
                for behaviour in axes["behaviour"]:
                    cell = by_key[(permission, stage, fault, behaviour)]
                    cells.append(
                        {
                            "status": cell["status"],
                            "count": len(cell["conditions"]),
                            "title": ", ".join(names.get(c, c) for c in cell["conditions"]),
                        }
                    )
                rows.append({"stage": stage, "fault": fault, "cells": cells})
        tables.append({"permission": permission, "rows": rows})
    return {
        "behaviours": list(axes["behaviour"]),
        "tables": tables,
        "covered": coverage["covered"],
        "empty_count": coverage["emptyCount"],
        "not_applicable": coverage["notApplicable"],
        "empty": list(coverage["empty"]),
        "unread": list(coverage.get("unread") or []),
        "note": coverage["note"],
    }


SEGMENT_LABELS = {
    "sut": "System under test (the agent)",
    "userWording": "User simulator: wording",
    "environment": "Environment steps (tools, faults)",
    "evaluation": "Observations and evaluation",
    "agents": "Simulated agents",
    "unattributed": "Not attributed (results written before the split)",
}
SIDE_LABELS = {"sut": "SUT", "simulation": "simulation", "unattributed": "not attributed"}
COST_NOTE = (
    "In worlds without a system under test (the prisoner's dilemma, the echo chamber) the agents "
    "are the simulation: all their model calls are simulation cost. Time is the testbed's logical "
    "time, the same on every rerun; the real durations each run measured are in its events.jsonl "
    "(the run_finished event's wallClockMs) and left out here, since they differ between reruns."
)


def _segment_rank(name: Any) -> tuple[int, str]:
    """The SUT first, then the simulation's segments in the order of SEGMENT_LABELS."""
    order = list(SEGMENT_LABELS)
    text = str(name)
    return (order.index(text) if text in order else len(order), text)


def _cost_split(cost: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any] | None:
    """audit.json `cost` split by segment and per condition; None for audits written before."""
    segments = cost.get("segments")
    if not isinstance(segments, Mapping):
        return None

    def number(sides: Mapping[str, Any], which: str, *keys: str) -> str:
        part = sides.get(which) or {}
        return format_number(sum(int(part.get(key) or 0) for key in keys))

    rows = [
        {
            "segment": SEGMENT_LABELS.get(str(name), str(name)),
            "side": SIDE_LABELS.get(str(seg.get("side")), _text(seg.get("side"))),
            "calls": format_number(seg.get("llmCalls")),
            "prompt": format_number(seg.get("promptTokens")),
            "completion": format_number(seg.get("completionTokens")),
            "operations": format_number(seg.get("operations")),
            "logical": format_number(seg.get("logicalMs")),
        }
        for name, seg in sorted(segments.items(), key=lambda item: _segment_rank(item[0]))
        if isinstance(seg, Mapping)
    ]
    conditions = []
    for row in cost.get("conditions") or []:
        if not isinstance(row, Mapping):
            continue
        sides = row.get("sides") or {}
        conditions.append(
            {
                "condition": _name(names, row.get("condition")),
                "runs": format_number(row.get("runs")),
                "bytes": format_number(row.get("recordBytes")),
                **{
                    f"{key}_{field}": number(sides, which, *quantities)
                    for key, which in (("sut", "sut"), ("sim", "simulation"))
                    for field, quantities in (
                        ("calls", ("llmCalls",)),
                        ("tokens", ("promptTokens", "completionTokens")),
                        ("logical", ("logicalMs",)),
                    )
                },
            }
        )
    return {
        "segments": rows,
        "conditions": conditions,
        "unattributed": format_number(cost.get("unattributedRuns") or 0),
        "note": COST_NOTE,
    }


def _render(
    audit: Mapping[str, Any], svgs: Mapping[str, str], changes: Mapping[str, Any] | None = None
) -> str:
    return environment().get_template(TEMPLATE).render(context(audit, svgs, changes))


def _purpose(audit: Mapping[str, Any]) -> dict[str, Any]:
    """What the report says about why the runs were made (audit.json `purpose`; audits written
    before it existed were exploration)."""
    section = audit.get("purpose") or {}
    purpose = _text(section.get("purpose"), "exploration")
    versions = [
        f"{_text(v.get('name'))}@{_text(v.get('version'))} ({_text(v.get('status'))})"
        for v in section.get("notOnline") or []
    ]
    return {
        "purpose": purpose,
        "exploration_runs": int(section.get("explorationRuns") or 0),
        "not_online": versions,
    }


def render_report(audit: Mapping[str, Any]) -> str:
    """report.html for an audit (the dict `analyse` returns, or audit.json read back)."""
    return _render(audit, figures.figure_files(audit))


def write_report(audit_dir: str | Path, *, draw_figures: bool = True) -> Path:
    """Read `audit_dir/audit.json`; write `figures/*.svg` and `report.html` there (atomically).
    Figures this module wrote earlier that the audit no longer has are removed. Returns the
    report's path. With `draw_figures` false the figures already in `figures/` (drawn by the
    workflow's figure job from the same audit.json) are inlined as they are."""
    root = Path(audit_dir)
    audit_file = root / "audit.json"
    # Strings in audit.json may carry control characters: every one printed is made visible.
    audit = load_document(audit_file, allow_control_characters=True).data
    if not isinstance(audit, dict) or "plan" not in audit or "schemaVersion" not in audit:
        raise InputError(
            "not an audit document", file=audit_file, expected="audit.json written by analyse"
        )
    figure_dir = root / FIGURE_DIR
    if draw_figures:
        svgs = figures.figure_files(audit)
        for filename, svg in svgs.items():
            write_atomic(figure_dir / filename, svg)
        if figure_dir.is_dir():
            for pattern in _FIGURE_PATTERNS:
                for stale in sorted(figure_dir.glob(pattern)):
                    if stale.name not in svgs:
                        stale.unlink()
    else:
        # A figure missing from figures/ is drawn here: the same drawing gives the same bytes.
        svgs = {
            filename: (
                (figure_dir / filename).read_text(encoding="utf-8")
                if (figure_dir / filename).is_file()
                else figures.draw(audit, kind, name)
            )
            for filename, (kind, name) in naming.figure_names(audit).items()
        }
    report = root / "report.html"
    write_atomic(report, _render(audit, svgs, history.changes_since_previous(root, audit)))
    return report
