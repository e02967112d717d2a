"""The run service's queue: scenarios and versions, queued runs with frozen manifests, claims,
leases, events, cancellation, evidence and idempotency keys, all held in the ledger (SQLite and
PostgreSQL). The runs here execute in this process; tests/service/test_service_worker.py runs
workers."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from simreport.cli import main
from simreport.core.files import load_document
from simreport.kernel.engine import run_scenario, validate_scenario
from simreport.ledger import tables as t
from simreport.ledger.db import as_utc, utc_now
from simreport.ledger.queries import show_run
from simreport.service import queue as q
from tests.support.review import publish

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
TENANT = "local"
VERSION = "1.3.0"


@pytest.fixture
def library(tmp_path: Path) -> Path:
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    return root / "assets"


def spec() -> dict[str, Any]:
    data = load_document(EXAMPLE / "scenario.yaml").data
    assert isinstance(data, dict)
    return data


def scenario(engine: Engine, name: str = "refund", tenant: str = TENANT) -> str:
    """A scenario with version 1.3.0 (the refund desk) submitted for review."""
    scenario_id = q.create_scenario(
        engine, tenant=tenant, namespace="support", name=name, owner="qa", risk_level="high"
    )
    status = q.submit_version(
        engine,
        tenant=tenant,
        scenario_id=scenario_id,
        version=VERSION,
        spec=spec(),
        source="examples/refund_desk",
        created_by="ana",
    )
    assert status == "reviewing"
    return scenario_id


def start(engine: Engine, scenario_id: str, library: Path, **overrides: Any) -> tuple[str, str]:
    request: dict[str, Any] = {
        "tenant": TENANT,
        "principal": "ci",
        "scenario_id": scenario_id,
        "version": VERSION,
        "mode": "surrogate",
        "seed": None,
        "budget": None,
        "purpose": "exploration",
        "library": library,
    }
    request.update(overrides)
    return q.start_run(engine, **request)


def execute(
    claimed: Any, out: Path, library: Path, on_event: Callable[[dict[str, Any]], None] | None = None
) -> None:
    """Run a claimed run's scenario into `out` as a worker does (events to `on_event`)."""
    run_scenario(
        validate_scenario(claimed.scenario),
        out,
        condition="service",
        replication=0,
        asset_root=library.parent,
        checks=claimed.checks,
        on_event=on_event,
    )


def run_row(engine: Engine, run_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.select(t.run).where(t.run.c.run_id == run_id)).one()


def event(seq: int, wall: float | None = None) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": "note",
        "actor": "harness",
        "t": 0,
        "wall": time.time() if wall is None else wall,
        "payload": {"n": seq},
    }


# --------------------------------------------------------------------------- scenarios


def test_scenarios_are_created_once_per_namespace_and_checked(engine: Engine) -> None:
    first = q.create_scenario(
        engine, tenant=TENANT, namespace="support", name="refund", owner="qa", risk_level="low"
    )
    assert first.startswith("scn-")
    with pytest.raises(q.Conflict) as duplicate:
        q.create_scenario(
            engine, tenant=TENANT, namespace="support", name="refund", owner="x", risk_level="low"
        )
    assert duplicate.value.status == 409
    # Another namespace or another tenant may use the name.
    other = q.create_scenario(
        engine, tenant=TENANT, namespace="sales", name="refund", owner="qa", risk_level="low"
    )
    elsewhere = q.create_scenario(
        engine, tenant="acme", namespace="support", name="refund", owner="qa", risk_level="low"
    )
    assert len({first, other, elsewhere}) == 3
    with pytest.raises(q.Unprocessable) as bad:
        q.create_scenario(
            engine, tenant=TENANT, namespace=" ", name="x", owner="qa", risk_level="extreme"
        )
    assert {i["path"] for i in bad.value.issues} == {"namespace", "risk_level"}


def test_a_version_is_validated_stored_for_review_and_never_replaced(engine: Engine) -> None:
    scenario_id = scenario(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.select(t.scenario_version)).one()
        steps = conn.execute(sa.select(t.review_transition)).all()
    assert (row.scenario_id, row.version, row.status) == (scenario_id, VERSION, "reviewing")
    assert row.spec["world"] == "refund_desk" and "seedPath" not in row.spec
    assert [(s.from_status, s.to_status, s.reviewer) for s in steps] == [(None, "reviewing", "ana")]
    submit = {"tenant": TENANT, "scenario_id": scenario_id, "source": None, "created_by": "ana"}
    with pytest.raises(q.Conflict) as exists:
        q.submit_version(engine, version=VERSION, spec=spec(), **submit)
    assert exists.value.code == "version_exists"
    with pytest.raises(q.NotFound):
        q.submit_version(engine, **{**submit, "scenario_id": "scn-nope"}, version="1.0.0", spec={})
    with pytest.raises(q.NotFound):  # another tenant's scenario is not there for it
        q.submit_version(engine, **{**submit, "tenant": "acme"}, version="2.0.0", spec=spec())


def test_a_spec_that_fails_the_schema_gets_its_located_issues(engine: Engine) -> None:
    scenario_id = scenario(engine)
    submit = {"tenant": TENANT, "scenario_id": scenario_id, "source": None, "created_by": "ana"}
    broken = spec()
    broken["population"] = {"n": "many"}
    broken["unknownKey"] = 1
    with pytest.raises(q.Unprocessable) as bad:
        q.submit_version(engine, version="1.4.0", spec=broken, **submit)
    issues = bad.value.issues
    assert bad.value.status == 422 and len(issues) >= 2
    assert {"spec.population.n", "spec.unknownKey"} <= {i["path"] for i in issues}
    assert all(set(i) == {"path", "expected", "message"} for i in issues)
    with pytest.raises(q.Unprocessable) as world:
        q.submit_version(engine, version="1.4.0", spec={**spec(), "world": "nope"}, **submit)
    assert world.value.issues[0]["path"] == "spec.world"
    assert "refund_desk" in str(world.value.issues[0]["expected"])
    with pytest.raises(q.Unprocessable) as mismatch:
        q.submit_version(engine, version="1.4.0", spec=spec(), **submit)
    assert mismatch.value.issues[0]["path"] == "spec.identity.version"
    with pytest.raises(q.Unprocessable) as version:
        q.submit_version(engine, version="latest", spec=spec(), **submit)
    assert version.value.issues[0]["path"] == "version"
    with pytest.raises(q.Unprocessable) as not_a_document:
        q.submit_version(engine, version="1.4.0", spec=["a", "list"], **submit)
    assert not_a_document.value.issues[0]["path"] == "spec"


# --------------------------------------------------------------------------- starting runs


def test_a_started_run_is_pending_with_its_manifest_frozen(engine: Engine, library: Path) -> None:
    scenario_id = scenario(engine)
    run_id, manifest_id = start(engine, scenario_id, library, seed=7, budget={"maxTurns": 9})
    assert run_id.startswith("run-") and len(run_id) == 28
    assert q.get_run(engine, run_id, tenant=TENANT) == {
        "execution_status": "pending",
        "validity_status": "unchecked",
        "evidence_status": "unchecked",
        "quality_ref": None,
        "attempt": 1,
    }
    row = run_row(engine, run_id)
    assert (row.principal, row.purpose, row.attempts, row.seed_path) == (
        "ci",
        "exploration",
        0,
        [7],
    )
    assert row.request["budget"] == {"maxTurns": 9} and row.request["seed"] == 7
    manifest = q.get_manifest(engine, manifest_id, tenant=TENANT)
    resolved = manifest["resolved"]
    # Labels resolved to exact versions, each with the sha256 of its file.
    assert resolved["sut.agent"]["version"] == "2.4.1"  # refund-agent@stable
    assert resolved["sut.prompt"]["version"] == "1.0.0"  # refund-prompt@stable
    from simreport.core.canonical import sha256_bytes

    for entry in resolved.values():
        assert entry["sha256"] == sha256_bytes((library / entry["file"]).read_bytes())
    with engine.connect() as conn:
        pinned = dict(
            conn.execute(
                sa.select(t.asset_version.c.asset_id, t.asset_version.c.content_sha256)
            ).all()
        )
        slots = conn.execute(
            sa.select(t.manifest_asset.c.slot).where(t.manifest_asset.c.manifest_id == manifest_id)
        ).scalars()
        document = conn.execute(sa.select(t.manifest.c.document)).scalar_one()
    assert pinned["local:agent:refund-agent"] == resolved["sut.agent"]["sha256"]
    assert set(slots) == set(resolved)
    assert document["seed"] == 7 and document["budget"]["maxTurns"] == 9
    # The same frozen combination shares its manifest.
    again, same_manifest = start(engine, scenario_id, library, seed=7, budget={"maxTurns": 9})
    assert again != run_id and same_manifest == manifest_id
    assert q.count_active(engine) == 2 and q.count_active(engine, principal="nobody") == 0
    with pytest.raises(q.NotFound):
        q.get_manifest(engine, manifest_id, tenant="acme")
    with pytest.raises(q.NotFound):
        q.get_run(engine, run_id, tenant="acme")


def test_a_run_request_that_cannot_run_is_refused(engine: Engine, library: Path) -> None:
    scenario_id = scenario(engine)
    with pytest.raises(q.NotFound):
        start(engine, scenario_id, library, version="9.9.9")
    with pytest.raises(q.NotFound):
        start(engine, "scn-unknown", library)
    with pytest.raises(q.NotFound):
        start(engine, scenario_id, library, tenant="acme")
    with pytest.raises(q.Unprocessable) as bad:
        start(engine, scenario_id, library, mode="real", purpose="fun", seed=-1)
    assert {i["path"] for i in bad.value.issues} == {"mode", "purpose", "seed"}
    with pytest.raises(q.Unprocessable) as hybrid:
        start(engine, scenario_id, library, mode="hybrid")
    assert hybrid.value.issues[0]["path"] == "mode"
    with pytest.raises(q.Unprocessable) as budget:
        start(engine, scenario_id, library, budget={"maxTurns": 0})
    assert budget.value.issues[0]["path"] == "budget.maxTurns"
    shutil.rmtree(library / "user-sim")
    with pytest.raises(q.Unprocessable) as unresolved:
        start(engine, scenario_id, library)
    assert unresolved.value.code == "manifest_unresolved"
    assert unresolved.value.issues[0]["path"] == "spec.user.simulator"
    assert q.count_active(engine) == 0


def test_an_asset_file_changed_under_its_version_is_refused(engine: Engine, library: Path) -> None:
    scenario_id = scenario(engine)
    start(engine, scenario_id, library)
    prompt = library / "refund-prompt" / "1.0.0.yaml"
    prompt.write_text(prompt.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    with pytest.raises(q.Unprocessable) as changed:
        start(engine, scenario_id, library)
    assert changed.value.code == "asset_version_changed"
    assert changed.value.issues[0]["path"] == "spec.sut.prompt"


def test_a_regression_run_needs_every_version_online(engine: Engine, library: Path) -> None:
    scenario_id = scenario(engine)
    with pytest.raises(q.Unprocessable) as refused:
        start(engine, scenario_id, library, purpose="regression")
    assert refused.value.code == "version_not_online"
    # Every version the run records that is not online, located: the agent's, prompt's and
    # tool contract's too, whose headers say online.
    assert {i["path"]: i["expected"] for i in refused.value.issues} == {
        "version": "online",
        "spec.sut.agent": "online",
        "spec.sut.prompt": "online",
        "spec.environment.toolContracts.0": "online",
        "spec.user.simulator": "online",
        "spec.user.policy": "online",
        "spec.environment.data": "online",
        "spec.evaluationRef.rubric": "online",
        "spec.evaluationRef.assertions": "online",
    }
    assert q.count_active(engine) == 0
    # The refused request pinned the asset versions as drafts, to be reviewed and published.
    held = sa.select(t.asset.c.asset_type, t.asset.c.name, t.asset_version.c.version).join(
        t.asset_version
    )
    with engine.connect() as conn:
        pinned = conn.execute(held).all()
        statuses = set(conn.execute(sa.select(t.asset_version.c.status)).scalars())
    assert len(pinned) == 8 and statuses == {"draft"}
    publish(engine, "scenario", scenario_id, VERSION)  # submitted by ana; bo approves
    for asset_type, asset, version in pinned:
        publish(engine, "asset", f"{asset_type}:{asset}", version)
    run_id, _ = start(engine, scenario_id, library, purpose="regression")
    assert run_row(engine, run_id).purpose == "regression"


# --------------------------------------------------------------------------- claims and leases


def test_concurrent_claims_never_share_a_run(engine: Engine, library: Path) -> None:
    scenario_id = scenario(engine)
    started = {start(engine, scenario_id, library)[0] for _ in range(12)}
    claimed: list[list[str]] = [[] for _ in range(4)]
    barrier = threading.Barrier(4)

    def worker(index: int) -> None:
        barrier.wait(timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = q.claim(engine, f"w{index}", lease_seconds=30)
            if got is None:
                return
            claimed[index].append(got.run_id)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    everything = [run_id for mine in claimed for run_id in mine]
    assert sorted(everything) == sorted(started)  # each once, none twice
    with engine.connect() as conn:
        rows = conn.execute(sa.select(t.run.c.lease_owner, t.run.c.attempts)).all()
    assert all(owner is not None and attempts == 1 for owner, attempts in rows)
    assert q.claim(engine, "late", lease_seconds=30) is None


def test_the_claim_carries_what_the_run_needs(engine: Engine, library: Path) -> None:
    scenario_id = scenario(engine)
    first, _ = start(engine, scenario_id, library, seed=11)
    start(engine, scenario_id, library)
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None and claimed.run_id == first  # oldest first
    assert claimed.scenario["seed"] == 11 and claimed.scenario["execution"]["seed"] == 11
    assert claimed.checks.pins["refund-agent"] == "2.4.1"
    assert claimed.checks.version == VERSION and claimed.checks.purpose == "exploration"
    assert claimed.library_dir == "assets"
    row = run_row(engine, first)
    assert (row.execution_status, row.lease_owner, row.attempts) == ("running", "w1", 1)
    assert row.started_at is not None and row.lease_expires_at is not None


def test_a_lost_lease_ends_the_run_crashed_and_the_worker_can_write_nothing(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    scenario_id = scenario(engine)
    run_id, _ = start(engine, scenario_id, library)
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    beat = q.heartbeat(engine, run_id, "w1", lease_seconds=30)
    assert (beat.lease_lost, beat.cancel) == (False, False)
    q.append_events(engine, run_id, [event(1)], worker_id="w1")
    assert q.reclaim_expired(engine) == []  # the lease holds
    # Expired: the first look only marks the run; a look a confirmation period later (half
    # the lease) that finds it still expired and unrenewed reclaims it.
    later = utc_now() + timedelta(seconds=60)
    assert q.reclaim_expired(engine, now=later) == []
    marked = run_row(engine, run_id)
    assert (marked.execution_status, as_utc(marked.lease_suspected_at)) == ("running", later)
    confirmed = later + timedelta(seconds=q.confirmation_seconds(30))
    assert q.reclaim_expired(engine, now=confirmed - timedelta(seconds=1)) == []
    assert q.reclaim_expired(engine, now=confirmed) == [q.Reclaimed(run_id, "crashed", 1)]
    row = run_row(engine, run_id)
    assert (row.execution_status, row.terminal_reason) == ("crashed", "worker_lost")
    assert (row.retries_allowed, row.retries, row.attempts) == (0, 0, 1)
    assert row.evidence_status == "partial" and row.ended_at is not None
    assert q.heartbeat(engine, run_id, "w1", lease_seconds=30).lease_lost
    with pytest.raises(q.LeaseLost):
        q.append_events(engine, run_id, [event(2)], worker_id="w1")
    with pytest.raises(q.LeaseLost):
        q.fail(engine, run_id, "w1", "late")
    with pytest.raises(q.LeaseLost):
        q.finish(engine, run_id, "w1", finished_run(library, tmp_path / "run"))
    assert run_row(engine, run_id).execution_status == "crashed"


LATER = timedelta(seconds=60)
"""Past any lease these tests take (30 s)."""


def reclaim_later(engine: Engine) -> list[q.Reclaimed]:
    """Reclaim expired leases as reclaimers do, LATER from now: a first look marks the runs,
    and a look a confirmation period after it reclaims them."""
    moment = utc_now() + LATER
    assert q.reclaim_expired(engine, now=moment) == []
    confirmed = moment + timedelta(seconds=q.confirmation_seconds(30))
    return q.reclaim_expired(engine, now=confirmed)


def test_a_heartbeat_after_the_mark_keeps_the_run_with_its_worker(
    engine: Engine, library: Path
) -> None:
    """A worker whose lease expired while it could not reach the ledger renews it once the
    ledger answers: a reclaimer that marked the run meanwhile does not reclaim it."""
    run_id, _ = start(engine, scenario(engine), library)
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    moment = utc_now() + LATER
    assert q.reclaim_expired(engine, now=moment) == []  # marked
    beat = q.heartbeat(engine, run_id, "w1", lease_seconds=30)
    assert not beat.lease_lost
    assert run_row(engine, run_id).lease_suspected_at is None
    confirmed = moment + timedelta(seconds=q.confirmation_seconds(30))
    # Renewed from now, so expired again only past LATER: marked afresh, never reclaimed at once.
    assert q.reclaim_expired(engine, now=confirmed) == []
    row = run_row(engine, run_id)
    assert (row.execution_status, row.lease_owner) == ("running", "w1")
    assert as_utc(row.lease_suspected_at) == confirmed
    assert q.confirmation_seconds(2) == q.CONFIRM_MIN_SECONDS  # never shorter than that


def ledger_events(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    events: list[dict[str, Any]] = page["events"]
    return events


def count_rows(engine: Engine, table: sa.Table, run_id: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                sa.select(sa.func.count()).select_from(table).where(table.c.run_id == run_id)
            ).scalar_one()
        )


def test_a_lost_run_with_a_retry_goes_back_to_pending_once(engine: Engine, library: Path) -> None:
    run_id, manifest_id = start(engine, scenario(engine), library, seed=11, retries=1)
    first = q.claim(engine, "w1", lease_seconds=30)
    assert first is not None and first.attempts == 1
    started = run_row(engine, run_id).started_at
    q.append_events(engine, run_id, [event(s) for s in (1, 2, 3)], worker_id="w1")

    assert reclaim_later(engine) == [q.Reclaimed(run_id, "pending", 2)]
    row = run_row(engine, run_id)
    assert (row.execution_status, row.retries, row.attempts, row.event_seq_base) == (
        "pending",
        1,
        1,
        4,
    )
    assert (row.lease_owner, row.lease_expires_at, row.ended_at) == (None, None, None)
    assert q.get_run(engine, run_id, tenant=TENANT) == {
        "execution_status": "pending",
        "validity_status": "unchecked",
        "evidence_status": "unchecked",
        "quality_ref": None,
        "attempt": 2,
    }
    events = ledger_events(engine, run_id)
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    mark = events[-1]
    assert (mark["type"], mark["actor"]) == ("run_retried", "harness")
    assert mark["payload"]["attempt"] == 2 and mark["payload"]["reason"] == "worker_lost"
    assert mark["payload"]["lost"]["worker"] == "w1"
    assert mark["payload"]["lost"]["eventsRecorded"] == 3
    assert count_rows(engine, t.record, run_id) == 0  # records come only with a finished run
    # The lost worker writes nothing more.
    assert q.heartbeat(engine, run_id, "w1", lease_seconds=30).lease_lost
    with pytest.raises(q.LeaseLost):
        q.append_events(engine, run_id, [event(4)], worker_id="w1")
    with pytest.raises(q.LeaseLost):
        q.fail(engine, run_id, "w1", "late")

    second = q.claim(engine, "w2", lease_seconds=30)
    assert second is not None and second.run_id == run_id and second.attempts == 2
    assert second.manifest_id == manifest_id == first.manifest_id  # the same experiment
    assert second.scenario == first.scenario and second.scenario["seed"] == 11
    assert run_row(engine, run_id).started_at == started  # the first attempt's start stays
    assert q.run_detail(engine, run_id, tenant=TENANT)["attempt"] == 2
    # The retry's events, numbered by its kernel from 1, follow the mark; a batch sent again
    # changes nothing, and one that leaves a gap is refused.
    q.append_events(engine, run_id, [event(1), event(2)], worker_id="w2")
    q.append_events(engine, run_id, [event(2), event(3)], worker_id="w2")
    with pytest.raises(q.Conflict) as gap:
        q.append_events(engine, run_id, [event(5)], worker_id="w2")
    assert gap.value.code == "event_gap"
    events = ledger_events(engine, run_id)
    assert [e["seq"] for e in events] == list(range(1, 8))
    assert [e["payload"] for e in events[4:]] == [{"n": 1}, {"n": 2}, {"n": 3}]

    # Lost again: no retry is left.
    assert reclaim_later(engine) == [q.Reclaimed(run_id, "crashed", 2)]
    row = run_row(engine, run_id)
    assert (row.execution_status, row.evidence_status) == ("crashed", "partial")
    assert row.terminal_reason.partition(": ")[0] == "worker_lost"
    assert (row.retries, row.attempts, row.lease_owner) == (1, 2, "w2")
    assert [e["seq"] for e in ledger_events(engine, run_id)] == list(range(1, 8))
    assert q.claim(engine, "w3", lease_seconds=30) is None
    assert q.get_run(engine, run_id, tenant=TENANT)["attempt"] == 2


def test_a_retried_run_records_its_retry_whole_after_the_mark(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    run_id, _ = start(engine, scenario(engine), library, retries=1)
    first = q.claim(engine, "w1", lease_seconds=30)
    assert first is not None
    lost: list[dict[str, Any]] = []
    execute(first, tmp_path / "lost", library, on_event=lost.append)
    q.append_events(engine, run_id, lost[:10], worker_id="w1")  # then the worker died
    assert [r.outcome for r in reclaim_later(engine)] == ["pending"]
    second = q.claim(engine, "w2", lease_seconds=30)
    assert second is not None
    seen: list[dict[str, Any]] = []
    out = tmp_path / "run"
    execute(second, out, library, on_event=seen.append)
    q.append_events(engine, run_id, seen[:5], worker_id="w2")
    q.finish(engine, run_id, "w2", out)
    row = run_row(engine, run_id)
    assert (row.execution_status, row.evidence_status, row.terminal_reason) == (
        "completed",
        "complete",
        "resolved_by_user",
    )
    events = ledger_events(engine, run_id)
    assert [e["seq"] for e in events] == list(range(1, 10 + 1 + len(seen) + 1))
    assert [e["type"] for e in events] == (
        [e["type"] for e in lost[:10]] + ["run_retried"] + [e["type"] for e in seen]
    )
    assert events[11]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    # The same seed ran the same run again: the retry's events are the lost attempt's.
    assert [e["type"] for e in seen] == [e["type"] for e in lost]
    written = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert count_rows(engine, t.record, run_id) == len(written)  # once: the retry's
    assert q.evidence(engine, run_id, tenant=TENANT)["evidence"]


def test_a_run_cancelled_while_waiting_for_its_retry_ends_cancelled(
    engine: Engine, library: Path
) -> None:
    run_id, _ = start(engine, scenario(engine), library, retries=1)
    q.claim(engine, "w1", lease_seconds=30)
    reclaim_later(engine)
    assert q.request_cancel(engine, run_id, "not any more", tenant=TENANT) == "cancelled"
    row = run_row(engine, run_id)
    assert (row.execution_status, row.terminal_reason) == ("cancelled", "cancelled: not any more")
    assert q.claim(engine, "w2", lease_seconds=30) is None
    assert q.get_run(engine, run_id, tenant=TENANT)["attempt"] == 2
    assert [e["type"] for e in ledger_events(engine, run_id)] == ["run_retried"]


def test_a_lost_run_whose_cancellation_was_asked_is_not_retried(
    engine: Engine, library: Path
) -> None:
    run_id, _ = start(engine, scenario(engine), library, retries=1)
    q.claim(engine, "w1", lease_seconds=30)
    q.request_cancel(engine, run_id, "stop", tenant=TENANT)
    assert reclaim_later(engine) == [q.Reclaimed(run_id, "crashed", 1)]
    row = run_row(engine, run_id)
    assert (row.execution_status, row.terminal_reason, row.retries) == ("crashed", "worker_lost", 0)
    assert ledger_events(engine, run_id) == []


def test_a_run_takes_one_retry_at_most(engine: Engine, library: Path) -> None:
    with pytest.raises(ValueError, match="retries"):
        start(engine, scenario(engine), library, retries=2)


def test_a_running_run_of_a_ledger_before_retries_is_reclaimed_as_before(ledger_url: str) -> None:
    """A ledger at revision 0003 with a run in progress, upgraded: the run has no retry (it
    ends crashed as it would have) and the events it streamed stay as they were numbered."""
    from simreport.ledger import connect
    from simreport.ledger.migrate import current_revision, head_revision, upgrade

    engine = connect(ledger_url)
    try:
        upgrade(engine, "0003")
        expired = utc_now() - timedelta(seconds=5)
        with engine.begin() as conn:
            conn.execute(
                sa.insert(t.manifest).values(
                    manifest_id="manifest-old",
                    tenant_id=TENANT,
                    scenario_id="scn-old",
                    scenario_version=VERSION,
                    resolved={},
                    manifest_sha256="0" * 64,
                    document={},
                )
            )
            conn.execute(
                sa.insert(t.run).values(
                    run_id="run-old",
                    tenant_id=TENANT,
                    manifest_id="manifest-old",
                    mode="surrogate",
                    execution_status="running",
                    validity_status="unchecked",
                    evidence_status="unchecked",
                    trace_id="t",
                    condition_id="service",
                    replication=0,
                    seed_path=[0],
                    engine="refund_desk",
                    result={},
                    content_sha256="",
                    lease_owner="w-old",
                    lease_expires_at=expired,
                    attempts=1,
                )
            )
        done = upgrade(engine)
        assert (done.before, done.after) == ("0003", head_revision())
        with engine.connect() as conn:
            assert current_revision(conn) == head_revision()
        row = run_row(engine, "run-old")
        assert (row.retries_allowed, row.retries, row.event_seq_base) == (0, 0, 0)
        q.append_events(engine, "run-old", [event(1), event(2)])
        assert q.reclaim_expired(engine) == []  # marked: a run of then has no mark
        confirmed = utc_now() + timedelta(seconds=q.CONFIRM_MIN_SECONDS)
        assert q.reclaim_expired(engine, now=confirmed) == [q.Reclaimed("run-old", "crashed", 1)]
        row = run_row(engine, "run-old")
        assert (row.execution_status, row.terminal_reason) == ("crashed", "worker_lost")
        assert [e["seq"] for e in ledger_events(engine, "run-old")] == [1, 2]
    finally:
        engine.dispose()


def test_streamed_events_are_idempotent_and_never_leave_a_gap(
    engine: Engine, library: Path
) -> None:
    run_id, _ = start(engine, scenario(engine), library)
    q.claim(engine, "w1", lease_seconds=30)
    q.append_events(engine, run_id, [event(s) for s in (1, 2, 3)], worker_id="w1")
    q.append_events(engine, run_id, [event(s) for s in (5, 4, 3, 2)], worker_id="w1")
    with pytest.raises(q.Conflict) as gap:
        q.append_events(engine, run_id, [event(7)], worker_id="w1")
    assert gap.value.code == "event_gap"
    page = q.events_after(engine, run_id, 0, tenant=TENANT, retention_seconds=None)
    assert [e["seq"] for e in page["events"]] == [1, 2, 3, 4, 5] and page["next_seq"] == 5
    assert page["events"][0]["payload"] == {"n": 1} and page["events"][0]["actor"] == "harness"
    assert q.events_after(engine, run_id, 5, tenant=TENANT, retention_seconds=None) == {
        "events": [],
        "next_seq": 5,
    }
    two = q.events_after(engine, run_id, 1, tenant=TENANT, limit=2, retention_seconds=None)
    assert [e["seq"] for e in two["events"]] == [2, 3] and two["next_seq"] == 3
    with pytest.raises(q.NotFound):
        q.events_after(engine, run_id, 0, tenant="acme", retention_seconds=None)


def test_a_cursor_before_the_retention_window_is_gone(engine: Engine, library: Path) -> None:
    run_id, _ = start(engine, scenario(engine), library)
    q.claim(engine, "w1", lease_seconds=30)
    old = time.time() - 3600
    q.append_events(engine, run_id, [event(1, old), event(2, old), event(3), event(4)])
    with pytest.raises(q.Gone) as gone:
        q.events_after(engine, run_id, 0, tenant=TENANT, retention_seconds=600)
    assert gone.value.status == 410
    with pytest.raises(q.Gone):
        q.events_after(engine, run_id, 1, tenant=TENANT, retention_seconds=600)
    page = q.events_after(engine, run_id, 2, tenant=TENANT, retention_seconds=600)
    assert [e["seq"] for e in page["events"]] == [3, 4]
    # A longer window serves them all.
    assert (
        len(q.events_after(engine, run_id, 0, tenant=TENANT, retention_seconds=7200)["events"]) == 4
    )


# --------------------------------------------------------------------------- finishing


def finished_run(library: Path, out: Path) -> Path:
    """A finished run directory of the example scenario."""
    run_scenario(validate_scenario(spec()), out, asset_root=library.parent)
    return out


def test_finish_records_the_run_whole_under_its_id(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    run_id, _ = start(engine, scenario(engine), library)
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    with pytest.raises(q.Conflict) as early:
        q.evidence(engine, run_id, tenant=TENANT)
    assert early.value.code == "not_converged"
    seen: list[dict[str, Any]] = []
    out = tmp_path / "run"
    execute(claimed, out, library, on_event=seen.append)
    q.append_events(engine, run_id, seen[:20], worker_id="w1")
    with pytest.raises(q.LeaseLost):
        q.finish(engine, run_id, "someone-else", out)
    q.finish(engine, run_id, "w1", out)
    row = run_row(engine, run_id)
    assert (row.execution_status, row.validity_status, row.evidence_status) == (
        "completed",
        "valid",
        "complete",
    )
    assert row.content_sha256 and row.result["status"]["execution"] == "completed"
    assert row.terminal_reason == "resolved_by_user" and row.lease_expires_at is None
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    assert [e["seq"] for e in page["events"]] == list(range(1, len(seen) + 1))
    package = q.evidence(engine, run_id, tenant=TENANT)
    assert len(package["records"]) > 20 and package["records"][0]["record_id"] == "r000001"
    assert {e["criterion"] for e in package["evidence"]} >= {"correct_amount", "resolved"}
    assert package["observations"] and package["completeness"]
    one = q.evidence(engine, run_id, tenant=TENANT, criterion="correct_amount")
    assert [e["criterion"] for e in one["evidence"]] == ["correct_amount"]
    cited = set(one["evidence"][0]["observation_ids"])
    assert {o["observation_id"] for o in one["observations"]} == cited
    assert set(one["evidence"][0]["evidence_refs"]) <= {r["record_id"] for r in one["records"]}
    with pytest.raises(q.NotFound):
        q.evidence(engine, run_id, tenant=TENANT, criterion="nope")
    with engine.connect() as conn:
        plans = conn.execute(
            sa.select(sa.func.count()).where(t.fault_plan.c.run_id == run_id)
        ).scalar_one()
    assert plans == 1
    with pytest.raises(q.LeaseLost):  # finished: nobody holds it any more
        q.finish(engine, run_id, "w1", out)


def test_ledger_show_prints_what_a_service_run_ran_with(
    engine: Engine,
    ledger_url: str,
    library: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The run's manifest row is the one frozen when it was queued; what it ran with (provider,
    model, kernel) is what its own manifest.json says, kept with the run when it finishes."""
    run_id, _ = start(engine, scenario(engine), library)
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    out = tmp_path / "run"
    execute(claimed, out, library)
    q.finish(engine, run_id, "w1", out)
    written = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert run_row(engine, run_id).recorded_manifest == written
    shown = show_run(engine, run_id)["manifest"]
    assert {k: shown[k] for k in ("provider", "model", "kernelVersion", "kernelFingerprint")} == {
        "provider": written["provider"],
        "model": written["model"],
        "kernelVersion": written["kernelVersion"],
        "kernelFingerprint": written["kernelFingerprint"],
    }
    assert shown["notOnline"] == written["notOnline"] != []
    capsys.readouterr()
    assert main(["ledger", "show", run_id, "--ledger", ledger_url]) == 0
    printed = capsys.readouterr().out
    assert "None" not in printed
    assert (
        f"provider {written['provider']} · model {written['model']} · "
        f"kernel {written['kernelVersion']} ({written['kernelFingerprint'][:12]})"
    ) in printed


def test_ledger_show_leaves_out_what_a_run_never_recorded(
    engine: Engine, ledger_url: str, library: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that ended without a result recorded no manifest.json: nothing is shown for it."""
    run_id, _ = start(engine, scenario(engine), library)
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    q.fail(engine, run_id, "w1", "the run process died")
    shown = show_run(engine, run_id)["manifest"]
    assert (shown["provider"], shown["model"], shown["kernelVersion"]) == (None, None, None)
    capsys.readouterr()
    assert main(["ledger", "show", run_id, "--ledger", ledger_url]) == 0
    printed = capsys.readouterr().out
    assert "None" not in printed and "provider" not in printed and "kernel" not in printed
    assert "ended by     the run process died" in printed


def test_a_worker_s_end_tried_again_finds_it_recorded_once(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    """A finish (or a fail) whose commit went through but whose answer was lost with the
    ledger's connection is tried again with `again`: the run this worker ended so is taken
    as recorded, nothing is written twice, and anyone else is still refused."""
    scenario_id = scenario(engine)
    run_id, _ = start(engine, scenario_id, library)
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    out = tmp_path / "run"
    execute(claimed, out, library)
    assert q.finish(engine, run_id, "w1", out) == "completed"
    written = (count_rows(engine, t.event, run_id), count_rows(engine, t.record, run_id))
    assert q.finish(engine, run_id, "w1", out, again=True) == "completed"
    assert (count_rows(engine, t.event, run_id), count_rows(engine, t.record, run_id)) == written
    with pytest.raises(q.LeaseLost):
        q.finish(engine, run_id, "w2", out, again=True)

    failed, _ = start(engine, scenario_id, library)
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    q.fail(engine, failed, "w1", "crashed: the run process was killed by SIGKILL")
    q.fail(engine, failed, "w1", "crashed: the run process was killed by SIGKILL", again=True)
    with pytest.raises(q.LeaseLost):  # not how this worker ended it
        q.fail(engine, failed, "w1", "cancelled: requested", execution="cancelled", again=True)
    # A run a reclaimer ended keeps its worker as the lease's owner, but it is not taken for
    # one the worker recorded.
    lost, _ = start(engine, scenario_id, library)
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    assert reclaim_later(engine) == [q.Reclaimed(lost, "crashed", 1)]
    with pytest.raises(q.LeaseLost):
        q.finish(engine, lost, "w1", out, again=True)
    with pytest.raises(q.LeaseLost):
        q.fail(engine, lost, "w1", "crashed: the run ended without a result", again=True)
    assert run_row(engine, lost).terminal_reason == "worker_lost"


# --------------------------------------------------------------------------- cancelling


def test_cancelling_a_pending_run_ends_it_at_once(engine: Engine, library: Path) -> None:
    run_id, _ = start(engine, scenario(engine), library)
    assert q.request_cancel(engine, run_id, "not needed", tenant=TENANT) == "cancelled"
    row = run_row(engine, run_id)
    assert (row.execution_status, row.terminal_reason) == ("cancelled", "cancelled: not needed")
    assert row.ended_at is not None and row.cancel_reason == "not needed"
    assert q.claim(engine, "w1", lease_seconds=30) is None
    with pytest.raises(q.Conflict) as terminal:
        q.request_cancel(engine, run_id, "again", tenant=TENANT)
    assert terminal.value.code == "terminal"
    with pytest.raises(q.NotFound):
        q.request_cancel(engine, run_id, "x", tenant="acme")
    assert q.evidence(engine, run_id, tenant=TENANT)["records"] == []


def test_cancelling_a_running_run_asks_its_worker(engine: Engine, library: Path) -> None:
    run_id, _ = start(engine, scenario(engine), library)
    q.claim(engine, "w1", lease_seconds=30)
    assert q.request_cancel(engine, run_id, "wrong prompt", tenant=TENANT) == "cancelling"
    assert q.get_run(engine, run_id, tenant=TENANT)["execution_status"] == "cancelling"
    beat = q.heartbeat(engine, run_id, "w1", lease_seconds=30)
    assert (beat.lease_lost, beat.cancel, beat.cancel_reason) == (False, True, "wrong prompt")
    q.fail(engine, run_id, "w1", "cancelled: wrong prompt", execution="cancelled")
    row = run_row(engine, run_id)
    assert (row.execution_status, row.evidence_status) == ("cancelled", "partial")


# --------------------------------------------------------------------------- idempotency


def test_an_idempotency_key_answers_the_same_request_the_same_way(engine: Engine) -> None:
    ask = {"principal": "ci", "tenant": TENANT, "key": "k1", "request_sha256": "a" * 64}
    assert q.idempotent(engine, **ask) is None
    first = q.remember(engine, **ask, status_code=201, response={"scenario_id": "s1"})
    again = q.remember(engine, **ask, status_code=201, response={"scenario_id": "s2"})
    assert first == again == q.idempotent(engine, **ask)
    assert again.response == {"scenario_id": "s1"} and again.status_code == 201
    with pytest.raises(q.Conflict) as reused:
        q.idempotent(engine, **{**ask, "request_sha256": "b" * 64})
    assert reused.value.code == "idempotency_key_reused"
    with pytest.raises(q.Conflict):
        q.remember(engine, **{**ask, "request_sha256": "b" * 64}, status_code=201, response={})
    # Keys belong to their principal.
    assert q.idempotent(engine, **{**ask, "principal": "other"}) is None


def test_writes_with_a_key_happen_once_even_when_sent_together(
    engine: Engine, library: Path
) -> None:
    key = q.IdempotencyKey("ci", "create-1", "c" * 64)
    scenario_id = q.create_scenario(
        engine,
        tenant=TENANT,
        namespace="support",
        name="refund",
        owner="qa",
        risk_level="high",
        idempotency=key,
    )
    assert scenario_id == q.create_scenario(
        engine,
        tenant=TENANT,
        namespace="support",
        name="refund",
        owner="qa",
        risk_level="high",
        idempotency=key,
    )
    q.submit_version(
        engine,
        tenant=TENANT,
        scenario_id=scenario_id,
        version=VERSION,
        spec=spec(),
        source=None,
        created_by="ana",
    )
    run_key = q.IdempotencyKey("ci", "run-1", "d" * 64)
    answers: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def send() -> None:
        try:
            barrier.wait(timeout=30)
            answers.append(start(engine, scenario_id, library, idempotency=run_key))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not errors and len(answers) == 4 and len(set(answers)) == 1
    assert q.count_active(engine) == 1
    stored = q.idempotent(
        engine, principal="ci", tenant=TENANT, key="run-1", request_sha256="d" * 64
    )
    assert stored is not None and stored.status_code == 202
    assert stored.response == {"run_id": answers[0][0], "manifest_id": answers[0][1]}
    with pytest.raises(q.Conflict):
        start(engine, scenario_id, library, idempotency=q.IdempotencyKey("ci", "run-1", "e" * 64))
    cancel_key = q.IdempotencyKey("ci", "cancel-1", "f" * 64)
    run_id = answers[0][0]
    assert (
        q.request_cancel(engine, run_id, "x", tenant=TENANT, idempotency=cancel_key) == "cancelled"
    )
    # Repeated, the cancel is answered as it was, although the run has ended since.
    assert (
        q.request_cancel(engine, run_id, "x", tenant=TENANT, idempotency=cancel_key) == "cancelled"
    )
    # A stored error is handed back as it was stored.
    q.remember(
        engine,
        principal="ci",
        tenant=TENANT,
        key="bad",
        request_sha256="0" * 64,
        status_code=422,
        response={"code": "unprocessable"},
    )
    with pytest.raises(q.StoredAnswer) as replay:
        start(engine, scenario_id, library, idempotency=q.IdempotencyKey("ci", "bad", "0" * 64))
    assert replay.value.status == 422 and replay.value.stored.response == {"code": "unprocessable"}
