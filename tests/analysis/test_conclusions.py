"""Conclusions per row, pairing, one family and the headline (SPEC §6a)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from simreport.analysis import conclusions
from simreport.analysis.conclusions import Replicate, pair
from simreport.analysis.pairwise_rows import IDENTICAL_NOTE


def reps(values: list[float], seed: int = 7, start: int = 0) -> list[Replicate]:
    return [Replicate(start + i, (seed, start + i), v) for i, v in enumerate(values)]


# --------------------------------------------------------------------------- pairing


def test_replications_sharing_their_seeds_are_paired_in_seed_order() -> None:
    base = reps([1.0, 2.0, 3.0])
    cond = list(reversed(reps([1.5, 2.5, 3.5])))
    pairing = pair(base, cond)
    assert pairing.paired
    assert pairing.base == (1.0, 2.0, 3.0)
    assert pairing.cond == (1.5, 2.5, 3.5)


def test_a_seed_axis_breaks_the_pairing() -> None:
    pairing = pair(reps([1.0, 2.0, 3.0], seed=7), reps([1.0, 2.0, 3.0], seed=8))
    assert not pairing.paired
    assert pairing.reason == conclusions.SEEDS_DIFFER_REASON


def test_a_lost_replication_breaks_the_pairing_and_says_which() -> None:
    base = reps([1.0, 2.0, 3.0])
    cond = [r for r in reps([1.0, 2.0, 3.0]) if r.replication != 1]
    pairing = pair(base, cond)
    assert not pairing.paired
    assert pairing.reason == conclusions.broken_pairing_reason([1], [])
    assert pairing.base == (1.0, 2.0, 3.0) and pairing.cond == (1.0, 3.0)


def test_a_non_finite_value_counts_as_a_lost_replication() -> None:
    pairing = pair(reps([1.0, 2.0, 3.0]), reps([1.0, math.nan, 3.0]))
    assert not pairing.paired
    assert pairing.reason == conclusions.broken_pairing_reason([1], [])


def test_runs_without_a_recorded_seed_are_unpaired() -> None:
    base = [Replicate(0, None, 1.0), Replicate(1, None, 2.0)]
    pairing = pair(base, reps([1.0, 2.0]))
    assert not pairing.paired
    assert pairing.reason == conclusions.UNSEEDED_REASON


# --------------------------------------------------------------------------- one family


def _row(metric: str, p: float | None, tested: bool = True) -> dict[str, Any]:
    return {"condition": f"c-{metric}-{p}", "tested": tested, "p": p}


def test_holm_runs_over_every_metric_in_one_family() -> None:
    tests = {"a": [_row("a", 0.01), _row("a", 0.04)], "b": [_row("b", 0.03)]}
    section = conclusions.apply_family(tests, None)
    assert section["primaryRows"] == 3
    assert tests["a"][0]["familyP"] == pytest.approx(0.03)
    assert tests["b"][0]["familyP"] == pytest.approx(0.06)
    assert tests["a"][1]["familyP"] == pytest.approx(0.06)


def test_declared_primary_metrics_form_the_family_and_the_rest_a_second_one() -> None:
    tests = {"a": [_row("a", 0.01), _row("a", 0.04)], "b": [_row("b", 0.03)]}
    section = conclusions.apply_family(tests, ["a"])
    assert section["primaryMetrics"] == ["a"] and section["secondaryMetrics"] == ["b"]
    assert tests["a"][1]["familyP"] == pytest.approx(0.04)
    assert tests["b"][0]["family"] == "secondary"
    assert tests["b"][0]["familyP"] == pytest.approx(0.03)


def test_untested_rows_are_not_counted_in_the_family() -> None:
    tests = {"a": [_row("a", 0.01), _row("a", None, tested=False)]}
    conclusions.apply_family(tests, None)
    assert tests["a"][0]["familyP"] == pytest.approx(0.01)
    assert tests["a"][1]["familyP"] is None


@pytest.mark.slow
@pytest.mark.parametrize("n_metrics", [1, 3, 5])
def test_family_wise_error_under_a_global_null_stays_below_alpha(n_metrics: int) -> None:
    """Simulated A/A audits: 12 conditions against one base, each metric independent normal
    noise, 5 paired replications... no: 10 unpaired replications per condition. The headline
    calls an audit moved when any row of any metric is moved; that must happen in at most 5 %
    of audits (plus the binomial tolerance of the simulation)."""
    from simreport.analysis import inference

    rng = np.random.default_rng(20261202)
    audits, conditions, n = 400, 12, 10
    false_alarms = 0
    for _ in range(audits):
        tests: dict[str, list[dict[str, Any]]] = {}
        for m in range(n_metrics):
            base = rng.normal(size=n)
            rows = []
            for c in range(conditions):
                cond = rng.normal(size=n)
                rows.append(
                    {
                        "condition": f"c{c}",
                        "tested": True,
                        "p": inference.rank_sum_test(base, cond).p,
                    }
                )
            tests[f"m{m}"] = rows
        conclusions.apply_family(tests, None)
        if any(r["familyP"] < conclusions.ALPHA for rows in tests.values() for r in rows):
            false_alarms += 1
    rate = false_alarms / audits
    tolerance = 2.5 * math.sqrt(0.05 * 0.95 / audits)
    assert rate <= 0.05 + tolerance


# --------------------------------------------------------------------------- conclusions


def _tested(**values: Any) -> dict[str, Any]:
    row = {
        "tested": True,
        "family": "primary",
        "familyP": 0.5,
        "equivalenceP": None,
        "margin": None,
        "test": "exact",
        "note": None,
    }
    row.update(values)
    return row


def test_a_family_significant_row_moved() -> None:
    row = _tested(familyP=0.01)
    conclusions.conclude(row, 1.2, None)
    assert row["conclusion"] == "moved"


def test_an_equivalent_row_is_unchanged_only_with_a_margin() -> None:
    row = _tested(equivalenceP=0.01, margin=0.1)
    conclusions.conclude(row, 1.2, None)
    assert row["conclusion"] == "unchanged"


def test_neither_is_inconclusive_and_states_the_detectable_effect() -> None:
    row = _tested()
    conclusions.conclude(row, 1.23, None)
    assert row["conclusion"] == "inconclusive"
    assert row["mde"] == 1.23
    assert "1.2" in row["reason"]
    assert "no equivalence margin" in row["reason"]


def test_a_row_that_is_no_test_is_untested_with_its_reason() -> None:
    row = {"tested": False, "note": IDENTICAL_NOTE}
    conclusions.conclude(row, None, None)
    assert row["conclusion"] == "untested"
    assert row["reason"] == IDENTICAL_NOTE


# --------------------------------------------------------------------------- achieved grade


def _conditions(runs_usable: list[tuple[str, int, int]]) -> list[dict[str, Any]]:
    return [
        {
            "id": cid,
            "label": cid,
            "isBase": cid == "base",
            "runs": runs,
            "excluded": runs - usable,
            "means": {"x": 1.0 if usable else None},
        }
        for cid, runs, usable in runs_usable
    ]


def _failed_runs(cid: str, n: int, kind: str = "ProviderError") -> list[dict[str, Any]]:
    return [
        {
            "condition": cid,
            "used": False,
            "failure": {"stage": "running", "type": kind},
            "excludedBecause": f"failed in running ({kind})",
        }
        for _ in range(n)
    ]


def _regrade(n: int) -> Any:
    from simreport.analysis.grade import evidence_grade

    return evidence_grade(
        replications=n, axis_levels=[("a", "micro", 2)], n_models=0, claim_type="mechanism"
    )


def test_no_usable_run_at_all_gives_insufficient_and_names_the_failure() -> None:
    rows = _conditions([("base", 10, 0), ("a=1", 10, 0)])
    lost = conclusions.lost_runs(rows, _failed_runs("base", 10) + _failed_runs("a=1", 10))
    achieved = conclusions.achieved_grade({}, rows, lost, _regrade)
    assert achieved["grade"] == conclusions.INSUFFICIENT
    assert achieved["usableMin"] == 0
    assert any("ProviderError" in r for r in achieved["reasons"])


def test_a_base_without_usable_runs_gives_insufficient() -> None:
    rows = _conditions([("base", 10, 0), ("a=1", 10, 10)])
    lost = conclusions.lost_runs(rows, _failed_runs("base", 10))
    assert conclusions.achieved_grade({}, rows, lost, _regrade)["grade"] == "insufficient"


def test_a_lost_condition_is_named_and_the_rest_is_graded() -> None:
    rows = _conditions([("base", 10, 10), ("a=1", 10, 0), ("a=2", 10, 10)])
    lost = conclusions.lost_runs(rows, _failed_runs("a=1", 10))
    achieved = conclusions.achieved_grade({}, rows, lost, _regrade)
    assert achieved["grade"] == "moderate"
    assert any("a=1 kept none" in r for r in achieved["reasons"])
    assert lost == [
        {
            "condition": "a=1",
            "label": "a=1",
            "runs": 10,
            "usable": 0,
            "lostTo": {"ProviderError": 10},
        }
    ]
    assert conclusions.lost_reason(lost[0]) in achieved["reasons"]


def test_the_achieved_grade_follows_the_thinnest_condition() -> None:
    rows = _conditions([("base", 10, 10), ("a=1", 10, 6)])
    lost = conclusions.lost_runs(rows, _failed_runs("a=1", 4))
    achieved = conclusions.achieved_grade({}, rows, lost, _regrade)
    assert _regrade(10).grade == "moderate"
    assert achieved["grade"] == "weak"
    assert achieved["usableMin"] == 6


# --------------------------------------------------------------------------- the headline


def _test_row(condition: str, conclusion: str, **values: Any) -> dict[str, Any]:
    row = {
        "condition": condition,
        "tested": conclusion != "untested",
        "conclusion": conclusion,
        "family": "primary",
        "diff": values.pop("diff", 0.0),
        "margin": values.pop("margin", None),
        "mde": values.pop("mde", None),
        "reason": "because",
    }
    row.update(values)
    return row


def test_the_headline_states_the_base_and_names_every_metric() -> None:
    rows = _conditions([("base", 5, 5), ("f=risk", 5, 5), ("m=1", 5, 5)])
    rows[0]["means"] = {"coop": 0.62, "payoff": 2.5, "mutual": 0.4, "d": 1.0, "e": 2.0}
    tests = {
        "coop": [
            _test_row("f=risk", "moved", diff=-0.21),
            _test_row("m=1", "inconclusive", mde=1.9, mdeInUnits=0.19),
        ],
        "payoff": [
            _test_row("f=risk", "unchanged", margin=0.1),
            _test_row("m=1", "unchanged", margin=0.1),
        ],
        "mutual": [_test_row("f=risk", "inconclusive"), _test_row("m=1", "inconclusive")],
        "d": [_test_row("f=risk", "inconclusive", mde=2.0)],
        "e": [_test_row("f=risk", "untested")],
    }
    moved = {"f=risk": ["framing"], "m=1": ["memory"]}
    found = conclusions.verdict(list(tests), rows, tests, {"e": "no usable run"}, moved, [])
    headline = found["headline"]
    sentences = [s for s in headline.split(". ") if s]
    assert len(sentences) <= 2
    assert "0.62" in headline
    for metric in tests:
        assert metric in headline
    assert "more metric" not in headline
    assert "moved under framing" in headline
    assert "−0.21" in headline
    assert "within ±0.1 under every one" in headline
    assert "only a change of 0.19 or more was detectable" in headline
    assert [d["metric"] for d in found["details"]] == list(tests)


def test_the_headline_names_conditions_lost_to_failures_with_their_class() -> None:
    rows = _conditions([("base", 10, 10), ("a=1", 10, 0)])
    lost = conclusions.lost_runs(rows, _failed_runs("a=1", 10))
    tests = {"x": [_test_row("a=1", "untested")]}
    headline = conclusions.verdict(["x"], rows, tests, {}, {"a=1": ["a"]}, lost)["headline"]
    assert "a=1 (10 of 10: ProviderError)" in headline


def test_a_base_without_usable_runs_says_so_and_why() -> None:
    rows = _conditions([("base", 10, 0), ("a=1", 10, 10)])
    lost = conclusions.lost_runs(rows, _failed_runs("base", 10, "TimeoutError"))
    headline = conclusions.verdict(["x"], rows, {"x": []}, {}, {}, lost)["headline"]
    assert headline.startswith("The base has no usable run")
    assert "TimeoutError" in headline


def test_a_factorial_headline_states_the_main_effects_whose_interval_excludes_zero() -> None:
    rows = _conditions([("base", 4, 4), ("a=1|b=1", 4, 4)])
    tests = {"x": [_test_row("a=1|b=1", "inconclusive")]}
    effects = {
        "x": [
            {"axis": "a", "level": 1, "reference": 0, "diff": -0.55, "ci95": [-0.6, -0.5]},
            {"axis": "b", "level": "r", "reference": "e", "diff": 0.01, "ci95": [-0.1, 0.1]},
        ]
    }
    moved = {"a=1|b=1": ["a", "b"]}
    headline = conclusions.verdict(["x"], rows, tests, {}, moved, [], None, effects)["headline"]
    assert "with main effect of a 1 (vs 0) −0.55" in headline
    assert "b r" not in headline
