"""Asset versions over HTTP: the versions of the tenant's asset library the ledger holds (each
pinned as a draft the first time a run request or an import resolves it), one version's review
with its steps, and the review steps themselves, taken as for scenario versions
(`reviewing.review_step`). Assets belong to the tenant, not to a namespace."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from ...core.errors import InputError
from ...core.execution_policy import ReviewPolicy
from ...ledger.db import reading
from ...ledger.migrate import prepare_once
from ...ledger.review import history_in, versions_in
from ..errors import NotFound
from .idempotency import IdempotencyKey
from .reviewing import last_step, review_step, step_body


def asset_ref(asset_type: str, name: str) -> str:
    """How the ledger's review names an asset of one type: `TYPE:NAME`."""
    return f"{asset_type}:{name}"


def asset_versions(
    engine: Engine,
    *,
    tenant: str,
    asset_type: str | None = None,
    name: str | None = None,
    status: str | None = None,
) -> dict[str, Any]:
    """The asset versions of `tenant` the ledger holds, by name, type and version, with their
    review status, sha256, owner and last review step (models.AssetVersionList); `asset_type`,
    `name` and `status` narrow the list."""
    prepare_once(engine)
    wanted = None if name is None else name if asset_type is None else asset_ref(asset_type, name)
    with reading(engine) as conn:
        found = versions_in(conn, kind="asset", status=status, name=wanted, tenant=tenant)
    return {
        "versions": [
            {
                "asset_type": v["type"],
                "name": v["name"],
                "version": v["version"],
                "status": v["status"],
                "sha256": v["sha256"],
                "owner": v["owner"],
                "last_step": last_step(v),
            }
            for v in found
            if asset_type is None or v["type"] == asset_type
        ]
    }


def asset_version(
    engine: Engine, *, tenant: str, asset_type: str, name: str, version: str
) -> dict[str, Any]:
    """One asset version's review: its status, sha256, authors and every review step
    (models.AssetVersionDetail); 404 for a version `tenant` does not hold."""
    prepare_once(engine)
    with reading(engine) as conn:
        try:
            found = history_in(conn, "asset", asset_ref(asset_type, name), version, tenant=tenant)
        except InputError as exc:
            raise NotFound(exc.message, code="unknown_version") from None
    return {
        "asset_type": found["type"],
        "name": found["name"],
        "version": found["version"],
        "status": found["status"],
        "sha256": found["sha256"],
        "authors": found["authors"],
        "steps": [step_body(step) for step in found["transitions"]],
    }


def review_asset_version(
    engine: Engine,
    *,
    tenant: str,
    asset_type: str,
    name: str,
    version: str,
    action: str,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    policy: ReviewPolicy | None = None,
    idempotency: IdempotencyKey | None = None,
    at: datetime | None = None,
) -> str:
    """One review action on an asset version as `reviewer` (the token's name), in the
    transaction that stores `idempotency`; refusals as `reviewing.review_step` gives them.
    Returns the version's new status."""
    return review_step(
        engine,
        tenant=tenant,
        kind="asset",
        name=asset_ref(asset_type, name),
        version=version,
        action=action,
        reviewer=reviewer,
        note=note,
        risk_signoff=risk_signoff,
        policy=policy,
        idempotency=idempotency,
        at=at,
    )


__all__ = ["asset_ref", "asset_version", "asset_versions", "review_asset_version"]
