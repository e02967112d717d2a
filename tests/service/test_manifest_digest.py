"""One manifest digest. `GET /manifests/{id}` answers `manifest_sha256`, the sha256 of the
canonical JSON (sorted keys, no spaces, UTF-8) of the `locked` document it answers with; for an
agent-testbed run, `locked` is what the run locks its manifest.json and its `manifest.locked`
record with, so the three digests are one — also when the versions' review statuses change
between the run's acceptance and its start (the run checks them as they were when it was
accepted, but for a version retired since, which loading refuses). On SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from simreport.core.files import load_document
from simreport.kernel.engine import run_scenario, validate_scenario
from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.service import queue as q
from tests.service.in_process import in_process_api, refund_spec
from tests.support.service_helpers import queue_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
PRISONERS = EXAMPLE.parent / "prisoners_dilemma" / "scenario.yaml"
TENANT = "local"
VERSION = "1.3.0"


def recomputed(answer: dict[str, Any]) -> str:
    """The recipe, as a client without simreport follows it."""
    text = json.dumps(answer["locked"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def queued(engine: Engine, library: Path, spec: dict[str, Any], name: str = "refund") -> str:
    return queue_run(engine, library, spec, name=name, namespace="ns", version=VERSION)


def executed(engine: Engine, library: Path, out: Path) -> tuple[str, dict[str, Any]]:
    """Claim the next run and execute it as a worker does; (run id, its manifest.json)."""
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    run_scenario(
        validate_scenario(claimed.scenario),
        out,
        condition="service",
        replication=0,
        asset_root=library.parent,
        checks=claimed.checks,
    )
    assert q.finish(engine, claimed.run_id, "w1", out) == "completed"
    manifest: dict[str, Any] = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return claimed.run_id, manifest


def manifest_id(engine: Engine, run_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(sa.select(t.run.c.manifest_id).where(t.run.c.run_id == run_id)).scalar()
        )


def locked_record(engine: Engine, run_id: str) -> dict[str, Any]:
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    found = [e for e in page["events"] if e["type"] == "manifest.locked"]
    assert len(found) == 1
    data: dict[str, Any] = found[0]["payload"]["data"]
    return data


@pytest.fixture
def library() -> Path:
    return EXAMPLE / "assets"


def test_the_answer_s_digest_is_the_one_the_run_locked(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    run_id = queued(engine, library, refund_spec())
    answer = q.get_manifest(engine, manifest_id(engine, run_id), tenant=TENANT)
    assert recomputed(answer) == answer["manifest_sha256"]
    # The locked document holds the answer's resolved assets, without their files.
    assert answer["locked"]["resolved"] == {
        slot: {k: entry[k] for k in ("kind", "name", "version", "sha256")}
        for slot, entry in answer["resolved"].items()
    }
    assert answer["locked"]["purpose"] == "exploration"
    assert answer["locked"]["scenario"]["version"] == VERSION
    ran, manifest = executed(engine, library, tmp_path / "run")
    assert ran == run_id
    assert manifest["manifestSha256"] == answer["manifest_sha256"]
    assert locked_record(engine, run_id)["manifestSha256"] == answer["manifest_sha256"]
    with engine.connect() as conn:
        recorded = conn.execute(
            sa.select(t.run.c.recorded_manifest).where(t.run.c.run_id == run_id)
        ).scalar_one()
    assert recorded["manifestSha256"] == answer["manifest_sha256"]


def test_a_status_changed_after_acceptance_leaves_the_digest_as_frozen(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    run_id = queued(engine, library, refund_spec())
    frozen = q.get_manifest(engine, manifest_id(engine, run_id), tenant=TENANT)
    reviewing = {v["name"]: v["status"] for v in frozen["locked"]["notOnline"]}
    assert reviewing["refund-timeout-retry"] == "reviewing"
    # The scenario version is reviewed before a worker claims the run.
    review(engine, _scenario_id(engine, run_id), "approve")
    _, manifest = executed(engine, library, tmp_path / "run")
    assert manifest["manifestSha256"] == frozen["manifest_sha256"]
    assert manifest["notOnline"] == frozen["locked"]["notOnline"]


def review(engine: Engine, scenario_id: str, action: str) -> None:
    q.review_version(
        engine,
        tenant=TENANT,
        scenario_id=scenario_id,
        version=VERSION,
        action=action,
        reviewer="risk",
    )


def retire(engine: Engine, scenario_id: str) -> None:
    """The scenario version retired (offline), as review's last step leaves it."""
    sv = t.scenario_version.c
    with engine.begin() as conn:
        conn.execute(
            t.scenario_version.update()
            .where(sv.scenario_id == scenario_id, sv.version == VERSION)
            .values(status="offline")
        )


def _scenario_id(engine: Engine, run_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                sa.select(t.manifest.c.scenario_id)
                .join(t.run, t.run.c.manifest_id == t.manifest.c.manifest_id)
                .where(t.run.c.run_id == run_id)
            ).scalar_one()
        )


def test_a_version_retired_after_acceptance_is_refused_while_loading(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    run_id = queued(engine, library, refund_spec())
    scenario_id = _scenario_id(engine, run_id)
    retire(engine, scenario_id)
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    result = run_scenario(
        validate_scenario(claimed.scenario),
        tmp_path / "run",
        condition="service",
        replication=0,
        asset_root=library.parent,
        checks=claimed.checks,
    )
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "version_not_online")
    # Retired before a run is started: refused at once, as loading would refuse it.
    with pytest.raises(q.Unprocessable) as refused:
        q.start_run(
            engine,
            tenant=TENANT,
            principal="ci",
            scenario_id=scenario_id,
            version=VERSION,
            mode="surrogate",
            seed=None,
            budget=None,
            purpose="exploration",
            library=library,
        )
    assert (refused.value.status, refused.value.code) == (422, "version_not_online")


def test_a_manifest_of_another_world_is_its_frozen_document(engine: Engine, library: Path) -> None:
    spec = load_document(PRISONERS).data
    assert isinstance(spec, dict)
    run_id = queued(engine, library, spec, name="pd")
    answer = q.get_manifest(engine, manifest_id(engine, run_id), tenant=TENANT)
    assert answer["locked"]["world"] == "prisoners_dilemma"
    assert recomputed(answer) == answer["manifest_sha256"]


def test_over_http_the_digest_is_recomputed_from_the_answer(
    ledger_url: str, tmp_path: Path
) -> None:
    with in_process_api(ledger_url, tmp_path) as api:
        scenario_id = api.scenario("refund", refund_spec())
        started = api.run(scenario_id, seed=11)
        answer = api.get(f"/manifests/{started['manifest_id']}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert set(body) == {"resolved", "locked", "manifest_sha256"}
        assert recomputed(body) == body["manifest_sha256"]
        assert body["locked"]["seed"] == 11
        library = api.library
    engine = connect(ledger_url)
    try:
        _, manifest = executed(engine, library, tmp_path / "run")
    finally:
        engine.dispose()
    assert manifest["manifestSha256"] == body["manifest_sha256"]
