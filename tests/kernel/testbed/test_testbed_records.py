"""Records of any testbed run: trace, span and digest of each record, and the completeness of the
record set (a missing snapshot, close or lost decision is marked missing, never passed over).
A world's observations and metrics are tested with the world (tests/kernel/worlds/)."""

from __future__ import annotations

from typing import Any

from simreport.core.testbed_schema import ClockConfig
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.records import (
    RecordLog,
    completeness,
    completeness_missing,
    record_digest,
)


def conversation(
    *, snapshot: bool = True, closed: bool = True, lost_decision: bool = False
) -> list[dict[str, Any]]:
    log = RecordLog(Clocks(ClockConfig()), "r" * 32)
    log.add("user.message", "user", "message", {"intent": "open", "text": "Refund please"})
    if lost_decision:
        log.add(
            "agent.decision",
            "agent",
            "control",
            {"kind": "agent_action", "options": ["a", "b"], "chosen": None, "failure": "llm"},
        )
    log.add("tool.request", "agent", "tool_call", {"callId": "c1", "tool": "get_refund"})
    log.add("tool.response", "environment", "tool_call", {"callId": "c1", "outcome": "ok"})
    log.add("agent.message", "agent", "message", {"text": "Done", "signals": ["agent.reply"]})
    log.add("user.message", "user", "message", {"intent": "confirm_and_close", "text": "Thanks"})
    if closed:
        log.add(
            "conversation.closed",
            "harness",
            "control",
            {"closedBy": "resolved_by_user", "goalReached": True},
        )
    if snapshot:
        log.add("environment.snapshot", "environment", "state_change", {"refund": []})
    return log.records


def test_records_carry_trace_span_and_a_digest_of_their_content() -> None:
    records = conversation()
    first = records[0]
    assert len(first["traceId"]) == 32 and len(first["spanId"]) == 16
    assert first["sha256"] == record_digest(first)
    changed = dict(first, payload={"text": "edited"})
    assert record_digest(changed) != first["sha256"]
    assert record_digest(dict(first, clock={"wall": "another time"})) == first["sha256"]


def test_complete_records_miss_nothing() -> None:
    complete = completeness(conversation(), faults_planned=False)
    assert complete["checks"]["state_snapshot"]["status"] == "present"
    assert complete["checks"]["provider_decisions"]["status"] == "present"
    assert complete["checks"]["fault_recovery"]["status"] == "not_applicable"
    assert completeness_missing(complete) == []


def test_missing_material_is_marked_missing() -> None:
    complete = completeness(conversation(snapshot=False, closed=False), faults_planned=True)
    assert complete["checks"]["state_snapshot"]["status"] == "missing"
    assert complete["checks"]["conversation_closed"]["status"] == "missing"
    assert complete["checks"]["fault_recovery"]["status"] == "missing"
    assert {"state_snapshot", "conversation_closed", "fault_recovery"} <= set(
        completeness_missing(complete)
    )


def test_a_lost_decision_is_missing_material() -> None:
    complete = completeness(conversation(lost_decision=True), faults_planned=False)
    assert complete["checks"]["provider_decisions"]["status"] == "missing"
    assert complete["checks"]["provider_decisions"]["detail"]["lost"] == 1
    assert completeness_missing(complete) == ["provider_decisions"]
