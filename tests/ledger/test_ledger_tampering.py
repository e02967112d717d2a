"""The ledger records a run only as it ran: every digest the run recorded of its files — the
manifest's own, its scenario's, the manifest its records locked, and each result layer's — is
checked before anything is written, and a folder altered after its run is refused with the file,
where its digest is recorded and both digests (on SQLite and on PostgreSQL)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.cli import main
from simreport.core.canonical import content_hash, sha256_bytes
from simreport.core.errors import EXIT_INPUT
from simreport.core.run_digests import (
    RunAltered,
    locked_manifest,
    locked_manifest_sha256,
    records_sha256,
)
from simreport.kernel.testbed.records import record_digest
from simreport.ledger import connect, ingest_paths, ingest_run
from simreport.ledger import tables as t
from simreport.ledger.migrate import upgrade
from simreport.ledger.queries import counts
from tests.support.run_digests import load, refund_run, save


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return refund_run(tmp_path_factory.mktemp("run") / "run")


def _records(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines()]


def _write_records(run: Path, records: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(r) + "\n" for r in records)
    (run / "records.jsonl").write_text(text, encoding="utf-8")


def edit_observation(run: Path) -> tuple[str, str]:
    doc = load(run / "observations.json")
    item = next(o for o in doc["observations"] if o["factKey"] == "refund.count")
    item["value"] += 1
    save(run / "observations.json", doc)
    return "observations.json", "manifest.json layerSha256.observations.json"


def edit_manifest(run: Path) -> tuple[str, str]:
    manifest = load(run / "manifest.json")
    manifest["seed"] += 1
    save(run / "manifest.json", manifest)
    return "manifest.json", "manifestSha256"


def drop_record(run: Path) -> tuple[str, str]:
    records = _records(run)
    _write_records(run, records[:5] + records[6:])
    return "records.jsonl", "manifest.json layerSha256.records.jsonl"


def rewrite_record(run: Path) -> tuple[str, str]:
    records = _records(run)
    snapshot = next(r for r in records if r["type"] == "environment.snapshot")
    snapshot["payload"]["refund"] = snapshot["payload"]["refund"] * 2
    snapshot["sha256"] = record_digest(snapshot)  # its own digest made to match
    _write_records(run, records)
    return "records.jsonl", "manifest.json layerSha256.records.jsonl"


def edit_evidence(run: Path) -> tuple[str, str]:
    doc = load(run / "evidence.json")
    doc["criteria"]["no_duplicate_refund"]["sufficient"] = False
    save(run / "evidence.json", doc)
    return "evidence.json", "manifest.json layerSha256.evidence.json"


def edit_completeness(run: Path) -> tuple[str, str]:
    doc = load(run / "completeness.json")
    doc["checks"]["state_snapshot"]["status"] = "missing"
    save(run / "completeness.json", doc)
    return "completeness.json", "manifest.json layerSha256.completeness.json"


def edit_user_quality(run: Path) -> tuple[str, str]:
    doc = load(run / "user-quality.json")
    doc["failed"] = ["termination"]
    save(run / "user-quality.json", doc)
    return "user-quality.json", "manifest.json layerSha256.user-quality.json"


def edit_scenario(run: Path) -> tuple[str, str]:
    doc = load(run / "scenario.json")
    doc["seed"] += 1
    save(run / "scenario.json", doc)
    return "scenario.json", "manifest.json scenarioSha256"


def remove_observations(run: Path) -> tuple[str, str]:
    (run / "observations.json").unlink()
    return "observations.json", "manifest.json layerSha256.observations.json"


TAMPERINGS: dict[str, Callable[[Path], tuple[str, str]]] = {
    "observation": edit_observation,
    "manifest": edit_manifest,
    "record dropped": drop_record,
    "record rewritten": rewrite_record,
    "evidence": edit_evidence,
    "completeness": edit_completeness,
    "user quality": edit_user_quality,
    "scenario": edit_scenario,
    "layer removed": remove_observations,
}


@pytest.mark.parametrize("tampering", list(TAMPERINGS))
def test_a_run_altered_after_it_ran_is_refused_and_nothing_is_written(
    engine: sa.Engine, run_dir: Path, tmp_path: Path, tampering: str
) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    name, where = TAMPERINGS[tampering](run)
    upgrade(engine)
    before = counts(engine)
    with pytest.raises(RunAltered) as caught:
        ingest_run(engine, run)
    error = caught.value
    assert error.code == "run_altered"
    assert (error.file, error.path) == (str(run / name), where)
    assert error.recorded is not None and error.recorded != error.found
    if name != "manifest.json":
        assert error.found == (None if not (run / name).exists() else _digest_of(run, name)), (
            tampering
        )
    assert counts(engine) == before


def _digest_of(run: Path, name: str) -> str:
    if name == "records.jsonl":
        return records_sha256(r["sha256"] for r in _records(run))
    if name == "scenario.json":
        return content_hash(load(run / name))
    return sha256_bytes((run / name).read_bytes())


def test_the_intact_run_is_recorded(engine: sa.Engine, run_dir: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    assert ingest_run(engine, run).outcome == "recorded"
    assert ingest_run(engine, run).outcome == "present"


def test_ledger_ingest_refuses_the_altered_run_and_records_the_others(
    ledger_url: str, run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    intact = Path(shutil.copytree(run_dir, results / "intact"))
    altered = Path(shutil.copytree(run_dir, results / "altered"))
    edit_observation(altered)
    # The command says so on one line naming the file, and exits 2.
    capsys.readouterr()
    code = main(["ledger", "ingest", str(altered), "--jobs", "1", "--ledger", ledger_url])
    assert code == EXIT_INPUT
    assert str(altered / "observations.json") in capsys.readouterr().err
    # In bulk, the others are recorded.
    engine = connect(ledger_url)
    try:
        summary = ingest_paths(engine, [results], group=4)
        assert (summary.runs_recorded, [p for p, _ in summary.refused]) == (1, [altered])
        assert str(altered / "observations.json") in summary.refused[0][1]
        with engine.connect() as conn:
            dirs = conn.execute(sa.select(t.run.c.source_dir)).scalars().all()
    finally:
        engine.dispose()
    assert dirs == [str(intact.resolve())]


def test_the_manifest_digest_is_the_canonical_hash_of_what_it_locks(run_dir: Path) -> None:
    """The one-pass digest readers recompute is the canonical content hash of the locked part,
    and the run wrote it; a change to what the manifest locks changes it."""
    manifest = load(run_dir / "manifest.json")
    assert manifest["manifestSha256"] == locked_manifest_sha256(manifest)
    assert locked_manifest_sha256(manifest) == content_hash(locked_manifest(manifest))
    manifest["notOnline"] = ["sut.prompt"]
    assert locked_manifest_sha256(manifest) == content_hash(locked_manifest(manifest))
    assert locked_manifest_sha256(manifest) != load(run_dir / "manifest.json")["manifestSha256"]


def test_a_run_that_recorded_no_layer_digests_is_checked_for_the_rest(
    engine: sa.Engine, run_dir: Path, tmp_path: Path
) -> None:
    """A run written before layers had digests: its layers are taken as they are, its manifest
    and records still checked."""
    run = Path(shutil.copytree(run_dir, tmp_path / "older"))
    manifest = load(run / "manifest.json")
    del manifest["layerSha256"]
    save(run / "manifest.json", manifest)
    edit_evidence(run)
    assert ingest_run(engine, run).outcome == "recorded"
    other = Path(shutil.copytree(run, tmp_path / "older-edited"))
    edit_manifest(other)
    with pytest.raises(RunAltered):
        ingest_run(engine, other)
