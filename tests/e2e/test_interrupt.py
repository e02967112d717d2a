"""Stopping an audit: Ctrl-C and SIGTERM stop model calls, end the runs in flight as interrupted
(cancelled) runs, write no report and exit 130; a second Ctrl-C stops at once; and no worker
process outlives its parent, however the parent ends.

Nothing here is timed. The loopback server answers the audit's calls a round at a time (every
run's step, all its calls waiting at once), and holds the next round; the run processes are
stopped (SIGSTOP) and the stop is sent; once it waits in each of them they go on and the calls
are answered, and the server must see no call after them. A stop that does not work leaves the
test waiting, and a generous deadline turns that into a failure. How soon a stop takes effect
(the SPEC's second) is bench/bench_interrupt.py's measure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simreport.core.schema import LLMConfig, RunResult, Scenario
from simreport.kernel import interrupt, run_scenario, validate_scenario
from simreport.kernel.providers import ChatRequest, Message
from simreport.kernel.providers.openai import HttpSettings, OpenAIProvider
from tests.support.llm_server import FakeLLM, Reply
from tests.support.processes import (
    HANG_GUARD,
    children,
    descendants,
    needs_proc,
    signal_pending,
    stopped,
    wait_for,
    wait_gone,
)
from tests.support.studies import scenario_text, write_study
from tests.support.workflow_copy import copy_workflow


def scenario(url: str) -> str:
    """The small study's scenario, six steps long, its model served at `url`."""
    return scenario_text(
        steps=6, seed=7, llm={"provider": "openai", "baseUrl": url, "model": "test"}
    )


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


@pytest.fixture(autouse=True)
def no_stop_left_behind() -> Iterator[None]:
    interrupt.reset()
    yield
    interrupt.reset()


# --------------------------------------------------------------------------- in one process


HOUR = 3600.0


def _provider(
    url: str, sleep: Callable[[float], None] = interrupt.pause, backoff_seconds: float = 5.0
) -> OpenAIProvider:
    config = LLMConfig.model_validate({"provider": "openai", "model": "test", "baseUrl": url})
    settings = HttpSettings(
        base_url=url,
        retries=3,
        backoff_seconds=backoff_seconds,
        backoff_cap_seconds=max(30.0, backoff_seconds),
    )
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
    pausing = threading.Event()
    paused: list[str] = []

    def pause(seconds: float) -> None:
        """The provider's own pause, noting how it ended."""
        pausing.set()
        try:
            interrupt.pause(seconds)
        except interrupt.Interrupted:
            paused.append("cut short")
            raise
        paused.append(f"slept {seconds:.0f} s")

    caught: list[BaseException] = []
    with FakeLLM() as server:
        server.push(Reply(status=503))
        provider = _provider(server.url, pause, backoff_seconds=HOUR)  # half an hour at least

        def call() -> None:
            try:
                provider.complete(_request())
            except BaseException as exc:  # checked below
                caught.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        assert pausing.wait(HANG_GUARD), "the provider never backed off"
        interrupt.request_stop()
        caller.join(HANG_GUARD)
        assert not caller.is_alive(), "the stop did not end the backoff"
        provider.close()
    assert paused == ["cut short"]
    assert [type(exc) for exc in caught] == [interrupt.Interrupted]
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

IN_FLIGHT = 2 * 4
"""The calls the audit has in flight once every run waits on the server: two run processes (the
plan's concurrency), each asking its population's four agents at once."""
LOCKSTEP_ROUNDS = 8
"""The rounds of calls answered before a stop: each run process ends a run of six steps and is
two steps into its next."""

PATCHED_CLI = """\
import sys
import simreport.harness.runner as runner
import simreport.kernel.interrupt as interrupt
from simreport.cli import main

# Only the stop the run processes hear may end their runs: the fallbacks of the main process
# (the grace before it kills them, its deadline to exit) are out of the tests' reach.
runner.STOP_GRACE_SECONDS = interrupt.EXIT_DEADLINE_SECONDS = 3600.0
sys.exit(main(sys.argv[1:]))
"""


def _pool_workers(pid: int) -> set[int]:
    """The run processes of a process's pool: the children of its fork server, or those that
    multiprocessing spawned where there is no fork server (not its resource tracker, which
    ignores stop signals)."""
    found = set()
    for child in children(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        if b"forkserver" in command:
            found |= children(child)
        elif b"spawn_main" in command:
            found.add(child)
    return found


class Audit:
    """`simreport audit` in its own process group against a counting server; `patched`: with
    the fallbacks of its main process out of reach (PATCHED_CLI)."""

    def __init__(self, tmp_path: Path, server: FakeLLM, *, patched: bool = True) -> None:
        write_study(tmp_path, scenario(server.url), PLAN)
        self.out = tmp_path / "out"
        self.server = server
        env = {
            **os.environ,
            "SIMREPORT_CACHE_DIR": str(tmp_path / "cache"),
            "SIMREPORT_LLM_BACKOFF_SECONDS": "0.05",
        }
        env.pop("SIMREPORT_CACHE_MODE", None)
        cli = ["-c", PATCHED_CLI] if patched else ["-m", "simreport.cli"]
        command = [sys.executable, *cli, "audit", "audit.yaml"]
        self.proc = subprocess.Popen(
            [*command, "--out", str(self.out)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    def running_with_workers(self, calls: int) -> set[int]:
        """Wait until the server has seen `calls` calls; the audit's run processes then."""
        wait_for(lambda: self.server.calls >= calls or self.proc.poll() is not None, "calls")
        return self.workers()

    def workers(self) -> set[int]:
        """The audit's run processes (it must be running)."""
        assert self.proc.poll() is None, self.proc.communicate()
        workers = _pool_workers(self.proc.pid)
        assert len(workers) == 2, workers
        return workers

    def wait(self) -> int:
        try:
            return self.proc.wait(timeout=HANG_GUARD)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"the audit did not exit within {HANG_GUARD:g} s") from None

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


@pytest.fixture
def held_server() -> Iterator[FakeLLM]:
    """The server, holding every call until the test answers it."""
    with FakeLLM(answer="hash") as server:
        server.hold()
        yield server


def _in_lockstep(
    server: FakeLLM, proc: subprocess.Popen[bytes], rounds: int, timeout: float = HANG_GUARD
) -> int:
    """With `server` holding every call from the start: answer the calls a round at a time, each
    round every run's next step (IN_FLIGHT calls, all waiting at once), `rounds` times; then
    every call of the audit waits again, and none is on its way (each run waits for its step).
    The calls made by then."""
    for done in range(rounds + 1):
        arrived = IN_FLIGHT * (done + 1)

        def waiting(arrived: int = arrived) -> bool:
            return (server.holds >= arrived and server.held == IN_FLIGHT) or proc.poll() is not None

        wait_for(waiting, f"round {done + 1} of the audit's calls", timeout)
        assert proc.poll() is None, f"the audit exited in round {done + 1}"
        assert server.holds == arrived, f"more than {IN_FLIGHT} calls in round {done + 1}"
        if done < rounds:
            server.answer_held()
    return server.calls


def _stop_processes(workers: set[int]) -> None:
    """SIGSTOP the run processes: a signal sent them now waits in them, to be seen."""
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: all(stopped(pid) for pid in workers), "the run processes to stop")


def _stop_heard(workers: set[int]) -> None:
    """Wait until a SIGINT waits in every (stopped) run process, then let them go on: each takes
    the stop before it can send another call."""
    wait_for(
        lambda: all(signal_pending(pid, signal.SIGINT) for pid in workers),
        "the stop to reach every run process",
    )
    for pid in workers:
        os.kill(pid, signal.SIGCONT)


def _stop_while_every_call_waits(
    audit: Audit, server: FakeLLM, send: Callable[[], None]
) -> tuple[set[int], int]:
    """`send` a stop while every call of the audit waits and its run processes are stopped; once
    they have it, answer the calls. The run processes, and the calls made before the stop."""
    calls = _in_lockstep(server, audit.proc, LOCKSTEP_ROUNDS)
    workers = audit.workers()
    _stop_processes(workers)
    send()
    _stop_heard(workers)
    server.release()
    return workers, calls


def _assert_stopped_cleanly(audit: Audit, workers: set[int]) -> None:
    """What every interrupted audit must show, checked after the audit has exited."""
    stderr = audit.proc.stderr.read().decode() if audit.proc.stderr else ""
    assert audit.proc.returncode == 130, stderr
    assert "interrupted" in stderr
    wait_gone(workers, "the workers to exit")
    assert not (audit.out / "audit.json").exists()
    assert not (audit.out / "report.html").exists()
    runs = audit.results()
    assert runs, "no run started before the signal"
    total = 3 * 10  # base and two framings, ten replications each
    assert len(runs) < total, "every run was started: the interrupt did not stop the audit"
    statuses = [doc["status"]["execution"] if doc else None for _, doc in runs]
    # A run that started either finished before the signal or ended as an interrupted run.
    assert None not in statuses, [str(run) for run, doc in runs if doc is None]
    # Each run process ended a run before the stop and had the next in flight.
    assert sorted(statuses) == ["cancelled", "cancelled", "completed", "completed"], statuses
    cancelled = [doc for _, doc in runs if doc and doc["status"]["execution"] == "cancelled"]
    for doc in cancelled:
        assert doc["failure"]["type"] == "Interrupted"
        assert doc["failure"]["stage"] == "running"


@pytest.mark.slow
@needs_proc
def test_ctrl_c_stops_model_calls_and_exits_130(tmp_path: Path, held_server: FakeLLM) -> None:
    audit = Audit(tmp_path, held_server)
    try:
        workers, calls = _stop_while_every_call_waits(
            audit, held_server, lambda: os.killpg(audit.proc.pid, signal.SIGINT)
        )
        audit.wait()
        assert held_server.calls == calls, "model calls went on after Ctrl-C"
        _assert_stopped_cleanly(audit, workers)
    finally:
        audit.kill()


@pytest.mark.slow
@needs_proc
def test_sigterm_to_the_audit_alone_stops_it_like_ctrl_c(
    tmp_path: Path, held_server: FakeLLM
) -> None:
    audit = Audit(tmp_path, held_server)
    try:
        # The run processes hear nothing from outside: the SIGINT they get is the audit's.
        workers, calls = _stop_while_every_call_waits(
            audit, held_server, lambda: os.kill(audit.proc.pid, signal.SIGTERM)
        )
        audit.wait()
        assert held_server.calls == calls, "model calls went on after SIGTERM"
        _assert_stopped_cleanly(audit, workers)
    finally:
        audit.kill()


@pytest.mark.slow
@needs_proc
def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    # No call is ever answered and the audit's own fallbacks are out of reach: only the second
    # signal can end it.
    with FakeLLM() as server:
        server.hold()
        audit = Audit(tmp_path, server)
        try:
            calls = _in_lockstep(server, audit.proc, rounds=0)
            workers = audit.workers()
            _stop_processes(workers)
            # The first to the audit alone, so that its passing the stop on shows it was taken.
            os.kill(audit.proc.pid, signal.SIGINT)
            wait_for(
                lambda: all(signal_pending(pid, signal.SIGINT) for pid in workers),
                "the audit to take the first Ctrl-C",
            )
            os.killpg(audit.proc.pid, signal.SIGINT)
            assert audit.wait() == 130
            wait_gone(workers, "the workers to exit")
            assert server.calls == calls == IN_FLIGHT  # in flight when the first signal came
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
        audit.running_with_workers(calls=20)
        started = descendants(audit.proc.pid)  # the run processes, the resource tracker
        os.kill(audit.proc.pid, signal.SIGKILL)
        audit.proc.wait(timeout=10)
        wait_gone(started, "the orphaned workers")
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
        wait_for(lambda: len(_pool_workers(proc.pid)) == 2, "the pool's workers")
        workers = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        wait_gone(workers, "the orphaned workers")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@needs_proc
def test_sigterm_to_snakemake_alone_stops_the_runs_in_flight(
    tmp_path: Path, held_server: FakeLLM
) -> None:
    """Snakemake answers SIGTERM by waiting for its running jobs; the workflow forwards the stop
    to the shared pool, so the model calls end and no worker outlives it."""
    snakemake = Path(sys.executable).parent / "snakemake"
    copy_workflow(tmp_path, {"plans": ["study/audit.yaml"]})
    write_study(tmp_path / "study", scenario(held_server.url), PLAN)
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
        calls = _in_lockstep(held_server, proc, LOCKSTEP_ROUNDS, timeout=120)
        workers = _pool_workers(proc.pid)
        assert len(workers) == 2, workers
        _stop_processes(workers)
        os.kill(proc.pid, signal.SIGTERM)  # Snakemake alone: its workers hear nothing
        _stop_heard(workers)
        held_server.release()
        proc.wait(timeout=120)
        assert held_server.calls == calls, "model calls went on after SIGTERM"
        wait_gone(workers, "the workers to exit")
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


def hour_long_simulator(folder: Path) -> Scenario:
    """A scenario of a simulator in `folder` that writes its pid to its output folder's `pid`
    and then would run an hour (its timeout too)."""
    (folder / "sim.py").write_text(
        "import os, pathlib, sys, time\n"
        "pathlib.Path(sys.argv[sys.argv.index('--out') + 1], 'pid').write_text(str(os.getpid()))\n"
        "time.sleep(3600)\n"
    )
    return validate_scenario(
        {
            "simulator": {
                "command": [sys.executable, "sim.py"],
                "metrics": ["hitRate"],
                "timeoutSeconds": HOUR,
            }
        }
    )


@needs_proc
def test_a_stop_ends_an_external_simulator_and_its_process(tmp_path: Path) -> None:
    """A simulator is stopped with its run: the run ends cancelled, not when the simulator would
    (an hour later, its timeout too), and no simulator process is left running."""
    scenario = hour_long_simulator(tmp_path)
    ended: list[RunResult] = []
    runner = threading.Thread(
        target=lambda: ended.append(run_scenario(scenario, tmp_path / "run", asset_root=tmp_path))
    )
    runner.start()
    pid_file = tmp_path / "run" / "external" / "pid"
    wait_for(lambda: pid_file.exists() and bool(pid_file.read_text()), "the simulator to start")
    interrupt.request_stop()
    runner.join(HANG_GUARD)
    assert not runner.is_alive(), "the stop did not end the run"
    (result,) = ended
    assert result.status.execution == "cancelled"
    assert result.failure is not None and result.failure.type == "Interrupted"
    wait_gone({int(pid_file.read_text())}, "the simulator to exit")
