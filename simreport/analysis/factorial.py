"""Main effects and two-way interactions of a full-factorial audit (SPEC §6a).

Pure: the plan, the condition rows and each condition's usable metric values in, audit.json's
`mainEffects` and `interactions` out. Every estimate is a contrast of cell means in which each
cell of the grid weighs the same, so an axis's effect is averaged over the other axes' levels
instead of being read off the one cell that also moves them. With models, each model's grid is
analysed on its own; the base condition outside the grid enters nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.canonical import canonical_json
from ..core.overrides import lookup
from . import stats

FACTORIAL_METHOD = (
    "marginal means over the full-factorial grid, each model's grid on its own (the base "
    "condition outside the grid enters none of them): a main effect is the mean of the cell "
    "means at a level minus the mean of the cell means at the axis's reference level (its base "
    "value when that is one of its levels, else its first level), every cell weighted equally, "
    "so it is averaged over the other axes' levels; a two-way interaction is the difference of "
    "differences (a1b1 − a1b0) − (a0b1 − a0b0) of cell means for each pair of non-reference "
    "levels, averaged over the other axes' levels; in a balanced design these are the OLS "
    "contrasts of the model y ~ C(a) * C(b). Intervals: percentile bootstrap (2000 draws) that "
    "resamples the replications within each cell, seeded from the plan hash, the metric and the "
    "axis. Standardized size: the difference over the pooled within-cell SD of the grid. A "
    f"contrast that needs a cell with fewer than {stats.MIN_REPLICATIONS} usable values has no "
    "interval or standardized size, and none at all when a cell has no value"
)
"""How `mainEffects` and `interactions` are computed, as the report and methods name it."""

FULL_FACTORIAL = "full_factorial"
CI_LEVEL = 0.95


@dataclass(frozen=True)
class Grid:
    """One model's full-factorial grid: the axes, their levels, each axis's reference level and
    the condition id at every combination of level indices (missing when no condition has it)."""

    axes: tuple[str, ...]
    levels: tuple[tuple[Any, ...], ...]
    reference: tuple[int, ...]
    cells: Mapping[tuple[int, ...], str]

    def combinations(self) -> list[tuple[int, ...]]:
        """Every combination of level indices, first axis varying slowest (the plan's order)."""
        return list(itertools.product(*(range(len(levels)) for levels in self.levels)))

    def name(self, combo: tuple[int, ...]) -> str:
        """How a note names a cell: its condition id, or its levels when no condition has it."""
        return self.cells.get(combo) or "|".join(
            f"{axis}={_text(self.levels[i][j])}"
            for i, (axis, j) in enumerate(zip(self.axes, combo, strict=True))
        )


@dataclass(frozen=True)
class Contrast:
    """A weighted sum of cell means: the cells it reads and the weight of each."""

    weights: Mapping[tuple[int, ...], float]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json(value)


def _same(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def reference_level(axis: Mapping[str, Any], base_doc: Mapping[str, Any]) -> int:
    """The index of an axis's reference level: its base value when that is one of its levels,
    else its first level."""
    found, value = lookup(base_doc, str(axis.get("target", "")))
    levels = list(axis.get("levels") or [])
    if found:
        for j, level in enumerate(levels):
            if _same(level, value):
                return j
    return 0


def build_grids(
    plan: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]]
) -> list[tuple[str | None, Grid]]:
    """(model, grid) for each model of a full-factorial plan (one with model None when the plan
    lists none); empty for any other design or a plan without axes."""
    axes = [a for a in plan.get("axes") or [] if isinstance(a, Mapping)]
    if plan.get("design") != FULL_FACTORIAL or not axes:
        return []
    base_doc = plan.get("base") or {}
    ids = tuple(str(a["id"]) for a in axes)
    levels = tuple(tuple(a.get("levels") or ()) for a in axes)
    reference = tuple(reference_level(a, base_doc) for a in axes)
    models: list[str | None] = [str(m) for m in plan.get("models") or []] or [None]
    grids = []
    for model in models:
        cells: dict[tuple[int, ...], str] = {}
        for cond in conditions:
            if cond.get("isBase") or cond.get("model") != model:
                continue
            combo = _combination(cond.get("levels") or {}, ids, levels)
            if combo is not None:
                cells[combo] = str(cond["id"])
        grids.append((model, Grid(ids, levels, reference, cells)))
    return grids


def _combination(
    set_levels: Mapping[str, Any], ids: Sequence[str], levels: Sequence[Sequence[Any]]
) -> tuple[int, ...] | None:
    combo = []
    for axis, axis_levels in zip(ids, levels, strict=True):
        if axis not in set_levels:
            return None
        index = next((j for j, v in enumerate(axis_levels) if _same(v, set_levels[axis])), None)
        if index is None:
            return None
        combo.append(index)
    return tuple(combo)


def main_effect_contrast(grid: Grid, axis: int, level: int) -> Contrast:
    """Mean of the cell means at `level` minus the mean of those at the reference level."""
    ref = grid.reference[axis]
    others = math.prod(len(v) for i, v in enumerate(grid.levels) if i != axis)
    weights = {}
    for combo in grid.combinations():
        if combo[axis] in (level, ref):
            weights[combo] = (1.0 if combo[axis] == level else -1.0) / others
    return Contrast(weights)


def interaction_contrast(grid: Grid, a: int, level_a: int, b: int, level_b: int) -> Contrast:
    """(a1b1 − a1b0) − (a0b1 − a0b0) over cell means, averaged over the other axes' levels
    (a1, b1: the given levels; a0, b0: the references)."""
    ref_a, ref_b = grid.reference[a], grid.reference[b]
    others = math.prod(len(v) for i, v in enumerate(grid.levels) if i not in (a, b))
    weights = {}
    for combo in grid.combinations():
        if combo[a] in (level_a, ref_a) and combo[b] in (level_b, ref_b):
            sign = (1.0 if combo[a] == level_a else -1.0) * (1.0 if combo[b] == level_b else -1.0)
            weights[combo] = sign / others
    return Contrast(weights)


class CellSamples:
    """One metric's finite values per cell of a grid, their means, the pooled within-cell SD
    and bootstrap draws of every cell mean."""

    def __init__(self, grid: Grid, samples: Mapping[str, Sequence[float]]) -> None:
        self.grid = grid
        self.values: dict[tuple[int, ...], np.ndarray[Any, np.dtype[np.float64]]] = {
            combo: stats.finite(samples.get(grid.cells[combo], ()))
            if combo in grid.cells
            else np.empty(0, dtype=np.float64)
            for combo in grid.combinations()
        }
        self.means = {c: stats.mean(v) for c, v in self.values.items()}

    def pooled_sd(self) -> float | None:
        """sqrt(Σ (n − 1) s² / Σ (n − 1)) over the grid's cells; None without degrees of
        freedom. A cell of constant values adds exactly 0, never floating-point noise."""
        dof = sum(max(v.size - 1, 0) for v in self.values.values())
        if dof == 0:
            return None
        squares = math.fsum(
            float(np.sum((v - float(np.mean(v))) ** 2)) if v.size > 1 and np.ptp(v) > 0 else 0.0
            for v in self.values.values()
        )
        return math.sqrt(squares / dof)

    def draws(self, seed: int, count: int = stats.BOOTSTRAP_DRAWS) -> dict[tuple[int, ...], Any]:
        """Bootstrap means of every cell with values: its replications resampled with
        replacement, cells drawn in the grid's order from one generator."""
        rng = np.random.default_rng(seed)
        out = {}
        for combo, values in self.values.items():
            if values.size == 0:
                continue
            picks = rng.integers(0, values.size, size=(count, values.size))
            constant = bool(np.all(values == values[0]))
            out[combo] = (
                np.full(count, values[0], dtype=np.float64)
                if constant
                else values[picks].mean(axis=1)
            )
        return out

    def estimate(self, contrast: Contrast, draws: Mapping[tuple[int, ...], Any]) -> dict[str, Any]:
        """The contrast's difference, 95% interval, standardized size and a note on any cell
        too short to support them."""
        empty = [c for c in contrast.weights if self.values[c].size == 0]
        short = [c for c in contrast.weights if 0 < self.values[c].size < stats.MIN_REPLICATIONS]
        out: dict[str, Any] = {
            "diff": None,
            "ci95": None,
            "standardized": None,
            "nCells": len(contrast.weights),
            "note": None,
        }
        if empty:
            out["note"] = empty_cells_note(
                [self.grid.name(c) for c in empty], len(contrast.weights)
            )
            return out
        diff = _weighted(contrast, {c: float(self.means[c] or 0.0) for c in contrast.weights})
        out["diff"] = diff
        if short:
            out["note"] = short_cells_note([self.grid.name(c) for c in short])
            return out
        total = sum(w * draws[c] for c, w in sorted(contrast.weights.items()))
        tail = 100.0 * (1.0 - CI_LEVEL) / 2.0
        lo, hi = np.percentile(total, [tail, 100.0 - tail])
        out["ci95"] = [float(lo), float(hi)]
        out["standardized"] = _standardized(diff, self.pooled_sd())
        return out


def empty_cells_note(empty: Sequence[str], cells: int) -> str:
    """The note of a contrast not estimated: the named cells of its `cells` have no value."""
    return (
        f"not estimated: {len(empty)} of its {cells} cells have no usable value "
        f"({', '.join(empty)})"
    )


def short_cells_note(short: Sequence[str]) -> str:
    """The note of a contrast without an interval: the named cells have too few values."""
    return (
        f"no interval or standardized size: fewer than {stats.MIN_REPLICATIONS} usable values "
        f"in {', '.join(short)}"
    )


def _weighted(contrast: Contrast, means: Mapping[tuple[int, ...], float]) -> float:
    # Exactly rounded, so equal cell means give a difference of exactly 0.
    return math.fsum(w * means[c] for c, w in contrast.weights.items())


def _standardized(diff: float, sd: float | None) -> float | None:
    if sd is None:
        return None
    if sd == 0.0:
        return 0.0 if diff == 0.0 else math.copysign(math.inf, diff)
    return diff / sd


def _marginal(cells: CellSamples, axis: int, level: int) -> float | None:
    """The mean of the cell means at one level of an axis; None when a cell has no value."""
    means = [m for c, m in cells.means.items() if c[axis] == level]
    if any(m is None for m in means):
        return None
    return math.fsum(float(m) for m in means if m is not None) / len(means)


def _seed(plan_hash: str, metric: str, what: str, model: str | None) -> int:
    return stats.bootstrap_seed(plan_hash, metric, what if model is None else f"{what}@{model}")


def factorial_effects(
    plan: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Mapping[str, Sequence[float]]],
    metrics: Sequence[str],
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """audit.json's `mainEffects` and `interactions`: metric → rows, for a full-factorial plan;
    both empty objects for any other design.

    `conditions` are the audit's condition rows (id, levels, model, isBase) and `samples`
    condition id → metric → the usable runs' values. Rows come per metric in plan order, per
    model in the plan's model order, per axis (pair of axes) in plan order, per non-reference
    level (pair of levels) in level order.
    """
    main: dict[str, list[dict[str, Any]]] = {}
    interactions: dict[str, list[dict[str, Any]]] = {}
    grids = build_grids(plan, conditions)
    if not grids:
        return {"mainEffects": main, "interactions": interactions}
    plan_hash = str(plan.get("hash", ""))
    for metric in metrics:
        main[metric], interactions[metric] = [], []
        for model, grid in grids:
            cells = CellSamples(
                grid, {cid: samples.get(cid, {}).get(metric, []) for cid in grid.cells.values()}
            )
            main[metric].extend(_main_rows(cells, model, plan_hash, metric))
            interactions[metric].extend(_interaction_rows(cells, model, plan_hash, metric))
    return {"mainEffects": main, "interactions": interactions}


def _main_rows(
    cells: CellSamples, model: str | None, plan_hash: str, metric: str
) -> list[dict[str, Any]]:
    grid = cells.grid
    rows = []
    for i, axis in enumerate(grid.axes):
        draws = cells.draws(_seed(plan_hash, metric, f"mainEffect:{axis}", model))
        ref = grid.reference[i]
        for j, level in enumerate(grid.levels[i]):
            if j == ref:
                continue
            rows.append(
                {
                    "axis": axis,
                    "level": level,
                    "reference": grid.levels[i][ref],
                    "model": model,
                    "meanLevel": _marginal(cells, i, j),
                    "meanReference": _marginal(cells, i, ref),
                    **cells.estimate(main_effect_contrast(grid, i, j), draws),
                }
            )
    return rows


def _interaction_rows(
    cells: CellSamples, model: str | None, plan_hash: str, metric: str
) -> list[dict[str, Any]]:
    grid = cells.grid
    rows = []
    for a, b in itertools.combinations(range(len(grid.axes)), 2):
        pair = [grid.axes[a], grid.axes[b]]
        draws = cells.draws(_seed(plan_hash, metric, "interaction:" + "\x1e".join(pair), model))
        ref_a, ref_b = grid.reference[a], grid.reference[b]
        for j, k in itertools.product(range(len(grid.levels[a])), range(len(grid.levels[b]))):
            if j == ref_a or k == ref_b:
                continue
            rows.append(
                {
                    "axes": pair,
                    "levels": [grid.levels[a][j], grid.levels[b][k]],
                    "references": [grid.levels[a][ref_a], grid.levels[b][ref_b]],
                    "model": model,
                    **cells.estimate(interaction_contrast(grid, a, j, b, k), draws),
                }
            )
    return rows


def rank_sensitivity(
    plan: Mapping[str, Any],
    sensitivity: Sequence[Mapping[str, Any]],
    main_effects: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """A full-factorial plan's sensitivity ranked by each axis's largest |standardized main
    effect| over metrics (and models), `rankedBy: "mainEffect"`; the per-cell measures
    (`isolated`, `anyCell`) stay on each entry for reference. An axis without a main effect is
    unranked. Ties keep plan order. Any other design's sensitivity is returned as it is."""
    if plan.get("design") != FULL_FACTORIAL:
        return [dict(e) for e in sensitivity]
    best: dict[str, dict[str, Any]] = {}
    for metric, rows in main_effects.items():
        for row in rows:
            size = row.get("standardized")
            if size is None or math.isnan(size):
                continue
            axis = str(row["axis"])
            # Strictly larger: the first row seen (metric order, then level) wins a tie.
            if axis not in best or abs(size) > best[axis]["maxAbsD"]:
                best[axis] = {
                    "maxAbsD": abs(size),
                    "metric": metric,
                    "level": row["level"],
                    "reference": row["reference"],
                    "model": row["model"],
                    "diff": row["diff"],
                }
    by_axis = {str(e["axis"]): e for e in sensitivity}
    entries = []
    for axis in plan.get("axes") or []:
        entry = dict(by_axis.get(str(axis["id"])) or {"axis": str(axis["id"])})
        entry["mainEffect"] = best.get(entry["axis"])
        entry["rankedBy"] = "mainEffect" if entry["axis"] in best else None
        entry["rank"] = None
        entries.append(entry)
    ranked = sorted(
        (e for e in entries if e["rankedBy"]), key=lambda e: -float(e["mainEffect"]["maxAbsD"])
    )
    for rank, entry in enumerate(ranked, start=1):
        entry["rank"] = rank
    return ranked + [e for e in entries if not e["rankedBy"]]
