"""The lifecycle of a testbed run and what each failure means for its statuses.

    LOADING → INITIALIZING → RUNNING → DRAINING → COLLECTING → CLEANED
       │            │            │          │           │
       └────────────┴────────────┴──────────┴───────────┴─→ FAILED

`NEXT` is this table; `Lifecycle.enter` refuses any other move. FAILED and CLEANED are final, and
each stage is claimed only once it holds: CLEANED only after a cleanup that succeeded.

- LOADING fails (manifest or asset does not resolve, a declared setting is not implemented, the
  boundary is replaced, the SUT's entry is unknown or does not answer its probe): execution
  crashed, no agent call made, no user message sent, nothing to clean.
- INITIALIZING fails (environment data or user model cannot be set up): crashed, and the run is
  `violated` (its conditions never held); what was set up is torn down.
- RUNNING fails (the SUT crashed or timed out, a budget ran out): the run enters FAILED at once
  (crashed; cancelled for a budget). Being FAILED does not kill it: it still stops injecting,
  settles the calls in flight, collects what it has and cleans up, recorded as control records
  after the FAILED transition. The records made so far are kept, evidence is `partial` and the
  missing items are listed.
- DRAINING stops injecting and waits for calls in flight (and held requests) to settle; if that
  itself fails, the run enters FAILED and still collects and cleans.
- COLLECTING builds observations, evidence and completeness; an extraction that fails marks its
  items missing and never fills them with zeros (it does not fail the run).
- Cleaning destroys the run's workspace and temporary credentials. When that succeeds the run is
  CLEANED; when it fails an alert is recorded, the run is `violated` (the next run could not trust
  its world) and it ends in FAILED instead (failed in `cleanup`), its execution still completed.

Every transition is a `lifecycle` record (and so an event).
"""

from __future__ import annotations

from typing import Literal

from ...core.errors import RunError
from .records import RecordLog

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


class LifecycleError(RuntimeError):
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
