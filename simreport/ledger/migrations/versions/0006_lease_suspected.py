"""Two-phase reclaim of an expired lease: `run.lease_suspected_at`.

A reclaimer marks an expired lease first and reclaims the run only if it is still expired a
confirmation period later; a heartbeat clears the mark (docs/ledger.md).

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
