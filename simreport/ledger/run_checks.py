"""What the ledger tells a run to check before it starts: pinned digests and review statuses.

The harness asks here before an audit or a run and hands the answer to every run as a
`RunChecks` (core.versions); the kernel compares while loading and never reads the ledger
itself. Reading costs two queries, whatever the number of runs.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from ..core.versions import Purpose, RunChecks, VersionState, version_key
from . import tables as t
from .db import describe, reading
from .migrate import prepare_once
from .tables import DEFAULT_TENANT


def read_checks(
    engine: Engine,
    *,
    scenario_id: str | None,
    purpose: Purpose,
    tenant: str = DEFAULT_TENANT,
) -> RunChecks:
    """Every version of scenario `scenario_id` and every asset version of `tenant` the ledger
    holds, with its pinned digest and review status. A new ledger is created (and an older
    one upgraded) first, as by any writer: the runs asked about are recorded next."""
    prepare_once(engine)
    scenarios: dict[str, VersionState] = {}
    assets: dict[str, VersionState] = {}
    with reading(engine) as conn:
        if scenario_id is not None:
            rows = conn.execute(
                sa.select(
                    t.scenario_version.c.version,
                    t.scenario_version.c.spec_sha256,
                    t.scenario_version.c.status,
                ).where(t.scenario_version.c.scenario_id == scenario_id)
            )
            for version, sha, status in rows:
                scenarios[version_key(scenario_id, version)] = VersionState(
                    sha256=sha, status=status
                )
        rows = conn.execute(
            sa.select(
                t.asset.c.name,
                t.asset_version.c.version,
                t.asset_version.c.content_sha256,
                t.asset_version.c.status,
            )
            .join(t.asset, t.asset.c.asset_id == t.asset_version.c.asset_id)
            .where(t.asset.c.tenant_id == tenant)
        )
        for name, version, sha, status in rows:
            assets[version_key(name, version)] = VersionState(sha256=sha, status=status)
    return RunChecks(
        purpose=purpose,
        scenarios=scenarios,
        assets=assets,
        ledger=describe(engine.url.render_as_string(hide_password=False)),
    )


__all__ = ["read_checks"]
