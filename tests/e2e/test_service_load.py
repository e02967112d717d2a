"""The run service under load and faults, as separate processes on one ledger: `simreport api`
processes (`--workers 0`) and `simreport worker` processes on 127.0.0.1.

- Load (PostgreSQL): 200 concurrent `POST /v1/sim/runs` spread over two APIs, 40 of them
  repeating an earlier request's Idempotency-Key and body, make exactly 160 runs, each claimed
  and executed once by one of two workers, all terminal, each with events seq 1..n (no gap, no
  duplicate).
- Quotas (SQLite and PostgreSQL): requests sent together never take a token past its
  `maxConcurrentRuns`.
- An API killed (SIGKILL) and restarted mid-load (SQLite and PostgreSQL): clients retry with
  the same keys; no request is lost and none makes a second run.
- A worker killed (SIGKILL) mid-run (PostgreSQL): the *other* worker process reclaims the run
  (crashed, `worker_lost`); nobody calls `reclaim_expired` on its behalf. With
  `--retry-lost-runs 1` it queues the run again and executes it to its end.
- Cancelling over HTTP (PostgreSQL) while the run is RUNNING and while it is LOADING (claimed,
  its agent still being imported): the run ends cancelled with partial evidence.

Relied on elsewhere, not repeated here: a cancel while the run is pending (test_service_api's
`:cancel`, test_service_worker's never-executed pending run); a killed worker's run ended by
`reclaim_expired` and a run process dying by itself (test_service_worker); copies of one
request sent together to one API (test_service_api).

Every request has a timeout, every wait a deadline; only 127.0.0.1 is used.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml
from sqlalchemy.engine import Connection

from simreport.ledger import connect
from simreport.ledger import tables as t
from tests.support.processes import wait_gone
from tests.support.service_helpers import (
    QUOTA,
    QUOTA_TOKEN,
    TOKEN,
    WAIT,
    Cluster,
    add_agent,
    free_port,
    write_agents,
)

POSTGRES_URL = os.environ.get("SIMREPORT_TEST_POSTGRES_URL", "")

pytestmark = pytest.mark.slow

on_postgresql = pytest.mark.parametrize(
    "ledger_url",
    [
        pytest.param(
            "postgresql",
            marks=pytest.mark.requires(
                bool(POSTGRES_URL), "PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)"
            ),
        )
    ],
    indirect=True,
)
"""The ledger_url fixture's PostgreSQL database only (a fresh one per test); tests without it
run on SQLite and on PostgreSQL."""

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
VERSION = "1.3.0"
TERMINAL = ("completed", "crashed", "cancelled")

REQUEST_TIMEOUT = 30.0
LOAD_TIMEOUT = 150.0
"""The longest the load test waits for its 160 runs to end."""

# An agent whose import takes LOADING seconds (the run is claimed and loading its world
# meanwhile) and leaves a file saying it started; then it answers as the slow one.
LOADING_AGENT = """
import pathlib, time
pathlib.Path({marker!r}).write_text("loading")
time.sleep({seconds})
from slow_agents import respond
"""


# --------------------------------------------------------------------------- processes


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """The refund desk copied, with two more agents: a slow one, and one whose import takes a
    while (a run that stays LOADING). The library's parent is where their modules are found."""
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    write_agents(root, "slow_agents", delay=0.4)
    marker = tmp_path / "loading.started"
    loading = LOADING_AGENT.format(marker=str(marker), seconds=3)
    (root / "loading_agents.py").write_text(loading, encoding="utf-8")
    add_agent(root / "assets", "slow-agent", "slow_agents:respond")
    add_agent(root / "assets", "loading-agent", "loading_agents:respond")
    return root / "assets"


@pytest.fixture
def cluster(tmp_path: Path, ledger_url: str, library: Path) -> Iterator[Cluster]:
    processes = Cluster(tmp_path, ledger_url, library)
    try:
        yield processes
    finally:
        processes.stop()


# --------------------------------------------------------------------------- requests


def _post(url: str, path: str, body: Any, key: str, token: str = TOKEN) -> httpx.Response:
    return httpx.post(
        url + path,
        json=body,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        timeout=REQUEST_TIMEOUT,
    )


def _get(url: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(url + path, params=params, headers=HEADERS, timeout=REQUEST_TIMEOUT)


def _scenario(url: str, name: str, agent: str | None = None) -> str:
    """A scenario of the refund desk (with `agent` under test) and its version 1.3.0, under
    review: its runs are exploration."""
    body = {"namespace": "support", "name": name, "owner": "qa", "risk_level": "low"}
    created = _post(url, "/v1/sim/scenarios", body, f"s-{name}")
    assert created.status_code == 201, created.text
    scenario_id: str = created.json()["scenario_id"]
    spec = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text(encoding="utf-8"))
    if agent is not None:
        spec["sut"]["agent"] = agent
    version = {"version": VERSION, "spec": spec}
    submitted = _post(url, f"/v1/sim/scenarios/{scenario_id}/versions", version, f"v-{name}")
    assert submitted.status_code == 202, submitted.text
    return scenario_id


def _run_body(scenario_id: str, seed: int) -> dict[str, Any]:
    return {
        "scenario_id": scenario_id,
        "version": VERSION,
        "mode": "surrogate",
        "seed": seed,
        "purpose": "exploration",
    }


def _start(url: str, scenario_id: str, key: str) -> str:
    started = _post(url, "/v1/sim/runs", _run_body(scenario_id, 1), key)
    assert started.status_code == 202, started.text
    run_id: str = started.json()["run_id"]
    return run_id


# --------------------------------------------------------------------------- the ledger


@contextmanager
def _reading(ledger: str) -> Iterator[Connection]:
    engine = connect(ledger)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _runs(ledger: str) -> dict[str, Any]:
    """Every run row of the ledger, by id."""
    with _reading(ledger) as conn:
        return {row.run_id: row for row in conn.execute(sa.select(t.run))}


def _active(ledger: str) -> int:
    query = sa.select(sa.func.count()).select_from(t.run)
    with _reading(ledger) as conn:
        return int(
            conn.execute(
                query.where(t.run.c.execution_status.in_(("pending", "running")))
            ).scalar_one()
        )


def _events(ledger: str) -> dict[str, list[tuple[int, str]]]:
    """The (seq, type) of every run's events, in seq order."""
    e = t.event.c
    found: dict[str, list[tuple[int, str]]] = {}
    with _reading(ledger) as conn:
        for run_id, seq, kind in conn.execute(
            sa.select(e.run_id, e.seq, e.event_type).order_by(e.run_id, e.seq)
        ):
            found.setdefault(run_id, []).append((int(seq), kind))
    return found


def _seqs(ledger: str, run_id: str) -> list[int]:
    return [seq for seq, _ in _events(ledger).get(run_id, [])]


def _wait_until(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.1)


def _wait_all_terminal(cluster: Cluster, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _active(cluster.ledger):
        cluster.alive()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{_active(cluster.ledger)} run(s) still pending or running after {timeout:g} s"
            )
        time.sleep(0.5)


def _executed_once(cluster: Cluster, runs: dict[str, Any], workers: tuple[str, ...]) -> None:
    """Each run claimed once (attempts 1, a lease of one of `workers`), reported once by the
    worker that ran it, ended completed, with events 1..n ending with run_finished."""
    claims = {name: cluster.log(name) for name in workers}
    events = _events(cluster.ledger)
    for run_id, row in runs.items():
        assert (row.execution_status, row.attempts) == ("completed", 1), (
            run_id,
            row.execution_status,
            row.attempts,
            row.terminal_reason,
        )
        assert row.lease_owner in workers and row.started_at is not None
        reports = {name: log.count(f"{run_id} ") for name, log in claims.items()}
        assert reports == {name: int(name == row.lease_owner) for name in workers}, (
            run_id,
            reports,
        )
        found = [seq for seq, _ in events.get(run_id, [])]
        assert len(found) > 10 and found == list(range(1, len(found) + 1)), (run_id, found)
        assert events[run_id][-1][1] == "run_finished", (run_id, events[run_id][-1])


# --------------------------------------------------------------------------- load


ORIGINALS = 160
REPEATS = 40


@on_postgresql
def test_200_concurrent_starts_over_two_apis_make_160_runs_each_executed_once(
    cluster: Cluster,
) -> None:
    apis = (cluster.api("api-a"), cluster.api("api-b"))
    scenario_id = _scenario(apis[0], "refund-load")
    cluster.worker("worker-1")
    cluster.worker("worker-2")

    # Request i goes to API i % 2; the repeat of request i (same key and body) to the other
    # API, sent after its original was submitted (some race it, some come once it is done).
    requests = [
        (apis[i % 2], f"load-{i}", _run_body(scenario_id, seed=i)) for i in range(ORIGINALS)
    ]
    repeated = [i * (ORIGINALS // REPEATS) for i in range(REPEATS)]
    requests += [(apis[(i + 1) % 2], requests[i][1], requests[i][2]) for i in repeated]

    def send(request: tuple[str, str, dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        url, key, body = request
        response = _post(url, "/v1/sim/runs", body, key)
        return response.status_code, response.json()

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(send, requests))

    assert [status for status, _ in answers] == [202] * len(requests), [
        a for a in answers if a[0] != 202
    ][:3]
    originals = [answer for _, answer in answers[:ORIGINALS]]
    for n, i in enumerate(repeated):
        assert answers[ORIGINALS + n][1] == originals[i], (i, answers[ORIGINALS + n])
    started = {answer["run_id"] for answer in originals}
    assert len(started) == ORIGINALS

    _wait_all_terminal(cluster, LOAD_TIMEOUT)
    runs = _runs(cluster.ledger)
    assert set(runs) == started  # exactly 160: none lost, none made twice
    _executed_once(cluster, runs, ("worker-1", "worker-2"))
    # Both workers took part.
    assert {row.lease_owner for row in runs.values()} == {"worker-1", "worker-2"}


def test_concurrent_starts_never_exceed_a_token_s_quota(cluster: Cluster) -> None:
    """A token may have QUOTA runs pending or running: of 24 different requests sent together
    over both APIs (no workers, so every accepted run stays pending), QUOTA are accepted and
    the rest get 429."""
    apis = (cluster.api("api-a"), cluster.api("api-b"))
    scenario_id = _scenario(apis[0], "refund-quota")

    def send(i: int) -> int:
        body = _run_body(scenario_id, seed=i)
        return _post(apis[i % 2], "/v1/sim/runs", body, f"quota-{i}", QUOTA_TOKEN).status_code

    with ThreadPoolExecutor(24) as pool:
        statuses = list(pool.map(send, range(24)))
    principals = [row.principal for row in _runs(cluster.ledger).values()]
    assert (statuses.count(202), statuses.count(429)) == (QUOTA, 24 - QUOTA), statuses
    assert principals.count("quota") == QUOTA


# --------------------------------------------------------------------------- faults


def test_an_api_restarted_mid_load_loses_and_duplicates_nothing(cluster: Cluster) -> None:
    """Clients send to API A, which is killed (SIGKILL, mid-request) and started again on the
    same port once a third of the answers are in; they retry refused or dropped requests with
    the same key. Meanwhile other clients go on through API B."""
    port = free_port()
    api_a = cluster.api("api-a", port)
    api_b = cluster.api("api-b")
    scenario_id = _scenario(api_b, "refund-restart")
    cluster.worker("worker-1")
    cluster.worker("worker-2")

    keys = [f"restart-{i}" for i in range(48)]
    answered: dict[str, dict[str, Any]] = {}
    dropped: list[str] = []  # requests that failed once: the API went away under them
    lock = threading.Lock()
    deadline = time.monotonic() + 2 * WAIT

    def client(share: list[str], url: str) -> None:
        for key in share:
            body = _run_body(scenario_id, seed=int(key.rsplit("-", 1)[1]))
            while True:
                assert time.monotonic() < deadline, f"{key} never answered"
                try:
                    response = _post(url, "/v1/sim/runs", body, key)
                except httpx.TransportError:
                    response = None
                if response is not None and response.status_code == 202:
                    with lock:
                        answered[key] = response.json()
                    break
                assert response is None or response.status_code == 503, response.text
                with lock:
                    dropped.append(key)
                time.sleep(0.2)  # back off; the same key again

    shares = [keys[i::8] for i in range(8)]  # six clients on A, two on B
    urls = [api_a] * 6 + [api_b] * 2
    with ThreadPoolExecutor(len(shares)) as pool:
        clients = [pool.submit(client, share, url) for share, url in zip(shares, urls, strict=True)]
        _wait_until("a third of the answers", lambda: len(answered) >= len(keys) // 3)
        met = len(dropped)
        cluster.kill("api-a")
        _wait_until("a client to find it gone", lambda: len(dropped) > met)
        assert cluster.api("api-a", port) == api_a
        for done in clients:
            done.result(timeout=2 * WAIT)
    assert dropped, "no request met the restart: the test proved nothing"
    assert set(answered) == set(keys)
    run_ids = {answer["run_id"] for answer in answered.values()}
    assert len(run_ids) == len(keys)

    # After the restart, every key replays its answer from either API.
    for i, key in enumerate(keys):
        body = _run_body(scenario_id, seed=i)
        again = _post((api_a, api_b)[i % 2], "/v1/sim/runs", body, key)
        assert (again.status_code, again.json()) == (202, answered[key])

    _wait_all_terminal(cluster, 2 * WAIT)
    runs = _runs(cluster.ledger)
    assert set(runs) == run_ids, "a run lost or made twice"
    _executed_once(cluster, runs, ("worker-1", "worker-2"))


@on_postgresql
def test_a_killed_worker_s_run_is_reclaimed_by_the_other_worker(cluster: Cluster) -> None:
    api = cluster.api("api")
    scenario_id = _scenario(api, "refund-slow", agent="slow-agent@1.0.0")
    cluster.worker("worker-1", lease=2.0, heartbeat=0.4)
    run_id = _start(api, scenario_id, "r-killed")
    _wait_until("the run under way", lambda: len(_seqs(cluster.ledger, run_id)) >= 3)
    assert _runs(cluster.ledger)[run_id].lease_owner == "worker-1"
    # The other worker starts now (the run is claimed already) and is idle.
    cluster.worker("worker-2", lease=2.0, heartbeat=0.4)
    orphans = cluster.kill("worker-1")
    streamed = len(_seqs(cluster.ledger, run_id))

    def reclaimed() -> bool:
        status = _get(api, f"/v1/sim/runs/{run_id}").json()["execution_status"]
        return status in TERMINAL

    _wait_until("the other worker to reclaim the run", reclaimed)
    row = _runs(cluster.ledger)[run_id]
    assert (row.execution_status, row.terminal_reason) == ("crashed", "worker_lost")
    assert (row.evidence_status, row.attempts, row.lease_owner) == ("partial", 1, "worker-1")
    assert orphans, "the worker had no run process"
    wait_gone(orphans, "the killed worker's run process to exit")
    found = _seqs(cluster.ledger, run_id)
    assert found == list(range(1, streamed + 1))  # nothing arrived after the kill
    assert run_id not in cluster.log("worker-2")  # reclaimed, not executed again

    # The surviving worker goes on executing runs.
    after = _start(api, scenario_id, "r-after")
    _wait_until("the next run", lambda: _runs(cluster.ledger)[after].execution_status in TERMINAL)
    assert _runs(cluster.ledger)[after].lease_owner == "worker-2"


@on_postgresql
def test_with_a_retry_the_other_worker_runs_a_killed_worker_s_run_again(cluster: Cluster) -> None:
    api = cluster.api("api", None, "--retry-lost-runs", "1")
    scenario_id = _scenario(api, "refund-slow", agent="slow-agent@1.0.0")
    cluster.worker("worker-1", lease=2.0, heartbeat=0.4)
    run_id = _start(api, scenario_id, "r-retried")
    _wait_until("the run under way", lambda: len(_seqs(cluster.ledger, run_id)) >= 3)
    cluster.worker("worker-2", lease=2.0, heartbeat=0.4)
    cluster.kill("worker-1")
    streamed = len(_seqs(cluster.ledger, run_id))

    def ended() -> bool:
        status = _get(api, f"/v1/sim/runs/{run_id}").json()["execution_status"]
        return status in TERMINAL

    _wait_until("the other worker to run it again", ended, 2 * WAIT)
    row = _runs(cluster.ledger)[run_id]
    assert (row.execution_status, row.retries, row.attempts) == ("completed", 1, 2)
    assert row.lease_owner == "worker-2" and f"{run_id} completed" in cluster.log("worker-2")
    assert _get(api, f"/v1/sim/runs/{run_id}").json()["attempt"] == 2
    found = _seqs(cluster.ledger, run_id)
    assert found == list(range(1, len(found) + 1)) and len(found) > streamed + 1
    assert row.event_seq_base == streamed + 1  # the retry mark follows what was streamed


def test_the_api_alone_ends_a_run_whose_worker_was_killed(cluster: Cluster) -> None:
    """No worker left: the API's own reclaiming ends the run, it does not stay running."""
    api = cluster.api("api", None, "--lease-seconds", "2")
    scenario_id = _scenario(api, "refund-slow", agent="slow-agent@1.0.0")
    cluster.worker("worker-1", lease=2.0, heartbeat=0.4)
    run_id = _start(api, scenario_id, "r-orphan")
    _wait_until("the run under way", lambda: len(_seqs(cluster.ledger, run_id)) >= 3)
    cluster.kill("worker-1")

    def ended() -> bool:
        return _get(api, f"/v1/sim/runs/{run_id}").json()["execution_status"] in TERMINAL

    _wait_until("the API to end the orphaned run", ended)
    row = _runs(cluster.ledger)[run_id]
    assert (row.execution_status, row.terminal_reason) == ("crashed", "worker_lost")
    assert "worker_lost" in cluster.log("api")  # the API's own reclaiming says so


@on_postgresql
def test_cancel_over_http_while_running_and_while_loading(cluster: Cluster, tmp_path: Path) -> None:
    api = cluster.api("api")
    slow = _scenario(api, "refund-slow", agent="slow-agent@1.0.0")
    loading = _scenario(api, "refund-loading", agent="loading-agent@1.0.0")
    cluster.worker("worker-1", lease=5.0, heartbeat=0.3)

    def ended(run_id: str) -> dict[str, Any]:
        def terminal() -> bool:
            return _get(api, f"/v1/sim/runs/{run_id}").json()["execution_status"] in TERMINAL

        _wait_until(f"{run_id} to end", terminal)
        status: dict[str, Any] = _get(api, f"/v1/sim/runs/{run_id}").json()
        return status

    def cancel(run_id: str, reason: str) -> None:
        """Cancel the running run: it reads `cancelling` until its worker has ended it."""
        answer = _post(api, f"/v1/sim/runs/{run_id}:cancel", {"reason": reason}, f"c-{run_id}")
        assert (answer.status_code, answer.json()) == (202, {"execution_status": "cancelling"})
        now = _get(api, f"/v1/sim/runs/{run_id}").json()["execution_status"]
        assert now in ("cancelling", "cancelled"), now

    # RUNNING: some turns done.
    running = _start(api, slow, "r-running")
    _wait_until("the run under way", lambda: len(_seqs(cluster.ledger, running)) >= 5)
    cancel(running, "wrong prompt")
    assert ended(running)["execution_status"] == "cancelled"
    row = _runs(cluster.ledger)[running]
    assert (row.evidence_status, row.terminal_reason) == ("partial", "cancelled: wrong prompt")
    package = _get(api, f"/v1/sim/runs/{running}/evidence")
    assert package.status_code == 200 and package.json()["records"], package.text
    seqs = _seqs(cluster.ledger, running)
    assert seqs == list(range(1, len(seqs) + 1))

    # LOADING: claimed, the agent under test still being imported; no agent call yet.
    marker = tmp_path / "loading.started"
    load = _start(api, loading, "r-loading")
    _wait_until("the run loading its agent", marker.exists)
    assert _runs(cluster.ledger)[load].execution_status == "running"
    cancel(load, "not now")
    status = ended(load)
    assert (status["execution_status"], status["evidence_status"]) == ("cancelled", "partial")
    row = _runs(cluster.ledger)[load]
    assert row.terminal_reason == "cancelled: not now", row.terminal_reason
    page = _get(api, f"/v1/sim/runs/{load}/events", after_seq=0).json()
    seqs = [event["seq"] for event in page["events"]]
    assert seqs == list(range(1, len(seqs) + 1))
    types = [event["type"] for event in page["events"]]
    assert types[-1] == "run_finished", types
    assert not [kind for kind in types if kind.startswith(("agent", "user", "tool"))], types
    assert row.result["failure"]["type"] == "Interrupted"
    assert _get(api, f"/v1/sim/runs/{load}/evidence").status_code == 200
    # Cancelling an ended run: 409.
    again = _post(api, f"/v1/sim/runs/{load}:cancel", {"reason": "again"}, "c-again")
    assert again.status_code == 409, again.text
