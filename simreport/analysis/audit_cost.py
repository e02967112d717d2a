"""audit.json `cost`: what the runs spent, summed over the audit and per condition, split by
segment between the system under test and the simulation (design "成本按段归因")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ..core.schema import RunResult

QUANTITIES = ("llmCalls", "promptTokens", "completionTokens", "operations", "logicalMs")
"""The numbers each segment adds up (all deterministic; real durations stay in result.json)."""
UNATTRIBUTED = "unattributed"
"""Segment and side of the totals of a run written before the split (result.json without
`cost.segments`): counted, so the segments still add up to the totals, but never guessed."""


def _zero() -> dict[str, int]:
    return dict.fromkeys(QUANTITIES, 0)


def _segments(result: RunResult) -> dict[str, tuple[str, dict[str, int]]]:
    """Segment → (side, quantities) of one run."""
    cost = result.cost
    if not cost.segments:
        if cost.llm_calls == cost.prompt_tokens == cost.completion_tokens == 0:
            return {}
        return {
            UNATTRIBUTED: (
                UNATTRIBUTED,
                {
                    **_zero(),
                    "llmCalls": cost.llm_calls,
                    "promptTokens": cost.prompt_tokens,
                    "completionTokens": cost.completion_tokens,
                },
            )
        }
    return {
        name: (
            seg.side,
            {
                "llmCalls": seg.llm_calls,
                "promptTokens": seg.prompt_tokens,
                "completionTokens": seg.completion_tokens,
                "operations": seg.operations,
                "logicalMs": seg.logical_ms,
            },
        )
        for name, seg in cost.segments.items()
    }


def _sum(results: Iterable[RunResult]) -> dict[str, object]:
    totals = {"llmCalls": 0, "promptTokens": 0, "completionTokens": 0, "recordBytes": 0}
    segments: dict[str, dict[str, int]] = {}
    side_of: dict[str, str] = {}
    sides: dict[str, dict[str, int]] = {}
    runs = unattributed = 0
    for res in results:
        runs += 1
        totals["llmCalls"] += res.cost.llm_calls
        totals["promptTokens"] += res.cost.prompt_tokens
        totals["completionTokens"] += res.cost.completion_tokens
        totals["recordBytes"] += res.cost.record_bytes or 0
        parts = _segments(res)
        unattributed += UNATTRIBUTED in parts
        for name, (side, numbers) in parts.items():
            side_of[name] = side
            seg = segments.setdefault(name, _zero())
            by_side = sides.setdefault(side, _zero())
            for key, value in numbers.items():
                seg[key] += value
                by_side[key] += value
    return {
        "runs": runs,
        **totals,
        "unattributedRuns": unattributed,
        "segments": {
            name: {"side": side_of[name], **numbers} for name, numbers in sorted(segments.items())
        },
        "sides": dict(sorted(sides.items())),
    }


def cost_section(
    condition_ids: Sequence[str], results: Sequence[tuple[str, RunResult]]
) -> dict[str, object]:
    """The audit's totals (llmCalls, promptTokens, completionTokens as before), its segments and
    sides, and one row per condition in plan order (conditions without runs included)."""
    by_condition: dict[str, list[RunResult]] = {cid: [] for cid in condition_ids}
    for cid, res in results:
        by_condition.setdefault(cid, []).append(res)
    section = _sum(res for _, res in results)
    section["conditions"] = [{"condition": cid, **_sum(rs)} for cid, rs in by_condition.items()]
    return section


__all__ = ["QUANTITIES", "UNATTRIBUTED", "cost_section"]
