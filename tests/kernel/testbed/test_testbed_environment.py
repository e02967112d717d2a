"""The environment simulator over the refund desk's domain (domain.yaml, behind the generic
domain gateway): every tool reads one state, contract checks, and faults at the three positions
of a request's life, each recorded planned → armed → hit → recovered (or failed)."""

from __future__ import annotations

from typing import Any

import pytest

from simreport.core.testbed_schema import ClockConfig, FaultTrigger
from simreport.kernel.testbed.assets import ToolSpec
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.domain.gateway import DomainGateway
from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.testbed.environment import (
    FaultBackend,
    FaultController,
    InProcessFaultBackend,
    RecordedFaultBackend,
)
from simreport.kernel.testbed.records import RecordLog
from simreport.kernel.worlds.refund_desk.domain import refund_domain
from tests.support.refund_desk import contract_tools, env_data

ORDER = "B2026-0901-7734"
PATTERN = r"^(?:B\d{4}-\d{4}-\d{4})$"
"""The contract's order-number pattern as the input schema writes it: matched whole."""


def world(
    triggers: list[dict[str, Any]] | None = None,
    backend: FaultBackend | None = None,
    **rules: Any,
) -> tuple[DomainGateway, FaultController, RecordLog]:
    clocks = Clocks(ClockConfig())
    log = RecordLog(clocks, "t" * 32)
    state = DomainState(refund_domain(env_data(**rules), contract_tools("1.4.0")))
    gateway = DomainGateway(state, log, clocks)
    faults = gateway.inject(
        [FaultTrigger.model_validate(t) for t in triggers or []],
        backend or InProcessFaultBackend(),
    )
    return gateway, faults, log


def stages(log: RecordLog) -> list[str]:
    return [r["type"] for r in log.records if r["type"].startswith("fault.")]


def create(gateway: DomainGateway, n: int = 1) -> Any:
    return gateway.call("create_refund", {"order_no": ORDER, "amount_minor": 19900}, f"c{n}")


def refund_states(gateway: DomainGateway) -> list[str]:
    return [r["state"] for r in gateway.domain_state.snapshot()["refund"]]


def test_a_created_refund_is_what_every_other_tool_sees() -> None:
    gateway, _, log = world()
    made = create(gateway)
    assert made.outcome == "ok" and made.body["refund"]["state"] == "accepted"
    found = gateway.call("get_refund", {"order_no": ORDER}, "c2").body["refunds"]
    assert found == [made.body["refund"]]
    order = gateway.call("get_order", {"order_no": ORDER}, "c3").body["order"]
    assert order["state"] == "refunded"
    snapshot = gateway.domain_state.snapshot()
    assert [r["id"] for r in snapshot["refund"]] == [made.body["refund"]["refundId"]]
    # Each change is recorded: a creation with the whole instance, an update with the fields
    # it changed.
    changes = [r["payload"] for r in log.records if r["type"] == "state.change"]
    assert changes == [
        {
            "entity": "refund",
            "id": "RF-0001",
            "from": None,
            "to": {"id": "RF-0001", "orderId": ORDER, "amountMinor": 19900, "state": "processing"},
            "cause": "c1",
        },
        {
            "entity": "refund",
            "id": "RF-0001",
            "from": {"state": "processing"},
            "to": {"state": "accepted"},
            "cause": "c1",
        },
        {
            "entity": "order",
            "id": ORDER,
            "from": {"state": "delivered"},
            "to": {"state": "refunded"},
            "cause": "c1",
        },
    ]


def test_contracts_and_business_rules_are_enforced() -> None:
    gateway, _, _ = world()
    assert gateway.call("get_order", {}, "a").body["error"] == "invalid_arguments"
    assert gateway.call("get_order", {"order_no": "nope"}, "b").body["error"] == "invalid_arguments"
    assert (
        gateway.call("get_order", {"order_no": "B2026-0000-0000"}, "c").body["error"]
        == "order_not_found"
    )
    assert gateway.call("drop_tables", {}, "d").body["error"] == "unknown_tool"
    assert gateway.call("get_order", None, "e").body["error"] == "invalid_arguments"
    old = gateway.call(
        "create_refund", {"order_no": "B2026-0815-1180", "amount_minor": 4500}, "f"
    ).body
    assert old["error"] == "outside_refund_window"  # delivered 16 days before business time
    strict, _, _ = world(rejectOverRefund=True)
    create(strict, 1)
    assert create(strict, 2).body["error"] == "over_refund"
    lenient, _, _ = world()
    create(lenient, 1)
    assert create(lenient, 2).outcome == "ok"  # no guard: a second refund goes through


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("get_order", {}, "missing required argument 'order_no'"),
        ("get_order", {"order_no": "nope"}, f"argument 'order_no' does not match {PATTERN}"),
        # The contract's pattern is matched whole, not searched for.
        ("get_order", {"order_no": f"x{ORDER}"}, f"argument 'order_no' does not match {PATTERN}"),
        ("create_refund", {"amount_minor": 5}, "missing required argument 'order_no'"),
        (
            "create_refund",
            {"order_no": ORDER, "amount_minor": "5"},
            "argument 'amount_minor' must be a integer",
        ),
        (
            "create_refund",
            {"order_no": ORDER, "amount_minor": 5.0},
            "argument 'amount_minor' must be a integer",
        ),
        (
            "create_refund",
            {"order_no": ORDER, "amount_minor": True},
            "argument 'amount_minor' must be a integer",
        ),
        ("create_refund", {"order_no": ORDER, "amount_minor": 5, "x": 1}, "unknown argument 'x'"),
    ],
)
def test_invalid_arguments_are_refused_naming_the_argument(
    tool: str, arguments: dict[str, Any], message: str
) -> None:
    gateway, _, log = world()
    answer = gateway.call(tool, arguments, "a")
    assert answer.outcome == "error"
    assert answer.body == {"ok": False, "error": "invalid_arguments", "message": message}
    assert refund_states(gateway) == []
    assert not any(r["type"] == "state.change" for r in log.records)


def test_logical_and_business_time_move_with_calls_not_with_the_wall() -> None:
    gateway, _, _ = world([{"id": "f", "target": "create_refund", "timeoutMs": 30000}])
    create(gateway)
    assert gateway.clocks.logical_ms == 30000
    assert gateway.clocks.business_time().startswith("2026-09-01T10:00:30")
    gateway.call("get_refund", {"order_no": ORDER}, "x")
    assert gateway.clocks.logical_ms == 30600


@pytest.mark.parametrize(
    ("position", "outcome", "refunds_after_call"),
    [
        ("not_sent", "connection_failed", []),
        ("sent_not_committed", "timeout", ["processing"]),
        ("committed_response_lost", "timeout", ["accepted"]),
    ],
)
def test_the_three_timeout_positions(
    position: str, outcome: str, refunds_after_call: list[str]
) -> None:
    gateway, faults, log = world([{"id": "f", "target": "create_refund", "position": position}])
    answer = create(gateway)
    assert answer.outcome == outcome
    assert refund_states(gateway) == refunds_after_call
    # A held request is processed at the next turn; only then is the recovery verified.
    gateway.process_backlog()
    assert stages(log) == ["fault.planned", "fault.armed", "fault.hit", "fault.recovered"]
    assert refund_states(gateway) == ([] if position == "not_sent" else ["accepted"])
    assert create(gateway, 2).outcome == "ok"
    assert faults.violations() == []
    lost = [r for r in log.records if r["type"] == "tool.response.lost"]
    assert len(lost) == (1 if position == "committed_response_lost" else 0)


def test_a_fault_window_by_turns() -> None:
    trigger = {"id": "f", "target": "get_refund", "at": "turn-2", "recover": "turn-3"}
    gateway, faults, log = world([trigger])
    assert gateway.call("get_refund", {"order_no": ORDER}, "a").outcome == "ok"  # not armed yet
    faults.on_turn(2)
    assert gateway.call("get_refund", {"order_no": ORDER}, "b").outcome == "timeout"
    assert gateway.call("get_refund", {"order_no": ORDER}, "c").outcome == "timeout"
    faults.on_turn(3)
    assert gateway.call("get_refund", {"order_no": ORDER}, "d").outcome == "ok"
    assert stages(log) == [
        "fault.planned",
        "fault.armed",
        "fault.hit",
        "fault.hit",
        "fault.recovered",
    ]


def test_faults_that_do_not_land_are_failures() -> None:
    _, faults, log = world(
        [
            {"id": "never-hit", "target": "create_refund"},
            {"id": "never-armed", "target": "create_refund", "at": "turn-9"},
        ]
    )
    faults.drain()
    reasons = {
        r["payload"]["faultId"]: r["payload"]["reason"]
        for r in log.records
        if r["type"] == "fault.failed"
    }
    assert reasons == {"never-hit": "never_hit", "never-armed": "never_armed"}
    assert len(faults.violations()) == 2


def test_an_error_fault_and_a_backend_that_cannot_recover() -> None:
    class Stuck(InProcessFaultBackend):
        def disarm(self, experiment_id: str) -> bool:
            return False

    gateway, faults, log = world([{"id": "f", "target": "get_order", "effect": "error"}], Stuck())
    answer = gateway.call("get_order", {"order_no": ORDER}, "a")
    assert (answer.outcome, answer.body["error"]) == ("error", "service_unavailable")
    failed = next(r for r in log.records if r["type"] == "fault.failed")
    assert failed["payload"]["reason"] == "not_recovered"
    assert faults.violations() == ["fault f did not hit and recover"]


def test_a_recorded_backend_strikes_exactly_the_recorded_calls() -> None:
    backend = RecordedFaultBackend([("f", "create_refund", 2)])
    gateway, _, _ = world([{"id": "f", "target": "create_refund"}], backend)
    assert create(gateway, 1).outcome == "ok"
    assert create(gateway, 2).outcome == "timeout"


def test_tool_definitions_follow_the_contract() -> None:
    gateway, _, _ = world()
    definitions = {d["function"]["name"]: d["function"] for d in gateway.definitions()}
    assert list(definitions) == ["get_order", "create_refund", "get_refund"]
    assert definitions["create_refund"]["parameters"]["required"] == ["order_no", "amount_minor"]
    assert list(definitions["create_refund"]["parameters"]["properties"]) == [
        "order_no",
        "amount_minor",
        "reason",
    ]
    assert definitions["create_refund"]["parameters"]["additionalProperties"] is False
    assert definitions["get_order"]["parameters"]["properties"]["order_no"] == {
        "type": "string",
        "description": "The order number.",
        "pattern": PATTERN,
    }


def test_a_contract_must_give_its_operation_the_arguments_it_needs() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        ToolSpec.model_validate(
            {"name": "create_refund", "operation": "create_refund", "parameters": {}}
        )


def test_a_window_that_closes_unhit_is_a_failure_not_a_recovery() -> None:
    _, faults, log = world([{"target": "create_refund", "at": "turn-1", "recover": "turn-2"}])
    faults.on_turn(1)
    faults.on_turn(2)
    assert stages(log) == ["fault.planned", "fault.armed", "fault.failed"]
    failed = next(r for r in log.records if r["type"] == "fault.failed")
    assert (failed["payload"]["faultId"], failed["payload"]["reason"]) == ("fault-1", "never_hit")
