"""audit.json: assembled from plan, conditions and runs, recomputed here independently."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from simreport.analysis.audit import RunRecord, analyse, analyse_dir
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
    "base": {"params": {"framing": "neutral", "window": 3}},
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


SHIFT = {"base": 0.0, "framing=moral": 0.8, "framing=risk": -0.5, "window=1": 0.1}


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
            records.append(RunRecord(cond["id"], r, _result(cond["id"], r, rng)))
    # one failed run, one incomplete run, one missing run in framing=moral@m1
    records[24] = RunRecord(
        records[24].condition,
        records[24].replication,
        _result(
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
        _result(
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
    raw = []
    for row in rows:
        base = np.array(_sample(records, row["baseId"], "score"))
        cond = np.array(_sample(records, row["condition"], "score"))
        assert row["baseId"] == "base@" + row["condition"].split("@")[1]
        assert (row["nBase"], row["nCond"]) == (base.size, cond.size)
        assert row["diff"] == pytest.approx(cond.mean() - base.mean())
        pooled = math.sqrt(
            ((base.size - 1) * base.var(ddof=1) + (cond.size - 1) * cond.var(ddof=1))
            / (base.size + cond.size - 2)
        )
        assert row["cohenD"] == pytest.approx((cond.mean() - base.mean()) / pooled)
        expected_p = sps.mannwhitneyu(
            cond, base, alternative="two-sided", method="asymptotic", use_continuity=True
        ).pvalue
        assert row["mwuP"] == pytest.approx(expected_p)
        assert row["w1"] == pytest.approx(sps.wasserstein_distance(base, cond))
        greater = sum(1 for c in cond for b in base if c > b)
        less = sum(1 for c in cond for b in base if c < b)
        assert row["cliffDelta"] == pytest.approx((greater - less) / (base.size * cond.size))
        lo, hi = row["ci95"]
        assert lo < row["diff"] < hi
        assert row["directionFlip"] == (row["diff"] < 0)
        raw.append(row["mwuP"])
    holm = multipletests(raw, method="holm")[1]
    assert [r["holmP"] for r in rows] == pytest.approx(list(holm))


def test_incomplete_runs_enter_when_asked() -> None:
    audit = analyse(PLAN, _conditions(), _records(), include_incomplete=True)
    moral = next(c for c in audit["conditions"] if c["id"] == "framing=moral@m1")
    assert moral["excluded"] == 2  # the failed and the missing run
    row = next(r for r in audit["tests"]["score"] if r["condition"] == "framing=moral@m1")
    assert row["nCond"] == 10
    assert audit["options"]["includeIncomplete"] is True


def test_sensitivity_direction_cross_model(audit: dict[str, Any]) -> None:
    ranked = audit["sensitivity"]
    assert [e["rank"] for e in ranked] == [1, 2]
    best = {}
    for rows in audit["tests"].values():
        for row in rows:
            axis = row["condition"].split("=")[0]
            if row["cohenD"] is not None:
                best[axis] = max(best.get(axis, 0.0), abs(row["cohenD"]))
    assert {e["axis"]: e["maxAbsD"] for e in ranked} == pytest.approx(best)
    assert ranked[0]["maxAbsD"] >= ranked[1]["maxAbsD"]
    consistency = audit["directionConsistency"]["score"]
    diffs = [r["diff"] for r in audit["tests"]["score"]]
    assert consistency["total"] == len(diffs)
    assert consistency["consistent"] == sum(1 for d in diffs if d > 0)
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
    assert row["cohenD"] is None and row["mwuP"] == 1.0
    assert "fewer than two usable replications" in row["note"]
    assert "fewer than two usable replications" in audit["notes"]["score"]


def test_no_usable_base_is_noted() -> None:
    conditions = _base_and_one()
    rng = np.random.default_rng(0)
    records = [RunRecord("framing=moral", r, _result("framing=moral@m1", r, rng)) for r in range(3)]
    records += [RunRecord("base", r, None) for r in range(3)]
    audit = analyse({**PLAN, "models": []}, conditions, records)
    assert audit["tests"]["score"][0]["mwuP"] is None
    assert "base has no usable runs" in audit["notes"]["score"]
    assert audit["tests"]["score"][0]["holmP"] is None


def test_audit_json_is_strict_and_deterministic(audit: dict[str, Any]) -> None:
    text = pretty_json(audit)
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict constant {c}"))
    assert pretty_json(analyse(PLAN, _conditions(), _records())) == text


def test_infinite_d_written_as_string() -> None:
    conditions = _base_and_one()
    rng = np.random.default_rng(0)
    records = []
    for cid, value in (("base", 0.1), ("framing=moral", 0.3)):
        for r in range(5):
            res = _result("base", r, rng, condition=cid, metrics={"score": value, "rate": 0.5})
            records.append(RunRecord(cid, r, res))
    audit = analyse({**PLAN, "models": []}, conditions, records)
    assert audit["tests"]["score"][0]["cohenD"] == math.inf
    assert json.loads(pretty_json(audit))["tests"]["score"][0]["cohenD"] == "inf"


@pytest.mark.slow
def test_analyse_dir_on_a_real_audit(tmp_path: Path) -> None:
    import simreport

    plan = Path(__file__).resolve().parent.parent / "examples" / "prisoners_dilemma" / "audit.yaml"
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
        "base": {"params": {"framing": "neutral", "window": 3}},
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
    assert ranked["framing"]["condition"] == "framing=moral|window=3"
    assert ranked["window"]["condition"] == "framing=neutral|window=1"
    assert ranked["framing"]["isolated"] and ranked["window"]["isolated"]
    assert all(e["condition"] != "framing=moral|window=1" for e in audit["sensitivity"])
