"""Replications per condition from a pilot (`simreport power`): how many the audit's rank test
needs to detect each observed |d| (or a given effect) with the target power at the family's α,
and the plan-level recommendation. Pure functions, simulated with draws from a caller's seed.
Reading a pilot is in `pilot`; the design (the pairing correlation): docs/statistics.md.

The power of each test and its minimum detectable effect are in `detectable_effect`, audit.json
`power` in `power_section`, the A/A noise floor in `noise_floor`; the names this module has
always offered from them stay importable here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..core.canonical import parse_number
from . import inference, rank_power, stats
from .detectable_effect import (
    DEFAULT_ALPHA,
    DEFAULT_POWER,
    POWER_DRAWS,
    check_levels,
    detectable_effect,
    mde,
    paired_t_test_power,
    rank_mde,
    rank_test_power,
    smallest_mwu_p,
    smallest_rank_p,
    t_test_power,
)
from .noise_floor import NOISE_FLOOR_SPLITS, noise_floor, noise_floor_seed
from .pairwise_rows import IDENTICAL_NOTE
from .power_section import (
    OUTSIDE_FAMILY_NOTE,
    family_alphas,
    holm_alphas,
    holm_family,
    power_section,
    row_count,
    simulation_seed,
)
from .rank_power import RankDesign

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_POWER",
    "IDENTICAL_NOTE",
    "MAX_REPLICATIONS",
    "NOISE_FLOOR_SPLITS",
    "OUTSIDE_FAMILY_NOTE",
    "POWER_DRAWS",
    "ReplicationSizing",
    "detectable_effect",
    "family_alphas",
    "holm_alphas",
    "holm_family",
    "mde",
    "noise_floor",
    "noise_floor_seed",
    "paired_effect",
    "paired_t_test_power",
    "plan_recommendation",
    "power_section",
    "rank_mde",
    "rank_test_power",
    "recommend_replications",
    "required_replications",
    "simulation_seed",
    "size_replications",
    "smallest_mwu_p",
    "smallest_rank_p",
    "t_test_power",
    "varies_seed",
]

MAX_REPLICATIONS = 10**9
"""Beyond this many replications per condition a recommendation is reported as out of reach."""


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
    `rank_test_power`. Every step is bounded by MAX_REPLICATIONS: None with a note for d = 0,
    an infinite or undefined d, and an n beyond it.
    """
    check_levels(alpha, power)
    reason = _effect_note(None if d is None else abs(float(d)))
    if reason is not None or d is None:
        return ReplicationSizing(None, None, reason, None)
    size = abs(float(d))

    def t_power(n: int) -> float:
        return paired_t_test_power(size, n, alpha) if paired else t_test_power(size, n, n, alpha)

    def rank_power_at(n: int) -> float:
        value = rank_test_power(size, n, n, alpha, paired=paired, seed=seed, draws=draws)
        return 0.0 if value is None else value

    out_of_reach = ReplicationSizing(
        None, None, f"|d| = {size:.3g} needs more than {MAX_REPLICATIONS:,} replications", None
    )
    t_n = _t_test_replications(t_power, power)
    if t_n is None or t_n / rank_power.RANK_EFFICIENCY > MAX_REPLICATIONS:
        return out_of_reach
    reach = _smallest_reaching_n(alpha, paired)
    n = max(t_n, reach)
    exact_end = inference.EXACT_MAX_PAIRS if paired else inference.EXACT_MAX_POOLED // 2
    while n <= exact_end and rank_power_at(n) < power:
        n += 1
    if n > exact_end:
        # Past the exact tests the power grows smoothly with n: bracket, then bisect.
        lo, hi = n - 1, n
        while rank_power_at(hi) < power:
            if hi >= MAX_REPLICATIONS:
                return out_of_reach
            lo, hi = hi, min(hi * 2, MAX_REPLICATIONS)
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
    check_levels(alpha, power)
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
                "nBase": row_count(row, "nBase"),
                "nCond": row_count(row, "nCond"),
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


def varies_seed(target: str) -> bool:
    """Whether an axis on `target` gives conditions different seeds, which breaks the pairing
    of base and condition replications by their shared seed path.

    Args:
        target: an axis' target (a dotted path of the scenario).

    Returns:
        True for `seed` and the paths under it.
    """
    return target == "seed" or target.startswith("seed.")
