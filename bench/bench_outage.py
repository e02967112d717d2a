"""What becomes of the run service's runs when the ledger goes away: queued runs on a ledger that
is stopped (PostgreSQL) or whose disk fills up (SQLite) mid-way, then comes back.

Real processes: one `simreport api --workers 0` and `--workers` (2) `simreport worker` processes
on 127.0.0.1, with a lease of `--lease` seconds (10, heartbeat a fifth of it: shorter than the
outage, so a lease that is not kept alive runs out). The agent under test notes each execution
in a file as it is imported (each run imports it afresh), so executions are counted, not only
final states.

- queue: `--runs` (300) runs of the refund desk queued on a PostgreSQL cluster of this script's
  own (tests/cluster/postgres.sh); once half of them have executed, the server is stopped
  (`pg_ctl stop -m fast`) for `--outage` (15) seconds, then started.
- paced: 6 runs of the paced agent (2 s a turn, about 10 s a run) on PostgreSQL, the server
  stopped twice for `--outage` seconds: once both workers have a run under way, and again once
  four runs have started.
- disk: `--runs` runs on a SQLite ledger on a tmpfs of its own (root only), filled up by a file
  once half of them have executed, freed `--outage` seconds later.

For each it prints the runs queued, how long the ledger was away, the runs completed (and any
other end), the executions counted, the runs the workers kept in their spool while the ledger was
away (most at once), and what a client was answered meanwhile. Every wait has a deadline.

    python bench/bench_outage.py [--scenario queue|paced|disk|all] [--runs 300] [--outage 15]
        [--lease 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import yaml

from simreport.ledger import connect
from simreport.ledger import tables as t

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "refund_desk"
POSTGRES_SH = ROOT / "tests" / "cluster" / "postgres.sh"
SIMREPORT = Path(sys.executable).with_name("simreport")
TOKEN = "bench-token-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
VERSION = "1.3.0"
TIMEOUT = 900.0
"""The longest any wait may take."""
DISK = "96M"
"""The tmpfs the SQLite ledger of `disk` lives on."""

# The paced agent with its pause set, noting each execution (each run imports it afresh).
COUNTED = """
import os
import paced_agent

paced_agent.PAUSE_SECONDS = {pause}
respond = paced_agent.respond

with open({log!r}, "a", encoding="utf-8") as _log:
    _log.write(f"{{os.getpid()}}\\n")
"""


# --------------------------------------------------------------------------- components


def _library(work: Path) -> Path:
    """The refund desk with `counted-quick` (no pause) and `counted-paced` (2 s a turn)."""
    root = work / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    for name, pause in (("quick", 0.0), ("paced", 2.0)):
        module = COUNTED.format(pause=pause, log=str(work / "executions"))
        (root / f"counted_{name}.py").write_text(module, encoding="utf-8")
        folder = root / "assets" / f"counted-{name}"
        folder.mkdir()
        doc = {"kind": "agent", "name": f"counted-{name}", "version": "1.0.0"}
        doc["content"] = {"adapter": "python", "entry": f"counted_{name}:respond"}
        (folder / "1.0.0.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return root / "assets"


def _executions(work: Path) -> int:
    try:
        return len((work / "executions").read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0


@contextmanager
def postgres() -> Iterator[tuple[str, Callable[[], None], Callable[[], None]]]:
    """A PostgreSQL cluster of this script's own: its URL, and how to stop and start it."""
    folder = Path(tempfile.mkdtemp(prefix="simreport-pg-"))

    def script(action: str) -> None:
        done = subprocess.run(
            [str(POSTGRES_SH), action, str(folder)], capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise SystemExit(f"postgres.sh {action}: {done.stderr}")

    try:
        script("start")
        yield (folder / "url").read_text().strip(), lambda: script("stop"), lambda: script("start")
    finally:
        subprocess.run([str(POSTGRES_SH), "stop", str(folder)], capture_output=True, check=False)
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def small_disk() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="simreport-disk-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode:
        os.rmdir(folder)
        raise SystemExit(f"cannot mount a tmpfs (run as root): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, check=False)
        os.rmdir(folder)


class Processes:
    """The API and the workers, each logging to a file in `work`; stopped at the end."""

    def __init__(self, work: Path, ledger: str, library: Path, lease: float) -> None:
        self.work, self.ledger, self.library, self.lease = work, ledger, library, lease
        self.spool = work / "state" / "simreport" / "spool"
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "SIMREPORT_API_TOKENS"},
            "PYTHONUNBUFFERED": "1",
            "XDG_STATE_HOME": str(work / "state"),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.work / f"{name}.log").open("ab") as out:
            process = subprocess.Popen(
                [str(SIMREPORT), *args], stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        self.processes.append(process)
        return process

    def api(self) -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        tokens = self.work / "tokens.yaml"
        tokens.write_text(f"- name: bench\n  token: {TOKEN}\n", encoding="utf-8")
        process = self._start(
            "api",
            "api",
            "--ledger",
            self.ledger,
            "--port",
            str(port),
            "--workers",
            "0",
            "--library",
            str(self.library),
            "--tokens-file",
            str(tokens),
            "--lease-seconds",
            str(self.lease),
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("simreport api did not start:\n" + self.log("api"))
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    return base
            except httpx.TransportError:
                pass
            time.sleep(0.1)

    def worker(self, name: str) -> None:
        self._start(
            name,
            "worker",
            "--ledger",
            self.ledger,
            "--library",
            str(self.library),
            "--lease-seconds",
            str(self.lease),
            "--heartbeat-seconds",
            str(self.lease / 5),
            "--worker-id",
            name,
        )

    def log(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")

    def spooled(self) -> int:
        return len([p for p in self.spool.glob("*/*") if not p.name.startswith(".")])

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


# --------------------------------------------------------------------------- one measurement


@dataclass
class Outcome:
    name: str
    queued: int = 0
    away: list[float] = field(default_factory=list)
    """How long the ledger was away, each time."""
    ends: dict[str, int] = field(default_factory=dict)
    claimed_again: int = 0
    """Runs claimed more than once."""
    executions: int = 0
    spooled: int = 0
    """Runs kept in the spool at once, at most, while the ledger was away."""
    answered: set[str] = field(default_factory=set)
    """What a client was answered while the ledger was away: status and error code."""

    def report(self) -> str:
        completed = self.ends.get("completed", 0)
        others = ", ".join(
            f"{n} {status}" for status, n in sorted(self.ends.items()) if status != "completed"
        )
        once = completed == self.queued == self.executions and not self.claimed_again
        return (
            f"{self.name}: {self.queued} runs queued; ledger away "
            + " + ".join(f"{s:.1f} s" for s in self.away)
            + f"; {completed} completed{f' ({others})' if others else ''}"
            + f"; {self.executions} executions counted"
            + f"; {self.claimed_again} claimed twice"
            + f"; all completed, each executed once: {'yes' if once else 'NO'}"
            + f"; kept in a spool at once: up to {self.spooled}"
            + f"; a client meanwhile: {', '.join(sorted(self.answered)) or '-'}"
        )


class Client:
    def __init__(self, base: str) -> None:
        self.client = httpx.Client(base_url=base, headers=HEADERS, timeout=30)

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.client.post(path, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})

    def scenario(self, agent: str) -> str:
        body = {"namespace": "bench", "name": agent, "owner": "bench", "risk_level": "low"}
        created = self.post("/v1/sim/scenarios", body)
        if created.status_code != 201:
            raise SystemExit(f"scenario: {created.status_code} {created.text}")
        scenario_id = str(created.json()["scenario_id"])
        spec = yaml.safe_load((EXAMPLE / "scenario.yaml").read_text(encoding="utf-8"))
        spec["sut"]["agent"] = agent
        version = self.post(
            f"/v1/sim/scenarios/{scenario_id}/versions", {"version": VERSION, "spec": spec}
        )
        if version.status_code != 202:
            raise SystemExit(f"version: {version.status_code} {version.text}")
        return scenario_id

    def start(self, scenario_id: str, seed: int) -> str:
        body = {"scenario_id": scenario_id, "version": VERSION, "seed": seed}
        started = self.post("/v1/sim/runs", body)
        if started.status_code != 202:
            raise SystemExit(f"run: {started.status_code} {started.text}")
        return str(started.json()["run_id"])

    def probe(self) -> str:
        """A write while the ledger is away: its status and error code."""
        body = {"namespace": "probe", "name": uuid.uuid4().hex, "owner": "b", "risk_level": "low"}
        try:
            answer = self.post("/v1/sim/scenarios", body)
        except httpx.TransportError as exc:
            return type(exc).__name__
        if answer.status_code >= 400:
            return f"{answer.status_code} {answer.json()['error']['code']}"
        return str(answer.status_code)


def _wait(what: str, check: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"waited {timeout:g} s for {what}")
        time.sleep(0.1)


def _away(
    outcome: Outcome,
    processes: Processes,
    client: Client,
    seconds: float,
    leave: Callable[[], None],
    back: Callable[[], None],
) -> None:
    """Take the ledger away (`leave`) for `seconds`, probing with a client and watching the
    spool, then bring it back (`back`)."""
    began = time.monotonic()
    leave()
    try:
        refused = False
        while time.monotonic() - began < seconds:
            outcome.spooled = max(outcome.spooled, processes.spooled())
            if not refused:  # until a write is refused (a full disk lets some through)
                answer = client.probe()
                refused = answer != "201"
                if refused:
                    outcome.answered.add(answer)
            time.sleep(0.2)
    finally:
        back()
    outcome.away.append(time.monotonic() - began)


def _settle(outcome: Outcome, processes: Processes, run_ids: list[str], work: Path) -> None:
    engine = connect(processes.ledger)
    r = t.run.c
    try:

        def ended() -> bool:
            with engine.connect() as conn:
                statuses = conn.execute(
                    sa.select(r.execution_status).where(r.run_id.in_(run_ids))
                ).scalars()
                return all(s in ("completed", "crashed", "cancelled") for s in statuses)

        _wait("every run to end", ended)
        with engine.connect() as conn:
            rows = conn.execute(
                sa.select(r.execution_status, r.attempts).where(r.run_id.in_(run_ids))
            ).all()
    finally:
        engine.dispose()
    for status, attempts in rows:
        outcome.ends[status] = outcome.ends.get(status, 0) + 1
        outcome.claimed_again += attempts > 1
    outcome.executions = _executions(work)


def _queued(
    outcome: Outcome, processes: Processes, agent: str, runs: int, workers: int
) -> tuple[Client, list[str]]:
    """`runs` runs of `agent` queued through the API, then `workers` workers started."""
    client = Client(processes.api())
    scenario_id = client.scenario(agent)
    run_ids = [client.start(scenario_id, seed) for seed in range(runs)]
    outcome.queued = len(run_ids)
    for i in range(workers):
        processes.worker(f"worker-{i + 1}")
    return client, run_ids


def queue(args: argparse.Namespace, work: Path) -> Outcome:
    outcome = Outcome(f"queue (PostgreSQL, {args.workers} workers, lease {args.lease:g} s)")
    with postgres() as (url, stop, start):
        processes = Processes(work, url, _library(work), args.lease)
        try:
            client, run_ids = _queued(
                outcome, processes, "counted-quick@1.0.0", args.runs, args.workers
            )
            _wait("half the runs executed", lambda: _executions(work) >= args.runs // 2)
            _away(outcome, processes, client, args.outage, stop, start)
            _settle(outcome, processes, run_ids, work)
        finally:
            processes.stop()
    return outcome


def paced(args: argparse.Namespace, work: Path) -> Outcome:
    outcome = Outcome(f"paced (PostgreSQL, 2 s a turn, {args.workers} workers)")
    with postgres() as (url, stop, start):
        processes = Processes(work, url, _library(work), args.lease)
        try:
            client, run_ids = _queued(outcome, processes, "counted-paced@1.0.0", 6, args.workers)
            for started in (2, 4):
                _wait(f"{started} runs started", lambda n=started: _executions(work) >= n)
                _away(outcome, processes, client, args.outage, stop, start)
            _settle(outcome, processes, run_ids, work)
        finally:
            processes.stop()
    return outcome


def disk(args: argparse.Namespace, work: Path) -> Outcome:
    outcome = Outcome(f"disk (SQLite on a {DISK} tmpfs, {args.workers} workers)")
    with small_disk() as folder:
        ledger = f"sqlite:///{folder / 'ledger.sqlite'}"
        processes = Processes(work, ledger, _library(work), args.lease)
        try:
            client, run_ids = _queued(
                outcome, processes, "counted-quick@1.0.0", args.runs, args.workers
            )
            _wait("half the runs executed", lambda: _executions(work) >= args.runs // 2)
            filler = folder / "filler"
            _away(outcome, processes, client, args.outage, lambda: _fill(filler), filler.unlink)
            _settle(outcome, processes, run_ids, work)
        finally:
            processes.stop()
    return outcome


def _fill(filler: Path) -> None:
    with filler.open("wb", buffering=0) as out:
        for size in (1 << 20, 1 << 12, 1 << 9):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError:
                continue


SCENARIOS = {"queue": queue, "paced": paced, "disk": disk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--outage", type=float, default=15.0, help="seconds the ledger is away")
    parser.add_argument("--lease", type=float, default=10.0, help="the workers' lease (seconds)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    for name in names:
        with tempfile.TemporaryDirectory(prefix=f"bench-outage-{name}-") as work:
            print(SCENARIOS[name](args, Path(work)).report(), flush=True)


if __name__ == "__main__":
    main()
