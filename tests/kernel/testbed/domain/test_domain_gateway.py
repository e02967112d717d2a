"""A domain's tools behind the gateway: each fault position changes the domain's state or not
as it says, a delay answers late, an abort cuts the call, a held call runs when its fault
recovers, and a fault that never hits makes the plan fail."""

from __future__ import annotations

from typing import Any

import pytest

from simreport.core.testbed_schema import ClockConfig, FaultTrigger
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.domain.gateway import DomainGateway
from simreport.kernel.testbed.environment import FaultController, InProcessFaultBackend
from simreport.kernel.testbed.records import RecordLog
from tests.kernel.testbed.domain.domains import shop_doc, shop_state


def world(*triggers: dict[str, Any]) -> tuple[DomainGateway, FaultController, RecordLog]:
    clocks = Clocks(ClockConfig())
    log = RecordLog(clocks, "g" * 32)
    gateway = DomainGateway(shop_state(), log, clocks)
    faults = gateway.inject(
        [FaultTrigger.model_validate(t) for t in triggers], InProcessFaultBackend()
    )
    return gateway, faults, log


def buy(gateway: DomainGateway, n: int = 1) -> Any:
    return gateway.call("buy", {"id": "a"}, f"c{n}")


def orders(gateway: DomainGateway) -> list[str]:
    return sorted(gateway.domain_state.state["order"])


def stages(log: RecordLog) -> list[str]:
    return [r["type"].split(".", 1)[1] for r in log.records if r["type"].startswith("fault.")]


def types(log: RecordLog) -> list[str]:
    return [r["type"] for r in log.records]


def test_a_normal_call_is_recorded_with_its_changes_and_latency() -> None:
    gateway, _, log = world()
    answer = buy(gateway)
    assert (answer.outcome, answer.body["order"]["id"]) == ("ok", "O1")
    assert types(log) == ["tool.request", "state.change", "state.change", "tool.response"]
    assert gateway.clocks.logical_ms == 200
    assert (gateway.calls, gateway.per_tool) == (1, {"buy": 1})
    assert gateway.in_flight == set()


def test_a_failed_precondition_is_an_error_outcome() -> None:
    gateway, _, _ = world()
    answer = gateway.call("buy", {"id": "b"}, "c1")
    assert (answer.outcome, answer.body["error"]) == ("error", "out_of_stock")


@pytest.mark.parametrize(
    ("arguments", "error"),
    [({"id": 3}, "invalid_arguments"), (None, "invalid_arguments"), ({}, "invalid_arguments")],
)
def test_arguments_outside_the_input_schema_are_refused(
    arguments: dict[str, Any] | None, error: str
) -> None:
    gateway, _, log = world()
    answer = gateway.call("buy", arguments, "c1")
    assert (answer.outcome, answer.body["error"]) == ("error", error)
    assert "state.change" not in types(log)


def test_an_unknown_tool_is_refused() -> None:
    gateway, _, _ = world()
    assert gateway.call("sell", {}, "c1").body["error"] == "unknown_tool"


def test_definitions_list_the_domains_tools_with_their_input_schema() -> None:
    gateway, _, _ = world()
    definitions = {d["function"]["name"]: d["function"] for d in gateway.definitions()}
    assert list(definitions) == ["get_item", "buy", "force_buy", "swap_stock", "reprice"]
    assert definitions["buy"]["parameters"] == shop_doc()["tools"][1]["input"]


@pytest.mark.parametrize(
    ("position", "outcome", "created", "lost"),
    [
        ("not_sent", "connection_failed", [], False),
        ("sent_not_committed", "timeout", [], False),
        ("committed_response_lost", "timeout", ["O1"], True),
    ],
)
def test_each_timeout_position_changes_the_state_as_it_says(
    position: str, outcome: str, created: list[str], lost: bool
) -> None:
    gateway, _, log = world({"id": "f", "target": "buy", "position": position, "timeoutMs": 30000})
    answer = buy(gateway)
    assert answer.outcome == outcome and answer.body["ok"] is False
    assert orders(gateway) == created
    assert ("tool.response.lost" in types(log)) is lost
    assert gateway.clocks.logical_ms == 30000
    if lost:
        lost_record = next(r for r in log.records if r["type"] == "tool.response.lost")
        assert lost_record["payload"]["body"]["order"]["id"] == "O1"


def test_an_error_fault_after_commit_keeps_the_change() -> None:
    gateway, _, _ = world({"id": "f", "target": "buy", "effect": "error"})
    answer = buy(gateway)
    assert (answer.outcome, answer.body["error"]) == ("error", "service_unavailable")
    assert orders(gateway) == ["O1"]


def test_a_held_call_runs_when_its_fault_recovers_and_then_the_recovery_is_verified() -> None:
    gateway, faults, log = world({"id": "f", "target": "buy", "position": "sent_not_committed"})
    buy(gateway)
    assert [h.call_id for h in gateway.held] == ["c1"]
    assert orders(gateway) == []
    assert stages(log) == ["planned", "armed", "hit"]  # pending: the backlog still holds it
    gateway.process_backlog()
    assert gateway.held == [] and orders(gateway) == ["O1"]
    processed = next(r for r in log.records if r["type"] == "tool.backlog.processed")
    assert processed["payload"] == {"callId": "c1", "faultId": "f", "tool": "buy"}
    assert stages(log) == ["planned", "armed", "hit", "recovered"]
    recovered = next(r for r in log.records if r["type"] == "fault.recovered")
    assert recovered["payload"]["checked"] == {
        "invariants": ["orders_of_known_items", "some_stock"]
    }
    assert faults.violations() == []


def test_a_held_call_waits_while_its_fault_is_open() -> None:
    gateway, faults, log = world(
        {
            "id": "f",
            "target": "buy",
            "position": "sent_not_committed",
            "recover": {"afterHits": 2},
        }
    )
    gateway.domain_state.state["item"]["b"]["stock"] = 1  # some stock stays after both buys
    buy(gateway, 1)
    gateway.process_backlog()
    assert orders(gateway) == [] and len(gateway.held) == 1
    buy(gateway, 2)
    gateway.process_backlog()
    assert orders(gateway) == ["O1", "O2"]
    assert stages(log)[-1] == "recovered" and faults.violations() == []


def test_a_recovery_that_leaves_an_invariant_broken_fails() -> None:
    gateway, faults, log = world({"id": "f", "target": "buy", "position": "sent_not_committed"})
    buy(gateway)
    # Something else wrote an order of an item that does not exist while the call was held.
    gateway.domain_state.state["order"]["O7"] = {"id": "O7", "item": "gone", "state": "placed"}
    gateway.process_backlog()
    failed = next(r for r in log.records if r["type"] == "fault.failed")
    assert failed["payload"]["reason"] == "inconsistent"
    assert "invariant orders_of_known_items does not hold" in failed["payload"]["problems"]
    assert faults.violations() == ["fault f did not hit and recover"]


def test_a_delay_answers_correctly_after_the_added_latency() -> None:
    gateway, faults, log = world({"id": "f", "target": "buy", "effect": "delay", "delayMs": 9000})
    answer = buy(gateway)
    assert answer.outcome == "ok" and orders(gateway) == ["O1"]
    assert gateway.clocks.logical_ms == 200 + 9000
    assert stages(log) == ["planned", "armed", "hit", "recovered"]
    assert faults.violations() == []


def test_an_abort_cuts_the_call_without_effect_or_waiting() -> None:
    gateway, faults, log = world({"id": "f", "target": "buy", "effect": "abort"})
    answer = buy(gateway)
    assert (answer.outcome, answer.body["error"]) == ("aborted", "aborted")
    assert orders(gateway) == [] and gateway.clocks.logical_ms == 0
    assert "state.change" not in types(log)
    assert faults.violations() == []
    assert buy(gateway, 2).outcome == "ok"


def test_a_fault_planned_but_never_hit_fails_the_plan() -> None:
    gateway, faults, log = world({"id": "f", "target": "buy", "at": {"call": 3}})
    buy(gateway, 1)
    buy(gateway, 2)
    faults.drain()
    assert stages(log) == ["planned", "armed", "failed"]
    failed = next(r for r in log.records if r["type"] == "fault.failed")
    assert failed["payload"]["reason"] == "never_hit"
    assert faults.violations() == ["fault f did not hit and recover"]


def test_a_fault_on_another_tool_leaves_these_calls_alone() -> None:
    gateway, faults, log = world({"id": "f", "target": "get_item", "effect": "abort"})
    assert buy(gateway).outcome == "ok"
    assert stages(log) == ["planned", "armed"]
    assert gateway.call("get_item", {"id": "a"}, "c2").outcome == "aborted"
    assert faults.violations() == []
