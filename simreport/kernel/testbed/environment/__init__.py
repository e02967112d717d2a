"""The environment simulator's generic parts: the gateway every tool call passes, and fault
injection (`FaultController` decides, a `FaultBackend` executes). Each fault is recorded planned
→ armed → hit → recovered, or failed with why; a recovery is verified against the facts, never
assumed. The facts themselves are a domain's (testbed/domain/). Fault points: docs/testbed.md.
"""

from .faults import (
    FaultBackend,
    FaultController,
    FaultState,
    InProcessFaultBackend,
    RecordedFaultBackend,
    RecoveryCheck,
)
from .gateway import Change, Gateway, ToolResult

__all__ = [
    "Change",
    "FaultBackend",
    "FaultController",
    "FaultState",
    "Gateway",
    "InProcessFaultBackend",
    "RecordedFaultBackend",
    "RecoveryCheck",
    "ToolResult",
]
