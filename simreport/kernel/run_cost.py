"""Cost by segment (design "成本按段归因"): what one run spends, split between the system under
test and the simulation (user wording, environment steps, evaluation, simulated agents)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from ..core.schema import SEGMENT_SIDES, Cost, SegmentCost

SUT, USER_WORDING, ENVIRONMENT, EVALUATION, AGENTS = (
    "sut",
    "userWording",
    "environment",
    "evaluation",
    "agents",
)


@dataclass
class _Tally:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    operations: int = 0
    logical_ms: int = 0
    wall_ns: int = 0


class CostMeter:
    """Tallies of one run by segment. Provider decisions are charged to their agent's segment
    (`agents` unless the world assigns another); a world charges the rest itself."""

    def __init__(self) -> None:
        self._tallies: dict[str, _Tally] = {}
        self._segment_of: dict[int, str] = {}
        self._timing: str | None = None
        self.record_bytes: dict[str, int] = {}
        """Bytes of content per kind of record (events, records); their sum is `recordBytes`."""

    def assign(self, segments: Mapping[int, str]) -> None:
        """Which segment each agent's provider decisions belong to."""
        for agent, segment in segments.items():
            _check(segment)
            self._segment_of[agent] = segment

    def segment_of(self, agent: int) -> str:
        return self._segment_of.get(agent, AGENTS)

    def charge(
        self,
        segment: str,
        *,
        llm_calls: int = 0,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        operations: int = 0,
        logical_ms: int = 0,
        wall_ns: int = 0,
    ) -> None:
        _check(segment)
        tally = self._tallies.setdefault(segment, _Tally())
        tally.llm_calls += llm_calls
        tally.prompt_tokens += prompt_tokens
        tally.completion_tokens += completion_tokens
        tally.operations += operations
        tally.logical_ms += logical_ms
        tally.wall_ns += wall_ns

    @property
    def timing(self) -> bool:
        """Whether a segment's real time is being measured (then no inner measure charges it)."""
        return self._timing is not None

    @contextmanager
    def timed(self, segment: str, *, operations: int = 0) -> Iterator[None]:
        """Charge the real time spent inside to `segment` (the outermost measure wins)."""
        if self._timing is not None:
            self.charge(segment, operations=operations)
            yield
            return
        self._timing = segment
        started = time.monotonic_ns()
        try:
            yield
        finally:
            self._timing = None
            self.charge(segment, operations=operations, wall_ns=time.monotonic_ns() - started)

    def logical(self, segment: str) -> int:
        tally = self._tallies.get(segment)
        return tally.logical_ms if tally is not None else 0

    def settle_logical(self, total_ms: int, rest: str) -> None:
        """Charge the logical time no segment claimed to `rest`, so the segments add up."""
        claimed = sum(t.logical_ms for t in self._tallies.values())
        if total_ms > claimed:
            self.charge(rest, logical_ms=total_ms - claimed)

    def cost(self) -> Cost:
        """The run's `cost`: totals are the sums of the segments, so they always agree."""
        tallies = sorted(self._tallies.items())
        return Cost(
            llm_calls=sum(t.llm_calls for _, t in tallies),
            prompt_tokens=sum(t.prompt_tokens for _, t in tallies),
            completion_tokens=sum(t.completion_tokens for _, t in tallies),
            segments={
                name: SegmentCost(
                    side=SEGMENT_SIDES[name],
                    llm_calls=t.llm_calls,
                    prompt_tokens=t.prompt_tokens,
                    completion_tokens=t.completion_tokens,
                    operations=t.operations,
                    logical_ms=t.logical_ms,
                )
                for name, t in tallies
            },
            record_bytes=sum(self.record_bytes.values()) if self.record_bytes else None,
        )

    def wall_clock_ms(self) -> dict[str, float]:
        """Real milliseconds per segment (monotonic clock). Not deterministic: they go to
        events.jsonl with the other real-clock readings, never to result.json or audit.json."""
        return {
            name: round(t.wall_ns / 1e6, 3)
            for name, t in sorted(self._tallies.items())
            if t.wall_ns
        }


def _check(segment: str) -> None:
    if segment not in SEGMENT_SIDES:
        raise ValueError(f"unknown cost segment {segment!r}; known: {', '.join(SEGMENT_SIDES)}")


__all__ = ["AGENTS", "ENVIRONMENT", "EVALUATION", "SUT", "USER_WORDING", "CostMeter"]
