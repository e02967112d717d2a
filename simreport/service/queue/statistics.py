"""What /healthz and /metrics read of the queue: runs pending and running and the oldest
pending one's wait (`queue_state`, on an index, however long the history), and the runs the
service queued by status with their claim-to-finish times (`run_statistics`, one aggregate
over the run table)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ...ledger import tables as t
from ...ledger.db import as_utc, reading
from ...ledger.migrate import prepare_once
from .runs import ACTIVE, TERMINAL


@dataclass(frozen=True)
class QueueState:
    """What /healthz says of the queue: runs pending (waiting for a worker), runs running, and
    when the oldest pending run was queued (None: nothing pending)."""

    pending: int
    running: int
    oldest_pending_at: datetime | None


_QUEUE_STATE: Final = sa.select(
    sa.func.count().filter(t.run.c.execution_status == "pending"),
    sa.func.count().filter(t.run.c.execution_status == "running"),
    sa.func.min(t.run.c.created_at).filter(t.run.c.execution_status == "pending"),
).where(sa.or_(*(t.run.c.execution_status == status for status in ACTIVE)))
"""Runs pending and running and the oldest pending one's queueing: read on the index of
(execution_status, created_at), however long the ledger's history."""


def queue_state(engine: Engine) -> QueueState:
    prepare_once(engine)
    with reading(engine) as conn:
        pending, running, oldest = conn.execute(_QUEUE_STATE).one()
    return QueueState(int(pending), int(running), as_utc(oldest))


CLAIM_TO_FINISH_BUCKETS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
"""The upper bounds (seconds) of the claim-to-finish histogram's buckets."""


@dataclass(frozen=True)
class Durations:
    """Claim-to-finish times of ended runs: how many, their sum (seconds), and how many took at
    most each bound of CLAIM_TO_FINISH_BUCKETS (cumulative, as Prometheus' buckets)."""

    count: int
    total_seconds: float
    at_most: tuple[int, ...]


@dataclass(frozen=True)
class RunStatistics:
    """The runs the service queued, by execution status (every status, 0 when none), and the
    claim-to-finish times of those that ended after a worker claimed them, by status."""

    by_status: dict[str, int]
    claim_to_finish: dict[str, Durations]


def _claim_to_finish(dialect: str) -> sa.ColumnElement[Any]:
    """Seconds from a run's first claim (started_at) to its end; NULL unless both are set."""
    r = t.run.c
    if dialect == "postgresql":
        return sa.cast(sa.extract("epoch", r.ended_at - r.started_at), sa.Float)
    # SQLite keeps UTC text, which julianday reads (days, with a fraction).
    return (sa.func.julianday(r.ended_at) - sa.func.julianday(r.started_at)) * 86400.0


@functools.cache
def _run_statistics_query(dialect: str) -> sa.Select[Any]:
    timed = (
        sa.select(t.run.c.execution_status, _claim_to_finish(dialect).label("seconds"))
        # Runs queued through the service: an audit's ingested runs have no principal.
        .where(t.run.c.principal.is_not(None))
        .subquery()
    )
    seconds = timed.c.seconds
    return sa.select(
        timed.c.execution_status,
        sa.func.count(),
        sa.func.count(seconds),
        sa.func.coalesce(sa.func.sum(seconds), 0.0),
        *(
            sa.func.sum(sa.case((seconds <= bound, 1), else_=0))
            for bound in CLAIM_TO_FINISH_BUCKETS
        ),
    ).group_by(timed.c.execution_status)


def run_statistics(engine: Engine) -> RunStatistics:
    """One aggregate over the run table (for /metrics: it reads every run the service queued,
    so its cost grows with the ledger's history)."""
    prepare_once(engine)
    by_status = dict.fromkeys(t.EXECUTION_STATUSES, 0)
    durations = {
        status: Durations(0, 0.0, (0,) * len(CLAIM_TO_FINISH_BUCKETS)) for status in TERMINAL
    }
    with reading(engine) as conn:
        rows = conn.execute(_run_statistics_query(conn.dialect.name)).all()
    for status, runs, ended, total, *at_most in rows:
        by_status[status] = int(runs)
        if status in durations:
            durations[status] = Durations(
                int(ended), float(total), tuple(int(n or 0) for n in at_most)
            )
    return RunStatistics(by_status, durations)
