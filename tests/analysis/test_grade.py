"""The evidence grade at each boundary of the rule, and the reasons it gives."""

from __future__ import annotations

import dataclasses

import pytest

from simreport.analysis.grade import GRADE_RULE, Grade, evidence_grade

Axes = list[tuple[str, str, int]]

THREE_LEVELS: Axes = [("D5", "meso", 3), ("R3", "micro", 4)]
ALL_TRAILS: Axes = [("R3", "micro", 3), ("D5", "meso", 3), ("D8", "macro", 3)]


def grade_of(
    replications: int, axes: Axes, n_models: int = 2, claim_type: str = "exploratory"
) -> Grade:
    return evidence_grade(
        replications=replications, axis_levels=axes, n_models=n_models, claim_type=claim_type
    )


@pytest.mark.parametrize(
    ("replications", "axes", "n_models", "claim_type", "expected", "mentions"),
    [
        # replications around the moderate boundary
        (9, THREE_LEVELS, 2, "exploratory", "weak", "9 replications"),
        (10, THREE_LEVELS, 2, "exploratory", "moderate", "strong needs at least 30"),
        # replications around the strong boundary
        (29, THREE_LEVELS, 2, "exploratory", "moderate", "29 replications"),
        (30, THREE_LEVELS, 2, "exploratory", "strong", "30 replications"),
        (1, THREE_LEVELS, 2, "exploratory", "weak", "1 replication per condition"),
        (0, THREE_LEVELS, 2, "exploratory", "weak", "0 replications"),
        # no axes: weak whatever else holds
        (100, [], 5, "exploratory", "weak", "no axes"),
        # a single-level axis: weak whatever else holds
        (50, [("D5", "meso", 1), ("R3", "micro", 3)], 3, "exploratory", "weak", "'D5'"),
        (50, [("D5", "meso", 0)], 3, "exploratory", "weak", "fewer than 2 levels"),
        # two-level axes cap the grade at moderate
        (30, [("D5", "meso", 2), ("R3", "micro", 3)], 2, "exploratory", "moderate", "'D5'"),
        (10, [("D5", "meso", 2)], 0, "exploratory", "moderate", "fewer than 3 levels"),
        # models: 0 and 1 are both fewer than 2
        (30, THREE_LEVELS, 1, "exploratory", "moderate", "Only 1 model"),
        (30, THREE_LEVELS, 0, "exploratory", "moderate", "No models"),
        (30, THREE_LEVELS, 2, "mechanism", "strong", "2 models"),
        # policy claims need micro, meso and macro
        (30, THREE_LEVELS, 2, "policy", "moderate", "macro"),
        (30, [("D8", "macro", 3)], 2, "policy", "moderate", "micro or meso"),
        (30, ALL_TRAILS, 2, "policy", "strong", "micro, meso and macro"),
        (30, ALL_TRAILS, 1, "policy", "moderate", "Only 1 model"),
        # the policy levels do not matter below moderate
        (9, ALL_TRAILS, 2, "policy", "weak", "9 replications"),
    ],
)
def test_grade_boundaries(
    replications: int,
    axes: Axes,
    n_models: int,
    claim_type: str,
    expected: str,
    mentions: str,
) -> None:
    result = grade_of(replications, axes, n_models, claim_type)
    assert result.grade == expected
    assert result.reasons
    assert all(r.strip() for r in result.reasons)
    assert any(mentions in r for r in result.reasons), result.reasons


def test_weak_lists_every_failing_condition() -> None:
    result = grade_of(3, [("D1", "micro", 1), ("R1", "micro", 1)], n_models=0)
    assert result.grade == "weak"
    text = " ".join(result.reasons)
    assert "3 replications per condition; moderate needs at least 10." in text
    assert "Axes 'D1' and 'R1' have a single level" in text
    # A weak grade names what moderate needs, not the strong-only conditions.
    assert "models" not in text


def test_moderate_names_what_strong_needs() -> None:
    result = grade_of(29, [("D5", "meso", 2)], n_models=1, claim_type="policy")
    assert result.grade == "moderate"
    assert result.reasons[0].startswith("Moderate:")
    needs = result.reasons[1:]
    assert "29 replications per condition; strong needs at least 30." in needs
    assert any("Axis 'D5' has fewer than 3 levels" in r for r in needs)
    assert any("Only 1 model;" in r for r in needs)
    assert any("micro or macro" in r for r in needs)
    assert len(needs) == 4


def test_strong_has_a_single_summary_reason() -> None:
    result = grade_of(40, ALL_TRAILS, n_models=3, claim_type="policy")
    assert result == Grade(
        "strong",
        (
            "Strong: 40 replications per condition, at least 3 levels on every axis and 3 models, "
            "with axes at the micro, meso and macro levels.",
        ),
    )


def test_axis_ids_keep_their_case() -> None:
    result = grade_of(5, [("D5", "meso", 1)])
    assert any(r.startswith("Axis 'D5' has a single level") for r in result.reasons)


def test_to_dict_and_immutability() -> None:
    result = grade_of(10, THREE_LEVELS)
    as_dict = result.to_dict()
    assert as_dict == {"grade": "moderate", "reasons": list(result.reasons)}
    assert isinstance(as_dict["reasons"], list)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.grade = "strong"  # type: ignore[misc]


def test_grade_rule_spells_out_the_thresholds() -> None:
    assert "\n" not in GRADE_RULE
    for phrase in ("weak", "moderate", "strong", "10", "30", "policy", "micro, meso and macro"):
        assert phrase in GRADE_RULE


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"replications": -1}, "replications"),
        ({"n_models": -1}, "n_models"),
        ({"claim_type": "causal"}, "claim_type"),
        ({"axis_levels": [("X", "mega", 3)]}, "level"),
        ({"axis_levels": [("X", "micro", -2)]}, "number of levels"),
    ],
)
def test_invalid_inputs_are_rejected(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "replications": 10,
        "axis_levels": THREE_LEVELS,
        "n_models": 2,
        "claim_type": "exploratory",
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        evidence_grade(**args)  # type: ignore[arg-type]
