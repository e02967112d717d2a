"""`simreport testbed new-domain`: the folder it writes validates, runs offline (and over HTTP
when its example agent is served), and an audit of its plan reports the domain's metrics; existing
files are never replaced without --force, and a name that cannot be a domain's is refused."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simreport import api
from simreport.cli import main
from simreport.core.errors import EXIT_INPUT, EXIT_OK, InputError, WouldOverwrite
from simreport.harness.domain_scaffold import NewDomain, new_domain
from tests.cli.test_new_plan import _uncommented_keys
from tests.support.refusals import refused

NAME = "parcel-desk"
DOMAIN_METRICS = ["duplicateShipments", "resolvedAndSatisfied", "turns"]


@pytest.fixture
def written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> NewDomain:
    out = tmp_path / "desk"
    assert main(["testbed", "new-domain", NAME, "--out", str(out)]) == EXIT_OK
    assert f"wrote {out / 'scenario.yaml'}" in capsys.readouterr().out.splitlines()
    return new_domain(NAME, out=out, force=True)


def _result(run_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    return result


# --------------------------------------------------------------------------- what is written


def test_the_folder_validates_as_written_with_every_key_commented(written: NewDomain) -> None:
    folder = written.folder
    assert {p.relative_to(folder).as_posix() for p in written.files} >= {
        "scenario.yaml",
        "audit.yaml",
        "parcel_desk_agent.py",
        f"assets/{NAME}/1.0.0.yaml",
        f"assets/{NAME}-user/1.0.0.yaml",
        f"assets/{NAME}-wording/1.0.0.yaml",
        f"assets/{NAME}-agent/1.0.0.yaml",
        f"assets/{NAME}-agent-http/1.0.0.yaml",
        f"assets/{NAME}-assertions/1.0.0.yaml",
    }
    assert all(p.is_file() for p in written.files)
    assert not [p for p in written.files if "{{" in p.read_text(encoding="utf-8")]

    plan = api.validate(written.plan_file)
    assert plan.kind == "plan"
    assert plan.details["planId"] == "desk"
    assert plan.details["conditions"] == 4  # the base, two fault positions, one prompt version
    assert api.validate(written.scenario_file).details["world"] == "testbed"
    for path in (written.scenario_file, written.plan_file):
        assert _uncommented_keys(path) == [], path.name
    document = yaml.safe_load(written.plan_file.read_text(encoding="utf-8"))
    assert document["metrics"] == DOMAIN_METRICS
    assert document["primaryMetrics"] == ["duplicateShipments"]
    assert [a["target"] for a in document["axes"]] == ["events.triggers.0.position", "sut.prompt"]


def test_the_scenario_runs_offline_through_the_python_agent(
    written: NewDomain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    argv = ["run", str(written.scenario_file), "--out", str(run_dir), "--no-ledger"]
    assert main(argv) == EXIT_OK
    result = _result(run_dir)
    assert result["status"]["execution"] == "completed"
    assert result["status"]["validity"] == "valid"
    assert sorted(result["metrics"]) == DOMAIN_METRICS
    assert result["metrics"]["duplicateShipments"] == 0
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["resolved"]["sut.agent"]["name"] == f"{NAME}-agent"

    assert main(["evaluate", str(run_dir)]) == EXIT_OK
    evaluation = json.loads((run_dir / "evaluation.json").read_text(encoding="utf-8"))
    verdicts = {key: c["verdict"] for key, c in evaluation["criteria"].items()}
    assert verdicts == {
        "no_duplicate_shipment": "pass",
        "verified_before_retry": "not_applicable",
        "resolved": "pass",
    }


@pytest.fixture
def served_agent(written: NewDomain) -> Iterator[str]:
    """The example agent served over HTTP on this machine (a free port); its base URL."""
    spec = importlib.util.spec_from_file_location("scaffold_agent", written.agent_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    server = module.serve("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_the_http_agent_asset_reaches_the_served_example(
    written: NewDomain, served_agent: str, tmp_path: Path
) -> None:
    scenario = yaml.safe_load(written.scenario_file.read_text(encoding="utf-8"))
    scenario["sut"]["agent"] = f"{NAME}-agent-http@1.0.0"
    scenario["sut"]["entry"] = served_agent
    over_http = written.folder / "over-http.yaml"
    over_http.write_text(yaml.safe_dump(scenario), encoding="utf-8")

    run_dir = tmp_path / "run"
    assert main(["run", str(over_http), "--out", str(run_dir), "--no-ledger"]) == EXIT_OK
    result = _result(run_dir)
    assert result["status"]["execution"] == "completed"
    assert result["metrics"]["resolvedAndSatisfied"] == 1
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["resolved"]["sut.agent"]["name"] == f"{NAME}-agent-http"


@pytest.mark.slow
def test_an_audit_of_the_plan_reports_the_domain_s_metrics(
    written: NewDomain, tmp_path: Path
) -> None:
    audit_dir = tmp_path / "results"
    api.audit(written.plan_file, out=audit_dir, replications=1, ledger=False)

    audit = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    assert [c["id"] for c in audit["conditions"]] == [
        "base",
        "environment_structure=not_sent",
        "environment_structure=sent_not_committed",
        f"linguistic_framing={NAME}-prompt@2.0.0",
    ]
    assert audit["plan"]["metrics"] == DOMAIN_METRICS
    assert {run["status"]["execution"] for run in audit["runs"]} == {"completed"}
    assert all(sorted(run["metrics"]) == DOMAIN_METRICS for run in audit["runs"])
    assert all(run["status"]["quality"] for run in audit["runs"])  # each run was evaluated
    assert (audit_dir / "report.html").is_file()


# --------------------------------------------------------------------------- refusals


def test_existing_files_are_never_replaced_without_force(
    written: NewDomain, capsys: pytest.CaptureFixture[str]
) -> None:
    written.plan_file.write_text("# my own edits\n", encoding="utf-8")
    kept = {p: p.read_bytes() for p in written.files}

    argv = ["testbed", "new-domain", NAME, "--out", str(written.folder)]
    refusal = refused(capsys, argv)
    assert isinstance(refusal.error, WouldOverwrite)
    assert refusal.code == EXIT_INPUT
    assert set(refusal.error.existing) == {str(p) for p in written.files}
    assert refusal.error.file == str(written.scenario_file)
    assert {p: p.read_bytes() for p in written.files} == kept

    assert main([*argv, "--force"]) == EXIT_OK
    assert api.validate(written.plan_file).details["planId"] == "desk"


@pytest.mark.parametrize(
    "name", ["Parcel", "1desk", "desk.v2", "desk-", "-desk", "desk__x", "d" * 41, "", "a/b"]
)
def test_a_name_that_cannot_be_a_domain_s_is_refused(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "written"
    # `--` lets a name that starts with a dash reach the check instead of the option parser.
    refusal = refused(capsys, ["testbed", "new-domain", "--out", str(out), "--", name])
    assert refusal.code == EXIT_INPUT
    assert isinstance(refusal.error, InputError)
    assert refusal.error.path == "NAME"
    assert not out.exists()


def test_the_default_folder_is_named_after_the_domain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["testbed", "new-domain", "shop"]) == EXIT_OK
    assert "wrote shop/scenario.yaml" in capsys.readouterr().out.splitlines()
    assert (tmp_path / "shop" / "shop_agent.py").is_file()
    assert api.validate(tmp_path / "shop" / "audit.yaml").details["planId"] == "shop"
