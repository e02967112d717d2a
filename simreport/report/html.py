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
from . import figures, naming
from .figures import as_float, format_number
from .templating import environment

TEMPLATE = "report.html.j2"
FIGURE_DIR = "figures"
MISSING = "–"
FLIP_MARK = "✗"
NO_FLIP_MARK = "–"
P_FLOOR = 0.0001

_DESIGNS = {"one_at_a_time": "one at a time", "full_factorial": "full factorial"}
_FIGURE_PATTERNS = ("sensitivity.svg", "effects-*.svg", "distribution-*.svg")


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
    directions = "; ".join(f"{m}: {outcomes[m]}" for m in _in_order(metrics, outcomes))
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
            "levels": [level_text(v) for v in axis.get("levels") or []],
        }
        for axis in (audit.get("plan") or {}).get("axes") or []
    ]


def _conditions(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for cond in audit.get("conditions") or []:
        means = cond.get("means") or {}
        if cond.get("isBase"):
            role = "baseline"
        elif cond.get("identicalToBase"):
            role = "identical to its base"
        else:
            role = ""
        rows.append(
            {
                "id": str(cond.get("id")),
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


def _problem_runs(audit: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Runs that failed, are incomplete or were left out of the statistics."""
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
                "condition": str(run.get("condition")),
                "replication": format_number(run.get("replication")),
                "execution": _text(status.get("execution")),
                "validity": _text(status.get("validity")),
                "evidence": _text(status.get("evidence")),
                "complete": "yes" if run.get("complete") else "no",
                "used": "yes" if run.get("used") else "no",
                "failure": what,
            }
        )
    return rows


def _has_test(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any row of a metric carries a test (a p value or an effect size)."""
    return any(r.get("mwuP") is not None or r.get("cohenD") is not None for r in rows)


def _test_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    # Largest |d| first; rows without a d keep their plan order at the end (sorted is stable).
    ordered = sorted(rows, key=lambda r: (_abs_d(r) is None, -(_abs_d(r) or 0.0)))
    return [
        {
            "condition": str(row.get("condition")),
            "base": _text(row.get("baseId")),
            "n": f"{format_number(row.get('nBase'))} / {format_number(row.get('nCond'))}",
            "mean_base": format_number(row.get("meanBase")),
            "mean_cond": format_number(row.get("meanCond")),
            "diff": format_number(row.get("diff")),
            "ci95": format_interval(row.get("ci95")),
            "d": format_number(row.get("cohenD")),
            "p": format_p(row.get("mwuP")),
            "holm": format_p(row.get("holmP")),
            "flip": FLIP_MARK if row.get("directionFlip") is True else NO_FLIP_MARK,
            "flipped": row.get("directionFlip") is True,
            "note": _text(row.get("note"), ""),
        }
        for row in ordered
    ]


def _sensitivity(audit: Mapping[str, Any]) -> list[dict[str, str]]:
    entries = sorted(audit.get("sensitivity") or [], key=lambda e: int(e.get("rank") or 0))
    return [
        {
            "rank": format_number(e.get("rank")),
            "axis": str(e.get("axis")),
            "code": _text(e.get("code")),
            "d": format_number(e.get("maxAbsD")),
            "metric": _text(e.get("metric"), "no effect size"),
            "condition": _text(e.get("condition")),
        }
        for e in entries
    ]


def _direction(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, str]]:
    table = audit.get("directionConsistency") or {}
    return [
        {
            "metric": metric,
            "expected": _text(table[metric].get("expected")),
            "consistent": format_number(table[metric].get("consistent")),
            "total": format_number(table[metric].get("total")),
            "share": format_share(table[metric].get("share")),
        }
        for metric in _in_order(metrics, table)
    ]


def _cross_model(audit: Mapping[str, Any], metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.get("crossModel") or {}
    models = [str(m) for m in (audit.get("plan") or {}).get("models") or []]
    return [
        {"model": model, "means": [format_number((table[model] or {}).get(m)) for m in metrics]}
        for model in _in_order(models, table)
    ]


def _distribution_effects(audit: Mapping[str, Any], metrics: Sequence[str]) -> dict[str, Any]:
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
        rows.append({"condition": condition, "cells": values})
    return {"metrics": tested, "rows": rows, "untested": untested}


def _distributions(audit: Mapping[str, Any], figure_for: Mapping[str, str]) -> list[dict[str, Any]]:
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
                    "condition": condition,
                    "base": bases.get(condition, MISSING),
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
    audit: Mapping[str, Any], metrics: Sequence[str], by_kind: Mapping[tuple[str, str], Markup]
) -> list[dict[str, Any]]:
    """Per metric: its note, its table (only when some row carries a test) and its figure (only
    when some condition has a difference to draw)."""
    tests = audit.get("tests") or {}
    notes = audit.get("notes") or {}
    out = []
    for metric in metrics:
        rows = tests.get(metric) or []
        drawn = any(r.get("diff") is not None for r in rows)
        out.append(
            {
                "metric": metric,
                "note": _text(notes.get(metric), ""),
                "rows": _test_rows(rows) if _has_test(rows) else [],
                "row_notes": any(r.get("note") for r in rows),
                "figure": by_kind.get(("effects", metric), "") if drawn else "",
            }
        )
    return out


def _testbed(audit: Mapping[str, Any]) -> dict[str, Any] | None:
    """The agent-testbed tables (only for audits whose runs carry evaluations): per criterion,
    each condition's verdict counts, validity exclusions and the zero-violation bound."""
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
                    "condition": str(cond.get("condition")),
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
        "not_evaluated": [
            (str(c.get("condition")), format_number(c.get("notEvaluated")))
            for c in conditions
            if c.get("notEvaluated")
        ],
    }


# --------------------------------------------------------------------------- rendering


def _figure_markup(svgs: Mapping[str, str]) -> dict[str, Markup]:
    """Each generated SVG inlined, its ids prefixed by its position so figures never share one."""
    markup: dict[str, Markup] = {}
    for index, (filename, svg) in enumerate(svgs.items()):
        # Our own matplotlib output: text is drawn as paths and the <title> is escaped.
        markup[filename] = Markup(figures.inline(svg, id_prefix=f"fig{index}"))
    return markup


def context(audit: Mapping[str, Any], svgs: Mapping[str, str]) -> dict[str, Any]:
    """Everything the template shows, as display strings (and figure markup) in page order."""
    plan = audit.get("plan") or {}
    metrics = [str(m) for m in audit.get("metrics") or []]
    names = naming.figure_names(audit)
    markup = _figure_markup(svgs)
    by_kind: dict[tuple[str, str], Markup] = {
        key: markup[filename] for filename, key in names.items() if filename in markup
    }
    grade = audit.get("grade") or {}
    integrity = audit.get("integrity") or {}
    cost = audit.get("cost") or {}
    title = _text(plan.get("title") or plan.get("id"), "untitled audit")
    return {
        "title": title,
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
        },
        "axes": _axes(audit),
        "metrics": metrics,
        "conditions": _conditions(audit, metrics),
        "problem_runs": _problem_runs(audit),
        "has_models": any(c.get("model") is not None for c in audit.get("conditions") or []),
        "several_bases": sum(1 for c in audit.get("conditions") or [] if c.get("isBase")) > 1,
        "tests": _tests(audit, metrics, by_kind),
        "sensitivity": _sensitivity(audit),
        "sensitivity_figure": by_kind.get(("sensitivity", ""), ""),
        "direction": _direction(audit, metrics),
        "cross_model": _cross_model(audit, metrics),
        "distribution_effects": _distribution_effects(audit, metrics),
        "distributions": _distributions(
            audit, {name: fig for (kind, name), fig in by_kind.items() if kind == "distribution"}
        ),
        "integrity": [(k, format_number(integrity[k])) for k in sorted(integrity)],
        "testbed": _testbed(audit),
        "cost": [
            ("LLM calls", format_number(cost.get("llmCalls", 0))),
            ("Prompt tokens", format_number(cost.get("promptTokens", 0))),
            ("Completion tokens", format_number(cost.get("completionTokens", 0))),
        ],
    }


def _render(audit: Mapping[str, Any], svgs: Mapping[str, str]) -> str:
    return environment().get_template(TEMPLATE).render(context(audit, svgs))


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
    write_atomic(report, _render(audit, svgs))
    return report
