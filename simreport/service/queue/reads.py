"""What a client reads of a run, in its tenant only (404 for another's): its statuses
(`get_run`, `run_detail`; `cancelling` while a cancellation is carried out), its events after
a cursor (`events_page`: 410 for a cursor before the retention window, 422 for one past the
last event), and its evidence package once it has ended (`evidence`, 409 before)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...ledger import tables as t
from ...ledger.db import reading, utc_now, utc_text
from ...ledger.migrate import prepare_once
from ...ledger.run_evidence import evidence_package
from ..errors import Conflict, Gone, NotFound, Unprocessable, issue
from .runs import CANCELLING, TERMINAL


def _run_row(conn: Connection, run_id: str, tenant: str, *columns: Any) -> Any:
    """The run's row in `tenant` (only `columns`, when named), or 404."""
    query = sa.select(*columns) if columns else sa.select(t.run)
    row = conn.execute(query.where(t.run.c.run_id == run_id, t.run.c.tenant_id == tenant)).first()
    if row is None:
        raise NotFound(f"there is no run {run_id}", code="unknown_run")
    return row


_RUN_OF_TENANT: Final = (t.run.c.run_id == sa.bindparam("p_run_id")) & (
    t.run.c.tenant_id == sa.bindparam("p_tenant")
)
_RUN_STATUSES: Final = sa.select(
    t.run.c.execution_status,
    t.run.c.cancel_requested_at,
    t.run.c.validity_status,
    t.run.c.evidence_status,
    t.run.c.quality_ref,
    t.run.c.retries,
).where(_RUN_OF_TENANT)
_RUN_SEEN: Final = sa.select(t.run.c.run_id).where(_RUN_OF_TENANT)


def _known_run(conn: Connection, query: sa.Select[Any], run_id: str, tenant: str) -> Any:
    """The row `query` (one of the statements over _RUN_OF_TENANT) finds, or 404."""
    row = conn.execute(query, {"p_run_id": run_id, "p_tenant": tenant}).first()
    if row is None:
        raise NotFound(f"there is no run {run_id}", code="unknown_run")
    return row


def execution_status(row: Any) -> str:
    """The execution status a client reads for the run `row`: the ledger's, but `cancelling`
    for a running run whose cancellation was asked, until it has ended."""
    if row.execution_status == "running" and row.cancel_requested_at is not None:
        return CANCELLING
    return str(row.execution_status)


def get_run(engine: Engine, run_id: str, *, tenant: str) -> dict[str, Any]:
    """The run's four statuses (its execution status `cancelling` from the moment its
    cancellation was asked until it has ended: `execution_status`), and the attempt it is on:
    1, or 2 once it was queued again after its worker was lost."""
    prepare_once(engine)
    with reading(engine) as conn:
        row = _known_run(conn, _RUN_STATUSES, run_id, tenant)
    return {
        "execution_status": execution_status(row),
        "validity_status": row.validity_status,
        "evidence_status": row.evidence_status,
        "quality_ref": row.quality_ref,
        "attempt": int(row.retries) + 1,
    }


def run_detail(engine: Engine, run_id: str, *, tenant: str) -> dict[str, Any]:
    """The run's statuses with its times, terminal reason, lease, attempt (`attempts`: how
    many times it was claimed) and retries allowed, and request."""
    prepare_once(engine)
    with reading(engine) as conn:
        row = _run_row(conn, run_id, tenant)
    return {
        "run_id": row.run_id,
        "manifest_id": row.manifest_id,
        "execution_status": execution_status(row),
        "validity_status": row.validity_status,
        "evidence_status": row.evidence_status,
        "quality_ref": row.quality_ref,
        "purpose": row.purpose,
        "created_at": utc_text(row.created_at),
        "started_at": utc_text(row.started_at),
        "ended_at": utc_text(row.ended_at),
        "terminal_reason": row.terminal_reason,
        "lease_owner": row.lease_owner,
        "attempt": int(row.retries) + 1,
        "attempts": row.attempts,
        "retries_allowed": row.retries_allowed,
        "cancel_reason": row.cancel_reason,
        "request": row.request,
        "principal": row.principal,
    }


def events_after(
    engine: Engine,
    run_id: str,
    after_seq: int,
    *,
    tenant: str,
    limit: int = 500,
    retention_seconds: float | None,
) -> dict[str, Any]:
    """Up to `limit` events of the run after seq `after_seq`, oldest first, and `next_seq`, the
    cursor to ask with next (the last seq returned, or `after_seq` when none is new). Events
    older than `retention_seconds` are no longer served: a cursor before the newest of them is
    gone (410). A cursor past the run's last event is refused (422 `cursor_past_end`, with the
    run's last seq as `next_seq`)."""
    page: dict[str, Any] = orjson.loads(
        events_page(
            engine,
            run_id,
            after_seq,
            tenant=tenant,
            limit=limit,
            retention_seconds=retention_seconds,
        )
    )
    return page


_EXPIRED_UP_TO: Final = sa.select(sa.func.max(t.event.c.seq)).where(
    t.event.c.run_id == sa.bindparam("p_run_id"),
    t.event.c.wall_time < sa.bindparam("p_cutoff", type_=t.event.c.wall_time.type),
)
_EVENTS_AFTER: Final = (
    sa.select(
        t.event.c.seq,
        t.event.c.event_type,
        t.event.c.actor,
        t.event.c.actor_ref,
        t.event.c.step,
        t.event.c.logical_time,
        t.event.c.wall_time,
        t.event.c.trace_id,
        t.event.c.span_id,
        sa.cast(t.event.c.payload, sa.Text),
    )
    .where(
        t.event.c.run_id == sa.bindparam("p_run_id"),
        t.event.c.seq > sa.bindparam("p_after", type_=t.event.c.seq.type),
    )
    .order_by(t.event.c.seq)
    .limit(sa.bindparam("p_limit", type_=sa.Integer))
)


def events_page(
    engine: Engine,
    run_id: str,
    after_seq: int,
    *,
    tenant: str,
    limit: int = 500,
    retention_seconds: float | None,
) -> bytes:
    """`events_after` as the JSON the service answers, each payload the text the ledger holds
    (a page of events is not decoded only to be encoded again)."""
    prepare_once(engine)
    with reading(engine) as conn:
        _known_run(conn, _RUN_SEEN, run_id, tenant)
        if retention_seconds is not None:
            cutoff = utc_now() - timedelta(seconds=retention_seconds)
            expired = conn.execute(
                _EXPIRED_UP_TO, {"p_run_id": run_id, "p_cutoff": cutoff}
            ).scalar()
            if expired is not None and after_seq < int(expired):
                raise Gone(
                    f"events of run {run_id} up to seq {expired} are past the retention window "
                    f"({retention_seconds:g} s): ask again with after_seq={expired} or later",
                    code="cursor_expired",
                    fields={"next_seq": int(expired)},
                )
        rows = conn.execute(
            _EVENTS_AFTER,
            {"p_run_id": run_id, "p_after": after_seq, "p_limit": max(1, min(limit, 5000))},
        ).all()
    if not rows and after_seq > 0:
        _refuse_past_end(engine, run_id, after_seq)
    events = [
        {
            "seq": seq,
            "type": kind,
            "actor": actor,
            "actor_ref": actor_ref,
            "step": step,
            "logical_time": logical_time,
            "wall_time": utc_text(wall),
            "trace_id": trace,
            "span_id": span,
            "payload": orjson.Fragment(payload),
        }
        for seq, kind, actor, actor_ref, step, logical_time, wall, trace, span, payload in rows
    ]
    next_seq = events[-1]["seq"] if events else after_seq
    return orjson.dumps({"events": events, "next_seq": next_seq})


_LAST_SEQ: Final = sa.select(sa.func.max(t.event.c.seq)).where(
    t.event.c.run_id == sa.bindparam("p_run_id")
)


def _refuse_past_end(engine: Engine, run_id: str, after_seq: int) -> None:
    """422 `cursor_past_end` when `after_seq` is past the run's last event: no answer of the
    service ever gave that cursor (events are appended, never removed), so it belongs to
    another run or was made up. The refusal's `next_seq` is the run's last seq, the cursor that
    reads what comes next."""
    with reading(engine) as conn:
        last = int(conn.execute(_LAST_SEQ, {"p_run_id": run_id}).scalar() or 0)
    if after_seq > last:
        raise Unprocessable(
            f"after_seq {after_seq} is past the last event of run {run_id} (seq {last}): ask "
            f"with after_seq={last} for the events that come next",
            code="cursor_past_end",
            issues=[issue("query.after_seq", f"past the last event, {last}", f"0 to {last}")],
            fields={"next_seq": last},
        )


def evidence(
    engine: Engine, run_id: str, *, tenant: str, criterion: str | None = None
) -> dict[str, Any]:
    """The run's evidence package: its records, observations (and the facts that could not be
    observed, `missing`), evidence per criterion and completeness checks. With `criterion`,
    that criterion's evidence with only the observations and records it cites (404 for a
    criterion the run has no evidence for). 409 while the run has not ended."""
    prepare_once(engine)
    with reading(engine) as conn:
        row = _run_row(conn, run_id, tenant)
        if row.execution_status not in TERMINAL:
            raise Conflict(
                f"run {run_id} is {row.execution_status}: its evidence has not converged; "
                "ask again once it has ended",
                code="not_converged",
            )
        package = evidence_package(conn, run_id, criterion=criterion)
    if criterion is not None and not package.evidence:
        raise NotFound(
            f"run {run_id} has no evidence for criterion {criterion!r}",
            code="unknown_criterion",
        )
    return {
        "records": [{"record_id": r.record_id, **r.body} for r in package.records],
        "observations": [
            {
                "observation_id": o.observation_id,
                "fact_key": o.fact_key,
                "value": o.value,
                "derived_from": o.derived_from,
                "extractor": o.extractor,
            }
            for o in package.observations
        ]
        + [
            {"fact_key": m.fact_key, "missing": True, "reason": m.reason, "extractor": m.extractor}
            for m in package.missing
        ],
        "evidence": [
            {
                "criterion": e.criterion,
                "sufficient": e.sufficient,
                "observation_ids": e.observation_ids,
                "evidence_refs": e.evidence_refs,
                "detail": e.detail,
            }
            for e in package.evidence
        ],
        "completeness": [
            {"check": c.check, "status": c.status, "detail": c.detail} for c in package.completeness
        ],
    }
