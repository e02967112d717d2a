"""Two-phase reclaim of an expired lease: `run.lease_suspected_at`.

A reclaimer that finds a running run's lease expired no longer ends it at once: it notes when it
first found it so (`lease_suspected_at`), and reclaims the run only if the lease is still expired
and unrenewed a confirmation period later. A heartbeat clears the mark. A worker whose heartbeats
could not reach the ledger (the database down, its disk full) thus gets that period to renew its
lease once the ledger answers again, since marking needs the ledger to take writes too. Runs
recorded before this revision carry no mark: a reclaimer marks them the first time it looks.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

S = "sim"


def _schema() -> str | None:
    # Alembic's ALTER statements do not pass through SQLite's schema translate map.
    return S if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    op.add_column(
        "run", sa.Column("lease_suspected_at", sa.DateTime(timezone=True)), schema=_schema()
    )


def downgrade() -> None:
    op.drop_column("run", "lease_suspected_at", schema=_schema())
