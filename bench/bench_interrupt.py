"""How soon a stop takes effect (SPEC: SIGINT/SIGTERM stop model calls within a second).

`simreport audit` (the plan of tests/e2e/test_interrupt.py: two run processes) against the loopback
server (tests/support/llm_server.py) answering after 80 ms, stopped by Ctrl-C (SIGINT to its process
group), by SIGTERM to it alone, by a second Ctrl-C while its calls hang, and by SIGKILL; then, in
this process, a stop ending a provider's backoff and an external simulator. Prints the seconds
from the signal to the last model call the server received, to the audit's exit and to the end of
its processes, each against its goal. The tests check what a stop does, never how soon.

    python bench/bench_interrupt.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simreport.core.schema import LLMConfig
from simreport.kernel import interrupt, run_scenario
from simreport.kernel.providers import ChatRequest, Message
from simreport.kernel.providers.openai import HttpSettings, OpenAIProvider
from tests.e2e.test_interrupt import Audit, hour_long_simulator
from tests.support.llm_server import FakeLLM, Reply
from tests.support.processes import alive, descendants, wait_for

CALLS_WITHIN = 1.0
"""The SPEC's promise: no model call later than this after the signal."""
EXIT_WITHIN = 2.5
GONE_WITHIN = 2.0
"""Every process of a stopped or killed audit ended, this long after the signal at most."""


class TimedLLM(FakeLLM):
    """The loopback server, noting when the last request arrived (monotonic)."""

    last_call = 0.0

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes, Reply]:
        self.last_call = time.monotonic()
        return super().respond(body)


class Timings:
    def __init__(self) -> None:
        self.failed = 0

    def row(self, what: str, seconds: float | None, goal: float) -> None:
        if seconds is None:
            print(f"  {what:<42} {'none':>8}")
            return
        self.failed += seconds > goal
        print(f"  {what:<42} {seconds:7.2f} s  (goal ≤ {goal:g} s)")


def _stopped_audit(
    timings: Timings, name: str, stop: Callable[[subprocess.Popen[bytes], TimedLLM], float]
) -> None:
    """An audit under way (40 calls made), stopped by `stop`, which returns when it signalled."""
    print(name)
    with tempfile.TemporaryDirectory() as tmp, TimedLLM(latency=0.08, answer="hash") as server:
        audit = Audit(Path(tmp), server, patched=False)
        proc = audit.proc
        try:
            wait_for(lambda: server.calls >= 40 or proc.poll() is not None, "calls", 120)
            started = descendants(proc.pid)
            signalled = stop(proc, server)
            proc.wait(timeout=60)
            exited = time.monotonic()
            wait_for(lambda: not any(alive(pid) for pid in started), "the run processes", 60)
            gone = time.monotonic()
        finally:
            audit.kill()
        last = server.last_call - signalled
        timings.row("last model call after the signal", last if last > 0 else None, CALLS_WITHIN)
        timings.row("the audit exited", exited - signalled, EXIT_WITHIN)
        timings.row("its processes ended", gone - signalled, GONE_WITHIN)


def _ctrl_c(proc: subprocess.Popen[bytes], server: TimedLLM) -> float:
    os.killpg(proc.pid, signal.SIGINT)
    return time.monotonic()


def _sigterm(proc: subprocess.Popen[bytes], server: TimedLLM) -> float:
    os.kill(proc.pid, signal.SIGTERM)
    return time.monotonic()


def _second_ctrl_c(proc: subprocess.Popen[bytes], server: TimedLLM) -> float:
    server.hold()  # the calls hang: the first Ctrl-C cannot end the runs
    wait_for(lambda: server.held > 0, "a call to hang", 60)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)
    return time.monotonic()


def _sigkill(proc: subprocess.Popen[bytes], server: TimedLLM) -> float:
    os.kill(proc.pid, signal.SIGKILL)
    return time.monotonic()


class Ending:
    """Called when something going on in a thread has ended; notes when (monotonic)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.at = 0.0

    def __call__(self) -> None:
        self.at = time.monotonic()
        self.event.set()


def _in_process(
    timings: Timings, what: str, goal: float, start: Callable[[Ending], Callable[[], bool]]
) -> None:
    """`start` sets something going in a thread and returns whether it is under way; once it
    is, a stop is requested; the time until it ends."""
    interrupt.reset()
    ending = Ending()
    under_way = start(ending)
    wait_for(under_way, what, 60)
    signalled = time.monotonic()
    interrupt.request_stop()
    if not ending.event.wait(60):
        raise SystemExit(f"{what}: the stop did not end it")
    timings.row(what, ending.at - signalled, goal)
    interrupt.reset()


def _backoff(ending: Ending) -> Callable[[], bool]:
    """A provider backing off half an hour after a 503."""
    server = FakeLLM().start()
    server.push(Reply(status=503))
    config = LLMConfig.model_validate({"provider": "openai", "model": "t", "baseUrl": server.url})
    settings = HttpSettings(
        base_url=server.url, retries=1, backoff_seconds=3600, backoff_cap_seconds=3600
    )
    pausing = threading.Event()

    def pause(seconds: float) -> None:
        pausing.set()
        interrupt.pause(seconds)

    provider = OpenAIProvider(config, settings=settings, sleep=pause, env={})
    request = ChatRequest(
        messages=(Message("user", "Choose."),), model="t", temperature=0.0, max_tokens=8, seed=1
    )

    def call() -> None:
        try:
            provider.complete(request)
        except interrupt.Interrupted:
            ending()
        finally:
            provider.close()
            server.stop()

    threading.Thread(target=call).start()
    return pausing.is_set


def _simulator(ending: Ending) -> Callable[[], bool]:
    """An external simulator that would run an hour."""
    tmp = Path(tempfile.mkdtemp())
    scenario = hour_long_simulator(tmp)

    def run() -> None:
        run_scenario(scenario, tmp / "run", asset_root=tmp)
        ending()  # the simulator's process group is killed and reaped by then

    threading.Thread(target=run).start()
    return (tmp / "run" / "external" / "pid").exists


def main() -> None:
    timings = Timings()
    _stopped_audit(timings, "Ctrl-C", _ctrl_c)
    _stopped_audit(timings, "SIGTERM to the audit alone", _sigterm)
    _stopped_audit(timings, "a second Ctrl-C while the calls hang", _second_ctrl_c)
    _stopped_audit(timings, "SIGKILL to the audit", _sigkill)
    print("in process")
    _in_process(timings, "a stop ending a backoff of half an hour", CALLS_WITHIN, _backoff)
    _in_process(timings, "a stop ending an external simulator", EXIT_WITHIN, _simulator)
    print("PASS" if not timings.failed else "FAIL")
    if timings.failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
