"""Bad overrides, oversized plans and a refusing environment are stopped before anything runs:
exit code 2, one line naming the option or file and what was expected, and nothing written."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import simreport
from simreport.cli import main
from simreport.core.errors import (
    EnvironmentProblem,
    InputError,
    PlanError,
    SimreportError,
    TooManyRuns,
)
from simreport.harness import conditions
from simreport.harness.plan import DEFAULT_MAX_RUNS, SITE_NAMES, worker_limit
from simreport.workflow import load_workflow
from tests.support.refusals import refused
from tests.support.studies import PLAN, plan_text, scenario_text, write_study
from tests.support.workflow_copy import copy_workflow

ROOT = Path(__file__).resolve().parents[2]
HUGE = 1_000_000_000_000

SCENARIO = scenario_text(steps=2, n=2)

# 3 conditions (the base and two framings) × 2 replications = 6 runs.


@pytest.fixture
def study(tmp_path: Path) -> Path:
    return write_study(tmp_path / "study", SCENARIO).folder


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> SimreportError:
    refusal = refused(capsys, argv)
    assert refusal.code == 2, refusal.line
    return refusal.error


def _nothing_written(out: Path) -> None:
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))


# --------------------------------------------------------------------------- bad overrides


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--provider", "skynet", "openai"),
        ("--base-url", "not a url", "http://"),
        ("--base-url", "http://", "http://"),
    ],
)
@pytest.mark.parametrize("command", ["audit", "run"])
def test_bad_override_options_are_refused_before_any_run(
    study: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    option: str,
    value: str,
    expected: str,
) -> None:
    out = study / "out"
    source = "audit.yaml" if command == "audit" else "scenario.yaml"
    error = _refused(capsys, [command, str(study / source), "--out", str(out), option, value])
    assert (type(error), error.file, error.path) == (InputError, None, option)
    assert error.expected is not None and expected in error.expected
    _nothing_written(out)


def test_credentials_in_a_bad_base_url_are_not_shown(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = study / "out"
    argv = ["audit", str(study / "audit.yaml"), "--out", str(out)]
    error = _refused(capsys, [*argv, "--base-url", "htp://user:hunter2@example.org/v1"])
    assert "hunter2" not in error.one_line() and error.path == "--base-url"


def test_bad_overrides_through_the_python_api(study: Path) -> None:
    out = study / "out"
    with pytest.raises(InputError) as caught:
        simreport.audit(study / "audit.yaml", out, provider="skynet")
    assert caught.value.path == "provider" and "skynet" in caught.value.message
    with pytest.raises(InputError) as caught:
        simreport.audit(study / "audit.yaml", out, base_url="not a url")
    assert caught.value.path == "base_url"
    with pytest.raises(InputError) as caught:
        simreport.run(study / "scenario.yaml", out, provider="skynet")
    assert caught.value.path == "provider"
    with pytest.raises(InputError) as caught:
        simreport.run(study / "scenario.yaml", out, base_url="ftp://example.org")
    assert caught.value.path == "base_url"
    _nothing_written(out)


def test_bad_overrides_through_the_mcp_tool(study: Path, tmp_path: Path) -> None:
    from anyio.from_thread import start_blocking_portal
    from mcp.types import CallToolResult, TextContent

    from simreport.mcp_server import build_server

    results = tmp_path / "results"
    server = build_server(results)
    cases = [{"provider": "skynet"}, {"base_url": "not a url"}]
    for arguments in cases:
        with start_blocking_portal() as portal:
            result = portal.call(
                server.call_tool, "run_audit", {"plan": str(study / "audit.yaml"), **arguments}
            )
        assert isinstance(result, CallToolResult)
        assert result.is_error
        text = "".join(b.text for b in result.content if isinstance(b, TextContent))
        assert text.startswith(f"{next(iter(arguments))}: "), text
        assert "internal error" not in text
    _nothing_written(results)


WORKFLOW_PLAN = "examples/prisoners_dilemma/audit.yaml"


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"provider": "skynet"}, "provider"),
        ({"baseUrl": "not a url"}, "baseUrl"),
        (
            {"overrides": {"prisoners_dilemma": {"provider": "skynet"}}},
            "overrides.prisoners_dilemma.provider",
        ),
        (
            {"overrides": {"prisoners_dilemma": {"baseUrl": "x"}}},
            "overrides.prisoners_dilemma.baseUrl",
        ),
    ],
)
def test_bad_overrides_in_the_workflow_config(
    tmp_path: Path, config: dict[str, Any], path: str
) -> None:
    results = tmp_path / "results"
    with pytest.raises(InputError) as caught:
        load_workflow({"plans": [WORKFLOW_PLAN], "results": str(results), **config}, ROOT)
    line = caught.value.one_line()
    assert line.startswith(f"config/config.yaml: {path}: "), line
    _nothing_written(results)


def test_overrides_for_an_unknown_plan_id_are_refused() -> None:
    config = {"plans": [WORKFLOW_PLAN], "overrides": {"prisoners_dilema": {"replications": 2}}}
    with pytest.raises(InputError) as caught:
        load_workflow(config, ROOT)
    assert caught.value.path == "overrides.prisoners_dilema"
    assert caught.value.expected is not None and "prisoners_dilemma" in caught.value.expected


def test_per_plan_override_keys_are_checked() -> None:
    config = {"plans": [WORKFLOW_PLAN], "overrides": {"prisoners_dilemma": {"replicatons": 2}}}
    with pytest.raises(InputError) as caught:
        load_workflow(config, ROOT)
    assert caught.value.path == "overrides.prisoners_dilemma.replicatons"


# --------------------------------------------------------------------------- plan ids


@pytest.mark.parametrize("plan_id", [*SITE_NAMES, "Index.HTML", "nul", "x" * 101])
def test_plan_ids_the_site_or_a_filesystem_cannot_hold_are_refused(
    study: Path, capsys: pytest.CaptureFixture[str], plan_id: str
) -> None:
    (study / "audit.yaml").write_text(f"id: {plan_id}\n{PLAN}")
    out = study / "out"
    error = _refused(capsys, ["audit", str(study / "audit.yaml"), "--out", str(out)])
    assert type(error) is PlanError
    assert (error.file, error.line, error.path) == (str(study / "audit.yaml"), 1, "id")
    _nothing_written(out)


def test_a_plan_id_taken_from_the_folder_name_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = write_study(tmp_path / "assets", SCENARIO)
    error = _refused(capsys, ["validate", str(study.plan)])
    # The plan has no `id` line: the id is the folder's name, and the hint says to give one.
    assert type(error) is PlanError and (error.file, error.path) == (str(study.plan), "id")
    assert error.line is None and "'assets'" in error.message
    assert error.expected is not None and "`id`" in error.expected


# --------------------------------------------------------------------------- run limits


def _forbid_building(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building any condition fails the test: a refusal of a plan too large must come from
    counting its runs, never from making them (a run is a condition's replication). How long a
    refusal takes is bench/bench_refusals.py's measure."""

    def built(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a condition was built before the plan's size was refused")

    monkeypatch.setattr(conditions, "Condition", built)


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    _forbid_building(monkeypatch)


@pytest.mark.usefixtures("nothing_built")
def test_huge_replications_in_the_plan_are_refused_before_anything_is_built(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = study / "audit.yaml"
    plan.write_text(plan_text(replications=HUGE))
    out = study / "out"
    error = _refused(capsys, ["audit", str(plan), "--out", str(out)])
    assert isinstance(error, TooManyRuns)
    assert (error.file, error.line, error.path) == (str(plan), 2, "replications")
    assert (error.conditions, error.replications, error.runs) == (3, HUGE, 3 * HUGE)
    assert error.limit == DEFAULT_MAX_RUNS
    assert error.expected is not None and "--max-runs" in error.expected
    assert "maxRuns" in error.expected
    _nothing_written(out)
    for command in ("validate", "conditions"):
        _refused(capsys, [command, str(plan)])


@pytest.mark.usefixtures("nothing_built")
def test_huge_replications_option_is_refused_before_anything_is_built(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = study / "out"
    argv = ["audit", str(study / "audit.yaml"), "--out", str(out), "--replications", str(HUGE)]
    error = _refused(capsys, argv)
    assert isinstance(error, TooManyRuns) and error.runs == 3 * HUGE
    _nothing_written(out)


@pytest.mark.usefixtures("nothing_built")
def test_conditions_are_counted_without_building_them(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 12 factorial axes of 10 levels: 10^12 conditions, which must never be materialised.
    axes = "".join(
        f"  - {{id: a{i}, level: micro, kind: design, dimension: d, "
        f"target: params.memoryWindow, levels: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}}\n"
        for i in range(12)
    )
    plan = study / "audit.yaml"
    plan.write_text(
        "baseScenario: scenario.yaml\ndesign: full_factorial\nreplications: 1\naxes:\n" + axes
    )
    error = _refused(capsys, ["conditions", str(plan)])
    assert isinstance(error, TooManyRuns) and error.path == "axes"
    assert (error.conditions, error.replications) == (10**12 + 1, 1)


def test_max_runs_raises_the_limit(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = str(study / "audit.yaml")
    out = study / "out"
    error = _refused(capsys, ["audit", plan, "--out", str(out), "--max-runs", "5"])
    assert isinstance(error, TooManyRuns) and (error.runs, error.limit) == (6, 5)
    _nothing_written(out)
    assert main(["conditions", plan, "--max-runs", "6"]) == 0
    assert "= 6 runs" in capsys.readouterr().out
    assert main(["validate", plan, "--max-runs", "6"]) == 0
    assert main(["audit", plan, "--out", str(out), "--max-runs", "6"]) == 0
    assert "6 runs in" in capsys.readouterr().out
    assert (out / "audit.json").is_file()


def test_max_runs_must_be_positive(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["conditions", str(study / "audit.yaml"), "--max-runs", "0"])
    assert caught.value.code == 2
    assert "--max-runs" in capsys.readouterr().err


def test_huge_replications_in_the_workflow_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results"
    config: dict[str, Any] = {"plans": [WORKFLOW_PLAN], "results": str(results)}
    with monkeypatch.context() as patched:
        _forbid_building(patched)
        with pytest.raises(TooManyRuns) as caught:
            load_workflow({**config, "replications": HUGE}, ROOT)
        assert (caught.value.replications, caught.value.limit) == (HUGE, DEFAULT_MAX_RUNS)
        overrides = {"prisoners_dilemma": {"replications": HUGE}}
        with pytest.raises(TooManyRuns) as caught:
            load_workflow({**config, "overrides": overrides}, ROOT)
        assert (caught.value.replications, caught.value.limit) == (HUGE, DEFAULT_MAX_RUNS)
    # maxRuns raises the limit; below the plan's size it refuses.
    with pytest.raises(TooManyRuns) as caught:
        load_workflow({**config, "maxRuns": 149}, ROOT)
    assert (caught.value.runs, caught.value.limit) == (150, 149)
    plan = load_workflow({**config, "maxRuns": 150}, ROOT).plan("prisoners_dilemma")
    assert len(plan.results) == 150
    per_plan = {"prisoners_dilemma": {"maxRuns": 150}}
    assert load_workflow({**config, "maxRuns": 1, "overrides": per_plan}, ROOT).plans
    _nothing_written(results)


SNAKEMAKE = Path(sys.executable).parent / "snakemake"


@pytest.mark.slow
@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed next to python")
def test_snakemake_refuses_huge_replications_before_any_job(tmp_path: Path) -> None:
    # The tests' own config: the user's config/config.yaml plans are never read.
    copy_workflow(tmp_path, {"plans": [WORKFLOW_PLAN]}, examples=True)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [str(SNAKEMAKE), "-n", "--cores", "1", "--config", f"replications={HUGE}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    # The refusal's line names the file, line and dotted path, and the counts against the limit.
    place = "examples/prisoners_dilemma/audit.yaml:5: replications: "
    refusal = next((x for x in out.splitlines() if place in x), None)
    assert refusal is not None, out
    counts = {"15", str(HUGE), str(15 * HUGE), str(DEFAULT_MAX_RUNS)}
    assert counts <= _numbers(refusal.split(place, 1)[1]), refusal
    assert not (tmp_path / "results").exists()


# --------------------------------------------------------------------------- concurrency


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+", text))


def _notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("simreport: note: ")]


def test_concurrency_beyond_the_limit_is_capped_with_a_note(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = study / "out"
    limit = worker_limit()
    argv = ["audit", str(study / "audit.yaml"), "--out", str(out), "--concurrency", "100000"]
    assert main(argv) == 0
    [note] = _notes(capsys.readouterr().err)
    assert "concurrency" in note and {"100000", str(limit)} <= _numbers(note)


def test_concurrency_in_the_plan_is_capped_too(study: Path) -> None:
    (study / "audit.yaml").write_text(PLAN + "concurrency: 100000\n")
    notes: list[str] = []
    simreport.audit(study / "audit.yaml", study / "out", notify=notes.append, analyse=False)
    [note] = notes
    assert "concurrency" in note and {"100000", str(worker_limit())} <= _numbers(note)


@pytest.mark.parametrize("value", ["0", "-3"])
def test_concurrency_below_one_is_an_input_error(
    study: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    out = study / "out"
    error = _refused(
        capsys, ["audit", str(study / "audit.yaml"), "--out", str(out), "--concurrency", value]
    )
    assert error.path == "concurrency"
    _nothing_written(out)


def test_harness_concurrency_below_one_is_an_input_error(study: Path) -> None:
    from simreport.harness import load_plan, run_audit

    loaded = load_plan(study / "audit.yaml")
    with pytest.raises(InputError) as caught:
        run_audit(loaded, study / "out", concurrency=0)
    assert caught.value.path == "concurrency"
    _nothing_written(study / "out")


def test_workflow_workers_are_checked_and_capped(capsys: pytest.CaptureFixture[str]) -> None:
    config = {"plans": [WORKFLOW_PLAN]}
    with pytest.raises(InputError) as caught:
        load_workflow({**config, "workers": 0}, ROOT)
    assert (caught.value.file, caught.value.path) == ("config/config.yaml", "workers")
    assert load_workflow({**config, "workers": 10**6}, ROOT).workers == worker_limit()
    [note] = _notes(capsys.readouterr().err)
    assert "workers" in note and {"1000000", str(worker_limit())} <= _numbers(note)


# --------------------------------------------------------------------------- the environment


def test_out_that_cannot_be_a_folder(study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan, scenario = str(study / "audit.yaml"), str(study / "scenario.yaml")
    a_file = study / "a-file"
    a_file.write_text("not a folder")
    for argv in (["audit", plan, "--out", ""], ["run", scenario, "--out", ""]):
        error = _refused(capsys, argv)
        assert (error.file, error.path) == (None, "--out")
    error = _refused(capsys, ["audit", plan, "--out", str(a_file)])
    assert (error.file, error.path) == (str(a_file), None)
    for argv in (
        ["audit", plan, "--out", str(a_file / "sub")],
        ["run", scenario, "--out", str(a_file / "sub")],
        ["site", str(study), "--out", str(a_file / "site")],
    ):
        error = _refused(capsys, argv)
        # The folder asked for, and the file in its way.
        assert error.file == argv[-1] and error.message.startswith(f"{a_file} ")
    assert a_file.read_text() == "not a folder"
    assert sorted(p.name for p in study.iterdir()) == ["a-file", "audit.yaml", "scenario.yaml"]


def test_out_empty_through_the_python_api(study: Path) -> None:
    with pytest.raises(InputError) as caught:
        simreport.audit(study / "audit.yaml", "")
    assert (caught.value.file, caught.value.path) == (None, "out")


def test_a_full_disk_is_an_environment_problem_with_the_path(
    study: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: str | Path, data: Any, **_: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    # The atomic writer as the harness holds it (it was imported by name).
    monkeypatch.setattr("simreport.harness.runner.write_atomic", full)
    out = study / "out"
    error = _refused(capsys, ["audit", str(study / "audit.yaml"), "--out", str(out)])
    assert isinstance(error, EnvironmentProblem) and error.errno == errno.ENOSPC
    assert (error.file, error.path) == (str(out / "plan.json"), None)


def test_a_full_disk_without_a_file_name_names_the_output(
    study: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: Any, **__: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a failing write() reports it

    monkeypatch.setattr("simreport.harness.runner.write_atomic", full)
    out = study / "out"
    error = _refused(capsys, ["audit", str(study / "audit.yaml"), "--out", str(out)])
    assert isinstance(error, EnvironmentProblem) and error.errno == errno.ENOSPC
    assert error.file is None and str(out) in error.message


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOTDIR])
def test_report_and_analyse_report_a_refusing_folder(
    study: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    code: int,
) -> None:
    out = study / "out"
    assert main(["audit", str(study / "audit.yaml"), "--out", str(out)]) == 0
    capsys.readouterr()

    def refuse(path: str | Path, data: Any, **_: Any) -> None:
        raise OSError(code, os.strerror(code), str(path))

    # Tests may run as root, which permission bits do not stop: the refusal is simulated in the
    # atomic writer, where report.html and audit.json are written.
    monkeypatch.setattr("simreport.report.html.write_atomic", refuse)
    monkeypatch.setattr("simreport.core.files.write_atomic", refuse)
    error = _refused(capsys, ["report", str(out)])
    assert isinstance(error, EnvironmentProblem) and error.errno == code
    assert error.file is not None and error.file.startswith(f"{out}{os.sep}")
    error = _refused(capsys, ["analyse", str(out)])
    assert isinstance(error, EnvironmentProblem) and error.errno == code
    assert error.file == str(out / "audit.json")


@pytest.mark.skipif(not Path("/sys").is_dir(), reason="needs a /sys that refuses new folders")
def test_a_real_refusal_from_the_operating_system(
    study: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # sysfs refuses new folders even to root (EPERM or EROFS, depending on how it is mounted):
    # a real refusal, no monkeypatching.
    target = Path("/sys/simreport-cannot-write-here")
    if target.exists():
        pytest.skip("the target unexpectedly exists")
    error = _refused(capsys, ["run", str(study / "scenario.yaml"), "--out", str(target)])
    assert str(target) in error.one_line()


def test_errors_that_are_bugs_stay_internal_errors() -> None:
    assert EnvironmentProblem.from_os_error(OSError(errno.EBADF, "bad file descriptor")) is None
    problem = EnvironmentProblem.from_os_error(OSError(errno.EDQUOT, "quota", "/x/y"))
    assert problem is not None and problem.exit_code == 2
    assert (problem.errno, problem.file, problem.path) == (errno.EDQUOT, "/x/y", None)
    assert problem.one_line().startswith("/x/y: ")


def test_a_full_disk_during_an_atomic_write_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OS reports ENOSPC on write() without a file name; the writer adds the target's."""
    from simreport.core import files

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    target = tmp_path / "audit.json"
    with pytest.raises(OSError) as caught:
        files.write_atomic(target, "{}")
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind
