"""Surrogate participants: other parties the agent under test works with, answered by the testbed
from a script (the n-th answer is the n-th reply, the last one repeating) and reached through a
tool of their own, so their calls are recorded and faults strike them. They never act for the
agent. How a fault moves the script: docs/testbed.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.testbed_schema import Participant
from .assets import ToolParameter

LATENCY_MS = 1_000
"""Logical milliseconds one answer of a surrogate participant takes."""


@dataclass
class SurrogateParticipant:
    """One scripted participant, as the tool gateway serves it."""

    id: str
    role: str
    name: str
    """The tool name the agent calls."""
    replies: Sequence[str]
    latency_ms: int = LATENCY_MS
    served: int = 0
    parameters: dict[str, ToolParameter] = field(
        default_factory=lambda: {
            "message": ToolParameter(
                type="string", required=True, description="What to ask or tell them."
            )
        }
    )

    @classmethod
    def of(cls, participant: Participant) -> SurrogateParticipant:
        return cls(participant.id, participant.role, participant.tool_name, participant.replies)

    @property
    def description(self) -> str:
        return f"Send a message to {self.id} ({self.role}) and get their answer."

    def answer(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The next reply of the script (the last one repeats)."""
        reply = self.replies[min(self.served, len(self.replies) - 1)]
        self.served += 1
        return {"ok": True, "participant": self.id, "role": self.role, "reply": reply}

    def joined(self) -> dict[str, Any]:
        """What the `participant.joined` record says of it."""
        return {"id": self.id, "role": self.role, "kind": "surrogate", "tool": self.name}
