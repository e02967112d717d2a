"""Processes as /proc shows them, for tests that check who is still running: whether a process
lives, its children and all its descendants, whether a stop signal waits in it, and a wait for a
condition whose deadline guards against a hang (it measures nothing)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

PROC = Path("/proc")
HANG_GUARD = 60.0
"""How long `wait_for` waits by default: long enough for a loaded machine, short enough for a
hung test to fail."""

needs_proc = pytest.mark.skipif(not (PROC / "self" / "stat").exists(), reason="needs /proc")


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), None once gone."""
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie does not)."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP)."""
    fields = _stat(pid)
    return fields is not None and fields[0] == "T"


def children(pid: int) -> set[int]:
    found = set()
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None and int(fields[1]) == pid:
                found.add(int(entry.name))
    return found


def descendants(pid: int) -> set[int]:
    """The process's children, theirs, and so on."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children(todo.pop()) - found:
            found.add(child)
            todo.append(child)
    return found


def signal_pending(pid: int, signum: signal.Signals) -> bool:
    """Whether `signum` waits to be delivered to the process (it does while the process is
    stopped)."""
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return False
    bit = 1 << (signum - 1)
    masks = (
        line.split()[1] for line in status.splitlines() if line.startswith(("ShdPnd", "SigPnd"))
    )
    return any(int(mask, 16) & bit for mask in masks)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = HANG_GUARD) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.02)


def wait_gone(pids: Iterable[int], what: str, timeout: float = HANG_GUARD) -> None:
    """Wait until none of `pids` runs."""
    pids = set(pids)
    wait_for(lambda: not any(alive(pid) for pid in pids), what, timeout)
