"""What the run service costs: end-to-end `refund_desk` runs per second through `simreport api`
with 2 workers, against the same runs in a plain in-process loop over 2 processes.

Measured side by side in one run of this script, on one machine:

- in-process: `run_scenario` of `--runs` refund_desk runs (seeds 1…N, the service's own run
  document for each) in a ProcessPoolExecutor of 2 processes, each writing its run directory
  in the temporary files' folder as `simreport run` writes one (each file flushed to disk
  before it is renamed into place); the pool is started and warmed before the clock starts.
  No ledger. This is the baseline of the goal.
- in-process, in memory: the same loop writing its run directories in /dev/shm, where a flush
  to disk costs nothing (skipped where there is no /dev/shm). The service's workers write their
  scratch run directories there too, and its SQLite ledger commits without waiting for the disk
  (WAL, synchronous NORMAL); so the ratio against this loop is what the service's own work —
  HTTP, queue, streaming, ledger — costs beside the runs.
- service: one `simreport api --workers 2` on 127.0.0.1 (SQLite ledger in a temporary folder;
  a fresh PostgreSQL database on the server SIMREPORT_TEST_POSTGRES_URL names, when set). The
  same N runs are started with `POST /v1/sim/runs` as fast as they are accepted; the clock runs
  from the first POST until the ledger holds no run pending or running. Each run is claimed,
  executed in its worker's run process, its events streamed and everything recorded in the
  ledger. Two workers have executed a run each before the clock starts.

Each round measures every side once, in an order that alternates from round to round (so a
machine speeding up or slowing down during the script favours no side), and its ratios compare
measurements taken seconds apart. Prints each round, the median of the rounds' ratios (the
goal, ≥ 0.8, is judged on the median against the in-process loop), and the ratio of the best of
each side; then the p50 and p99 latency of `GET /v1/sim/runs/{id}` and of
`GET /v1/sim/runs/{id}/events?after_seq=0` measured under the service's load by `--pollers`
client threads, each asking about a random started run every `--poll-interval` seconds
(status, then events). Wall time on a shared machine is noisy: compare numbers from one run of
this script.

    python bench/bench_service.py [--runs 200] [--repeat 7] [--pollers 2] [--poll-interval 0.1]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import yaml

from simreport.ledger import connect
from simreport.ledger import tables as t

ROOT = Path(__file__).resolve().parent.parent
IN_MEMORY = Path("/dev/shm")
EXAMPLE = ROOT / "examples" / "refund_desk"
SIMREPORT = Path(sys.executable).with_name("simreport")
TOKEN = "bench-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
VERSION = "1.3.0"
GOAL = 0.8
TIMEOUT = 600.0
"""The longest any side may take."""


# --------------------------------------------------------------------------- in process


def _spec() -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text("utf-8"))
    return spec


def _one_run(doc: dict[str, Any], out: str, asset_root: str) -> str:
    from simreport.kernel.engine import run_scenario, validate_scenario

    result = run_scenario(
        validate_scenario(doc), out, condition="bench", replication=0, asset_root=asset_root
    )
    return str(result.status.execution)


def in_process(seeds: list[int], root: Path, work: Path) -> float:
    """Runs per second of `seeds` in a pool of 2 processes."""
    from simreport.service.queue import run_document

    docs = [run_document(_spec(), seed=s, budget=None, mode="surrogate") for s in seeds]
    with ProcessPoolExecutor(2) as pool:
        warm = [pool.submit(_one_run, docs[0], str(work / f"warm-{i}"), str(root)) for i in (0, 1)]
        for done in warm:
            done.result()
        start = time.perf_counter()
        futures = [
            pool.submit(_one_run, doc, str(work / f"run-{i}"), str(root))
            for i, doc in enumerate(docs)
        ]
        outcomes = [f.result(timeout=TIMEOUT) for f in futures]
        elapsed = time.perf_counter() - start
    assert outcomes == ["completed"] * len(seeds), outcomes
    return len(seeds) / elapsed


# --------------------------------------------------------------------------- the service


@contextmanager
def ledger(work: Path) -> Iterator[str]:
    """A fresh ledger: SQLite in `work`, or a new database on SIMREPORT_TEST_POSTGRES_URL."""
    server_url = os.environ.get("SIMREPORT_TEST_POSTGRES_URL")
    if not server_url:
        yield f"sqlite:///{work / 'ledger.sqlite'}"
        return
    server = sa.engine.make_url(server_url)
    name = f"bench_service_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@contextmanager
def api(url: str, library: Path, work: Path) -> Iterator[str]:
    """`simreport api --workers 2` on a free loopback port; its base URL while it serves."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tokens = work / "tokens.yaml"
    tokens.write_text(f"- name: bench\n  token: {TOKEN}\n", encoding="utf-8")
    log = work / "api.log"
    env = {k: v for k, v in os.environ.items() if k != "SIMREPORT_API_TOKENS"}
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                str(SIMREPORT),
                "api",
                "--ledger",
                url,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "2",
                "--library",
                str(library),
                "--tokens-file",
                str(tokens),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("simreport api did not start:\n" + log.read_text())
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


class Service:
    """A client of the service with its scenario, and the ledger to see when runs end."""

    def __init__(self, base: str, url: str) -> None:
        self.client = httpx.Client(base_url=base, headers=HEADERS, timeout=30)
        self.engine = connect(url)
        created = self.post(
            "/v1/sim/scenarios",
            {"namespace": "bench", "name": "refund", "owner": "bench", "risk_level": "low"},
        )
        self.scenario_id = str(created["scenario_id"])
        self.post(
            f"/v1/sim/scenarios/{self.scenario_id}/versions",
            {"version": VERSION, "spec": _spec()},
        )

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(path, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
        if response.status_code not in (201, 202):
            raise SystemExit(f"{path}: {response.status_code} {response.text}")
        answer: dict[str, Any] = response.json()
        return answer

    def start(self, seed: int) -> str:
        body = {"scenario_id": self.scenario_id, "version": VERSION, "seed": seed}
        return str(self.post("/v1/sim/runs", body)["run_id"])

    def outcomes(self, run_ids: list[str]) -> dict[str, str]:
        r = t.run.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(r.run_id, r.execution_status).where(r.run_id.in_(run_ids))
            )
            return {run_id: status for run_id, status in rows}

    def wait(self, run_ids: list[str]) -> None:
        """Until the ledger holds no run pending or running (the runs of earlier measurements
        have ended), asking every 50 ms with one count; then every one of `run_ids` must have
        completed."""
        r = t.run.c
        active = (
            sa.select(sa.func.count())
            .select_from(t.run)
            .where((r.execution_status == "pending") | (r.execution_status == "running"))
        )
        deadline = time.monotonic() + TIMEOUT
        while True:
            with self.engine.connect() as conn:
                if not conn.execute(active).scalar_one():
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"runs still active after {TIMEOUT:g} s")
            time.sleep(0.05)
        ended = self.outcomes(run_ids)
        assert set(ended.values()) == {"completed"}, ended

    def warm(self, workers: int) -> None:
        """Runs until `workers` workers have executed one each (a few at a time)."""
        warmed: set[str] = set()
        for _ in range(10):
            run_ids = [self.start(0) for _ in range(workers)]
            self.wait(run_ids)
            r = t.run.c
            with self.engine.connect() as conn:
                owners = conn.execute(sa.select(r.lease_owner).where(r.run_id.in_(run_ids)))
                warmed.update(owner for (owner,) in owners)
            if len(warmed) >= workers:
                return
        raise SystemExit(f"only {len(warmed)} of {workers} workers executed a run")

    def close(self) -> None:
        self.client.close()
        self.engine.dispose()


class Pollers:
    """Client threads reading the status and the events of random started runs, timing each."""

    def __init__(self, base: str, threads: int, interval: float) -> None:
        self.base, self.interval = base, interval
        self.started: list[str] = []
        self.status: list[float] = []
        self.events: list[float] = []
        self.errors = 0
        self.threads_wanted = threads
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def __enter__(self) -> Pollers:
        """Poll (again) until the block ends; the timings add up over the blocks."""
        self.started.clear()
        self.stop.clear()
        self.threads = [
            threading.Thread(target=self._poll, daemon=True) for _ in range(self.threads_wanted)
        ]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def _poll(self) -> None:
        with httpx.Client(base_url=self.base, headers=HEADERS, timeout=30) as client:
            while not self.stop.wait(self.interval):
                if not self.started:
                    continue
                run_id = random.choice(self.started)
                for path, times in (
                    (f"/v1/sim/runs/{run_id}", self.status),
                    (f"/v1/sim/runs/{run_id}/events?after_seq=0", self.events),
                ):
                    begin = time.perf_counter()
                    response = client.get(path)
                    times.append(time.perf_counter() - begin)
                    self.errors += response.status_code != 200


def through_service(service: Service, seeds: list[int], pollers: Pollers) -> float:
    """Runs per second of `seeds` through the service, from the first POST until all ended."""
    with pollers:
        start = time.perf_counter()
        run_ids = []
        for seed in seeds:
            run_ids.append(service.start(seed))
            pollers.started.append(run_ids[-1])
        service.wait(run_ids)
        return len(seeds) / (time.perf_counter() - start)


# --------------------------------------------------------------------------- report


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=200, help="runs per measurement (200)")
    parser.add_argument("--repeat", type=int, default=7, help="rounds (7)")
    parser.add_argument("--pollers", type=int, default=2, help="polling client threads (2)")
    parser.add_argument("--poll-interval", type=float, default=0.1, help="seconds (0.1)")
    args = parser.parse_args()
    seeds = list(range(1, args.runs + 1))
    with tempfile.TemporaryDirectory(prefix="bench-service-") as tmp:
        work = Path(tmp)
        root = work / "refund_desk"
        shutil.copytree(EXAMPLE, root)
        memory = (
            Path(tempfile.mkdtemp(prefix="bench-service-", dir=IN_MEMORY))
            if IN_MEMORY.is_dir()
            else None
        )
        with ledger(work) as url, api(url, root / "assets", work) as base:
            service = Service(base, url)
            pollers = Pollers(base, args.pollers, args.poll_interval)

            def on_disk() -> float:
                shutil.rmtree(work / "runs", ignore_errors=True)
                return in_process(seeds, root, work / "runs")

            def in_memory() -> float:
                assert memory is not None
                shutil.rmtree(memory / "runs", ignore_errors=True)
                return in_process(seeds, root, memory / "runs")

            sides: dict[str, Any] = {"in-process": on_disk}
            if memory is not None:
                sides["in memory"] = in_memory
            sides["service"] = lambda: through_service(service, seeds, pollers)
            rates: dict[str, list[float]] = {name: [] for name in sides}
            try:
                service.warm(workers=2)
                for k in range(args.repeat):
                    order = list(sides) if k % 2 == 0 else list(reversed(sides))
                    for name in order:
                        rates[name].append(sides[name]())
                    shown = ", ".join(f"{name} {rates[name][-1]:.2f}" for name in sides)
                    print(f"  round {k + 1}: {shown} runs/s", flush=True)
            finally:
                service.close()
                if memory is not None:
                    shutil.rmtree(memory, ignore_errors=True)
        where = "PostgreSQL" if url.startswith("postgresql") else "SQLite"
    remote = rates["service"]
    print(f"refund_desk, {args.runs} runs, 2 processes, ledger {where}, {args.repeat} rounds:")
    print("                              best    median   (runs/s)")
    for name, label in (
        ("in-process", "in-process loop"),
        ("in memory", "in-process, in memory"),
        ("service", "through the service"),
    ):
        if name in rates:
            best, middle = max(rates[name]), statistics.median(rates[name])
            print(f"  {label:24s} {best:7.2f}  {middle:7.2f}")
    for name, label in (("in-process", "in-process loop"), ("in memory", "in memory")):
        if name not in rates:
            continue
        rounds = [there / here for there, here in zip(remote, rates[name], strict=True)]
        goal = f"   (goal ≥ {GOAL})" if name == "in-process" else ""
        print(
            f"  service / {label:16s} median {statistics.median(rounds):.2f}{goal}; "
            f"best / best {max(remote) / max(rates[name]):.2f}; "
            f"rounds {', '.join(f'{r:.2f}' for r in rounds)}"
        )
    for name, times in (
        ("GET /v1/sim/runs/{id}       ", pollers.status),
        ("GET /v1/sim/runs/{id}/events", pollers.events),
    ):
        if times:
            print(
                f"  {name}  p50 {1000 * percentile(times, 0.5):6.1f} ms   "
                f"p99 {1000 * percentile(times, 0.99):6.1f} ms   ({len(times)} requests)"
            )
    if pollers.errors:
        print(f"  {pollers.errors} polling request(s) did not answer 200")


if __name__ == "__main__":
    main()
