"""The conclusion statistics (exact rank tests with ties, intervals, TOST) against brute-force
enumeration, scipy and statsmodels, and by simulation for coverage and size."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from simreport.analysis import inference as inf

# --- brute-force references --------------------------------------------------------------------


def enumerated_rank_sum_p(base: list[float], cond: list[float]) -> float:
    """Two-sided p over every assignment of the pooled midranks to the condition's positions."""
    pooled = base + cond
    ranks = scipy_stats.rankdata(pooled)
    n, m = len(pooled), len(cond)
    expected = m * (n + 1) / 2
    observed = abs(sum(ranks[len(base) :]) - expected)
    subsets = list(itertools.combinations(ranks, m))
    extreme = sum(1 for s in subsets if abs(sum(s) - expected) >= observed - 1e-9)
    return extreme / len(subsets)


def enumerated_signed_rank_p(base: list[float], cond: list[float]) -> float:
    """Two-sided p over all 2**n sign flips of the nonzero differences' midranks."""
    d = [c - b for b, c in zip(base, cond, strict=True) if c != b]
    if not d:
        return 1.0
    ranks = scipy_stats.rankdata([abs(v) for v in d])
    observed = abs(sum(math.copysign(r, v) for r, v in zip(ranks, d, strict=True)))
    flips = list(itertools.product((-1.0, 1.0), repeat=len(d)))
    extreme = sum(
        1
        for s in flips
        if abs(sum(x * r for x, r in zip(s, ranks, strict=True))) >= observed - 1e-9
    )
    return extreme / len(flips)


small_ints = st.lists(st.integers(0, 5).map(float), min_size=1, max_size=6)
pairs = st.lists(st.tuples(st.integers(-4, 4), st.integers(-4, 4)), min_size=1, max_size=10)


# --- rank-sum test (unpaired) ------------------------------------------------------------------


def test_rank_sum_counts_ties_by_full_permutation() -> None:
    """The example in the statistics notes: scipy's exact Mann-Whitney ignores the ties (0.2);
    the permutation distribution of the midrank sum gives 0.3."""
    result = inf.rank_sum_test([1, 2, 2], [2, 3, 4])
    assert result.p == pytest.approx(0.3, abs=1e-15)
    assert result.method == inf.RANK_SUM_EXACT
    assert result.statistic == 14.0  # midranks 3 + 5 + 6
    assert (result.paired, result.n_base, result.n_cond) == (False, 3, 3)
    ignoring_ties = scipy_stats.mannwhitneyu([1, 2, 2], [2, 3, 4], method="exact").pvalue
    assert ignoring_ties == pytest.approx(0.2)


def test_rank_sum_of_two_constant_groups_of_three() -> None:
    assert inf.rank_sum_test([0, 0, 0], [1, 1, 1]).p == pytest.approx(0.1, abs=1e-15)


@pytest.mark.parametrize("seed", range(40))
def test_rank_sum_matches_enumeration_on_random_small_samples(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_base, n_cond = rng.integers(1, 8, size=2)
    # Few distinct values for half of the cases (many ties), continuous for the rest.
    if seed % 2:
        base, cond = rng.integers(0, 4, n_base) * 1.0, rng.integers(0, 4, n_cond) * 1.0
    else:
        base, cond = rng.normal(size=n_base), rng.normal(size=n_cond)
    expected = enumerated_rank_sum_p(base.tolist(), cond.tolist())
    assert inf.rank_sum_test(base, cond).p == pytest.approx(expected, rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(small_ints, small_ints)
def test_rank_sum_properties(base: list[float], cond: list[float]) -> None:
    """Matches enumeration; p in (0, 1]; symmetric in the groups; invariant under a strictly
    increasing transform of all values."""
    p = inf.rank_sum_test(base, cond).p
    assert p == pytest.approx(enumerated_rank_sum_p(base, cond), rel=1e-12)
    assert 0.0 < p <= 1.0
    assert inf.rank_sum_test(cond, base).p == pytest.approx(p, rel=1e-12)

    def grow(values: list[float]) -> list[float]:
        return [3.0 * v**3 + math.exp(v) - 7.0 for v in values]

    assert inf.rank_sum_test(grow(base), grow(cond)).p == pytest.approx(p, rel=1e-12)
    assert inf.rank_sum_test(base, base).p == 1.0


def test_rank_sum_drops_non_finite_values_and_needs_a_value_in_each_group() -> None:
    clean = inf.rank_sum_test([1, 2, 2], [2, 3, 4])
    noisy = inf.rank_sum_test([1, math.nan, 2, 2], [2, math.inf, 3, -math.inf, 4])
    assert noisy == clean
    with pytest.raises(ValueError, match="finite value"):
        inf.rank_sum_test([math.nan], [1.0])


def test_rank_sum_of_identical_values_is_one_at_any_size() -> None:
    assert inf.rank_sum_test([2.0] * 3, [2.0] * 4).p == 1.0
    large = inf.rank_sum_test([2.0] * 40, [2.0] * 40)
    assert (large.p, large.method) == (1.0, inf.RANK_SUM_NORMAL)


def test_rank_sum_switches_to_the_normal_approximation_beyond_the_limit() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(0, 10, 31).astype(float)
    at_limit = inf.rank_sum_test(base[:30], rng.integers(0, 10, inf.EXACT_MAX_POOLED - 30) + 0.5)
    assert at_limit.method == inf.RANK_SUM_EXACT
    cond = rng.integers(2, 12, inf.EXACT_MAX_POOLED - 30).astype(float)
    beyond = inf.rank_sum_test(base, cond)
    assert beyond.method == inf.RANK_SUM_NORMAL
    # The approximation is scipy's tie-corrected one with a 0.5 continuity correction.
    reference = scipy_stats.mannwhitneyu(cond, base, method="asymptotic", use_continuity=True)
    assert beyond.p == pytest.approx(float(reference.pvalue), rel=1e-9)
    # At the limit both ways agree closely where decisions are made.
    exact = inf.rank_sum_test(base[:30], cond)
    assert exact.method == inf.RANK_SUM_EXACT
    approx = scipy_stats.mannwhitneyu(cond, base[:30], method="asymptotic").pvalue
    assert exact.p == pytest.approx(float(approx), abs=0.005)


def test_complete_separation_gets_smaller_with_more_values() -> None:
    p7 = inf.rank_sum_test(range(7), range(7, 14)).p
    p8 = inf.rank_sum_test(range(8), range(8, 16)).p
    assert p8 < p7
    assert p7 == pytest.approx(2 / math.comb(14, 7)) and p8 == pytest.approx(2 / math.comb(16, 8))


# --- signed-rank test (paired) -----------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(pairs, st.floats(0.01, 100.0), st.floats(-1000.0, 1000.0))
def test_signed_rank_properties(values: list[tuple[int, int]], scale: float, shift: float) -> None:
    """Matches enumeration; p in (0, 1]; unchanged when the condition and base swap (the
    differences negate) and under an increasing affine map of both samples (the ranks of |d|
    stay; a nonlinear map may reorder them, so the signed-rank test is not invariant to it)."""
    base = [float(b) for b, _ in values]
    cond = [float(c) for _, c in values]
    p = inf.signed_rank_test(base, cond).p
    assert p == pytest.approx(enumerated_signed_rank_p(base, cond), rel=1e-12)
    assert 0.0 < p <= 1.0
    assert inf.signed_rank_test(cond, base).p == pytest.approx(p, rel=1e-12)
    moved = inf.signed_rank_test(
        [scale * v + shift for v in base], [scale * v + shift for v in cond]
    )
    assert moved.p == pytest.approx(p, rel=1e-12)
    assert inf.signed_rank_test(base, base).p == 1.0


@pytest.mark.parametrize("seed", range(30))
def test_signed_rank_matches_enumeration_on_random_small_samples(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 13))
    if seed % 2:  # whole numbers: tied and zero differences
        base = rng.integers(0, 5, n).astype(float)
        cond = base + rng.integers(-2, 3, n)
    else:
        base = rng.normal(size=n)
        cond = base + rng.normal(0.3, 1.0, n)
    result = inf.signed_rank_test(base, cond)
    assert result.method == inf.SIGNED_RANK_EXACT
    expected = enumerated_signed_rank_p(base.tolist(), cond.tolist())
    assert result.p == pytest.approx(expected, rel=1e-12)


def test_signed_rank_statistic_and_sizes() -> None:
    result = inf.signed_rank_test([0, 0, 0, 0, math.nan], [1, 2, -3, 4, 1])
    # Ranks 1, 2, 3, 4 with signs + + − +: S = 1 + 2 − 3 + 4.
    assert result.statistic == 4.0
    assert (result.paired, result.n_base, result.n_cond) == (True, 4, 4)
    assert result.p == pytest.approx(enumerated_signed_rank_p([0, 0, 0, 0], [1, 2, -3, 4]))


def test_signed_rank_ties_and_zeros_up_to_rounding() -> None:
    """Differences computed from different values that agree up to rounding tie, and one that is
    zero up to rounding is dropped: the ranks do not depend on floating-point noise."""
    base, cond = [0.1, 1.1, 2.0, 0.3], [0.3, 1.3, 1.8, 0.1 + 0.2]
    assert len({abs(c - b) for b, c in zip(base[:3], cond[:3], strict=True)}) > 1
    result = inf.signed_rank_test(base, cond)
    assert result == inf.signed_rank_test([0, 0, 0, 0], [2, 2, -2, 0])
    assert result.p == 1.0


def test_signed_rank_of_all_zero_differences_is_one() -> None:
    result = inf.signed_rank_test([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    assert (result.p, result.statistic) == (1.0, 0.0)


def test_signed_rank_refuses_unequal_lengths_and_no_pairs() -> None:
    with pytest.raises(ValueError, match="equal length"):
        inf.signed_rank_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no pair"):
        inf.signed_rank_test([math.nan, 1.0], [1.0, math.inf])


def test_signed_rank_switches_to_the_normal_approximation_beyond_the_limit() -> None:
    rng = np.random.default_rng(11)
    n = inf.EXACT_MAX_PAIRS + 1
    base = rng.normal(size=n + 5)
    # Whole-number shifts: many tied differences; five pairs unchanged.
    shifts = np.concatenate([rng.choice([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 4.0], n), np.zeros(5)])
    cond = base + shifts
    result = inf.signed_rank_test(base, cond)
    assert result.method == inf.SIGNED_RANK_NORMAL
    # scipy's approximation: zeros dropped, tie-corrected variance, continuity correction.
    reference = scipy_stats.wilcoxon(shifts, zero_method="wilcox", correction=True, method="approx")
    assert result.p == pytest.approx(float(reference.pvalue), rel=1e-9)
    # The same pairs, one fewer nonzero difference: exact, and close to the approximation.
    exact = inf.signed_rank_test(base[1:], cond[1:])
    assert exact.method == inf.SIGNED_RANK_EXACT
    approx = scipy_stats.wilcoxon(shifts[1:], correction=True, method="approx").pvalue
    assert exact.p == pytest.approx(float(approx), abs=0.005)


# --- smallest p --------------------------------------------------------------------------------


@pytest.mark.parametrize("n_base, n_cond", [(1, 1), (2, 3), (3, 3), (5, 8), (30, 30)])
def test_smallest_p_is_that_of_complete_separation(n_base: int, n_cond: int) -> None:
    assert inf.smallest_p(n_base, n_cond, paired=False) == pytest.approx(
        min(1.0, 2 / math.comb(n_base + n_cond, n_cond)), rel=1e-12
    )
    n = min(n_base, n_cond)
    assert inf.smallest_p(n_base, n_cond, paired=True) == pytest.approx(
        min(1.0, 2 / 2**n), rel=1e-12
    )


def test_smallest_p_decreases_with_size_on_each_side_of_the_exact_limit() -> None:
    """Within the exact range and within the normal one; across the limit the approximation
    overstates tails as small as 1e-17, which no α comes near."""
    for paired, limit in ((False, inf.EXACT_MAX_POOLED // 2), (True, inf.EXACT_MAX_PAIRS)):
        exact = [inf.smallest_p(n, n, paired=paired) for n in range(2, limit + 1)]
        normal = [inf.smallest_p(n, n, paired=paired) for n in range(limit + 1, limit + 6)]
        for run in (exact, normal):
            assert all(a > b for a, b in itertools.pairwise(run))
    with pytest.raises(ValueError):
        inf.smallest_p(0, 3, paired=False)


# --- intervals ---------------------------------------------------------------------------------

SAMPLE_BASE = [4.1, 5.0, 3.2, 6.8, 5.5, 4.9, 6.1]
SAMPLE_COND = [5.0, 6.2, 3.9, 8.1, 5.4, 6.3, 7.9]


def test_welch_and_paired_t_intervals_match_scipy() -> None:
    welch = inf.unpaired_interval(SAMPLE_BASE, SAMPLE_COND, seed=0)
    reference = scipy_stats.ttest_ind(SAMPLE_COND, SAMPLE_BASE, equal_var=False)
    assert welch is not None and welch.method == inf.WELCH_T
    ci = reference.confidence_interval(0.95)
    assert (welch.lo, welch.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)
    paired = inf.paired_t_interval(SAMPLE_BASE, SAMPLE_COND, level=0.9)
    ci = scipy_stats.ttest_rel(SAMPLE_COND, SAMPLE_BASE).confidence_interval(0.9)
    assert paired is not None and paired.method == inf.PAIRED_T
    assert (paired.lo, paired.hi) == pytest.approx((ci.low, ci.high), rel=1e-12)


def difference_of_means(b: np.ndarray, c: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.asarray(np.mean(c, axis=axis) - np.mean(b, axis=axis))


def scipy_interval(
    samples: tuple[np.ndarray, ...], kind: str, *, paired: bool
) -> tuple[float, float]:
    statistic = difference_of_means if len(samples) == 2 else np.mean
    ci = scipy_stats.bootstrap(
        samples,
        statistic,
        paired=paired,
        method=kind,
        n_resamples=2000,
        rng=np.random.default_rng(42),
    ).confidence_interval
    return float(ci.low), float(ci.high)


@pytest.mark.parametrize("method, kind", [(inf.PERCENTILE, "percentile"), (inf.BCA, "BCa")])
def test_bootstraps_are_scipys_with_the_seeded_generator(method: str, kind: str) -> None:
    b, c = np.array(SAMPLE_BASE), np.array(SAMPLE_COND)
    unpaired = inf.unpaired_interval(b, c, seed=42, method=method)
    assert unpaired is not None and unpaired.method == method
    assert (unpaired.lo, unpaired.hi) == pytest.approx(scipy_interval((b, c), kind, paired=False))
    paired = inf.paired_bootstrap_ci(b, c, seed=42, method=method)
    assert paired is not None and paired.method == method
    # Pairs resampled together are the differences resampled.
    assert (paired.lo, paired.hi) == pytest.approx(scipy_interval((c - b,), kind, paired=False))
    if kind == "percentile":
        # So with scipy's paired resampling the percentile interval is the same; BCa's bias
        # correction is not quite, as it counts the resamples whose mean equals the estimate
        # below or above it by rounding.
        reference = scipy_interval((b, c), kind, paired=True)
        assert (paired.lo, paired.hi) == pytest.approx(reference, rel=1e-12)


def test_expanded_percentile_widens_the_percentile_interval() -> None:
    plain = inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=3, method=inf.PERCENTILE)
    expanded = inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=3)
    assert plain is not None and expanded is not None
    assert expanded.method == inf.EXPANDED_PERCENTILE
    assert expanded.lo < plain.lo and plain.hi < expanded.hi


def test_intervals_are_determined_by_the_seed() -> None:
    for method in inf.PAIRED_BOOTSTRAP_METHODS:
        one = inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=1, method=method)
        assert one == inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=1, method=method)
        assert one != inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=2, method=method)
    seed = 2**127 + 5  # seeds from stats.bootstrap_seed are 128-bit
    assert inf.unpaired_interval(SAMPLE_BASE, SAMPLE_COND, seed=seed, method=inf.BCA) is not None


@pytest.mark.filterwarnings("error")
def test_intervals_of_degenerate_samples_are_exact_or_none() -> None:
    for method in inf.UNPAIRED_METHODS:
        flat = inf.unpaired_interval([0.1] * 5, [0.3] * 4, seed=0, method=method)
        assert flat == inf.Interval(0.3 - 0.1, 0.3 - 0.1, inf.NO_SPREAD)
        assert inf.unpaired_interval([1.0], [1.0, 2.0], seed=0, method=method) is None
        one_flat = inf.unpaired_interval([2.0, 2.0, 2.0], [1.0, 3.0, 4.0], seed=0, method=method)
        assert one_flat is not None and one_flat.lo < one_flat.hi
    for method in inf.PAIRED_BOOTSTRAP_METHODS:
        # Differences that are 0.2 up to rounding.
        flat = inf.paired_bootstrap_ci([0.1, 1.1, 2.1], [0.3, 1.3, 2.3], seed=0, method=method)
        assert flat is not None and flat.method == inf.NO_SPREAD
        assert flat.lo == flat.hi == pytest.approx(0.2, rel=1e-12)
        assert inf.paired_bootstrap_ci([1.0, math.nan], [2.0, 3.0], seed=0) is None
        two = inf.paired_bootstrap_ci([0.0, 0.0], [0.0, 1.0], seed=0, method=method)
        assert two is not None and 0.0 <= two.lo <= two.hi <= 1.0
    assert inf.paired_t_interval([1.0, 2.0], [3.0, 4.0]) == inf.Interval(2.0, 2.0, inf.NO_SPREAD)


def test_interval_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="method"):
        inf.unpaired_interval(SAMPLE_BASE, SAMPLE_COND, seed=0, method=inf.EXPANDED_PERCENTILE)
    with pytest.raises(ValueError, match="level"):
        inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=0, level=1.0)
    with pytest.raises(ValueError, match="draws"):
        inf.paired_bootstrap_ci(SAMPLE_BASE, SAMPLE_COND, seed=0, draws=0)


def covered(interval: inf.Interval | None, truth: float) -> bool:
    assert interval is not None
    return interval.lo <= truth <= interval.hi


# Coverage of at least 0.93 is required at n = 10 with normal data. 2000 simulations give the
# observed coverage a binomial SE of √(0.93 · 0.07 / 2000) ≈ 0.0057; a method that truly covers
# 0.93 falls below 0.93 − 2.33 SE ≈ 0.917 in only 1 % of seeds.
COVERAGE_SIMULATIONS = 2000
COVERAGE_FLOOR = 0.93 - 2.33 * math.sqrt(0.93 * 0.07 / COVERAGE_SIMULATIONS)


@pytest.mark.slow
def test_chosen_intervals_cover_at_least_093_at_n_10_for_normal_data() -> None:
    rng = np.random.default_rng(2024)
    hits = {"unpaired": 0, "paired bootstrap": 0, "paired t": 0}
    for i in range(COVERAGE_SIMULATIONS):
        base, cond = rng.normal(0.0, 1.0, 10), rng.normal(1.0, 2.0, 10)
        shared = rng.normal(0.0, 1.0, 10)  # pairs share a component (common random numbers)
        paired_base, paired_cond = shared + rng.normal(0, 0.5, 10), shared + rng.normal(1, 0.5, 10)
        hits["unpaired"] += covered(inf.unpaired_interval(base, cond, seed=i), 1.0)
        hits["paired bootstrap"] += covered(
            inf.paired_bootstrap_ci(paired_base, paired_cond, seed=i), 1.0
        )
        hits["paired t"] += covered(inf.paired_t_interval(paired_base, paired_cond), 1.0)
    coverage = {name: count / COVERAGE_SIMULATIONS for name, count in hits.items()}
    assert min(coverage.values()) >= COVERAGE_FLOOR, coverage


# --- equivalence -------------------------------------------------------------------------------


def test_tost_welch_is_the_larger_one_sided_p() -> None:
    b, c = np.array(SAMPLE_BASE), np.array(SAMPLE_COND)
    margin = 2.5
    vb, vc = b.var(ddof=1) / b.size, c.var(ddof=1) / c.size
    se = math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb**2 / (b.size - 1) + vc**2 / (c.size - 1))
    diff = c.mean() - b.mean()
    above_low = scipy_stats.t.sf((diff + margin) / se, df)
    below_high = scipy_stats.t.cdf((diff - margin) / se, df)
    result = inf.equivalence_test(b, c, margin, paired=False)
    assert result.p == pytest.approx(max(above_low, below_high), rel=1e-9)
    assert (result.method, result.paired) == (inf.TOST_WELCH, False)
    assert result.statistic == pytest.approx(diff, rel=1e-12)


@pytest.mark.parametrize("paired", [False, True])
def test_tost_agrees_with_the_90_percent_interval(paired: bool) -> None:
    """At α = 0.05, TOST passes exactly when the 90 % t interval lies inside the margin."""
    if paired:
        interval = inf.paired_t_interval(SAMPLE_BASE, SAMPLE_COND, level=0.9)
    else:
        interval = inf.unpaired_interval(SAMPLE_BASE, SAMPLE_COND, seed=0, level=0.9)
    assert interval is not None
    edge = max(abs(interval.lo), abs(interval.hi))
    inside = inf.equivalence_test(SAMPLE_BASE, SAMPLE_COND, edge * 1.001, paired=paired)
    outside = inf.equivalence_test(SAMPLE_BASE, SAMPLE_COND, edge * 0.999, paired=paired)
    assert inside.p < 0.05 < outside.p
    assert inside.method == (inf.TOST_PAIRED if paired else inf.TOST_WELCH)


def test_tost_without_spread_is_exact() -> None:
    inside = inf.equivalence_test([1.0, 1.0], [1.5, 1.5], 0.6, paired=False)
    assert (inside.p, inside.method, inside.statistic) == (0.0, inf.TOST_NO_SPREAD, 0.5)
    assert inf.equivalence_test([1.0, 1.0], [1.5, 1.5], 0.5, paired=False).p == 1.0
    assert inf.equivalence_test([1.0, 1.0], [3.0, 3.0], 0.5, paired=False).p == 1.0
    # Paired: the samples vary but every difference is the same (up to rounding).
    paired = inf.equivalence_test([0.1, 1.1, 2.1], [0.3, 1.3, 2.3], 0.25, paired=True)
    assert (paired.p, paired.method) == (0.0, inf.TOST_NO_SPREAD)


def test_tost_refuses_bad_margins_and_too_few_values() -> None:
    for margin in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="margin"):
            inf.equivalence_test(SAMPLE_BASE, SAMPLE_COND, margin, paired=False)
    with pytest.raises(ValueError, match="2 finite values"):
        inf.equivalence_test([1.0], [1.0, 2.0], 1.0, paired=False)
    with pytest.raises(ValueError, match="2 finite values"):
        inf.equivalence_test([1.0, math.nan], [1.0, 2.0], 1.0, paired=True)


# At a true difference equal to the margin the rejection rate is at most α. 4000 simulations
# give it a binomial SE of √(0.05 · 0.95 / 4000) ≈ 0.0034; the bound allows 2.33 SE above α.
SIZE_SIMULATIONS = 4000
SIZE_CEILING = 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / SIZE_SIMULATIONS)


@pytest.mark.slow
@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("n", [5, 10, 30])
def test_tost_size_at_the_margin_is_at_most_alpha(paired: bool, n: int) -> None:
    rng = np.random.default_rng([n, paired])
    margin = 1.0
    rejected = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(SIZE_SIMULATIONS):
            shared = rng.normal(0.0, 1.0, n) if paired else np.zeros(n)
            base = shared + rng.normal(0.0, 1.0, n)
            cond = shared + rng.normal(margin, 1.5, n)
            rejected += inf.equivalence_test(base, cond, margin, paired=paired).p < 0.05
    assert rejected / SIZE_SIMULATIONS <= SIZE_CEILING
