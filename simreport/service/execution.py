"""One claimed run, on the worker's side (`Execution`): sent to the run process with its
scenario, checks, policy and asset root; its events streamed into the ledger as the run process
hands them over (kept and sent again while the ledger does not take them); what the keeper's
heartbeats and the cancel watch learn acted on — a cancellation reaches the run process as
SIGINT within WAIT_SECONDS of being heard, which its run takes as a stop request, a lost lease
kills the run process; and, once it ended, how it is to
be recorded (`ending`): finished with its run directory, or failed — crashed with why when the
run process died without a result, cancelled when stopped."""

from __future__ import annotations

import re
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .keeper import record_ending, stream_events
from .run_process import EXIT_SECONDS
from .scratch import new_run_folder
from .spool import Ending
from .worker_secrets import files_holding_secrets, say, scrub

if TYPE_CHECKING:
    from .keeper import Lease
    from .queue import Claim
    from .run_process import RunProcess
    from .worker import Worker

WAIT_SECONDS: Final = 0.05
"""How often a worker executing a run looks at its stop event."""


class Execution:
    """One claimed run: its events, its lease, its run directory."""

    def __init__(self, worker: Worker, claimed: Claim, process: RunProcess) -> None:
        self.worker = worker
        self.engine = worker.engine
        self.claim = claimed
        self.worker_id = worker.worker_id
        self.process = process
        self.work = new_run_folder()
        self.keep_work = False
        """Whether the scratch folder outlives the run here (a spool entry kept in memory)."""
        self.run_dir = self.work / "run"
        self.pending: list[dict[str, Any]] = []
        self.stream_at = 0.0
        """When to try again to stream the pending events (monotonic), after a failure."""
        self.stream_failures = 0
        self.started = False
        """Whether the run process has started this run (a stop request now is this run's)."""
        self.handed_back = False
        """Whether the run process ended this run and waits for the next."""
        self.lease: Lease | None = worker.keeper.hold(claimed.run_id, worker.worker_id)
        """The run's lease, renewed by the keeper (None once it passed to the spool)."""
        self.interrupted: str | None = None
        """Why the run was asked to stop: a cancellation ("cancel") or this worker stopping."""
        self.cancel_reason: str | None = None
        self.error: str | None = None
        """What the run process reported when it failed outside the run."""
        self.end: Ending | None = None
        """How the ended run is to be recorded, once known."""

    def start(self) -> None:
        job = (
            self.claim.scenario,
            str(self.run_dir),
            str(self._asset_root()),
            # The run records the trace id its row was given: each run of the service is a trace
            # of its own, even of the same version and seed.
            self.claim.checks.model_copy(update={"trace_id": self.claim.trace_id}).to_doc(),
            self.worker.policy,
            self.worker.hidden,
            self.worker.keys(),
        )
        self.process.conn.send(job)
        self.process.runs += 1

    def discard(self) -> None:
        self.worker.executions.discard(self)
        if self.lease is not None:
            self.worker.keeper.release(self.lease)
            self.lease = None
        if not self.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)

    def _asset_root(self) -> Path:
        """The folder the run looks for its library in: the library's parent when the library
        has the name the scenario expects, else a folder holding a link of that name to it."""
        library = self.worker.library.resolve()
        if library.name == self.claim.library_dir:
            return library.parent
        root = self.work / "root"
        if not _plain_name(self.claim.library_dir):
            return root  # no library there: the run process refuses the run
        link = root / self.claim.library_dir
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(library, target_is_directory=True)
        return root

    def follow(self) -> bool:
        """Stream the run's events until the run process hands the run back or dies; act on
        what the keeper's heartbeats and the cancel watch learn (a cancellation, a lost lease)
        and drain on the way.
        False when the lease was lost (the run process is killed). Events the ledger does not
        take are kept, and sent again every retry period of the keeper."""
        from multiprocessing.connection import wait

        import sqlalchemy as sa

        from .errors import LeaseLost, ServiceError

        worker, process, lease = self.worker, self.process.process, self.lease
        assert lease is not None
        stop_seen: float | None = None
        while True:
            wait([self.process.conn, process.sentinel], WAIT_SECONDS)
            gone = self._receive()
            ended = self.handed_back or gone or not process.is_alive()
            if ended and not self.handed_back:
                self._receive()  # what a dead run process left in the pipe
            now = time.monotonic()
            # A run handed back has its events recorded with it, in one transaction.
            if self.pending and not self.handed_back and now >= self.stream_at:
                try:
                    self._flush()
                except LeaseLost:
                    self._lose_lease()
                    return False
                # The ledger away or refusing them: kept, and sent again (or recorded with the
                # run).
                except (sa.exc.SQLAlchemyError, ServiceError) as exc:
                    if not self.stream_failures:
                        say(
                            f"events of {self.claim.run_id} not streamed yet: "
                            f"{worker.why(exc)}; kept until the ledger takes them"
                        )
                    self.stream_failures += 1
                    self.stream_at = now + worker.keeper.retry_seconds
                else:
                    self.stream_failures = 0
            if ended:
                return True
            if lease.lost:
                self._lose_lease()
                return False
            if lease.cancel and self.interrupted is None:
                self.cancel_reason = lease.cancel_reason
                self._interrupt("cancel")
            if worker.stop_event.is_set() and self.interrupted is None:
                stop_seen = now if stop_seen is None else stop_seen
                if now - stop_seen >= worker.drain_seconds:
                    self._interrupt("stop")

    def _receive(self) -> bool:
        """Take what the run process has sent; True when the pipe has ended (it died)."""
        conn = self.process.conn
        try:
            while not self.handed_back and conn.poll():
                kind, item = conn.recv()
                if kind == "events":
                    self.pending.extend(item)
                elif kind == "started":
                    self.started = True
                    if self.interrupted is not None:
                        self.process.request_stop()
                elif kind == "done":
                    self.handed_back = True
                elif kind == "error":
                    self.error = str(item)
        except (EOFError, OSError):
            return True
        return False

    def _flush(self) -> None:
        stream_events(self.engine, self.claim.run_id, self.worker_id, self.pending)

    def _lose_lease(self) -> None:
        self.process.kill()

    def _interrupt(self, why: str) -> None:
        self.interrupted = why
        # Before the run process has started this run, a stop request would be forgotten as
        # one that came late for the run before: it is sent once "started" arrives.
        if self.started:
            self.process.request_stop()

    def record(self) -> str:
        """Record the ended run in the ledger; its execution status, or "lease_lost". Raises
        DBAPIError when the ledger did not take it (`end` says how to record it later)."""
        if self.end is None:
            self.end = self.ending()
        return record_ending(
            self.engine, self.claim.run_id, self.worker_id, self.run_dir, self.pending, self.end
        )

    def ending(self) -> Ending:
        """How the ended run is to be recorded."""
        stopped = "cancelled: the worker stopped"
        if (self.run_dir / "result.json").is_file():  # written last: the run is whole
            holding = files_holding_secrets(self.run_dir)
            if holding:
                # The run process blanks credentials out of what a run writes; a file that
                # still holds one (written by a simulator, say) is never recorded.
                names = ", ".join(p.relative_to(self.run_dir).as_posix() for p in holding)
                why = f"not recorded: {names} held a credential of the worker's environment"
                return Ending("fail", "crashed", why)
            execution = _execution_in_result(self.run_dir)
            ended_by_stop = self.interrupted == "stop" and execution == "cancelled"
            return Ending("finish", execution or "completed", stopped if ended_by_stop else None)
        if self.interrupted is not None:
            why = (
                f"cancelled: {self.cancel_reason or 'requested'}"
                if self.interrupted == "cancel"
                else stopped
            )
            return Ending("fail", "cancelled", scrub(why))
        return Ending("fail", "crashed", scrub("crashed: " + self._death()))

    def _death(self) -> str:
        if self.error:
            return self.error
        if self.handed_back:
            return "the run ended without a result"
        process = self.process.process
        process.join(EXIT_SECONDS)
        code = process.exitcode
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the run process was killed by {name}"
        return f"the run process exited with code {code} without a result"


def _execution_in_result(run_dir: Path) -> str | None:
    """The execution status the run's result.json gives (None when it cannot be read)."""
    import json

    try:
        status = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))["status"]
        return str(status["execution"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _plain_name(name: str) -> bool:
    """Whether `name` is one folder's name (no separator, not `.` or `..`)."""

    from ..core.schema import RESOURCE_NAME

    return bool(re.match(RESOURCE_NAME, name)) and name not in (".", "..")
