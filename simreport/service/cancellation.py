"""How a worker hears that a run it executes was cancelled, within a second and whatever its
heartbeat period: on PostgreSQL it listens on the channel a cancellation is announced on
(`queue.CANCEL_CHANNEL`, notified in the transaction that records the request) and looks the
request up as the notification arrives; on SQLite, which has no notifications, it looks every
POLL_SECONDS while it holds a running run. The lease of a run whose cancellation it found is
marked (`Lease.cancel`), which the run's execution turns into a stop request at once
(execution.py). The keeper's heartbeats still report a cancellation too, should this thread not
hear it."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from .keeper import Lease

POLL_SECONDS: Final = 0.25
"""How often a worker on SQLite (or on PostgreSQL while it cannot listen) looks whether a run
it executes was cancelled."""
LISTEN_CHECK_SECONDS: Final = 5.0
"""How often a listening worker looks all the same, for a notification its connection may have
missed while it was away."""
RELISTEN_SECONDS: Final = 1.0
"""How soon a worker whose listening connection was lost tries to listen again (it polls
meanwhile)."""


class CancelWatch:
    """In a thread of its own: marks the leases (`held()`, those of the runs the worker
    executes) whose runs were cancelled, with the reason given. `counts` counts what it did:
    looks (at the ledger), notifications heard, cancellations found, listen_failures."""

    def __init__(
        self,
        engine: Engine,
        held: Callable[[], Sequence[Lease]],
        say: Callable[[str], None],
    ) -> None:
        from collections import Counter

        self.engine = engine
        self.held = held
        self.say = say
        self.listens = engine.dialect.name == "postgresql"
        self.closing = threading.Event()
        self.counts: Counter[str] = Counter()
        self.thread = threading.Thread(target=self._loop, name="simreport-cancel", daemon=True)
        self._listener: Any = None
        """The psycopg connection listening on the channel (None: not listening)."""
        self._next_check = 0.0
        self.ready = threading.Event()
        """Set once it listens (PostgreSQL) or polls (SQLite, or PostgreSQL unable to listen)."""

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.closing.set()
        if self.thread.is_alive():
            self.thread.join(timeout=LISTEN_CHECK_SECONDS)
        self._stop_listening()

    # ----------------------------------------------------------------- the thread

    def _loop(self) -> None:
        next_listen = 0.0
        while not self.closing.is_set():
            try:
                if self.listens and self._listener is None and _now() >= next_listen:
                    if self._listen():
                        self._look()  # what was asked before it listened
                    else:
                        next_listen = _now() + RELISTEN_SECONDS
                self.ready.set()
                if self._listener is not None:
                    self._hear()
                else:
                    self.closing.wait(POLL_SECONDS)
                    self._look()
            # The watch's boundary: were its thread to end, cancellations would wait for the
            # next heartbeat; whatever failed is said, and it goes on polling.
            except Exception as exc:
                self.say(f"looking for cancellations failed: {type(exc).__name__}: {exc}")
                self._stop_listening()
                next_listen = _now() + RELISTEN_SECONDS
                self.closing.wait(POLL_SECONDS)

    def _watched(self) -> list[Lease]:
        return [lease for lease in self.held() if not lease.cancel and not lease.lost]

    def _look(self, run_ids: set[str] | None = None) -> None:
        """Mark the leases of the runs whose cancellation was asked (of `run_ids` only, when
        given)."""
        import sqlalchemy as sa

        from .queue import cancellations

        leases = [lease for lease in self._watched() if run_ids is None or lease.run_id in run_ids]
        if not leases:
            return
        self.counts["looks"] += 1
        try:
            found = cancellations(self.engine, [lease.run_id for lease in leases])
        except sa.exc.SQLAlchemyError:
            return  # the ledger may answer at the next look; the heartbeat tries too
        for lease in leases:
            if lease.run_id in found:
                lease.cancel_reason = found[lease.run_id]
                lease.cancel = True
                self.counts["found"] += 1

    # ----------------------------------------------------------------- PostgreSQL

    def _listen(self) -> bool:
        """Listen on the cancellation channel on a connection of its own; whether it does."""
        import sqlalchemy as sa

        from .queue import CANCEL_CHANNEL

        try:
            raw = self.engine.raw_connection()
        except sa.exc.SQLAlchemyError:
            self.counts["listen_failures"] += 1
            return False
        connection = raw.driver_connection
        raw.detach()  # never back to the pool: it only listens
        try:
            assert connection is not None
            connection.rollback()
            connection.autocommit = True
            connection.execute(f"LISTEN {CANCEL_CHANNEL}")
        except Exception:  # psycopg's errors: the server is away; polled meanwhile
            self.counts["listen_failures"] += 1
            with contextlib.suppress(Exception):
                raw.close()
            return False
        self._listener = connection
        return True

    def _hear(self) -> None:
        """Wait up to POLL_SECONDS for notifications (the thread's pace, so that it stops
        soon), then look up the runs they name; every LISTEN_CHECK_SECONDS, all runs held."""
        assert self._listener is not None
        named: set[str] = set()
        for notice in self._listener.notifies(timeout=POLL_SECONDS, stop_after=1):
            named.add(str(notice.payload))
            self.counts["notified"] += 1
        if named:
            self._look(named)
        if _now() >= self._next_check:
            self._next_check = _now() + LISTEN_CHECK_SECONDS
            self._look()

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(Exception):
                listener.close()


def _now() -> float:
    import time

    return time.monotonic()
