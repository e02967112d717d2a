"""What the run service's front door withstands and costs: the issue's 78 MB body, the
connection limits' CPU per request, and a /metrics scrape over a long history.

- attack: one `simreport api --workers 0` (the `simreport` on PATH beside this Python, so
  PYTHONPATH can point it at another checkout) is sent an authenticated `POST /v1/sim/runs`
  whose body is 78 MB of valid JSON (a run whose budget holds a list of 39 million zeros),
  declared by Content-Length and then sent whole, while
  a client asks `/healthz` again and again. Prints the answer's status, how long it took to
  come, the API's resident memory before and its peak after (VmRSS, VmHWM), and the slowest
  and the number of health checks answered meanwhile.
- overhead: the same app under uvicorn's plain httptools protocol and under the service's
  limited one (simreport.service.limits), side by side in rounds whose order alternates: the
  API's CPU time (utime + stime) per request for `--requests` requests answered 401 (the
  cheapest answer: no routing, no ledger), on one kept-alive connection and on a new
  connection each. Prints each side's median and the ratio limited/plain.
- metrics: a ledger holding `--runs` runs queued through the service (copies of one real
  run, ended with a claim-to-finish time each), and the median time of a `/metrics` scrape,
  which reads them all.

The ledger is SQLite in a temporary folder, or a fresh database on the server
SIMREPORT_TEST_POSTGRES_URL names when it is set. Wall time on a shared machine is noisy:
compare numbers from one run of this script.

    python bench/bench_front_door.py [--only attack|overhead|metrics] [--requests 2000]
        [--rounds 5] [--runs 100000]
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import sqlalchemy as sa
import yaml
from bench_service import ledger  # a fresh SQLite or PostgreSQL ledger

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "refund_desk"
SIMREPORT = Path(sys.executable).with_name("simreport")
TOKEN = "bench-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
HUGE = 78 * 1000 * 1000

SERVER = """
import sys, uvicorn
from simreport.service.app import create_app
from simreport.service.refusals import error_response
from simreport.service.config import ServiceSettings
from simreport.service.limits import Limits, limited_http
ledger, port, protocol = sys.argv[1], int(sys.argv[2]), sys.argv[3]
settings = ServiceSettings(ledger=ledger, port=port)
app = create_app(settings)
http = "httptools"
if protocol == "limited":
    refusal = lambda status, code, message: error_response(status, code, message)
    http = limited_http(Limits.of(settings), refusal, lambda code: None)
uvicorn.run(app, host="127.0.0.1", port=port, http=http, log_level="warning", server_header=False)
"""
"""The app under one protocol or the other: uvicorn.run as `simreport api` runs it."""


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serving(command: list[str], port: int, log: Path) -> Iterator[tuple[str, int]]:
    """`command` serving on `port`: its base URL and pid once /healthz answers."""
    env = {k: v for k, v in os.environ.items() if k != "SIMREPORT_API_TOKENS"}
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{command[0]} did not start:\n" + log.read_text())
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield base, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@contextmanager
def simreport_api(url: str, work: Path, library: Path) -> Iterator[tuple[str, int]]:
    tokens = work / "tokens.yaml"
    tokens.write_text(f"- name: bench\n  token: {TOKEN}\n", encoding="utf-8")
    port = free_port()
    command = [str(SIMREPORT), "api", "--ledger", url, "--port", str(port), "--workers", "0"]
    command += ["--tokens-file", str(tokens), "--library", str(library)]
    with serving(command, port, work / "api.log") as served:
        yield served


def memory_kib(pid: int, field: str) -> int:
    """VmRSS or VmHWM of process `pid`, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- attack


def _huge_body() -> Iterator[bytes]:
    """HUGE bytes of a valid run request, in parts of 64 KiB."""
    head = b'{"scenario_id": "scn-x", "version": "1.3.0", "budget": {"pad": ['
    tail = b"0]}}"
    zeros = (HUGE - len(head) - len(tail)) // 2
    yield head + b" " * ((HUGE - len(head) - len(tail)) % 2)
    part = b"0," * 32768
    for _ in range(zeros // 32768):
        yield part
    yield b"0," * (zeros % 32768) + tail


def attack(work: Path) -> None:
    with ledger(work) as url, simreport_api(url, work, EXAMPLE / "assets") as (base, pid):
        rss_before = memory_kib(pid, "VmRSS")
        outcome: dict[str, object] = {}

        def send() -> None:
            start = time.perf_counter()
            host, port = base.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=120) as sock:
                head = (
                    "POST /v1/sim/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Authorization: Bearer {TOKEN}\r\nIdempotency-Key: huge\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {HUGE}\r\n\r\n"
                )
                try:
                    sock.sendall(head.encode())
                    for part in _huge_body():
                        sock.sendall(part)
                    outcome["sent"] = "whole"
                except OSError as exc:
                    outcome["sent"] = f"cut after its answer ({type(exc).__name__})"
                answer = b""
                try:
                    while b"\r\n" not in answer:
                        more = sock.recv(4096)
                        if not more:
                            break
                        answer += more
                except OSError:
                    pass
            outcome["status"] = answer.split(b"\r\n", 1)[0].decode(errors="replace")
            outcome["seconds"] = time.perf_counter() - start

        sender = threading.Thread(target=send)
        sender.start()
        health = []
        while sender.is_alive():
            start = time.perf_counter()
            httpx.get(base + "/healthz", timeout=120)
            health.append(time.perf_counter() - start)
        sender.join()
        peak = memory_kib(pid, "VmHWM")
    print("attack: a 78 MB body to POST /v1/sim/runs")
    print(f"  answer: {outcome['status']} after {outcome['seconds']:.2f} s; sent {outcome['sent']}")
    print(f"  API memory: {rss_before / 1024:.0f} MiB before, peak {peak / 1024:.0f} MiB")
    print(f"  /healthz meanwhile: {len(health)} answered, slowest {max(health) * 1000:.0f} ms")


# --------------------------------------------------------------------------- overhead


def _per_request(base: str, pid: int, requests: int, *, fresh: bool) -> float:
    """The API's CPU seconds per request answered 401 (http.client: a light client)."""
    host, port = base.removeprefix("http://").split(":")
    path = "/v1/sim/runs/run-none"
    kept = http.client.HTTPConnection(host, int(port), timeout=30)
    kept.request("GET", path)  # warm
    kept.getresponse().read()
    before = cpu_seconds(pid)
    for _ in range(requests):
        connection = http.client.HTTPConnection(host, int(port), timeout=30) if fresh else kept
        connection.request("GET", path)
        connection.getresponse().read()
        if fresh:
            connection.close()
    spent = cpu_seconds(pid) - before
    kept.close()
    return spent / requests


def overhead(work: Path, requests: int, rounds: int) -> None:
    results: dict[tuple[str, bool], list[float]] = {}
    with ledger(work) as url:
        for r in range(rounds):
            order = ("plain", "limited") if r % 2 == 0 else ("limited", "plain")
            for protocol in order:
                port = free_port()
                command = [sys.executable, "-c", SERVER, url, str(port), protocol]
                with serving(command, port, work / f"{protocol}.log") as (base, pid):
                    for fresh in (False, True):
                        cost = _per_request(base, pid, requests, fresh=fresh)
                        results.setdefault((protocol, fresh), []).append(cost)
    print(f"overhead: API CPU per request answered 401, median of {rounds} rounds")
    for fresh in (False, True):
        plain = statistics.median(results[("plain", fresh)])
        limited = statistics.median(results[("limited", fresh)])
        how = "a new connection each" if fresh else "one kept-alive connection"
        print(
            f"  {how}: plain {plain * 1e6:.0f} µs, limited {limited * 1e6:.0f} µs, "
            f"ratio {limited / plain:.3f}"
        )


# --------------------------------------------------------------------------- metrics


def metrics(work: Path, runs: int) -> None:
    from simreport.ledger import connect
    from simreport.ledger import tables as t

    library = EXAMPLE / "assets"
    with ledger(work) as url, simreport_api(url, work, library) as (base, _):
        client = httpx.Client(base_url=base, headers=HEADERS, timeout=120)

        def post(path: str, body: object, key: str) -> dict[str, str]:
            answer = client.post(path, json=body, headers={"Idempotency-Key": key})
            answer.raise_for_status()
            doc: dict[str, str] = answer.json()
            return doc

        scenario = post(
            "/v1/sim/scenarios",
            {"namespace": "bench", "name": "refund", "owner": "bench", "risk_level": "low"},
            "s",
        )["scenario_id"]
        spec = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text("utf-8"))
        post(f"/v1/sim/scenarios/{scenario}/versions", {"version": "1.3.0", "spec": spec}, "v")
        run_id = post("/v1/sim/runs", {"scenario_id": scenario, "version": "1.3.0"}, "r")["run_id"]
        engine = connect(url)
        with engine.begin() as conn:
            row = dict(
                conn.execute(sa.select(t.run).where(t.run.c.run_id == run_id)).one()._mapping
            )
            statuses = ("completed", "completed", "completed", "crashed", "cancelled")
            batch = []
            for i in range(runs):
                start = row["created_at"] + timedelta(seconds=i % 97)
                batch.append(
                    {
                        **row,
                        "run_id": f"run-bench-{i:08d}",
                        "execution_status": statuses[i % len(statuses)],
                        "started_at": start,
                        "ended_at": start + timedelta(seconds=0.3 + (i % 300)),
                    }
                )
                if len(batch) == 5000 or i == runs - 1:
                    conn.execute(t.run.insert(), batch)
                    batch = []
        engine.dispose()
        times = []
        for _ in range(7):
            start = time.perf_counter()
            client.get("/metrics").raise_for_status()
            times.append(time.perf_counter() - start)
        client.close()
    kind = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    print(f"metrics: a /metrics scrape over {runs + 1} runs on {kind}")
    print(f"  median {statistics.median(times) * 1000:.0f} ms, fastest {min(times) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("attack", "overhead", "metrics"))
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-front-") as tmp:
        for part in ("attack", "overhead", "metrics"):
            (Path(tmp) / part).mkdir()  # a ledger and logs of its own
        if args.only in (None, "attack"):
            attack(Path(tmp) / "attack")
        if args.only in (None, "overhead"):
            overhead(Path(tmp) / "overhead", args.requests, args.rounds)
        if args.only in (None, "metrics"):
            metrics(Path(tmp) / "metrics", args.runs)


if __name__ == "__main__":
    main()
