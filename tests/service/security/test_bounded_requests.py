"""Requests that would cost the run service without bound, sent to a real `simreport api` over
raw loopback sockets: a body far past `--max-body` (declared by Content-Length, or chunked), a
client that never ends its headers or trickles them, one that stalls mid-body, headers that
never end, and more connections than `--max-connections`. Each is refused with the service's
error shape and the connection closed; the health check answers meanwhile, and the API's memory
does not grow with the body it was sent.

Every loop is bounded and every read has a deadline; timeouts are set short (2 s) so a refusal
comes soon, and no assertion is on elapsed time.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.service.security.raw_http import (
    ANSWER_WAIT,
    answered,
    connect,
    error_code,
    read_answer,
    request_head,
)
from tests.support.service_helpers import Cluster

pytestmark = pytest.mark.slow

MIB = 1 << 20
HUGE = 78 * MIB
"""The body of the issue's attack: 78 MB, where --max-body is 1 MiB (the default)."""
TIMEOUT = 2
"""--header-timeout and --body-timeout of the API under test."""
CHUNK = b" " * 65536


@dataclass
class Api:
    url: str
    pid: int


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """One `simreport api --workers 0` with short read timeouts, on SQLite, for the module."""
    tmp = tmp_path_factory.mktemp("bounded")
    cluster = Cluster(tmp, f"sqlite:///{tmp / 'ledger.sqlite'}", tmp / "assets")
    try:
        timeouts = ("--header-timeout", str(TIMEOUT), "--body-timeout", str(TIMEOUT))
        url = cluster.api("api", None, *timeouts)
        yield Api(url, cluster.processes["api"].pid)
    finally:
        cluster.stop()


def _post_head(headers: dict[str, str]) -> bytes:
    base = {"Content-Type": "application/json", "Idempotency-Key": "k-bounded"}
    return request_head("POST", "/v1/sim/runs", {**base, **headers})


def _peak_rss_kib(pid: int) -> int:
    """The process' peak resident memory (VmHWM), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1])


# --------------------------------------------------------------------------- body size


def test_a_78_mb_body_gets_413_before_it_is_sent(api: Api) -> None:
    """Content-Length says 78 MB: 413 at once, from the headers alone (an `Expect:
    100-continue` client is never told to send it), and the connection is closed."""
    for expect in ({}, {"Expect": "100-continue"}):
        with connect(api.url) as sock:
            sock.sendall(_post_head({"Content-Length": str(HUGE), **expect}))
            answer = read_answer(sock)
        assert (answer.status, error_code(answer)) == (413, "body_too_large"), (expect, answer)
        assert answer.headers["connection"] == "close" and answer.closed


def test_a_chunked_body_gets_413_as_soon_as_it_passes_the_limit(api: Api) -> None:
    """No Content-Length: chunks of 64 KiB until the service answers (at most 64 MiB). It
    answers 413 once the chunks pass 1 MiB, long before the client is done."""
    sent = 0
    with connect(api.url) as sock:
        sock.sendall(_post_head({"Transfer-Encoding": "chunked"}))
        try:
            while sent < 64 * MIB and not answered(sock):
                sock.sendall(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
                sent += len(CHUNK)
            if sent >= 64 * MIB:
                sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed after its answer
        answer = read_answer(sock)
    assert (answer.status, error_code(answer)) == (413, "body_too_large"), answer
    assert answer.closed
    assert MIB < sent < 64 * MIB


def test_health_answers_while_a_huge_body_is_refused(api: Api) -> None:
    """The issue's attack, sent whole: a 78 MB body. The health check answers meanwhile, the
    body gets 413, and the API's peak memory stays where it was."""
    peak_before = _peak_rss_kib(api.pid)
    answers = []

    def send_huge() -> None:
        with connect(api.url) as sock:
            try:
                sock.sendall(_post_head({"Content-Length": str(HUGE)}))
                for _ in range(HUGE // len(CHUNK)):
                    sock.sendall(CHUNK)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the service stopped reading after its answer
            answers.append(read_answer(sock))

    sender = threading.Thread(target=send_huge, name="huge-body")
    sender.start()
    health = []
    while sender.is_alive() and len(health) < 100:
        health.append(httpx.get(api.url + "/healthz", timeout=ANSWER_WAIT).status_code)
    sender.join(3 * ANSWER_WAIT)
    assert not sender.is_alive()
    health.append(httpx.get(api.url + "/healthz", timeout=ANSWER_WAIT).status_code)
    assert set(health) == {200}
    assert [(a.status, error_code(a)) for a in answers] == [(413, "body_too_large")]
    assert _peak_rss_kib(api.pid) - peak_before < 32 * 1024  # the body was never held


# --------------------------------------------------------------------------- slow clients


def test_a_client_that_never_ends_its_headers_gets_408(api: Api) -> None:
    with connect(api.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = read_answer(sock)
    assert (answer.status, error_code(answer)) == (408, "request_timeout"), answer
    assert answer.closed


def test_a_client_trickling_its_headers_is_cut_at_the_header_timeout(api: Api) -> None:
    """A byte every 0.2 s, for up to 30 s: progress does not extend the headers' deadline."""
    with connect(api.url) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        for _ in range(150):
            if answered(sock):
                break
            try:
                sock.sendall(b"a")
            except (BrokenPipeError, ConnectionResetError):
                break
            threading.Event().wait(0.2)
        else:
            pytest.fail("the trickling client was never cut")
        answer = read_answer(sock)
    assert (answer.status, error_code(answer)) == (408, "request_timeout"), answer
    assert answer.closed


def test_a_client_that_stalls_mid_body_gets_408(api: Api) -> None:
    with connect(api.url) as sock:
        sock.sendall(_post_head({"Content-Length": "100"}) + b'{"scenario_id": ')
        answer = read_answer(sock)
    assert (answer.status, error_code(answer)) == (408, "request_timeout"), answer
    assert answer.closed


def test_headers_that_never_end_get_431(api: Api) -> None:
    """A header of 1 MiB and counting: refused once 64 KiB have come without the headers'
    end, not buffered whole."""
    with connect(api.url) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * MIB)
        answer = read_answer(sock)
    assert (answer.status, error_code(answer)) == (431, "headers_too_large"), answer
    assert answer.closed


# --------------------------------------------------------------------------- connections


def test_connections_past_the_cap_get_503_and_the_others_are_served(
    sqlite_cluster: Cluster,
) -> None:
    """--max-connections 4: four clients hold a connection each (their headers unfinished);
    a fifth gets 503 at once and is closed; the four are still served, and once they are gone
    new connections are served again. /metrics counts the refusal."""
    url = sqlite_cluster.api("api", None, "--max-connections", "4", "--header-timeout", "60")
    held = []
    for _ in range(4):
        for _attempt in range(20):
            sock = connect(url)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            early = read_answer(sock, until_closed=False, wait=0.3)
            if early.status is None:
                break
            # Refused: a connection of the start-up's health checks was still being closed.
            sock.close()
        else:
            pytest.fail("could not hold four connections")
        held.append(sock)

    with connect(url) as fifth:
        fifth.sendall(request_head("GET", "/healthz"))
        refused = read_answer(fifth)
    assert (refused.status, error_code(refused)) == (503, "too_many_connections"), refused
    assert refused.closed and int(refused.headers["retry-after"]) >= 1

    held[0].sendall(b"\r\n")  # its headers end: it is served
    assert read_answer(held[0], until_closed=False).status == 200
    for sock in held:
        sock.close()
    for _ in range(50):  # the service sees the four closed
        with connect(url) as sock:
            sock.sendall(request_head("GET", "/metrics", {"Connection": "close"}))
            answer = read_answer(sock)
        if answer.status == 200:
            break
        threading.Event().wait(0.1)
    assert answer.status == 200, answer
    families = {f.name: f for f in text_string_to_metric_families(answer.body.decode())}
    refusals = {s.labels["code"]: s.value for s in families["simreport_http_refused"].samples}
    assert refusals["too_many_connections"] >= 1
