"""What a service run recorded of itself: `run.recorded_manifest`.

A run queued through the service shares the manifest frozen when it was queued (scenario
version, resolved assets, seed); the manifest.json the run wrote when it ran — provider, model,
kernel version and fingerprint — had no place, so `ledger show` could not say what ran. Runs
ingested from a folder keep it as their manifest's document and leave this column empty.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-20
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

S = "sim"
JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _schema() -> str | None:
    # Alembic's ALTER statements do not pass through SQLite's schema translate map.
    return S if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    op.add_column("run", sa.Column("recorded_manifest", JSONDoc), schema=_schema())


def downgrade() -> None:
    op.drop_column("run", "recorded_manifest", schema=_schema())
