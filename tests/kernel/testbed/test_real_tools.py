"""A domain's tools answered by the operator's sandbox (hybrid, isolated_real): the airline
example with its payments bound to the example's sandbox, served here on loopback. The sandbox
receives what the faults let through, records say `backend: real`, a transport failure is an
answer, egress outside the policy never leaves, and bindings that cannot run are refused before
any call."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simreport.api import run
from simreport.core.execution_policy import ExecutionPolicy, spec_issues
from simreport.core.schema import Scenario
from simreport.kernel.testbed.domain.real_tools import EgressRefused, GuardedClient, RealTools
from tests.support.payments_sandbox import TOKEN, Sandbox

AIRLINE = Path(__file__).resolve().parents[3] / "examples" / "airline_desk"


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    server = Sandbox()
    yield server
    server.close()


@pytest.fixture
def desk(tmp_path: Path) -> Path:
    """A copy of the airline example (its assets and its agent)."""
    root = tmp_path / "airline_desk"
    shutil.copytree(AIRLINE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


BOUND = {"pay_fare_difference": "payments", "get_payments": "payments"}


def _scenario(
    desk: Path,
    *,
    mode: str = "hybrid",
    real: dict[str, str] | None = None,
    position: str | None = "committed_response_lost",
) -> Path:
    doc: dict[str, Any] = yaml.safe_load((desk / "scenario.yaml").read_text(encoding="utf-8"))
    doc["environment"]["backendMode"] = mode
    doc["environment"]["realTools"] = BOUND if real is None else real
    doc["execution"]["mode"] = mode
    if position is None:
        doc.pop("events")
    else:
        doc["events"]["triggers"][0]["position"] = position
    path = desk / f"scenario-{mode}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _policy(desk: Path, url: str, **more: Any) -> Path:
    doc = {"sandboxes": {"payments": {"baseUrl": url, "apiKeyEnv": "SANDBOX_TOKEN"}}, **more}
    path = desk / "policy.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _records(out: Path) -> list[dict[str, Any]]:
    lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _calls(records: list[dict[str, Any]], tool: str) -> list[dict[str, Any]]:
    return [
        r["payload"]
        for r in records
        if r["type"] == "tool.request" and r["payload"]["tool"] == tool
    ]


def _hybrid(
    desk: Path, sandbox: Sandbox, tmp_path: Path, position: str | None, monkeypatch: Any
) -> tuple[Any, list[dict[str, Any]]]:
    monkeypatch.setenv("SANDBOX_TOKEN", TOKEN)
    out = tmp_path / "run"
    result = run(
        _scenario(desk, position=position),
        out,
        ledger=False,
        policy=_policy(desk, sandbox.url),
    )
    assert result.failure is None, result.failure
    return result, _records(out)


def test_a_hybrid_run_pays_through_the_sandbox_and_records_it_as_real(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, records = _hybrid(desk, sandbox, tmp_path, None, monkeypatch)
    assert sandbox.posts("pay_fare_difference") == 1
    assert [p["bookingId"] for p in sandbox.payments] == ["KX4821"]
    # The bearer token reaches the sandbox, and no record holds it.
    assert {auth for _, _, auth in sandbox.requests} == {f"Bearer {TOKEN}"}
    assert TOKEN not in (tmp_path / "run" / "records.jsonl").read_text(encoding="utf-8")
    backends = {
        r["payload"]["tool"]: r["payload"]["backend"]
        for r in records
        if r["type"] in ("tool.request", "tool.response")
    }
    assert backends["pay_fare_difference"] == "real"
    assert backends["rebook"] == "surrogate"
    # The observations read the sandbox's payments (GET /state), not an empty local store.
    assert result.metrics["duplicatePayments"] == 0
    assert result.metrics["rebookedAndSatisfied"] == 1


def test_a_lost_answer_from_the_sandbox_is_sent_and_its_answer_dropped(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, records = _hybrid(desk, sandbox, tmp_path, "committed_response_lost", monkeypatch)
    pays = _calls(records, "pay_fare_difference")
    assert len(pays) == 1 and sandbox.posts("pay_fare_difference") == 1
    lost = [r for r in records if r["type"] == "tool.response.lost"]
    assert lost and lost[0]["payload"]["body"]["payment"]["id"] == "SBX-1"
    recovered = [r["payload"] for r in records if r["type"] == "fault.recovered"]
    assert recovered and recovered[0]["verified"] is True


def test_a_call_not_sent_never_reaches_the_sandbox(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, records = _hybrid(desk, sandbox, tmp_path, "not_sent", monkeypatch)
    # The first payment call struck before it left: the sandbox saw only the agent's retry.
    assert len(_calls(records, "pay_fare_difference")) == 2
    assert sandbox.posts("pay_fare_difference") == 1


def test_a_held_call_reaches_the_sandbox_only_at_the_backlog(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, records = _hybrid(desk, sandbox, tmp_path, "sent_not_committed", monkeypatch)
    pays = _calls(records, "pay_fare_difference")
    assert sandbox.posts("pay_fare_difference") == len(pays)
    types = [r["type"] for r in records]
    backlog = types.index("tool.backlog.processed")
    assert types[backlog + 1] == "tool.backlog.answer"
    held_call = records[backlog]["payload"]["callId"]
    assert held_call == pays[0]["callId"]


def test_without_a_state_the_recovery_is_recorded_not_applicable(
    desk: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Sandbox(state=False)
    try:
        _, records = _hybrid(desk, server, tmp_path, "committed_response_lost", monkeypatch)
    finally:
        server.close()
    recovered = [r["payload"] for r in records if r["type"] == "fault.recovered"]
    assert recovered[0]["verified"] is False
    assert recovered[0]["reason"].startswith("not_applicable")


def test_a_sandbox_that_cannot_be_reached_answers_with_an_error(tmp_path: Path) -> None:
    policy = ExecutionPolicy.model_validate(
        {"sandboxes": {"payments": {"baseUrl": "http://127.0.0.1:9", "timeoutSeconds": 2}}}
    )
    real = RealTools({"pay_fare_difference": "payments"}, policy)
    body = real.call("pay_fare_difference", {"booking_ref": "KX4821", "amount_minor": 1})
    assert (body["ok"], body["error"]) == (False, "sandbox_unreachable")
    assert real.failed == 1


def test_egress_outside_the_allowlist_is_refused_and_nothing_is_sent(sandbox: Sandbox) -> None:
    client = GuardedClient({"127.0.0.1:1"}, timeout=2)
    with pytest.raises(EgressRefused):
        client.request("POST", f"{sandbox.url}/tools/get_payments", json={})
    assert sandbox.requests == []
    # The policy refuses a sandbox whose host its egress does not allow.
    with pytest.raises(ValueError, match=r"sandboxes\.payments\.baseUrl"):
        ExecutionPolicy.model_validate(
            {"sandboxes": {"payments": {"baseUrl": sandbox.url}}, "egress": ["127.0.0.1:1"]}
        )


def test_an_undeclared_sandbox_is_refused_located_before_any_call(
    desk: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    scenario = _scenario(desk, real={"pay_fare_difference": "nowhere"})
    result = run(scenario, tmp_path / "run", ledger=False, policy=_policy(desk, sandbox.url))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "sandbox_undeclared")
    assert "environment.realTools.pay_fare_difference" in result.failure.message
    assert sandbox.requests == []
    doc = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    issues = spec_issues(Scenario.model_validate(doc), ExecutionPolicy())
    assert [i.path for i in issues] == ["environment.realTools.pay_fare_difference"]


def test_a_tool_the_domain_lacks_is_refused(desk: Path, sandbox: Sandbox, tmp_path: Path) -> None:
    scenario = _scenario(desk, real={"refund": "payments"})
    result = run(scenario, tmp_path / "run", ledger=False, policy=_policy(desk, sandbox.url))
    assert result.failure is not None and result.failure.type == "sandbox_undeclared"
    assert "environment.realTools.refund" in result.failure.message


def test_isolated_real_with_an_unbound_tool_is_refused(
    desk: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    scenario = _scenario(desk, mode="isolated_real")
    result = run(scenario, tmp_path / "run", ledger=False, policy=_policy(desk, sandbox.url))
    assert result.failure is not None and result.failure.type == "sandbox_undeclared"
    assert "get_booking" in result.failure.message
    assert sandbox.requests == []


def test_a_url_in_the_scenario_or_a_mode_apart_from_the_environment_is_refused(
    desk: Path,
) -> None:
    doc = yaml.safe_load(_scenario(desk).read_text(encoding="utf-8"))
    doc["environment"]["realTools"] = {"pay_fare_difference": "http://127.0.0.1:1"}
    with pytest.raises(ValueError, match="realTools"):
        Scenario.model_validate(doc)
    doc["environment"]["realTools"] = BOUND
    doc["environment"]["backendMode"] = "surrogate"
    with pytest.raises(ValueError, match="backendMode"):
        Scenario.model_validate(doc)


def test_the_sandbox_client_is_closed_however_the_run_ends(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[int] = []
    close = RealTools.close

    def counted(self: RealTools) -> None:
        closed.append(1)
        close(self)

    monkeypatch.setattr(RealTools, "close", counted)
    _hybrid(desk, sandbox, tmp_path, None, monkeypatch)
    assert len(closed) == 1

    # Failing while initializing, after the environment (and its client) was made: the run
    # never collects, and cleanup still closes the client.
    def broken_backend() -> None:
        raise RuntimeError("no fault backend")

    monkeypatch.setattr(
        "simreport.kernel.testbed.lifecycle.initializing.InProcessFaultBackend", broken_backend
    )
    closed.clear()
    result = run(
        _scenario(desk, position=None),
        tmp_path / "failed",
        ledger=False,
        policy=_policy(desk, sandbox.url),
    )
    assert result.failure is not None and result.failure.stage == "initializing"
    assert len(closed) == 1


def test_without_the_operator_s_key_the_run_stops_in_loading_and_sends_nothing(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SANDBOX_TOKEN", raising=False)
    result = run(_scenario(desk), tmp_path / "run", ledger=False, policy=_policy(desk, sandbox.url))
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "sandbox_credentials_missing")
    assert "SANDBOX_TOKEN" in result.failure.message
    assert sandbox.requests == []


def test_a_sandbox_refusing_the_key_makes_the_run_violated_not_a_finding(
    desk: Path, sandbox: Sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_TOKEN", "not-the-sandbox-token")
    out = tmp_path / "run"
    result = run(
        _scenario(desk, position=None), out, ledger=False, policy=_policy(desk, sandbox.url)
    )
    # Every payment was refused, so what the agent met says nothing about the agent.
    assert sandbox.payments == [] and sandbox.posts("pay_fare_difference") >= 1
    assert result.status.validity == "violated"
    (real_state,) = [r["payload"] for r in _records(out) if r["type"] == "environment.real_state"]
    posts = sum(1 for method, _, _ in sandbox.requests if method == "POST")
    assert real_state["refused"] == {"payments": posts}
    validity = [r["payload"] for r in _records(out) if r["type"] == "run.validity"]
    assert any("sandbox payments" in p for p in validity[-1]["problems"])
