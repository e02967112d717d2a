"""The environment simulator: one fact model behind every tool surrogate, and fault injection
(`FaultController` decides, a `FaultBackend` executes). Each fault is recorded planned → armed →
hit → recovered, or failed with why; a recovery is verified against the fact model, never
assumed. The fault points and windows: docs/testbed.md.
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ...core.canonical import content_hash
from ...core.testbed import FaultTrigger
from .assets import EnvironmentDataAsset, ToolSpec
from .clock import Clocks
from .participants import SurrogateParticipant
from .records import RecordLog

# --------------------------------------------------------------------------- fact model


@dataclass
class Order:
    id: str
    account_id: str
    paid_amount_minor: int
    currency: str
    state: str
    delivered_at: str | None


@dataclass
class Refund:
    id: str
    order_id: str
    amount_minor: int
    state: str  # processing | accepted | rejected | withdrawn


REFUND_STATES = ("processing", "accepted", "rejected", "withdrawn")
WITHDRAW_EVENT = "refund.withdraw"
"""The business event the linkage ledger follows: a user withdrawing a refund request."""
REFUNDED_STATES = ("refunded", "partially_refunded")


@dataclass
class Change:
    """One state change of an entity, recorded as a state_change record."""

    entity: str
    id: str
    before: Any
    after: Any


class FactModel:
    """Orders, refunds and accounts of one run (a private copy: runs share no mutable state)."""

    def __init__(self, data: EnvironmentDataAsset) -> None:
        source = copy.deepcopy(data)
        self.rules = source.rules
        self.orders = {
            o.id: Order(
                o.id, o.account_id, o.paid_amount_minor, o.currency, o.state, o.delivered_at
            )
            for o in source.orders
        }
        self.refunds = {
            r.id: Refund(r.id, r.order_id, r.amount_minor, r.state) for r in source.refunds
        }
        self.accounts = {a.id: a.name for a in source.accounts}
        # What an order returns to when every refund of it is withdrawn.
        self._base_state = {o.id: o.state for o in self.orders.values()}
        self._next_refund = len(self.refunds) + 1
        self._initial_problems: frozenset[str] = frozenset()
        # A recovery answers for what the fault left, not for what the data held from the start.
        self._initial_problems = frozenset(self.inconsistencies())

    # -- queries

    def order_view(self, order: Order) -> dict[str, Any]:
        return {
            "orderNo": order.id,
            "state": order.state,
            "paidAmountMinor": order.paid_amount_minor,
            "currency": order.currency,
            "deliveredAt": order.delivered_at,
        }

    def refund_view(self, refund: Refund) -> dict[str, Any]:
        return {
            "refundId": refund.id,
            "orderNo": refund.order_id,
            "amountMinor": refund.amount_minor,
            "state": refund.state,
        }

    def get_order(self, order_no: str) -> dict[str, Any]:
        order = self.orders.get(order_no)
        if order is None:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}
        return {"ok": True, "order": self.order_view(order)}

    def get_refund(self, order_no: str) -> dict[str, Any]:
        if order_no not in self.orders:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}
        found = [self.refund_view(r) for r in self.refunds.values() if r.order_id == order_no]
        return {"ok": True, "refunds": found}

    # -- the one submission entry

    def create_refund(
        self, order_no: str, amount_minor: int, business_now: datetime, *, hold: bool = False
    ) -> tuple[dict[str, Any], list[Change]]:
        """Submit a refund. With `hold` the service has received it but not processed it: the
        refund exists as `processing` until `commit_held`."""
        order = self.orders.get(order_no)
        if order is None:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}, []
        if order.delivered_at is not None:
            delivered = datetime.fromisoformat(order.delivered_at)
            if business_now > delivered + timedelta(days=self.rules.refund_window_days):
                return {
                    "ok": False,
                    "error": "outside_refund_window",
                    "message": f"refunds close {self.rules.refund_window_days} days after delivery",
                }, []
        if amount_minor <= 0:
            return {
                "ok": False,
                "error": "invalid_amount",
                "message": "amount must be positive",
            }, []
        refunded = sum(
            r.amount_minor
            for r in self.refunds.values()
            if r.order_id == order_no and r.state != "rejected"
        )
        if self.rules.reject_over_refund and refunded + amount_minor > order.paid_amount_minor:
            return {
                "ok": False,
                "error": "over_refund",
                "message": "the amount exceeds what is left to refund",
            }, []
        refund = Refund(f"RF-{self._next_refund:04d}", order_no, amount_minor, "processing")
        self._next_refund += 1
        self.refunds[refund.id] = refund
        changes = [Change("refund", refund.id, None, "processing")]
        if not hold:
            changes += self.commit_held(refund.id)
        return {"ok": True, "refund": self.refund_view(refund)}, changes

    def withdraw_refund(self, order_no: str) -> tuple[dict[str, Any], list[Change]]:
        """Withdraw the customer's refund request for an order: every refund of it still
        `processing` (a request in flight, perhaps held by a fault) or `accepted` (not yet paid
        out) becomes `withdrawn`, and the order's state follows the refunds that remain."""
        order = self.orders.get(order_no)
        if order is None:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}, []
        open_ = [
            r
            for r in self.refunds.values()
            if r.order_id == order_no and r.state in ("processing", "accepted")
        ]
        if not open_:
            return {
                "ok": False,
                "error": "nothing_to_withdraw",
                "message": f"order {order_no} has no refund request to withdraw",
            }, []
        changes = []
        for refund in open_:
            changes.append(Change("refund", refund.id, refund.state, "withdrawn"))
            refund.state = "withdrawn"
        accepted = sum(
            r.amount_minor
            for r in self.refunds.values()
            if r.order_id == order.id and r.state == "accepted"
        )
        if accepted >= order.paid_amount_minor:
            new_state = "refunded"
        elif accepted > 0:
            new_state = "partially_refunded"
        else:
            new_state = self._base_state.get(order.id, order.state)
        if new_state != order.state:
            changes.append(Change("order", order.id, order.state, new_state))
            order.state = new_state
        return {"ok": True, "withdrawn": [self.refund_view(r) for r in open_]}, changes

    def commit_held(self, refund_id: str) -> list[Change]:
        """Process a received refund: it is accepted and the order's state follows."""
        refund = self.refunds[refund_id]
        if refund.state != "processing":
            return []
        changes = [Change("refund", refund.id, refund.state, "accepted")]
        refund.state = "accepted"
        order = self.orders[refund.order_id]
        total = sum(
            r.amount_minor
            for r in self.refunds.values()
            if r.order_id == order.id and r.state == "accepted"
        )
        new_state = "refunded" if total >= order.paid_amount_minor else "partially_refunded"
        if new_state != order.state:
            changes.append(Change("order", order.id, order.state, new_state))
            order.state = new_state
        return changes

    # -- consistency (what a recovery is verified against)

    def inconsistencies(self, pending: Iterable[str] = ()) -> list[str]:
        """What does not hold together in the model, beyond what already did not at the start:
        a refund of no order, a refund `processing` with no request pending (`pending`: the ids
        of refunds held in the service's backlog) — a half-applied write — or an order whose
        state does not follow its accepted refunds."""
        waiting = set(pending)
        problems: list[str] = []
        for refund in self.refunds.values():
            if refund.order_id not in self.orders:
                problems.append(f"refund {refund.id} names order {refund.order_id}, which is gone")
            if refund.state not in REFUND_STATES:
                problems.append(f"refund {refund.id} is in no known state ({refund.state})")
            if refund.state == "processing" and refund.id not in waiting:
                problems.append(
                    f"refund {refund.id} of order {refund.order_id} is processing with no "
                    "request pending: a half-applied write"
                )
        for order in self.orders.values():
            accepted = sum(
                r.amount_minor
                for r in self.refunds.values()
                if r.order_id == order.id and r.state == "accepted"
            )
            if accepted >= order.paid_amount_minor:
                expected: str | None = "refunded"
            elif accepted > 0:
                expected = "partially_refunded"
            else:
                expected = None
            follows = order.state == expected if expected else order.state not in REFUNDED_STATES
            if not follows:
                problems.append(
                    f"order {order.id} is {order.state}, but its accepted refunds total "
                    f"{accepted} of {order.paid_amount_minor} paid"
                    + (f": expected {expected}" if expected else "")
                )
        return [p for p in problems if p not in self._initial_problems]

    def read_back(self, order_no: str) -> tuple[list[str], list[str]]:
        """Read an order and its refunds through the tools' answers and compare them with what
        is stored: (disagreements, the refund ids read)."""
        stored = {r.id: r for r in self.refunds.values() if r.order_id == order_no}
        problems: list[str] = []
        order = self.orders.get(order_no)
        answer = self.get_order(order_no)
        if order is None or not answer.get("ok"):
            return [f"get_order({order_no}) finds no order"], sorted(stored)
        if answer["order"]["state"] != order.state:
            problems.append(
                f"get_order({order_no}) says {answer['order']['state']}, the store {order.state}"
            )
        listed = {str(x["refundId"]): x for x in self.get_refund(order_no).get("refunds", [])}
        for rid in sorted(set(stored) | set(listed)):
            if rid not in listed:
                problems.append(f"refund {rid} is stored but get_refund({order_no}) misses it")
            elif rid not in stored:
                problems.append(f"get_refund({order_no}) lists {rid}, which is not stored")
            elif (listed[rid]["state"], listed[rid]["amountMinor"]) != (
                stored[rid].state,
                stored[rid].amount_minor,
            ):
                problems.append(
                    f"get_refund({order_no}) says {rid} is {listed[rid]['state']} for "
                    f"{listed[rid]['amountMinor']}, the store {stored[rid].state} for "
                    f"{stored[rid].amount_minor}"
                )
        return problems, sorted(stored)

    def snapshot(self) -> dict[str, Any]:
        return {
            "orders": [self.order_view(o) | {"id": o.id} for o in self.orders.values()],
            "refunds": [
                {
                    "id": r.id,
                    "orderId": r.order_id,
                    "amountMinor": r.amount_minor,
                    "state": r.state,
                }
                for r in self.refunds.values()
            ],
            "accounts": sorted(self.accounts),
        }

    def digest(self) -> str:
        return content_hash(self.snapshot())


# --------------------------------------------------------------------------- fault backends


class FaultBackend(ABC):
    """Executes fault experiments; the harness decides when, on what and whether it recovered."""

    name = "backend"

    @abstractmethod
    def arm(self, trigger: FaultTrigger) -> str:
        """Start an experiment for `trigger`; return its experiment id."""

    @abstractmethod
    def match(self, target: str, call_index: int) -> str | None:
        """The armed experiment that strikes this call (the `call_index`-th call to `target`)."""

    @abstractmethod
    def disarm(self, experiment_id: str) -> bool:
        """Destroy an experiment; True when the service is back to normal."""

    @abstractmethod
    def active(self) -> list[str]:
        """Experiments currently armed."""


class InProcessFaultBackend(FaultBackend):
    """Faults injected inside this process, in the tool gateway's path."""

    name = "in-process"

    def __init__(self) -> None:
        self._armed: dict[str, FaultTrigger] = {}
        self._serial = 0

    def arm(self, trigger: FaultTrigger) -> str:
        self._serial += 1
        experiment = f"inproc-{trigger.id}-{self._serial}"
        self._armed[experiment] = trigger
        return experiment

    def match(self, target: str, call_index: int) -> str | None:
        for experiment, trigger in self._armed.items():
            first = trigger.at.call or 1
            if trigger.target == target and call_index >= first:
                return experiment
        return None

    def disarm(self, experiment_id: str) -> bool:
        self._armed.pop(experiment_id, None)
        return experiment_id not in self._armed

    def active(self) -> list[str]:
        return list(self._armed)


class RecordedFaultBackend(InProcessFaultBackend):
    """Replays faults: strikes exactly the calls a recorded run's `fault.hit` records name."""

    name = "recorded"

    def __init__(self, hits: Iterable[tuple[str, str, int]]) -> None:
        super().__init__()
        self._hits = set(hits)  # (fault id, target, call index)

    def match(self, target: str, call_index: int) -> str | None:
        for experiment, trigger in self._armed.items():
            if (trigger.id, target, call_index) in self._hits:
                return experiment
        return None


# --------------------------------------------------------------------------- fault controller


@dataclass(frozen=True)
class RecoveryCheck:
    """What verifying a recovery found: the objects read back and what disagreed. `pending`
    when requests the fault held are still in the backlog (verified once they are processed)."""

    checked: Mapping[str, list[str]]
    problems: list[str]
    pending: bool = False


@dataclass
class FaultState:
    trigger: FaultTrigger
    experiment: str | None = None
    armed_at_ms: int = 0
    hits: int = 0
    verifying: bool = False
    """The experiment is destroyed; the recovery waits for its verification."""
    settled: str | None = None  # "recovered" | "failed"

    @property
    def open(self) -> bool:
        return self.experiment is not None and self.settled is None and not self.verifying


class FaultController:
    """The harness side of fault injection: plans, arms, matches, recovers, verifies the recovery
    (`verify`: the fault id → what the fact model shows) and records each step. Windows move on
    the run's logical clock, read from the record log's clocks."""

    def __init__(
        self,
        triggers: Sequence[FaultTrigger],
        backend: FaultBackend,
        log: RecordLog,
        on_recover: Callable[[str], None],
        *,
        verify: Callable[[str], RecoveryCheck],
    ) -> None:
        self.backend = backend
        self.log = log
        # Every trigger has an id here (the scenario numbers unnamed ones fault-<n>).
        named = [
            t if t.id else t.model_copy(update={"id": f"fault-{n}"})
            for n, t in enumerate(triggers, start=1)
        ]
        self.states = {str(t.id): FaultState(t) for t in named}
        self._on_recover = on_recover
        self._verify = verify

    @property
    def now_ms(self) -> int:
        return self.log.clocks.logical_ms

    def _record(self, stage: str, state: FaultState, **detail: Any) -> None:
        t = state.trigger
        self.log.add(
            f"fault.{stage}",
            "harness",
            "control",
            {"faultId": t.id, "target": t.target, **detail},
            span_key=f"fault:{t.id}",
        )

    def plan(self) -> None:
        for state in self.states.values():
            t = state.trigger
            delay = {"delayMs": t.delay_ms} if t.effect == "delay" else {}
            self._record(
                "planned",
                state,
                effect=t.effect,
                position=t.position,
                at=t.at.to_doc(),
                recover=t.recover.to_doc(),
                timeoutMs=t.timeout_ms,
                atLogicalMs=t.at.logical_ms,
                recoverAfterMs=t.recover.after_ms,
                **delay,
            )

    def _arm(self, state: FaultState) -> None:
        state.experiment = self.backend.arm(state.trigger)
        state.armed_at_ms = self.now_ms
        self._record("armed", state, experiment=state.experiment)

    def arm_initial(self) -> None:
        """Faults whose window opens with the run (no `at.turn`, no later `at.logicalMs`)."""
        for state in self.states.values():
            at = state.trigger.at
            if at.turn is None and (at.logical_ms is None or at.logical_ms <= self.now_ms):
                self._arm(state)

    def tick(self) -> None:
        """At a scheduling point (a tool call, a turn boundary): close the windows whose logical
        time is up, then open those whose logical time has come."""
        for state in self.states.values():
            after = state.trigger.recover.after_ms
            if state.open and after is not None and self.now_ms >= state.armed_at_ms + after:
                self.close(state)
        for state in self.states.values():
            opens = state.trigger.at.logical_ms
            due = opens is not None and self.now_ms >= opens
            if due and state.experiment is None and state.settled is None:
                self._arm(state)

    def on_turn(self, turn: int) -> None:
        """At the start of user turn `turn`: recover faults due, then arm faults due."""
        self.tick()
        for state in self.states.values():
            if state.open and state.trigger.recover.turn == turn:
                self.close(state)
        for state in self.states.values():
            if state.experiment is None and state.settled is None and state.trigger.at.turn == turn:
                self._arm(state)

    def strike(self, target: str, call_index: int, call_id: str) -> FaultTrigger | None:
        """The fault that lands on this call, recorded as hit; None for a normal call."""
        experiment = self.backend.match(target, call_index)
        if experiment is None:
            return None
        state = next(s for s in self.states.values() if s.experiment == experiment)
        state.hits += 1
        t = state.trigger
        self._record(
            "hit",
            state,
            experiment=experiment,
            callId=call_id,
            callIndex=call_index,
            effect=t.effect,
            position=t.position,
            **({"delayMs": t.delay_ms} if t.effect == "delay" else {}),
        )
        return t

    def after_call(self, fault: FaultTrigger) -> None:
        state = self.states[str(fault.id)]
        limit = fault.recover.after_hits
        if state.open and limit is not None and state.hits >= limit:
            self.recover(state)

    def recover(self, state: FaultState) -> None:
        """Destroy the experiment, release what it held, then verify the recovery."""
        assert state.experiment is not None
        ok = self.backend.disarm(state.experiment)
        if not ok or state.experiment in self.backend.active():
            state.settled = "failed"
            self._record("failed", state, experiment=state.experiment, reason="not_recovered")
            return
        self._on_recover(str(state.trigger.id))
        state.verifying = True
        self._check(state)

    def _check(self, state: FaultState) -> None:
        check = self._verify(str(state.trigger.id))
        if check.pending:
            return
        state.verifying = False
        checked = {key: list(ids) for key, ids in check.checked.items()}
        if check.problems:
            state.settled = "failed"
            self._record(
                "failed",
                state,
                experiment=state.experiment,
                reason="inconsistent",
                problems=list(check.problems),
                checked=checked,
            )
        else:
            state.settled = "recovered"
            self._record(
                "recovered", state, experiment=state.experiment, verified=True, checked=checked
            )

    def settle(self) -> None:
        """Verify the recoveries that waited for the service's backlog."""
        for state in self.states.values():
            if state.verifying:
                self._check(state)

    def close(self, state: FaultState) -> None:
        """End a fault's window: recovered if it hit, failed (never hit) if not."""
        assert state.experiment is not None
        if state.hits == 0:
            self.backend.disarm(state.experiment)
            state.settled = "failed"
            self._record("failed", state, experiment=state.experiment, reason="never_hit")
        else:
            self.recover(state)

    def drain(self) -> None:
        """Stop injecting: settle every fault that is still open."""
        for state in self.states.values():
            if state.settled is not None or state.verifying:
                continue
            if state.experiment is None:
                state.settled = "failed"
                self._record("failed", state, reason="never_armed")
            else:
                self.close(state)

    def violations(self) -> list[str]:
        """Why the run's fault plan did not hold (empty when every fault hit and recovered)."""
        out = []
        for fid, state in self.states.items():
            if state.settled != "recovered":
                out.append(f"fault {fid} did not hit and recover")
        return out


# --------------------------------------------------------------------------- tool gateway


@dataclass
class ToolResult:
    """What the agent receives for one call."""

    call_id: str
    tool: str
    outcome: str  # ok | error | timeout | connection_failed | aborted
    body: dict[str, Any]


@dataclass
class HeldRequest:
    fault_id: str
    refund_id: str
    call_id: str
    withdraw_order: str | None = None
    """For a held withdrawal: the order whose refunds it withdraws once processed."""


@dataclass
class ToolGateway:
    """Every agent tool call passes here: contract check, fault interception, the fact model (or
    the surrogate participant the tool reaches)."""

    tools: Mapping[str, ToolSpec]
    facts: FactModel
    log: RecordLog
    clocks: Clocks
    faults: FaultController | None = None
    participants: Mapping[str, SurrogateParticipant] = field(default_factory=dict)
    """Tool name → the surrogate participant it reaches."""
    calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    held: list[HeldRequest] = field(default_factory=list)
    released: set[str] = field(default_factory=set)
    touched: dict[str, set[str]] = field(default_factory=dict)
    """Fault id → the orders named by the calls it hit (read back to verify its recovery)."""

    def definitions(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI function-calling form."""
        out = []
        specs: list[ToolSpec | SurrogateParticipant] = [
            *self.tools.values(),
            *self.participants.values(),
        ]
        for spec in specs:
            properties = {
                name: {
                    "type": p.type,
                    "description": p.description,
                    **({"pattern": p.pattern} if p.pattern else {}),
                }
                for name, p in spec.parameters.items()
            }
            required = [name for name, p in spec.parameters.items() if p.required]
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": {
                            "type": "object",
                            "properties": properties,
                            "required": required,
                        },
                    },
                }
            )
        return out

    def call(self, name: str, arguments: Mapping[str, Any] | None, call_id: str) -> ToolResult:
        if self.faults is not None:
            self.faults.tick()  # a window on the logical clock may open or close here
        self.calls += 1
        index = self.per_tool.get(name, 0) + 1
        self.per_tool[name] = index
        span = f"call:{call_id}"
        self.log.add(
            "tool.request",
            "agent",
            "tool_call",
            {
                "callId": call_id,
                "tool": name,
                "arguments": dict(arguments or {}),
                "callIndex": index,
            },
            span_key=span,
        )
        started = Clocks.monotonic_ns()
        self.in_flight.add(call_id)
        try:
            result = self._answer(name, arguments, call_id, index)
        finally:
            self.in_flight.discard(call_id)
        self.log.add(
            "tool.response",
            "environment",
            "tool_call",
            {"callId": call_id, "tool": name, "outcome": result.outcome, "body": result.body},
            span_key=span,
            duration_ns=Clocks.monotonic_ns() - started,
        )
        return result

    def _answer(
        self, name: str, arguments: Mapping[str, Any] | None, call_id: str, index: int
    ) -> ToolResult:
        spec: ToolSpec | SurrogateParticipant | None = self.tools.get(name)
        if spec is None:
            spec = self.participants.get(name)
        if spec is None:
            return ToolResult(
                call_id, name, "error", {"ok": False, "error": "unknown_tool", "message": name}
            )
        if arguments is None:
            return ToolResult(
                call_id,
                name,
                "error",
                {"ok": False, "error": "invalid_arguments", "message": "arguments are not JSON"},
            )
        problem = _check_arguments(spec, arguments)
        if problem is not None:
            self.clocks.advance(spec.latency_ms)
            return ToolResult(
                call_id,
                name,
                "error",
                {"ok": False, "error": "invalid_arguments", "message": problem},
            )
        fault = self.faults.strike(name, index, call_id) if self.faults is not None else None
        if fault is None:
            self.clocks.advance(spec.latency_ms)
            body = self._execute(spec, arguments, call_id, hold=None)
            return ToolResult(call_id, name, "ok" if body.get("ok") else "error", body)
        assert self.faults is not None
        if isinstance(arguments.get("order_no"), str):
            self.touched.setdefault(str(fault.id), set()).add(str(arguments["order_no"]))
        if fault.effect == "delay":
            # The service works as usual; its answer comes late.
            self.clocks.advance(spec.latency_ms + (fault.delay_ms or 0))
            body = self._execute(spec, arguments, call_id, hold=None)
            self.faults.after_call(fault)
            return ToolResult(call_id, name, "ok" if body.get("ok") else "error", body)
        if fault.effect == "abort":
            # Cut at once: nothing reached the service, no answer came, no time was waited out.
            self.faults.after_call(fault)
            body = {"ok": False, "error": "aborted", "message": "the call was cut off unanswered"}
            return ToolResult(call_id, name, "aborted", body)
        # A timeout or an error: what the service did depends on where it struck.
        if fault.position == "not_sent":
            pass
        elif fault.position == "sent_not_committed":
            self._execute(spec, arguments, call_id, hold=str(fault.id))
        else:
            actual = self._execute(spec, arguments, call_id, hold=None)
            self.log.add(
                "tool.response.lost",
                "environment",
                "control",
                {"callId": call_id, "tool": name, "faultId": fault.id, "body": actual},
                span_key=f"call:{call_id}",
            )
        self.faults.after_call(fault)
        if fault.effect == "timeout":
            self.clocks.advance(fault.timeout_ms)
            if fault.position == "not_sent":
                body = {
                    "ok": False,
                    "error": "connection_failed",
                    "message": "could not connect; the request was not sent",
                }
                return ToolResult(call_id, name, "connection_failed", body)
            body = {
                "ok": False,
                "error": "timeout",
                "message": f"no response within {fault.timeout_ms} ms",
            }
            return ToolResult(call_id, name, "timeout", body)
        self.clocks.advance(spec.latency_ms)
        body = {
            "ok": False,
            "error": "service_unavailable",
            "message": "the service returned an error",
        }
        return ToolResult(call_id, name, "error", body)

    def _execute(
        self,
        spec: ToolSpec | SurrogateParticipant,
        arguments: Mapping[str, Any],
        call_id: str,
        *,
        hold: str | None,
    ) -> dict[str, Any]:
        if isinstance(spec, SurrogateParticipant):
            # A held message never reaches the participant (it has nothing to commit later).
            return spec.answer(arguments) if hold is None else {}
        if spec.operation == "get_order":
            return self.facts.get_order(str(arguments["order_no"]))
        if spec.operation == "get_refund":
            return self.facts.get_refund(str(arguments["order_no"]))
        if spec.operation == "withdraw_refund":
            if hold is not None:
                # Received, not processed: it takes effect when the fault recovers.
                self.held.append(HeldRequest(hold, "", call_id, str(arguments["order_no"])))
                return {}
            return self._withdraw(str(arguments["order_no"]), call_id)
        body, changes = self.facts.create_refund(
            str(arguments["order_no"]),
            int(arguments["amount_minor"]),
            self.clocks.business_now(),
            hold=hold is not None,
        )
        self._record_changes(changes, call_id)
        if hold is not None and body.get("ok"):
            self.held.append(HeldRequest(hold, str(body["refund"]["refundId"]), call_id))
        return body

    def _withdraw(self, order_no: str, call_id: str) -> dict[str, Any]:
        body, changes = self.facts.withdraw_refund(order_no)
        # The environment point of a withdrawal the user asked for (the linkage ledger).
        linkage_id = self.log.pending_linkage(WITHDRAW_EVENT, "environment")
        self._record_changes(changes, call_id, linkage_id=linkage_id)
        return body

    def _record_changes(
        self, changes: Iterable[Change], cause: str, *, linkage_id: str | None = None
    ) -> None:
        for change in changes:
            # The first change carries the linkage's environment point (when there is one): the
            # moment the event took effect.
            link = self.log.linkage(linkage_id, "environment") if linkage_id else None
            self.log.add(
                "state.change",
                "environment",
                "state_change",
                {
                    "entity": change.entity,
                    "id": change.id,
                    "from": change.before,
                    "to": change.after,
                    "cause": cause,
                },
                linkage=link,
            )

    def release_held(self, fault_id: str) -> None:
        """A fault recovered: the requests the service was holding join its backlog, which it
        works off at the next scheduling point (`process_backlog`), not within the same call."""
        self.released.add(fault_id)

    def process_backlog(self) -> None:
        """Process held requests whose fault has recovered (at a turn boundary, or when
        draining)."""
        keep = []
        for item in self.held:
            if item.fault_id in self.released:
                self.log.add(
                    "tool.backlog.processed",
                    "environment",
                    "control",
                    {"callId": item.call_id, "faultId": item.fault_id, "refundId": item.refund_id},
                    span_key=f"call:{item.call_id}",
                )
                if item.withdraw_order is not None:
                    self._withdraw(item.withdraw_order, item.call_id)
                else:
                    self._record_changes(self.facts.commit_held(item.refund_id), item.call_id)
            else:
                keep.append(item)
        self.held = keep
        if self.faults is not None:
            self.faults.settle()

    def check_recovery(self, fault_id: str) -> RecoveryCheck:
        """Is the fact model consistent again after `fault_id`? Pending while requests it held
        wait in the backlog; then every order its hits named is read back through the tools'
        answers and compared with the store, and the whole model is checked for half-applied
        writes and orders that do not follow their refunds."""
        if any(item.fault_id == fault_id for item in self.held):
            return RecoveryCheck({}, [], pending=True)
        problems = self.facts.inconsistencies(item.refund_id for item in self.held)
        orders = sorted(self.touched.get(fault_id, set()))
        refunds: list[str] = []
        for order_no in orders:
            found, read = self.facts.read_back(order_no)
            problems += [p for p in found if p not in problems]
            refunds += read
        return RecoveryCheck({"orders": orders, "refunds": refunds}, problems)


_TYPES = {"string": str, "integer": int}


def _check_arguments(
    spec: ToolSpec | SurrogateParticipant, arguments: Mapping[str, Any]
) -> str | None:
    for name, param in spec.parameters.items():
        if name not in arguments:
            if param.required:
                return f"missing required argument {name!r}"
            continue
        value = arguments[name]
        expected = _TYPES[param.type]
        if isinstance(value, bool) or not isinstance(value, expected):
            return f"argument {name!r} must be a {param.type}"
        if param.pattern and isinstance(value, str) and not re.fullmatch(param.pattern, value):
            return f"argument {name!r} does not match {param.pattern}"
    unknown = sorted(set(arguments) - set(spec.parameters))
    if unknown:
        return f"unknown argument {unknown[0]!r}"
    return None
