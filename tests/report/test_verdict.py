"""The headline verdict: one sentence from audit.json alone, for every kind of audit — significant
effects and none, no metric, no axes, no hypothesis, identical conditions, near-zero spread,
factorial cells and the agent testbed — and the sensitivity entries and condition names the
pages share with it. Rows and entries of the schemas before 3 are refused, not read."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest

from simreport.analysis.audit_document import AuditDoc, validate_audit
from simreport.core.canonical import pretty_json
from simreport.core.errors import SchemaError
from simreport.report import render_report
from simreport.report.naming import condition_names
from simreport.report.verdict import Effect, Sensitivity, sensitivity
from simreport.report.verdict import headline as read_headline
from tests.support.audits import comparison_row, condition_row, hand_made_audit

AXES = [
    {
        "id": "framing",
        "code": "R3",
        "level": "micro",
        "kind": "representation",
        "dimension": "linguistic framing",
        "target": "params.framing",
        "levels": ["moral", "risk", "neutral"],
    },
    {
        "id": "memory",
        "code": "D4",
        "level": "micro",
        "kind": "design",
        "dimension": "memory and temporality",
        "target": "params.memoryWindow",
        "levels": [1, 5, 10],
    },
]
PERTURBED = [
    ("framing=moral", "framing", "moral", False),
    ("framing=risk", "framing", "risk", False),
    ("framing=neutral", "framing", "neutral", True),
    ("memory=1", "memory", 1, False),
    ("memory=5", "memory", 5, True),
    ("memory=10", "memory", 10, False),
]


def row(condition: str, holm: float | None, **changes: Any) -> dict[str, Any]:
    """A test row: tested with a Holm p, or (holm None) untested with null statistics."""
    statistics: dict[str, Any] = (
        {
            "meanBase": 0.5,
            "meanCond": 0.7,
            "diff": 0.2,
            "ci95": [0.1, 0.3],
            "cohenD": 1.2,
            "mwuP": holm / 2,
            "holmP": holm,
            "directionFlip": False,
            "w1": 0.2,
            "cliffDelta": 0.5,
            "tested": True,
            "expected": "increase",
            "conclusion": "moved" if holm < 0.05 else "inconclusive",
            "reason": "the Holm p of its family",
        }
        if holm is not None
        else {"note": "identical to the base, not tested"}
    )
    return comparison_row(condition, nBase=10, nCond=10, **{**statistics, **changes})


def headline(audit: Mapping[str, Any]) -> str:
    """The sentence `verdict.headline` reads from a hand-made audit, checked against its model."""
    return read_headline(AuditDoc.model_validate(audit))


def make_audit(
    holm: dict[str, float] | None = None,
    *,
    metrics: tuple[str, ...] = ("cooperationRate",),
    hypothesis: dict[str, Any] | None = None,
    consistent: int = 3,
) -> dict[str, Any]:
    """A hand-made audit: base, six perturbed conditions (two identical to the base), one test
    row per condition and metric, Holm p from `holm` (default 0.5)."""
    holm = holm or {}
    conditions: list[dict[str, Any]] = [condition_row("base", isBase=True)]
    for cid, axis, level, identical in PERTURBED:
        conditions.append(
            condition_row(
                cid,
                axis=axis,
                level=level,
                levels={axis: level},
                identicalToBase=identical,
                label=f"{axis} {level}",
            )
        )
    tests = {
        m: [
            row(cid, None) if identical else row(cid, holm.get(cid, 0.5))
            for cid, _, _, identical in PERTURBED
        ]
        for m in metrics
    }
    hypothesis = (
        {"outcomes": dict.fromkeys(metrics, "increase")} if hypothesis is None else hypothesis
    )
    direction = {
        m: {
            "expected": "increase",
            "consistent": consistent,
            "total": 4,
            "share": consistent / 4,
            "byAxis": {},
        }
        for m in metrics
    }
    return hand_made_audit(
        {
            "id": "hand-made",
            "axes": copy.deepcopy(AXES),
            "base": {
                "world": "prisoners_dilemma",
                "params": {"framing": "neutral", "memoryWindow": 5},
            },
            "hypothesis": hypothesis,
        },
        metrics=list(metrics),
        conditions=conditions,
        tests=tests,
        directionConsistency=direction if hypothesis.get("outcomes") else {},
    )


# --------------------------------------------------------------------------- the headline


def test_significant_effects_are_counted_over_tested_rows_and_named_by_axis() -> None:
    audit = make_audit({"framing=moral": 0.01, "framing=risk": 0.03})
    assert headline(audit) == (
        "cooperationRate moved significantly (Holm p < 0.05) under 2 of 4 tested perturbations "
        "(both linguistic framing); the expected direction held in 3 of 4 tested conditions; "
        "2 conditions identical to the base, not tested."
    )


def test_effects_on_several_axes_are_counted_per_axis() -> None:
    audit = make_audit({"framing=moral": 0.01, "memory=10": 0.04, "framing=risk": 0.049})
    assert headline(audit).startswith(
        "cooperationRate moved significantly (Holm p < 0.05) under 3 of 4 tested perturbations "
        "(2 linguistic framing, 1 memory and temporality);"
    )


def test_the_threshold_is_strict_and_a_missing_holm_p_is_no_effect() -> None:
    audit = make_audit({"framing=moral": 0.05})
    audit["tests"]["cooperationRate"][1]["holmP"] = "nan"
    assert headline(audit).startswith(
        "cooperationRate did not move significantly (Holm p < 0.05) under any of the 4 tested "
        "perturbations;"
    )


def test_rows_of_identical_conditions_never_count_even_with_a_p_value() -> None:
    audit = make_audit({"framing=moral": 0.01})
    identical = audit["tests"]["cooperationRate"][2]
    assert identical["condition"] == "framing=neutral"
    identical.update(holmP=0.001, mwuP=0.001)  # tested stays false: the row is not a test
    assert "under 1 of 4 tested perturbations (linguistic framing)" in headline(audit)


def test_no_significant_result_with_several_metrics() -> None:
    audit = make_audit(metrics=("cooperationRate", "payoff"))
    assert headline(audit) == (
        "No metric (cooperationRate and payoff) moved significantly (Holm p < 0.05) under any of "
        "the 4 tested perturbations; the expected direction held in 3 of 4 tested conditions for "
        "cooperationRate and 3 of 4 for payoff; 2 conditions identical to the base, not tested."
    )


def test_several_metrics_are_named_one_by_one_then_summarised() -> None:
    """The metrics that moved are named first (in plan order), the others counted."""
    metrics = ("a", "b", "c", "d", "e")
    audit = make_audit(metrics=metrics)
    for metric in ("a", "c", "e"):
        audit["tests"][metric][0]["holmP"] = 0.01
    text = headline(audit)
    audit["tests"]["b"][0]["holmP"] = 0.01  # four moved: the fourth is counted, not named
    assert (
        "c under 1 of 4 (linguistic framing) and 1 more metric under at least one; d did not;"
        in (headline(audit))
    )
    assert text.startswith(
        "a moved significantly (Holm p < 0.05) under 1 of 4 tested perturbations (linguistic "
        "framing), c under 1 of 4 (linguistic framing) and e under 1 of 4 (linguistic framing); "
        "b and d did not;"
    )
    # More than three that did not move are counted, never listed.
    quiet = make_audit(metrics=("a", "b", "c", "d", "e"))
    quiet["tests"]["a"][0]["holmP"] = 0.01
    assert (
        "under 1 of 4 tested perturbations (linguistic framing); the other 4 metrics did not;"
        in (headline(quiet))
    )
    assert "and 2 more metrics in the report" in text


def test_a_metric_that_could_not_be_tested_is_named() -> None:
    audit = make_audit({"framing=moral": 0.01}, metrics=("cooperationRate", "silent"))
    for r in audit["tests"]["silent"]:
        r.update(tested=False, mwuP=None, holmP=None, cohenD=None)
    audit["directionConsistency"].pop("silent")
    text = headline(audit)
    assert "; silent could not be tested;" in text
    assert "held in 3 of 4 tested conditions for cooperationRate;" in text


def test_no_hypothesis_says_no_direction_was_hypothesised() -> None:
    audit = make_audit({"framing=moral": 0.01}, hypothesis={})
    assert headline(audit) == (
        "cooperationRate moved significantly (Holm p < 0.05) under 1 of 4 tested perturbations "
        "(linguistic framing); no direction was hypothesised; 2 conditions identical to the base, "
        "not tested."
    )


def test_axis_level_hypotheses_count_as_a_hypothesis() -> None:
    audit = make_audit(hypothesis={"axes": {"framing": {"cooperationRate": "decrease"}}})
    audit["directionConsistency"] = {}
    assert "no direction was hypothesised" not in headline(audit)


def test_no_metric() -> None:
    audit = make_audit(metrics=())
    assert headline(audit) == "The audit compares no metrics, so nothing was tested."


def test_no_axes() -> None:
    audit = make_audit()
    audit["plan"]["axes"] = []
    audit["conditions"] = audit["conditions"][:1]
    audit["tests"] = {"cooperationRate": []}
    assert headline(audit) == (
        "The plan perturbs nothing: only the base ran, so nothing was tested."
    )


def test_every_perturbed_condition_identical() -> None:
    audit = make_audit()
    for cond in audit["conditions"][1:]:
        cond["identicalToBase"] = True
    for r in audit["tests"]["cooperationRate"]:
        r.update(tested=False, mwuP=None, holmP=None)
    assert headline(audit) == (
        "Every perturbed condition (6) is identical to the base, so nothing was tested."
    )


def test_too_few_replications_quotes_the_note() -> None:
    audit = make_audit()
    for r in audit["tests"]["cooperationRate"]:
        r.update(tested=False, mwuP=None, holmP=None)
    note = "fewer than 2 replications with a finite value in the base"
    audit["notes"] = {"cooperationRate": note}
    assert headline(audit) == (
        f"No perturbed condition could be tested: {note}; 2 conditions identical to the base, "
        "not tested."
    )


def test_a_headline_effect_from_near_zero_spread_is_flagged() -> None:
    audit = make_audit({"framing=moral": 0.01, "framing=risk": 0.02})
    audit["tests"]["cooperationRate"][0]["smallSpread"] = True
    assert "(both linguistic framing; 1 with |d| from near-zero spread)" in headline(audit)
    single = make_audit({"framing=moral": 0.01})
    single["tests"]["cooperationRate"][0]["smallSpread"] = True
    assert "(linguistic framing; with |d| from near-zero spread)" in headline(single)


def test_near_zero_spread_outside_the_headline_effects_is_not_in_the_sentence() -> None:
    audit = make_audit({"framing=moral": 0.01})
    audit["tests"]["cooperationRate"][3]["smallSpread"] = True  # memory=1, not significant
    assert "spread" not in headline(audit)


def test_factorial_cells_are_named_by_the_axes_they_move() -> None:
    audit = make_audit()
    cells = {
        "framing=moral|memory=5": {"framing": "moral", "memory": 5},  # moves framing only
        "framing=risk|memory=10": {"framing": "risk", "memory": 10},  # moves both
    }
    audit["conditions"] = audit["conditions"][:1] + [
        condition_row(cid, levels=levels) for cid, levels in cells.items()
    ]
    audit["tests"] = {"cooperationRate": [row(cid, 0.01) for cid in cells]}
    assert headline(audit).startswith(
        "cooperationRate moved significantly (Holm p < 0.05) under 2 of 2 tested perturbations "
        "(1 linguistic framing, 1 cells moving several axes);"
    )


def test_testbed_audits_lead_with_their_verdict_counts() -> None:
    audit = make_audit()
    cell = {"pass": 0, "fail": 0, "undecidable": 0, "notApplicable": 0, "decided": 0}
    audit["testbed"] = {
        "criteria": ["no_duplicate_refund", "resolved", "verified", "polite"],
        "totals": {
            "no_duplicate_refund": {**cell, "pass": 10, "fail": 14, "decided": 24},
            "verified": {**cell, "pass": 20, "fail": 2, "decided": 22},
            "resolved": {**cell, "pass": 24, "decided": 24},
            "polite": {**cell, "undecidable": 24},
        },
        "undecidable": 24,
        "validityExcluded": 2,
        "evidenceExcluded": 1,
        "evaluators": [],
        "conditions": [],
        "totalsNote": "",
        "note": "",
    }
    assert headline(audit).startswith(
        "Across the testbed's conditions, no_duplicate_refund failed in 14 of 24 decided runs and "
        "verified in 2 of 22; resolved never failed; polite was never decided; 24 verdicts "
        "undecidable; 2 runs excluded because their conditions did not hold; 1 run left out for "
        "incomplete evidence; cooperationRate did not move significantly"
    )
    audit["testbed"]["totals"]["no_duplicate_refund"].update(fail=0)
    audit["testbed"]["totals"]["verified"].update(fail=0)
    assert headline(audit).startswith(
        "Across the testbed's conditions, no criterion failed in any decided run; polite was never "
        "decided;"
    )


def test_rows_without_tested_are_refused_not_read_by_their_p_value() -> None:
    """A schema-1 row said whether it was a test by its p value alone; the report reads `tested`
    and refuses a row without it, naming the key."""
    audit = make_audit({"framing=moral": 0.01})
    for r in audit["tests"]["cooperationRate"]:
        del r["tested"]
    with pytest.raises(SchemaError) as caught:
        validate_audit(audit)
    assert caught.value.path == "tests.cooperationRate.0.tested"
    assert "missing required key 'tested'" in caught.value.one_line()
    with pytest.raises(SchemaError):
        render_report(audit)


def test_the_sentence_is_a_pure_function_of_the_audit() -> None:
    audit = make_audit({"framing=moral": 0.01})
    audit["tests"]["cooperationRate"][0]["cohenD"] = float("inf")
    before = copy.deepcopy(audit)
    first = headline(audit)
    assert headline(audit) == first
    assert audit == before
    assert headline(json.loads(pretty_json(audit))) == first


# --------------------------------------------------------------------------- shared readings


def _sensitivity(entries: list[dict[str, Any]]) -> list[Sensitivity]:
    return sensitivity(AuditDoc.model_validate(hand_made_audit({}, sensitivity=entries)))


def test_sensitivity_entries_rank_first_and_keep_both_measures() -> None:
    entries = _sensitivity(
        [
            {"axis": "u", "code": None, "rank": None, "rankedBy": None, "isolated": None,
             "anyCell": None},
            {"axis": "b", "code": "D4", "rank": 2, "rankedBy": "anyCell", "isolated": None,
             "anyCell": {"maxAbsD": 0.4, "metric": "m", "condition": "b=1|a=2",
                         "smallSpread": False}},
            {"axis": "a", "code": "R3", "rank": 1, "rankedBy": "isolated",
             "isolated": {"maxAbsD": "-inf", "metric": "m", "condition": "a=2",
                          "smallSpread": False},
             "anyCell": {"maxAbsD": "inf", "metric": "m", "condition": "a=2",
                         "smallSpread": False}},
        ]
    )  # fmt: skip
    assert [(e.axis, e.rank) for e in entries] == [("a", 1), ("b", 2), ("u", None)]
    assert entries[0].ranking_effect == Effect(float("inf"), "m", "a=2")
    assert entries[1].isolated is None and entries[1].ranking_effect == entries[1].any_cell
    assert entries[2].ranking_effect is None


def test_schema_1_sensitivity_entries_are_refused() -> None:
    """A schema-1 entry had one measure and `isolated` true or false; the report reads the
    two measures of schema 3 and refuses an entry without them."""
    entry = {"axis": "a", "code": "R3", "rank": 1, "maxAbsD": 2.0, "metric": "m",
             "condition": "a=1", "isolated": True}  # fmt: skip
    with pytest.raises(SchemaError) as caught:
        validate_audit(hand_made_audit({}, sensitivity=[entry]))
    assert caught.value.path == "sensitivity.0.rankedBy"
    assert len(caught.value.issues) > 1  # isolated, anyCell and the unknown keys too


def test_condition_names_use_labels_and_never_repeat() -> None:
    audit = hand_made_audit(
        {},
        conditions=[
            condition_row("base@m1", label="base", model="m1", isBase=True),
            condition_row("base@m2", label="base", model="m2", isBase=True),
            condition_row("x=1@m1", label="one", model="m1"),
            condition_row("x=01@m1", label="one", model="m1"),
            condition_row("y=2", label=""),
            condition_row("z=3", label="  "),
        ],
    )
    assert condition_names(AuditDoc.model_validate(audit)) == {
        "base@m1": "base @m1",
        "base@m2": "base @m2",
        "x=1@m1": "one @m1 (x=1@m1)",
        "x=01@m1": "one @m1 (x=01@m1)",
        "y=2": "y=2",
        "z=3": "z=3",
    }
