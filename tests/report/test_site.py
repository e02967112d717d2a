"""The static site: index rows agree with audit.json, pages are copied, links are relative and
resolve, strings are escaped, the build is deterministic, and `serve` serves it."""

from __future__ import annotations

import copy
import json
import re
import shutil
import threading
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from queue import Queue
from typing import Any

import pytest

from simreport.analysis.audit_document import AuditDoc
from simreport.analysis.provenance import OFFLINE_STAND_IN
from simreport.core.files import write_json
from simreport.report.html import write_report
from simreport.report.methods import write_methods
from simreport.report.site import SiteRefusal, render_index, serve, site_entry, write_site
from tests.support.browser import needs_chromium, page_width, render

EXAMPLE_PLAN = Path(__file__).resolve().parents[2] / "examples" / "prisoners_dilemma" / "audit.yaml"
HOSTILE_TITLE = "<script>alert(1)</script> & \"quotes\" 'too'"


# --------------------------------------------------------------------------- fixtures


# `audit_dir` and `audit` (a real small audit of the prisoner's dilemma example, with its report
# and methods pages) come from conftest.py.


@pytest.fixture(scope="module")
def edited_dir(
    audit_dir: Path, audit: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A hand-edited variant: hostile title, two models, failed and incomplete runs, an infinite d
    at the top of the sensitivity ranking, a strong grade."""
    out = tmp_path_factory.mktemp("site") / "edited"
    shutil.copytree(audit_dir, out, ignore=shutil.ignore_patterns("runs"))
    edited = copy.deepcopy(audit)
    edited["plan"]["id"] = "pd-edited"
    edited["plan"]["title"] = HOSTILE_TITLE
    edited["plan"]["base"]["name"] = "<b>bold</b> scenario"
    edited["plan"]["models"] = ["model-a", "model-b"]
    edited["summary"].update(failed=3, incomplete=2, excluded=5, used=25)
    edited["grade"]["grade"] = "strong"
    top = edited["sensitivity"][0]
    top[top["rankedBy"]]["maxAbsD"] = "inf"
    write_json(out / "audit.json", edited)
    write_report(out)
    write_methods(out)
    return out


@pytest.fixture(scope="module")
def site(audit_dir: Path, edited_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("built") / "site"
    write_site(root, [("prisoners_dilemma", audit_dir), ("pd-edited", edited_dir)])
    return root


def entry_of(audit: dict[str, Any], plan_id: str | None = None) -> dict[str, Any]:
    """The index row of an audit.json (hand-edited or not), checked against its model first."""
    return site_entry(AuditDoc.model_validate(audit), plan_id)


def _hrefs(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


# --------------------------------------------------------------------------- rows


def test_site_entry_agrees_with_audit_json(audit: dict[str, Any]) -> None:
    entry = entry_of(audit)
    plan, summary = audit["plan"], audit["summary"]
    top = next(e for e in audit["sensitivity"] if e["rank"] == 1)
    assert entry["id"] == plan["id"] == "prisoners_dilemma"
    assert entry["title"] == plan["title"]
    assert entry["scenario"] == plan["base"]["name"]
    assert entry["world"] == plan["base"]["world"]
    assert entry["design"] == plan["design"]
    assert entry["claimType"] == plan["claimType"]
    assert entry["grade"] == audit["grade"]["grade"]
    for key in ("conditions", "runs", "failed", "incomplete", "excluded"):
        assert entry[key] == summary[key]
    assert entry["topAxis"]["axis"] == top["axis"]
    assert entry["topAxis"]["maxAbsD"] == top[top["rankedBy"]]["maxAbsD"]
    assert entry["links"] == {
        "report": "prisoners_dilemma/report.html",
        "methods": "prisoners_dilemma/methods.html",
        "audit": "prisoners_dilemma/audit.json",
    }
    json.dumps(entry, allow_nan=False)  # a plain JSON row, reusable by other tools


def test_site_entry_without_effect_sizes_has_no_top_axis(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    for entry in edited["sensitivity"]:
        entry.update(rank=None, rankedBy=None, isolated=None, anyCell=None)
    row = entry_of(edited)
    assert row["topAxis"] is None
    page = render_index([row])
    assert '<td class="none" data-label="Most sensitive axis">—</td>' in page


def test_site_entry_rejects_an_id_that_cannot_name_a_folder(audit: dict[str, Any]) -> None:
    for bad in ("../escape", "a/b", "", ".hidden", "<x>"):
        with pytest.raises(SiteRefusal) as refused:
            entry_of(audit, bad)
        assert refused.value.reason == "folder_name"


# --------------------------------------------------------------------------- index page


def test_index_lists_every_audit_with_its_numbers(
    site: Path, audit: dict[str, Any], edited_dir: Path
) -> None:
    # Without the <wbr> break points in identifiers: the text as read.
    page = (site / "index.html").read_text(encoding="utf-8").replace("<wbr>", "")
    rows = re.findall(r'<tbody class="audit">\n<tr>\n<th scope="row">(.*?)</tbody>', page, re.S)
    assert len(rows) == 2
    first, second = rows
    summary = audit["summary"]
    assert "prisoners_dilemma" in first
    cells = re.findall(r'<td class="num[^"]*" data-label="[^"]*">(\d+)</td>', first)
    assert cells == [str(summary[k]) for k in ("conditions", "runs", "failed", "incomplete")]
    assert f'<span class="grade grade-{audit["grade"]["grade"]}">' in first
    top = next(e for e in audit["sensitivity"] if e["rank"] == 1)
    assert top["axis"] in first and f"|d| = {top[top['rankedBy']]['maxAbsD']:.3f}" in first
    assert "world: prisoners_dilemma" in first and "one at a time" in first
    assert audit["plan"]["claimType"] in first
    # The edited audit: failures flagged, infinite d shown as inf, strong badge.
    assert re.findall(r'<td class="num[^"]*" data-label="[^"]*">(\d+)</td>', second)[2:] == [
        "3",
        "2",
    ]
    assert '<td class="num bad" data-label="Failed">3</td>' in second
    assert "|d| = inf" in second
    assert '<span class="grade grade-strong">strong</span>' in second
    assert "1 strong, 0 moderate, 1 weak" in page


def test_index_escapes_plan_strings_and_the_title() -> None:
    row = {
        "id": "plan-1",
        "title": HOSTILE_TITLE,
        "scenario": "<b>bold</b>",
        "world": "w",
        "grade": "<i>weak</i>",
        "topAxis": {"axis": "<svg onload=x>", "code": "R1", "maxAbsD": 1.5, "metric": "m"},
        "links": {"report": "plan-1/report.html"},
    }
    page = render_index([row], title=HOSTILE_TITLE)
    assert "<script" not in page and "<b>" not in page and "<svg" not in page and "<i>w" not in page
    assert (
        "<title>&lt;script&gt;alert(1)&lt;/script&gt; &amp; &#34;quotes&#34; &#39;too&#39;</title>"
        in page
    )
    assert '<span class="grade grade-unknown">&lt;i&gt;weak&lt;/i&gt;</span>' in page


def test_index_is_static_relative_and_undated(site: Path) -> None:
    page = (site / "index.html").read_text(encoding="utf-8")
    assert page.startswith('<!doctype html>\n<html lang="en">')
    assert '<meta charset="utf-8">' in page
    for forbidden in ("<script", "http://", "https://", "src=", "<link", "@import", "url("):
        assert forbidden not in page
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b", page)
    hrefs = _hrefs(page)
    assert {"prisoners_dilemma/report.html", "prisoners_dilemma/methods.html"} <= set(hrefs)
    assert {"pd-edited/audit.json"} <= set(hrefs)
    for href in hrefs:
        assert not href.startswith(("/", "file:")) and ".." not in href
        assert (site / href).is_file(), href


def test_empty_site_says_so(tmp_path: Path) -> None:
    index = write_site(tmp_path / "site", [])
    page = index.read_text(encoding="utf-8")
    assert "No audits yet." in page and "0 audits" in page


# --------------------------------------------------------------------------- files


def test_pages_and_figures_are_copied_byte_for_byte(site: Path, audit_dir: Path) -> None:
    target = site / "prisoners_dilemma"
    for name in ("report.html", "methods.md", "methods.html", "audit.json"):
        assert (target / name).read_bytes() == (audit_dir / name).read_bytes(), name
    figures = sorted(p.name for p in (audit_dir / "figures").glob("*.svg"))
    assert figures and sorted(p.name for p in (target / "figures").glob("*.svg")) == figures
    for name in figures:
        assert (target / "figures" / name).read_bytes() == (
            audit_dir / "figures" / name
        ).read_bytes()
    assert not list(site.rglob("*.tmp"))


def test_rebuilding_gives_the_same_bytes_and_drops_stale_figures(
    audit_dir: Path, edited_dir: Path, tmp_path: Path
) -> None:
    audits: list[tuple[str, str | Path]] = [
        ("prisoners_dilemma", audit_dir),
        ("pd-edited", edited_dir),
    ]
    first = tmp_path / "a"
    write_site(first, audits)
    stale = first / "prisoners_dilemma" / "figures" / "effects-gone.svg"
    stale.write_text("<svg/>", encoding="utf-8")
    write_site(first, audits)
    assert not stale.exists()
    second = tmp_path / "b"
    write_site(second, audits)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel


def test_write_site_refuses_incomplete_or_ambiguous_input(audit_dir: Path, tmp_path: Path) -> None:
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(audit_dir / "audit.json", partial / "audit.json")
    shutil.copy(audit_dir / "report.html", partial / "report.html")
    with pytest.raises(SiteRefusal) as refused:
        write_site(tmp_path / "s1", [("pd", partial)])
    assert refused.value.reason == "missing_page"
    assert refused.value.file == str(partial / "methods.md")
    with pytest.raises(SiteRefusal) as refused:
        write_site(tmp_path / "s2", [("pd", audit_dir), ("pd", audit_dir)])
    assert refused.value.reason == "repeated_id"
    with pytest.raises(SiteRefusal) as refused:
        write_site(tmp_path / "s3", [("../up", audit_dir)])
    assert refused.value.reason == "folder_name"
    assert not (tmp_path / "up").exists()


# --------------------------------------------------------------------------- serving


def test_serve_serves_the_site_on_localhost(site: Path) -> None:
    ready: Queue[ThreadingHTTPServer] = Queue()
    thread = threading.Thread(
        target=serve, args=(site,), kwargs={"port": 0, "on_ready": ready.put}, daemon=True
    )
    thread.start()
    server = ready.get(timeout=10)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/index.html", timeout=10) as response:
            assert response.status == 200
            assert "text/html" in response.headers["Content-Type"]
            assert response.read() == (site / "index.html").read_bytes()
        with urllib.request.urlopen(f"{base}/prisoners_dilemma/methods.md", timeout=10) as response:
            assert response.headers["Content-Type"] == "text/markdown; charset=utf-8"
            assert response.read() == (site / "prisoners_dilemma" / "methods.md").read_bytes()
    finally:
        server.shutdown()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_serve_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(SiteRefusal) as refused:
        serve(tmp_path / "nowhere", port=0)
    assert (refused.value.reason, refused.value.file) == ("no_site", str(tmp_path / "nowhere"))


# --------------------------------------------------------------------------- browser


@pytest.mark.slow
@needs_chromium
def test_index_renders_in_headless_chromium_from_file(site: Path, tmp_path: Path) -> None:
    url = (site / "index.html").resolve().as_uri()
    page = render(url, tmp_path / "chromium", window="1280,1600")
    page.check_screenshot(min_bytes=10_000, size=(1280, 1600))
    assert page.network_requests == []
    assert page.dom.count('<th scope="row">') == 2
    for plan_id in ("prisoners_dilemma", "pd-edited"):
        for name in ("report.html", "methods.html", "audit.json"):
            assert f'href="{plan_id}/{name}"' in page.dom
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.dom.replace("<wbr>", "")
    assert "<script" not in page.dom


# --------------------------------------------------------------------------- verdict and freshness


def test_each_audit_has_its_verdict_and_grade_reasons_in_the_index(
    site: Path, audit: dict[str, Any]
) -> None:
    from markupsafe import escape

    page = (site / "index.html").read_text(encoding="utf-8")
    first = re.findall(r'<tr class="verdict">\n<td colspan="11">(.*?)</td>', page, re.S)[0]
    assert f"<strong>Verdict.</strong> {escape(audit['verdict']['headline'])} " in first
    decided = entry_of(audit)["decisions"]
    assert OFFLINE_STAND_IN in decided and f"{escape(decided)}." in first
    grade = audit["grade"]
    assert f'<strong>{grade["grade"]}</strong>: <span class="reasons">' in first
    for reason in grade["reasons"]:
        assert str(escape(reason)) in first


def test_the_index_warns_of_near_zero_spread(audit: dict[str, Any]) -> None:
    edited = copy.deepcopy(audit)
    metric = edited["metrics"][0]
    tested = [r for r in edited["tests"][metric] if r["tested"]]
    for r in edited["tests"][metric]:
        r["smallSpread"] = False
    tested[0]["smallSpread"] = True
    page = render_index([entry_of(edited)])
    assert (
        '<span class="warning">Warning: 1 tested comparison has its |d| from near-zero spread; '
        "see the report.</span>" in page
    )
    tested[0]["smallSpread"] = False
    assert 'class="warning"' not in render_index([entry_of(edited)])


def test_the_verdict_in_the_index_is_escaped() -> None:
    row = {"id": "p", "verdict": "<b>moved</b> & more", "gradeReasons": ["<i>few</i>"]}
    page = render_index([row])
    assert "&lt;b&gt;moved&lt;/b&gt; &amp; more" in page and "&lt;i&gt;few&lt;/i&gt;" in page
    assert "<b>" not in page and "<i>f" not in page


def test_a_site_refuses_pages_older_than_their_audit_json(audit_dir: Path, tmp_path: Path) -> None:
    stale = tmp_path / "stale"
    shutil.copytree(audit_dir, stale, ignore=shutil.ignore_patterns("runs"))
    edited = json.loads((stale / "audit.json").read_text(encoding="utf-8"))
    edited["summary"]["failed"] = 7  # analysed again; the pages were not re-rendered
    write_json(stale / "audit.json", edited)
    with pytest.raises(SiteRefusal) as refused:
        write_site(tmp_path / "site", [("prisoners_dilemma", audit_dir), ("pd", stale)])
    assert (refused.value.reason, refused.value.file) == ("stale_page", str(stale / "report.html"))
    assert "simreport report" in str(refused.value.expected)  # the command that renders it
    assert not (tmp_path / "site").exists()  # checked before anything was copied
    write_report(stale)
    with pytest.raises(SiteRefusal) as refused:
        write_site(tmp_path / "site", [("pd", stale)])
    assert (refused.value.reason, refused.value.file) == ("stale_page", str(stale / "methods.md"))
    write_methods(stale)
    (stale / "methods.html").write_text("<!doctype html><html lang=en></html>", encoding="utf-8")
    with pytest.raises(SiteRefusal) as refused:
        write_site(tmp_path / "site", [("pd", stale)])
    assert (refused.value.reason, refused.value.file) == ("stale_page", str(stale / "methods.html"))
    write_methods(stale)
    index = write_site(tmp_path / "site", [("pd", stale)])
    assert "pd/report.html" in index.read_text(encoding="utf-8")


def test_the_cli_refuses_a_stale_site_with_one_line(
    audit_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simreport.cli import main

    stale = tmp_path / "pd"
    shutil.copytree(audit_dir, stale, ignore=shutil.ignore_patterns("runs"))
    edited = json.loads((stale / "audit.json").read_text(encoding="utf-8"))
    edited["grade"]["reasons"] = ["changed after the pages were rendered"]
    write_json(stale / "audit.json", edited)
    assert main(["site", str(stale), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"simreport: {stale / 'report.html'}: ")
    assert main(["report", str(stale)]) == 0
    assert main(["site", str(stale), "--out", str(tmp_path / "site")]) == 0


def test_every_page_links_to_the_others_and_every_link_resolves(site: Path) -> None:
    index = (site / "index.html").read_text(encoding="utf-8")
    for plan_id in ("prisoners_dilemma", "pd-edited"):
        folder = site / plan_id
        assert {f"{plan_id}/report.html", f"{plan_id}/methods.html"} <= set(_hrefs(index))
        report = (folder / "report.html").read_text(encoding="utf-8")
        methods = (folder / "methods.html").read_text(encoding="utf-8")
        assert {"../index.html", "methods.html", "audit.json"} <= set(_hrefs(report))
        assert {"../index.html", "report.html", "audit.json"} <= set(_hrefs(methods))
        for href in _hrefs(report) + _hrefs(methods):
            if href.startswith("#"):
                assert f'id="{href[1:]}"' in report, href
                continue
            assert not href.startswith(("/", "file:", "http")), href
            assert (folder / href).resolve().is_file(), href


@pytest.mark.slow
@needs_chromium
def test_the_index_reads_at_400_px_without_sideways_scrolling(site: Path, tmp_path: Path) -> None:
    width = page_width(site / "index.html", tmp_path / "chromium", width=400)
    assert width.viewport == 400
    assert not width.scrolls_sideways, width
    assert width.outside == []


@pytest.mark.slow
@needs_chromium
def test_the_width_check_catches_a_page_that_scrolls_sideways(tmp_path: Path) -> None:
    """The 400 px checks are only worth something if a too-wide page fails them."""
    page = tmp_path / "wide.html"
    page.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>t</title></head>'
        '<body><div class="wide" style="width:900px">x</div>'
        '<div style="overflow-x:auto"><div style="width:900px">scrolls inside</div></div>'
        "</body></html>",
        encoding="utf-8",
    )
    width = page_width(page, tmp_path / "chromium", width=400)
    assert width.viewport == 400 and width.scrolls_sideways
    assert width.outside == ["div.wide"]
