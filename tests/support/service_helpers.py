"""What the run service's tests share: agents under test as Python entry points that take their
time (so a run can be cancelled or killed midway) or kill their own process, a free loopback
port, the command that runs `simreport`, and a cluster of real `simreport api` and `simreport
worker` processes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import descendants

AGENTS = """
import json, os, re, signal, time

DELAY = {delay}

def respond(body):
    time.sleep(DELAY)
    messages = body["messages"]
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    found = re.findall(r"B\\d{{4}}-\\d{{4}}-\\d{{4}}", said)
    if not found:
        return {{"role": "assistant", "content": "Could you please tell me your order number?"}}
    done = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not done:
        args = json.dumps({{"order_no": found[-1], "amount_minor": 19900}})
        return {{"role": "assistant", "content": None, "tool_calls": [
            {{"id": "c1", "type": "function",
             "function": {{"name": "create_refund", "arguments": args}}}}]}}
    if len(done) == 1:
        args = json.dumps({{"order_no": found[-1]}})
        return {{"role": "assistant", "content": None, "tool_calls": [
            {{"id": "c2", "type": "function",
             "function": {{"name": "get_refund", "arguments": args}}}}]}}
    return {{"role": "assistant", "content": "Your refund of 199.00 has been accepted."}}

def die(body):
    time.sleep(DELAY)
    os.kill(os.getpid(), signal.SIGKILL)
"""
"""A careful refund agent answering after DELAY seconds (`respond`), and one whose process
dies (`die`)."""


def write_agents(root: Path, module: str, *, delay: float) -> None:
    """The agents as the module `module` in `root` (a run's asset root: the library's parent,
    where python entry points are imported from)."""
    (root / f"{module}.py").write_text(AGENTS.format(delay=delay), encoding="utf-8")


def add_agent(library: Path, name: str, entry: str) -> None:
    """Agent asset `name@1.0.0` in `library`, reached through the python entry `entry`."""
    folder = library / name
    folder.mkdir()
    doc = {
        "kind": "agent",
        "name": name,
        "version": "1.0.0",
        "content": {"adapter": "python", "entry": entry},
    }
    (folder / "1.0.0.json").write_text(json.dumps(doc), encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def simreport_command() -> list[str]:
    exe = Path(sys.executable).with_name("simreport")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "simreport.cli"]


# --------------------------------------------------------------------------- processes

TOKEN = "load-token-0123456789abcdef"
QUOTA_TOKEN = "quota-token-0123456789abcdef"
QUOTA = 3
START_TIMEOUT = 60.0
WAIT = 60.0
"""The longest a fault test waits for one thing to happen."""


class Cluster:
    """API and worker processes of one ledger, each logging to a file; all stopped at the end."""

    def __init__(
        self,
        tmp_path: Path,
        ledger: str,
        library: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """`env`: variables the processes get beside this one's (the ledger's and the tokens'
        left out). Workers keep their spool in `spool` (under tmp_path, by XDG_STATE_HOME)."""
        self.tmp = tmp_path
        self.spool = tmp_path / "state" / "simreport" / "spool"
        self.ledger = ledger
        self.library = library
        self.tokens = tmp_path / "tokens.yaml"
        self.tokens.write_text(
            f"- name: load\n  token: {TOKEN}\n"
            f"- name: quota\n  token: {QUOTA_TOKEN}\n  maxConcurrentRuns: {QUOTA}\n",
            encoding="utf-8",
        )
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.env = {
            **{
                k: v
                for k, v in os.environ.items()
                if k not in ("SIMREPORT_API_TOKENS", "SIMREPORT_LEDGER_URL")
            },
            "PYTHONUNBUFFERED": "1",
            "XDG_STATE_HOME": str(tmp_path / "state"),
            **(env or {}),
        }

    def _start(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        log = self.logs.setdefault(name, self.tmp / f"{name}.log")
        with log.open("ab") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.processes[name] = process
        return process

    def api(self, name: str, port: int | None = None, *options: str) -> str:
        """`simreport api --workers 0` on 127.0.0.1 (a free port unless given); its URL once it
        answers."""
        port = port or free_port()
        url = f"http://127.0.0.1:{port}"
        process = self._start(
            name,
            [
                *simreport_command(),
                "api",
                "--ledger",
                self.ledger,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "0",
                "--library",
                str(self.library),
                "--tokens-file",
                str(self.tokens),
                *options,
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"{name} exited:\n{self.log(name)}")
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        pytest.fail(f"{name} did not start:\n{self.log(name)}")

    def worker(self, name: str, *options: str, lease: float = 20.0, heartbeat: float = 1.0) -> None:
        """`simreport worker` with the worker id `name` (and `options`)."""
        self._start(
            name,
            [
                *simreport_command(),
                "worker",
                "--ledger",
                self.ledger,
                "--library",
                str(self.library),
                "--lease-seconds",
                str(lease),
                "--heartbeat-seconds",
                str(heartbeat),
                "--poll-seconds",
                "0.05",
                "--worker-id",
                name,
                *options,
            ],
        )

    def kill(self, name: str) -> set[int]:
        """SIGKILL the process `name`; the processes it had started, orphaned now."""
        process = self.processes.pop(name)
        orphans = descendants(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=WAIT)
        return orphans

    def alive(self) -> None:
        for name, process in self.processes.items():
            assert process.poll() is None, f"{name} exited:\n{self.log(name)}"

    def log(self, name: str) -> str:
        return self.logs[name].read_text(errors="replace")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def queue_run(
    engine: Any,
    library: Path,
    spec: Mapping[str, Any],
    *,
    name: str = "refund",
    namespace: str = "support",
    version: str = "1.3.0",
    retries: int = 0,
) -> str:
    """A scenario named `name` with `spec` submitted as `version` in the local tenant and one
    exploration run of it queued (with `retries` when its worker is lost); the run's id."""
    from simreport.service import queue as q

    scenario_id = q.create_scenario(
        engine, tenant="local", namespace=namespace, name=name, owner="qa", risk_level="low"
    )
    q.submit_version(
        engine,
        tenant="local",
        scenario_id=scenario_id,
        version=version,
        spec=dict(spec),
        source=None,
        created_by="ana",
    )
    run_id, _ = q.start_run(
        engine,
        tenant="local",
        principal="ci",
        scenario_id=scenario_id,
        version=version,
        mode="surrogate",
        seed=None,
        budget=None,
        purpose="exploration",
        library=library,
        retries=retries,
    )
    return run_id


class Worker:
    """`run_worker` in a thread of this test (its runs in child processes)."""

    def __init__(self, url: str, library: Path, **options: Any) -> None:
        self.stop = threading.Event()
        self.outcomes: list[tuple[str, str]] = []
        self.errors: list[BaseException] = []
        options = {"lease_seconds": 10.0, "heartbeat_seconds": 0.3, "poll_seconds": 0.05, **options}

        from simreport.service.worker import run_worker

        def work() -> None:
            try:
                run_worker(
                    url,
                    worker_id="w-test",
                    library=library,
                    stop_event=self.stop,
                    on_run=lambda run_id, outcome: self.outcomes.append((run_id, outcome)),
                    **options,
                )
            except BaseException as exc:
                self.errors.append(exc)

        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=WAIT)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert not self.errors, self.errors

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join()
