"""What a row of audit.json claims: which conditions are tests, which axis an effect belongs to,
why a statistic is missing, and which direction each row was expected to move (schemaVersion 2)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from simreport.analysis.audit import RunRecord, analyse
from simreport.analysis.pairwise_rows import METRIC_NOTES, not_finite_note
from simreport.analysis.stats import small_spread_note, too_few_note
from simreport.core.errors import InputError
from simreport.core.schema import RunResult

# A fixed noise vector: every group below is a shift of it, so each d is known by hand.
NOISE = [-1.2, -0.7, -0.3, 0.0, 0.2, 0.5, 0.9, 1.4]

ROW_KEYS = {
    "condition",
    "baseId",
    "nBase",
    "nCond",
    "meanBase",
    "meanCond",
    "diff",
    "ci95",
    "cohenD",
    "mwuP",
    "holmP",
    "w1",
    "cliffDelta",
    "directionFlip",
    "note",
    "tested",
    "expected",
    "smallSpread",
    # Schema 3: the conclusion of the row and the statistics that decide it (SPEC §6a).
    "paired",
    "nPairs",
    "effectScale",
    "mdeInUnits",
    "pairing",
    "test",
    "p",
    "interval95",
    "intervalMethod",
    "intervalNote",
    "margin",
    "equivalenceP",
    "equivalenceTest",
    "family",
    "familyP",
    "mde",
    "conclusion",
    "reason",
}
STATISTICS = ("diff", "ci95", "cohenD", "mwuP", "holmP", "w1", "cliffDelta", "directionFlip")
IDENTICAL_NOTE = "identical to the base, not tested"


def _axis(axis_id: str, target: str, levels: list[Any], code: str = "R3") -> dict[str, Any]:
    return {
        "id": axis_id,
        "level": "micro",
        "kind": "representation",
        "dimension": axis_id,
        "target": target,
        "levels": levels,
        "code": code,
    }


def _plan(
    axes: list[dict[str, Any]],
    *,
    design: str = "one_at_a_time",
    hypothesis: Mapping[str, Any] | None = None,
    metrics: Sequence[str] = ("score",),
    models: Sequence[str] = (),
) -> dict[str, Any]:
    return {
        "id": "semantics",
        "hash": "cd" * 32,
        "replications": len(NOISE),
        "models": list(models),
        "metrics": list(metrics),
        "claimType": "exploratory",
        "design": design,
        "base": {
            "world": "prisoners_dilemma",
            "params": {"framing": "neutral", "window": 3, "scale": 1, "tone": "plain"},
        },
        "hypothesis": dict(hypothesis) if hypothesis is not None else None,
        "axes": axes,
    }


def _condition(
    cid: str, levels: Mapping[str, Any], *, identical: bool = False, model: str | None = None
) -> dict[str, Any]:
    base_id = "base" if model is None else f"base@{model}"
    if not levels:
        return {
            "id": cid,
            "dir": cid,
            "isBase": True,
            "baseId": cid,
            "levels": {},
            "axis": None,
            "level": None,
            "model": model,
            "identicalToBase": False,
        }
    one = len(levels) == 1
    return {
        "id": cid,
        "dir": cid,
        "isBase": False,
        "baseId": base_id,
        "levels": dict(levels),
        "axis": next(iter(levels)) if one else "|".join(levels),
        "level": next(iter(levels.values())) if one else dict(levels),
        "model": model,
        "identicalToBase": identical,
    }


def _result(cid: str, r: int, metrics: Mapping[str, float]) -> RunResult:
    return RunResult.model_validate(
        {
            "condition": cid,
            "replication": r,
            "seedPath": [r],
            "status": {"execution": "completed", "validity": "unchecked", "evidence": "complete"},
            "metrics": dict(metrics),
            "integrity": {"complete": True, "counters": {}},
        }
    )


def _records(values: Mapping[str, Mapping[str, Sequence[float]]]) -> list[RunRecord]:
    """condition id → metric → one value per replication."""
    records = []
    for cid, by_metric in values.items():
        n = max(len(v) for v in by_metric.values())
        for r in range(n):
            metrics = {m: float(v[r]) for m, v in by_metric.items() if r < len(v)}
            records.append(RunRecord(cid, r, _result(cid, r, metrics)))
    return records


def _shifted(shift: float, scale: float = 1.0) -> list[float]:
    return [shift + scale * e for e in NOISE]


def _hand_d(base: Sequence[float], cond: Sequence[float]) -> float:
    b, c = np.asarray(base, dtype=float), np.asarray(cond, dtype=float)
    pooled = ((b.size - 1) * b.var(ddof=1) + (c.size - 1) * c.var(ddof=1)) / (b.size + c.size - 2)
    return float((c.mean() - b.mean()) / math.sqrt(pooled))


def _row(audit: Mapping[str, Any], condition: str, metric: str = "score") -> dict[str, Any]:
    row: dict[str, Any] = next(r for r in audit["tests"][metric] if r["condition"] == condition)
    return row


def _sensitivity(audit: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["axis"]: e for e in audit["sensitivity"]}


# --------------------------------------------------------------------------- identical to base


def _identical_audit() -> tuple[dict[str, Any], dict[str, list[float]]]:
    axes = [
        _axis("framing", "params.framing", ["neutral", "moral"]),
        _axis("window", "params.window", [3], code="D4"),
        _axis("tone", "params.tone", ["warm"], code="R1"),
    ]
    conditions = [
        _condition("base", {}),
        _condition("framing=neutral", {"framing": "neutral"}, identical=True),
        _condition("framing=moral", {"framing": "moral"}),
        _condition("window=3", {"window": 3}, identical=True),
        _condition("tone=warm", {"tone": "warm"}),
    ]
    scores = {
        "base": _shifted(0.0),
        # Far from the base on purpose: were it tested, it would dominate every ranking.
        "framing=neutral": _shifted(-6.0),
        # Far enough to be concluded moved: only moved rows count for direction consistency.
        "framing=moral": _shifted(4.0),
        "window=3": _shifted(8.0),
        "tone=warm": _shifted(3.5, 1.3),
    }
    plan = _plan(axes, hypothesis={"outcomes": {"score": "increase"}})
    audit = analyse(plan, conditions, _records({c: {"score": v} for c, v in scores.items()}))
    return audit, scores


def test_identical_condition_keeps_a_row_that_is_not_a_test() -> None:
    audit, _ = _identical_audit()
    row = _row(audit, "framing=neutral")
    assert row["tested"] is False
    assert row["note"] == IDENTICAL_NOTE
    for key in STATISTICS:
        assert row[key] is None, key
    assert row["smallSpread"] is False
    assert row["expected"] == "increase"  # the hypothesis still names a direction for it
    # Counts and means describe the runs, which did happen.
    assert (row["nBase"], row["nCond"]) == (len(NOISE), len(NOISE))
    assert row["meanCond"] == pytest.approx(-6.0 + float(np.mean(NOISE)))


def test_identical_condition_is_outside_the_holm_family() -> None:
    audit, scores = _identical_audit()
    tested = [r for r in audit["tests"]["score"] if r["tested"]]
    assert [r["condition"] for r in tested] == ["framing=moral", "tone=warm"]
    raw = [
        sps.mannwhitneyu(
            scores[r["condition"]],
            scores["base"],
            alternative="two-sided",
            method="asymptotic",
            use_continuity=True,
        ).pvalue
        for r in tested
    ]
    assert [r["mwuP"] for r in tested] == pytest.approx(raw)
    assert [r["holmP"] for r in tested] == pytest.approx(list(multipletests(raw, method="holm")[1]))


def test_identical_condition_is_outside_direction_consistency() -> None:
    audit, _ = _identical_audit()
    consistency = audit["directionConsistency"]["score"]
    assert consistency["total"] == 2
    assert (
        consistency["consistent"] == 2
    )  # moral and warm both rise; neutral (falls) is not counted
    assert consistency["share"] == 1.0


def test_identical_condition_is_outside_sensitivity() -> None:
    audit, scores = _identical_audit()
    entries = _sensitivity(audit)
    framing = entries["framing"]
    assert framing["isolated"]["condition"] == "framing=moral"
    assert framing["isolated"]["maxAbsD"] == pytest.approx(
        _hand_d(scores["base"], scores["framing=moral"])
    )
    # window's only level equals the base: nothing to rank it by.
    window = entries["window"]
    assert (window["rank"], window["rankedBy"], window["isolated"], window["anyCell"]) == (
        None,
        None,
        None,
        None,
    )
    assert [e["axis"] for e in audit["sensitivity"]] == ["framing", "tone", "window"]


def test_every_condition_identical_is_noted_for_the_metric() -> None:
    axes = [_axis("window", "params.window", [3])]
    conditions = [_condition("base", {}), _condition("window=3", {"window": 3}, identical=True)]
    values = {"base": {"score": _shifted(0.0)}, "window=3": {"score": _shifted(0.0)}}
    audit = analyse(_plan(axes), conditions, _records(values))
    assert audit["notes"]["score"] == METRIC_NOTES["all_identical"]
    assert audit["tests"]["score"][0]["tested"] is False


# --------------------------------------------------------------------------- sensitivity


def _factorial(
    axes: list[dict[str, Any]],
    cells: Mapping[str, tuple[dict[str, Any], float]],
    hypothesis: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, list[float]]]:
    conditions = [_condition("base", {})]
    scores = {"base": _shifted(0.0)}
    for cid, (levels, shift) in cells.items():
        conditions.append(_condition(cid, levels))
        scores[cid] = _shifted(shift)
    plan = _plan(axes, design="full_factorial", hypothesis=hypothesis)
    audit = analyse(plan, conditions, _records({c: {"score": v} for c, v in scores.items()}))
    return audit, scores


def test_factorial_sensitivity_reports_isolated_and_any_cell() -> None:
    axes = [
        _axis("framing", "params.framing", ["neutral", "moral"]),
        _axis("window", "params.window", [3, 1], code="D4"),
    ]
    cells: dict[str, tuple[dict[str, Any], float]] = {
        "framing=neutral|window=3": ({"framing": "neutral", "window": 3}, 0.0),
        "framing=neutral|window=1": ({"framing": "neutral", "window": 1}, 0.3),
        "framing=moral|window=3": ({"framing": "moral", "window": 3}, 0.6),
        # Both axes move: invisible to `isolated`, the largest |d| of all for `anyCell`.
        "framing=moral|window=1": ({"framing": "moral", "window": 1}, 7.0),
    }
    conditions = [_condition("base", {})]
    conditions += [
        _condition(cid, levels, identical=(cid == "framing=neutral|window=3"))
        for cid, (levels, _) in cells.items()
    ]
    scores = {"base": _shifted(0.0), **{cid: _shifted(s) for cid, (_, s) in cells.items()}}
    plan = _plan(axes, design="full_factorial")
    audit = analyse(plan, conditions, _records({c: {"score": v} for c, v in scores.items()}))
    entries = _sensitivity(audit)
    both = _hand_d(scores["base"], scores["framing=moral|window=1"])
    for axis, isolated_cell in (
        ("framing", "framing=moral|window=3"),
        ("window", "framing=neutral|window=1"),
    ):
        entry = entries[axis]
        # A full factorial ranks by main effects (tests/analysis/test_factorial.py); both cell
        # measures stay on the entry.
        assert entry["rankedBy"] == "mainEffect"
        assert entry["isolated"]["condition"] == isolated_cell
        assert entry["isolated"]["metric"] == "score"
        assert entry["isolated"]["maxAbsD"] == pytest.approx(
            abs(_hand_d(scores["base"], scores[isolated_cell]))
        )
        assert entry["anyCell"]["condition"] == "framing=moral|window=1"
        assert entry["anyCell"]["maxAbsD"] == pytest.approx(both)
    assert (entries["framing"]["rank"], entries["window"]["rank"]) == (1, 2)


def test_axis_never_moved_alone_has_no_isolated_measure() -> None:
    """`scale` never stays at its base value, so `tone` is never the only axis moved."""
    axes = [
        _axis("scale", "params.scale", [2, 4], code="D1"),
        _axis("tone", "params.tone", ["plain", "warm"], code="R1"),
    ]
    cells = {
        "scale=2|tone=plain": ({"scale": 2, "tone": "plain"}, 0.2),
        "scale=2|tone=warm": ({"scale": 2, "tone": "warm"}, 1.5),
        "scale=4|tone=plain": ({"scale": 4, "tone": "plain"}, 0.5),
        "scale=4|tone=warm": ({"scale": 4, "tone": "warm"}, 1.1),
    }
    audit, _ = _factorial(axes, cells)
    entries = _sensitivity(audit)
    assert entries["scale"]["isolated"]["condition"] == "scale=4|tone=plain"
    assert entries["scale"]["anyCell"]["condition"] == "scale=2|tone=warm"
    assert entries["tone"]["isolated"] is None
    assert entries["tone"]["anyCell"]["condition"] == "scale=2|tone=warm"
    # A full factorial ranks by main effects over the grid, which need no isolated cell: tone
    # moves the cell means by 0.95 on average, scale by −0.05.
    assert entries["scale"]["rankedBy"] == entries["tone"]["rankedBy"] == "mainEffect"
    assert entries["tone"]["mainEffect"]["diff"] == pytest.approx(0.95)
    assert entries["scale"]["mainEffect"]["diff"] == pytest.approx(-0.05)
    assert [e["axis"] for e in audit["sensitivity"]] == ["tone", "scale"]
    assert [e["rank"] for e in audit["sensitivity"]] == [1, 2]


def test_ties_rank_in_plan_order_and_unranked_axes_follow_in_plan_order() -> None:
    axes = [
        _axis("zeta", "params.framing", ["moral"]),
        _axis("omega", "params.window", [3], code="D4"),
        _axis("alpha", "params.tone", ["warm"], code="R1"),
        _axis("beta", "params.scale", [1], code="D1"),
    ]
    conditions = [
        _condition("base", {}),
        _condition("zeta=moral", {"zeta": "moral"}),
        _condition("omega=3", {"omega": 3}, identical=True),
        _condition("alpha=warm", {"alpha": "warm"}),
        _condition("beta=1", {"beta": 1}, identical=True),
    ]
    values = {
        "base": {"score": _shifted(0.0)},
        "zeta=moral": {"score": _shifted(0.5)},
        "omega=3": {"score": _shifted(0.0)},
        "alpha=warm": {"score": _shifted(0.5)},
        "beta=1": {"score": _shifted(0.0)},
    }
    audit = analyse(_plan(axes), conditions, _records(values))
    order = [(e["axis"], e["rank"]) for e in audit["sensitivity"]]
    assert order == [("zeta", 1), ("alpha", 2), ("omega", None), ("beta", None)]


# --------------------------------------------------------------------------- degenerate cases


def test_fewer_than_two_replications_is_not_a_test() -> None:
    axes = [_axis("framing", "params.framing", ["moral", "risk"])]
    conditions = [
        _condition("base", {}),
        _condition("framing=moral", {"framing": "moral"}),
        _condition("framing=risk", {"framing": "risk"}),
    ]
    values = {
        "base": {"score": _shifted(0.0)},
        "framing=moral": {"score": [2.0]},
        "framing=risk": {"score": _shifted(1.0)},
    }
    audit = analyse(
        _plan(axes, hypothesis={"outcomes": {"score": "increase"}}),
        conditions,
        _records(values),
    )
    single = _row(audit, "framing=moral")
    assert single["tested"] is False
    for key in ("mwuP", "holmP", "ci95", "cohenD", "directionFlip"):
        assert single[key] is None, key
    assert single["note"].startswith(
        "fewer than 2 replications with a finite value in the condition"
    )
    # Defined for one value against eight, so kept.
    assert single["diff"] == pytest.approx(2.0 - float(np.mean(NOISE)))
    assert single["w1"] is not None and single["cliffDelta"] is not None
    # The other row is a family of one: Holm leaves its p as it is.
    risk = _row(audit, "framing=risk")
    assert risk["tested"] is True and risk["holmP"] == risk["mwuP"]
    assert audit["directionConsistency"]["score"]["total"] == 1
    assert _sensitivity(audit)["framing"]["isolated"]["condition"] == "framing=risk"


def test_base_with_one_finite_value_is_named_in_the_note() -> None:
    axes = [_axis("framing", "params.framing", ["moral"])]
    conditions = [_condition("base", {}), _condition("framing=moral", {"framing": "moral"})]
    values = {
        "base": {"score": [1.0, math.nan, math.inf, math.nan]},
        "framing=moral": {"score": _shifted(1.0)},
    }
    audit = analyse(_plan(axes), conditions, _records(values))
    row = _row(audit, "framing=moral")
    assert row["note"] == too_few_note(1, len(NOISE))
    assert (row["nBase"], row["tested"], row["mwuP"]) == (1, False, None)
    assert audit["notes"]["score"] == METRIC_NOTES["too_few"]


def test_metric_that_is_never_finite_gets_its_own_note() -> None:
    axes = [_axis("framing", "params.framing", ["moral"])]
    conditions = [_condition("base", {}), _condition("framing=moral", {"framing": "moral"})]
    values = {
        c: {"score": _shifted(0.0), "ratio": [math.nan] * len(NOISE)}
        for c in ("base", "framing=moral")
    }
    audit = analyse(_plan(axes, metrics=("score", "ratio")), conditions, _records(values))
    # Every usable run reports NaN: the metric's own note, not that of a run-less audit.
    assert audit["notes"]["ratio"] == not_finite_note(2 * len(NOISE), 2 * len(NOISE))
    assert _row(audit, "framing=moral", "ratio")["tested"] is False
    assert "score" not in audit["notes"]


def test_effect_size_from_near_zero_spread_is_flagged() -> None:
    axes = [_axis("framing", "params.framing", ["moral", "risk", "calm"])]
    conditions = [_condition("base", {})] + [
        _condition(f"framing={lvl}", {"framing": lvl}) for lvl in ("moral", "risk", "calm")
    ]
    base = [0.5 + 1e-6 * e for e in NOISE]
    values = {
        "base": {"score": base, "rate": [0.2] * len(NOISE)},
        # A shift of 0.001 on a spread of 1e-6: |d| in the hundreds, from spread, not difference.
        "framing=moral": {"score": [v + 1e-3 for v in base], "rate": [0.4] * len(NOISE)},
        # An ordinary effect.
        "framing=risk": {"score": _shifted(0.5), "rate": [0.2] * len(NOISE)},
        "framing=calm": {"score": _shifted(0.5), "rate": _shifted(0.2)},
    }
    audit = analyse(_plan(axes, metrics=("score", "rate")), conditions, _records(values))
    near = _row(audit, "framing=moral")
    assert near["smallSpread"] is True and near["tested"] is True
    assert abs(near["cohenD"]) > 100
    assert near["note"] == small_spread_note(base, values["framing=moral"]["score"])
    constant = _row(audit, "framing=moral", "rate")
    assert constant["cohenD"] == math.inf  # SPEC §6: constant groups, different means
    assert constant["smallSpread"] is True
    assert constant["note"] == small_spread_note(values["base"]["rate"], [0.4] * len(NOISE))
    # Equal constant groups give d = 0 by convention: nothing to warn about.
    equal = _row(audit, "framing=risk", "rate")
    assert (equal["cohenD"], equal["smallSpread"]) == (0.0, False)
    assert _row(audit, "framing=risk")["smallSpread"] is False
    assert _row(audit, "framing=risk")["note"] is None
    assert audit["flags"] == [
        {
            "kind": "smallSpread",
            "metric": "score",
            "condition": "framing=moral",
            "note": near["note"],
        },
        {
            "kind": "smallSpread",
            "metric": "rate",
            "condition": "framing=moral",
            "note": constant["note"],
        },
    ]
    assert _sensitivity(audit)["framing"]["isolated"]["smallSpread"] is True


def test_no_flags_is_an_empty_list() -> None:
    audit, _ = _identical_audit()
    assert audit["flags"] == []


# --------------------------------------------------------------------------- expected directions


def test_expectation_per_level_beats_axis_beats_metric() -> None:
    axes = [
        _axis("framing", "params.framing", ["moral", "risk"]),
        _axis("window", "params.window", [1], code="D4"),
    ]
    hypothesis = {
        "outcomes": {"score": "increase"},
        "axes": {"window": {"score": "decrease"}},
        "levels": {"framing=risk": {"score": "decrease"}},
    }
    conditions = [_condition("base@m1", {}, model="m1")]
    conditions += [
        _condition(f"{a}={lvl}@m1", {a: lvl}, model="m1")
        for a, lvl in (("framing", "moral"), ("framing", "risk"), ("window", 1))
    ]
    values = {
        "base@m1": {"score": _shifted(0.0), "rate": _shifted(0.0)},
        "framing=moral@m1": {"score": _shifted(4.0), "rate": _shifted(1.0)},
        "framing=risk@m1": {"score": _shifted(4.0), "rate": _shifted(1.0)},
        "window=1@m1": {"score": _shifted(-4.0), "rate": _shifted(1.0)},
    }
    plan = _plan(axes, hypothesis=hypothesis, metrics=("score", "rate"), models=("m1",))
    audit = analyse(plan, conditions, _records(values))
    expected = {
        r["condition"]: (r["expected"], r["directionFlip"]) for r in audit["tests"]["score"]
    }
    assert expected == {
        "framing=moral@m1": ("increase", False),
        "framing=risk@m1": ("decrease", True),  # the level's own expectation, by id without model
        "window=1@m1": ("decrease", False),
    }
    assert all(r["expected"] is None for r in audit["tests"]["rate"])
    assert all(r["directionFlip"] is None for r in audit["tests"]["rate"])
    assert "rate" not in audit["directionConsistency"]
    consistency = audit["directionConsistency"]["score"]
    assert consistency == {
        "expected": "mixed",
        "consistent": 2,
        "total": 3,
        "share": pytest.approx(2 / 3),
        "byAxis": {
            "framing": {"consistent": 1, "total": 2},
            "window": {"consistent": 1, "total": 1},
        },
    }


def test_factorial_cell_whose_moved_axes_disagree_has_no_expectation() -> None:
    axes = [
        _axis("framing", "params.framing", ["neutral", "moral"]),
        _axis("window", "params.window", [3, 1], code="D4"),
    ]
    hypothesis = {
        "outcomes": {},
        "axes": {"framing": {"score": "increase"}, "window": {"score": "decrease"}},
    }
    cells = {
        "framing=neutral|window=1": ({"framing": "neutral", "window": 1}, -4.0),
        "framing=moral|window=3": ({"framing": "moral", "window": 3}, 4.0),
        "framing=moral|window=1": ({"framing": "moral", "window": 1}, 4.0),
    }
    audit, _ = _factorial(axes, cells, hypothesis)
    expected = {r["condition"]: r["expected"] for r in audit["tests"]["score"]}
    assert expected == {
        "framing=neutral|window=1": "decrease",  # only window moved
        "framing=moral|window=3": "increase",  # only framing moved
        "framing=moral|window=1": None,  # both moved, in opposite directions
    }
    consistency = audit["directionConsistency"]["score"]
    assert (consistency["expected"], consistency["total"], consistency["consistent"]) == (
        "mixed",
        2,
        2,
    )
    assert consistency["byAxis"] == {
        "framing": {"consistent": 1, "total": 1},
        "window": {"consistent": 1, "total": 1},
    }

    # A factorial cell named in `levels` takes that expectation over its axes'.
    named = {**hypothesis, "levels": {"framing=moral|window=1": {"score": "decrease"}}}
    audit, _ = _factorial(axes, cells, named)
    assert _row(audit, "framing=moral|window=1")["expected"] == "decrease"
    assert _row(audit, "framing=moral|window=1")["directionFlip"] is True


def test_moved_axis_without_expectation_does_not_disagree() -> None:
    axes = [
        _axis("framing", "params.framing", ["neutral", "moral"]),
        _axis("window", "params.window", [3, 1], code="D4"),
    ]
    cells = {
        "framing=neutral|window=1": ({"framing": "neutral", "window": 1}, 0.2),
        "framing=moral|window=1": ({"framing": "moral", "window": 1}, 4.0),
    }
    audit, _ = _factorial(axes, cells, {"axes": {"framing": {"score": "increase"}}})
    assert _row(audit, "framing=moral|window=1")["expected"] == "increase"
    assert _row(audit, "framing=neutral|window=1")["expected"] is None
    consistency = audit["directionConsistency"]["score"]
    assert (consistency["expected"], consistency["total"]) == ("increase", 1)
    assert consistency["byAxis"] == {
        "framing": {"consistent": 1, "total": 1},
        "window": {"consistent": 1, "total": 1},
    }


def test_agreeing_expectations_give_the_metric_direction() -> None:
    axes = [_axis("framing", "params.framing", ["moral"])]
    conditions = [_condition("base", {}), _condition("framing=moral", {"framing": "moral"})]
    values = {"base": {"score": _shifted(0.0)}, "framing=moral": {"score": _shifted(1.0)}}
    hypothesis = {"outcomes": {"score": "increase"}, "axes": {"framing": {"score": "increase"}}}
    audit = analyse(_plan(axes, hypothesis=hypothesis), conditions, _records(values))
    assert audit["directionConsistency"]["score"]["expected"] == "increase"


@pytest.mark.parametrize(
    ("hypothesis", "path"),
    [
        ({"outcomes": {"score": "up"}}, "hypothesis.outcomes.score"),
        ({"axes": {"framing": {"score": "sideways"}}}, "hypothesis.axes.framing.score"),
        ({"levels": {"framing=moral": {"score": 1}}}, "hypothesis.levels.framing=moral.score"),
        ({"axes": {"framing": "increase"}}, "hypothesis.axes.framing"),
    ],
)
def test_unknown_direction_is_an_input_error(hypothesis: dict[str, Any], path: str) -> None:
    axes = [_axis("framing", "params.framing", ["moral"])]
    conditions = [_condition("base", {}), _condition("framing=moral", {"framing": "moral"})]
    values = {"base": {"score": _shifted(0.0)}, "framing=moral": {"score": _shifted(1.0)}}
    with pytest.raises(InputError) as caught:
        analyse(_plan(axes, hypothesis=hypothesis), conditions, _records(values))
    assert caught.value.path == path
    assert caught.value.expected is not None and "increase" in caught.value.expected


def test_a_row_that_did_not_move_holds_or_reverses_no_direction() -> None:
    axes = [_axis("framing", "params.framing", ["moral", "risk", "calm"])]
    conditions = [_condition("base", {})] + [
        _condition(f"framing={lvl}", {"framing": lvl}) for lvl in ("moral", "risk", "calm")
    ]
    values = {
        "base": {"score": _shifted(0.0)},
        "framing=moral": {"score": _shifted(4.0)},  # moved, as expected
        "framing=risk": {"score": _shifted(-0.3)},  # a small drop the test cannot tell apart
        "framing=calm": {"score": _shifted(0.0)},  # the same values: a zero difference
    }
    plan = _plan(axes, hypothesis={"outcomes": {"score": "increase"}})
    audit = analyse(plan, conditions, _records(values))
    assert [_row(audit, f"framing={lvl}")["conclusion"] for lvl in ("moral", "risk", "calm")] == [
        "moved",
        "inconclusive",
        "inconclusive",
    ]
    assert _row(audit, "framing=calm")["directionFlip"] is False
    consistency = audit["directionConsistency"]["score"]
    assert (consistency["consistent"], consistency["total"]) == (1, 1)


# --------------------------------------------------------------------------- the form


def test_schema_version_three_and_every_contract_key() -> None:
    audit, _ = _identical_audit()
    assert audit["schemaVersion"] == 3
    assert audit["verdict"]["headline"]
    assert audit["family"]["primaryMetrics"] == ["score"]
    assert audit["grade"]["achieved"] in ("weak", "moderate", "strong", "insufficient")
    for rows in audit["tests"].values():
        for row in rows:
            assert set(row) == ROW_KEYS
    for entry in audit["sensitivity"]:
        assert set(entry) == {"axis", "code", "rank", "rankedBy", "isolated", "anyCell"}
        for measure in (entry["isolated"], entry["anyCell"]):
            assert measure is None or set(measure) == {
                "maxAbsD",
                "metric",
                "condition",
                "smallSpread",
            }


def _two_framings() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    axes = [_axis("framing", "params.framing", ["moral", "risk"])]
    conditions = [_condition("base", {})] + [
        _condition(f"framing={lvl}", {"framing": lvl}) for lvl in ("moral", "risk")
    ]
    return axes, conditions


def test_a_metric_with_a_margin_is_concluded_unchanged_when_it_stays_inside() -> None:
    axes, conditions = _two_framings()
    values = {
        "base": {"score": _shifted(0.0)},
        "framing=moral": {"score": _shifted(0.05)},  # well inside ±2
        "framing=risk": {"score": _shifted(6.0)},  # far outside: moved
    }
    hypothesis = {"outcomes": {"score": "unchanged"}, "margins": {"score": 2.0}}
    audit = analyse(_plan(axes, hypothesis=hypothesis), conditions, _records(values))
    moral, risk = _row(audit, "framing=moral"), _row(audit, "framing=risk")
    assert (moral["conclusion"], risk["conclusion"]) == ("unchanged", "moved")
    assert moral["margin"] == 2.0 and moral["equivalenceP"] < 0.05
    assert moral["expected"] is None  # `unchanged` is a claim, not a direction
    detail = audit["verdict"]["details"][0]
    assert (detail["tested"], detail["unchanged"], detail["moved"]) == (
        2,
        ["framing=moral"],
        ["framing=risk"],
    )
    assert detail["margin"] == 2.0
    # The same data with a margin too narrow for 8 runs stays inconclusive.
    narrow = {"outcomes": {"score": "unchanged"}, "margins": {"score": 0.01}}
    audit = analyse(_plan(axes, hypothesis=narrow), conditions, _records(values))
    assert _row(audit, "framing=moral")["conclusion"] == "inconclusive"


def test_without_a_margin_the_verdict_suggests_one_from_what_rows_could_detect() -> None:
    axes, conditions = _two_framings()
    values = {
        "base": {"score": _shifted(0.0)},
        "framing=moral": {"score": _shifted(0.05)},
        "framing=risk": {"score": _shifted(0.1)},
    }
    audit = analyse(_plan(axes), conditions, _records(values))
    detail = audit["verdict"]["details"][0]
    rows = audit["tests"]["score"]
    assert all(r["conclusion"] == "inconclusive" for r in rows)
    assert detail["margin"] is None
    assert detail["suggestedMargin"] == max(r["mdeInUnits"] for r in rows)
    assert "a margin of at least" in rows[0]["reason"]
