"""Workers of the run service: claim queued runs from the ledger and execute each in a fresh
process.

`run_worker` loops: end the runs whose workers vanished (`reclaim_expired`), claim the oldest
pending run, execute it, record it. The run executes in a child process that has run nothing
before (forked from a fork server that imported the kernel once, or spawned), which hands every
event to this process as it is emitted; this process streams them into the ledger in small
batches and renews the lease every `heartbeat_seconds`. A cancellation seen at a heartbeat
reaches the child as SIGINT, which its run takes as a stop request: it ends `cancelled` at its
next step, with what it recorded so far. A lost lease kills the child and drops the run
(another has ended it). A child that dies without a result (killed, or an error outside the
run) ends the run `crashed` with why. A worker killed outright loses its lease: the child
notices it is orphaned and exits, and the next worker's `reclaim_expired` ends the run
`crashed` ("worker_lost").

`simreport worker --ledger URL --library DIR` runs one worker until SIGINT or SIGTERM, which let
the current run finish (for up to --drain-seconds, then cancel it) and record it before exiting.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext
    from multiprocessing.process import BaseProcess

    from sqlalchemy.engine import Engine

    from .queue import Claim

BATCH_EVENTS: Final = 64
"""Events streamed in one transaction at most."""
FLUSH_SECONDS: Final = 0.2
"""The longest an event waits in this process before it is streamed."""
JOIN_SECONDS: Final = 10.0
"""How long a child that has sent its last event may take to exit before it is killed."""
ERROR_BACKOFF_SECONDS: Final = 1.0
"""How long a worker waits after the ledger failed to answer."""


class StopEvent(Protocol):
    """What tells a worker to stop (a threading or multiprocessing Event)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def run_worker(
    url: str,
    *,
    worker_id: str,
    lease_seconds: float = 30.0,
    heartbeat_seconds: float = 5.0,
    poll_seconds: float = 0.2,
    library: str | Path,
    stop_event: StopEvent,
    max_runs: int | None = None,
    drain_seconds: float = 5.0,
    on_run: Callable[[str, str], None] | None = None,
) -> int:
    """Claim and execute runs of the ledger at `url` until `stop_event` is set (or `max_runs`
    runs were executed); returns how many. `library` is the asset library the runs' manifests
    were frozen from. When `stop_event` is set during a run, the run has `drain_seconds` to
    end by itself before it is cancelled; either way it is recorded. `on_run(run_id, outcome)`
    hears of each run: its execution status, or "lease_lost"."""
    import sqlalchemy as sa

    from ..ledger.db import connect
    from ..ledger.migrate import prepare_for_writing
    from .queue import claim, reclaim_expired

    if not 0 < heartbeat_seconds < lease_seconds:
        raise ValueError("heartbeat_seconds must be positive and shorter than lease_seconds")
    engine = connect(url)
    try:
        prepare_for_writing(engine)
        done = 0
        next_reclaim = 0.0
        while not stop_event.is_set() and (max_runs is None or done < max_runs):
            try:
                if time.monotonic() >= next_reclaim:
                    reclaim_expired(engine)
                    next_reclaim = time.monotonic() + heartbeat_seconds
                claimed = claim(engine, worker_id, lease_seconds=lease_seconds)
            except sa.exc.OperationalError as exc:
                # The database is away for a moment (restarting, failing over): wait for it.
                _say(f"the ledger did not answer: {type(exc).__name__}: {exc.orig}")
                stop_event.wait(ERROR_BACKOFF_SECONDS)
                continue
            if claimed is None:
                stop_event.wait(poll_seconds)
                continue
            execution = _Execution(
                engine,
                claimed,
                worker_id=worker_id,
                library=Path(library),
                lease_seconds=lease_seconds,
                heartbeat_seconds=heartbeat_seconds,
                stop_event=stop_event,
                drain_seconds=drain_seconds,
            )
            try:
                outcome = execution.run()
            except sa.exc.DBAPIError as exc:
                # Not recorded: its lease runs out and it ends `worker_lost`, as if this worker
                # had died, while the worker goes on with the next run.
                _say(f"{claimed.run_id} not recorded: {type(exc).__name__}: {exc.orig}")
                outcome = "unrecorded"
            done += 1
            if on_run is not None:
                on_run(claimed.run_id, outcome)
        return done
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- one run


class _Execution:
    """One claimed run: its child process, the events it streams, its lease."""

    def __init__(
        self,
        engine: Engine,
        claimed: Claim,
        *,
        worker_id: str,
        library: Path,
        lease_seconds: float,
        heartbeat_seconds: float,
        stop_event: StopEvent,
        drain_seconds: float,
    ) -> None:
        self.engine = engine
        self.claim = claimed
        self.worker_id = worker_id
        self.library = library
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.stop_event = stop_event
        self.drain_seconds = drain_seconds
        self.pending: list[dict[str, Any]] = []
        self.interrupted: str | None = None
        """Why the child was sent SIGINT: a cancellation ("cancel") or this worker stopping."""
        self.cancel_reason: str | None = None
        self.error: str | None = None
        """What the child reported when it failed outside the run."""

    def run(self) -> str:
        work = Path(tempfile.mkdtemp(prefix="simreport-run-"))
        context = _fresh_processes()
        events: Any = context.Queue()
        run_dir = work / "run"
        child = context.Process(
            target=_child,
            args=(
                self.claim.scenario,
                str(run_dir),
                str(self._asset_root(work)),
                self.claim.checks.to_doc(),
                events,
            ),
            name=f"simreport-{self.claim.run_id}",
            daemon=True,
        )
        try:
            child.start()
            if not self._follow(child, events):
                return "lease_lost"
            child.join(JOIN_SECONDS)
            if child.is_alive():
                child.kill()
                child.join()
            return self._record(child, run_dir)
        finally:
            if child.is_alive():
                child.kill()
                child.join()
            events.close()
            events.cancel_join_thread()
            shutil.rmtree(work, ignore_errors=True)

    def _asset_root(self, work: Path) -> Path:
        """The folder the run looks for its library in: the library's parent when the library
        has the name the scenario expects, else a folder holding a link of that name to it."""
        library = self.library.resolve()
        if library.name == self.claim.library_dir:
            return library.parent
        root = work / "root"
        link = root / self.claim.library_dir
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(library, target_is_directory=True)
        return root

    def _follow(self, child: BaseProcess, events: Any) -> bool:
        """Stream the child's events until it has sent its last one or died; heartbeat,
        cancel and drain on the way. False when the lease was lost (the child is killed)."""
        from .queue import LeaseLost

        next_beat = time.monotonic() + self.heartbeat_seconds
        last_flush = time.monotonic()
        stop_seen: float | None = None
        while True:
            try:
                kind, item = events.get(timeout=0.05)
            except queue.Empty:
                kind, item = "idle", None
            if kind == "event":
                self.pending.append(item)
            elif kind == "error":
                self.error = str(item)
            now = time.monotonic()
            ended = kind == "done" or (kind == "idle" and not child.is_alive())
            if ended and kind == "idle":
                self._drain(events)  # a dead child may have left events behind
            if self.pending and (
                ended or len(self.pending) >= BATCH_EVENTS or now - last_flush >= FLUSH_SECONDS
            ):
                try:
                    self._flush()
                except LeaseLost:
                    child.kill()
                    return False
                except Exception as exc:  # kept, and sent again with the next batch
                    _say(f"events of {self.claim.run_id} not streamed yet: {exc}")
                    if ended:
                        raise
                last_flush = now
            if ended:
                return True
            if now >= next_beat:
                if not self._beat(child):
                    return False
                next_beat = now + self.heartbeat_seconds
            if self.stop_event.is_set() and self.interrupted is None:
                stop_seen = now if stop_seen is None else stop_seen
                if now - stop_seen >= self.drain_seconds:
                    self._interrupt(child, "stop")

    def _drain(self, events: Any) -> None:
        while True:
            try:
                kind, item = events.get(timeout=0.05)
            except queue.Empty:
                return
            if kind == "event":
                self.pending.append(item)
            elif kind == "error":
                self.error = str(item)

    def _flush(self) -> None:
        from .queue import append_events

        # On a failure the batch stays, to be sent again with the next one: no gap.
        while self.pending:
            batch = self.pending[:BATCH_EVENTS]
            append_events(self.engine, self.claim.run_id, batch, worker_id=self.worker_id)
            del self.pending[: len(batch)]

    def _beat(self, child: BaseProcess) -> bool:
        from .queue import heartbeat, reclaim_expired

        try:
            beat = heartbeat(
                self.engine, self.claim.run_id, self.worker_id, lease_seconds=self.lease_seconds
            )
            reclaim_expired(self.engine)  # on the other workers' behalf
        except Exception as exc:  # the ledger may be back at the next beat, before the lease ends
            _say(f"heartbeat of {self.claim.run_id} failed: {type(exc).__name__}: {exc}")
            return True
        if beat.lease_lost:
            child.kill()
            return False
        if beat.cancel and self.interrupted is None:
            self.cancel_reason = beat.cancel_reason
            self._interrupt(child, "cancel")
        return True

    def _interrupt(self, child: BaseProcess, why: str) -> None:
        self.interrupted = why
        if child.pid is not None and child.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGINT)

    def _record(self, child: BaseProcess, run_dir: Path) -> str:
        from ..core.errors import InputError
        from .queue import LeaseLost, fail, finish, get_run

        run_id, worker = self.claim.run_id, self.worker_id
        stopped = "cancelled: the worker stopped"
        try:
            if (run_dir / "result.json").is_file():  # written last: the run is whole
                ended_by_stop = self.interrupted == "stop" and _execution(run_dir) == "cancelled"
                try:
                    finish(
                        self.engine,
                        run_id,
                        worker,
                        run_dir,
                        reason=stopped if ended_by_stop else None,
                    )
                except InputError as exc:
                    fail(self.engine, run_id, worker, f"unrecordable: {exc.one_line()}")
            elif self.interrupted is not None:
                why = (
                    f"cancelled: {self.cancel_reason or 'requested'}"
                    if self.interrupted == "cancel"
                    else stopped
                )
                fail(self.engine, run_id, worker, why, execution="cancelled")
            else:
                fail(self.engine, run_id, worker, "crashed: " + self._death(child))
        except LeaseLost:
            return "lease_lost"
        return str(get_run(self.engine, run_id, tenant=self.claim.tenant)["execution_status"])

    def _death(self, child: BaseProcess) -> str:
        if self.error:
            return self.error
        code = child.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the run process was killed by {name}"
        return f"the run process exited with code {code} without a result"


def _execution(run_dir: Path) -> str | None:
    """The execution status the run's result.json gives (None when it cannot be read)."""
    import json

    try:
        status = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))["status"]
        return str(status["execution"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


PRELOAD: Final = ["simreport.service.worker", "simreport.kernel.engine", "simreport.service.warm"]
"""What a run process needs, imported once in the fork server that run processes start from
(warm: the code fingerprints every run records)."""


def _fresh_processes() -> ForkServerContext | SpawnContext:
    """Where run processes come from. Each is a new process that has run nothing before: forked
    from a fork server (a single-threaded process started once, which imported the kernel
    already, so a run does not pay the imports), or spawned where there is no fork server."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _child(
    scenario_doc: dict[str, Any],
    run_dir: str,
    asset_root: str,
    checks_doc: dict[str, Any],
    events: Any,
) -> None:
    """The child process: run the scenario, handing each event to the parent as emitted."""
    from ..kernel import interrupt

    # SIGINT and SIGTERM become the run's stop request. The child exits when orphaned: when
    # the worker dies, and with it the fork server this child was forked from.
    interrupt.init_worker(os.getppid())
    try:
        from ..core.versions import RunChecks
        from ..kernel.engine import run_scenario, validate_scenario

        run_scenario(
            validate_scenario(scenario_doc),
            run_dir,
            condition="service",
            replication=0,
            asset_root=asset_root,
            checks=RunChecks.model_validate(checks_doc),
            on_event=lambda event: events.put(("event", event)),
        )
    except BaseException as exc:
        events.put(("error", f"{type(exc).__name__}: {exc}"))
        events.close()
        events.join_thread()
        raise SystemExit(1) from None
    events.put(("done", None))
    events.close()
    events.join_thread()


def _say(text: str) -> None:
    print(f"simreport worker: {text}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- command line


def register_cli(sub: Any) -> None:
    """Add `simreport worker` to the `simreport` parser's subcommands."""
    p = sub.add_parser(
        "worker",
        help="execute the run service's queued runs (claims them from the ledger)",
        description="Claim the run service's queued runs from the ledger and execute each in "
        "a fresh process, streaming its events into the ledger, until SIGINT or SIGTERM.",
    )
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="the ledger database: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
        "(default: $SIMREPORT_LEDGER_URL, else sqlite:///results/ledger.sqlite)",
    )
    p.add_argument(
        "--library",
        metavar="DIR",
        default="assets",
        help="the asset library the service freezes manifests from (default: assets)",
    )
    p.add_argument("--lease-seconds", type=float, default=30.0, metavar="N", help="(default 30)")
    p.add_argument("--heartbeat-seconds", type=float, default=5.0, metavar="N", help="(default 5)")
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=0.2,
        metavar="N",
        help="how often an idle worker looks for runs (default 0.2)",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=5.0,
        metavar="N",
        help="on SIGINT/SIGTERM, how long the current run may go on before it is cancelled "
        "(default 5)",
    )
    p.add_argument("--max-runs", type=int, metavar="N", help="exit after N runs")
    p.add_argument("--worker-id", metavar="ID", help="(default: host-pid-random)")
    p.set_defaults(func=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    import threading

    from ..core.errors import EXIT_OK, InputError
    from ..ledger.db import describe, ledger_url

    if not 0 < args.heartbeat_seconds < args.lease_seconds:
        raise InputError(
            "the heartbeat must come more often than the lease runs out",
            path="--heartbeat-seconds",
            expected=f"a number of seconds between 0 and --lease-seconds ({args.lease_seconds})",
        )
    url = ledger_url(args.ledger, results_dir="results")
    assert url is not None  # an explicit or default URL, never "off"
    worker_id = args.worker_id or default_worker_id()
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    _say(f"{worker_id} claims runs from {describe(url)}")
    runs = run_worker(
        url,
        worker_id=worker_id,
        lease_seconds=args.lease_seconds,
        heartbeat_seconds=args.heartbeat_seconds,
        poll_seconds=args.poll_seconds,
        library=args.library,
        stop_event=stop,
        max_runs=args.max_runs,
        drain_seconds=args.drain_seconds,
        on_run=lambda run_id, outcome: _say(f"{run_id} {outcome}"),
    )
    _say(f"{worker_id} stopped after {runs} run(s)")
    return EXIT_OK


__all__ = ["StopEvent", "default_worker_id", "register_cli", "run_worker"]
