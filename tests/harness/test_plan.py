"""Loading audit plans: base scenarios, overrides, located errors and the plan hash."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from simreport.core.errors import (
    DocumentError,
    InputError,
    InvalidOverride,
    PlanError,
    SchemaError,
    UnknownOverride,
)
from simreport.harness import LoadedPlan, load_plan, plan_id_from_folder
from tests.support.refusals import refused

SCENARIO = """\
world: prisoners_dilemma
steps: 3
seed: 11
population:
  n: 4
policy:
  name: bernoulli
  options: {p: 0.8}
params:
  framing: neutral
hypothesis:
  outcomes: {cooperationRate: increase}
"""

PLAN = """\
baseScenario: scenario.yaml
axes:
  - template: R3
    levels: [neutral, moralised]
  - template: D5
    levels: [0.5, 1.0]
replications: 3
metrics: [cooperationRate, averagePayoff]
"""


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def plan_in(tmp_path: Path, plan: str = PLAN, scenario: str = SCENARIO) -> Path:
    folder = tmp_path / "pd_audit"
    write(folder, "scenario.yaml", scenario)
    return write(folder, "audit.yaml", plan)


def load_error(path: Path, kind: type[InputError] = InputError) -> InputError:
    with pytest.raises(kind) as info:
        load_plan(path)
    return info.value


def _kinds(err: InputError) -> list[str | None]:
    """The kinds of a SchemaError's issues."""
    assert isinstance(err, SchemaError), err
    return [issue.kind for issue in err.issues]


# --------------------------------------------------------------------------- loading


def test_plan_with_a_base_scenario_file(tmp_path: Path) -> None:
    path = plan_in(tmp_path)
    loaded = load_plan(path)
    assert isinstance(loaded, LoadedPlan)
    assert loaded.plan_id == "pd_audit"
    assert loaded.plan_file == path
    assert loaded.base_file == tmp_path / "pd_audit" / "scenario.yaml"
    assert loaded.asset_root == (tmp_path / "pd_audit").resolve()
    assert loaded.plan.replications == 3
    assert [a.code for a in loaded.plan.axes] == ["R3", "D5"]
    assert loaded.hypothesis is not None
    assert loaded.hypothesis.outcomes == {"cooperationRate": "increase"}
    assert "cooperationRate" in loaded.metrics_available
    assert "choice" in loaded.distributions_available


def test_normalised_plan_has_defaults_the_full_base_and_no_concurrency(tmp_path: Path) -> None:
    loaded = load_plan(plan_in(tmp_path, PLAN + "concurrency: 4\n"))
    doc = loaded.normalised()
    assert "concurrency" not in doc
    assert doc["id"] == "pd_audit"
    assert doc["baseScenario"] == "scenario.yaml"
    assert doc["design"] == "one_at_a_time"
    assert doc["models"] == []
    assert doc["claimType"] == "exploratory"
    assert doc["includeIncomplete"] is False
    # The base is the validated scenario, world parameters filled with their defaults.
    assert doc["base"]["params"]["framing"] == "neutral"
    assert "memoryWindow" in doc["base"]["params"]
    assert doc["hypothesis"]["outcomes"] == {"cooperationRate": "increase"}
    assert loaded.plan.concurrency == 4
    assert len(loaded.hash) == 64


def test_inline_base_resolves_against_the_plan_folder(tmp_path: Path) -> None:
    inline = "base:\n" + textwrap.indent(SCENARIO, "  ") + "axes: []\n"
    path = write(tmp_path / "inline", "audit.yaml", inline)
    loaded = load_plan(path)
    assert loaded.base_file is None
    assert loaded.asset_root == (tmp_path / "inline").resolve()
    assert loaded.normalised()["baseScenario"] is None
    assert loaded.normalised()["base"]["params"]["memoryWindow"] == 5


def test_inline_base_errors_are_located_under_base(tmp_path: Path) -> None:
    bad = SCENARIO.replace("framing: neutral", "framing: shouting")
    path = write(tmp_path / "p", "audit.yaml", "base:\n" + textwrap.indent(bad, "  "))
    err = load_error(path, SchemaError)
    assert err.file == str(path)
    assert err.path == "base.params.framing"
    assert err.line == 11


def test_plan_id_from_the_plan_and_from_the_folder(tmp_path: Path) -> None:
    assert load_plan(plan_in(tmp_path, "id: my.plan-1\n" + PLAN)).plan_id == "my.plan-1"
    assert plan_id_from_folder("my audit (v2)") == "my-audit--v2-"
    assert plan_id_from_folder("__x") == "x"
    assert plan_id_from_folder("???") == "plan"


def test_effective_hypothesis_prefers_the_plan(tmp_path: Path) -> None:
    plan = PLAN + "hypothesis:\n  outcomes: {averagePayoff: decrease}\n"
    loaded = load_plan(plan_in(tmp_path, plan))
    assert loaded.hypothesis is not None
    assert loaded.hypothesis.outcomes == {"averagePayoff": "decrease"}
    assert loaded.normalised()["hypothesis"]["outcomes"] == {"averagePayoff": "decrease"}


def test_caller_overrides_replications_concurrency_and_models(tmp_path: Path) -> None:
    loaded = load_plan(plan_in(tmp_path), replications=7, concurrency=3, models=["a", "b"])
    assert (loaded.plan.replications, loaded.plan.concurrency) == (7, 3)
    assert loaded.plan.models == ["a", "b"]
    with pytest.raises(InputError) as info:
        load_plan(plan_in(tmp_path), replications=0)
    # Refused as the caller's override: the plan file, whose value is valid, is not blamed.
    assert (type(info.value), info.value.file, info.value.path) == (
        InputError,
        None,
        "replications",
    )


# --------------------------------------------------------------------------- located errors


@pytest.mark.parametrize(
    "plan",
    [
        "axes: []\n",
        "baseScenario: scenario.yaml\nbase: {world: prisoners_dilemma}\n",
    ],
    ids=["neither", "both"],
)
def test_exactly_one_of_base_scenario_and_base(tmp_path: Path, plan: str) -> None:
    path = plan_in(tmp_path, plan)
    err = load_error(path, SchemaError)
    assert isinstance(err, SchemaError) and (err.file, err.path) == (str(path), None)
    assert [issue.kind for issue in err.issues] == [
        "base_choice" if "base:" in plan else "base_missing"
    ]


def test_missing_base_scenario_file_names_the_plan(tmp_path: Path) -> None:
    path = plan_in(tmp_path, "metrics: []\nbaseScenario: nowhere.yaml\n")
    err = load_error(path)
    assert err.file == str(path)
    assert err.path == "baseScenario"
    assert err.line == 2
    assert "nowhere.yaml" in err.message


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    path = plan_in(tmp_path, "baseScenario: scenario.yaml\naxes: [\n  - id: x\n")
    err = load_error(path, DocumentError)
    assert isinstance(err, DocumentError) and err.kind == "yaml_syntax"
    assert err.file == str(path)
    assert err.line is not None and err.line >= 2


def test_unknown_keys_are_rejected_where_they_are(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN + "colour: blue\n")
    err = load_error(path, SchemaError)
    assert (err.path, err.line, _kinds(err)) == ("colour", 9, ["extra_forbidden"])
    path = plan_in(tmp_path, PLAN.replace("levels: [0.5, 1.0]", "levels: [0.5]\n    weight: 2"))
    err = load_error(path, SchemaError)
    assert (err.path, err.line, _kinds(err)) == ("axes.1.weight", 7, ["extra_forbidden"])


@pytest.mark.parametrize("value", ["0", "-2"])
def test_replications_must_be_positive(tmp_path: Path, value: str) -> None:
    path = plan_in(tmp_path, PLAN.replace("replications: 3", f"replications: {value}"))
    err = load_error(path, SchemaError)
    assert (err.file, err.path, err.line) == (str(path), "replications", 7)
    assert _kinds(err) == ["greater_than"]


def test_axis_without_levels(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("levels: [0.5, 1.0]", "levels: []"))
    err = load_error(path, SchemaError)
    assert (err.file, err.path, err.line) == (str(path), "axes.1.levels", 6)
    assert _kinds(err) == ["too_short"]


def test_unknown_target_is_an_unknown_override(tmp_path: Path) -> None:
    plan = PLAN.replace("template: D5", "template: D5\n    target: policy.options.q")
    path = plan_in(tmp_path, plan)
    err = load_error(path, UnknownOverride)
    assert (err.file, err.path, err.line) == (str(path), "axes.1.target", 6)
    assert "policy.options.q" in err.message
    assert err.expected is not None and "p" in err.expected


def test_template_default_target_missing_from_the_scenario(tmp_path: Path) -> None:
    # prisoners_dilemma has no homophily parameter: the template's default target is unknown.
    path = plan_in(
        tmp_path,
        PLAN.replace("replications: 3", "  - template: D7\n    levels: [0.1]\nreplications: 3"),
    )
    err = load_error(path, UnknownOverride)
    # A template entry without `target` has no target line: the entry's line stands in.
    assert (err.path, err.line) == ("axes.2.target", 7)
    assert "params.homophily" in err.message


def test_rejected_level_is_an_invalid_override_with_issues(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("[0.5, 1.0]", "[0.5, 1.5]"))
    err = load_error(path, InvalidOverride)
    assert isinstance(err, InvalidOverride)
    assert (err.file, err.path, err.line) == (str(path), "axes.1.levels.1", 6)
    assert [(issue.path, issue.kind) for issue in err.issues] == [
        ("policy.options.p", "less_than_equal")
    ]


def test_level_rejected_by_the_world_check(tmp_path: Path) -> None:
    plan = PLAN.replace("replications: 3", "  - {template: D8, levels: [2, 3]}\nreplications: 3")
    err = load_error(plan_in(tmp_path, plan), InvalidOverride)
    assert isinstance(err, InvalidOverride) and err.path == "axes.2.levels.1"
    assert [(issue.path, issue.kind) for issue in err.issues] == [("population.n", "world_check")]


def test_unknown_metric_lists_the_available_ones(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("averagePayoff]", "averagePayof]"))
    err = load_error(path, PlanError)
    assert (err.file, err.path, err.line) == (str(path), "metrics.1", 8)
    assert "'averagePayof'" in err.message
    assert err.expected is not None
    assert "averagePayoff" in err.expected and "cooperationRate" in err.expected


def test_hypothesis_metric_must_be_reported(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN + "hypothesis:\n  outcomes:\n    trust: increase\n")
    err = load_error(path, PlanError)
    assert (err.file, err.path, err.line) == (str(path), "hypothesis.outcomes.trust", 11)
    # ... also when it comes from the base scenario, located in the scenario file.
    scenario = SCENARIO.replace("cooperationRate: increase", "trust: increase")
    err = load_error(plan_in(tmp_path, PLAN, scenario), PlanError)
    assert err.file == str(tmp_path / "pd_audit" / "scenario.yaml")
    assert err.path == "hypothesis.outcomes.trust"


def test_an_unchanged_outcome_with_its_margin_is_a_robustness_claim(tmp_path: Path) -> None:
    plan = PLAN + (
        "primaryMetrics: [averagePayoff]\n"
        "hypothesis:\n  outcomes:\n    averagePayoff: unchanged\n"
        "  margins:\n    averagePayoff: 0.25\n"
    )
    loaded = load_plan(plan_in(tmp_path, plan))
    assert loaded.hypothesis is not None
    assert loaded.hypothesis.outcomes == {"averagePayoff": "unchanged"}
    assert loaded.hypothesis.margins == {"averagePayoff": 0.25}
    assert loaded.plan.primary_metrics == ["averagePayoff"]


def test_a_plan_without_margins_or_primary_metrics_keeps_its_hash(tmp_path: Path) -> None:
    doc = load_plan(plan_in(tmp_path)).normalised()
    assert "primaryMetrics" not in doc
    assert "margins" not in (doc.get("hypothesis") or {})


def test_an_unchanged_outcome_needs_its_margin(tmp_path: Path) -> None:
    plan = PLAN + "hypothesis:\n  outcomes:\n    averagePayoff: unchanged\n"
    err = load_error(plan_in(tmp_path, plan), SchemaError)
    assert err.path == "hypothesis" and _kinds(err) == ["margin_missing"]
    assert "averagePayoff" in err.message


@pytest.mark.parametrize("margin", ["0", "-1", ".nan", "true", "wide"])
def test_a_margin_is_a_positive_number(tmp_path: Path, margin: str) -> None:
    plan = PLAN + f"hypothesis:\n  margins:\n    averagePayoff: {margin}\n"
    err = load_error(plan_in(tmp_path, plan))
    assert err.path is not None and err.path.startswith("hypothesis.margins")


def test_a_margin_names_a_reported_metric(tmp_path: Path) -> None:
    plan = PLAN + "hypothesis:\n  margins:\n    trust: 0.1\n"
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "hypothesis.margins.trust"


def test_primary_metrics_are_metrics_the_plan_compares(tmp_path: Path) -> None:
    err = load_error(plan_in(tmp_path, PLAN + "primaryMetrics: [mutualCooperationRate]\n"))
    assert (err.path, err.line) == ("primaryMetrics.0", 9)
    assert err.expected is not None and "averagePayoff" in err.expected


def test_target_distribution_must_name_a_reported_distribution(tmp_path: Path) -> None:
    plan = PLAN + "hypothesis:\n  targetDistribution:\n    moves: {cooperate: 1}\n"
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "hypothesis.targetDistribution.moves"
    assert err.expected == "one of choice"


@pytest.mark.parametrize("target", ["llm.temperature", "seedPath", "replicationId", "llm"])
def test_axes_may_not_target_what_the_harness_sets(tmp_path: Path, target: str) -> None:
    plan = PLAN.replace("template: D5", f"template: D5\n    target: {target}")
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "axes.1.target" and f"{target!r}" in err.message


def test_model_axis_conflicts_with_plan_models(tmp_path: Path) -> None:
    plan = PLAN.replace("replications: 3", "  - {template: D1, levels: [a, b]}\nreplications: 3")
    assert len(load_plan(plan_in(tmp_path, plan)).plan.axes) == 3
    err = load_error(plan_in(tmp_path, plan + "models: [x]\n"), PlanError)
    assert err.path == "axes.2.target" and "models" in err.message


def test_factorial_axes_may_not_overlap(tmp_path: Path) -> None:
    plan = textwrap.dedent(
        """\
        baseScenario: scenario.yaml
        design: full_factorial
        axes:
          - {template: R3, levels: [neutral]}
          - {template: D5, id: framing_again, target: params.framing, levels: [risk]}
        """
    )
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "axes.1.target"
    assert "'framing_again'" in err.message and "'params.framing'" in err.message
    # one at a time, each axis is applied alone: no conflict.
    assert load_plan(plan_in(tmp_path, plan.replace("full_factorial", "one_at_a_time")))


# --------------------------------------------------------------------------- the plan hash


def test_hash_ignores_formatting_and_concurrency(tmp_path: Path) -> None:
    first = load_plan(plan_in(tmp_path / "a")).hash
    reformatted = json.dumps(
        {
            "metrics": ["cooperationRate", "averagePayoff"],
            "replications": 3,
            "concurrency": 8,
            "axes": [
                {"levels": ["neutral", "moralised"], "template": "linguistic_framing"},
                {"template": "D5", "levels": [0.5, 1.0]},
            ],
            "baseScenario": "scenario.yaml",
        }
    )
    folder = tmp_path / "b" / "pd_audit"
    write(folder, "scenario.yaml", "# a comment\n" + SCENARIO.replace("{p: 0.8}", "\n    p: 0.8"))
    assert load_plan(write(folder, "audit.json", reformatted)).hash == first
    assert load_plan(plan_in(tmp_path / "a"), concurrency=5).hash == first


@pytest.mark.parametrize(
    ("plan", "scenario"),
    [
        (PLAN.replace("replications: 3", "replications: 4"), SCENARIO),
        (PLAN.replace("moralised]", "risk]"), SCENARIO),
        (PLAN + "models: [m]\n", SCENARIO),
        (PLAN + "claimType: policy\n", SCENARIO),
        (PLAN, SCENARIO.replace("seed: 11", "seed: 12")),
        (PLAN, SCENARIO.replace("steps: 3", "steps: 4")),
    ],
    ids=["replications", "levels", "models", "claim", "base-seed", "base-steps"],
)
def test_hash_changes_with_content(tmp_path: Path, plan: str, scenario: str) -> None:
    before = load_plan(plan_in(tmp_path / "a")).hash
    assert load_plan(plan_in(tmp_path / "b", plan, scenario)).hash != before


def test_hash_changes_with_the_replications_override(tmp_path: Path) -> None:
    path = plan_in(tmp_path)
    assert load_plan(path, replications=4).hash != load_plan(path).hash


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["prisoners_dilemma", "echo_chamber"])
def test_example_plans_load(name: str) -> None:
    loaded = load_plan(EXAMPLES / name / "audit.yaml")
    assert loaded.plan_id == name
    assert loaded.plan.metrics
    assert all(axis.code for axis in loaded.plan.axes)


# --------------------------------------------------------------------------- strict input


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("replications", "true"),
        ("replications", '"3"'),
        ("replications", "2.0"),
        ("concurrency", '"2"'),
        ("concurrency", "true"),
        ("includeIncomplete", '"yes"'),
        ("includeIncomplete", "1"),
    ],
)
def test_numbers_and_switches_are_not_coerced(tmp_path: Path, key: str, value: str) -> None:
    plan = PLAN.replace("replications: 3\n", "") + f"{key}: {value}\n"
    path = plan_in(tmp_path, plan)
    err = load_error(path, SchemaError)
    assert (err.file, err.path) == (str(path), key)
    assert err.expected in {"an integer", "true or false"}


def test_repeated_metrics_are_refused(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("averagePayoff]", "averagePayoff, cooperationRate]"))
    err = load_error(path, SchemaError)
    assert (err.file, err.path, err.line) == (str(path), "metrics", 8)
    assert _kinds(err) == ["repeated"] and "cooperationRate" in err.message


@pytest.mark.parametrize(
    ("axis", "level"),
    [
        ("{template: D4, levels: [3, true]}", "true"),  # params.memoryWindow is an integer
        ("{template: D4, levels: [3, '4']}", "'4'"),  # ... and not text
        ("{template: D8, levels: [4, true]}", "true"),  # population.n
        ("{template: D5, id: p2, levels: [0.5, true]}", "true"),  # policy.options.p: a number
    ],
)
def test_levels_of_the_wrong_kind_are_refused(tmp_path: Path, axis: str, level: str) -> None:
    plan = PLAN.replace("replications: 3", f"  - {axis}\nreplications: 3")
    path = plan_in(tmp_path, plan)
    err = load_error(path, InvalidOverride)
    assert (err.file, err.path, err.line) == (str(path), "axes.2.levels.1", 7)
    assert [issue.kind for issue in err.issues] == ["level_kind"]
    assert err.expected is not None


def test_a_whole_number_level_for_a_number_target_is_accepted(tmp_path: Path) -> None:
    loaded = load_plan(plan_in(tmp_path, PLAN.replace("[0.5, 1.0]", "[0.5, 1]")))
    assert loaded.plan.axes[1].levels == [0.5, 1]


@pytest.mark.parametrize("level", ["'a|b'", "'x=y'", "{note: 'dose=2'}"])
def test_levels_that_would_read_as_other_conditions_are_refused(tmp_path: Path, level: str) -> None:
    plan = PLAN.replace("[neutral, moralised]", f"[neutral, {level}]")
    path = plan_in(tmp_path, plan)
    err = load_error(path, PlanError)
    assert (err.file, err.path, err.line) == (str(path), "axes.0.levels.1", 4)
    assert err.expected is not None and "'|'" in err.expected and "'='" in err.expected


def test_an_at_sign_in_a_level_is_refused_only_with_models(tmp_path: Path) -> None:
    plan = PLAN.replace("[neutral, moralised]", "[neutral, 'v@2']")
    # Without models no condition id ends in @<model>: the refund desk's asset labels
    # (`refund-prompt@2.0.0`) are levels of this kind.
    with pytest.raises(InvalidOverride):  # the world refuses the framing, not the id
        load_plan(plan_in(tmp_path / "a", plan))
    err = load_error(plan_in(tmp_path / "b", plan + "models: [m1, m2]\n"), PlanError)
    assert err.path == "axes.0.levels.1"
    assert "'@'" in err.message


# --------------------------------------------------------------------------- hypothesis per axis


HYPOTHESIS = """\
hypothesis:
  outcomes: {cooperationRate: increase}
  axes:
    linguistic_framing: {cooperationRate: decrease, averagePayoff: increase}
  levels:
    interaction_protocol=0.5: {cooperationRate: decrease}
"""


def test_hypothesis_per_axis_and_per_condition(tmp_path: Path) -> None:
    loaded = load_plan(plan_in(tmp_path, PLAN + HYPOTHESIS))
    hypothesis = loaded.normalised()["hypothesis"]
    assert hypothesis["outcomes"] == {"cooperationRate": "increase"}
    assert hypothesis["axes"] == {
        "linguistic_framing": {"cooperationRate": "decrease", "averagePayoff": "increase"}
    }
    assert hypothesis["levels"] == {"interaction_protocol=0.5": {"cooperationRate": "decrease"}}


def test_a_scenario_hypothesis_gains_empty_axes_and_levels(tmp_path: Path) -> None:
    hypothesis = load_plan(plan_in(tmp_path)).normalised()["hypothesis"]
    assert hypothesis["outcomes"] == {"cooperationRate": "increase"}
    assert (hypothesis["axes"], hypothesis["levels"]) == ({}, {})


def test_hypothesis_axes_must_be_axes_of_the_plan(tmp_path: Path) -> None:
    plan = PLAN + HYPOTHESIS.replace("    linguistic_framing:", "    framing:")
    path = plan_in(tmp_path, plan)
    err = load_error(path, PlanError)
    assert (err.file, err.path, err.line) == (str(path), "hypothesis.axes.framing", 12)
    assert err.expected == "one of linguistic_framing, interaction_protocol"


def test_hypothesis_axes_metrics_must_be_reported(tmp_path: Path) -> None:
    plan = PLAN + HYPOTHESIS.replace("averagePayoff: increase", "trust: increase")
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "hypothesis.axes.linguistic_framing.trust"
    assert err.expected is not None and "averagePayoff" in err.expected


def test_hypothesis_directions_are_increase_or_decrease(tmp_path: Path) -> None:
    plan = PLAN + HYPOTHESIS.replace("averagePayoff: increase", "averagePayoff: up")
    err = load_error(plan_in(tmp_path, plan), SchemaError)
    assert err.path == "hypothesis.axes.linguistic_framing.averagePayoff"
    assert err.expected == "'increase' or 'decrease'"


def test_hypothesis_levels_must_be_condition_ids(tmp_path: Path) -> None:
    plan = PLAN + HYPOTHESIS.replace("interaction_protocol=0.5", "interaction_protocol=0.25")
    path = plan_in(tmp_path, plan)
    err = load_error(path, PlanError)
    assert (err.file, err.path, err.line) == (
        str(path),
        "hypothesis.levels.interaction_protocol=0.25",
        14,
    )
    assert "'interaction_protocol=0.25'" in err.message
    assert err.expected is not None
    assert "interaction_protocol=0.5, interaction_protocol=1.0" in err.expected
    assert "linguistic_framing=neutral" in err.expected
    assert "@<model>" not in err.expected
    # The base is compared against nothing: no expectation can apply to it.
    plan = PLAN + HYPOTHESIS.replace("interaction_protocol=0.5", "base")
    assert load_error(plan_in(tmp_path, plan)).path == "hypothesis.levels.base"


def test_hypothesis_levels_with_models_may_name_the_model(tmp_path: Path) -> None:
    plan = PLAN + "models: [m1, m2]\n" + HYPOTHESIS
    # Without the model, an expectation applies to the condition under every model.
    assert load_plan(plan_in(tmp_path, plan))
    assert load_plan(plan_in(tmp_path, plan.replace("=0.5:", "=0.5@m2:")))
    err = load_error(plan_in(tmp_path, plan.replace("=0.5:", "=0.5@m3:")), PlanError)
    assert err.path == "hypothesis.levels.interaction_protocol=0.5@m3"
    assert err.expected is not None and "@<model>" in err.expected
    err = load_error(plan_in(tmp_path, plan.replace("=0.5:", "=0.5@m1|x=1:")), PlanError)
    assert err.path == "hypothesis.levels.interaction_protocol=0.5@m1|x=1"


def test_hypothesis_levels_in_a_factorial_design(tmp_path: Path) -> None:
    plan = PLAN + "design: full_factorial\n" + HYPOTHESIS
    # A level's own id applies to every cell with that level; a cell's id to that cell.
    assert load_plan(plan_in(tmp_path, plan))
    cell = "linguistic_framing=moralised|interaction_protocol=1.0"
    assert load_plan(plan_in(tmp_path, plan.replace("interaction_protocol=0.5", cell)))
    swapped = "interaction_protocol=1.0|linguistic_framing=moralised"
    err = load_error(plan_in(tmp_path, plan.replace("interaction_protocol=0.5", swapped)))
    assert err.path == f"hypothesis.levels.{swapped}"
    assert err.expected is not None and cell in err.expected


def test_hypothesis_level_metrics_must_be_reported(tmp_path: Path) -> None:
    plan = PLAN + HYPOTHESIS.replace("{cooperationRate: decrease}\n", "{trust: decrease}\n")
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "hypothesis.levels.interaction_protocol=0.5.trust"


def test_a_long_list_of_condition_ids_is_cut_in_the_error(tmp_path: Path) -> None:
    levels = ", ".join(str(n) for n in range(2, 60, 2))
    plan = (
        "baseScenario: scenario.yaml\naxes:\n  - {template: D8, levels: ["
        + levels
        + "]}\nhypothesis:\n  levels:\n    nope: {cooperationRate: increase}\n"
    )
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.expected is not None
    assert "population_scale=2," in err.expected and "more)" in err.expected
    assert len(err.expected) < 600


# --------------------------------------------------------------------------- validate and schema


def test_validate_says_a_plan_without_a_base_is_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simreport.api import validate

    path = write(tmp_path / "p", "audit.yaml", "axes:\n  - {template: R3, levels: [risk]}\n")
    with pytest.raises(SchemaError) as info:
        validate(path)
    assert _kinds(info.value) == ["base_missing"]
    refusal = refused(capsys, ["validate", str(path)])
    assert refusal.code == 2 and refusal.error.file == str(path)
    assert _kinds(refusal.error) == ["base_missing"] and "world" not in refusal.line


@pytest.mark.parametrize("key", ["metrics: [x]", "replications: 2", "design: full_factorial"])
def test_plan_keys_alone_make_a_plan(tmp_path: Path, key: str) -> None:
    from simreport.api import validate

    path = write(tmp_path / "p", "audit.yaml", key + "\n")
    with pytest.raises(SchemaError) as info:
        validate(path)
    assert _kinds(info.value) == ["base_missing"]


def test_a_scenario_is_still_a_scenario(tmp_path: Path) -> None:
    from simreport.api import validate

    path = write(tmp_path / "s", "scenario.yaml", SCENARIO)
    assert validate(path).kind == "scenario"
    with pytest.raises(SchemaError) as info:
        validate(write(tmp_path / "s", "bad.yaml", "steps: 3\n"))
    assert _kinds(info.value) == ["engine_choice"]


def plan_schema(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    from simreport.cli import main

    assert main(["schema", "plan"]) == 0
    schema: dict[str, object] = json.loads(capsys.readouterr().out)
    return schema


def schema_errors(schema: dict[str, object], doc: object) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


@pytest.mark.parametrize("name", ["prisoners_dilemma", "echo_chamber", "refund_desk"])
def test_every_example_plan_passes_the_plan_json_schema(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    schema = plan_schema(capsys)
    doc = yaml.safe_load((EXAMPLES / name / "audit.yaml").read_text(encoding="utf-8"))
    assert schema_errors(schema, doc) == []


def test_plan_json_schema_checks_template_entries_and_inline_bases(
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema = plan_schema(capsys)
    inline = {
        "base": {
            "world": "prisoners_dilemma",
            "population": {
                "fields": {
                    "mood": ["calm", "tense"],
                    "region": "north",
                    "job": {"values": ["a", "b"], "weights": [1, 2]},
                }
            },
            "params": {"framing": "neutral"},
        },
        "axes": [
            {"template": "R3", "levels": ["risk"], "labels": {"risk": "framed as a risk"}},
            {"template": "memory_temporality", "id": "mw", "levels": [1, 2]},
        ],
        "hypothesis": {"axes": {"mw": {"cooperationRate": "decrease"}}},
    }
    assert schema_errors(schema, inline) == []
    wrong = [
        {"base": {}, "axes": [{"template": "R9", "levels": [1]}]},
        {"base": {}, "axes": [{"template": "R3"}]},
        {"base": {}, "axes": [{"template": "R3", "levels": [1], "dimension": "x"}]},
        {"base": {"world": "prisoners_dilemma", "params": {"framing": "shouting"}}},
        {"base": {}, "replications": "3"},
        {"base": {}, "replications": True},
        {"base": {}, "metrics": ["a", "a"]},
        {"base": {}, "hypothesis": {"levels": {"a=1": {"m": "up"}}}},
    ]
    for doc in wrong:
        assert schema_errors(schema, doc), doc
