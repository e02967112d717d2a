"""The lifecycle of a testbed run and what each failure means for its statuses.

LOADING → INITIALIZING → RUNNING → DRAINING → COLLECTING → CLEANED, or FAILED from any of them:
`NEXT` is the table and `Lifecycle.enter` refuses any other move; every transition is a
`lifecycle` record. What each stage's failure means: docs/testbed.md.
"""

from __future__ import annotations

from typing import Literal

from ....core.errors import RunError, SimreportError
from ..records import RecordLog

Stage = Literal["LOADING", "INITIALIZING", "RUNNING", "DRAINING", "COLLECTING", "CLEANED", "FAILED"]

NEXT: dict[Stage | None, tuple[Stage, ...]] = {
    None: ("LOADING",),
    "LOADING": ("INITIALIZING", "FAILED"),
    "INITIALIZING": ("RUNNING", "FAILED"),
    "RUNNING": ("DRAINING", "FAILED"),
    "DRAINING": ("COLLECTING", "FAILED"),
    "COLLECTING": ("CLEANED", "FAILED"),
    "CLEANED": (),
    "FAILED": (),
}
"""Stage → the stages it may move to (the design's lifecycle table)."""


class LifecycleError(SimreportError):
    """A move the lifecycle table does not allow (a bug in the harness, not a run failure)."""


class TestbedFailure(RunError):
    """A failed testbed run, carrying the statuses its stage implies (read by the engine)."""

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        message: str,
        *,
        stage: str,
        kind: str,
        execution: str = "crashed",
        validity: str = "unchecked",
        evidence: str = "partial",
    ) -> None:
        super().__init__(message, stage=stage, kind=kind)
        self.execution = execution
        self.validity = validity
        self.evidence = evidence


class Lifecycle:
    """The current stage, with every transition recorded."""

    def __init__(self, log: RecordLog) -> None:
        self.log = log
        self.stage: Stage | None = None
        self.path: list[Stage] = []

    @property
    def failed(self) -> bool:
        return self.stage == "FAILED"

    def enter(self, to: Stage, **detail: object) -> None:
        if to not in NEXT[self.stage]:
            allowed = ", ".join(NEXT[self.stage]) or "nothing (it is final)"
            raise LifecycleError(f"{self.stage} cannot move to {to}; it moves to {allowed}")
        self.log.add(
            "lifecycle",
            "harness",
            "control",
            {"from": self.stage, "to": to, **detail},
            span_key="lifecycle",
        )
        self.stage = to
        self.path.append(to)
