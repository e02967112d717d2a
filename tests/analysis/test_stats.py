"""The statistics layer against scipy, statsmodels and hand-written reference implementations."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
from scipy import stats as scipy_stats
from statsmodels.stats.multitest import multipletests

from simreport.analysis.stats import (
    NO_OBSERVATIONS_NOTE,
    SMALL_SPREAD_FRACTION,
    UNIFORM_TARGET_NOTE,
    bootstrap_ci,
    bootstrap_seed,
    cliff_delta,
    cohen_d,
    direction_flip,
    finite,
    holm,
    mann_whitney_p,
    mean,
    pairwise,
    pooled_sd,
    small_spread,
    small_spread_note,
    too_few_note,
    tvd_score,
    wasserstein1,
    zero_violation_upper_bound,
)

# --- hand-written references -------------------------------------------------------------------


def exact_mwu_p(x: list[float], y: list[float]) -> float:
    """Two-sided exact p by enumerating every assignment of ranks to x (no ties allowed)."""
    pooled = sorted(x + y)
    assert len(set(pooled)) == len(pooled)
    rank = {v: i + 1 for i, v in enumerate(pooled)}
    n1, n2 = len(x), len(y)
    u1 = sum(rank[v] for v in x) - n1 * (n1 + 1) / 2
    u_obs = max(u1, n1 * n2 - u1)
    # Two-sided: twice the upper tail of U1 at max(U1, U2), capped at 1 (U1 is symmetric).
    subsets = list(itertools.combinations(range(1, n1 + n2 + 1), n1))
    upper = sum(1 for s in subsets if sum(s) - n1 * (n1 + 1) / 2 >= u_obs)
    total = len(subsets)
    return min(1.0, 2 * upper / total)


def normal_mwu_p(x: list[float], y: list[float]) -> float:
    """Normal approximation: tie-corrected variance and a 0.5 continuity correction."""
    pooled = np.array(x + y, dtype=float)
    n1, n2 = len(x), len(y)
    n = n1 + n2
    # Average ranks by hand.
    order = np.argsort(pooled, kind="stable")
    ranks = np.empty(n)
    sorted_vals = pooled[order]
    i = 0
    while i < n:
        j = i
        while j + 1 < n and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2
    u = max(u1, n1 * n2 - u1)
    _, tie_counts = np.unique(pooled, return_counts=True)
    tie_term = float(np.sum(tie_counts**3 - tie_counts))
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
    z = (u - n1 * n2 / 2 - 0.5) / sigma
    return min(1.0, 2 * (0.5 * math.erfc(z / math.sqrt(2))))


def brute_cliff(b: list[float], c: list[float]) -> float:
    gt = sum(1 for bi in b for ci in c if ci > bi)
    lt = sum(1 for bi in b for ci in c if ci < bi)
    return (gt - lt) / (len(b) * len(c))


def hand_cohen(b: list[float], c: list[float]) -> float:
    n1, n2 = len(b), len(c)
    m1, m2 = sum(b) / n1, sum(c) / n2
    s1 = sum((v - m1) ** 2 for v in b) / (n1 - 1) if n1 > 1 else 0.0
    s2 = sum((v - m2) ** 2 for v in c) / (n2 - 1) if n2 > 1 else 0.0
    return (m2 - m1) / math.sqrt(((n1 - 1) * s1 + (n2 - 1) * s2) / (n1 + n2 - 2))


# --- finite / mean -----------------------------------------------------------------------------


def test_finite_drops_nan_and_infinities() -> None:
    out = finite([1.0, float("nan"), 2.0, float("inf"), -float("inf"), 3])
    assert out.dtype == np.float64
    assert out.tolist() == [1.0, 2.0, 3.0]


def test_finite_rejects_two_dimensional_input() -> None:
    with pytest.raises(ValueError, match="one-dimensional"):
        finite(np.zeros((2, 2)))


def test_mean_filters_and_handles_empty() -> None:
    assert mean([1.0, float("nan"), 3.0, float("inf")]) == 2.0
    assert mean([]) is None
    assert mean([float("nan"), float("-inf")]) is None
    # A constant sample's mean is its value exactly, not 0.09999999999999999.
    assert mean([0.1] * 7) == 0.1


# --- Mann-Whitney ------------------------------------------------------------------------------


def test_mwu_exact_for_seven_matches_enumeration_and_scipy_exact() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(0.0, 1.0, 7).tolist()
    cond = rng.normal(0.8, 1.0, 9).tolist()
    p = mann_whitney_p(base, cond)
    assert p == pytest.approx(exact_mwu_p(base, cond), rel=1e-12)
    exact = scipy_stats.mannwhitneyu(base, cond, method="exact").pvalue
    asym = scipy_stats.mannwhitneyu(base, cond, method="asymptotic").pvalue
    assert p == pytest.approx(exact, rel=1e-12)
    assert abs(exact - asym) > 1e-4  # the choice of method is visible in the value


def test_mwu_eight_uses_normal_approximation_unlike_scipy_auto() -> None:
    rng = np.random.default_rng(8)
    base = rng.normal(0.0, 1.0, 8).tolist()
    cond = rng.normal(0.8, 1.0, 8).tolist()
    p = mann_whitney_p(base, cond)
    assert p == pytest.approx(normal_mwu_p(base, cond), rel=1e-12)
    asym = scipy_stats.mannwhitneyu(base, cond, method="asymptotic", use_continuity=True).pvalue
    exact = scipy_stats.mannwhitneyu(base, cond, method="exact").pvalue
    auto = scipy_stats.mannwhitneyu(base, cond, method="auto").pvalue
    assert p == pytest.approx(asym, rel=1e-12)
    assert abs(p - exact) > 1e-4
    assert auto == exact  # scipy's auto would have gone exact at 8


@pytest.mark.parametrize(("n_base", "n_cond"), [(1, 1), (1, 5), (3, 4), (7, 7), (2, 12)])
def test_mwu_exact_small_samples_match_enumeration(n_base: int, n_cond: int) -> None:
    rng = np.random.default_rng(100 + 10 * n_base + n_cond)
    base = rng.normal(0.0, 1.0, n_base).tolist()
    cond = rng.normal(0.5, 1.0, n_cond).tolist()
    assert mann_whitney_p(base, cond) == pytest.approx(exact_mwu_p(base, cond), rel=1e-12)


def test_mwu_ties_in_small_samples_use_normal_approximation() -> None:
    base = [1.0, 2.0, 2.0, 3.0, 4.0]
    cond = [2.0, 3.0, 5.0, 6.0, 6.0]
    p = mann_whitney_p(base, cond)
    assert p == pytest.approx(normal_mwu_p(base, cond), rel=1e-12)
    assert p == pytest.approx(
        scipy_stats.mannwhitneyu(base, cond, method="asymptotic").pvalue, rel=1e-12
    )


def test_mwu_tie_across_groups_counts_as_a_tie() -> None:
    # Each group is tie-free but the pooled sample has a tie: the pooled check decides.
    base = [1.0, 2.0, 3.0]
    cond = [3.0, 4.0, 5.0]
    assert mann_whitney_p(base, cond) == pytest.approx(normal_mwu_p(base, cond), rel=1e-12)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mwu_large_samples_with_heavy_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 5, 40).astype(float).tolist()
    cond = rng.integers(1, 6, 25).astype(float).tolist()
    assert mann_whitney_p(base, cond) == pytest.approx(normal_mwu_p(base, cond), rel=1e-10)


def test_mwu_doubled_tail_is_capped_at_one() -> None:
    # U = mn/2: the doubled upper tail exceeds 1.
    assert mann_whitney_p([1.0, 4.0], [2.0, 3.0]) == 1.0
    assert mann_whitney_p([1.0], [2.0]) == 1.0


def test_mwu_all_values_equal_gives_one() -> None:
    assert mann_whitney_p([2.0] * 5, [2.0] * 9) == 1.0
    assert mann_whitney_p([0.5], [0.5]) == 1.0


def test_mwu_filters_non_finite_before_choosing_method() -> None:
    rng = np.random.default_rng(11)
    base = rng.normal(0, 1, 7).tolist()
    cond = rng.normal(1, 1, 8).tolist()
    dirty_base = [*base, float("nan")]  # 8 raw values, 7 finite: still exact
    assert mann_whitney_p(dirty_base, [*cond, float("inf")]) == mann_whitney_p(base, cond)
    assert mann_whitney_p(dirty_base, cond) == pytest.approx(exact_mwu_p(base, cond), rel=1e-12)


def test_mwu_empty_after_filtering_is_none() -> None:
    assert mann_whitney_p([float("nan")], [1.0, 2.0]) is None
    assert mann_whitney_p([1.0], []) is None


def test_mwu_is_symmetric() -> None:
    rng = np.random.default_rng(5)
    base = rng.normal(0, 1, 12).tolist()
    cond = rng.normal(0.3, 1, 15).tolist()
    assert mann_whitney_p(base, cond) == pytest.approx(mann_whitney_p(cond, base), rel=1e-12)


# --- Holm --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_holm_matches_statsmodels(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, 9).tolist()
    expected = multipletests(p, method="holm")[1]
    assert holm(p) == pytest.approx(expected.tolist(), rel=1e-12)


def test_holm_with_ties_matches_statsmodels() -> None:
    p = [0.01, 0.04, 0.01, 0.03, 0.04, 0.5, 0.01]
    expected = multipletests(p, method="holm")[1]
    assert holm(p) == pytest.approx(expected.tolist(), rel=1e-12)
    assert holm(p)[0] == holm(p)[2] == holm(p)[6] == pytest.approx(0.07)


def test_holm_skips_missing_entries_and_keeps_order() -> None:
    p: list[float | None] = [0.02, None, 0.01, 0.3, None, 0.04]
    present = [v for v in p if v is not None]
    expected = iter(multipletests(present, method="holm")[1].tolist())
    result = holm(p)
    assert result[1] is None and result[4] is None
    assert [r for r in result if r is not None] == pytest.approx(list(expected), rel=1e-12)
    # m counts only the four present p-values.
    assert result[2] == pytest.approx(0.04)
    assert result[0] == pytest.approx(0.06)


def test_holm_is_monotone_and_capped() -> None:
    p = [0.9, 0.5, 0.45, 0.01]
    result = holm(p)
    assert all(r is not None and r <= 1.0 for r in result)
    assert result == pytest.approx([1.0, 1.0, 1.0, 0.04])
    order = np.argsort(p)
    adjusted = [result[i] for i in order]
    assert adjusted == sorted(adjusted)


def test_holm_edge_cases() -> None:
    assert holm([]) == []
    assert holm([None, None]) == [None, None]
    assert holm([0.03]) == [0.03]
    with pytest.raises(ValueError):
        holm([0.1, float("nan")])
    with pytest.raises(ValueError):
        holm([1.5])


# --- Cohen d -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_base", "n_cond"), [(2, 2), (5, 9), (30, 30), (1, 2), (12, 1)])
def test_cohen_d_matches_hand_formula(n_base: int, n_cond: int) -> None:
    rng = np.random.default_rng(n_base * 100 + n_cond)
    base = rng.normal(1.0, 2.0, n_base).tolist()
    cond = rng.normal(2.0, 1.0, n_cond).tolist()
    assert cohen_d(base, cond) == pytest.approx(hand_cohen(base, cond), rel=1e-12)


def test_cohen_d_one_value_against_two() -> None:
    # pooled variance = (0 + 1 * 2) / 1
    assert cohen_d([1.0], [2.0, 4.0]) == pytest.approx(2.0 / math.sqrt(2.0), rel=1e-15)


def test_cohen_d_sign_is_condition_minus_baseline() -> None:
    d = cohen_d([5.0, 6.0, 7.0], [1.0, 2.0, 3.0])
    assert d == pytest.approx(-4.0)


def test_cohen_d_constant_samples() -> None:
    assert cohen_d([0.1] * 5, [0.3] * 5) == math.inf
    assert cohen_d([0.3] * 5, [0.1] * 5) == -math.inf
    assert cohen_d([0.1] * 5, [0.1] * 8) == 0.0
    assert cohen_d([0.7] * 3, [0.7]) == 0.0


def test_cohen_d_constant_from_arithmetic_noise_is_still_constant() -> None:
    # 0.1 + 0.2 is 0.30000000000000004: a sample of it is constant, so d is a true infinity.
    third = 0.1 + 0.2
    assert cohen_d([third] * 6, [0.5] * 6) == math.inf
    d = cohen_d([third] * 6, [third] * 6)
    assert d == 0.0


def test_cohen_d_none_cases() -> None:
    assert cohen_d([1.0], [2.0]) is None  # one value per group: no pooled degrees of freedom
    assert cohen_d([], [1.0, 2.0]) is None
    assert cohen_d([float("nan"), float("inf")], [1.0, 2.0]) is None


def test_cohen_d_filters_non_finite() -> None:
    base = [1.0, 2.0, 4.0]
    cond = [3.0, 5.0, 6.0]
    assert cohen_d([*base, float("nan")], [float("-inf"), *cond]) == cohen_d(base, cond)


# --- Cliff's delta -----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_cliff_delta_matches_double_loop_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 6, int(rng.integers(1, 30))).astype(float).tolist()
    cond = rng.integers(1, 7, int(rng.integers(1, 30))).astype(float).tolist()
    assert cliff_delta(base, cond) == pytest.approx(brute_cliff(base, cond), abs=1e-15)


def test_cliff_delta_known_values() -> None:
    assert cliff_delta([1.0, 2.0], [3.0, 4.0]) == 1.0
    assert cliff_delta([3.0, 4.0], [1.0, 2.0]) == -1.0
    assert cliff_delta([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == 0.0
    # pairs: (2>1), (2=2), (2<3) -> (1 - 1) / 3
    assert cliff_delta([1.0, 2.0, 3.0], [2.0]) == 0.0
    assert cliff_delta([1.0, 2.0, 3.0], [2.5]) == pytest.approx(1 / 3)


def test_cliff_delta_empty_and_filtered() -> None:
    assert cliff_delta([], [1.0]) is None
    assert cliff_delta([1.0], [float("nan")]) is None
    assert cliff_delta([1.0, float("inf")], [2.0, float("nan")]) == 1.0


# --- Wasserstein-1 -----------------------------------------------------------------------------


def test_wasserstein_matches_scipy_and_sorted_difference() -> None:
    rng = np.random.default_rng(21)
    base = rng.normal(0, 1, 40)
    cond = rng.normal(0.5, 2, 40)
    w = wasserstein1(base, cond)
    assert w == pytest.approx(scipy_stats.wasserstein_distance(base, cond), rel=1e-12)
    # Equal sizes: the mean absolute difference of the order statistics.
    assert w == pytest.approx(float(np.mean(np.abs(np.sort(base) - np.sort(cond)))), rel=1e-12)


def test_wasserstein_unequal_sizes_and_filtering() -> None:
    assert wasserstein1([0.0], [1.0, 3.0]) == pytest.approx(2.0)
    assert wasserstein1([0.0, float("nan")], [1.0, 3.0, float("inf")]) == pytest.approx(2.0)
    assert wasserstein1([], [1.0]) is None


# --- bootstrap ---------------------------------------------------------------------------------


def test_bootstrap_seed_is_sha256_of_canonical_material() -> None:
    digest = hashlib.sha256(b"abc123\x1fcooperation\x1fD5=0.2").digest()
    assert bootstrap_seed("abc123", "cooperation", "D5=0.2") == int.from_bytes(digest[:16], "big")
    assert bootstrap_seed("abc123", "cooperation", "D5=0.2") != bootstrap_seed(
        "abc123", "cooperation", "D5=0.3"
    )
    # The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert bootstrap_seed("h", "ab", "c") != bootstrap_seed("h", "a", "bc")


def _reference_bootstrap(base: np.ndarray, cond: np.ndarray, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    ib = rng.integers(0, base.size, size=(2000, base.size))
    ic = rng.integers(0, cond.size, size=(2000, cond.size))
    diffs = cond[ic].mean(axis=1) - base[ib].mean(axis=1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return float(lo), float(hi)


def test_bootstrap_follows_the_documented_algorithm() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(0, 1, 20)
    cond = rng.normal(1, 1, 15)
    seed = bootstrap_seed("plan", "m", "c")
    assert bootstrap_ci(base, cond, seed=seed) == _reference_bootstrap(base, cond, seed)


def test_bootstrap_is_deterministic_and_seed_dependent() -> None:
    rng = np.random.default_rng(4)
    base = rng.normal(0, 1, 25).tolist()
    cond = rng.normal(0.5, 1, 25).tolist()
    s1 = bootstrap_seed("plan", "score", "a")
    s2 = bootstrap_seed("plan", "score", "b")
    first = bootstrap_ci(base, cond, seed=s1)
    assert first == bootstrap_ci(list(base), list(cond), seed=s1)
    assert first != bootstrap_ci(base, cond, seed=s2)


def test_bootstrap_brackets_observed_difference() -> None:
    rng = np.random.default_rng(9)
    base = rng.normal(10, 2, 40)
    cond = rng.normal(12, 2, 40)
    ci = bootstrap_ci(base, cond, seed=bootstrap_seed("p", "m", "c"))
    assert ci is not None
    lo, hi = ci
    observed = float(cond.mean() - base.mean())
    assert lo < observed < hi
    assert lo > 0  # a two-SD shift with 40 per group is clearly positive
    # Roughly the normal-theory width.
    se = math.sqrt(base.var(ddof=1) / 40 + cond.var(ddof=1) / 40)
    assert (hi - lo) == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_bootstrap_level_changes_width() -> None:
    rng = np.random.default_rng(10)
    base = rng.normal(0, 1, 30)
    cond = rng.normal(0, 1, 30)
    seed = 12345
    ci95 = bootstrap_ci(base, cond, seed=seed)
    ci80 = bootstrap_ci(base, cond, seed=seed, level=0.8)
    assert ci95 is not None and ci80 is not None
    assert ci95[0] < ci80[0] < ci80[1] < ci95[1]


def test_bootstrap_constant_groups_give_exact_degenerate_interval() -> None:
    ci = bootstrap_ci([0.1] * 5, [0.3] * 5, seed=1)
    assert ci == (0.3 - 0.1, 0.3 - 0.1)


def test_bootstrap_single_values_and_empty() -> None:
    assert bootstrap_ci([1.0], [3.0], seed=1) == (2.0, 2.0)
    assert bootstrap_ci([], [1.0], seed=1) is None
    assert bootstrap_ci([1.0], [float("nan")], seed=1) is None


def test_bootstrap_filters_non_finite() -> None:
    base = [1.0, 2.0, 3.0, 5.0]
    cond = [2.0, 4.0, 4.5]
    assert bootstrap_ci([*base, float("nan")], [*cond, float("inf")], seed=7) == bootstrap_ci(
        base, cond, seed=7
    )


def test_bootstrap_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], [2.0], seed=1, draws=0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], [2.0], seed=1, level=1.0)


# --- TVD score ---------------------------------------------------------------------------------

TARGET = {"cooperate": 0.6, "defect": 0.3, "abstain": 0.1}


def test_tvd_perfect_match_is_100() -> None:
    score, note = tvd_score({"cooperate": 60, "defect": 30, "abstain": 10}, TARGET)
    assert note is None
    assert score == pytest.approx(100.0, abs=1e-9)


def test_tvd_target_weights_are_normalised() -> None:
    score, _ = tvd_score(
        {"cooperate": 6, "defect": 3, "abstain": 1}, {"cooperate": 6, "defect": 3, "abstain": 1}
    )
    assert score == pytest.approx(100.0, abs=1e-9)


def test_tvd_uniform_counts_score_zero() -> None:
    score, note = tvd_score({"cooperate": 5, "defect": 5, "abstain": 5}, TARGET)
    assert note is None
    assert score == pytest.approx(0.0, abs=1e-9)


def test_tvd_hand_computed_value() -> None:
    # p = (0.5, 0.5, 0); TV(p, q) = 0.5 * (0.1 + 0.2 + 0.1) = 0.2
    # TV(u, q) = 0.5 * (|1/3 - 0.6| + |1/3 - 0.3| + |1/3 - 0.1|)
    score, _ = tvd_score({"cooperate": 2, "defect": 2}, TARGET)
    tv_uniform = 0.5 * (abs(1 / 3 - 0.6) + abs(1 / 3 - 0.3) + abs(1 / 3 - 0.1))
    assert score == pytest.approx(100 * (1 - 0.2 / tv_uniform), rel=1e-12)


def test_tvd_farther_than_uniform_is_negative_and_unclipped() -> None:
    score, note = tvd_score({"abstain": 10}, TARGET)
    assert note is None
    # TV(p, q) = 0.9; TV(u, q) = 0.8 / 3
    assert score == pytest.approx(100 * (1 - 0.9 / (0.8 / 3)), rel=1e-12)
    assert score is not None and score < -200


def test_tvd_ignores_categories_outside_target() -> None:
    with_extra = tvd_score({"cooperate": 6, "defect": 3, "abstain": 1, "other": 500}, TARGET)
    without = tvd_score({"cooperate": 6, "defect": 3, "abstain": 1}, TARGET)
    assert with_extra == without
    assert with_extra[0] == pytest.approx(100.0, abs=1e-9)


def test_tvd_uniform_target_is_undefined() -> None:
    assert tvd_score({"a": 3, "b": 1}, {"a": 0.5, "b": 0.5}) == (None, UNIFORM_TARGET_NOTE)
    assert tvd_score({"a": 3}, {"a": 1.0}) == (None, UNIFORM_TARGET_NOTE)
    # Thirds entered as floats are still uniform.
    assert tvd_score({"a": 1}, {"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})[1] == UNIFORM_TARGET_NOTE


def test_tvd_no_observations_in_target_categories() -> None:
    assert tvd_score({"other": 4}, TARGET) == (None, NO_OBSERVATIONS_NOTE)
    assert tvd_score({}, TARGET) == (None, NO_OBSERVATIONS_NOTE)


def test_tvd_rejects_invalid_weights() -> None:
    with pytest.raises(ValueError):
        tvd_score({"a": -1}, TARGET)
    with pytest.raises(ValueError):
        tvd_score({"a": 1}, {"a": float("nan"), "b": 1.0})
    with pytest.raises(ValueError):
        tvd_score({"a": 1}, {})
    with pytest.raises(ValueError):
        tvd_score({"a": 1}, {"a": 0.0, "b": 0.0})


# --- zero-violation bound ----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 10, 30, 100, 1000])
def test_zero_violation_bound_formula(n: int) -> None:
    assert zero_violation_upper_bound(n) == pytest.approx(1 - 0.05 ** (1 / n), rel=1e-12)


def test_zero_violation_bound_values() -> None:
    assert zero_violation_upper_bound(1) == pytest.approx(0.95)
    # the "rule of three" for large n
    bound = zero_violation_upper_bound(10_000)
    assert bound is not None and bound == pytest.approx(3 / 10_000, rel=0.01)
    assert zero_violation_upper_bound(0) is None
    assert zero_violation_upper_bound(-3) is None


# --- direction flip ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("diff", "expected", "flip"),
    [
        (-0.5, "increase", True),
        (0.5, "increase", False),
        (0.0, "increase", False),
        (0.5, "decrease", True),
        (-0.5, "decrease", False),
        (0.0, "decrease", False),
        (0.5, None, None),
        (None, "increase", None),
        (float("nan"), "decrease", None),
        (-math.inf, "increase", True),
    ],
)
def test_direction_flip(diff: float | None, expected: str | None, flip: bool | None) -> None:
    assert direction_flip(diff, expected) is flip


def test_direction_flip_rejects_unknown_direction() -> None:
    with pytest.raises(ValueError, match="increase"):
        direction_flip(1.0, "up")


# --- pairwise ----------------------------------------------------------------------------------

PAIRWISE_KEYS = {
    "nBase",
    "nCond",
    "meanBase",
    "meanCond",
    "diff",
    "ci95",
    "cohenD",
    "mwuP",
    "w1",
    "cliffDelta",
    "directionFlip",
    "tested",
    "smallSpread",
    "note",
}


def test_pairwise_row_agrees_with_the_single_functions() -> None:
    rng = np.random.default_rng(31)
    base = [*rng.normal(0, 1, 12).tolist(), float("nan")]
    cond = [*rng.normal(-1, 1, 10).tolist(), float("inf")]
    seed = bootstrap_seed("p", "m", "c")
    row = pairwise(base, cond, seed=seed, expected="increase")
    assert set(row) == PAIRWISE_KEYS
    assert (row["nBase"], row["nCond"]) == (12, 10)
    assert row["meanBase"] == mean(base)
    assert row["meanCond"] == mean(cond)
    assert row["diff"] == pytest.approx(row["meanCond"] - row["meanBase"])
    ci = bootstrap_ci(base, cond, seed=seed)
    assert ci is not None
    assert row["ci95"] == [ci[0], ci[1]]
    assert row["cohenD"] == cohen_d(base, cond)
    assert row["mwuP"] == mann_whitney_p(base, cond)
    assert row["w1"] == wasserstein1(base, cond)
    assert row["cliffDelta"] == cliff_delta(base, cond)
    assert row["directionFlip"] is True
    assert (row["tested"], row["smallSpread"], row["note"]) == (True, False, None)
    assert all(isinstance(v, float) for k, v in row.items() if k in {"meanBase", "cohenD", "mwuP"})


def test_pairwise_single_replication_per_group_is_not_a_test() -> None:
    """SPEC §6: fewer than 2 usable values in a group leaves p, the interval and d undefined,
    not p = 1 and a zero-width interval."""
    row = pairwise([1.0], [3.0], seed=1, expected="decrease")
    assert row["nBase"] == row["nCond"] == 1
    assert row["diff"] == 2.0
    for key in ("ci95", "cohenD", "mwuP", "directionFlip"):
        assert row[key] is None, key
    assert row["w1"] == 2.0
    assert row["cliffDelta"] == 1.0
    assert row["tested"] is False and row["smallSpread"] is False
    assert row["note"] == (
        "fewer than 2 replications with a finite value in the base and the condition "
        "(base 1, condition 1): not tested"
    )


@pytest.mark.parametrize(
    ("base", "cond", "where"),
    [
        ([1.0], [2.0, 3.0, 4.0], "the base"),
        ([1.0, 2.0, float("nan")], [3.0, float("inf")], "the condition"),
    ],
)
def test_pairwise_one_value_in_one_group(base: list[float], cond: list[float], where: str) -> None:
    row = pairwise(base, cond, seed=1, expected="increase")
    assert row["tested"] is False
    assert row["cohenD"] is None and row["mwuP"] is None and row["ci95"] is None
    assert row["note"].startswith(f"fewer than 2 replications with a finite value in {where} (")
    assert row["w1"] == wasserstein1(base, cond)
    assert row["cliffDelta"] == cliff_delta(base, cond)


def test_pairwise_empty_after_filtering_is_none_everywhere() -> None:
    row = pairwise([float("nan"), float("inf")], [1.0, 2.0], seed=1, expected="increase")
    assert row["nBase"] == 0 and row["nCond"] == 2
    assert row["meanCond"] == 1.5
    for key in PAIRWISE_KEYS - {"nBase", "nCond", "meanCond", "tested", "smallSpread", "note"}:
        assert row[key] is None, key
    assert row["tested"] is False and row["smallSpread"] is False
    assert row["note"] == too_few_note(0, 2)


def test_pairwise_two_values_each_is_a_test() -> None:
    row = pairwise([1.0, 2.0], [3.0, 5.0], seed=1, expected=None)
    assert row["tested"] is True
    assert row["cohenD"] == pytest.approx(hand_cohen([1.0, 2.0], [3.0, 5.0]))
    assert row["mwuP"] == pytest.approx(exact_mwu_p([1.0, 2.0], [3.0, 5.0]))
    assert row["ci95"] is not None


def test_pairwise_constant_groups() -> None:
    row = pairwise([0.1] * 5, [0.3] * 5, seed=2, expected=None)
    assert row["cohenD"] == math.inf
    assert row["mwuP"] == pytest.approx(normal_mwu_p([0.1] * 5, [0.3] * 5))
    assert row["cliffDelta"] == 1.0
    assert row["directionFlip"] is None
    assert row["smallSpread"] is True
    assert row["note"] == small_spread_note([0.1] * 5, [0.3] * 5)


# --- pooled spread and the small-spread rule -----------------------------------------------------


def test_pooled_sd_matches_hand_formula() -> None:
    rng = np.random.default_rng(8)
    b, c = rng.normal(0, 1, 9).tolist(), rng.normal(2, 3, 6).tolist()
    expected = math.sqrt((8 * np.var(b, ddof=1) + 5 * np.var(c, ddof=1)) / 13)
    assert pooled_sd([*b, float("nan")], c) == pytest.approx(expected)
    assert pooled_sd([0.1] * 4, [0.1 + 0.2] * 3) == 0.0
    assert pooled_sd([1.0], [2.0]) is None
    assert pooled_sd([], [1.0, 2.0]) is None


def test_small_spread_rule() -> None:
    fraction = SMALL_SPREAD_FRACTION
    noise = [-1.0, 0.0, 1.0]  # sample SD exactly 1
    # Spread just under the fraction of the larger |mean| is small; just over it is not.
    under = [10.0 + 0.99 * fraction * 10.0 * e for e in noise]
    over = [10.0 + 1.01 * fraction * 10.0 * e for e in noise]
    assert small_spread([v - 0.001 for v in under], under) is True
    assert small_spread([v - 0.001 for v in over], over) is False
    # Constant groups with different means: d is infinite, the spread is what made it so.
    assert small_spread([1.0] * 3, [2.0] * 3) is True
    # d = 0 (equal means) is not an effect, whatever the spread.
    assert small_spread([1.0] * 3, [1.0] * 3) is False
    assert small_spread(under, under) is False
    # An ordinary spread, and undefined d.
    assert small_spread([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]) is False
    assert small_spread([1.0], [2.0]) is False
    # Means near zero: the rule is relative, so a small spread around 0 is not small.
    assert small_spread([-1e-6, 0.0, 1e-6], [1e-6, 2e-6, 3e-6]) is False
