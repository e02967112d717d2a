"""audit.json `power`: each tested row's Holm threshold in the decision family and the minimum
detectable effect of its test at that threshold and its n (SPEC §6, §6a), with the seed of a
plan's power simulations. Pure functions of the `tests` rows.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.canonical import parse_number
from . import inference, stats
from .detectable_effect import (
    DEFAULT_ALPHA,
    DEFAULT_POWER,
    POWER_DRAWS,
    check_levels,
    detectable_effects,
)
from .pairwise_rows import IDENTICAL_NOTE
from .rank_power import RankDesign


def holm_alphas(m: int, alpha: float = DEFAULT_ALPHA) -> list[float]:
    """Holm's step-down thresholds for ranks 1..m (smallest p first): α / (m - k + 1)."""
    check_levels(alpha)
    if m < 0:
        raise ValueError(f"m must not be negative, got {m}")
    return [alpha / (m - k + 1) for k in range(1, m + 1)]


FamilyMember = tuple[str, str, float | None]
"""One member of the decision family: (metric, condition, the p that decides or None)."""


def _is_tested(row: Mapping[str, Any]) -> bool:
    # Rows written before `tested` existed were in the Holm family exactly when they had a p.
    if "tested" in row:
        return bool(row["tested"])
    return decisive_p(row) is not None


def decisive_p(row: Mapping[str, Any]) -> float | None:
    """The p that decides a test row: `p` where the row has one (SPEC §6a), else the
    reference's `mwuP` (rows written before `p` existed)."""
    value = parse_number(row["p"] if "p" in row else row.get("mwuP"))
    return float(value) if isinstance(value, (int, float)) else None


def holm_family(
    tests: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Sequence[str] | None = None
) -> list[FamilyMember]:
    """The headline's decision family from audit.json `tests`: every tested row of every metric
    (or of `metrics`, the declared primary metrics), in metric then row order, with its p."""
    chosen = tests.keys() if metrics is None else [m for m in metrics if m in tests]
    return [
        (metric, str(row["condition"]), decisive_p(row))
        for metric in chosen
        for row in tests[metric]
        if _is_tested(row) and decisive_p(row) is not None
    ]


def family_alphas(
    family: Sequence[FamilyMember], alpha: float = DEFAULT_ALPHA
) -> dict[tuple[str, str], float]:
    """Holm's threshold for each (metric, condition) of `family`: the member ranked k (from 1,
    smallest p first, ties in listed order) among the m members with a p is judged at
    α / (m - k + 1). Members without a p are not counted in m (SPEC §6)."""
    present = [(metric, cond, p) for metric, cond, p in family if p is not None]
    ranked = sorted(range(len(present)), key=lambda i: (present[i][2], i))
    thresholds = holm_alphas(len(present), alpha)
    return {(present[i][0], present[i][1]): thresholds[k] for k, i in enumerate(ranked)}


def row_count(row: Mapping[str, Any], key: str) -> int:
    """A row's count `key` as an int: 0 when it is missing or not a finite number."""
    value = row.get(key)
    return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0


def _untested_note(row: Mapping[str, Any]) -> str:
    if row.get("identicalToBase"):
        return IDENTICAL_NOTE
    note = row.get("note")
    if isinstance(note, str) and note:
        return note
    n_base, n_cond = row_count(row, "nBase"), row_count(row, "nCond")
    if min(n_base, n_cond) < stats.MIN_REPLICATIONS:
        return stats.too_few_note(n_base, n_cond)
    return "not tested"


OUTSIDE_FAMILY_NOTE = "not in the decision family (not a primary metric): no Holm threshold"


def _row_sizes(row: Mapping[str, Any], paired: bool) -> tuple[int, int]:
    """(n_base, n_cond) the row's test runs with: paired rows test their pairs (`nPairs`
    where the row has it, else the smaller group)."""
    n_base, n_cond = row_count(row, "nBase"), row_count(row, "nCond")
    if not paired:
        return n_base, n_cond
    pairs = row_count(row, "nPairs") if "nPairs" in row else min(n_base, n_cond)
    return pairs, pairs


def _method(tests_used: Sequence[str], family_size: int, scope: str, draws: int) -> str:
    used = ", ".join(sorted(set(tests_used))) or "no test"
    return (
        f"power of the test that runs ({used}; exact up to {inference.EXACT_MAX_POOLED} values, "
        "normal approximation beyond), simulated on "
        f"{draws} normal data sets per point with seeded draws, against a shift in pooled SDs "
        "(paired rows: in SDs of the paired differences); each row at the Holm threshold of its "
        f"rank among the {family_size} tested rows of {scope}; null where the test cannot "
        "reach that threshold at these n whatever the data"
    )


def power_section(
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    *,
    family: Sequence[FamilyMember] | None = None,
    seed: int = 0,
    draws: int = POWER_DRAWS,
) -> dict[str, Any]:
    """audit.json `power`: per metric and non-base condition, the Holm threshold of the row's
    rank in the decision family and the MDE of the row's test at that threshold and its n.

    Args:
        tests: audit.json `tests` (metric → rows with `condition`, `nBase`, `nCond`, `tested`,
            `p` or `mwuP`, and `paired` (default False) and `nPairs` for paired rows).
        alpha: the family-wise α.
        power: the power an MDE reaches.
        family: the decision family as (metric, condition, p) members, e.g. `holm_family(tests,
            primary_metrics)`; by default every tested row of every metric.
        seed: seeds every simulation (the audit derives it from the plan hash).
        draws: simulated data sets per power estimate.

    Returns:
        `power`, `alphaFamily`, `method`, `familySize`, `draws` and `metrics`: metric → one entry
        per row in row order (`condition`, `nBase`, `nCond`, `paired`, `test`, `alpha`, `mde`,
        `note`). Rows outside the family keep their place with `alpha` and `mde` null and a
        note; a paired row's `mde` is in SDs of the differences.
    """
    check_levels(alpha, power)
    members = holm_family(tests) if family is None else list(family)
    alpha_of = family_alphas(members, alpha)
    family_metrics = list(dict.fromkeys(metric for metric, _, _ in members))
    in_family = {(metric, cond) for metric, cond, _ in members}
    # Every threshold of one design is found over the same draws, in one pass.
    wanted: dict[tuple[int, int, bool], set[float]] = {}
    for metric, rows in tests.items():
        for row in rows:
            row_alpha = alpha_of.get((metric, str(row["condition"])))
            if row_alpha is not None:
                paired = bool(row.get("paired", False))
                wanted.setdefault((*_row_sizes(row, paired), paired), set()).add(row_alpha)
    found = {
        key: detectable_effects(
            key[0], key[1], sorted(alphas), power, paired=key[2], seed=seed, draws=draws
        )
        for key, alphas in wanted.items()
    }
    used: list[str] = []
    metrics: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in tests.items():
        entries = []
        for row in rows:
            paired = bool(row.get("paired", False))
            n_base, n_cond = _row_sizes(row, paired)
            key = (metric, str(row["condition"]))
            row_alpha = alpha_of.get(key)
            value: float | None = None
            test: str | None = None
            if row_alpha is not None:
                value, note = found[(n_base, n_cond, paired)][row_alpha]
                if min(n_base, n_cond) >= stats.MIN_REPLICATIONS:
                    test = RankDesign(n_base, n_cond, paired).test_name
                    used.append(test)
            elif key not in in_family and _is_tested(row) and decisive_p(row) is not None:
                note = OUTSIDE_FAMILY_NOTE
            else:
                note = _untested_note(row)
            entries.append(
                {
                    "condition": row["condition"],
                    "nBase": row_count(row, "nBase"),
                    "nCond": row_count(row, "nCond"),
                    "paired": paired,
                    "test": test,
                    "alpha": row_alpha,
                    "mde": value,
                    "note": note,
                }
            )
        metrics[metric] = entries
    scope = "all metrics" if family is None else "the metrics " + ", ".join(family_metrics)
    return {
        "power": power,
        "alphaFamily": alpha,
        "method": _method(used, len(alpha_of), scope, draws),
        "familySize": len(alpha_of),
        "draws": draws,
        "metrics": metrics,
    }


def power_by_family(
    tests: Mapping[str, Sequence[Mapping[str, Any]]], family: Mapping[str, Any], plan_hash: str
) -> dict[str, Any]:
    """audit.json `power`: each row's MDE for the test it ran, at the Holm threshold of its rank
    in its own family (the primary metrics', or the secondary metrics')."""
    seed = simulation_seed(plan_hash)
    primary = holm_family(tests, family["primaryMetrics"])
    doc = power_section(tests, family=primary, seed=seed)
    if family["secondaryMetrics"]:
        secondary = holm_family(tests, family["secondaryMetrics"])
        other = power_section(tests, family=secondary, seed=seed)
        for metric in family["secondaryMetrics"]:
            doc["metrics"][metric] = other["metrics"][metric]
    return doc


def simulation_seed(plan_hash: str) -> int:
    """The seed of a plan's power simulations, so the same plan states the same power.

    Args:
        plan_hash: the plan's hash.

    Returns:
        The first 16 bytes of a sha256 of the plan hash in its own namespace (never the clock).
    """
    digest = hashlib.sha256(f"power\x1f{plan_hash}".encode()).digest()
    return int.from_bytes(digest[:16], "big")
