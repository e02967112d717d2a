"""The gateway of a domain: its tools answered by the domain's state, or — bound in
`environment.realTools` — by the operator's sandboxes (`real_tools`), with the faults of
`environment.gateway` striking them at the points each tool exposes, real or not."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..clock import Clocks
from ..environment.faults import RecoveryCheck
from ..environment.gateway import Change, Gateway
from ..records import RecordLog
from .model import DomainTool
from .real_tools import RealTools
from .state import DomainState


@dataclass
class HeldCall:
    """A call the service received but has not processed: it runs when its fault recovers."""

    fault_id: str
    call_id: str
    tool: DomainTool
    arguments: dict[str, Any]
    received: list[dict[str, Any]] | None = None
    """For a tool that records its receipt (`receive`): the instances received, which its
    processing reads; None: the call is made whole when processed."""
    keys: list[tuple[str, str]] = field(default_factory=list)
    """(entity, key) of each instance its receipt created or changed."""


@dataclass
class DomainGateway(Gateway[HeldCall]):
    """Every agent tool call of a domain run: input schema, fault, then the domain's state."""

    domain_state: DomainState
    log: RecordLog
    clocks: Clocks
    real: RealTools | None = field(default=None, kw_only=True)
    """The tools the operator's sandboxes answer (None: every tool is a surrogate)."""

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

    def _backend(self, name: str) -> str | None:
        if self.real is None:
            return None
        return "real" if self.real.bound(name) else "surrogate"

    def _execute(
        self, tool: DomainTool, arguments: Mapping[str, Any], call_id: str, *, hold: str | None
    ) -> dict[str, Any]:
        real = self.real is not None and self.real.bound(tool.name)
        if hold is not None:
            if tool.receive and not real:
                # Received now (its preconditions checked, its receipt recorded), processed
                # when the fault recovers.
                refused, changes, received = self.domain_state.receive(
                    tool, arguments, self.clocks.business_time()
                )
                self._record_changes(changes, call_id)
                if refused is None:
                    keys = [(c.entity, c.id) for c in changes]
                    self.held.append(HeldCall(hold, call_id, tool, dict(arguments), received, keys))
                return {}
            # Not received: it takes effect (a real one: is sent) when the fault recovers.
            self.held.append(HeldCall(hold, call_id, tool, dict(arguments)))
            return {}
        if real:
            assert self.real is not None
            return self.real.call(tool.name, arguments)
        body, changes = self.domain_state.call(tool, arguments, self.clocks.business_time())
        self._record_tool_changes(tool, changes, call_id)
        return body

    def _record_tool_changes(self, tool: DomainTool, changes: list[Change], call_id: str) -> None:
        """Record a call's changes; for a tool that is a business event's effect, the first
        change carries the environment point of the oldest open linkage of that event."""
        linkage_id = self.log.pending_linkage(tool.linkage, "environment") if tool.linkage else None
        self._record_changes(changes, call_id, linkage_id=linkage_id)

    def _backlog_detail(self, item: HeldCall) -> dict[str, Any]:
        return {"tool": item.tool.name}

    def _process_held(self, item: HeldCall) -> None:
        if self.real is not None and self.real.bound(item.tool.name):
            body = self.real.call(item.tool.name, item.arguments)
            self.log.add(
                "tool.backlog.answer",
                "environment",
                "control",
                {"callId": item.call_id, "tool": item.tool.name, "body": body},
                span_key=f"call:{item.call_id}",
            )
            return
        now = self.clocks.business_time()
        if item.received is not None:
            changes = self.domain_state.process(item.tool, item.arguments, item.received, now)
        else:
            _, changes = self.domain_state.call(item.tool, item.arguments, now)
        self._record_tool_changes(item.tool, changes, item.call_id)

    def pending(self) -> dict[str, list[str]]:
        """Entity → the keys of instances received by calls still held (what the invariants
        read as `pending`)."""
        out: dict[str, list[str]] = {}
        for item in self.held:
            for entity, key in item.keys:
                out.setdefault(entity, []).append(key)
        return out

    def adopt_real_state(self) -> list[str]:
        """Replace the entities the sandboxes report (`GET /state`) in the domain's state, so
        the invariants and observations read what the sandboxes hold; returns the sandboxes
        that report none (their effects stay unseen)."""
        if self.real is None:
            return []
        silent = []
        for sandbox, entities in self.real.states().items():
            if entities is None:
                silent.append(sandbox)
                continue
            self.domain_state.adopt(entities)
        return silent

    def check_recovery(self, fault_id: str) -> RecoveryCheck:
        """Pending while calls the fault held wait in the backlog; then every invariant of the
        domain is checked, over the state the sandboxes report when tools are real. A fault on
        a real tool whose sandbox reports no state cannot be verified (`unverifiable`)."""
        if self.holding(fault_id):
            return RecoveryCheck({}, [], pending=True)
        silent = self.adopt_real_state()
        names = [i.name for i in self.domain_state.domain.invariants]
        target = self._fault_target(fault_id)
        if self.real is not None and target is not None and self.real.bound(target):
            sandbox = self.real.bindings[target]
            if sandbox in silent:
                return RecoveryCheck(
                    {},
                    [],
                    unverifiable=(
                        f"not_applicable: {target} is answered by sandbox {sandbox}, which "
                        "serves no GET /state to check the invariants against"
                    ),
                )
        problems = self.domain_state.invariant_problems(self.pending())
        return RecoveryCheck({"invariants": names}, problems)

    def _fault_target(self, fault_id: str) -> str | None:
        state = self.faults.states.get(fault_id) if self.faults is not None else None
        return str(state.trigger.target) if state is not None else None
