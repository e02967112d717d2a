"""The workflow in daily operation (SPEC §12): failed runs are reported and retried exactly, a
deleted or damaged result.json is put back before it is counted, condition jobs log their runs
as they end, the terminal stays short, and `--config` values keep their types."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from simreport.workflow import failure_lines, retry_token, retype_command_line
from tests.support.llm_server import FakeLLM, Reply
from tests.support.workflow_copy import copy_workflow, write_config

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SNAKEMAKE = BIN / "snakemake"

needs_snakemake = pytest.mark.skipif(
    not SNAKEMAKE.exists(), reason="snakemake is not installed next to python"
)

SCENARIO: dict[str, Any] = {
    "world": "prisoners_dilemma",
    "steps": 2,
    "seed": 7,
    "population": {"n": 2},
    "params": {"framing": "neutral", "memoryWindow": 2},
}
PLAN = {
    "baseScenario": "scenario.yaml",
    "replications": 2,
    "axes": [{"template": "linguistic_framing", "levels": ["moralised"]}],
}
CONDITIONS = {"base": "base", "linguistic_framing=moralised": "linguistic_framing=moralised"}


# --------------------------------------------------------------------------- without Snakemake


def test_retry_token_moves_once_per_build_while_runs_are_pending() -> None:
    assert retry_token({}) == 0
    assert retry_token({"generation": 0, "pending": [1, 2]}) == 1
    # The retry ran as generation 1 and fixed everything: the token stays 1.
    assert retry_token({"generation": 1, "pending": []}) == 1
    assert retry_token({"generation": 1, "pending": [2]}) == 2
    assert retry_token({"generation": "x", "pending": []}) == 0
    # A result.json deleted since the last job: once more, like a failure.
    assert retry_token({"generation": 1, "pending": []}, deleted=True) == 2


def test_failure_lines_one_per_class() -> None:
    from simreport.core.schema import RunResult

    def failed(kind: str, message: str) -> RunResult:
        return RunResult.model_validate(
            {
                "condition": "base",
                "replication": 0,
                "seedPath": [0],
                "integrity": {"complete": False, "counters": {}},
                "status": {
                    "execution": "crashed",
                    "validity": "unchecked",
                    "evidence": "unchecked",
                },
                "failure": {"stage": "running", "type": kind, "message": message},
            }
        )

    reasons = {
        0: failed("ConnectionFailed", "no route"),
        1: failed("Timeout", "slow"),
        2: failed("ConnectionFailed", "refused"),
        3: None,
    }
    assert failure_lines(reasons, 10) == [
        "2 of 10 runs failed: ConnectionFailed ×2 (no route)",
        "1 of 10 runs are missing: Missing ×1 (no result.json)",
        "1 of 10 runs failed: Timeout ×1 (slow)",
    ]


def test_command_line_config_values_get_their_types_back() -> None:
    # What Snakemake hands over for `--config failOnRunFailure=true verbose=false
    # overrides='{study: {replications: 5, includeIncomplete: true}}' title=2024`.
    config: dict[str, Any] = {
        "failOnRunFailure": "true",
        "verbose": "false",
        "overrides": {"study": {"replications": "5", "includeIncomplete": "true"}},
        "title": "2024",
        "provider": "offline",
    }
    retype_command_line(config)
    assert config == {
        "failOnRunFailure": True,
        "verbose": False,
        "overrides": {"study": {"replications": 5, "includeIncomplete": True}},
        "title": "2024",
        "provider": "offline",
    }


# --------------------------------------------------------------------------- with Snakemake


class SwitchableLLM(FakeLLM):
    """The loopback model server; while `failing`, it drops every connection half way through
    its answer, as an endpoint going away does."""

    failing = False
    failed_calls = 0
    status = 200
    """While failing: 200 drops the connection mid-answer; any other status is answered as is."""

    def _respond(self, body: dict[str, Any]) -> Any:
        if self.failing:
            with self._lock:
                self.failed_calls += 1
            if self.status != 200:
                return self.status, {}, b'{"error": "unavailable"}', Reply(status=self.status)
            return 200, {}, json.dumps({"choices": []}).encode(), Reply(truncate=True)
        return super()._respond(body)


def _workspace(tmp: Path, llm: dict[str, Any] | None = None, **config: Any) -> Path:
    """A copy of the workflow with one small plan of its own (never the user's config plans)."""
    dest = copy_workflow(tmp / "flow", {})
    study = dest / "study"
    study.mkdir()
    scenario = dict(SCENARIO, llm=llm or {"provider": "offline", "model": "offline-small"})
    (study / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    (study / "audit.yaml").write_text(yaml.safe_dump(PLAN))
    _config(dest, plans=["study/audit.yaml"], **config)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline workspace after its first build, made once for the module's tests that
    start from a finished build. Tests must not change it: `_built_copy` first."""
    dest = _workspace(tmp_path_factory.mktemp("built"))
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    return dest


def _built_copy(built: Path, tmp: Path) -> Path:
    """A copy of the built workspace that Snakemake finds up to date: files keep their times,
    and nothing in .snakemake/ or results/ names the folder."""
    dest = tmp / "flow"
    shutil.copytree(built, dest, symlinks=True)
    return dest


def _config(dest: Path, **values: Any) -> None:
    write_config(dest, values)


def _snakemake(dest: Path, *args: str) -> tuple[int, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(dest),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "SIMREPORT_CACHE_DIR": str(dest / "cache"),
        "SIMREPORT_CACHE_MODE": "live",
        "SIMREPORT_LLM_BACKOFF_SECONDS": "0.01",
    }
    proc = subprocess.run(
        [str(SNAKEMAKE), "--cores", "2", *args],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _summary(dest: Path, condition: str) -> dict[str, str]:
    """The counts on the last line of a condition job's log."""
    log = dest / "results" / "study" / "logs" / "runs" / f"{CONDITIONS[condition]}.log"
    last = log.read_text().strip().splitlines()[-1]
    name, counts = last.rsplit(": ", 1)
    assert name == condition
    return dict(part.split("=", 1) for part in counts.split())


def _state(dest: Path, condition: str) -> dict[str, Any]:
    path = dest / "results" / "study" / "state" / f"{CONDITIONS[condition]}.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
@needs_snakemake
def test_failed_runs_are_reported_then_retried_exactly(tmp_path: Path) -> None:
    with SwitchableLLM(answer="hash") as server:
        llm = {"provider": "openai", "baseUrl": server.url, "model": "test"}
        dest = _workspace(tmp_path, llm)
        # Two replications per condition finish and are stored.
        code, out = _snakemake(dest)
        assert code == 0, out[-3000:]
        calls_for_two_runs = server.calls
        assert calls_for_two_runs > 0

        # Four replications while the model is down: two per condition come from the store,
        # two fail. With failOnRunFailure the build fails, naming plan, condition and reason.
        server.failing = True
        _config(dest, plans=["study/audit.yaml"], replications=4, failOnRunFailure=True)
        code, out = _snakemake(dest)
        assert code != 0, out[-3000:]
        assert "simreport error" in out, out[-3000:]
        for condition in CONDITIONS:
            assert f"study · {condition}" in out
            assert f"logs/runs/{CONDITIONS[condition]}.log" in out
            state = _state(dest, condition)
            assert state["pending"] == [2, 3]
            assert state["failures"][0].startswith("2 of 4 runs failed: "), state
            assert state["failures"][0] in out
        assert server.failed_calls > 0

        # Without failOnRunFailure: the same failures retried once, exit 0, a warning block.
        _config(dest, plans=["study/audit.yaml"], replications=4)
        code, out = _snakemake(dest)
        assert code == 0, out[-3000:]
        assert "simreport warning" in out and "study · base" in out, out[-3000:]
        assert _summary(dest, "base") == {
            "replications": "4",
            "computed": "2",
            "fromStore": "2",
            "failed": "2",
            "process": _summary(dest, "base")["process"],
        }
        # The condition log followed each run as it ended, then one line per failure class.
        log = (dest / "results" / "study" / "logs" / "runs" / "base.log").read_text()
        failed = [line for line in log.splitlines() if line.startswith("run ")]
        assert len(failed) == 2 and failed[-1].endswith("(4 of 4 done, 2 failed so far)"), log
        # The terminal: one line per condition job, none of Snakemake's per-job blocks.
        assert "Finished jobid" not in out and "steps (" not in out, out
        assert out.count("study · base: 2 of 4 runs finished") == 1, out

        # The model is back: exactly the failed runs are computed, the rest fetched.
        server.failing = False
        server.reset_counts()
        code, out = _snakemake(dest)
        assert code == 0, out[-3000:]
        assert "simreport warning" not in out and "simreport error" not in out, out[-3000:]
        assert server.calls == calls_for_two_runs, "only the two failed runs per condition ran"
        for condition in CONDITIONS:
            counts = _summary(dest, condition)
            assert (counts["computed"], counts["fromStore"], counts["failed"]) == ("2", "2", "0")
            assert _state(dest, condition)["pending"] == []
        runs = dest / "results" / "study" / "runs"
        for path in runs.glob("*/*/result.json"):
            assert json.loads(path.read_text())["failure"] is None, path

        # Nothing is pending any more: nothing to do.
        server.reset_counts()
        code, out = _snakemake(dest)
        assert code == 0 and "Nothing to be done" in out, out[-3000:]
        assert server.calls == 0


@pytest.mark.slow
@needs_snakemake
def test_deleted_or_damaged_results_are_put_back_before_the_analysis(
    built: Path, tmp_path: Path
) -> None:
    dest = _built_copy(built, tmp_path)
    code, out = _snakemake(dest, "--dry-run")
    assert code == 0 and "Nothing to be done" in out, out[-3000:]
    audit = dest / "results" / "study" / "audit.json"
    clean = audit.read_bytes()
    runs = dest / "results" / "study" / "runs"
    originals = {p: p.read_bytes() for p in runs.glob("*/*/result.json")}
    assert len(originals) == 4

    def inodes() -> dict[Path, int]:
        return {p: p.stat().st_ino for p in originals}

    # Deleted: Snakemake sees it and reruns that condition's job alone, which copies the run
    # back from the store; nothing of the other condition is touched.
    before = inodes()
    (runs / "base" / "1" / "result.json").unlink()
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    assert (runs / "base" / "1" / "result.json").read_bytes() == originals[
        runs / "base" / "1" / "result.json"
    ]
    assert _summary(dest, "base")["fromStore"] == "2"
    other = CONDITIONS["linguistic_framing=moralised"]
    after = inodes()
    assert all(after[p] == before[p] for p in originals if p.parent.parent.name == other)
    assert audit.read_bytes() == clean

    # Damaged in place (written after its job ended): the condition's job runs again and
    # copies the run back from the verified store; nothing is computed.
    damaged = runs / other / "0" / "result.json"
    doc = json.loads(damaged.read_text())
    doc["metrics"] = {name: 12345.0 for name in doc["metrics"]}
    damaged.write_text(json.dumps(doc))
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    assert _summary(dest, "linguistic_framing=moralised")["computed"] == "0"
    assert damaged.read_bytes() == originals[damaged]
    assert audit.read_bytes() == clean

    # Damaged with its old modification time kept: the analysis checks each run's digest before
    # reading it and copies the run back from the store (the state file records the digests).
    stamp = damaged.stat()
    damaged.write_text(json.dumps(doc))
    os.utime(damaged, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    code, out = _snakemake(dest, "--forcerun", "analyse")
    assert code == 0, out[-3000:]
    assert damaged.read_bytes() == originals[damaged], out
    assert audit.read_bytes() == clean

    # Damaged, and not in the store either: it is run again.
    shutil.rmtree(dest / "results" / ".store")
    damaged.write_text(damaged.read_text().replace('"completed"', '"crashed"'))
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    assert damaged.read_bytes() == originals[damaged]
    assert audit.read_bytes() == clean

    code, out = _snakemake(dest, "--dry-run")
    assert code == 0 and "Nothing to be done" in out, out[-3000:]


@pytest.mark.slow
@needs_snakemake
def test_one_run_asked_for_by_its_path(built: Path, tmp_path: Path) -> None:
    """`snakemake results/<plan>/runs/<condition dir>/<r>/result.json` puts back that run alone:
    from the store, else by running it. The condition's state records its digest, so the next
    build reruns no condition job (and, the run being the same, no analysis either). A path
    outside the plan fails naming it."""
    dest = _built_copy(built, tmp_path)
    runs = dest / "results" / "study" / "runs"
    audit = dest / "results" / "study" / "audit.json"
    clean = audit.read_bytes()
    wanted = runs / "base" / "1" / "result.json"
    original = wanted.read_bytes()
    untouched = {p: p.stat().st_mtime_ns for p in runs.glob("*/*/result.json") if p != wanted}

    for store_too in (False, True):
        wanted.unlink()
        if store_too:
            shutil.rmtree(dest / "results" / ".store")
        code, out = _snakemake(dest, "results/study/runs/base/1/result.json")
        assert code == 0, out[-3000:]
        assert wanted.read_bytes() == original
        assert {p: p.stat().st_mtime_ns for p in untouched} == untouched
        assert (dest / "results" / "study" / "logs" / "runs" / "base.1.log").read_text() == (
            "base replication 1: finished\n"
        )
        state = _state(dest, "base")
        assert state["pending"] == [] and "1" in state["digests"]
        # The run put back is the same run: its state file says so, and nothing is to be done.
        code, out = _snakemake(dest, "--dry-run")
        assert code == 0 and "Nothing to be done" in out, out[-3000:]
        assert audit.read_bytes() == clean

    for path, expected in (
        ("results/study/runs/nowhere/0/result.json", "has no condition folder 'nowhere'"),
        ("results/study/runs/base/7/result.json", "replications 0 to 1, not 7"),
        ("results/other/runs/base/0/result.json", "no plan 'other' in the config"),
    ):
        code, out = _snakemake(dest, path)
        assert code != 0 and expected in out, out[-3000:]


@pytest.mark.slow
@needs_snakemake
def test_overrides_and_switches_from_the_command_line(tmp_path: Path) -> None:
    dest = _workspace(tmp_path)
    code, out = _snakemake(
        dest,
        "--config",
        "overrides={study: {replications: 3}}",
        "failOnRunFailure=true",
        "verbose=false",
    )
    assert code == 0, out[-3000:]
    runs = dest / "results" / "study" / "runs" / "base"
    assert sorted(p.name for p in runs.iterdir()) == ["0", "1", "2"]
    code, out = _snakemake(
        dest, "--dry-run", "--config", "overrides={elsewhere: {replications: 3}}"
    )
    assert code != 0 and "overrides.elsewhere" in out, out[-3000:]


@pytest.mark.slow
@needs_snakemake
def test_runs_that_lost_model_calls_are_retried_not_stored(tmp_path: Path) -> None:
    """A server answering 500 throughout does not crash a run: it completes with every call
    lost. Such a run is not final: it is reported, never stored, and the next build retries it."""
    with SwitchableLLM(answer="hash") as server:
        server.failing, server.status = True, 500
        llm = {"provider": "openai", "baseUrl": server.url, "model": "test"}
        dest = _workspace(tmp_path, llm)
        code, out = _snakemake(dest)
        assert code == 0, out[-3000:]
        assert "simreport warning" in out and "ModelCallsLost" in out, out[-3000:]
        for condition in CONDITIONS:
            assert _state(dest, condition)["pending"] == [0, 1]
        assert not list((dest / "results" / ".store").glob("*/*/result.json"))

        server.failing = False
        server.reset_counts()
        code, out = _snakemake(dest)
        assert code == 0 and "simreport warning" not in out, out[-3000:]
        for condition in CONDITIONS:
            counts = _summary(dest, condition)
            assert (counts["computed"], counts["failed"]) == ("2", "0")
            assert _state(dest, condition)["pending"] == []
        assert server.calls > 0


@pytest.mark.slow
@needs_snakemake
def test_a_plan_edit_shows_what_changed_in_the_report_and_the_site(
    built: Path, tmp_path: Path
) -> None:
    """Snakemake removes audit.json before the analysis reruns; the previous build is still kept,
    and the rebuilt report and site say what moved and why."""
    dest = _built_copy(built, tmp_path)
    first = (dest / "results" / "study" / "audit.json").read_bytes()
    plan = yaml.safe_load((dest / "study" / "audit.yaml").read_text())
    plan["replications"] = 3
    (dest / "study" / "audit.yaml").write_text(yaml.safe_dump(plan))
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    kept = sorted((dest / "results" / "study" / "history").glob("[0-9]*.json"))
    assert [p.read_bytes() for p in kept] == [first]
    report = (dest / "site" / "study" / "report.html").read_text()
    assert '<section id="changes"' in report
    assert "plan" in report[report.index('id="changes"') :].split("</section>")[0].lower()
    assert (dest / "site" / "study" / "history" / kept[0].name).read_bytes() == first
    # Nothing changed since: nothing to do, and no second copy.
    code, out = _snakemake(dest)
    assert code == 0 and "Nothing to be done" in out, out[-3000:]
