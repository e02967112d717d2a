"""audit.json `conditions`: per condition its runs, how many were used, and each metric's mean;
with the samples the comparisons take from its used runs, the axes a condition moves away from
its base, and the per-condition sections `distribution` and `crossModel`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.canonical import canonical_json
from ..core.overrides import lookup
from . import conclusions, stats
from .run_records import RunRecord, excluded_because


@dataclass(frozen=True)
class ConditionTable:
    """audit.json `conditions`, with what the comparisons take from each condition's used runs."""

    rows: list[dict[str, Any]]
    samples: dict[str, dict[str, list[float]]]
    """Condition → metric → the used runs' values in replication order (NaN when not reported)."""
    replicates: dict[str, dict[str, list[conclusions.Replicate]]]
    """The same values with each run's replication and seed lineage, for pairing."""
    used_runs: int
    reported: dict[str, int]
    """Per metric, how many used runs report a value for it at all (finite or not)."""


def condition_table(
    conditions: Sequence[Mapping[str, Any]],
    by_condition: Mapping[str, Sequence[RunRecord]],
    metrics: Sequence[str],
    include: bool,
    purpose: str,
) -> ConditionTable:
    """One row per condition of conditions.json, in plan order, over its runs in `by_condition`
    (`include` and `purpose` decide which runs are used, as `excluded_because` says)."""
    samples: dict[str, dict[str, list[float]]] = {}
    replicates: dict[str, dict[str, list[conclusions.Replicate]]] = {}
    condition_rows: list[dict[str, Any]] = []
    used_runs = 0
    reported: dict[str, int] = dict.fromkeys(metrics, 0)
    for cond in conditions:
        cid = str(cond["id"])
        records = sorted(by_condition.get(cid, []), key=lambda r: r.replication)
        kept = [r for r in records if excluded_because(r, include, purpose) is None]
        samples[cid] = {
            m: [r.result.metrics.get(m, math.nan) for r in kept if r.result is not None]
            for m in metrics
        }
        replicates[cid] = {
            m: [
                conclusions.Replicate(r.replication, r.seed, r.result.metrics.get(m, math.nan))
                for r in kept
                if r.result is not None
            ]
            for m in metrics
        }
        used_runs += len(kept)
        for m in metrics:
            reported[m] += sum(1 for r in kept if r.result is not None and m in r.result.metrics)
        succeeded = sum(1 for r in records if r.result is not None and r.result.failure is None)
        complete = sum(
            1
            for r in records
            if r.result is not None and r.result.failure is None and r.result.integrity.complete
        )
        condition_rows.append(
            {
                "id": cid,
                "dir": cond.get("dir"),
                "axis": cond.get("axis"),
                "level": cond.get("level"),
                "levels": cond.get("levels") or {},
                "model": cond.get("model"),
                "baseId": cond.get("baseId"),
                "isBase": bool(cond.get("isBase", cond.get("baseId") == cid)),
                "label": cond.get("label")
                or ("base" if cond.get("isBase", cond.get("baseId") == cid) else cid),
                "identicalToBase": bool(cond.get("identicalToBase", False)),
                "runs": len(records),
                "succeeded": succeeded,
                "complete": complete,
                "excluded": len(records) - len(kept),
                "means": {m: stats.mean(samples[cid][m]) for m in metrics},
            }
        )

    return ConditionTable(condition_rows, samples, replicates, used_runs, reported)


def moved_axes(
    condition: Mapping[str, Any], axes: Sequence[Mapping[str, Any]], base_doc: Mapping[str, Any]
) -> list[str]:
    """The plan axes a condition moves away from their base value, in plan order.

    A one_at_a_time condition moves its one axis. A full_factorial cell also sets the axes it
    leaves at their base value; those are not moved. A cell whose every level matches the base
    (the base value could not be read, say) counts every axis it sets.
    """
    levels: Mapping[str, Any] = condition.get("levels") or {}
    own = [str(a["id"]) for a in axes if str(a["id"]) in levels]
    if len(own) <= 1:
        return own
    moved = [
        axis_id
        for axis_id, axis in ((str(a["id"]), a) for a in axes)
        if axis_id in levels
        and _differs(levels[axis_id], lookup(base_doc, str(axis.get("target", "")))[1])
    ]
    return moved or own


def _differs(value: Any, base_value: Any) -> bool:
    return canonical_json(value) != canonical_json(base_value)


def distribution(
    conditions: Sequence[Mapping[str, Any]],
    by_condition: Mapping[str, Sequence[RunRecord]],
    targets: Mapping[str, Mapping[str, float]],
    include: bool,
    purpose: str = "exploration",
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, target in sorted(targets.items()):
        pooled: dict[str, dict[str, int]] = {}
        for cond in conditions:
            counts: dict[str, int] = defaultdict(int)
            for record in by_condition.get(cond["id"], []):
                used = excluded_because(record, include, purpose) is None
                if used and record.result is not None:
                    for category, n in record.result.distributions.get(name, {}).items():
                        counts[category] += n
            pooled[cond["id"]] = dict(counts)
        rows = []
        for cond in conditions:
            tvd, note = stats.tvd_score(pooled[cond["id"]], target)
            base_tvd, base_note = stats.tvd_score(pooled.get(cond["baseId"], {}), target)
            rows.append(
                {
                    "condition": cond["id"],
                    "counts": dict(sorted(pooled[cond["id"]].items())),
                    "tvd": tvd,
                    "tvdBase": base_tvd,
                    "note": note or base_note,
                }
            )
        out[name] = rows
    return out


def cross_model(
    conditions: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Mapping[str, list[float]]],
    metrics: Sequence[str],
) -> dict[str, dict[str, float | None]]:
    """Mean of each metric per model, over every run of every condition of that model."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for cond in conditions:
        model = cond.get("model")
        if model is None:
            continue
        bucket = pooled.setdefault(str(model), {m: [] for m in metrics})
        for m in metrics:
            bucket[m].extend(samples[cond["id"]][m])
    return {model: {m: stats.mean(v) for m, v in ms.items()} for model, ms in pooled.items()}
