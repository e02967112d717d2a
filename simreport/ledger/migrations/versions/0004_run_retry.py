"""The run service's retry of a run whose worker was lost.

A run queued while the service retries lost runs (`simreport api --retry-lost-runs 1`) carries
`retries_allowed`: how many times it goes back to `pending` when its worker vanished, rather than
ending `crashed` ("worker_lost"); `retries` counts the times it did, so it is on attempt
retries + 1. Its events stay one sequence across attempts: a retry is marked by a harness event,
and `event_seq_base` is the seq of that mark, after which the current attempt's events are
numbered (its kernel's event n is recorded as seq event_seq_base + n). Runs recorded before this
revision were never retried: all three are 0.

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
