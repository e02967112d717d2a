"""From a plan to conditions and replications: ids, order, directories, seeds, and the audit
directory the runner writes."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from simreport.core.canonical import content_hash
from simreport.core.errors import InvalidOverride, PlanError
from simreport.core.schema import PerturbationAxis
from simreport.harness import (
    Condition,
    LoadedPlan,
    build_conditions,
    condition_dir,
    condition_id_from_dir,
    level_text,
    load_plan,
    replication_scenarios,
    run_audit,
)
from simreport.harness.conditions import condition_labels

SCENARIO = """\
world: prisoners_dilemma
steps: 2
seed: 5
population:
  n: 2
llm:
  temperature: 0.9
policy:
  name: bernoulli
  options: {p: 0.8}
params:
  framing: neutral
  memoryWindow: 5
"""


def load(tmp_path: Path, plan: str, scenario: str = SCENARIO) -> LoadedPlan:
    folder = tmp_path / "audit"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(scenario, encoding="utf-8")
    (folder / "audit.yaml").write_text(
        "baseScenario: scenario.yaml\n" + textwrap.dedent(plan), encoding="utf-8"
    )
    return load_plan(folder / "audit.yaml")


def ids(conditions: list[Condition]) -> list[str]:
    return [c.id for c in conditions]


OAT = """\
axes:
  - {template: R3, id: framing, levels: [moralised, risk]}
  - {template: D4, id: memoryWindow, levels: [1, 5]}
"""


# --------------------------------------------------------------------------- ids and order


def test_one_at_a_time_without_models(tmp_path: Path) -> None:
    conditions = build_conditions(load(tmp_path, OAT))
    assert ids(conditions) == [
        "base",
        "framing=moralised",
        "framing=risk",
        "memoryWindow=1",
        "memoryWindow=5",
    ]
    base, moralised = conditions[0], conditions[1]
    assert (base.is_base, base.axis, base.level, base.levels, base.model) == (
        True,
        None,
        None,
        {},
        None,
    )
    assert base.base_id == "base" and base.identical_to_base is False
    assert (moralised.axis, moralised.level, moralised.levels) == (
        "framing",
        "moralised",
        {"framing": "moralised"},
    )
    assert moralised.scenario.params["framing"] == "moralised"
    assert all(c.base_id == "base" for c in conditions)


def test_one_at_a_time_with_models_has_a_base_per_model(tmp_path: Path) -> None:
    conditions = build_conditions(load(tmp_path, OAT + "models: [small, large]\n"))
    assert ids(conditions) == [
        "base@small",
        "base@large",
        "framing=moralised@small",
        "framing=moralised@large",
        "framing=risk@small",
        "framing=risk@large",
        "memoryWindow=1@small",
        "memoryWindow=1@large",
        "memoryWindow=5@small",
        "memoryWindow=5@large",
    ]
    for c in conditions:
        assert c.model == c.id.split("@")[1]
        assert c.scenario.llm.model == c.model
        assert c.base_id == f"base@{c.model}"
    # The model is not part of the scenario hash: variants of one condition share it.
    assert conditions[2].scenario_hash == conditions[3].scenario_hash


FACTORIAL = """\
design: full_factorial
axes:
  - {template: R3, id: framing, levels: [neutral, risk]}
  - {template: D4, id: memoryWindow, levels: [1, 5]}
  - {template: R1, id: format, levels: [bullets]}
"""


def test_full_factorial_without_models(tmp_path: Path) -> None:
    conditions = build_conditions(load(tmp_path, FACTORIAL))
    assert ids(conditions) == [
        "base",
        "framing=neutral|memoryWindow=1|format=bullets",
        "framing=neutral|memoryWindow=5|format=bullets",
        "framing=risk|memoryWindow=1|format=bullets",
        "framing=risk|memoryWindow=5|format=bullets",
    ]
    last = conditions[-1]
    assert last.axis == "framing|memoryWindow|format"
    assert last.level == {"framing": "risk", "memoryWindow": 5, "format": "bullets"}
    assert last.levels == last.level
    assert last.scenario.params["memoryWindow"] == 5
    assert last.scenario.prompt.persona_format == "bullets"


def test_full_factorial_with_models(tmp_path: Path) -> None:
    conditions = build_conditions(load(tmp_path, FACTORIAL + "models: [a, b]\n"))
    assert ids(conditions)[:4] == [
        "base@a",
        "base@b",
        "framing=neutral|memoryWindow=1|format=bullets@a",
        "framing=neutral|memoryWindow=1|format=bullets@b",
    ]
    assert len(conditions) == 2 + 4 * 2


def test_no_axes_gives_the_base_alone(tmp_path: Path) -> None:
    assert ids(build_conditions(load(tmp_path, "models: [m]\n"))) == ["base@m"]


def test_build_conditions_is_stable(tmp_path: Path) -> None:
    loaded = load(tmp_path, OAT)
    assert build_conditions(loaded) == build_conditions(loaded)


# --------------------------------------------------------------------------- scenarios


def test_level_equal_to_the_base_value_is_identical_to_base(tmp_path: Path) -> None:
    conditions = build_conditions(load(tmp_path, OAT + "models: [m]\n"))
    flags = {c.id: c.identical_to_base for c in conditions}
    assert flags == {
        "base@m": False,
        "framing=moralised@m": False,
        "framing=risk@m": False,
        "memoryWindow=1@m": False,
        "memoryWindow=5@m": True,
    }


def test_a_default_value_spelled_out_is_identical_to_base(tmp_path: Path) -> None:
    # The base leaves personaFormat to its default; the level names the default explicitly.
    conditions = build_conditions(load(tmp_path, "axes:\n  - {template: R1, levels: [prose]}\n"))
    assert conditions[1].identical_to_base is True


def test_a_level_that_changes_only_what_no_run_reads_is_identical_to_base(tmp_path: Path) -> None:
    # An axis on the description: its runs read the same scenario as the base's, so no test.
    plan = "axes:\n  - {id: words, kind: representation, level: micro, dimension: words,\n"
    plan += "     target: description, levels: [another wording]}\n"
    conditions = build_conditions(load(tmp_path, plan))
    assert conditions[1].identical_to_base is True
    assert conditions[1].scenario_hash != conditions[0].scenario_hash


def test_temperature_is_forced_to_zero(tmp_path: Path) -> None:
    loaded = load(tmp_path, OAT + "models: [m]\n")
    assert loaded.base.llm.temperature == 0.9  # the plan keeps the scenario as written ...
    for c in build_conditions(loaded):
        assert c.scenario.llm.temperature == 0  # ... the conditions run at 0


def test_scenario_hash_is_taken_before_the_model(tmp_path: Path) -> None:
    loaded = load(tmp_path, OAT + "models: [m]\n")
    base = build_conditions(loaded)[0]
    doc = base.scenario.to_doc()
    doc["llm"]["model"] = loaded.base.llm.model
    assert base.scenario_hash == content_hash(doc)


def test_object_valued_levels(tmp_path: Path) -> None:
    plan = """\
    axes:
      - id: payoffs
        level: meso
        kind: design
        dimension: incentives
        target: params.payoffs
        levels:
          - {temptation: 5, reward: 3, punishment: 1, sucker: 0}
          - {temptation: 9, reward: 6, punishment: 1, sucker: 0}
    """
    conditions = build_conditions(load(tmp_path, plan))
    assert ids(conditions)[1:] == [
        'payoffs={"punishment":1,"reward":3,"sucker":0,"temptation":5}',
        'payoffs={"punishment":1,"reward":6,"sucker":0,"temptation":9}',
    ]
    assert conditions[1].level == {"temptation": 5, "reward": 3, "punishment": 1, "sucker": 0}
    assert conditions[2].scenario.params["payoffs"]["temptation"] == 9.0
    # 5 and 5.0 are the same payoff once validated: the first level is the base.
    assert conditions[1].identical_to_base is True


@pytest.mark.parametrize(
    ("value", "text"),
    [("risk", "risk"), (5, "5"), (0.5, "0.5"), (True, "true"), (None, "null"), ("5", "5")],
)
def test_level_text(value: Any, text: str) -> None:
    assert level_text(value) == text
    assert level_text({"dose": 0.2, "at": [1, 2]}) == '{"at":[1,2],"dose":0.2}'


def test_two_levels_with_the_same_id_text(tmp_path: Path) -> None:
    plan = "axes:\n  - {template: D4, levels: [5, '5']}\n"
    with pytest.raises(PlanError) as info:
        load(tmp_path, plan)
    err = info.value
    assert err.path == "axes.0.levels.1"
    assert err.file == str(tmp_path / "audit" / "audit.yaml")
    assert "'memory_temporality'" in err.message and "'5'" in err.message


def test_factorial_combination_rejected_by_the_world(tmp_path: Path) -> None:
    # Each level is valid alone (2 × reward > temptation + sucker: 6 > 5.5, 6 > 5.8); together
    # they are not (6 > 6.3 fails), so only the combination is rejected.
    plan = """\
    design: full_factorial
    axes:
      - {id: temptation, level: micro, kind: design, dimension: x,
         target: params.payoffs.temptation, levels: [5.5]}
      - {id: sucker, level: micro, kind: design, dimension: x,
         target: params.payoffs.sucker, levels: [0.8]}
    """
    with pytest.raises(InvalidOverride) as info:
        load(tmp_path, plan)
    err = info.value
    assert isinstance(err, InvalidOverride)
    assert err.path == "axes.1.levels.0"
    assert "temptation=5.5|sucker=0.8" in err.message  # the condition, not one level
    assert err.issues and err.issues[0].path == "params.payoffs"
    # one at a time, each level is fine
    assert load(tmp_path, plan.replace("full_factorial", "one_at_a_time"))


# --------------------------------------------------------------------------- replications


def test_replications_extend_the_seed_lineage(tmp_path: Path) -> None:
    condition = build_conditions(load(tmp_path, OAT))[1]
    reps = replication_scenarios(condition, 3)
    assert [s.replication_id for s in reps] == [0, 1, 2]
    assert [s.seed_path for s in reps] == [[0], [1], [2]]
    assert all(s.seed == 5 for s in reps)
    assert all(s.params == condition.scenario.params for s in reps)
    assert condition.scenario.seed_path == []  # the condition itself is untouched


# --------------------------------------------------------------------------- directories


@pytest.mark.parametrize(
    "cid",
    [
        "base",
        "base@gpt-4o-mini",
        "framing=moralised|memoryWindow=5@m",
        "persona=two words",
        'quote="it\'s"',
        "framing=überzeugt|名=值",
        "path=a/b/../c",
        "tilde=~7e~",
        ".hidden=1",
        'dose={"dose":0.2}',
    ],
)
def test_directory_names_round_trip(cid: str) -> None:
    name = condition_dir(cid)
    assert condition_id_from_dir(name) == cid
    assert all(ch.isascii() and (ch.isalnum() or ch in "._-~=@+") for ch in name)
    assert not name.startswith(".")
    assert len(name) <= 120


def test_directory_name_encoding() -> None:
    assert condition_dir("framing=moralised|memoryWindow=5@m") == (
        "framing=moralised+memoryWindow=5@m"
    )
    assert condition_dir("a b") == "a~20b"
    # `+` stands for the `|` between levels, so a literal `+` is escaped: both come back.
    assert condition_dir("a+b=c|d") == "a~2bb=c+d"
    assert condition_id_from_dir("a~2bb=c+d") == "a+b=c|d"
    assert condition_dir("é") == "~c3~a9"


def test_long_ids_are_shortened_with_a_hash() -> None:
    cid = "|".join(f"axis{i}=level {i}" for i in range(20))
    name = condition_dir(cid)
    head, digest = name.split("~~")
    assert digest == hashlib.sha256(cid.encode()).hexdigest()[:16]
    # The head is the encoding's first 80 characters, cut back to the start of an escape.
    encoded = "".join(
        ch if ch.isalnum() or ch in "._-=@" else "+" if ch == "|" else f"~{ord(ch):02x}"
        for ch in cid
    )
    assert len(encoded) > 120
    assert encoded.startswith(head)
    assert 78 <= len(head) <= 80
    assert condition_id_from_dir(head)  # the cut never splits an escape
    with pytest.raises(ValueError, match="shortened"):
        condition_id_from_dir(name)
    assert condition_dir(cid + "x") != name


@pytest.mark.parametrize("name", ["a~zz", "a b", "a~4", "~c3", "a~7E"])
def test_invalid_directory_names(name: str) -> None:
    with pytest.raises(ValueError):
        condition_id_from_dir(name)


# --------------------------------------------------------------------------- the audit directory


def test_run_audit_writes_plan_conditions_and_every_run(tmp_path: Path) -> None:
    loaded = load(tmp_path, "axes:\n  - {template: R3, levels: [risk]}\nreplications: 2\n")
    out = tmp_path / "results"
    seen: list[tuple[int, int]] = []
    run = run_audit(loaded, out, progress=lambda done, total: seen.append((done, total)))
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)

    plan = json.loads((out / "plan.json").read_text())
    assert plan["hash"] == loaded.hash
    assert plan["planFile"] == str(loaded.plan_file)
    assert plan["providerOverride"] is None
    assert "concurrency" not in plan

    entries = json.loads((out / "conditions.json").read_text())
    assert [e["id"] for e in entries] == ["base", "linguistic_framing=risk"]
    assert entries[1] == {
        "id": "linguistic_framing=risk",
        "label": "linguistic_framing: risk",
        "dir": "linguistic_framing=risk",
        "isBase": False,
        "axis": "linguistic_framing",
        "level": "risk",
        "levels": {"linguistic_framing": "risk"},
        "model": None,
        "identicalToBase": False,
        "baseId": "base",
        "scenarioHash": run.conditions[1].scenario_hash,
        "replications": 2,
    }

    assert [(c.id, r) for c, r, _ in run.results] == [
        ("base", 0),
        ("base", 1),
        ("linguistic_framing=risk", 0),
        ("linguistic_framing=risk", 1),
    ]
    for condition, r, result in run.results:
        folder = out / "runs" / condition.dir / str(r)
        assert (folder / "result.json").is_file()
        assert result.succeeded, result.failure
        assert result.condition == condition.id and result.replication == r
        assert result.seed_path == [r]
        assert json.loads((folder / "scenario.json").read_text())["replicationId"] == r


def test_run_audit_in_a_worker_pool_matches_in_process(tmp_path: Path) -> None:
    loaded = load(tmp_path, "axes:\n  - {template: R3, levels: [risk, moralised]}\n")
    serial = run_audit(loaded, tmp_path / "serial", concurrency=1)
    pooled = run_audit(loaded, tmp_path / "pooled", concurrency=2)
    assert [r.to_doc() for _, _, r in serial.results] == [r.to_doc() for _, _, r in pooled.results]


# --------------------------------------------------------------------------- display labels


def labels(conditions: list[Condition]) -> list[str]:
    return [c.label for c in conditions]


def test_labels_name_the_axis_and_the_level(tmp_path: Path) -> None:
    assert labels(build_conditions(load(tmp_path, OAT))) == [
        "base",
        "framing: moralised",
        "framing: risk",
        "memoryWindow: 1",
        "memoryWindow: 5",
    ]


def test_labels_use_the_axis_label_and_level_labels(tmp_path: Path) -> None:
    plan = """\
    axes:
      - template: R3
        label: Wording
        levels: [moralised, risk]
        labels: {moralised: moral appeal}
      - template: D4
        levels: [1, 5, 10]
        labels: {1: last round only, '5': five rounds}
    """
    loaded = load(tmp_path, plan)
    assert labels(build_conditions(loaded)) == [
        "base",
        "Wording: moral appeal",
        "Wording: risk",
        "memory_temporality: last round only",
        "memory_temporality: five rounds",
        "memory_temporality: 10",
    ]
    # The labels ride along in the plan; they are not part of what it means.
    assert loaded.normalised()["axes"][0]["labels"] == {"moralised": "moral appeal"}
    unlabelled = load(
        tmp_path / "plain",
        "axes:\n  - {template: R3, levels: [moralised, risk]}\n"
        "  - {template: D4, levels: [1, 5, 10]}\n",
    )
    assert loaded.hash == unlabelled.hash


def test_factorial_labels_join_the_axes_and_models_follow(tmp_path: Path) -> None:
    conditions = build_conditions(
        load(tmp_path, "design: full_factorial\nmodels: [m1, m2]\n" + OAT)
    )
    assert labels(conditions)[:4] == [
        "base @ m1",
        "base @ m2",
        "framing: moralised, memoryWindow: 1 @ m1",
        "framing: moralised, memoryWindow: 1 @ m2",
    ]
    assert len(set(labels(conditions))) == len(conditions)


def test_labels_of_structured_levels_are_their_text(tmp_path: Path) -> None:
    plan = "axes:\n  - {template: D3, levels: [[instructions, goals]]}\n"
    assert labels(build_conditions(load(tmp_path, plan)))[1] == (
        'internal_state: ["instructions","goals"]'
    )


def test_coinciding_labels_show_what_tells_them_apart(tmp_path: Path) -> None:
    plan = """\
    axes:
      - template: R3
        label: Setting
        levels: [moralised, risk]
        labels: {moralised: strong, risk: strong}
      - template: D4
        label: Setting
        levels: [1]
        labels: {1: strong}
    """
    assert labels(build_conditions(load(tmp_path, plan))) == [
        "base",
        "Setting [linguistic_framing]: strong (moralised)",
        "Setting [linguistic_framing]: strong (risk)",
        "Setting [memory_temporality]: strong (1)",
    ]


def axis(axis_id: str, levels: list[Any]) -> PerturbationAxis:
    return PerturbationAxis.model_validate(
        {
            "id": axis_id,
            "level": "micro",
            "kind": "design",
            "dimension": "d",
            "target": f"params.{axis_id}",
            "levels": levels,
        }
    )


def test_labels_that_still_coincide_gain_the_condition_id() -> None:
    # Level texts that read like other axes: both cells read "a: x, b: y, b: y".
    axes = [axis("a", ["x, b: y", "x"]), axis("b", ["y", "y, b: y"])]
    cells = [((), None), (((0, 0), (1, 0)), None), (((0, 1), (1, 1)), None)]
    assert condition_labels(axes, cells) == [
        "base",
        "a: x, b: y, b: y [a=x, b: y|b=y]",
        "a: x, b: y, b: y [a=x|b=y, b: y]",
    ]
    # Whatever happens, no two labels are the same.
    assert condition_labels(axes, [((), None)] * 3) == [
        "base [base]",
        "base [base] #2",
        "base [base] #3",
    ]


def test_a_label_for_a_level_the_axis_does_not_have(tmp_path: Path) -> None:
    plan = "axes:\n  - template: R3\n    levels: [risk]\n    labels: {riks: framed as risk}\n"
    with pytest.raises(PlanError) as info:
        load(tmp_path, plan)
    err = info.value
    assert (err.path, err.line) == ("axes.0.labels.riks", 5)
    assert err.expected == "one of risk"


def test_labels_with_credentials_are_refused(tmp_path: Path) -> None:
    plan = "axes:\n  - template: R3\n    levels: [risk]\n    labels: {risk: 'http://u:pw@h/x'}\n"
    with pytest.raises(PlanError) as info:
        load(tmp_path, plan)
    assert info.value.path == "axes.0.labels.risk"


def test_conditions_json_and_the_cli_carry_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from simreport.cli import main

    loaded = load(tmp_path, "axes:\n  - {template: R3, levels: [risk], labels: {risk: Risk}}\n")
    assert [c.to_doc(1)["label"] for c in build_conditions(loaded)] == [
        "base",
        "linguistic_framing: Risk",
    ]
    assert main(["conditions", str(loaded.plan_file), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["label"] for row in rows] == ["base", "linguistic_framing: Risk"]
    assert [row["dir"] for row in rows] == ["base", "linguistic_framing=risk"]
