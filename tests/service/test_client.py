"""simreport.client and `simreport remote` against a scripted run service on loopback.

The service here is a small real HTTP server started by the test on 127.0.0.1: it serves the
`/v1/sim` calls from memory, answers scripted status codes and headers (429, 503, 409, 410,
422, a dropped connection) when told to, and records every request with its headers. The
client waits through an injected `sleep`, so backoff is checked without waiting.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import threading
import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from simreport.client import (
    TOKEN_SETTING,
    InvalidRequest,
    NotAuthenticated,
    NotPermitted,
    RateLimited,
    ServiceUnavailable,
    SimClient,
    StateConflict,
)

TOKEN = "tok-5ecret-abcdef0123456789"
ROOT = Path(__file__).resolve().parents[2]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


# --------------------------------------------------------------------------- the scripted service


@dataclass
class Reply:
    """A scripted answer for the next request matching `method` and `path` (exact, no query)."""

    method: str
    path: str
    status: int = 200
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    """Read the request, then close the connection without answering."""


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeRun:
    events: list[dict[str, Any]]
    revealed: int = 0
    """How many events exist so far: each status read lets the run proceed by two."""
    oldest: int = 1
    """The first seq still served; a cursor before oldest - 1 is gone (410)."""
    cancelled: bool = False
    terminal: bool = False

    def status(self) -> dict[str, Any]:
        if self.cancelled:
            execution = "cancelled"
        elif self.terminal:
            execution = "completed"
        else:
            execution = "running" if self.revealed else "pending"
        done = execution in ("completed", "cancelled")
        return {
            "execution_status": execution,
            "validity_status": "valid" if done else "unchecked",
            "evidence_status": "complete" if done else "unchecked",
            "quality_ref": None,
        }


class FakeService:
    """The run service's calls from memory, with a script that overrides its answers."""

    def __init__(self, *, token: str = TOKEN, events_per_run: int = 5) -> None:
        self.token = token
        self.events_per_run = events_per_run
        self.runs: dict[str, FakeRun] = {}
        self.keys: dict[str, tuple[int, dict[str, Any]]] = {}
        self.seen: list[Seen] = []
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._script.extend(replies)

    def add_run(self, run_id: str, *, revealed: int | None = None, terminal: bool = False) -> None:
        events = [
            {"seq": n, "type": f"step.{n}", "actor": "user", "t": n * 10, "payload": {"n": n}}
            for n in range(1, self.events_per_run + 1)
        ]
        run = FakeRun(events, revealed=len(events) if revealed is None else revealed)
        run.terminal = terminal
        self.runs[run_id] = run

    def requests(self, method: str | None = None, path: str | None = None) -> list[Seen]:
        with self._lock:
            return [
                s
                for s in self.seen
                if (method is None or s.method == method) and (path is None or s.path == path)
            ]

    def start(self) -> FakeService:
        owner = self

        class Handler(_Handler):
            service = owner

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def scripted(self, method: str, path: str) -> Reply | None:
        with self._lock:
            for reply in self._script:
                if reply.method == method and reply.path == path:
                    self._script.remove(reply)
                    return reply
        return None

    # ------------------------------------------------------------------ default answers

    def answer(self, seen: Seen) -> tuple[int, dict[str, Any]]:
        if seen.headers.get("authorization") != f"Bearer {self.token}":
            # A careless service echoing what it was sent: the client must not show it.
            sent = seen.headers.get("authorization", "nothing")
            return 401, _error("unauthorized", f"unknown token ({sent}); see tokens-file")
        parts = seen.path.strip("/").split("/")
        if parts[:2] != ["v1", "sim"]:
            return 404, _error("not_found", "no such route")
        rest = parts[2:]
        if seen.method == "POST":
            key = seen.headers.get("idempotency-key")
            if not key:
                return 400, _error("bad_request", "Idempotency-Key is required")
            if key in self.keys:
                return self.keys[key]
            answer = self.write(rest, seen.body or {})
            if answer[0] < 400:
                self.keys[key] = answer
            return answer
        return self.read(rest, seen.query)

    def write(self, rest: list[str], body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if rest == ["scenarios"]:
            return 201, {"scenario_id": f"scn-{body['name']}"}
        if len(rest) == 3 and rest[0] == "scenarios" and rest[2] == "versions":
            return 202, {"status": "reviewing"}
        if rest == ["runs"]:
            run_id = f"run-{uuid.uuid4().hex[:24]}"
            self.add_run(run_id, revealed=0)
            return 202, {"run_id": run_id, "manifest_id": f"man-{run_id[4:]}"}
        if len(rest) == 2 and rest[0] == "runs" and rest[1].endswith(":cancel"):
            run = self.runs.get(rest[1].removesuffix(":cancel"))
            if run is None:
                return 404, _error("not_found", "no such run")
            if run.status()["execution_status"] in ("completed", "crashed", "cancelled"):
                return 409, _error("conflict", "the run has already ended")
            run.cancelled = True
            return 202, {"execution_status": "cancelled"}
        return 404, _error("not_found", "no such route")

    def read(self, rest: list[str], query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        if len(rest) == 2 and rest[0] == "manifests":
            return 200, {"resolved": {"scenario": "refund_desk@1.0.0"}, "manifest_sha256": "ab"}
        if len(rest) < 2 or rest[0] != "runs" or rest[1] not in self.runs:
            return 404, _error("not_found", "no such run")
        run = self.runs[rest[1]]
        if len(rest) == 2:
            if not run.terminal and not run.cancelled:
                run.revealed = min(len(run.events), run.revealed + 2)
                run.terminal = run.revealed == len(run.events)
            return 200, run.status()
        if rest[2] == "events":
            after = int(query.get("after_seq", "0"))
            if after < run.oldest - 1:
                # As simreport's service words it, with the cursor also as a field when asked.
                hint = {"next_seq": run.oldest - 1}
                return 410, _error(
                    "cursor_expired",
                    f"events up to seq {run.oldest - 1} are past the retention window: "
                    f"ask again with after_seq={run.oldest - 1} or later",
                    **hint,
                )
            shown = [e for e in run.events[: run.revealed] if e["seq"] > after]
            return 200, {"events": shown, "next_seq": shown[-1]["seq"] if shown else after}
        if rest[2] == "evidence":
            if not (run.terminal or run.cancelled):
                return 409, _error("conflict", "evidence has not converged")
            return 200, {
                "records": [{"kind": "tool.request"}, {"kind": "tool.request"}],
                "observations": [
                    {"fact_key": "refund_issued", "value": True},
                    {"fact_key": "verified", "missing": True, "reason": "no lookup"},
                ],
                "evidence": [
                    {"criterion": "refund_ok", "sufficient": True, "observation_ids": ["o1"]}
                ],
                "completeness": [{"check": "records", "status": "complete", "detail": None}],
            }
        return 404, _error("not_found", "no such route")


def _error(code: str, message: str, **more: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **more}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    service: FakeService

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        split = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        seen = Seen(
            method=self.command,
            path=split.path,
            query={k: v[-1] for k, v in parse_qs(split.query).items()},
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw) if raw else None,
        )
        owner = self.service
        with owner._lock:
            owner.seen.append(seen)
        reply = owner.scripted(seen.method, seen.path)
        if reply is not None and reply.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if reply is not None:
            status, body, headers = reply.status, reply.body or {}, reply.headers
        else:
            with owner._lock:
                status, body = owner.answer(seen)
            headers = {}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _handle
    do_POST = _handle


@pytest.fixture
def service() -> Iterator[FakeService]:
    fake = FakeService().start()
    try:
        yield fake
    finally:
        fake.stop()


class Sleeps(list[float]):
    """An injected sleep that records how long the client would have waited."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def client(service: FakeService, sleeps: Sleeps) -> Iterator[SimClient]:
    with SimClient(service.url, TOKEN, timeout=5, max_retries=3, sleep=sleeps) as c:
        yield c


RUNS = "/v1/sim/runs"


# --------------------------------------------------------------------------- retries


def test_429_waits_for_retry_after_then_succeeds(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    service.push(
        Reply("POST", RUNS, 429, _error("rate_limited", "too many runs"), {"Retry-After": "2"})
    )
    started = client.start_run("refund_desk", "1.0.0", seed=3)
    assert started.run_id in service.runs
    assert sleeps == [2.0]
    posts = service.requests("POST", RUNS)
    assert len(posts) == 2
    assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]
    assert posts[0].body == {
        "scenario_id": "refund_desk",
        "version": "1.0.0",
        "mode": "surrogate",
        "seed": 3,
        "budget": None,
        "purpose": "exploration",
    }


def test_429_asking_longer_than_the_client_waits_is_not_retried(
    service: FakeService, sleeps: Sleeps
) -> None:
    service.push(Reply("POST", RUNS, 429, _error("rate_limited", "quota"), {"Retry-After": "600"}))
    client = SimClient(service.url, TOKEN, max_wait=30, sleep=sleeps)
    with client, pytest.raises(RateLimited) as caught:
        client.start_run("refund_desk", "1.0.0")
    assert caught.value.retry_after == 600
    assert "600" in str(caught.value)
    assert sleeps == []
    assert len(service.requests("POST", RUNS)) == 1


def test_503_is_retried_with_the_same_idempotency_key(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    busy = _error("queue_full", "the queue is full")
    service.push(
        Reply("POST", RUNS, 503, busy, {"Retry-After": "1"}),
        Reply("POST", RUNS, 503, busy, {"Retry-After": "1"}),
    )
    started = client.start_run("refund_desk", "1.0.0")
    keys = [s.headers["idempotency-key"] for s in service.requests("POST", RUNS)]
    assert len(keys) == 3 and len(set(keys)) == 1 and UUID.match(keys[0])
    assert sleeps == [1.0, 1.0]
    assert len(service.runs) == 1 and started.run_id in service.runs

    # The next logical call is a new write with a new key.
    client.start_run("refund_desk", "1.0.0")
    later = service.requests("POST", RUNS)[-1].headers["idempotency-key"]
    assert later != keys[0] and len(service.runs) == 2


def test_503_gives_up_after_the_allowed_retries_and_names_the_key(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    for _ in range(4):
        service.push(Reply("POST", RUNS, 503, _error("queue_full", "the queue is full")))
    with pytest.raises(ServiceUnavailable) as caught:
        client.start_run("refund_desk", "1.0.0")
    keys = {s.headers["idempotency-key"] for s in service.requests("POST", RUNS)}
    assert len(service.requests("POST", RUNS)) == 4 and len(sleeps) == 3
    assert keys == {caught.value.idempotency_key}
    assert caught.value.idempotency_key in str(caught.value)
    # Sending again with that key gets the service's answer, not a second write.
    started = client.start_run("refund_desk", "1.0.0", idempotency_key=caught.value.idempotency_key)
    again = client.start_run("refund_desk", "1.0.0", idempotency_key=caught.value.idempotency_key)
    assert started == again and len(service.runs) == 1


def test_a_dropped_connection_is_retried_with_the_same_key(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    service.add_run("run-1", terminal=True)
    cancel = f"{RUNS}/run-2:cancel"
    service.add_run("run-2", revealed=0)
    service.push(Reply("POST", cancel, drop=True))
    answer = client.cancel("run-2", reason="wrong seed")
    assert answer == {"execution_status": "cancelled"}
    posts = service.requests("POST", cancel)
    assert len(posts) == 2 and len(sleeps) == 1
    assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]
    assert posts[0].body == {"reason": "wrong seed"}


def test_no_service_at_all_is_unavailable_after_bounded_attempts(sleeps: Sleeps) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port now.
    client = SimClient(f"http://127.0.0.1:{port}", TOKEN, max_retries=2, sleep=sleeps)
    with client, pytest.raises(ServiceUnavailable) as caught:
        client.run_status("run-1")
    assert len(sleeps) == 2
    assert caught.value.attempts == 3 and caught.value.status is None


# --------------------------------------------------------------------------- 409, 410, 422


def test_409_on_start_run_reads_the_state_and_does_not_retry(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    service.add_run("run-first", terminal=True)
    service.push(
        Reply(
            "POST",
            RUNS,
            409,
            _error(
                "conflict",
                "Idempotency-Key was used with a different body",
                run_id="run-first",
            ),
        )
    )
    with pytest.raises(StateConflict) as caught:
        client.start_run("refund_desk", "1.0.0", idempotency_key="k-1")
    assert len(service.requests("POST", RUNS)) == 1 and sleeps == []
    assert [s.path for s in service.requests("GET")] == [f"{RUNS}/run-first"]
    assert caught.value.state == service.runs["run-first"].status()
    assert (caught.value.status, caught.value.code) == (409, "conflict")
    # The message carries the service's words and names the run's state.
    text = str(caught.value)
    assert caught.value.body["message"] in text
    assert "run-first" in text and caught.value.state["execution_status"] in text


def test_409_on_cancel_of_an_ended_run_carries_its_state(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    service.add_run("run-1", terminal=True)
    with pytest.raises(StateConflict) as caught:
        client.cancel("run-1", reason="too late")
    assert len(service.requests("POST")) == 1 and sleeps == []
    assert caught.value.state is not None
    assert caught.value.state["execution_status"] == "completed"
    assert (caught.value.status, caught.value.code) == (409, "conflict")


def test_410_on_events_rereads_the_snapshot(service: FakeService, client: SimClient) -> None:
    service.add_run("run-1", terminal=True)
    service.runs["run-1"].oldest = 3  # events 1 and 2 are past the retention window
    page = client.events("run-1", 0)
    assert [e["seq"] for e in page.events] == [3, 4, 5]
    assert page.next_seq == 5
    assert page.snapshot == service.runs["run-1"].status()
    assert page.expired_after == 0
    calls = [(s.path, s.query.get("after_seq")) for s in service.requests("GET")]
    assert calls == [
        (f"{RUNS}/run-1/events", "0"),
        (f"{RUNS}/run-1", None),
        (f"{RUNS}/run-1/events", "2"),
    ]
    # A cursor still inside the window reads on as usual.
    assert client.events("run-1", 4).snapshot is None


def test_422_raises_with_located_errors_and_is_not_retried(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    path = "/v1/sim/scenarios/scn-1/versions"
    issues = [
        {"path": "agents.0.role", "expected": "a string", "message": "missing"},
        {"path": "execution.seed", "expected": "an integer >= 0", "message": "-1 is negative"},
    ]
    service.push(
        Reply("POST", path, 422, _error("unprocessable", "spec fails the schema", issues=issues))
    )
    with pytest.raises(InvalidRequest) as caught:
        client.submit_version("scn-1", "1.0.0", {"agents": [{}]}, source="test")
    assert len(service.requests("POST", path)) == 1 and sleeps == []
    assert [e["path"] for e in caught.value.errors] == ["agents.0.role", "execution.seed"]
    assert (caught.value.status, caught.value.code) == (422, "unprocessable")
    assert caught.value.errors == issues
    # The message names every located problem.
    text = str(caught.value)
    assert all(issue["path"] in text and issue["expected"] in text for issue in issues)


def test_401_names_the_token_setting_never_the_token(service: FakeService) -> None:
    wrong = "wrong-7oken-0123456789"
    client = SimClient(service.url, wrong, sleep=Sleeps())
    with client, pytest.raises(NotAuthenticated) as caught:
        client.run_status("run-1")
    text = str(caught.value)
    assert caught.value.status == 401 and TOKEN_SETTING in text
    assert wrong not in text and wrong not in json.dumps(caught.value.body)
    assert "401" in text


def test_403_says_the_token_may_not_act_here(service: FakeService, client: SimClient) -> None:
    service.push(Reply("GET", f"{RUNS}/run-x", 403, _error("forbidden", "other namespace")))
    with pytest.raises(NotPermitted) as caught:
        client.run_status("run-x")
    assert (caught.value.status, caught.value.code) == (403, "forbidden")
    assert caught.value.body["message"] in str(caught.value)
    assert TOKEN_SETTING in str(caught.value)


# --------------------------------------------------------------------------- following


def test_follow_events_yields_each_event_once_and_stops_when_the_run_ends(
    service: FakeService, client: SimClient, sleeps: Sleeps
) -> None:
    service.add_run("run-1", revealed=0)
    seqs = [e["seq"] for e in client.follow_events("run-1", poll_interval=0.25)]
    assert seqs == [1, 2, 3, 4, 5]
    assert service.runs["run-1"].status()["execution_status"] == "completed"
    # It polled while the run was pending or running, at the interval asked for.
    assert sleeps and set(sleeps) == {0.25}


def test_follow_events_goes_on_past_an_expired_cursor(
    service: FakeService, client: SimClient
) -> None:
    service.add_run("run-1", terminal=True)
    service.runs["run-1"].oldest = 4
    gaps = []
    seqs = [e["seq"] for e in client.follow_events("run-1", on_gap=gaps.append)]
    assert seqs == [4, 5]
    assert len(gaps) == 1 and gaps[0].expired_after == 0


# --------------------------------------------------------------------------- the command line


def _remote(
    service: FakeService, token_file: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "simreport.cli", "remote", *args]
    if env is None:
        command += ["--url", service.url, "--token-file", str(token_file)]
    full_env = {
        k: v for k, v in os.environ.items() if k not in ("SIMREPORT_URL", "SIMREPORT_TOKEN_FILE")
    }
    full_env.update(env or {})
    return subprocess.run(
        command, capture_output=True, text=True, timeout=60, env=full_env, cwd=ROOT, check=False
    )


@pytest.mark.slow
def test_remote_commands_end_to_end(service: FakeService, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    # A busy service first: the command waits and retries with the same key.
    service.push(Reply("POST", RUNS, 503, _error("queue_full", "full"), {"Retry-After": "0"}))

    started = _remote(
        service,
        token_file,
        "run",
        "refund_desk@1.0.0",
        "--seed",
        "4",
        "--budget-calls",
        "9",
        "--json",
    )
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    posts = service.requests("POST", RUNS)
    assert len(posts) == 2 and len({p.headers["idempotency-key"] for p in posts}) == 1
    assert posts[0].body["seed"] == 4 and posts[0].body["budget"] == {"maxToolCalls": 9}

    status = _remote(service, token_file, "status", run_id)
    assert status.returncode == 0, status.stderr
    assert "execution" in status.stdout and "validity" in status.stdout

    follow = _remote(service, token_file, "events", run_id, "--follow", "--poll", "0.05")
    assert follow.returncode == 0, follow.stderr
    rows = [line.split()[0] for line in follow.stdout.splitlines()[1:]]
    assert rows == ["1", "2", "3", "4", "5"]
    assert f"run {run_id} completed" in follow.stderr

    page = _remote(service, token_file, "events", run_id, "--after-seq", "3", "--json")
    assert [e["seq"] for e in json.loads(page.stdout)["events"]] == [4, 5]

    # The URL and token file may come from the environment.
    env = {"SIMREPORT_URL": service.url, "SIMREPORT_TOKEN_FILE": str(token_file)}
    evidence = _remote(service, token_file, "evidence", run_id, env=env)
    assert evidence.returncode == 0, evidence.stderr
    assert "records: 2 (tool.request 2)" in evidence.stdout and "refund_ok" in evidence.stdout
    assert "observations: 1 (1 missing)" in evidence.stdout

    late = _remote(service, token_file, "cancel", run_id, "--reason", "too late")
    assert late.returncode == 2
    assert late.stderr.count("\n") == 1 and "409 conflict" in late.stderr
    assert "completed" in late.stderr

    for result in (started, status, follow, page, evidence, late):
        assert TOKEN not in result.stdout + result.stderr


@pytest.mark.slow
def test_remote_refused_token_is_one_line_naming_the_file(
    service: FakeService, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("not-the-right-token-42\n", encoding="utf-8")
    result = _remote(service, token_file, "status", "run-1")
    assert result.returncode == 2
    assert result.stdout == "" and result.stderr.count("\n") == 1
    assert f"--token-file {token_file}" in result.stderr
    assert "not-the-right-token-42" not in result.stderr

    missing = _remote(service, tmp_path / "nowhere", "status", "run-1")
    assert missing.returncode == 2 and "token file" in missing.stderr


# --------------------------------------------------------------------------- the real service

EXAMPLE = ROOT / "examples" / "refund_desk"


@contextlib.contextmanager
def _real_service(tmp_path: Path) -> Iterator[str]:
    """`simreport api` without workers on a fresh SQLite ledger, on a free loopback port."""
    import httpx

    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(f"- name: e2e\n  token: {TOKEN}\n", encoding="utf-8")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "api.log").open("w", encoding="utf-8")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "simreport.cli", "api",
            "--ledger", f"sqlite:///{tmp_path / 'ledger.sqlite'}",
            "--host", "127.0.0.1", "--port", str(port), "--workers", "0",
            "--tokens-file", str(tokens), "--library", str(EXAMPLE / "assets"),
        ],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        for _ in range(300):
            if process.poll() is not None:
                pytest.fail("simreport api exited: " + (tmp_path / "api.log").read_text())
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            threading.Event().wait(0.2)
        else:
            pytest.fail("simreport api did not answer within 60 s")
        yield url
    finally:
        _stop(process)
        log.close()


def _stop(process: subprocess.Popen[Any]) -> None:
    """Terminate `process` (killed when it takes longer than 20 s) and wait for it."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _remote_command(url: str, token_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`simreport remote ARGS…` against the service at `url`, with the token in `token_file`:
    the command line's own `main`, in this process (the service is the real one, apart)."""
    from simreport.cli import main

    command = ["remote", args[0], "--url", url, "--token-file", str(token_file), *args[1:]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(command)
    return subprocess.CompletedProcess(command, code, out.getvalue(), err.getvalue())


@pytest.mark.slow
def test_remote_commands_against_the_real_service(tmp_path: Path) -> None:
    """What the run-service guide shows: create the scenario and submit the refund desk's file,
    start a run, follow its events live, fetch its evidence, cancel another run."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN, encoding="utf-8")
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    with _real_service(tmp_path) as url, SimClient(url, TOKEN, timeout=30) as client:

        def remote(*args: str) -> subprocess.CompletedProcess[str]:
            return _remote_command(url, token_file, *args)

        created = remote(
            "scenario", "--namespace", "quality", "--name", "refund-timeout-retry",
            "--owner", "quality-team", "--risk-level", "low",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        scenario_id = created.stdout.strip()
        submitted = remote("version", scenario_id, str(EXAMPLE / "scenario.yaml"))
        assert submitted.returncode == 0, submitted.stderr
        assert submitted.stdout.strip() == f"{scenario_id}@1.3.0: reviewing"

        started = remote("run", f"{scenario_id}@1.3.0", "--seed", "7", "--json")
        assert started.returncode == 0, started.stderr
        run = json.loads(started.stdout)
        queued = json.loads(remote("run", f"{scenario_id}@1.3.0", "--seed", "8", "--json").stdout)
        # One worker for one run: the first queued. The second stays pending until cancelled.
        worker = subprocess.Popen(
            [
                sys.executable, "-m", "simreport.cli", "worker", "--ledger", ledger,
                "--library", str(EXAMPLE / "assets"), "--max-runs", "1",
            ],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            follow = remote("events", run["run_id"], "--follow", "--poll", "0.2", "--json")
            assert worker.wait(timeout=120) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=10)
        assert follow.returncode == 0, follow.stderr
        seqs = [json.loads(line)["seq"] for line in follow.stdout.splitlines()]
        assert seqs == list(range(1, len(seqs) + 1)) and seqs
        assert client.run_status(run["run_id"])["execution_status"] == "completed"

        evidence = remote("evidence", run["run_id"], "--json")
        assert evidence.returncode == 0, evidence.stderr
        assert set(json.loads(evidence.stdout)) >= {"records", "evidence", "completeness"}
        assert client.manifest(run["manifest_id"])["manifest_sha256"]

        cancelled = remote("cancel", queued["run_id"], "--reason", "not needed")
        assert cancelled.returncode == 0, cancelled.stderr
        assert client.run_status(queued["run_id"])["execution_status"] == "cancelled"
        late = remote("cancel", run["run_id"], "--reason", "too late")
        assert late.returncode == 2 and "409" in late.stderr and "completed" in late.stderr

        # The same key and body give the same run; the key with another body is a conflict.
        version = "1.3.0"
        first = client.start_run(scenario_id, version, seed=8, idempotency_key="e2e-key")
        again = client.start_run(scenario_id, version, seed=8, idempotency_key="e2e-key")
        assert first == again
        with pytest.raises(StateConflict):
            client.start_run(scenario_id, version, seed=9, idempotency_key="e2e-key")

        wrong = tmp_path / "wrong-token"
        wrong.write_text("wrong-token-0123456789abcdef", encoding="utf-8")
        refused = remote("status", run["run_id"], "--token-file", str(wrong))
        assert refused.returncode == 2 and "401" in refused.stderr
        assert f"--token-file {wrong}" in refused.stderr
        assert "wrong-token-0123456789abcdef" not in refused.stderr
        for result in (created, submitted, started, follow, evidence, cancelled, late, refused):
            assert TOKEN not in result.stdout + result.stderr


@pytest.mark.slow
def test_a_paced_run_is_followed_live_and_cancelled_while_it_runs(tmp_path: Path) -> None:
    """The run-service guide's slow run: the refund desk with `paced-agent@1.0.0`, which
    answers every turn after two seconds. `remote events --follow` prints its events as they
    happen, and `remote cancel` stops it while it runs: it ends cancelled with partial evidence
    and its events whole."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN, encoding="utf-8")
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    # What the guide's sed makes of the example: another agent under test, a version of its own.
    text = (EXAMPLE / "scenario.yaml").read_text(encoding="utf-8")
    text, agents = re.subn(r"refund-agent@stable", "paced-agent@1.0.0", text)
    text, versions = re.subn(r"(?m)^  version: 1\.3\.0$", "  version: 1.3.0-paced", text)
    assert (agents, versions) == (1, 1)
    paced = tmp_path / "paced.yaml"
    paced.write_text(text, encoding="utf-8")

    with _real_service(tmp_path) as url, SimClient(url, TOKEN, timeout=30) as client:
        created = _remote_command(
            url, token_file, "scenario", "--namespace", "payments", "--name", "refund-timeout",
            "--owner", "qa", "--risk-level", "high",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        scenario_id = created.stdout.strip()
        submitted = _remote_command(url, token_file, "version", scenario_id, str(paced))
        assert submitted.stdout.strip() == f"{scenario_id}@1.3.0-paced: reviewing", submitted
        started = _remote_command(
            url, token_file, "run", f"{scenario_id}@1.3.0-paced", "--seed", "8", "--json"
        )
        assert started.returncode == 0, started.stderr
        run_id = json.loads(started.stdout)["run_id"]

        # The worker hears of a cancellation by its quarter-second poll of a SQLite ledger (and
        # at the latest at its heartbeat, every half second here), well inside the turns the run
        # has left (about six seconds) however slowly `remote cancel` starts on a busy machine.
        worker = subprocess.Popen(
            [
                sys.executable, "-m", "simreport.cli", "worker", "--ledger", ledger,
                "--library", str(EXAMPLE / "assets"), "--heartbeat-seconds", "0.5",
            ],
            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        follow = subprocess.Popen(
            [
                sys.executable, "-m", "simreport.cli", "remote", "events", run_id, "--follow",
                "--poll", "0.2", "--json", "--url", url, "--token-file", str(token_file),
            ],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        watchdog = threading.Timer(180, follow.kill)  # a follow that never ends fails the test
        watchdog.start()
        try:
            assert follow.stdout is not None
            seen = []
            for line in follow.stdout:
                seen.append(json.loads(line))
                if seen[-1]["type"] == "agent.step":
                    break
            # The agent's first answer arrived while the run goes on.
            assert seen and seen[-1]["type"] == "agent.step", seen
            assert client.run_status(run_id)["execution_status"] == "running"
            cancelled = _remote_command(url, token_file, "cancel", run_id, "--reason", "not needed")
            assert cancelled.returncode == 0, cancelled.stderr
            # Read on through the same buffered stream: communicate() would read the pipe
            # underneath it and lose the lines the loop above had already buffered.
            rest = follow.stdout.read()  # to its end, when the run ends (or the watchdog kills)
            assert follow.stderr is not None
            said = follow.stderr.read()
            follow.wait(timeout=30)
        finally:
            watchdog.cancel()
            _stop(follow)
            _stop(worker)
        assert follow.returncode == 0, said
        seen += [json.loads(line) for line in rest.splitlines()]
        seqs = [event["seq"] for event in seen]
        assert seqs == list(range(1, len(seqs) + 1))
        assert seen[-1]["type"] == "run_finished", seen[-1]
        assert f"run {run_id} cancelled" in said
        status = client.run_status(run_id)
        assert (status["execution_status"], status["evidence_status"]) == ("cancelled", "partial")
        package = client.evidence(run_id)
        assert package["records"], package
