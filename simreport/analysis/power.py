"""Power, minimum detectable effects, the A/A noise floor, replication counts from a pilot and
what a plan will cost before it runs.

The pure functions come first (numbers in, numbers out, SPEC §6 conventions); the I/O edge at the
end reads a pilot audit directory and checks that it belongs to the plan being sized.

Effect sizes are Cohen's d as audit.json reports them (pooled SD, n - 1 denominators). Power is
that of the two-sided two-sample t-test, computed from the noncentral t distribution rather than
its normal approximation: with the few replications audits often have (2 to 10 per condition) the
normal approximation promises effects the test cannot see (at n = 3 per group and α = 0.05 it
says |d| = 2.3 where the t-test needs 3.1). The audit itself tests with Mann-Whitney, which
cannot reach small α at all with few values: where no data could reach a row's α, no effect is
detectable and the MDE is null with a note saying why.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import integrate, optimize, special
from scipy import stats as _scipy_stats

from ..core.canonical import canonical_json, parse_number
from ..core.errors import InputError
from ..core.files import read_json
from . import stats

DEFAULT_POWER = 0.8
DEFAULT_ALPHA = 0.05
NOISE_FLOOR_SPLITS = 200
NOISE_FLOOR_MIN_VALUES = 4
"""A base needs this many usable values for split halves of at least two values each."""
MAX_REPLICATIONS = 10**9
"""Beyond this many replications per condition a recommendation is reported as out of reach."""

METHOD = (
    "power of the two-sided two-sample t-test (noncentral t) at each row's achieved n per group "
    "and at the Holm threshold of the row's rank among the metric's tested rows; null where the "
    "Mann-Whitney test cannot reach that threshold with these n whatever the data"
)
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


def mde(n_base: int, n_cond: int, alpha: float, power: float = DEFAULT_POWER) -> float | None:
    """The minimum detectable effect: the |d| the two-sided two-sample t-test detects with
    probability `power` at level `alpha`, with `n_base` and `n_cond` values per group.

    Noncentral t (not the normal approximation; see the module docstring). None when either
    group has fewer than 2 values (`detectable_effect` gives the reason).
    """
    _check_levels(alpha, power)
    if n_base < 2 or n_cond < 2:
        return None

    def shortfall(d: float) -> float:
        return t_test_power(d, n_base, n_cond, alpha) - power

    hi = 1.0
    while shortfall(hi) < 0.0:
        hi *= 2.0
    lo = hi / 2.0 if hi > 1.0 else 0.0
    return float(optimize.brentq(shortfall, lo, hi, xtol=1e-12, rtol=1e-12))


# ------------------------------------------------------------------ what Mann-Whitney can reach


def smallest_mwu_p(n_base: int, n_cond: int, *, ties: bool = False) -> float:
    """The smallest two-sided p the audit's Mann-Whitney test (`stats.mann_whitney_p`) can give
    with groups of these sizes: the groups completely separated. Without `ties` the values are
    all distinct (exact test below 8 values); with `ties`, also two constant groups, whose
    tie-corrected variance can give a smaller p."""
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


def detectable_effect(
    n_base: int, n_cond: int, alpha: float, power: float = DEFAULT_POWER
) -> tuple[float | None, str | None]:
    """(mde, note) for one comparison as the audit tests it: the t-test's MDE, or None with the
    reason when a group has fewer than 2 values or when the Mann-Whitney test cannot reach
    `alpha` at these n whatever the data. Where only tied values can reach it, the MDE stays
    and the note says so: continuous values of this many replications cannot."""
    _check_levels(alpha, power)
    if min(n_base, n_cond) < stats.MIN_REPLICATIONS:
        return None, stats.too_few_note(n_base, n_cond)
    floor = smallest_mwu_p(n_base, n_cond, ties=True)
    if floor >= alpha:
        return None, (
            f"the Mann-Whitney test cannot reach p < {alpha:.3g} with {n_base} and {n_cond} "
            f"values whatever the data (smallest possible p: {floor:.3g}): no effect is "
            "detectable at this n"
        )
    distinct_floor = smallest_mwu_p(n_base, n_cond)
    note = None
    if distinct_floor >= alpha:
        note = (
            f"with distinct values the Mann-Whitney test cannot reach p < {alpha:.3g} at this n "
            f"(smallest possible p: {distinct_floor:.3g}); only tied values can"
        )
    return mde(n_base, n_cond, alpha, power), note


# ----------------------------------------------------------------------- Holm and audit["power"]


def holm_alphas(m: int, alpha: float = DEFAULT_ALPHA) -> list[float]:
    """Holm's step-down thresholds for ranks 1..m (smallest p first): α / (m - k + 1)."""
    _check_levels(alpha)
    if m < 0:
        raise ValueError(f"m must not be negative, got {m}")
    return [alpha / (m - k + 1) for k in range(1, m + 1)]


def _is_tested(row: Mapping[str, Any]) -> bool:
    # Rows written before `tested` existed were in the Holm family exactly when they had a p.
    if "tested" in row:
        return bool(row["tested"])
    return row.get("mwuP") is not None


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


def power_section(
    tests_rows_by_metric: Mapping[str, Sequence[Mapping[str, Any]]],
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
) -> dict[str, Any]:
    """audit.json `power`: per metric and non-base condition, the Holm threshold of the row's
    rank among the metric's tested rows (by p, ties in row order) and the MDE at that threshold
    and the row's n. Rows that are not tested keep their place with `alpha` and `mde` null and
    a note."""
    _check_levels(alpha, power)
    metrics: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in tests_rows_by_metric.items():
        tested = [
            i for i, row in enumerate(rows) if _is_tested(row) and row.get("mwuP") is not None
        ]
        ranked = sorted(tested, key=lambda i: (float(parse_number(rows[i]["mwuP"])), i))
        thresholds = holm_alphas(len(ranked), alpha)
        alpha_of = {i: thresholds[rank] for rank, i in enumerate(ranked)}
        entries = []
        for i, row in enumerate(rows):
            n_base, n_cond = _count(row, "nBase"), _count(row, "nCond")
            row_alpha = alpha_of.get(i)
            value: float | None
            note: str | None
            if row_alpha is None:
                value, note = None, _untested_note(row)
            else:
                value, note = detectable_effect(n_base, n_cond, row_alpha, power)
            entries.append(
                {
                    "condition": row["condition"],
                    "nBase": n_base,
                    "nCond": n_cond,
                    "alpha": row_alpha,
                    "mde": value,
                    "note": note,
                }
            )
        metrics[metric] = entries
    return {"power": power, "alphaFamily": alpha, "method": METHOD, "metrics": metrics}


# --------------------------------------------------------------------------- the A/A noise floor


def noise_floor_seed(plan_hash: str, metric: str, base: str) -> int:
    """The split generator's seed for one (plan, metric, base): the first 16 bytes of a sha256,
    built like the bootstrap's seed but in its own namespace."""
    material = f"noise-floor\x1f{plan_hash}\x1f{metric}\x1f{base}"
    digest = hashlib.sha256(material.encode("utf-8")).digest()
    return int.from_bytes(digest[:16], "big")


def _halves(n: int, splits: int, rng: np.random.Generator) -> list[np.ndarray[Any, Any]]:
    """Index sets of the first half (n // 2 values) of each split: every distinct split when
    there are at most `splits` of them, else `splits` random ones."""
    half = n // 2
    # With even n, a split and its mirror give the same two-sided p: count each pair once.
    distinct = math.comb(n, half) // (2 if n % 2 == 0 else 1)
    if distinct <= splits:
        combos = itertools.combinations(range(n), half)
        chosen = [c for c in combos if n % 2 or c[0] == 0]
        return [np.array(c, dtype=np.intp) for c in chosen]
    return [np.sort(rng.permutation(n)[:half]) for _ in range(splits)]


def _smallest_reachable_n(alpha: float) -> int:
    n = NOISE_FLOOR_MIN_VALUES
    while smallest_mwu_p(n // 2, n - n // 2, ties=True) >= alpha:
        n += 1
    return n


def noise_floor(
    base_samples_by_metric: Mapping[str, Mapping[str, stats.Sample]],
    seed_material: str,
    alpha: float = DEFAULT_ALPHA,
    splits: int = NOISE_FLOOR_SPLITS,
) -> dict[str, list[dict[str, Any]]]:
    """audit.json `noiseFloor`: per metric and base, how often the audit's own test calls two
    halves of the same condition different.

    Each base's usable replications are split into two halves (every distinct split when there
    are at most `splits`, else `splits` random ones, the generator seeded from `seed_material`
    (the plan's meaning hash), the metric and the base), and each split is tested with the
    audit's Mann-Whitney test at `alpha`. The flip rate is the share of splits with p < alpha:
    how often a condition identical to its base comes out "different" with data shaped like the
    base's (its ties, discreteness and outliers) at the halves' n. It is the test's empirical
    false-positive rate on such data: near or below alpha when the test is calibrated for it,
    above alpha when it is not (the normal approximation with many ties can be), and then p
    values near alpha elsewhere in the audit deserve doubt. The halves are drawn at random, so
    the rate says nothing about dependence between replications (a drift across replications
    is spread over both halves).

    Null with a note when the base has fewer than 4 usable values, or when halves of its size
    cannot reach p < alpha whatever the data (a rate of 0 would then say nothing).
    """
    _check_levels(alpha)
    if splits < 1:
        raise ValueError(f"splits must be positive, got {splits}")
    out: dict[str, list[dict[str, Any]]] = {}
    for metric, by_base in base_samples_by_metric.items():
        rows = []
        for base, sample in by_base.items():
            x = stats.finite(sample)
            n = int(x.size)
            row: dict[str, Any] = {
                "base": base,
                "n": n,
                "splits": 0,
                "flipRate": None,
                "alpha": alpha,
                "note": None,
            }
            if n < NOISE_FLOOR_MIN_VALUES:
                row["note"] = (
                    f"fewer than {NOISE_FLOOR_MIN_VALUES} usable values in the base ({n}): "
                    "no split halves to compare"
                )
            elif (floor := smallest_mwu_p(n // 2, n - n // 2, ties=True)) >= alpha:
                row["note"] = (
                    f"halves of {n // 2} and {n - n // 2} values cannot give p < {alpha:.3g} "
                    f"whatever the data (smallest possible p: {floor:.3g}): no flip rate below "
                    f"{_smallest_reachable_n(alpha)} replications"
                )
            else:
                rng = np.random.default_rng(noise_floor_seed(seed_material, metric, base))
                halves = _halves(n, splits, rng)
                flips = 0
                for first in halves:
                    mask = np.zeros(n, dtype=bool)
                    mask[first] = True
                    p = stats.mann_whitney_p(x[mask], x[~mask])
                    flips += int(p is not None and p < alpha)
                row["splits"] = len(halves)
                row["flipRate"] = flips / len(halves)
            rows.append(row)
        out[metric] = rows
    return out


# --------------------------------------------------------------------- replications from a pilot


def _equal_groups_power(d: float, n: int, alpha: float) -> float:
    return t_test_power(d, n, n, alpha)


def _t_test_replications(d: float, alpha: float, power: float) -> int | None:
    """Smallest n per group (equal groups) at which the t-test has `power`; None beyond
    MAX_REPLICATIONS."""
    if _equal_groups_power(d, 2, alpha) >= power:
        return 2
    lo, hi = 2, 4
    while _equal_groups_power(d, hi, alpha) < power:
        if hi >= MAX_REPLICATIONS:
            return None
        lo, hi = hi, min(hi * 2, MAX_REPLICATIONS)
    while hi - lo > 1:  # power(lo) < target <= power(hi)
        mid = (lo + hi) // 2
        if _equal_groups_power(d, mid, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def required_replications(
    d: float | None, alpha: float, power: float = DEFAULT_POWER
) -> tuple[int | None, str | None]:
    """(replications per condition, note) to detect a true |d| at `alpha` with `power`: the
    smallest equal n per group at which the t-test has that power and the Mann-Whitney test can
    reach `alpha` with distinct values. None with a note for d = 0, an infinite or undefined d,
    and an n beyond MAX_REPLICATIONS."""
    _check_levels(alpha, power)
    if d is None or math.isnan(d):
        return None, "no effect size: no basis for a number of replications"
    size = abs(float(d))
    if size == 0.0:
        return None, "|d| = 0: no number of replications detects no effect"
    if math.isinf(size):
        return None, (
            "|d| is infinite (no spread in either group): it cannot size replications; "
            "give the smallest effect of interest instead"
        )
    n = _t_test_replications(size, alpha, power)
    if n is None:
        return None, f"|d| = {size:.3g} needs more than {MAX_REPLICATIONS:,} replications"
    needed = n
    while smallest_mwu_p(needed, needed) >= alpha:
        needed += 1
    if needed > n:
        return needed, (
            f"the t-test needs {n}; the Mann-Whitney test needs {needed} distinct values per "
            f"group to reach p < {alpha:.3g} at all"
        )
    return needed, None


def recommend_replications(
    pilot_tests: Mapping[str, Sequence[Mapping[str, Any]]],
    effect: float | None = None,
    power: float = DEFAULT_POWER,
    alpha: float = DEFAULT_ALPHA,
    m: int | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Per metric and condition, the replications per condition needed to detect the pilot's
    observed |d| (or `effect`, when given) with `power` at α/m, the conservative end of Holm's
    thresholds.

    `pilot_tests` are audit.json `tests` rows (`condition`, `nBase`, `nCond`, `cohenD`, and
    `identicalToBase` when the caller knows it). `m` is the number of comparisons per metric
    the full plan tests; by default, the metric's rows not identical to their base. Rows
    identical to their base are listed with a note and no number.
    """
    _check_levels(alpha, power)
    if effect is not None and not (math.isfinite(effect) and effect > 0):
        raise ValueError(f"effect must be a positive finite |d|, got {effect!r}")
    if m is not None and m < 1:
        raise ValueError(f"m must be at least 1, got {m}")
    out: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in pilot_tests.items():
        family = m if m is not None else sum(1 for r in rows if not r.get("identicalToBase"))
        row_alpha = alpha / max(family, 1)
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
                "alpha": None,
                "replications": None,
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
                entry["effect"] = size
                entry["alpha"] = row_alpha
                entry["replications"], entry["note"] = required_replications(size, row_alpha, power)
            entries.append(entry)
        out[metric] = entries
    return out


def plan_recommendation(
    recommendations: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, Any] | None:
    """The plan-level number: the largest recommendation over every row that has one, with the
    metric, condition and |d| that drive it (the first such row on ties). None when no row has
    a number."""
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
                }
    return best


# --------------------------------------------------------------------------- cost estimates


@dataclass(frozen=True)
class PilotCost:
    """What a pilot's runs cost: audit.json `cost`, the cache hits among its requests and the
    provider it ran with."""

    runs: int
    llm_calls: int
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    provider: str | None


@dataclass(frozen=True)
class TokenRates:
    """Average tokens per call from recorded responses."""

    entries: int
    prompt_tokens: float
    completion_tokens: float
    models: tuple[str, ...]
    note: str | None = None


def cache_token_rates(
    usage: Iterable[tuple[Mapping[str, Any], int, int]],
    provider: str,
    models: Sequence[str],
) -> TokenRates | None:
    """Tokens per call from the response cache's entries (meta, prompt, completion): those of
    the plan's provider and models, else (with a note) those of the provider's other models.
    None when the cache holds no response of the provider."""
    wanted = set(models)
    same_model: list[tuple[str, int, int]] = []
    same_provider: list[tuple[str, int, int]] = []
    for meta, prompt, completion in usage:
        if meta.get("provider") != provider:
            continue
        model = str(meta.get("model"))
        (same_model if model in wanted else same_provider).append((model, prompt, completion))
    chosen, note = same_model, None
    if not chosen:
        chosen = same_provider
        note = (
            f"no recorded response of {', '.join(sorted(wanted)) or 'the plan model'}: tokens "
            f"per call from other models of provider {provider}"
        )
    if not chosen:
        return None
    return TokenRates(
        entries=len(chosen),
        prompt_tokens=math.fsum(p for _, p, _ in chosen) / len(chosen),
        completion_tokens=math.fsum(c for _, _, c in chosen) / len(chosen),
        models=tuple(sorted({m for m, _, _ in chosen})),
        note=note,
    )


OFFLINE_PROVIDER = "offline"
OFFLINE_PILOT_HINT = (
    "an offline pilot costs nothing and counts the calls: `simreport audit PLAN --provider "
    "offline --replications 2 --out DIR`, then `--pilot DIR`"
)


def estimate_cost(
    *,
    runs: int,
    provider: str,
    pilot: PilotCost | None = None,
    rates: TokenRates | None = None,
) -> dict[str, Any]:
    """LLM calls and tokens for `runs` runs: per-run averages of a pilot times the runs, or
    without a pilot, the tokens per call the response cache recorded (the calls per run then
    stay unknown). Every request counts as a call: requests already in the response cache
    will cost none, so this is an upper bound."""
    notes: list[str] = []
    per_run: dict[str, float] | None = None
    per_call: dict[str, float] | None = None
    basis = "none"
    if pilot is not None and pilot.runs > 0:
        basis = "pilot"
        requests = pilot.llm_calls + pilot.cache_hits
        per_run = {"llmCalls": requests / pilot.runs}
        if pilot.llm_calls > 0:
            per_call = {
                "promptTokens": pilot.prompt_tokens / pilot.llm_calls,
                "completionTokens": pilot.completion_tokens / pilot.llm_calls,
            }
        elif requests > 0 and rates is not None:
            per_call = {
                "promptTokens": rates.prompt_tokens,
                "completionTokens": rates.completion_tokens,
            }
            notes.append(
                f"every pilot request was a cache hit: tokens per call from {rates.entries} "
                "recorded responses"
            )
        if pilot.provider is not None and pilot.provider != provider:
            notes.append(
                f"the pilot ran with provider {pilot.provider}, the plan names {provider}: the "
                "calls per run carry over, the token counts may not"
            )
        if pilot.provider == OFFLINE_PROVIDER and provider != OFFLINE_PROVIDER:
            notes.append("the offline provider estimates tokens at about four characters a token")
    elif rates is not None:
        basis = "cache"
        per_call = {
            "promptTokens": rates.prompt_tokens,
            "completionTokens": rates.completion_tokens,
        }
        notes.append(
            f"no pilot: tokens per call from {rates.entries} recorded responses of "
            f"{', '.join(rates.models)}; the calls per run are unknown before a run"
        )
        if rates.note:
            notes.append(rates.note)
    elif provider == OFFLINE_PROVIDER:
        notes.append("no basis for an estimate without a pilot: offline responses are not cached")
    else:
        notes.append(
            "no basis for an estimate: no pilot, and the response cache holds no response of "
            f"provider {provider}"
        )
    if basis != "pilot":
        notes.append(OFFLINE_PILOT_HINT)
    if provider == OFFLINE_PROVIDER:
        notes.append("the offline provider is free: its calls are counted, nothing is billed")

    calls = None if per_run is None else round(per_run["llmCalls"] * runs)
    if per_run is not None and per_call is not None:
        per_run["promptTokens"] = per_run["llmCalls"] * per_call["promptTokens"]
        per_run["completionTokens"] = per_run["llmCalls"] * per_call["completionTokens"]
    total = {
        "llmCalls": calls,
        "promptTokens": None,
        "completionTokens": None,
    }
    if calls is not None and per_call is not None and per_run is not None:
        total["promptTokens"] = round(per_run["promptTokens"] * runs)
        total["completionTokens"] = round(per_run["completionTokens"] * runs)
    return {
        "runs": runs,
        "provider": provider,
        "basis": basis,
        "perRun": per_run,
        "perCall": per_call,
        "total": total,
        "free": provider == OFFLINE_PROVIDER,
        "notes": notes,
    }


# --------------------------------------------------------------------------- I/O edge: a pilot


@dataclass(frozen=True)
class Pilot:
    """What sizing and estimates need from a pilot's audit.json."""

    directory: Path
    file: Path
    plan: Mapping[str, Any]
    plan_hash: str
    replications: int
    conditions: tuple[str, ...]
    identical: frozenset[str]
    tests: Mapping[str, list[dict[str, Any]]]
    cost: PilotCost


def _need(value: Any, kind: type | tuple[type, ...], file: Path, path: str, expected: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InputError("unexpected content", file=file, path=path, expected=expected)
    return value


def read_pilot(audit_dir: str | Path) -> Pilot:
    """Read a pilot audit directory's audit.json; InputError naming the file and the path inside
    it when it is missing or not an audit."""
    root = Path(audit_dir)
    file = root / "audit.json"
    if not file.is_file():
        hint = (
            "run `simreport analyse` on it first"
            if (root / "plan.json").is_file()
            else "an audit directory built by `simreport audit`"
        )
        raise InputError("no audit.json in the pilot directory", file=file, expected=hint)
    try:
        doc = read_json(file)
    except ValueError as exc:
        raise InputError(f"not valid JSON: {exc}", file=file, expected="audit.json") from exc
    doc = _need(doc, dict, file, "", "a JSON object")
    plan = _need(doc.get("plan"), dict, file, "plan", "the audit's plan")
    plan_hash = _need(plan.get("hash"), str, file, "plan.hash", "the plan hash")
    replications = _need(plan.get("replications"), int, file, "plan.replications", "an integer")
    conditions = _need(doc.get("conditions"), list, file, "conditions", "a list of conditions")
    ids: list[str] = []
    identical: set[str] = set()
    for i, cond in enumerate(conditions):
        cond = _need(cond, dict, file, f"conditions.{i}", "a condition")
        cid = _need(cond.get("id"), str, file, f"conditions.{i}.id", "a condition id")
        ids.append(cid)
        if cond.get("identicalToBase"):
            identical.add(cid)
    tests_doc = _need(doc.get("tests"), dict, file, "tests", "metric → list of test rows")
    tests: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in tests_doc.items():
        rows = _need(rows, list, file, f"tests.{metric}", "a list of test rows")
        checked = []
        for i, row in enumerate(rows):
            where = f"tests.{metric}.{i}"
            row = _need(row, dict, file, where, "a test row")
            cid = _need(row.get("condition"), str, file, f"{where}.condition", "a condition id")
            for key in ("nBase", "nCond"):
                _need(row.get(key), int, file, f"{where}.{key}", "an integer")
            d = row.get("cohenD")
            if not (d is None or isinstance(parse_number(d), (int, float))):
                raise InputError(
                    "unexpected content", file=file, path=f"{where}.cohenD", expected="a number"
                )
            checked.append({**row, "identicalToBase": cid in identical})
        tests[str(metric)] = checked
    cost = _need(doc.get("cost"), dict, file, "cost", "the summed cost")
    counters = doc.get("integrity") if isinstance(doc.get("integrity"), dict) else {}
    runs = doc.get("runs")
    run_count = len(runs) if isinstance(runs, list) else 0
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    base_llm = (plan.get("base") or {}).get("llm") if isinstance(plan.get("base"), dict) else None
    provider = options.get("providerOverride") or (
        base_llm.get("provider") if isinstance(base_llm, dict) else None
    )
    pilot_cost = PilotCost(
        runs=run_count,
        llm_calls=int(_need(cost.get("llmCalls"), int, file, "cost.llmCalls", "an integer")),
        cache_hits=int(counters.get("cacheHits", 0) or 0),
        prompt_tokens=int(
            _need(cost.get("promptTokens"), int, file, "cost.promptTokens", "an integer")
        ),
        completion_tokens=int(
            _need(cost.get("completionTokens"), int, file, "cost.completionTokens", "an integer")
        ),
        provider=str(provider) if provider is not None else None,
    )
    return Pilot(
        directory=root,
        file=file,
        plan=plan,
        plan_hash=plan_hash,
        replications=replications,
        conditions=tuple(ids),
        identical=frozenset(identical),
        tests=tests,
        cost=pilot_cost,
    )


_IDENTITY_KEYS = frozenset(
    {"hash", "identity", "identityHash", "id", "title", "file", "replications", "planFile"}
)


def check_pilot(
    plan_path: str | Path,
    planned_hash: str,
    planned_replications: int,
    pilot: Pilot,
    *,
    max_runs: int | None = None,
) -> str | None:
    """Whether `pilot` ran the plan at `plan_path` (meaning hash `planned_hash` with
    `planned_replications`): None when it ran it as it stands, a warning when only the
    replications differ, and InputError naming what differs otherwise."""
    if pilot.plan_hash == planned_hash:
        return None
    from ..harness import build_conditions, load_plan

    as_pilot = load_plan(plan_path, replications=pilot.replications, max_runs=max_runs)
    if as_pilot.hash == pilot.plan_hash:
        return (
            f"the pilot in {pilot.directory} ran {pilot.replications} replications where the "
            f"plan asks for {planned_replications}: only the replications differ"
        )
    planned_ids = [c.id for c in build_conditions(as_pilot)]
    only_pilot = [c for c in pilot.conditions if c not in planned_ids]
    only_plan = [c for c in planned_ids if c not in pilot.conditions]
    if only_pilot or only_plan:
        parts = []
        if only_pilot:
            parts.append(f"only in the pilot: {', '.join(only_pilot)}")
        if only_plan:
            parts.append(f"only in the plan: {', '.join(only_plan)}")
        detail = "its conditions differ (" + "; ".join(parts) + ")"
    else:
        normalised = as_pilot.normalised()
        keys = sorted(
            k
            for k in set(normalised) | set(pilot.plan)
            if k not in _IDENTITY_KEYS
            and canonical_json(normalised.get(k)) != canonical_json(pilot.plan.get(k))
        )
        detail = "its plan differs" + (f" in {', '.join(keys)}" if keys else "")
    raise InputError(
        f"the pilot was run from another plan: {detail}",
        file=pilot.file,
        path="plan.hash",
        expected=f"a pilot of {plan_path} (meaning hash {as_pilot.hash[:12]}…; only the "
        "replications may differ)",
    )
