"""External simulators (SPEC §5a): a valid result, a non-zero exit, garbage, a timeout."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from simreport.kernel import run_scenario, validate_scenario

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _scenario(script: str, timeout: float = 30.0, rate: float = 0.5):  # type: ignore[no-untyped-def]
    return validate_scenario(
        {
            "simulator": {
                "command": ["python3", script],
                "timeoutSeconds": timeout,
                "metrics": ["hitRate"],
                "distributions": ["outcome"],
            },
            "params": {"rate": rate},
            "seed": 7,
            "seedPath": [7, 2],
        }
    )


def test_valid_result_is_read_and_relabelled(tmp_path: Path) -> None:
    result = run_scenario(
        _scenario("sim_ok.py"),
        tmp_path / "run",
        condition="rate=0.5",
        replication=2,
        asset_root=FIXTURES,
    )
    assert result.failure is None
    assert result.condition == "rate=0.5" and result.replication == 2
    assert result.seed_path == [7, 2]
    assert 0 <= result.metrics["hitRate"] <= 1
    assert sum(result.distributions["outcome"].values()) == 100
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert set(manifest["assets"]) == {"sim_ok.py"}
    assert len(manifest["assets"]["sim_ok.py"]) == 64
    again = run_scenario(
        _scenario("sim_ok.py"),
        tmp_path / "again",
        condition="rate=0.5",
        replication=2,
        asset_root=FIXTURES,
    )
    assert again.metrics == result.metrics  # same seed lineage, same seed passed


def test_nonzero_exit_becomes_a_failed_run_with_stderr_tail(tmp_path: Path) -> None:
    result = run_scenario(_scenario("sim_fail.py"), tmp_path / "run", asset_root=FIXTURES)
    assert result.status.execution == "crashed"
    assert result.failure is not None
    assert result.failure.type == "SimulatorFailed"
    assert "status 4" in result.failure.message
    assert "network file is corrupt" in result.failure.message
    assert (tmp_path / "run" / "result.json").exists()


def test_garbage_result_becomes_a_failed_run(tmp_path: Path) -> None:
    result = run_scenario(_scenario("sim_garbage.py"), tmp_path / "run", asset_root=FIXTURES)
    assert result.failure is not None
    assert result.failure.type == "SimulatorInvalidResult"
    assert "not valid JSON" in result.failure.message


def test_invalid_contract_becomes_a_failed_run(tmp_path: Path) -> None:
    script = tmp_path / "sim_bad_shape.py"
    script.write_text(
        "import argparse, json, pathlib\n"
        "p = argparse.ArgumentParser()\n"
        "[p.add_argument(a) for a in ('--config', '--seed', '--out')]\n"
        "a = p.parse_args()\n"
        "bad = {'metrics': {'hitRate': 'lots'}}\n"
        "pathlib.Path(a.out, 'result.json').write_text(json.dumps(bad))\n"
    )
    result = run_scenario(_scenario("sim_bad_shape.py"), tmp_path / "run", asset_root=tmp_path)
    assert result.failure is not None
    assert result.failure.type == "SimulatorInvalidResult"
    assert "invalid at" in result.failure.message


def test_timeout_becomes_a_failed_run(tmp_path: Path) -> None:
    result = run_scenario(
        _scenario("sim_slow.py", timeout=0.5), tmp_path / "run", asset_root=FIXTURES
    )
    assert result.failure is not None
    assert result.failure.type == "SimulatorTimeout"


def test_missing_command_becomes_a_failed_run(tmp_path: Path) -> None:
    scenario = validate_scenario({"simulator": {"command": ["no-such-simulator-here"]}})
    result = run_scenario(scenario, tmp_path / "run", asset_root=tmp_path)
    assert result.failure is not None
    assert result.failure.type == "SimulatorNotFound"


@pytest.mark.skipif(shutil.which("python3") is None, reason="needs python3 on PATH")
def test_missing_declared_metric_is_invalid(tmp_path: Path) -> None:
    scenario = validate_scenario(
        {"simulator": {"command": ["python3", "sim_ok.py"], "metrics": ["hitRate", "absent"]}}
    )
    result = run_scenario(scenario, tmp_path / "run", asset_root=FIXTURES)
    assert result.failure is not None
    assert "absent" in result.failure.message


def test_the_run_store_notices_a_changed_simulator(tmp_path: Path) -> None:
    """A simulator's files are part of a run's identity: edit the script and stored runs no
    longer stand in for new ones."""
    from simreport.harness import RunStore, load_plan, run_audit

    shutil.copy(FIXTURES / "sim_ok.py", tmp_path / "sim.py")
    (tmp_path / "audit.yaml").write_text(
        "base:\n"
        "  simulator: {command: [python3, sim.py], metrics: [hitRate]}\n"
        "  params: {rate: 0.5}\n"
        "replications: 2\n"
        "metrics: [hitRate]\n"
    )
    store = RunStore(tmp_path / "store")
    first = run_audit(load_plan(tmp_path / "audit.yaml"), tmp_path / "a", store=store)
    again = run_audit(load_plan(tmp_path / "audit.yaml"), tmp_path / "b", store=store)
    assert [r.metrics for *_, r in again.results] == [r.metrics for *_, r in first.results]
    script = (tmp_path / "sim.py").read_text()
    (tmp_path / "sim.py").write_text(
        script.replace('"hitRate": hits / 100', '"hitRate": 100 + hits / 100')
    )
    changed = run_audit(load_plan(tmp_path / "audit.yaml"), tmp_path / "c", store=store)
    assert all(r.metrics["hitRate"] > 99 for *_, r in changed.results)


def test_an_audit_whose_runs_all_failed_still_analyses_and_reports(tmp_path: Path) -> None:
    """No run reports anything: the declared metrics are still compared (with notes), and the
    report renders even without figure files drawn by a workflow."""
    from simreport.analysis.audit import analyse_dir
    from simreport.harness import load_plan, run_audit
    from simreport.report import write_report

    shutil.copy(FIXTURES / "sim_fail.py", tmp_path / "sim.py")
    (tmp_path / "audit.yaml").write_text(
        "base:\n"
        "  simulator: {command: [python3, sim.py], metrics: [hitRate, missRate]}\n"
        "replications: 2\n"
    )
    run_audit(load_plan(tmp_path / "audit.yaml"), tmp_path / "out")
    audit = analyse_dir(tmp_path / "out")
    assert audit["metrics"] == ["hitRate", "missRate"]
    assert audit["summary"]["failed"] == 2
    # Only the base: no test row, and a note that says why.
    assert audit["summary"]["conditions"] == 1 and audit["tests"]["hitRate"] == []
    assert audit["notes"]["hitRate"]
    report = write_report(tmp_path / "out", draw_figures=False)
    assert "hitRate" in report.read_text()
