"""The run service: queued runs with leases, cancellation, and idempotency keys.

Lease, heartbeat, cancellation, request and principal columns and `attempts` on `run`, and the
`idempotency_key` table (docs/ledger.md).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

S = "sim"
JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
Timestamp = sa.DateTime(timezone=True)

RUN_COLUMNS = (
    ("lease_owner", sa.Text),
    ("lease_expires_at", Timestamp),
    ("heartbeat_at", Timestamp),
    ("cancel_requested_at", Timestamp),
    ("cancel_reason", sa.Text),
    ("request", JSONDoc),
    ("principal", sa.Text),
)


def _schema() -> str | None:
    # Alembic's ALTER statements do not pass through SQLite's schema translate map.
    return S if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    for name, type_ in RUN_COLUMNS:
        op.add_column("run", sa.Column(name, type_), schema=_schema())
    op.add_column(
        "run",
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        schema=_schema(),
    )
    op.create_index(
        op.f("ix_run_execution_status_created_at"),
        "run",
        ["execution_status", "created_at"],
        schema=_schema(),
    )
    op.create_table(
        "idempotency_key",
        sa.Column("principal", sa.Text, nullable=False),
        sa.Column("key", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("request_sha256", sa.Text, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("response", JSONDoc, nullable=False),
        sa.Column(
            "created_at", Timestamp, nullable=False, server_default=sa.text("CURRENT_TIMESTAMP")
        ),
        sa.PrimaryKeyConstraint("principal", "key", name=op.f("pk_idempotency_key")),
        schema=S,
    )


def downgrade() -> None:
    op.drop_table("idempotency_key", schema=S)
    op.drop_index(op.f("ix_run_execution_status_created_at"), table_name="run", schema=_schema())
    op.drop_column("run", "attempts", schema=_schema())
    for name, _ in reversed(RUN_COLUMNS):
        op.drop_column("run", name, schema=_schema())
