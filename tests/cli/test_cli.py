"""The command line: every kind of bad input gives one located line on stderr, exit code 2 and no
run directory; good input runs end to end."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simreport.cli import main
from simreport.core.errors import (
    EXIT_INTERNAL,
    DocumentError,
    InvalidOverride,
    PlanError,
    SchemaError,
    SimreportError,
    UnknownOverride,
    ValidationIssue,
)
from tests.support.refusals import refused
from tests.support.studies import PLAN, SCENARIO, Study

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def study(tiny_study: Study) -> Path:
    return tiny_study.folder


def _fail(capsys: pytest.CaptureFixture[str], argv: list[str]) -> SimreportError:
    refusal = refused(capsys, argv)
    assert refusal.code == 2, refusal.line
    return refusal.error


def _bad_plan(study: Path, text: str, capsys: pytest.CaptureFixture[str]) -> SimreportError:
    plan = study / "bad.yaml"
    plan.write_text(text)
    out = study / "out"
    error = _fail(capsys, ["audit", str(plan), "--out", str(out)])
    assert error.file == str(plan)
    assert not out.exists(), "no run directory may be created for bad input"
    return error


def _issue(error: SimreportError) -> ValidationIssue:
    """The first schema issue of a SchemaError."""
    assert isinstance(error, SchemaError), error
    return error.issues[0]


def test_unknown_key_in_plan(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN + "replicates: 3\n", capsys)
    assert (error.path, error.line) == ("replicates", 7)
    assert _issue(error).kind == "extra_forbidden"


def test_wrong_type(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN.replace("replications: 2", "replications: many"), capsys)
    assert error.path == "replications" and _issue(error).kind == "int_type"


def test_both_and_neither_base(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN + "base: {world: prisoners_dilemma}\n", capsys)
    assert error.path is None and _issue(error).kind == "base_choice"
    error = _bad_plan(study, PLAN.replace("baseScenario: scenario.yaml\n", ""), capsys)
    assert error.path is None and _issue(error).kind == "base_missing"


def test_missing_base_file(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN.replace("scenario.yaml", "nowhere.yaml"), capsys)
    assert error.path == "baseScenario" and "nowhere.yaml" in error.message


def test_yaml_syntax_error(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN + "axes: [unclosed\n", capsys)
    assert type(error) is DocumentError and error.expected == "valid YAML"
    assert error.line is not None


def test_target_that_does_not_exist(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        PLAN
        + "  - {id: x, level: micro, kind: design, dimension: d,\n"
        + "     target: params.nope, levels: [1]}\n"
    )
    error = _bad_plan(study, text, capsys)
    assert type(error) is UnknownOverride and (error.path, error.line) == ("axes.1.target", 8)
    assert "params.nope" in error.message


def test_level_the_schema_rejects(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN.replace("[moralised, risk]", "[moralised, sarcastic]"), capsys)
    assert type(error) is InvalidOverride and error.path == "axes.0.levels.1"
    assert "sarcastic" in error.message


def test_axis_with_no_levels(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN.replace("[moralised, risk]", "[]"), capsys)
    assert error.path == "axes.0.levels" and _issue(error).kind == "too_short"


@pytest.mark.parametrize("value", ["0", "-3"])
def test_replications_not_positive(
    study: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    error = _bad_plan(study, PLAN.replace("replications: 2", f"replications: {value}"), capsys)
    assert error.path == "replications" and _issue(error).kind == "greater_than"


def test_metric_the_world_does_not_report(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    error = _bad_plan(study, PLAN.replace("[cooperationRate]", "[happiness]"), capsys)
    assert type(error) is PlanError and error.path == "metrics.0" and "happiness" in error.message
    assert error.expected is not None and "cooperationRate" in error.expected


@pytest.mark.parametrize(
    ("replace", "path", "word"),
    [
        ("world: prisoners_dilemma", "world", "utopia"),
        ("steps: 3", "llm.provider", "telepathy"),
        ("steps: 3", "policy.name", "lottery"),
    ],
)
def test_unknown_world_provider_policy(
    study: Path, capsys: pytest.CaptureFixture[str], replace: str, path: str, word: str
) -> None:
    scenario = study / "scenario.yaml"
    if path == "world":
        scenario.write_text(SCENARIO.replace(replace, f"world: {word}"))
    elif path == "llm.provider":
        scenario.write_text(SCENARIO + f"llm: {{provider: {word}}}\n")
    else:
        scenario.write_text(SCENARIO + f"policy: {{name: {word}}}\n")
    out = study / "out"
    error = _fail(capsys, ["audit", str(study / "audit.yaml"), "--out", str(out)])
    assert (error.file, error.path) == (str(scenario), path) and word in error.message
    assert not out.exists()
    error = _fail(capsys, ["validate", str(scenario)])
    assert (error.file, error.path) == (str(scenario), path)


def test_replications_override_must_be_positive(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = study / "out"
    error = _fail(
        capsys, ["audit", str(study / "audit.yaml"), "--out", str(out), "--replications", "0"]
    )
    assert error.path == "replications"
    assert not out.exists()


def test_run_bad_scenario_names_line(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = study / "s.yaml"
    scenario.write_text(SCENARIO.replace("  n: 4", "  n: four"))
    error = _fail(capsys, ["run", str(scenario), "--out", str(study / "run")])
    assert (error.file, error.line, error.path) == (str(scenario), 5, "population.n")
    assert not (study / "run").exists()


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["audit"])
    assert info.value.code == 2


def test_validate_examples(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*/*.yaml"))
    assert main(["validate", *files]) == 0
    out = capsys.readouterr().out
    assert out.count("ok ") == len(files)


def test_schema_command_prints_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "scenario"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "personaFormat" in json.dumps(schema)
    assert main(["schema", "plan"]) == 0
    assert "baseScenario" in capsys.readouterr().out


def test_output_closed_early_ends_quietly() -> None:
    """`simreport … | head`: once the output's reader has gone, the command stops without an
    error and exits 141, as a pipe's writer does."""
    process = subprocess.Popen(
        [sys.executable, "-m", "simreport.cli", "schema", "scenario"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader goes before the first line is written
    said = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141
    assert said == ""


def test_a_broken_pipe_elsewhere_is_still_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pipe of the command's own breaking (standard output still open) is not taken for a
    reader that went away."""
    from simreport.harness import plan

    def broken() -> object:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(plan, "plan_json_schema", broken)
    assert main(["schema", "plan"]) == EXIT_INTERNAL
    assert "BrokenPipeError" in capsys.readouterr().err


def test_run_and_conditions(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["run", str(study / "scenario.yaml"), "--out", str(study / "run"), "--seed", "9"]) == 0
    )
    result = json.loads((study / "run" / "result.json").read_text())
    assert result["failure"] is None
    assert json.loads((study / "run" / "scenario.json").read_text())["seed"] == 9
    capsys.readouterr()
    assert main(["conditions", str(study / "audit.yaml")]) == 0
    ids = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    assert ids == ["base", "linguistic_framing=moralised", "linguistic_framing=risk"]
    assert main(["conditions", str(study / "audit.yaml"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in rows] == ids and {row["replications"] for row in rows} == {2}


def _strip_timing(path: Path) -> bytes:
    return path.read_bytes()


@pytest.mark.slow
def test_audit_end_to_end_is_reproducible_across_concurrency(study: Path) -> None:
    """The real CLI, twice: concurrency 2 and 1 give byte-identical results."""
    exe = Path(sys.executable).with_name("simreport")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "simreport.cli"]
    for name, concurrency in (("a", "2"), ("b", "1")):
        proc = subprocess.run(
            [
                *command,
                "audit",
                str(study / "audit.yaml"),
                "--out",
                str(study / name),
                "--replications",
                "3",
                "--concurrency",
                concurrency,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert "9 runs" in proc.stdout
        assert proc.stderr == ""  # quiet when stderr is not a terminal
    results_a = sorted((study / "a" / "runs").glob("*/*/result.json"))
    assert len(results_a) == 9
    for path in results_a:
        twin = study / "b" / path.relative_to(study / "a")
        assert path.read_bytes() == twin.read_bytes()
        for name in ("scenario.json", "manifest.json"):
            assert (path.parent / name).read_bytes() == (twin.parent / name).read_bytes()
    for name in ("plan.json", "conditions.json", "audit.json"):
        assert (study / "a" / name).read_bytes() == (study / "b" / name).read_bytes()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a shell")
def test_console_script_reports_bad_input_without_traceback(study: Path) -> None:
    exe = Path(sys.executable).with_name("simreport")
    if not exe.exists():
        pytest.skip("console script not installed")
    (study / "bad.yaml").write_text(PLAN + "bogus: 1\n")
    proc = subprocess.run(
        [str(exe), "audit", str(study / "bad.yaml")],
        capture_output=True,
        text=True,
        cwd=study,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (study / "results").exists()


def test_model_and_base_url_overrides(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = study / "out"
    assert main(["audit", str(study / "audit.yaml"), "--out", str(out), "--model", "tiny-x"]) == 0
    manifest = json.loads((out / "runs" / "base" / "0" / "manifest.json").read_text())
    assert manifest["model"] == "tiny-x"
    audit = json.loads((out / "audit.json").read_text())
    assert audit["options"]["llmOverride"] == {"model": "tiny-x"}
    assert "tiny-x" in (out / "report.html").read_text()
    capsys.readouterr()
    (study / "models.yaml").write_text(PLAN + "models: [offline-small, offline-large]\n")
    error = _fail(
        capsys, ["audit", str(study / "models.yaml"), "--out", str(study / "m"), "--model", "x"]
    )
    assert (error.file, error.path) == (str(study / "models.yaml"), "models")
    assert not (study / "m").exists()


def test_model_override_refused_when_an_axis_varies_the_model(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (study / "d1.yaml").write_text(
        "baseScenario: scenario.yaml\naxes:\n  - {template: model_substrate, levels: [m-x, m-y]}\n"
    )
    error = _fail(
        capsys, ["audit", str(study / "d1.yaml"), "--out", str(study / "o"), "--model", "m-z"]
    )
    assert (error.file, error.path) == (str(study / "d1.yaml"), "axes.0.target")
    assert error.expected is not None and "llm.model" in error.expected
    assert not (study / "o").exists()
