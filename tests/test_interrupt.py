"""Stopping an audit: Ctrl-C and SIGTERM stop model calls within a second, end the runs in flight
as interrupted (cancelled) runs, write no report and exit 130; a second Ctrl-C stops at once; and
no worker process outlives its parent, however the parent ends."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from llm_server import FakeLLM, Reply
from workflow_copy import copy_workflow

from simreport.core.schema import LLMConfig
from simreport.kernel import interrupt, run_scenario, validate_scenario
from simreport.kernel.providers import ChatRequest, Message
from simreport.kernel.providers.openai import HttpSettings, OpenAIProvider

SCENARIO = """\
world: prisoners_dilemma
steps: 6
seed: 7
population:
  n: 4
  fields:
    disposition: [cooperative, competitive]
llm:
  provider: openai
  baseUrl: {url}
  model: test
params:
  framing: neutral
  memoryWindow: 2
"""

PLAN = """\
title: Interrupted audit
baseScenario: scenario.yaml
design: one_at_a_time
replications: 10
concurrency: 2
axes:
  - template: linguistic_framing
    levels: [moralised, risk]
"""

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


@pytest.fixture(autouse=True)
def no_stop_left_behind() -> Iterator[None]:
    interrupt.reset()
    yield
    interrupt.reset()


# --------------------------------------------------------------------------- in one process


def _provider(url: str, sleep: Callable[[float], None] = interrupt.pause) -> OpenAIProvider:
    config = LLMConfig.model_validate({"provider": "openai", "model": "test", "baseUrl": url})
    settings = HttpSettings(base_url=url, retries=3, backoff_seconds=5.0)
    return OpenAIProvider(config, settings=settings, sleep=sleep, env={})


def _request() -> ChatRequest:
    return ChatRequest(
        messages=(Message("user", "Choose.\n\nAnswer with exactly one of: a, b."),),
        model="test",
        temperature=0.0,
        max_tokens=8,
        seed=1,
        options=("a", "b"),
    )


def test_a_stop_request_prevents_the_next_http_attempt() -> None:
    with FakeLLM() as server:
        provider = _provider(server.url)
        interrupt.request_stop()
        with pytest.raises(interrupt.Interrupted) as caught:
            provider.complete(_request())
        provider.close()
    assert server.calls == 0
    assert caught.value.kind == "Interrupted" and caught.value.execution == "cancelled"


def test_a_stop_request_cuts_a_backoff_sleep_short() -> None:
    with FakeLLM() as server:
        server.push(Reply(status=503))
        provider = _provider(server.url)
        threading.Timer(0.2, interrupt.request_stop).start()
        started = time.monotonic()
        with pytest.raises(interrupt.Interrupted):
            provider.complete(_request())  # the retry would wait at least 2.5 s
        provider.close()
    assert time.monotonic() - started < 1.5
    assert server.calls == 1


def test_a_run_stopped_by_a_request_is_cancelled_not_crashed(tmp_path: Path) -> None:
    with FakeLLM() as server:
        scenario = validate_scenario(
            {
                "world": "prisoners_dilemma",
                "steps": 3,
                "seed": 5,
                "population": {"n": 4, "fields": {"disposition": ["cooperative"]}},
                "llm": {"provider": "openai", "baseUrl": server.url, "model": "test"},
                "params": {"framing": "neutral", "memoryWindow": 2},
            }
        )
        interrupt.request_stop()
        result = run_scenario(scenario, tmp_path / "run")
    assert server.calls == 0
    assert result.status.execution == "cancelled" and not result.succeeded
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("running", "Interrupted")
    written = json.loads((tmp_path / "run" / "result.json").read_text())
    assert written["status"]["execution"] == "cancelled"


# --------------------------------------------------------------------------- the real command


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.add(int(entry.name))
    return found


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Audit:
    """`simreport audit` in its own process group against a counting server."""

    def __init__(self, tmp_path: Path, server: FakeLLM) -> None:
        (tmp_path / "scenario.yaml").write_text(SCENARIO.format(url=server.url))
        (tmp_path / "audit.yaml").write_text(PLAN)
        self.out = tmp_path / "out"
        self.server = server
        self.exited = math.nan
        env = {
            **os.environ,
            "SIMREPORT_CACHE_DIR": str(tmp_path / "cache"),
            "SIMREPORT_LLM_BACKOFF_SECONDS": "0.05",
        }
        env.pop("SIMREPORT_CACHE_MODE", None)
        command = [sys.executable, "-m", "simreport.cli", "audit", "audit.yaml"]
        self.proc = subprocess.Popen(
            [*command, "--out", str(self.out)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def running_with_workers(self, calls: int) -> set[int]:
        """Wait until the server has seen `calls` calls; the audit's child processes then."""
        _wait_for(lambda: self.server.calls >= calls or self.proc.poll() is not None, 60, "calls")
        assert self.proc.poll() is None, self.proc.communicate()
        workers = _children(self.proc.pid)
        assert len(workers) >= 2
        return workers

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
            self.exited = time.monotonic()
            return code
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"the audit did not exit within {timeout} s") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def results(self) -> list[tuple[Path, dict[str, Any] | None]]:
        """Every run directory the audit created, with its result.json (None if it has none)."""
        runs = sorted(p.parent for p in self.out.glob("runs/*/*/scenario.json"))
        out = []
        for run in runs:
            path = run / "result.json"
            out.append((run, json.loads(path.read_text()) if path.exists() else None))
        return out


@pytest.fixture
def slow_server() -> Iterator[FakeLLM]:
    with FakeLLM(latency=0.08, answer="hash") as server:
        yield server


def _assert_stopped_cleanly(audit: Audit, workers: set[int], signalled: float) -> None:
    """What every interrupted audit must show, checked after the audit has exited."""
    read_from = time.monotonic()
    stderr = audit.proc.stderr.read().decode() if audit.proc.stderr else ""
    assert audit.proc.returncode == 130, stderr
    assert "interrupted" in stderr
    # Said on failure: when the audit exited and how long its stderr stayed open after that.
    timing = (
        f"exited {audit.exited - signalled:.2f} s after the signal; stderr closed "
        f"{time.monotonic() - read_from:.2f} s after reading began; {stderr[-600:]}"
    )
    assert time.monotonic() - signalled < 2.5, timing
    _wait_for(lambda: not any(_alive(pid) for pid in workers), 2.0, "the workers to exit")
    assert not (audit.out / "audit.json").exists()
    assert not (audit.out / "report.html").exists()
    runs = audit.results()
    assert runs, "no run started before the signal"
    total = 3 * 10  # base and two framings, ten replications each
    assert len(runs) < total, "every run was started: the interrupt did not stop the audit"
    statuses = [doc["status"]["execution"] if doc else None for _, doc in runs]
    # A run that started either finished before the signal or ended as an interrupted run.
    assert None not in statuses, [str(run) for run, doc in runs if doc is None]
    assert set(statuses) <= {"completed", "cancelled"}
    cancelled = [doc for _, doc in runs if doc and doc["status"]["execution"] == "cancelled"]
    assert cancelled
    for doc in cancelled:
        assert doc["failure"]["type"] == "Interrupted"
        assert doc["failure"]["stage"] == "running"


def _calls_after(server: FakeLLM, signalled: float, audit: Audit) -> int:
    """Calls the server received from one second after the signal until the audit exited (and
    a little longer)."""
    time.sleep(max(0.0, signalled + 1.0 - time.monotonic()))
    settled = server.calls
    audit.wait(timeout=10)
    time.sleep(0.5)
    return server.calls - settled


@pytest.mark.slow
@needs_proc
def test_ctrl_c_stops_model_calls_and_exits_130(tmp_path: Path, slow_server: FakeLLM) -> None:
    audit = Audit(tmp_path, slow_server)
    try:
        workers = audit.running_with_workers(calls=40)
        os.killpg(audit.proc.pid, signal.SIGINT)
        signalled = time.monotonic()
        assert _calls_after(slow_server, signalled, audit) == 0
        _assert_stopped_cleanly(audit, workers, signalled)
    finally:
        audit.kill()


@pytest.mark.slow
@needs_proc
def test_sigterm_to_the_audit_alone_stops_it_like_ctrl_c(
    tmp_path: Path, slow_server: FakeLLM
) -> None:
    audit = Audit(tmp_path, slow_server)
    try:
        workers = audit.running_with_workers(calls=40)
        os.kill(audit.proc.pid, signal.SIGTERM)  # the workers hear nothing from outside
        signalled = time.monotonic()
        assert _calls_after(slow_server, signalled, audit) == 0
        _assert_stopped_cleanly(audit, workers, signalled)
    finally:
        audit.kill()


@pytest.mark.slow
@needs_proc
def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    # Calls that take far longer than the grace period: only the second signal ends them early.
    with FakeLLM(latency=30.0) as server:
        audit = Audit(tmp_path, server)
        try:
            workers = audit.running_with_workers(calls=4)
            os.killpg(audit.proc.pid, signal.SIGINT)
            time.sleep(0.3)
            os.killpg(audit.proc.pid, signal.SIGINT)
            second = time.monotonic()
            assert audit.wait(timeout=10) == 130
            assert time.monotonic() - second < 2.5
            _wait_for(lambda: not any(_alive(pid) for pid in workers), 2.0, "the workers to exit")
            assert server.calls <= 8  # the calls in flight when the first signal came
            assert not (audit.out / "audit.json").exists()
            runs = audit.results()
            assert runs
            for _, doc in runs:
                assert doc is not None and doc["status"]["execution"] == "cancelled"
                assert doc["failure"]["type"] == "Interrupted"
        finally:
            audit.kill()


@pytest.mark.slow
@needs_proc
def test_workers_die_with_a_killed_audit(tmp_path: Path, slow_server: FakeLLM) -> None:
    audit = Audit(tmp_path, slow_server)
    try:
        workers = audit.running_with_workers(calls=20)
        os.kill(audit.proc.pid, signal.SIGKILL)
        audit.proc.wait(timeout=10)
        _wait_for(lambda: not any(_alive(pid) for pid in workers), 2.0, "the orphaned workers")
        time.sleep(0.3)
        settled = slow_server.calls
        time.sleep(1.0)
        assert slow_server.calls == settled
    finally:
        audit.kill()


WORKFLOW_POOL = """\
import threading, time
from simreport.workflow.pool import shared_pool

def job():
    # Like a Snakemake job thread: it starts the shared pool, then ends long before the pool.
    pool = shared_pool(2)
    for _ in range(4):
        pool.submit(time.sleep, 60)

thread = threading.Thread(target=job)
thread.start()
thread.join()
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.slow
@needs_proc
def test_workers_of_the_workflows_shared_pool_die_with_a_killed_parent(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKFLOW_POOL],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        _wait_for(lambda: len(_children(proc.pid)) >= 2, 30, "the pool's workers")
        workers = _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        _wait_for(lambda: not any(_alive(pid) for pid in workers), 2.0, "the orphaned workers")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@needs_proc
def test_sigterm_to_snakemake_alone_stops_the_runs_in_flight(
    tmp_path: Path, slow_server: FakeLLM
) -> None:
    """Snakemake answers SIGTERM by waiting for its running jobs; the workflow forwards the stop
    to the shared pool, so the model calls end within a second and no worker outlives it."""
    snakemake = Path(sys.executable).parent / "snakemake"
    copy_workflow(tmp_path, {"plans": ["study/audit.yaml"]})
    study = tmp_path / "study"
    study.mkdir()
    (study / "scenario.yaml").write_text(SCENARIO.format(url=slow_server.url))
    (study / "audit.yaml").write_text(PLAN)
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        "SIMREPORT_CACHE_DIR": str(tmp_path / "cache"),
        "SIMREPORT_LLM_BACKOFF_SECONDS": "0.05",
    }
    env.pop("SIMREPORT_CACHE_MODE", None)
    proc = subprocess.Popen(
        [str(snakemake), "--cores", "2"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        _wait_for(lambda: slow_server.calls >= 40 or proc.poll() is not None, 120, "calls")
        assert proc.poll() is None
        workers = _children(proc.pid)
        assert len(workers) >= 2
        os.kill(proc.pid, signal.SIGTERM)  # Snakemake alone: its workers hear nothing
        signalled = time.monotonic()
        time.sleep(1.0)
        settled = slow_server.calls
        proc.wait(timeout=30)
        time.sleep(0.5)
        assert slow_server.calls == settled, "model calls went on after SIGTERM"
        assert time.monotonic() - signalled < 15
        _wait_for(lambda: not any(_alive(pid) for pid in workers), 2.0, "the workers to exit")
        assert not (tmp_path / "results" / "study" / "audit.json").exists()
        # What stays in results/ is a finished run or nothing: an interrupted condition job
        # failed, and Snakemake removed its outputs, so a rerun computes those runs again.
        for path in (tmp_path / "results" / "study" / "runs").glob("*/*/result.json"):
            doc = json.loads(path.read_text())
            assert doc["status"]["execution"] == "completed", doc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


@needs_proc
def test_a_stop_ends_an_external_simulator_and_its_process(tmp_path: Path) -> None:
    """A simulator is stopped with its run: the run ends cancelled at once, and no simulator
    process is left running."""
    script = tmp_path / "sim.py"
    script.write_text(
        "import os, pathlib, sys, time\n"
        "pathlib.Path(sys.argv[sys.argv.index('--out') + 1], 'pid').write_text(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    scenario = validate_scenario(
        {"simulator": {"command": [sys.executable, "sim.py"], "metrics": ["hitRate"]}}
    )
    threading.Timer(0.5, interrupt.request_stop).start()
    started = time.monotonic()
    result = run_scenario(scenario, tmp_path / "run", asset_root=tmp_path)
    assert time.monotonic() - started < 3.0
    assert result.status.execution == "cancelled"
    assert result.failure is not None and result.failure.type == "Interrupted"
    pid = int((tmp_path / "run" / "external" / "pid").read_text())
    _wait_for(lambda: not _alive(pid), 2.0, "the simulator to exit")
