"""An MCP server (Model Context Protocol, over stdio) exposing the audits under a results root:
`simreport mcp [--results DIR]`, or `python -m simreport.mcp_server [--results DIR]`.

Tools: `list_audits`, `get_audit`, `get_run`, `validate`, `run_audit`. An audit is addressed by
its plan id (or its directory name under the results root). A simreport error comes back as a
tool error holding its one-line message, and the server keeps running. The design: docs/mcp.md.
"""

# No `from __future__ import annotations`: the tools' annotations are evaluated where the tools
# are defined, inside build_server, so pydantic and the SDK are imported only when a server is
# built and `simreport mcp`'s registration costs the command line nothing.

import contextlib
import functools
import logging
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar, cast

from .core.errors import EXIT_INTERRUPTED, EXIT_OK, InputError, SchemaError, SimreportError
from .core.package_version import __version__
from .core.redaction import redact_document, redact_text

if TYPE_CHECKING:  # the SDK is imported when a server is built: `simreport --help` stays fast
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult

DEFAULT_RESULTS = "results"

DEFAULT_OMITTED = ("runs",)
"""Sections get_audit leaves out unless asked for: one row per run, the bulk of a large audit."""

_log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_INSTRUCTIONS = (
    "simreport audits LLM-driven simulations: an audit plan perturbs a base scenario along axes, "
    "runs every condition several times and records the statistics in audit.json. Start with "
    "list_audits; read one audit with get_audit (ask for a few sections, and one metric, to keep "
    "answers small); look at a single run with get_run; check a file with validate; run a plan "
    "with run_audit (synchronous: it returns when every run has finished)."
)


# --------------------------------------------------------------------------- audit directories


def read_json(path: Path) -> Any:
    from .core.files import read_json as read

    return read(path)


@dataclass(frozen=True)
class AuditDir:
    """An audit directory under the results root: it has a plan.json."""

    path: Path
    plan_id: str
    plan: dict[str, Any]


def _is_audit_dir(path: Path) -> bool:
    return path.is_dir() and (path / "plan.json").is_file()


def find_audits(root: Path) -> list[AuditDir]:
    """The audit directories directly under `root` (and `root` itself if it is one), by name.
    Hidden directories (such as the run store `.store`) are skipped."""
    candidates: list[Path] = []
    if _is_audit_dir(root):
        candidates.append(root)
    if root.is_dir():
        candidates.extend(
            child
            for child in sorted(root.iterdir(), key=lambda p: p.name)
            if not child.name.startswith(".") and _is_audit_dir(child)
        )
    audits = []
    for path in candidates:
        try:
            plan = read_json(path / "plan.json")
        except (OSError, ValueError):
            continue
        if not isinstance(plan, dict):
            continue
        audits.append(AuditDir(path, str(plan.get("id") or path.name), plan))
    return audits


def resolve_audit(root: Path, plan_id: str) -> AuditDir:
    """The audit directory of a plan id: the directory named after it if that is an audit of the
    plan, else the only audit of that plan, else the directory of that name."""
    audits = find_audits(root)
    by_name = [a for a in audits if a.path.name == plan_id and a.path != root]
    matching = [a for a in audits if a.plan_id == plan_id]
    if by_name and by_name[0] in matching:
        return by_name[0]
    if len(matching) == 1:
        return matching[0]
    if len(matching) > 1:
        names = ", ".join(a.path.name for a in matching)
        raise InputError(
            f"plan {plan_id!r} has several audit directories under {root}: {names}",
            expected="one of those directory names as plan_id",
        )
    if by_name:
        return by_name[0]
    known = ", ".join(sorted({a.plan_id for a in audits})) or "none"
    raise InputError(
        f"no audit of plan {plan_id!r} under {root}",
        expected=f"a plan id listed by list_audits (known: {known})",
    )


def audit_entry(audit: AuditDir) -> dict[str, Any]:
    """One row of list_audits. An audit that has not been analysed yet has no grade and counts
    no failures; its runs are the planned ones."""
    entry: dict[str, Any] = {
        "planId": audit.plan_id,
        "title": audit.plan.get("title"),
        "grade": None,
        "runs": None,
        "failed": None,
        "analysed": False,
        "path": str(audit.path),
    }
    audit_file = audit.path / "audit.json"
    if audit_file.is_file():
        try:
            doc = read_json(audit_file)
        except (OSError, ValueError):
            doc = None
        if isinstance(doc, dict):
            summary = doc.get("summary") or {}
            entry["title"] = (doc.get("plan") or {}).get("title", entry["title"])
            entry["grade"] = (doc.get("grade") or {}).get("grade")
            entry["runs"] = summary.get("runs")
            entry["failed"] = summary.get("failed")
            entry["analysed"] = True
            return entry
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        conditions = read_json(audit.path / "conditions.json")
        default = int(audit.plan.get("replications", 1))
        entry["runs"] = sum(int(c.get("replications", default)) for c in conditions)
    return entry


def load_audit(audit: AuditDir) -> dict[str, Any]:
    path = audit.path / "audit.json"
    if not path.is_file():
        raise InputError(
            "this audit has not been analysed: no audit.json",
            file=path,
            expected="`simreport analyse` on the audit directory first",
        )
    try:
        doc = read_json(path)
    except ValueError as exc:
        raise InputError(f"audit.json is not valid JSON: {exc}", file=path) from None
    if not isinstance(doc, dict):
        raise InputError("audit.json is not a JSON object", file=path)
    return doc


def select_audit(
    doc: Mapping[str, Any],
    sections: Sequence[str] | None,
    metric: str | None,
    *,
    file: Path | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The requested sections of an audit (default: all but DEFAULT_OMITTED), restricted to one
    metric when `metric` is given. Returns the selection and the sections left out."""
    available = list(doc)
    if sections:
        unknown = [s for s in sections if s not in doc]
        if unknown:
            raise InputError(
                f"unknown section {unknown[0]!r}",
                file=file,
                expected="one of " + ", ".join(available),
            )
        wanted = list(dict.fromkeys(sections))
    else:
        wanted = [s for s in available if s not in DEFAULT_OMITTED]
    metrics = [str(m) for m in doc.get("metrics") or []]
    if metric is not None and metric not in metrics:
        raise InputError(
            f"unknown metric {metric!r}",
            file=file,
            path="metrics",
            expected="one of " + (", ".join(metrics) or "(none)"),
        )
    out = {s: _only_metric(s, doc[s], metric) if metric else doc[s] for s in wanted}
    return out, [s for s in available if s not in wanted]


def _only_metric(section: str, value: Any, metric: str) -> Any:
    """A section restricted to one metric; sections not keyed by metric are returned as is."""

    def pick(mapping: Any) -> Any:
        return {metric: mapping[metric]} if isinstance(mapping, dict) and metric in mapping else {}

    if section == "metrics":
        return [metric]
    if section in {"tests", "notes", "directionConsistency", "mainEffects", "interactions"}:
        return pick(value)
    if section == "conditions" and isinstance(value, list):
        return [{**row, "means": pick(row.get("means"))} for row in value]
    if section == "runs" and isinstance(value, list):
        return [{**row, "metrics": pick(row.get("metrics"))} for row in value]
    if section == "crossModel" and isinstance(value, dict):
        return {model: pick(means) for model, means in value.items()}
    return value


def run_files(audit: AuditDir, condition: str, replication: int) -> dict[str, Any]:
    """One run's result.json and manifest.json (null when the run wrote none)."""
    from .harness import condition_dir

    cond_file = audit.path / "conditions.json"
    try:
        conditions = read_json(cond_file)
    except (OSError, ValueError):
        conditions = []
    if isinstance(conditions, dict):
        conditions = conditions.get("conditions", [])
    entry = next((c for c in conditions if isinstance(c, dict) and c.get("id") == condition), None)
    if entry is None and conditions:
        known = [str(c.get("id")) for c in conditions if isinstance(c, dict)]
        shown = ", ".join(known[:20]) + (f", … ({len(known)} in all)" if len(known) > 20 else "")
        raise InputError(
            f"no condition {condition!r} in this audit", file=cond_file, expected=f"one of {shown}"
        )
    directory = str(entry["dir"]) if entry is not None else condition_dir(condition)
    if entry is not None:
        default = int(audit.plan.get("replications", 1))
        reps = int(entry.get("replications", default))
        if not 0 <= replication < reps:
            raise InputError(
                f"condition {condition!r} has no replication {replication}",
                file=cond_file,
                expected=f"0 … {reps - 1}",
            )
    run = audit.path / "runs" / directory / str(replication)
    result_file = run / "result.json"
    if not result_file.is_file():
        raise InputError(
            "this run has no result.json (not run yet, or still running)",
            file=result_file,
            expected="a finished run",
        )
    manifest_file = run / "manifest.json"
    return {
        "planId": audit.plan_id,
        "condition": condition,
        "replication": replication,
        "path": str(run),
        "result": read_json(result_file),
        "manifest": read_json(manifest_file) if manifest_file.is_file() else None,
    }


def validation_report(path: str) -> dict[str, Any]:
    """validate's answer: ok with the kind and summary, or not ok with the located error."""
    from .api import validate

    try:
        checked = validate(path)
    except SimreportError as exc:
        report: dict[str, Any] = {
            "ok": False,
            "error": exc.one_line(),
            "file": exc.file,
            "line": exc.line,
            "path": exc.path,
            "expected": exc.expected,
        }
        if isinstance(exc, SchemaError):
            report["issues"] = [issue.as_dict() for issue in exc.issues]
        return report
    return {"ok": True, "kind": checked.kind, "summary": checked.summary, **checked.details}


def run_plan(
    root: Path,
    plan: str,
    *,
    replications: int | None,
    concurrency: int | None,
    provider: str | None,
    model: str | None = None,
    base_url: str | None = None,
) -> dict[str, Any]:
    """Run a plan into `root/<plan id>`, analyse it and report; return the summary."""
    from .api import audit
    from .harness import load_plan

    loaded = load_plan(plan, replications=replications, concurrency=concurrency)
    out = root / loaded.plan_id
    run = audit(
        plan,
        out,
        replications=replications,
        concurrency=concurrency,
        provider=provider,
        model=model,
        base_url=base_url,
    )
    results = [r for _, _, r in run.results]
    failed = sum(1 for r in results if r.failure is not None)
    incomplete = sum(1 for r in results if r.failure is None and not r.integrity.complete)
    doc = load_audit(AuditDir(out, loaded.plan_id, {}))
    return {
        "planId": loaded.plan_id,
        "path": str(out),
        "runs": len(results),
        "completed": len(results) - failed,
        "failed": failed,
        "incomplete": incomplete,
        "grade": doc.get("grade"),
        "summary": doc.get("summary"),
        "report": str(out / "report.html"),
    }


def _tool_errors(fn: Callable[P, R]) -> "Callable[P, R | CallToolResult]":
    """Report a simreport error as a tool error whose text is exactly its one-line message, and
    anything else as a tool error naming the exception (the traceback goes to the server's log,
    on stderr). The wrapper keeps the tool's name, docstring and signature (`__wrapped__`), from
    which the SDK builds the tool's input and output schemas."""

    def failed(message: str) -> "CallToolResult":
        from mcp.types import CallToolResult, TextContent

        return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> "R | CallToolResult":
        # Answers and errors leave the process: URL credentials in them (an llm.baseUrl echoed
        # by an error, an older audit written before redaction) are redacted on the way out.
        try:
            return cast(R, redact_document(fn(*args, **kwargs)))
        except SimreportError as exc:
            message = redact_text(exc.one_line())
            _log.info("tool %s failed: %s", fn.__name__, message)
            return failed(message)
        except Exception as exc:  # a tool's boundary: its bug is the client's error, logged
            trace = "".join(traceback.format_exception(exc)).rstrip()
            _log.error("tool %s failed\n%s", fn.__name__, redact_text(trace))
            return failed(redact_text(f"internal error: {type(exc).__name__}: {exc}"))

    return wrapper


# --------------------------------------------------------------------------- the server


def build_server(results_root: str | Path = DEFAULT_RESULTS) -> "MCPServer[Any]":
    """The MCP server over the audits under a results root, not yet serving.

    Args:
        results_root: the results root (relative paths are taken from the current working
            directory).

    Returns:
        The server, with its five tools.

    Raises:
        SimreportError: the `mcp` package is not installed (naming what to install).
    """
    from pydantic import Field

    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.types import ToolAnnotations
    except ImportError as exc:
        raise SimreportError(
            f"the MCP server needs the Python package `mcp` ({exc})",
            expected="`pip install 'mcp>=2.3,<3'`",
        ) from None

    root = Path(results_root).resolve()
    server: MCPServer[Any] = MCPServer(
        "simreport",
        title="simreport audits",
        instructions=_INSTRUCTIONS,
        version=__version__,
    )
    read_only = ToolAnnotations(read_only_hint=True, idempotent_hint=True)
    run_lock = threading.Lock()

    @server.tool(annotations=read_only)
    @_tool_errors
    def list_audits() -> dict[str, Any]:
        """List the audit directories under the results root: plan id, title, evidence grade,
        number of runs, failed runs and path. `grade` and `failed` are null for an audit that has
        not been analysed yet."""
        return {
            "root": str(root),
            "audits": [audit_entry(a) for a in find_audits(root)],
        }

    @server.tool(annotations=read_only)
    @_tool_errors
    def get_audit(
        plan_id: Annotated[str, Field(description="The plan id (or audit directory name).")],
        sections: Annotated[
            list[str] | None,
            Field(
                description=(
                    "Top-level sections of audit.json to return, e.g. ['summary', 'grade', "
                    "'tests']. Default: every section except 'runs' (one row per run)."
                )
            ),
        ] = None,
        metric: Annotated[
            str | None,
            Field(
                description=(
                    "Restrict metric-keyed parts (tests, notes, directionConsistency, condition "
                    "means, run metrics, crossModel) to this one metric."
                )
            ),
        ] = None,
    ) -> dict[str, Any]:
        """An audit's audit.json: the evidence grade, summary, conditions, pairwise tests against
        the base per metric, sensitivity per axis, and more. Ask for only the sections (and the
        metric) you need to keep the answer small."""
        audit = resolve_audit(root, plan_id)
        doc = load_audit(audit)
        selected, omitted = select_audit(doc, sections, metric, file=audit.path / "audit.json")
        return {
            "planId": audit.plan_id,
            "path": str(audit.path),
            "metric": metric,
            "audit": selected,
            "omitted": omitted,
        }

    @server.tool(annotations=read_only)
    @_tool_errors
    def get_run(
        plan_id: Annotated[str, Field(description="The plan id (or audit directory name).")],
        condition: Annotated[
            str, Field(description="The condition id, e.g. 'base' or 'linguistic_framing=risk'.")
        ],
        replication: Annotated[int, Field(ge=0, description="The replication index, from 0.")],
    ) -> dict[str, Any]:
        """One run of an audit: its result.json (status, metrics, integrity, failure, cost) and
        manifest.json (provider, model, seed, kernel fingerprint)."""
        return run_files(resolve_audit(root, plan_id), condition, replication)

    @server.tool(annotations=read_only)
    @_tool_errors
    def validate(
        path: Annotated[
            str,
            Field(
                description=(
                    "A scenario or audit plan file (YAML or JSON), relative to the server's "
                    "working directory or absolute."
                )
            ),
        ],
    ) -> dict[str, Any]:
        """Validate a scenario or an audit plan file without running anything. Returns ok=true
        with a summary, or ok=false with the error located in the file (file:line: path: what
        was expected) and, for schema errors, every issue."""
        return validation_report(path)

    @server.tool(annotations=ToolAnnotations(read_only_hint=False))
    @_tool_errors
    def run_audit(
        plan: Annotated[
            str,
            Field(
                description=(
                    "The audit plan file, relative to the server's working directory or absolute."
                )
            ),
        ],
        replications: Annotated[
            int | None, Field(ge=1, description="Override the plan's replications.")
        ] = None,
        concurrency: Annotated[
            int | None, Field(ge=1, description="Worker processes (default: the plan's).")
        ] = None,
        provider: Annotated[
            str | None,
            Field(description="Force every run onto this provider, e.g. 'offline'."),
        ] = None,
        model: Annotated[
            str | None,
            Field(description="Force every run onto this model (plans without `models`)."),
        ] = None,
        base_url: Annotated[
            str | None,
            Field(description="Force every run's llm.baseUrl (HTTP providers)."),
        ] = None,
    ) -> dict[str, Any]:
        """Run an audit plan into <results root>/<plan id>, then analyse and report it. Runs
        synchronously: returns when every run has finished, with the number of runs, failures,
        the evidence grade and the audit summary. Failed runs are data, not errors."""
        with run_lock:
            return run_plan(
                root,
                plan,
                replications=replications,
                concurrency=concurrency,
                provider=provider,
                model=model,
                base_url=base_url,
            )

    return server


# --------------------------------------------------------------------------- entry points


def serve_stdio(results_root: str | Path) -> int:
    """Serve over stdin/stdout until the client disconnects.

    Args:
        results_root: the results root, as in `build_server`.

    Returns:
        The exit code: EXIT_OK, or EXIT_INTERRUPTED after Ctrl-C.

    Raises:
        SimreportError: the `mcp` package is not installed.
    """
    try:
        build_server(results_root).run("stdio")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK


if __name__ == "__main__":
    # `python -m simreport.mcp_server [--results DIR]`: the command line's `simreport mcp`.
    from .cli.mcp import main

    sys.exit(main())
