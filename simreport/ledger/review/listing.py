"""Reading the review back: every version with its status and last transition, and one
version's history, oldest step first, each step with its risk sign-off as a fact (who, when,
which version and sha256 it covers)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.errors import InputError
from .. import tables as t
from ..db import reading, utc_text
from ..errors import NotRecorded
from ..migrate import check_for_reading
from ..tables import DEFAULT_TENANT
from .authors import authors
from .locating import locate, risk_level
from .transitions import signoff_of


def list_versions(
    engine: Engine,
    *,
    kind: str | None = None,
    status: str | None = None,
    name: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> list[dict[str, Any]]:
    """Every scenario and asset version with its review status, sha256, a scenario's risk
    level, and its last transition (who, when, to what), scenarios first, then by name and
    version. `kind`, `status` and `name` (a scenario id or an asset name) narrow the list."""
    if kind is not None and kind not in t.VERSION_KINDS:
        raise InputError(
            f"unknown kind {kind!r}", path="--kind", expected=" or ".join(t.VERSION_KINDS)
        )
    if status is not None and status not in t.REVIEW_STATUSES:
        raise InputError(
            f"unknown review status {status!r}",
            path="--status",
            expected=", ".join(t.REVIEW_STATUSES),
        )
    check_for_reading(engine)
    with reading(engine) as conn:
        return versions_in(conn, kind=kind, status=status, name=name, tenant=tenant)


def versions_in(
    conn: Connection,
    *,
    kind: str | None = None,
    status: str | None = None,
    name: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> list[dict[str, Any]]:
    """`list_versions` on an open connection, its arguments checked by the caller."""
    rows: list[dict[str, Any]] = []
    last = _last_transitions(conn)
    if kind in (None, "scenario"):
        sv, s = t.scenario_version, t.scenario
        query = (
            sa.select(sv, s.c.owner, s.c.risk_level)
            .join(s, s.c.scenario_id == sv.c.scenario_id)
            .where(s.c.tenant_id == tenant)
        )
        if status is not None:
            query = query.where(sv.c.status == status)
        if name is not None:
            query = query.where(sv.c.scenario_id == name)
        for row in conn.execute(query.order_by(sv.c.scenario_id, sv.c.version)):
            rows.append(
                {
                    "kind": "scenario",
                    "id": row.scenario_id,
                    "name": row.scenario_id,
                    "type": None,
                    "version": row.version,
                    "status": row.status,
                    "sha256": row.spec_sha256,
                    "riskLevel": risk_level(row.spec, row.risk_level),
                    "owner": row.owner,
                    "source": row.source,
                    "lastTransition": _last_doc(
                        last, "scenario", row.scenario_id, row.version, row.spec_sha256
                    ),
                }
            )
    if kind in (None, "asset"):
        a, av = t.asset, t.asset_version
        query = (
            sa.select(av, a.c.name, a.c.asset_type, a.c.owner)
            .join(a, a.c.asset_id == av.c.asset_id)
            .where(a.c.tenant_id == tenant)
        )
        if status is not None:
            query = query.where(av.c.status == status)
        if name is not None:
            asset_type, sep, bare = name.partition(":")
            query = query.where(
                sa.and_(a.c.asset_type == asset_type, a.c.name == bare) if sep else a.c.name == name
            )
        for row in conn.execute(query.order_by(a.c.name, a.c.asset_type, av.c.version)):
            rows.append(
                {
                    "kind": "asset",
                    "id": row.asset_id,
                    "name": row.name,
                    "type": row.asset_type,
                    "version": row.version,
                    "status": row.status,
                    "sha256": row.content_sha256,
                    "riskLevel": None,
                    "owner": row.owner,
                    "source": row.content_ref,
                    "lastTransition": _last_doc(
                        last, "asset", row.asset_id, row.version, row.content_sha256
                    ),
                }
            )
    return rows


def _last_transitions(conn: Connection) -> dict[tuple[str, str, str], Any]:
    rt = t.review_transition
    latest = (
        sa.select(sa.func.max(rt.c.transition_id).label("transition_id"))
        .group_by(rt.c.version_kind, rt.c.object_id, rt.c.version)
        .subquery()
    )
    found = conn.execute(
        sa.select(rt).join(latest, latest.c.transition_id == rt.c.transition_id)
    ).all()
    return {(r.version_kind, r.object_id, r.version): r for r in found}


def _last_doc(
    last: dict[tuple[str, str, str], Any], kind: str, object_id: str, version: str, sha: str
) -> dict[str, Any] | None:
    row = last.get((kind, object_id, version))
    return None if row is None else _transition_doc(row, sha)


def history(
    engine: Engine, kind: str, name: str, version: str, *, tenant: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """A version's status, its sha256, its authors (who created or submitted it) and every
    transition it went through, oldest first."""
    if kind not in t.VERSION_KINDS:
        raise InputError(
            f"unknown kind {kind!r}", path="kind", expected=" or ".join(t.VERSION_KINDS)
        )
    check_for_reading(engine)
    with reading(engine) as conn:
        return history_in(conn, kind, name, version, tenant=tenant, missing=NotRecorded)


def history_in(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    *,
    tenant: str = DEFAULT_TENANT,
    missing: type[InputError] = NotRecorded,
) -> dict[str, Any]:
    """`history` on an open connection, raising `missing` for a version `tenant` does not
    hold."""
    rt = t.review_transition
    found = locate(conn, kind, name, version, tenant, missing)
    steps = conn.execute(
        sa.select(rt)
        .where(
            rt.c.version_kind == kind,
            rt.c.object_id == found.object_id,
            rt.c.version == version,
        )
        .order_by(rt.c.transition_id)
    ).all()
    wrote = authors(conn, kind, found.object_id, version)
    return {
        "kind": kind,
        "id": found.object_id,
        "name": found.name,
        "type": found.object_id.split(":", 2)[1] if kind == "asset" else None,
        "version": version,
        "status": found.status,
        "riskLevel": found.risk_level,
        "sha256": found.sha256,
        "authors": list(wrote),
        "transitions": [_transition_doc(step, found.sha256) for step in steps],
    }


def _transition_doc(row: Any, sha256: str) -> dict[str, Any]:
    """One recorded step; `sha256` is its version's, which a risk sign-off covers."""
    signoff = signoff_of(
        row.version_kind, row.object_id, row.version, sha256, row.risk_signoff, row.at
    )
    return {
        "from": row.from_status,
        "to": row.to_status,
        "reviewer": row.reviewer,
        "riskSignoff": None if signoff is None else signoff.to_doc(),
        "note": row.note,
        "at": utc_text(row.at),
    }
