"""The four clocks of a testbed run, kept apart: business and logical time enter a record's
content (and so its digest); monotonic durations and wall time live in its `clock` field, which
alignment and replay leave out. Logical time never waits for real time. Each clock:
docs/testbed.md.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from ...core.testbed_schema import ClockConfig


class Clocks:
    """Logical and business time of one run, plus readings of the real clocks."""

    def __init__(self, config: ClockConfig) -> None:
        self.policy = config.policy
        self.start = datetime.fromisoformat(config.start)
        self.logical_ms = 0

    def advance(self, ms: int) -> None:
        """Move logical time forward (a user's typing time, a tool's latency, a timeout)."""
        if ms < 0:
            raise ValueError("logical time only moves forward")
        self.logical_ms += ms

    def business_now(self) -> datetime:
        if self.policy == "frozen":
            return self.start
        return self.start + timedelta(milliseconds=self.logical_ms)

    def business_time(self) -> str:
        return self.business_now().isoformat(timespec="milliseconds")

    @staticmethod
    def monotonic_ns() -> int:
        return time.monotonic_ns()

    @staticmethod
    def wall_time() -> str:
        return datetime.now(UTC).isoformat(timespec="microseconds")
