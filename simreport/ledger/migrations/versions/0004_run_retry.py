"""The run service's retry of a run whose worker was lost.

`run.retries_allowed`, `run.retries` and `run.event_seq_base`, all 0 for earlier runs, which
were never retried (docs/ledger.md).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

S = "sim"
RUN_COLUMNS = ("retries_allowed", "retries", "event_seq_base")


def _schema() -> str | None:
    # Alembic's ALTER statements do not pass through SQLite's schema translate map.
    return S if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    for name in RUN_COLUMNS:
        op.add_column(
            "run",
            sa.Column(name, sa.Integer, nullable=False, server_default="0"),
            schema=_schema(),
        )


def downgrade() -> None:
    for name in reversed(RUN_COLUMNS):
        op.drop_column("run", name, schema=_schema())
