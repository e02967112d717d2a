"""Stopping on request: a process-wide stop flag that runs check before every model call, the error
a run stopped by it ends with, and the signal set-up of the processes that run audits.

The main process of a command turns its first SIGINT or SIGTERM into the flag plus a
KeyboardInterrupt (the harness then stops its pool), and its second into killing the workers.
A pool worker turns either signal into the flag only, so its runs end as interrupted runs, and
exits by itself as soon as its parent is gone, however the parent died.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

from ..core.errors import EXIT_INTERRUPTED, RunError

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

EXIT_DEADLINE_SECONDS = 10.0
"""After a stop signal, the longest the main process may take to exit (a model call that hangs
in this process must not hold it)."""
HARD_EXIT_SECONDS = 1.5
"""The same after a second stop signal."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_STOP = threading.Event()


class Interrupted(RunError):
    """A run (or a run about to start) stopped because the user interrupted the process. The run
    is cancelled, not crashed: nothing about the scenario made it fail."""

    execution = "cancelled"

    def __init__(self, message: str = "interrupted before the run finished") -> None:
        super().__init__(message, stage="running", kind="Interrupted")


def request_stop() -> None:
    """Ask every run of this process to stop before its next model call."""
    _STOP.set()


def stop_requested() -> bool:
    return _STOP.is_set()


def reset() -> None:
    """Forget an earlier stop request (a new audit in the same process starts afresh)."""
    _STOP.clear()


def check() -> None:
    """Raise Interrupted when a stop was requested."""
    if _STOP.is_set():
        raise Interrupted()


def pause(seconds: float) -> None:
    """Sleep `seconds`, or less: a stop request ends the sleep with Interrupted."""
    if _STOP.wait(max(0.0, seconds)):
        raise Interrupted()


# --------------------------------------------------------------------------- processes


def init_worker() -> None:
    """Initializer of every pool worker process: stop signals set the flag (and never raise in
    the middle of a run), and the worker exits once the process that started it is gone."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_quietly)
    parent = multiprocessing.parent_process()
    if parent is None:
        return  # not started by multiprocessing: nobody to outlive
    watchdog = threading.Thread(
        target=_exit_when_orphaned, args=(parent,), name="simreport-parent-watch", daemon=True
    )
    watchdog.start()


def _stop_quietly(signum: int, frame: FrameType | None) -> None:
    request_stop()


def _exit_when_orphaned(parent: BaseProcess) -> None:
    # The parent's sentinel (a pipe multiprocessing keeps open in the process that started this
    # one) rather than the parent pid: a fork server's child has the server as its parent, and
    # the server lives as long as any child does. Not PR_SET_PDEATHSIG either: that fires when
    # the *thread* that started the worker ends, and pools are started from short-lived threads
    # (Snakemake jobs).
    parent.join()
    for group in list(_CHILD_GROUPS):
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    os._exit(EXIT_INTERRUPTED)


_CHILD_GROUPS: set[int] = set()


@contextlib.contextmanager
def child_process_group(pgid: int) -> Iterator[None]:
    """While inside, the process group `pgid` (an external simulator started in its own session)
    is killed if this worker exits because its parent died."""
    _CHILD_GROUPS.add(pgid)
    try:
        yield
    finally:
        _CHILD_GROUPS.discard(pgid)


def stop_on_signals() -> None:
    """In the main process of a command: the first SIGINT or SIGTERM requests a stop and raises
    KeyboardInterrupt; the next kills this process's workers at once and raises again. Whatever
    still hangs then is cut short: the process exits (130) at the latest EXIT_DEADLINE_SECONDS
    after the first signal, HARD_EXIT_SECONDS after the second. Only possible in the main
    thread; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop_loudly)


def _stop_loudly(signum: int, frame: FrameType | None) -> None:
    if _STOP.is_set():
        kill_workers()
        _exit_within(HARD_EXIT_SECONDS)
    else:
        _exit_within(EXIT_DEADLINE_SECONDS)
    request_stop()
    raise KeyboardInterrupt


def _exit_within(seconds: float) -> None:
    deadline = threading.Timer(seconds, os._exit, (EXIT_INTERRUPTED,))
    deadline.daemon = True
    deadline.start()


def kill_workers() -> None:
    """Kill every worker process this process started (pool workers included)."""
    for child in multiprocessing.active_children():
        child.kill()


__all__ = [
    "Interrupted",
    "check",
    "child_process_group",
    "init_worker",
    "kill_workers",
    "pause",
    "request_stop",
    "reset",
    "stop_on_signals",
    "stop_requested",
]
