"""The process pool shared by every condition job of one Snakemake process (so many small jobs do
not each pay for worker start-up), and the forwarding of a stop signal sent to Snakemake alone to
the runs in flight and the pool's workers."""

from __future__ import annotations

import os
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from types import FrameType
from typing import Any

from ..harness.runner import tell_workers_to_stop, worker_pool
from ..kernel.interrupt import request_stop

_POOL: ProcessPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def shared_pool(workers: int) -> ProcessPoolExecutor | None:
    """This process's pool of `workers` run processes, made when first asked for (None for one
    worker: the job runs them itself)."""
    global _POOL
    if workers <= 1:
        return None
    with _POOL_LOCK:
        # A worker that died breaks the pool for good; the next job gets a fresh one.
        if _POOL is not None and getattr(_POOL, "_broken", False):
            _POOL.shutdown(wait=False, cancel_futures=True)
            _POOL = None
        if _POOL is None:
            # Workers that stop on SIGINT/SIGTERM and exit when this process dies (however it
            # dies: the pool outlives the job thread that started it).
            _POOL = worker_pool(workers)
        return _POOL


def retire_pool(pool: ProcessPoolExecutor) -> None:
    """Drop a pool whose workers were told to stop: they would stop every later run too."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is pool:
            _POOL = None
    pool.shutdown(wait=False, cancel_futures=True)


def forward_stop_signals() -> None:
    """Make a SIGINT or SIGTERM sent to the Snakemake process alone also stop the runs in flight.

    Snakemake answers SIGTERM by waiting for its running jobs, and a job thread cannot install a
    handler; so, from the main thread once Snakemake has set its own handlers (the Snakefile's
    `onstart`), each stop signal first tells this process's runs and the shared pool's workers to
    stop (their runs end as interrupted runs, the jobs fail and Snakemake discards their
    outputs), then goes on to Snakemake's handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)

        def forward(sig: int, frame: FrameType | None, previous: Any = previous) -> None:
            request_stop()
            with _POOL_LOCK:
                pool = _POOL
            if pool is not None:
                tell_workers_to_stop(pool)
            if callable(previous):
                previous(sig, frame)
            elif previous == signal.SIG_DFL:
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)

        signal.signal(signum, forward)


def default_workers(cores: int | None) -> int:
    """Run processes when the config sets no `workers`: the cores Snakemake was given, at most
    the machine's."""
    available = os.cpu_count() or 1
    return max(1, min(cores or available, available))
