"""The testbed's acceptance cases through the command line: scenario files written next to the
example's asset library, run with `simreport run` and audited with `simreport audit`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from simreport.cli import main
from simreport.core.errors import EXIT_OK, EXIT_RUN_FAILED
from simreport.kernel.testbed.records import read_records
from simreport.kernel.testbed.replay_records import compare_records

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "desk"
    shutil.copytree(EXAMPLE, root)
    return root


def scenario_file(folder: Path, name: str, edit: Any = None) -> Path:
    doc = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text(encoding="utf-8"))
    if edit is not None:
        edit(doc)
    path = folder / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def result(out: Path) -> dict[str, Any]:
    return json.loads((out / "result.json").read_text(encoding="utf-8"))


def test_cli_runs_of_one_manifest_align(folder: Path, tmp_path: Path) -> None:
    path = scenario_file(folder, "same.yaml")
    for name in ("a", "b"):
        assert main(["run", str(path), "--out", str(tmp_path / name)]) == EXIT_OK
    report = compare_records(
        read_records(tmp_path / "a" / "records.jsonl"),
        read_records(tmp_path / "b" / "records.jsonl"),
    )
    assert report.ok, report.summary()


def test_cli_missing_agent_version_fails_in_loading(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(doc: dict[str, Any]) -> None:
        doc["sut"]["agent"] = "refund-agent@3.0.0"

    path = scenario_file(folder, "missing.yaml", missing)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == EXIT_RUN_FAILED
    assert "loading: manifest_unresolved" in capsys.readouterr().err
    doc = result(tmp_path / "out")
    assert doc["cost"]["llmCalls"] == 0
    assert doc["integrity"]["counters"]["agentCalls"] == 0


def test_cli_boundary_violation_is_refused(folder: Path, tmp_path: Path) -> None:
    def scripted(doc: dict[str, Any]) -> None:
        doc["interaction"]["toolCallScript"] = ["create_refund"]

    path = scenario_file(folder, "scripted.yaml", scripted)
    assert main(["run", str(path), "--out", str(tmp_path / "out")]) == EXIT_RUN_FAILED
    failure = result(tmp_path / "out")["failure"]
    assert (failure["stage"], failure["type"]) == ("loading", "sut_boundary_replaced")


def test_cli_audit_keeps_a_never_hitting_fault_out_of_the_statistics(
    folder: Path, tmp_path: Path
) -> None:
    def late(doc: dict[str, Any]) -> None:
        doc["events"]["triggers"][0]["at"] = {"call": 9}

    scenario_file(folder, "late.yaml", late)
    plan = folder / "late-audit.yaml"
    plan.write_text(
        yaml.safe_dump(
            {
                "baseScenario": "late.yaml",
                "replications": 2,
                "metrics": ["duplicateRefunds", "acceptedAndSatisfied"],
                "axes": [
                    {
                        "template": "model_substrate",
                        "levels": ["offline-large"],
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    out = tmp_path / "audit"
    assert main(["audit", str(plan), "--out", str(out)]) == EXIT_OK
    audit = json.loads((out / "audit.json").read_text(encoding="utf-8"))
    assert audit["summary"]["used"] == 0 and audit["summary"]["excluded"] == 4
    assert all(run["status"]["validity"] == "violated" for run in audit["runs"])
    assert audit["testbed"]["validityExcluded"] == 4
    assert "Excluded (validity)" in (out / "report.html").read_text(encoding="utf-8")
