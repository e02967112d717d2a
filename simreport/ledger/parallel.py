"""Recording many runs side by side, and the garbage collector held back while runs are read.

`ingest_in_workers` hands chunks of run folders, in order, to forked worker processes, each with
its own connection to the ledger, and reports what became of each run in order as chunks
finish; what a worker does with a chunk is the caller's (ingest.py's batch). `few_collections`
makes the cyclic garbage collector run rarely: parsed run files hold no reference cycles.
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sqlalchemy.engine import Engine

from ..core.errors import InputError

R = TypeVar("R")

Batch = Callable[[Engine, list[Path]], list[tuple[Path, R | Exception]]]
"""What a worker does with a chunk of run folders: what became of each, in order (a module's
function, or a partial of one, so that it pickles)."""

WORKER_RUNS = 16
"""Runs a worker process takes at a time (and writes in one transaction, at most `group`)."""


def can_fork() -> bool:
    """Worker processes are forked, so they start in milliseconds with everything imported;
    not while this process runs other threads (a fork copies none of them, and may copy a
    lock one of them holds), nor where fork is not available."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def chunks(paths: Iterable[Path], size: int) -> Iterator[list[Path]]:
    """`paths` in lists of `size` (the last one shorter), in order."""
    chunk: list[Path] = []
    for path in paths:
        chunk.append(path)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def ingest_in_workers(
    engine: Engine,
    paths: Iterable[Path],
    *,
    jobs: int,
    size: int,
    batch: Batch[R],
    report: Callable[[Sequence[tuple[Path, R | Exception]]], None],
) -> None:
    """`batch` in `jobs` forked processes, each with its own connection to the ledger of
    `engine`, on chunks of `size` runs taken in order; what became of each run is reported in
    order as chunks finish. An exception that does not pickle comes back as an InputError
    saying what it was. The caller has brought the ledger to the current schema."""
    url = engine.url.render_as_string(hide_password=False)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(url,),
    ) as pool:
        running: deque[Future[list[tuple[Path, R | Exception]]]] = deque()
        try:
            for chunk in chunks(paths, size):
                running.append(pool.submit(_in_worker, batch, chunk))
                if len(running) >= 2 * jobs:
                    report(running.popleft().result())
            while running:
                report(running.popleft().result())
        finally:
            for future in running:
                future.cancel()


_worker_engine: Engine | None = None


def _start_worker(url: str) -> None:
    global _worker_engine
    # Parsed run files hold no reference cycles: collecting while thousands of their objects
    # are alive costs a third of reading them, and finds nothing.
    gc.freeze()
    gc.set_threshold(*_BULK_THRESHOLDS)
    from .db import connect

    _worker_engine = connect(url)


def _in_worker(batch: Batch[R], paths: list[Path]) -> list[tuple[Path, R | Exception]]:
    assert _worker_engine is not None
    return [
        (path, outcome if _pickles(outcome) else InputError(f"{type(outcome).__name__}: {outcome}"))
        for path, outcome in batch(_worker_engine, paths)
    ]


def _pickles(outcome: object) -> bool:
    if not isinstance(outcome, Exception) or isinstance(outcome, InputError):
        return True
    try:
        pickle.dumps(outcome)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    return True


_BULK_THRESHOLDS = (100_000, 50, 100)


_collecting_rarely = 0
_collection_lock = threading.Lock()
_thresholds_before: tuple[int, int, int] = gc.get_threshold()


@contextmanager
def few_collections(rarely: bool = True) -> Iterator[None]:
    """While reading and recording runs, the cyclic garbage collector runs rarely: parsed run
    files hold no reference cycles, and collecting while thousands of their objects are alive
    (in a process whose heap is large, as a workflow's is, each full collection walks all of
    it) costs a third of reading them and finds nothing. Threads may nest this: the
    thresholds come back when the last one leaves."""
    global _collecting_rarely, _thresholds_before
    if not rarely:
        yield
        return
    with _collection_lock:
        if _collecting_rarely == 0:
            _thresholds_before = gc.get_threshold()
            gc.set_threshold(*_BULK_THRESHOLDS)
        _collecting_rarely += 1
    try:
        yield
    finally:
        with _collection_lock:
            _collecting_rarely -= 1
            if _collecting_rarely == 0:
                gc.set_threshold(*_thresholds_before)
