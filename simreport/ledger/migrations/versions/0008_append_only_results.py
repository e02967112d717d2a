"""Append-only results and version content; no logical time for a fault plan that has none.

The database refuses UPDATE, DELETE and TRUNCATE on observations, evidence, completeness, fault
plans and steps, and on what a scenario or asset version holds (its review status still moves).
A call- or turn-triggered fault plan stores `at_logical_ms` NULL. Why: docs/ledger.md.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

S = "sim"
APPEND_ONLY = (
    "observation",
    "observation_missing",
    "evidence",
    "completeness",
    "fault_plan",
    "fault_record",
)
CONTENT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # table: (its content columns, frozen; the columns that may still change)
    "scenario_version": (
        (
            "scenario_id",
            "version",
            "spec",
            "spec_sha256",
            "source",
            "derived_from",
            "created_by",
            "created_at",
        ),
        ("status",),
    ),
    "asset_version": (
        ("asset_id", "version", "content_ref", "content_sha256", "created_at"),
        ("status",),
    ),
}


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    _no_logical_time()
    if _postgresql():
        _postgresql_triggers()
    else:
        _sqlite_triggers()


def downgrade() -> None:
    if _postgresql():
        for table in APPEND_ONLY:
            op.execute(f"DROP TRIGGER {table}_append_only ON {S}.{table}")
            op.execute(f"DROP TRIGGER {table}_no_truncate ON {S}.{table}")
        for table in CONTENT:
            for name in ("content", "no_delete", "no_truncate"):
                op.execute(f"DROP TRIGGER {table}_{name} ON {S}.{table}")
        op.execute(f"DROP FUNCTION {S}.refuse_content_change()")
    else:
        for table in APPEND_ONLY:
            for action in ("update", "delete"):
                op.execute(f"DROP TRIGGER {table}_no_{action}")
        for table in CONTENT:
            op.execute(f"DROP TRIGGER {table}_content")
            op.execute(f"DROP TRIGGER {table}_no_delete")
    # Before this revision a plan without a logical time stored 0.
    plan = sa.table("fault_plan", sa.column("at_logical_ms"), schema=_schema())
    op.execute(plan.update().where(plan.c.at_logical_ms.is_(None)).values(at_logical_ms=0))
    with op.batch_alter_table("fault_plan", schema=_schema()) as batch:
        batch.alter_column("at_logical_ms", existing_type=sa.BigInteger(), nullable=False)


def _schema() -> str | None:
    # Alembic's ALTER statements do not pass through SQLite's schema translate map.
    return S if _postgresql() else None


def _no_logical_time() -> None:
    """`at_logical_ms` nullable, and NULL where the plan named no logical time (its params
    keep the plan's `atLogicalMs`: null for a plan opened by a call, a turn or the run)."""
    with op.batch_alter_table("fault_plan", schema=_schema()) as batch:
        batch.alter_column("at_logical_ms", existing_type=sa.BigInteger(), nullable=True)
    untimed = (
        "jsonb_typeof(params -> 'atLogicalMs') IS DISTINCT FROM 'number'"
        if _postgresql()
        else "json_type(params, '$.atLogicalMs') IS NOT 'integer'"
    )
    table = f"{S}.fault_plan" if _postgresql() else "fault_plan"
    op.execute(f"UPDATE {table} SET at_logical_ms = NULL WHERE {untimed}")


def _postgresql_triggers() -> None:
    # sim.refuse_change() is revision 0001's: it refuses whatever fires it.
    op.execute(
        f"""
        CREATE FUNCTION {S}.refuse_content_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF (to_jsonb(NEW) - TG_ARGV) IS DISTINCT FROM (to_jsonb(OLD) - TG_ARGV) THEN
                RAISE EXCEPTION '{S}.% is append-only: UPDATE of its content refused', TG_TABLE_NAME
                    USING ERRCODE = 'integrity_constraint_violation',
                        HINT = 'only ' || array_to_string(TG_ARGV, ', ') || ' may change';
            END IF;
            RETURN NEW;
        END
        $$
        """
    )
    for table in APPEND_ONLY:
        op.execute(
            f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {S}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {S}.refuse_change()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {S}.{table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {S}.refuse_change()"
        )
    for table, (_frozen, free) in CONTENT.items():
        listed = ", ".join(f"'{column}'" for column in free)
        op.execute(
            f"CREATE TRIGGER {table}_content BEFORE UPDATE ON {S}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {S}.refuse_content_change({listed})"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {S}.{table} "
            f"FOR EACH ROW EXECUTE FUNCTION {S}.refuse_change()"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {S}.{table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {S}.refuse_change()"
        )


def _sqlite_triggers() -> None:
    for table in APPEND_ONLY:
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, '{S}.{table} is append-only: {action} refused'); "
                "END"
            )
    for table, (frozen, free) in CONTENT.items():
        changed = " OR ".join(f"NEW.{column} IS NOT OLD.{column}" for column in frozen)
        op.execute(
            f"CREATE TRIGGER {table}_content BEFORE UPDATE ON {table} WHEN {changed} "
            f"BEGIN SELECT RAISE(ABORT, '{S}.{table} is append-only: UPDATE of its content "
            f"refused (only {', '.join(free)} may change)'); END"
        )
        op.execute(
            f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
            f"BEGIN SELECT RAISE(ABORT, '{S}.{table} is append-only: DELETE refused'); END"
        )
