"""Cancelling a run: a pending run ends `cancelled` at once; a running one answers
`cancelling`, reads `cancelling` until it has ended, and its worker hears of it within a second,
whatever its heartbeat period — PostgreSQL announces the request on a channel in the transaction
that records it, SQLite is looked at every fraction of a second. A run that finished before the
stop reached it keeps what it ended as. Nothing here measures time: a worker whose heartbeat
comes every 30 s stops the run before its first renewal (its recorded heartbeat never moves),
and a listener hears the notification the cancellation sent. On SQLite and PostgreSQL."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
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
from simreport.service.cancellation import CancelWatch
from simreport.service.keeper import Lease
from tests.service.in_process import in_process_api, refund_spec
from tests.support.ledgers import POSTGRES_URL, fresh_ledger
from tests.support.service_helpers import Worker, add_agent, queue_run, write_agents

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
TENANT = "local"
VERSION = "1.3.0"
WAIT = 60.0
"""The longest any test waits for one thing to happen."""


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The refund desk's library with a slow agent (0.4 s a turn) to cancel midway."""
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    write_agents(root, "service_agents", delay=0.4)
    add_agent(root / "assets", "slow-agent", "service_agents:respond")
    return root / "assets"


def queued(engine: Engine, library: Path, agent: str | None = None, name: str = "refund") -> str:
    spec = load_document(EXAMPLE / "scenario.yaml").data
    assert isinstance(spec, dict)
    if agent is not None:
        spec["sut"]["agent"] = agent
    return queue_run(engine, library, spec, name=name, version=VERSION)


def row(engine: Engine, run_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.select(t.run).where(t.run.c.run_id == run_id)).one()


def status(engine: Engine, run_id: str) -> str:
    return str(q.get_run(engine, run_id, tenant=TENANT)["execution_status"])


def wait_until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT:g} s for {what}")
        time.sleep(0.02)


# --------------------------------------------------------------------------- the queue


def test_a_pending_run_is_cancelled_at_once(engine: Engine, library: Path) -> None:
    run_id = queued(engine, library)
    assert q.request_cancel(engine, run_id, "not needed", tenant=TENANT) == "cancelled"
    assert status(engine, run_id) == "cancelled"
    assert q.cancellations(engine, [run_id]) == {}  # nothing for a worker to stop
    with pytest.raises(q.Conflict) as ended:
        q.request_cancel(engine, run_id, "again", tenant=TENANT)
    assert ended.value.code == "terminal"


def test_a_running_run_reads_cancelling_until_its_worker_ends_it(
    engine: Engine, library: Path
) -> None:
    run_id = queued(engine, library)
    other = queued(engine, library, name="other")
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    assert q.cancellations(engine, [run_id, other]) == {}
    assert q.request_cancel(engine, run_id, "wrong prompt", tenant=TENANT) == "cancelling"
    assert status(engine, run_id) == "cancelling" and status(engine, other) == "running"
    detail = q.run_detail(engine, run_id, tenant=TENANT)
    assert (detail["execution_status"], detail["cancel_reason"]) == ("cancelling", "wrong prompt")
    assert row(engine, run_id).execution_status == "running"  # what the ledger keeps
    # Asked again: the same answer, the first reason kept.
    assert q.request_cancel(engine, run_id, "twice", tenant=TENANT) == "cancelling"
    assert q.cancellations(engine, [run_id, other, "run-unknown"]) == {run_id: "wrong prompt"}
    q.fail(engine, run_id, "w1", "cancelled: wrong prompt", execution="cancelled")
    assert status(engine, run_id) == "cancelled"
    assert q.cancellations(engine, [run_id]) == {}


def test_a_run_that_finished_before_the_stop_reached_it_stays_completed(
    engine: Engine, library: Path, tmp_path: Path
) -> None:
    run_id = queued(engine, library)
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    out = tmp_path / "run"
    run_scenario(
        validate_scenario(claimed.scenario),
        out,
        condition="service",
        replication=0,
        asset_root=library.parent,
        checks=claimed.checks,
    )
    assert q.request_cancel(engine, run_id, "too late", tenant=TENANT) == "cancelling"
    assert q.finish(engine, run_id, "w1", out) == "completed"
    ended = row(engine, run_id)
    assert (ended.execution_status, ended.cancel_reason) == ("completed", "too late")
    assert not ended.terminal_reason.startswith("cancelled")
    assert status(engine, run_id) == "completed"


# --------------------------------------------------------------------------- the worker's watch


def test_the_cancel_watch_marks_the_lease_of_a_cancelled_run(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library)
    other = queued(engine, library, name="other")
    q.claim(engine, "w1", lease_seconds=30)
    q.claim(engine, "w1", lease_seconds=30)
    leases = [Lease(run_id, "w1"), Lease(other, "w1")]
    said: list[str] = []
    watched = connect(ledger_url)
    watch = CancelWatch(watched, lambda: leases, said.append)
    watch.start()
    try:
        wait_until("the watch to listen or poll", watch.ready.is_set)
        q.request_cancel(engine, run_id, "stop it", tenant=TENANT)
        wait_until("the watch to hear of it", lambda: leases[0].cancel)
    finally:
        watch.close()
        watched.dispose()
    assert (leases[0].cancel, leases[0].cancel_reason) == (True, "stop it")
    assert not leases[1].cancel
    assert watch.counts["found"] == 1 and not said
    if ledger_url.startswith("postgresql"):
        assert watch.counts["notified"] >= 1  # heard, not polled for


@pytest.mark.requires(bool(POSTGRES_URL), "PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)")
def test_a_cancellation_is_announced_as_its_transaction_commits(
    tmp_path: Path, library: Path
) -> None:
    with fresh_ledger("postgresql", tmp_path / "unused.sqlite") as url:
        engine = connect(url)
        try:
            run_id = queued(engine, library)
            pending = queued(engine, library, name="pending")
            q.claim(engine, "w1", lease_seconds=30)
            raw = engine.raw_connection()
            listener: Any = raw.driver_connection
            raw.detach()
            listener.rollback()
            listener.autocommit = True
            listener.execute(f"LISTEN {q.CANCEL_CHANNEL}")
            q.request_cancel(engine, pending, "pending", tenant=TENANT)  # ends: nothing to say
            q.request_cancel(engine, run_id, "stop", tenant=TENANT)
            heard = [n.payload for n in listener.notifies(timeout=WAIT, stop_after=1)]
            listener.close()
        finally:
            engine.dispose()
    assert heard == [run_id]


@pytest.mark.slow
def test_a_worker_stops_a_cancelled_run_before_its_next_heartbeat(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    """Heartbeats every 30 s: the run is claimed, cancelled while it runs and ended cancelled
    with its heartbeat never renewed after the claim — the worker heard of the cancellation
    without one (it renews at the start of each period, the claim's within the first)."""
    run_id = queued(engine, library, agent="slow-agent@1.0.0")

    def steps() -> int:
        page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
        return sum(e["type"] == "agent.step" for e in page["events"])

    with Worker(
        ledger_url, library, max_runs=1, lease_seconds=120.0, heartbeat_seconds=30.0
    ) as worker:
        wait_until("the run under way", lambda: steps() >= 2)
        claimed = row(engine, run_id)
        assert q.request_cancel(engine, run_id, "wrong prompt", tenant=TENANT) == "cancelling"
        wait_until("the cancelled run's end", lambda: bool(worker.outcomes))
    assert worker.outcomes == [(run_id, "cancelled")]
    ended = row(engine, run_id)
    assert (ended.execution_status, ended.evidence_status) == ("cancelled", "partial")
    assert ended.terminal_reason == "cancelled: wrong prompt"
    assert ended.result["failure"]["type"] == "Interrupted"  # stopped midway, not finished
    assert ended.heartbeat_at == claimed.heartbeat_at  # no heartbeat came in between
    assert status(engine, run_id) == "cancelled"


# --------------------------------------------------------------------------- over HTTP


def test_over_http_cancel_answers_what_the_run_reads(ledger_url: str, tmp_path: Path) -> None:
    with in_process_api(ledger_url, tmp_path) as api:
        scenario_id = api.scenario("refund", refund_spec())
        pending = api.run(scenario_id, seed=1)["run_id"]
        answer = api.post(f"/runs/{pending}:cancel", {"reason": "not needed"})
        assert (answer.status_code, answer.json()) == (202, {"execution_status": "cancelled"})
        running = api.run(scenario_id, seed=2)["run_id"]
        engine = connect(ledger_url)
        try:
            assert q.claim(engine, "w1", lease_seconds=30) is not None
        finally:
            engine.dispose()
        cancel = f"/runs/{running}:cancel"
        answer = api.post(cancel, {"reason": "wrong prompt"}, key="k-cancel")
        assert (answer.status_code, answer.json()) == (202, {"execution_status": "cancelling"})
        again = api.post(cancel, {"reason": "wrong prompt"}, key="k-cancel")
        assert (again.status_code, again.json()) == (202, {"execution_status": "cancelling"})
        assert api.get(f"/runs/{running}").json()["execution_status"] == "cancelling"
        openapi = api.client.get("http://testserver/openapi.json").json()
        assert "cancelling" in str(openapi["components"]["schemas"]["RunStatus"])
