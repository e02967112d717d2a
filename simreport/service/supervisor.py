"""The worker processes `simreport api --workers N` runs beside its API (`WorkerPool`),
supervised by a thread of the API: a worker that exits is reaped, logged and started again
under a new worker id after a growing backoff (`restart_delay`); the pool tells `/healthz` and
`/metrics` how many are alive, their restarts and their failed ledger calls. When the API stops
the workers stop, and they never outlive it. The design: docs/service.md.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from multiprocessing.context import SpawnProcess
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Event

    from .config import ServiceSettings

log = logging.getLogger("simreport.service")

MAX_BACKOFF_SECONDS: Final = 60.0
"""The longest wait before a worker that died is started again (unless the first is longer)."""
STABLE_SECONDS: Final = 60.0
"""A worker that ran this long before it died is started again after the first backoff."""
WATCH_SECONDS: Final = 1.0
"""How often the supervisor looks at its workers when none of them wakes it by exiting."""
GRACE_SECONDS: Final = 8.0
"""How long stopping workers may take before they are killed (a run left is reclaimed)."""


def restart_delay(deaths_in_a_row: int, first: float) -> float:
    """The wait before a worker that died `deaths_in_a_row` times in a row (1: once) is started
    again: `first`, doubled for each further death, at most MAX_BACKOFF_SECONDS (or `first`)."""
    doublings = min(max(0, deaths_in_a_row - 1), 32)
    return float(min(max(MAX_BACKOFF_SECONDS, first), first * 2**doublings))


def exit_cause(code: int | None) -> str:
    """How a process ended, from its exit code (negative: the signal that killed it)."""
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


@dataclass
class _Slot:
    """One of the N workers: its current process, and what its restarts need."""

    index: int
    process: SpawnProcess | None = None
    alive: bool = False
    started_at: float = 0.0
    starts: int = 0
    deaths_in_a_row: int = 0
    restart_at: float | None = None


class WorkerPool:
    """`settings.workers` worker processes, started by `start`, supervised until `stop`."""

    def __init__(
        self, settings: ServiceSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._ctx = multiprocessing.get_context("spawn")
        self.stop_event: Event = self._ctx.Event()
        self.worker_ledger_errors: Synchronized[int] = self._ctx.Value("q", 0)
        self._slots = [_Slot(i) for i in range(settings.workers)]
        self._lock = threading.Lock()
        self._restarts = 0
        self._closing = threading.Event()
        self._grace = GRACE_SECONDS
        self._wake_read, self._wake_write = os.pipe()
        self._thread: threading.Thread | None = None
        self._id_prefix = f"{socket.gethostname()}:{os.getpid()}"

    # ----------------------------------------------------------------------- what is read

    @property
    def asked(self) -> int:
        """Workers the API was asked for."""
        return len(self._slots)

    def alive(self) -> int:
        """Workers running now (a worker counts from the moment its process is started)."""
        with self._lock:
            return sum(slot.alive for slot in self._slots)

    @property
    def restarts(self) -> int:
        """Workers started again after they died, since the API started."""
        with self._lock:
            return self._restarts

    def ledger_errors(self) -> int:
        """The workers' failed ledger calls, since the API started."""
        with self.worker_ledger_errors.get_lock():
            return int(self.worker_ledger_errors.value)

    # ----------------------------------------------------------------------- start and stop

    def start(self) -> None:
        """Start the workers, and the thread that supervises them."""
        for slot in self._slots:
            self._start(slot)
        if self._slots:
            self._thread = threading.Thread(
                target=self._supervise, name="simreport-supervisor", daemon=True
            )
            self._thread.start()

    def stop(self, *, grace_seconds: float = GRACE_SECONDS) -> None:
        """Ask the workers to stop, wait up to `grace_seconds` (a run in progress is left to be
        reclaimed), then kill what is left."""
        if self._closing.is_set():
            return
        self._grace = grace_seconds
        self._closing.set()
        os.write(self._wake_write, b"x")
        if self._thread is not None:
            self._thread.join(grace_seconds + 5.0)
        else:
            self._stop_workers()
        os.close(self._wake_read)
        os.close(self._wake_write)

    # ----------------------------------------------------------------------- the supervisor

    def _supervise(self) -> None:
        try:
            while not self._closing.is_set():
                try:
                    self._watch()
                # The supervisor's boundary: were its thread to end, dead workers would stay
                # dead; whatever failed is logged and the workers are looked at again.
                except Exception:
                    log.exception(
                        "watching the workers failed; looking again in %g s", WATCH_SECONDS
                    )
                    self._closing.wait(WATCH_SECONDS)
        finally:
            # Here, not in the thread that called stop: workers this thread started get
            # SIGTERM from the kernel when it ends.
            self._stop_workers()

    def _watch(self) -> None:
        """Wait for a worker to exit (or a restart to be due), then reap and restart."""
        with self._lock:
            running = [slot for slot in self._slots if slot.alive]
            due = [slot.restart_at for slot in self._slots if slot.restart_at is not None]
        timeout = WATCH_SECONDS
        if due:
            timeout = max(0.0, min(timeout, min(due) - self._clock()))
        sentinels = [slot.process.sentinel for slot in running if slot.process is not None]
        wait([*sentinels, self._wake_read], timeout)
        if self._closing.is_set():
            return
        for slot in running:
            # is_alive reaps an exited worker (waitpid), sentinel or not.
            if slot.process is not None and not slot.process.is_alive():
                self._died(slot)
        now = self._clock()
        for slot in self._slots:
            if slot.restart_at is not None and slot.restart_at <= now:
                self._restart(slot)

    def _died(self, slot: _Slot) -> None:
        assert slot.process is not None
        code = slot.process.exitcode
        now = self._clock()
        stable = now - slot.started_at >= STABLE_SECONDS
        with self._lock:
            slot.alive = False
            slot.deaths_in_a_row = 1 if stable else slot.deaths_in_a_row + 1
            delay = restart_delay(slot.deaths_in_a_row, self.settings.restart_backoff_seconds)
            slot.restart_at = now + delay
        log.warning(
            "worker %d (pid %s) %s; starting it again in %g s",
            slot.index,
            slot.process.pid,
            exit_cause(code),
            delay,
        )
        slot.process.close()

    def _restart(self, slot: _Slot) -> None:
        try:
            self._start(slot)
        except OSError as exc:
            with self._lock:
                slot.deaths_in_a_row += 1
                delay = restart_delay(slot.deaths_in_a_row, self.settings.restart_backoff_seconds)
                slot.restart_at = self._clock() + delay
            log.warning(
                "worker %d could not be started again (%s); trying again in %g s",
                slot.index,
                exc,
                delay,
            )
            return
        with self._lock:
            self._restarts += 1
        assert slot.process is not None
        log.warning("worker %d started again (pid %s)", slot.index, slot.process.pid)

    def _start(self, slot: _Slot) -> None:
        # A new worker id for every start: runs the dead worker held are another worker's.
        worker_id = f"{self._id_prefix}:{slot.index}"
        if slot.starts:
            worker_id += f"-r{slot.starts}"
        process = self._ctx.Process(
            target=_worker_main,
            args=(worker_id, self.settings, self.stop_event, self.worker_ledger_errors),
            name=f"simreport-worker-{slot.index}",
            daemon=False,
        )
        process.start()
        with self._lock:
            slot.process = process
            slot.alive = True
            slot.started_at = self._clock()
            slot.starts += 1
            slot.restart_at = None

    def _stop_workers(self) -> None:
        self.stop_event.set()
        deadline = self._clock() + self._grace
        running = [slot.process for slot in self._slots if slot.alive and slot.process]
        for process in running:
            process.join(max(0.0, deadline - self._clock()))
        for process in running:
            if process.is_alive():
                process.kill()
                process.join(2.0)
        with self._lock:
            for slot in self._slots:
                slot.alive = False
                slot.restart_at = None


def _worker_main(
    worker_id: str, settings: ServiceSettings, stop: Event, ledger_errors: Synchronized[int]
) -> None:
    """A worker process of `simreport api`: in its own process group, so a Ctrl-C at the
    terminal reaches the API (which stops it in order) and not the runs; and killed with it."""
    os.setsid()
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    from sqlalchemy.engine import Engine

    from .metrics import count_ledger_errors
    from .worker import run_worker

    def add_error() -> None:
        with ledger_errors.get_lock():
            ledger_errors.value += 1

    count_ledger_errors(Engine, add_error)  # every engine of this process
    run_worker(
        settings.ledger,
        worker_id=worker_id,
        lease_seconds=settings.lease_seconds,
        heartbeat_seconds=min(5.0, settings.lease_seconds / 3),
        library=settings.library_dir,
        stop_event=stop,
        policy=settings.policy,
        tokens_env=settings.tokens_env,
    )
