"""The sim schema: scenario library, manifests, runs and what they recorded, audit history.

Creates every table as it stood at this revision (written out here) and makes manifests, their
asset rows, events, records and review transitions append-only with triggers (docs/ledger.md).

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

S = "sim"
JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
Timestamp = sa.DateTime(timezone=True)
NOW = sa.text("CURRENT_TIMESTAMP")

REVIEW = ("draft", "reviewing", "reviewed", "online", "offline")
APPEND_ONLY = ("manifest", "manifest_asset", "event", "record", "review_transition")


def _check(table: str, column: str, values: tuple[str, ...]) -> sa.CheckConstraint:
    listed = ",".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({listed})", name=op.f(f"ck_{table}_{column}"))


def _created() -> sa.Column[Any]:
    return sa.Column("created_at", Timestamp, nullable=False, server_default=NOW)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {S}")

    # ------------------------------------------------------------------ scenario library
    op.create_table(
        "scenario",
        sa.Column("scenario_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("risk_level", sa.Text, nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("scenario_id", name=op.f("pk_scenario")),
        sa.UniqueConstraint(
            "tenant_id", "namespace", "name", name=op.f("uq_scenario_tenant_id_namespace_name")
        ),
        _check("scenario", "risk_level", ("low", "medium", "high")),
        schema=S,
    )
    op.create_table(
        "scenario_version",
        sa.Column("scenario_id", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("spec", JSONDoc, nullable=False),
        sa.Column("spec_sha256", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("source", sa.Text),
        sa.Column("created_by", sa.Text, nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("scenario_id", "version", name=op.f("pk_scenario_version")),
        sa.ForeignKeyConstraint(
            ["scenario_id"],
            [f"{S}.scenario.scenario_id"],
            name=op.f("fk_scenario_version_scenario_id_scenario"),
        ),
        _check("scenario_version", "status", REVIEW),
        schema=S,
    )
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
        _check(
            "asset",
            "asset_type",
            (
                "user_policy",
                "env_data",
                "tool_contract",
                "simulator_config",
                "evaluation_spec",
                "agent",
                "prompt",
                "rubric",
            ),
        ),
        schema=S,
    )
    op.create_table(
        "asset_version",
        sa.Column("asset_id", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("content_ref", sa.Text, nullable=False),
        sa.Column("content_sha256", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("asset_id", "version", name=op.f("pk_asset_version")),
        sa.ForeignKeyConstraint(
            ["asset_id"], [f"{S}.asset.asset_id"], name=op.f("fk_asset_version_asset_id_asset")
        ),
        _check("asset_version", "status", REVIEW),
        schema=S,
    )
    op.create_table(
        "review_transition",
        sa.Column(
            "transition_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=True,
        ),
        sa.Column("version_kind", sa.Text, nullable=False),
        sa.Column("object_id", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("from_status", sa.Text),
        sa.Column("to_status", sa.Text, nullable=False),
        sa.Column("reviewer", sa.Text, nullable=False),
        sa.Column("risk_signoff", sa.Text),
        sa.Column("note", sa.Text),
        sa.Column("at", Timestamp, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("transition_id", name=op.f("pk_review_transition")),
        _check("review_transition", "version_kind", ("scenario", "asset")),
        _check("review_transition", "from_status", REVIEW),
        _check("review_transition", "to_status", REVIEW),
        schema=S,
    )
    op.create_index(
        op.f("ix_review_transition_version_kind_object_id_version"),
        "review_transition",
        ["version_kind", "object_id", "version"],
        schema=S,
    )

    # ------------------------------------------------------------------ manifest and run
    op.create_table(
        "manifest",
        sa.Column("manifest_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("scenario_id", sa.Text, nullable=False),
        sa.Column("scenario_version", sa.Text, nullable=False),
        sa.Column("resolved", JSONDoc, nullable=False),
        sa.Column("manifest_sha256", sa.Text, nullable=False),
        sa.Column("seed", sa.BigInteger),
        _created(),
        sa.Column("document", JSONDoc, nullable=False),
        sa.PrimaryKeyConstraint("manifest_id", name=op.f("pk_manifest")),
        sa.UniqueConstraint("manifest_sha256", name=op.f("uq_manifest_manifest_sha256")),
        schema=S,
    )
    op.create_table(
        "manifest_asset",
        sa.Column("manifest_id", sa.Text, nullable=False),
        sa.Column("slot", sa.Text, nullable=False),
        sa.Column("asset_id", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("content_sha256", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("manifest_id", "slot", name=op.f("pk_manifest_asset")),
        sa.ForeignKeyConstraint(
            ["manifest_id"],
            [f"{S}.manifest.manifest_id"],
            name=op.f("fk_manifest_asset_manifest_id_manifest"),
        ),
        sa.ForeignKeyConstraint(
            ["asset_id", "version"],
            [f"{S}.asset_version.asset_id", f"{S}.asset_version.version"],
            name=op.f("fk_manifest_asset_asset_id_version_asset_version"),
        ),
        schema=S,
    )
    op.create_index(
        op.f("ix_manifest_asset_asset_id_version"),
        "manifest_asset",
        ["asset_id", "version"],
        schema=S,
    )
    op.create_table(
        "run",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("manifest_id", sa.Text, nullable=False),
        sa.Column("mode", sa.Text, nullable=False),
        sa.Column("execution_status", sa.Text, nullable=False),
        sa.Column("validity_status", sa.Text, nullable=False),
        sa.Column("evidence_status", sa.Text, nullable=False),
        sa.Column("quality_ref", sa.Text),
        sa.Column("started_at", Timestamp),
        sa.Column("ended_at", Timestamp),
        sa.Column("terminal_reason", sa.Text),
        sa.Column("trace_id", sa.Text, nullable=False),
        _created(),
        sa.Column("condition_id", sa.Text, nullable=False),
        sa.Column("replication", sa.Integer, nullable=False),
        sa.Column("seed_path", JSONDoc, nullable=False),
        sa.Column("engine", sa.Text, nullable=False),
        sa.Column("result", JSONDoc, nullable=False),
        sa.Column("content_sha256", sa.Text, nullable=False),
        sa.Column("source_dir", sa.Text),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run")),
        sa.ForeignKeyConstraint(
            ["manifest_id"], [f"{S}.manifest.manifest_id"], name=op.f("fk_run_manifest_id_manifest")
        ),
        _check("run", "mode", ("surrogate", "hybrid", "isolated_real")),
        _check(
            "run", "execution_status", ("pending", "running", "completed", "crashed", "cancelled")
        ),
        _check("run", "validity_status", ("unchecked", "valid", "violated")),
        _check("run", "evidence_status", ("unchecked", "complete", "partial")),
        schema=S,
    )
    op.create_index(
        "ix_sim_run_manifest",
        "run",
        ["tenant_id", "manifest_id", sa.text("created_at DESC")],
        schema=S,
    )
    op.create_table(
        "run_task",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("task_key", sa.Text, nullable=False),
        sa.Column("sut_task_id", sa.Text),
        sa.Column("goal", JSONDoc, nullable=False),
        sa.Column("outcome", sa.Text),
        sa.PrimaryKeyConstraint("run_id", "task_key", name=op.f("pk_run_task")),
        sa.ForeignKeyConstraint(
            ["run_id"], [f"{S}.run.run_id"], name=op.f("fk_run_task_run_id_run")
        ),
        _check("run_task", "outcome", ("submitted", "accepted", "root_complete", "failed")),
        schema=S,
    )
    op.create_table(
        "run_session",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("task_key", sa.Text, nullable=False),
        sa.Column("session_key", sa.Text, nullable=False),
        sa.Column("sut_session_id", sa.Text),
        sa.Column("transport", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "task_key", "session_key", name=op.f("pk_run_session")),
        sa.ForeignKeyConstraint(
            ["run_id", "task_key"],
            [f"{S}.run_task.run_id", f"{S}.run_task.task_key"],
            name=op.f("fk_run_session_run_id_task_key_run_task"),
        ),
        _check("run_session", "transport", ("ag-ui", "a2a", "chat-completions", "internal")),
        schema=S,
    )

    # ------------------------------------------------------------------ what happened
    op.create_table(
        "event",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("event_type", sa.Text, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("payload", JSONDoc, nullable=False),
        sa.Column("logical_time", sa.BigInteger),
        sa.Column("wall_time", Timestamp, nullable=False),
        sa.Column("trace_id", sa.Text),
        sa.Column("span_id", sa.Text),
        sa.Column("actor_ref", sa.Text),
        sa.Column("step", sa.BigInteger),
        sa.PrimaryKeyConstraint("run_id", "seq", name=op.f("pk_event")),
        _check("event", "actor", ("user", "agent", "environment", "harness")),
        schema=S,
    )
    op.create_table(
        "record",
        sa.Column("record_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("record_type", sa.Text, nullable=False),
        sa.Column("ref", sa.Text, nullable=False),
        sa.Column("sha256", sa.Text, nullable=False),
        sa.Column("redaction", sa.Text, nullable=False, server_default="none"),
        _created(),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("actor", sa.Text),
        sa.Column("logical_ms", sa.BigInteger),
        sa.Column("body", JSONDoc, nullable=False),
        sa.PrimaryKeyConstraint("record_id", name=op.f("pk_record")),
        _check("record", "record_type", ("message", "tool_call", "state_change", "control")),
        schema=S,
    )
    op.create_index(op.f("ix_record_run_id_seq"), "record", ["run_id", "seq"], schema=S)
    op.create_table(
        "observation",
        sa.Column("observation_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("criterion_key", sa.Text),
        sa.Column("fact_key", sa.Text, nullable=False),
        sa.Column("fact_value", JSONDoc, nullable=False),
        sa.Column("derived_from", JSONDoc, nullable=False),
        sa.Column("extractor", sa.Text, nullable=False),
        _created(),
        sa.PrimaryKeyConstraint("observation_id", name=op.f("pk_observation")),
        schema=S,
    )
    op.create_index(op.f("ix_observation_run_id"), "observation", ["run_id"], schema=S)
    op.create_table(
        "observation_missing",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("fact_key", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("extractor", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "fact_key", name=op.f("pk_observation_missing")),
        schema=S,
    )
    op.create_table(
        "evidence",
        sa.Column("evidence_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("criterion_key", sa.Text, nullable=False),
        sa.Column("observation_ids", JSONDoc, nullable=False),
        sa.Column("evidence_refs", JSONDoc, nullable=False),
        _created(),
        sa.Column("sufficient", sa.Boolean),
        sa.Column("detail", JSONDoc),
        sa.PrimaryKeyConstraint("evidence_id", name=op.f("pk_evidence")),
        schema=S,
    )
    op.create_index(op.f("ix_evidence_run_id"), "evidence", ["run_id"], schema=S)
    op.create_table(
        "completeness",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("check_key", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("detail", JSONDoc),
        sa.PrimaryKeyConstraint("run_id", "check_key", name=op.f("pk_completeness")),
        _check("completeness", "status", ("present", "missing", "not_applicable")),
        schema=S,
    )
    op.create_table(
        "fault_plan",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("fault_id", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("fault_type", sa.Text, nullable=False),
        sa.Column("params", JSONDoc, nullable=False),
        sa.Column("at_logical_ms", sa.BigInteger, nullable=False),
        sa.Column("recover_after_ms", sa.BigInteger),
        sa.PrimaryKeyConstraint("run_id", "fault_id", name=op.f("pk_fault_plan")),
        schema=S,
    )
    op.create_table(
        "fault_record",
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("fault_id", sa.Text, nullable=False),
        sa.Column("stage", sa.Text, nullable=False),
        sa.Column("detail", JSONDoc, nullable=False),
        sa.Column("observed_at", Timestamp, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("run_id", "fault_id", "stage", name=op.f("pk_fault_record")),
        _check("fault_record", "stage", ("planned", "armed", "hit", "recovered", "failed")),
        schema=S,
    )

    # ------------------------------------------------------------------ audit history
    op.create_table(
        "plan",
        sa.Column("plan_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("title", sa.Text),
        sa.Column("file", sa.Text),
        _created(),
        sa.PrimaryKeyConstraint("plan_id", name=op.f("pk_plan")),
        schema=S,
    )
    op.create_table(
        "build",
        sa.Column("build_id", sa.Text, nullable=False),
        sa.Column("plan_id", sa.Text, nullable=False),
        sa.Column("plan_hash", sa.Text, nullable=False),
        sa.Column("plan_identity_hash", sa.Text),
        sa.Column("kernel_fingerprints", JSONDoc, nullable=False),
        sa.Column("simreport_version", sa.Text, nullable=False),
        sa.Column("audit_sha256", sa.Text, nullable=False),
        sa.Column("grade", sa.Text, nullable=False),
        sa.Column("grade_reasons", JSONDoc, nullable=False),
        sa.Column("summary", JSONDoc, nullable=False),
        sa.Column("audit_dir", sa.Text),
        sa.Column("recorded_at", Timestamp, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("build_id", name=op.f("pk_build")),
        sa.ForeignKeyConstraint(
            ["plan_id"], [f"{S}.plan.plan_id"], name=op.f("fk_build_plan_id_plan")
        ),
        sa.UniqueConstraint("audit_sha256", name=op.f("uq_build_audit_sha256")),
        _check("build", "grade", ("weak", "moderate", "strong")),
        schema=S,
    )
    op.create_index(
        op.f("ix_build_plan_id_recorded_at"), "build", ["plan_id", "recorded_at"], schema=S
    )
    op.create_table(
        "build_condition",
        sa.Column("build_id", sa.Text, nullable=False),
        sa.Column("condition_id", sa.Text, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("label", sa.Text),
        sa.Column("axis", sa.Text),
        sa.Column("levels", JSONDoc, nullable=False),
        sa.Column("model", sa.Text),
        sa.Column("is_base", sa.Boolean, nullable=False),
        sa.Column("identical_to_base", sa.Boolean, nullable=False),
        sa.Column("scenario_hash", sa.Text),
        sa.Column("runs", sa.Integer, nullable=False),
        sa.Column("succeeded", sa.Integer, nullable=False),
        sa.Column("complete", sa.Integer, nullable=False),
        sa.Column("excluded", sa.Integer, nullable=False),
        sa.Column("means", JSONDoc, nullable=False),
        sa.PrimaryKeyConstraint("build_id", "condition_id", name=op.f("pk_build_condition")),
        sa.ForeignKeyConstraint(
            ["build_id"], [f"{S}.build.build_id"], name=op.f("fk_build_condition_build_id_build")
        ),
        schema=S,
    )
    op.create_table(
        "build_run",
        sa.Column("build_id", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("condition_id", sa.Text, nullable=False),
        sa.Column("replication", sa.Integer, nullable=False),
        sa.Column("used", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint("build_id", "run_id", name=op.f("pk_build_run")),
        sa.ForeignKeyConstraint(
            ["build_id"], [f"{S}.build.build_id"], name=op.f("fk_build_run_build_id_build")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], [f"{S}.run.run_id"], name=op.f("fk_build_run_run_id_run")
        ),
        schema=S,
    )
    op.create_index(op.f("ix_build_run_run_id"), "build_run", ["run_id"], schema=S)

    _append_only()


def _append_only() -> None:
    """What is written once is never changed: the database refuses it, whoever asks."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            f"""
            CREATE FUNCTION {S}.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                RAISE EXCEPTION '{S}.% is append-only: % refused', TG_TABLE_NAME, TG_OP
                    USING ERRCODE = 'integrity_constraint_violation';
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
    else:
        for table in APPEND_ONLY:
            for action in ("UPDATE", "DELETE"):
                op.execute(
                    f"CREATE TRIGGER {table}_no_{action.lower()} BEFORE {action} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, '{S}.{table} is append-only: {action} refused'); "
                    "END"
                )


def downgrade() -> None:
    # Dropping a table drops its triggers; the function goes last.
    for table in (
        "build_run",
        "build_condition",
        "build",
        "plan",
        "fault_record",
        "fault_plan",
        "completeness",
        "evidence",
        "observation_missing",
        "observation",
        "record",
        "event",
        "run_session",
        "run_task",
        "run",
        "manifest_asset",
        "manifest",
        "review_transition",
        "asset_version",
        "asset",
        "scenario_version",
        "scenario",
    ):
        op.drop_table(table, schema=S)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {S}.refuse_change()")
