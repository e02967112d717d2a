"""What the run service says of itself, in process (the app over a SQLite ledger, a clock
injected): /healthz degraded by a run pending too long and 503 when the ledger does not
answer; /metrics in Prometheus' text format, per app, counting failed ledger calls; the
supervisor's backoff; and the settings of supervision and of the connection limits. The same
against real processes, with workers killed and clients that attack: tests/service/security/."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from simreport.core.errors import SchemaError
from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.ledger.db import as_utc, utc_now
from simreport.service.app import create_app
from simreport.service.auth import load_tokens
from simreport.service.config import ServiceSettings, settings_from_options
from simreport.service.supervisor import MAX_BACKOFF_SECONDS, WorkerPool, restart_delay
from tests.support.processes import wait_for
from tests.support.service_helpers import simreport_command

REFUND_DESK = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
TOKEN = "health-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


class Clock:
    """A UTC clock the test moves."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def settings(tmp_path: Path) -> ServiceSettings:
    shutil.copytree(REFUND_DESK / "assets", tmp_path / "assets")
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"- name: health\n  token: {TOKEN}\n", encoding="utf-8")
    return ServiceSettings(
        ledger=f"sqlite:///{tmp_path / 'ledger' / 'ledger.sqlite'}",
        library=tmp_path / "assets",
        tokens_file=tokens,
        max_pending_age_seconds=60,
    )


@pytest.fixture
def client_of(settings: ServiceSettings) -> Iterator[Callable[[Clock], TestClient]]:
    """A client of a new app over the one ledger, measuring waits with the clock given."""
    clients: list[TestClient] = []

    def make(clock: Clock) -> TestClient:
        (settings.library_dir.parent / "ledger").mkdir(exist_ok=True)
        app = create_app(settings, tokens=load_tokens(settings, environ={}), clock=clock)
        client = TestClient(app)
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


def _queue_a_run(client: TestClient) -> str:
    body = {"namespace": "support", "name": "refund", "owner": "qa", "risk_level": "low"}
    created = client.post(
        "/v1/sim/scenarios", json=body, headers={**HEADERS, "Idempotency-Key": "s"}
    )
    scenario_id: str = created.json()["scenario_id"]
    spec = yaml.safe_load((REFUND_DESK / "scenario.yaml").read_text(encoding="utf-8"))
    version = {"version": "1.3.0", "spec": spec}
    path = f"/v1/sim/scenarios/{scenario_id}/versions"
    assert client.post(path, json=version, headers={**HEADERS, "Idempotency-Key": "v"}).is_success
    run = {"scenario_id": scenario_id, "version": "1.3.0", "seed": 1}
    started = client.post("/v1/sim/runs", json=run, headers={**HEADERS, "Idempotency-Key": "r"})
    assert started.status_code == 202, started.text
    run_id: str = started.json()["run_id"]
    return run_id


def _samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = client.get("/metrics")  # no token: open
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


# --------------------------------------------------------------------------- /healthz


def test_health_is_degraded_once_a_pending_run_waited_past_the_limit(
    client_of: Callable[[Clock], TestClient], settings: ServiceSettings
) -> None:
    clock = Clock()
    client = client_of(clock)
    healthy = client.get("/healthz")
    assert (healthy.status_code, healthy.json()["status"]) == (200, "ok")
    run_id = _queue_a_run(client)
    engine = connect(settings.ledger)
    try:
        with engine.connect() as conn:
            query = sa.select(t.run.c.created_at).where(t.run.c.run_id == run_id)
            queued = as_utc(conn.execute(query).scalar_one())
    finally:
        engine.dispose()
    assert queued is not None

    clock.now = queued + timedelta(seconds=59)
    waiting = client.get("/healthz")
    assert (waiting.status_code, waiting.json()["reasons"]) == (200, [])
    assert waiting.json()["queue"]["depth"] == 1
    assert waiting.json()["queue"]["oldest_pending_seconds"] == 59

    clock.now += timedelta(seconds=2)
    degraded = client.get("/healthz")
    assert (degraded.status_code, degraded.json()["status"]) == (503, "degraded")
    assert [reason["code"] for reason in degraded.json()["reasons"]] == ["pending_too_long"]
    assert degraded.json()["workers"] == {"alive": 0, "asked": 0}


def test_health_and_metrics_when_the_ledger_does_not_answer(
    client_of: Callable[[Clock], TestClient], settings: ServiceSettings
) -> None:
    client = client_of(Clock())
    assert _samples(client)[("simreport_ledger_up", ())] == 1
    # Its folder gone, the ledger cannot be opened again.
    client.app.state.service.engine.dispose()  # type: ignore[attr-defined]
    shutil.rmtree(settings.library_dir.parent / "ledger")

    answer = client.get("/healthz")
    assert (answer.status_code, answer.json()["error"]["code"]) == (503, "ledger_unavailable")
    samples = _samples(client)
    assert samples[("simreport_ledger_up", ())] == 0
    assert samples[("simreport_ledger_errors_total", (("process", "api"),))] >= 2
    assert not any(name == "simreport_runs" for name, _ in samples)


# --------------------------------------------------------------------------- /metrics


def test_metrics_are_per_app_and_read_from_the_ledger(
    client_of: Callable[[Clock], TestClient],
) -> None:
    """Two apps in one process: each has its own registry (no clash), both read the same
    ledger, and each counts its own failed ledger calls."""
    first, second = client_of(Clock()), client_of(Clock())
    _queue_a_run(first)
    for client in (first, second):
        samples = _samples(client)
        assert samples[("simreport_runs", (("status", "pending"),))] == 1
        assert samples[("simreport_queue_depth", ())] == 1
        assert (
            samples[("simreport_run_claim_to_finish_seconds_count", (("status", "completed"),))]
            == 0
        )
        assert samples[("simreport_workers_asked", ())] == 0
        assert samples[("simreport_worker_restarts_total", ())] == 0
        refused = {
            labels: value
            for (name, labels), value in samples.items()
            if name == "simreport_http_refused_total"
        }
        assert set(refused.values()) == {0} and len(refused) == 4
    first.app.state.service.ledger_errors.add()  # type: ignore[attr-defined]
    errors = ("simreport_ledger_errors_total", (("process", "api"),))
    assert (_samples(first)[errors], _samples(second)[errors]) == (1, 0)


def test_openapi_documents_health_and_metrics(client_of: Callable[[Clock], TestClient]) -> None:
    document: dict[str, Any] = client_of(Clock()).get("/openapi.json").json()
    health = document["components"]["schemas"]["Health"]
    assert set(health["properties"]) == {"status", "workers", "queue", "reasons"}
    assert "503" in document["paths"]["/healthz"]["get"]["responses"]
    assert "/metrics" in document["paths"]
    assert "413" in document["paths"]["/v1/sim/runs"]["post"]["responses"]


# --------------------------------------------------------------------------- supervision


def test_restart_backoff_doubles_to_a_minute_and_starts_again_after_a_stable_run() -> None:
    assert [restart_delay(n, 1.0) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert restart_delay(1000, 0.5) == MAX_BACKOFF_SECONDS
    assert restart_delay(3, 600.0) == 600.0  # a first wait longer than the cap is kept


class Monotonic:
    """A monotonic clock the test moves, counting its reads (the supervisor's thread reads it
    once before and once after each wait for its workers)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


def test_a_worker_that_cannot_reach_the_ledger_counts_its_error_and_waits_to_restart(
    tmp_path: Path,
) -> None:
    """A real worker process whose ledger refuses connections: it dies, its failed ledger call is
    counted in the pool's shared counter, and it is started again only once the backoff has
    passed on the supervisor's clock."""
    settings = ServiceSettings(
        ledger="postgresql+psycopg://simreport@127.0.0.1:1/nowhere",  # refused at once
        workers=1,
        restart_backoff_seconds=600,
        library=tmp_path,
    )
    clock = Monotonic()
    pool = WorkerPool(settings, clock=clock)
    pool.start()
    try:
        assert (pool.asked, pool.restarts) == (1, 0)
        wait_for(lambda: pool.alive() == 0, "the worker to die")
        assert pool.ledger_errors() >= 1
        # One second short of the backoff: three reads later the supervisor has compared it
        # with the restart due at least once, and waits on.
        clock.now += 599.0
        read = clock.reads
        wait_for(lambda: clock.reads >= read + 3, "the supervisor to look again")
        assert (pool.alive(), pool.restarts) == (0, 0)
        clock.now += 1.0
        wait_for(lambda: pool.restarts == 1, "the restart")
    finally:
        pool.stop(grace_seconds=5)


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("setting", "value", "option"),
    [
        ("max_body_bytes", 0, "--max-body"),
        ("header_timeout_seconds", 0, "--header-timeout"),
        ("body_timeout_seconds", -1, "--body-timeout"),
        ("max_connections", 0, "--max-connections"),
        ("max_pending_age_seconds", -5, "--max-pending-age"),
        ("restart_backoff_seconds", 0, "--restart-backoff"),
    ],
)
def test_limit_settings_are_checked_and_name_their_option(
    setting: str, value: float, option: str
) -> None:
    with pytest.raises(SchemaError) as caught:
        settings_from_options({"ledger": "sqlite:///x.sqlite", setting: value})
    assert [issue.path for issue in caught.value.issues] == [option]


def test_defaults_of_the_limits() -> None:
    defaults = settings_from_options({"ledger": "sqlite:///x.sqlite"})
    assert defaults.max_body_bytes == 1024 * 1024
    assert (defaults.header_timeout_seconds, defaults.body_timeout_seconds) == (10, 30)
    assert (defaults.max_connections, defaults.max_pending_age_seconds) == (500, 600)
    assert defaults.restart_backoff_seconds == 1


def test_the_cli_refuses_a_bad_limit_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *simreport_command(),
            "api",
            "--ledger",
            f"sqlite:///{tmp_path / 'l.sqlite'}",
            "--max-body",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--max-body" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
