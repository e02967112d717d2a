"""The directions a plan's hypothesis expects (`Expectations`: per metric, axis and level, and
the margins of a robustness claim), and audit.json `directionConsistency`: how many rows that
moved went the expected way. A hypothesis that names an unknown direction is an InputError.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.canonical import canonical_json
from ..core.errors import InputError
from . import stats


@dataclass(frozen=True)
class Expectations:
    """The directions a plan's hypothesis expects: per metric (`outcomes`), per axis (`axes`) and
    per level or cell (`levels`, keyed by condition id, with or without the `@model` suffix)."""

    outcomes: Mapping[str, str]
    axes: Mapping[str, Mapping[str, str]]
    levels: Mapping[str, Mapping[str, str]]
    unchanged: frozenset[str] = frozenset()
    """Metrics the hypothesis expects to stay within their margin (a robustness claim)."""
    margins: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Metric → equivalence margin in the metric's units."""

    @classmethod
    def from_hypothesis(cls, hypothesis: Mapping[str, Any]) -> Expectations:
        """Read and check the hypothesis; an unknown direction is an InputError at its path."""
        if not isinstance(hypothesis, Mapping):
            raise InputError(
                "the hypothesis is not a mapping", path="hypothesis", expected="a mapping"
            )
        outcomes = hypothesis.get("outcomes")
        unchanged = (
            frozenset(m for m, o in outcomes.items() if o == "unchanged")
            if isinstance(outcomes, Mapping)
            else frozenset()
        )
        if unchanged and isinstance(outcomes, Mapping):
            outcomes = {m: o for m, o in outcomes.items() if m not in unchanged}
        return cls(
            outcomes=_directions(outcomes, "hypothesis.outcomes"),
            axes=_directions_by_key(hypothesis.get("axes"), "hypothesis.axes"),
            levels=_directions_by_key(hypothesis.get("levels"), "hypothesis.levels"),
            unchanged=unchanged,
            margins=_margins(hypothesis.get("margins")),
        )

    def for_row(
        self, condition: Mapping[str, Any], moved: Sequence[str], metric: str
    ) -> str | None:
        """The direction expected of one row: the condition's own entry in `levels`, else what
        its moved axes expect (each axis: its level's entry, its `axes` entry, the metric's
        outcome). Moved axes that expect different directions leave the row without one; an
        axis that expects nothing does not count against the others."""
        cid = str(condition["id"])
        model = condition.get("model")
        suffix = f"@{model}" if model is not None else None
        plain = cid[: -len(suffix)] if suffix and cid.endswith(suffix) else cid
        for key in (cid, plain):
            if metric in self.levels.get(key, {}):
                return self.levels[key][metric]
        if not moved:
            return self.outcomes.get(metric)
        levels: Mapping[str, Any] = condition.get("levels") or {}
        directions = {self._for_axis(axis, levels.get(axis), metric) for axis in moved}
        directions.discard(None)  # an axis with no expectation does not disagree
        if len(directions) != 1:
            return None
        return directions.pop()

    def _for_axis(self, axis: str, value: Any, metric: str) -> str | None:
        # The id a one_at_a_time condition of this level has: `<axis>=<level>`, a level that is
        # not text written as compact canonical JSON.
        level_id = f"{axis}={value if isinstance(value, str) else canonical_json(value)}"
        for table, key in ((self.levels, level_id), (self.axes, axis)):
            if metric in table.get(key, {}):
                return table[key][metric]
        return self.outcomes.get(metric)


def _directions(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    expected = "a mapping of metric name to increase or decrease"
    if not isinstance(value, Mapping):
        raise InputError("not a mapping of metric to direction", path=path, expected=expected)
    out: dict[str, str] = {}
    for metric, direction in value.items():
        if direction not in stats.DIRECTIONS:
            raise InputError(
                f"unknown direction {direction!r}",
                path=f"{path}.{metric}",
                expected=" or ".join(stats.DIRECTIONS),
            )
        out[str(metric)] = str(direction)
    return out


def _margins(value: Any) -> dict[str, float]:
    if value is None:
        return {}
    expected = "a mapping of metric name to a positive number in the metric's units"
    if not isinstance(value, Mapping):
        raise InputError("not a mapping", path="hypothesis.margins", expected=expected)
    out: dict[str, float] = {}
    for metric, margin in value.items():
        number = margin if isinstance(margin, (int, float)) else None
        if isinstance(margin, bool) or number is None or not 0 < number < math.inf:
            raise InputError(
                f"not a positive margin: {margin!r}",
                path=f"hypothesis.margins.{metric}",
                expected=expected,
            )
        out[str(metric)] = float(number)
    return out


def _directions_by_key(value: Any, path: str) -> dict[str, dict[str, str]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(
            "not a mapping",
            path=path,
            expected="a mapping of id to a mapping of metric name to increase or decrease",
        )
    return {str(key): _directions(inner, f"{path}.{key}") for key, inner in value.items()}


def direction_consistency(
    metrics: Sequence[str],
    expectations: Expectations,
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
    axes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
) -> dict[str, dict[str, Any]]:
    """Per metric with any expectation, how many rows concluded `moved` with an expectation
    moved as expected, overall and per moved axis (a factorial cell counts for each axis it
    moves). A row the test could not tell from the base counts neither way.

    `expected` is the direction those rows share, "mixed" when they differ, and the metric's
    outcome (or None) when there is no such row.
    """
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        rows = tests.get(metric, [])
        if metric not in expectations.outcomes and all(r["expected"] is None for r in rows):
            continue
        # Only a row that moved can hold or reverse a direction: a difference the test could not
        # tell from noise, or a zero one, is no evidence either way.
        counted = [r for r in rows if r["conclusion"] == "moved" and r["expected"] is not None]
        directions = {r["expected"] for r in counted}
        expected = (
            expectations.outcomes.get(metric)
            if not directions
            else directions.pop()
            if len(directions) == 1
            else "mixed"
        )
        as_expected = {
            r["condition"]: r["directionFlip"] is False and r["diff"] != 0 for r in counted
        }
        by_axis: dict[str, dict[str, int]] = {}
        for axis in axes:
            axis_id = str(axis["id"])
            mine = [c for c in as_expected if axis_id in moved.get(c, ())]
            if mine:
                by_axis[axis_id] = {
                    "consistent": sum(1 for c in mine if as_expected[c]),
                    "total": len(mine),
                }
        consistent = sum(1 for ok in as_expected.values() if ok)
        out[metric] = {
            "expected": expected,
            "consistent": consistent,
            "total": len(counted),
            "share": consistent / len(counted) if counted else None,
            "byAxis": by_axis,
        }
    return out
