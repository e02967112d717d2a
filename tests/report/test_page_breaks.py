"""Pages that never cut a word: identifiers break only at `<wbr>` points, inserted after
escaping; no style breaks a word anywhere; the versions an exploration used fold under a
count; purpose is said only when it matters; a figure's notes never run past its edge."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from markupsafe import Markup
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from simreport.analysis.audit_document import AuditDoc
from simreport.report import figures, render_report
from simreport.report.site import render_index, site_entry
from simreport.report.templating import break_points

# --------------------------------------------------------------------------- break points


@pytest.mark.parametrize(
    ("text", "marked"),
    [
        ("order_number_disclosure", "order_<wbr>number_<wbr>disclosure"),
        (
            "feed=engagement|environment_structure=0.95",
            "feed=<wbr>engagement|<wbr>environment_<wbr>structure=<wbr>0.95",
        ),
        ("events.triggers.0.position", "events.<wbr>triggers.0.<wbr>position"),
        ("refund-prompt@1.1.0", "refund-prompt@<wbr>1.1.0"),
        ("env/ecom-seed", "env/<wbr>ecom-seed"),
        ("0.95", "0.95"),  # a decimal point is not a break
        ("trailing_", "trailing_"),  # nothing to break before
        ("", ""),
    ],
)
def test_identifiers_get_break_points_after_separators(text: str, marked: str) -> None:
    assert break_points(text) == Markup(marked)


def test_break_points_are_inserted_after_escaping() -> None:
    shown = str(break_points('<script>a_b</script> & "q"'))
    assert shown == "&lt;script&gt;a_<wbr>b&lt;/<wbr>script&gt; &amp; &#34;q&#34;"
    assert "<script" not in shown
    assert str(break_points(3)) == "3"
    ours = Markup("<em>a_b</em>")
    assert break_points(ours) is ours  # markup is left as it is, tags unbroken


def _style(page: str) -> str:
    return page[page.index("<style>") : page.index("</style>")]


def _rules_with(style: str, declaration: str) -> list[str]:
    """The selectors of the rules that carry `declaration`."""
    plain = re.sub(r"/\*.*?\*/", "", style, flags=re.S)
    return [
        selector.strip()
        for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", plain)
        if declaration in body
    ]


def test_no_style_breaks_a_word_except_in_a_hash(audit: dict[str, Any]) -> None:
    report = render_report(audit)
    index = render_index([site_entry(AuditDoc.model_validate(audit))])
    for page in (report, index):
        style = _style(page)
        assert "break-all" not in style and "word-break" not in style
    assert _rules_with(_style(report), "overflow-wrap: anywhere") == ["code.hash, footer.page code"]
    assert _rules_with(_style(index), "overflow-wrap: anywhere") == []
    for page in (report, index):
        cells = _rules_with(_style(page), "overflow-wrap: normal")
        assert cells, "identifier cells must not fall back to breaking inside words"


def test_condition_and_axis_ids_in_tables_break_only_at_their_separators(
    audit: dict[str, Any],
) -> None:
    report = render_report(audit)
    ids = [c["id"] for c in audit["conditions"] if "_" in c["id"]]
    assert ids
    for cid in ids:
        marked = str(break_points(cid))
        assert marked in report, cid
        assert f">{re.escape(cid)}<" not in report  # never printed without its break points
    for axis in audit["plan"]["axes"]:
        assert f'<th scope="row" class="id">{break_points(axis["id"])}</th>' in report


def test_the_index_marks_break_points_in_plan_ids_and_axes(audit: dict[str, Any]) -> None:
    entry = site_entry(AuditDoc.model_validate(audit), "order_number_disclosure")
    index = render_index([entry])
    assert ">order_<wbr>number_<wbr>disclosure</a>" in index
    assert f"world: {break_points(entry['world'])}" in index
    assert str(break_points(entry["topAxis"]["axis"])) in index


# --------------------------------------------------------------------------- purpose


def _not_online(assets: int, scenarios: int) -> list[dict[str, str]]:
    return [
        {"kind": "asset", "name": f"asset-{i}", "status": "reviewed", "version": "1.0.0"}
        for i in range(assets)
    ] + [
        {"kind": "scenario", "name": "desk", "status": "draft", "version": f"1.3.0+d.{i:012x}"}
        for i in range(scenarios)
    ]


def _with_purpose(audit: dict[str, Any], purpose: str, not_online: list[Any]) -> dict[str, Any]:
    edited = copy.deepcopy(audit)
    edited["purpose"] = {"purpose": purpose, "explorationRuns": 0, "notOnline": not_online}
    return edited


def _section(page: str, start: str, end: str) -> str:
    at = page.index(start)
    return page[at : page.index(end, at)]


def test_an_exploration_of_unversioned_scenarios_says_nothing_of_purpose(
    audit: dict[str, Any],
) -> None:
    assert audit["purpose"] == {"explorationRuns": 30, "notOnline": [], "purpose": "exploration"}
    assert 'id="purpose"' not in render_report(audit)


def test_the_versions_an_exploration_used_fold_under_a_count(audit: dict[str, Any]) -> None:
    report = render_report(_with_purpose(audit, "exploration", _not_online(7, 13)))
    purpose = _section(report, '<div id="purpose">', "</div>")
    assert purpose.startswith('<div id="purpose">\n<p><strong>Purpose: exploration.</strong>')
    folded = _section(purpose, '<details class="versions">', "</details>")
    summary = re.search(r"<summary>(.*?)</summary>", folded)
    assert summary is not None
    assert re.match(r"20 versions .*: 7 asset versions, 13 scenario versions$", summary.group(1))
    assert folded.count("<li>") == 20 and "<details open" not in folded
    assert "<li><code>desk@1.3.0+d.00000000000c (draft)</code></li>" in folded
    one = render_report(_with_purpose(audit, "exploration", _not_online(1, 0)))
    assert re.search(r"<summary>1 version .*: 1 asset version</summary>", one)


def test_a_regression_audit_says_so_in_the_report_and_the_index(audit: dict[str, Any]) -> None:
    edited = _with_purpose(audit, "regression", [])
    edited["purpose"]["explorationRuns"] = 2
    report = render_report(edited)
    purpose = _section(report, '<p id="purpose">', "</p>")
    assert purpose.startswith('<p id="purpose"><strong>Purpose: regression.</strong>')
    assert "2 runs" in purpose and "<details" not in purpose
    rows = [
        site_entry(AuditDoc.model_validate(edited), "checked"),
        site_entry(AuditDoc.model_validate(audit), "explored"),
    ]
    assert [row["purpose"] for row in rows] == ["regression", "exploration"]
    index = render_index(rows)
    verdicts = re.findall(r'<tr class="verdict">(.*?)</tr>', index, re.S)
    assert ["Regression check" in v for v in verdicts] == [True, False]


# --------------------------------------------------------------------------- figures


def _texts_outside(fig: Figure) -> list[str]:
    """The texts of `fig` that reach past its edges once drawn: none when everything it draws
    (tick labels, titles, labels, notes, legends) lies within the figure."""
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    width, height = fig.get_size_inches()
    tight = fig.get_tightbbox(renderer)
    tolerance = 0.01  # inches
    if (
        tight.x0 >= -tolerance
        and tight.y0 >= -tolerance
        and tight.x1 <= width + tolerance
        and tight.y1 <= height + tolerance
    ):
        return []
    box = fig.bbox
    named = []
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text():
            extent = text.get_window_extent(renderer)
            if not (box.contains(*extent.min) and box.contains(*extent.max)):
                named.append(text.get_text())
    return named or [f"something drawn at {tight} in a {width} × {height} in figure"]


def _drawn(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Figure, list[str]]]:
    """Every figure saved from now on, with the texts that reach past its edges."""
    drawn: list[tuple[Figure, list[str]]] = []
    save = figures._save

    def checked(fig: Figure, title: str) -> str:
        svg = save(fig, title)
        drawn.append((fig, _texts_outside(fig)))
        return svg

    monkeypatch.setattr(figures, "_save", checked)
    return drawn


def _shifted_left(audit: dict[str, Any], metric: str, long_metric: str) -> dict[str, Any]:
    """Every estimate far below zero, so zero (where a note would start) is the right edge;
    and the metric renamed to a name longer than a figure's line."""
    edited = copy.deepcopy(audit)
    rows = edited["tests"].pop(metric)
    for row in rows:
        if row["diff"] is not None and math.isfinite(row["diff"]):
            row["diff"], row["ci95"] = -5.0, [-6.0, -4.0]
    edited["tests"][long_metric] = rows
    return edited


def test_a_forest_plot_note_is_drawn_whole_inside_the_figure(
    audit: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    metric = next(iter(audit["tests"]))
    long_metric = "averagePayoffPerAgentAndRound_" * 5
    edited = AuditDoc.model_validate(_shifted_left(audit, metric, long_metric))
    identical = [c["id"] for c in audit["conditions"] if c["identicalToBase"]]
    assert identical
    drawn = _drawn(monkeypatch)
    svg = figures.effects_svg(edited, long_metric)
    assert figures.effects_svg(edited, long_metric) == svg  # same input, same bytes
    (fig, outside), _ = drawn
    assert outside == []
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    notes = [label for label in labels if "(not tested: identical to the base)" in label]
    assert len(notes) == len(identical)
    assert all("\n" in label for label in notes)  # the note on a line of its own
    # The axes drew nothing else: no note runs from zero towards the edge.
    assert [t.get_text() for t in fig.axes[0].texts] == []


def test_every_figure_of_an_audit_keeps_its_texts_inside(
    audit: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = _drawn(monkeypatch)
    files = figures.figure_files(AuditDoc.model_validate(audit))
    assert len(drawn) == len(files) > 2
    assert [outside for _, outside in drawn] == [[] for _ in drawn]


def test_the_example_audit_json_has_what_these_tests_edit(audit_dir: Path) -> None:
    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    assert audit["tests"] and audit["plan"]["axes"] and audit["conditions"]
