"""Pure statistics for comparing a condition's sample with its baseline (SPEC §6 conventions).

Every function takes plain sequences or arrays, filters them to finite values, and returns Python
numbers; none reads files, clocks or a global random generator.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

Sample: TypeAlias = Sequence[float] | npt.NDArray[Any]
FloatArray: TypeAlias = npt.NDArray[np.float64]

# The exact Mann-Whitney distribution is used below this smaller-sample size (SPEC: "fewer than 8").
EXACT_MWU_MAX_EXCLUSIVE = 8
BOOTSTRAP_DRAWS = 2000
DIRECTIONS = ("increase", "decrease")

# A comparison is a test only with at least this many finite values in each group (SPEC §6).
MIN_REPLICATIONS = 2

# A nonzero d counts as coming from near-zero spread when the pooled SD is 0 or below this
# fraction of the larger absolute mean of the two groups: at that point the size of d says how
# little the runs vary, not how far apart the groups are.
SMALL_SPREAD_FRACTION = 1e-3

UNIFORM_TARGET_NOTE = "target distribution is uniform; the score is undefined"
NO_OBSERVATIONS_NOTE = "no observations in the target's categories"

# Relative spread below which a target's raw weights count as uniform: entering 1/3 three times
# must not turn a zero normaliser into 1e-17 and the score into nonsense.
_UNIFORM_RTOL = 1e-9


def finite(values: Sample) -> FloatArray:
    """Return `values` as a 1-D float64 array with nan and ±inf dropped."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"expected a one-dimensional sample, got shape {arr.shape}")
    return arr[np.isfinite(arr)]


def _is_constant(x: FloatArray) -> bool:
    return bool(x.size > 0 and np.all(x == x[0]))


def _center(x: FloatArray) -> float:
    # A constant sample's mean is its value exactly; summation would turn [0.1] * 5 into
    # 0.09999999999999999 and a zero difference into a spurious nonzero one.
    if _is_constant(x):
        return float(x[0])
    # fsum is exactly rounded, so the mean does not depend on the order of the values: two
    # samples holding the same values give the same mean and a difference of exactly 0.
    return math.fsum(x.tolist()) / x.size


def _spread(x: FloatArray) -> float:
    # Sample variance (n - 1); exactly 0 for constant samples, including a single value.
    if _is_constant(x):
        return 0.0
    return float(np.var(x, ddof=1))


def mean(values: Sample) -> float | None:
    """Mean of the finite values; None when there are none."""
    x = finite(values)
    if x.size == 0:
        return None
    return _center(x)


def mann_whitney_p(base: Sample, cond: Sample) -> float | None:
    """Two-sided Mann-Whitney U p-value; None when either sample is empty.

    Exact when the smaller sample has fewer than 8 values and the pooled sample has no ties,
    otherwise the normal approximation with tie-corrected variance and continuity correction.
    All pooled values equal gives 1.0.
    """
    b, c = finite(base), finite(cond)
    if b.size == 0 or c.size == 0:
        return None
    pooled = np.concatenate([b, c])
    if _is_constant(pooled):
        return 1.0
    has_ties = np.unique(pooled).size < pooled.size
    # Chosen explicitly: scipy's 'auto' switches at <= 8, which is not our contract.
    exact = min(b.size, c.size) < EXACT_MWU_MAX_EXCLUSIVE and not has_ties
    result = _scipy_stats.mannwhitneyu(
        b,
        c,
        alternative="two-sided",
        method="exact" if exact else "asymptotic",
        use_continuity=True,
    )
    return float(result.pvalue)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm step-down adjusted p-values in input order; None entries are skipped and not counted."""
    present = [i for i, p in enumerate(pvalues) if p is not None]
    out: list[float | None] = [None] * len(pvalues)
    if not present:
        return out
    raw = np.array([pvalues[i] for i in present], dtype=np.float64)
    if not np.all((raw >= 0.0) & (raw <= 1.0)):
        raise ValueError(f"p-values must lie in [0, 1], got {raw.tolist()}")
    m = raw.size
    # Stable order keeps the result independent of how ties are arranged in the input.
    order = np.argsort(raw, kind="stable")
    scaled = raw[order] * np.arange(m, 0, -1, dtype=np.float64)
    adjusted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    for rank, position in enumerate(order):
        out[present[int(position)]] = float(adjusted[rank])
    return out


def _pooled_variance(b: FloatArray, c: FloatArray) -> float:
    n1, n2 = b.size, c.size
    return ((n1 - 1) * _spread(b) + (n2 - 1) * _spread(c)) / (n1 + n2 - 2)


def pooled_sd(base: Sample, cond: Sample) -> float | None:
    """The pooled standard deviation (n - 1 denominators) that Cohen's d divides by.

    None when a sample is empty or the pooled degrees of freedom are 0; exactly 0 when both
    samples are constant.
    """
    b, c = finite(base), finite(cond)
    if b.size == 0 or c.size == 0 or b.size + c.size - 2 < 1:
        return None
    return math.sqrt(_pooled_variance(b, c))


def small_spread(base: Sample, cond: Sample) -> bool:
    """Whether Cohen's d is nonzero only because the runs barely vary: the pooled SD is 0 (d is
    ±inf) or below `SMALL_SPREAD_FRACTION` of the larger absolute mean. False when d is 0 or
    undefined."""
    b, c = finite(base), finite(cond)
    sd = pooled_sd(b, c)
    if sd is None or _center(c) == _center(b):
        return False
    scale = max(abs(_center(b)), abs(_center(c)))
    return sd == 0.0 or sd < SMALL_SPREAD_FRACTION * scale


def cohen_d(base: Sample, cond: Sample) -> float | None:
    """(mean(cond) - mean(base)) / pooled SD with n - 1 denominators.

    None when a sample is empty or the pooled degrees of freedom are 0 (one value per group).
    Zero pooled spread gives 0.0 for equal means and a signed infinity otherwise.
    """
    b, c = finite(base), finite(cond)
    n1, n2 = b.size, c.size
    if n1 == 0 or n2 == 0 or n1 + n2 - 2 < 1:
        return None
    diff = _center(c) - _center(b)
    pooled_var = _pooled_variance(b, c)
    if pooled_var == 0.0:
        if diff == 0.0:
            return 0.0
        return math.copysign(math.inf, diff)
    return diff / math.sqrt(pooled_var)


def cliff_delta(base: Sample, cond: Sample) -> float | None:
    """(#{c > b} - #{c < b}) / (n_b * n_c) over all pairs; ties count for neither side."""
    b, c = finite(base), finite(cond)
    if b.size == 0 or c.size == 0:
        return None
    b_sorted = np.sort(b)
    below = np.searchsorted(b_sorted, c, side="left")  # baseline values strictly below each c
    above = b.size - np.searchsorted(b_sorted, c, side="right")  # strictly above each c
    # Integer sums keep the numerator exact for any sample size.
    dominance = int(below.sum()) - int(above.sum())
    return dominance / (b.size * c.size)


def wasserstein1(base: Sample, cond: Sample) -> float | None:
    """Wasserstein-1 distance between the two empirical distributions; None when one is empty."""
    b, c = finite(base), finite(cond)
    if b.size == 0 or c.size == 0:
        return None
    return float(_scipy_stats.wasserstein_distance(b, c))


def bootstrap_seed(plan_hash: str, metric: str, condition: str) -> int:
    """Bootstrap seed for one (plan, metric, condition): the first 16 bytes of a sha256."""
    # The unit separator cannot occur in ids, so distinct triples never share a string.
    material = f"{plan_hash}\x1f{metric}\x1f{condition}"
    digest = hashlib.sha256(material.encode("utf-8")).digest()
    return int.from_bytes(digest[:16], "big")


def _resampled_means(x: FloatArray, rng: np.random.Generator, draws: int) -> FloatArray:
    # Draw the index matrix even for constant samples so the generator's stream, and so the
    # other group's resamples, do not depend on whether this group happens to be constant.
    idx = rng.integers(0, x.size, size=(draws, x.size))
    if _is_constant(x):
        return np.full(draws, x[0], dtype=np.float64)
    means: FloatArray = x[idx].mean(axis=1)
    return means


def bootstrap_ci(
    base: Sample,
    cond: Sample,
    *,
    seed: int,
    draws: int = BOOTSTRAP_DRAWS,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of mean(cond) - mean(base); groups resampled independently.

    Deterministic for a given seed (see `bootstrap_seed`). None when either sample is empty.
    """
    if draws < 1:
        raise ValueError(f"draws must be positive, got {draws}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    b, c = finite(base), finite(cond)
    if b.size == 0 or c.size == 0:
        return None
    rng = np.random.default_rng(seed)
    # Base first, then condition: the order is part of what makes intervals reproducible.
    base_means = _resampled_means(b, rng, draws)
    cond_means = _resampled_means(c, rng, draws)
    diffs = cond_means - base_means
    # Written so that level 0.95 yields exactly 2.5 and 97.5.
    tail = (100.0 - 100.0 * level) / 2.0
    lo, hi = np.percentile(diffs, [tail, 100.0 - tail])
    return float(lo), float(hi)


def _check_weights(weights: Mapping[str, float], what: str) -> None:
    for key, value in weights.items():
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{what}[{key!r}] must be a finite non-negative number, got {value}")


def tvd_score(
    counts: Mapping[str, float], target: Mapping[str, float]
) -> tuple[float | None, str | None]:
    """SimBench-style score 100 * (1 - TV(p, target) / TV(uniform, target)), not clipped.

    `counts` are normalised over the target's categories only (other categories are ignored).
    Returns (score, None), or (None, note) when the score is undefined.
    """
    _check_weights(target, "target")
    _check_weights(counts, "counts")
    categories = sorted(target)  # a fixed order keeps the float sums reproducible
    if not categories:
        raise ValueError("target distribution has no categories")
    q_raw = np.array([float(target[k]) for k in categories], dtype=np.float64)
    q_total = float(q_raw.sum())
    if q_total <= 0.0:
        raise ValueError("target distribution has no positive weight")
    if float(q_raw.max() - q_raw.min()) <= _UNIFORM_RTOL * float(q_raw.max()):
        return None, UNIFORM_TARGET_NOTE
    p_raw = np.array([float(counts.get(k, 0.0)) for k in categories], dtype=np.float64)
    p_total = float(p_raw.sum())
    if p_total <= 0.0:
        return None, NO_OBSERVATIONS_NOTE
    p = p_raw / p_total
    q = q_raw / q_total
    uniform = np.full(len(categories), 1.0 / len(categories))
    tv = 0.5 * float(np.abs(p - q).sum())
    tv_uniform = 0.5 * float(np.abs(uniform - q).sum())
    return 100.0 * (1.0 - tv / tv_uniform), None


def zero_violation_upper_bound(n: int) -> float | None:
    """95% upper bound on a violation rate after n trials with none: 1 - 0.05**(1/n)."""
    if n <= 0:
        return None
    # -expm1 keeps precision for large n, where 0.05**(1/n) is close to 1.
    return -math.expm1(math.log(0.05) / n)


def direction_flip(diff: float | None, expected: str | None) -> bool | None:
    """Whether `diff` moves strictly against the expected direction ("increase" or "decrease").

    None when there is no expectation or no usable difference; a zero difference is no flip.
    """
    if expected is None:
        return None
    if expected not in DIRECTIONS:
        raise ValueError(f"expected direction must be one of {DIRECTIONS}, got {expected!r}")
    if diff is None or math.isnan(diff):
        return None
    if expected == "increase":
        return diff < 0
    return diff > 0


def too_few_note(n_base: int, n_cond: int) -> str:
    """Why a comparison with fewer than `MIN_REPLICATIONS` finite values in a group is no test."""
    short = [
        where
        for where, n in (("the base", n_base), ("the condition", n_cond))
        if n < MIN_REPLICATIONS
    ]
    return (
        f"fewer than {MIN_REPLICATIONS} replications with a finite value in "
        f"{' and '.join(short)} (base {n_base}, condition {n_cond}): not tested"
    )


def small_spread_note(base: Sample, cond: Sample) -> str:
    """Explains a d flagged by `small_spread`: where its size comes from."""
    b, c = finite(base), finite(cond)
    sd = pooled_sd(b, c)
    if not sd:
        return (
            "|d| comes from near-zero spread: both groups are constant (pooled SD 0) and their "
            "means differ, so d is infinite whatever the size of the difference"
        )
    scale = max(abs(_center(b)), abs(_center(c)))
    return (
        f"|d| comes from near-zero spread: the pooled SD ({sd:.3g}) is below "
        f"{SMALL_SPREAD_FRACTION:.1%} of the larger |mean| ({scale:.3g}), so a difference of "
        f"{_center(c) - _center(b):.3g} is {abs(_center(c) - _center(b)) / sd:.3g} SDs"
    )


def pairwise(base: Sample, cond: Sample, *, seed: int, expected: str | None) -> dict[str, Any]:
    """One row of audit.json `tests` for a condition against its base, without `holmP`.

    With at least `MIN_REPLICATIONS` finite values in each group the row is a test (`tested`):
    it has a p value, an interval and d, and `smallSpread` says whether d comes from near-zero
    spread (with a note saying so). With fewer, p, the interval, d and the direction flip are
    None and the note says which group is short; the difference, W1 and Cliff's delta stay
    whenever both groups have a value.
    """
    b, c = finite(base), finite(cond)
    mean_base, mean_cond = mean(b), mean(c)
    diff = None if mean_base is None or mean_cond is None else mean_cond - mean_base
    tested = min(b.size, c.size) >= MIN_REPLICATIONS
    ci = bootstrap_ci(b, c, seed=seed) if tested else None
    spread_is_small = tested and small_spread(b, c)
    if not tested:
        note: str | None = too_few_note(int(b.size), int(c.size))
    elif spread_is_small:
        note = small_spread_note(b, c)
    else:
        note = None
    return {
        "nBase": int(b.size),
        "nCond": int(c.size),
        "meanBase": mean_base,
        "meanCond": mean_cond,
        "diff": diff,
        "ci95": None if ci is None else [ci[0], ci[1]],
        "cohenD": cohen_d(b, c) if tested else None,
        "mwuP": mann_whitney_p(b, c) if tested else None,
        "w1": wasserstein1(b, c),
        "cliffDelta": cliff_delta(b, c),
        "directionFlip": direction_flip(diff, expected) if tested else None,
        "tested": tested,
        "smallSpread": spread_is_small,
        "note": note,
    }
