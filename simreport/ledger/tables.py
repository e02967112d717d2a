"""Every table of the run ledger, declared once for SQLite and PostgreSQL alike.

The `sim` tables follow the agent-testbed design's minimal schema; what a file-based run carries
beyond it is marked "added". Every schema change is an Alembic revision under
`migrations/versions/`, and a test checks that the migrated database matches these declarations.
The design: docs/ledger.md.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

SCHEMA = "sim"

DEFAULT_TENANT = "local"
"""The tenant of everything a local simreport records (the run service sets its own)."""

UNKNOWN_OWNER = "unknown"
"""The owner recorded for a scenario or an asset whose file names none."""

metadata = sa.MetaData(
    schema=SCHEMA,
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    },
)

JSONDoc = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
"""A JSON document: jsonb on PostgreSQL, JSON text on SQLite."""

Timestamp = sa.DateTime(timezone=True)
"""timestamptz on PostgreSQL; on SQLite UTC text (read back without a zone: see db.as_utc)."""

REVIEW_STATUSES = ("draft", "reviewing", "reviewed", "online", "offline")
RISK_LEVELS = ("low", "medium", "high")
ASSET_TYPES = (
    "user_policy",
    "env_data",
    "tool_contract",
    "simulator_config",
    "evaluation_spec",
    # Added: the agent, its prompt and a rubric are versioned files of the asset library too.
    "agent",
    "prompt",
    "rubric",
    # Added (revision 0009): the testbed world's domains and user flows, written as data.
    "domain",
    "user_flow",
)
RUN_MODES = ("surrogate", "hybrid", "isolated_real")
PURPOSES = ("regression", "exploration")
EXECUTION_STATUSES = ("pending", "running", "completed", "crashed", "cancelled")
VALIDITY_STATUSES = ("unchecked", "valid", "violated")
EVIDENCE_STATUSES = ("unchecked", "complete", "partial")
TASK_OUTCOMES = ("submitted", "accepted", "root_complete", "failed")
TRANSPORTS = ("ag-ui", "a2a", "chat-completions", "internal")
ACTORS = ("user", "agent", "environment", "harness")
RECORD_TYPES = ("message", "tool_call", "state_change", "control")
COMPLETENESS_STATUSES = ("present", "missing", "not_applicable")
FAULT_STAGES = ("planned", "armed", "hit", "recovered", "failed")
GRADES = ("weak", "moderate", "strong")
VERSION_KINDS = ("scenario", "asset")

APPEND_ONLY = (
    "manifest",
    "manifest_asset",
    "event",
    "record",
    "review_transition",
    # revision 0008: what a run's records gave
    "observation",
    "observation_missing",
    "evidence",
    "completeness",
    "fault_plan",
    "fault_record",
)
"""Tables whose rows never change once written: the database refuses UPDATE, DELETE and (on
PostgreSQL) TRUNCATE on them with triggers."""
CONTENT_FROZEN = {"scenario_version": ("status",), "asset_version": ("status",)}
"""Tables whose rows keep their content once written: only the columns named may change (a
version's review status); the database refuses any other UPDATE, and DELETE and TRUNCATE."""


def _one_of(column: str, values: tuple[str, ...], name: str | None = None) -> sa.CheckConstraint:
    """`column` holds one of `values`, written as comparisons: SQLite builds a temporary index
    for an IN list in a CHECK on every row it writes (migration 0005)."""
    allowed = " OR ".join(f"{column} = '{v}'" for v in values)
    return sa.CheckConstraint(allowed, name=name or column)


def _now() -> sa.TextClause:
    return sa.text("CURRENT_TIMESTAMP")


# --------------------------------------------------------------------------- scenario library

scenario = sa.Table(
    "scenario",
    metadata,
    sa.Column("scenario_id", sa.Text, primary_key=True),
    sa.Column("tenant_id", sa.Text, nullable=False),
    sa.Column("namespace", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("risk_level", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.UniqueConstraint("tenant_id", "namespace", "name"),
    _one_of("risk_level", RISK_LEVELS),
)

scenario_version = sa.Table(
    "scenario_version",
    metadata,
    sa.Column("scenario_id", sa.Text, sa.ForeignKey("sim.scenario.scenario_id"), nullable=False),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("spec", JSONDoc, nullable=False),
    sa.Column("spec_sha256", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("source", sa.Text),
    sa.Column("derived_from", sa.Text),  # added: the version an audit condition derived it from
    sa.Column("created_by", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.PrimaryKeyConstraint("scenario_id", "version"),
    _one_of("status", REVIEW_STATUSES),
)

asset = sa.Table(
    "asset",
    metadata,
    sa.Column("asset_id", sa.Text, primary_key=True),
    sa.Column("tenant_id", sa.Text, nullable=False),
    sa.Column("asset_type", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("owner", sa.Text, nullable=False),
    sa.UniqueConstraint("tenant_id", "asset_type", "name"),
    _one_of("asset_type", ASSET_TYPES),
)

asset_version = sa.Table(
    "asset_version",
    metadata,
    sa.Column("asset_id", sa.Text, sa.ForeignKey("sim.asset.asset_id"), nullable=False),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("content_ref", sa.Text, nullable=False),
    sa.Column("content_sha256", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.PrimaryKeyConstraint("asset_id", "version"),
    _one_of("status", REVIEW_STATUSES),
)

review_transition = sa.Table(
    "review_transition",
    metadata,
    sa.Column(
        "transition_id",
        sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("version_kind", sa.Text, nullable=False),  # scenario | asset
    sa.Column("object_id", sa.Text, nullable=False),  # scenario_id or asset_id
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("from_status", sa.Text),  # null: the version's first status
    sa.Column("to_status", sa.Text, nullable=False),
    sa.Column("reviewer", sa.Text, nullable=False),
    sa.Column("risk_signoff", sa.Text),  # who signed off the risk (high-risk scenarios)
    sa.Column("note", sa.Text),
    sa.Column("at", Timestamp, nullable=False, server_default=_now()),
    _one_of("version_kind", VERSION_KINDS),
    _one_of("from_status", REVIEW_STATUSES),
    _one_of("to_status", REVIEW_STATUSES),
    sa.Index(None, "version_kind", "object_id", "version"),
)

# --------------------------------------------------------------------------- manifest and run

manifest = sa.Table(
    "manifest",
    metadata,
    sa.Column("manifest_id", sa.Text, primary_key=True),
    sa.Column("tenant_id", sa.Text, nullable=False),
    sa.Column("scenario_id", sa.Text, nullable=False),
    sa.Column("scenario_version", sa.Text, nullable=False),
    sa.Column("resolved", JSONDoc, nullable=False),
    sa.Column("manifest_sha256", sa.Text, nullable=False),
    sa.Column("seed", sa.BigInteger),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.Column("document", JSONDoc, nullable=False),  # added: manifest.json as the run wrote it
    sa.UniqueConstraint("manifest_sha256"),
)

manifest_asset = sa.Table(
    # Added: the asset versions a manifest resolved, one row each, so "which runs used
    # refund-prompt 1.0.0" is a join rather than a search through JSON.
    "manifest_asset",
    metadata,
    sa.Column("manifest_id", sa.Text, sa.ForeignKey("sim.manifest.manifest_id"), nullable=False),
    sa.Column("slot", sa.Text, nullable=False),  # where the scenario names it: sut.prompt, …
    sa.Column("asset_id", sa.Text, nullable=False),
    sa.Column("version", sa.Text, nullable=False),
    sa.Column("content_sha256", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("manifest_id", "slot"),
    sa.ForeignKeyConstraint(
        ["asset_id", "version"], ["sim.asset_version.asset_id", "sim.asset_version.version"]
    ),
    sa.Index(None, "asset_id", "version"),
)

run = sa.Table(
    "run",
    metadata,
    sa.Column("run_id", sa.Text, primary_key=True),
    sa.Column("tenant_id", sa.Text, nullable=False),
    sa.Column("manifest_id", sa.Text, sa.ForeignKey("sim.manifest.manifest_id"), nullable=False),
    sa.Column("mode", sa.Text, nullable=False),
    sa.Column("execution_status", sa.Text, nullable=False),
    sa.Column("validity_status", sa.Text, nullable=False),
    sa.Column("evidence_status", sa.Text, nullable=False),
    sa.Column("quality_ref", sa.Text),  # set by an evaluator, never by the run
    sa.Column("started_at", Timestamp),
    sa.Column("ended_at", Timestamp),
    sa.Column("terminal_reason", sa.Text),
    sa.Column("trace_id", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    # Added: where the run sits in an audit, what it ran on, and what it delivered.
    sa.Column("condition_id", sa.Text, nullable=False),
    sa.Column("replication", sa.Integer, nullable=False),
    sa.Column("seed_path", JSONDoc, nullable=False),
    sa.Column("engine", sa.Text, nullable=False),  # the world, or external:<simulator>
    sa.Column("result", JSONDoc, nullable=False),  # result.json as the run wrote it
    sa.Column("content_sha256", sa.Text, nullable=False),  # over every file ingested
    sa.Column("source_dir", sa.Text),  # the folder it was first ingested from
    sa.Column("purpose", sa.Text, nullable=False, server_default="exploration"),  # added
    # Added for the run service: a queued run's lease, cancellation, request and requester.
    sa.Column("lease_owner", sa.Text),
    sa.Column("lease_expires_at", Timestamp),
    sa.Column("heartbeat_at", Timestamp),
    sa.Column("cancel_requested_at", Timestamp),
    sa.Column("cancel_reason", sa.Text),
    sa.Column("request", JSONDoc),
    sa.Column("principal", sa.Text),  # the name of the token that started it, never the token
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    # Added for the service's retry of a run whose worker was lost: how many times it may go
    # back to pending, how many times it did, and the seq its current attempt's events are
    # numbered after.
    sa.Column("retries_allowed", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("event_seq_base", sa.Integer, nullable=False, server_default="0"),
    # Added for the two-phase reclaim (revision 0006): when a reclaimer first found the lease
    # expired; the run is reclaimed only if it is still expired and unrenewed a confirmation
    # period later. A heartbeat clears it.
    sa.Column("lease_suspected_at", Timestamp),
    # Added (revision 0007): manifest.json as a service run wrote it; its manifest row is the
    # one frozen when it was queued. Empty for runs ingested from a folder.
    sa.Column("recorded_manifest", JSONDoc),
    _one_of("mode", RUN_MODES),
    _one_of("purpose", PURPOSES),
    _one_of("execution_status", EXECUTION_STATUSES),
    _one_of("validity_status", VALIDITY_STATUSES),
    _one_of("evidence_status", EVIDENCE_STATUSES),
    sa.Index("ix_sim_run_manifest", "tenant_id", "manifest_id", sa.text("created_at DESC")),
    sa.Index("ix_run_purpose", "purpose"),
    sa.Index(None, "execution_status", "created_at"),
)

run_task = sa.Table(
    "run_task",
    metadata,
    sa.Column("run_id", sa.Text, sa.ForeignKey("sim.run.run_id"), nullable=False),
    sa.Column("task_key", sa.Text, nullable=False),
    sa.Column("sut_task_id", sa.Text),
    sa.Column("goal", JSONDoc, nullable=False),
    sa.Column("outcome", sa.Text),
    sa.PrimaryKeyConstraint("run_id", "task_key"),
    _one_of("outcome", TASK_OUTCOMES),
)

run_session = sa.Table(
    "run_session",
    metadata,
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("task_key", sa.Text, nullable=False),
    sa.Column("session_key", sa.Text, nullable=False),
    sa.Column("sut_session_id", sa.Text),
    sa.Column("transport", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "task_key", "session_key"),
    sa.ForeignKeyConstraint(
        ["run_id", "task_key"], ["sim.run_task.run_id", "sim.run_task.task_key"]
    ),
    _one_of("transport", TRANSPORTS),
)

# --------------------------------------------------------------------------- what happened

event = sa.Table(
    "event",
    metadata,
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("event_type", sa.Text, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("payload", JSONDoc, nullable=False),
    sa.Column("logical_time", sa.BigInteger),  # logical milliseconds, where the run keeps them
    sa.Column("wall_time", Timestamp, nullable=False),
    sa.Column("trace_id", sa.Text),
    sa.Column("span_id", sa.Text),
    sa.Column("actor_ref", sa.Text),  # added: which agent (its index) or other actor exactly
    sa.Column("step", sa.BigInteger),  # added: the kernel's step (round, tick, turn)
    sa.PrimaryKeyConstraint("run_id", "seq"),
    _one_of("actor", ACTORS),
)

record = sa.Table(
    "record",
    metadata,
    sa.Column("record_id", sa.Text, primary_key=True),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("record_type", sa.Text, nullable=False),
    sa.Column("ref", sa.Text, nullable=False),
    sa.Column("sha256", sa.Text, nullable=False),
    sa.Column("redaction", sa.Text, nullable=False, server_default="none"),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    # Added: the record itself, inline, with the columns one filters on.
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),  # tool.request, fault.hit, …
    sa.Column("actor", sa.Text),
    sa.Column("logical_ms", sa.BigInteger),
    sa.Column("body", JSONDoc, nullable=False),
    _one_of("record_type", RECORD_TYPES),
    sa.Index(None, "run_id", "seq"),
)

observation = sa.Table(
    "observation",
    metadata,
    sa.Column("observation_id", sa.Text, primary_key=True),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("criterion_key", sa.Text),
    sa.Column("fact_key", sa.Text, nullable=False),
    sa.Column("fact_value", JSONDoc, nullable=False),
    sa.Column("derived_from", JSONDoc, nullable=False),
    sa.Column("extractor", sa.Text, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.Index(None, "run_id"),
)

observation_missing = sa.Table(
    # Added: a fact the extractor could not establish, with why. Missing is recorded as
    # missing, never as a zero or an empty value.
    "observation_missing",
    metadata,
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("fact_key", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("extractor", sa.Text, nullable=False),
    sa.PrimaryKeyConstraint("run_id", "fact_key"),
)

evidence = sa.Table(
    "evidence",
    metadata,
    sa.Column("evidence_id", sa.Text, primary_key=True),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("criterion_key", sa.Text, nullable=False),
    sa.Column("observation_ids", JSONDoc, nullable=False),
    sa.Column("evidence_refs", JSONDoc, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.Column("sufficient", sa.Boolean),  # added: whether the run judged it enough
    sa.Column("detail", JSONDoc),  # added: the check, its fact keys and the missing ones
    sa.Index(None, "run_id"),
)

completeness = sa.Table(
    "completeness",
    metadata,
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("check_key", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("detail", JSONDoc),
    sa.PrimaryKeyConstraint("run_id", "check_key"),
    _one_of("status", COMPLETENESS_STATUSES),
)

fault_plan = sa.Table(
    "fault_plan",
    metadata,
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("fault_id", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("fault_type", sa.Text, nullable=False),
    sa.Column("params", JSONDoc, nullable=False),
    sa.Column("at_logical_ms", sa.BigInteger),  # null: opened by a call or a turn (0008)
    sa.Column("recover_after_ms", sa.BigInteger),
    sa.PrimaryKeyConstraint("run_id", "fault_id"),
)

fault_record = sa.Table(
    "fault_record",
    metadata,
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("fault_id", sa.Text, nullable=False),
    sa.Column("stage", sa.Text, nullable=False),
    sa.Column("detail", JSONDoc, nullable=False),
    sa.Column("observed_at", Timestamp, nullable=False, server_default=_now()),
    sa.PrimaryKeyConstraint("run_id", "fault_id", "stage"),
    _one_of("stage", FAULT_STAGES),
)

# --------------------------------------------------------------------------- audit history

plan = sa.Table(
    "plan",
    metadata,
    sa.Column("plan_id", sa.Text, primary_key=True),
    sa.Column("tenant_id", sa.Text, nullable=False),
    sa.Column("title", sa.Text),
    sa.Column("file", sa.Text),  # the plan file as first given
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
)

build = sa.Table(
    "build",
    metadata,
    sa.Column("build_id", sa.Text, primary_key=True),
    sa.Column("plan_id", sa.Text, sa.ForeignKey("sim.plan.plan_id"), nullable=False),
    sa.Column("plan_hash", sa.Text, nullable=False),
    sa.Column("plan_identity_hash", sa.Text),
    sa.Column("kernel_fingerprints", JSONDoc, nullable=False),
    sa.Column("simreport_version", sa.Text, nullable=False),
    sa.Column("audit_sha256", sa.Text, nullable=False),
    sa.Column("grade", sa.Text, nullable=False),
    sa.Column("grade_reasons", JSONDoc, nullable=False),
    sa.Column("summary", JSONDoc, nullable=False),  # runs, used, failed, excluded, …
    sa.Column("audit_dir", sa.Text),  # the folder it was first ingested from
    sa.Column("recorded_at", Timestamp, nullable=False, server_default=_now()),
    sa.UniqueConstraint("audit_sha256"),
    _one_of("grade", GRADES),
    sa.Index(None, "plan_id", "recorded_at"),
)

build_condition = sa.Table(
    "build_condition",
    metadata,
    sa.Column("build_id", sa.Text, sa.ForeignKey("sim.build.build_id"), nullable=False),
    sa.Column("condition_id", sa.Text, nullable=False),
    sa.Column("position", sa.Integer, nullable=False),  # plan order, the base first
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
    sa.PrimaryKeyConstraint("build_id", "condition_id"),
)

build_run = sa.Table(
    "build_run",
    metadata,
    sa.Column("build_id", sa.Text, sa.ForeignKey("sim.build.build_id"), nullable=False),
    sa.Column("run_id", sa.Text, sa.ForeignKey("sim.run.run_id"), nullable=False),
    sa.Column("condition_id", sa.Text, nullable=False),
    sa.Column("replication", sa.Integer, nullable=False),
    sa.Column("used", sa.Boolean, nullable=False),  # entered the statistics
    sa.PrimaryKeyConstraint("build_id", "run_id"),
    sa.Index(None, "run_id"),
)


# --------------------------------------------------------------------------- run service

idempotency_key = sa.Table(
    # Every write request of the run service, by its Idempotency-Key: the same key with the same
    # request gets the stored answer again, from any process and after restarts.
    "idempotency_key",
    metadata,
    sa.Column("principal", sa.Text, nullable=False),  # the token's name, never the token
    sa.Column("key", sa.Text, nullable=False),
    sa.Column("tenant_id", sa.Text, nullable=False),
    sa.Column("request_sha256", sa.Text, nullable=False),
    sa.Column("status_code", sa.Integer, nullable=False),
    sa.Column("response", JSONDoc, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False, server_default=_now()),
    sa.PrimaryKeyConstraint("principal", "key"),
)
