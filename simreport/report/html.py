"""report.html: one self-contained page per audit, rendered from audit.json (and, for what changed
since the previous build, the audit kept in `history/`).

No scripts, fonts or external resources; every string from the plan or the scenario is
autoescaped; the same audit gives the same bytes. The page reads the audit's model (`AuditDoc`),
so a renamed key fails loudly. The design: docs/report.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ..analysis.audit_document import AuditDoc, MetricVerdict
from ..core.files import write_atomic
from ..core.package_version import __version__
from . import (
    comparison_tables,
    cost_tables,
    figures,
    history,
    naming,
    run_tables,
    testbed_tables,
    verdict,
)
from .cells import MISSING, display_text, format_interval, format_p, format_share
from .document import audit_document, read_audit_document
from .figures import ANY_CELL_CAPTION, ISOLATED_CAPTION, format_number
from .main_effects import main_effects_section
from .templating import environment

__all__ = [
    "FIGURE_DIR",
    "MISSING",
    "TEMPLATE",
    "context",
    "format_interval",
    "format_p",
    "format_share",
    "render_report",
    "write_report",
]

TEMPLATE = "report.html.j2"
FIGURE_DIR = "figures"
SMALL_SPREAD_NOTE = "|d| from near-zero spread: read it with care"
SMALL_SPREAD_NAMED = 5
_FIGURE_PATTERNS = (
    "sensitivity.svg",
    "effects-*.svg",
    "main-effects-*.svg",
    "distribution-*.svg",
)


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
            "metric": display_text(detail.metric),
            "family": display_text(detail.family, MISSING),
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
        "title": display_text(plan.title or plan.id, "untitled audit"),
        "stamp": naming.audit_fingerprint(audit),
        "verdict": verdict.stated_headline(audit),
        "verdict_details": _verdict_details(audit.verdict.details),
        "decisions": verdict.decisions(audit),
        "purpose": run_tables.purpose(audit.purpose),
        "changes": Markup(history.diff_html(changes, level=3)) if changes is not None else None,
        "small_spread": _small_spread(audit, names),
        "plan_id": display_text(plan.id),
        "plan_hash": display_text(plan.hash),
        "version": __version__,
        "audit_version": display_text(audit.software.simreport),
        "schema_version": display_text(audit.schema_version),
        "summary": run_tables.plan_summary(audit),
        "grade": {
            "grade": display_text(grade.grade, "unknown"),
            "reasons": list(grade.reasons),
            "rule": display_text(grade.rule, ""),
            "achieved": display_text(grade.achieved, ""),
            "achieved_reasons": list(grade.achieved_reasons),
        },
        "axes": run_tables.axes(audit),
        "metrics": metrics,
        "conditions": run_tables.conditions(audit, metrics, names),
        "problem_runs": run_tables.problem_runs(audit, names),
        "has_models": any(c.model is not None for c in audit.conditions),
        "several_bases": sum(1 for c in audit.conditions if c.is_base) > 1,
        "tests": comparison_tables.metric_tests(audit, metrics, by_kind, names),
        "power": comparison_tables.power(audit.power, metrics, names),
        "noise_floor": comparison_tables.noise_floor(audit, metrics, names),
        "sensitivity": comparison_tables.sensitivity(audit, names),
        "small_spread_note": SMALL_SPREAD_NOTE,
        "isolated_caption": ISOLATED_CAPTION,
        "any_cell_caption": ANY_CELL_CAPTION,
        "sensitivity_figure": by_kind.get(("sensitivity", ""), ""),
        "factorial": main_effects_section(
            audit,
            {name: fig for (kind, name), fig in by_kind.items() if kind == "mainEffects"},
        ),
        "direction": comparison_tables.direction(audit, metrics),
        "cross_model": comparison_tables.cross_model(audit, metrics),
        "distribution_effects": comparison_tables.distribution_effects(audit, metrics, names),
        "distributions": comparison_tables.distributions(
            audit,
            {name: fig for (kind, name), fig in by_kind.items() if kind == "distribution"},
            names,
        ),
        "integrity": [(k, format_number(v)) for k, v in sorted(audit.integrity.items())],
        "testbed": testbed_tables.testbed(audit.testbed, names),
        "user_quality": testbed_tables.user_quality(audit.user_quality, names),
        "cost": [
            ("LLM calls", format_number(cost.llm_calls)),
            ("Prompt tokens", format_number(cost.prompt_tokens)),
            ("Completion tokens", format_number(cost.completion_tokens)),
            ("Bytes of records stored", format_number(cost.record_bytes)),
        ],
        "cost_split": cost_tables.cost_split(cost, names),
        "coverage": testbed_tables.coverage(audit.coverage, names),
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
