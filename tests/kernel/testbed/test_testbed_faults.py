"""Faults beyond timeouts and errors: a `delay` (the right answer, late) and an `abort` (cut off,
no answer, no effect); windows scheduled on the run's logical clock (`at.logicalMs`,
`recover.afterMs`); and a recovery that is verified against the domain's invariants (here the
refund desk's, domain.yaml), never assumed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from simreport.analysis.audit import read_fault_steps, usable
from simreport.analysis.testbed_summary import INCONSISTENT, fault_problems
from simreport.core.errors import InputError
from simreport.core.overrides import set_path
from simreport.core.testbed_schema import ClockConfig, FaultTrigger
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.domain.gateway import DomainGateway
from simreport.kernel.testbed.domain.model import DomainTool
from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.testbed.environment import Change, FaultController, InProcessFaultBackend
from simreport.kernel.testbed.records import RecordLog, read_records
from simreport.kernel.testbed.replay_records import compare_records
from simreport.kernel.worlds.refund_desk.domain import refund_domain
from tests.kernel.testbed.test_testbed_world import scenario_doc
from tests.support.refund_desk import EXAMPLE, contract_tools, env_data

ORDER = "B2026-0901-7734"
INVARIANTS = ["refunds_of_known_orders", "no_half_applied_write", "orders_follow_their_refunds"]
"""The refund desk's invariants (domain.yaml), every one checked at each recovery."""


def world(*triggers: dict[str, Any]) -> tuple[DomainGateway, FaultController, RecordLog]:
    clocks = Clocks(ClockConfig())
    log = RecordLog(clocks, "f" * 32)
    domain = refund_domain(env_data(), contract_tools("1.4.0"))
    gateway = DomainGateway(DomainState(domain), log, clocks)
    faults = gateway.inject(
        [FaultTrigger.model_validate(t) for t in triggers], InProcessFaultBackend()
    )
    return gateway, faults, log


def stages(log: RecordLog, fault: str = "f") -> list[str]:
    return [
        r["type"].split(".", 1)[1]
        for r in log.records
        if r["type"].startswith("fault.") and r["payload"]["faultId"] == fault
    ]


def payload(log: RecordLog, kind: str) -> dict[str, Any]:
    return dict(next(r for r in log.records if r["type"] == kind)["payload"])


def create(gateway: DomainGateway, n: int = 1) -> Any:
    return gateway.call("create_refund", {"order_no": ORDER, "amount_minor": 19900}, f"c{n}")


def refund_states(gateway: DomainGateway) -> list[str]:
    return [r["state"] for r in gateway.domain_state.snapshot()["refund"]]


def order_state(gateway: DomainGateway) -> str:
    return str(gateway.domain_state.state["order"][ORDER]["state"])


# --------------------------------------------------------------------------- delay and abort


def test_a_delay_answers_correctly_after_the_added_latency() -> None:
    gateway, faults, log = world(
        {"id": "f", "target": "create_refund", "effect": "delay", "delayMs": 45000}
    )
    answer = create(gateway)
    assert answer.outcome == "ok" and answer.body["refund"]["state"] == "accepted"
    latency = 1200  # create_refund's contract latency
    assert gateway.clocks.logical_ms == latency + 45000
    assert refund_states(gateway) == ["accepted"]
    assert stages(log) == ["planned", "armed", "hit", "recovered"]
    assert payload(log, "fault.hit")["delayMs"] == 45000
    assert payload(log, "fault.planned")["effect"] == "delay"
    assert faults.violations() == []
    assert not any(r["type"] == "tool.response.lost" for r in log.records)


def test_an_abort_cuts_the_call_without_an_answer_and_without_effect() -> None:
    gateway, faults, log = world({"id": "f", "target": "create_refund", "effect": "abort"})
    answer = create(gateway)
    assert answer.outcome == "aborted"
    assert answer.body["ok"] is False and answer.body["error"] == "aborted"
    assert "refund" not in answer.body
    assert refund_states(gateway) == []  # no effect, unlike a timeout after commit
    assert not any(r["type"] in ("state.change", "tool.response.lost") for r in log.records)
    assert gateway.clocks.logical_ms == 0  # cut at once: no timeout is waited out
    assert stages(log) == ["planned", "armed", "hit", "recovered"]
    assert faults.violations() == []
    assert create(gateway, 2).outcome == "ok"


def test_an_abort_differs_from_a_timeout_after_commit() -> None:
    aborted, _, _ = world({"id": "f", "target": "create_refund", "effect": "abort"})
    lost, _, _ = world({"id": "f", "target": "create_refund", "effect": "timeout"})
    assert (create(aborted).outcome, refund_states(aborted)) == ("aborted", [])
    assert (create(lost).outcome, refund_states(lost)) == ("timeout", ["accepted"])


# --------------------------------------------------------------------------- logical milliseconds


def test_a_window_opens_and_closes_on_the_logical_clock() -> None:
    trigger = {
        "id": "f",
        "target": "get_refund",
        "at": {"logicalMs": 20000},
        "recover": {"afterMs": 30000},
        "effect": "error",
    }
    gateway, _, log = world(trigger)
    query = {"order_no": ORDER}
    assert stages(log) == ["planned"]  # not open at 0 ms
    assert gateway.call("get_refund", query, "a").outcome == "ok"
    gateway.clocks.advance(20000)  # 20.6 s: open (get_refund takes 600 ms)
    assert gateway.call("get_refund", query, "b").outcome == "error"
    armed = next(r for r in log.records if r["type"] == "fault.armed")
    assert armed["logicalMs"] == 20600
    assert payload(log, "fault.planned")["atLogicalMs"] == 20000
    assert payload(log, "fault.planned")["recoverAfterMs"] == 30000
    gateway.clocks.advance(20000)  # 41.2 s: still inside 20.6 s + 30 s
    assert gateway.call("get_refund", query, "c").outcome == "error"
    gateway.clocks.advance(20000)  # 61.8 s: closed
    assert gateway.call("get_refund", query, "d").outcome == "ok"
    assert stages(log) == ["planned", "armed", "hit", "hit", "recovered"]


def test_a_turn_boundary_also_moves_a_logical_window() -> None:
    gateway, faults, log = world(
        {"id": "f", "target": "get_order", "at": {"logicalMs": 20000}, "recover": "hits-1"}
    )
    gateway.clocks.advance(20000)
    faults.on_turn(2)
    assert stages(log) == ["planned", "armed"]


def test_a_logical_window_that_closes_unhit_is_a_failure() -> None:
    gateway, faults, log = world(
        {"id": "f", "target": "create_refund", "at": {"logicalMs": 0}, "recover": {"afterMs": 1000}}
    )
    gateway.clocks.advance(5000)
    faults.on_turn(2)
    assert stages(log) == ["planned", "armed", "failed"]
    assert payload(log, "fault.failed")["reason"] == "never_hit"
    assert faults.violations() == ["fault f did not hit and recover"]


# --------------------------------------------------------------------------- verified recovery


def test_a_held_request_is_recovered_only_once_the_backlog_is_consistent() -> None:
    trigger = {"id": "f", "target": "create_refund", "position": "sent_not_committed"}
    gateway, faults, log = world(trigger)
    assert create(gateway).outcome == "timeout"
    # The experiment is destroyed, but the held refund is still processing: not yet recovered.
    assert stages(log) == ["planned", "armed", "hit"]
    assert faults.violations() == ["fault f did not hit and recover"]
    assert refund_states(gateway) == ["processing"]  # received, held: not a half-applied write
    assert gateway.pending() == {"refund": ["RF-0001"]}
    gateway.process_backlog()
    assert stages(log) == ["planned", "armed", "hit", "recovered"]
    assert (refund_states(gateway), order_state(gateway)) == (["accepted"], "refunded")
    recovered = payload(log, "fault.recovered")
    assert recovered["verified"] is True
    # Verified against every invariant of the domain, not by reading orders back.
    assert recovered["checked"] == {"invariants": INVARIANTS}
    assert faults.violations() == []


def test_a_lost_backlog_leaves_a_half_applied_write_and_the_recovery_fails() -> None:
    trigger = {"id": "f", "target": "create_refund", "position": "sent_not_committed"}
    gateway, faults, log = world(trigger)
    create(gateway)
    gateway.held.clear()  # the service forgot the request it was holding
    gateway.process_backlog()
    assert stages(log) == ["planned", "armed", "hit", "failed"]
    assert refund_states(gateway) == ["processing"]  # RF-0001, with no request held for it
    failed = payload(log, "fault.failed")
    assert failed["reason"] == "inconsistent"
    assert failed["problems"] == [
        "invariant no_half_applied_write does not hold for refund RF-0001"
    ]
    assert failed["checked"] == {"invariants": INVARIANTS}
    assert faults.violations() == ["fault f did not hit and recover"]


def test_an_order_that_disagrees_with_its_refunds_fails_the_recovery() -> None:
    gateway, _, log = world({"id": "f", "target": "create_refund"})
    state = gateway.domain_state
    original = state.process

    def half_applied(
        tool: DomainTool, arguments: Any, received: list[dict[str, Any]], now: str
    ) -> list[Change]:
        changes = original(tool, arguments, received, now)
        state.state["order"][ORDER]["state"] = "delivered"  # the order never followed
        return changes

    state.process = half_applied  # type: ignore[method-assign]
    create(gateway)
    assert (refund_states(gateway), order_state(gateway)) == (["accepted"], "delivered")
    assert stages(log) == ["planned", "armed", "hit", "failed"]
    failed = payload(log, "fault.failed")
    assert failed["reason"] == "inconsistent"
    assert failed["problems"] == [
        "invariant orders_follow_their_refunds does not hold for order B2026-0901-7734"
    ]


# --------------------------------------------------------------------------- the schema


def test_new_effects_and_windows_read_back_from_their_document_form() -> None:
    doc = {
        "id": "f",
        "target": "x",
        "effect": "delay",
        "delayMs": 1500,
        "at": {"logicalMs": 40000},
        "recover": {"afterMs": 10000},
    }
    trigger = FaultTrigger.model_validate(doc)
    assert (trigger.at.logical_ms, trigger.recover.after_ms) == (40000, 10000)
    assert (trigger.at.call, trigger.recover.after_hits) == (1, None)
    assert trigger.position is None  # a delay has no request position
    assert FaultTrigger.model_validate(trigger.to_doc()) == trigger
    timeout = FaultTrigger.model_validate({"id": "t", "target": "x"})
    assert timeout.position == "committed_response_lost" and timeout.delay_ms is None
    assert FaultTrigger.model_validate({"id": "d", "target": "x", "effect": "delay"}).delay_ms


def test_a_plan_without_the_new_fields_keeps_its_document_form() -> None:
    # So the design digest of an existing scenario version does not change.
    trigger = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()["events"]["triggers"][0]
    assert "delayMs" not in trigger
    assert "logicalMs" not in trigger["at"] and "afterMs" not in trigger["recover"]


def test_a_scenario_without_domains_tasks_or_sandboxes_keeps_its_document_form() -> None:
    # The keys added for domains as data, user tasks and real tools stay out of a scenario that
    # does not use them, so its version's pinned sha256 is the same as before they existed.
    doc = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    assert not {"domain", "realTools"} & set(doc["environment"])
    assert not {"facts", "tasks"} & set(doc["user"])


@pytest.mark.parametrize(
    ("doc", "where", "says"),
    [
        ({"effect": "explode"}, "effect", "'delay' or 'abort'"),
        ({"effect": "abort", "position": "committed_response_lost"}, "position", "abort"),
        ({"effect": "delay", "position": "not_sent"}, "position", "delay"),
        ({"effect": "timeout", "delayMs": 100}, "delayMs", "delay"),
        ({"effect": "delay", "delayMs": -1}, "delayMs", "0"),
        ({"at": {"logicalMs": -5}}, "at.logicalMs", "0"),
        ({"recover": {"afterMs": -5}}, "recover.afterMs", "1"),
        ({"at": {"turn": 2, "logicalMs": 1000}}, "at", "turn"),
        ({"recover": {"afterHits": 1, "afterMs": 1000}}, "recover", "afterHits"),
        ({"recover": {"turn": 3, "afterMs": 1000}}, "recover", "turn"),
    ],
)
def test_fault_fields_are_refused_with_their_location(
    doc: dict[str, Any], where: str, says: str
) -> None:
    scenario = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    trigger = {"id": "f", "target": "create_refund", **doc}
    scenario = set_path(scenario, "events.triggers", [trigger])
    with pytest.raises(InputError) as caught:
        validate_scenario(scenario)
    assert f"events.triggers.0.{where}" in str(caught.value)
    assert says in str(caught.value)
    with pytest.raises(ValidationError):
        FaultTrigger.model_validate(trigger)


# --------------------------------------------------------------------------- end to end


def run(tmp: Path, doc: dict[str, Any], name: str = "run") -> tuple[Any, Path]:
    out = tmp / name
    return run_scenario(validate_scenario(doc), out, asset_root=EXAMPLE), out


def fault_stages(out: Path) -> list[str]:
    return [
        r["type"].split(".", 1)[1]
        for r in read_records(out / "records.jsonl")
        if r["type"].startswith("fault.")
    ]


@pytest.mark.parametrize(
    "trigger",
    [
        {"effect": "delay", "delayMs": 45000},
        {"effect": "abort"},
        {"at": {"logicalMs": 4000}, "recover": {"afterMs": 60000}},
    ],
    ids=["delay", "abort", "logical-window"],
)
def test_the_refund_desk_runs_each_new_fault_and_replays_it(
    tmp_path: Path, trigger: dict[str, Any]
) -> None:
    doc = scenario_doc(
        events__triggers=[{"id": "refund-timeout", "target": "create_refund", **trigger}],
        user__disclosure__orderNumber="upfront",
    )
    doc["user"]["mode"] = "regression"  # the window is timed for the pinned path
    first, a = run(tmp_path, doc, "a")
    _, b = run(tmp_path, doc, "b")
    assert first.status.execution == "completed"
    assert fault_stages(a) == ["planned", "armed", "hit", "recovered"]
    assert first.status.validity == "valid"
    report = compare_records(read_records(a / "records.jsonl"), read_records(b / "records.jsonl"))
    assert report.ok, report.summary()
    from simreport.kernel.replay_runner import replay_run

    replayed = replay_run(a, tmp_path / "replayed")
    assert replayed.ok, replayed.summary()


def test_the_ledger_records_a_window_timed_in_logical_milliseconds(tmp_path: Path) -> None:
    import sqlalchemy as sa

    from simreport.ledger import connect, ingest_run
    from simreport.ledger import tables as t

    trigger = {"at": {"logicalMs": 4000}, "recover": {"afterMs": 60000}}
    doc = scenario_doc(
        events__triggers=[{"id": "refund-timeout", "target": "create_refund", **trigger}],
        user__disclosure__orderNumber="upfront",
    )
    _, out = run(tmp_path, doc)
    engine = connect(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        ingest_run(engine, out)
        with engine.connect() as conn:
            plan = conn.execute(sa.select(t.fault_plan)).one()
    finally:
        engine.dispose()
    assert (plan.at_logical_ms, plan.recover_after_ms) == (4000, 60000)


def test_a_run_whose_recovery_failed_never_enters_a_conclusion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = DomainState.process

    def half_applied(
        self: DomainState,
        tool: DomainTool,
        arguments: Any,
        received: list[dict[str, Any]],
        now: str,
    ) -> list[Change]:
        changes = original(self, tool, arguments, received, now)
        if received:  # a refund processed: it is accepted, the order never follows
            self.state["order"][received[0]["orderId"]]["state"] = "delivered"
        return changes

    monkeypatch.setattr(DomainState, "process", half_applied)
    doc = scenario_doc(
        events__triggers__0__position="sent_not_committed",
        user__disclosure__orderNumber="upfront",
    )
    result, out = run(tmp_path, doc)
    assert fault_stages(out)[-1] == "failed"
    assert result.status.validity == "violated"
    steps = read_fault_steps(out)
    assert steps is not None
    # The reason names what the recovery check found, not only that it failed.
    [problem] = fault_problems(steps)
    [found] = [
        s[len(INCONSISTENT) :] for s in steps["refund-timeout"] if s.startswith(INCONSISTENT)
    ]
    assert problem.startswith("fault refund-timeout ") and found in problem
    assert found == "invariant orders_follow_their_refunds does not hold for order B2026-0901-7734"
    assert not usable(result, include_incomplete=True, faults=steps)
