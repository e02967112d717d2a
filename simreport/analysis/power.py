"""Power, minimum detectable effects, the A/A noise floor and replication counts for the rank
tests the audit decides with (SPEC §6, §6a): pure functions, numbers in, numbers out, simulated
with draws from a caller's seed. Reading a pilot and estimating a plan's cost are in `pilot`.
The design (effect units, the pairing correlation, the t-test reference): docs/statistics.md.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from scipy import integrate, optimize, special
from scipy import stats as _scipy_stats

from ..core.canonical import parse_number
from . import inference, rank_power, stats
from .rank_power import RankDesign
from .stats import FloatArray

IndexArray: TypeAlias = npt.NDArray[np.intp]

DEFAULT_POWER = 0.8
DEFAULT_ALPHA = 0.05
NOISE_FLOOR_SPLITS = 2000
"""Splits per base: every distinct split up to this many (bases of up to 14 values), else this
many random ones, which put the flip rate within about ±0.01 of its value over all splits."""
NOISE_FLOOR_MIN_VALUES = 4
"""A base needs this many usable values for split halves of at least two values each."""
MAX_REPLICATIONS = 10**9
"""Beyond this many replications per condition a recommendation is reported as out of reach."""

POWER_DRAWS = rank_power.POWER_DRAWS
IDENTICAL_NOTE = "identical to the base, not tested"

# Below this, a lower tail that the special functions return as nan is dropped: it is bounded by
# Φ(-nc) (see `_lower_tail`), so dropping it moves the power by less than this.
_NEGLIGIBLE_TAIL = 1e-13


# --------------------------------------------------------------------------- power of the t-test


def _check_levels(alpha: float, power: float | None = None) -> None:
    if not (isinstance(alpha, (int, float)) and 0.0 < alpha < 1.0):
        raise ValueError(f"alpha must lie strictly between 0 and 1, got {alpha!r}")
    if power is None:
        return
    if not (isinstance(power, (int, float)) and 0.0 < power < 1.0):
        raise ValueError(f"power must lie strictly between 0 and 1, got {power!r}")
    if power <= alpha:
        # At d = 0 a two-sided test already rejects with probability alpha.
        raise ValueError(f"power must exceed alpha ({alpha}), got {power}")


def _mixture_tail(t: float, df: float, nc: float, *, upper: bool) -> float:
    """A tail of the noncentral t as a chi-square mixture of normal tails: the fallback where
    scipy's special functions return nan far in a tail."""
    normal_tail = _scipy_stats.norm.sf if upper else _scipy_stats.norm.cdf

    def integrand(v: float) -> float:
        return float(normal_tail(t * math.sqrt(v / df) - nc) * _scipy_stats.chi2.pdf(v, df))

    value, _ = integrate.quad(integrand, 0.0, math.inf, limit=200)
    return min(max(float(value), 0.0), 1.0)


def _upper_tail(t: float, df: float, nc: float) -> float:
    value = float(_scipy_stats.nct.sf(t, df, nc))
    return value if math.isfinite(value) else _mixture_tail(t, df, nc, upper=True)


def _lower_tail(t: float, df: float, nc: float) -> float:
    value = float(special.nctdtr(df, nc, t))
    if math.isfinite(value):
        return value
    # For t < 0 and nc >= 0, T < t needs Z + nc < 0, so the tail is at most Φ(-nc).
    if t < 0.0 and float(_scipy_stats.norm.sf(nc)) < _NEGLIGIBLE_TAIL:
        return 0.0
    return _mixture_tail(t, df, nc, upper=False)


def t_test_power(d: float, n_base: int, n_cond: int, alpha: float) -> float:
    """Power of the two-sided two-sample t-test (pooled variance) to detect a true |d| with
    `n_base` and `n_cond` values at level `alpha`."""
    _check_levels(alpha)
    if n_base < 2 or n_cond < 2:
        raise ValueError(f"the t-test needs at least 2 values per group, got {n_base}, {n_cond}")
    df = float(n_base + n_cond - 2)
    nc = abs(float(d)) * math.sqrt(n_base * n_cond / (n_base + n_cond))
    crit = float(_scipy_stats.t.isf(alpha / 2.0, df))
    return min(_upper_tail(crit, df, nc) + _lower_tail(-crit, df, nc), 1.0)


def paired_t_test_power(d: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test (one-sample t on the differences) to detect a true
    mean difference of |d| SDs of the differences with `n` pairs at level `alpha`."""
    _check_levels(alpha)
    if n < 2:
        raise ValueError(f"the paired t-test needs at least 2 pairs, got {n}")
    df = float(n - 1)
    nc = abs(float(d)) * math.sqrt(n)
    crit = float(_scipy_stats.t.isf(alpha / 2.0, df))
    return min(_upper_tail(crit, df, nc) + _lower_tail(-crit, df, nc), 1.0)


def mde(n_base: int, n_cond: int, alpha: float, power: float = DEFAULT_POWER) -> float | None:
    """The two-sided two-sample t-test's minimum detectable effect: the |d| it detects with
    probability `power` at level `alpha`, with `n_base` and `n_cond` values per group.

    A reference, not the audit's MDE (that is `detectable_effect`, for the rank test that
    runs). Noncentral t, not the normal approximation: at n = 3 per group, α = 0.05 and power
    0.8 it needs |d| = 3.1 where the normal approximation promises 2.3. None when either group
    has fewer than 2 values.
    """
    _check_levels(alpha, power)
    if n_base < 2 or n_cond < 2:
        return None
    return _solve_effect(lambda d: t_test_power(d, n_base, n_cond, alpha), power)


def _solve_effect(power_at: Callable[[float], float], power: float) -> float:
    """The |d| at which a continuous, increasing power curve reaches `power`."""

    def shortfall(d: float) -> float:
        return power_at(d) - power

    hi = 1.0
    while shortfall(hi) < 0.0:
        hi *= 2.0
    lo = hi / 2.0 if hi > 1.0 else 0.0
    return float(optimize.brentq(shortfall, lo, hi, xtol=1e-12, rtol=1e-12))


# ---------------------------------------------------------------- the rank tests the audit runs


def smallest_mwu_p(n_base: int, n_cond: int, *, ties: bool = False) -> float:
    """The smallest two-sided p the reference's Mann-Whitney column (`stats.mann_whitney_p`,
    audit.json `mwuP`) can give with groups of these sizes: the groups completely separated.
    Without `ties` the values are all distinct (exact test below 8 values); with `ties`, also
    two constant groups, whose tie-corrected variance can give a smaller p."""
    if n_base < 1 or n_cond < 1:
        raise ValueError(f"both groups need a value, got {n_base}, {n_cond}")
    low = np.arange(n_base, dtype=np.float64)
    high = np.arange(n_base, n_base + n_cond, dtype=np.float64)
    p = stats.mann_whitney_p(low, high)
    if ties:
        blocks = stats.mann_whitney_p(np.zeros(n_base), np.ones(n_cond))
        p = min(p, blocks) if p is not None and blocks is not None else p
    if p is None:  # pragma: no cover - both groups have values
        raise AssertionError("Mann-Whitney gave no p for two non-empty groups")
    return p


def smallest_rank_p(n_base: int, n_cond: int, *, paired: bool = False) -> float:
    """The smallest two-sided p the audit's rank test reaches with distinct values at these
    sizes (paired: n_base = n_cond pairs): 2 / C(N, n_c) exact unpaired, 2 / 2^n exact paired."""
    return rank_power.smallest_p(RankDesign(n_base, n_cond, paired))


def _beyond_simulation(design: RankDesign) -> bool:
    return max(design.n_base, design.n_cond) > rank_power.SIMULATION_LIMIT


def _efficient_n(design: RankDesign) -> tuple[int, int]:
    """Sizes at which the t-test matches the rank test in the normal-approximation regime."""
    scale = rank_power.RANK_EFFICIENCY
    return max(2, round(design.n_base * scale)), max(2, round(design.n_cond * scale))


def rank_test_power(
    d: float,
    n_base: int,
    n_cond: int,
    alpha: float,
    *,
    paired: bool = False,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> float | None:
    """Power of the audit's rank test at level `alpha` against a normal shift of |d| (unpaired:
    pooled SDs; paired, with n_base = n_cond pairs: SDs of the differences).

    Simulated on `draws` data sets seeded by `seed` and the sizes (so every effect and α at
    the same sizes shares its draws). Beyond `rank_power.SIMULATION_LIMIT` values per group,
    the t-test's power at n times 3/π. None when the test cannot reach `alpha` at these sizes.
    """
    _check_levels(alpha)
    design = RankDesign(n_base, n_cond, paired)
    if rank_power.critical_distance(design, alpha) is None:
        return None
    if _beyond_simulation(design):
        nb, nc = _efficient_n(design)
        if paired:
            return paired_t_test_power(d, nb, alpha)
        return t_test_power(d, nb, nc, alpha)
    return rank_power.simulated_power(design, abs(float(d)), alpha, seed=seed, draws=draws)


def rank_mde(
    n_base: int,
    n_cond: int,
    alpha: float,
    power: float = DEFAULT_POWER,
    *,
    paired: bool = False,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> float | None:
    """The audit's minimum detectable effect: the smallest |d| (paired: δ) at which
    `rank_test_power` reaches `power` over its seeded draws. None when a group has fewer than 2
    values or the test cannot reach `alpha` at these sizes (`detectable_effect` says why)."""
    return detectable_effect(n_base, n_cond, alpha, power, paired=paired, seed=seed, draws=draws)[0]


def unreachable_note(n_base: int, n_cond: int, alpha: float, *, paired: bool = False) -> str:
    """Why no effect is detectable: the test cannot reach p < alpha at these sizes."""
    floor = smallest_rank_p(n_base, n_cond, paired=paired)
    sizes = f"{n_base} pairs" if paired else f"{n_base} and {n_cond} values"
    return (
        f"the {RankDesign(n_base, n_cond, paired).test_name} cannot reach p < {alpha:.3g} with "
        f"{sizes} whatever the data (smallest possible p: {floor:.3g}): no effect is "
        "detectable at this n"
    )


def detectable_effects(
    n_base: int,
    n_cond: int,
    alphas: Iterable[float],
    power: float = DEFAULT_POWER,
    *,
    paired: bool = False,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> dict[float, tuple[float | None, str | None]]:
    """α → (mde, note) for one comparison as the audit tests it, every α over the same draws
    (the rows of one design share them, so a whole Holm family costs one simulation): the
    rank test's MDE (`rank_power.simulated_mdes`; beyond `rank_power.SIMULATION_LIMIT` values
    per group the t-test's at n times 3/π), or None with the reason when a group has fewer
    than 2 values or when the test cannot reach α at these sizes (smallest reachable p above
    α)."""
    wanted = list(dict.fromkeys(alphas))
    for alpha in wanted:
        _check_levels(alpha, power)
    if min(n_base, n_cond) < stats.MIN_REPLICATIONS:
        return {alpha: (None, stats.too_few_note(n_base, n_cond)) for alpha in wanted}
    design = RankDesign(n_base, n_cond, paired)
    if _beyond_simulation(design):
        nb, nc = _efficient_n(design)

        def t_mde(alpha: float) -> float | None:
            if paired:
                return _solve_effect(lambda d: paired_t_test_power(d, nb, alpha), power)
            return mde(nb, nc, alpha, power)

        values = {
            a: None if rank_power.critical_distance(design, a) is None else t_mde(a) for a in wanted
        }
    else:
        values = rank_power.simulated_mdes(design, wanted, power, seed=seed, draws=draws)
    return {
        alpha: (value, None if value is not None else unreachable_note(
            n_base, n_cond, alpha, paired=paired
        ))
        for alpha, value in values.items()
    }  # fmt: skip


def detectable_effect(
    n_base: int,
    n_cond: int,
    alpha: float,
    power: float = DEFAULT_POWER,
    *,
    paired: bool = False,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> tuple[float | None, str | None]:
    """The smallest effect one comparison detects at one α: `detectable_effects` for a single
    threshold.

    Args:
        n_base: the base condition's replications (pairs, when paired).
        n_cond: the condition's replications.
        alpha: the threshold the comparison is tested at.
        power: the power to reach.
        paired: size the paired test rather than the unpaired one.
        seed: the simulations' seed (`simulation_seed`).
        draws: the simulations' size.

    Returns:
        (mde, note): the minimal detectable pooled |d|, or None with the reason (too few
        replications, or a test that cannot reach α at these sizes).

    Raises:
        ValueError: an α or power outside (0, 1), or a power not above α.
    """
    found = detectable_effects(
        n_base, n_cond, [alpha], power, paired=paired, seed=seed, draws=draws
    )
    return found[alpha]


# ----------------------------------------------------------------------- Holm and audit["power"]


def holm_alphas(m: int, alpha: float = DEFAULT_ALPHA) -> list[float]:
    """Holm's step-down thresholds for ranks 1..m (smallest p first): α / (m - k + 1)."""
    _check_levels(alpha)
    if m < 0:
        raise ValueError(f"m must not be negative, got {m}")
    return [alpha / (m - k + 1) for k in range(1, m + 1)]


FamilyMember = tuple[str, str, float | None]
"""One member of the decision family: (metric, condition, the p that decides or None)."""


def _is_tested(row: Mapping[str, Any]) -> bool:
    # Rows written before `tested` existed were in the Holm family exactly when they had a p.
    if "tested" in row:
        return bool(row["tested"])
    return decisive_p(row) is not None


def decisive_p(row: Mapping[str, Any]) -> float | None:
    """The p that decides a test row: `p` where the row has one (SPEC §6a), else the
    reference's `mwuP` (rows written before `p` existed)."""
    value = parse_number(row["p"] if "p" in row else row.get("mwuP"))
    return float(value) if isinstance(value, (int, float)) else None


def holm_family(
    tests: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Sequence[str] | None = None
) -> list[FamilyMember]:
    """The headline's decision family from audit.json `tests`: every tested row of every metric
    (or of `metrics`, the declared primary metrics), in metric then row order, with its p."""
    chosen = tests.keys() if metrics is None else [m for m in metrics if m in tests]
    return [
        (metric, str(row["condition"]), decisive_p(row))
        for metric in chosen
        for row in tests[metric]
        if _is_tested(row) and decisive_p(row) is not None
    ]


def family_alphas(
    family: Sequence[FamilyMember], alpha: float = DEFAULT_ALPHA
) -> dict[tuple[str, str], float]:
    """Holm's threshold for each (metric, condition) of `family`: the member ranked k (from 1,
    smallest p first, ties in listed order) among the m members with a p is judged at
    α / (m - k + 1). Members without a p are not counted in m (SPEC §6)."""
    present = [(metric, cond, p) for metric, cond, p in family if p is not None]
    ranked = sorted(range(len(present)), key=lambda i: (present[i][2], i))
    thresholds = holm_alphas(len(present), alpha)
    return {(present[i][0], present[i][1]): thresholds[k] for k, i in enumerate(ranked)}


def _count(row: Mapping[str, Any], key: str) -> int:
    value = row.get(key)
    return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0


def _untested_note(row: Mapping[str, Any]) -> str:
    if row.get("identicalToBase"):
        return IDENTICAL_NOTE
    note = row.get("note")
    if isinstance(note, str) and note:
        return note
    n_base, n_cond = _count(row, "nBase"), _count(row, "nCond")
    if min(n_base, n_cond) < stats.MIN_REPLICATIONS:
        return stats.too_few_note(n_base, n_cond)
    return "not tested"


OUTSIDE_FAMILY_NOTE = "not in the decision family (not a primary metric): no Holm threshold"


def _row_sizes(row: Mapping[str, Any], paired: bool) -> tuple[int, int]:
    """(n_base, n_cond) the row's test runs with: paired rows test their pairs (`nPairs`
    where the row has it, else the smaller group)."""
    n_base, n_cond = _count(row, "nBase"), _count(row, "nCond")
    if not paired:
        return n_base, n_cond
    pairs = _count(row, "nPairs") if "nPairs" in row else min(n_base, n_cond)
    return pairs, pairs


def _method(tests_used: Sequence[str], family_size: int, scope: str, draws: int) -> str:
    used = ", ".join(sorted(set(tests_used))) or "no test"
    return (
        f"power of the test that runs ({used}; exact up to {inference.EXACT_MAX_POOLED} values, "
        "normal approximation beyond), simulated on "
        f"{draws} normal data sets per point with seeded draws, against a shift in pooled SDs "
        "(paired rows: in SDs of the paired differences); each row at the Holm threshold of its "
        f"rank among the {family_size} tested rows of {scope}; null where the test cannot "
        "reach that threshold at these n whatever the data"
    )


def power_section(
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    *,
    family: Sequence[FamilyMember] | None = None,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> dict[str, Any]:
    """audit.json `power`: per metric and non-base condition, the Holm threshold of the row's
    rank in the decision family and the MDE of the row's test at that threshold and its n.

    Args:
        tests: audit.json `tests` (metric → rows with `condition`, `nBase`, `nCond`, `tested`,
            `p` or `mwuP`, and `paired` (default False) and `nPairs` for paired rows).
        alpha: the family-wise α.
        power: the power an MDE reaches.
        family: the decision family as (metric, condition, p) members, e.g. `holm_family(tests,
            primary_metrics)`; by default every tested row of every metric.
        seed: seeds every simulation (the audit derives it from the plan hash).
        draws: simulated data sets per power estimate.

    Returns:
        `power`, `alphaFamily`, `method`, `familySize`, `draws` and `metrics`: metric → one entry
        per row in row order (`condition`, `nBase`, `nCond`, `paired`, `test`, `alpha`, `mde`,
        `note`). Rows outside the family keep their place with `alpha` and `mde` null and a
        note; a paired row's `mde` is in SDs of the differences.
    """
    _check_levels(alpha, power)
    members = holm_family(tests) if family is None else list(family)
    alpha_of = family_alphas(members, alpha)
    family_metrics = list(dict.fromkeys(metric for metric, _, _ in members))
    in_family = {(metric, cond) for metric, cond, _ in members}
    # Every threshold of one design is found over the same draws, in one pass.
    wanted: dict[tuple[int, int, bool], set[float]] = {}
    for metric, rows in tests.items():
        for row in rows:
            row_alpha = alpha_of.get((metric, str(row["condition"])))
            if row_alpha is not None:
                paired = bool(row.get("paired", False))
                wanted.setdefault((*_row_sizes(row, paired), paired), set()).add(row_alpha)
    found = {
        key: detectable_effects(
            key[0], key[1], sorted(alphas), power, paired=key[2], seed=seed, draws=draws
        )
        for key, alphas in wanted.items()
    }
    used: list[str] = []
    metrics: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in tests.items():
        entries = []
        for row in rows:
            paired = bool(row.get("paired", False))
            n_base, n_cond = _row_sizes(row, paired)
            key = (metric, str(row["condition"]))
            row_alpha = alpha_of.get(key)
            value: float | None = None
            test: str | None = None
            if row_alpha is not None:
                value, note = found[(n_base, n_cond, paired)][row_alpha]
                if min(n_base, n_cond) >= stats.MIN_REPLICATIONS:
                    test = RankDesign(n_base, n_cond, paired).test_name
                    used.append(test)
            elif key not in in_family and _is_tested(row) and decisive_p(row) is not None:
                note = OUTSIDE_FAMILY_NOTE
            else:
                note = _untested_note(row)
            entries.append(
                {
                    "condition": row["condition"],
                    "nBase": _count(row, "nBase"),
                    "nCond": _count(row, "nCond"),
                    "paired": paired,
                    "test": test,
                    "alpha": row_alpha,
                    "mde": value,
                    "note": note,
                }
            )
        metrics[metric] = entries
    scope = "all metrics" if family is None else "the metrics " + ", ".join(family_metrics)
    return {
        "power": power,
        "alphaFamily": alpha,
        "method": _method(used, len(alpha_of), scope, draws),
        "familySize": len(alpha_of),
        "draws": draws,
        "metrics": metrics,
    }


# --------------------------------------------------------------------------- the A/A noise floor


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


def _smallest_reachable_n(alpha: float) -> int:
    n = NOISE_FLOOR_MIN_VALUES
    while smallest_rank_p(n // 2, n - n // 2) >= alpha:
        n += 1
    return n


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
        return row | {
            "note": f"groups of {n} and {max(sizes)} values cannot give p < {alpha:.3g} whatever "
            f"the data (smallest possible p: {floor:.3g})"
        }
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
        return row | {
            "sizes": None,
            "note": f"fewer than {NOISE_FLOOR_MIN_VALUES} usable values in the base ({n}) and "
            "no condition that changes only the seeds: no split to compare",
        }
    if (floor := smallest_rank_p(n // 2, n - n // 2)) >= alpha:
        return row | {
            "note": f"halves of {n // 2} and {n - n // 2} values cannot give p < {alpha:.3g} "
            f"whatever the data (smallest possible p: {floor:.3g}): no flip rate below "
            f"{_smallest_reachable_n(alpha)} replications"
        }
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
    _check_levels(alpha)
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


# --------------------------------------------------------------------- replications from a pilot


@dataclass(frozen=True)
class ReplicationSizing:
    """Replications per condition for one effect, and what the tool states about that n."""

    replications: int | None
    """Smallest equal n per group (paired: pairs) with the target power; None with a note."""
    power: float | None
    """The test's power at that n (simulated, or from the efficiency rule beyond simulation)."""
    note: str | None
    test: str | None
    """The test that runs at that n."""


def _t_test_replications(power_at: Callable[[int], float], power: float) -> int | None:
    """Smallest n >= 2 at which `power_at(n)` (a t-test's power, increasing in n) reaches
    `power`; None beyond MAX_REPLICATIONS."""
    if power_at(2) >= power:
        return 2
    lo, hi = 2, 4
    while power_at(hi) < power:
        if hi >= MAX_REPLICATIONS:
            return None
        lo, hi = hi, min(hi * 2, MAX_REPLICATIONS)
    while hi - lo > 1:  # power(lo) < target <= power(hi)
        mid = (lo + hi) // 2
        if power_at(mid) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def _smallest_reaching_n(alpha: float, paired: bool) -> int:
    """Fewest values per group (paired: pairs) with which the rank test can reach p < alpha."""
    n = stats.MIN_REPLICATIONS
    while rank_power.critical_distance(RankDesign(n, n, paired), alpha) is None:
        n += 1
    return n


def _effect_note(d: float | None) -> str | None:
    """Why an effect size cannot size replications, or None when it can."""
    if d is None or math.isnan(d):
        return "no effect size: no basis for a number of replications"
    if d == 0.0:
        return "|d| = 0: no number of replications detects no effect"
    if math.isinf(d):
        return (
            "|d| is infinite (no spread in either group): it cannot size replications; "
            "give the smallest effect of interest instead"
        )
    return None


def size_replications(
    d: float | None,
    alpha: float,
    power: float = DEFAULT_POWER,
    *,
    paired: bool = False,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> ReplicationSizing:
    """Replications per condition for the audit's rank test (paired: pairs; `d` is then δ, in
    SDs of the differences) to detect a true |d| at `alpha` with `power`: the smallest equal n
    per group whose simulated power (`rank_test_power`, seeded by `seed`) reaches `power`.

    The search starts at the t-test's n (no test beats the t-test on normal data) and walks up
    one n at a time while the test is exact (its power is a sawtooth in n there), then bisects
    on n; beyond `rank_power.SIMULATION_LIMIT` it uses the efficiency rule of
    `rank_test_power`. None with a note for d = 0, an infinite or undefined d, and an n beyond
    MAX_REPLICATIONS.
    """
    _check_levels(alpha, power)
    reason = _effect_note(None if d is None else abs(float(d)))
    if reason is not None or d is None:
        return ReplicationSizing(None, None, reason, None)
    size = abs(float(d))

    def t_power(n: int) -> float:
        return paired_t_test_power(size, n, alpha) if paired else t_test_power(size, n, n, alpha)

    def rank_power_at(n: int) -> float:
        value = rank_test_power(size, n, n, alpha, paired=paired, seed=seed, draws=draws)
        return 0.0 if value is None else value

    t_n = _t_test_replications(t_power, power)
    if t_n is None or t_n / rank_power.RANK_EFFICIENCY > MAX_REPLICATIONS:
        return ReplicationSizing(
            None, None, f"|d| = {size:.3g} needs more than {MAX_REPLICATIONS:,} replications", None
        )
    reach = _smallest_reaching_n(alpha, paired)
    n = max(t_n, reach)
    exact_end = inference.EXACT_MAX_PAIRS if paired else inference.EXACT_MAX_POOLED // 2
    while n <= exact_end and rank_power_at(n) < power:
        n += 1
    if n > exact_end:
        # Past the exact tests the power grows smoothly with n: bracket, then bisect.
        lo, hi = n - 1, n
        while rank_power_at(hi) < power:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if rank_power_at(mid) >= power:
                hi = mid
            else:
                lo = mid
        n = hi
    note = None
    if reach > t_n and n == reach:
        note = (
            f"the t-test needs {t_n}; the {RankDesign(n, n, paired).test_name} needs {reach} "
            f"{'pairs' if paired else 'values per group'} to reach p < {alpha:.3g} at all"
        )
    if n > rank_power.SIMULATION_LIMIT:
        note = (
            f"beyond {rank_power.SIMULATION_LIMIT} replications the power is the t-test's at "
            "n times 3/π, the rank test's efficiency against normal shifts"
        )
    return ReplicationSizing(n, rank_power_at(n), note, RankDesign(n, n, paired).test_name)


def required_replications(
    d: float | None,
    alpha: float,
    power: float = DEFAULT_POWER,
    *,
    paired: bool = False,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> tuple[int | None, str | None]:
    """(replications per condition, note): `size_replications` without the stated power."""
    sized = size_replications(d, alpha, power, paired=paired, seed=seed, draws=draws)
    return sized.replications, sized.note


def paired_effect(d: float, correlation: float = 0.0) -> float:
    """δ, in SDs of the paired differences, of a pooled-SD effect d when base and condition
    replications correlate with `correlation` ρ: d / sqrt(2 (1 - ρ))."""
    if not -1.0 <= correlation < 1.0:
        raise ValueError(f"the pairing correlation must lie in [-1, 1), got {correlation!r}")
    return d / math.sqrt(2.0 * (1.0 - correlation))


def recommend_replications(
    pilot_tests: Mapping[str, Sequence[Mapping[str, Any]]],
    effect: float | None = None,
    power: float = DEFAULT_POWER,
    alpha: float = DEFAULT_ALPHA,
    m: int | None = None,
    *,
    paired: bool = False,
    correlation: float = 0.0,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> dict[str, list[dict[str, Any]]]:
    """Per metric and condition, the replications per condition the audit's rank test needs to
    detect the pilot's observed |d| (or `effect`, when given) with `power` at α/m, the
    conservative end of Holm's thresholds over the decision family.

    Args:
        pilot_tests: audit.json `tests` rows (`condition`, `nBase`, `nCond`, `cohenD`, and
            `identicalToBase` when the caller knows it).
        effect: a pooled-SD |d| for every row instead of the pilot's.
        power: the power to reach.
        alpha: the family-wise α, split over the family (α/m).
        m: the size of the decision family the full plan tests; by default the rows of all
            metrics not identical to their base.
        paired: size the paired test (the plan pairs its replications): the pooled |d| becomes
            δ = |d| / sqrt(2 (1 - `correlation`)) in SDs of the differences.
        correlation: the pairing correlation ρ assumed for that conversion; 0 (the default)
            asks for more replications than needed whenever pairing helps.
        seed, draws: the simulations' seed and size (`rank_test_power`).

    Returns:
        metric → entries (`condition`, `nBase`, `nCond`, `pilotD`, `effect` (pooled |d|),
        `paired`, `pairedEffect` (δ, paired only), `alpha`, `replications`, `power` (the
        test's power at that n), `test`, `note`). Rows identical to their base are listed
        with a note and no number.

    Raises:
        ValueError: an α or power no sizing can use, an effect that is not a positive finite
            |d|, or an `m` below 1.
    """
    _check_levels(alpha, power)
    if effect is not None and not (math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect must be a positive finite |d|, got {effect!r}")
    if m is not None and m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    family = m
    if family is None:
        family = sum(
            1 for rows in pilot_tests.values() for r in rows if not r.get("identicalToBase")
        )
    row_alpha = alpha / max(family, 1)
    out: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in pilot_tests.items():
        entries = []
        for row in rows:
            raw_d = parse_number(row.get("cohenD"))
            pilot_d = float(raw_d) if isinstance(raw_d, (int, float)) else None
            entry: dict[str, Any] = {
                "condition": row["condition"],
                "nBase": _count(row, "nBase"),
                "nCond": _count(row, "nCond"),
                "pilotD": pilot_d,
                "effect": None,
                "paired": paired,
                "pairedEffect": None,
                "alpha": None,
                "replications": None,
                "power": None,
                "test": None,
                "note": None,
            }
            if row.get("identicalToBase"):
                entry["note"] = IDENTICAL_NOTE
            elif effect is None and pilot_d is None:
                reason = row.get("note") if isinstance(row.get("note"), str) else None
                entry["note"] = (reason or "no effect size in the pilot") + (
                    "; give the smallest effect of interest to size this row"
                )
            else:
                size = effect if effect is not None else abs(pilot_d if pilot_d is not None else 0)
                tested = paired_effect(size, correlation) if paired else size
                sized = _sized(tested, row_alpha, power, paired, seed, draws)
                entry.update(
                    effect=size,
                    pairedEffect=tested if paired else None,
                    alpha=row_alpha,
                    replications=sized.replications,
                    power=sized.power,
                    test=sized.test,
                    note=sized.note,
                )
            entries.append(entry)
        out[metric] = entries
    return out


@lru_cache(maxsize=512)
def _sized(
    d: float, alpha: float, power: float, paired: bool, seed: int, draws: int
) -> ReplicationSizing:
    # Pilot rows often share an effect (an --effect for all of them): size each once.
    return size_replications(d, alpha, power, paired=paired, seed=seed, draws=draws)


def plan_recommendation(
    recommendations: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, Any] | None:
    """The plan-level number: the largest recommendation over every row that has one.

    Args:
        recommendations: metric → rows, as `recommend_replications` returns them.

    Returns:
        The replications, with the metric, condition, |d| and α that drive them, the test and
        its power there (the first such row on ties); None when no row has a number.
    """
    best: dict[str, Any] | None = None
    for metric, rows in recommendations.items():
        for row in rows:
            n = row.get("replications")
            if n is None:
                continue
            if best is None or n > best["replications"]:
                best = {
                    "replications": n,
                    "metric": metric,
                    "condition": row["condition"],
                    "effect": row["effect"],
                    "alpha": row["alpha"],
                    "paired": row.get("paired", False),
                    "power": row.get("power"),
                    "test": row.get("test"),
                }
    return best


def simulation_seed(plan_hash: str) -> int:
    """The seed of a plan's power simulations, so the same plan states the same power.

    Args:
        plan_hash: the plan's hash.

    Returns:
        The first 16 bytes of a sha256 of the plan hash in its own namespace (never the clock).
    """
    digest = hashlib.sha256(f"power\x1f{plan_hash}".encode()).digest()
    return int.from_bytes(digest[:16], "big")


def varies_seed(target: str) -> bool:
    """Whether an axis on `target` gives conditions different seeds, which breaks the pairing
    of base and condition replications by their shared seed path.

    Args:
        target: an axis' target (a dotted path of the scenario).

    Returns:
        True for `seed` and the paths under it.
    """
    return target == "seed" or target.startswith("seed.")
