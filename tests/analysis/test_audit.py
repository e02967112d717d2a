"""audit.json: assembled from plan, conditions and runs, recomputed here independently."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from simreport.analysis.audit import RunRecord, analyse, analyse_dir
from simreport.analysis.detectable_effect import unreachable_note
from simreport.analysis.pairwise_rows import IDENTICAL_NOTE, METRIC_NOTES
from simreport.analysis.stats import SMALL_SPREAD_FRACTION, small_spread_note, too_few_note
from simreport.core.canonical import pretty_json
from simreport.core.schema import RunResult

PLAN: dict[str, Any] = {
    "id": "synthetic",
    "hash": "ab" * 32,
    "replications": 12,
    "models": ["m1", "m2"],
    "metrics": ["score", "rate"],
    "claimType": "exploratory",
    "design": "one_at_a_time",
    "base": {"world": "prisoners_dilemma", "params": {"framing": "neutral", "window": 3}},
    "hypothesis": {
        "outcomes": {"score": "increase"},
        "targetDistribution": {"choice": {"a": 0.5, "b": 0.3, "c": 0.2}},
    },
    "axes": [
        {
            "id": "framing",
            "level": "micro",
            "kind": "representation",
            "dimension": "framing",
            "target": "params.framing",
            "levels": ["moral", "risk"],
            "code": "R3",
        },
        {
            "id": "window",
            "level": "micro",
            "kind": "design",
            "dimension": "memory",
            "target": "params.window",
            "levels": [1],
        },
    ],
}


def _conditions() -> list[dict[str, Any]]:
    out = []
    for model in ("m1", "m2"):
        out.append(
            {
                "id": f"base@{model}",
                "dir": f"base~40{model}",
                "axis": None,
                "level": None,
                "levels": {},
                "model": model,
                "isBase": True,
                "baseId": f"base@{model}",
                "identicalToBase": False,
                "replications": 12,
            }
        )
    for axis, level in (("framing", "moral"), ("framing", "risk"), ("window", 1)):
        for model in ("m1", "m2"):
            cid = f"{axis}={level}@{model}"
            out.append(
                {
                    "id": cid,
                    "dir": cid,
                    "axis": axis,
                    "level": level,
                    "levels": {axis: level},
                    "model": model,
                    "isBase": False,
                    "baseId": f"base@{model}",
                    "identicalToBase": False,
                    "replications": 12,
                }
            )
    return out


# Large enough that framing's rows are concluded moved after Holm over every row of both
# metrics, so direction consistency has rows to count; window barely moves.
SHIFT = {"base": 0.0, "framing=moral": 2.0, "framing=risk": -1.8, "window=1": 0.1}


def _result(cid: str, r: int, rng: np.random.Generator, **over: Any) -> RunResult:
    stem = cid.split("@")[0]
    model_shift = 0.3 if cid.endswith("@m2") else 0.0
    score = float(rng.normal(SHIFT[stem] + model_shift, 1.0))
    counts = rng.multinomial(50, [0.4, 0.35, 0.25]).tolist()
    doc: dict[str, Any] = {
        "condition": cid,
        "replication": r,
        "seedPath": [r],
        "status": {"execution": "completed", "validity": "unchecked", "evidence": "complete"},
        "metrics": {"score": score, "rate": float(round(rng.uniform(), 1))},
        "distributions": {"choice": dict(zip("abc", counts, strict=True))},
        "integrity": {"complete": True, "counters": {"decisions": 10}},
        "cost": {"llmCalls": 10, "promptTokens": 100, "completionTokens": 5},
    }
    doc.update(over)
    return RunResult.model_validate(doc)


def _records() -> list[RunRecord]:
    rng = np.random.default_rng(3)
    records = []
    for cond in _conditions():
        for r in range(12):
            # Replication r of every condition runs with the same seed: the rows are paired.
            records.append(RunRecord(cond["id"], r, _result(cond["id"], r, rng), seed=(11, r)))
    # one failed run, one incomplete run, one missing run in framing=moral@m1
    records[24] = RunRecord(
        records[24].condition,
        records[24].replication,
        seed=(11, records[24].replication),
        result=_result(
            records[24].condition,
            records[24].replication,
            rng,
            metrics={},
            status={"execution": "crashed", "validity": "unchecked", "evidence": "partial"},
            failure={"stage": "running", "type": "X", "message": "boom"},
            integrity={"complete": False, "counters": {}},
        ),
    )
    records[25] = RunRecord(
        records[25].condition,
        records[25].replication,
        seed=(11, records[25].replication),
        result=_result(
            records[25].condition,
            records[25].replication,
            rng,
            integrity={"complete": False, "counters": {"parseFailures": 2}},
            status={"execution": "completed", "validity": "unchecked", "evidence": "partial"},
        ),
    )
    records[26] = RunRecord(records[26].condition, records[26].replication, None)
    return records


@pytest.fixture(scope="module")
def audit() -> dict[str, Any]:
    return analyse(PLAN, _conditions(), _records())


def _sample(records: list[RunRecord], cid: str, metric: str, include: bool = False) -> list[float]:
    out = []
    for rec in records:
        res = rec.result
        if rec.condition != cid or res is None:
            continue
        if not include and (res.failure is not None or not res.integrity.complete):
            continue
        if res.failure is not None:
            continue
        out.append(res.metrics[metric])
    return out


# --------------------------------------------------------------------------- the reference
# Everything below recomputes audit.json's statistics from the run records with scipy,
# statsmodels and numpy, without calling simreport's statistics.


def _finite(values: Sequence[float]) -> np.ndarray:
    return np.array([v for v in values if math.isfinite(v)], dtype=float)


def _used(rec: RunRecord, include: bool) -> bool:
    res = rec.result
    if res is None:
        return False
    if include:
        return res.failure is None or bool(res.metrics)
    return res.failure is None and res.integrity.complete


def _by_seed(
    records: Sequence[RunRecord], cid: str, metric: str, include: bool
) -> dict[Any, float]:
    out = {}
    for rec in records:
        if rec.condition == cid and rec.result is not None and _used(rec, include):
            value = rec.result.metrics.get(metric, math.nan)
            if math.isfinite(value):
                out[rec.seed] = value
    return out


def _ref_signed_rank_p(d: np.ndarray) -> float:
    """Every one of the 2^n sign flips of the nonzero differences, by brute force."""
    # Differences equal up to rounding (0.3 - 0.1 and 0.4 - 0.2) are ties, and none is a zero.
    d = np.round(d, 12)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    ranks = sps.rankdata(np.abs(d))
    observed = abs(float(np.sum(np.sign(d) * ranks)))
    signs = np.array(list(itertools.product((-1.0, 1.0), repeat=d.size)))
    flipped = np.abs(signs @ ranks)
    return float(np.mean(flipped >= observed - 1e-9))


def _ref_rank_sum_p(base: np.ndarray, cond: np.ndarray) -> float:
    """scipy's exact permutation test over every split of the pooled values, with the distance
    of the condition's midrank sum from its expectation as the statistic."""
    if np.all(np.concatenate([base, cond]) == base[0]):
        return 1.0
    centre = cond.size * (base.size + cond.size + 1) / 2

    def distance(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        ranks = sps.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
        return np.abs(ranks[..., x.shape[axis] :].sum(axis=axis) - centre)

    result = sps.permutation_test(
        (base, cond),
        distance,
        permutation_type="independent",
        n_resamples=np.inf,
        alternative="greater",
        vectorized=True,
    )
    return float(result.pvalue)


def _ref_decide(
    records: Sequence[RunRecord], cond: Mapping[str, Any], metric: str, include: bool
) -> dict[str, Any]:
    """The design-fitting columns (SPEC §6a): paired when both sides hold the same seeds."""
    base = _by_seed(records, cond["baseId"], metric, include)
    mine = _by_seed(records, cond["id"], metric, include)
    if None not in base and set(base) == set(mine):
        order = sorted(base, key=lambda s: s[1])
        d = np.array([mine[s] - base[s] for s in order])
        return {"paired": True, "p": _ref_signed_rank_p(d), "meanDiff": float(d.mean())}
    b, c = np.array(list(base.values())), np.array(list(mine.values()))
    welch = sps.ttest_ind(c, b, equal_var=False).confidence_interval(0.95)
    return {
        "paired": False,
        "p": _ref_rank_sum_p(b, c),
        "interval95": [float(welch.low), float(welch.high)],
    }


def _values(records: Sequence[RunRecord], cid: str, metric: str, include: bool) -> np.ndarray:
    return _finite(
        [
            rec.result.metrics.get(metric, math.nan)
            for rec in records
            if rec.condition == cid and rec.result is not None and _used(rec, include)
        ]
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _ref_moved(plan: Mapping[str, Any], cond: Mapping[str, Any]) -> list[str]:
    levels = cond.get("levels") or {}
    if len(levels) <= 1:
        return list(levels)
    targets = {a["id"]: a["target"] for a in plan["axes"]}
    moved = []
    for axis, value in levels.items():
        node: Any = plan["base"]
        for part in targets[axis].split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if _text(value) != _text(node):
            moved.append(axis)
    return moved or list(levels)


def _ref_expected(plan: Mapping[str, Any], cond: Mapping[str, Any], metric: str) -> str | None:
    hyp = plan.get("hypothesis") or {}
    outcomes, by_axis, by_level = (hyp.get(k) or {} for k in ("outcomes", "axes", "levels"))
    for key in (cond["id"], cond["id"].split("@")[0]):
        if metric in by_level.get(key, {}):
            return str(by_level[key][metric])
    moved = _ref_moved(plan, cond)
    if not moved:
        return outcomes.get(metric)
    directions = set()
    for axis in moved:
        level_id = f"{axis}={_text(cond['levels'][axis])}"
        directions.add(
            by_level.get(level_id, {}).get(metric)
            or by_axis.get(axis, {}).get(metric)
            or outcomes.get(metric)
        )
    directions.discard(None)
    return directions.pop() if len(directions) == 1 else None


def _ref_p(base: np.ndarray, cond: np.ndarray) -> float:
    pooled = np.concatenate([base, cond])
    if np.all(pooled == pooled[0]):
        return 1.0
    exact = min(base.size, cond.size) < 8 and np.unique(pooled).size == pooled.size
    method = "exact" if exact else "asymptotic"
    return float(
        sps.mannwhitneyu(
            cond, base, alternative="two-sided", method=method, use_continuity=True
        ).pvalue
    )


def _ref_ci(plan_hash: str, metric: str, cid: str, base: np.ndarray, cond: np.ndarray) -> Any:
    material = f"{plan_hash}\x1f{metric}\x1f{cid}".encode()
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(material).digest()[:16], "big"))
    base_idx = rng.integers(0, base.size, size=(2000, base.size))
    cond_idx = rng.integers(0, cond.size, size=(2000, cond.size))
    diffs = cond[cond_idx].mean(axis=1) - base[base_idx].mean(axis=1)
    return list(np.percentile(diffs, [2.5, 97.5]))


def _reference(
    plan: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    records: Sequence[RunRecord],
    include: bool = False,
) -> dict[str, Any]:
    """tests, sensitivity and directionConsistency as SPEC §5-§6 and the schemaVersion 2
    contract define them."""
    tests: dict[str, list[dict[str, Any]]] = {}
    for metric in plan["metrics"]:
        rows = []
        for cond in conditions:
            if cond["isBase"]:
                continue
            base = _values(records, cond["baseId"], metric, include)
            values = _values(records, cond["id"], metric, include)
            expected = _ref_expected(plan, cond, metric)
            row: dict[str, Any] = {
                "condition": cond["id"],
                "nBase": base.size,
                "nCond": values.size,
                "expected": expected,
                "tested": False,
                "cohenD": None,
                "mwuP": None,
                "ci95": None,
                "smallSpread": False,
                "directionFlip": None,
                "note": None,
            }
            rows.append(row)
            if cond.get("identicalToBase"):
                row["note"] = IDENTICAL_NOTE
                continue
            if base.size and values.size:
                diff = values.mean() - base.mean()
                greater = sum(1 for c in values for b in base if c > b)
                less = sum(1 for c in values for b in base if c < b)
                row["diff"] = diff
                row["w1"] = sps.wasserstein_distance(base, values)
                row["cliffDelta"] = (greater - less) / (base.size * values.size)
            if min(base.size, values.size) < 2:
                row["note"] = too_few_note(base.size, values.size)
                continue
            pooled = math.sqrt(
                ((base.size - 1) * base.var(ddof=1) + (values.size - 1) * values.var(ddof=1))
                / (base.size + values.size - 2)
            )
            if pooled < 1e-12 * max(1.0, abs(base.mean())):
                d = 0.0 if diff == 0 else math.copysign(math.inf, diff)
                pooled = 0.0
            else:
                d = diff / pooled
            larger_mean = max(abs(base.mean()), abs(values.mean()))
            row.update(_ref_decide(records, cond, metric, include))
            row.update(
                tested=True,
                cohenD=d,
                mwuP=_ref_p(base, values),
                ci95=_ref_ci(plan["hash"], metric, cond["id"], base, values),
                smallSpread=d != 0
                and (pooled == 0 or pooled < SMALL_SPREAD_FRACTION * larger_mean),
                directionFlip=None
                if expected is None
                else (diff < 0 if expected == "increase" else diff > 0),
            )
            if row["smallSpread"]:
                row["note"] = small_spread_note(base, values)
        tested = [r for r in rows if r["tested"]]
        if tested:
            holm = multipletests([r["mwuP"] for r in tested], method="holm")[1]
            for r, p in zip(tested, holm, strict=True):
                r["holmP"] = float(p)
        tests[metric] = rows

    # One family over every tested row of every metric; no margins, so nothing is unchanged.
    family = [r for metric in plan["metrics"] for r in tests[metric] if r["tested"]]
    if family:
        for r, p in zip(
            family, multipletests([r["p"] for r in family], method="holm")[1], strict=True
        ):
            r["familyP"] = float(p)
    for rows in tests.values():
        for r in rows:
            r["conclusion"] = (
                "untested"
                if not r["tested"]
                else "moved"
                if r["familyP"] < 0.05
                else "inconclusive"
            )

    by_id = {c["id"]: c for c in conditions}
    isolated: dict[str, tuple[float, str, str]] = {}
    any_cell: dict[str, tuple[float, str, str]] = {}
    for metric, rows in tests.items():
        for row in rows:
            if not row["tested"]:
                continue
            moved = _ref_moved(plan, by_id[row["condition"]])
            for axis in moved:
                here = (abs(row["cohenD"]), metric, row["condition"])
                if axis not in any_cell or here[0] > any_cell[axis][0]:
                    any_cell[axis] = here
                if len(moved) == 1 and (axis not in isolated or here[0] > isolated[axis][0]):
                    isolated[axis] = here
    axis_ids = [a["id"] for a in plan["axes"]]
    ranked = sorted(
        (a for a in axis_ids if a in isolated or a in any_cell),
        key=lambda a: -(isolated.get(a) or any_cell[a])[0],
    )
    sensitivity = [
        {
            "axis": a,
            "rank": ranked.index(a) + 1 if a in ranked else None,
            "isolated": isolated.get(a),
            "anyCell": any_cell.get(a),
        }
        for a in ranked + [a for a in axis_ids if a not in ranked]
    ]

    consistency: dict[str, dict[str, Any]] = {}
    outcomes = (plan.get("hypothesis") or {}).get("outcomes") or {}
    for metric, rows in tests.items():
        counted = [r for r in rows if r["conclusion"] == "moved" and r["expected"] is not None]
        if metric not in outcomes and all(r["expected"] is None for r in rows):
            continue

        def ok(r: Mapping[str, Any]) -> bool:
            return bool(r["diff"] > 0 if r["expected"] == "increase" else r["diff"] < 0)

        directions = {r["expected"] for r in counted}
        per_axis: dict[str, dict[str, int]] = {}
        for axis in axis_ids:
            mine = [r for r in counted if axis in _ref_moved(plan, by_id[r["condition"]])]
            if mine:
                per_axis[axis] = {"consistent": sum(map(ok, mine)), "total": len(mine)}
        consistency[metric] = {
            "expected": (directions.pop() if len(directions) == 1 else "mixed")
            if directions
            else outcomes.get(metric),
            "consistent": sum(map(ok, counted)),
            "total": len(counted),
            "share": sum(map(ok, counted)) / len(counted) if counted else None,
            "byAxis": per_axis,
        }
    return {"tests": tests, "sensitivity": sensitivity, "directionConsistency": consistency}


def _check_against_reference(
    audit: Mapping[str, Any],
    plan: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    records: Sequence[RunRecord],
    include: bool = False,
) -> None:
    ref = _reference(plan, conditions, records, include)
    for metric, expected_rows in ref["tests"].items():
        rows = audit["tests"][metric]
        assert [r["condition"] for r in rows] == [r["condition"] for r in expected_rows]
        for row, want in zip(rows, expected_rows, strict=True):
            where = (metric, row["condition"])
            assert row["baseId"] == next(
                c["baseId"] for c in conditions if c["id"] == want["condition"]
            )
            for key in ("nBase", "nCond", "tested", "expected", "smallSpread", "directionFlip"):
                assert row[key] == want[key], (where, key)
            for key in ("diff", "w1", "cliffDelta", "cohenD", "mwuP", "holmP"):
                assert row[key] == pytest.approx(want.get(key), nan_ok=False), (where, key)
            assert row["conclusion"] == want["conclusion"], where
            if want["tested"]:
                assert row["paired"] is want["paired"], where
                assert row["p"] == pytest.approx(want["p"], rel=1e-9), where
                assert row["familyP"] == pytest.approx(want["familyP"], rel=1e-9), where
                lo, hi = row["interval95"]
                if want["paired"]:
                    assert lo <= want["meanDiff"] <= hi, where
                else:
                    assert [lo, hi] == pytest.approx(want["interval95"], rel=1e-9), where
            if want["ci95"] is None:
                assert row["ci95"] is None, where
            else:
                assert row["ci95"] == pytest.approx(want["ci95"], abs=1e-12), where
                assert row["ci95"][0] <= row["diff"] <= row["ci95"][1], where
            assert row["note"] == want["note"], where
    # A full factorial ranks its axes by main effects (tests/analysis/test_factorial.py); the
    # per-cell measures stay on each entry and are checked here.
    factorial = plan.get("design") == "full_factorial"
    got = {e["axis"]: e for e in audit["sensitivity"]}
    if not factorial:
        assert [(e["axis"], e["rank"]) for e in audit["sensitivity"]] == [
            (e["axis"], e["rank"]) for e in ref["sensitivity"]
        ]
    for want in ref["sensitivity"]:
        entry = got[want["axis"]]
        for key in ("isolated", "anyCell"):
            if want[key] is None:
                assert entry[key] is None, (entry["axis"], key)
            else:
                measure = entry[key]
                assert (measure["maxAbsD"], measure["metric"], measure["condition"]) == (
                    pytest.approx(want[key][0]),
                    want[key][1],
                    want[key][2],
                ), (entry["axis"], key)
        assert entry["rankedBy"] == (
            ("mainEffect" if entry["mainEffect"] else None)
            if factorial
            else "isolated"
            if want["isolated"]
            else "anyCell"
            if want["anyCell"]
            else None
        )
    assert audit["directionConsistency"] == ref["directionConsistency"]


def test_conditions_rows_count_runs(audit: dict[str, Any]) -> None:
    ids = [c["id"] for c in audit["conditions"]]
    assert ids[:2] == ["base@m1", "base@m2"]
    moral = next(c for c in audit["conditions"] if c["id"] == "framing=moral@m1")
    assert (moral["runs"], moral["succeeded"], moral["complete"], moral["excluded"]) == (
        12,
        10,
        9,
        3,
    )
    assert audit["summary"] == {
        "conditions": 8,
        "runs": 96,
        "failed": 2,
        "incomplete": 1,
        "violated": 0,
        "excluded": 3,
        "used": 93,
    }


def test_pairwise_rows_recomputed_independently(audit: dict[str, Any]) -> None:
    records = _records()
    rows = audit["tests"]["score"]
    assert {r["condition"] for r in rows} == {c["id"] for c in _conditions() if not c["isBase"]}
    assert all(r["tested"] and r["expected"] == "increase" for r in rows)
    assert all(r["expected"] is None for r in audit["tests"]["rate"])
    _check_against_reference(audit, PLAN, _conditions(), records)
    assert audit["schemaVersion"] == 3


def _factorial_case() -> tuple[dict[str, Any], list[dict[str, Any]], list[RunRecord]]:
    """A full factorial design with models: a cell identical to the base, a cell with one
    replication, a metric with near-constant runs, and per-axis and per-level expectations."""
    plan = {
        **PLAN,
        "design": "full_factorial",
        "replications": 6,
        "metrics": ["score", "rate", "steady"],
        "base": {"world": "prisoners_dilemma", "params": {"framing": "neutral", "window": 3}},
        "hypothesis": {
            "outcomes": {"score": "increase", "steady": "decrease"},
            "axes": {"window": {"score": "decrease"}},
            "levels": {"framing=risk": {"rate": "increase"}, "framing=moral|window=1": {}},
        },
        "axes": [
            {**PLAN["axes"][0], "levels": ["neutral", "moral", "risk"]},
            {**PLAN["axes"][1], "levels": [3, 1]},
        ],
    }
    conditions: list[dict[str, Any]] = []
    cells = [{"framing": f, "window": w} for f in ("neutral", "moral", "risk") for w in (3, 1)]
    for model in ("m1", "m2"):
        conditions.append(
            {
                "id": f"base@{model}",
                "dir": f"b{model}",
                "isBase": True,
                "baseId": f"base@{model}",
                "levels": {},
                "model": model,
                "identicalToBase": False,
            }
        )
    for levels in cells:
        for model in ("m1", "m2"):
            core = "|".join(f"{a}={v}" for a, v in levels.items())
            conditions.append(
                {
                    "id": f"{core}@{model}",
                    "dir": f"{core}@{model}",
                    "isBase": False,
                    "baseId": f"base@{model}",
                    "axis": "framing|window",
                    "level": levels,
                    "levels": levels,
                    "model": model,
                    "identicalToBase": levels == {"framing": "neutral", "window": 3},
                }
            )
    rng = np.random.default_rng(17)
    shift = {"neutral": 0.0, "moral": 0.7, "risk": -0.4}
    records = []
    for cond in conditions:
        levels = cond["levels"]
        mu = shift.get(levels.get("framing", "neutral"), 0.0) + (
            -0.9 if levels.get("window") == 1 else 0.0
        )
        reps = 1 if cond["id"] == "framing=risk|window=3@m2" else 6
        for r in range(reps):
            metrics = {
                "score": float(rng.normal(mu, 1.0)),
                "rate": float(round(rng.uniform(), 1)),
                # Near-constant: every |d| of this metric comes from a spread of 1e-7.
                "steady": 2.0
                + (0.001 if levels.get("framing") == "moral" else 0.0)
                + 1e-7 * float(rng.normal()),
            }
            records.append(
                RunRecord(
                    cond["id"],
                    r,
                    _result("base@m1", r, rng, condition=cond["id"], metrics=metrics),
                    seed=(5, r),
                )
            )
    return plan, conditions, records


def test_factorial_audit_recomputed_independently() -> None:
    plan, conditions, records = _factorial_case()
    audit = analyse(plan, conditions, records)
    _check_against_reference(audit, plan, conditions, records)
    # The case exercises what it claims to.
    rows = audit["tests"]["score"]
    assert sum(not r["tested"] for r in rows) == 3  # two identical cells, one short cell
    assert any(r["expected"] is None for r in rows)  # framing up, window down
    assert any(r["smallSpread"] for r in audit["tests"]["steady"])
    assert all(e["rankedBy"] == "mainEffect" for e in audit["sensitivity"])
    assert any(e["isolated"] is not None for e in audit["sensitivity"])
    # Rows expect both directions; only the moved ones count for direction consistency.
    assert {r["expected"] for r in rows if r["tested"]} >= {"increase", "decrease"}
    # framing=risk expects rate to rise; window, which expects nothing of rate, does not object.
    risk = {
        r["condition"]: r["expected"] for r in audit["tests"]["rate"] if "risk" in r["condition"]
    }
    assert set(risk.values()) == {"increase"}
    assert {f["condition"] for f in audit["flags"]} == {
        r["condition"] for r in audit["tests"]["steady"] if r["smallSpread"]
    }


def test_incomplete_runs_enter_when_asked() -> None:
    audit = analyse(PLAN, _conditions(), _records(), include_incomplete=True)
    moral = next(c for c in audit["conditions"] if c["id"] == "framing=moral@m1")
    assert moral["excluded"] == 2  # the failed and the missing run
    row = next(r for r in audit["tests"]["score"] if r["condition"] == "framing=moral@m1")
    assert row["nCond"] == 10
    assert audit["options"]["includeIncomplete"] is True
    _check_against_reference(audit, PLAN, _conditions(), _records(), include=True)


def test_sensitivity_direction_cross_model(audit: dict[str, Any]) -> None:
    ranked = audit["sensitivity"]
    assert [e["rank"] for e in ranked] == [1, 2]
    best = {}
    for rows in audit["tests"].values():
        for row in rows:
            axis = row["condition"].split("=")[0]
            if row["cohenD"] is not None:
                best[axis] = max(best.get(axis, 0.0), abs(row["cohenD"]))
    # One axis at a time: every cell is isolated, so both measures agree.
    assert {e["axis"]: e["isolated"]["maxAbsD"] for e in ranked} == pytest.approx(best)
    assert all(e["isolated"] == e["anyCell"] and e["rankedBy"] == "isolated" for e in ranked)
    assert ranked[0]["isolated"]["maxAbsD"] >= ranked[1]["isolated"]["maxAbsD"]
    consistency = audit["directionConsistency"]["score"]
    # Only rows concluded moved hold or reverse the expected direction.
    moved = [r["diff"] for r in audit["tests"]["score"] if r["conclusion"] == "moved"]
    assert moved
    assert consistency["total"] == len(moved)
    assert consistency["consistent"] == sum(1 for d in moved if d > 0)
    assert "rate" not in audit["directionConsistency"]
    records = _records()
    m2 = [
        v for c in _conditions() if c["model"] == "m2" for v in _sample(records, c["id"], "score")
    ]
    assert audit["crossModel"]["m2"]["score"] == pytest.approx(float(np.mean(m2)))


def test_distribution_scores(audit: dict[str, Any]) -> None:
    rows = audit["distribution"]["choice"]
    target = np.array([0.5, 0.3, 0.2])
    uniform_tv = 0.5 * np.abs(np.full(3, 1 / 3) - target).sum()
    records = _records()
    for row in rows:
        counts = np.zeros(3)
        for rec in records:
            res = rec.result
            if (
                rec.condition == row["condition"]
                and res is not None
                and res.failure is None
                and res.integrity.complete
            ):
                counts += [res.distributions["choice"][k] for k in "abc"]
        p = counts / counts.sum()
        expected = 100 * (1 - 0.5 * np.abs(p - target).sum() / uniform_tv)
        assert row["tvd"] == pytest.approx(expected)
    base_m1 = next(r for r in rows if r["condition"] == "base@m1")
    moral = next(r for r in rows if r["condition"] == "framing=moral@m1")
    assert moral["tvdBase"] == base_m1["tvd"]


def test_integrity_and_cost_are_summed(audit: dict[str, Any]) -> None:
    assert audit["integrity"]["decisions"] == 10 * 93  # two results carry other counters
    assert audit["integrity"]["parseFailures"] == 2
    assert audit["cost"]["llmCalls"] == 10 * 95


def test_grade_from_the_plan(audit: dict[str, Any]) -> None:
    assert audit["grade"]["grade"] == "weak"  # the window axis has a single level
    assert any("window" in r for r in audit["grade"]["reasons"])


def _base_and_one() -> list[dict[str, Any]]:
    """A base and one perturbed condition, without models."""
    return [
        {"id": "base", "dir": "base", "isBase": True, "baseId": "base", "levels": {}},
        {
            "id": "framing=moral",
            "dir": "f",
            "isBase": False,
            "baseId": "base",
            "axis": "framing",
            "levels": {"framing": "moral"},
        },
    ]


def test_single_replication_notes() -> None:
    plan = {**PLAN, "replications": 1, "models": [], "hypothesis": None}
    conditions = _base_and_one()
    rng = np.random.default_rng(0)
    records = [RunRecord(c["id"].replace("@", ""), 0, _result(c["id"], 0, rng)) for c in conditions]
    audit = analyse(plan, conditions, records)
    row = audit["tests"]["score"][0]
    assert row["cohenD"] is None and row["mwuP"] is None and row["ci95"] is None
    assert row["tested"] is False and row["holmP"] is None
    assert row["note"] == too_few_note(1, 1)
    assert audit["notes"]["score"] == METRIC_NOTES["too_few"]


def test_no_usable_base_is_noted() -> None:
    conditions = _base_and_one()
    rng = np.random.default_rng(0)
    records = [RunRecord("framing=moral", r, _result("framing=moral@m1", r, rng)) for r in range(3)]
    records += [RunRecord("base", r, None) for r in range(3)]
    audit = analyse({**PLAN, "models": []}, conditions, records)
    assert audit["tests"]["score"][0]["mwuP"] is None
    assert audit["notes"]["score"] == METRIC_NOTES["base_not_finite"]
    assert audit["tests"]["score"][0]["holmP"] is None


def test_audit_json_is_strict_and_deterministic(audit: dict[str, Any]) -> None:
    text = pretty_json(audit)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert pretty_json(analyse(PLAN, _conditions(), _records())) == text


def constant_groups_audit() -> dict[str, Any]:
    """A base and a condition each of constant values, apart: Cohen's d is +inf."""
    conditions = _base_and_one()
    rng = np.random.default_rng(0)
    records = []
    for cid, value in (("base", 0.1), ("framing=moral", 0.3)):
        for r in range(5):
            res = _result("base", r, rng, condition=cid, metrics={"score": value, "rate": 0.5})
            records.append(RunRecord(cid, r, res))
    return analyse({**PLAN, "models": []}, conditions, records)


def test_infinite_d_written_as_string() -> None:
    audit = constant_groups_audit()
    assert audit["tests"]["score"][0]["cohenD"] == math.inf
    assert json.loads(pretty_json(audit))["tests"]["score"][0]["cohenD"] == "inf"


@pytest.mark.slow
def test_analyse_dir_on_a_real_audit(tmp_path: Path) -> None:
    import simreport

    plan = Path(__file__).resolve().parents[2] / "examples" / "prisoners_dilemma" / "audit.yaml"
    simreport.audit(plan, out=tmp_path / "pd", replications=2, analyse=False)
    audit = analyse_dir(tmp_path / "pd")
    first = (tmp_path / "pd" / "audit.json").read_bytes()
    analyse_dir(tmp_path / "pd")
    assert (tmp_path / "pd" / "audit.json").read_bytes() == first
    frame = pl.read_parquet(tmp_path / "pd" / "runs.parquet")
    assert frame.height == audit["summary"]["runs"] == 30
    assert {
        "condition",
        "model",
        "replication",
        "execution",
        "complete",
        "cooperationRate",
        "axis:linguistic_framing",
    } <= set(frame.columns)
    assert audit["plan"]["hash"] == json.loads((tmp_path / "pd" / "plan.json").read_text())["hash"]


def test_factorial_sensitivity_prefers_cells_that_move_one_axis() -> None:
    """A cell that moves both axes does not lend its effect to either of them."""
    plan = {
        **PLAN,
        "models": [],
        "design": "full_factorial",
        "base": {"world": "prisoners_dilemma", "params": {"framing": "neutral", "window": 3}},
        "axes": [
            {**PLAN["axes"][0], "levels": ["neutral", "moral"]},
            {**PLAN["axes"][1], "levels": [3, 1]},
        ],
    }
    cells = {
        "framing=neutral|window=3": ({"framing": "neutral", "window": 3}, 0.0),
        "framing=neutral|window=1": ({"framing": "neutral", "window": 1}, 0.3),
        "framing=moral|window=3": ({"framing": "moral", "window": 3}, 0.6),
        "framing=moral|window=1": ({"framing": "moral", "window": 1}, 5.0),
    }
    conditions = [{"id": "base", "dir": "base", "isBase": True, "baseId": "base", "levels": {}}]
    conditions += [
        {
            "id": cid,
            "dir": cid,
            "isBase": False,
            "baseId": "base",
            "levels": levels,
            "axis": "framing|window",
            "level": levels,
        }
        for cid, (levels, _) in cells.items()
    ]
    rng = np.random.default_rng(5)
    records = []
    shifts = {"base": 0.0, **{cid: shift for cid, (_, shift) in cells.items()}}
    for cid, shift in shifts.items():
        for r in range(10):
            res = _result(
                "base",
                r,
                rng,
                condition=cid,
                metrics={"score": float(rng.normal(shift, 1.0)), "rate": 0.5},
            )
            records.append(RunRecord(cid, r, res))
    audit = analyse(plan, conditions, records)
    ranked = {e["axis"]: e for e in audit["sensitivity"]}
    assert ranked["framing"]["isolated"]["condition"] == "framing=moral|window=3"
    assert ranked["window"]["isolated"]["condition"] == "framing=neutral|window=1"
    # Ranked by main effects over the grid (tests/analysis/test_factorial.py); the cell measures
    # stay.
    assert ranked["framing"]["rankedBy"] == ranked["window"]["rankedBy"] == "mainEffect"
    # The cell that moves both axes is no axis's isolated effect, but each axis's largest overall.
    assert all(e["isolated"]["condition"] != "framing=moral|window=1" for e in audit["sensitivity"])
    assert all(e["anyCell"]["condition"] == "framing=moral|window=1" for e in audit["sensitivity"])


def _ref_rank_sum_p(base: np.ndarray, cond: np.ndarray) -> float:
    """The exact permutation p of the condition's midrank sum, by enumerating every split."""
    from itertools import combinations

    pooled = np.concatenate([base, cond])
    ranks = sps.rankdata(pooled)
    centre = cond.size * (pooled.size + 1) / 2.0
    observed = abs(ranks[base.size :].sum() - centre)
    sums = [ranks[list(c)].sum() for c in combinations(range(pooled.size), cond.size)]
    return float(np.mean([abs(s - centre) >= observed - 1e-9 for s in sums]))


def test_power_and_noise_floor_recomputed_independently(audit: dict[str, Any]) -> None:
    """Every tested row's Holm threshold over the family of all metrics' tested rows and an MDE
    that is the rank test's (null exactly where 2 / C(N, n) cannot reach the threshold, never
    below the t-test's by statsmodels); the noise floor against every split of each base,
    tested with this file's own enumeration of the rank-sum permutation test, within the Monte
    Carlo error of the audit's splits."""
    from itertools import combinations

    from statsmodels.stats.power import TTestIndPower, TTestPower

    records = _records()
    family = [(metric, i, r) for metric, rows in audit["tests"].items() for i, r in enumerate(rows)]
    tested = sorted(
        ((k, entry) for k, entry in enumerate(family) if entry[2]["tested"]),
        key=lambda item: (item[1][2]["p"], item[0]),
    )
    alphas = {
        (entry[0], entry[2]["condition"]): 0.05 / (len(tested) - k)
        for k, (_, entry) in enumerate(tested)
    }
    for metric, rows in audit["tests"].items():
        got = {r["condition"]: r for r in audit["power"]["metrics"][metric]}
        assert set(got) == {r["condition"] for r in rows}
        for row in rows:
            entry = got[row["condition"]]
            if not row["tested"]:
                assert entry["alpha"] is None and entry["mde"] is None and entry["note"]
                continue
            alpha = alphas[(metric, row["condition"])]
            assert entry["alpha"] == pytest.approx(alpha)
            n_base, n_cond = row["nBase"], row["nCond"]
            assert entry["paired"] is row["paired"]
            if row["paired"]:
                # Paired rows: the sign-flip test of nPairs differences, against the paired t.
                pairs = row["nPairs"]
                if 2 / 2**pairs >= alpha:
                    unreachable = unreachable_note(pairs, pairs, entry["alpha"], paired=True)
                    assert entry["mde"] is None and entry["note"] == unreachable, entry
                    continue
                t_delta = TTestPower().solve_power(
                    effect_size=None, nobs=pairs, alpha=alpha, power=0.8
                )
                assert entry["mde"] > 0.98 * float(t_delta), entry
                continue
            if 2 / math.comb(n_base + n_cond, n_cond) >= alpha:
                unreachable = unreachable_note(n_base, n_cond, entry["alpha"])
                assert entry["mde"] is None and entry["note"] == unreachable, entry
                continue
            t_mde = TTestIndPower().solve_power(
                effect_size=None,
                nobs1=n_base,
                ratio=n_cond / n_base,
                alpha=alpha,
                power=0.8,
                alternative="two-sided",
            )
            assert entry["mde"] > 0.98 * float(t_mde), entry

    for metric in audit["metrics"]:
        for floor in audit["noiseFloor"][metric]:
            base = np.sort(_values(records, floor["base"], metric, False))
            assert floor["n"] == len(base)
            # No condition here changes only the seeds: the base's halves, below the audit's n.
            assert floor["scope"] == "halves" and floor["companions"] == []
            half = len(base) - len(base) // 2
            if floor["flipRate"] is None:
                assert 2 / math.comb(len(base), half) >= 0.05 and floor["note"]
                continue
            flips = []
            for second in combinations(range(len(base)), half):
                if len(base) % 2 == 0 and 0 not in second:
                    continue  # a split and its mirror give the same two-sided p
                rest = [i for i in range(len(base)) if i not in second]
                flips.append(_ref_rank_sum_p(base[rest], base[list(second)]) < 0.05)
            exact = float(np.mean(flips))
            error = math.sqrt(max(exact * (1 - exact), 0.01) / floor["splits"])
            assert abs(floor["flipRate"] - exact) <= 4 * error, (metric, floor, exact)


def test_noise_floor_is_at_the_audit_n_when_a_seed_axis_gives_twins() -> None:
    """A condition that moves only an axis on `seed` is the base under other seeds: the floor
    pools it with its own model's base and splits into groups of the audit's sizes, checked
    against every split enumerated here; a condition that moves anything else is no twin."""
    from itertools import combinations

    plan = json.loads(json.dumps(PLAN))
    plan["axes"].append(
        {
            "id": "seeds",
            "level": "micro",
            "kind": "design",
            "dimension": "seed",
            "target": "seed",
            "levels": [99],
        }
    )
    conditions = _conditions() + [
        {
            "id": f"seeds=99@{model}",
            "dir": f"seeds=99~40{model}",
            "axis": "seeds",
            "level": 99,
            "levels": {"seeds": 99},
            "model": model,
            "isBase": False,
            "baseId": f"base@{model}",
            "identicalToBase": False,
            "replications": 12,
        }
        for model in ("m1", "m2")
    ]
    rng = np.random.default_rng(12)
    records = [r for r in _records() if r.replication < 5]
    for model in ("m1", "m2"):
        cid = f"seeds=99@{model}"
        for r in range(5):
            result = _result(f"base@{model}", r, rng).model_copy(update={"condition": cid})
            records.append(RunRecord(cid, r, result, seed=(99, r)))
    doc = analyse(plan, conditions, records)
    for metric in doc["metrics"]:
        for floor in doc["noiseFloor"][metric]:
            model = floor["base"].split("@")[1]
            assert floor["scope"] == "audit" and floor["companions"] == [f"seeds=99@{model}"]
            base = _values(records, floor["base"], metric, False)
            twin = _values(records, f"seeds=99@{model}", metric, False)
            assert floor["sizes"] == [len(base), len(twin)] == [5, 5]
            pooled = np.sort(np.array([*base, *twin]))
            flips = []
            for group in combinations(range(10), 5):
                if 0 not in group:
                    continue  # a split and its mirror give the same two-sided p
                rest = [i for i in range(10) if i not in group]
                flips.append(_ref_rank_sum_p(pooled[rest], pooled[list(group)]) < 0.05)
            assert floor["splits"] == len(flips) == 126
            assert floor["flipRate"] == pytest.approx(float(np.mean(flips)), abs=1e-12)
