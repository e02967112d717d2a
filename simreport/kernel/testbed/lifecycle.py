"""The lifecycle of a testbed run and what each failure means for its statuses.

    LOADING → INITIALIZING → RUNNING → DRAINING → COLLECTING → CLEANED
        └────────┴──────────────┴─→ FAILED

- LOADING fails (manifest or asset does not resolve, SUT entry unknown, boundary replaced):
  execution crashed, no agent call made, nothing to clean.
- INITIALIZING fails (environment data or user model cannot be set up): crashed, and the run is
  `violated` (its conditions never held).
- RUNNING fails (the SUT crashed or timed out, a budget ran out): crashed (cancelled for a budget),
  the records made so far are kept, evidence is `partial` and the missing items are listed; the
  run still drains, collects and cleans.
- DRAINING stops injecting and waits for calls in flight (and held requests) to settle.
- COLLECTING builds observations, evidence and completeness; an extraction that fails marks its
  items missing and never fills them with zeros.
- CLEANED: the run's workspace and temporary credentials are destroyed; if that fails the run is
  `violated` (the next run could not trust its world).

Every transition is a `lifecycle` record (and so an event).
"""

from __future__ import annotations

from typing import Literal

from ...core.errors import RunError
from .records import RecordLog

Stage = Literal["LOADING", "INITIALIZING", "RUNNING", "DRAINING", "COLLECTING", "CLEANED", "FAILED"]


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

    def enter(self, to: Stage, **detail: object) -> None:
        self.log.add(
            "lifecycle",
            "harness",
            "control",
            {"from": self.stage, "to": to, **detail},
            span_key="lifecycle",
        )
        self.stage = to
        self.path.append(to)
