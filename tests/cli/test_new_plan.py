"""`simreport new plan`: every world's files validate as written, with every axis that applies to
it; unknown worlds and axes are refused naming the choices; existing files are never replaced
without --force; and an audit of a written plan runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from simreport import api
from simreport.cli import main
from simreport.core.errors import EXIT_INPUT, InputError, UnknownChoice, WouldOverwrite
from simreport.core.overrides import get_path
from simreport.harness import build_conditions, load_plan
from simreport.harness.new_plan import STARTERS, WORLD_PLANS, plan_worlds, world_axes
from simreport.kernel import load_scenario, scenario_outputs
from simreport.kernel.worlds import WORLDS
from simreport.worlds_catalog import world_catalog
from tests.support.refusals import refused

WORLDS_WITH_PLANS = plan_worlds()
_TOP_KEY = re.compile(r"^[A-Za-z]\w*:")


def _paragraph_is_commented(lines: list[str], index: int) -> bool:
    """Whether the key on line `index` has a comment of its own or sits in a paragraph (lines
    without a blank one between) that has a comment line."""
    if " # " in lines[index]:
        return True
    for line in reversed(lines[:index]):
        if not line.strip():
            return False
        if line.lstrip().startswith("#"):
            return True
    return False


def _uncommented_keys(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [
        line.split(":")[0]
        for i, line in enumerate(lines)
        if _TOP_KEY.match(line) and not _paragraph_is_commented(lines, i)
    ]


def _reported_metrics(world: str, scenario_file: Path) -> list[str]:
    """The metrics a run of the scenario reports: the world's, or its domain asset's."""
    loaded = load_scenario(scenario_file)
    assert loaded.scenario.world == world
    metrics, _ = scenario_outputs(loaded.scenario, loaded.asset_root)
    assert metrics, scenario_file
    return list(metrics)


def _write(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> Path:
    assert main(["new", "plan", *argv]) == 0
    out = capsys.readouterr().out
    plan = tmp_path / "written" / "audit.yaml"
    assert f"wrote {plan}" in out.splitlines()
    return plan


# --------------------------------------------------------------------------- what is written


@pytest.mark.parametrize("world", WORLDS_WITH_PLANS)
def test_each_world_writes_files_that_validate(
    world: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "written"
    plan = _write(tmp_path, capsys, "--world", world, "--out", str(out), "--replications", "4")

    checked = api.validate(plan)
    assert checked.kind == "plan"
    assert checked.details["planId"] == "written"
    assert checked.details["runs"] == checked.details["conditions"] * 4
    assert api.validate(out / "scenario.yaml").details["world"] == world
    for name in ("audit.yaml", "scenario.yaml"):
        assert _uncommented_keys(out / name) == [], name
    document = yaml.safe_load(plan.read_text(encoding="utf-8"))
    assert document["replications"] == 4
    assert document["baseScenario"] == "scenario.yaml"
    assert set(document["metrics"]) == set(_reported_metrics(world, out / "scenario.yaml"))
    assert len(document["axes"]) == 2


@pytest.mark.parametrize("world", WORLDS_WITH_PLANS)
def test_every_axis_that_applies_validates_and_moves_the_scenario(
    world: str, tmp_path: Path
) -> None:
    axes = world_axes(world)
    written = api.new_plan(world, axes=axes, out=tmp_path / "all", replications=2)

    loaded = load_plan(written.plan_file)
    assert [axis.id for axis in loaded.plan.axes] == list(axes)
    conditions = build_conditions(loaded)
    levels = sum(len(axis.levels) for axis in loaded.plan.axes)
    assert len(conditions) == 1 + levels
    # Every level differs from the scenario's value: each condition is a test, none a copy.
    assert [c.id for c in conditions if c.identical_to_base] == []


@pytest.mark.parametrize("world", WORLDS_WITH_PLANS)
def test_the_axes_offered_are_those_the_worlds_catalogue_lists(world: str) -> None:
    """Besides the templates the catalogue lists (their default target exists in every scenario
    of the world), a plan may offer a template retargeted onto a setting its starter has (the
    testbed's fault position and prompt version): the catalogue cannot know those."""
    listed = [t["id"] for t in world_catalog(world)["worlds"][0]["templates"]]
    axes = WORLD_PLANS[world].axes
    retargeted = [t for t in world_axes(world) if t not in listed and axes[t].target is not None]
    assert [t for t in world_axes(world) if t not in retargeted] == listed
    starter = yaml.safe_load((STARTERS / world / "scenario.yaml").read_text(encoding="utf-8"))
    for template in retargeted:
        target = axes[template].target
        assert target is not None
        get_path(starter, target)  # raises when the starter has no such setting


def test_every_registered_world_has_a_starter() -> None:
    assert set(WORLDS_WITH_PLANS) == set(WORLDS)
    assert sorted(p.name for p in STARTERS.iterdir() if p.is_dir()) == sorted(WORLDS_WITH_PLANS)


def test_axes_by_code_or_id_keep_the_order_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _write(
        tmp_path,
        capsys,
        "--world",
        "echo_chamber",
        "--axes",
        "r1, D7,interaction_protocol",
        "--out",
        str(tmp_path / "written"),
    )
    document = yaml.safe_load(plan.read_text(encoding="utf-8"))
    assert [a["template"] for a in document["axes"]] == [
        "representational_format",
        "environment_structure",
        "interaction_protocol",
    ]
    assert document["replications"] == 10  # the default


def test_the_default_folder_is_named_after_the_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["new", "plan", "--world", "prisoners_dilemma"]) == 0
    assert "wrote prisoners_dilemma/audit.yaml" in capsys.readouterr().out.splitlines()
    assert api.validate(tmp_path / "prisoners_dilemma" / "audit.yaml").details["planId"] == (
        "prisoners_dilemma"
    )


@pytest.mark.parametrize("world", ["refund_desk", "testbed"])
def test_a_testbed_world_gets_the_asset_library_its_scenario_names(
    world: str, tmp_path: Path
) -> None:
    written = api.new_plan(world, out=tmp_path / "desk", replications=1)
    assets = sorted(p.relative_to(written.folder) for p in written.files if "assets" in p.parts)
    assert assets, "no asset files written"
    assert all((written.folder / p).is_file() for p in assets)
    scenario = yaml.safe_load(written.scenario_file.read_text(encoding="utf-8"))
    assert scenario["provenance"]["assetLibrary"] == "assets"
    for ref in (scenario["sut"]["agent"], scenario["sut"]["prompt"], scenario["user"]["policy"]):
        name = ref.split("@")[0]
        assert (written.folder / "assets" / name).is_dir(), ref


@pytest.mark.parametrize("world", WORLDS_WITH_PLANS)
def test_every_file_of_the_starter_is_written(world: str, tmp_path: Path) -> None:
    written = api.new_plan(world, out=tmp_path / "w", replications=1)
    starter = STARTERS / world
    for path in starter.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            copy = written.folder / path.relative_to(starter)
            assert copy in written.files, path
            if path.name != "scenario.yaml":
                assert copy.read_bytes() == path.read_bytes(), path


def test_the_testbed_starter_brings_its_agent_module(tmp_path: Path) -> None:
    written = api.new_plan("testbed", out=tmp_path / "tb", replications=1)
    agent = yaml.safe_load(
        (written.folder / "assets" / "rebooking-agent" / "1.0.0.yaml").read_text(encoding="utf-8")
    )
    module = agent["content"]["entry"].split(":")[0]
    assert (written.folder / f"{module}.py").is_file()


# --------------------------------------------------------------------------- refusals


def test_an_unknown_world_is_refused_naming_the_worlds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "written"
    refusal = refused(capsys, ["new", "plan", "--world", "prisoner", "--out", str(out)])
    assert refusal.code == EXIT_INPUT
    assert isinstance(refusal.error, UnknownChoice)
    assert refusal.error.name == "prisoner"
    assert refusal.error.allowed == WORLDS_WITH_PLANS
    assert refusal.error.path == "--world"
    assert not out.exists()


@pytest.mark.parametrize(
    ("world", "axis"),
    [
        ("prisoners_dilemma", "homophily"),  # not a template
        ("prisoners_dilemma", "environment_structure"),  # a template without a target here
        ("refund_desk", "R3"),  # by code
        ("echo_chamber", "D9"),
    ],
)
def test_an_axis_the_world_lacks_is_refused_naming_its_axes(
    world: str, axis: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "written"
    argv = ["new", "plan", "--world", world, "--axes", f"model_substrate,{axis}", "--out", str(out)]
    refusal = refused(capsys, argv)
    assert refusal.code == EXIT_INPUT
    assert isinstance(refusal.error, UnknownChoice)
    assert (refusal.error.name, refusal.error.path) == (axis, "--axes")
    assert refusal.error.allowed == world_axes(world)
    assert not out.exists()


@pytest.mark.parametrize(
    ("axes", "path"),
    [(["R3", "linguistic_framing"], "--axes"), ([], "--axes")],
)
def test_repeated_or_no_axes_are_refused(axes: list[str], path: str, tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        api.new_plan("prisoners_dilemma", axes=axes, out=tmp_path / "x")
    assert caught.value.path == path
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_replications_below_one_are_refused_by_the_command_line(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["new", "plan", "--world", "echo_chamber", "--replications", value]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--out", str(tmp_path / "x")])
    assert exited.value.code == EXIT_INPUT
    assert "--replications" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_existing_files_are_never_replaced_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "written"
    first = api.new_plan("prisoners_dilemma", out=out, replications=3)
    (out / "audit.yaml").write_text("# my own edits\n", encoding="utf-8")
    kept = {p: p.read_bytes() for p in first.files}

    argv = ["new", "plan", "--world", "echo_chamber", "--out", str(out)]
    refusal = refused(capsys, argv)
    assert isinstance(refusal.error, WouldOverwrite)
    assert refusal.code == EXIT_INPUT
    assert set(refusal.error.existing) == {str(out / "scenario.yaml"), str(out / "audit.yaml")}
    assert {p: p.read_bytes() for p in first.files} == kept

    assert main([*argv, "--force"]) == 0
    assert api.validate(out / "audit.yaml").details["planId"] == "written"
    assert api.validate(out / "scenario.yaml").details["world"] == "echo_chamber"


def test_an_empty_existing_folder_is_used(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    written = api.new_plan("echo_chamber", out=tmp_path / "empty")
    assert written.plan_file.is_file()


def test_a_file_where_the_folder_should_be_is_refused(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        api.new_plan("echo_chamber", out=tmp_path / "taken")
    assert caught.value.file == str(tmp_path / "taken")
    assert not isinstance(caught.value, WouldOverwrite)


# --------------------------------------------------------------------------- running it


def test_an_audit_of_the_written_plan_runs(tmp_path: Path) -> None:
    written = api.new_plan(
        "prisoners_dilemma", axes=["linguistic_framing"], out=tmp_path / "pd", replications=2
    )
    audit_dir = tmp_path / "results"
    api.audit(written.plan_file, out=audit_dir, ledger=False)

    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    assert [c["id"] for c in audit["conditions"]] == [
        "base",
        "linguistic_framing=moralised",
        "linguistic_framing=risk",
    ]
    assert len(audit["runs"]) == 6
    assert {run["status"]["execution"] for run in audit["runs"]} == {"completed"}
    assert audit["plan"]["primaryMetrics"] == ["cooperationRate"]
    assert (audit_dir / "report.html").is_file()


@pytest.mark.slow
def test_an_audit_of_the_testbed_plan_reports_the_domain_s_metrics(tmp_path: Path) -> None:
    written = api.new_plan("testbed", out=tmp_path / "tb", replications=1)
    audit_dir = tmp_path / "results"
    api.audit(written.plan_file, out=audit_dir, ledger=False)

    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    assert [c["id"] for c in audit["conditions"]] == [
        "base",
        "environment_structure=not_sent",
        "environment_structure=sent_not_committed",
        "linguistic_framing=rebooking-prompt@2.0.0",
    ]
    assert audit["plan"]["metrics"] == _reported_metrics("testbed", written.scenario_file)
    assert {run["status"]["execution"] for run in audit["runs"]} == {"completed"}
    assert audit["plan"]["primaryMetrics"] == ["duplicatePayments"]
