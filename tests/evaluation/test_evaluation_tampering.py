"""A run folder altered after its run is never judged: the evaluator recomputes the observations and
completeness from the records (through the extraction of the world that wrote the run), checks
the digests the run recorded, and refuses what differs with the file, the key and both values;
material it cannot check leaves every criterion undecidable."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from simreport.cli import main
from simreport.core.canonical import sha256_bytes
from simreport.core.errors import EXIT_INPUT, EXIT_OK
from simreport.core.run_digests import LAYER_FILES, RunAltered, records_sha256
from simreport.evaluation import EXTRACTIONS, LayerMismatch
from simreport.kernel.testbed.records import record_digest
from tests.support.refusals import refused
from tests.support.run_digests import load, refund_run, save


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return refund_run(tmp_path_factory.mktemp("run") / "run")


@pytest.fixture
def run(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of the run, evaluated once (so a refusal must also remove that evaluation)."""
    copy = Path(shutil.copytree(run_dir, tmp_path / "run"))
    assert main(["evaluate", str(copy)]) == EXIT_OK
    return copy


def refusal(capsys: pytest.CaptureFixture[str], run: Path) -> Any:
    capsys.readouterr()
    said = refused(capsys, ["evaluate", str(run)])
    assert said.code == EXIT_INPUT
    # No verdict outlives the material it was made from.
    assert not (run / "evaluation.json").exists()
    return said.error


def observation(run: Path, key: str) -> tuple[int, dict[str, Any]]:
    items = load(run / "observations.json")["observations"]
    return next((i, item) for i, item in enumerate(items) if item["factKey"] == key)


def test_the_run_records_the_sha256_of_each_layer_it_wrote(run_dir: Path) -> None:
    recorded = load(run_dir / "manifest.json")["layerSha256"]
    assert set(recorded) == set(LAYER_FILES)
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines()]
    assert recorded["records.jsonl"] == records_sha256(r["sha256"] for r in records)
    for name in LAYER_FILES[1:]:
        assert recorded[name] == sha256_bytes((run_dir / name).read_bytes()), name


def test_the_refund_desk_extraction_gives_what_the_run_wrote(run: Path) -> None:
    assert "refund_desk" in EXTRACTIONS
    evaluation = load(run / "evaluation.json")
    assert evaluation["checks"]["layersReadable"] == {"passed": True, "problems": []}
    assert evaluation["checks"]["layersConsistent"]["passed"] is True
    # The records count by their content, so evaluating a rerun gives the same bytes.
    assert evaluation["run"]["inputs"]["records.jsonl"] == records_sha256(
        r["sha256"] for r in _records(run)
    )


def test_an_observation_edited_after_the_run_is_refused_naming_it(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    index, item = observation(run, "refund.count")
    doc = load(run / "observations.json")
    doc["observations"][index]["value"] = item["value"] + 1
    save(run / "observations.json", doc)
    error = refusal(capsys, run)
    assert isinstance(error, LayerMismatch) and error.code == "layer_mismatch"
    assert (error.file, error.path) == (
        str(run / "observations.json"),
        f"observations.{index}.value",
    )
    assert (error.key, error.recorded, error.recomputed) == (
        "refund.count",
        item["value"] + 1,
        item["value"],
    )


def test_an_observation_removed_or_its_sources_changed_is_refused(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = load(run / "observations.json")
    index, item = observation(run, "agent.tool_calls")
    doc = json.loads(json.dumps(original))
    doc["observations"][index]["derivedFrom"] = item["derivedFrom"][:-1]
    save(run / "observations.json", doc)
    error = refusal(capsys, run)
    assert isinstance(error, LayerMismatch)
    assert (error.key, error.path) == ("agent.tool_calls", f"observations.{index}.derivedFrom")

    index, item = observation(run, "user.complaint")
    doc = json.loads(json.dumps(original))
    del doc["observations"][index]
    save(run / "observations.json", doc)
    error = refusal(capsys, run)
    assert isinstance(error, LayerMismatch)
    assert (error.key, error.recorded, error.recomputed) == ("user.complaint", None, item["value"])


def test_completeness_edited_after_the_run_is_refused(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = load(run / "completeness.json")
    assert doc["checks"]["state_snapshot"]["status"] == "present"
    doc["checks"]["state_snapshot"]["status"] = "missing"
    save(run / "completeness.json", doc)
    error = refusal(capsys, run)
    assert isinstance(error, LayerMismatch)
    assert (error.file, error.path) == (
        str(run / "completeness.json"),
        "checks.state_snapshot.status",
    )
    assert (error.key, error.recorded, error.recomputed) == ("state_snapshot", "missing", "present")


def test_evidence_edited_after_the_run_is_refused_by_its_digest(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = load(run / "evidence.json")
    doc["criteria"]["no_duplicate_refund"]["sufficient"] = False
    save(run / "evidence.json", doc)
    error = refusal(capsys, run)
    assert isinstance(error, RunAltered) and error.code == "run_altered"
    assert (error.file, error.path) == (
        str(run / "evidence.json"),
        "manifest.json layerSha256.evidence.json",
    )
    assert error.recorded == load(run / "manifest.json")["layerSha256"]["evidence.json"]
    assert error.found == sha256_bytes((run / "evidence.json").read_bytes())


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]


def _write_records(run: Path, records: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run / "records.jsonl").write_text(text, encoding="utf-8")


def test_records_edited_after_the_run_are_refused(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = _records(run)
    # A record's content changed: it no longer matches its own sha256.
    changed = json.loads(json.dumps(records))
    changed[4]["payload"]["tampered"] = True
    _write_records(run, changed)
    error = refusal(capsys, run)
    assert isinstance(error, RunAltered)
    assert (error.file, error.line, error.path) == (str(run / "records.jsonl"), 5, "sha256")
    # Its sha256 made to match: the records no longer match the digest the run recorded.
    changed[4]["sha256"] = record_digest(changed[4])
    _write_records(run, changed)
    error = refusal(capsys, run)
    assert isinstance(error, RunAltered)
    assert error.path == "manifest.json layerSha256.records.jsonl"
    # A record left out: the same.
    _write_records(run, records[:3] + records[4:])
    error = refusal(capsys, run)
    assert isinstance(error, RunAltered)
    assert error.path == "manifest.json layerSha256.records.jsonl"


def test_without_records_or_an_extraction_the_criteria_are_undecidable(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (run / "records.jsonl").unlink()
    assert main(["evaluate", str(run)]) == EXIT_OK
    doc = load(run / "evaluation.json")
    assert {c["verdict"] for c in doc["criteria"].values()} == {"undecidable"}
    assert {u["failedCheck"] for u in doc["undecidable"]} == {"layersReadable"}
    (problem,) = doc["checks"]["layersReadable"]["problems"]
    assert problem.startswith("records.jsonl missing")


def test_a_world_with_no_extraction_cannot_be_judged(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = load(run / "manifest.json")
    manifest["world"] = "elsewhere"
    save(run / "manifest.json", manifest)
    assert "elsewhere" not in EXTRACTIONS
    assert main(["evaluate", str(run)]) == EXIT_OK
    doc = load(run / "evaluation.json")
    assert {c["verdict"] for c in doc["criteria"].values()} == {"undecidable"}
    assert doc["checks"]["layersReadable"]["problems"] == [
        "no extraction of observations is known for world 'elsewhere'"
    ]


def test_records_that_locked_another_manifest_are_refused(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = _records(run)
    locked = next(r for r in records if r["type"] == "manifest.locked")
    locked["payload"]["manifestSha256"] = "0" * 64
    locked["sha256"] = record_digest(locked)
    _write_records(run, records)
    manifest = load(run / "manifest.json")
    manifest["layerSha256"]["records.jsonl"] = records_sha256(r["sha256"] for r in records)
    save(run / "manifest.json", manifest)
    error = refusal(capsys, run)
    assert isinstance(error, RunAltered)
    assert (error.file, error.path) == (str(run / "manifest.json"), "manifestSha256")
    assert (error.recorded, error.found) == ("0" * 64, manifest["manifestSha256"])
