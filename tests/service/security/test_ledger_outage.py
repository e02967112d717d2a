"""Attacks on "a finished run is recorded once, whatever the ledger does": the ledger goes away
while workers execute and finish runs, and comes back. Real `simreport api` and `simreport
worker` processes; a PostgreSQL server of the test's own, stopped and started again; a SQLite
ledger on a small tmpfs that fills up and is freed.

Executions are counted, not only final states: the agent under test appends a line to a file
each time a run imports it (once per execution), so N completed runs and N lines mean each run
executed exactly once. Leases are short (LEASE seconds) and every outage lasts at least twice
as long, so a lease that is not kept alive meanwhile runs out.

- PostgreSQL stopped mid-way through a queue of runs, then started: every run completes, each
  executed once; a request meanwhile gets 503 `ledger_unavailable`.
- Runs that finish while PostgreSQL is down (a slow agent), queued with and without a retry of
  lost runs (`--retry-lost-runs 1`): each recorded once, none executed again.
- A SQLite ledger whose disk fills up while runs finish, then is freed: every run completes,
  each executed once; a request meanwhile gets 503 `ledger_disk_full`.

Each waits with a deadline for what it needs (runs under way, runs kept in the workers' spool)
and checks that the outage met finished runs: otherwise it would prove nothing.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from simreport.ledger import connect
from simreport.ledger import tables as t
from tests.support.service_helpers import TOKEN, Cluster, add_agent, write_agents

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"
POSTGRES_SH = Path(__file__).resolve().parents[2] / "cluster" / "postgres.sh"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
VERSION = "1.3.0"
TERMINAL = ("completed", "crashed", "cancelled")
LEASE = 3.0
"""The workers' lease (seconds); each outage lasts at least OUTAGE_LEASES times as long."""
OUTAGE_LEASES = 2.0
HEARTBEAT = 0.5
WAIT = 90.0
"""The longest a test waits for one thing to happen."""
REQUEST_TIMEOUT = 30.0


def _postgres_installed() -> bool:
    return shutil.which("pg_ctl") is not None or bool(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))


def _tmpfs_mounts() -> bool:
    """Whether this process may mount a tmpfs (root, with mount and umount at hand)."""
    if shutil.which("mount") is None or shutil.which("umount") is None:
        return False
    probe = tempfile.mkdtemp(prefix="simreport-mount-")
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", probe],
            capture_output=True,
            check=False,
        )
        if mounted.returncode != 0:
            return False
        subprocess.run(["umount", probe], capture_output=True, check=False)
        return True
    finally:
        os.rmdir(probe)


needs_postgres = pytest.mark.requires(
    _postgres_installed(), "PostgreSQL's server programs (initdb, pg_ctl)"
)
needs_tmpfs = pytest.mark.requires(_tmpfs_mounts(), "a tmpfs mount (root)")

# The agent under test: answers as the careful refund agent after DELAY seconds a turn, and
# notes each execution (each run imports it afresh) in the executions file.
COUNTED_AGENT = """
import os
from {agents} import respond

with open({log!r}, "a", encoding="utf-8") as _log:
    _log.write(f"{{os.getpid()}}\\n")
"""


# --------------------------------------------------------------------------- components


class PrivateServer:
    """A PostgreSQL server of the test's own (tests/cluster/postgres.sh), to stop and start."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _script(self, action: str) -> None:
        done = subprocess.run(
            [str(POSTGRES_SH), action, str(self.folder)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def start(self) -> None:
        self._script("start")

    def stop(self) -> None:
        """Stop the server (pg_ctl stop -m fast: connections are ended)."""
        self._script("stop")

    def new_database(self) -> str:
        """The URL of a fresh database on the server."""
        import uuid

        url = (self.folder / "url").read_text(encoding="utf-8").strip()
        server = sa.engine.make_url(url)
        name = f"outage_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        finally:
            admin.dispose()
        return server.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PrivateServer]:
    # Not under pytest's temporary folder: its root-only parent would keep the server's user
    # (postgres, when the tests run as root) out.
    folder = Path(tempfile.mkdtemp(prefix="simreport-pg-"))
    server = PrivateServer(folder)
    try:
        server.start()
        yield server
    finally:
        subprocess.run([str(POSTGRES_SH), "stop", str(folder)], capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The refund desk with two counted agents: `counted-quick` (0.05 s a turn) and
    `counted-slow` (0.5 s a turn), both noting their executions in tmp_path/executions."""
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    log = str(tmp_path / "executions")
    for name, delay in (("quick", 0.05), ("slow", 0.5)):
        write_agents(root, f"{name}_agents", delay=delay)
        counted = COUNTED_AGENT.format(agents=f"{name}_agents", log=log)
        (root / f"counted_{name}.py").write_text(counted, encoding="utf-8")
        add_agent(root / "assets", f"counted-{name}", f"counted_{name}:respond")
    return root / "assets"


def _executions(tmp_path: Path) -> int:
    """Executions counted so far."""
    try:
        return len((tmp_path / "executions").read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0


def _spooled(cluster: Cluster) -> int:
    """Runs the workers keep in their spool now."""
    return len([p for p in cluster.spool.glob("*/*") if not p.name.startswith(".")])


# --------------------------------------------------------------------------- requests


def _post(url: str, path: str, body: Any, key: str) -> httpx.Response:
    return httpx.post(
        url + path,
        json=body,
        headers={**HEADERS, "Idempotency-Key": key},
        timeout=REQUEST_TIMEOUT,
    )


def _scenario(url: str, name: str, agent: str) -> str:
    """A scenario of the refund desk with `agent` under test, and its version VERSION."""
    body = {"namespace": "support", "name": name, "owner": "qa", "risk_level": "low"}
    created = _post(url, "/v1/sim/scenarios", body, f"s-{name}")
    assert created.status_code == 201, created.text
    scenario_id: str = created.json()["scenario_id"]
    spec = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text(encoding="utf-8"))
    spec["sut"]["agent"] = agent
    version = {"version": VERSION, "spec": spec}
    submitted = _post(url, f"/v1/sim/scenarios/{scenario_id}/versions", version, f"v-{name}")
    assert submitted.status_code == 202, submitted.text
    return scenario_id


def _start(url: str, scenario_id: str, seed: int) -> str:
    body = {
        "scenario_id": scenario_id,
        "version": VERSION,
        "mode": "surrogate",
        "seed": seed,
        "purpose": "exploration",
    }
    started = _post(url, "/v1/sim/runs", body, f"run-{scenario_id}-{seed}")
    assert started.status_code == 202, started.text
    run_id: str = started.json()["run_id"]
    return run_id


# --------------------------------------------------------------------------- the ledger


def _runs(ledger: str) -> dict[str, Any]:
    engine = connect(ledger)
    try:
        with engine.connect() as conn:
            return {row.run_id: row for row in conn.execute(sa.select(t.run))}
    finally:
        engine.dispose()


def _events(ledger: str) -> dict[str, list[tuple[int, str]]]:
    e = t.event.c
    found: dict[str, list[tuple[int, str]]] = {}
    engine = connect(ledger)
    try:
        with engine.connect() as conn:
            query = sa.select(e.run_id, e.seq, e.event_type).order_by(e.run_id, e.seq)
            for run_id, seq, kind in conn.execute(query):
                found.setdefault(run_id, []).append((int(seq), kind))
    finally:
        engine.dispose()
    return found


def _wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.1)


def _workers(cluster: Cluster) -> None:
    for name in ("worker-1", "worker-2"):
        cluster.worker(name, lease=LEASE, heartbeat=HEARTBEAT)


def _outage(
    cluster: Cluster,
    leave: Callable[[], Any],
    back: Callable[[], Any],
    *,
    kept: int,
    meanwhile: Callable[[], None] = lambda: None,
) -> int:
    """Take the ledger away (`leave`), ask `meanwhile`, keep it away OUTAGE_LEASES leases at
    least and until the workers keep `kept` runs in their spool (or WAIT seconds have passed),
    and bring it back (`back`). Returns the most runs kept at once: the caller checks that the
    outage met finished runs."""
    most = 0
    shortest = time.monotonic() + OUTAGE_LEASES * LEASE
    deadline = time.monotonic() + WAIT
    leave()
    try:
        meanwhile()
        while time.monotonic() < shortest or (most < kept and time.monotonic() < deadline):
            most = max(most, _spooled(cluster))
            time.sleep(0.1)
    finally:
        back()
    return most


def _all_ended(cluster: Cluster, run_ids: list[str]) -> None:
    def ended() -> bool:
        cluster.alive()
        runs = _runs(cluster.ledger)
        return all(runs[run_id].execution_status in TERMINAL for run_id in run_ids)

    _wait_until("every run to end", ended)


def _recorded_once(cluster: Cluster, run_ids: list[str], tmp_path: Path) -> None:
    """Every run completed on its first claim, with its events 1..n ending with run_finished;
    and exactly as many executions as runs."""
    runs = _runs(cluster.ledger)
    events = _events(cluster.ledger)
    ended = {
        run_id: (runs[run_id].execution_status, runs[run_id].attempts, runs[run_id].retries)
        for run_id in run_ids
    }
    assert ended == dict.fromkeys(run_ids, ("completed", 1, 0)), {
        run_id: (*state, runs[run_id].terminal_reason)
        for run_id, state in ended.items()
        if state != ("completed", 1, 0)
    }
    for run_id in run_ids:
        seqs = [seq for seq, _ in events[run_id]]
        assert seqs == list(range(1, len(seqs) + 1)), (run_id, seqs)
        assert events[run_id][-1][1] == "run_finished", run_id
    assert _executions(tmp_path) == len(run_ids)
    assert _spooled(cluster) == 0  # every run kept was recorded, and removed


# --------------------------------------------------------------------------- PostgreSQL


RUNS = 40


@needs_postgres
def test_a_postgresql_outage_mid_queue_loses_no_run_and_executes_none_twice(
    postgres: PrivateServer, tmp_path: Path, library: Path
) -> None:
    cluster = Cluster(tmp_path, postgres.new_database(), library)
    try:
        api = cluster.api("api")
        scenario_id = _scenario(api, "refund-queue", "counted-quick@1.0.0")
        run_ids = [_start(api, scenario_id, seed) for seed in range(RUNS)]
        _workers(cluster)
        _wait_until("a third of the runs executed", lambda: _executions(tmp_path) >= RUNS // 3)

        def a_request() -> None:
            down = httpx.get(f"{api}/v1/sim/runs/{run_ids[0]}", headers=HEADERS, timeout=30)
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == "ledger_unavailable"
            assert int(down.headers["Retry-After"]) >= 1

        spooled = _outage(cluster, postgres.stop, postgres.start, kept=1, meanwhile=a_request)
        _all_ended(cluster, run_ids)
        _recorded_once(cluster, run_ids, tmp_path)
        assert spooled >= 1, "no run finished while the ledger was down: the test proved nothing"
    finally:
        cluster.stop()


@needs_postgres
def test_runs_finishing_while_postgresql_is_down_are_recorded_once_retry_or_not(
    postgres: PrivateServer, tmp_path: Path, library: Path
) -> None:
    """Two APIs on one ledger, one queuing runs with a retry of lost runs: a run kept alive
    by its worker is never lost, so never retried."""
    cluster = Cluster(tmp_path, postgres.new_database(), library)
    try:
        plain = cluster.api("api")
        retrying = cluster.api("api-retry", None, "--retry-lost-runs", "1")
        scenario_id = _scenario(plain, "refund-paced", "counted-slow@1.0.0")
        run_ids = [_start((plain, retrying)[seed % 2], scenario_id, seed) for seed in range(4)]
        allowed = {run_id: row.retries_allowed for run_id, row in _runs(cluster.ledger).items()}
        assert sorted(allowed.values()) == [0, 0, 1, 1]
        _workers(cluster)

        def both_workers_busy() -> bool:
            runs = _runs(cluster.ledger).values()
            return len({r.lease_owner for r in runs if r.execution_status == "running"}) == 2

        _wait_until("a run under way on each worker", both_workers_busy)
        spooled = _outage(cluster, postgres.stop, postgres.start, kept=2)
        _all_ended(cluster, run_ids)
        _recorded_once(cluster, run_ids, tmp_path)
        assert spooled >= 2, "the runs did not finish while the ledger was down"
    finally:
        cluster.stop()


# --------------------------------------------------------------------------- SQLite


DISK = "24M"
"""The tmpfs the SQLite ledger lives on."""
DISK_RUNS = 8


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "disk"
    folder.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(folder)],
        check=True,
        capture_output=True,
    )
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False, capture_output=True)


def _fill(filler: Path) -> None:
    """Fill the filesystem `filler` is on with it, to its last block."""
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1 << 9):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError:
                continue


@needs_tmpfs
def test_a_sqlite_ledger_whose_disk_fills_up_loses_no_run_and_says_why(
    small_disk: Path, tmp_path: Path, library: Path
) -> None:
    cluster = Cluster(tmp_path, f"sqlite:///{small_disk / 'ledger.sqlite'}", library)
    try:
        api = cluster.api("api")
        scenario_id = _scenario(api, "refund-disk", "counted-slow@1.0.0")
        run_ids = [_start(api, scenario_id, seed) for seed in range(DISK_RUNS)]
        _workers(cluster)
        _wait_until("two runs under way", lambda: _executions(tmp_path) >= 2)
        filler = small_disk / "filler"
        refusal: dict[str, Any] = {}

        def refused() -> bool:
            body = {"namespace": "probe", "name": f"p{time.monotonic_ns()}", "owner": "qa"}
            body["risk_level"] = "low"
            answer = _post(api, "/v1/sim/scenarios", body, body["name"])
            if answer.status_code == 503:
                refusal.update(answer.json()["error"], retry_after=answer.headers["Retry-After"])
                return True
            assert answer.status_code == 201, answer.text
            return False

        def a_request() -> None:
            # Writes fail once the ledger's write-ahead log must grow; a client is told why.
            _wait_until("a write refused by the full disk", refused)

        spooled = _outage(
            cluster, lambda: _fill(filler), filler.unlink, kept=1, meanwhile=a_request
        )
        _all_ended(cluster, run_ids)
        _recorded_once(cluster, run_ids, tmp_path)
        assert spooled >= 1, "no run finished while the disk was full: the test proved nothing"
        # The client was told why, and when to come back.
        assert refusal["code"] == "ledger_disk_full"
        assert int(refusal["retry_after"]) >= 1
    finally:
        cluster.stop()
