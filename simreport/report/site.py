"""The static site: one folder per audit (report, methods, audit.json, figures) and an index.

Everything is static and linked relatively, so the site works from file:// as well as from any web
server; `serve` is a convenience for looking at it locally. The index carries no date, so the same
audits give the same bytes.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from ..analysis.audit_document import AuditDoc
from ..core.errors import InputError
from ..core.files import write_atomic
from ..core.package_version import __version__
from . import history, naming, verdict
from .document import read_audit_document
from .figures import format_number
from .methods import audit_hash_of
from .templating import environment
from .verdict import as_float

TEMPLATE = "index.html.j2"
DEFAULT_TITLE = "simreport audits"
PAGES = ("report.html", "methods.md", "methods.html", "audit.json")
RENDERED = ("report.html", "methods.md", "methods.html")
"""The pages rendered from audit.json, each naming the audit it was rendered from."""
FIGURE_DIR = "figures"
MISSING = "—"
GRADES = ("weak", "moderate", "strong")

# The plan schema's id pattern: also a safe directory name and URL path segment.
_PLAN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_DESIGNS = {"one_at_a_time": "one at a time", "full_factorial": "full factorial"}
_MEASURES = {"isolated": "isolated", "anyCell": "any cell", "mainEffect": "main effect"}


SiteReason = Literal["folder_name", "repeated_id", "missing_page", "stale_page", "no_site"]


class SiteRefusal(InputError):
    """The site cannot be built or served as asked; `reason` says why: a plan id unfit for a
    folder name or given twice, a page missing or not rendered from its audit.json, no site."""

    def __init__(self, message: str, *, reason: SiteReason, **where: Any) -> None:
        super().__init__(message, **where)
        self.reason: SiteReason = reason


def _count(value: Any) -> int:
    number = as_float(value)
    return int(number) if number is not None and math.isfinite(number) else 0


def _top_axis(audit: AuditDoc) -> dict[str, Any] | None:
    """The rank-1 axis of the sensitivity ranking and the measure it is ranked by."""
    for entry in verdict.sensitivity(audit):
        effect = entry.ranking_effect
        if entry.rank == 1 and effect is not None:
            return {
                "axis": entry.axis,
                "code": entry.code,
                "maxAbsD": effect.max_abs_d,
                "metric": effect.metric,
                "condition": effect.condition,
                "rankedBy": entry.ranked_by,
            }
    return None


def _check_plan_id(plan_id: str) -> str:
    if not _PLAN_ID.match(plan_id):
        raise SiteRefusal(
            f"plan id {plan_id!r} cannot name a site folder",
            reason="folder_name",
            expected="letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return plan_id


def site_entry(audit: AuditDoc, plan_id: str | None = None) -> dict[str, Any]:
    """The index row for one audit: what it tested, how well, and where its pages are.

    `plan_id` names the audit's folder in the site (default: the plan's own id). Values are as in
    audit.json (numbers stay numbers); `render_index` formats them.
    """
    plan, summary, grade = audit.plan, audit.summary, audit.grade
    folder = _check_plan_id(plan_id if plan_id is not None else plan.id or "")
    return {
        "id": folder,
        "title": plan.title,
        "scenario": (plan.base.name if plan.base is not None else None) or plan.base_scenario,
        "world": naming.world_name(plan),
        "design": plan.design,
        "claimType": plan.claim_type,
        "grade": grade.grade,
        "gradeReasons": list(grade.reasons),
        "verdict": verdict.stated_headline(audit),
        "decisions": verdict.decisions(audit),
        "achievedGrade": grade.achieved,
        "smallSpread": len(verdict.small_spread_rows(audit)),
        "purpose": audit.purpose.purpose,
        "replications": plan.replications,
        "models": list(plan.models),
        "conditions": summary.conditions,
        "runs": summary.runs,
        "failed": summary.failed,
        "incomplete": summary.incomplete,
        "excluded": summary.excluded,
        "topAxis": _top_axis(audit),
        "links": {
            "report": f"{folder}/report.html",
            "methods": f"{folder}/methods.html",
            "audit": f"{folder}/audit.json",
        },
    }


# --------------------------------------------------------------------------- rendering


def _text(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


def _plural_text(n: Any, singular: str) -> str:
    count = as_float(n)
    if count is None:
        return f"{MISSING} {singular}s"
    return f"{format_number(n)} {singular if count == 1 else singular + 's'}"


def _row(entry: Mapping[str, Any]) -> dict[str, Any]:
    grade = str(entry.get("grade") or "unknown")
    top = entry.get("topAxis")
    links = entry.get("links") or {}
    return {
        "id": str(entry.get("id")),
        "verdict": _text(entry.get("verdict")),
        "decisions": _text(entry.get("decisions")),
        "achieved": str(entry.get("achievedGrade") or ""),
        "reasons": [str(r) for r in entry.get("gradeReasons") or []],
        "small_spread": _count(entry.get("smallSpread")),
        "regression": entry.get("purpose") == "regression",
        "title": _text(entry.get("title")) if entry.get("title") else "",
        "scenario": _text(entry.get("scenario")),
        "world": _text(entry.get("world")),
        "design": _DESIGNS.get(str(entry.get("design")), _text(entry.get("design"))),
        "claim_type": _text(entry.get("claimType")),
        "grade": grade,
        "grade_class": grade if grade in GRADES else "unknown",
        "replications": _plural_text(entry.get("replications"), "replication"),
        "conditions": format_number(entry.get("conditions")),
        "runs": format_number(entry.get("runs")),
        "failed": format_number(entry.get("failed")),
        "incomplete": format_number(entry.get("incomplete")),
        "top_axis": None
        if top is None
        else {
            "axis": str(top.get("axis")),
            "code": _text(top.get("code")) if top.get("code") else "",
            "d": format_number(top.get("maxAbsD")),
            "metric": _text(top.get("metric")),
            "measure": _MEASURES.get(str(top.get("rankedBy")), ""),
        },
        "links": {key: str(links.get(key, "")) for key in ("report", "methods", "audit")},
    }


def render_index(entries: Sequence[Mapping[str, Any]], title: str = DEFAULT_TITLE) -> str:
    """index.html for `entries` (rows from `site_entry`), in the order given."""
    rows = [_row(e) for e in entries]
    grades = {g: sum(1 for r in rows if r["grade"] == g) for g in GRADES}
    return (
        environment()
        .get_template(TEMPLATE)
        .render(title=title, rows=rows, grades=grades, version=__version__)
    )


# --------------------------------------------------------------------------- writing


_STAMP = re.compile(r"<html\b[^>]*\s" + re.escape(naming.AUDIT_STAMP) + r'="([0-9a-f]{64})"')


def rendered_from(name: str, text: str) -> str | None:
    """The audit fingerprint a page says it was rendered from (None when it says none):
    report.html and methods.html on their <html>, methods.md in its closing sentence."""
    if name.endswith(".md"):
        return audit_hash_of(text)
    found = _STAMP.search(text[:2000])
    return found.group(1) if found else None


def check_pages(source: Path, audit: AuditDoc) -> None:
    """Refuse an audit whose pages are missing or were rendered from another audit.json (the
    audit was analysed again and its pages not re-rendered): the site never publishes a report
    that disagrees with the audit.json beside it."""
    fingerprint = naming.audit_fingerprint(audit)
    for name in PAGES:
        if not (source / name).is_file():
            raise SiteRefusal(
                f"the audit has no {name}",
                reason="missing_page",
                file=source / name,
                expected="an audit directory with audit.json, report.html and methods pages "
                "(run `simreport report` first)",
            )
    for name in RENDERED:
        text = (source / name).read_text(encoding="utf-8", errors="replace")
        if rendered_from(name, text) != fingerprint:
            raise SiteRefusal(
                f"{name} is out of date: it was not rendered from the audit.json beside it",
                reason="stale_page",
                file=source / name,
                expected=f"pages re-rendered from the current audit.json "
                f"(run `simreport report {source}`)",
            )


def _copy_audit(source: Path, target: Path) -> None:
    """Copy one audit's pages and figures into its site folder; drop figures it no longer has."""
    for name in PAGES:
        write_atomic(target / name, (source / name).read_bytes())
    figures = sorted((source / FIGURE_DIR).glob("*.svg")) if (source / FIGURE_DIR).is_dir() else []
    for figure in figures:
        write_atomic(target / FIGURE_DIR / figure.name, figure.read_bytes())
    kept = {f.name for f in figures}
    if (target / FIGURE_DIR).is_dir():
        for stale in sorted((target / FIGURE_DIR).glob("*.svg")):
            if stale.name not in kept:
                stale.unlink()


def write_site(
    site_dir: str | Path,
    audits: Sequence[tuple[str, str | Path]],
    title: str = DEFAULT_TITLE,
) -> Path:
    """Copy each audit into `site_dir/<plan id>/` and write `site_dir/index.html` listing them
    in the order given. Folders of audits not listed are left alone.

    Args:
        site_dir: the site's folder.
        audits: (plan id, audit directory) pairs, in the order the index lists them.
        title: the index page's title.

    Returns:
        The path of index.html.

    Raises:
        SiteRefusal: a plan id given twice or unfit for a folder name, or an audit whose
            pages are missing or out of date with its audit.json (`check_pages`).
        InputError: an audit.json that cannot be read. All before anything is written.
    """
    root = Path(site_dir)
    ids = [plan_id for plan_id, _ in audits]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise SiteRefusal(
            f"plan ids repeat: {', '.join(repeated)}",
            reason="repeated_id",
            expected="one audit per plan id",
        )
    entries = []
    # Every audit is checked before anything is copied: a stale page leaves the site untouched.
    for plan_id, audit_dir in audits:
        source = Path(audit_dir)
        audit = read_audit_document(source / "audit.json")
        entries.append(site_entry(audit, _check_plan_id(plan_id)))
        check_pages(source, audit)
    for plan_id, audit_dir in audits:
        _copy_audit(Path(audit_dir), root / plan_id)
        # Earlier builds' audit.json stay in the site when results/ is cleaned.
        history.copy_history(audit_dir, root / plan_id)
    index = root / "index.html"
    write_atomic(index, render_index(entries, title))
    return index


# --------------------------------------------------------------------------- serving


class _SiteHandler(SimpleHTTPRequestHandler):
    """Static files, with the types of the site's own files spelled out."""

    extensions_map = {  # noqa: RUF012  (the base class declares a plain dict attribute)
        **SimpleHTTPRequestHandler.extensions_map,
        ".html": "text/html; charset=utf-8",
        ".md": "text/markdown; charset=utf-8",
        ".json": "application/json",
        ".svg": "image/svg+xml",
    }


def site_server(
    site_dir: str | Path, host: str = "127.0.0.1", port: int = 8000
) -> ThreadingHTTPServer:
    """An HTTP server for `site_dir`, bound but not yet serving (port 0 picks a free port)."""
    root = Path(site_dir)
    if not root.is_dir():
        raise SiteRefusal(
            "no site to serve", reason="no_site", file=root, expected="a directory built by `site`"
        )
    handler = functools.partial(_SiteHandler, directory=str(root))
    return ThreadingHTTPServer((host, port), handler)


def serve(
    site_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    on_ready: Callable[[ThreadingHTTPServer], None] | None = None,
) -> None:
    """Serve `site_dir` over HTTP until interrupted (or until another thread calls `shutdown()` on
    the server `on_ready` receives).

    Args:
        site_dir: a built site.
        host: the address to bind (default: localhost only).
        port: the port to listen on (0: a free one).
        on_ready: called with the bound server before it serves.

    Raises:
        SiteRefusal: `site_dir` is not a folder.
    """
    server = site_server(site_dir, host, port)
    with server:
        if on_ready is not None:
            on_ready(server)
        # Ctrl-C is how a person stops a local preview: not an error.
        with contextlib.suppress(KeyboardInterrupt):
            server.serve_forever()
