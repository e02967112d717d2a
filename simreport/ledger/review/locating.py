"""Finding a scenario or asset version in the ledger by its name and version (an asset's name
may need its type, `TYPE:NAME`), with its status and risk level; what is missing is refused with
the versions the ledger does hold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ...core.errors import InputError
from .. import tables as t


@dataclass(frozen=True)
class Found:
    """A version the ledger holds: its object's id, its name, status and risk level."""

    object_id: str
    name: str
    status: str
    risk_level: str | None


def version_table(kind: str) -> tuple[sa.Table, tuple[sa.ColumnElement[Any], ...]]:
    """The table holding a kind's versions, and its key columns (the object's id, the version)."""
    if kind == "scenario":
        return t.scenario_version, (
            t.scenario_version.c.scenario_id,
            t.scenario_version.c.version,
        )
    return t.asset_version, (t.asset_version.c.asset_id, t.asset_version.c.version)


def locate(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    tenant: str,
    missing: type[InputError],
) -> Found:
    """The version `name@version` of a scenario or asset, raising `missing` when the ledger
    does not hold it."""
    if kind == "scenario":
        sv, s = t.scenario_version, t.scenario
        row = conn.execute(
            sa.select(sv.c.status, sv.c.spec, s.c.risk_level)
            .join(s, s.c.scenario_id == sv.c.scenario_id)
            .where(s.c.tenant_id == tenant, sv.c.scenario_id == name, sv.c.version == version)
        ).one_or_none()
        if row is None:
            raise _unknown(conn, kind, name, version, missing, [name])
        return Found(name, name, row.status, risk_level(row.spec, row.risk_level))
    asset_id = _asset_id(conn, name, tenant, missing)
    status = conn.execute(
        sa.select(t.asset_version.c.status).where(
            t.asset_version.c.asset_id == asset_id, t.asset_version.c.version == version
        )
    ).scalar_one_or_none()
    if status is None:
        raise _unknown(conn, kind, name, version, missing, [asset_id])
    return Found(asset_id, asset_id.split(":", 2)[2], status, None)


def risk_level(spec: Any, recorded: str) -> str:
    """The version's own risk level (its spec's identity), else the scenario's."""
    identity = spec.get("identity") if isinstance(spec, dict) else None
    level = identity.get("riskLevel") if isinstance(identity, dict) else None
    return level if isinstance(level, str) else recorded


def _asset_id(conn: Connection, name: str, tenant: str, missing: type[InputError]) -> str:
    """The asset `name` (or `TYPE:NAME`) names; two asset types sharing a name need the type."""
    asset_type, sep, bare = name.partition(":")
    query = sa.select(t.asset.c.asset_id, t.asset.c.asset_type).where(t.asset.c.tenant_id == tenant)
    if sep:
        query = query.where(t.asset.c.asset_type == asset_type, t.asset.c.name == bare)
    else:
        query = query.where(t.asset.c.name == name)
    found = conn.execute(query.order_by(t.asset.c.asset_type)).all()
    if not found:
        raise missing(
            f"the ledger holds no asset {name!r}",
            expected="an asset name `simreport review list --kind asset` shows",
        )
    if len(found) > 1:
        raise missing(
            f"{len(found)} asset types share the name {name!r}: say which",
            expected=" or ".join(f"{row.asset_type}:{name}" for row in found),
        )
    return str(found[0].asset_id)


def _unknown(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    error: type[InputError],
    object_ids: Sequence[str],
) -> InputError:
    _, keys = version_table(kind)
    versions = sorted(conn.execute(sa.select(keys[1]).where(keys[0].in_(object_ids))).scalars())
    held = (
        f"it holds {', '.join(versions)}" if versions else f"it holds no version of {kind} {name}"
    )
    return error(f"the ledger holds no {kind} {name}@{version}: {held}")
