"""report.html: one self-contained page per audit, rendered from audit.json (and, for what changed
since the previous build, the audit kept in `history/`).

No scripts, fonts or external resources; every string from the plan or the scenario is
autoescaped; the same audit gives the same bytes. The page reads the audit's model (`AuditDoc`),
so a renamed key fails loudly. The design: docs/report.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ..analysis.audit_document import (
    AuditDoc,
    ComparisonRow,
    CostSection,
    CoverageSection,
    CriterionRow,
    MetricVerdict,
    PowerRow,
    PowerSection,
    PurposeSection,
    SideTotals,
    TestbedSection,
    UserQualitySection,
)
from ..core.files import write_atomic
from ..core.package_version import __version__
from ..core.schema import PerturbationAxis
from ..harness.conditions import level_text
from . import figures, history, naming, verdict
from .document import audit_document, read_audit_document
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


def _abs_d(row: ComparisonRow) -> float | None:
    d = row.cohen_d
    return None if d is None or math.isnan(d) else abs(d)


def _in_order(keys: Sequence[str], mapping: Mapping[str, Any]) -> list[str]:
    """`keys` that `mapping` has, then its other keys sorted: a stable order whatever the
    mapping's own order (audit.json is written with sorted keys)."""
    first = [k for k in keys if k in mapping]
    return first + sorted(k for k in mapping if k not in set(first))


# --------------------------------------------------------------------------- sections


def _plan_summary(audit: AuditDoc) -> list[tuple[str, str]]:
    plan = audit.plan
    base = plan.base
    summary = audit.summary
    options = audit.options
    hypothesis = plan.hypothesis
    outcomes = hypothesis.outcomes if hypothesis is not None else {}
    metrics = audit.metrics
    directions = "; ".join(
        [f"{m}: {outcomes[m]}" for m in _in_order(metrics, outcomes)]
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
        ("Plan", _text(plan.id)),
        ("Title", _text(plan.title)),
        ("Scenario", _text((base.name if base is not None else None) or plan.base_scenario)),
        ("Base scenario file", _text(plan.base_scenario, "inline in the plan")),
        ("World", _text(naming.world_name(plan))),
        ("Design", _DESIGNS.get(plan.design, _text(plan.design))),
        ("Claim type", _text(plan.claim_type)),
        ("Replications per condition", _text(plan.replications)),
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
        ("Provider override", _text(options.provider_override, "none")),
        (
            "Model override",
            ", ".join(f"{k}: {v}" for k, v in sorted((options.llm_override or {}).items()))
            or "none",
        ),
        ("Plan hash", _text(plan.hash)),
    ]


def _axes(audit: AuditDoc) -> list[dict[str, Any]]:
    return [
        {
            "id": _text(axis.id),
            "code": _text(axis.code),
            "level": _text(axis.level),
            "kind": _text(axis.kind),
            "dimension": _text(axis.dimension),
            "target": _text(axis.target),
            "levels": [_level(v, axis) for v in axis.levels],
        }
        for axis in audit.plan.axes
    ]


def _level(value: Any, axis: PerturbationAxis) -> dict[str, str]:
    """A level as written in the plan, with its display label when the axis gives one."""
    text = level_text(value)
    label = axis.labels.get(text)
    return {"value": text, "label": label if label not in (None, "", text) else ""}


def _name(names: Mapping[str, str], cid: Any) -> dict[str, str]:
    """How a table shows a condition: its name, and its id beside it when they differ."""
    text = str(cid)
    name = names.get(text, text)
    return {"name": name, "id": "" if name == text else text}


def _conditions(
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
                "id": _name(names, cond.id),
                "model": _text(cond.model),
                "role": role,
                "runs": format_number(cond.runs),
                "succeeded": format_number(cond.succeeded),
                "complete": format_number(cond.complete),
                "excluded": format_number(cond.excluded),
                "means": [format_number(cond.means.get(m)) for m in metrics],
            }
        )
    return rows


def _problem_runs(audit: AuditDoc, names: Mapping[str, str]) -> list[dict[str, Any]]:
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
                "condition": _name(names, run.condition),
                "replication": format_number(run.replication),
                "execution": _text(status.execution),
                "validity": _text(status.validity),
                "evidence": _text(status.evidence),
                "complete": "yes" if run.complete else "no",
                "used": "yes" if run.used else "no",
                "failure": f"{failure.stage} · {failure.type}: {failure.message}"
                if failure
                else MISSING,
                "excluded_because": MISSING
                if run.used
                else _text(run.excluded_because, "not recorded in this audit.json"),
            }
        )
    return rows


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
                "condition": _name(names, row.condition),
                "base": names.get(str(row.base_id), _text(row.base_id)),
                "n": f"{format_number(row.n_base)} / {format_number(row.n_cond)}",
                "mean_base": format_number(row.mean_base),
                "mean_cond": format_number(row.mean_cond),
                "diff": format_number(row.diff),
                "ci95": format_interval(row.ci95),
                "d": format_number(row.cohen_d),
                "p": format_p(row.mwu_p),
                "holm": format_p(row.holm_p),
                "significant": verdict.is_significant(row),
                "conclusion": _text(row.conclusion, "untested" if not row.tested else MISSING),
                "paired": row.paired,
                "decisive_p": format_p(row.p),
                "family_p": format_p(row.family_p),
                "equivalence_p": format_p(row.equivalence_p),
                "interval": format_interval(row.interval95),
                "interval_note": _text(row.interval_note, ""),
                "reason": _text(row.reason, ""),
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
        "metric": _text(effect.metric),
        "condition": _name(names, effect.condition) if effect.condition else None,
    }


_RANKED_BY = {
    "isolated": "isolated effect",
    "anyCell": "any cell (no isolated cell)",
    "mainEffect": "main effect over the grid",
}


def _sensitivity(audit: AuditDoc, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The axes ranked, as `verdict.sensitivity` reads them."""
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


def _direction(audit: AuditDoc, metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.direction_consistency
    axes = [a.id for a in audit.plan.axes]
    return [
        {
            "metric": metric,
            "expected": _text(table[metric].expected),
            "consistent": format_number(table[metric].consistent),
            "total": format_number(table[metric].total),
            "share": format_share(table[metric].share),
            "by_axis": [
                f"{axis} {format_number(table[metric].by_axis[axis].consistent)} of "
                f"{format_number(table[metric].by_axis[axis].total)}"
                for axis in _in_order(axes, table[metric].by_axis)
            ],
        }
        for metric in _in_order(metrics, table)
    ]


def _power(power: PowerSection, metrics: Sequence[str], names: Mapping[str, str]) -> dict[str, Any]:
    """The minimum detectable |d| of each row (audit.json `power`): a column pair per metric,
    one row per condition, and the notes of rows without one."""
    table = power.metrics
    shown = _in_order(metrics, table)
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
        rows.append({"condition": _name(names, condition), "cells": values})
    return {
        "power": f"{100 * power.power:.0f}%",
        "alpha_family": _short_number(power.alpha_family),
        "method": _text(power.method, ""),
        "metrics": shown,
        "rows": rows,
        "notes": notes,
    }


def _noise_floor(
    audit: AuditDoc, metrics: Sequence[str], names: Mapping[str, str]
) -> list[dict[str, Any]]:
    """How often each base differs from itself (audit.json `noiseFloor`), per metric."""
    table = audit.noise_floor
    return [
        {
            "metric": metric,
            "base": _name(names, row.base),
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
            "note": _text(row.note, ""),
        }
        for metric in _in_order(metrics, table)
        for row in table[metric]
    ]


def _cross_model(audit: AuditDoc, metrics: Sequence[str]) -> list[dict[str, Any]]:
    table = audit.cross_model
    models = audit.plan.models
    return [
        {"model": model, "means": [format_number(table[model].get(m)) for m in metrics]}
        for model in _in_order(models, table)
    ]


def _distribution_effects(
    audit: AuditDoc, metrics: Sequence[str], names: Mapping[str, str]
) -> dict[str, Any]:
    """W1 and Cliff's delta: one row per condition, a column pair per metric that has tests."""
    tests = audit.tests
    tested = [m for m in _in_order(metrics, tests) if _has_test(tests[m])]
    untested = [
        (m, _text(audit.notes.get(m), "no test"))
        for m in _in_order(metrics, tests)
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
        rows.append({"condition": _name(names, condition), "cells": values})
    return {"metrics": tested, "rows": rows, "untested": untested}


def _distributions(
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
            note = _text(row.note, "")
            if note and note not in notes:
                notes.append(note)
            rows.append(
                {
                    "condition": _name(names, row.condition),
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


def _tests(
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
                "note": _text(audit.notes.get(metric), ""),
                "methods": [
                    f"{name}: {n} row{'s' if n != 1 else ''}" for name, n in methods.items()
                ],
                "pairings": pairings,
                "family": _text(rows[0].family if rows else None, ""),
                "rows": shown,
                "row_notes": any(r["note"] or r["small_spread"] for r in shown),
                "figure": by_kind.get(("effects", metric), "") if drawn else "",
            }
        )
    return out


def _user_quality(
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
                "condition": _name(names, row.condition),
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
    return {"rows": rows, "note": _text(section.note, "")}


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


def _testbed(table: TestbedSection | None, names: Mapping[str, str]) -> dict[str, Any] | None:
    """The agent-testbed tables (only for audits whose runs carry evaluations): per criterion,
    each condition's verdict counts, validity exclusions and its zero-violation bound. The totals
    over conditions are counts only: no bound is shown for them."""
    if table is None:
        return None
    out = []
    for criterion in table.criteria:
        rows = [
            {
                "condition": _name(names, cond.condition),
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
        "note": _text(table.note, ""),
        "totals_note": _text(table.totals_note, ""),
        "evaluators": [
            {
                "evaluator": f"{_text(e.name, '?')}@{_text(e.version, '?')}",
                "sha256": _text(e.sha256, MISSING),
                "spec": f"{_text(e.spec.name, '?')}@{_text(e.spec.version, '?')}",
                "spec_sha256": _text(e.spec.sha256, MISSING),
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


# --------------------------------------------------------------------------- rendering


def _small_spread(audit: AuditDoc, names: Mapping[str, str]) -> dict[str, Any] | None:
    """The tested comparisons whose |d| comes from near-zero spread, the first few named."""
    rows = [
        f"{metric} · {names.get(row.condition, row.condition)}"
        for metric, row in verdict.small_spread_rows(audit)
    ]
    if not rows:
        return None
    return {
        "count": len(rows),
        "named": rows[:SMALL_SPREAD_NAMED],
        "more": rows[SMALL_SPREAD_NAMED:],
    }


def _verdict_details(details: Sequence[MetricVerdict]) -> list[dict[str, Any]]:
    """The small table under the headline: per metric, how many rows each conclusion took."""
    return [
        {
            "metric": _text(detail.metric),
            "family": _text(detail.family, MISSING),
            "tested": format_number(detail.tested),
            "moved": len(detail.moved),
            "unchanged": len(detail.unchanged),
            "inconclusive": len(detail.inconclusive),
            "untested": len(detail.untested),
            "largest": format_number(detail.largest.diff) if detail.largest else MISSING,
            "detectable": format_number(detail.detectable),
            "margin": format_number(detail.margin)
            if detail.margin is not None
            else (
                f"none (suggested {format_number(detail.suggested_margin)})"
                if detail.suggested_margin is not None
                else "none"
            ),
        }
        for detail in details
    ]


def _figure_markup(svgs: Mapping[str, str]) -> dict[str, Markup]:
    """Each generated SVG inlined, its ids prefixed by its position so figures never share one."""
    markup: dict[str, Markup] = {}
    for index, (filename, svg) in enumerate(svgs.items()):
        # Our own matplotlib output: text is drawn as paths and the <title> is escaped.
        markup[filename] = Markup(figures.inline(svg, id_prefix=f"fig{index}"))
    return markup


def context(
    audit: AuditDoc, svgs: Mapping[str, str], changes: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Everything the template shows, as display strings (and figure markup) in page order.
    `changes` is what moved since the previous build of the audit (`history.diff_audits`)."""
    plan = audit.plan
    metrics = audit.metrics
    figure_names = naming.figure_names(audit)
    markup = _figure_markup(svgs)
    by_kind: dict[tuple[str, str], Markup] = {
        key: markup[filename] for filename, key in figure_names.items() if filename in markup
    }
    grade = audit.grade
    cost = audit.cost
    names = naming.condition_names(audit)
    return {
        "title": _text(plan.title or plan.id, "untitled audit"),
        "stamp": naming.audit_fingerprint(audit),
        "verdict": verdict.stated_headline(audit),
        "verdict_details": _verdict_details(audit.verdict.details),
        "decisions": verdict.decisions(audit),
        "purpose": _purpose(audit.purpose),
        "changes": Markup(history.diff_html(changes, level=3)) if changes is not None else None,
        "small_spread": _small_spread(audit, names),
        "plan_id": _text(plan.id),
        "plan_hash": _text(plan.hash),
        "version": __version__,
        "audit_version": _text(audit.software.simreport),
        "schema_version": _text(audit.schema_version),
        "summary": _plan_summary(audit),
        "grade": {
            "grade": _text(grade.grade, "unknown"),
            "reasons": list(grade.reasons),
            "rule": _text(grade.rule, ""),
            "achieved": _text(grade.achieved, ""),
            "achieved_reasons": list(grade.achieved_reasons),
        },
        "axes": _axes(audit),
        "metrics": metrics,
        "conditions": _conditions(audit, metrics, names),
        "problem_runs": _problem_runs(audit, names),
        "has_models": any(c.model is not None for c in audit.conditions),
        "several_bases": sum(1 for c in audit.conditions if c.is_base) > 1,
        "tests": _tests(audit, metrics, by_kind, names),
        "power": _power(audit.power, metrics, names),
        "noise_floor": _noise_floor(audit, metrics, names),
        "sensitivity": _sensitivity(audit, names),
        "small_spread_note": SMALL_SPREAD_NOTE,
        "isolated_caption": ISOLATED_CAPTION,
        "any_cell_caption": ANY_CELL_CAPTION,
        "sensitivity_figure": by_kind.get(("sensitivity", ""), ""),
        "factorial": main_effects_section(
            audit,
            {name: fig for (kind, name), fig in by_kind.items() if kind == "mainEffects"},
        ),
        "direction": _direction(audit, metrics),
        "cross_model": _cross_model(audit, metrics),
        "distribution_effects": _distribution_effects(audit, metrics, names),
        "distributions": _distributions(
            audit,
            {name: fig for (kind, name), fig in by_kind.items() if kind == "distribution"},
            names,
        ),
        "integrity": [(k, format_number(v)) for k, v in sorted(audit.integrity.items())],
        "testbed": _testbed(audit.testbed, names),
        "user_quality": _user_quality(audit.user_quality, names),
        "cost": [
            ("LLM calls", format_number(cost.llm_calls)),
            ("Prompt tokens", format_number(cost.prompt_tokens)),
            ("Completion tokens", format_number(cost.completion_tokens)),
            ("Bytes of records stored", format_number(cost.record_bytes)),
        ],
        "cost_split": _cost_split(cost, names),
        "coverage": _coverage(audit.coverage, names),
    }


def _coverage(coverage: CoverageSection | None, names: Mapping[str, str]) -> dict[str, Any] | None:
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
_SIDE_COLUMNS: tuple[tuple[str, Callable[[SideTotals], int]], ...] = (
    ("calls", lambda side: side.llm_calls),
    ("tokens", lambda side: side.prompt_tokens + side.completion_tokens),
    ("logical", lambda side: side.logical_ms),
)
"""The columns the per-condition cost table shows for each side, and how each is counted."""


def _segment_rank(name: str) -> tuple[int, str]:
    """The SUT first, then the simulation's segments in the order of SEGMENT_LABELS."""
    order = list(SEGMENT_LABELS)
    return (order.index(name) if name in order else len(order), name)


def _side_cells(sides: Mapping[str, SideTotals]) -> dict[str, str]:
    """A condition's cost columns for the SUT and the simulation (0 for a side it lacks)."""
    return {
        f"{key}_{field}": format_number(count(sides[which]) if which in sides else 0)
        for key, which in (("sut", "sut"), ("sim", "simulation"))
        for field, count in _SIDE_COLUMNS
    }


def _cost_split(cost: CostSection, names: Mapping[str, str]) -> dict[str, Any]:
    """audit.json `cost` split by segment and per condition."""
    rows = [
        {
            "segment": SEGMENT_LABELS.get(name, name),
            "side": SIDE_LABELS.get(seg.side, _text(seg.side)),
            "calls": format_number(seg.llm_calls),
            "prompt": format_number(seg.prompt_tokens),
            "completion": format_number(seg.completion_tokens),
            "operations": format_number(seg.operations),
            "logical": format_number(seg.logical_ms),
        }
        for name, seg in sorted(cost.segments.items(), key=lambda item: _segment_rank(item[0]))
    ]
    conditions = [
        {
            "condition": _name(names, row.condition),
            "runs": format_number(row.runs),
            "bytes": format_number(row.record_bytes),
            **_side_cells(row.sides),
        }
        for row in cost.conditions
    ]
    return {
        "segments": rows,
        "conditions": conditions,
        "unattributed": format_number(cost.unattributed_runs),
        "note": COST_NOTE,
    }


def _purpose(section: PurposeSection) -> dict[str, Any]:
    """What the report says about why the runs were made (audit.json `purpose`)."""
    return {
        "purpose": _text(section.purpose, "exploration"),
        "exploration_runs": section.exploration_runs,
        "not_online": [
            f"{_text(v.name)}@{_text(v.version)} ({_text(v.status)})" for v in section.not_online
        ],
    }


def _render(
    audit: AuditDoc, svgs: Mapping[str, str], changes: Mapping[str, Any] | None = None
) -> str:
    return environment().get_template(TEMPLATE).render(context(audit, svgs, changes))


def render_report(audit: AuditDoc | Mapping[str, Any]) -> str:
    """report.html for an audit (an `AuditDoc`, the mapping `analyse` returns, or audit.json read
    back); a mapping is checked against the model first (`document.audit_document`)."""
    doc = audit_document(audit)
    return _render(doc, figures.figure_files(doc))


def write_report(audit_dir: str | Path, *, draw_figures: bool = True) -> Path:
    """Read `audit_dir/audit.json`; write `figures/*.svg` and `report.html` there (atomically).
    Figures this module wrote earlier that the audit no longer has are removed.

    Args:
        audit_dir: an analysed audit directory; report.html's section of changes also reads
            the build kept in its `history/`.
        draw_figures: False inlines the figures already in `figures/` (drawn by the workflow's
            figure job from the same audit.json) as they are, drawing only those missing.

    Returns:
        The path of report.html.

    Raises:
        InputError: audit.json is missing, not an audit, or of an older schema.
        SchemaError: audit.json breaks its contract (a key renamed or missing).
    """
    root = Path(audit_dir)
    audit = read_audit_document(root / "audit.json")
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
    changes = history.changes_since_previous(root, audit.to_doc())
    write_atomic(report, _render(audit, svgs, changes))
    return report
