"""A tool that records its receipt before processing it: a call a fault holds leaves what was
received (and the invariants know it is pending) until it is processed; guarded effects, updates
of several instances, messages that name the call, `changed`, linkage points, whole integers and
the extended standard library (`sum`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from simreport.core.testbed_schema import ClockConfig, FaultTrigger
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.domain.gateway import DomainGateway
from simreport.kernel.testbed.domain.model import DomainAsset
from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.testbed.environment import InProcessFaultBackend
from simreport.kernel.testbed.records import RecordLog
from tests.kernel.testbed.domain.domains import NOW

TICKETS: dict[str, Any] = {
    "entities": {
        "ticket": {
            "schema": {
                "type": "object",
                "required": ["id", "desk", "minutes", "state"],
                "properties": {
                    "id": {"type": "string"},
                    "desk": {"type": "string"},
                    "minutes": {"type": "integer"},
                    "state": {"enum": ["queued", "open", "closed"]},
                },
            },
        },
        "desk": {
            "schema": {
                "type": "object",
                "required": ["id", "load"],
                "properties": {"id": {"type": "string"}, "load": {"type": "integer"}},
            },
            "initial": [{"id": "d1", "load": 0}, {"id": "d2", "load": 0}],
        },
    },
    "tools": [
        {
            "name": "file",
            "input": {
                "type": "object",
                "required": ["desk", "minutes"],
                "properties": {"desk": {"type": "string"}, "minutes": {"type": "integer"}},
                "additionalProperties": False,
            },
            "preconditions": [
                {
                    "require": "args.desk in state.desk",
                    "error": "no_desk",
                    "explain": '"no desk " + args.desk',
                }
            ],
            "receive": [
                {
                    "create": "ticket",
                    "value": '{"id": "T" + string(next.ticket), "desk": args.desk, '
                    '"minutes": args.minutes, "state": "queued"}',
                }
            ],
            "effects": [
                {
                    "update": "ticket",
                    "when": 'state.ticket[received[0].id].state == "queued"',
                    "id": "received[0].id",
                    "set": {"state": '"open"'},
                },
                {
                    "update": "desk",
                    "when": 'state.ticket[received[0].id].state == "queued"',
                    "id": "args.desk",
                    "set": {
                        "load": 'sum(items.ticket.filter(t, t.desk == this.id && t.state == "open")'
                        ".map(t, t.minutes)) + received[0].minutes"
                    },
                },
            ],
            "answer": '{"ticket": state.ticket[created[0].id]}',
        },
        {
            "name": "close_desk",
            "input": {
                "type": "object",
                "required": ["desk"],
                "properties": {"desk": {"type": "string"}},
            },
            "linkage": "desk.close",
            "effects": [
                {
                    "update": "ticket",
                    "id": 'items.ticket.filter(t, t.desk == args.desk && t.state != "closed")'
                    ".map(t, t.id)",
                    "set": {"state": '"closed"', "minutes": "this.minutes * 0"},
                }
            ],
            "answer": '{"closed": changed.ticket.map(t, t.id), "desks": size(changed.desk)}',
        },
    ],
    "invariants": [
        {
            "name": "queued_only_while_pending",
            "holds": 'items.ticket.all(t, t.state != "queued" || t.id in pending.ticket)',
        },
        {"name": "desks_not_overloaded", "each": "desk", "holds": "this.load <= 60"},
    ],
}


def tickets() -> DomainAsset:
    return DomainAsset.model_validate(copy.deepcopy(TICKETS))


def call(state: DomainState, tool: str, **args: Any) -> tuple[dict[str, Any], list[Any]]:
    spec = state.domain.tool(tool)
    assert spec is not None
    return state.call(spec, args, NOW)


def test_a_call_is_received_then_processed_and_answers_from_the_state_after() -> None:
    state = DomainState(tickets())
    body, changes = call(state, "file", desk="d1", minutes=5)
    assert body == {
        "ok": True,
        "ticket": {"id": "T1", "desk": "d1", "minutes": 5, "state": "open"},
    }
    assert [(c.entity, c.id, c.before, c.after) for c in changes] == [
        ("ticket", "T1", None, {"id": "T1", "desk": "d1", "minutes": 5, "state": "queued"}),
        ("ticket", "T1", {"state": "queued"}, {"state": "open"}),
        ("desk", "d1", {"load": 0}, {"load": 5}),
    ]
    call(state, "file", desk="d1", minutes=2)
    assert state.state["desk"]["d1"]["load"] == 7  # `sum` over the open tickets, `this` the desk


def test_a_refused_precondition_receives_nothing_and_its_message_names_the_call() -> None:
    state = DomainState(tickets())
    refused, changes, received = state.receive(tickets().tools[0], {"desk": "d9"}, NOW)
    assert refused == {"ok": False, "error": "no_desk", "message": "no desk d9"}
    assert (changes, received, state.state["ticket"]) == ([], [], {})


def test_a_received_call_waits_and_its_guarded_effects_skip_what_changed_meanwhile() -> None:
    state = DomainState(tickets())
    tool = state.domain.tool("file")
    assert tool is not None
    refused, _, received = state.receive(tool, {"desk": "d1", "minutes": 5}, NOW)
    assert refused is None and received[0]["state"] == "queued"
    assert state.invariant_problems() == ["invariant queued_only_while_pending does not hold"]
    assert state.invariant_problems({"ticket": ["T1"]}) == []
    call(state, "close_desk", desk="d1")  # closes the queued ticket before it is processed
    assert state.process(tool, {"desk": "d1", "minutes": 5}, received, NOW) == []
    assert state.state["ticket"]["T1"]["state"] == "closed"
    assert state.state["desk"]["d1"]["load"] == 0


def test_an_invariant_for_each_instance_names_those_it_does_not_hold_for() -> None:
    state = DomainState(tickets())
    for desk in ("d1", "d2"):
        call(state, "file", desk=desk, minutes=70)
    assert state.invariant_problems() == [
        "invariant desks_not_overloaded does not hold for desk d1",
        "invariant desks_not_overloaded does not hold for desk d2",
    ]
    doc = copy.deepcopy(TICKETS)
    doc["invariants"][1]["each"] = "room"
    with pytest.raises(ValueError, match=r"invariants\.1\.each: no entity .room."):
        DomainAsset.model_validate(doc)
    doc["invariants"][1] = {"name": "x", "holds": "this.load <= 60"}  # `this` needs `each`
    with pytest.raises(ValueError, match="reads this"):
        DomainAsset.model_validate(doc)


def test_an_update_of_several_instances_reads_each_as_this() -> None:
    state = DomainState(tickets())
    for minutes in (3, 4):
        call(state, "file", desk="d1", minutes=minutes)
    call(state, "file", desk="d2", minutes=9)
    body, changes = call(state, "close_desk", desk="d1")
    assert body == {"ok": True, "closed": ["T1", "T2"], "desks": 0}  # `changed`, in key order
    assert {(c.id, c.after["state"], c.after["minutes"]) for c in changes} == {
        ("T1", "closed", 0),
        ("T2", "closed", 0),
    }
    assert state.state["ticket"]["T3"]["state"] == "open"


def test_an_integer_argument_must_be_written_as_a_whole_number() -> None:
    state = DomainState(tickets())
    tool = state.domain.tool("file")
    assert tool is not None
    assert state.argument_problem(tool, {"desk": "d1", "minutes": 5}) is None
    for value in (5.0, True):
        problem = state.argument_problem(tool, {"desk": "d1", "minutes": value})
        assert problem == "argument 'minutes' must be a integer"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "missing required argument 'desk'"),  # the first the schema requires
        ({"desk": "d1"}, "missing required argument 'minutes'"),
        ({"desk": 3, "minutes": 1}, "argument 'desk' must be a string"),
        ({"desk": "d1", "minutes": 1, "why": "x"}, "unknown argument 'why'"),
    ],
)
def test_an_argument_error_names_the_argument(arguments: dict[str, Any], expected: str) -> None:
    state = DomainState(tickets())
    tool = state.domain.tool("file")
    assert tool is not None
    assert state.argument_problem(tool, arguments) == expected


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        (("tools", 0, "effects", 0, "when"), "this.state", "this"),  # `this`: only in `set`
        (("tools", 0, "receive", 0, "value"), "nope", "nope"),
        (("tools", 0, "preconditions", 0, "explain"), "received", "received"),
        (("tools", 1, "answer"), "pending", "pending"),
    ],
)
def test_each_new_expression_reads_only_its_own_variables(
    path: tuple[Any, ...], value: str, expected: str
) -> None:
    doc = copy.deepcopy(TICKETS)
    node: Any = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    with pytest.raises(ValueError, match=f"reads {expected}"):
        DomainAsset.model_validate(doc)


def held_world() -> tuple[DomainGateway, RecordLog]:
    clocks = Clocks(ClockConfig())
    log = RecordLog(clocks, "p" * 32)
    gateway = DomainGateway(DomainState(tickets()), log, clocks)
    trigger = {
        "id": "hold",
        "target": "file",
        "effect": "timeout",
        "position": "sent_not_committed",
        "at": {"call": 1},
        "recover": {"afterHits": 1},
        "timeoutMs": 1000,
    }
    gateway.inject([FaultTrigger.model_validate(trigger)], InProcessFaultBackend())
    return gateway, log


def test_a_held_call_is_received_at_once_and_processed_when_its_fault_recovers() -> None:
    gateway, log = held_world()
    answer = gateway.call("file", {"desk": "d1", "minutes": 5}, "c1")
    assert answer.outcome == "timeout"
    tickets_now = gateway.domain_state.state["ticket"]
    assert tickets_now["T1"]["state"] == "queued"  # received: the agent can read it back
    assert gateway.pending() == {"ticket": ["T1"]}
    gateway.process_backlog()
    assert gateway.domain_state.state["ticket"]["T1"]["state"] == "open"
    assert gateway.pending() == {}
    recovered = [r for r in log.records if r["type"] == "fault.recovered"]
    assert [r["payload"]["verified"] for r in recovered] == [True]
    assert recovered[0]["payload"]["checked"] == {
        "invariants": ["queued_only_while_pending", "desks_not_overloaded"]
    }
    changes = [r["payload"] for r in log.records if r["type"] == "state.change"]
    assert [c["cause"] for c in changes] == ["c1", "c1", "c1"]


def test_a_tool_with_a_linkage_records_the_events_environment_point() -> None:
    gateway, log = held_world()
    gateway.domain_state.call(
        gateway.domain_state.domain.tools[0], {"desk": "d2", "minutes": 1}, NOW
    )
    user_point = log.open_linkage("desk.close")
    gateway.call("close_desk", {"desk": "d2"}, "c2")
    linked = [r for r in log.records if r.get("linkage")]
    assert [r["linkage"] for r in linked] == [
        {"id": user_point["id"], "event": "desk.close", "point": "environment"}
    ]
    assert linked[0]["type"] == "state.change"
