"""The four clocks of a testbed run, kept apart.

- business time: the business calendar (refund windows are judged on it); it starts at the
  scenario's `environment.clock.start` and follows the simulated timeline, or stays frozen;
- logical time: the harness's scheduler clock in milliseconds (turns, tool latencies, timeouts);
  it never waits for real time, so a 30-second timeout costs nothing real;
- monotonic durations: how long an agent or tool call really took (performance, not behaviour);
- wall time: when the run happened (UTC), for audit trails only.

Only the first two enter a record's content (and so its digest): the last two differ from run to
run and live in a record's `clock` field, which alignment and replay leave out.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from ...core.testbed import ClockConfig


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
