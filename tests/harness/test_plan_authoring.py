"""Writing a plan without guessing: a custom axis's `level`, `kind` and `dimension` defaults (or
a refusal listing what to choose), and two level expectations that would cancel out refused by
`validate`, naming both."""

from __future__ import annotations

from pathlib import Path

import pytest

from simreport.core.errors import EXIT_INPUT, ConflictingExpectations, SchemaError
from simreport.core.files import parse_document
from simreport.harness import load_plan
from simreport.harness.axes import (
    KIND_MEANINGS,
    LEVEL_MEANINGS,
    custom_axis_doc,
    expand_axis_templates,
    target_defaults,
)
from simreport.harness.plan import plan_json_schema
from tests.harness.test_plan import plan_in
from tests.support.refusals import refused

# --------------------------------------------------------------------------- custom axes


@pytest.mark.parametrize(
    ("target", "level", "kind"),
    [
        ("prompt.personaFormat", "micro", "representation"),  # R1's own target
        ("prompt.rolePlacement", "meso", "representation"),  # R5: a template beats `prompt`
        ("prompt.somethingNew", "micro", "representation"),
        ("params.framing", "micro", "representation"),  # R3
        ("params.homophily", "meso", "design"),  # D7
        ("population.n", "macro", "design"),  # D8
        ("population.fields.mood", "micro", "design"),  # under D2's target
        ("llm.maxTokens", "micro", "design"),
        ("policy.name", "meso", "design"),
        ("executors.0.options.goal", "micro", "design"),
    ],
)
def test_a_target_implies_level_and_kind(target: str, level: str, kind: str) -> None:
    assert target_defaults(target) == (level, kind)
    doc = custom_axis_doc({"id": "my_axis", "target": target, "levels": [1]})
    assert (doc["level"], doc["kind"], doc["dimension"]) == (level, kind, "my axis")


@pytest.mark.parametrize("target", ["params.payoffs", "params", "population", "steps"])
def test_targets_that_imply_nothing(target: str) -> None:
    assert target_defaults(target) is None


def test_what_the_plan_gives_is_kept() -> None:
    entry = {
        "id": "a",
        "target": "prompt.personaFormat",
        "level": "macro",
        "kind": "design",
        "dimension": "x",
        "levels": [1],
    }
    assert custom_axis_doc(entry) == entry
    # Level and kind given: a target without defaults needs nothing more.
    given = {"id": "b", "target": "params.payoffs", "level": "micro", "kind": "design"}
    assert custom_axis_doc(given) == {**given, "dimension": "b"}


def test_a_missing_level_and_kind_list_what_to_choose() -> None:
    text = (
        "axes:\n  - template: R3\n    levels: [risk]\n  - id: payoffs\n    target: params.payoffs\n"
    )
    doc = parse_document(text, Path("audit.yaml"))
    with pytest.raises(SchemaError) as caught:
        expand_axis_templates(doc.data, document=doc)
    error = caught.value
    assert (error.file, error.line, error.path) == ("audit.yaml", 4, "axes.1.level")
    assert [i.kind for i in error.issues] == ["axis_level_kind_missing"]
    assert error.expected is not None
    for value, meaning in [*LEVEL_MEANINGS.items(), *KIND_MEANINGS.items()]:
        assert f"{value} ({meaning})" in error.expected


def test_a_missing_kind_alone_is_named_at_its_path() -> None:
    with pytest.raises(SchemaError) as caught:
        custom_axis_doc({"id": "p", "target": "params.payoffs", "level": "micro"}, 2)
    error = caught.value
    assert (error.path, [i.kind for i in error.issues]) == ("axes.2.kind", ["axis_kind_missing"])
    assert error.expected is not None and "micro (" not in error.expected
    assert all(value in error.expected for value in KIND_MEANINGS)


def test_a_custom_axis_without_them_loads_and_hashes_as_written_out(tmp_path: Path) -> None:
    short = (
        "baseScenario: scenario.yaml\naxes:\n"
        "  - {id: format, target: prompt.personaFormat, levels: [bullets]}\n"
    )
    full = (
        "baseScenario: scenario.yaml\naxes:\n  - {id: format, target: prompt.personaFormat, "
        "levels: [bullets], level: micro, kind: representation, dimension: format}\n"
    )
    loaded = load_plan(plan_in(tmp_path / "short", short))
    axis = loaded.plan.axes[0]
    assert (axis.level, axis.kind, axis.dimension, axis.code) == (
        "micro",
        "representation",
        "format",
        None,
    )
    assert loaded.hash == load_plan(plan_in(tmp_path / "full", full)).hash


def test_validate_refuses_an_axis_whose_target_implies_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_in(
        tmp_path,
        "baseScenario: scenario.yaml\naxes:\n  - id: framing_words\n    target: params.framing\n"
        "    levels: [risk]\n  - id: window\n    target: params.memoryWindow\n    levels: [2]\n"
        "  - id: other\n    target: steps\n    levels: [4]\n",
    )
    refusal = refused(capsys, ["validate", str(plan)])
    assert refusal.code == EXIT_INPUT and isinstance(refusal.error, SchemaError)
    assert (refusal.error.file, refusal.error.path) == (str(plan), "axes.2.level")


def test_the_editor_schema_lets_a_custom_axis_leave_them_out() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(plan_json_schema())
    ok = {"base": {}, "axes": [{"id": "f", "target": "prompt.personaFormat", "levels": ["x"]}]}
    assert list(validator.iter_errors(ok)) == []
    wrong = {"base": {}, "axes": [{"id": "f", "target": "x", "levels": ["x"], "level": "mega"}]}
    assert list(validator.iter_errors(wrong))


# --------------------------------------------------------------------------- expectations

FACTORIAL = """\
baseScenario: scenario.yaml
design: full_factorial
axes:
  - template: R3
    levels: [moralised, risk]
  - template: D5
    levels: [0.5]
hypothesis:
  outcomes: {cooperationRate: increase}
  levels:
    linguistic_framing=moralised: {cooperationRate: increase, averagePayoff: decrease}
    interaction_protocol=0.5: {cooperationRate: decrease}
"""


def _factorial(tmp_path: Path, extra: str = "", design: str = "full_factorial") -> Path:
    return plan_in(tmp_path, FACTORIAL.replace("full_factorial", design) + extra)


def test_two_level_entries_that_cancel_out_are_refused_naming_both(tmp_path: Path) -> None:
    plan = _factorial(tmp_path)
    with pytest.raises(ConflictingExpectations) as caught:
        load_plan(plan)
    error = caught.value
    assert (error.condition, error.metric) == (
        "linguistic_framing=moralised|interaction_protocol=0.5",
        "cooperationRate",
    )
    lines = plan.read_text().splitlines()
    assert error.entries == [
        {
            "path": "hypothesis.levels.linguistic_framing=moralised.cooperationRate",
            "line": 1 + next(i for i, x in enumerate(lines) if "framing=moralised:" in x),
            "direction": "increase",
        },
        {
            "path": "hypothesis.levels.interaction_protocol=0.5.cooperationRate",
            "line": 1 + next(i for i, x in enumerate(lines) if "protocol=0.5:" in x),
            "direction": "decrease",
        },
    ]
    assert (error.file, error.path, error.line) == (
        str(plan),
        error.entries[1]["path"],
        error.entries[1]["line"],
    )
    assert error.expected is not None and error.condition in error.expected


def test_validate_refuses_them_with_the_input_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = refused(capsys, ["validate", str(_factorial(tmp_path))])
    assert refusal.code == EXIT_INPUT and isinstance(refusal.error, ConflictingExpectations)
    assert [e["direction"] for e in refusal.error.entries] == ["increase", "decrease"]


def test_the_cells_own_entry_settles_it(tmp_path: Path) -> None:
    own = "    linguistic_framing=moralised|interaction_protocol=0.5: {cooperationRate: decrease}\n"
    loaded = load_plan(_factorial(tmp_path, own))
    assert loaded.plan.hypothesis is not None
    assert len(loaded.plan.hypothesis.levels) == 3


def test_entries_that_agree_or_never_meet_are_fine(tmp_path: Path) -> None:
    agreeing = FACTORIAL.replace(
        "interaction_protocol=0.5: {cooperationRate: decrease}",
        "interaction_protocol=0.5: {cooperationRate: increase}",
    )
    load_plan(plan_in(tmp_path / "agree", agreeing))
    # One axis at a time: no condition moves two axes, so the entries never meet.
    load_plan(_factorial(tmp_path / "oaat", design="one_at_a_time"))
    # A level at the base's own value moves nothing: the cell moves one axis only.
    at_base = FACTORIAL.replace("levels: [moralised, risk]", "levels: [neutral]").replace(
        "linguistic_framing=moralised:", "linguistic_framing=neutral:"
    )
    load_plan(plan_in(tmp_path / "base", at_base))
