"""Reading the review back: every version with its status and last transition, and one
version's history, oldest step first."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.errors import InputError
from .. import tables as t
from ..db import as_utc, reading
from ..errors import NotRecorded
from ..migrate import check_for_reading
from ..tables import DEFAULT_TENANT
from .locating import locate, risk_level


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
    rows: list[dict[str, Any]] = []
    with reading(engine) as conn:
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
                        "lastTransition": last.get(("scenario", row.scenario_id, row.version)),
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
                    sa.and_(a.c.asset_type == asset_type, a.c.name == bare)
                    if sep
                    else a.c.name == name
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
                        "lastTransition": last.get(("asset", row.asset_id, row.version)),
                    }
                )
    return rows


def _last_transitions(conn: Connection) -> dict[tuple[str, str, str], dict[str, Any]]:
    rt = t.review_transition
    latest = (
        sa.select(sa.func.max(rt.c.transition_id).label("transition_id"))
        .group_by(rt.c.version_kind, rt.c.object_id, rt.c.version)
        .subquery()
    )
    found = conn.execute(
        sa.select(rt).join(latest, latest.c.transition_id == rt.c.transition_id)
    ).all()
    return {(r.version_kind, r.object_id, r.version): _transition_doc(r) for r in found}


def history(
    engine: Engine, kind: str, name: str, version: str, *, tenant: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """A version's status and every transition it went through, oldest first."""
    if kind not in t.VERSION_KINDS:
        raise InputError(
            f"unknown kind {kind!r}", path="kind", expected=" or ".join(t.VERSION_KINDS)
        )
    check_for_reading(engine)
    rt = t.review_transition
    with reading(engine) as conn:
        found = locate(conn, kind, name, version, tenant, NotRecorded)
        steps = conn.execute(
            sa.select(rt)
            .where(
                rt.c.version_kind == kind,
                rt.c.object_id == found.object_id,
                rt.c.version == version,
            )
            .order_by(rt.c.transition_id)
        ).all()
    return {
        "kind": kind,
        "id": found.object_id,
        "name": found.name,
        "version": version,
        "status": found.status,
        "riskLevel": found.risk_level,
        "transitions": [_transition_doc(step) for step in steps],
    }


def _transition_doc(row: Any) -> dict[str, Any]:
    at = as_utc(row.at)
    return {
        "from": row.from_status,
        "to": row.to_status,
        "reviewer": row.reviewer,
        "riskSignoff": row.risk_signoff,
        "note": row.note,
        "at": None if at is None else at.isoformat().replace("+00:00", "Z"),
    }
