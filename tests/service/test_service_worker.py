"""Workers of the run service: claimed runs execute one after another in a run process of the
worker's, each with its agents imported afresh; a run streams its events while it runs and ends
in a terminal status however it goes — completed, cancelled while running (and only it),
killed with its worker (reclaimed, `worker_lost`; or, queued with a retry, run again by another
worker, and `worker_lost` when the retry is killed too), crashed in its own process (the next run
gets a fresh one), or stopped with its worker. On SQLite and PostgreSQL; every wait is
bounded."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from simreport.core.files import load_document
from simreport.ledger import tables as t
from simreport.ledger.db import as_utc
from simreport.service import queue as q
from tests.support.processes import descendants, wait_gone
from tests.support.service_helpers import Worker, add_agent, queue_run, write_agents

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
SIMREPORT = Path(sys.executable).parent / "simreport"
TENANT = "local"
VERSION = "1.3.0"
WAIT = 60.0
"""The longest any test waits for one thing to happen."""


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The refund desk's asset library, with two more agents: a slow one and one whose
    process dies (the run's asset root, the library's parent, is where they are imported
    from)."""
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    write_agents(root, "service_agents", delay=0.4)
    add_agent(root / "assets", "slow-agent", "service_agents:respond")
    add_agent(root / "assets", "dying-agent", "service_agents:die")
    return root / "assets"


def queued(
    engine: Engine,
    library: Path,
    agent: str | None = None,
    *,
    name: str | None = None,
    retries: int = 0,
) -> str:
    """A run of the refund desk (with `agent` as the agent under test) queued, as a scenario
    named `name` (default: the agent's), with `retries` retries when its worker is lost; its
    id."""
    data = load_document(EXAMPLE / "scenario.yaml").data
    assert isinstance(data, dict)
    name = name or agent or "reference"
    if agent is not None:
        data["sut"]["agent"] = agent
    return queue_run(engine, library, data, name=name, version=VERSION, retries=retries)


def wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.05)


def row(engine: Engine, run_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.select(t.run).where(t.run.c.run_id == run_id)).one()


def seqs(engine: Engine, run_id: str) -> list[int]:
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    return [e["seq"] for e in page["events"]]


def gapless(engine: Engine, run_id: str) -> list[int]:
    found = seqs(engine, run_id)
    assert found == list(range(1, len(found) + 1))
    return found


# --------------------------------------------------------------------------- runs


def test_a_worker_executes_a_queued_run_to_completion(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library)
    worker = Worker(ledger_url, library, max_runs=1)
    worker.join()
    assert worker.outcomes == [(run_id, "completed")]
    assert q.get_run(engine, run_id, tenant=TENANT) == {
        "execution_status": "completed",
        "validity_status": "valid",
        "evidence_status": "complete",
        "quality_ref": None,
        "attempt": 1,
    }
    found = gapless(engine, run_id)
    assert len(found) > 50
    package = q.evidence(engine, run_id, tenant=TENANT)
    assert package["records"] and package["observations"] and package["evidence"]
    assert all(c["status"] == "present" for c in package["completeness"])
    done = row(engine, run_id)
    assert done.terminal_reason == "resolved_by_user" and done.lease_owner == "w-test"
    assert done.result["condition"] == "service" and done.content_sha256
    with engine.connect() as conn:  # the user's task and the conversation, as ingest records them
        task = conn.execute(sa.select(t.run_task).where(t.run_task.c.run_id == run_id)).one()
        session = conn.execute(
            sa.select(t.run_session).where(t.run_session.c.run_id == run_id)
        ).one()
    assert task.goal["goal"] and session.transport == "chat-completions"


def test_a_library_under_another_name_is_found(
    engine: Engine, ledger_url: str, library: Path, tmp_path: Path
) -> None:
    elsewhere = library.rename(tmp_path / "shared-library")  # the scenario expects `assets`
    run_id = queued(engine, elsewhere)
    worker = Worker(ledger_url, elsewhere, max_runs=1)
    worker.join()
    assert worker.outcomes == [(run_id, "completed")]


def test_events_stream_while_the_run_is_in_progress(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="slow-agent@1.0.0")
    with Worker(ledger_url, library, max_runs=1) as worker:
        wait_until("events of the running run", lambda: len(seqs(engine, run_id)) >= 5)
        assert q.get_run(engine, run_id, tenant=TENANT)["execution_status"] == "running"
        with pytest.raises(q.Conflict):  # evidence has not converged
            q.evidence(engine, run_id, tenant=TENANT)
        wait_until("the run's end", lambda: bool(worker.outcomes))
    assert worker.outcomes == [(run_id, "completed")]
    gapless(engine, run_id)


def test_a_run_cancelled_while_running_ends_cancelled_with_partial_evidence(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="slow-agent@1.0.0")
    with Worker(ledger_url, library, max_runs=1) as worker:
        wait_until("the run under way", lambda: len(seqs(engine, run_id)) >= 5)
        assert q.request_cancel(engine, run_id, "wrong prompt", tenant=TENANT) == "cancelling"
        wait_until("the cancelled run's end", lambda: bool(worker.outcomes))
    assert worker.outcomes == [(run_id, "cancelled")]
    ended = row(engine, run_id)
    assert (ended.execution_status, ended.evidence_status) == ("cancelled", "partial")
    assert ended.terminal_reason == "cancelled: wrong prompt"
    assert ended.result["failure"]["type"] == "Interrupted"
    found = gapless(engine, run_id)
    last = q.events_after(engine, run_id, found[-2], tenant=TENANT, retention_seconds=None)
    assert [e["type"] for e in last["events"]] == ["run_finished"]
    package = q.evidence(engine, run_id, tenant=TENANT)  # the partial run's records are kept
    assert package["records"]
    with pytest.raises(q.Conflict):
        q.request_cancel(engine, run_id, "again", tenant=TENANT)


def test_a_run_cancelled_while_pending_is_never_executed(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    cancelled = queued(engine, library)
    q.request_cancel(engine, cancelled, "changed my mind", tenant=TENANT)
    after = queued(engine, library, name="after")  # queued later: claimed only past the other
    worker = Worker(ledger_url, library, max_runs=1)
    worker.join()
    assert worker.outcomes == [(after, "completed")]
    assert row(engine, cancelled).execution_status == "cancelled"
    assert seqs(engine, cancelled) == []


def test_a_run_whose_process_dies_ends_crashed_with_why(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="dying-agent@1.0.0")
    worker = Worker(ledger_url, library, max_runs=1)
    worker.join()
    assert worker.outcomes == [(run_id, "crashed")]
    ended = row(engine, run_id)
    code, _, why = ended.terminal_reason.partition(": ")
    assert code == "crashed" and "SIGKILL" in why
    assert ended.evidence_status == "partial" and ended.ended_at is not None
    assert len(gapless(engine, run_id)) >= 1  # what it emitted before it died


COUNTING_AGENT = """
import os
from quick_agents import respond

with open({log!r}, "a", encoding="utf-8") as log:
    log.write(f"{{os.getpid()}}\\n")
"""
"""The careful agent, noting the process that imports it in a file."""


def test_runs_share_a_run_process_and_import_their_agents_afresh(
    engine: Engine, ledger_url: str, library: Path, tmp_path: Path
) -> None:
    imports = tmp_path / "imports.log"
    write_agents(library.parent, "quick_agents", delay=0)
    (library.parent / "counting_agents.py").write_text(
        COUNTING_AGENT.format(log=str(imports)), encoding="utf-8"
    )
    add_agent(library, "counting-agent", "counting_agents:respond")
    runs = [queued(engine, library, "counting-agent@1.0.0", name=f"counting-{i}") for i in (1, 2)]
    worker = Worker(ledger_url, library, max_runs=2)
    worker.join()
    assert worker.outcomes == [(run_id, "completed") for run_id in runs]
    first, second = imports.read_text(encoding="utf-8").split()
    assert first == second  # one run process, which imported the agent for each run


def test_a_cancellation_stops_only_the_run_it_was_meant_for(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    slow = queued(engine, library, agent="slow-agent@1.0.0")
    after = queued(engine, library)
    with Worker(ledger_url, library, max_runs=2) as worker:
        wait_until("the slow run under way", lambda: len(seqs(engine, slow)) >= 5)
        q.request_cancel(engine, slow, "enough", tenant=TENANT)
        wait_until("both runs' end", lambda: len(worker.outcomes) == 2)
    assert worker.outcomes == [(slow, "cancelled"), (after, "completed")]
    assert row(engine, after).terminal_reason == "resolved_by_user"
    gapless(engine, after)


def test_the_run_after_a_crashed_one_gets_a_fresh_run_process(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    dying = queued(engine, library, agent="dying-agent@1.0.0")
    after = queued(engine, library)
    worker = Worker(ledger_url, library, max_runs=2)
    worker.join()
    assert worker.outcomes == [(dying, "crashed"), (after, "completed")]
    gapless(engine, after)


# --------------------------------------------------------------------------- worker processes


def worker_process(ledger_url: str, library: Path, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(SIMREPORT),
            "worker",
            "--ledger",
            ledger_url,
            "--library",
            str(library),
            "--lease-seconds",
            "2",
            "--heartbeat-seconds",
            "0.4",
            "--poll-seconds",
            "0.05",
            *more,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_a_worker_killed_mid_run_loses_the_run_which_ends_crashed(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="slow-agent@1.0.0")
    proc = worker_process(ledger_url, library)
    try:
        wait_until("the run under way", lambda: len(seqs(engine, run_id)) >= 3)
        assert row(engine, run_id).execution_status == "running"
    finally:
        orphans = kill(proc)
    streamed = len(seqs(engine, run_id))
    assert orphans, "the worker had no run process"
    wait_gone(orphans, "the killed worker's run process to notice and exit")
    assert reclaimed_once_the_lease_ran_out(engine, run_id) == [run_id]
    ended = row(engine, run_id)
    assert (ended.execution_status, ended.terminal_reason) == ("crashed", "worker_lost")
    assert ended.evidence_status == "partial" and ended.retries == 0
    assert len(gapless(engine, run_id)) == streamed  # nothing arrived after the kill
    assert q.claim(engine, "w-later", lease_seconds=10) is None  # not retried


def reclaimed(engine: Engine, now: datetime) -> list[str]:
    return [lost.run_id for lost in q.reclaim_expired(engine, now=now)]


def reclaimed_once_the_lease_ran_out(engine: Engine, run_id: str) -> list[str]:
    """What a reclaimer ends once the run's lease has run out and stayed so: looks at given
    moments, none waited for. At the lease's end it is not expired yet; just past it, the first
    look marks the run; a confirmation period later (half the lease, a second at least), the
    next reclaims it."""
    held = row(engine, run_id)
    expires, renewed = as_utc(held.lease_expires_at), as_utc(held.heartbeat_at)
    assert expires is not None and renewed is not None
    assert reclaimed(engine, expires) == []
    assert row(engine, run_id).lease_suspected_at is None
    past = expires + timedelta(milliseconds=1)
    assert reclaimed(engine, past) == []
    assert row(engine, run_id).lease_suspected_at is not None
    confirmed = past + timedelta(
        seconds=q.confirmation_seconds((expires - renewed).total_seconds())
    )
    assert reclaimed(engine, confirmed - timedelta(milliseconds=1)) == []
    return reclaimed(engine, confirmed)


def kill(proc: subprocess.Popen[str]) -> set[int]:
    """SIGKILL the worker; the processes it had started, orphaned now."""
    orphans = descendants(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=WAIT)
    return orphans


def records(engine: Engine, run_id: str) -> list[str]:
    """The run's record ids, without the run's prefix."""
    with engine.connect() as conn:
        found = conn.execute(
            sa.select(t.record.c.record_id).where(t.record.c.run_id == run_id)
        ).scalars()
        return sorted(str(record_id).removeprefix(run_id + "/") for record_id in found)


def events_of(engine: Engine, run_id: str) -> list[dict[str, Any]]:
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    events: list[dict[str, Any]] = page["events"]
    return events


def test_with_a_retry_a_killed_worker_s_run_is_claimed_again_and_completes(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="slow-agent@1.0.0", retries=1)
    manifest_id = row(engine, run_id).manifest_id
    first = worker_process(ledger_url, library, "--worker-id", "w-first")
    try:
        wait_until("the run under way", lambda: len(seqs(engine, run_id)) >= 3)
        kill(first)
    finally:
        kill(first)
    streamed = len(seqs(engine, run_id))
    assert records(engine, run_id) == []  # a run's records come only with its end
    # Another worker reclaims the run once the lease runs out, claims it again and runs it.
    second = worker_process(ledger_url, library, "--worker-id", "w-second")
    try:
        wait_until(
            "the retry to complete", lambda: row(engine, run_id).execution_status == "completed"
        )
        # The same seed and manifest, run as an ordinary run for comparison.
        reference = queued(engine, library, agent="slow-agent@1.0.0", name="reference")
        wait_until(
            "the reference run", lambda: row(engine, reference).execution_status == "completed"
        )
    finally:
        second.send_signal(signal.SIGTERM)
        output, _ = second.communicate(timeout=WAIT)
    assert f"{run_id} completed" in output, output
    done = row(engine, run_id)
    assert (done.retries, done.attempts, done.lease_owner) == (1, 2, "w-second")
    assert done.manifest_id == manifest_id and done.terminal_reason == "resolved_by_user"
    assert q.get_run(engine, run_id, tenant=TENANT) == {
        "execution_status": "completed",
        "validity_status": "valid",
        "evidence_status": "complete",
        "quality_ref": None,
        "attempt": 2,
    }
    events = events_of(engine, run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))  # one sequence
    mark = events[streamed]
    assert mark["type"] == "run_retried" and mark["seq"] == streamed + 1 == done.event_seq_base
    assert mark["payload"]["attempt"] == 2 and mark["payload"]["lost"]["worker"] == "w-first"
    assert [e["type"] for e in events].count("run_retried") == 1
    retry, whole = events[streamed + 1 :], events_of(engine, reference)
    assert [e["type"] for e in retry] == [e["type"] for e in whole]  # the retry is whole
    assert retry[0]["type"] == "run_started" and retry[-1]["type"] == "run_finished"
    assert records(engine, run_id) == records(engine, reference) != []  # recorded once
    assert q.evidence(engine, run_id, tenant=TENANT)["evidence"]


def test_a_retry_whose_worker_is_killed_too_ends_crashed(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="slow-agent@1.0.0", retries=1)
    first = worker_process(ledger_url, library, "--worker-id", "w-first")
    try:
        wait_until("the run under way", lambda: len(seqs(engine, run_id)) >= 3)
    finally:
        orphans = kill(first)
    assert orphans, "the worker had no run process"
    wait_gone(orphans, "the first worker's run process to exit")
    assert reclaimed_once_the_lease_ran_out(engine, run_id) == [run_id]
    base = row(engine, run_id).event_seq_base
    assert row(engine, run_id).execution_status == "pending" and base > 3
    second = worker_process(ledger_url, library, "--worker-id", "w-second")
    try:
        wait_until("the retry under way", lambda: len(seqs(engine, run_id)) >= base + 3)
        assert (row(engine, run_id).execution_status, row(engine, run_id).attempts) == (
            "running",
            2,
        )
    finally:
        orphans = kill(second)
    streamed = len(seqs(engine, run_id))
    assert orphans, "the worker had no run process"
    wait_gone(orphans, "the second worker's run process to exit")
    assert reclaimed_once_the_lease_ran_out(engine, run_id) == [run_id]
    ended = row(engine, run_id)
    assert (ended.execution_status, ended.evidence_status) == ("crashed", "partial")
    assert ended.terminal_reason.partition(": ")[0] == "worker_lost"
    assert (ended.retries, ended.attempts) == (1, 2)
    events = events_of(engine, run_id)
    assert len(events) == streamed  # nothing arrived after the kill
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events].count("run_retried") == 1
    assert events[base - 1]["type"] == "run_retried"
    assert records(engine, run_id) == []
    assert q.claim(engine, "w-later", lease_seconds=10) is None


def test_sigterm_stops_a_worker_after_recording_its_run(
    engine: Engine, ledger_url: str, library: Path
) -> None:
    run_id = queued(engine, library, agent="slow-agent@1.0.0")
    proc = worker_process(ledger_url, library, "--drain-seconds", "0")
    try:
        wait_until("the run under way", lambda: len(seqs(engine, run_id)) >= 3)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=WAIT)
    assert proc.returncode == 0, output
    assert f"{run_id} cancelled" in output and "stopped after 1 run(s)" in output
    ended = row(engine, run_id)
    assert (ended.execution_status, ended.terminal_reason) == (
        "cancelled",
        "cancelled: the worker stopped",
    )
    gapless(engine, run_id)


def test_a_dead_worker_s_spool_is_recorded_once_by_the_next_worker(
    engine: Engine, ledger_url: str, library: Path, tmp_path: Path
) -> None:
    """A worker that died with ended runs in its spool (the ledger had not taken them) left
    them on disk. The next worker started with that spool records each under the dead
    worker's lease while it stands — a finished run whole, a crashed one with the events it
    had not streamed — drops one whose lease was lost meanwhile (its run stays as the
    reclaimer ended it), and leaves alone an entry a live worker holds."""
    from datetime import timedelta

    from simreport.kernel.engine import run_scenario, validate_scenario
    from simreport.ledger.db import utc_now
    from simreport.service.spool import Ending, Spool, ledger_name

    spool = Spool(tmp_path / "spool", ledger_name(ledger_url))

    def executed(owner: str, lease: float, events: list[dict[str, Any]] | None = None) -> Path:
        claimed = q.claim(engine, owner, lease_seconds=lease)
        assert claimed is not None
        work = tmp_path / f"work-{owner}-{claimed.run_id}"
        run_scenario(
            validate_scenario(claimed.scenario),
            work / "run",
            condition="service",
            replication=0,
            asset_root=library.parent,
            checks=claimed.checks,
            on_event=None if events is None else events.append,
        )
        return work

    def kept(
        run_id: str, owner: str, ending: Ending, work: Path, events: list[dict[str, Any]]
    ) -> Any:
        entry = spool.keep(
            run_id=run_id, attempt=1, owner=owner, ending=ending, events=events, work=work
        )
        assert entry.on_disk
        return entry

    whole = Ending("finish", "completed")
    finished = queued(engine, library, name="finished")
    spool.release(kept(finished, "w-dead", whole, executed("w-dead", 300), []))
    crashed = queued(engine, library, name="crashed")
    emitted: list[dict[str, Any]] = []
    work = executed("w-dead", 300, emitted)
    why = "crashed: the run process was killed by SIGKILL"
    spool.release(kept(crashed, "w-dead", Ending("fail", "crashed", why), work, emitted[:5]))
    lost = queued(engine, library, name="lost")
    spool.release(kept(lost, "w-gone", whole, executed("w-gone", 30), []))
    moment = utc_now() + timedelta(seconds=60)  # only the lease of 30 s has run out
    assert q.reclaim_expired(engine, now=moment) == []
    later = moment + timedelta(seconds=q.confirmation_seconds(30))
    assert q.reclaim_expired(engine, now=later) == [q.Reclaimed(lost, "crashed", 1)]
    held = queued(engine, library, name="held")
    alive = kept(held, "w-alive", whole, executed("w-alive", 300), [])

    try:
        worker = Worker(
            ledger_url, library, max_runs=0, spool=tmp_path / "spool", drain_seconds=WAIT
        )
        worker.join()
        assert sorted(worker.outcomes) == sorted(
            [(finished, "completed"), (crashed, "crashed"), (lost, "lease_lost")]
        )
        done = row(engine, finished)
        assert (done.execution_status, done.lease_owner) == ("completed", "w-dead")
        assert done.terminal_reason == "resolved_by_user" and records(engine, finished)
        assert len(gapless(engine, finished)) > 50
        ended = row(engine, crashed)
        assert (ended.execution_status, ended.terminal_reason) == ("crashed", why)
        assert gapless(engine, crashed) == [1, 2, 3, 4, 5]
        assert row(engine, lost).terminal_reason == "worker_lost"
        assert not records(engine, lost)
        assert row(engine, held).execution_status == "running"
        assert [p.name for p in spool.folder.iterdir()] == [alive.folder.name]
    finally:
        spool.remove(alive)


def test_run_folders_left_by_a_killed_worker_are_removed_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed outright cannot remove its scratch run folders; the next worker to
    start removes those whose worker is gone, and leaves a running worker's and anything
    else alone."""
    from simreport.service import scratch as w

    monkeypatch.setattr(w, "_scratch", lambda: str(tmp_path))
    monkeypatch.setattr(w.tempfile, "gettempdir", lambda: str(tmp_path))
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(gone.stdout)
    left = tmp_path / f"{w.SCRATCH_PREFIX}{dead_pid}-abc123"
    (left / "run").mkdir(parents=True)
    (left / "run" / "events.jsonl").write_text("{}\n")
    live = tmp_path / f"{w.SCRATCH_PREFIX}{os.getpid()}-def456"
    live.mkdir()
    other = tmp_path / "simreport-run-unknownowner"
    other.mkdir()
    assert w.sweep_scratch() == 1
    assert not left.exists() and live.exists() and other.exists()
    assert w._scratch_prefix() == f"{w.SCRATCH_PREFIX}{os.getpid()}-"
