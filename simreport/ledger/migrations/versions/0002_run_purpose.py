"""Run purpose and derived scenario versions.

`run.purpose` (`regression` or `exploration`; earlier runs were exploration runs) and
`scenario_version.derived_from` (docs/ledger.md).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

S = "sim"
PURPOSES = ("regression", "exploration")
CHECK = "purpose IN (" + ",".join(f"'{p}'" for p in PURPOSES) + ")"


def _schema() -> str | None:
    # Alembic's ALTER statements do not pass through SQLite's schema translate map.
    return S if op.get_bind().dialect.name == "postgresql" else None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.add_column(
            "run",
            sa.Column("purpose", sa.Text, nullable=False, server_default="exploration"),
            schema=S,
        )
        op.create_check_constraint(op.f("ck_run_purpose"), "run", CHECK, schema=S)
    else:
        # SQLite adds a column with its own check; existing rows are tested against it.
        op.execute(
            "ALTER TABLE run ADD COLUMN purpose TEXT NOT NULL DEFAULT 'exploration' "
            f"CONSTRAINT ck_run_purpose CHECK ({CHECK})"
        )
    op.add_column("scenario_version", sa.Column("derived_from", sa.Text), schema=_schema())
    op.create_index(op.f("ix_run_purpose"), "run", ["purpose"], schema=_schema())


def downgrade() -> None:
    op.drop_index(op.f("ix_run_purpose"), table_name="run", schema=_schema())
    op.drop_column("scenario_version", "derived_from", schema=_schema())
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint(op.f("ck_run_purpose"), "run", schema=S)
    op.drop_column("run", "purpose", schema=_schema())
