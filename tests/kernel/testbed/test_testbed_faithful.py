"""A testbed run claims no more than happened (issue 14, items 1, 2 and 4): an unreachable agent
fails in LOADING before the user says a word; a declared setting the testbed does not implement
is refused at load, never run as something else; CLEANED only after a cleanup that succeeded,
and a failure while RUNNING ends in FAILED; a replay checks the manifest's own digest."""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from simreport.cli.replay import register_cli
from simreport.core.errors import SchemaError
from simreport.core.overrides import set_path
from simreport.core.schema import RunResult, Scenario
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.replay_runner import replay_run
from simreport.kernel.testbed.lifecycle import Lifecycle, LifecycleError, collecting
from simreport.kernel.testbed.records import RecordLog
from tests.kernel.testbed.test_testbed_world import lifecycle, records, run, scenario_doc, types

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"
ORDER = "B2026-0901-7734"


# --------------------------------------------------------------------------- helpers


def copy_example(tmp_path: Path) -> Path:
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    return root


def add_asset(root: Path, name: str, kind: str, content: dict[str, Any]) -> None:
    folder = root / "assets" / name
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"kind": kind, "name": name, "version": "1.0.0", "content": content}
    (folder / "1.0.0.json").write_text(json.dumps(doc), encoding="utf-8")


def run_unchecked(
    tmp: Path, doc: dict[str, Any], *, root: Path = EXAMPLE, name: str = "run"
) -> tuple[RunResult, Path]:
    """Run a scenario that skipped `validate_scenario` (as a replay or a caller of the Python
    API may): what the world's load-time checks would refuse must still fail in LOADING."""
    out = tmp / name
    return run_scenario(Scenario.model_validate(doc), out, asset_root=root), out


def conversation_started(out: Path) -> bool:
    return any(t.startswith(("user.", "agent.", "tool.")) for t in types(out))


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --------------------------------------------------------------------------- a local agent


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self.server.gets.append(self.path)
        status = self.server.health_status
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'{"status": "ok"}' if status < 400 else b'{"status": "down"}')

    def do_POST(self) -> None:
        from tests.kernel.testbed.test_testbed_agents import external_agent

        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length))
        self.server.posts.append(body)
        answer = {
            "id": "cmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": external_agent(body), "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        }
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    gets: list[str]
    posts: list[dict[str, Any]]
    health_status: int


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.gets, srv.posts, srv.health_status = [], [], 200
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def base_url(srv: _Server) -> str:
    host, port = srv.server_address[:2]
    return f"http://{host!s}:{port}/v1"


def http_agent_root(tmp_path: Path, **content: Any) -> Path:
    root = copy_example(tmp_path)
    add_asset(root, "ext-agent", "agent", {"adapter": "http", "model": "ext", **content})
    return root


# --------------------------------------------------------------------------- 1. reachability


def test_an_unreachable_http_agent_fails_in_loading_before_any_message(tmp_path: Path) -> None:
    root = http_agent_root(tmp_path, entry=f"http://127.0.0.1:{closed_port()}/v1")
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__timeoutSeconds=2)
    result, out = run(tmp_path, doc, root=root)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "sut_unreachable")
    assert "127.0.0.1" in result.failure.message
    assert (result.status.execution, result.status.evidence) == ("crashed", "unchecked")
    assert result.integrity.counters.get("agentCalls") == 0
    assert lifecycle(out) == ["LOADING", "FAILED"]
    assert not conversation_started(out)  # no user message was ever sent
    probe = next(r for r in records(out) if r["type"] == "sut.probe")
    assert probe["payload"]["reachable"] is False
    # The manifest still names the exact versions the run would have used.
    assert "manifestSha256" in json.loads((out / "manifest.json").read_text())
    # A replay reproduces the refusal from the record without probing again.
    report = replay_run(out)
    assert report.ok, report.summary()


def test_a_reachable_http_agent_is_probed_in_loading_and_runs(
    tmp_path: Path, server: _Server
) -> None:
    root = http_agent_root(tmp_path)
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__entry=base_url(server))
    result, out = run(tmp_path, doc, root=root)
    assert result.failure is None, result.failure
    kinds = types(out)
    probe = kinds.index("sut.probe")
    assert probe < kinds.index("lifecycle", 1)  # before INITIALIZING
    assert records(out)[probe]["payload"]["reachable"] is True
    assert server.gets == []  # no health entry declared: a connection is the probe
    assert server.posts  # and the conversation reached the agent
    calls = len(server.posts)
    assert replay_run(out).ok
    assert len(server.posts) == calls


def test_a_declared_health_entry_is_what_loading_probes(tmp_path: Path, server: _Server) -> None:
    # A relative health entry resolves against the entry as a link would: `models` below it,
    # `/health` from the host's root.
    root = http_agent_root(tmp_path, health="models", entry=base_url(server))
    doc = scenario_doc(sut__agent="ext-agent@1.0.0")
    result, out = run(tmp_path, doc, root=root, name="healthy")
    assert result.failure is None, result.failure
    assert server.gets == ["/v1/models"]
    probe = next(r for r in records(out) if r["type"] == "sut.probe")["payload"]
    assert (probe["method"], probe["reachable"]) == ("GET", True)
    server.health_status = 503
    posts = len(server.posts)
    result, out = run(tmp_path, doc, root=root, name="unhealthy")
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "sut_unhealthy")
    assert "503" in result.failure.message
    assert len(server.posts) == posts  # never called
    assert lifecycle(out) == ["LOADING", "FAILED"] and not conversation_started(out)


def test_health_urls_resolve_like_links() -> None:
    from simreport.kernel.testbed.agents import health_url

    entry = "http://h:8000/v1"
    assert health_url(entry, "models") == "http://h:8000/v1/models"
    assert health_url(entry + "/", "models") == "http://h:8000/v1/models"
    assert health_url(entry, "/health") == "http://h:8000/health"
    assert health_url(entry, "http://other:9/ready") == "http://other:9/ready"


def test_an_absolute_health_url_may_point_elsewhere(tmp_path: Path, server: _Server) -> None:
    host, port = server.server_address[:2]
    root = http_agent_root(tmp_path, health=f"http://{host!s}:{port}/ready", entry=base_url(server))
    result, _ = run(tmp_path, scenario_doc(sut__agent="ext-agent@1.0.0"), root=root)
    assert result.failure is None, result.failure
    assert server.gets == ["/ready"]


def test_a_health_entry_is_only_for_http_agents(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    add_asset(root, "py-agent", "agent", {"adapter": "python", "entry": "m:f", "health": "/h"})
    result, _ = run(tmp_path, scenario_doc(sut__agent="py-agent@1.0.0"), root=root)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "manifest_unresolved")
    assert "health" in result.failure.message


# --------------------------------------------------------------------------- 2. refusals


@pytest.mark.parametrize("channel", ["ag-ui", "a2a"])
def test_an_unimplemented_channel_is_refused_at_validation(channel: str) -> None:
    with pytest.raises(SchemaError) as info:
        validate_scenario(scenario_doc(interaction__channels=[channel]))
    assert info.value.path == "interaction.channels.0"
    assert info.value.issues[0].kind == "world_check"
    assert channel in info.value.message and "chat-completions" in info.value.message


def test_two_channels_are_refused_at_validation() -> None:
    with pytest.raises(SchemaError) as info:
        validate_scenario(scenario_doc(interaction__channels=["chat-completions", "internal"]))
    assert info.value.path == "interaction.channels"


def test_an_unimplemented_channel_never_runs_as_chat(tmp_path: Path) -> None:
    result, out = run_unchecked(tmp_path, scenario_doc(interaction__channels=["ag-ui"]))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "setting_not_implemented")
    assert "interaction.channels.0" in result.failure.message and "ag-ui" in result.failure.message
    assert lifecycle(out) == ["LOADING", "FAILED"] and not conversation_started(out)


def test_the_internal_channel_needs_an_agent_in_the_process(tmp_path: Path) -> None:
    # The reference agent runs in the harness's process: `internal` is what it is.
    result, _ = run(tmp_path, scenario_doc(interaction__channels=["internal"]), name="ref")
    assert result.failure is None, result.failure
    # An HTTP agent is reached over chat completions, never an internal channel.
    root = http_agent_root(tmp_path, entry=f"http://127.0.0.1:{closed_port()}/v1")
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", interaction__channels=["internal"])
    result, out = run(tmp_path, doc, root=root, name="http")
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "setting_not_implemented")
    assert "internal" in result.failure.message and "http" in result.failure.message
    assert "sut.probe" not in types(out)  # refused before any network contact


REAL = {"id": "payments", "role": "refund approver", "kind": "real", "entry": "http://x/v1"}


def test_a_real_participant_is_refused_at_validation() -> None:
    with pytest.raises(SchemaError) as info:
        validate_scenario(scenario_doc(participants=[REAL]))
    assert info.value.path == "participants.0.kind"
    assert "real" in str(info.value) and "surrogate" in str(info.value)


def test_a_real_participant_never_runs_uncontacted(tmp_path: Path) -> None:
    result, out = run_unchecked(tmp_path, scenario_doc(participants=[REAL]))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "setting_not_implemented")
    assert "participants.0" in result.failure.message
    assert lifecycle(out) == ["LOADING", "FAILED"]


def test_a_surrogate_participant_with_an_entry_is_refused() -> None:
    surrogate = {"id": "approver", "role": "approver", "entry": "http://x/v1"}
    with pytest.raises(SchemaError) as info:
        validate_scenario(scenario_doc(participants=[surrogate]))
    assert info.value.path == "participants.0.entry"


CONSULTING_AGENT = """
import json, re

def respond(body):
    messages = body["messages"]
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    found = re.findall(r"B\\d{4}-\\d{4}-\\d{4}", said)
    if not found:
        return {"role": "assistant", "content": "Could you please tell me your order number?"}
    names = [t["function"]["name"] for t in body.get("tools", [])]
    done = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    def call(i, name, args):
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]}
    if not done and "ask_approver" in names:
        return call(1, "ask_approver", {"message": "May I refund " + found[-1] + "?"})
    if len(done) <= 1:
        return call(2, "create_refund", {"order_no": found[-1], "amount_minor": 19900})
    if len(done) == 2:
        return call(3, "get_refund", {"order_no": found[-1]})
    return {"role": "assistant", "content": "Your refund of 199.00 has been accepted."}
"""


def test_a_surrogate_participant_answers_the_agent_through_its_tool(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    (root / "consulting_agent.py").write_text(CONSULTING_AGENT, encoding="utf-8")
    add_asset(root, "py-agent", "agent", {"adapter": "python", "entry": "consulting_agent:respond"})
    approver = {
        "id": "approver",
        "role": "refund approver",
        "replies": ["Approved, go ahead.", "Already approved."],
    }
    doc = scenario_doc(sut__agent="py-agent@1.0.0", participants=[approver])
    result, out = run(tmp_path, doc, root=root)
    assert result.failure is None, result.failure
    joined = next(r for r in records(out) if r["type"] == "participant.joined")
    assert joined["payload"] == {
        "id": "approver",
        "role": "refund approver",
        "kind": "surrogate",
        "tool": "ask_approver",
    }
    request = next(
        r
        for r in records(out)
        if r["type"] == "tool.request" and r["payload"]["tool"] == "ask_approver"
    )
    response = next(
        r
        for r in records(out)
        if r["type"] == "tool.response" and r["payload"]["callId"] == request["payload"]["callId"]
    )
    assert response["actor"] == "environment"
    assert response["payload"]["body"] == {
        "ok": True,
        "participant": "approver",
        "role": "refund approver",
        "reply": "Approved, go ahead.",
    }
    facts = {
        o["factKey"]: o["value"]
        for o in json.loads((out / "observations.json").read_text())["observations"]
    }
    assert facts["participant.approver.calls"] == 1
    assert result.metrics["acceptedAndSatisfied"] == 1.0


def test_a_fault_strikes_a_participant_like_any_tool(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    (root / "consulting_agent.py").write_text(CONSULTING_AGENT, encoding="utf-8")
    add_asset(root, "py-agent", "agent", {"adapter": "python", "entry": "consulting_agent:respond"})
    trigger = {"id": "approver-down", "target": "ask_approver", "position": "not_sent"}
    doc = scenario_doc(
        sut__agent="py-agent@1.0.0",
        participants=[{"id": "approver", "role": "refund approver"}],
        events={"triggers": [trigger]},
    )
    result, out = run(tmp_path, doc, root=root)
    assert result.failure is None, result.failure
    assert result.status.validity == "valid"
    stages = [r["type"] for r in records(out) if r["type"].startswith("fault.")]
    assert stages == ["fault.planned", "fault.armed", "fault.hit", "fault.recovered"]
    answer = next(
        r
        for r in records(out)
        if r["type"] == "tool.response" and r["payload"]["tool"] == "ask_approver"
    )
    assert answer["payload"]["outcome"] == "connection_failed"


def test_a_participant_tool_may_not_shadow_a_contract_tool(tmp_path: Path) -> None:
    clash = {"id": "approver", "role": "approver", "tool": "get_order"}
    result, _ = run(tmp_path, scenario_doc(participants=[clash]))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "manifest_unresolved")
    assert "get_order" in result.failure.message and "participants.0" in result.failure.message


SECOND_ENTRY = {
    "tools": [
        {
            "name": "submit_refund",
            "operation": "create_refund",
            "description": "Submit a refund (the legacy desk).",
            "parameters": {
                "order_no": {"type": "string"},
                "amount_minor": {"type": "integer"},
            },
        }
    ]
}


@pytest.mark.parametrize("entry", ["create_refund", "submit_refund"])
def test_one_declared_refund_entry_against_two_offered_is_refused(
    tmp_path: Path, entry: str
) -> None:
    root = copy_example(tmp_path)
    add_asset(root, "legacy-api", "tool_contract", SECOND_ENTRY)
    doc = scenario_doc(
        environment__toolContracts=["refund-api@1.4.0", "legacy-api@1.0.0"],
        interaction__actionEntry=entry,
    )
    result, out = run(tmp_path, doc, root=root)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "action_entry_mismatch")
    message = result.failure.message
    assert "interaction.actionEntry" in message
    assert "create_refund" in message and "submit_refund" in message
    assert "refund-api@1.4.0" in message and "legacy-api@1.0.0" in message
    assert lifecycle(out) == ["LOADING", "FAILED"] and not conversation_started(out)


# --------------------------------------------------------------------------- 4. lifecycle


def test_the_lifecycle_follows_the_design_table() -> None:
    from simreport.core.testbed_schema import ClockConfig
    from simreport.kernel.testbed.clock import Clocks

    life = Lifecycle(RecordLog(Clocks(ClockConfig()), "0" * 32))
    life.enter("LOADING")
    with pytest.raises(LifecycleError):
        life.enter("RUNNING")  # INITIALIZING cannot be skipped
    life.enter("INITIALIZING")
    life.enter("RUNNING")
    with pytest.raises(LifecycleError):
        life.enter("CLEANED")  # a run is cleaned only after draining and collecting
    life.enter("FAILED", failedIn="RUNNING")
    with pytest.raises(LifecycleError):
        life.enter("DRAINING")  # FAILED is final
    assert life.path == ["LOADING", "INITIALIZING", "RUNNING", "FAILED"]


def test_a_failed_cleanup_ends_in_failed_with_an_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path) -> None:
        raise OSError("device busy")

    monkeypatch.setattr(collecting, "remove_workspace", refuse)
    result, out = run(tmp_path)
    assert "CLEANED" not in lifecycle(out)
    assert lifecycle(out)[-2:] == ["COLLECTING", "FAILED"]
    final = [r for r in records(out) if r["type"] == "lifecycle"][-1]
    assert final["payload"]["failedIn"] == "cleanup"
    assert final["payload"]["kind"] == "cleanup_failed"
    alert = next(r for r in records(out) if r["type"] == "cleanup.failed")
    assert alert["payload"]["alert"] is True and "device busy" in alert["payload"]["error"]
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("cleanup", "cleanup_failed")
    assert result.status.validity == "violated"
    assert result.status.execution == "completed"  # the conversation itself ran to its end
    assert result.integrity.counters["cleanupFailures"] == 1
    # The evidence collected before cleaning is kept.
    assert (out / "observations.json").is_file() and (out / "completeness.json").is_file()


def test_a_running_failure_passes_through_failed_and_still_cleans(tmp_path: Path) -> None:
    result, out = run(tmp_path, scenario_doc(execution__budget__maxTurns=1))
    assert result.failure is not None and result.failure.stage == "running"
    assert lifecycle(out) == ["LOADING", "INITIALIZING", "RUNNING", "FAILED"]
    kinds = types(out)
    failed_at = max(i for i, t in enumerate(kinds) if t == "lifecycle")
    # After the failure the run settles what is in flight, collects and cleans, in that order.
    wind_down = kinds[failed_at:]
    assert wind_down.index("drain.settled") < wind_down.index("environment.snapshot")
    assert wind_down.index("environment.snapshot") < wind_down.index("cleanup.done")
    assert not (out / "workspace").exists()
    assert result.status.evidence == "partial"


def test_a_running_failure_with_a_failed_cleanup_raises_the_alert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(path: Path) -> None:
        raise OSError("device busy")

    monkeypatch.setattr(collecting, "remove_workspace", refuse)
    result, out = run(tmp_path, scenario_doc(execution__budget__maxTurns=1))
    assert result.failure is not None and result.failure.stage == "running"
    assert result.status.validity == "violated"
    assert "cleanup.failed" in types(out) and "CLEANED" not in lifecycle(out)


# --------------------------------------------------------------------------- replay: the manifest


def make_run(tmp_path: Path) -> Path:
    root = copy_example(tmp_path)
    loaded = load_scenario(root / "scenario.yaml")
    out = tmp_path / "run"
    run_scenario(loaded.scenario, out, asset_root=loaded.asset_root)
    return out


def edit_manifest(out: Path, **changes: Any) -> None:
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    for key, value in changes.items():
        manifest = set_path(manifest, key.replace("__", "."), value)
    path.write_text(json.dumps(manifest))


def test_replay_verifies_the_manifest_digest(tmp_path: Path) -> None:
    out = make_run(tmp_path)
    assert replay_run(out).ok
    edit_manifest(out, purpose="regression")  # claiming an exploration run was a regression run
    report = replay_run(out)
    assert not report.ok and report.error is None
    summary = report.summary()
    assert "manifest" in summary and "manifestSha256" in summary
    parser = argparse.ArgumentParser(prog="simreport")
    register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["replay", str(out)])
    assert args.func(args) == 1


def test_replay_catches_an_asset_digest_rewritten_with_its_file(tmp_path: Path) -> None:
    from simreport.core.canonical import sha256_bytes

    out = make_run(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    prompt = tmp_path / "refund_desk" / "assets" / "refund-prompt" / "1.0.0.yaml"
    prompt.write_text(prompt.read_text().replace("careful and precise", "careless"))
    # The asset file and the manifest's digest of it changed together: only the manifest's own
    # digest can tell.
    new_sha = sha256_bytes(prompt.read_bytes())
    for entry in manifest["resolved"].values():
        if entry["name"] == "refund-prompt":
            entry["sha256"] = new_sha
            manifest["assets"][f"refund-prompt@{entry['version']}"] = new_sha
    (out / "manifest.json").write_text(json.dumps(manifest))
    report = replay_run(out)
    assert not report.ok
    assert report.manifest_problems and report.replayed == 0
    assert "manifestSha256" in report.summary()
    assert all(problem in report.summary() for problem in report.manifest_problems)


def test_replay_catches_an_edited_scenario(tmp_path: Path) -> None:
    out = make_run(tmp_path)
    doc = json.loads((out / "scenario.json").read_text())
    doc["user"]["goal"] = "Something else"
    (out / "scenario.json").write_text(json.dumps(doc))
    report = replay_run(out)
    assert not report.ok and report.replayed == 0
    [problem] = report.manifest_problems
    assert problem.startswith("scenario.json") and problem in report.summary()


def test_replay_catches_a_manifest_digest_that_is_not_the_recorded_one(tmp_path: Path) -> None:
    out = make_run(tmp_path)
    edit_manifest(out, manifestSha256="0" * 64)
    report = replay_run(out)
    assert not report.ok
    assert "manifestSha256" in report.summary()
