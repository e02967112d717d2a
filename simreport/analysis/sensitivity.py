"""audit.json `sensitivity`: per axis, the largest |d| over every metric, in the cells where the
axis alone moves and in any cell that moves it, and the axes ranked by it. A full factorial's
ranking by main effects is in `factorial.rank_sensitivity`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


def sensitivity(
    axes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """Per axis, the largest |d| over every metric, measured two ways, and the ranking.

    `isolated` takes the tested cells in which this axis is the only one away from its base value;
    `anyCell` every tested cell that moves it (in a full factorial design other axes may move
    too, so its d is not this axis's effect alone). An axis is ranked by `isolated` when it has
    one, else by `anyCell`; larger |d| first, ties in plan order. Axes with neither (every level
    identical to the base, or nothing testable) follow unranked, in plan order.
    """
    isolated: dict[str, dict[str, Any]] = {}
    any_cell: dict[str, dict[str, Any]] = {}
    for metric, rows in tests.items():
        for row in rows:
            d = row["cohenD"]
            if not row["tested"] or d is None or math.isnan(d):
                continue
            measure = {
                "maxAbsD": abs(d),
                "metric": metric,
                "condition": row["condition"],
                "smallSpread": row["smallSpread"],
            }
            cell_axes = moved.get(row["condition"], ())
            for axis_id in cell_axes:
                _keep_larger(any_cell, axis_id, measure)
                if len(cell_axes) == 1:
                    _keep_larger(isolated, axis_id, measure)
    entries: list[dict[str, Any]] = []
    ranking_value: dict[str, float] = {}
    for axis in axes:
        axis_id = str(axis["id"])
        ranked_by = (
            "isolated" if axis_id in isolated else "anyCell" if axis_id in any_cell else None
        )
        if ranked_by is not None:
            ranking_value[axis_id] = (isolated.get(axis_id) or any_cell[axis_id])["maxAbsD"]
        entries.append(
            {
                "axis": axis_id,
                "code": axis.get("code"),
                "rank": None,
                "rankedBy": ranked_by,
                "isolated": isolated.get(axis_id),
                "anyCell": any_cell.get(axis_id),
            }
        )
    # sorted() is stable, so equal |d| keep plan order.
    ranked = sorted(
        (e for e in entries if e["axis"] in ranking_value),
        key=lambda e: -ranking_value[e["axis"]],
    )
    for rank, entry in enumerate(ranked, start=1):
        entry["rank"] = rank
    return ranked + [e for e in entries if e["axis"] not in ranking_value]


def _keep_larger(best: dict[str, dict[str, Any]], axis_id: str, measure: Mapping[str, Any]) -> None:
    # Strictly larger: the first row seen (metric order, then condition order) wins a tie.
    if axis_id not in best or measure["maxAbsD"] > best[axis_id]["maxAbsD"]:
        best[axis_id] = dict(measure)
