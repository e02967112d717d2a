"""The verbs that size a plan before it runs: the replications it needs (`power`, from a pilot
audit or a given effect) and the runs, calls and tokens it will take (`estimate`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..core.errors import InputError


def _sizing_levels(power: float, alpha: float, effect: float | None) -> None:
    """Refuse a power, α or effect size no sizing can use, naming the setting."""
    import math

    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha is {alpha}", path="alpha", expected="a number between 0 and 1")
    if not alpha < power < 1.0:
        raise InputError(
            f"power is {power}", path="power", expected=f"a number between alpha ({alpha}) and 1"
        )
    if effect is not None and not (math.isfinite(effect) and effect > 0):
        raise InputError(f"effect is {effect}", path="effect", expected="a positive finite |d|")


def power(
    plan_path: str | Path,
    *,
    pilot: str | Path,
    effect: float | None = None,
    power: float = 0.8,
    alpha: float = 0.05,
    design: str = "auto",
    correlation: float = 0.0,
    max_runs: int | None = None,
) -> dict[str, Any]:
    """Replications per condition the plan needs for the rank test the audit will run to
    detect, with `power` at α/m, each effect a pilot audit saw, or `effect` (a pooled |d|) for
    every comparison; and the smallest effect the plan's own replications detect. As
    `simreport power` does.

    m is the decision family: the plan's tested conditions times its metrics (the conservative
    end of Holm over all of them). A plan pairs base and condition replications by their shared
    seeds unless an axis varies the seed.

    Args:
        plan_path: the plan file.
        pilot: an analysed audit directory of this plan; only its replications may differ (then
            `warnings` says so).
        effect: a pooled |d| to size every comparison for (default: each effect the pilot saw).
        power: the power to reach, between `alpha` and 1.
        alpha: the family-wise α, between 0 and 1.
        design: "paired", "unpaired" or "auto" (paired unless an axis varies the seed).
        correlation: the pairing correlation ρ in [-1, 1): paired sizing converts a pooled |d|
            to δ = |d| / sqrt(2 (1 - ρ)), in SDs of the differences.
        max_runs: the most runs the plan may ask for, as in `audit`.

    Returns:
        The plan, the pilot, the family and its α per comparison, the test, one row per metric
        and the recommendation, and the smallest detectable effect at the planned replications
        (`atPlannedReplications`).

    Raises:
        InputError: a power, α, effect, design or correlation no sizing can use; a plan that
            does not load; a pilot that is not an audit, or ran something other than this plan
            (naming what differs).
    """
    from ..analysis import pilot as pilots
    from ..analysis import power as sizing
    from ..analysis.rank_power import test_kind
    from ..harness import build_conditions, load_plan

    _sizing_levels(power, alpha, effect)
    if design not in ("auto", "paired", "unpaired"):
        raise InputError(f"design is {design}", path="design", expected="auto, paired or unpaired")
    if not -1.0 <= correlation < 1.0:
        raise InputError(
            f"correlation is {correlation}", path="correlation", expected="a number in [-1, 1)"
        )
    loaded = load_plan(plan_path, max_runs=max_runs)
    ran = pilots.read_pilot(pilot)
    warning = pilots.check_pilot(
        plan_path, loaded.hash, loaded.plan.replications, ran, max_runs=max_runs
    )
    tested = [c for c in build_conditions(loaded) if not c.is_base and not c.identical_to_base]
    seed_axes = [a.id for a in loaded.plan.axes if sizing.varies_seed(a.target)]
    paired = design == "paired" or (design == "auto" and not seed_axes)
    metrics = list(ran.tests)
    m = max(len(tested) * max(len(metrics), 1), 1)
    seed = sizing.simulation_seed(loaded.hash)
    rows = sizing.recommend_replications(
        ran.tests,
        effect=effect,
        power=power,
        alpha=alpha,
        m=m,
        paired=paired,
        correlation=correlation,
        seed=seed,
    )
    planned = loaded.plan.replications
    at_plan_mde, at_plan_note = (
        sizing.detectable_effect(planned, planned, alpha / m, power, paired=paired, seed=seed)
        if tested
        else (None, "no conditions besides the base: nothing to test")
    )
    return {
        "plan": {"id": loaded.plan_id, "hash": loaded.hash, "replications": planned},
        "pilot": {
            "dir": str(pilot),
            "hash": ran.plan_hash,
            "replications": ran.replications,
            "runs": ran.cost.runs,
        },
        "power": power,
        "alpha": alpha,
        "paired": paired,
        "design": design,
        "seedAxes": seed_axes,
        "correlation": correlation if paired else None,
        "test": test_kind(paired),
        "comparisons": len(tested),
        "familyMetrics": metrics,
        "familySize": m,
        "alphaPerComparison": alpha / m,
        "effect": effect,
        "warnings": [warning] if warning else [],
        "metrics": rows,
        "recommendation": sizing.plan_recommendation(rows),
        "atPlannedReplications": {
            "replications": planned,
            "alpha": alpha / m,
            "mde": at_plan_mde,
            "paired": paired,
            "note": at_plan_note,
        },
    }


def estimate(
    plan_path: str | Path,
    *,
    pilot: str | Path | None = None,
    replications: int | None = None,
    max_runs: int | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Runs, LLM calls and tokens the plan will take, before running it, as `simreport
    estimate` does: per-run averages of a pilot audit of the same plan times the planned runs,
    or without a pilot the tokens per call the response cache recorded for the plan's models.

    Args:
        plan_path: the plan file.
        pilot: an analysed audit directory of this plan (optional).
        replications: replaces the plan's replications.
        max_runs: the most runs the plan may ask for, as in `audit`.
        cache_dir: the response cache to read (default: the environment's).

    Returns:
        The estimate: `basis` says what it rests on ("pilot", "cache" or "none") and `notes`
        how, with the plan's conditions, replications, models and any `warnings`.

    Raises:
        InputError: a plan that does not load, or a pilot that is not an audit of this plan.
    """
    from ..analysis import pilot as pilots
    from ..harness import build_conditions, load_plan
    from ..kernel.providers import CACHED
    from ..kernel.providers.cache import ResponseCache

    loaded = load_plan(plan_path, replications=replications, max_runs=max_runs)
    conds = build_conditions(loaded)
    reps = loaded.plan.replications
    provider = loaded.base.llm.provider
    models = sorted({c.scenario.llm.model for c in conds})
    warnings_: list[str] = []
    pilot_cost = None
    if pilot is not None:
        ran = pilots.read_pilot(pilot)
        warning = pilots.check_pilot(plan_path, loaded.hash, reps, ran, max_runs=max_runs)
        if warning:
            warnings_.append(warning)
        pilot_cost = ran.cost
    rates = None
    if provider in CACHED and (pilot_cost is None or pilot_cost.llm_calls == 0):
        cache = ResponseCache(cache_dir)
        rates = pilots.cache_token_rates(cache.recorded_usage(), provider, models)
    result = pilots.estimate_cost(
        runs=len(conds) * reps, provider=provider, pilot=pilot_cost, rates=rates
    )
    return {
        **result,
        "conditions": len(conds),
        "replications": reps,
        "models": models,
        "pilot": str(pilot) if pilot is not None else None,
        "warnings": warnings_,
    }
