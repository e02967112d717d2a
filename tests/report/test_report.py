"""report.html and its figures: structure, escaping, determinism, and an offline browser render."""

from __future__ import annotations

import copy
import html as html_module
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from simreport.analysis.audit import RunRecord, analyse
from simreport.analysis.audit_document import AuditDoc
from simreport.analysis.stats import UNIFORM_TARGET_NOTE
from simreport.core.canonical import content_hash, pretty_json
from simreport.core.errors import InputError, SchemaError
from simreport.core.files import write_json
from simreport.core.schema import RunResult
from simreport.report import figures, render_report, write_report
from simreport.report.verdict import decisions
from tests.support.audits import with_provenance
from tests.support.browser import needs_chromium, page_width, render

HOSTILE_LEVEL = "<script>alert(1)</script>"
HOSTILE_AXIS = 'size "N" & <more>'
SECTIONS = (
    "Plan summary",
    "Perturbation axes",
    "Conditions",
    "Pairwise tests against the baseline",
    "Sensitivity by axis",
    "Direction consistency and cross-model means",
    "Distribution tests",
    "Integrity and cost",
)

# --------------------------------------------------------------------------- fixture audit


def _plan() -> dict[str, Any]:
    return {
        "id": "pd-framing",
        "title": "Prisoner's dilemma & framing <audit>",
        "baseScenario": "scenario.yaml",
        "base": {
            "name": "prisoners_dilemma",
            "world": "prisoners_dilemma",
            "params": {"framing": "neutral"},
            "population": {"n": 4},
        },
        "axes": [
            {
                "id": "framing",
                "code": "R3",
                "level": "micro",
                "kind": "representation",
                "dimension": "linguistic framing",
                "target": "params.framing",
                "levels": ["moral", HOSTILE_LEVEL],
            },
            {
                "id": HOSTILE_AXIS,
                "code": "D8",
                "level": "macro",
                "kind": "design",
                "dimension": "population scale",
                "target": "population.n",
                "levels": [8, 16],
            },
            {
                "id": "memory",
                "code": "D4",
                "level": "micro",
                "kind": "design",
                "dimension": "memory and temporality",
                "target": "params.memory",
                "levels": [{"window": 3}],
            },
        ],
        "design": "one_at_a_time",
        "replications": 4,
        "models": ["model-b", "model-a"],
        "metrics": ["cooperation", "payoff", "silent"],
        "claimType": "policy",
        "hypothesis": {
            "outcomes": {"cooperation": "increase", "payoff": "decrease"},
            "targetDistribution": {
                "choice": {"defect": 0.3, "cooperate": 0.7},
                "mood": {"calm": 1.0, "angry": 1.0},
            },
        },
        "includeIncomplete": False,
        "hash": "0f3c9a1e" * 8,
    }


def _conditions(plan: dict[str, Any]) -> list[dict[str, Any]]:
    conditions: list[dict[str, Any]] = []
    for model in plan["models"]:
        cid = f"base@{model}"
        conditions.append(
            {
                "id": cid,
                "dir": cid,
                "axis": None,
                "level": None,
                "levels": {},
                "model": model,
                "baseId": cid,
                "isBase": True,
                "identicalToBase": False,
            }
        )
    for axis in plan["axes"]:
        for level in axis["levels"]:
            text = level if isinstance(level, str) else json.dumps(level, separators=(",", ":"))
            for model in plan["models"]:
                conditions.append(
                    {
                        "id": f"{axis['id']}={text}@{model}",
                        "dir": f"d{len(conditions)}",
                        "axis": axis["id"],
                        "level": level,
                        "levels": {axis["id"]: level},
                        "model": model,
                        "baseId": f"base@{model}",
                        "isBase": False,
                        "identicalToBase": axis["id"] == "memory",
                    }
                )
    return conditions


def _result(cid: str, rep: int, index: int, **changes: Any) -> RunResult:
    model_shift = 0.05 if cid.endswith("model-a") else 0.0
    if cid.startswith("base"):
        cooperation = 0.5  # constant: a constant condition against it gives d = ±inf
    elif cid.startswith("framing=moral"):
        cooperation = 0.7
    else:
        cooperation = 0.4 + 0.03 * rep + 0.01 * index + model_shift
    doc: dict[str, Any] = {
        "condition": cid,
        "replication": rep,
        "seedPath": [7, index, rep],
        "status": {"execution": "completed", "validity": "valid", "evidence": "complete"},
        "metrics": {"cooperation": cooperation, "payoff": 3.0 - cooperation + 0.1 * rep},
        "distributions": {
            "choice": {"cooperate": 6 + (index + rep) % 3, "defect": 4 - (index + rep) % 3},
            "mood": {"calm": 5, "angry": 5 + rep % 2},
        },
        "integrity": {"complete": True, "counters": {"parse_failures": rep % 2, "retries": 1}},
        "cost": {"llmCalls": 10, "promptTokens": 1200, "completionTokens": 80},
    }
    doc.update(changes)
    return RunResult.model_validate(doc)


def build_audit() -> dict[str, Any]:
    """An audit with models, an infinite d, a failed, an incomplete and a missing run, a metric
    no run reports (so it carries a note), hostile strings and two target distributions."""
    plan = _plan()
    conditions = _conditions(plan)
    runs: list[RunRecord] = []
    for index, cond in enumerate(conditions):
        cid = cond["id"]
        for rep in range(plan["replications"]):
            result: RunResult | None = _result(cid, rep, index)
            if index == 2 and rep == 1:
                result = _result(
                    cid,
                    rep,
                    index,
                    status={
                        "execution": "crashed",
                        "validity": "unchecked",
                        "evidence": "unchecked",
                    },
                    metrics={},
                    failure={
                        "stage": "running",
                        "type": "ProviderError",
                        "message": "timeout after 60 s <b>bold</b>",
                    },
                )
            elif index == 3 and rep == 2:
                result = _result(
                    cid,
                    rep,
                    index,
                    integrity={"complete": False, "counters": {"budget_exhausted": 1}},
                )
            elif index == 4 and rep == 3:
                result = None
            runs.append(RunRecord(cid, rep, result))
    return with_provenance(analyse(plan, conditions, runs, provider_override=None))


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    return build_audit()


@pytest.fixture(scope="module")
def html(audit: dict[str, Any]) -> str:
    return render_report(audit)


def unbroken(page: str) -> str:
    """The page without its `<wbr>` break points: markup as a test compares it, text as read."""
    return page.replace("<wbr>", "")


def doc(audit: dict[str, Any]) -> AuditDoc:
    """The audit as the pages read it: checked against its model."""
    return AuditDoc.model_validate(audit)


def reread(audit: dict[str, Any]) -> dict[str, Any]:
    """The audit as a reader of audit.json sees it (sorted keys, non-finite floats as strings)."""
    loaded: dict[str, Any] = json.loads(pretty_json(audit))
    return loaded


def minimal_audit() -> dict[str, Any]:
    """No axes, no models, no hypothesis: every optional section has to say so."""
    plan = {
        "id": "bare",
        "title": None,
        "baseScenario": None,
        "base": {"name": "bare", "world": None, "simulator": {"command": ["sim"]}},
        "axes": [],
        "design": "one_at_a_time",
        "replications": 2,
        "models": [],
        "metrics": ["x"],
        "claimType": "exploratory",
        "hypothesis": None,
        "includeIncomplete": False,
        "hash": "ab" * 32,
    }
    conditions: list[dict[str, Any]] = [
        {
            "id": "base",
            "dir": "base",
            "axis": None,
            "level": None,
            "levels": {},
            "model": None,
            "baseId": "base",
            "isBase": True,
            "identicalToBase": False,
        }
    ]
    runs = [
        RunRecord("base", rep, _result("base", rep, 0, metrics={"x": float(rep)}))
        for rep in range(2)
    ]
    return with_provenance(analyse(plan, conditions, runs, provider_override="replay"))


# --------------------------------------------------------------------------- HTML structure


class _Outline(HTMLParser):
    """Collects h2 texts, checks that tags nest and close, and counts accessibility details."""

    VOID = frozenset({"meta", "br", "hr", "img", "col", "wbr", "input", "source", "area"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.h2: list[str] = []
        self.tags: dict[str, int] = {}
        self.ids: list[str] = []
        self.th_without_scope = 0
        self.tables_without_caption = 0
        self._after_table = False
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))
        if tag == "th" and "scope" not in found:
            self.th_without_scope += 1
        if self._after_table and tag != "caption":
            self.tables_without_caption += 1
        self._after_table = tag == "table"
        if tag == "h2":
            self._in_h2 = True
            self.h2.append("")
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        found = dict(attrs)
        if found.get("id"):
            self.ids.append(str(found["id"]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2":
            self._in_h2 = False
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.h2[-1] += data


def outline(html: str) -> _Outline:
    parser = _Outline()
    parser.feed(html)
    parser.close()
    return parser


def test_the_eight_sections_come_in_the_seed_order(html: str) -> None:
    headings = outline(html).h2
    assert len(headings) == len(SECTIONS)
    for heading, (number, name) in zip(headings, enumerate(SECTIONS, start=1), strict=True):
        assert heading == f"{number}. {name}"


def test_the_page_is_one_self_contained_html5_file(html: str) -> None:
    assert html.startswith('<!doctype html>\n<html lang="en" data-audit-sha256="')
    assert '<meta charset="utf-8">' in html
    assert "<title>Audit report: " in html
    lowered = html.lower()
    for forbidden in ("<script", "<link", "@font-face", "http://", "https://", "<img", "<iframe"):
        assert forbidden not in lowered, forbidden
    assert "url(" not in lowered.replace("url(#", "")
    assert "@media print" in html


def test_tags_balance_and_tables_are_accessible(html: str) -> None:
    parsed = outline(html)
    assert parsed.errors == []
    assert parsed.stack == []
    for tag in ("html", "head", "body", "main", "section", "table", "figure", "svg", "footer"):
        assert parsed.tags.get(tag, 0) >= 1, tag
    assert parsed.tags["section"] == len(SECTIONS)
    assert parsed.tags["caption"] == parsed.tags["table"]
    assert parsed.tables_without_caption == 0
    assert parsed.th_without_scope == 0
    assert len(parsed.ids) == len(set(parsed.ids)), "duplicate ids across the inlined figures"
    assert parsed.tags["title"] == 1 + parsed.tags["svg"]  # the page's and one per figure


def test_plan_and_scenario_strings_are_escaped(html: str) -> None:
    assert HOSTILE_LEVEL not in html and HOSTILE_AXIS not in unbroken(html)
    html = unbroken(html)
    assert HOSTILE_LEVEL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert HOSTILE_AXIS not in html
    assert "size &#34;N&#34; &amp; &lt;more&gt;" in html
    assert "Prisoner&#39;s dilemma &amp; framing &lt;audit&gt;" in html
    assert "timeout after 60 s &lt;b&gt;bold&lt;/b&gt;" in html
    assert "<b>" not in html


def test_summary_counts_models_override_hash_and_grade_rule(
    audit: dict[str, Any], html: str
) -> None:
    from markupsafe import escape

    assert "48 in all, 45 used in the statistics; 2 failed, 1 incomplete, 3 excluded" in html
    assert "model-b, model-a" in html
    assert "Provider override</th><td>none</td>" in html
    assert audit["plan"]["hash"] in html
    assert str(escape(audit["grade"]["rule"])) in html
    for reason in audit["grade"]["reasons"]:
        assert reason.replace("'", "&#39;") in html
    footer = html[html.index("<footer") :]
    assert "simreport 0.1.0" in footer and audit["plan"]["hash"] in footer


def test_infinite_d_shows_as_inf_and_rows_sort_by_abs_d(html: str) -> None:
    html = unbroken(html)
    table = html[html.index("<caption>cooperation: conditions") :]
    table = table[: table.index("</table>")]
    d_values = re.findall(r'<td class="num spread">(−?inf) ⚠</td>', table)
    assert d_values[:2] == ["inf", "inf"]
    first_rows = table.split("<tr>")[2:4]
    assert all("framing=moral" in row for row in first_rows)
    assert figures.format_number(float("-inf")) == "−inf"
    assert figures.format_number("-inf") == "−inf"
    assert figures.format_number("nan") == "nan"


def test_a_metric_without_tests_shows_its_note(audit: dict[str, Any], html: str) -> None:
    note = audit["notes"]["silent"]
    section = html[html.index('id="h-tests"') : html.index('id="h-sensitivity"')]
    assert f'<p class="note">{note}</p>' in section
    assert "<caption>silent:" not in section


def test_distribution_section_shows_tvd_and_the_uniform_target_note(html: str) -> None:
    section = html[html.index('id="h-distribution"') : html.index('id="h-integrity"')]
    assert "Distribution choice" in section and "Distribution mood" in section
    assert UNIFORM_TARGET_NOTE in section
    assert "100.000" in section  # a condition that matches the target exactly
    assert "Cliff's delta" in section and "W1" in section


def test_empty_sections_say_why() -> None:
    html = render_report(minimal_audit())
    assert "no hypothesis directions" in html
    assert "the plan lists no models" in html
    assert "The plan perturbs nothing" in html
    assert "Provider override</th><td>replay</td>" in html
    assert "external simulator" in html
    parsed = outline(html)
    assert parsed.errors == [] and parsed.stack == []
    assert len(parsed.h2) == len(SECTIONS)


def test_numbers_are_formatted_consistently() -> None:
    assert figures.format_number(0.012345) == "0.012"
    assert figures.format_number(-0.5) == "−0.500"
    assert figures.format_number(0.0) == "0.000"
    assert figures.format_number(3) == "3"
    assert figures.format_number(None) == "–"
    assert figures.format_number(0.00001234) == "1.23e−05"
    from simreport.report.html import format_p

    assert format_p(0.01234) == "0.0123"
    assert format_p(0.00001) == "<0.0001"
    assert format_p(None) == "–"


# --------------------------------------------------------------------------- determinism


def test_rendering_is_deterministic_and_survives_audit_json(
    audit: dict[str, Any], html: str, tmp_path: Path
) -> None:
    assert render_report(audit) == html
    assert render_report(reread(audit)) == html
    write_json(tmp_path / "audit.json", audit)
    loaded = json.loads((tmp_path / "audit.json").read_text(encoding="utf-8"))
    top = loaded["sensitivity"][0]
    assert top[top["rankedBy"]]["maxAbsD"] == "inf"  # the reader really sees strings
    assert render_report(loaded) == html
    report = write_report(tmp_path)
    assert report == tmp_path / "report.html"
    assert report.read_text(encoding="utf-8") == html


def test_figures_are_byte_identical_and_titled(audit: dict[str, Any]) -> None:
    first = figures.figure_files(doc(audit))
    assert first == figures.figure_files(doc(audit))
    assert first == figures.figure_files(doc(reread(audit)))
    assert list(first) == [
        "sensitivity.svg",
        "effects-cooperation.svg",
        "effects-payoff.svg",
        "effects-silent.svg",
        "distribution-choice.svg",
        "distribution-mood.svg",
    ]
    for name, svg in first.items():
        head = svg[: svg.index("<defs")]
        assert "<title>" in head, name
        assert "Matplotlib v" not in svg and "<dc:date>" not in svg
        assert "<dc:title>simreport</dc:title>" in svg
        assert HOSTILE_LEVEL not in svg
    inlined = figures.inline(first["sensitivity.svg"], id_prefix="f")
    assert inlined.startswith("<svg ")
    for gone in ("<?xml", "<!DOCTYPE", "<metadata", "http", "<!--", "xlink:"):
        assert gone not in inlined
    assert 'id="f-' in inlined and "url(#f-" in inlined


def test_figure_file_names_are_sanitised_and_distinct() -> None:
    from simreport.report.naming import planned_figure_names

    names = list(planned_figure_names(["a b", "a_b", "ünï/code"], "one_at_a_time", ["x:y"]))
    assert names[0] == "sensitivity.svg"
    assert names[1] == "effects-a_b.svg"
    assert names[2].startswith("effects-a_b-") and names[2].endswith(".svg")
    assert names[3] == "effects-_n__code.svg"
    assert names[4] == "distribution-x_y.svg"


def test_write_report_writes_figures_and_drops_stale_ones(
    audit: dict[str, Any], tmp_path: Path
) -> None:
    write_json(tmp_path / "audit.json", audit)
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "effects-old.svg").write_text("<svg/>", encoding="utf-8")
    (tmp_path / "figures" / "notes.txt").write_text("kept", encoding="utf-8")
    write_report(tmp_path)
    files = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert files == sorted([*figures.figure_files(doc(audit)), "notes.txt"])
    for name, svg in figures.figure_files(doc(audit)).items():
        assert (tmp_path / "figures" / name).read_text(encoding="utf-8") == svg


def test_write_report_rejects_a_non_audit(tmp_path: Path) -> None:
    from simreport.core.errors import InputError

    (tmp_path / "audit.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(InputError):
        write_report(tmp_path)
    (tmp_path / "audit.json").write_text("{", encoding="utf-8")
    with pytest.raises(InputError):
        write_report(tmp_path)


# --------------------------------------------------------------------------- headless browser


@pytest.mark.slow
@needs_chromium
def test_chromium_renders_the_report_offline(audit: dict[str, Any], tmp_path: Path) -> None:
    audit_dir = tmp_path / "audit"
    write_json(audit_dir / "audit.json", audit)
    report = write_report(audit_dir)

    page = render(report.resolve().as_uri(), tmp_path / "chromium", window="1280,2000")
    page.check_screenshot(min_bytes=50_000, size=(1280, 2000))
    assert page.network_requests == []
    for number, name in enumerate(SECTIONS, start=1):
        assert f">{number}. {name}</h2>" in page.dom
    assert "<script" not in page.dom.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.dom


@pytest.mark.slow
@needs_chromium
def test_the_net_log_check_catches_a_page_that_fetches(tmp_path: Path) -> None:
    """The offline check the page tests make is only worth something if it sees a page's
    requests."""
    fetches = tmp_path / "fetches.html"
    fetches.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>t</title>'
        '<link rel="stylesheet" href="https://example.invalid/x.css"></head>'
        '<body><img src="http://example.invalid/a.png" alt=""></body></html>',
        encoding="utf-8",
    )
    page = render(fetches.as_uri(), tmp_path / "chromium")
    assert sorted(page.network_requests) == [
        "http://example.invalid/a.png",
        "https://example.invalid/x.css",
    ]


def test_floating_point_residue_reads_as_zero() -> None:
    assert figures.format_number(4.440892098500626e-16) == "0.000"
    assert figures.format_number(-2.26e-15) == "0.000"


def test_large_counts_are_grouped_in_threes() -> None:
    assert figures.format_number(7753765) == "7\u202f753\u202f765"
    assert figures.format_number(9999) == "9999"


# --------------------------------------------------------------------------- verdict and navigation


def _section_of(html: str, start: str, end: str) -> str:
    """From the first `start` to the first `end` after it."""
    first = html.index(start)
    return html[first : html.index(end, first)]


def test_the_verdict_opens_the_report_with_the_grade_and_its_reasons(
    audit: dict[str, Any], html: str
) -> None:
    from markupsafe import escape

    box = _section_of(html, '<div class="verdict" id="verdict">', "</div>")
    assert html.index('id="verdict"') < html.index('id="h-plan-summary"')
    assert f"<strong>Verdict.</strong> {escape(audit['verdict']['headline'])}</p>" in box
    decided = _section_of(box, '<p id="decisions">', "</p>")
    assert str(escape(decisions(doc(audit)))) in decided
    assert f'<span class="grade grade-{audit["grade"]["grade"]}">' in box
    for reason in audit["grade"]["reasons"]:
        assert f"<li>{escape(reason)}</li>" in box


def test_the_report_links_to_its_methods_its_audit_json_and_the_index(html: str) -> None:
    nav = _section_of(html, '<nav class="pages"', "</nav>")
    assert re.findall(r'href="([^"]*)"', nav) == ["../index.html", "methods.html", "audit.json"]


def test_the_report_names_the_audit_it_was_rendered_from(audit: dict[str, Any], html: str) -> None:
    from simreport.report.naming import audit_fingerprint

    stamp = audit_fingerprint(doc(audit))
    assert f'<html lang="en" data-audit-sha256="{stamp}">' in html
    assert f"content hash <code>{stamp}</code>" in html
    assert audit_fingerprint(doc(reread(audit))) == stamp == content_hash(audit)


def test_identical_conditions_are_shown_as_not_tested(audit: dict[str, Any], html: str) -> None:
    from markupsafe import escape

    html = unbroken(html)
    section = _section_of(html, 'id="h-tests"', 'id="h-sensitivity"')
    identical = [c["id"] for c in audit["conditions"] if c["identicalToBase"]]
    assert identical
    for cid in identical:
        shown = re.search(
            rf'<tr class="untested"><th scope="row" class="id">{re.escape(str(escape(cid)))}',
            section,
        )
        assert shown, cid
    assert section.count("identical to the base, not tested") >= len(identical)
    conditions = _section_of(html, 'id="h-conditions"', 'id="h-tests"')
    assert conditions.count('<span class="tag">identical to the base, not tested</span>') == len(
        identical
    )


def test_each_row_shows_the_direction_it_is_expected_to_move(html: str) -> None:
    cooperation = _section_of(html, "<caption>cooperation: conditions", "</table>")
    payoff = _section_of(html, "<caption>payoff: conditions", "</table>")
    assert '<th scope="col">Expected</th>' in cooperation
    assert '<td class="nowrap">↑ increase</td>' in cooperation
    assert '<td class="nowrap">↓ decrease</td>' in payoff
    assert "↑ increase" not in payoff


def test_near_zero_spread_is_a_visible_warning(audit: dict[str, Any], html: str) -> None:
    flagged = [r for r in audit["tests"]["cooperation"] if r["smallSpread"]]
    assert flagged  # the constant base against a constant condition: d = inf
    warning = _section_of(html, '<p class="warning" id="small-spread">', "</p>")
    assert f"{len(flagged)} tested comparisons have a Cohen d" in warning
    assert "cooperation · framing=moral@model-b" in warning
    assert html.index('id="small-spread"') < html.index('id="h-plan-summary"')
    calm = copy.deepcopy(audit)
    for rows in calm["tests"].values():
        for r in rows:
            r["smallSpread"] = False
    assert 'id="small-spread"' not in render_report(calm)


def test_sensitivity_shows_both_measures_and_unranked_axes(audit: dict[str, Any]) -> None:
    from simreport.report.figures import ANY_CELL_CAPTION, ISOLATED_CAPTION

    assert ISOLATED_CAPTION == (
        "isolated effect: largest |d| where only this axis differs from the base"
    )
    assert ANY_CELL_CAPTION == (
        "largest |d| in any cell where this axis is away from its base level"
    )
    edited = copy.deepcopy(audit)
    edited["sensitivity"][1]["anyCell"] = {
        "maxAbsD": 4.25, "metric": "payoff", "condition": "framing=moral@model-a",
        "smallSpread": False,
    }  # fmt: skip
    html = unbroken(render_report(edited))
    section = _section_of(html, 'id="h-sensitivity"', 'id="h-direction"')
    assert f"<figcaption>Blue: {ISOLATED_CAPTION}. Orange: {ANY_CELL_CAPTION}." in section
    assert f"<small>Isolated: {ISOLATED_CAPTION}. Any cell: {ANY_CELL_CAPTION}." in section
    rows = re.findall(r"<tr(?: class=\"untested\")?><td class=\"num\">(.*?)</tr>", section, re.S)
    assert [r.split("<")[0] for r in rows] == ["1", "2", "unranked"]
    second = rows[1]
    assert '<td class="num">3.104</td>' in second and '<td class="num">4.250</td>' in second
    assert "payoff, framing=moral@model-a" in second
    assert 'class="untested"><td class="num">unranked</td>' in section
    assert "<td>no effect size</td>" in section


def _with_power(audit: dict[str, Any]) -> dict[str, Any]:
    """The audit with a power analysis and a noise floor in the contract's shape (hand-made)."""
    edited = copy.deepcopy(audit)
    rows = {
        m: [
            {
                "condition": r["condition"],
                "nBase": r["nBase"],
                "nCond": r["nCond"],
                "paired": False,
                "test": r["test"],
                "alpha": 0.05 / (i + 1) if r["tested"] else None,
                "mde": 1.75 + i / 10 if r["tested"] else None,
                "note": None if r["tested"] else "not tested: no detectable effect to state",
            }
            for i, r in enumerate(edited["tests"][m])
        ]
        for m in ("cooperation", "payoff")
    }
    edited["power"] = {
        "power": 0.8,
        "alphaFamily": 0.05,
        "method": "normal approximation <to> the t-test",
        "familySize": sum(1 for r in edited["tests"]["cooperation"] if r["tested"]),
        "draws": 0,
        "metrics": rows,
    }
    edited["noiseFloor"] = {
        "cooperation": [
            {"base": "base@model-b", "n": 4, "splits": 35, "flipRate": 0.0, "alpha": 0.05,
             "note": "a constant base never differs from itself", "scope": "halves",
             "companions": [], "sizes": [2, 2]},
            {"base": "base@model-a", "n": 4, "splits": 35, "flipRate": 0.0571, "alpha": 0.05,
             "note": None, "scope": "audit", "companions": ["seed=9@model-a"], "sizes": [4, 4]},
        ]
    }  # fmt: skip
    return edited


def test_power_and_noise_floor_are_shown_when_the_audit_has_them(audit: dict[str, Any]) -> None:
    from markupsafe import escape

    edited = _with_power(audit)
    html = unbroken(render_report(edited))
    section = _section_of(html, 'id="power"', 'id="h-sensitivity"')
    assert (
        "smallest effect its own test could detect with probability 80% at the Holm-adjusted α"
        in section
    )
    assert "(family α 0.05)" in section
    assert f"{escape(edited['power']['method'])}." in section
    table = _section_of(section, "<caption>Minimum detectable", "</table>")
    first = re.search(r'<th scope="row" class="id">framing=moral@model-b</th>(.*?)</tr>', table)
    assert first and re.findall(r'<td class="num">(.*?)</td>', first.group(1)) == [
        "1.750", "0.0500", "1.750", "0.0500"
    ]  # fmt: skip
    assert (
        '<p class="note">memory={&#34;window&#34;:3}@model-b (every metric): not tested: no '
        "detectable effect to state</p>" in section
    )
    noise = _section_of(section, "<caption>Noise floor", "</table>")
    assert '<td class="num">5.7%</td>' in noise and '<td class="num">0.0%</td>' in noise
    # Where the base was measured against: its twins at the audit's sizes, or its own halves.
    assert '<td class="num">4 vs 4</td>' in noise and '<td class="num">2 vs 2</td>' in noise
    assert "with seed=9@model-a" in noise and "the base&#39;s halves" in noise
    assert edited["noiseFloor"]["cooperation"][0]["note"] in noise
    # The contract requires both sections: an audit without them is refused, naming the key.
    without = {k: v for k, v in audit.items() if k not in ("power", "noiseFloor")}
    with pytest.raises(SchemaError) as refused:
        render_report(without)
    assert refused.value.path in ("power", "noiseFloor")


def _long_labels(audit: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """Two framing levels whose labels share a long prefix and a long suffix."""
    edited = copy.deepcopy(audit)
    prefix = "Framing of the dilemma as written in the instructions, version "
    suffix = " of the wording, with the same closing sentence for every agent"
    labels = {
        "framing=moral@model-b": "alpha",
        "framing=<script>alert(1)</script>@model-b": "omega",
    }
    for cond in edited["conditions"]:
        if cond["id"] in labels:
            cond["label"] = prefix + labels[cond["id"]] + suffix
    return edited, prefix + "alpha" + suffix, prefix + "omega" + suffix


def test_labels_are_shown_whole_in_tables(audit: dict[str, Any]) -> None:
    edited, alpha, omega = _long_labels(audit)
    html = unbroken(render_report(edited))
    tests = _section_of(html, "<caption>cooperation: conditions", "</table>")
    for label, cid in ((alpha, "framing=moral@model-b"), (omega, "framing=&lt;script&gt;")):
        assert f'<th scope="row" class="id">{label}<span class="cid">{cid}' in tests
    conditions = _section_of(html, 'id="h-conditions"', 'id="h-tests"')
    assert alpha in conditions and omega in conditions


def _figure_texts(svg: str) -> list[str]:
    """The texts matplotlib drew in a standalone SVG (it names each in a comment)."""
    return [html_module.unescape(t) for t in re.findall(r"<!-- (.*?) -->", svg)]


def test_labels_with_a_long_common_prefix_stay_distinct_in_figures(audit: dict[str, Any]) -> None:
    edited, alpha, omega = _long_labels(audit)
    for name in ("effects-cooperation.svg", "distribution-choice.svg"):
        kind, metric = figures.figure_names(doc(edited))[name]
        texts = _figure_texts(figures.draw(doc(edited), kind, metric))
        joined = "".join(texts)
        # Broken into lines, never cut: every character of both labels is drawn.
        assert alpha in joined and omega in joined, name
        alpha_lines = [t for t in texts if "alpha" in t]
        omega_lines = [t for t in texts if "omega" in t]
        assert alpha_lines and omega_lines and set(alpha_lines).isdisjoint(omega_lines)


def test_figure_labels_never_drop_a_character() -> None:
    from simreport.report.figures import LABEL_CHARS, _label

    for text in ("x" * 200, "a|b=" * 30, "short", "naïve $x$ " * 9):
        lines = _label(text).replace("\\$", "$").split("\n")  # `$` is escaped for matplotlib
        assert all(len(line) <= LABEL_CHARS for line in lines)
        assert "".join(lines) == text


# --------------------------------------------------------------------------- analyse re-renders


def test_analyse_rerenders_the_pages_from_the_new_audit_json(
    audit_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simreport.cli import main
    from simreport.report.methods import audit_hash_of
    from simreport.report.naming import audit_fingerprint

    folder = tmp_path / "pd"
    shutil.copytree(audit_dir, folder)
    old_report = (folder / "report.html").read_text(encoding="utf-8")
    # Change one run: the base's first replication now cooperates far less.
    result_file = folder / "runs" / "base" / "0" / "result.json"
    result = json.loads(result_file.read_text(encoding="utf-8"))
    metric = sorted(result["metrics"])[0]
    result["metrics"][metric] = -123.25
    result_file.write_text(json.dumps(result), encoding="utf-8")

    assert main(["analyse", str(folder)]) == 0
    assert "re-rendered" in capsys.readouterr().out
    new_audit = json.loads((folder / "audit.json").read_text(encoding="utf-8"))
    stamp = audit_fingerprint(doc(new_audit))
    report = (folder / "report.html").read_text(encoding="utf-8")
    assert report != old_report
    assert f'data-audit-sha256="{stamp}"' in report
    base = next(c for c in new_audit["conditions"] if c["id"] == "base")
    assert f'<td class="num">{figures.format_number(base["means"][metric])}</td>' in report
    assert audit_hash_of((folder / "methods.md").read_text(encoding="utf-8")) == stamp
    assert f'data-audit-sha256="{stamp}"' in (folder / "methods.html").read_text(encoding="utf-8")
    assert (folder / "figures" / "sensitivity.svg").read_text(encoding="utf-8") == (
        figures.sensitivity_svg(doc(new_audit))
    )


def test_analyse_writes_no_pages_where_there_were_none(audit_dir: Path, tmp_path: Path) -> None:
    from simreport.api import analyse

    folder = tmp_path / "bare"
    shutil.copytree(
        audit_dir,
        folder,
        ignore=shutil.ignore_patterns("report.html", "methods.*", "figures", "history"),
    )
    analyse(folder)
    assert (folder / "audit.json").is_file()
    for page in ("report.html", "methods.md", "methods.html", "figures"):
        assert not (folder / page).exists(), page


# --------------------------------------------------------------------------- narrow screens


@pytest.mark.slow
@needs_chromium
def test_the_report_reads_at_400_px_without_sideways_scrolling(
    audit: dict[str, Any], tmp_path: Path
) -> None:
    edited, _, _ = _long_labels(_with_power(audit))
    edited["plan"]["id"] = "a-plan-id-that-is-long-" * 6
    audit_dir = tmp_path / "audit"
    write_json(audit_dir / "audit.json", edited)
    report = write_report(audit_dir)
    width = page_width(report, tmp_path / "chromium", width=400)
    assert width.viewport == 400
    assert not width.scrolls_sideways, width
    assert width.outside == []


def test_the_verdict_escapes_plan_text(audit: dict[str, Any]) -> None:
    stated = copy.deepcopy(audit)
    stated["verdict"]["headline"] = "cooperation moved under <script>framing</script>."
    box = _section_of(render_report(stated), '<div class="verdict" id="verdict">', "</div>")
    assert "&lt;script&gt;framing&lt;/script&gt;" in box and "<script>" not in box
    # An audit whose headline is empty: the report words one from its rows, escaped too.
    edited = copy.deepcopy(audit)
    edited["verdict"]["headline"] = ""
    edited["plan"]["axes"][0]["dimension"] = "<script>framing</script>"
    row = next(r for r in edited["tests"]["cooperation"] if r["tested"])
    row["holmP"] = 0.001
    html = render_report(edited)
    box = _section_of(html, '<div class="verdict" id="verdict">', "</div>")
    assert "(linguistic" not in box and "&lt;script&gt;framing&lt;/script&gt;" in box
    assert "<script>" not in html


def test_the_summary_states_axis_and_level_expectations(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    edited["plan"]["hypothesis"]["axes"] = {"framing": {"payoff": "increase"}}
    edited["plan"]["hypothesis"]["levels"] = {"framing=moral": {"cooperation": "decrease"}}
    summary = _section_of(unbroken(render_report(edited)), 'id="h-plan-summary"', "</table>")
    assert (
        "cooperation: increase; payoff: decrease; payoff: increase under axis framing; "
        "cooperation: decrease under condition framing=moral" in summary
    )


@pytest.mark.parametrize("version", [1, 2])
def test_an_audit_of_an_older_schema_is_refused(
    audit: dict[str, Any], tmp_path: Path, version: int
) -> None:
    """audit.json files written before schema 3 lack sections the page is built from: the report
    names the file and says how to rewrite it, rather than guessing what the old keys meant."""
    old = copy.deepcopy(audit)
    old["schemaVersion"] = version
    with pytest.raises(InputError) as refused:
        render_report(old)
    assert refused.value.path == "schemaVersion"
    assert "simreport analyse" in str(refused.value.expected)
    audit_dir = tmp_path / "audit"
    write_json(audit_dir / "audit.json", old)
    with pytest.raises(InputError) as refused:
        write_report(audit_dir)
    assert refused.value.file == str(audit_dir / "audit.json")
    assert f"simreport analyse {audit_dir}" in str(refused.value.expected)
    assert not (audit_dir / "report.html").exists()


def _rename(doc: dict[str, Any], path: str, new: str) -> None:
    """Rename the key at dotted `path` of `doc` to `new`, keeping its value."""
    *parents, key = path.split(".")
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[new] = node.pop(key)


@pytest.mark.parametrize(
    ("path", "renamed", "says"),
    [
        ("summary", "summery", "summary: missing required key 'summary'"),
        ("plan.claimType", "claimKind", "plan.claimKind: unknown key 'claimKind'"),
        ("plan.base.world", "wrld", "plan.base.wrld: unknown key 'wrld'"),
        ("tests.{metric}.0.holmP", "holmPValue", "tests.{metric}.0.holmP: missing required key"),
        ("verdict.headline", "headLine", "verdict.headline: missing required key 'headline'"),
        ("plan", "plans", "not an audit document"),
    ],
)
def test_an_audit_with_a_renamed_key_is_refused_by_report_and_site(
    audit_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    path: str,
    renamed: str,
    says: str,
) -> None:
    """A fixed key of audit.json renamed is never read as missing or blank: `simreport report`
    and `simreport site` refuse the file with one line naming it and the key, exit code 2, and
    write nothing."""
    from simreport.cli import main

    folder = tmp_path / "pd"
    shutil.copytree(audit_dir, folder, ignore=shutil.ignore_patterns("runs"))
    doc_file = folder / "audit.json"
    edited = json.loads(doc_file.read_text(encoding="utf-8"))
    metric = edited["metrics"][0]
    _rename(edited, path.format(metric=metric), renamed)
    write_json(doc_file, edited)
    for page in ("report.html", "methods.md", "methods.html"):
        (folder / page).unlink()
    line = f"simreport: {doc_file}: {says.format(metric=metric)}"

    assert main(["report", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
    assert not (folder / "report.html").exists() and not (folder / "methods.md").exists()

    site = tmp_path / "site"
    assert main(["site", str(folder), "--out", str(site)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(line), err
    assert not site.exists()
