"""Workers of the run service: claim queued runs from the ledger and execute them, one after
another, in a run process of their own.

`run_worker` loops: claim the oldest pending run, execute it, record it. Runs execute in a run
process the worker keeps from one run to the next (forked from a fork server that imported the
kernel once, or spawned), sent each claimed run over a pipe. It starts each run with no stop
request pending and without the agent modules an earlier run imported from its asset root,
writes the run directory in memory where it can (scratch: the ledger keeps the run), and hands
this process the run's events in batches as they are emitted; this process streams them into
the ledger. As soon as a run has ended in the run process, the worker claims the next run and
sends it there, then records the ended run (`finish`, one transaction with its events not
streamed yet, read from its run directory: a run that ended whole does not hand them over)
while the next one executes: a second lease is held only while that recording lasts.

Beside it, the worker's keeper (a thread) renews the lease of every run the worker holds every
`heartbeat_seconds`, and ends the runs whose workers vanished (`reclaim_expired`, on the other
workers' behalf). A cancellation its heartbeat learns of reaches the run process as SIGINT,
which its run takes as a stop request: it ends `cancelled` at its next step, with what it
recorded so far. A lost lease kills the run process and drops the run (another has ended it).
A run process that dies without a result (killed, or an error outside the run) ends its run
`crashed` with why. Either way the next run gets a fresh run process.

A finished run is recorded once, whatever the ledger does. When the ledger does not take a run
— down, its connection lost, its disk full — the worker keeps the run (its run directory, the
events not streamed yet, how it ended) in its spool on local disk (`spool.py`), and the keeper
records it as soon as the ledger takes it, trying again with backoff, while it goes on renewing
the run's lease (every second at most while the ledger does not answer), so that nobody
reclaims the run; a reclaimer marks an expired lease first and reclaims it only when it stayed
expired for a confirmation period (`reclaim_expired`), which a worker alive renews it within.
The worker claims no run while its spool holds one. A worker that dies with runs in its spool
leaves them there: a worker started with the same spool takes them over and records them under
the dead worker's lease, while that lease stands.

A worker killed outright loses its lease: its run process notices it is orphaned and exits, and
another worker's `reclaim_expired` ends the run `crashed` ("worker_lost"), or queues it again
when it was queued with a retry (`simreport api --retry-lost-runs 1`): a worker claims it as any
pending run, and the ledger numbers the retry's events after those recorded. The scratch run
folders a killed worker leaves are removed by the next worker to start (`sweep_scratch`).

`simreport worker --ledger URL --library DIR` runs one worker until SIGINT or SIGTERM, which let
the current run finish (for up to --drain-seconds, then cancel it) and record it before exiting.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from .spool import Ending

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkServerContext, SpawnContext

    from sqlalchemy.engine import Engine

    from ..core.execution_policy import ExecutionPolicy
    from ..core.redaction import Scrubber
    from ..core.schema import Scenario
    from ..core.versions import RunChecks
    from .queue import Claim
    from .spool import Entry, Spool

SEND_SECONDS: Final = 0.2
"""The longest an event waits in the run process before it is handed to the worker, which
streams what it is handed at once (a run that ends sooner has its events recorded with it)."""
BATCH_EVENTS: Final = 500
"""Events handed over, and streamed in one transaction, at most."""
WAIT_SECONDS: Final = 0.05
"""How often a worker executing a run looks at its stop event."""
RUNS_PER_PROCESS: Final = 200
"""Runs one run process executes at most before a fresh one takes over, so that what agents'
code leaves behind in its process does not pile up."""
EXIT_SECONDS: Final = 5.0
"""How long an idle run process asked to exit may take before it is killed."""
FIRST_POLL_SECONDS: Final = 0.01
"""How soon a worker that found nothing to claim looks again; each further look waits twice
as long, up to its poll interval (runs started one after another are claimed at once, while an
idle worker looks seldom)."""
ERROR_BACKOFF_SECONDS: Final = 1.0
"""How long a worker waits after the ledger failed to answer a claim, and how often a worker
whose spool holds runs looks whether they were recorded (it claims no run before)."""


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
    poll_seconds: float = 0.05,
    library: str | Path,
    stop_event: StopEvent,
    max_runs: int | None = None,
    drain_seconds: float = 5.0,
    on_run: Callable[[str, str], None] | None = None,
    policy: str | Path | None = None,
    tokens_env: str = "SIMREPORT_API_TOKENS",
    spool: str | Path | None = None,
) -> int:
    """Claim and execute runs of the ledger at `url` until `stop_event` is set (or `max_runs`
    runs were executed); returns how many. `library` is the asset library the runs' manifests
    were frozen from. When `stop_event` is set during a run, the run has `drain_seconds` to
    end by itself before it is cancelled; either way it is recorded (runs kept in the spool
    get `drain_seconds` more to be recorded, and are left there after). `on_run(run_id,
    outcome)` hears of each run once: its execution status when recorded (for a run kept in
    the spool, once recorded from there), "lease_lost", or "unrecorded" (the ledger refused
    it). `policy`: the execution policy file (None: the offline provider only) every run is
    checked against before it executes and resolves its endpoints and simulators in.
    `tokens_env`: the variable holding the service's API tokens, which run processes never
    see. `spool`: the folder runs the ledger could not take yet are kept in (default:
    `spool.default_spool()`)."""
    import sqlalchemy as sa

    from ..core.redaction import url_secrets
    from ..ledger.db import connect, unavailability
    from ..ledger.migrate import prepare_for_writing
    from .config import load_service_policy
    from .spool import Spool, default_spool, ledger_name

    if not 0 < heartbeat_seconds < lease_seconds:
        raise ValueError("heartbeat_seconds must be positive and shorter than lease_seconds")
    execution_policy = load_service_policy(Path(policy) if policy is not None else None)
    engine = connect(url)
    global _SCRUB
    _SCRUB = worker_scrubber(execution_policy, tokens_env, engine.url.password)
    worker = _Worker(
        engine,
        worker_id=worker_id,
        library=Path(library),
        lease_seconds=lease_seconds,
        heartbeat_seconds=heartbeat_seconds,
        stop_event=stop_event,
        drain_seconds=drain_seconds,
        spool=Spool(Path(spool) if spool is not None else default_spool(), ledger_name(url)),
        secrets=url_secrets(url),
        on_run=on_run,
        policy=execution_policy.to_doc(),
        hidden=_hidden_variables(tokens_env),
    )
    keeper = worker.keeper
    try:
        prepare_for_writing(engine)
        swept = sweep_scratch()
        if swept:
            _say(f"removed {swept} run folder(s) left by workers that were killed")
        worker.start_process()  # ready before the first run is claimed
        keeper.start()  # first takes over what dead workers left in the spool
        # What is loaded by now lives as long as the worker: full collections need not walk it.
        gc.freeze()
        done = idle = 0
        running: _Execution | None = None
        while True:
            if running is None:
                if stop_event.is_set() or (max_runs is not None and done >= max_runs):
                    keeper.wait_recorded(drain_seconds)
                    return done
                if keeper.spooled():
                    # Runs kept in the spool are recorded before any other is claimed.
                    keeper.wait_recorded(ERROR_BACKOFF_SECONDS)
                    continue
                running = worker.next_run()
                if running is None:
                    wait = min(poll_seconds, FIRST_POLL_SECONDS * 2**idle)
                    stop_event.wait(ERROR_BACKOFF_SECONDS if worker.ledger_away else wait)
                    idle = min(idle + 1, 30)
                    continue
                idle = 0
            upcoming = None
            outcome: str | None = "lease_lost"
            try:
                if running.follow():
                    if not running.handed_back:
                        worker.discard_process()  # it died: the next run gets a fresh one
                    elif (
                        not stop_event.is_set()
                        and (max_runs is None or done + 1 < max_runs)
                        and not keeper.spooled()
                    ):
                        # The run process is free: the next run executes while this one is
                        # recorded.
                        upcoming = worker.next_run_or_none()
                    outcome = running.record()
            except sa.exc.DBAPIError as exc:
                if unavailability(exc) is not None:
                    # Kept on disk, its lease renewed, until the ledger takes it.
                    keeper.keep(running, exc)
                    outcome = None
                else:
                    # Refused even as crashed: its lease runs out and it ends `worker_lost`,
                    # as if this worker had died, while the worker goes on with the next run.
                    _say(f"{running.claim.run_id} not recorded: {worker.why(exc)}")
                    outcome = "unrecorded"
                if not running.handed_back:
                    worker.discard_process()
            running.discard()
            done += 1
            if on_run is not None and outcome is not None:
                on_run(running.claim.run_id, outcome)
            running = upcoming
    finally:
        worker.close()
        engine.dispose()


# --------------------------------------------------------------------------- the worker


class _Worker:
    """What a worker keeps from one run to the next: its ledger, its run process, the keeper of
    its leases and spool."""

    def __init__(
        self,
        engine: Engine,
        *,
        worker_id: str,
        library: Path,
        lease_seconds: float,
        heartbeat_seconds: float,
        stop_event: StopEvent,
        drain_seconds: float,
        spool: Spool,
        secrets: tuple[str, ...],
        on_run: Callable[[str, str], None] | None,
        policy: dict[str, Any] | None = None,
        hidden: tuple[str, ...] = (),
    ) -> None:
        self.engine = engine
        self.policy = policy if policy is not None else {}
        """The execution policy's document, sent with every run to its run process."""
        self.hidden = hidden
        """The environment variables run processes go without."""
        self.worker_id = worker_id
        self.library = library
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.stop_event = stop_event
        self.drain_seconds = drain_seconds
        self.secrets = secrets
        self.process: _RunProcess | None = None
        self.ledger_away = False
        """Whether the ledger failed to answer the last claim."""
        self.claimed_last = False
        """Whether the last claim found a run (the next one need not look first)."""
        self.executions: set[_Execution] = set()
        """The runs claimed and not yet recorded."""
        self.keeper = _Keeper(self, spool, on_run)

    def why(self, exc: BaseException) -> str:
        """What the ledger said, on one line, without the credentials of its URL."""
        from ..core.redaction import redact_secrets

        orig = getattr(exc, "orig", None)
        lines = str(orig if orig is not None else exc).strip().splitlines()
        said = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
        return redact_secrets(said, self.secrets)

    def next_run(self) -> _Execution | None:
        """The oldest pending run claimed and sent to the run process (None when nothing is
        pending, or the ledger did not answer)."""
        import sqlalchemy as sa

        from ..ledger.db import unavailability
        from .queue import claim

        try:
            claimed = claim(
                self.engine,
                self.worker_id,
                lease_seconds=self.lease_seconds,
                look_first=not self.claimed_last,
            )
        except sa.exc.DBAPIError as exc:
            if unavailability(exc) is None:
                raise
            # The database is away for a moment (restarting, failing over, its disk full):
            # wait for it.
            _say(f"no run claimed: {_cause(unavailability(exc))} ({self.why(exc)})")
            self.ledger_away = True
            return None
        self.ledger_away = False
        self.claimed_last = claimed is not None
        if claimed is None:
            return None
        if self.process is not None and self.process.runs >= RUNS_PER_PROCESS:
            self.process.close()
            self.process = None
        for attempt in (1, 2):
            process = self.start_process()
            execution = _Execution(self, claimed, process)
            self.executions.add(execution)
            try:
                execution.start()
                return execution
            except OSError:  # the idle run process died: a fresh one executes the run
                execution.discard()
                self.discard_process()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def next_run_or_none(self) -> _Execution | None:
        """`next_run`, None when the ledger refused the claim (the loop claims again)."""
        import sqlalchemy as sa

        try:
            return self.next_run()
        except sa.exc.DBAPIError as exc:
            _say(f"no run claimed: {self.why(exc)}")
            return None

    def start_process(self) -> _RunProcess:
        """The run process, started afresh when there is none alive."""
        if self.process is None or not self.process.alive():
            self.discard_process()
            self.process = _RunProcess(f"simreport-run-{self.worker_id}")
        return self.process

    def discard_process(self) -> None:
        """Kill the run process (a fresh one executes the next run)."""
        if self.process is not None:
            self.process.kill()
            self.process = None

    def close(self) -> None:
        """Stop the keeper (runs left in the spool stay there for a worker to take over) and
        the run process. Runs still claimed (left by an error) are dropped, to be reclaimed
        when their leases run out."""
        self.keeper.close()
        for execution in list(self.executions):
            execution.discard()
            self.discard_process()
        if self.process is not None:
            self.process.close()
            self.process = None


class _RunProcess:
    """A run process and the pipe to it: it executes the runs it is sent, one after another."""

    def __init__(self, name: str) -> None:
        context = _fresh_processes()
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_run_process, args=(theirs,), name=name, daemon=True)
        self.runs = 0
        """Runs sent to it."""
        try:
            self.process.start()
        finally:
            theirs.close()  # so that the pipe ends when the run process does

    def alive(self) -> bool:
        return self.process.is_alive()

    def request_stop(self) -> None:
        if self.process.pid is not None and self.process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGINT)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()

    def close(self) -> None:
        """Ask the idle run process to exit; kill it if it does not."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(EXIT_SECONDS)
        self.kill()


# --------------------------------------------------------------------------- leases and spool


RETRY_SECONDS: Final = 1.0
"""How often, at most, a worker whose ledger does not answer tries again to renew its leases
(a quarter of its lease, when that is shorter): once the ledger answers, its leases are renewed
well within the confirmation period a reclaimer waits (half a lease, queue.reclaim_expired)."""
FIRST_RECORD_RETRY_SECONDS: Final = 0.5
LONGEST_RECORD_RETRY_SECONDS: Final = 10.0
"""How long a run kept in the spool waits before it is recorded again: the first wait, doubled
after each failure up to the longest (it is tried at once when the ledger answers again)."""


class _Lease:
    """A run's lease the worker holds (under `owner`, its own worker id or that of the dead
    worker whose spool entry it took over), as its keeper last renewed it."""

    def __init__(self, run_id: str, owner: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self.lost = False
        """The ledger says another holds or ended the run."""
        self.cancel = False
        self.cancel_reason: str | None = None


class _Kept:
    """A run in the spool, with its lease and when it is to be recorded next."""

    def __init__(self, entry: Entry, lease: _Lease, *, tries: int, next_try: float) -> None:
        self.entry = entry
        self.lease = lease
        self.tries = tries
        self.next_try = next_try


class _Keeper:
    """Keeps a worker's word while its ledger comes and goes, in a thread of its own. It renews
    the lease of every run the worker holds — the run executing, the run being recorded, the
    runs in the spool — every heartbeat, and every `retry_seconds` while the ledger does not
    answer, so that nobody reclaims them; it records the runs kept in the spool, trying again
    with backoff until the ledger takes them (at once when the ledger answers again); it
    reclaims expired leases on the other workers' behalf; and it takes over the spool entries
    of workers that died (`Spool.adopt`), at its start and every half lease.

    `counts` counts what happened, by name: spooled, recorded_from_spool, dropped_from_spool
    (the lease was lost or the ledger refused the run), record_retries, adopted, outages (the
    ledger stopped answering the keeper's renewals), renewal_failures."""

    def __init__(
        self, worker: _Worker, spool: Spool, on_run: Callable[[str, str], None] | None
    ) -> None:
        from collections import Counter

        self.worker = worker
        self.engine = worker.engine
        self.spool = spool
        self.on_run = on_run
        self.retry_seconds = min(worker.heartbeat_seconds, worker.lease_seconds / 4, RETRY_SECONDS)
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        """Notified when a run leaves the spool."""
        self.leases: list[_Lease] = []
        self.kept: list[_Kept] = []
        self.wake = threading.Event()
        self.closing = False
        self.away_since: float | None = None
        """When the ledger stopped answering the renewals (monotonic), while it does not."""
        self.unreadable: set[str] = set()
        self.counts: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._loop, name="simreport-keeper", daemon=True)

    def start(self) -> None:
        self._adopt()
        self.thread.start()

    def hold(self, run_id: str, owner: str) -> _Lease:
        """Renew this lease from now on."""
        lease = _Lease(run_id, owner)
        with self.lock:
            self.leases.append(lease)
        return lease

    def release(self, lease: _Lease) -> None:
        with self.lock:
            if lease in self.leases:
                self.leases.remove(lease)

    def spooled(self) -> bool:
        with self.lock:
            return bool(self.kept)

    def wait_recorded(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the spool to empty; whether it did."""
        with self.changed:
            return self.changed.wait_for(lambda: not self.kept, timeout)

    def keep(self, execution: _Execution, exc: BaseException) -> None:
        """Keep the ended run `execution` in the spool: the ledger did not take it (`exc`).
        Its lease passes to the spool entry."""
        from ..ledger.db import unavailability

        claimed = execution.claim
        assert execution.lease is not None
        if execution.end is None:
            execution.end = execution.ending()
        entry = self.spool.keep(
            run_id=claimed.run_id,
            attempt=claimed.attempts,
            owner=execution.worker_id,
            ending=execution.end,
            events=_scrubbed(execution.pending),
            work=execution.work,
        )
        if not entry.on_disk:
            execution.keep_work = True  # the entry is the run's scratch folder
        kept = _Kept(
            entry,
            execution.lease,
            tries=1,
            next_try=time.monotonic() + FIRST_RECORD_RETRY_SECONDS,
        )
        execution.lease = None
        with self.lock:
            self.kept.append(kept)
            self.counts["spooled"] += 1
        where = "in the spool" if entry.on_disk else "in memory (the spool could not be written)"
        _say(
            f"{claimed.run_id} kept {where}: {_cause(unavailability(exc))} "
            f"({self.worker.why(exc)}); retrying in {FIRST_RECORD_RETRY_SECONDS:g} s"
        )
        self.wake.set()

    def close(self) -> None:
        """Stop; leave the runs still in the spool to a worker that takes them over."""
        with self.lock:
            self.closing = True
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2 * EXIT_SECONDS)
        with self.lock:
            left, self.kept = self.kept, []
            self.leases.clear()
        for kept in left:
            if kept.entry.on_disk:
                self.spool.release(kept.entry)
            else:
                shutil.rmtree(kept.entry.folder, ignore_errors=True)
        if left:
            stays = sum(kept.entry.on_disk for kept in left)
            _say(
                f"{len(left)} run(s) not recorded yet: {stays} left in the spool "
                f"{self.spool.folder}, which a worker started on this host with this spool "
                "records while their leases stand"
            )

    # ----------------------------------------------------------------- the keeper's thread

    def _loop(self) -> None:
        worker = self.worker
        now = time.monotonic()
        next_beat = now  # reclaims at once, as a worker that starts does
        next_adopt = now + worker.lease_seconds / 2
        while True:
            with self.lock:
                due = min([next_beat, *(kept.next_try for kept in self.kept)])
            self.wake.wait(max(0.0, due - time.monotonic()))
            self.wake.clear()
            if self.closing:
                return
            try:
                now = time.monotonic()
                if now >= next_beat:
                    answered = self._renew()
                    if answered:
                        self._reclaim()
                    wait = worker.heartbeat_seconds if answered else self.retry_seconds
                    next_beat = now + wait
                if now >= next_adopt:
                    self._adopt()
                    next_adopt = now + worker.lease_seconds / 2
                self._record_due()
            except Exception as exc:  # the keeper must go on: all is tried again shortly
                _say(f"keeping leases and spool failed: {worker.why(exc)}")
                next_beat = time.monotonic() + self.retry_seconds
                self.wake.wait(self.retry_seconds)

    def _renew(self) -> bool:
        """Renew every lease held; False when the ledger did not take a renewal."""
        from .queue import heartbeat

        with self.lock:
            leases = [lease for lease in self.leases if not lease.lost]
        for lease in leases:
            try:
                beat = heartbeat(
                    self.engine,
                    lease.run_id,
                    lease.owner,
                    lease_seconds=self.worker.lease_seconds,
                )
            except Exception as exc:  # the ledger may answer at the next try
                self._away(exc, len(leases))
                return False
            if beat.lease_lost:
                lease.lost = True
            elif beat.cancel:
                lease.cancel_reason = beat.cancel_reason
                lease.cancel = True
        self._back(len(leases))
        return True

    def _away(self, exc: BaseException, leases: int) -> None:
        from ..ledger.db import unavailability

        self.counts["renewal_failures"] += 1
        if self.away_since is not None:
            return
        self.away_since = time.monotonic()
        self.counts["outages"] += 1
        _say(
            f"{leases} lease(s) not renewed: {_cause(unavailability(exc))} "
            f"({self.worker.why(exc)}); trying again every {self.retry_seconds:g} s"
        )

    def _back(self, leases: int) -> None:
        if self.away_since is None:
            return
        away = time.monotonic() - self.away_since
        self.away_since = None
        _say(f"the ledger takes writes again after {away:.1f} s: {leases} lease(s) renewed")
        with self.lock:
            for kept in self.kept:
                kept.next_try = 0.0  # try at once

    def _reclaim(self) -> None:
        from .queue import reclaim_expired

        # A ledger that does not answer now is tried again at the next heartbeat.
        with contextlib.suppress(Exception):
            reclaim_expired(self.engine)

    def _adopt(self) -> None:
        entries, unreadable = self.spool.adopt()
        for line in unreadable:
            if line not in self.unreadable:
                self.unreadable.add(line)
                _say(f"an entry of the spool cannot be read, left where it is: {line}")
        for entry in entries:
            lease = self.hold(entry.run_id, entry.owner)
            with self.lock:
                self.kept.append(_Kept(entry, lease, tries=0, next_try=0.0))
                self.counts["adopted"] += 1
            _say(
                f"{entry.run_id} found in the spool, left by worker {entry.owner}: recording it "
                "under that worker's lease"
            )

    def _record_due(self) -> None:
        now = time.monotonic()
        with self.lock:
            due = [kept for kept in self.kept if kept.next_try <= now]
        for kept in due:
            if self.closing:
                return
            self._record(kept)

    def _record(self, kept: _Kept) -> None:
        from ..ledger.db import unavailability

        entry = kept.entry
        try:
            outcome = _record_ending(
                self.engine, entry.run_id, entry.owner, entry.run_dir, entry.events, entry.ending
            )
        except Exception as exc:
            cause = unavailability(exc)
            if cause is None:
                _say(f"{entry.run_id} dropped from the spool: not recorded: {self.worker.why(exc)}")
                self._forget(kept, "unrecorded")
                return
            wait = min(LONGEST_RECORD_RETRY_SECONDS, FIRST_RECORD_RETRY_SECONDS * 2**kept.tries)
            kept.tries += 1
            kept.next_try = time.monotonic() + wait
            self.counts["record_retries"] += 1
            _say(
                f"{entry.run_id} still in the spool: {_cause(cause)} ({self.worker.why(exc)}); "
                f"retrying in {wait:g} s"
            )
            return
        if outcome == "lease_lost":
            _say(
                f"{entry.run_id} dropped from the spool: its lease is lost (the ledger ended "
                "the run meanwhile)"
            )
        else:
            self.counts["recorded_from_spool"] += 1
            tries = kept.tries + 1
            _say(
                f"{entry.run_id} recorded from the spool after {tries} "
                f"{'try' if tries == 1 else 'tries'}: {outcome}"
            )
        self._forget(kept, outcome)

    def _forget(self, kept: _Kept, outcome: str) -> None:
        if outcome in ("lease_lost", "unrecorded"):
            self.counts["dropped_from_spool"] += 1
        self.spool.remove(kept.entry)
        self.release(kept.lease)
        with self.changed:
            if kept in self.kept:
                self.kept.remove(kept)
            self.changed.notify_all()
        if self.on_run is not None:
            self.on_run(kept.entry.run_id, outcome)


def _cause(cause: str | None) -> str:
    from ..ledger.db import DISK_FULL

    return "the ledger's disk is full" if cause == DISK_FULL else "the ledger is unavailable"


def _record_ending(
    engine: Engine,
    run_id: str,
    owner: str,
    run_dir: Path,
    events: list[dict[str, Any]],
    ending: Ending,
) -> str:
    """Record how the run ended, under the lease of `owner`; its execution status, or
    "lease_lost". A run that failed first streams `events`, the events not streamed yet (taken
    off the list as they are). A run whose directory the ledger refuses ends crashed,
    "unrecordable: …". May be called again after it raised: what an earlier try recorded is
    recognised (`again`). Raises DBAPIError when the ledger did not answer, or refused even
    the crash."""
    import sqlalchemy as sa

    from ..core.errors import InputError
    from ..ledger.db import unavailability
    from .queue import LeaseLost, fail, finish

    try:
        if ending.kind == "finish":
            try:
                return finish(engine, run_id, owner, run_dir, reason=ending.reason, again=True)
            except InputError as exc:
                ending = Ending("fail", "crashed", _scrub(f"unrecordable: {exc.one_line()}"))
            except sa.exc.DBAPIError as exc:
                if unavailability(exc) is not None:
                    raise
                refusal = str(exc.orig).strip().splitlines()[:1] or [type(exc).__name__]
                why = f"unrecordable: the ledger refused it: {refusal[0]}"
                ending = Ending("fail", "crashed", _scrub(why))
        _stream(engine, run_id, owner, events)
        fail(
            engine,
            run_id,
            owner,
            ending.reason or "crashed",
            execution=ending.execution,
            again=True,
        )
        return ending.execution
    except LeaseLost:
        return "lease_lost"


def _stream(engine: Engine, run_id: str, owner: str, events: list[dict[str, Any]]) -> None:
    """Record `events` of the running run, BATCH_EVENTS a transaction, taking each batch off
    the list once recorded (on a failure the rest stays, to be sent again: no gap)."""
    from .queue import append_events

    while events:
        batch = _scrubbed(events[:BATCH_EVENTS])
        append_events(engine, run_id, batch, worker_id=owner)
        del events[: len(batch)]


# --------------------------------------------------------------------------- one run


class _Execution:
    """One claimed run: its events, its lease, its run directory."""

    def __init__(self, worker: _Worker, claimed: Claim, process: _RunProcess) -> None:
        self.worker = worker
        self.engine = worker.engine
        self.claim = claimed
        self.worker_id = worker.worker_id
        self.process = process
        self.work = Path(tempfile.mkdtemp(prefix=_scratch_prefix(), dir=_scratch()))
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
        self.lease: _Lease | None = worker.keeper.hold(claimed.run_id, worker.worker_id)
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
            self.claim.checks.to_doc(),
            self.worker.policy,
            self.worker.hidden,
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
        what the keeper's heartbeats learn (a cancellation, a lost lease) and drain on the way.
        False when the lease was lost (the run process is killed). Events the ledger does not
        take are kept, and sent again every retry period of the keeper."""
        from multiprocessing.connection import wait

        from .queue import LeaseLost

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
                except Exception as exc:  # kept, and sent again (or recorded with the run)
                    if not self.stream_failures:
                        _say(
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
        _stream(self.engine, self.claim.run_id, self.worker_id, self.pending)

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
        return _record_ending(
            self.engine, self.claim.run_id, self.worker_id, self.run_dir, self.pending, self.end
        )

    def ending(self) -> Ending:
        """How the ended run is to be recorded."""
        stopped = "cancelled: the worker stopped"
        if (self.run_dir / "result.json").is_file():  # written last: the run is whole
            holding = _SCRUB.files_holding(self.run_dir) if _SCRUB else []
            if holding:
                # The run process blanks credentials out of what a run writes; a file that
                # still holds one (written by a simulator, say) is never recorded.
                names = ", ".join(p.relative_to(self.run_dir).as_posix() for p in holding)
                why = f"not recorded: {names} held a credential of the worker's environment"
                return Ending("fail", "crashed", why)
            execution = _execution(self.run_dir)
            ended_by_stop = self.interrupted == "stop" and execution == "cancelled"
            return Ending("finish", execution or "completed", stopped if ended_by_stop else None)
        if self.interrupted is not None:
            why = (
                f"cancelled: {self.cancel_reason or 'requested'}"
                if self.interrupted == "cancel"
                else stopped
            )
            return Ending("fail", "cancelled", _scrub(why))
        return Ending("fail", "crashed", _scrub("crashed: " + self._death()))

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


SCRATCH_IN_MEMORY: Final = Path("/dev/shm")
"""Where run directories are written when it is there with room: a run directory is scratch
(the ledger holds the run once recorded, and it is deleted then), so it need not reach a disk,
and the run's atomic writes need not wait for one."""
SCRATCH_ROOM: Final = 1 << 30
"""The free space (bytes) the in-memory folder must have to be used."""


def _scratch() -> str | None:
    """The folder run directories are made in: in memory where possible, else the temporary
    files' folder."""
    try:
        found = os.statvfs(SCRATCH_IN_MEMORY)
    except OSError:
        return None
    roomy = found.f_bavail * found.f_frsize >= SCRATCH_ROOM
    return str(SCRATCH_IN_MEMORY) if roomy and os.access(SCRATCH_IN_MEMORY, os.W_OK) else None


SCRATCH_PREFIX: Final = "simreport-run-"


def _scratch_prefix() -> str:
    """Run directories carry their worker's process id, so that one killed before it could
    remove them is found and removed by the next worker (`sweep_scratch`)."""
    return f"{SCRATCH_PREFIX}{os.getpid()}-"


def sweep_scratch() -> int:
    """Remove the run directories that workers no longer running left behind (killed outright:
    they could not clean up), in both places run directories are made. Returns how many."""
    import re

    removed = 0
    for folder in {_scratch(), tempfile.gettempdir()}:
        if folder is None:
            continue
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                owner = re.fullmatch(re.escape(SCRATCH_PREFIX) + r"(\d+)-\w+", entry.name)
                if owner is None or not entry.is_dir(follow_symlinks=False):
                    continue
                if _alive(int(owner.group(1))):
                    continue
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True


def _execution(run_dir: Path) -> str | None:
    """The execution status the run's result.json gives (None when it cannot be read)."""
    import json

    try:
        status = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))["status"]
        return str(status["execution"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- the run process


PRELOAD: Final = [
    "simreport.cli",
    "simreport.service.worker",
    "simreport.kernel.engine",
    "simreport.service.warm",
]
"""What a run process needs, imported once in the fork server that run processes start from
(warm: the code fingerprints every run records). `simreport.cli` is there because each run
process imports the command's main module again (multiprocessing prepares a child so): with
its imports loaded already, that costs milliseconds instead of a third of a second."""


def _fresh_processes() -> ForkServerContext | SpawnContext:
    """Where run processes come from. Each starts as a process that has run nothing before:
    forked from a fork server (a single-threaded process started once, which imported the
    kernel already, so a fresh run process does not pay the imports), or spawned where there
    is no fork server."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _run_process(conn: Connection) -> None:
    """A run process: executes the runs it is sent — (scenario document, run directory, asset
    root, checks document) — one after another until its worker sends None or goes. For each
    it answers ("started", None), its events in batches ("events", [...]) and ("done", None);
    an error outside the run is answered ("error", why) and ends the process."""
    from ..kernel import interrupt

    # SIGINT and SIGTERM become the run's stop request. The process exits when orphaned: when
    # the worker dies, and with it the fork server this process was forked from.
    interrupt.init_worker(os.getppid())
    from ..core.execution_policy import ExecutionPolicy
    from ..core.redaction import environment_secrets
    from ..core.versions import RunChecks
    from ..kernel.engine import run_scenario, validate_scenario

    sender = _EventSender(conn)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the worker is gone
            return
        if job is None:
            return
        scenario_doc, run_dir, asset_root, checks_doc, policy_doc, hidden = job
        for name in hidden:  # what runs never need: the service's own credentials
            os.environ.pop(name, None)
        # A stop request that came after the last run had ended was that run's, not this one's.
        interrupt.reset()
        loaded = set(sys.modules)
        try:
            sender.send(("started", None))
            scenario = validate_scenario(scenario_doc)
            policy = ExecutionPolicy.model_validate(policy_doc)
            checks = RunChecks.model_validate(checks_doc)
            _refuse_disallowed(scenario, policy, Path(asset_root), checks)
            secrets = environment_secrets(os.environ, policy.key_variables())
            run_scenario(
                scenario,
                run_dir,
                condition="service",
                replication=0,
                asset_root=asset_root,
                checks=checks,
                on_event=sender.add,
                resources=policy,
                secrets=secrets,
            )
            _forget_imports(loaded, Path(asset_root).resolve())
            # The events not handed over yet are in the run directory the worker records.
            sender.send(("done", None), drop_events=(Path(run_dir) / "result.json").is_file())
        except BaseException as exc:
            with contextlib.suppress(OSError):
                sender.send(("error", f"{type(exc).__name__}: {exc}"))
            raise SystemExit(1) from None


class PolicyRefusal(Exception):
    """A run its worker's execution policy does not allow (queued before the policy changed,
    or by another service): it never executes."""


def _refuse_disallowed(
    scenario: Scenario, policy: ExecutionPolicy, asset_root: Path, checks: RunChecks
) -> None:
    """PolicyRefusal naming the first thing the scenario carries that `policy` does not allow
    (as the service checks it when the run is queued): the worker decides what it executes."""
    from ..core.execution_policy import spec_issues
    from ..kernel.testbed.assets import AgentAsset, AssetError, AssetLibrary

    sut = scenario.sut
    # The agent's own entry may be repeated by sut.entry; it is looked up once the rest passed
    # (the asset library's folder name among it).
    issues = spec_issues(scenario, policy, agent_entry=sut.entry if sut is not None else None)
    if not issues and sut is not None and sut.entry is not None:
        folder = scenario.provenance.asset_library if scenario.provenance else "assets"
        library = AssetLibrary(asset_root / folder, pins=checks.pins or None)
        try:
            entry = library.resolve(sut.agent, "agent", "sut.agent").typed(AgentAsset).entry
        except (AssetError, TypeError):
            entry = None
        issues = spec_issues(scenario, policy, agent_entry=entry)
    if issues:
        first = issues[0]
        raise PolicyRefusal(
            f"not allowed by the execution policy: spec.{first.path}: {first.message}"
        )


def _forget_imports(loaded: set[str], asset_root: Path) -> None:
    """Forget the modules a run imported from its asset root (its agents' code), so that the
    next run imports them afresh, as a process of its own would."""
    for name in set(sys.modules) - loaded:
        file = getattr(sys.modules[name], "__file__", None)
        if file and Path(file).resolve().is_relative_to(asset_root):
            del sys.modules[name]
    for key in [k for k in sys.path_importer_cache if Path(k).is_relative_to(asset_root)]:
        del sys.path_importer_cache[key]


class _EventSender:
    """Hands a run's events to the worker in batches: every SEND_SECONDS, and whenever
    BATCH_EVENTS are waiting. Never raises to the run: once the worker is gone, events are
    dropped (the process exits as orphaned)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.pending: list[dict[str, Any]] = []
        self.gone = False
        threading.Thread(target=self._tick, name="simreport-events", daemon=True).start()

    def add(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.pending.append(event)
            if len(self.pending) >= BATCH_EVENTS:
                self._hand_over()

    def send(self, message: tuple[str, Any], *, drop_events: bool = False) -> None:
        """Send `message` after the events still waiting, or without them (`drop_events`);
        OSError when the worker is gone."""
        with self.lock:
            if drop_events:
                self.pending = []
            self._hand_over()
            self.conn.send(message)

    def _hand_over(self) -> None:
        if self.pending and not self.gone:
            try:
                self.conn.send(("events", self.pending))
            except OSError:
                self.gone = True
        self.pending = []

    def _tick(self) -> None:
        while not self.gone:
            time.sleep(SEND_SECONDS)
            with self.lock:
                self._hand_over()


def _say(text: str) -> None:
    print(f"simreport worker: {_scrub(text)}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- secrets


_SCRUB: Scrubber | None = None
"""The secrets this worker knows of, blanked out of everything it records or logs."""


def worker_scrubber(
    policy: ExecutionPolicy, tokens_env: str, ledger_password: str | None
) -> Scrubber:
    """What a worker blanks out of the runs it records and the lines it logs: the values of its
    endpoints' key variables, of the variable holding the service's tokens and of every
    variable named like a credential, and the ledger's password. A run whose error quotes a key
    (an HTTP library refusing a header) never carries it into the ledger."""
    from ..core.redaction import Scrubber, environment_secrets

    names = [*policy.key_variables(), tokens_env]
    return Scrubber([*environment_secrets(os.environ, names), ledger_password])


def _scrub(text: str) -> str:
    return _SCRUB.text(text) if _SCRUB else text


def _scrubbed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _SCRUB.document(events) if _SCRUB else events


def _hidden_variables(tokens_env: str) -> tuple[str, ...]:
    """The environment variables a run process goes without: the service's API tokens, its
    ledger's URL and PostgreSQL's password settings."""
    return (tokens_env, "SIMREPORT_LEDGER_URL", "PGPASSWORD", "PGPASSFILE")


def _plain_name(name: str) -> bool:
    """Whether `name` is one folder's name (no separator, not `.` or `..`)."""
    import re

    from ..core.schema import RESOURCE_NAME

    return bool(re.match(RESOURCE_NAME, name)) and name not in (".", "..")


# --------------------------------------------------------------------------- command line


def register_cli(sub: Any) -> None:
    """Add `simreport worker` to the `simreport` parser's subcommands."""
    from ..core.arguments import int64
    from .config import DEFAULT_TOKENS_ENV

    p = sub.add_parser(
        "worker",
        help="execute the run service's queued runs (claims them from the ledger)",
        description="Claim the run service's queued runs from the ledger and execute them, "
        "one after another in a run process of the worker's, streaming their events into the "
        "ledger, until SIGINT or SIGTERM.",
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
        default=0.05,
        metavar="N",
        help="how often an idle worker looks for runs (default 0.05)",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=5.0,
        metavar="N",
        help="on SIGINT/SIGTERM, how long the current run may go on before it is cancelled "
        "(default 5)",
    )
    p.add_argument(
        "--spool",
        metavar="DIR",
        help="the folder on local disk where runs the ledger could not take yet are kept until "
        "it does (default: $XDG_STATE_HOME/simreport/spool, else "
        "~/.local/state/simreport/spool)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="the execution policy: the model endpoints, external simulators and providers "
        "runs may use (default: the offline provider only); as `simreport api --policy`",
    )
    p.add_argument(
        "--tokens-env",
        metavar="NAME",
        default=DEFAULT_TOKENS_ENV,
        help="the variable holding the service's API tokens, which runs never see "
        f"(default: {DEFAULT_TOKENS_ENV})",
    )
    p.add_argument("--max-runs", type=int64, metavar="N", help="exit after N runs")
    p.add_argument("--worker-id", metavar="ID", help="(default: host-pid-random)")
    p.set_defaults(func=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    import threading

    from ..core.errors import EXIT_OK, InputError
    from ..ledger.db import describe, ledger_url
    from .spool import default_spool

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
    _say(
        f"{worker_id} claims runs from {describe(url)}; its spool: {args.spool or default_spool()}"
    )
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
        policy=args.policy,
        tokens_env=args.tokens_env,
        spool=args.spool,
    )
    _say(f"{worker_id} stopped after {runs} run(s)")
    return EXIT_OK


__all__ = ["StopEvent", "default_worker_id", "register_cli", "run_worker", "sweep_scratch"]
