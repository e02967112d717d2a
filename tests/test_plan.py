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
    assert info.value.path == "replications"
    assert "invalid override" in info.value.message


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
    assert err.file == str(path)
    assert "exactly one of `baseScenario` and `base`" in err.message


def test_missing_base_scenario_file_names_the_plan(tmp_path: Path) -> None:
    path = plan_in(tmp_path, "metrics: []\nbaseScenario: nowhere.yaml\n")
    err = load_error(path)
    assert err.file == str(path)
    assert err.path == "baseScenario"
    assert err.line == 2
    assert "'nowhere.yaml' not found" in err.message


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    path = plan_in(tmp_path, "baseScenario: scenario.yaml\naxes: [\n  - id: x\n")
    err = load_error(path, DocumentError)
    assert err.file == str(path)
    assert err.line is not None and err.line >= 2
    assert "YAML syntax error" in err.message


def test_unknown_keys_are_rejected_where_they_are(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN + "colour: blue\n")
    err = load_error(path, SchemaError)
    assert (err.path, err.line, err.message) == ("colour", 9, "unknown key 'colour'")
    path = plan_in(tmp_path, PLAN.replace("levels: [0.5, 1.0]", "levels: [0.5]\n    weight: 2"))
    err = load_error(path, SchemaError)
    assert (err.path, err.line, err.message) == ("axes.1.weight", 7, "unknown key 'weight'")


@pytest.mark.parametrize("value", ["0", "-2"])
def test_replications_must_be_positive(tmp_path: Path, value: str) -> None:
    path = plan_in(tmp_path, PLAN.replace("replications: 3", f"replications: {value}"))
    err = load_error(path, SchemaError)
    assert (err.file, err.path, err.line) == (str(path), "replications", 7)
    assert "greater than 0" in err.message


def test_axis_without_levels(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("levels: [0.5, 1.0]", "levels: []"))
    err = load_error(path, SchemaError)
    assert (err.file, err.path, err.line) == (str(path), "axes.1.levels", 6)
    assert "at least 1 item" in err.message


def test_unknown_target_is_an_unknown_override(tmp_path: Path) -> None:
    plan = PLAN.replace("template: D5", "template: D5\n    target: policy.options.q")
    path = plan_in(tmp_path, plan)
    err = load_error(path, UnknownOverride)
    assert (err.file, err.path, err.line) == (str(path), "axes.1.target", 6)
    assert "'policy.options.q' does not exist" in err.message
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
    assert "'params.homophily' does not exist" in err.message


def test_rejected_level_is_an_invalid_override_with_issues(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("[0.5, 1.0]", "[0.5, 1.5]"))
    err = load_error(path, InvalidOverride)
    assert isinstance(err, InvalidOverride)
    assert (err.file, err.path, err.line) == (str(path), "axes.1.levels.1", 6)
    assert "level 1.5 of axis 'interaction_protocol'" in err.message
    assert "policy.options.p" in err.message
    assert [issue.path for issue in err.issues] == ["policy.options.p"]


def test_level_rejected_by_the_world_check(tmp_path: Path) -> None:
    plan = PLAN.replace("replications: 3", "  - {template: D8, levels: [2, 3]}\nreplications: 3")
    err = load_error(plan_in(tmp_path, plan), InvalidOverride)
    assert err.path == "axes.2.levels.1"
    assert "even number" in err.message


def test_unknown_metric_lists_the_available_ones(tmp_path: Path) -> None:
    path = plan_in(tmp_path, PLAN.replace("averagePayoff]", "averagePayof]"))
    err = load_error(path, PlanError)
    assert (err.file, err.path, err.line) == (str(path), "metrics.1", 8)
    assert "unknown metric 'averagePayof'" in err.message
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


def test_target_distribution_must_name_a_reported_distribution(tmp_path: Path) -> None:
    plan = PLAN + "hypothesis:\n  targetDistribution:\n    moves: {cooperate: 1}\n"
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "hypothesis.targetDistribution.moves"
    assert err.expected == "one of choice"


@pytest.mark.parametrize("target", ["llm.temperature", "seedPath", "replicationId", "llm"])
def test_axes_may_not_target_what_the_harness_sets(tmp_path: Path, target: str) -> None:
    plan = PLAN.replace("template: D5", f"template: D5\n    target: {target}")
    err = load_error(plan_in(tmp_path, plan), PlanError)
    assert err.path == "axes.1.target"
    assert "which the harness sets" in err.message


def test_model_axis_conflicts_with_plan_models(tmp_path: Path) -> None:
    plan = PLAN.replace("replications: 3", "  - {template: D1, levels: [a, b]}\nreplications: 3")
    assert len(load_plan(plan_in(tmp_path, plan)).plan.axes) == 3
    err = load_error(plan_in(tmp_path, plan + "models: [x]\n"), PlanError)
    assert err.path == "axes.2.target"
    assert "models" in err.message


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
    assert "both set 'params.framing'" in err.message
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


EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("name", ["prisoners_dilemma", "echo_chamber"])
def test_example_plans_load(name: str) -> None:
    loaded = load_plan(EXAMPLES / name / "audit.yaml")
    assert loaded.plan_id == name
    assert loaded.plan.metrics
    assert all(axis.code for axis in loaded.plan.axes)
