"""audit.json `noiseFloor`: per metric and base, how often the audit's unpaired rank-sum test
calls two groups of the same condition different (an A/A comparison), at the audit's n when a
condition differs from the base only in its seeds, else between halves of the base. Pure
functions; splits drawn from a generator seeded by the plan hash and the values.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from . import inference, stats
from .detectable_effect import DEFAULT_ALPHA, check_levels, smallest_rank_p
from .stats import FloatArray

IndexArray: TypeAlias = npt.NDArray[np.intp]

NOISE_FLOOR_SPLITS = 2000
"""Splits per base: every distinct split up to this many (bases of up to 14 values), else this
many random ones, which put the flip rate within about ±0.01 of its value over all splits."""
NOISE_FLOOR_MIN_VALUES = 4
"""A base needs this many usable values for split halves of at least two values each."""
SEED_TARGETS = frozenset({"seed", "execution.seed"})
"""Scenario paths that only choose the seed: a condition that moves nothing else is the base
again under other seeds, an A/A comparison at the audit's n."""


def noise_floor_seed(plan_hash: str, values: stats.Sample) -> int:
    """The split generator's seed for one base: the first 16 bytes of a sha256 over the plan
    hash and the base's sorted finite values (exactly, as hex floats), in its own namespace.
    It depends on the values, not on the metric or the base's id, so identical bases draw
    identical splits."""
    # Adding 0.0 turns -0.0 into 0.0: equal values, equal seeds.
    exact = ",".join((float(v) + 0.0).hex() for v in np.sort(stats.finite(values)).tolist())
    material = f"noise-floor\x1f{plan_hash}\x1f{exact}"
    digest = hashlib.sha256(material.encode("utf-8")).digest()
    return int.from_bytes(digest[:16], "big")


def _splits(size: int, group: int, budget: int, rng: np.random.Generator) -> list[IndexArray]:
    """Index sets of the condition group (`group` of `size` values) of each split: every distinct
    split when there are at most `budget` of them, else `budget` random ones."""
    # With equal groups, a split and its mirror give the same two-sided p: count each pair once.
    mirrored = 2 * group == size
    distinct = math.comb(size, group) // (2 if mirrored else 1)
    if distinct <= budget:
        combos = itertools.combinations(range(size), group)
        return [np.array(c, dtype=np.intp) for c in combos if not mirrored or c[0] == 0]
    return [np.sort(rng.permutation(size)[:group]) for _ in range(budget)]


def smallest_reachable_n(alpha: float) -> int:
    """The fewest base values whose halves can give p < alpha."""
    n = NOISE_FLOOR_MIN_VALUES
    while smallest_rank_p(n // 2, n - n // 2) >= alpha:
        n += 1
    return n


def unsplittable_note(n: int) -> str:
    """Why a base of `n` values without a seed-only condition has no noise floor."""
    return (
        f"fewer than {NOISE_FLOOR_MIN_VALUES} usable values in the base ({n}) and no condition "
        "that changes only the seeds: no split to compare"
    )


def unreachable_split_note(
    sizes: Sequence[int], alpha: float, floor: float, *, halves: bool
) -> str:
    """Why groups of `sizes` values have no flip rate: the rank-sum test cannot reach alpha;
    `floor` is its smallest possible p. For halves of the base, the n from which it can."""
    first, second = sizes
    if not halves:
        return (
            f"groups of {first} and {second} values cannot give p < {alpha:.3g} whatever the "
            f"data (smallest possible p: {floor:.3g})"
        )
    return (
        f"halves of {first} and {second} values cannot give p < {alpha:.3g} whatever the data "
        f"(smallest possible p: {floor:.3g}): no flip rate below {smallest_reachable_n(alpha)} "
        "replications"
    )


def _flips(
    pooled: FloatArray, group: int, budget: int, seed_material: str, alpha: float
) -> tuple[int, int]:
    """(splits with p < alpha, splits tested) over splits of `pooled` into a condition group of
    `group` values and the rest, the generator seeded from the sorted pooled values."""
    pooled = np.sort(pooled)
    rng = np.random.default_rng(noise_floor_seed(seed_material, pooled))
    chosen = _splits(int(pooled.size), group, budget, rng)
    null = inference.RankSumNull(pooled, group)
    return sum(int(null.pvalue(index) < alpha) for index in chosen), len(chosen)


def _floor_at_audit_n(
    x: FloatArray,
    companions: Sequence[tuple[str, stats.Sample]],
    seed_material: str,
    alpha: float,
    splits: int,
) -> dict[str, Any] | None:
    """The flip rate at the audit's own sizes: the base pooled with each condition that differs
    from it only in its seeds, split again and again into groups of the two sizes. None when no
    such condition has at least 2 usable values."""
    usable = [(cid, stats.finite(sample)) for cid, sample in companions]
    usable = [(cid, c) for cid, c in usable if c.size >= stats.MIN_REPLICATIONS]
    n = int(x.size)
    if n < stats.MIN_REPLICATIONS or not usable:
        return None
    ids = [cid for cid, _ in usable]
    sizes = sorted({int(c.size) for _, c in usable})
    row: dict[str, Any] = {"scope": "audit", "companions": ids, "sizes": [n, max(sizes)]}
    if all(smallest_rank_p(n, size) >= alpha for size in sizes):
        floor = min(smallest_rank_p(n, size) for size in sizes)
        return row | {"note": unreachable_split_note(row["sizes"], alpha, floor, halves=False)}
    flips = tested = 0
    budget = max(1, splits // len(usable))
    for _, c in usable:
        hit, count = _flips(np.concatenate([x, c]), int(c.size), budget, seed_material, alpha)
        flips, tested = flips + hit, tested + count
    return row | {"splits": tested, "flipRate": flips / tested}


def _floor_of_halves(
    x: FloatArray, seed_material: str, alpha: float, splits: int
) -> dict[str, Any]:
    """The flip rate between halves of the base: below the audit's n, for plans without a
    condition that changes only the seeds."""
    n = int(x.size)
    row: dict[str, Any] = {"scope": "halves", "companions": [], "sizes": [n // 2, n - n // 2]}
    if n < NOISE_FLOOR_MIN_VALUES:
        return row | {"sizes": None, "note": unsplittable_note(n)}
    if (floor := smallest_rank_p(n // 2, n - n // 2)) >= alpha:
        return row | {"note": unreachable_split_note(row["sizes"], alpha, floor, halves=True)}
    flips, tested = _flips(x, n - n // 2, splits, seed_material, alpha)
    return row | {"splits": tested, "flipRate": flips / tested}


def noise_floor(
    base_samples_by_metric: Mapping[str, Mapping[str, stats.Sample]],
    seed_material: str,
    alpha: float = DEFAULT_ALPHA,
    splits: int = NOISE_FLOOR_SPLITS,
    companions_by_metric: Mapping[str, Mapping[str, Sequence[tuple[str, stats.Sample]]]]
    | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """audit.json `noiseFloor`: per metric and base, how often the audit's unpaired rank-sum
    test calls two groups of the same condition different.

    At the audit's n (`scope: "audit"`) when the base has companions: conditions that differ
    from it only in their seeds (a seed axis), given per metric and base id in
    `companions_by_metric`. The base and each companion are pooled and split into groups of
    their two sizes, `splits` in all. Otherwise (`scope: "halves"`) the base's own values are
    split into halves of n // 2 and n - n // 2, below the audit's n. Each split is tested with
    the exact permutation rank-sum test (normal approximation beyond 60 values) at `alpha`; the
    flip rate is the share of splits with p < alpha.

    Every distinct split is tested when there are at most `splits`, else `splits` random ones,
    the generator seeded by `noise_floor_seed` from `seed_material` (the plan's meaning hash) and
    the pooled values, so identical bases (and companions) give identical floors whatever their
    metric or id. Paired rows have no floor to measure: a condition identical to its base
    shares its seeds and runs byte-identically, so its paired p is 1.

    Null with a note when the groups are too small to split, or cannot reach p < alpha whatever
    the data (a rate of 0 would then say nothing).
    """
    check_levels(alpha)
    if splits < 1:
        raise ValueError(f"splits must be positive, got {splits}")
    out: dict[str, list[dict[str, Any]]] = {}
    for metric, by_base in base_samples_by_metric.items():
        companions = (companions_by_metric or {}).get(metric, {})
        rows = []
        for base, sample in by_base.items():
            x = np.sort(stats.finite(sample))
            found = _floor_at_audit_n(x, companions.get(base, ()), seed_material, alpha, splits)
            floor = found or _floor_of_halves(x, seed_material, alpha, splits)
            rows.append(
                {"base": base, "n": int(x.size), "splits": 0, "flipRate": None, "alpha": alpha}
                | {"note": None}
                | floor
            )
        out[metric] = rows
    return out


def seed_companions(
    condition_rows: Sequence[Mapping[str, Any]],
    axes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
    samples: Mapping[str, Mapping[str, Sequence[float]]],
    metrics: Sequence[str],
) -> dict[str, dict[str, list[tuple[str, Sequence[float]]]]]:
    """Per metric and base, the conditions that differ from the base only in their seeds, with
    their samples, in plan order (the noise floor pools them with the base)."""
    seed_axes = {str(a["id"]) for a in axes if str(a.get("target", "")) in SEED_TARGETS}
    twins = [
        row
        for row in condition_rows
        if not row["isBase"]
        and not row["identicalToBase"]
        and moved[row["id"]]
        and set(moved[row["id"]]) <= seed_axes
    ]
    return {
        m: {
            base: [
                (str(row["id"]), samples[row["id"]][m]) for row in twins if row["baseId"] == base
            ]
            for base in {str(row["baseId"]) for row in twins}
        }
        for m in metrics
    }
