"""report.html's cost tables: what the runs cost by segment (the system under test apart from
the simulation) and per condition."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..analysis.audit_document import CostSection, SideTotals
from .cells import condition_cell, display_text
from .figures import format_number

SEGMENT_LABELS = {
    "sut": "System under test (the agent)",
    "userWording": "User simulator: wording",
    "environment": "Environment steps (tools, faults)",
    "evaluation": "Observations and evaluation",
    "agents": "Simulated agents",
    "unattributed": "Not attributed (results written before the split)",
}
SIDE_LABELS = {"sut": "SUT", "simulation": "simulation", "unattributed": "not attributed"}
COST_NOTE = (
    "In worlds without a system under test (the prisoner's dilemma, the echo chamber) the agents "
    "are the simulation: all their model calls are simulation cost. Time is the testbed's logical "
    "time, the same on every rerun; the real durations each run measured are in its events.jsonl "
    "(the run_finished event's wallClockMs) and left out here, since they differ between reruns."
)
_SIDE_COLUMNS: tuple[tuple[str, Callable[[SideTotals], int]], ...] = (
    ("calls", lambda side: side.llm_calls),
    ("tokens", lambda side: side.prompt_tokens + side.completion_tokens),
    ("logical", lambda side: side.logical_ms),
)
"""The columns the per-condition cost table shows for each side, and how each is counted."""


def _segment_rank(name: str) -> tuple[int, str]:
    """The SUT first, then the simulation's segments in the order of SEGMENT_LABELS."""
    order = list(SEGMENT_LABELS)
    return (order.index(name) if name in order else len(order), name)


def _side_cells(sides: Mapping[str, SideTotals]) -> dict[str, str]:
    """A condition's cost columns for the SUT and the simulation (0 for a side it lacks)."""
    return {
        f"{key}_{field}": format_number(count(sides[which]) if which in sides else 0)
        for key, which in (("sut", "sut"), ("sim", "simulation"))
        for field, count in _SIDE_COLUMNS
    }


def cost_split(cost: CostSection, names: Mapping[str, str]) -> dict[str, Any]:
    """audit.json `cost` split by segment and per condition."""
    rows = [
        {
            "segment": SEGMENT_LABELS.get(name, name),
            "side": SIDE_LABELS.get(seg.side, display_text(seg.side)),
            "calls": format_number(seg.llm_calls),
            "prompt": format_number(seg.prompt_tokens),
            "completion": format_number(seg.completion_tokens),
            "operations": format_number(seg.operations),
            "logical": format_number(seg.logical_ms),
        }
        for name, seg in sorted(cost.segments.items(), key=lambda item: _segment_rank(item[0]))
    ]
    conditions = [
        {
            "condition": condition_cell(names, row.condition),
            "runs": format_number(row.runs),
            "bytes": format_number(row.record_bytes),
            **_side_cells(row.sides),
        }
        for row in cost.conditions
    ]
    return {
        "segments": rows,
        "conditions": conditions,
        "unattributed": format_number(cost.unattributed_runs),
        "note": COST_NOTE,
    }
