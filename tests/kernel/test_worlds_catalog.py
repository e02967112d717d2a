"""Authoring without reading code: `simreport worlds`, the per-world scenario schema and the
"did you mean" line for a mistyped parameter."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from simreport.cli import main
from simreport.core.errors import SchemaError
from simreport.core.overrides import get_path
from simreport.kernel import load_scenario
from simreport.kernel.worlds import WORLDS
from tests.support.refusals import refused

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WORLD_NAMES = ["echo_chamber", "prisoners_dilemma", "refund_desk", "testbed"]
# The example folder whose scenario runs each world.
EXAMPLE_OF = {name: name for name in WORLD_NAMES} | {"testbed": "airline_desk"}
CAMEL = re.compile(r"^[a-z][A-Za-z0-9]*$")


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The model and every model nested in its fields."""
    found = [model]
    for field in model.model_fields.values():
        for inner in _types(field.annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel) and inner not in found:
                found.extend(m for m in _models(inner) if m not in found)
    return found


def _types(annotation: Any) -> list[Any]:
    args = getattr(annotation, "__args__", None)
    if not args:
        return [annotation]
    return [t for a in args for t in _types(a)]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("name", WORLD_NAMES)
def test_every_parameter_is_described_and_camel_case(name: str) -> None:
    world = WORLDS.get(name)
    for model in _models(world.Params):
        for field_name, field in model.model_fields.items():
            key = field.alias or field_name
            assert field.description, f"{model.__name__}.{key} has no description"
            assert CAMEL.match(key), f"{model.__name__}.{key} is not camelCase"


@pytest.mark.parametrize("name", [name for name in WORLD_NAMES if name != "testbed"])
def test_every_metric_and_distribution_has_a_one_line_description(name: str) -> None:
    world = WORLDS.get(name)
    assert world.metrics
    for label, text in [*world.metrics.items(), *world.distributions.items()]:
        assert text.strip() and "\n" not in text, label


def test_the_testbed_world_takes_its_metrics_from_the_scenario_domain() -> None:
    world = WORLDS.get("testbed")
    assert not world.metrics  # declared by each domain asset, not by the world
    folder = EXAMPLES / "airline_desk"
    scenario = load_scenario(folder / "scenario.yaml").scenario
    metrics, _ = world.outputs(scenario, folder)
    assert {"duplicatePayments", "rebookedAndSatisfied"} <= set(metrics)
    assert world.outputs(scenario, None) == ([], list(world.distributions))


# --------------------------------------------------------------------------- simreport worlds


def test_worlds_lists_parameters_metrics_and_templates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "worlds")
    assert code == 0
    for name in WORLD_NAMES:
        assert re.search(rf"^{name} — ", out, re.M), name
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("    ")}
    # name, type, default, allowed values and description of a parameter, on one row
    assert re.search(r"framing\s+string\s+neutral\s+neutral \| moralised \| risk\s+Wording", out)
    assert re.search(r"homophily\s+number\s+0\.8\s+0 ≤ x ≤ 1\s+Probability", out)
    assert "payoffs.temptation" in rows
    assert "intervention.selection" in rows
    assert "cooperationRate" in rows and "duplicateRefunds" in rows and "finalStance" in rows
    assert re.search(r"R3\s+linguistic_framing\s+params\.framing", out)
    assert re.search(r"D5\s+interaction_protocol\s+policy\.options\.p\s+\(with policy\.name", out)
    assert "external simulator" in out and "simulator.metrics" in out


def test_worlds_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "worlds", "--json")
    assert code == 0
    catalog = json.loads(out)
    worlds = {w["name"]: w for w in catalog["worlds"]}
    assert sorted(worlds) == WORLD_NAMES

    pd = worlds["prisoners_dilemma"]
    params = {p["name"]: p for p in pd["parameters"]}
    assert params["memoryWindow"]["default"] == 5
    assert params["memoryWindow"]["type"] == "integer"
    assert params["framing"]["allowed"] == "neutral | moralised | risk"
    assert params["payoffs.sucker"]["default"] == 0
    assert all(p["description"] for p in pd["parameters"])
    assert [m["name"] for m in pd["metrics"]] == list(WORLDS.get("prisoners_dilemma").metrics)
    assert [d["name"] for d in pd["distributions"]] == ["choice"]

    def codes(world: dict[str, Any]) -> set[str]:
        return {t["code"] for t in world["templates"]}

    assert {"D4", "R3"} <= codes(pd) and not {"D6", "D7"} & codes(pd)
    assert {"D4", "D6", "D7", "R3"} <= codes(worlds["echo_chamber"])
    # The refund desk has no params and fixes its population; it ignores activation policies.
    assert {"D1", "R4"} <= codes(worlds["refund_desk"])
    assert not {"D2", "D4", "D5", "D6", "D7", "D8", "R3"} & codes(worlds["refund_desk"])
    assert worlds["refund_desk"]["parameters"] == []
    d5 = next(t for t in worlds["echo_chamber"]["templates"] if t["code"] == "D5")
    assert (d5["target"], d5["when"]) == ("policy.options.p", "policy.name: bernoulli")

    sim = catalog["externalSimulator"]
    assert sim["metricsDeclaredAt"] == "simulator.metrics"
    assert "R3" not in {t["code"] for t in sim["templates"]}


def test_worlds_one_world_and_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "worlds", "echo_chamber", "--json")
    assert code == 0
    assert [w["name"] for w in json.loads(out)["worlds"]] == ["echo_chamber"]
    code, _, err = _cli(capsys, "worlds", "atlantis")
    assert code == 2
    assert err.strip().splitlines() == [
        "simreport: world: unknown world 'atlantis' (expected one of echo_chamber, "
        "prisoners_dilemma, refund_desk, testbed)"
    ]


@pytest.mark.parametrize("name", WORLD_NAMES)
def test_listed_templates_target_what_the_example_scenario_has(name: str) -> None:
    from simreport.worlds_catalog import world_catalog

    (world,) = world_catalog(name)["worlds"]
    doc = load_scenario(EXAMPLES / EXAMPLE_OF[name] / "scenario.yaml").scenario.to_doc()
    for template in world["templates"]:
        if template["when"] is None or doc["policy"]["name"] in template["when"]:
            get_path(doc, template["target"])  # raises when the target does not exist


# --------------------------------------------------------------------------- JSON Schema


@pytest.fixture(scope="module")
def scenario_schema() -> dict[str, Any]:
    from simreport.core.schema import Scenario

    return Scenario.model_json_schema(by_alias=True)


def _schema_errors(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(schema)
    return [e.message for e in validator.iter_errors(doc)]


def test_schema_command_checks_params_per_world(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "schema", "scenario")
    assert code == 0
    schema = json.loads(out)
    branches = {b["if"]["properties"]["world"]["const"]: b["then"] for b in schema["allOf"]}
    assert sorted(branches) == WORLD_NAMES
    ref = branches["prisoners_dilemma"]["properties"]["params"]["$ref"]
    params = schema["$defs"][ref.rsplit("/", 1)[-1]]
    assert params["additionalProperties"] is False
    assert params["properties"]["memoryWindow"]["description"]
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize(
    "name",
    [
        "echo_chamber",
        "prisoners_dilemma",
        "refund_desk",
        "airline_desk",
    ],
)
def test_schema_accepts_the_example_scenario(name: str, scenario_schema: dict[str, Any]) -> None:
    doc = yaml.safe_load((EXAMPLES / name / "scenario.yaml").read_text(encoding="utf-8"))
    assert _schema_errors(scenario_schema, doc) == []


@pytest.mark.parametrize(
    ("name", "params", "complaint"),
    [
        ("echo_chamber", {"payoffs": {"reward": 3}}, "'payoffs' was unexpected"),
        ("prisoners_dilemma", {"framing": "sarcastic"}, "'sarcastic' is not one of"),
        ("prisoners_dilemma", {"memoryWindow": -1}, "less than the minimum"),
        ("refund_desk", {"framing": "neutral"}, "'framing' was unexpected"),
    ],
)
def test_schema_rejects_params_wrong_for_the_world(
    name: str, params: dict[str, Any], complaint: str, scenario_schema: dict[str, Any]
) -> None:
    doc = yaml.safe_load((EXAMPLES / name / "scenario.yaml").read_text(encoding="utf-8"))
    doc["params"] = {**(doc.get("params") or {}), **params}
    errors = _schema_errors(scenario_schema, doc)
    assert any(complaint in e for e in errors), errors


def test_schema_rejects_an_unknown_world(scenario_schema: dict[str, Any]) -> None:
    errors = _schema_errors(scenario_schema, {"world": "atlantis"})
    assert errors


# --------------------------------------------------------------------------- did you mean


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


PD_SCENARIO = """\
world: prisoners_dilemma
steps: 3
population: {n: 2}
params:
  framing: neutral
  {key}: 5
"""


def test_a_mistyped_parameter_names_the_valid_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, PD_SCENARIO.replace("{key}", "memoryWindw"))
    code, out, err = _cli(capsys, "validate", str(path))
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"simreport: {path}:6: params.memoryWindw: unknown parameter 'memoryWindw' (expected one "
        "of framing, matching, memoryWindow, payoffs; did you mean memoryWindow?)"
    ]


def test_a_snake_case_parameter_points_to_its_camel_case_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, PD_SCENARIO.replace("{key}", "memory_window"))
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2
    assert "unknown parameter 'memory_window'" in err
    assert err.rstrip().endswith("did you mean memoryWindow?)")


def test_nested_and_other_unknown_keys_list_their_neighbours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path,
        "world: prisoners_dilemma\npopulation: {n: 2}\nparams:\n  payoffs: {tempation: 6}\n",
    )
    code, _, err = _cli(capsys, "validate", str(path))
    assert code == 2
    assert err.splitlines() == [
        f"simreport: {path}:4: params.payoffs.tempation: unknown key 'tempation' (expected one of "
        "punishment, reward, sucker, temptation; did you mean temptation?)"
    ]
    path = _write(tmp_path, "world: prisoners_dilemma\nprompt: {personaFormt: prose}\n")
    error = refused(capsys, ["validate", str(path)]).error
    assert isinstance(error, SchemaError) and error.path == "prompt.personaFormt"
    assert error.issues[0].kind == "extra_forbidden"
    assert error.expected is not None and error.expected.endswith("did you mean personaFormat?")


def test_a_world_without_parameters_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = yaml.safe_load((EXAMPLES / "refund_desk" / "scenario.yaml").read_text(encoding="utf-8"))
    doc["params"] = {"framing": "neutral"}
    path = _write(tmp_path, yaml.safe_dump(doc))
    error = refused(capsys, ["validate", str(path)]).error
    assert isinstance(error, SchemaError) and error.path == "params.framing"
    assert error.issues[0].kind == "extra_forbidden" and error.expected == "no parameters here"
