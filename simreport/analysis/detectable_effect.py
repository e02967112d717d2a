"""Power and minimum detectable effects (SPEC §6, §6a): of the rank tests the audit decides
with, simulated with draws from a caller's seed, and of the t-tests as a reference that bounds
them. Pure functions, numbers in, numbers out. The design (effect units, the t-test reference):
docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
from scipy import integrate, optimize, special
from scipy import stats as _scipy_stats

from . import rank_power, stats
from .rank_power import RankDesign

DEFAULT_POWER = 0.8
DEFAULT_ALPHA = 0.05
POWER_DRAWS = rank_power.POWER_DRAWS

# Below this, a lower tail that the special functions return as nan is dropped: it is bounded by
# Φ(-nc) (see `_lower_tail`), so dropping it moves the power by less than this.
_NEGLIGIBLE_TAIL = 1e-13


# --------------------------------------------------------------------------- power of the t-test


def check_levels(alpha: float, power: float | None = None) -> None:
    """Raise ValueError unless 0 < alpha < 1 and, when given, alpha < power < 1."""
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
    check_levels(alpha)
    if n_base < 2 or n_cond < 2:
        raise ValueError(f"the t-test needs at least 2 values per group, got {n_base}, {n_cond}")
    df = float(n_base + n_cond - 2)
    nc = abs(float(d)) * math.sqrt(n_base * n_cond / (n_base + n_cond))
    crit = float(_scipy_stats.t.isf(alpha / 2.0, df))
    return min(_upper_tail(crit, df, nc) + _lower_tail(-crit, df, nc), 1.0)


def paired_t_test_power(d: float, n: int, alpha: float) -> float:
    """Power of the two-sided paired t-test (one-sample t on the differences) to detect a true
    mean difference of |d| SDs of the differences with `n` pairs at level `alpha`."""
    check_levels(alpha)
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
    check_levels(alpha, power)
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
    check_levels(alpha)
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
        check_levels(alpha, power)
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
