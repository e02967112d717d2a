"""The gateway of a domain: its tools answered by the domain's state, with the faults of
`environment.gateway` striking them at the points each tool exposes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..clock import Clocks
from ..environment.faults import FaultController, RecoveryCheck
from ..environment.gateway import Gateway, check_arguments
from ..participants import SurrogateParticipant
from ..records import RecordLog
from .model import DomainTool
from .state import DomainState


@dataclass
class HeldCall:
    """A call the service received but has not processed: it runs when its fault recovers."""

    fault_id: str
    call_id: str
    tool: DomainTool
    arguments: dict[str, Any]


@dataclass
class DomainGateway(Gateway):
    """Every agent tool call of a domain run: input schema, fault, then the domain's state."""

    domain_state: DomainState
    log: RecordLog
    clocks: Clocks
    faults: FaultController | None = None
    participants: Mapping[str, SurrogateParticipant] = field(default_factory=dict)
    calls: int = 0
    per_tool: dict[str, int] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)
    held: list[HeldCall] = field(default_factory=list)
    released: set[str] = field(default_factory=set)

    def definitions(self) -> list[dict[str, Any]]:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.input,
                },
            }
            for tool in self.domain_state.domain.tools
        ]
        return tools + super().definitions()

    def _spec(self, name: str) -> DomainTool | SurrogateParticipant | None:
        return self.domain_state.domain.tool(name) or self.participants.get(name)

    def _argument_problem(
        self, spec: DomainTool | SurrogateParticipant, arguments: Mapping[str, Any]
    ) -> str | None:
        if isinstance(spec, SurrogateParticipant):
            return check_arguments(spec, arguments)
        return self.domain_state.argument_problem(spec, arguments)

    def _execute(
        self,
        spec: DomainTool | SurrogateParticipant,
        arguments: Mapping[str, Any],
        call_id: str,
        *,
        hold: str | None,
    ) -> dict[str, Any]:
        if isinstance(spec, SurrogateParticipant):
            return spec.answer(arguments) if hold is None else {}
        if hold is not None:
            # Received, not processed: it takes effect when the fault recovers.
            self.held.append(HeldCall(hold, call_id, spec, dict(arguments)))
            return {}
        body, changes = self.domain_state.call(spec, arguments, self.clocks.business_time())
        self._record_changes(changes, call_id)
        return body

    def process_backlog(self) -> None:
        """Process held calls whose fault has recovered (at a turn boundary, or when draining)."""
        keep = []
        for item in self.held:
            if item.fault_id not in self.released:
                keep.append(item)
                continue
            self.log.add(
                "tool.backlog.processed",
                "environment",
                "control",
                {"callId": item.call_id, "faultId": item.fault_id, "tool": item.tool.name},
                span_key=f"call:{item.call_id}",
            )
            _, changes = self.domain_state.call(
                item.tool, item.arguments, self.clocks.business_time()
            )
            self._record_changes(changes, item.call_id)
        self.held = keep
        if self.faults is not None:
            self.faults.settle()

    def check_recovery(self, fault_id: str) -> RecoveryCheck:
        """Pending while calls the fault held wait in the backlog; then every invariant of the
        domain is checked."""
        if any(item.fault_id == fault_id for item in self.held):
            return RecoveryCheck({}, [], pending=True)
        names = [i.name for i in self.domain_state.domain.invariants]
        return RecoveryCheck({"invariants": names}, self.domain_state.invariant_problems())
