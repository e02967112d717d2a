"""Domain and user-flow assets: `asset.asset_type` also takes `domain` and `user_flow`.

The testbed world's domains and user flows are versioned files of the asset library like the
others. SQLite builds the small `asset` table again (foreign keys checked at commit, the triggers
of the tables around it untouched); PostgreSQL replaces the constraint. Why: docs/ledger.md.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

S = "sim"
BEFORE = (
    "user_policy",
    "env_data",
    "tool_contract",
    "simulator_config",
    "evaluation_spec",
    "agent",
    "prompt",
    "rubric",
)
ADDED = ("domain", "user_flow")
NAME = "ck_asset_asset_type"


def upgrade() -> None:
    _asset_types(BEFORE + ADDED)


def downgrade() -> None:
    table = f"{S}.asset" if _postgresql() else "asset"
    listed = ", ".join(f"'{kind}'" for kind in ADDED)
    query = f"SELECT count(*) FROM {table} WHERE asset_type IN ({listed})"
    (held,) = op.get_bind().exec_driver_sql(query).one()
    if held:
        raise RuntimeError(
            f"the ledger holds {held} asset(s) of type {' or '.join(ADDED)}, which revision 0008 "
            "cannot store: it stays at 0009"
        )
    _asset_types(BEFORE)


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _comparisons(values: tuple[str, ...]) -> str:
    # Spelled as revision 0005 spells every check, so that its downgrade finds this one.
    return " OR ".join(f"asset_type = '{v}'" for v in values)


def _asset_types(values: tuple[str, ...]) -> None:
    if _postgresql():
        op.execute(
            f"ALTER TABLE {S}.asset DROP CONSTRAINT {NAME}, "
            f"ADD CONSTRAINT {NAME} CHECK ({_comparisons(values)})"
        )
        return
    # SQLite cannot alter a CHECK; the small table is built again under its own name. Its
    # rows wait in a temporary table: dropping `asset` orphans asset_version's rows for a moment,
    # which the deferred foreign keys allow, and putting the rows back under the same name is
    # what clears that count again before commit (a rename would not: foreign keys cannot be
    # turned off inside the migration's transaction). `asset` has no triggers of its own (0001
    # and 0008 put them on the tables around it), so the rebuild drops none.
    op.execute("PRAGMA defer_foreign_keys = ON")
    op.execute("CREATE TEMP TABLE asset_rows AS SELECT * FROM asset")
    op.drop_table("asset", schema=S)
    op.create_table(
        "asset",
        sa.Column("asset_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("asset_type", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("asset_id", name=op.f("pk_asset")),
        sa.UniqueConstraint(
            "tenant_id", "asset_type", "name", name=op.f("uq_asset_tenant_id_asset_type_name")
        ),
        sa.CheckConstraint(_comparisons(values), name=op.f(NAME)),
        schema=S,
    )
    op.execute(
        "INSERT INTO asset (asset_id, tenant_id, asset_type, name, owner) "
        "SELECT asset_id, tenant_id, asset_type, name, owner FROM temp.asset_rows"
    )
    op.execute("DROP TABLE temp.asset_rows")
