"""audit.json `tests`, `notes` and `flags`: each non-base condition compared with its base,
metric by metric (the reference statistics, the decision and its equivalence margin, Holm within
the metric), why a metric has no test at all, and the rows whose spread is too small to trust.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import conclusions, stats
from .condition_table import ConditionTable
from .expectations import Expectations

IDENTICAL_NOTE = "identical to the base, not tested"
"""The note of a condition flagged identicalToBase: it ran, but it is no test (SPEC §5)."""


@dataclass(frozen=True)
class PairwiseRows:
    """The comparisons of an audit, as audit.json holds them."""

    tests: dict[str, list[dict[str, Any]]]
    """Metric → one row per non-base condition, in plan order."""
    notes: dict[str, str]
    """Metric → why it has no test at all."""
    flags: list[dict[str, Any]]
    """One `smallSpread` flag per row whose spread is too small to trust."""


def pairwise_rows(
    metrics: Sequence[str],
    table: ConditionTable,
    moved: Mapping[str, Sequence[str]],
    expectations: Expectations,
    plan_hash: str,
) -> PairwiseRows:
    """Compare every non-base condition of `table` with its base for each metric: the
    reference statistics (`stats.pairwise`, bootstrap seeded from `plan_hash`, the metric and
    the condition), the decision (`conclusions.decide`, paired by seed lineage where the runs
    share one), the direction `expectations` hold for it, and Holm's p over the metric's tested
    rows. A condition identical to its base gets a row with every statistic None."""
    condition_rows, samples, replicates = table.rows, table.samples, table.replicates
    tests: dict[str, list[dict[str, Any]]] = {}
    notes: dict[str, str] = {}
    flags: list[dict[str, Any]] = []
    for metric in metrics:
        rows: list[dict[str, Any]] = []
        for row in condition_rows:
            if row["isBase"]:
                continue
            base_id = row["baseId"]
            base_sample = samples.get(base_id, {}).get(metric, [])
            cond_sample = samples[row["id"]][metric]
            expected = expectations.for_row(row, moved[row["id"]], metric)
            margin = expectations.margins.get(metric)
            if row["identicalToBase"]:
                result = _identical_row(base_sample, cond_sample)
            else:
                seed = stats.bootstrap_seed(plan_hash, metric, row["id"])
                result = stats.pairwise(base_sample, cond_sample, seed=seed, expected=expected)
            if result["tested"]:
                result.update(
                    conclusions.decide(
                        replicates.get(base_id, {}).get(metric, []),
                        replicates[row["id"]][metric],
                        seed=seed,
                        margin=margin,
                    )
                )
            else:
                result.update(conclusions.undecided(result["note"], margin))
            result["condition"] = row["id"]
            result["baseId"] = base_id
            result["expected"] = expected
            rows.append(result)
        # The Holm family of a metric is its tested rows: m counts nothing else.
        adjusted = stats.holm([r["mwuP"] if r["tested"] else None for r in rows])
        for r, p in zip(rows, adjusted, strict=True):
            r["holmP"] = p
        tests[metric] = rows
        flags.extend(
            {
                "kind": "smallSpread",
                "metric": metric,
                "condition": r["condition"],
                "note": r["note"],
            }
            for r in rows
            if r["smallSpread"]
        )
        note = _metric_note(rows, table.used_runs, table.reported[metric])
        if note:
            notes[metric] = note

    return PairwiseRows(tests, notes, flags)


def _identical_row(base: Sequence[float], cond: Sequence[float]) -> dict[str, Any]:
    """The row of a condition flagged identicalToBase: its runs are counted and averaged, but it
    is no comparison, so every statistic is None."""
    b, c = stats.finite(base), stats.finite(cond)
    return {
        "nBase": int(b.size),
        "nCond": int(c.size),
        "meanBase": stats.mean(b),
        "meanCond": stats.mean(c),
        "diff": None,
        "ci95": None,
        "cohenD": None,
        "mwuP": None,
        "w1": None,
        "cliffDelta": None,
        "directionFlip": None,
        "tested": False,
        "smallSpread": False,
        "note": IDENTICAL_NOTE,
    }


METRIC_NOTES: dict[str, str] = {
    "no_conditions": "no conditions besides the base: nothing to test",
    "no_usable_runs": "no usable runs: nothing to test",
    "not_reported": "no usable run reports this metric: nothing to test",
    "all_identical": "every condition is identical to the base: nothing to test",
    "base_not_finite": "the base has no usable runs with a finite value of this metric",
    "conditions_not_finite": "no condition has usable runs with a finite value of this metric",
    "too_few": f"fewer than {stats.MIN_REPLICATIONS} replications with a finite value in the base "
    "or the condition of every comparison: nothing tested",
}
"""Why a metric has no test at all (audit.json `notes`), by reason; `not_finite_note` words the
one reason that carries counts."""


def not_finite_note(used_runs: int, reported: int) -> str:
    """The note of a metric that is not a finite number in any usable run: how many runs report
    NaN or an infinity and how many do not report it."""
    missing = used_runs - reported
    which = (
        "each reports NaN or an infinity"
        if missing == 0
        else f"{reported} report NaN or an infinity, {missing} do not report it"
    )
    return (
        f"this metric is not a finite number in any of the {used_runs} usable runs "
        f"({which}): nothing to test"
    )


def _metric_note(rows: Sequence[Mapping[str, Any]], used_runs: int, reported: int) -> str | None:
    """Why a metric has no test at all; None when at least one row is tested."""
    if not rows:
        return METRIC_NOTES["no_conditions"]
    if any(r["tested"] for r in rows):
        return None
    if used_runs == 0:
        return METRIC_NOTES["no_usable_runs"]
    if reported == 0:
        return METRIC_NOTES["not_reported"]
    if all(r["nBase"] == 0 and r["nCond"] == 0 for r in rows):
        return not_finite_note(used_runs, reported)
    candidates = [r for r in rows if r["note"] != IDENTICAL_NOTE]
    if not candidates:
        return METRIC_NOTES["all_identical"]
    if all(r["nBase"] == 0 for r in candidates):
        return METRIC_NOTES["base_not_finite"]
    if all(r["nCond"] == 0 for r in candidates):
        return METRIC_NOTES["conditions_not_finite"]
    return METRIC_NOTES["too_few"]
