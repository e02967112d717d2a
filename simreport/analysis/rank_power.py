"""Power of the rank tests the audit decides with (SPEC §6a), for a normal shift, by simulation:
the unpaired rank-sum permutation test and the paired Wilcoxon signed-rank sign-flip test, each
exact up to `inference`'s limits and a normal approximation beyond, as the audit runs them.
Effects are d in pooled SDs (unpaired) or δ in SDs of the paired differences. How:
docs/statistics.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

from .inference import EXACT_MAX_PAIRS, EXACT_MAX_POOLED, subset_sum_counts

POWER_DRAWS = 4000
"""Simulated data sets per power estimate: at power 0.8 the standard error is 0.0063, so a
stated power is within ±0.013 of the test's true power 95 times in 100."""
SIMULATION_LIMIT = 1000
"""Largest n per group that is simulated; beyond it the normal-approximation test's power is
that of the t-test at n times the rank tests' efficiency against normal shifts (3/π)."""
RANK_EFFICIENCY = 3.0 / math.pi
"""Asymptotic relative efficiency of both rank tests to the t-test for normal shifts."""
MDE_TOLERANCE = 1e-3
"""Bisection on the effect stops when the bracket is this narrow (in SD units): well inside
the MDE's Monte Carlo error (about ±0.01 SD at 4,000 draws)."""
BREAKPOINT_SPAN = 5000
"""Designs whose count statistic has at most this many steps (unpaired n_b n_c, paired
n(n + 1)/2) find every α's MDE from the shifts at which each data set's count steps up."""
_BREAKPOINT_CELLS = 2_000_000
"""Step shifts held in memory at once (16 MB)."""

UNPAIRED_TEST = "rank-sum permutation test"
PAIRED_TEST = "Wilcoxon signed-rank sign-flip test"

_LARGEST_EFFECT = 1e6
"""At this shift every simulated data set is completely separated, so the test rejects."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RankDesign:
    """The sizes of one comparison and whether it is paired (pairs: n_base = n_cond = n)."""

    n_base: int
    n_cond: int
    paired: bool = False

    def __post_init__(self) -> None:
        if self.n_base < 1 or self.n_cond < 1:
            raise ValueError(f"both groups need a value, got {self.n_base}, {self.n_cond}")
        if self.paired and self.n_base != self.n_cond:
            raise ValueError(f"a paired design has n pairs, got {self.n_base} and {self.n_cond}")

    @property
    def span(self) -> int:
        """M: the count statistic runs over 0..M."""
        n = self.n_base
        return n * (n + 1) // 2 if self.paired else self.n_base * self.n_cond

    @property
    def exact(self) -> bool:
        """Whether the test that runs on continuous data of these sizes is the exact one."""
        if self.paired:
            return self.n_base <= EXACT_MAX_PAIRS
        return self.n_base + self.n_cond <= EXACT_MAX_POOLED

    @property
    def test_name(self) -> str:
        """The test that runs, exact or not, as a row's `test` names it."""
        return f"{test_kind(self.paired)} ({'exact' if self.exact else 'normal approximation'})"


def test_kind(paired: bool) -> str:
    """The name of the test a comparison runs.

    Args:
        paired: whether the comparison pairs base and condition replications.

    Returns:
        The paired test's name, or the unpaired one's.
    """
    return PAIRED_TEST if paired else UNPAIRED_TEST


# ------------------------------------------------------------------------ null distributions


@lru_cache(maxsize=256)
def _null_counts(design: RankDesign) -> tuple[int, ...]:
    """Exact null counts of the count statistic X = 0..M for distinct values."""
    if design.paired:
        ranks = np.arange(1, design.n_base + 1, dtype=np.int64)
        return tuple(int(c) for c in subset_sum_counts(ranks, None))
    pooled = design.n_base + design.n_cond
    ranks = np.arange(1, pooled + 1, dtype=np.int64)
    by_rank_sum = subset_sum_counts(ranks, design.n_cond)
    lowest = design.n_cond * (design.n_cond + 1) // 2
    return tuple(int(c) for c in by_rank_sum[lowest : lowest + design.span + 1])


def _null_sd(design: RankDesign) -> float:
    """SD of the count statistic under the null, without ties."""
    n = design.n_base
    if design.paired:
        return math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    return math.sqrt(design.n_base * design.n_cond * (design.n_base + design.n_cond + 1) / 12.0)


def _distances(span: int) -> IntArray:
    """The distances |2X - M| the count statistic can take, ascending."""
    return np.arange(span % 2, span + 1, 2, dtype=np.int64)


def distance_pvalues(design: RankDesign) -> tuple[IntArray, FloatArray]:
    """(distances, p): the two-sided p of every distance |2X - M| the statistic can take,
    for distinct values (exact or normal approximation, as the test that runs). The grid has
    M/2 + 1 entries, so it is for designs of moderate size; `critical_distance` and
    `smallest_p` never list it beyond the exact tests."""
    distances = _distances(design.span)
    if design.exact:
        tails = _exact_tails(design)
        return distances, np.array([t / tails[0] for t in tails], dtype=np.float64)
    return distances, _normal_pvalues(design, distances)


def _normal_pvalues(design: RankDesign, distances: IntArray | FloatArray) -> FloatArray:
    """The normal approximation's two-sided p (continuity-corrected) at these distances."""
    z = (distances / 2.0 - 0.5) / _null_sd(design)
    p: FloatArray = np.minimum(2.0 * _scipy_stats.norm.sf(z), 1.0)
    return p


def _normal_pvalue_at(design: RankDesign, distance: int) -> float:
    # As a float, as the grid's integers become in the division: the same p, at any size.
    return float(_normal_pvalues(design, np.array([float(distance)]))[0])


@lru_cache(maxsize=256)
def _exact_tails(design: RankDesign) -> tuple[int, ...]:
    """Null counts of {|2X - M| >= c} for each distance c of `_distances`, as exact integers
    (the first is the number of rearrangements)."""
    span = design.span
    at = [0] * (span // 2 + 1)
    for x, count in enumerate(_null_counts(design)):
        at[abs(2 * x - span) // 2] += count
    return tuple(reversed(list(itertools.accumulate(reversed(at)))))


@lru_cache(maxsize=1024)
def critical_distance(design: RankDesign, alpha: float) -> int | None:
    """The smallest distance |2X - M| whose p is below `alpha`: the test rejects exactly when
    the statistic is at least this far from its centre. None when no data of these sizes
    (with distinct values) reach p < alpha. Exact p values are compared with alpha as
    fractions, so a p equal to alpha never rejects through rounding. Beyond the exact tests
    the p falls as the distance grows, so the distance is found by bisection on the grid of
    distances, which is never listed (M/2 + 1 of them: billions at tens of thousands of
    values per group)."""
    if design.exact:
        distances, _ = distance_pvalues(design)
        tails = _exact_tails(design)
        level = Fraction(alpha)
        for c, tail in zip(distances.tolist(), tails, strict=True):
            if tail * level.denominator < level.numerator * tails[0]:
                return int(c)
        return None
    span = design.span
    if not _normal_pvalue_at(design, span) < alpha:
        return None
    # Grid index i is the distance span % 2 + 2 i; the last index, span // 2, is span itself.
    lo, hi = 0, span // 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _normal_pvalue_at(design, span % 2 + 2 * mid) < alpha:
            hi = mid
        else:
            lo = mid + 1
    return span % 2 + 2 * lo


def smallest_p(design: RankDesign) -> float:
    """The smallest two-sided p the test reaches with distinct values: complete separation
    (unpaired) or differences all of one sign (paired)."""
    if design.exact:
        _, p = distance_pvalues(design)
        return float(p[-1])
    return _normal_pvalue_at(design, design.span)


# ------------------------------------------------------------------------------- simulation


@lru_cache(maxsize=4)
def _noise(design: RankDesign, seed: int, draws: int) -> FloatArray:
    """Standard normal draws shared by every effect and α at these sizes (common random
    numbers): `draws` rows of n_base + n_cond values (paired: n differences)."""
    # Up to 64 MB each at the simulation limit; a sizing search visits a new n at every step,
    # so only the last few are kept (a search that needs one again draws it again, identically).
    width = design.n_base if design.paired else design.n_base + design.n_cond
    material = [seed, int(design.paired), design.n_base, design.n_cond, draws]
    rng = np.random.default_rng(np.random.SeedSequence(material))
    noise = rng.standard_normal((draws, width))
    noise.flags.writeable = False
    return noise


def _row_ranks(values: FloatArray) -> IntArray:
    """Ranks 1..k of each row (normal draws have no ties)."""
    order = np.argsort(values, axis=1, kind="stable")
    ranks = np.empty_like(order)
    rows = np.arange(values.shape[0])[:, None]
    ranks[rows, order] = np.arange(1, values.shape[1] + 1)
    return ranks.astype(np.int64)


def count_statistics(design: RankDesign, effect: float, noise: FloatArray) -> IntArray:
    """The count statistic X of each simulated data set at this effect."""
    if design.paired:
        diffs = noise + effect
        ranks = _row_ranks(np.abs(diffs))
        positive: IntArray = np.where(diffs > 0.0, ranks, 0).sum(axis=1).astype(np.int64)
        return positive
    shifted = noise.copy()
    shifted[:, design.n_base :] += effect
    ranks = _row_ranks(shifted)
    rank_sum = ranks[:, design.n_base :].sum(axis=1)
    count: IntArray = (rank_sum - design.n_cond * (design.n_cond + 1) // 2).astype(np.int64)
    return count


def simulated_power(
    design: RankDesign, effect: float, alpha: float, *, seed: int, draws: int = POWER_DRAWS
) -> float | None:
    """Share of `draws` normal data sets shifted by `effect` on which the test rejects at
    `alpha`; None when it cannot reject at these sizes. Seeded by `seed` and the design only."""
    critical = critical_distance(design, alpha)
    if critical is None:
        return None
    x = count_statistics(design, effect, _noise(design, seed, draws))
    return float(np.mean(np.abs(2 * x - design.span) >= critical))


def simulated_mdes(
    design: RankDesign,
    alphas: Iterable[float],
    power: float,
    *,
    seed: int,
    draws: int = POWER_DRAWS,
) -> dict[float, float | None]:
    """For each α, the smallest effect at which `simulated_power` reaches `power` over one set
    of draws (common random numbers): None where the test cannot reject at these sizes.

    Each data set's count statistic only grows with the effect, so its upper-tail rejection
    starts at one shift, the k-th of the shifts at which its count steps up (k = (M + c) / 2 for
    the critical distance c); the MDE is the `power` quantile of those shifts over the data
    sets, exact for the simulated power curve. Designs with more than `BREAKPOINT_SPAN` steps
    bisect on the effect instead (to `MDE_TOLERANCE`, from the normal approximation). Both leave out
    the lower tail (a positive shift rejecting for a negative one), which only adds power and is
    negligible at the MDE.
    """
    critical = {alpha: critical_distance(design, alpha) for alpha in alphas}
    out: dict[float, float | None] = {alpha: None for alpha in critical}
    steps = {alpha: (design.span + c) // 2 for alpha, c in critical.items() if c is not None}
    if not steps:
        return out
    needed = max(1, math.ceil(power * draws - 1e-9))
    if design.span <= BREAKPOINT_SPAN:
        shifts = _kth_shifts(design, sorted(set(steps.values())), seed, draws)
        for alpha, k in steps.items():
            at = float(np.partition(shifts[k], needed - 1)[needed - 1])
            # Just past the shift where the `needed`-th data set starts to reject.
            out[alpha] = max(at, 0.0) + 1e-12 * max(1.0, abs(at))
        return out
    for alpha in steps:
        out[alpha] = _bisected_mde(design, alpha, power, seed=seed, draws=draws)
    return out


def _kth_shifts(design: RankDesign, ks: list[int], seed: int, draws: int) -> dict[int, FloatArray]:
    """For each k, the shift at which each simulated data set's count statistic reaches k:
    the k-th smallest of its step shifts (unpaired: the differences base_i - cond_j; paired:
    the negated Walsh averages -(z_i + z_j) / 2, i <= j)."""
    noise = _noise(design, seed, draws)
    chunk = max(1, _BREAKPOINT_CELLS // design.span)
    found: dict[int, list[FloatArray]] = {k: [] for k in ks}
    if design.paired:
        first, second = np.triu_indices(design.n_base)
    for start in range(0, draws, chunk):
        rows = noise[start : start + chunk]
        if design.paired:
            steps = -(rows[:, first] + rows[:, second]) / 2.0
        else:
            base, cond = rows[:, : design.n_base], rows[:, design.n_base :]
            steps = (base[:, :, None] - cond[:, None, :]).reshape(rows.shape[0], -1)
        ordered = np.partition(steps, [k - 1 for k in ks], axis=1)
        for k in ks:
            found[k].append(ordered[:, k - 1])
    return {k: np.concatenate(parts) for k, parts in found.items()}


def _bisected_mde(
    design: RankDesign,
    alpha: float,
    power: float,
    *,
    seed: int,
    draws: int,
) -> float:
    """The smallest effect at which `simulated_power` reaches `power`, by bisection on the
    effect over one set of draws, bracketed around the normal approximation's MDE at the rank
    tests' efficiency (3/π)."""

    def reaches(effect: float) -> bool:
        value = simulated_power(design, effect, alpha, seed=seed, draws=draws)
        return value is not None and value >= power

    z = float(_scipy_stats.norm.isf(alpha / 2.0) + _scipy_stats.norm.isf(1.0 - power))
    if design.paired:
        guess = z / math.sqrt(design.n_base * RANK_EFFICIENCY)
    else:
        guess = z * math.sqrt((1 / design.n_base + 1 / design.n_cond) / RANK_EFFICIENCY)
    lo, hi = 0.9 * guess, 1.1 * guess
    while not reaches(hi):
        if hi > _LARGEST_EFFECT:  # pragma: no cover - separated data always reject
            raise AssertionError("the simulated power never reached its target")
        lo, hi = hi, hi * 2.0
    while reaches(lo):
        lo, hi = lo / 2.0, lo
    while hi - lo > MDE_TOLERANCE:
        mid = (lo + hi) / 2.0
        if reaches(mid):
            hi = mid
        else:
            lo = mid
    return hi
