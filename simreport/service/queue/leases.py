"""The lease protocol between the queue and its workers. A worker `claim`s the oldest pending
run (PostgreSQL: `SELECT … FOR UPDATE SKIP LOCKED`; SQLite: one write transaction, which takes
the write lock at BEGIN) and holds a lease it renews with `heartbeat`, which also tells it of a
cancellation. A run whose lease expired is reclaimed by `reclaim_expired`, which every worker
calls on the others' behalf, in two looks a confirmation period apart: it ends `crashed`
("worker_lost"), or — queued with a retry allowed — goes back to `pending` once, with the same
manifest and seed, its events so far kept and a `run_retried` event after them (the retry's
events are numbered after it, the run's `event_seq_base`). What a worker writes while it holds
a lease checks it here (`locked_run_to_append`, `holds_lease`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.versions import RunChecks
from ...ledger import tables as t
from ...ledger.db import as_utc, describe, reading, utc_now, utc_text
from ...ledger.migrate import prepare_once
from ...ledger.run_content import insert_events
from ..errors import LeaseLost, NotFound, ServiceError
from .manifests import frozen_status, version_checks
from .scenarios import frozen_spec, run_document
from .transaction import write_transaction

WORKER_LOST: Final = "worker_lost"
RETRIED: Final = "run_retried"
"""The harness event that marks a retry in a run's events: the attempt that follows, why, and
what became of the lost one."""


@dataclass(frozen=True)
class Claim:
    """A run a worker claimed: everything needed to execute it."""

    run_id: str
    tenant: str
    manifest_id: str
    manifest: dict[str, Any]
    """The frozen manifest (its document in the ledger)."""
    request: dict[str, Any]
    scenario: dict[str, Any]
    """The scenario document to run: the version's spec with the request's seed, mode, budget."""
    checks: RunChecks
    """Purpose, pins (asset name → the frozen version) and the ledger's digests and statuses."""
    attempts: int
    trace_id: str
    library_dir: str
    """The folder name the scenario expects its asset library under (provenance.assetLibrary)."""


@dataclass(frozen=True)
class Heartbeat:
    """What a heartbeat learned: the lease is gone, or a cancellation was requested."""

    lease_lost: bool
    cancel: bool
    cancel_reason: str | None = None


@dataclass(frozen=True)
class Reclaimed:
    """A run whose worker was lost: `outcome` "crashed" (ended, "worker_lost") or "pending"
    (queued again for attempt `attempt`)."""

    run_id: str
    outcome: str
    attempt: int


_LEASE_COLUMNS = (
    t.run.c.run_id,
    t.run.c.execution_status,
    t.run.c.lease_owner,
    t.run.c.event_seq_base,
    t.run.c.cancel_requested_at,
    t.run.c.cancel_reason,
    t.run.c.terminal_reason,
    t.run.c.content_sha256,
)
"""What a worker's or a cancellation's write reads of the run it changes (the terminal reason
and content hash say whether a worker's earlier try ended it already)."""


# The statements a run takes through the service are built once, here and beside the functions
# that execute them, with their values bound at execution: SQLAlchemy then finds each compiled
# statement in its cache without building the statement and its cache key again (which cost
# more than SQLite's own work for most of them). SQLite renders no FOR UPDATE.

_LOCKED_RUN: Final = (
    sa.select(*_LEASE_COLUMNS).where(t.run.c.run_id == sa.bindparam("p_run_id")).with_for_update()
)
_LOCKED_RUN_OF_TENANT: Final = _LOCKED_RUN.where(t.run.c.tenant_id == sa.bindparam("p_tenant"))
_LOCKED_RUN_AND_LAST_SEQ: Final = (
    sa.select(
        *_LEASE_COLUMNS,
        sa.select(sa.func.max(t.event.c.seq))
        .where(t.event.c.run_id == t.run.c.run_id)
        .scalar_subquery()
        .label("last_seq"),
    )
    .where(t.run.c.run_id == sa.bindparam("p_run_id"))
    .with_for_update(of=t.run)
)


def locked_run(conn: Connection, run_id: str, tenant: str | None = None) -> Any:
    """The run's lease and state (`_LEASE_COLUMNS`), locked until the transaction ends
    (SQLite: the write lock holds it)."""
    if tenant is None:
        return conn.execute(_LOCKED_RUN, {"p_run_id": run_id}).first()
    return conn.execute(_LOCKED_RUN_OF_TENANT, {"p_run_id": run_id, "p_tenant": tenant}).first()


def locked_run_to_append(conn: Connection, run_id: str, worker_id: str | None) -> Any:
    """`locked_run` with `last_seq`, the last event recorded (None: none), in one query; 404
    for an unknown run, LeaseLost when `worker_id` does not hold it."""
    row = conn.execute(_LOCKED_RUN_AND_LAST_SEQ, {"p_run_id": run_id}).first()
    if row is None:
        raise NotFound(f"there is no run {run_id}", code="unknown_run")
    if worker_id is not None:
        holds_lease(row, worker_id)
    return row


def holds_lease(row: Any, worker_id: str) -> None:
    """LeaseLost unless `worker_id` holds the lease of the running run `row`."""
    if row.execution_status != "running" or row.lease_owner != worker_id:
        raise LeaseLost(
            f"worker {worker_id} no longer holds run {row.run_id} (it is "
            f"{row.execution_status}, lease of {row.lease_owner})"
        )


_ANY_PENDING: Final = (
    sa.select(t.run.c.run_id).where(t.run.c.execution_status == "pending").limit(1)
)
_OLDEST_PENDING: Final = (
    sa.select(t.run.c.run_id)
    .where(t.run.c.execution_status == "pending")
    .order_by(t.run.c.created_at, t.run.c.run_id)
    .limit(1)
    .with_for_update(skip_locked=True)
)
_TAKE: Final = (
    t.run.update()
    .where(
        t.run.c.run_id == _OLDEST_PENDING.scalar_subquery(),
        t.run.c.execution_status == "pending",
    )
    .values(
        execution_status="running",
        lease_owner=sa.bindparam("p_owner"),
        lease_expires_at=sa.bindparam("p_expires", type_=t.run.c.lease_expires_at.type),
        heartbeat_at=sa.bindparam("p_now", type_=t.run.c.heartbeat_at.type),
        lease_suspected_at=None,
        # The first attempt's start stays; a retry's is its run_started event.
        started_at=sa.func.coalesce(
            t.run.c.started_at, sa.bindparam("p_now", type_=t.run.c.started_at.type)
        ),
        attempts=t.run.c.attempts + 1,
    )
    .returning(*t.run.columns)
)
"""The oldest pending run, claimed in one statement (PostgreSQL: the queue's usual
`UPDATE … WHERE run_id = (SELECT … FOR UPDATE SKIP LOCKED)`); its row as claimed."""


def claim(
    engine: Engine, worker_id: str, *, lease_seconds: float, look_first: bool = True
) -> Claim | None:
    """The oldest pending run, now `running` under a lease of `worker_id` for `lease_seconds`
    (None when nothing is pending). Two workers never claim the same run. `look_first`: see
    whether any run is pending before taking the write lock (an idle worker's poll, which on
    SQLite then costs no write lock; a worker that has just claimed one expects more)."""
    prepare_once(engine)
    if look_first:
        with reading(engine) as conn:
            if conn.execute(_ANY_PENDING).first() is None:
                return None

    def write(conn: Connection) -> Claim | None:
        r = t.run.c
        now = utc_now()
        taken = conn.execute(
            _TAKE,
            {
                "p_owner": worker_id,
                "p_expires": now + timedelta(seconds=lease_seconds),
                "p_now": now,
            },
        ).first()
        if taken is None:
            return None
        run_id = taken.run_id
        try:
            return _claim_of(conn, taken, engine)
        except (ServiceError, LookupError, TypeError, ValueError, sa.exc.NoResultFound) as exc:
            # A run that cannot even be described to a worker must not be claimed forever.
            conn.execute(
                t.run.update()
                .where(r.run_id == run_id)
                .values(
                    execution_status="crashed",
                    ended_at=now,
                    terminal_reason=f"unclaimable: {type(exc).__name__}: {exc}",
                    lease_expires_at=None,
                )
            )
            return None

    return write_transaction(engine, write)


_CLAIMED_MANIFEST: Final = (
    sa.select(
        t.manifest.c.manifest_id,
        t.manifest.c.scenario_id,
        t.manifest.c.scenario_version,
        t.manifest.c.document,
        t.scenario_version.c.spec_sha256,
        t.scenario_version.c.status,
    )
    .join(
        t.scenario_version,
        (t.scenario_version.c.scenario_id == t.manifest.c.scenario_id)
        & (t.scenario_version.c.version == t.manifest.c.scenario_version),
    )
    .where(t.manifest.c.manifest_id == sa.bindparam("p_manifest_id"))
)
"""A claimed run's manifest, with the state of the scenario version it froze."""
_ASSET_STATUSES: Final = (
    sa.select(t.manifest_asset.c.slot, t.asset_version.c.status)
    .join(
        t.asset_version,
        (t.asset_version.c.asset_id == t.manifest_asset.c.asset_id)
        & (t.asset_version.c.version == t.manifest_asset.c.version),
    )
    .where(t.manifest_asset.c.manifest_id == sa.bindparam("p_manifest_id"))
)


def _claim_of(conn: Connection, run: Any, engine: Engine) -> Claim:
    """What a worker needs to execute the claimed run (`run`: its row as the claim left it)."""
    manifest = conn.execute(_CLAIMED_MANIFEST, {"p_manifest_id": run.manifest_id}).one()
    spec, _ = frozen_spec(engine, manifest.scenario_id, manifest.scenario_version, run.tenant_id)
    statuses = {
        slot: status
        for slot, status in conn.execute(_ASSET_STATUSES, {"p_manifest_id": manifest.manifest_id})
    }
    request = dict(run.request or {})
    document = dict(manifest.document)
    scenario = run_document(
        spec,
        seed=request.get("seed"),
        budget=request.get("budget"),
        mode=str(request.get("mode") or run.mode),
    )
    resolved = document.get("resolved") or {}
    frozen = document.get("scenario") or {}
    identity_id = frozen.get("id")
    # The statuses the run was accepted under (its manifest's lock), but for a version retired
    # since: the run then locks the digest its manifest was frozen with.
    checks = version_checks(
        purpose=run.purpose,
        scenario={
            "id": identity_id,
            "version": manifest.scenario_version,
            "specSha256": manifest.spec_sha256,
        },
        scenario_status=frozen_status(
            document,
            "scenario",
            str(identity_id),
            manifest.scenario_version,
            manifest.status,
        ),
        resolved=resolved,
        statuses={
            slot: frozen_status(
                document,
                "asset",
                entry["name"],
                entry["version"],
                statuses.get(slot, "draft"),
            )
            for slot, entry in resolved.items()
        },
        ledger=describe(engine.url.render_as_string(hide_password=False)),
    )
    provenance = scenario.get("provenance")
    library_dir = "assets"
    if isinstance(provenance, Mapping) and isinstance(provenance.get("assetLibrary"), str):
        library_dir = provenance["assetLibrary"]
    return Claim(
        run_id=str(run.run_id),
        tenant=run.tenant_id,
        manifest_id=manifest.manifest_id,
        manifest=document,
        request=request,
        scenario=scenario,
        checks=checks,
        attempts=int(run.attempts),
        trace_id=run.trace_id,
        library_dir=library_dir,
    )


HELD: Final = (
    (t.run.c.run_id == sa.bindparam("p_run_id"))
    & (t.run.c.lease_owner == sa.bindparam("p_owner"))
    & (t.run.c.execution_status == "running")
)
"""The run, while the worker named holds its lease."""
_RENEW: Final = (
    t.run.update()
    .where(HELD)
    .values(
        lease_expires_at=sa.bindparam("p_expires", type_=t.run.c.lease_expires_at.type),
        heartbeat_at=sa.bindparam("p_now", type_=t.run.c.heartbeat_at.type),
        lease_suspected_at=None,  # the worker is alive: no reclaimer may take the run
    )
    .returning(t.run.c.cancel_requested_at, t.run.c.cancel_reason)
)


def heartbeat(engine: Engine, run_id: str, worker_id: str, *, lease_seconds: float) -> Heartbeat:
    """Renew the worker's lease on the run for `lease_seconds` from now, even when it has
    expired (while no reclaimer has taken the run), and clear a reclaimer's mark; says whether
    the lease is lost (another ended the run) and whether a cancellation was requested."""

    def write(conn: Connection) -> Heartbeat:
        now = utc_now()
        row = conn.execute(
            _RENEW,
            {
                "p_run_id": run_id,
                "p_owner": worker_id,
                "p_expires": now + timedelta(seconds=lease_seconds),
                "p_now": now,
            },
        ).first()
        if row is None:
            return Heartbeat(lease_lost=True, cancel=False)
        return Heartbeat(False, row.cancel_requested_at is not None, row.cancel_reason)

    return write_transaction(engine, write)


_ANY_EXPIRED: Final = (
    sa.select(t.run.c.run_id)
    .where(
        t.run.c.execution_status == "running",
        t.run.c.lease_expires_at < sa.bindparam("p_moment", type_=t.run.c.lease_expires_at.type),
    )
    .limit(1)
)


CONFIRM_SHARE: Final = 0.5
"""How long an expired lease must stay expired and unrenewed after a reclaimer first found it
so before the run is reclaimed, as a share of the lease's length (its last renewal's)."""
CONFIRM_MIN_SECONDS: Final = 1.0
"""The shortest confirmation period, whatever the lease."""


def confirmation_seconds(lease_seconds: float) -> float:
    """The confirmation period of a lease of `lease_seconds` (see `reclaim_expired`)."""
    return max(CONFIRM_MIN_SECONDS, lease_seconds * CONFIRM_SHARE)


def _confirmation(row: Any) -> float:
    expires, renewed = as_utc(row.lease_expires_at), as_utc(row.heartbeat_at)
    lease = (expires - renewed).total_seconds() if expires and renewed else 0.0
    return confirmation_seconds(lease)


def reclaim_expired(engine: Engine, *, now: datetime | None = None) -> list[Reclaimed]:
    """Reclaim every running run whose lease expired before `now` and whose worker is gone.

    Reclaiming takes two looks: the first that finds a lease expired only marks the run
    (`lease_suspected_at`); a look at least the confirmation period later (half the lease, see
    `confirmation_seconds`) that finds it still expired and the mark still there reclaims it.
    A heartbeat renews the lease and clears the mark. A worker whose heartbeats could not reach
    the ledger (down, its disk full) keeps trying, so once the ledger answers again it renews
    its lease within that period: marking needs the ledger to take writes too.

    A run reclaimed with a retry left (queued with `retries`, not retried as often yet, and no
    cancellation requested) goes back to `pending` for the next claim: a `run_retried` event
    follows the events it recorded and the retry's are numbered after it. Any other ends
    `crashed`, terminal reason "worker_lost" (for a retry lost too: "worker_lost: …" saying
    so), evidence partial. Returns those reclaimed, by run id."""
    moment = now if now is not None else utc_now()
    r = t.run.c
    expired = (r.execution_status == "running") & (r.lease_expires_at < moment)
    prepare_once(engine)
    with reading(engine) as conn:
        if conn.execute(_ANY_EXPIRED, {"p_moment": moment}).first() is None:
            return []

    def write(conn: Connection) -> list[Reclaimed]:
        query = sa.select(t.run).where(expired).order_by(r.run_id)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()  # another reclaimer's runs are then no longer expired
        done = []
        marked = []
        for row in conn.execute(query).all():
            suspected = as_utc(row.lease_suspected_at)
            if suspected is None:
                marked.append(row.run_id)
                continue
            if (moment - suspected).total_seconds() < _confirmation(row):
                continue  # its worker still has time to renew the lease
            attempt = int(row.retries) + 1
            if row.retries < row.retries_allowed and row.cancel_requested_at is None:
                _retry(conn, row, moment)
                done.append(Reclaimed(row.run_id, "pending", attempt + 1))
                continue
            reason = WORKER_LOST
            if row.retries:
                reason += f": attempt {attempt}, the retry, lost its worker too"
            conn.execute(
                t.run.update()
                .where(r.run_id == row.run_id)
                .values(
                    execution_status="crashed",
                    evidence_status="partial",
                    ended_at=moment,
                    terminal_reason=reason,
                    lease_expires_at=None,
                )
            )
            done.append(Reclaimed(row.run_id, "crashed", attempt))
        if marked:
            conn.execute(
                t.run.update()
                .where(r.run_id.in_(marked), r.lease_suspected_at.is_(None))
                .values(lease_suspected_at=moment)
            )
        return done

    return write_transaction(engine, write)


def _retry(conn: Connection, row: Any, moment: datetime) -> None:
    """Queue the run `row` again for its next attempt: a `run_retried` event after the last
    one recorded, saying which attempt follows and what became of the lost one (its worker,
    last heartbeat and lease, which the next claim replaces), and the next attempt's events
    numbered after it."""
    last = conn.execute(
        sa.select(sa.func.max(t.event.c.seq)).where(t.event.c.run_id == row.run_id)
    ).scalar()
    seq = int(last or 0) + 1
    lost = int(row.retries) + 1
    mark = {
        "seq": seq,
        "type": RETRIED,
        "actor": "harness",
        "t": None,
        "wall": moment.timestamp(),
        "payload": {
            "attempt": lost + 1,
            "of": int(row.retries_allowed) + 1,
            "reason": WORKER_LOST,
            "lost": {
                "attempt": lost,
                "worker": row.lease_owner,
                "heartbeatAt": utc_text(row.heartbeat_at),
                "leaseExpiredAt": utc_text(row.lease_expires_at),
                "eventsRecorded": seq - 1 - int(row.event_seq_base),
            },
        },
    }
    insert_events(conn, row.run_id, [mark])
    conn.execute(
        t.run.update()
        .where(t.run.c.run_id == row.run_id)
        .values(
            execution_status="pending",
            lease_owner=None,
            lease_expires_at=None,
            heartbeat_at=None,
            lease_suspected_at=None,
            retries=t.run.c.retries + 1,
            event_seq_base=seq,
        )
    )
