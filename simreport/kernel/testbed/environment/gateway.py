"""The tool gateway: every agent tool call passes here — the argument check, the fault that
strikes it, then what answers the tool (a domain's state, a sandbox, or the surrogate participant
the tool reaches) — and each request, response and state change is recorded."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ....core.testbed_schema import FaultTrigger
from ..clock import Clocks
from ..participants import SurrogateParticipant
from ..records import RecordLog
from .faults import FaultBackend, FaultController, RecoveryCheck


@dataclass
class ToolResult:
    """What the agent receives for one call."""

    call_id: str
    tool: str
    outcome: str  # ok | error | timeout | connection_failed | aborted
    body: dict[str, Any]


class Held(Protocol):
    """A call the service received but has not processed: it runs when its fault recovers."""

    fault_id: str
    call_id: str


H = TypeVar("H", bound=Held)


@dataclass
class Change:
    """One change of an entity, recorded as a `state.change` record: `before` None when the
    call created it."""

    entity: str
    id: str
    before: Any
    after: Any


class _Ends:
    """Where a gateway records and what time it reads: fields of each subclass, which places
    them among its own positional arguments (a dataclass base would put them first)."""

    log: RecordLog
    clocks: Clocks


@dataclass
class Gateway(_Ends, ABC, Generic[H]):
    """What every gateway does with a call, whatever answers it: record the request, strike the
    planned fault at its position (not sent; sent, not committed; committed, response lost),
    delay or abort it, and record the response. Subclasses say which tools exist, how their
    arguments are checked and what executes them. The fields here are keyword-only."""

    faults: FaultController | None = field(default=None, kw_only=True)
    participants: Mapping[str, SurrogateParticipant] = field(default_factory=dict, kw_only=True)
    """Tool name → the surrogate participant it reaches."""
    calls: int = field(default=0, kw_only=True)
    per_tool: dict[str, int] = field(default_factory=dict, kw_only=True)
    in_flight: set[str] = field(default_factory=set, kw_only=True)
    held: list[H] = field(default_factory=list, kw_only=True)
    """Calls received, not processed (the `sent_not_committed` position)."""
    released: set[str] = field(default_factory=set, kw_only=True)
    """The faults that recovered: the calls they held may be processed."""

    @abstractmethod
    def _tool(self, name: str) -> Any | None:
        """The gateway's own tool `name` (not a participant), or None."""

    @abstractmethod
    def _argument_problem(self, tool: Any, arguments: Mapping[str, Any]) -> str | None:
        """Why the arguments do not fit the tool, or None."""

    @abstractmethod
    def _execute(
        self, tool: Any, arguments: Mapping[str, Any], call_id: str, *, hold: str | None
    ) -> dict[str, Any]:
        """Run the call (with `hold`: received, processed when that fault recovers)."""

    @abstractmethod
    def _backlog_detail(self, item: H) -> dict[str, Any]:
        """What the `tool.backlog.processed` record says of a held call, beside its ids."""

    @abstractmethod
    def _process_held(self, item: H) -> None:
        """Process a held call whose fault has recovered, recording what it changes."""

    def _touch(self, fault_id: str, arguments: Mapping[str, Any]) -> None:
        """Note what a struck call named, to read it back when the fault recovers."""

    def _backend(self, name: str) -> str | None:
        """What answers tool `name` (`real`, `surrogate`), recorded with each of its calls;
        None (the default) records nothing: every tool is a surrogate."""
        return None

    def inject(self, triggers: Sequence[FaultTrigger], backend: FaultBackend) -> FaultController:
        """Plan the faults of `triggers` on this gateway's calls (recorded), arm those whose
        window opens with the run, and strike calls with them from now on; a recovery releases
        the calls a fault held and is verified by `check_recovery`."""
        self.faults = FaultController(
            triggers, backend, self.log, self.release_held, verify=self.check_recovery
        )
        self.faults.plan()
        self.faults.arm_initial()
        return self.faults

    @abstractmethod
    def check_recovery(self, fault_id: str) -> RecoveryCheck:
        """Is the service consistent again after `fault_id` (pending while calls it held wait)?"""

    def definitions(self) -> list[dict[str, Any]]:
        """The tools in the OpenAI function-calling form."""
        return [_definition(spec) for spec in self.participants.values()]

    def _spec(self, name: str) -> Any | None:
        """The tool or the surrogate participant `name` reaches, or None."""
        return self._tool(name) or self.participants.get(name)

    def _problem(self, spec: Any, arguments: Mapping[str, Any]) -> str | None:
        if isinstance(spec, SurrogateParticipant):
            return check_arguments(spec, arguments)
        return self._argument_problem(spec, arguments)

    def _run(
        self, spec: Any, arguments: Mapping[str, Any], call_id: str, *, hold: str | None
    ) -> dict[str, Any]:
        if isinstance(spec, SurrogateParticipant):
            # A held message never reaches the participant (it has nothing to commit later).
            return spec.answer(arguments) if hold is None else {}
        return self._execute(spec, arguments, call_id, hold=hold)

    def call(self, name: str, arguments: Mapping[str, Any] | None, call_id: str) -> ToolResult:
        if self.faults is not None:
            self.faults.tick()  # a window on the logical clock may open or close here
        self.calls += 1
        index = self.per_tool.get(name, 0) + 1
        self.per_tool[name] = index
        span = f"call:{call_id}"
        backend = self._backend(name)
        where = {"backend": backend} if backend is not None else {}
        self.log.add(
            "tool.request",
            "agent",
            "tool_call",
            {
                "callId": call_id,
                "tool": name,
                "arguments": dict(arguments or {}),
                "callIndex": index,
                **where,
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
            {
                "callId": call_id,
                "tool": name,
                "outcome": result.outcome,
                "body": result.body,
                **where,
            },
            span_key=span,
            duration_ns=Clocks.monotonic_ns() - started,
        )
        return result

    def _answer(
        self, name: str, arguments: Mapping[str, Any] | None, call_id: str, index: int
    ) -> ToolResult:
        spec = self._spec(name)
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
        problem = self._problem(spec, arguments)
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
            body = self._run(spec, arguments, call_id, hold=None)
            return ToolResult(call_id, name, "ok" if body.get("ok") else "error", body)
        assert self.faults is not None
        self._touch(str(fault.id), arguments)
        if fault.effect == "delay":
            # The service works as usual; its answer comes late.
            self.clocks.advance(spec.latency_ms + (fault.delay_ms or 0))
            body = self._run(spec, arguments, call_id, hold=None)
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
            self._run(spec, arguments, call_id, hold=str(fault.id))
        else:
            actual = self._run(spec, arguments, call_id, hold=None)
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
        """Process held calls whose fault has recovered (at a turn boundary, or when draining),
        then verify the recoveries that waited for them."""
        keep = []
        for item in self.held:
            if item.fault_id not in self.released:
                keep.append(item)
                continue
            self.log.add(
                "tool.backlog.processed",
                "environment",
                "control",
                {"callId": item.call_id, "faultId": item.fault_id, **self._backlog_detail(item)},
                span_key=f"call:{item.call_id}",
            )
            self._process_held(item)
        self.held = keep
        if self.faults is not None:
            self.faults.settle()

    def holding(self, fault_id: str) -> bool:
        """Whether calls `fault_id` held still wait in the backlog."""
        return any(item.fault_id == fault_id for item in self.held)


def _definition(spec: SurrogateParticipant) -> dict[str, Any]:
    """A participant's tool in the OpenAI function-calling form."""
    properties = {
        name: {
            "type": p.type,
            "description": p.description,
            **({"pattern": p.pattern} if p.pattern else {}),
        }
        for name, p in spec.parameters.items()
    }
    required = [name for name, p in spec.parameters.items() if p.required]
    return {
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


_TYPES = {"string": str, "integer": int}


def check_arguments(spec: SurrogateParticipant, arguments: Mapping[str, Any]) -> str | None:
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
