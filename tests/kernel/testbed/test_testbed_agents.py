"""Agents under test: the reference agent's decisions, reading external agents' answers, the HTTP
adapter against an OpenAI-compatible server this test starts on loopback, and the Python
entry-point adapter, each alone and end to end through a refund desk run."""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.core.overrides import set_path
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.replay_runner import replay_run
from simreport.kernel.testbed.agents import (
    AgentError,
    HttpAgent,
    PythonAgent,
    Session,
    parse_assistant,
    resolve_entry,
)
from simreport.kernel.testbed.assets import PromptAsset, ToolContractAsset
from simreport.kernel.testbed.records import read_records
from simreport.kernel.world import Decision, DecisionRequest
from simreport.kernel.worlds.refund_desk.reference_agent import CHECK, CREATE_AGAIN, ReferenceAgent
from simreport.ledger import connect, ingest_run
from simreport.ledger import tables as t

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"
ORDER = "B2026-0901-7734"


# --------------------------------------------------------------------------- an external agent


def external_agent(body: Mapping[str, Any]) -> dict[str, Any]:
    """A small, deterministic refund agent speaking the chat-completions format: it asks for
    the order number, submits, checks the status after a timeout, and reports."""
    messages = body["messages"]
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    found = re.findall(r"B\d{4}-\d{4}-\d{4}", said)
    calls = [
        (c["function"]["name"], c["id"])
        for m in messages
        if m["role"] == "assistant"
        for c in m.get("tool_calls") or []
    ]
    results = {m["tool_call_id"]: json.loads(m["content"]) for m in messages if m["role"] == "tool"}
    if not found:
        return {"role": "assistant", "content": "Could you please tell me your order number?"}
    order = found[-1]
    if not calls:
        return _call("call_1", "create_refund", {"order_no": order, "amount_minor": 19900})
    name, last_id = calls[-1]
    last = results.get(last_id, {})
    if name == "create_refund" and not last.get("ok"):
        return _call(f"call_{len(calls) + 1}", "get_refund", {"order_no": order})
    refunds = last.get("refunds") or ([last["refund"]] if "refund" in last else [])
    accepted = [r for r in refunds if r["state"] == "accepted"]
    if accepted:
        amount = accepted[0]["amountMinor"]
        return {
            "role": "assistant",
            "content": f"Your refund of {amount // 100}.{amount % 100:02d} has been accepted.",
        }
    return {"role": "assistant", "content": "Please wait a moment while I check."}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


class _Handler(BaseHTTPRequestHandler):
    server: _AgentServer

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length))
        self.server.requests.append(
            {"path": self.path, "headers": dict(self.headers), "body": body}
        )
        if self.server.echo is not None:
            # A debugging server that echoes the request's Authorization header.
            status, json_body = self.server.echo
            text = f"debug: authorization={self.headers.get('authorization')}"
            data = json.dumps({"error": text}).encode() if json_body else text.encode()
            self.send_response(status)
            self.end_headers()
            self.wfile.write(data)
            return
        if self.server.leak:
            # An agent that quotes the request's Authorization header in its replies.
            message = external_agent(body)
            if message.get("content"):
                message["content"] += f" (debug: {self.headers.get('authorization')})"
            data = json.dumps(
                {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(data)
            return
        if self.server.status != 200:
            self.send_response(self.server.status)
            self.end_headers()
            self.wfile.write(b'{"error": "boom"}')
            return
        answer = {
            "id": "cmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": external_agent(body), "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _AgentServer(ThreadingHTTPServer):
    requests: list[dict[str, Any]]
    status: int
    echo: tuple[int, bool] | None
    """(status, whether the body is JSON) of a reply echoing the Authorization header."""
    leak: bool
    """Answer as the agent does, quoting the Authorization header in every reply."""


@pytest.fixture
def agent_server() -> Iterator[_AgentServer]:
    server = _AgentServer(("127.0.0.1", 0), _Handler)
    server.requests = []
    server.status = 200
    server.echo = None
    server.leak = False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def url(server: _AgentServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}/v1"


# --------------------------------------------------------------------------- helpers


def contract() -> ToolContractAsset:
    doc = json.loads(json.dumps(_yaml(EXAMPLE / "assets" / "refund-api" / "1.4.0.yaml")))
    return ToolContractAsset.model_validate(doc["content"])


def prompt(version: str = "1.0.0") -> PromptAsset:
    doc = _yaml(EXAMPLE / "assets" / "refund-prompt" / f"{version}.yaml")
    return PromptAsset.model_validate(doc["content"])


def _yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def copy_example(tmp_path: Path) -> Path:
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    return root


def add_agent(root: Path, name: str, content: dict[str, Any]) -> None:
    folder = root / "assets" / name
    folder.mkdir(parents=True)
    doc = {"kind": "agent", "name": name, "version": "1.0.0", "content": content}
    (folder / "1.0.0.json").write_text(json.dumps(doc), encoding="utf-8")


def scenario_doc(**overrides: Any) -> dict[str, Any]:
    doc = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    for path, value in overrides.items():
        doc = set_path(doc, path.replace("__", "."), value)
    return doc


# --------------------------------------------------------------------------- reference agent


class Recorder:
    """A decision maker that records the requests and picks a fixed option where offered."""

    def __init__(self, prefer: str) -> None:
        self.prefer = prefer
        self.requests: list[DecisionRequest] = []

    def __call__(self, request: DecisionRequest) -> Decision:
        self.requests.append(request)
        option = self.prefer if self.prefer in request.options else request.options[0]
        return Decision(option, "test")


def after_timeout_session() -> Session:
    session = Session(None)
    session.user(f"My order number is {ORDER}")
    session.messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "ref-0001",
                    "type": "function",
                    "function": {"name": "create_refund", "arguments": "{}"},
                }
            ],
        }
    )
    session.tool("ref-0001", {"ok": False, "error": "timeout", "message": "no response"})
    return session


def test_reference_agent_faces_the_ambiguity_and_acts_on_its_choice() -> None:
    for prefer, tool in ((CHECK, "get_refund"), (CREATE_AGAIN, "create_refund")):
        decide = Recorder(prefer)
        agent = ReferenceAgent(prompt(), contract().tools, decide)
        step = agent.step(after_timeout_session())
        request = decide.requests[-1]
        assert set(request.options) == {CHECK, CREATE_AGAIN, "send a reply"}
        assert "unknown" in request.situation
        assert [c.name for c in step.tool_calls] == [tool]
        assert step.tool_calls[0].arguments is not None
        assert step.tool_calls[0].arguments["order_no"] == ORDER


def test_reference_agent_asks_for_what_it_lacks_and_never_invents_parameters() -> None:
    decide = Recorder("look up the order")
    agent = ReferenceAgent(prompt(), contract().tools, decide)
    session = Session(None)
    session.user("I want my refund of 199.00")
    step = agent.step(session)
    assert "order number" in decide.requests[-1].situation
    assert step.tool_calls[0].arguments == {}  # no order number known: none made up


def test_prompt_wording_and_model_move_the_reference_agent() -> None:
    from simreport.core.schema import LLMConfig, PromptConfig
    from simreport.kernel import prompts
    from simreport.kernel.providers import make_provider
    from simreport.kernel.providers.base import ChatRequest

    def share_checking(version: str, model: str) -> float:
        provider = make_provider(LLMConfig(model=model, temperature=0.0))
        picks = []
        for seed in range(60):
            decide = Recorder(CHECK)
            ReferenceAgent(prompt(version), contract().tools, decide).step(after_timeout_session())
            request = decide.requests[-1]
            messages = prompts.render(
                request, {"role": "assistant"}, PromptConfig(), ["instructions", "memory", "goals"]
            )
            answer = provider.complete(
                ChatRequest(messages, model, 0.0, 16, seed, options=request.options)
            )
            picks.append(answer.text == CHECK)
        return sum(picks) / len(picks)

    careful, hurried = (
        share_checking("1.0.0", "offline-base"),
        share_checking("2.0.0", "offline-base"),
    )
    assert careful > hurried + 0.2
    assert share_checking("1.0.0", "offline-large") != share_checking("1.0.0", "offline-small")


# --------------------------------------------------------------------------- reading answers


def test_parse_assistant_reads_tool_calls_replies_and_bad_arguments() -> None:
    ids = iter(f"gen-{i}" for i in range(10))
    step = parse_assistant(
        {
            "choices": [{"message": _call("c1", "get_refund", {"order_no": ORDER})}],
            "usage": {"prompt_tokens": 3},
        },
        lambda: next(ids),
    )
    assert step.tool_calls[0].arguments == {"order_no": ORDER}
    assert step.usage == {"prompt_tokens": 3}
    bad = parse_assistant(
        {"tool_calls": [{"function": {"name": "get_refund", "arguments": "{not json"}}]},
        lambda: next(ids),
    )
    assert bad.tool_calls[0].arguments is None and bad.tool_calls[0].id == "gen-0"
    assert parse_assistant({"content": "Hello"}, lambda: "x").reply == "Hello"
    with pytest.raises(AgentError):
        parse_assistant({"choices": []}, lambda: "x")


# --------------------------------------------------------------------------- HTTP adapter


def test_http_agent_speaks_chat_completions_with_tools(agent_server: _AgentServer) -> None:
    agent = HttpAgent(
        url(agent_server),
        "agent-x",
        [{"type": "function", "function": {"name": "get_refund"}}],
        timeout=5,
        traceparent=lambda: "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    session = Session("Be helpful.")
    session.user(f"Refund {ORDER} please")
    step = agent.step(session)
    agent.close()
    assert [c.name for c in step.tool_calls] == ["create_refund"]
    assert step.usage == {"prompt_tokens": 11, "completion_tokens": 5}
    sent = agent_server.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"]["model"] == "agent-x"
    assert sent["body"]["messages"][0] == {"role": "system", "content": "Be helpful."}
    assert sent["body"]["tools"][0]["function"]["name"] == "get_refund"
    assert sent["headers"]["traceparent"].startswith("00-aaaa")


def test_http_agent_failures_become_agent_errors(agent_server: _AgentServer) -> None:
    agent_server.status = 500
    agent = HttpAgent(url(agent_server), None, [], timeout=5)
    with pytest.raises(AgentError) as info:
        agent.step(Session(None))
    assert info.value.kind == "sut_error"
    agent.close()


SECRET = "sk-agent-secret-1234567890-DO-NOT-LEAK"


@pytest.mark.parametrize(
    ("echo", "kind"),
    [((401, True), "sut_error"), ((500, False), "sut_error"), ((200, False), "sut_bad_response")],
    ids=["401-json", "500-text", "200-not-json"],
)
def test_http_agent_errors_never_carry_the_api_key(
    agent_server: _AgentServer,
    monkeypatch: pytest.MonkeyPatch,
    echo: tuple[int, bool],
    kind: str,
) -> None:
    monkeypatch.setenv("SIMREPORT_TEST_AGENT_KEY", SECRET)
    agent_server.echo = echo
    agent = HttpAgent(
        url(agent_server), None, [], timeout=5, api_key_env="SIMREPORT_TEST_AGENT_KEY"
    )
    with pytest.raises(AgentError) as info:
        agent.step(Session(None))
    agent.close()
    assert agent_server.requests[-1]["headers"]["authorization"] == f"Bearer {SECRET}"
    assert info.value.kind == kind
    assert SECRET not in info.value.message and SECRET not in str(info.value)
    if echo[0] >= 400:
        assert "[redacted]" in info.value.message


def test_http_agent_redacts_the_key_from_transport_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIMREPORT_TEST_AGENT_KEY", SECRET)
    # A key that also appears in the URL (a query token) must not surface in the error either.
    agent = HttpAgent(
        f"http://127.0.0.1:9/{SECRET}/v1",
        None,
        [],
        timeout=2,
        api_key_env="SIMREPORT_TEST_AGENT_KEY",
    )
    with pytest.raises(AgentError) as info:
        agent.step(Session(None))
    agent.close()
    assert info.value.kind in ("sut_unreachable", "sut_timeout")
    assert SECRET not in info.value.message


def test_an_http_agent_echoing_its_key_leaves_no_key_in_the_run(
    tmp_path: Path, agent_server: _AgentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMREPORT_TEST_AGENT_KEY", SECRET)
    agent_server.echo = (401, False)
    root = copy_example(tmp_path)
    add_agent(root, "ext-agent", {"adapter": "http", "apiKeyEnv": "SIMREPORT_TEST_AGENT_KEY"})
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__entry=url(agent_server))
    result = run_scenario(validate_scenario(doc), tmp_path / "run", asset_root=root)
    assert result.failure is not None and result.failure.type == "sut_error"
    assert "[redacted]" in result.failure.message
    leaked = [
        p
        for p in (tmp_path / "run").rglob("*")
        if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    assert leaked == []


def test_an_agent_reply_quoting_the_key_is_recorded_redacted_and_marked(
    tmp_path: Path, agent_server: _AgentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMREPORT_TEST_AGENT_KEY", SECRET)
    agent_server.leak = True
    root = copy_example(tmp_path)
    add_agent(root, "ext-agent", {"adapter": "http", "apiKeyEnv": "SIMREPORT_TEST_AGENT_KEY"})
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__entry=url(agent_server))
    run = tmp_path / "run"
    result = run_scenario(validate_scenario(doc), run, asset_root=root)
    assert result.failure is None, result.failure
    leaked = [p for p in run.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]
    marked = [r for r in records if r.get("redaction") == "secrets"]
    assert "agent.message" in {r["type"] for r in marked}
    # Marked are exactly the records a secret was blanked out of; the rest carry no key.
    assert marked == [r for r in records if "[redacted]" in json.dumps(r["payload"])]
    assert not [r for r in records if "redaction" in r and r not in marked]

    engine = connect(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        ingest_run(engine, run)
        with engine.connect() as conn:
            found = dict(
                conn.execute(
                    sa.select(t.record.c.record_id, t.record.c.redaction).where(
                        t.record.c.redaction != "none"
                    )
                ).all()
            )
    finally:
        engine.dispose()
    assert sorted(record_id.split("/")[1] for record_id in found) == sorted(
        r["recordId"] for r in marked
    )
    assert set(found.values()) == {"secrets"}


def test_the_agent_adapter_is_closed_in_cleanup(
    tmp_path: Path, agent_server: _AgentServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simreport.kernel.testbed.lifecycle import initializing

    made: list[HttpAgent] = []

    class Tracked(HttpAgent):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(initializing, "HttpAgent", Tracked)
    root = copy_example(tmp_path)
    add_agent(root, "ext-agent", {"adapter": "http", "model": "ext-model"})
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__entry=url(agent_server))
    result = run_scenario(validate_scenario(doc), tmp_path / "run", asset_root=root)
    assert result.failure is None, result.failure
    assert len(made) == 1 and made[0]._client.is_closed
    # A failing agent is closed too.
    agent_server.status = 500
    result = run_scenario(validate_scenario(doc), tmp_path / "failed", asset_root=root)
    assert result.failure is not None
    assert len(made) == 2 and made[1]._client.is_closed


def test_an_http_agent_runs_the_refund_desk(tmp_path: Path, agent_server: _AgentServer) -> None:
    root = copy_example(tmp_path)
    add_agent(root, "ext-agent", {"adapter": "http", "model": "ext-model"})
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__entry=url(agent_server))
    result = run_scenario(validate_scenario(doc), tmp_path / "run", asset_root=root)
    assert result.failure is None, result.failure
    assert (result.status.validity, result.status.evidence) == ("valid", "complete")
    assert result.metrics["duplicateRefunds"] == 0.0
    assert result.metrics["blindRetries"] == 0.0
    assert result.metrics["acceptedAndSatisfied"] == 1.0
    assert result.integrity.counters["agentCalls"] == len(agent_server.requests)
    assert result.integrity.counters["agentPromptTokens"] == 11 * len(agent_server.requests)
    first = agent_server.requests[0]["body"]
    assert first["messages"][0]["role"] == "system"  # the prompt asset is its system message
    trace = json.loads((tmp_path / "run" / "manifest.json").read_text())["traceId"]
    assert all(r["headers"]["traceparent"].split("-")[1] == trace for r in agent_server.requests)
    steps = [
        r for r in read_records(tmp_path / "run" / "records.jsonl") if r["type"] == "agent.step"
    ]
    assert steps and all(s["payload"]["adapter"] == "http" for s in steps)
    # A replay plays the recorded answers back without calling the agent again.
    calls = len(agent_server.requests)
    report = replay_run(tmp_path / "run")
    assert report.ok, report.summary()
    assert len(agent_server.requests) == calls


def test_an_http_agent_lost_after_loading_fails_the_run_with_records_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simreport.kernel.testbed.agents import Probe
    from simreport.kernel.testbed.lifecycle import loading

    # The agent answered its probe while loading, then went away (an unreachable agent is
    # refused in LOADING: tests/kernel/testbed/test_testbed_faithful.py).
    def answered(*args: Any, **kwargs: Any) -> Probe:
        return Probe("connect", "127.0.0.1:9", True, None, "127.0.0.1:9 accepted a connection")

    monkeypatch.setattr(loading, "probe_http_agent", answered)
    root = copy_example(tmp_path)
    add_agent(root, "ext-agent", {"adapter": "http", "entry": "http://127.0.0.1:9/v1"})
    result = run_scenario(
        validate_scenario(scenario_doc(sut__agent="ext-agent@1.0.0", sut__timeoutSeconds=2)),
        tmp_path / "run",
        asset_root=root,
    )
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("running", "sut_unreachable")
    assert (result.status.execution, result.status.evidence) == ("crashed", "partial")
    kept = read_records(tmp_path / "run" / "records.jsonl")
    kinds = [r["type"] for r in kept]
    # Cleaned up, then the run's statement of its validity closes the records.
    assert "user.message" in kinds and kinds[-2:] == ["cleanup.done", "run.validity"]
    stages = [r["payload"]["to"] for r in kept if r["type"] == "lifecycle"]
    assert stages == ["LOADING", "INITIALIZING", "RUNNING", "FAILED"]


# --------------------------------------------------------------------------- Python adapter


AGENT_MODULE = """
import json, re

def respond(body):
    messages = body["messages"]
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    found = re.findall(r"B\\d{4}-\\d{4}-\\d{4}", said)
    if not found:
        return {"role": "assistant", "content": "Could you please tell me your order number?"}
    done = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not done:
        args = json.dumps({"order_no": found[-1], "amount_minor": 19900})
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "create_refund", "arguments": args}}]}
    if len(done) == 1:
        args = json.dumps({"order_no": found[-1]})
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function",
             "function": {"name": "get_refund", "arguments": args}}]}
    return {"role": "assistant", "content": "Your refund of 199.00 has been accepted."}

def crash(body):
    raise RuntimeError("agent exploded")
"""


def test_python_entry_points_resolve_or_fail_clearly(tmp_path: Path) -> None:
    (tmp_path / "pyagent_resolve.py").write_text(AGENT_MODULE, encoding="utf-8")
    function = resolve_entry("pyagent_resolve:respond", tmp_path)
    agent = PythonAgent(function, None, [])
    session = Session(None)
    session.user(f"Order {ORDER}")
    assert agent.step(session).tool_calls[0].name == "create_refund"
    for entry in ("pyagent_resolve", "pyagent_resolve:missing", "no_such_module_xyz:f"):
        with pytest.raises(AgentError) as info:
            resolve_entry(entry, tmp_path)
        assert info.value.kind == "manifest_unresolved"
    with pytest.raises(AgentError) as crash:
        PythonAgent(resolve_entry("pyagent_resolve:crash", tmp_path), None, []).step(session)
    assert crash.value.kind == "sut_crashed"


def test_entries_of_the_same_name_in_two_folders_stay_apart(tmp_path: Path) -> None:
    # One worker process runs scenarios from many folders: each gets its own agent module.
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "agent.py").write_text(f"def respond(body):\n    return {name!r}\n")
    one = resolve_entry("agent:respond", tmp_path / "one")
    assert resolve_entry("agent:respond", tmp_path / "two")({}) == "two"
    assert one({}) == "one"
    # An edit in the same process is the code the next run gets; unchanged code is reused.
    (tmp_path / "one" / "agent.py").write_text("def respond(body):\n    return 'edited'\n")
    assert resolve_entry("agent:respond", tmp_path / "one")({}) == "edited"
    again = resolve_entry("agent:respond", tmp_path / "one")
    assert again is resolve_entry("agent:respond", tmp_path / "one")


def test_a_package_entry_imports_its_own_modules(tmp_path: Path) -> None:
    package = tmp_path / "desk_agent"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text("GREETING = 'hello'\n")
    (package / "serve.py").write_text(
        "from .rules import GREETING\nimport desk_agent.rules as absolute\n"
        "def respond(body):\n    return GREETING + absolute.GREETING\n"
    )
    assert resolve_entry("desk_agent.serve:respond", tmp_path)({}) == "hellohello"
    # Installed code is imported as usual.
    assert resolve_entry("json:dumps", tmp_path)([1]) == "[1]"
    (tmp_path / "broken.py").write_text("def respond(body) return 1\n")
    with pytest.raises(AgentError) as info:
        resolve_entry("broken:respond", tmp_path)
    assert info.value.kind == "manifest_unresolved"
    assert "broken" not in " ".join(sys.modules)


def test_a_python_agent_runs_the_refund_desk(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    (root / "pyagent_run.py").write_text(AGENT_MODULE, encoding="utf-8")
    add_agent(root, "py-agent", {"adapter": "python", "entry": "pyagent_run:respond"})
    doc = scenario_doc(sut__agent="py-agent@1.0.0")
    result = run_scenario(validate_scenario(doc), tmp_path / "run", asset_root=root)
    assert result.failure is None, result.failure
    assert result.metrics["acceptedAndSatisfied"] == 1.0
    assert result.metrics["duplicateRefunds"] == 0.0


def test_a_python_agent_that_cannot_be_imported_fails_in_loading(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    add_agent(root, "py-agent", {"adapter": "python", "entry": "nowhere_module_abc:respond"})
    result = run_scenario(
        validate_scenario(scenario_doc(sut__agent="py-agent@1.0.0")),
        tmp_path / "run",
        asset_root=root,
    )
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "manifest_unresolved")
    assert result.integrity.counters["agentCalls"] == 0
