"""Starting and cancelling runs. `start_run` queues a run as a `pending` row whose manifest is
frozen at once (`manifests.freeze`), within the principal's quota (429) and the queue's limit
(503), counted in the transaction that queues it; a regression run needs every version it
records online (422). `request_cancel` ends a pending run at once and asks a running one's
worker to stop it (announced on CANCEL_CHANNEL; `cancellations` is what a worker looks up)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.errors import join_path
from ...core.execution_policy import ExecutionPolicy
from ...ledger import tables as t
from ...ledger.bulk import insert_ignoring_duplicates, pipelined
from ...ledger.db import reading, utc_now
from ...ledger.migrate import prepare_once
from ..errors import (
    Conflict,
    NotFound,
    QueueFull,
    QuotaExceeded,
    Unprocessable,
    issue,
    one_of,
)
from .idempotency import IdempotencyKey, replayed, store_answer, take_key
from .leases import locked_run
from .manifests import (
    Resolved,
    agent_under_test,
    asset_id,
    freeze,
    pin,
    refuse_boundary_replaced,
    refuse_unrunnable,
    resolve,
    run_lock,
    version_checks,
)
from .scenarios import frozen_spec, run_document, validated
from .transaction import write_transaction

CONDITION: Final = "service"
"""The condition id of every run the service starts (it runs no audit)."""

TERMINAL: Final = ("completed", "crashed", "cancelled")
ACTIVE: Final = ("pending", "running")
MAX_RETRIES: Final = 1
"""How many times a run whose worker was lost may go back to pending, at most."""


def start_run(
    engine: Engine,
    *,
    tenant: str,
    principal: str | None,
    scenario_id: str,
    version: str,
    mode: str,
    seed: int | None,
    budget: Mapping[str, Any] | None,
    purpose: str,
    library: Path,
    idempotency: IdempotencyKey | None = None,
    capacity: Capacity | None = None,
    retries: int = 0,
    policy: ExecutionPolicy | None = None,
) -> tuple[str, str]:
    """Queue a run of `scenario_id@version`: its manifest frozen now (every asset reference
    resolved in `library` and pinned), the run `pending` with the request and who made it.
    Returns (run_id, manifest_id). 404 for an unknown scenario or version; 422 for a request
    the version cannot run with, an asset reference that does not resolve or changed under its
    version, and — purpose regression — a scenario version or resolved asset version that is
    not online (each named). With `capacity`, 429 when `principal`'s runs pending or running
    reach its quota and 503 when the queue's reach its limit, counted in the transaction that
    queues the run (requests sent together never overshoot them). `retries`: how many times
    (0 to MAX_RETRIES) the run goes back to pending when its worker is lost. 422
    `sut_boundary_replaced` for a run that would replace something inside its SUT boundary
    (loading it would refuse it), located at the field that does. With `policy` (a client's
    request), 422 for what the version's spec may not carry under it or could never run
    (`refuse_unrunnable`), whoever submitted it."""
    if not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"retries must be 0 to {MAX_RETRIES}, not {retries}")
    issues = []
    if mode not in t.RUN_MODES:
        issues.append(issue("mode", f"unknown mode {mode!r}", one_of(t.RUN_MODES)))
    if purpose not in t.PURPOSES:
        issues.append(issue("purpose", f"unknown purpose {purpose!r}", one_of(t.PURPOSES)))
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        issues.append(issue("seed", f"{seed!r} is not a seed", "an integer ≥ 0"))
    if budget is not None and not isinstance(budget, Mapping):
        issues.append(issue("budget", "not a mapping", "maxTurns, maxToolCalls, wallClock"))
    if issues:
        raise Unprocessable(f"{issues[0]['path']}: {issues[0]['message']}", issues=issues)
    prepare_once(engine)
    spec, spec_sha = frozen_spec(engine, scenario_id, version, tenant)
    doc = run_document(spec, seed=seed, budget=budget, mode=mode)
    scenario = validated(doc, _request_path)
    if purpose == "regression" and scenario.identity is None:
        raise Unprocessable(
            "a regression run needs a scenario with an identity (id and version)",
            code="version_not_online",
            issues=[issue("spec.identity", "missing", "an identity; or purpose exploration")],
        )
    if policy is not None:
        resolved = refuse_unrunnable(scenario, policy, Path(library), _request_path)
    else:
        resolved = resolve(scenario, Path(library))
        refuse_boundary_replaced(scenario, agent_under_test(resolved), _request_path)
    pinned = pin(engine, resolved, tenant)
    with reading(engine) as conn:
        scenario_status, statuses = _statuses(conn, scenario_id, version, resolved, tenant)
    if purpose == "regression":
        _refuse_not_online(scenario_id, version, resolved, scenario_status, statuses)
    checks = version_checks(
        purpose=purpose,
        scenario={
            "id": scenario.identity.id if scenario.identity is not None else None,
            "version": version,
            "specSha256": spec_sha,
        },
        scenario_status=scenario_status,
        resolved={
            r.slot: {"name": r.name, "version": r.version, "sha256": r.sha256} for r in resolved
        },
        statuses=statuses,
    )
    frozen = freeze(
        scenario,
        scenario_id=scenario_id,
        version=version,
        spec_sha256=spec_sha,
        resolved=resolved,
        pinned=pinned,
        mode=mode,
        purpose=purpose,
        lock=run_lock(scenario, resolved, Path(library), checks),
    )
    manifest_id = frozen.manifest_id
    request = {
        "scenario_id": scenario_id,
        "version": version,
        "mode": mode,
        "seed": seed,
        "budget": dict(budget) if budget is not None else None,
        "purpose": purpose,
    }

    def write(conn: Connection) -> tuple[str, str]:
        stored = take_key(conn, idempotency, tenant)
        if stored is not None:
            return str(replayed(stored, "run_id")), str(replayed(stored, "manifest_id"))
        if capacity is not None:
            _check_capacity(conn, capacity, principal)
        if purpose == "regression":
            _all_online(conn, scenario_id, version, resolved, tenant)
        now = utc_now()
        run_id = "run-" + uuid.uuid4().hex[:24]
        manifest_row, asset_rows = frozen.rows(
            tenant=tenant, scenario_id=scenario_id, version=version, seed=scenario.seed, now=now
        )
        run_row = {
            "run_id": run_id,
            "tenant_id": tenant,
            "manifest_id": manifest_id,
            "mode": mode,
            "execution_status": "pending",
            "validity_status": "unchecked",
            "evidence_status": "unchecked",
            "quality_ref": None,
            "trace_id": uuid.uuid4().hex,
            "created_at": now,
            "condition_id": CONDITION,
            "replication": 0,
            "seed_path": [scenario.seed],
            "engine": scenario.world or "external",
            "result": {},
            "content_sha256": "",
            "purpose": purpose,
            "request": request,
            "principal": principal,
            "attempts": 0,
            "retries_allowed": retries,
        }
        # These read nothing back: on PostgreSQL they go in one round trip (a round trip each
        # was most of queueing's cost), the manifest's assets in one statement.
        with pipelined(conn):
            insert_ignoring_duplicates(conn, t.manifest, [manifest_row])
            insert_ignoring_duplicates(conn, t.manifest_asset, asset_rows)
            conn.execute(_QUEUED, run_row)
            store_answer(conn, idempotency, 202, {"run_id": run_id, "manifest_id": manifest_id})
        return run_id, manifest_id

    return write_transaction(engine, write)


_QUEUED: Final = t.run.insert()
"""A run queued: executed with its columns' values."""


def _request_path(path: str) -> str:
    """Where in a run request a problem of its run document lies."""
    for inner, outer in (
        ("execution.budget", "budget"),
        ("execution.mode", "mode"),
        ("execution.seed", "seed"),
    ):
        if path == inner or path.startswith(inner + "."):
            return outer + path[len(inner) :]
    return "seed" if path == "seed" else join_path("spec", path)


def _statuses(
    conn: Connection, scenario_id: str, version: str, resolved: Sequence[Resolved], tenant: str
) -> tuple[str, dict[str, str]]:
    """The review status of the scenario version, and of each resolved asset version (by
    slot), as the ledger holds them now."""
    sv, av = t.scenario_version.c, t.asset_version.c
    status = conn.execute(
        sa.select(sv.status).where(sv.scenario_id == scenario_id, sv.version == version)
    ).scalar_one()
    statuses = {}
    for r in resolved:
        statuses[r.slot] = conn.execute(
            sa.select(av.status).where(
                av.asset_id == asset_id(tenant, r.kind, r.name), av.version == r.version
            )
        ).scalar_one()
    return str(status), statuses


def _all_online(
    conn: Connection, scenario_id: str, version: str, resolved: Sequence[Resolved], tenant: str
) -> None:
    """422 naming every version a regression run would record that is not online."""
    status, statuses = _statuses(conn, scenario_id, version, resolved, tenant)
    _refuse_not_online(scenario_id, version, resolved, status, statuses)


def _refuse_not_online(
    scenario_id: str,
    version: str,
    resolved: Sequence[Resolved],
    status: str,
    statuses: Mapping[str, str],
) -> None:
    refused = []
    if status != "online":
        refused.append(("version", f"{scenario_id}@{version}", status))
    for r in resolved:
        if statuses[r.slot] != "online":
            refused.append((join_path("spec", r.slot), f"{r.name}@{r.version}", statuses[r.slot]))
    if refused:
        listed = ", ".join(f"{name} ({held})" for _, name, held in refused)
        raise Unprocessable(
            f"a regression run needs every version it records online: {listed}; review and "
            "publish them, or run as exploration",
            code="version_not_online",
            issues=[issue(path, f"{name} is {held}", "online") for path, name, held in refused],
        )


@dataclass(frozen=True)
class Capacity:
    """How many runs may be pending or running: per principal (None: no limit) and in all."""

    quota: int | None
    max_queue: int
    retry_after: float


QUEUE_LOCK: Final = 0x51_4D_52_51  # any constant: the one advisory lock queueing takes


def _check_capacity(conn: Connection, capacity: Capacity, principal: str | None) -> None:
    """429 or 503 (see start_run), inside the write transaction. On PostgreSQL queueing takes
    one transaction-scoped advisory lock first, so two transactions never count the same
    state; SQLite lets one writer in at a time already."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({QUEUE_LOCK})")
    quota = capacity.quota
    in_all, of_principal = conn.execute(_ACTIVE_COUNTS, {"p_principal": principal}).one()
    if quota is not None and principal is not None and of_principal >= quota:
        raise QuotaExceeded(
            f"the token {principal!r} has {quota} run(s) pending or running, its quota",
            retry_after=capacity.retry_after,
        )
    if in_all >= capacity.max_queue:
        raise QueueFull(
            f"the queue holds {capacity.max_queue} runs, its limit",
            retry_after=capacity.retry_after,
        )


def count_active(engine: Engine, *, principal: str | None = None) -> int:
    """Runs pending or running (of `principal` only, when given): for quotas and a full queue."""
    prepare_once(engine)
    with reading(engine) as conn:
        return _active(conn, principal)


_ACTIVE_RUNS: Final = (
    sa.select(sa.func.count())
    .select_from(t.run)
    .where(
        # OR, not IN: SQLite would build a temporary index of the list for every count.
        sa.or_(*(t.run.c.execution_status == status for status in ACTIVE))
    )
)
_ACTIVE_RUNS_OF: Final = _ACTIVE_RUNS.where(t.run.c.principal == sa.bindparam("p_principal"))
_ACTIVE_COUNTS: Final = _ACTIVE_RUNS.add_columns(
    sa.func.count().filter(t.run.c.principal == sa.bindparam("p_principal"))
)
"""Runs pending or running: in all, and of one principal."""


def _active(conn: Connection, principal: str | None = None) -> int:
    if principal is None:
        return int(conn.execute(_ACTIVE_RUNS).scalar_one())
    return int(conn.execute(_ACTIVE_RUNS_OF, {"p_principal": principal}).scalar_one())


CANCEL_CHANNEL: Final = "simreport_cancel"
"""The PostgreSQL notification channel a cancellation is announced on, with the run's id as its
payload: sent in the transaction that records the request, so a worker listening hears it as it
commits (cancellation.py)."""


def request_cancel(
    engine: Engine,
    run_id: str,
    reason: str,
    *,
    tenant: str,
    idempotency: IdempotencyKey | None = None,
) -> str:
    """Cancel a run. A pending one ends `cancelled` at once: returns "cancelled". For a running
    one the request is recorded and announced to its worker (PostgreSQL: a notification on
    CANCEL_CHANNEL, sent as this transaction commits; SQLite: the worker looks every fraction
    of a second), which stops the run at its next step: returns "cancelling", what the run's
    status reads until it has ended — `cancelled` (its evidence partial), or whatever it ended
    as when it finished before the stop reached it. 404 for a run `tenant` does not hold, 409
    when it has ended."""

    def write(conn: Connection) -> str:
        stored = take_key(conn, idempotency, tenant)
        if stored is not None:
            return str(replayed(stored, "execution_status"))
        row = locked_run(conn, run_id, tenant)
        if row is None:
            raise NotFound(f"there is no run {run_id}", code="unknown_run")
        if row.execution_status in TERMINAL:
            raise Conflict(
                f"run {run_id} has ended already ({row.execution_status})", code="terminal"
            )
        now = utc_now()
        r = t.run.c
        if row.execution_status == "pending":
            conn.execute(
                t.run.update()
                .where(r.run_id == run_id, r.execution_status == "pending")
                .values(
                    execution_status="cancelled",
                    ended_at=now,
                    terminal_reason=f"cancelled: {reason}",
                    cancel_requested_at=now,
                    cancel_reason=reason,
                )
            )
            answer = "cancelled"
        else:
            if row.cancel_requested_at is None:
                conn.execute(
                    t.run.update()
                    .where(r.run_id == run_id)
                    .values(cancel_requested_at=now, cancel_reason=reason)
                )
            if conn.dialect.name == "postgresql":
                conn.execute(_ANNOUNCE, {"p_channel": CANCEL_CHANNEL, "p_run_id": run_id})
            answer = CANCELLING
        store_answer(conn, idempotency, 202, {"execution_status": answer})
        return answer

    return write_transaction(engine, write)


CANCELLING: Final = "cancelling"
"""The execution status a running run whose cancellation was asked reads as until it has ended
(the ledger keeps it `running`, with the request's time and reason)."""

_ANNOUNCE: Final = sa.text("SELECT pg_notify(:p_channel, :p_run_id)")

_CANCELS: Final = sa.select(t.run.c.run_id, t.run.c.cancel_reason).where(
    t.run.c.run_id.in_(sa.bindparam("p_run_ids", expanding=True)),
    t.run.c.execution_status == "running",
    t.run.c.cancel_requested_at.is_not(None),
)


def cancellations(engine: Engine, run_ids: Sequence[str]) -> dict[str, str | None]:
    """Of the running runs `run_ids`, those whose cancellation was asked: run id → reason."""
    if not run_ids:
        return {}
    prepare_once(engine)
    with reading(engine) as conn:
        return {
            str(run_id): reason
            for run_id, reason in conn.execute(_CANCELS, {"p_run_ids": list(run_ids)})
        }
