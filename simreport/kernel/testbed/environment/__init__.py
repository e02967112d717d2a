"""The environment simulator: one fact model behind every tool surrogate, and fault injection
(`FaultController` decides, a `FaultBackend` executes). Each fault is recorded planned → armed →
hit → recovered, or failed with why; a recovery is verified against the fact model, never
assumed. The fault points and windows: docs/testbed.md.
"""

from .facts import REFUND_STATES, REFUNDED_STATES, WITHDRAW_EVENT, Change, FactModel, Order, Refund
from .faults import (
    FaultBackend,
    FaultController,
    FaultState,
    InProcessFaultBackend,
    RecordedFaultBackend,
    RecoveryCheck,
)
from .gateway import HeldRequest, ToolGateway, ToolResult

__all__ = [
    "REFUNDED_STATES",
    "REFUND_STATES",
    "WITHDRAW_EVENT",
    "Change",
    "FactModel",
    "FaultBackend",
    "FaultController",
    "FaultState",
    "HeldRequest",
    "InProcessFaultBackend",
    "Order",
    "RecordedFaultBackend",
    "RecoveryCheck",
    "Refund",
    "ToolGateway",
    "ToolResult",
]
