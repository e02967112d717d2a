"""A worker's keeper: it keeps the worker's word while the ledger comes and goes, in a thread
of its own. It renews the lease of every run the worker holds every heartbeat (every second at
most while the ledger does not answer, so that a reclaimer, which waits a confirmation period
after it first finds a lease expired, never takes a run of a worker alive); ends the runs whose
workers vanished (`reclaim_expired`, on the other workers' behalf); and records a finished run
exactly once: a run the ledger did not take (down, its connection lost, its disk full) is kept
in the worker's spool on local disk (spool.py) and recorded as soon as the ledger takes it,
with backoff. A worker that dies with runs in its spool leaves them there: the keeper of a
worker started with the same spool takes them over and records them under the dead worker's
lease, while that lease stands."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .run_process import BATCH_EVENTS, EXIT_SECONDS
from .spool import Ending
from .worker_secrets import say, scrub, scrubbed

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from .execution import Execution
    from .spool import Entry, Spool
    from .worker import Worker

RETRY_SECONDS: Final = 1.0
"""How often, at most, a worker whose ledger does not answer tries again to renew its leases
(a quarter of its lease, when that is shorter): once the ledger answers, its leases are renewed
well within the confirmation period a reclaimer waits (half a lease, queue.reclaim_expired)."""
FIRST_RECORD_RETRY_SECONDS: Final = 0.5
LONGEST_RECORD_RETRY_SECONDS: Final = 10.0
"""How long a run kept in the spool waits before it is recorded again: the first wait, doubled
after each failure up to the longest (it is tried at once when the ledger answers again)."""


class Lease:
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

    def __init__(self, entry: Entry, lease: Lease, *, tries: int, next_try: float) -> None:
        self.entry = entry
        self.lease = lease
        self.tries = tries
        self.next_try = next_try


class Keeper:
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
        self, worker: Worker, spool: Spool, on_run: Callable[[str, str], None] | None
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
        self.leases: list[Lease] = []
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

    def hold(self, run_id: str, owner: str) -> Lease:
        """Renew this lease from now on."""
        lease = Lease(run_id, owner)
        with self.lock:
            self.leases.append(lease)
        return lease

    def held(self) -> list[Lease]:
        """The leases it renews now."""
        with self.lock:
            return list(self.leases)

    def release(self, lease: Lease) -> None:
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

    def keep(self, execution: Execution, exc: BaseException) -> None:
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
            events=scrubbed(execution.pending),
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
        say(
            f"{claimed.run_id} kept {where}: {describe_outage(unavailability(exc))} "
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
            say(
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
            # The keeper's boundary: were its thread to end, the worker's leases would lapse;
            # whatever failed is logged and all is tried again shortly.
            except Exception as exc:
                say(f"keeping leases and spool failed: {worker.why(exc)}")
                next_beat = time.monotonic() + self.retry_seconds
                self.wake.wait(self.retry_seconds)

    def _renew(self) -> bool:
        """Renew every lease held; False when the ledger did not take a renewal."""
        import sqlalchemy as sa

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
            except sa.exc.SQLAlchemyError as exc:  # the ledger may answer at the next try
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
        say(
            f"{leases} lease(s) not renewed: {describe_outage(unavailability(exc))} "
            f"({self.worker.why(exc)}); trying again every {self.retry_seconds:g} s"
        )

    def _back(self, leases: int) -> None:
        if self.away_since is None:
            return
        away = time.monotonic() - self.away_since
        self.away_since = None
        say(f"the ledger takes writes again after {away:.1f} s: {leases} lease(s) renewed")
        with self.lock:
            for kept in self.kept:
                kept.next_try = 0.0  # try at once

    def _reclaim(self) -> None:
        import sqlalchemy as sa

        from .queue import reclaim_expired

        # A ledger that does not answer now is tried again at the next heartbeat.
        with contextlib.suppress(sa.exc.SQLAlchemyError):
            reclaim_expired(self.engine)

    def _adopt(self) -> None:
        entries, unreadable = self.spool.adopt()
        for line in unreadable:
            if line not in self.unreadable:
                self.unreadable.add(line)
                say(f"an entry of the spool cannot be read, left where it is: {line}")
        for entry in entries:
            lease = self.hold(entry.run_id, entry.owner)
            with self.lock:
                self.kept.append(_Kept(entry, lease, tries=0, next_try=0.0))
                self.counts["adopted"] += 1
            say(
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
        import sqlalchemy as sa

        from ..core.errors import SimreportError
        from ..ledger.db import unavailability

        entry = kept.entry
        try:
            outcome = record_ending(
                self.engine, entry.run_id, entry.owner, entry.run_dir, entry.events, entry.ending
            )
        except (sa.exc.SQLAlchemyError, SimreportError, OSError) as exc:
            cause = unavailability(exc)
            if cause is None:
                say(f"{entry.run_id} dropped from the spool: not recorded: {self.worker.why(exc)}")
                self._forget(kept, "unrecorded")
                return
            wait = min(LONGEST_RECORD_RETRY_SECONDS, FIRST_RECORD_RETRY_SECONDS * 2**kept.tries)
            kept.tries += 1
            kept.next_try = time.monotonic() + wait
            self.counts["record_retries"] += 1
            say(
                f"{entry.run_id} still in the spool: {describe_outage(cause)} "
                f"({self.worker.why(exc)}); retrying in {wait:g} s"
            )
            return
        if outcome == "lease_lost":
            say(
                f"{entry.run_id} dropped from the spool: its lease is lost (the ledger ended "
                "the run meanwhile)"
            )
        else:
            self.counts["recorded_from_spool"] += 1
            tries = kept.tries + 1
            say(
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


def describe_outage(cause: str | None) -> str:
    """Why the ledger did not take a write (`cause`: ledger.db.unavailability's), for the log."""
    from ..ledger.db import DISK_FULL

    return "the ledger's disk is full" if cause == DISK_FULL else "the ledger is unavailable"


def record_ending(
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
                ending = Ending("fail", "crashed", scrub(f"unrecordable: {exc.one_line()}"))
            except sa.exc.DBAPIError as exc:
                if unavailability(exc) is not None:
                    raise
                refusal = str(exc.orig).strip().splitlines()[:1] or [type(exc).__name__]
                why = f"unrecordable: the ledger refused it: {refusal[0]}"
                ending = Ending("fail", "crashed", scrub(why))
        stream_events(engine, run_id, owner, events)
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


def stream_events(engine: Engine, run_id: str, owner: str, events: list[dict[str, Any]]) -> None:
    """Record `events` of the running run, BATCH_EVENTS a transaction, taking each batch off
    the list once recorded (on a failure the rest stays, to be sent again: no gap)."""
    from .queue import append_events

    while events:
        batch = scrubbed(events[:BATCH_EVENTS])
        append_events(engine, run_id, batch, worker_id=owner)
        del events[: len(batch)]
