"""The MCP server, driven over stdio by the SDK's own client, against a real small audit."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

import simreport
from simreport.cli.mcp import cmd_mcp, register_cli
from simreport.core.errors import DocumentError, SimreportError
from simreport.harness import load_plan
from simreport.mcp_server import build_server, load_audit, resolve_audit, run_files, select_audit

REPO = Path(__file__).resolve().parents[2]
PD_PLAN = REPO / "examples" / "prisoners_dilemma" / "audit.yaml"
TOOLS = {"list_audits", "get_audit", "get_run", "validate", "run_audit"}


class Server:
    """A synchronous handle on one MCP client session (the session lives in the portal's loop)."""

    def __init__(self, portal: BlockingPortal, session: ClientSession, log: Path) -> None:
        self.portal = portal
        self.session = session
        self.log = log

    def call(self, tool: str, timeout: float = 60.0, **arguments: Any) -> CallToolResult:
        return self.portal.call(
            lambda: self.session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        )

    def ok(self, tool: str, timeout: float = 60.0, **arguments: Any) -> dict[str, Any]:
        result = self.call(tool, timeout, **arguments)
        assert not result.is_error, f"{tool} failed: {text_of(result)}\n{self.log.read_text()}"
        data = result.structured_content
        assert isinstance(data, dict)
        # The text content carries the same JSON, for clients that ignore structured content.
        assert json.loads(text_of(result)) == data
        return data

    def error(self, tool: str, **arguments: Any) -> str:
        result = self.call(tool, **arguments)
        assert result.is_error, f"{tool} should have failed: {result}"
        return text_of(result)


def text_of(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, TextContent))


@asynccontextmanager
async def _connect(params: StdioServerParameters, errlog: TextIO) -> AsyncIterator[ClientSession]:
    async with (
        stdio_client(params, errlog=errlog) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp") / "results"
    simreport.audit(PD_PLAN, out=root / "prisoners_dilemma", replications=2)
    return root


@pytest.fixture(scope="module")
def server(results: Path) -> Iterator[Server]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "simreport.mcp_server", "--results", str(results)],
        cwd=REPO,
    )
    log = results.parent / "server.log"
    with (
        log.open("w", encoding="utf-8") as errlog,
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(_connect(params, errlog)) as session,
    ):
        yield Server(portal, session, log)


def test_lists_the_tools(server: Server) -> None:
    listed = server.portal.call(server.session.list_tools)
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == TOOLS
    assert set(tools["get_run"].input_schema["required"]) == {"plan_id", "condition", "replication"}
    assert set(tools["run_audit"].input_schema["properties"]) == {
        "plan",
        "replications",
        "concurrency",
        "provider",
        "model",
        "base_url",
    }
    assert tools["get_audit"].annotations is not None
    assert tools["get_audit"].annotations.read_only_hint is True


def test_list_audits(server: Server, results: Path) -> None:
    data = server.ok("list_audits")
    assert data["root"] == str(results.resolve())
    (entry,) = [a for a in data["audits"] if a["planId"] == "prisoners_dilemma"]
    assert entry["title"].startswith("Prisoner's dilemma")
    assert entry["grade"] == "weak"
    assert entry["runs"] == 30  # 15 conditions × 2 replications
    assert entry["failed"] == 0
    assert entry["analysed"] is True
    assert Path(entry["path"]) == (results / "prisoners_dilemma").resolve()


def test_get_audit_whole_leaves_out_the_runs(server: Server, results: Path) -> None:
    data = server.ok("get_audit", plan_id="prisoners_dilemma")
    on_disk = json.loads((results / "prisoners_dilemma" / "audit.json").read_text())
    assert data["omitted"] == ["runs"]
    assert set(data["audit"]) == set(on_disk) - {"runs"}
    assert data["audit"]["tests"] == on_disk["tests"]


def test_get_audit_sections_and_metric(server: Server, results: Path) -> None:
    data = server.ok(
        "get_audit",
        plan_id="prisoners_dilemma",
        sections=["summary", "grade", "tests", "conditions"],
        metric="cooperationRate",
    )
    audit = data["audit"]
    assert list(audit) == ["summary", "grade", "tests", "conditions"]
    assert "runs" in data["omitted"]
    assert audit["summary"]["runs"] == 30
    assert audit["grade"]["grade"] == "weak"
    assert list(audit["tests"]) == ["cooperationRate"]
    rows = audit["tests"]["cooperationRate"]
    assert len(rows) == 14 and rows[0]["condition"] == "linguistic_framing=moralised"
    assert all(set(c["means"]) == {"cooperationRate"} for c in audit["conditions"])

    runs = server.ok("get_audit", plan_id="prisoners_dilemma", sections=["runs"])
    assert len(runs["audit"]["runs"]) == 30


def _raised(call: Callable[[], object]) -> SimreportError:
    with pytest.raises(SimreportError) as caught:
        call()
    return caught.value


def test_get_audit_errors(server: Server, results: Path) -> None:
    # The tool error's text is the error's one-line message, nothing around it.
    root = results.resolve()
    error = _raised(lambda: resolve_audit(root, "no_such_plan"))
    assert server.error("get_audit", plan_id="no_such_plan") == error.one_line()
    assert error.file is None and "'no_such_plan'" in error.message and str(root) in error.message
    assert error.expected is not None and "prisoners_dilemma" in error.expected

    audit_file = root / "prisoners_dilemma" / "audit.json"
    doc = load_audit(resolve_audit(root, "prisoners_dilemma"))
    error = _raised(lambda: select_audit(doc, ["bogus"], None, file=audit_file))
    assert server.error("get_audit", plan_id="prisoners_dilemma", sections=["bogus"]) == (
        error.one_line()
    )
    assert (error.file, error.path) == (str(audit_file), None) and "'bogus'" in error.message
    assert error.expected is not None and "summary" in error.expected

    error = _raised(lambda: select_audit(doc, None, "bogus", file=audit_file))
    assert server.error("get_audit", plan_id="prisoners_dilemma", metric="bogus") == (
        error.one_line()
    )
    assert (error.file, error.path) == (str(audit_file), "metrics") and "'bogus'" in error.message
    assert error.expected is not None and "cooperationRate" in error.expected


def test_get_run(server: Server, results: Path) -> None:
    data = server.ok(
        "get_run", plan_id="prisoners_dilemma", condition="linguistic_framing=risk", replication=1
    )
    assert data["result"]["condition"] == "linguistic_framing=risk"
    assert data["result"]["replication"] == 1
    assert "cooperationRate" in data["result"]["metrics"]
    assert data["manifest"]["replication"] == 1
    assert data["manifest"]["provider"] == "offline"
    run_dir = results / "prisoners_dilemma" / "runs" / "linguistic_framing=risk" / "1"
    assert Path(data["path"]) == run_dir.resolve()


def test_get_run_errors(server: Server, results: Path) -> None:
    audit = resolve_audit(results.resolve(), "prisoners_dilemma")
    conditions_file = str(audit.path / "conditions.json")
    error = _raised(lambda: run_files(audit, "nope", 0))
    message = server.error("get_run", plan_id="prisoners_dilemma", condition="nope", replication=0)
    assert message == error.one_line()
    assert error.file == conditions_file and "'nope'" in error.message
    assert error.expected is not None and "linguistic_framing=risk" in error.expected
    error = _raised(lambda: run_files(audit, "base", 2))
    message = server.error("get_run", plan_id="prisoners_dilemma", condition="base", replication=2)
    assert message == error.one_line()
    assert error.file == conditions_file and error.expected == "0 … 1"  # two replications
    error = _raised(lambda: resolve_audit(results.resolve(), "no_such_plan"))
    message = server.error("get_run", plan_id="no_such_plan", condition="base", replication=0)
    assert message == error.one_line()


def test_validate(server: Server, tmp_path: Path) -> None:
    good = server.ok("validate", path="examples/prisoners_dilemma/audit.yaml")  # relative to cwd
    assert good["ok"] is True
    assert good["kind"] == "plan"
    assert good["planId"] == "prisoners_dilemma"
    assert "15 conditions" in good["summary"]

    text = (REPO / "examples" / "prisoners_dilemma" / "scenario.yaml").read_text()
    assert "\nsteps: 10\n" in text
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(text.replace("\nsteps: 10\n", "\nsteps: many\n"))
    bad = server.ok("validate", path=str(bad_file))
    assert bad["ok"] is False
    assert bad["file"] == str(bad_file)
    assert bad["path"] == "steps"
    assert bad["line"] == text.splitlines().index("steps: 10") + 1
    assert bad["error"].startswith(f"{bad_file}:{bad['line']}: steps: ")
    assert bad["issues"][0]["path"] == "steps"

    missing = server.ok("validate", path=str(tmp_path / "missing.yaml"))
    assert missing["ok"] is False and missing["file"] == str(tmp_path / "missing.yaml")
    assert (missing["line"], missing["path"]) == (None, None) and "issues" not in missing


def test_run_audit_then_list_it(server: Server, results: Path) -> None:
    data = server.ok(
        "run_audit",
        timeout=300,
        plan="examples/echo_chamber/audit.yaml",
        replications=2,
        concurrency=2,
        provider="offline",
    )
    assert data["planId"] == "echo_chamber"
    assert Path(data["path"]) == (results / "echo_chamber").resolve()
    assert data["runs"] == 26  # 13 conditions × 2 replications
    assert data["failed"] == 0 and data["completed"] == 26
    assert data["grade"]["grade"] == "weak"
    assert data["summary"]["runs"] == 26
    assert (results / "echo_chamber" / "audit.json").is_file()
    assert (results / "echo_chamber" / "report.html").is_file()

    listed = server.ok("list_audits")
    assert [a["planId"] for a in listed["audits"]] == ["echo_chamber", "prisoners_dilemma"]
    summary = server.ok("get_audit", plan_id="echo_chamber", sections=["summary"])
    assert summary["audit"]["summary"]["runs"] == 26


def test_run_audit_errors(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # where the server runs
    error = _raised(lambda: load_plan("examples/no_such/audit.yaml"))
    assert type(error) is DocumentError and error.file == "examples/no_such/audit.yaml"
    assert server.error("run_audit", plan="examples/no_such/audit.yaml") == error.one_line()
    # Arguments outside the schema are refused before anything runs.
    server.error("run_audit", plan="examples/echo_chamber/audit.yaml", replications=0)


def test_unknown_tool_is_an_error_and_the_server_keeps_serving(server: Server) -> None:
    server.error("no_such_tool")
    assert server.ok("list_audits")["audits"]


# --------------------------------------------------------------------------- in-process


def test_register_cli_adds_the_mcp_subcommand() -> None:
    parser = argparse.ArgumentParser(prog="simreport")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["mcp", "--results", "elsewhere"])
    assert args.func is cmd_mcp
    assert args.results == "elsewhere"
    assert parser.parse_args(["mcp"]).results == "results"


def test_build_server_defaults_to_results_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    server = build_server()
    with start_blocking_portal() as portal:
        result = portal.call(server.call_tool, "list_audits", {})
    assert isinstance(result, CallToolResult)
    assert result.structured_content == {"root": str(tmp_path.resolve() / "results"), "audits": []}


def test_an_unexpected_exception_is_a_tool_error_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(root: Path) -> list[Any]:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("simreport.mcp_server.find_audits", broken)
    server = build_server(tmp_path)
    with start_blocking_portal() as portal:
        result = portal.call(server.call_tool, "list_audits", {})
    assert isinstance(result, CallToolResult)
    assert result.is_error
    assert text_of(result) == "internal error: RuntimeError: disk on fire"


def _fake_audit(path: Path, plan_id: str, replications: int = 3) -> None:
    path.mkdir(parents=True)
    plan = {"id": plan_id, "title": f"Plan {plan_id}", "replications": replications}
    (path / "plan.json").write_text(json.dumps(plan))
    conditions = [{"id": "base", "dir": "base"}, {"id": "a=1", "dir": "a=1"}]
    (path / "conditions.json").write_text(json.dumps(conditions))


def test_audits_not_yet_analysed_and_audits_found_by_directory(tmp_path: Path) -> None:
    _fake_audit(tmp_path / "p", "p")
    _fake_audit(tmp_path / "p-old", "p", replications=1)
    _fake_audit(tmp_path / "q-1", "q")
    _fake_audit(tmp_path / "q-2", "q")
    (tmp_path / ".store").mkdir()  # the run store is not an audit
    server = build_server(tmp_path)

    def call(tool: str, **arguments: Any) -> CallToolResult:
        with start_blocking_portal() as portal:
            result = portal.call(server.call_tool, tool, arguments)
        assert isinstance(result, CallToolResult)
        return result

    audits = call("list_audits").structured_content["audits"]
    assert [(a["path"], a["planId"]) for a in audits] == [
        (str(tmp_path / "p"), "p"),
        (str(tmp_path / "p-old"), "p"),
        (str(tmp_path / "q-1"), "q"),
        (str(tmp_path / "q-2"), "q"),
    ]
    assert audits[0] | {"path": None} == {
        "planId": "p",
        "title": "Plan p",
        "grade": None,
        "runs": 6,  # planned: 2 conditions × 3 replications
        "failed": None,
        "analysed": False,
        "path": None,
    }
    assert audits[1]["runs"] == 2

    # `p` is the directory named after the plan; `p-old` is reached by its directory name.
    error = _raised(lambda: load_audit(resolve_audit(tmp_path, "p")))
    assert text_of(call("get_audit", plan_id="p")) == error.one_line()
    assert error.file == str(tmp_path / "p" / "audit.json")
    assert error.expected is not None and "simreport analyse" in error.expected
    assert str(tmp_path / "p-old") in text_of(call("get_audit", plan_id="p-old"))
    # Two directories of one plan, neither named after it: ask for a directory name.
    ambiguous = call("get_audit", plan_id="q")
    error = _raised(lambda: resolve_audit(tmp_path, "q"))
    assert ambiguous.is_error and text_of(ambiguous) == error.one_line()
    assert error.file is None and "q-1, q-2" in error.message
    # A known condition whose run has not finished yet.
    message = text_of(call("get_run", plan_id="p", condition="a=1", replication=0))
    assert message.startswith(f"{tmp_path / 'p' / 'runs' / 'a=1' / '0' / 'result.json'}: ")
