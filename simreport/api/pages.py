"""The verbs of the pages: `analyse` an audit's runs into audit.json (re-rendering the pages it
has), render its `report` and methods, build a static `site` of audits and `serve` it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import InputError
from ..core.files import check_output_dir
from .recording import finish_recording, ledger_recorder

if TYPE_CHECKING:
    from ..ledger.recording import LedgerRecorder

RENDERED_PAGES = ("report.html", "methods.md", "methods.html", "figures")
"""What `report` renders from audit.json: re-rendered whenever `analyse` rewrites it."""


def analyse(
    audit_dir: str | Path,
    *,
    include_incomplete: bool | None = None,
    ledger: LedgerRecorder | str | bool = True,
) -> dict[str, Any]:
    """Compute audit.json and runs.parquet from an audit directory's runs, as `simreport
    analyse` does. Pages already in the directory (report, methods, figures) are re-rendered
    from the new audit.json, so none is left describing the old one; a directory without pages
    gets none. The analysis is recorded in the ledger as a build, with its runs.

    Args:
        audit_dir: the audit directory (plan.json, conditions.json and the runs).
        include_incomplete: whether incomplete runs enter the statistics (default: the plan's
            `includeIncomplete`).
        ledger: where the build is recorded, as in `run` (see `ledger_recorder`).

    Returns:
        The audit: audit.json's content.

    Raises:
        InputError: not an audit directory (plan.json and conditions.json).
        LedgerIncomplete: the files are complete, but the ledger did not record the build (when
            this call made the recorder).
    """
    from ..analysis.audit import analyse_dir

    root = Path(audit_dir)
    recorder, owned = ledger_recorder(ledger, root.parent)
    had_pages = any((root / name).exists() for name in RENDERED_PAGES)
    audit = analyse_dir(root, include_incomplete=include_incomplete)
    if had_pages:
        report(root)
    recorder.record_build(root)
    finish_recording(recorder, owned)
    return audit


def report(audit_dir: str | Path) -> Path:
    """Render report.html (and the figures) and the methods pages from audit.json, as
    `simreport report` does. report.html's section of changes also reads the build kept in
    `history/`.

    Args:
        audit_dir: an analysed audit directory.

    Returns:
        The path of report.html.

    Raises:
        InputError: the directory has no audit.json, or one of an older schema or that breaks
            its contract.
    """
    from ..report import write_methods, write_report

    root = Path(audit_dir)
    if not (root / "audit.json").is_file():
        raise InputError(
            "no audit.json here", file=root / "audit.json", expected="run `simreport analyse` first"
        )
    path = write_report(root)
    write_methods(root)
    return path


def site(audit_dirs: list[str | Path], out: str | Path, *, title: str = "simreport audits") -> Path:
    """Build a static site (an index and one folder per audit) from finished audit directories,
    as `simreport site` does.

    Args:
        audit_dirs: the audit directories, in the order the index lists them.
        out: the site's folder; refused before anything is written when it cannot be one.
        title: the index page's title.

    Returns:
        The path of the site's index.html.

    Raises:
        InputError: an audit directory without audit.json, or one whose pages are missing or
            out of date with it, or two audits of one plan id; all before anything is written.
    """
    from ..report import write_site
    from ..report.document import read_audit_document

    check_output_dir(out)
    entries = []
    for audit_dir in audit_dirs:
        root = Path(audit_dir)
        if not (root / "audit.json").is_file():
            raise InputError(
                "no audit.json here",
                file=root / "audit.json",
                expected="an audit directory built by `simreport audit`",
            )
        plan_id = read_audit_document(root / "audit.json").plan.id or ""
        entries.append((plan_id, root))
    return write_site(Path(out), entries, title=title)


def serve(site_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve a built site over HTTP until interrupted, as `simreport serve` does.

    Args:
        site_dir: a site built by `snakemake` or `site`.
        host: the address to bind (default: localhost only).
        port: the port to listen on.

    Raises:
        InputError: the folder has no index.html.
    """
    from ..report import serve as serve_site

    root = Path(site_dir)
    if not (root / "index.html").is_file():
        raise InputError(
            "no index.html here",
            file=root / "index.html",
            expected="a site built by `snakemake` or `simreport site`",
        )
    serve_site(root, host=host, port=port)


def analyse_and_report(audit_dir: Path, include_incomplete: bool | None) -> None:
    from ..analysis.audit import analyse_dir

    analyse_dir(audit_dir, include_incomplete=include_incomplete)
    report(audit_dir)
