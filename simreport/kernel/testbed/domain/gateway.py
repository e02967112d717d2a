"""The gateway of a domain: its tools answered by the domain's state, with the faults of
`environment.gateway` striking them at the points each tool exposes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..clock import Clocks
from ..environment.faults import RecoveryCheck
from ..environment.gateway import Gateway
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
class DomainGateway(Gateway[HeldCall]):
    """Every agent tool call of a domain run: input schema, fault, then the domain's state."""

    domain_state: DomainState
    log: RecordLog
    clocks: Clocks

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

    def _tool(self, name: str) -> DomainTool | None:
        return self.domain_state.domain.tool(name)

    def _argument_problem(self, tool: DomainTool, arguments: Mapping[str, Any]) -> str | None:
        return self.domain_state.argument_problem(tool, arguments)

    def _execute(
        self, tool: DomainTool, arguments: Mapping[str, Any], call_id: str, *, hold: str | None
    ) -> dict[str, Any]:
        if hold is not None:
            # Received, not processed: it takes effect when the fault recovers.
            self.held.append(HeldCall(hold, call_id, tool, dict(arguments)))
            return {}
        body, changes = self.domain_state.call(tool, arguments, self.clocks.business_time())
        self._record_changes(changes, call_id)
        return body

    def _backlog_detail(self, item: HeldCall) -> dict[str, Any]:
        return {"tool": item.tool.name}

    def _process_held(self, item: HeldCall) -> None:
        _, changes = self.domain_state.call(item.tool, item.arguments, self.clocks.business_time())
        self._record_changes(changes, item.call_id)

    def check_recovery(self, fault_id: str) -> RecoveryCheck:
        """Pending while calls the fault held wait in the backlog; then every invariant of the
        domain is checked."""
        if self.holding(fault_id):
            return RecoveryCheck({}, [], pending=True)
        names = [i.name for i in self.domain_state.domain.invariants]
        return RecoveryCheck({"invariants": names}, self.domain_state.invariant_problems())
