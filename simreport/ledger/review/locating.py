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
    """A version the ledger holds: its object's id, its name, status, risk level (None for an
    asset) and the sha256 pinned for it."""

    object_id: str
    name: str
    status: str
    risk_level: str | None
    sha256: str


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
            sa.select(sv.c.status, sv.c.spec, sv.c.spec_sha256, s.c.risk_level)
            .join(s, s.c.scenario_id == sv.c.scenario_id)
            .where(s.c.tenant_id == tenant, sv.c.scenario_id == name, sv.c.version == version)
        ).one_or_none()
        if row is None:
            raise _unknown(conn, kind, name, version, missing, [name])
        level = risk_level(row.spec, row.risk_level)
        return Found(name, name, row.status, level, row.spec_sha256)
    asset_id = _asset_id(conn, name, tenant, missing)
    av = t.asset_version
    found = conn.execute(
        sa.select(av.c.status, av.c.content_sha256).where(
            av.c.asset_id == asset_id, av.c.version == version
        )
    ).one_or_none()
    if found is None:
        raise _unknown(conn, kind, name, version, missing, [asset_id])
    return Found(asset_id, asset_id.split(":", 2)[2], found.status, None, found.content_sha256)


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
