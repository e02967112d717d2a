"""What a worker records of the run it holds, only while it holds the lease (LeaseLost
otherwise): its events as they stream (`append_events`, gapless and idempotent), and its end —
`finish`, everything the run directory holds in one transaction, or `fail`, ended without a
result. A try repeated after the ledger's answer was lost (`again`) recognises what it
recorded already."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from sqlalchemy.engine import Connection, Engine

from ...ledger import tables as t
from ...ledger.bulk import TableRows, pipelined, write_bulk, write_table_rows
from ...ledger.db import utc_now
from ...ledger.parallel import few_collections
from ...ledger.run_content import event_rows, testbed_rows
from ...ledger.run_rows import terminal_reason
from ...ledger.rundir import RunDirectory, read_run_dir, wall_time
from ..errors import Conflict, NotFound
from .leases import HELD, holds_lease, locked_run, locked_run_to_append
from .transaction import write_transaction


def append_events(
    engine: Engine,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    *,
    worker_id: str | None = None,
) -> None:
    """Record events of a running run as the kernel emitted them ({seq, type, actor, t, wall,
    payload}), in seq order; a retried run's are numbered after its retry mark (the kernel's
    seq n is recorded as the run's event_seq_base + n). Events recorded already are skipped, so
    sending a batch again changes nothing; a batch that would leave a gap is refused (409).
    With `worker_id`, only while that worker holds the run's lease (LeaseLost otherwise)."""
    if not events:
        return
    ordered = sorted(events, key=lambda e: int(e["seq"]))

    def write(conn: Connection) -> None:
        row = locked_run_to_append(conn, run_id, worker_id)
        base, last = int(row.event_seq_base), row.last_seq
        write_table_rows(conn, _fresh_events(conn, run_id, ordered, base=base, last=last))

    write_transaction(engine, write)


def _fresh_events(
    conn: Connection,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    payloads: Sequence[str | None] = (),
    *,
    base: int,
    last: int | None,
) -> TableRows:
    """The rows of the events after `last`, the last one recorded (None: none); the first must
    follow it. The events are numbered as the kernel numbered them: each is recorded at seq
    `base` + its seq."""
    if base:
        events = [{**e, "seq": base + int(e["seq"])} for e in events]
    last = int(last or 0)
    fresh = [i for i, e in enumerate(events) if int(e["seq"]) > last]
    for offset, index in enumerate(fresh):
        if int(events[index]["seq"]) != last + 1 + offset:
            raise Conflict(
                f"events of run {run_id} would leave a gap: seq {events[index]['seq']} after "
                f"{last + offset}",
                code="event_gap",
            )
    return event_rows(
        conn.dialect,
        run_id,
        [events[i] for i in fresh],
        [payloads[i] for i in fresh] if payloads else (),
    )


def _ended_by(
    row: Any,
    worker_id: str,
    execution: str,
    *,
    content: str | None = None,
    reason: str | None = None,
) -> bool:
    """Whether `worker_id` ended the run `row` as `execution`, with this content hash or this
    terminal reason (a reclaimer that ended it keeps the worker as the lease's owner, but gives
    its own reason and records no content)."""
    if row.lease_owner != worker_id or row.execution_status != execution:
        return False
    if content is not None:
        return bool(row.content_sha256 == content)
    return bool(row.terminal_reason == reason)


@dataclass(frozen=True)
class _ServiceRun(RunDirectory):
    """A run directory recorded under the service's run id, not the one its files make."""

    service_run_id: str = field(default="")

    @property
    def run_id(self) -> str:
        return self.service_run_id


def finish(
    engine: Engine,
    run_id: str,
    worker_id: str,
    run_dir: Path,
    *,
    reason: str | None = None,
    again: bool = False,
) -> str:
    """Record the finished run in `run_dir` under `run_id`, in one transaction and only while
    `worker_id` holds its lease (LeaseLost otherwise): its statuses, end, terminal reason,
    result, content hash and the manifest.json it wrote (provider, model, kernel: its
    manifest row is the one frozen when it was queued) on the run row, the events not
    streamed yet (a retry's numbered after its retry mark, as `append_events` numbers them),
    and its records, fault plans and steps, observations, evidence and completeness.
    `reason` replaces the terminal reason the files give. Returns the execution status
    recorded. Raises InputError for a run directory that breaks its contract (then nothing is
    written).

    `again`: this may repeat a try whose answer was lost with the ledger's connection after it
    committed; a run `worker_id` ended already with this very content is then taken as
    recorded, not as a lost lease."""
    with few_collections():
        return _finish(engine, run_id, worker_id, run_dir, reason, again)


_FINISHED: Final = t.run.update().where(HELD)
"""Executed with the values of the columns to set, beside the HELD parameters."""


def _finish(
    engine: Engine, run_id: str, worker_id: str, run_dir: Path, reason: str | None, again: bool
) -> str:
    read = read_run_dir(run_dir)
    run = _ServiceRun(
        **{f.name: getattr(read, f.name) for f in fields(RunDirectory)}, service_run_id=run_id
    )
    finished = [e for e in run.events if e["type"] == "run_finished"]

    def write(conn: Connection) -> None:
        row = locked_run_to_append(conn, run_id, None)
        status = run.result.status
        if again and _ended_by(row, worker_id, status.execution, content=run.content_sha256):
            return
        holds_lease(row, worker_id)
        now = utc_now()
        terminal = reason
        cancelled = row.cancel_requested_at is not None and status.execution == "cancelled"
        if terminal is None and cancelled:
            terminal = f"cancelled: {row.cancel_reason or 'requested'}"
        events = _fresh_events(
            conn,
            run_id,
            run.events,
            run.event_payloads,
            base=int(row.event_seq_base),
            last=row.last_seq,
        )
        rest = write_bulk(conn, [events, *testbed_rows(conn.dialect, run, now)])
        # The rest reads nothing back: on PostgreSQL it goes in one round trip.
        with pipelined(conn):
            for rows in rest:
                write_table_rows(conn, rows)
            conn.execute(
                _FINISHED,
                {
                    "p_run_id": run_id,
                    "p_owner": worker_id,
                    "execution_status": status.execution,
                    "validity_status": status.validity,
                    "evidence_status": status.evidence,
                    "ended_at": wall_time(float(finished[-1]["wall"])) if finished else now,
                    "terminal_reason": terminal or terminal_reason(run),
                    "result": run.result_doc,
                    "recorded_manifest": run.manifest,
                    "content_sha256": run.content_sha256,
                    "lease_expires_at": None,
                },
            )

    write_transaction(engine, write)
    return run.result.status.execution


def fail(
    engine: Engine,
    run_id: str,
    worker_id: str,
    reason: str,
    *,
    execution: str = "crashed",
    again: bool = False,
) -> None:
    """End a run the worker holds without a result: `crashed` (or `cancelled`) with `reason`,
    its evidence partial (what was streamed stays). LeaseLost when the worker no longer holds
    it. `again`: as `finish` takes it (a run this worker ended so already is left as it is)."""

    def write(conn: Connection) -> None:
        row = locked_run(conn, run_id)
        if row is None:
            raise NotFound(f"there is no run {run_id}", code="unknown_run")
        if again and _ended_by(row, worker_id, execution, reason=reason):
            return
        holds_lease(row, worker_id)
        r = t.run.c
        conn.execute(
            t.run.update()
            .where(r.run_id == run_id, r.lease_owner == worker_id, r.execution_status == "running")
            .values(
                execution_status=execution,
                evidence_status="partial",
                ended_at=utc_now(),
                terminal_reason=reason,
                lease_expires_at=None,
            )
        )

    write_transaction(engine, write)
