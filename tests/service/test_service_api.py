"""The run service's HTTP API against a real `simreport api` on 127.0.0.1, on SQLite and on
PostgreSQL (`ledger_url`): every endpoint with its success body, every error code the seed names
(400, 401, 403, 404, 409, 410, 422, 429, 503), idempotent replay across a restart of the API, one
run for copies of a request sent together, the colon route of `:cancel`, a service without tokens,
and tokens that never reach the ledger or the logs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import yaml

from simreport.core.errors import DocumentError, InputError, SchemaError
from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.service.auth import load_tokens
from simreport.service.config import ServiceSettings, settings_from_options
from simreport.service.errors import Refused
from tests.support.service_helpers import add_agent, free_port, simreport_command, write_agents

ROOT = Path(__file__).resolve().parents[2]
REFUND_DESK = ROOT / "examples" / "refund_desk"

TOKENS = {
    "ana": "ana-token-0123456789abcdef",
    "quota": "quota-token-0123456789abcdef",
    "payments-only": "payments-token-0123456789abcdef",
    "beta": "beta-token-0123456789abcdef",
    "hashed": "hashed-token-0123456789abcdef",
    "bo": "bo-token-0123456789abcdef",
}

REQUEST_TIMEOUT = 15.0
START_TIMEOUT = 60.0
RUN_TIMEOUT = 90.0


def _tokens_file(path: Path) -> Path:
    hashed = hashlib.sha256(TOKENS["hashed"].encode()).hexdigest()
    path.write_text(
        f"""\
- name: ana
  token: {TOKENS["ana"]}
- name: quota
  token: {TOKENS["quota"]}
  maxConcurrentRuns: 1
- name: payments-only
  token: {TOKENS["payments-only"]}
  namespaces: [payments]
- name: beta
  token: {TOKENS["beta"]}
  tenant: beta
- name: hashed
  sha256: {hashed}
- name: bo
  token: {TOKENS["bo"]}
""",
        encoding="utf-8",
    )
    return path


@dataclass
class Server:
    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def client(self, token: str | None = "ana") -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[token]}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=REQUEST_TIMEOUT)


@contextmanager
def api(
    tmp_path: Path,
    ledger: str,
    *options: str,
    workers: int = 0,
    tokens: bool = True,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """`simreport api` on a free loopback port until the block ends (SIGTERM, then its exit)."""
    port = free_port()
    log = tmp_path / f"api-{port}.log"
    command = [
        *simreport_command(),
        "api",
        "--ledger",
        ledger,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--library",
        str(tmp_path / "assets"),
        *options,
    ]
    if tokens:
        command += ["--tokens-file", str(_tokens_file(tmp_path / "tokens.yaml"))]
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SIMREPORT_API_TOKENS", "SIMREPORT_LEDGER_URL")
    }
    environ.update(env or {})
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=environ)
    server = Server(f"http://127.0.0.1:{port}", log, process)
    try:
        _wait_until_serving(server)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
    assert process.returncode == 0, log.read_text(errors="replace")


def _wait_until_serving(server: Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail("simreport api exited:\n" + server.log.read_text(errors="replace"))
        try:
            if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail("simreport api did not start:\n" + server.log.read_text(errors="replace"))


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(
        (REFUND_DESK / "scenario.yaml").read_text(encoding="utf-8")
    )
    return spec


def _post(client: httpx.Client, path: str, body: Any, key: str | None = None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(path, json=body, headers=headers)


def _error(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    if code is not None:
        assert error["code"] == code, error
    return error


def _wait_terminal(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        status: dict[str, Any] = client.get(f"/v1/sim/runs/{run_id}").json()
        if status["execution_status"] in ("completed", "crashed", "cancelled"):
            return status
        time.sleep(0.2)
    pytest.fail(f"run {run_id} did not end within {RUN_TIMEOUT} s")


def _scenario(client: httpx.Client, key: str, *, namespace: str = "payments") -> str:
    body = {"namespace": namespace, "name": "refund-timeout", "owner": "qa", "risk_level": "high"}
    response = _post(client, "/v1/sim/scenarios", body, key)
    assert response.status_code == 201, response.text
    scenario_id: str = response.json()["scenario_id"]
    return scenario_id


def _run_body(scenario_id: str, **changes: Any) -> dict[str, Any]:
    body = {
        "scenario_id": scenario_id,
        "version": "1.3.0",
        "mode": "surrogate",
        "seed": 7,
        "budget": None,
        "purpose": "exploration",
    }
    return {**body, **changes}


def _count_runs(ledger: str) -> int:
    engine = connect(ledger)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(t.run)).scalar_one())
    finally:
        engine.dispose()


def _ledger_text(ledger: str) -> str:
    """Every value of every table of the ledger, as text."""
    engine = connect(ledger)
    parts = []
    try:
        with engine.connect() as conn:
            for table in t.metadata.sorted_tables:
                for row in conn.execute(sa.select(table)):
                    parts.append(repr(tuple(row)))
    finally:
        engine.dispose()
    return "\n".join(parts)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    shutil.copytree(REFUND_DESK / "assets", tmp_path / "assets")
    return tmp_path / "assets"


# --------------------------------------------------------------------------- the API end to end


@pytest.mark.slow
def test_every_endpoint_and_error(ledger_url: str, tmp_path: Path, library: Path) -> None:
    spec = _spec()
    with api(tmp_path, ledger_url, "--max-queue", "3") as server, server.client() as ana:
        # Open without a token: the health check and the OpenAPI document.
        health = httpx.get(server.url + "/healthz")
        assert (health.status_code, health.json()) == (
            200,
            {
                "status": "ok",
                "workers": {"alive": 0, "asked": 0},
                "queue": {"depth": 0, "running": 0, "oldest_pending_seconds": None},
                "reasons": [],
            },
        )
        openapi = httpx.get(server.url + "/openapi.json").json()
        assert set(openapi["paths"]) >= {
            "/v1/sim/scenarios",
            "/v1/sim/scenarios/{scenario_id}/versions",
            "/v1/sim/runs",
            "/v1/sim/runs/{run_id}",
            "/v1/sim/runs/{run_id}/events",
            "/v1/sim/runs/{run_id}/evidence",
            "/v1/sim/runs/{run_id}:cancel",
            "/v1/sim/manifests/{manifest_id}",
        }

        # 401: no token, an unknown one.
        with server.client(None) as anonymous:
            _error(anonymous.get("/v1/sim/runs/run-x"), 401, "unauthenticated")
            wrong = {"Authorization": "Bearer not-a-token-of-this-service"}
            _error(anonymous.get("/v1/sim/runs/run-x", headers=wrong), 401, "unauthenticated")

        # 400 without an Idempotency-Key; 422 for bad fields, located.
        body = {"namespace": "payments", "name": "refund", "owner": "qa", "risk_level": "high"}
        _error(_post(ana, "/v1/sim/scenarios", body), 400, "idempotency_key_missing")
        bad = {**body, "risk_level": "extreme", "colour": "red"}
        error = _error(_post(ana, "/v1/sim/scenarios", bad, "k-bad"), 422, "invalid_request")
        issues = {issue["path"]: issue for issue in error["issues"]}
        assert "low" in issues["risk_level"]["expected"]
        assert issues["colour"]["message"] == "unknown key 'colour'"
        assert "risk_level" in issues["colour"]["expected"]

        # POST /scenarios: 201 {scenario_id}; the same key again gives the same answer.
        first = _post(ana, "/v1/sim/scenarios", body, "k-scenario")
        assert first.status_code == 201 and set(first.json()) == {"scenario_id"}
        again = _post(ana, "/v1/sim/scenarios", body, "k-scenario")
        assert (again.status_code, again.json()) == (201, first.json())
        scenario_id = first.json()["scenario_id"]
        # 409 ×3: a duplicate name, a key used with another body, a version that exists.
        _error(_post(ana, "/v1/sim/scenarios", body, "k-scenario-2"), 409)
        other = {**body, "name": "other"}
        _error(_post(ana, "/v1/sim/scenarios", other, "k-scenario"), 409, "idempotency_key_reused")

        versions = f"/v1/sim/scenarios/{scenario_id}/versions"
        version = {"version": "1.3.0", "spec": spec, "source": "incident 7742"}
        submitted = _post(ana, versions, version, "k-version")
        assert (submitted.status_code, submitted.json()) == (202, {"status": "reviewing"})
        _error(_post(ana, versions, version, "k-version-2"), 409)
        # 422: a spec that fails the scenario schema, with located issues.
        broken = {**spec, "population": {"n": "two"}}
        error = _error(
            _post(ana, versions, {**version, "version": "1.4.0", "spec": broken}, "k-v3"), 422
        )
        assert any(i["path"].endswith("population.n") for i in error["issues"]), error
        # 404 for a version of a scenario that does not exist.
        _error(_post(ana, "/v1/sim/scenarios/nope/versions", version, "k-v4"), 404)

        # 403: a token limited to the namespace `payments`.
        with server.client("payments-only") as payments:
            _error(
                _post(payments, "/v1/sim/scenarios", {**body, "namespace": "hr"}, "k-hr"),
                403,
                "forbidden",
            )
        hr_id = _scenario(ana, "k-hr-scenario", namespace="hr")

        # POST /runs: 202 {run_id, manifest_id}; runs stay pending (no workers).
        started = _post(ana, "/v1/sim/runs", _run_body(scenario_id), "k-run")
        assert started.status_code == 202 and set(started.json()) == {"run_id", "manifest_id"}
        run_id, manifest_id = started.json()["run_id"], started.json()["manifest_id"]
        assert _post(ana, "/v1/sim/runs", _run_body(scenario_id), "k-run").json() == started.json()
        reused = _error(_post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=8), "k-run"), 409)
        assert reused["run_id"] == started.json()["run_id"]  # what the key did start
        # 422: a regression run of a version that is not online.
        _error(
            _post(ana, "/v1/sim/runs", _run_body(scenario_id, purpose="regression"), "k-reg"), 422
        )
        _error(_post(ana, "/v1/sim/runs", _run_body("nope"), "k-run-nope"), 404)

        status = ana.get(f"/v1/sim/runs/{run_id}").json()
        assert status == {
            "execution_status": "pending",
            "validity_status": "unchecked",
            "evidence_status": "unchecked",
            "quality_ref": None,
            "attempt": 1,
        }
        manifest = ana.get(f"/v1/sim/manifests/{manifest_id}").json()
        assert set(manifest) == {"resolved", "locked", "manifest_sha256"}
        canonical = json.dumps(manifest["locked"], sort_keys=True, separators=(",", ":"))
        assert hashlib.sha256(canonical.encode()).hexdigest() == manifest["manifest_sha256"]
        # 409: evidence has not converged while the run is pending.
        _error(ana.get(f"/v1/sim/runs/{run_id}/evidence"), 409)
        page = ana.get(f"/v1/sim/runs/{run_id}/events", params={"after_seq": 0}).json()
        assert set(page) == {"events", "next_seq"}

        # 404: unknown ids, and another tenant's run (never revealed as forbidden).
        _error(ana.get("/v1/sim/runs/run-000000000000000000000000"), 404)
        _error(ana.get("/v1/sim/manifests/nope"), 404)
        with server.client("beta") as beta:
            _error(beta.get(f"/v1/sim/runs/{run_id}"), 404)
            _error(beta.get(f"/v1/sim/manifests/{manifest_id}"), 404)
        with server.client("payments-only") as payments:
            assert payments.get(f"/v1/sim/runs/{run_id}").status_code == 200
            _error(_post(payments, "/v1/sim/runs", _run_body(hr_id), "k-hr-run"), 403)

        # 429: the token `quota` may have one run pending or running.
        with server.client("quota") as quota:
            assert _post(quota, "/v1/sim/runs", _run_body(scenario_id), "q-1").status_code == 202
            response = _post(quota, "/v1/sim/runs", _run_body(scenario_id), "q-2")
            _error(response, 429, "quota_exceeded")
            assert int(response.headers["Retry-After"]) >= 1
        # 503: the queue holds 3 runs (--max-queue 3); the same key goes through later.
        _post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=9), "k-run-3")
        full = _post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=10), "k-run-4")
        _error(full, 503, "queue_full")
        assert int(full.headers["Retry-After"]) >= 1

        # :cancel (a colon in the path): a pending run is cancelled at once; then 409.
        cancel = f"/v1/sim/runs/{run_id}:cancel"
        cancelled = _post(ana, cancel, {"reason": "not needed"}, "k-cancel")
        assert (cancelled.status_code, cancelled.json()) == (202, {"execution_status": "cancelled"})
        assert _post(ana, cancel, {"reason": "not needed"}, "k-cancel").status_code == 202
        _error(_post(ana, cancel, {"reason": "again"}, "k-cancel-2"), 409)
        encoded = f"/v1/sim/runs/{run_id}%3Acancel"
        _error(_post(ana, encoded, {"reason": "again"}, "k-cancel-3"), 409)
        _error(_post(ana, cancel, {"why": "?"}, "k-cancel-4"), 422, "invalid_request")
        assert _wait_terminal(ana, run_id)["execution_status"] == "cancelled"
        # Now the queue has room: the refused request goes through with its key.
        assert (
            _post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=10), "k-run-4").status_code
            == 202
        )

    # The API restarted, now with one worker: stored answers come back the same, and runs end.
    with api(tmp_path, ledger_url, workers=1) as server, server.client() as ana:
        assert _post(ana, "/v1/sim/scenarios", body, "k-scenario").json() == first.json()
        replay = _post(ana, "/v1/sim/runs", _run_body(scenario_id), "k-run")
        assert (replay.status_code, replay.json()) == (202, started.json())
        reused = _error(_post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=8), "k-run"), 409)
        assert reused["run_id"] == started.json()["run_id"]  # what the key did start

        done = _post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=11), "k-run-done").json()
        status = _wait_terminal(ana, done["run_id"])
        assert status["execution_status"] == "completed", status
        events, after = [], 0
        while True:
            page = ana.get(
                f"/v1/sim/runs/{done['run_id']}/events", params={"after_seq": after, "limit": 7}
            ).json()
            if not page["events"]:
                break
            events += page["events"]
            after = page["next_seq"]
        seqs = [event["seq"] for event in events]
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > 7
        package = ana.get(f"/v1/sim/runs/{done['run_id']}/evidence").json()
        assert set(package) == {"records", "observations", "evidence", "completeness"}
        assert package["records"]
        _error(_post(ana, f"/v1/sim/runs/{done['run_id']}:cancel", {"reason": "late"}, "k-c"), 409)

        # An asset file edited under its version: a new request is refused before anything
        # is queued, and a replay still gets the answer its key holds.
        prompt = library / "refund-prompt" / "1.0.0.yaml"
        prompt.write_text(prompt.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
        refused = _post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=12), "k-run-edited")
        _error(refused, 422, "asset_version_changed")
        replay = _post(ana, "/v1/sim/runs", _run_body(scenario_id), "k-run")
        assert (replay.status_code, replay.json()) == (202, started.json())
        reused = _error(_post(ana, "/v1/sim/runs", _run_body(scenario_id, seed=8), "k-run"), 409)
        assert reused["run_id"] == started.json()["run_id"]

    # 410: a cursor older than the events kept. A retention of a microsecond: every event was
    # written before this API started, so all are past it, with no waiting (where the window's
    # edge falls is test_service_queue's, with events of known ages).
    with api(tmp_path, ledger_url, "--events-retention", "1e-6") as server, server.client() as ana:
        gone = ana.get(f"/v1/sim/runs/{done['run_id']}/events", params={"after_seq": 0})
        resume = _error(gone, 410)["next_seq"]  # where the events still served begin
        assert isinstance(resume, int) and resume > 0
        page = ana.get(f"/v1/sim/runs/{done['run_id']}/events", params={"after_seq": resume})
        assert page.status_code == 200 and page.json()["next_seq"] >= resume

    # Tokens are known by their names only: not in the ledger, not in the logs.
    recorded = _ledger_text(ledger_url)
    logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("api-*.log"))
    assert "ana" in recorded
    for token in TOKENS.values():
        digest = hashlib.sha256(token.encode()).hexdigest()
        for text in (recorded, logs):
            assert token not in text
            assert digest not in text


@pytest.mark.slow
def test_copies_of_a_request_sent_together_start_one_run(
    ledger_url: str, tmp_path: Path, library: Path
) -> None:
    with api(tmp_path, ledger_url) as server, server.client() as ana:
        scenario_id = _scenario(ana, "k-s")
        version = {"version": "1.3.0", "spec": _spec()}
        assert _post(ana, f"/v1/sim/scenarios/{scenario_id}/versions", version, "k-v").is_success
        before = _count_runs(ledger_url)

        def start(_: int) -> tuple[int, Any]:
            with server.client() as client:
                response = _post(client, "/v1/sim/runs", _run_body(scenario_id), "k-together")
                return response.status_code, response.json()

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(start, range(8)))
        assert {status for status, _ in answers} == {202}
        assert len({answer["run_id"] for _, answer in answers}) == 1
        assert _count_runs(ledger_url) == before + 1


def _worker(ledger: str, library: Path, worker_id: str, log: Path) -> subprocess.Popen[bytes]:
    """`simreport worker` with a short lease (2 s), its output in `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                *simreport_command(),
                "worker",
                "--ledger",
                ledger,
                "--library",
                str(library),
                "--lease-seconds",
                "2",
                "--heartbeat-seconds",
                "0.4",
                "--worker-id",
                worker_id,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _until(what: str, check: Any, timeout: float = RUN_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout:g} s for {what}")
        time.sleep(0.1)


@pytest.mark.slow
def test_a_run_whose_worker_was_killed_is_retried_once_as_configured(
    ledger_url: str, tmp_path: Path, library: Path
) -> None:
    """`--retry-lost-runs 1`: the API's own reclaiming queues the lost run again, another worker
    runs it to its end, and its events read as one sequence with the retry marked."""
    write_agents(tmp_path, "service_agents", delay=0.4)
    add_agent(library, "slow-agent", "service_agents:respond")
    spec = _spec()
    spec["sut"]["agent"] = "slow-agent@1.0.0"
    options = ("--retry-lost-runs", "1", "--lease-seconds", "2")
    with api(tmp_path, ledger_url, *options) as server, server.client() as ana:
        scenario_id = _scenario(ana, "k-s")
        version = {"version": "1.3.0", "spec": spec}
        assert _post(ana, f"/v1/sim/scenarios/{scenario_id}/versions", version, "k-v").is_success
        started = _post(ana, "/v1/sim/runs", _run_body(scenario_id), "k-run").json()
        run = f"/v1/sim/runs/{started['run_id']}"

        def events() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = ana.get(f"{run}/events?after_seq=0&limit=1000").json()[
                "events"
            ]
            return found

        first = _worker(ledger_url, library, "w-first", tmp_path / "w-first.log")
        try:
            _until("the run under way", lambda: len(events()) >= 3)
        finally:
            first.kill()
            first.wait(30)
        _until(
            "the API to queue the run again",
            lambda: ana.get(run).json()["execution_status"] == "pending",
        )
        assert ana.get(run).json()["attempt"] == 2
        second = _worker(ledger_url, library, "w-second", tmp_path / "w-second.log")
        try:
            status = _wait_terminal(ana, started["run_id"])
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
        assert status == {
            "execution_status": "completed",
            "validity_status": "valid",
            "evidence_status": "complete",
            "quality_ref": None,
            "attempt": 2,
        }
        found = events()
        assert [e["seq"] for e in found] == list(range(1, len(found) + 1))
        kinds = [e["type"] for e in found]
        assert kinds.count("run_retried") == 1 and kinds.count("run_finished") == 1
        mark = found[kinds.index("run_retried")]
        assert mark["actor"] == "harness" and mark["payload"]["lost"]["worker"] == "w-first"
        assert kinds[mark["seq"]] == "run_started" and kinds[-1] == "run_finished"
        package = ana.get(f"{run}/evidence").json()
        assert package["records"] and package["evidence"]
        assert len({r["record_id"] for r in package["records"]}) == len(package["records"])
    assert "queued again for attempt 2" in server.log.read_text(errors="replace")


def test_review_steps_over_http_are_the_ledgers(
    ledger_url: str, tmp_path: Path, library: Path
) -> None:
    """Beyond the seed: the review steps of `simreport review`, taken by the token's name; the
    token that submitted a version neither approves nor publishes it."""
    from simreport.ledger.review import history

    with api(tmp_path, ledger_url) as server, server.client() as ana, server.client("bo") as bo:
        scenario_id = _scenario(ana, "k-s")  # high risk
        versions = f"/v1/sim/scenarios/{scenario_id}/versions"
        assert _post(ana, versions, {"version": "1.3.0", "spec": _spec()}, "k-v").is_success
        step = f"{versions}/1.3.0"
        # 409: the version is reviewing, so `submit` is not a step from here.
        _error(_post(ana, f"{step}:submit", {}, "k-1"), 409, "review_status")
        # 403: ana submitted it.
        _error(_post(ana, f"{step}:approve", {}, "k-own"), 403, "self_approval")
        approved = _post(bo, f"{step}:approve", {"note": "covers incident 7742"}, "k-2")
        assert (approved.status_code, approved.json()) == (200, {"status": "reviewed"})
        # 422: a high-risk scenario goes online only with the publisher's risk sign-off.
        _error(_post(bo, f"{step}:publish", {}, "k-3"), 422, "risk_signoff_missing")
        sha = bo.get(step).json()["sha256"]
        signoff = {"risk_signoff": {"sha256": sha}}
        published = _post(bo, f"{step}:publish", signoff, "k-4")
        assert published.json() == {"status": "online"}
        # The same key again: the stored answer, not a second step.
        again = _post(bo, f"{step}:publish", signoff, "k-4")
        assert (again.status_code, again.json()) == (200, {"status": "online"})
        _error(_post(bo, f"{versions}/9.9.9:approve", {}, "k-5"), 404, "unknown_version")
        _error(_post(bo, f"{step}:promote", {}, "k-6"), 422)
    engine = connect(ledger_url)
    try:
        steps = history(engine, "scenario", scenario_id, "1.3.0")
    finally:
        engine.dispose()
    assert [(s["to"], s["reviewer"]) for s in steps["transitions"]][-2:] == [
        ("reviewed", "bo"),
        ("online", "bo"),
    ]
    assert steps["transitions"][-1]["riskSignoff"]["by"] == "bo"


@pytest.mark.slow
def test_without_tokens_only_health_and_openapi_answer(tmp_path: Path, library: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with api(tmp_path, ledger, tokens=False) as server:
        assert httpx.get(server.url + "/healthz", timeout=REQUEST_TIMEOUT).status_code == 200
        assert httpx.get(server.url + "/openapi.json", timeout=REQUEST_TIMEOUT).status_code == 200
        for method, path in (
            ("GET", "/v1/sim/runs/run-x"),
            ("POST", "/v1/sim/scenarios"),
            ("GET", "/docs"),
            ("GET", "/no/such/path"),
        ):
            response = httpx.request(
                method,
                server.url + path,
                headers={"Authorization": "Bearer anything-at-all-here"},
                content=b"{not json",
                timeout=REQUEST_TIMEOUT,
            )
            error = _error(response, 401, "no_tokens_configured")
            assert "--tokens-file" in error["message"]
            assert "SIMREPORT_API_TOKENS" in error["message"]
    assert "no API tokens configured" in server.log.read_text()


@pytest.mark.slow
def test_a_bare_token_in_the_environment(tmp_path: Path, library: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    token = "env-token-0123456789abcdef"
    with api(tmp_path, ledger, tokens=False, env={"SIMREPORT_API_TOKENS": token}) as server:
        headers = {"Authorization": f"Bearer {token}"}
        response = httpx.get(
            server.url + "/v1/sim/runs/run-x", headers=headers, timeout=REQUEST_TIMEOUT
        )
        _error(response, 404)
    assert token not in server.log.read_text()


# --------------------------------------------------------------------------- settings and tokens


def test_settings_errors_name_the_option(tmp_path: Path) -> None:
    with pytest.raises(SchemaError) as caught:
        settings_from_options({"ledger": "sqlite:///x.sqlite", "port": 70000, "workers": -1})
    paths = {issue.path for issue in caught.value.issues}
    assert paths == {"--port", "--workers"}
    with pytest.raises(SchemaError) as caught:
        settings_from_options({"ledger": "mysql://h/db"})
    assert caught.value.issues[0].path == "--ledger"
    assert "unsupported" in caught.value.issues[0].message
    assert settings_from_options({"ledger": "sqlite:///x.sqlite"}).retry_lost_runs == 0
    assert settings_from_options({"ledger": "sqlite:///x.sqlite", "retry_lost_runs": 1})
    for wrong in (2, -1, True, "1"):
        with pytest.raises(SchemaError) as caught:
            settings_from_options({"ledger": "sqlite:///x.sqlite", "retry_lost_runs": wrong})
        assert [issue.path for issue in caught.value.issues] == ["--retry-lost-runs"], wrong


def test_cli_refuses_bad_settings_before_serving(tmp_path: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    done = subprocess.run(
        [*simreport_command(), "api", "--ledger", ledger, "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--port" in done.stderr
    done = subprocess.run(
        [*simreport_command(), "api", "--ledger", ledger, "--retry-lost-runs", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--retry-lost-runs" in done.stderr and "1" in done.stderr
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("- name: ana\n  token: short-token-0123456789\n  tenat: x\n")
    done = subprocess.run(
        [*simreport_command(), "api", "--ledger", ledger, "--tokens-file", str(tokens)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert f"{tokens}:3" in done.stderr and "tenat" in done.stderr and "tenant" in done.stderr
    assert "short-token" not in done.stderr


def _settings(tmp_path: Path, **changes: Any) -> ServiceSettings:
    return ServiceSettings(ledger=f"sqlite:///{tmp_path / 'l.sqlite'}", **changes)


def test_tokens_are_kept_as_their_sha256(tmp_path: Path) -> None:
    tokens = load_tokens(
        _settings(tmp_path, tokens_file=_tokens_file(tmp_path / "tokens.yaml")), environ={}
    )
    digests = {hashlib.sha256(token.encode()).hexdigest() for token in TOKENS.values()}
    assert set(tokens.by_digest) == digests
    assert not any(token in repr(tokens) for token in TOKENS.values())
    quota = tokens.authenticate(f"Bearer {TOKENS['quota']}")
    assert (quota.name, quota.tenant, quota.max_concurrent_runs) == ("quota", "local", 1)
    payments = tokens.authenticate(f"bearer {TOKENS['payments-only']}")
    assert payments.may_use("payments") and not payments.may_use("hr")
    assert tokens.authenticate(f"Bearer {TOKENS['hashed']}").name == "hashed"
    for header in (None, "", "Bearer", "Basic abc", "Bearer nope-nope-nope-nope"):
        with pytest.raises(Refused) as refused:
            tokens.authenticate(header)
        assert refused.value.status == 401


def test_token_entries_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "tokens.yaml"
    # The text → the error's class, the entry it names (in its file) and the dotted path there.
    cases: dict[str, tuple[type[InputError], str, str | None]] = {
        "- name: a\n": (SchemaError, "", "0"),
        f"- name: a\n  token: {'x' * 20}\n  sha256: {'ab' * 32}\n": (SchemaError, "", "0"),
        "- name: a\n  token: short\n": (SchemaError, "", "0.token"),
        f"- name: a\n  token: {'x' * 20}\n- name: a\n  token: {'y' * 20}\n": (
            InputError,
            ": entry 1 (a)",
            "name",
        ),
        f"- name: a\n  token: {'x' * 20}\n- name: b\n  token: {'x' * 20}\n": (
            InputError,
            ": entry 1 (b)",
            "token",
        ),
        "name: a\n": (DocumentError, "", None),
    }
    for text, (kind, entry, where) in cases.items():
        path.write_text(text)
        with pytest.raises(InputError) as caught:
            load_tokens(_settings(tmp_path, tokens_file=path), environ={})
        found = caught.value
        assert (type(found), found.file, found.path) == (kind, f"{path}{entry}", where), text
        assert "x" * 20 not in str(found)
    env = {"MY_TOKENS": f"- name: ci\n  token: {'z' * 20}\n  tenant: t2\n"}
    tokens = load_tokens(_settings(tmp_path, tokens_env="MY_TOKENS"), environ=env)
    assert tokens.authenticate(f"Bearer {'z' * 20}").tenant == "t2"
    none = load_tokens(_settings(tmp_path), environ={})
    with pytest.raises(Refused) as refused:
        none.authenticate(f"Bearer {'z' * 20}")
    assert refused.value.code == "no_tokens_configured"
