"""SVG figures of an audit (sensitivity ranking, effects against the base, distributions against
the target), drawn from audit.json alone and byte-identical for the same input.

Text is drawn as paths (no font dependency), ids are salted with a fixed string, and no date or
version goes into the file, so a figure changes only when the numbers it shows change.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
import threading
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import matplotlib

matplotlib.use("Agg")

from matplotlib import rc_context
from matplotlib.figure import Figure

from ..analysis.audit_document import AuditDoc, ComparisonRow, MainEffectRow
from ..core.canonical import canonical_json, parse_number
from ..core.files import visible_control_characters
from .naming import condition_names, figure_names
from .verdict import Effect, Sensitivity, as_float, identical_ids, sensitivity

# matplotlib's rc settings are process-global: figures drawn in threads (Snakemake runs jobs in
# threads locally) must take turns, or one figure's settings leak into another's bytes.
_DRAWING = threading.Lock()

FIGURE_WIDTH_IN = 7.5
ROW_HEIGHT_IN = 0.34
MIN_HEIGHT_IN = 2.2
DISTRIBUTION_COLUMNS = 3
LABEL_CHARS = 38
LINE_CHARS = 95  # a heading across the whole figure, in characters a line
AXES_RIGHT = 0.96  # where a row figure's axes end, as a share of its width
LABEL_BREAKS = " |=@·,_-/"
LINE_GROWTH = 0.6  # a row's height grows by this share of a row for each extra label line
CHAR_WIDTH_IN = 0.072  # mean width of a DejaVu Sans character at the 9 pt tick label size
EMPTY_MESSAGE_CHARS = 90
INF_LABEL = "inf"
FLOAT_RESIDUE = 1e-12

_RC: dict[Any, Any] = {  # keys are rcParams names (matplotlib types them as Literals)
    "svg.hashsalt": "simreport",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "hatch.linewidth": 0.8,
    "path.simplify": False,
}
_METADATA: dict[str, Any] = {"Date": None, "Creator": "simreport"}

# Okabe–Ito blue for conditions, neutral grey for bases, near-black for the target.
_BASE_COLOUR = "#7f7f7f"
_TARGET_COLOUR = "#222222"
_BAR_COLOUR = "#0072B2"
_ANY_CELL_COLOUR = "#E69F00"
_MAIN_EFFECT_COLOUR = "#009E73"

_PROLOG = re.compile(r"\A\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?", re.IGNORECASE)
_METADATA_BLOCK = re.compile(r"\s*<metadata>.*?</metadata>", re.DOTALL)
_COMMENT = re.compile(r"\s*<!--.*?-->", re.DOTALL)
_XMLNS = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')
_ID = re.compile(r'\bid="([^"]+)"')
_HREF = re.compile(r'(?:xlink:)?href="#([^"]+)"')
_URL_REF = re.compile(r"url\(#([^)]+)\)")


# --------------------------------------------------------------------------- numbers


def format_number(value: Any, missing: str = "–") -> str:
    """A number for people: three decimals, scientific below 0.0005, whole numbers as they are,
    `inf`/`−inf`/`nan` for the non-finite values, a typographic minus, and `missing` for None.
    Magnitudes below 1e-12 are floating-point residue (a mean difference of 4.4e-16 between equal
    samples) and show as 0."""
    x = as_float(value)
    if x is None:
        return missing
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return INF_LABEL if x > 0 else "−" + INF_LABEL
    if abs(x) < FLOAT_RESIDUE:
        x = 0.0
    if isinstance(parse_number(value), int):
        # Whole numbers of five digits or more are grouped in threes by a narrow space (SI).
        text = f"{int(x):,d}".replace(",", "\u202f") if abs(x) >= 10_000 else f"{int(x):d}"
    elif x != 0 and (abs(x) < 0.0005 or abs(x) >= 1e9):
        text = f"{x:.2e}"
    else:
        text = f"{x:.3f}"
    return text.replace("-", "−")


def _text(text: str) -> str:
    """A plan string as matplotlib text: `$` escaped so it is never read as mathtext, control
    characters shown as visible symbols."""
    return visible_control_characters(text).replace("$", r"\$")


def _label(text: Any, suffix: str = "", chars: int = LABEL_CHARS) -> str:
    """A plan string as a matplotlib label, broken into lines of at most `chars` characters
    (after a separator where one is near). No character is dropped, so two different names never
    read alike, however long their common prefix."""
    rest = visible_control_characters((text if isinstance(text, str) else str(text)) + suffix)
    lines = []
    while len(rest) > chars:
        cut = max((rest.rfind(c, chars // 2, chars) for c in LABEL_BREAKS), default=-1)
        cut = cut + 1 if cut > 0 else chars
        lines.append(rest[:cut])
        rest = rest[cut:]
    lines.append(rest)
    return _text("\n".join(lines))


def _noted(label: str, note: str | None) -> str:
    """A row's label with its note (why the row has no estimate) as lines of its own under it:
    drawn in the plot, a note could run past the figure's edge and be cut."""
    return label if not note else f"{label}\n{_label(f'({note})')}"


def _lines(labels: Sequence[str]) -> int:
    return max((label.count("\n") + 1 for label in labels), default=1)


# --------------------------------------------------------------------------- SVG plumbing


def _save(fig: Figure, title: str) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata=dict(_METADATA))
    return _with_title(buffer.getvalue(), title)


def _with_title(svg: str, title: str) -> str:
    """Make `<title>` the first child of the root `<svg>` element (escaped), for screen readers."""
    start = svg.find("<svg")
    end = svg.find(">", start) + 1
    if start < 0 or end <= 0:
        raise ValueError("not an SVG document")
    head, rest = svg[:end], svg[end:]
    if rest.lstrip().startswith("<title>"):
        return svg
    if "role=" not in head:
        head = head[:-1] + ' role="img">'
    shown = escape(visible_control_characters(title), quote=False)
    return f"{head}\n <title>{shown}</title>{rest}"


def inline(svg: str, id_prefix: str | None = None) -> str:
    """The SVG as an element to embed in HTML: no XML prolog or doctype, no RDF metadata, no
    comments, no namespace declarations (HTML supplies them), `href` instead of `xlink:href`,
    and, with `id_prefix`, every id (and reference to it) prefixed so several figures can share
    one page without duplicate ids."""
    out = _PROLOG.sub("", svg, count=1)
    out = _METADATA_BLOCK.sub("", out)
    out = _COMMENT.sub("", out)
    out = _XMLNS.sub("", out)
    out = _HREF.sub(lambda m: f'href="#{m.group(1)}"', out)
    if id_prefix:
        out = _ID.sub(lambda m: f'id="{id_prefix}-{m.group(1)}"', out)
        out = _HREF.sub(lambda m: f'href="#{id_prefix}-{m.group(1)}"', out)
        out = _URL_REF.sub(lambda m: f"url(#{id_prefix}-{m.group(1)})", out)
    return out.strip() + "\n"


def _new_figure(height: float) -> Figure:
    return Figure(figsize=(FIGURE_WIDTH_IN, max(MIN_HEIGHT_IN, height)), layout="constrained")


def _row_figure(
    rows: int,
    labels: Sequence[str],
    extra_height: float,
    top_in: float = 0.45,
    bottom_in: float = 0.6,
) -> Figure:
    """A one-axes figure of labelled rows with margins computed from its labels.

    Constrained layout would find the same margins by drawing the figure once more; for reports
    with many conditions that extra draw is most of the rendering time.
    """
    row_height = ROW_HEIGHT_IN * (1 + LINE_GROWTH * (_lines(labels) - 1))
    height = max(MIN_HEIGHT_IN, extra_height + row_height * rows)
    fig = Figure(figsize=(FIGURE_WIDTH_IN, height))
    fig.subplots_adjust(
        left=_left(labels), right=AXES_RIGHT, top=1 - top_in / height, bottom=bottom_in / height
    )
    return fig


def _left(labels: Sequence[str]) -> float:
    """Where a row figure's axes start (a share of its width): past its longest label line."""
    longest = max((len(line) for label in labels for line in label.split("\n")), default=0)
    return min(0.6, (0.25 + CHAR_WIDTH_IN * longest) / FIGURE_WIDTH_IN)


def _axes_chars(labels: Sequence[str]) -> int:
    """How many characters of a heading or axis label fit across a row figure's axes (a title
    is set a size larger than the tick labels CHAR_WIDTH_IN measures)."""
    width = (AXES_RIGHT - _left(labels)) * FIGURE_WIDTH_IN
    return max(LABEL_CHARS // 2, int(width / (CHAR_WIDTH_IN * 1.15)))


def _empty(title: str, message: str) -> str:
    fig = _new_figure(MIN_HEIGHT_IN)
    ax = fig.add_subplot()
    ax.set_axis_off()
    wrapped = textwrap.fill(message, width=EMPTY_MESSAGE_CHARS)
    ax.text(0.5, 0.5, _text(wrapped), ha="center", va="center", color="#555555")
    return _save(fig, title)


# --------------------------------------------------------------------------- figures


ISOLATED_CAPTION = "isolated effect: largest |d| where only this axis differs from the base"
ANY_CELL_CAPTION = "largest |d| in any cell where this axis is away from its base level"


def _axis_label(entry: Sensitivity) -> str:
    rank = f"{entry.rank}. " if entry.rank is not None else "unranked: "
    return _label(f"{rank}{entry.code} · {entry.axis}" if entry.code else f"{rank}{entry.axis}")


def sensitivity_svg(audit: AuditDoc) -> str:
    """Two bars per axis, ranked axes first: the isolated effect (only this axis differs from the
    base) and the largest |d| in any cell that moves the axis. An infinite d is a hatched bar
    capped past the largest finite one and labelled `inf`; an unranked axis says so."""
    title = (
        "Sensitivity by axis: the isolated effect (largest |Cohen d| where only this axis "
        "differs from the base) and the largest |Cohen d| in any cell that moves the axis"
    )
    entries = sensitivity(audit)
    factorial = any(e.main_effect is not None for e in entries)
    if factorial:
        title += "; axes ranked by their largest |standardized main effect| over the grid"
    with _DRAWING, rc_context(_RC):
        if not entries:
            return _empty(title, "The plan has no perturbation axes.")
        measures = [
            (e.isolated, e.any_cell, *((e.main_effect,) if factorial else ())) for e in entries
        ]
        finite = [
            m.max_abs_d
            for pair in measures
            for m in pair
            if m is not None and math.isfinite(m.max_abs_d)
        ]
        top = max(finite, default=0.0)
        cap = top * 1.25 if top > 0 else 1.0
        labels = [_axis_label(e) for e in entries]
        fig = _row_figure(len(entries), labels, 1.3, top_in=0.65)
        ax = fig.add_subplot()
        ys = list(range(len(entries)))
        styles: tuple[tuple[float, str, str], ...] = (
            (-0.19, _BAR_COLOUR, "isolated: only this axis differs from the base"),
            (0.19, _ANY_CELL_COLOUR, "any cell where this axis is away from its base level"),
        )
        height = 0.36
        if factorial:
            # Three bars a row: the main effect the axes are ranked by, then the cell measures.
            styles = (
                (-0.26, _MAIN_EFFECT_COLOUR, "main effect over the grid (|standardized|)"),
                (0.0, _BAR_COLOUR, styles[0][2]),
                (0.26, _ANY_CELL_COLOUR, styles[1][2]),
            )
            measures = [(m[2], m[0], m[1]) for m in measures]
            height = 0.24
        any_bar = False
        for (offset, colour, legend), column in zip(
            styles, zip(*measures, strict=True), strict=True
        ):
            drawn = False
            for y, measure in zip(ys, column, strict=True):
                drawn |= _sensitivity_bar(
                    ax, y + offset, measure, cap, (colour, legend, height), drawn
                )
            any_bar |= drawn
        for y, entry in zip(ys, entries, strict=True):
            if entry.isolated is None and entry.any_cell is None and entry.main_effect is None:
                ax.text(0, y, "  no effect size", va="center", ha="left", color="#555555")
        ax.set_yticks(ys, labels)
        ax.set_ylim(len(entries) - 0.5, -0.5)
        ax.set_xlim(0, cap * 1.18)
        ax.set_xlabel(
            "largest |Cohen d| (main effect: |standardized difference|)"
            if factorial
            else "largest |Cohen d|"
        )
        if any_bar:
            ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), fontsize=8, frameon=False)
        return _save(fig, title)


def _sensitivity_bar(
    ax: Any,
    y: float,
    measure: Effect | None,
    cap: float,
    style: tuple[str, str, float],
    drawn: bool,
) -> bool:
    """One measure's bar (labelled once for the legend); False when there is none to draw.
    `style` is the bar's colour, legend text and height."""
    if measure is None:
        return False
    colour, legend, height = style
    infinite = math.isinf(measure.max_abs_d)
    width = cap if infinite else measure.max_abs_d
    ax.barh(
        y,
        width,
        height=height,
        color="white" if infinite else colour,
        edgecolor=colour,
        hatch="///" if infinite else None,
        label=None if drawn else legend,
    )
    text = INF_LABEL if infinite else format_number(measure.max_abs_d)
    ax.text(width, y, f" {text}", va="center", ha="left", fontsize=8)
    return True


def effects_svg(audit: AuditDoc, metric: str) -> str:
    """Each condition's mean difference from its base for `metric` (condition − base), with the
    bootstrap 95% interval as a horizontal bar and a line at zero; conditions in plan order."""
    title = f"Effects on {metric}: difference from the base with 95% bootstrap intervals"
    rows = audit.tests.get(metric, [])
    identical = identical_ids(audit)
    with _DRAWING, rc_context(_RC):
        if all(r.diff is None for r in rows):
            note = audit.notes.get(metric) or "no condition has an estimate"
            return _empty(title, f"No effects to show for {metric}: {note}.")
        names = condition_names(audit)
        missing = [
            "not tested: identical to the base" if row.condition in identical else "no estimate"
            for row in rows
        ]
        return _interval_figure(
            (title, f"Effects on {metric}", f"difference in mean {metric} (condition − base)"),
            rows,
            [_label(names.get(r.condition, r.condition)) for r in rows],
            missing,
        )


def _interval_figure(
    texts: tuple[str, str, str],
    rows: Sequence[ComparisonRow | MainEffectRow],
    labels: Sequence[str],
    missing: Sequence[str],
) -> str:
    """One labelled row per estimate: its `diff` as a point, its `ci95` as a horizontal bar, a
    line at zero; a row without a finite difference has its `missing` text as a note under its
    label. `texts` are the SVG title, the axes' heading and the x label (each wrapped to the
    figure's width). Call it holding the drawing lock."""
    title, heading, xlabel = texts
    noted = [
        _noted(label, None if row.diff is not None and math.isfinite(row.diff) else why)
        for label, row, why in zip(labels, rows, missing, strict=True)
    ]
    chars = _axes_chars(noted)
    heading, xlabel = _label(heading, chars=chars), _label(xlabel, chars=chars)
    extra = 0.18 * (_lines([heading]) - 1 + _lines([xlabel]) - 1)
    fig = _row_figure(
        len(rows),
        noted,
        1.0 + extra,
        top_in=0.45 + 0.18 * (_lines([heading]) - 1),
        bottom_in=0.6 + 0.18 * (_lines([xlabel]) - 1),
    )
    ax = fig.add_subplot()
    ys = list(range(len(rows)))
    ax.axvline(0.0, color="#444444", linewidth=0.9, zorder=1)
    for y, row in zip(ys, rows, strict=True):
        diff = row.diff
        lo, hi = row.ci95 if row.ci95 else (None, None)
        if lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi):
            ax.hlines(y, lo, hi, color=_BAR_COLOUR, linewidth=1.6, zorder=2)
            ax.plot([lo, hi], [y, y], "|", color=_BAR_COLOUR, markersize=8, zorder=2)
        if diff is not None and math.isfinite(diff):
            ax.plot([diff], [y], "o", color=_BAR_COLOUR, markersize=5, zorder=3)
    ax.set_yticks(ys, noted)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.margins(x=0.12)
    ax.set_xlabel(xlabel)
    ax.set_title(heading, loc="left")
    return _save(fig, title)


def level_contrast(
    axis: str, level: Any, reference: Any, axis_labels: Mapping[str, Mapping[str, str]]
) -> str:
    """`<axis>: <level> vs <reference>`, with the axis's label and its level labels where the
    plan gives them."""
    labels = axis_labels.get(axis) or {}
    name = labels.get("", axis)

    def shown(value: Any) -> str:
        text = value if isinstance(value, str) else canonical_json(value)
        return labels.get(text, text)

    return f"{name}: {shown(level)} vs {shown(reference)}"


def at_model(text: str, model: str | None) -> str:
    """`text @ <model>` for an estimate over one model's grid (models vary), else `text`."""
    return text if model is None else f"{text} @ {model}"


def main_effect_label(row: MainEffectRow, axis_labels: Mapping[str, Mapping[str, str]]) -> str:
    """How a main-effect row is named: `<axis>: <level> vs <reference>` (`level_contrast`), and
    `@ <model>` when the plan lists models."""
    return at_model(level_contrast(row.axis, row.level, row.reference, axis_labels), row.model)


def axis_labels(audit: AuditDoc) -> dict[str, dict[str, str]]:
    """Axis id → its display names: "" → the axis's label (its id without one), each level's
    text → its label."""
    return {axis.id: {**axis.labels, "": axis.label or axis.id} for axis in audit.plan.axes}


def main_effects_svg(audit: AuditDoc, metric: str) -> str:
    """Each axis's main effect on `metric` per non-reference level (the mean of the cell means at
    that level minus that at the reference level), with its bootstrap 95% interval and a line
    at zero; axes in plan order, per model."""
    title = f"Main effects on {metric}: marginal differences with 95% bootstrap intervals"
    rows = (audit.main_effects or {}).get(metric, [])
    with _DRAWING, rc_context(_RC):
        if all(r.diff is None for r in rows):
            return _empty(title, f"No main effects to show for {metric}.")
        names = axis_labels(audit)
        labels = [_label(main_effect_label(r, names)) for r in rows]
        return _interval_figure(
            (
                title,
                f"Main effects on {metric}",
                f"difference in mean {metric} (level − reference, over the grid)",
            ),
            rows,
            labels,
            ["not estimated: a cell has no usable value"] * len(rows),
        )


def target_of(audit: AuditDoc, name: str) -> dict[str, float]:
    """The plan's target distribution `name`, normalised to proportions, its categories in the
    order the plan wrote them (`distributionCategories`; sorted when an audit lacks it)."""
    hypothesis = audit.plan.hypothesis
    targets = (hypothesis.target_distribution if hypothesis is not None else None) or {}
    weights = dict(targets.get(name, {}))
    total = sum(w for w in weights.values() if math.isfinite(w))
    declared = audit.distribution_categories.get(name, [])
    order = [c for c in declared if c in weights] + sorted(set(weights) - set(declared))
    return {k: (weights[k] / total if total > 0 else 0.0) for k in order}


def proportions(counts: Mapping[str, Any], categories: Sequence[str]) -> list[float] | None:
    """Pooled counts as proportions over `categories` (None when there are none)."""
    values = [as_float(counts.get(c)) or 0.0 for c in categories]
    total = sum(values)
    if total <= 0:
        return None
    return [v / total for v in values]


def distribution_svg(audit: AuditDoc, name: str) -> str:
    """One panel per target category, each with a bar per condition (bases grey) and the target
    (hatched, and as a dashed line): the pooled proportions over the target's categories."""
    title = f"Distribution {name}: pooled proportions of each condition against the target"
    rows = audit.distribution.get(name, [])
    target = target_of(audit, name)
    categories = list(target)
    bases = {c.id for c in audit.conditions if c.is_base}
    with _DRAWING, rc_context(_RC):
        if not categories:
            return _empty(title, f"No target categories for {name}.")
        names = condition_names(audit)
        labels: list[str] = []
        shares: list[list[float] | None] = []
        for row in rows:
            values = proportions(row.counts, categories)
            suffix = "" if values is not None else " (no observations)"
            labels.append(_label(names.get(row.condition, row.condition), suffix))
            shares.append(values)
        labels.append("target")
        n_cols = min(len(categories), DISTRIBUTION_COLUMNS)
        n_rows = math.ceil(len(categories) / n_cols)
        panel = 0.55 + 0.22 * len(labels) * (1 + LINE_GROWTH * (_lines(labels) - 1))
        fig = _new_figure(0.4 + panel * n_rows)
        axes = fig.subplots(n_rows, n_cols, sharey=True, squeeze=False)
        ys = list(range(len(labels)))
        for k, ax in enumerate(axes.flat):
            if k >= len(categories):
                ax.set_axis_off()
                continue
            category = categories[k]
            for y, row, values in zip(ys, rows, shares, strict=False):
                if values is None:
                    continue
                base = row.condition in bases
                ax.barh(y, values[k], height=0.7, color=_BASE_COLOUR if base else _BAR_COLOUR)
            ax.barh(
                ys[-1],
                target[category],
                height=0.7,
                color="white",
                edgecolor=_TARGET_COLOUR,
                hatch="xxx",
                linewidth=0.8,
            )
            ax.axvline(target[category], color=_TARGET_COLOUR, linestyle="--", linewidth=0.8)
            ax.set_xlim(0, 1)
            ax.set_xticks([0, 0.5, 1], ["0", "0.5", "1"])
            ax.set_title(_label(category, chars=LABEL_CHARS // n_cols + 6), fontsize=9)
            ax.set_yticks(ys, labels)
            ax.tick_params(axis="y", length=0)
        axes[0][0].invert_yaxis()
        fig.suptitle(
            _label(f"Distribution {name}: share of each category", chars=LINE_CHARS),
            x=0.01,
            ha="left",
            fontsize=10,
        )
        fig.supxlabel("proportion (grey: base; dashed: target)", fontsize=8.5)
        return _save(fig, title)


# --------------------------------------------------------------------------- files


def draw(audit: AuditDoc, kind: str, name: str) -> str:
    """One figure, named as `figure_names` names it: (kind, name) → standalone SVG document."""
    if kind == "sensitivity":
        return sensitivity_svg(audit)
    if kind == "effects":
        return effects_svg(audit, name)
    if kind == "mainEffects":
        return main_effects_svg(audit, name)
    return distribution_svg(audit, name)


def figure_files(audit: AuditDoc) -> dict[str, str]:
    """Every figure of an audit, drawn.

    Args:
        audit: the audit (`document.read_audit_document`).

    Returns:
        Filename → standalone SVG document, in report order.
    """
    return {
        filename: draw(audit, kind, name) for filename, (kind, name) in figure_names(audit).items()
    }
