"""Power, minimum detectable effects, the A/A noise floor, replication counts from a pilot and cost
estimates: the numbers against statsmodels and simulation, the audit.json sections on hand-made
rows, and `simreport power` / `simreport conditions --estimate` end to end on a tiny offline
audit, including every refusal."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.power import NormalIndPower, TTestIndPower

import simreport.api as api
from simreport.analysis import inference, stats
from simreport.analysis import noise_floor as nf
from simreport.analysis import pilot as pilots
from simreport.analysis import power as pw
from simreport.analysis import rank_power as rp
from simreport.analysis.detectable_effect import unreachable_note
from simreport.cli import main
from simreport.core.errors import InputError
from simreport.kernel.providers.base import ChatResponse
from simreport.kernel.providers.cache import ResponseCache
from tests.support.studies import plan_text, scenario_text, write_study

# ------------------------------------------------------------------------- mde against statsmodels

GRID_N = [2, 3, 5, 10, 30, 200]
GRID_N2 = [2, 4, 10, 50]
GRID_ALPHA = [0.05, 0.01, 0.05 / 7, 0.001]


@pytest.mark.parametrize("target", [0.8, 0.9])
def test_mde_has_the_target_power_by_statsmodels(target: float) -> None:
    """statsmodels' own power function, evaluated at our MDE, gives the target power (wherever
    statsmodels returns a number: far in a tail its special functions give nan)."""
    checked = 0
    for n1 in GRID_N:
        for n2 in GRID_N2:
            for alpha in GRID_ALPHA:
                d = pw.mde(n1, n2, alpha, target)
                assert d is not None and d > 0
                theirs = TTestIndPower().power(d, n1, alpha, ratio=n2 / n1)
                if math.isfinite(theirs):
                    checked += 1
                    assert theirs == pytest.approx(target, abs=1e-9), (n1, n2, alpha)
                # Our power function agrees with itself everywhere, nan or not.
                assert pw.t_test_power(d, n1, n2, alpha) == pytest.approx(target, abs=1e-9)
    assert checked >= 0.8 * len(GRID_N) * len(GRID_N2) * len(GRID_ALPHA)


def test_mde_matches_statsmodels_solver_where_it_converges() -> None:
    """statsmodels' solver (tolerance about 1e-6) agrees with ours for n >= 5 per group and
    α >= 0.005; below that it stops early or at its bracket, which is why we solve ourselves."""
    for n1 in (5, 10, 30, 200):
        for n2 in (5, 10, 50):
            for alpha in (0.05, 0.01, 0.05 / 7):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    theirs = float(
                        TTestIndPower().solve_power(
                            effect_size=None,
                            nobs1=n1,
                            ratio=n2 / n1,
                            alpha=alpha,
                            power=0.8,
                            alternative="two-sided",
                        )
                    )
                assert pw.mde(n1, n2, alpha) == pytest.approx(theirs, rel=1e-4)


def test_mde_approaches_the_normal_approximation_and_exceeds_it() -> None:
    normal = NormalIndPower()
    for alpha in (0.05, 0.01):
        for n in (2, 3, 5, 10, 50):
            z = float(normal.solve_power(effect_size=None, nobs1=n, alpha=alpha, power=0.8))
            d = pw.mde(n, n, alpha)
            assert d is not None and d > z  # the t-test needs more than the normal promises
        large = 100_000
        z = float(normal.solve_power(effect_size=None, nobs1=large, alpha=alpha, power=0.8))
        assert pw.mde(large, large, alpha) == pytest.approx(z, rel=1e-4)


def test_mde_small_n_differs_from_the_normal_approximation_as_documented() -> None:
    # The module docstring quotes these two numbers.
    z = float(NormalIndPower().solve_power(effect_size=None, nobs1=3, alpha=0.05, power=0.8))
    assert round(z, 1) == 2.3
    assert round(pw.mde(3, 3, 0.05) or 0.0, 1) == 3.1


def test_mde_is_monotone_and_refuses_bad_levels() -> None:
    values = [pw.mde(n, n, 0.05) for n in (2, 3, 4, 8, 16, 64)]
    assert all(a is not None and b is not None and a > b for a, b in itertools.pairwise(values))
    assert (pw.mde(10, 10, 0.01) or 0) > (pw.mde(10, 10, 0.05) or 0)
    assert pw.mde(1, 10, 0.05) is None and pw.mde(10, 0, 0.05) is None
    for alpha, power in ((0.0, 0.8), (1.0, 0.8), (0.05, 1.0), (0.05, 0.05), (0.5, 0.3)):
        with pytest.raises(ValueError):
            pw.mde(10, 10, alpha, power)
    with pytest.raises(ValueError):
        pw.t_test_power(1.0, 1, 5, 0.05)


# ------------------------------------------------------------------------------- mde by simulation


def _rejections_t(n1: int, n2: int, d: float, alpha: float, draws: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 1.0, size=(draws, n1))
    cond = rng.normal(d, 1.0, size=(draws, n2))
    p = scipy_stats.ttest_ind(base, cond, axis=1, equal_var=True).pvalue
    return float(np.mean(p < alpha))


@pytest.mark.parametrize(
    ("n1", "n2", "alpha"), [(10, 10, 0.05), (15, 12, 0.05 / 4), (4, 4, 0.05), (40, 25, 0.001)]
)
def test_mde_is_detected_with_the_promised_power_by_simulation(
    n1: int, n2: int, alpha: float
) -> None:
    draws = 20_000
    d = pw.mde(n1, n2, alpha)
    assert d is not None
    rate = _rejections_t(n1, n2, d, alpha, draws, seed=n1 * 1000 + n2)
    error = math.sqrt(0.8 * 0.2 / draws)
    assert abs(rate - 0.8) < 4 * error, (rate, d)
    # Half the effect is detected far less often: the simulation can tell the difference.
    assert _rejections_t(n1, n2, d / 2, alpha, draws, seed=7) < 0.6


def test_mde_is_near_the_mann_whitney_power_the_audit_uses() -> None:
    """Under normal data Mann-Whitney is about 95% as efficient as the t-test, so at the t-test's
    MDE its rejection rate sits a little below the target power, never far from it."""
    n, alpha, draws = 12, 0.05, 1500
    d = pw.mde(n, n, alpha)
    assert d is not None
    rng = np.random.default_rng(11)
    hits = 0
    for _ in range(draws):
        p = stats.mann_whitney_p(rng.normal(0, 1, n), rng.normal(d, 1, n))
        hits += int(p is not None and p < alpha)
    rate = hits / draws
    assert 0.8 - 0.1 < rate < 0.8 + 4 * math.sqrt(0.16 / draws)


# ----------------------------------------------------------------------- what Mann-Whitney reaches


def test_smallest_mann_whitney_p() -> None:
    # Exact test, distinct values, complete separation: 2 / C(n1 + n2, n1).
    assert pw.smallest_mwu_p(3, 3) == pytest.approx(2 / math.comb(6, 3))
    assert pw.smallest_mwu_p(4, 4) == pytest.approx(2 / math.comb(8, 4))
    # Two constant groups use the tie-corrected normal approximation: smaller here.
    assert pw.smallest_mwu_p(3, 3, ties=True) < 0.05 < pw.smallest_mwu_p(3, 3)
    assert pw.smallest_mwu_p(2, 2, ties=True) > 0.05
    with pytest.raises(ValueError):
        pw.smallest_mwu_p(0, 3)


def test_detectable_effect_is_the_rank_tests_and_says_when_it_cannot_reach_alpha() -> None:
    """The audit's MDE is the rank test's (no longer the t-test's): null with the smallest
    reachable p where the exact test cannot reach α (3 + 3 values: 2 / C(6, 3) = 0.1)."""
    value, note = pw.detectable_effect(3, 3, 0.05)
    assert value is None and note == unreachable_note(3, 3, 0.05)
    assert pw.smallest_rank_p(3, 3) == pytest.approx(0.1)
    value, note = pw.detectable_effect(5, 5, 0.05, paired=True)
    assert value is None and note == unreachable_note(5, 5, 0.05, paired=True)
    assert pw.smallest_rank_p(5, 5, paired=True) == 2 / 2**5
    value, note = pw.detectable_effect(10, 10, 0.005)
    assert note is None and value == pw.rank_mde(10, 10, 0.005)
    t_mde = pw.mde(10, 10, 0.005)
    assert value is not None and t_mde is not None and value > t_mde
    value, note = pw.detectable_effect(1, 5, 0.05)
    assert value is None and note == stats.too_few_note(1, 5)


# ------------------------------------------------ the rank tests, against independent computations


def _enumerated_counts(n_base: int, n_cond: int, paired: bool) -> tuple[list[int], int]:
    """Every rearrangement's count statistic (U, or the positive-rank sum T+) and M."""
    if paired:
        flips = itertools.product((0, 1), repeat=n_base)
        return [
            sum(r for r, up in zip(range(1, n_base + 1), f, strict=True) if up) for f in flips
        ], (n_base * (n_base + 1) // 2)
    low = n_cond * (n_cond + 1) // 2
    combos = itertools.combinations(range(1, n_base + n_cond + 1), n_cond)
    return [sum(c) - low for c in combos], n_base * n_cond


@pytest.mark.parametrize(
    ("n_base", "n_cond", "paired"),
    [(3, 5, False), (4, 4, False), (6, 5, False), (7, 7, False), (4, 4, True), (6, 6, True),
     (9, 9, True), (12, 12, True)],
)  # fmt: skip
def test_critical_region_matches_enumeration(n_base: int, n_cond: int, paired: bool) -> None:
    """The smallest distance |2X - M| with p < α, found by listing every rearrangement."""
    counts, span = _enumerated_counts(n_base, n_cond, paired)
    design = rp.RankDesign(n_base, n_cond, paired)
    distances = sorted({abs(2 * x - span) for x in counts})
    p_of = {c: sum(abs(2 * x - span) >= c for x in counts) / len(counts) for c in distances}
    for alpha in (0.05, 0.01, 0.05 / 3, 0.1, min(p_of.values()), 2 * min(p_of.values())):
        want = next((c for c in distances if p_of[c] < alpha), None)
        assert rp.critical_distance(design, alpha) == want, alpha
    grid, p = rp.distance_pvalues(design)
    for c, value in zip(grid.tolist(), p.tolist(), strict=True):
        if c in p_of:
            assert value == pytest.approx(p_of[c], abs=1e-15)
    assert pw.smallest_rank_p(n_base, n_cond, paired=paired) == pytest.approx(min(p_of.values()))


def test_a_p_equal_to_alpha_does_not_reject() -> None:
    # 4 + 4 values: the extreme rank sums have p = 2 / 70 exactly.
    design = rp.RankDesign(4, 4)
    assert rp.critical_distance(design, 2 / 70) is None
    assert rp.critical_distance(design, math.nextafter(2 / 70, 1.0)) == 16
    assert rp.critical_distance(rp.RankDesign(5, 5, True), 1 / 16) is None  # p = 2 / 32


def test_critical_region_agrees_with_scipy_permutation_test() -> None:
    """On random data, the exact test rejects exactly when scipy's full permutation test (all
    rearrangements enumerated) gives p < α."""
    rng = np.random.default_rng(21)

    def rank_sum(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        ranks = scipy_stats.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
        return np.sum(ranks[..., x.shape[axis] :], axis=axis)

    def signed_rank(d: np.ndarray, axis: int) -> np.ndarray:
        ranks = scipy_stats.rankdata(np.abs(d), axis=axis)
        return np.sum(np.sign(d) * ranks, axis=axis)

    for trial in range(12):
        n_base, n_cond, alpha = 5 + trial % 3, 6, (0.05, 0.01)[trial % 2]
        base, cond = rng.normal(size=n_base), rng.normal(1.2, 1.0, n_cond)
        res = scipy_stats.permutation_test(
            (base, cond), rank_sum, permutation_type="independent", n_resamples=10**6,
            alternative="two-sided", vectorized=True,
        )  # fmt: skip
        design = rp.RankDesign(n_base, n_cond)
        u = int(rank_sum(base, cond, 0)) - n_cond * (n_cond + 1) // 2
        critical = rp.critical_distance(design, alpha)
        ours = critical is not None and abs(2 * u - design.span) >= critical
        assert ours == (res.pvalue < alpha), (trial, res.pvalue)

        diffs = rng.normal(0.9, 1.0, 9)
        res = scipy_stats.permutation_test(
            (diffs,), signed_rank, permutation_type="samples", n_resamples=10**6,
            alternative="two-sided", vectorized=True,
        )  # fmt: skip
        paired = rp.RankDesign(9, 9, True)
        t_plus = int(scipy_stats.rankdata(np.abs(diffs))[diffs > 0].sum())
        critical = rp.critical_distance(paired, alpha)
        ours = critical is not None and abs(2 * t_plus - paired.span) >= critical
        assert ours == (res.pvalue < alpha), (trial, res.pvalue)


def test_normal_approximation_matches_scipy_beyond_60_values() -> None:
    rng = np.random.default_rng(8)
    for _ in range(10):
        base, cond = rng.normal(size=31), rng.normal(0.4, 1.0, 30)
        design = rp.RankDesign(31, 30)
        assert not design.exact
        u = int(scipy_stats.rankdata(np.concatenate([base, cond]))[31:].sum()) - 30 * 31 // 2
        grid, p = rp.distance_pvalues(design)
        ours = float(p[np.searchsorted(grid, abs(2 * u - design.span))])
        theirs = scipy_stats.mannwhitneyu(
            cond, base, alternative="two-sided", method="asymptotic", use_continuity=True
        ).pvalue
        assert ours == pytest.approx(theirs, rel=1e-9)

        diffs = rng.normal(0.3, 1.0, 61)
        design = rp.RankDesign(61, 61, True)
        t_plus = int(scipy_stats.rankdata(np.abs(diffs))[diffs > 0].sum())
        grid, p = rp.distance_pvalues(design)
        ours = float(p[np.searchsorted(grid, abs(2 * t_plus - design.span))])
        theirs = scipy_stats.wilcoxon(diffs, method="asymptotic", correction=True).pvalue
        assert ours == pytest.approx(theirs, rel=1e-9)


def test_critical_distance_beyond_the_exact_tests_is_found_without_the_grid() -> None:
    """Past the exact tests the critical distance is the grid's first distance with p < α, as
    listing the grid finds it, also at sizes whose M/2 + 1 distances could not be held (a
    pilot's |d| of 0.02 asks for tens of thousands of values per group)."""
    for design in (rp.RankDesign(31, 30), rp.RankDesign(200, 150), rp.RankDesign(61, 61, True),
                   rp.RankDesign(700, 700, True)):  # fmt: skip
        grid, p = rp.distance_pvalues(design)
        probes = [0.05, 0.01, 0.05 / 36, 1e-9, 1e-12, float(p[len(p) // 3])]
        for alpha in [*probes, *(math.nextafter(a, 1.0) for a in probes)]:
            below = np.flatnonzero(p < alpha)
            want = int(grid[below[0]]) if below.size else None
            assert rp.critical_distance(design, alpha) == want, (design, alpha)
        assert rp.smallest_p(design) == float(p[-1])

    def normal_p(design: rp.RankDesign, distance: int) -> float:
        n_b, n_c = design.n_base, design.n_cond
        if design.paired:
            sd = math.sqrt(n_b * (n_b + 1) * (2 * n_b + 1) / 24.0)
        else:
            sd = math.sqrt(n_b * n_c * (n_b + n_c + 1) / 12.0)
        return min(2.0 * float(scipy_stats.norm.sf((distance / 2.0 - 0.5) / sd)), 1.0)

    for design in (rp.RankDesign(100_000, 90_000), rp.RankDesign(80_000, 80_000, True)):
        alpha = 0.05 / 36
        c = rp.critical_distance(design, alpha)
        assert c is not None and (design.span - c) % 2 == 0
        assert normal_p(design, c) < alpha <= normal_p(design, c - 2)
        assert rp.smallest_p(design) == normal_p(design, design.span)
        assert pw.smallest_rank_p(design.n_base, design.n_cond, paired=design.paired) < alpha


def test_rank_sum_null_with_ties_matches_enumeration_and_scipy() -> None:
    # The example where scipy's exact Mann-Whitney ignores ties (0.2) and permutation gives 0.3.
    null = inference.RankSumNull(np.array([1.0, 2, 2, 2, 3, 4]), 3)
    assert null.pvalue(np.array([3, 4, 5])) == pytest.approx(0.3)
    rng = np.random.default_rng(4)
    for _ in range(20):
        pooled = rng.integers(0, 4, size=9).astype(float)
        cond = rng.choice(9, size=4, replace=False)
        rest = np.setdiff1d(np.arange(9), cond)
        want = _enumerated_rank_sum_p(pooled[rest], pooled[cond])
        assert inference.RankSumNull(pooled, 4).pvalue(cond) == pytest.approx(want, abs=1e-12)
    pooled = rng.integers(0, 6, size=70).astype(float)
    cond = np.arange(35, 70)
    theirs = scipy_stats.mannwhitneyu(
        pooled[cond], pooled[:35], alternative="two-sided", method="asymptotic"
    ).pvalue
    assert inference.RankSumNull(pooled, 35).pvalue(cond) == pytest.approx(theirs, rel=1e-9)
    assert inference.RankSumNull(np.ones(70), 35).pvalue(cond) == 1.0


def test_rank_sum_null_is_the_rank_sum_test() -> None:
    """One null for the audit's rows and the noise floor: the same p, statistic and method, in
    the exact range and beyond it, ties included."""
    rng = np.random.default_rng(11)
    for size, n_cond in ((7, 3), (12, 6), (40, 25), (80, 30)):
        pooled = rng.integers(0, 5, size=size).astype(float)
        cond = np.arange(size - n_cond, size)
        null = inference.RankSumNull(pooled, n_cond)
        test = inference.rank_sum_test(pooled[: size - n_cond], pooled[cond])
        assert (null.pvalue(cond), null.statistic(cond), null.method) == (
            test.p,
            test.statistic,
            test.method,
        )
    with pytest.raises(ValueError):
        inference.RankSumNull(np.array([1.0, math.nan, 2.0]), 1)
    with pytest.raises(ValueError):
        inference.RankSumNull(np.array([1.0, 2.0]), 2)


def _scipy_power(d: float, n: int, alpha: float, *, paired: bool, draws: int, seed: int) -> float:
    """Rejection rate of the audit's test at a normal shift, each draw's p from scipy's own
    exact null distributions (normal approximation past 60 values): independent of the code
    under test."""
    rng = np.random.default_rng(seed)
    if paired:
        diffs = rng.normal(d, 1.0, size=(draws, n))
        method = "exact" if n <= 60 else "asymptotic"
        p = scipy_stats.wilcoxon(diffs, axis=1, method=method, correction=True).pvalue
    else:
        base, cond = rng.normal(size=(draws, n)), rng.normal(d, 1.0, size=(draws, n))
        method = "exact" if 2 * n <= 60 else "asymptotic"
        p = scipy_stats.mannwhitneyu(
            cond, base, axis=1, method=method, use_continuity=True, alternative="two-sided"
        ).pvalue
    return float(np.mean(p < alpha))


def test_scipy_exact_tests_equal_enumeration_without_ties() -> None:
    """The independent simulation's p values are the exact two-sided permutation p's: scipy's
    exact tests agree with listing every rearrangement where ties cannot occur."""
    rng = np.random.default_rng(2)
    for _ in range(10):
        base, cond = rng.normal(size=6), rng.normal(1.0, 1.0, 5)
        counts, span = _enumerated_counts(6, 5, False)
        u = int(scipy_stats.rankdata(np.concatenate([base, cond]))[6:].sum()) - 15
        want = sum(abs(2 * x - span) >= abs(2 * u - span) for x in counts) / len(counts)
        got = scipy_stats.mannwhitneyu(cond, base, method="exact").pvalue
        assert got == pytest.approx(want, abs=1e-12)
        diffs = rng.normal(0.7, 1.0, 8)
        counts, span = _enumerated_counts(8, 8, True)
        t_plus = int(scipy_stats.rankdata(np.abs(diffs))[diffs > 0].sum())
        want = sum(abs(2 * x - span) >= abs(2 * t_plus - span) for x in counts) / len(counts)
        assert scipy_stats.wilcoxon(diffs, method="exact").pvalue == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize(
    ("d", "n", "alpha", "paired"),
    [(1.3, 8, 0.05, False), (0.9, 10, 0.05, True), (1.0, 14, 0.01, True), (0.6, 40, 0.05, False)],
)
def test_rank_test_power_matches_an_independent_simulation(
    d: float, n: int, alpha: float, paired: bool
) -> None:
    ours = pw.rank_test_power(d, n, n, alpha, paired=paired, seed=1)
    theirs = _scipy_power(d, n, alpha, paired=paired, draws=4000, seed=99)
    assert ours is not None
    # Both estimates have SE <= 0.008: their difference stays within 4 SE.
    assert abs(ours - theirs) < 0.045, (ours, theirs)


def test_rank_mde_reaches_its_power_is_seeded_and_exceeds_the_t_tests() -> None:
    for n, alpha, paired in ((10, 0.05, False), (8, 0.05 / 3, False), (12, 0.01, True)):
        value = pw.rank_mde(n, n, alpha, paired=paired, seed=5)
        assert value is not None
        assert value == pw.rank_mde(n, n, alpha, paired=paired, seed=5)
        assert value != pw.rank_mde(n, n, alpha, paired=paired, seed=6)
        at = pw.rank_test_power(value, n, n, alpha, paired=paired, seed=5)
        below = pw.rank_test_power(value - 2 * rp.MDE_TOLERANCE, n, n, alpha, paired=paired, seed=5)
        assert at is not None and below is not None and at >= 0.8 > below
        t_power = (
            pw.paired_t_test_power(value, n, alpha)
            if paired
            else pw.t_test_power(value, n, n, alpha)
        )
        assert t_power > 0.8  # no test beats the t-test on normal data
    assert pw.rank_mde(3, 3, 0.05) is None and pw.rank_mde(1, 9, 0.05) is None
    # More draws for the same point: the MDE moves by about its Monte Carlo error only.
    coarse = pw.rank_mde(10, 10, 0.05, seed=5)
    fine = pw.rank_mde(10, 10, 0.05, seed=5, draws=16_000)
    assert coarse is not None and fine is not None and abs(coarse - fine) < 0.05


def test_mde_from_step_shifts_equals_bisection_and_large_designs_bisect() -> None:
    """The MDE read off each data set's step shifts is where bisection on the simulated power
    lands; designs too large for the shifts (80 + 80 values) bisect and still reach the power."""
    for design in (rp.RankDesign(9, 7), rp.RankDesign(15, 15, True), rp.RankDesign(40, 40)):
        assert design.span <= rp.BREAKPOINT_SPAN
        for alpha in (0.05, 0.01):
            quick = rp.simulated_mdes(design, [alpha], 0.8, seed=4)[alpha]
            slow = rp._bisected_mde(design, alpha, 0.8, seed=4, draws=rp.POWER_DRAWS)
            assert quick is not None and abs(quick - slow) <= rp.MDE_TOLERANCE
    large = rp.RankDesign(80, 80)
    assert large.span > rp.BREAKPOINT_SPAN
    value = pw.rank_mde(80, 80, 0.01, seed=4)
    assert value is not None
    assert (pw.rank_test_power(value, 80, 80, 0.01, seed=4) or 0.0) >= 0.8
    below = pw.rank_test_power(value - rp.MDE_TOLERANCE, 80, 80, 0.01, seed=4)
    assert below is not None and below < 0.8


def test_paired_t_test_power_matches_statsmodels() -> None:
    from statsmodels.stats.power import TTestPower

    for n in (3, 5, 10, 40):
        for d in (0.3, 1.0, 2.0):
            for alpha in (0.05, 0.01):
                theirs = TTestPower().power(d, n, alpha, alternative="two-sided")
                assert pw.paired_t_test_power(d, n, alpha) == pytest.approx(theirs, abs=1e-9)
    with pytest.raises(ValueError):
        pw.paired_t_test_power(1.0, 1, 0.05)


# ------------------------------------------------------------------------- Holm and audit["power"]


def test_holm_alphas() -> None:
    assert pw.holm_alphas(4) == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.05])
    assert pw.holm_alphas(1, 0.1) == [0.1]
    assert pw.holm_alphas(0) == []
    with pytest.raises(ValueError):
        pw.holm_alphas(-1)
    with pytest.raises(ValueError):
        pw.holm_alphas(3, 0.0)


def _row(condition: str, mwu_p: float | None, n: tuple[int, int], **extra: Any) -> dict[str, Any]:
    return {"condition": condition, "nBase": n[0], "nCond": n[1], "mwuP": mwu_p, **extra}


def test_power_section_ranks_tested_rows_and_keeps_untested_ones() -> None:
    rows = [
        _row("a", 0.03, (10, 10), tested=True),
        _row("same", None, (10, 10), tested=False, note="identical to the base, not tested"),
        _row("b", 0.01, (12, 9), tested=True),
        _row("short", None, (10, 1), tested=False, note=None),
        _row("c", 0.03, (10, 10), tested=True),  # ties with "a": after it, as listed
        _row("d", 0.5, (2, 2), tested=True),
    ]
    section = pw.power_section({"m": rows, "empty": []}, alpha=0.05, power=0.8)
    assert section["power"] == 0.8 and section["alphaFamily"] == 0.05
    assert section["familySize"] == 4 and section["draws"] == pw.POWER_DRAWS
    assert section["metrics"]["empty"] == []
    out = {r["condition"]: r for r in section["metrics"]["m"]}
    assert [r["condition"] for r in section["metrics"]["m"]] == [r["condition"] for r in rows]
    assert set(out["a"]) == {
        "condition", "nBase", "nCond", "paired", "test", "alpha", "mde", "note"
    }  # fmt: skip
    # Four tested rows: b (rank 1) α/4, a α/3, c α/2, d α/1.
    assert out["b"]["alpha"] == pytest.approx(0.05 / 4)
    assert out["a"]["alpha"] == pytest.approx(0.05 / 3)
    assert out["c"]["alpha"] == pytest.approx(0.05 / 2)
    assert out["d"]["alpha"] == pytest.approx(0.05)
    # The MDE is the rank test's at the row's threshold (the t-test's is smaller).
    assert out["b"]["mde"] == pw.rank_mde(12, 9, 0.05 / 4)
    assert out["a"]["mde"] == pw.rank_mde(10, 10, 0.05 / 3)
    assert out["a"]["mde"] > (pw.mde(10, 10, 0.05 / 3) or math.inf)
    assert out["a"]["test"] == "rank-sum permutation test (exact)" and not out["a"]["paired"]
    assert out["d"]["mde"] is None and out["d"]["note"] == unreachable_note(2, 2, 0.05)
    # The method names the test every row ran.
    assert {r["test"] for r in out.values() if r["test"]} == {"rank-sum permutation test (exact)"}
    assert out["a"]["test"] in section["method"]
    assert out["same"] == {
        "condition": "same",
        "nBase": 10,
        "nCond": 10,
        "paired": False,
        "test": None,
        "alpha": None,
        "mde": None,
        "note": "identical to the base, not tested",
    }
    assert out["short"]["mde"] is None and out["short"]["alpha"] is None
    assert out["short"]["note"] == stats.too_few_note(10, 1)


def test_power_section_ranks_the_family_over_all_metrics() -> None:
    """Holm runs over every tested row of every metric, ranked by the p that decides (`p`, else
    `mwuP`), ties in metric then row order; a declared family (primary metrics) leaves the
    other metrics' rows outside with a note."""
    tests = {
        "x": [_row("a", 0.04, (8, 8), p=0.002), _row("b", 0.01, (8, 8), p=0.02)],
        "y": [_row("a", 0.5, (8, 8), p=0.002, paired=True), _row("b", None, (8, 1))],
    }
    family = pw.holm_family(tests)
    assert family == [("x", "a", 0.002), ("x", "b", 0.02), ("y", "a", 0.002)]
    alphas = pw.family_alphas(family)
    assert alphas == {("x", "a"): 0.05 / 3, ("y", "a"): 0.05 / 2, ("x", "b"): 0.05}
    section = pw.power_section(tests, seed=7)
    x, y = section["metrics"]["x"], section["metrics"]["y"]
    assert [r["alpha"] for r in x] == pytest.approx([0.05 / 3, 0.05])
    assert y[0]["alpha"] == pytest.approx(0.025) and y[0]["paired"]
    assert y[0]["test"] == "Wilcoxon signed-rank sign-flip test (exact)"
    assert y[0]["mde"] == pw.rank_mde(8, 8, 0.025, paired=True, seed=7)
    assert y[0]["test"] in section["method"] and x[0]["test"] in section["method"]

    primary = pw.power_section(tests, family=pw.holm_family(tests, ["y"]))
    assert primary["familySize"] == 1 and "the metrics y" in primary["method"]
    assert primary["metrics"]["y"][0]["alpha"] == 0.05
    assert [r["alpha"] for r in primary["metrics"]["x"]] == [None, None]
    assert primary["metrics"]["x"][0]["note"] == pw.OUTSIDE_FAMILY_NOTE
    # A family member without a p is not counted in m.
    assert pw.family_alphas([("x", "a", None), ("x", "b", 0.3)]) == {("x", "b"): 0.05}


def test_power_section_reads_rows_written_before_tested_existed() -> None:
    rows = [_row("a", 0.2, (5, 5)), _row("b", None, (0, 5)), _row("c", 0.01, (5, 5))]
    out = pw.power_section({"m": rows})["metrics"]["m"]
    assert [r["alpha"] for r in out] == pytest.approx([0.05, None, 0.025])  # type: ignore[list-item]
    assert out[1]["note"] == stats.too_few_note(0, 5)


# ------------------------------------------------------------------------------------- noise floor


def _enumerated_rank_sum_p(base: np.ndarray, cond: np.ndarray) -> float:
    """The two-sided permutation p of the condition's midrank sum, by listing every split."""
    pooled = np.concatenate([base, cond])
    ranks = scipy_stats.rankdata(pooled)
    centre = cond.size * (pooled.size + 1) / 2.0
    observed = abs(ranks[base.size :].sum() - centre)
    sums = np.array(
        [ranks[list(c)].sum() for c in itertools.combinations(range(pooled.size), cond.size)]
    )
    return float(np.mean(np.abs(sums - centre) >= observed - 1e-9))


def test_noise_floor_is_deterministic_and_identical_for_identical_bases() -> None:
    """Seeded by the plan hash and the base's values only: the same values under another
    metric, another base id or in another order give the same floor."""
    rng = np.random.default_rng(3)
    sample = rng.normal(size=30).tolist()  # C(30, 15) / 2 splits: random ones
    one = pw.noise_floor({"m": {"base": sample}}, "plan-hash")
    assert one == pw.noise_floor({"m": {"base": sample}}, "plan-hash")
    row = one["m"][0]
    assert row["splits"] == pw.NOISE_FLOOR_SPLITS and row["n"] == 30 and row["note"] is None
    assert 0.0 <= row["flipRate"] <= 1.0
    shuffled = list(reversed(sample))
    twins = pw.noise_floor(
        {"m": {"base": sample, "base@x": shuffled}, "k": {"b": sample}}, "plan-hash"
    )
    rates = {r["flipRate"] for rows in twins.values() for r in rows}
    assert rates == {row["flipRate"]}
    seed = pw.noise_floor_seed("plan-hash", sample)
    assert seed == pw.noise_floor_seed("plan-hash", [*shuffled, math.nan])
    others = {
        pw.noise_floor_seed("other-hash", sample),
        pw.noise_floor_seed("plan-hash", [*sample[:-1], sample[-1] + 1e-12]),
        stats.bootstrap_seed("plan-hash", "m", "base"),
    }
    assert seed not in others and len(others) == 3
    rates = {
        pw.noise_floor({"m": {"base": sample}}, f"hash-{i}", splits=20)["m"][0]["flipRate"]
        for i in range(12)
    }
    assert len(rates) > 1  # the seed material does reach the generator


def test_noise_floor_of_a_constant_sample_is_zero() -> None:
    out = pw.noise_floor({"m": {"base": [0.25] * 12, "base@x": [1.0] * 9}}, "h")
    assert [r["flipRate"] for r in out["m"]] == [0.0, 0.0]
    assert [r["base"] for r in out["m"]] == ["base", "base@x"]


def test_noise_floor_enumerates_every_split_of_small_samples() -> None:
    """Every split, each mirror pair once, tested with the exact permutation rank-sum test
    (ties as midranks): the flips counted by enumerating each split's permutation p."""
    sample = [0.1, 0.5, 0.2, 0.9, 0.7, 0.3, 0.8, 0.4, 0.6, 1.0, 0.5, 0.2]
    row = pw.noise_floor({"m": {"base": sample}}, "h")["m"][0]
    assert row["splits"] == math.comb(12, 6) // 2
    x = np.sort(np.array(sample))
    flips = 0
    for second in itertools.combinations(range(12), 6):
        if 0 not in second:
            continue
        mask = np.zeros(12, dtype=bool)
        mask[list(second)] = True
        flips += int(_enumerated_rank_sum_p(x[~mask], x[mask]) < 0.05)
    assert flips > 0
    assert row["flipRate"] == flips / row["splits"]
    # The seed is irrelevant when every split is used.
    assert row == pw.noise_floor({"m": {"base": sample}}, "other")["m"][0]


def test_noise_floor_is_at_most_alpha_for_exchangeable_replications() -> None:
    rng = np.random.default_rng(5)
    rates = [
        pw.noise_floor({"m": {"base": rng.normal(size=20)}}, f"h{i}", splits=40)["m"][0]["flipRate"]
        for i in range(25)
    ]
    assert 0.01 < float(np.mean(rates)) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 1000)


def test_noise_floor_is_null_with_a_note_for_small_bases() -> None:
    out = pw.noise_floor(
        {"m": {"three": [1.0, 2.0, math.nan, 3.0], "seven": [1.0, 2.0, 3.0, 4.0, 5, 6, 7]}}, "h"
    )
    three, seven = out["m"]
    assert three["n"] == 3 and three["flipRate"] is None and three["splits"] == 0
    assert three["note"] == nf.unsplittable_note(3)
    assert three["scope"] == seven["scope"] == "halves" and three["sizes"] is None
    assert seven["sizes"] == [3, 4] and seven["companions"] == []
    # Halves of 3 and 4: 2 / C(7, 4) = 0.057; halves of 4 and 4 reach 2 / 70.
    assert seven["flipRate"] is None
    floor = pw.smallest_rank_p(3, 4)
    assert seven["note"] == nf.unreachable_split_note([3, 4], 0.05, floor, halves=True)
    assert nf.smallest_reachable_n(0.05) == 8
    with pytest.raises(ValueError):
        pw.noise_floor({"m": {"b": [1.0] * 5}}, "h", splits=0)


# ------------------------------------------------------------------------------------ replications


def test_required_replications_is_the_smallest_sufficient_n_for_the_rank_test() -> None:
    """The tool's own power reaches the target at its n and not at n - 1 (where the test could
    reach α at all), and the t-test never needs more."""
    for d, alpha, paired in (
        (1.0, 0.05, False),
        (1.2, 0.05 / 6, False),
        (0.8, 0.05, True),
        (1.0, 0.05 / 6, True),
    ):
        sized = pw.size_replications(d, alpha, paired=paired, seed=3)
        n = sized.replications
        assert n is not None and sized.note is None and sized.power is not None
        assert sized.power >= 0.8
        assert sized.power == pw.rank_test_power(d, n, n, alpha, paired=paired, seed=3)
        below = pw.rank_test_power(d, n - 1, n - 1, alpha, paired=paired, seed=3)
        assert below is None or below < 0.8
        t_power = pw.paired_t_test_power(d, n, alpha) if paired else pw.t_test_power(d, n, n, alpha)
        assert t_power >= 0.8
        assert pw.required_replications(d, alpha, paired=paired, seed=3) == (n, None)
    assert pw.required_replications(-0.5, 0.05) == pw.required_replications(0.5, 0.05)


def test_required_replications_respects_what_the_rank_test_can_reach() -> None:
    n, note = pw.required_replications(10.0, 0.05 / 14)
    assert n is not None and note is not None
    assert pw.smallest_rank_p(n, n) < 0.05 / 14 <= pw.smallest_rank_p(n - 1, n - 1)
    assert "the t-test needs" in note and "rank-sum permutation test" in note
    n, note = pw.required_replications(10.0, 0.05 / 14, paired=True)
    assert n == 10 and note is not None and "10 pairs" in note  # 2 / 2^10 < 0.0036 < 2 / 2^9


def test_required_replications_beyond_simulation_uses_the_efficiency_rule() -> None:
    """Past 1000 values per group the rank test is sized as the t-test at n times 3/π."""
    sized = pw.size_replications(0.1, 0.01)
    n = sized.replications
    assert n is not None and n > 1000 and sized.note is not None and "3/π" in sized.note
    lo, hi = 2, 10_000  # the t-test's own n, by bisection
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pw.t_test_power(0.1, mid, mid, 0.01) >= 0.8 else (mid, hi)
    assert abs(n * 3 / math.pi - hi) <= 1
    assert sized.power == pytest.approx(
        pw.t_test_power(0.1, round(n * 3 / math.pi), round(n * 3 / math.pi), 0.01)
    )


@pytest.mark.parametrize(
    ("d", "words"),
    [
        (0.0, "|d| = 0"),
        (math.inf, "infinite"),
        (-math.inf, "infinite"),
        (math.nan, "no effect size"),
        (None, "no effect size"),
        (1e-5, "more than 1,000,000,000"),
    ],
)
def test_required_replications_explains_unusable_effects(d: float | None, words: str) -> None:
    n, note = pw.required_replications(d, 0.05)
    assert n is None and note is not None and words in note


def test_recommend_replications_from_pilot_rows() -> None:
    rows = [
        {"condition": "a", "nBase": 3, "nCond": 3, "cohenD": 1.0},
        {"condition": "b", "nBase": 3, "nCond": 3, "cohenD": "-inf"},
        {"condition": "c", "nBase": 3, "nCond": 3, "cohenD": None, "note": "short"},
        {"condition": "d", "nBase": 3, "nCond": 3, "cohenD": 0.0, "identicalToBase": True},
        {"condition": "e", "nBase": 3, "nCond": 3, "cohenD": -0.5},
    ]
    out = {r["condition"]: r for r in pw.recommend_replications({"m": rows})["m"]}
    alpha = 0.05 / 4  # four rows not identical to their base
    assert out["a"]["alpha"] == pytest.approx(alpha)
    assert out["a"]["replications"] == pw.required_replications(1.0, alpha)[0]
    assert out["e"]["effect"] == 0.5 and out["e"]["pilotD"] == -0.5
    assert out["b"]["replications"] is None and "infinite" in out["b"]["note"]
    assert out["c"]["replications"] is None and out["c"]["note"].startswith("short")
    assert out["d"]["replications"] is None and out["d"]["note"] == pw.IDENTICAL_NOTE

    given = {
        r["condition"]: r
        for r in pw.recommend_replications({"m": rows}, effect=0.8, power=0.9, m=10)["m"]
    }
    expected = pw.required_replications(0.8, 0.005, 0.9)[0]
    assert {given[c]["replications"] for c in "abce"} == {expected}
    assert given["d"]["replications"] is None

    best = pw.plan_recommendation(pw.recommend_replications({"m": rows}))
    assert best is not None
    assert (best["metric"], best["condition"]) == ("m", "e")
    assert best["replications"] == out["e"]["replications"] > out["a"]["replications"]
    assert pw.plan_recommendation({"m": [out["b"], out["d"]]}) is None
    with pytest.raises(ValueError):
        pw.recommend_replications({"m": rows}, effect=0.0)
    with pytest.raises(ValueError):
        pw.recommend_replications({"m": rows}, m=0)


# ---------------------------------------------------------------------------------- cost estimates


def test_estimate_from_a_pilot() -> None:
    pilot = pilots.PilotCost(
        runs=4, llm_calls=30, cache_hits=10, prompt_tokens=3000, completion_tokens=60,
        provider="openai",
    )  # fmt: skip
    out = pilots.estimate_cost(runs=10, provider="openai", pilot=pilot)
    assert out["basis"] == "pilot" and not out["free"]
    assert out["perRun"]["llmCalls"] == 10.0  # cache hits are requests too
    assert out["perCall"] == {"promptTokens": 100.0, "completionTokens": 2.0}
    assert out["total"] == {"llmCalls": 100, "promptTokens": 10000, "completionTokens": 200}

    offline = pilots.PilotCost(4, 40, 0, 4000, 40, "offline")
    out = pilots.estimate_cost(runs=10, provider="openai", pilot=offline)
    assert pilots.OFFLINE_TOKENS_NOTE in out["notes"]
    assert pilots.other_provider_note("offline", "openai") in out["notes"]
    out = pilots.estimate_cost(runs=10, provider="offline", pilot=offline)
    assert out["free"] and pilots.OFFLINE_FREE_NOTE in out["notes"]

    cached_only = pilots.PilotCost(2, 0, 20, 0, 0, "openai")
    rates = pilots.TokenRates(entries=3, prompt_tokens=50.0, completion_tokens=1.0, models=("m",))
    out = pilots.estimate_cost(runs=4, provider="openai", pilot=cached_only, rates=rates)
    assert out["total"] == {"llmCalls": 40, "promptTokens": 2000, "completionTokens": 40}
    out = pilots.estimate_cost(runs=4, provider="openai", pilot=cached_only)
    assert out["total"] == {"llmCalls": 40, "promptTokens": None, "completionTokens": None}


def test_estimate_without_a_pilot() -> None:
    usage = [
        ({"provider": "openai", "model": "m1"}, 100, 4),
        ({"provider": "openai", "model": "m1"}, 300, 6),
        ({"provider": "openai", "model": "other"}, 1000, 100),
        ({"provider": "elsewhere", "model": "m1"}, 9999, 9999),
        ({}, 1, 1),
    ]
    rates = pilots.cache_token_rates(usage, "openai", ["m1", "m2"])
    assert rates is not None and rates.entries == 2 and rates.note is None
    assert (rates.prompt_tokens, rates.completion_tokens) == (200.0, 5.0)
    fallback = pilots.cache_token_rates(usage, "openai", ["m3"])
    assert (
        fallback is not None
        and fallback.entries == 3
        and "no recorded response" in str(fallback.note)
    )
    assert pilots.cache_token_rates(usage, "nobody", ["m1"]) is None

    out = pilots.estimate_cost(runs=8, provider="openai", rates=rates)
    assert out["basis"] == "cache" and out["perRun"] is None
    assert out["perCall"] == {"promptTokens": 200.0, "completionTokens": 5.0}
    assert out["total"]["llmCalls"] is None
    assert pilots.cache_basis_note(rates) in out["notes"]
    assert pilots.OFFLINE_PILOT_HINT in out["notes"]
    none = pilots.estimate_cost(runs=8, provider="openai")
    assert none["basis"] == "none" and any("no basis" in n for n in none["notes"])
    offline = pilots.estimate_cost(runs=8, provider="offline")
    assert pilots.OFFLINE_UNCACHED_NOTE in offline["notes"]


def test_response_cache_reports_recorded_usage(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    cache.put("ab" + "0" * 62, ChatResponse("yes", 120, 3), {"provider": "openai", "model": "m"})
    cache.put("cd" + "0" * 62, ChatResponse("no", 80, 1), {"provider": "openai", "model": "n"})
    (cache.root / "ef").mkdir()
    (cache.root / "ef" / ("ef" + "0" * 62 + ".json")).write_text("{torn")
    assert list(cache.recorded_usage()) == [
        ({"provider": "openai", "model": "m"}, 120, 3),
        ({"provider": "openai", "model": "n"}, 80, 1),
    ]


# -------------------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def pilot_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan asking for 2 replications and a pilot of it that ran 4, with the offline provider.
    Tests copy what they change."""
    root = tmp_path_factory.mktemp("power")
    api.audit(write_study(root).plan, out=root / "pilot", replications=4)
    return root


def _audit_doc(study: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((study / "pilot" / "audit.json").read_text())
    return doc


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """The command's one error line on stderr, after the program's name."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("simreport: "), err
    return err.removeprefix("simreport: ")


def test_power_section_and_noise_floor_on_a_real_audit(pilot_study: Path) -> None:
    doc = _audit_doc(pilot_study)
    section = pw.power_section(doc["tests"])
    rows = section["metrics"]["cooperationRate"]
    assert [r["condition"] for r in rows] == [
        r["condition"] for r in doc["tests"]["cooperationRate"]
    ]
    assert {r["nBase"] for r in rows} == {4}
    assert sorted(r["alpha"] for r in rows) == pytest.approx([0.025, 0.05])
    base = [r["metrics"]["cooperationRate"] for r in doc["runs"] if r["condition"] == "base"]
    floor = pw.noise_floor({"cooperationRate": {"base": base}}, doc["plan"]["hash"])
    assert floor["cooperationRate"][0]["n"] == 4
    json.dumps(section, allow_nan=False)  # strict JSON as it stands


def test_power_command_sizes_the_plan_from_the_pilot(
    pilot_study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The plan varies no seed, so its replications pair and the paired test is sized, at
    α over the family of 2 conditions × 1 metric, seeded from the plan hash."""
    plan, pilot = str(pilot_study / "audit.yaml"), str(pilot_study / "pilot")
    assert main(["power", plan, "--pilot", pilot]) == 0
    captured = capsys.readouterr()
    assert pilots.replications_warning(Path(pilot), 4, 2) in captured.err
    lines = captured.out.splitlines()
    assert lines[0].split() == ["metric", "condition", "pilot", "n", "base/cond", "pilot", "|d|",
                                "replications", "power"]  # fmt: skip
    assert any(line.startswith("cooperationRate  linguistic_framing=risk") for line in lines)
    assert any(
        line.startswith("test: the paired Wilcoxon signed-rank sign-flip test") for line in lines
    )
    assert any(line.startswith("plan: ") and "the plan has 2" in line for line in lines)
    assert any(line.startswith("at the plan's 2 replications") for line in lines)

    assert main(["power", plan, "--pilot", pilot, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    seed = pw.simulation_seed(result["plan"]["hash"])
    expected = pw.recommend_replications(
        _audit_doc(pilot_study)["tests"], m=2, paired=True, seed=seed
    )
    assert result["metrics"] == json.loads(json.dumps(expected))
    assert result["paired"] and result["seedAxes"] == [] and result["familySize"] == 2
    assert result["comparisons"] == 2 and result["alphaPerComparison"] == 0.025
    assert result["recommendation"] == pw.plan_recommendation(expected)
    at_plan = result["atPlannedReplications"]
    assert at_plan["mde"] is None and at_plan["note"] == unreachable_note(2, 2, 0.025, paired=True)

    argv = ["power", plan, "--pilot", pilot, "--json", "--effect", "0.5", "--power", "0.9"]
    assert main(argv) == 0
    given = json.loads(capsys.readouterr().out)
    needed = pw.required_replications(0.5 / math.sqrt(2), 0.025, 0.9, paired=True, seed=seed)[0]
    assert {r["replications"] for r in given["metrics"]["cooperationRate"]} == {needed}
    assert given["recommendation"]["replications"] == needed
    assert given["recommendation"]["power"] >= 0.9
    assert main(["power", plan, "--pilot", pilot, "--effect", "0.5", "--power", "0.9"]) == 0
    assert (
        f"plan: {needed} replications per condition detect |d| 0.5 with power 0.9 at α = "
        "0.05/2; the plan has 2" in capsys.readouterr().out
    )
    # A correlation of base and condition replications shrinks the differences' SD.
    argv += ["--correlation", "0.5"]
    assert main(argv) == 0
    correlated = json.loads(capsys.readouterr().out)
    assert correlated["metrics"]["cooperationRate"][0]["pairedEffect"] == pytest.approx(0.5)
    assert correlated["recommendation"]["replications"] < needed
    unpaired = [*argv[:-2], "--design", "unpaired"]
    assert main(unpaired) == 0
    sized = json.loads(capsys.readouterr().out)
    assert not sized["paired"] and sized["test"] == "rank-sum permutation test"
    assert (
        sized["recommendation"]["replications"]
        == pw.required_replications(0.5, 0.025, 0.9, seed=seed)[0]
    )


def test_power_command_sizes_a_tiny_pilot_effect(
    pilot_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --effect a pilot's |d| of 0.02 (noise at a few replications) is sized as it is:
    tens of thousands of pairs, the smallest n at which the test that runs there has the power,
    and the plan's recommendation."""
    doc = _audit_doc(pilot_study)
    rows = doc["tests"]["cooperationRate"]
    rows[0]["cohenD"], rows[1]["cohenD"] = 0.02, -0.03
    pilot = tmp_path / "pilot"
    shutil.copytree(pilot_study / "pilot", pilot)
    (pilot / "audit.json").write_text(json.dumps(doc))
    argv = ["power", str(pilot_study / "audit.yaml"), "--pilot", str(pilot), "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    tiny, small = result["metrics"]["cooperationRate"]
    assert (tiny["pilotD"], tiny["effect"], tiny["alpha"]) == (0.02, 0.02, 0.025)
    assert tiny["paired"] and tiny["pairedEffect"] == pytest.approx(0.02 / math.sqrt(2))
    n = tiny["replications"]
    assert isinstance(n, int) and rp.SIMULATION_LIMIT < n < pw.MAX_REPLICATIONS
    assert tiny["test"] == "Wilcoxon signed-rank sign-flip test (normal approximation)"
    assert "3/π" in tiny["note"] and tiny["power"] >= 0.8
    below = pw.rank_test_power(tiny["pairedEffect"], n - 1, n - 1, 0.025, paired=True)
    assert below is not None and below < 0.8
    assert small["effect"] == 0.03 and small["replications"] < n
    best = result["recommendation"]
    assert (best["replications"], best["condition"]) == (n, tiny["condition"])
    assert best["test"] == tiny["test"] and best["power"] == tiny["power"]


def test_power_command_with_the_plan_the_pilot_ran_has_no_warning(
    pilot_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copy(pilot_study / "scenario.yaml", tmp_path / "scenario.yaml")
    (tmp_path / "audit.yaml").write_text(plan_text(replications=4))
    argv = ["power", str(tmp_path / "audit.yaml"), "--pilot", str(pilot_study / "pilot")]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "the plan has 4" in captured.out
    # 4 pairs cannot reach α/2: the smallest possible p is 2 / 2^4.
    assert pw.smallest_rank_p(4, 4, paired=True) == 0.125
    assert unreachable_note(4, 4, 0.025, paired=True) in captured.out
    # Unpaired, 4 + 4 values reach 2 / 70 < 0.1.
    unpaired = [*argv, "--alpha", "0.2", "--design", "unpaired"]
    assert main([*unpaired, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert not result["paired"] and result["test"] == "rank-sum permutation test"
    mde = result["atPlannedReplications"]["mde"]
    assert mde is not None
    assert main(unpaired) == 0
    out = capsys.readouterr().out
    assert f"{mde:.3g}" in out and result["test"] in out


def test_power_command_refuses_a_pilot_of_another_plan(
    pilot_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pilot = str(pilot_study / "pilot")
    shutil.copy(pilot_study / "scenario.yaml", tmp_path / "scenario.yaml")
    (tmp_path / "fewer.yaml").write_text(plan_text(levels=["moralised"]))
    located = f"{pilot}/audit.json: plan.hash: "
    fewer = tmp_path / "fewer.yaml"
    err = _one_line_error(capsys, ["power", str(fewer), "--pilot", pilot])
    assert err.startswith(located) and "linguistic_framing=risk" in err
    with pytest.raises(pilots.PilotMismatch) as caught:
        api.power(fewer, pilot=pilot)
    assert (caught.value.only_in_pilot, caught.value.only_in_plan) == (
        ["linguistic_framing=risk"],
        [],
    )
    assert (caught.value.file, caught.value.path) == (f"{pilot}/audit.json", "plan.hash")

    (tmp_path / "longer.yaml").write_text(scenario_text(steps=4))
    other = tmp_path / "other.yaml"
    other.write_text(plan_text(scenario="longer.yaml"))
    err = _one_line_error(capsys, ["power", str(other), "--pilot", pilot])
    assert err.startswith(located)
    with pytest.raises(pilots.PilotMismatch) as caught:
        api.power(other, pilot=pilot)
    assert (caught.value.only_in_pilot, caught.value.keys) == ([], ["base", "baseScenario"])
    # The estimate applies the same check.
    err = _one_line_error(capsys, ["conditions", str(other), "--estimate", "--pilot", pilot])
    assert err.startswith(located)


def test_power_command_refuses_missing_and_malformed_pilots(
    pilot_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = str(pilot_study / "audit.yaml")
    err = _one_line_error(capsys, ["power", plan, "--pilot", str(tmp_path / "nowhere")])
    assert err.startswith(f"{tmp_path}/nowhere/audit.json: ")

    unanalysed = tmp_path / "unanalysed"
    unanalysed.mkdir()
    shutil.copy(pilot_study / "pilot" / "plan.json", unanalysed / "plan.json")
    err = _one_line_error(capsys, ["power", plan, "--pilot", str(unanalysed)])
    assert "simreport analyse" in err

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "audit.json").write_text("{not json")
    err = _one_line_error(capsys, ["power", plan, "--pilot", str(broken)])
    assert err.startswith(f"{broken}/audit.json:1: ")  # the line of the JSON syntax error

    doc = _audit_doc(pilot_study)
    doc["tests"]["cooperationRate"][1]["nBase"] = "four"
    (broken / "audit.json").write_text(json.dumps(doc))
    err = _one_line_error(capsys, ["power", plan, "--pilot", str(broken)])
    assert err.startswith(f"{broken}/audit.json: tests.cooperationRate.1.nBase: ")
    assert err.endswith("(expected an integer)")

    del doc["plan"]["hash"]
    (broken / "audit.json").write_text(json.dumps(doc))
    err = _one_line_error(capsys, ["power", plan, "--pilot", str(broken)])
    assert err.startswith(f"{broken}/audit.json: plan.hash: ")


@pytest.mark.parametrize(
    "extra", [["--effect", "0"], ["--effect", "inf"], ["--power", "1.5"], ["--alpha", "zero"]]
)
def test_power_command_refuses_bad_levels(
    pilot_study: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["power", str(pilot_study / "audit.yaml"), "--pilot", str(pilot_study / "pilot")]
    with pytest.raises(SystemExit) as info:
        main([*argv, *extra])
    assert info.value.code == 2
    assert extra[0] in capsys.readouterr().err


def test_power_api_refuses_power_below_alpha(pilot_study: Path) -> None:
    with pytest.raises(InputError, match="power"):
        api.power(pilot_study / "audit.yaml", pilot=pilot_study / "pilot", power=0.04, alpha=0.05)


def test_estimate_command_from_the_pilot(
    pilot_study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan, pilot = str(pilot_study / "audit.yaml"), str(pilot_study / "pilot")
    doc = _audit_doc(pilot_study)
    per_run = doc["cost"]["llmCalls"] / len(doc["runs"])
    assert main(["conditions", plan, "--estimate", "--pilot", pilot]) == 0
    captured = capsys.readouterr()
    assert pilots.replications_warning(Path(pilot), 4, 2) in captured.err
    out = captured.out
    assert out.startswith("3 conditions × 2 replications = 6 runs (provider offline")
    assert f"LLM calls          {round(per_run * 6):,}" in out
    prompt = round(doc["cost"]["promptTokens"] / len(doc["runs"]) * 6)
    assert f"prompt tokens      {prompt:,}" in out
    assert pilots.OFFLINE_FREE_NOTE in out

    assert main(["conditions", plan, "--estimate", "--pilot", pilot, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["basis"] == "pilot" and result["runs"] == 6 and result["free"]
    assert result["total"]["llmCalls"] == round(per_run * 6)
    assert len(result["models"]) == 1 and f"model {result['models'][0]})" in out


def test_estimate_command_without_a_basis(
    pilot_study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["conditions", str(pilot_study / "audit.yaml"), "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "basis: none" in out and "LLM calls          unknown" in out
    assert pilots.OFFLINE_UNCACHED_NOTE in out and pilots.OFFLINE_FREE_NOTE in out
    err = _one_line_error(
        capsys,
        ["conditions", str(pilot_study / "audit.yaml"), "--pilot", str(pilot_study / "pilot")],
    )
    assert "--pilot" in err and "--estimate" in err


def test_estimate_from_the_response_cache(
    pilot_study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llm = {"provider": "openai", "model": "m1", "baseUrl": "http://127.0.0.1:9/v1"}
    write_study(tmp_path, scenario_text(llm=llm))
    cache = ResponseCache(tmp_path / "cache")
    for i, tokens in enumerate((100, 200, 600)):
        meta = {"provider": "openai", "model": "m1" if tokens < 600 else "m2"}
        cache.put(f"{i:02d}" + "0" * 62, ChatResponse("ok", tokens, 2), meta)
    result = api.estimate(tmp_path / "audit.yaml", cache_dir=tmp_path / "cache")
    assert result["basis"] == "cache" and result["models"] == ["m1"]
    assert result["perCall"] == {"promptTokens": 150.0, "completionTokens": 2.0}
    assert result["total"]["llmCalls"] is None and not result["free"]
    assert result["runs"] == 6
    empty = api.estimate(tmp_path / "audit.yaml", cache_dir=tmp_path / "no-cache")
    assert empty["basis"] == "none"


ACCEPTANCE = [
    (d, target, alpha, paired)
    for target in (0.8, 0.9)
    for alpha in (0.05, 0.05 / 6)
    for paired in (False, True)
    for d in (1.0, 0.6)
]


@pytest.mark.slow
@pytest.mark.parametrize(("d", "target", "alpha", "paired"), ACCEPTANCE)
def test_recommended_replications_have_the_target_power_by_independent_simulation(
    d: float, target: float, alpha: float, paired: bool
) -> None:
    """At the recommended n an independent simulation (10,000 draws, each p from scipy's exact
    tests or their normal approximation) finds at least target - 0.03, and the power the tool
    states there is within ±0.03 of it."""
    sized = pw.size_replications(d, alpha, target, paired=paired, seed=pw.simulation_seed("plan"))
    n, stated = sized.replications, sized.power
    assert n is not None and stated is not None and stated >= target
    seed = 1000 + n + 7 * int(paired)
    simulated = _scipy_power(d, n, alpha, paired=paired, draws=10_000, seed=seed)
    assert simulated >= target - 0.03, (n, stated, simulated)
    assert abs(stated - simulated) <= 0.03, (n, stated, simulated)


def test_noise_floor_at_the_audit_n_pools_the_base_with_its_seed_twins() -> None:
    """With conditions that change only the seeds, the floor is measured at the audit's sizes:
    every split of the base pooled with one twin into groups of their two sizes, tested with
    this file's own enumeration; two twins share the split budget."""
    base = [0.31, 0.52, 0.24, 0.95, 0.77, 0.33]
    twin = [0.81, 0.47, 0.69, 0.12, 0.58, 0.42]
    row = pw.noise_floor(
        {"m": {"base": base}}, "h", companions_by_metric={"m": {"base": [("seed=2", twin)]}}
    )["m"][0]
    assert row["scope"] == "audit" and row["companions"] == ["seed=2"]
    assert row["sizes"] == [6, 6] and row["n"] == 6 and row["note"] is None
    pooled = np.sort(np.array(base + twin))
    flips = 0
    for group in itertools.combinations(range(12), 6):
        if 0 not in group:
            continue  # a split and its mirror give the same two-sided p
        mask = np.zeros(12, dtype=bool)
        mask[list(group)] = True
        flips += int(_enumerated_rank_sum_p(pooled[~mask], pooled[mask]) < 0.05)
    assert row["splits"] == math.comb(12, 6) // 2 and row["flipRate"] == flips / row["splits"]
    # Unequal sizes: a twin with a lost replication is split into groups of 6 and 5.
    lost = pw.noise_floor(
        {"m": {"base": base}},
        "h",
        companions_by_metric={"m": {"base": [("seed=2", [*twin[:5], math.nan])]}},
    )["m"][0]
    assert lost["sizes"] == [6, 5] and lost["splits"] == math.comb(11, 5)
    two = pw.noise_floor(
        {"m": {"base": base}},
        "h",
        splits=100,
        companions_by_metric={"m": {"base": [("seed=2", twin), ("seed=3", list(reversed(twin)))]}},
    )["m"][0]
    assert two["companions"] == ["seed=2", "seed=3"] and two["splits"] == 100


def test_noise_floor_at_the_audit_n_is_identical_for_identical_pools_and_states_its_limit() -> None:
    rng = np.random.default_rng(8)
    base, twin = rng.normal(size=20).tolist(), rng.normal(size=20).tolist()
    one = pw.noise_floor(
        {"m": {"base": base}}, "h", companions_by_metric={"m": {"base": [("a", twin)]}}
    )["m"][0]
    other = pw.noise_floor(
        {"k": {"base@x": list(reversed(base))}},
        "h",
        companions_by_metric={"k": {"base@x": [("b@x", twin)]}},
    )["k"][0]
    assert one["splits"] == other["splits"] == pw.NOISE_FLOOR_SPLITS
    assert one["flipRate"] == other["flipRate"]
    # Three against three cannot reach 0.05 (2 / 20): a note, no halves in its place.
    small = pw.noise_floor(
        {"m": {"base": [1.0, 2, 3]}},
        "h",
        companions_by_metric={"m": {"base": [("a", [4.0, 5, 6])]}},
    )["m"][0]
    assert small["scope"] == "audit" and small["flipRate"] is None and small["splits"] == 0
    assert small["sizes"] == [3, 3] and pw.smallest_rank_p(3, 3) == pytest.approx(0.1)
    assert small["note"] == nf.unreachable_split_note([3, 3], 0.05, 0.1, halves=False)
    # A twin with fewer than 2 usable values is no twin: the halves are used.
    halves = pw.noise_floor(
        {"m": {"base": base}}, "h", companions_by_metric={"m": {"base": [("a", [1.0, math.nan])]}}
    )["m"][0]
    assert halves["scope"] == "halves" and halves["sizes"] == [10, 10]


def test_noise_floor_at_the_audit_n_is_at_most_alpha_for_exchangeable_replications() -> None:
    rng = np.random.default_rng(9)
    rates = [
        pw.noise_floor(
            {"m": {"base": rng.normal(size=10)}},
            f"h{i}",
            splits=40,
            companions_by_metric={"m": {"base": [("a", rng.normal(size=10))]}},
        )["m"][0]["flipRate"]
        for i in range(25)
    ]
    assert 0.01 < float(np.mean(rates)) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 1000)
