"""Tests and intervals that decide a condition's conclusion against its base (SPEC §6a).

Exact rank tests with ties (unpaired and paired), intervals of the mean difference and an
equivalence test, all of *condition − base*. Pure: samples in, a result out; the only randomness is
a bootstrap generator built from an integer `seed` argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

from .stats import BOOTSTRAP_DRAWS, FloatArray, Sample, _center, _is_constant, _spread, finite

IntArray: TypeAlias = npt.NDArray[np.int64]

# Exact null distributions up to these sizes. Their counts (at most C(60, 30) ≈ 1.2e17 subsets,
# or 2**60 sign patterns) stay exact in 64-bit integers, so the exact p-values are exact
# fractions rounded once; 60 covers 30 replications against 30. Beyond it the normal
# approximation is within about 0.001 of the exact p near the usual α's.
EXACT_MAX_POOLED = 60
EXACT_MAX_PAIRS = 60

# Values (and paired differences) that agree to this fraction of their magnitude are ties, and
# such a difference is zero: rounding in how a metric was computed (0.3 − 0.1 against 0.4 − 0.2,
# which differ by 1e-16) must not decide ranks, while a real difference of a near-constant
# metric (1e-7 of its size) still counts.
TIE_RTOL = 1e-12

RANK_SUM_EXACT = "exact permutation, rank sum with midranks"
RANK_SUM_NORMAL = "normal approximation, rank sum"
SIGNED_RANK_EXACT = "exact sign-flip, signed rank with midranks"
SIGNED_RANK_NORMAL = "normal approximation, signed rank"
TOST_WELCH = "two one-sided Welch t-tests"
TOST_PAIRED = "two one-sided paired t-tests"
TOST_NO_SPREAD = "two one-sided tests, exact without spread"

WELCH_T = "Welch t interval"
PAIRED_T = "paired t interval"
PERCENTILE = "percentile bootstrap"
BCA = "BCa bootstrap"
EXPANDED_PERCENTILE = "expanded percentile bootstrap"
NO_SPREAD = "exact, no spread"

PAIRED_BOOTSTRAP_METHODS = (EXPANDED_PERCENTILE, PERCENTILE, BCA)
UNPAIRED_METHODS = (WELCH_T, BCA, PERCENTILE)


@dataclass(frozen=True)
class TestResult:
    """One test of a condition against its base.

    `p` is two-sided for the rank tests and the larger one-sided p for the equivalence test;
    `method` is one of this module's method names; `statistic` is the rank sum W of the
    condition (rank sum), S = Σ sign(d)·rank(|d|) (signed rank) or the mean difference
    (equivalence). For a paired test `n_base` and `n_cond` are both the number of pairs with a
    finite value on each side.
    """

    p: float
    method: str
    statistic: float
    paired: bool
    n_base: int
    n_cond: int


@dataclass(frozen=True)
class Interval:
    """An interval [lo, hi] of mean(cond) − mean(base) and the method that gave it."""

    lo: float
    hi: float
    method: str


# ------------------------------------------------------------------------------ rank machinery


def _doubled_midranks(values: FloatArray, tolerance: FloatArray) -> IntArray:
    """Twice the midranks of `values`, as integers; neighbours closer than their tolerance tie."""
    n = values.size
    order = np.argsort(values, kind="stable")
    ordered, slack = values[order], tolerance[order]
    new_block = np.diff(ordered) > np.maximum(slack[1:], slack[:-1])
    starts = np.flatnonzero(np.concatenate(([True], new_block)))
    ends = np.append(starts[1:], n)
    # Positions start+1 … end share the midrank (start + 1 + end) / 2: doubled, an integer.
    doubled = np.empty(n, dtype=np.int64)
    doubled[order] = np.repeat(starts + 1 + ends, ends - starts)
    return doubled


def subset_sum_counts(weights: IntArray, size: int | None = None) -> IntArray:
    """counts[s]: how many subsets of `weights` (non-negative integers) sum to s, for s up to
    their total; only `size`-element ones when given. Exact in int64 up to 62 weights. The
    power simulations (`rank_power`) count their critical regions with it too.

    Each step adds one weight to the subsets counted so far; the right-hand sides are built
    before the assignment, so a weight joins a subset at most once.
    """
    total = int(weights.sum())
    if size is None:
        counts = np.zeros(total + 1, dtype=np.int64)
        counts[0] = 1
        for weight in weights.tolist():
            counts[weight:] = counts[weight:] + counts[: total + 1 - weight]
        return counts
    # by_size[k, s]: k-element subsets summing to s. Rows that can no longer reach `size` with
    # the weights still to come are left behind; with the weights in ascending order, no sum
    # so far exceeds that of the largest `size` of them, which bounds the columns.
    ordered = np.sort(weights).tolist()
    by_size = np.zeros((size + 1, total + 1), dtype=np.int64)
    by_size[0, 0] = 1
    for seen, weight in enumerate(ordered):
        low, top = max(1, size - (len(ordered) - seen - 1)), min(seen + 1, size)
        reach = sum(ordered[seen + 1 - top : seen + 1]) + 1
        by_size[low : top + 1, weight:reach] = (
            by_size[low : top + 1, weight:reach] + by_size[low - 1 : top, : reach - weight]
        )
    row: IntArray = by_size[size]
    return row


def _exact_share(counts: IntArray, centre: int, observed: int) -> float:
    """P(|s − centre| ≥ |observed − centre|) for sums s with these counts; integers throughout,
    so sums at the same distance from the centre count as equal without a tolerance."""
    sums = np.arange(counts.size)
    extreme = np.abs(sums - centre) >= abs(observed - centre)
    return int(counts[extreme].sum()) / int(counts.sum())


def _normal_p(deviation: float, variance: float, correction: float) -> float:
    """Two-sided normal p of |statistic − mean| with a continuity correction, capped at 1."""
    z = max(abs(deviation) - correction, 0.0) / math.sqrt(variance)
    return min(1.0, 2.0 * float(_scipy_stats.norm.sf(z)))


def _pairs(base: Sample, cond: Sample) -> tuple[FloatArray, FloatArray]:
    """The pairs (base[i], cond[i]) with a finite value in both members."""
    b = np.asarray(base, dtype=np.float64)
    c = np.asarray(cond, dtype=np.float64)
    if b.ndim != 1 or b.shape != c.shape:
        raise ValueError(f"paired samples need one equal length, got {b.shape} and {c.shape}")
    keep = np.isfinite(b) & np.isfinite(c)
    return b[keep], c[keep]


def _rounding(b: FloatArray, c: FloatArray) -> FloatArray:
    """How far cond − base may be off from rounding in the values it was computed from."""
    scale: FloatArray = TIE_RTOL * np.maximum(np.abs(b), np.abs(c))
    return scale


def _no_spread(d: FloatArray, slack: FloatArray) -> bool:
    return bool(float(d.max() - d.min()) <= float(slack.max()))


# ----------------------------------------------------------------------------------- rank tests


class RankSumNull:
    """The permutation null of the rank-sum test for one pooled sample and one condition size.

    Every split of the same pooled values into groups of these sizes shares it, so a caller
    testing many splits (the A/A noise floor) counts it once. Ties get midranks (values within
    `TIE_RTOL` of their magnitude tie). Up to `EXACT_MAX_POOLED` pooled values the counts of all
    C(N, n_c) rearrangements are exact (doubled midranks are integers, counted by subset sums);
    beyond, the normal approximation with the permutation (tie-corrected) variance and a 0.5
    continuity correction. All values equal: p = 1.
    """

    def __init__(self, pooled: Sample, n_cond: int) -> None:
        values = np.asarray(pooled, dtype=np.float64)
        size = int(values.size)
        if values.ndim != 1 or not np.all(np.isfinite(values)):
            raise ValueError("the pooled sample must be one-dimensional and finite")
        if not 1 <= n_cond < size:
            raise ValueError(f"the condition needs 1 to {size - 1} of {size} values, got {n_cond}")
        self.n_cond = n_cond
        self.exact = size <= EXACT_MAX_POOLED
        self.method = RANK_SUM_EXACT if self.exact else RANK_SUM_NORMAL
        self.doubled_ranks = _doubled_midranks(values, TIE_RTOL * np.abs(values))
        self._constant = bool(np.all(self.doubled_ranks == self.doubled_ranks[0]))
        # Twice E[W]: n_c times the mean doubled midrank, N + 1.
        self._centre = n_cond * (size + 1)
        self._tails: IntArray | None = None
        self._variance = 0.0
        if self._constant:
            return
        if self.exact:
            # The smaller group's sum lies as far from its centre as the other group's: count
            # the smaller one's subsets.
            k = min(n_cond, size - n_cond)
            counts = subset_sum_counts(self.doubled_ranks, k)
            distance = np.abs(np.arange(counts.size, dtype=np.int64) - k * (size + 1))
            at_distance = np.zeros(int(distance.max()) + 1, dtype=np.int64)
            np.add.at(at_distance, distance, counts)
            self._tails = np.cumsum(at_distance[::-1])[::-1]
        else:
            ranks = self.doubled_ranks / 2.0
            n_base = size - n_cond
            self._variance = (
                n_base * n_cond / (size * (size - 1.0)) * float(np.sum((ranks - ranks.mean()) ** 2))
            )

    def statistic(self, cond_index: npt.NDArray[np.intp]) -> float:
        """W: the condition group's midrank sum."""
        return int(self.doubled_ranks[cond_index].sum()) / 2.0

    def pvalue(self, cond_index: npt.NDArray[np.intp]) -> float:
        """Two-sided p of the split whose condition group is `cond_index` into the pooled values:
        P(|W − E[W]| ≥ |w − E[W]|)."""
        if self._constant:
            return 1.0
        distance = abs(int(self.doubled_ranks[cond_index].sum()) - self._centre)
        if self._tails is not None:
            # Integers throughout: sums at the same distance count as equal without a tolerance.
            return int(self._tails[distance]) / int(self._tails[0])
        return _normal_p(distance / 2.0, self._variance, 0.5)


def rank_sum_test(base: Sample, cond: Sample) -> TestResult:
    """Two-sided rank-sum (Mann-Whitney) test of the condition against its base, unpaired.

    W is the sum of the condition's midranks in the pooled sample; p comes from `RankSumNull`:
    exact over all equally likely assignments of the pooled values to the groups up to
    `EXACT_MAX_POOLED` pooled values, with ties; beyond, the normal approximation. All pooled
    values equal gives 1.

    Raises:
        ValueError: when either group has no finite value.
    """
    b, c = finite(base), finite(cond)
    if b.size == 0 or c.size == 0:
        raise ValueError(f"both groups need a finite value, got {b.size} and {c.size}")
    null = RankSumNull(np.concatenate([b, c]), int(c.size))
    cond_index = np.arange(b.size, b.size + c.size, dtype=np.intp)
    return TestResult(
        null.pvalue(cond_index),
        null.method,
        null.statistic(cond_index),
        False,
        int(b.size),
        int(c.size),
    )


def signed_rank_test(base: Sample, cond: Sample) -> TestResult:
    """Two-sided Wilcoxon signed-rank test of paired samples (pair i = base[i], cond[i]).

    A pair with a non-finite member is dropped; zero differences d = cond − base are dropped
    and |d| ranked with midranks. S = Σ sign(d)·rank(|d|). Up to `EXACT_MAX_PAIRS` nonzero
    differences, p = P(|S| ≥ |s|) over all sign flips, exact with ties; beyond, the normal
    approximation with variance Σ rank² (tie-corrected) and the usual continuity correction.
    All differences zero gives 1.

    Raises:
        ValueError: when the samples differ in length or no pair is left.
    """
    b, c = _pairs(base, cond)
    if b.size == 0:
        raise ValueError("no pair with a finite value in both members")
    d, slack = c - b, _rounding(b, c)
    nonzero = np.abs(d) > slack
    d, slack = d[nonzero], slack[nonzero]
    exact = d.size <= EXACT_MAX_PAIRS
    method = SIGNED_RANK_EXACT if exact else SIGNED_RANK_NORMAL
    if d.size == 0:
        return TestResult(1.0, method, 0.0, True, int(b.size), int(b.size))
    doubled = _doubled_midranks(np.abs(d), slack)
    centre = int(doubled.sum()) // 2  # n(n + 1) / 2, an integer
    positive = int(doubled[d > 0].sum())
    statistic = float(positive - centre)  # S = Σ⁺ rank − Σ⁻ rank
    if exact:
        p = _exact_share(subset_sum_counts(doubled), centre, positive)
    else:
        # The usual 0.5 on the positive rank sum is 1 on S.
        p = _normal_p(statistic, float(np.sum((doubled / 2.0) ** 2)), 1.0)
    return TestResult(p, method, statistic, True, int(b.size), int(b.size))


def smallest_p(n_base: int, n_cond: int, *, paired: bool) -> float:
    """The smallest two-sided p the rank test can give at these sizes, values all distinct.

    Unpaired: the groups completely separated; paired: min(n_base, n_cond) pairs all moving the
    same way. When it exceeds α, no data of these sizes can reach α. In the exact range ties
    can go lower only between groups of unequal sizes, and to no less than half of it; beyond
    it, the normal approximation overstates such extreme tails.
    """
    if n_base < 1 or n_cond < 1:
        raise ValueError(f"both groups need a value, got {n_base} and {n_cond}")
    if paired:
        n = min(n_base, n_cond)
        return signed_rank_test(np.zeros(n), np.arange(1.0, n + 1.0)).p
    low = np.arange(float(n_base))
    return rank_sum_test(low, np.arange(float(n_base), float(n_base + n_cond))).p


# ------------------------------------------------------------------------------------ intervals


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")


def _check_interval_args(draws: int, level: float, method: str, allowed: tuple[str, ...]) -> None:
    _check_level(level)
    if draws < 1:
        raise ValueError(f"draws must be positive, got {draws}")
    if method not in allowed:
        raise ValueError(f"method must be one of {allowed}, got {method!r}")


def _t_interval(centre: float, se: float, df: float, level: float, method: str) -> Interval:
    q = float(_scipy_stats.t.ppf(0.5 + level / 2.0, df))
    return Interval(centre - q * se, centre + q * se, method)


def _difference_of_means(b: FloatArray, c: FloatArray, axis: int = -1) -> FloatArray:
    diff: FloatArray = np.mean(c, axis=axis) - np.mean(b, axis=axis)
    return diff


def _bootstrap(
    samples: tuple[FloatArray, ...],
    statistic: Callable[..., Any],
    *,
    seed: int,
    draws: int,
    level: float,
    method: str,
) -> Interval:
    kind = "BCa" if method == BCA else "percentile"
    result = _scipy_stats.bootstrap(
        samples,
        statistic,
        n_resamples=draws,
        confidence_level=level,
        method=kind,
        vectorized=True,
        rng=np.random.default_rng(seed),
    )
    ci = result.confidence_interval
    return Interval(float(ci.low), float(ci.high), method)


def _expanded_level(n: int, level: float) -> float:
    """Hesterberg's expanded percentile: the level whose normal tails, widened by √(n/(n−1)),
    match Student's t with n − 1 degrees of freedom; small samples get t-like widths."""
    t = float(_scipy_stats.t.ppf(0.5 + level / 2.0, n - 1))
    return 1.0 - 2.0 * float(_scipy_stats.norm.sf(math.sqrt(n / (n - 1.0)) * t))


def _paired_differences(base: Sample, cond: Sample) -> FloatArray | Interval | None:
    """cond − base over the pairs with both members finite; None for fewer than 2 pairs, and
    the exact interval when the differences have no spread (up to rounding)."""
    b, c = _pairs(base, cond)
    if b.size < 2:
        return None
    d = c - b
    if _no_spread(d, _rounding(b, c)):
        centre = _center(d)
        return Interval(centre, centre, NO_SPREAD)
    return d


def paired_bootstrap_ci(
    base: Sample,
    cond: Sample,
    *,
    seed: int,
    draws: int = BOOTSTRAP_DRAWS,
    level: float = 0.95,
    method: str = EXPANDED_PERCENTILE,
) -> Interval | None:
    """Bootstrap interval of mean(cond − base) over pairs resampled together.

    The default, the expanded percentile bootstrap, covered best of the bootstraps in
    simulation (bench/bench_coverage.py; the plain percentile and BCa fall to about 0.90 at 10
    pairs). No bootstrap covers well at 3 to 5 pairs, where resampled means cannot leave the
    range of the differences; `paired_t_interval` did. Pairs with a non-finite member are
    dropped; fewer than 2 pairs give None; differences without spread (up to rounding) give
    their value exactly.
    """
    _check_interval_args(draws, level, method, PAIRED_BOOTSTRAP_METHODS)
    d = _paired_differences(base, cond)
    if not isinstance(d, np.ndarray):
        return d
    if method == EXPANDED_PERCENTILE:
        level = _expanded_level(d.size, level)
    return _bootstrap((d,), np.mean, seed=seed, draws=draws, level=level, method=method)


def paired_t_interval(base: Sample, cond: Sample, *, level: float = 0.95) -> Interval | None:
    """Student t interval of mean(cond − base) over the pairs (n − 1 degrees of freedom).

    In simulation it covered 0.95 for normal differences from 3 pairs on, and 0.88 to 0.94 for
    skewed ones, more than any paired bootstrap (bench/bench_coverage.py). Pairs with a
    non-finite member are dropped; fewer than 2 pairs give None; differences
    without spread (up to rounding) give their value exactly.
    """
    _check_level(level)
    d = _paired_differences(base, cond)
    if not isinstance(d, np.ndarray):
        return d
    return _t_interval(_center(d), math.sqrt(_spread(d) / d.size), d.size - 1.0, level, PAIRED_T)


def unpaired_interval(
    base: Sample,
    cond: Sample,
    *,
    seed: int,
    draws: int = BOOTSTRAP_DRAWS,
    level: float = 0.95,
    method: str = WELCH_T,
) -> Interval | None:
    """Interval of mean(cond) − mean(base) for independent groups.

    The default, Welch's t interval, covered best in simulation at n = 3 to 30 for normal and
    skewed data (bench/bench_coverage.py); `BCA` and `PERCENTILE` bootstraps resample the groups
    independently with a generator seeded by `seed` (Welch uses no randomness). Fewer than 2
    finite values in a group give None; two constant groups give the exact difference.
    """
    _check_interval_args(draws, level, method, UNPAIRED_METHODS)
    b, c = finite(base), finite(cond)
    if b.size < 2 or c.size < 2:
        return None
    diff = _center(c) - _center(b)
    if _is_constant(b) and _is_constant(c):
        return Interval(diff, diff, NO_SPREAD)
    if method != WELCH_T:
        return _bootstrap(
            (b, c), _difference_of_means, seed=seed, draws=draws, level=level, method=method
        )
    vb, vc = _spread(b) / b.size, _spread(c) / c.size
    # Welch-Satterthwaite; a constant group contributes nothing (one variance is nonzero here).
    df = (vb + vc) ** 2 / (vb**2 / (b.size - 1) + vc**2 / (c.size - 1))
    return _t_interval(diff, math.sqrt(vb + vc), df, level, WELCH_T)


# ---------------------------------------------------------------------------------- equivalence


def equivalence_test(base: Sample, cond: Sample, margin: float, *, paired: bool) -> TestResult:
    """Two one-sided t-tests (TOST) that mean(cond) − mean(base) lies within (−margin, margin).

    `margin` is in the metric's raw units. p is the larger one-sided p: Welch's (unequal
    variances) for independent groups, the paired t-test's over pairs with both members finite.
    Samples without spread (two constant groups; paired differences equal up to rounding) are
    decided exactly: p = 0 when the difference lies strictly inside the margin, 1 otherwise.

    Raises:
        ValueError: for a margin that is not a positive finite number, or fewer than 2 values
            (pairs) in a group.
    """
    if not (math.isfinite(margin) and margin > 0.0):
        raise ValueError(f"margin must be a positive finite number, got {margin}")
    b, c = _pairs(base, cond) if paired else (finite(base), finite(cond))
    if b.size < 2 or c.size < 2:
        raise ValueError(f"each group needs 2 finite values, got {b.size} and {c.size}")
    if paired:
        diff = _center(c - b)
        flat = _no_spread(c - b, _rounding(b, c))
    else:
        diff = _center(c) - _center(b)
        flat = _is_constant(b) and _is_constant(c)
    sizes = (int(b.size), int(c.size))
    if flat:
        return TestResult(0.0 if abs(diff) < margin else 1.0, TOST_NO_SPREAD, diff, paired, *sizes)
    # statsmodels takes over a second to import; only this test needs it.
    from statsmodels.stats.weightstats import ttost_ind, ttost_paired

    if paired:
        p = ttost_paired(c, b, -margin, margin)[0]
    else:
        p = ttost_ind(c, b, -margin, margin, usevar="unequal")[0]
    return TestResult(float(p), TOST_PAIRED if paired else TOST_WELCH, diff, paired, *sizes)
