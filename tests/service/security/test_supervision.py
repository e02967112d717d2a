"""The workers `simreport api --workers N` starts, killed (SIGKILL), and what the API says of
them, on real processes and PostgreSQL:

- a killed worker is reaped (no zombie), named in the API's log with its pid and signal, and
  started again under a new worker id, which executes the runs queued meanwhile; /metrics
  (open, Prometheus' text format) counts the restart and the runs;
- while a worker is missing (a long --restart-backoff keeps it missing), /healthz answers 503
  `degraded` with the workers alive against those asked for;
- a run pending longer than --max-pending-age makes /healthz degraded too.

Every wait has a deadline; worker processes are found as the API's children in /proc.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.test_service_load import (
    REQUEST_TIMEOUT,
    TERMINAL,
    _runs,
    _scenario,
    _start,
    _wait_until,
    on_postgresql,
)
from tests.support.service_helpers import Cluster

pytestmark = pytest.mark.slow


def _workers(api_pid: int) -> list[int]:
    """The API's worker processes: its children that multiprocessing spawned (not its
    resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == api_pid and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return sorted(found)


def _process_state(pid: int) -> str | None:
    """The state letter of process `pid` (Z: a zombie), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _health(url: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(url + "/healthz", timeout=REQUEST_TIMEOUT)
    return answer.status_code, answer.json()


def _metrics(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics without a token, parsed: each sample's value by (name, labels)."""
    answer = httpx.get(url + "/metrics", timeout=REQUEST_TIMEOUT)
    assert answer.status_code == 200, answer.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _one_worker(api_pid: int, other_than: int | None = None) -> int:
    found: list[int] = []

    def one() -> bool:
        found[:] = _workers(api_pid)
        return len(found) == 1 and found[0] != other_than

    _wait_until("one worker process", one)
    return found[0]


@on_postgresql
def test_a_killed_worker_is_reaped_logged_and_started_again(cluster: Cluster) -> None:
    api = cluster.api("api", None, "--workers", "1", "--restart-backoff", "0.5")
    api_pid = cluster.processes["api"].pid
    killed = _one_worker(api_pid)
    scenario_id = _scenario(api, "refund-supervised")

    os.kill(killed, signal.SIGKILL)
    run_ids = [_start(api, scenario_id, f"r-supervised-{i}") for i in range(3)]
    restarted = _one_worker(api_pid, other_than=killed)
    assert _process_state(killed) is None  # reaped, not a zombie
    assert re.search(rf"worker 0 \(pid {killed}\) was killed by SIGKILL", cluster.log("api"))

    # Queued after the kill, so executed by the worker started again (a new worker id).
    def ended() -> bool:
        rows = _runs(cluster.ledger)
        return all(rows[run_id].execution_status in TERMINAL for run_id in run_ids)

    _wait_until("the runs queued meanwhile to end", ended)
    rows = _runs(cluster.ledger)
    assert [rows[run_id].execution_status for run_id in run_ids] == ["completed"] * 3
    owners = {rows[run_id].lease_owner for run_id in run_ids}
    assert len(owners) == 1 and owners.pop().endswith(":0-r1")
    assert _workers(api_pid) == [restarted]
    _wait_until("the health check ok again", lambda: _health(api)[0] == 200)
    assert _health(api)[1]["workers"] == {"alive": 1, "asked": 1}

    metrics = _metrics(api)
    assert metrics[("simreport_worker_restarts_total", ())] == 1
    assert metrics[("simreport_workers_alive", ())] == 1
    assert metrics[("simreport_runs", (("status", "completed"),))] == 3
    assert metrics[("simreport_runs", (("status", "pending"),))] == 0
    assert metrics[("simreport_queue_depth", ())] == 0
    completed = (("status", "completed"),)
    assert metrics[("simreport_run_claim_to_finish_seconds_count", completed)] == 3
    assert metrics[("simreport_run_claim_to_finish_seconds_sum", completed)] > 0
    infinite = (("le", "+Inf"), ("status", "completed"))
    assert metrics[("simreport_run_claim_to_finish_seconds_bucket", infinite)] == 3
    for process in ("api", "workers"):
        assert metrics[("simreport_ledger_errors_total", (("process", process),))] == 0


@on_postgresql
def test_health_is_degraded_while_a_worker_is_missing(cluster: Cluster) -> None:
    """--restart-backoff 600: the killed worker stays missing for the whole test."""
    api = cluster.api("api", None, "--workers", "2", "--restart-backoff", "600")
    api_pid = cluster.processes["api"].pid
    _wait_until("two worker processes", lambda: len(_workers(api_pid)) == 2)
    assert _health(api) == (
        200,
        {
            "status": "ok",
            "workers": {"alive": 2, "asked": 2},
            "queue": {"depth": 0, "running": 0, "oldest_pending_seconds": None},
            "reasons": [],
        },
    )
    killed = _workers(api_pid)[0]
    os.kill(killed, signal.SIGKILL)

    _wait_until("the health check degraded", lambda: _health(api)[0] == 503)
    status, health = _health(api)
    assert (status, health["status"], health["workers"]) == (
        503,
        "degraded",
        {"alive": 1, "asked": 2},
    )
    assert [reason["code"] for reason in health["reasons"]] == ["worker_missing"]
    assert _process_state(killed) is None
    metrics = _metrics(api)
    assert metrics[("simreport_workers_alive", ())] == 1
    assert metrics[("simreport_workers_asked", ())] == 2
    assert metrics[("simreport_worker_restarts_total", ())] == 0


@on_postgresql
def test_health_is_degraded_while_a_run_waits_too_long(cluster: Cluster) -> None:
    """No worker (`--workers 0`): a queued run stays pending past --max-pending-age 1."""
    api = cluster.api("api", None, "--max-pending-age", "1")
    scenario_id = _scenario(api, "refund-waiting")
    _start(api, scenario_id, "r-waiting")

    _wait_until("the health check degraded", lambda: _health(api)[0] == 503)
    status, health = _health(api)
    assert (status, health["status"], health["workers"]) == (
        503,
        "degraded",
        {"alive": 0, "asked": 0},
    )
    assert health["queue"]["depth"] == 1 and health["queue"]["oldest_pending_seconds"] > 1
    assert [reason["code"] for reason in health["reasons"]] == ["pending_too_long"]
    metrics = _metrics(api)
    assert metrics[("simreport_queue_depth", ())] == 1
    assert metrics[("simreport_oldest_pending_seconds", ())] > 1
