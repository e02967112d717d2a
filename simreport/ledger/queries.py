"""Questions asked of the ledger: which runs, what one run recorded, how a plan's builds went,
which asset versions exist and which runs used them. Each answer is plain JSON-ready data; a
run's evidence and completeness are read through run_evidence.py, as the run service reads them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.errors import InputError
from . import tables as t
from .db import as_utc, reading, utc_now, utc_text
from .errors import NotRecorded
from .migrate import check_for_reading
from .run_evidence import completeness_checks, criterion_evidence

STATUS_KINDS = {
    "execution": t.EXECUTION_STATUSES,
    "validity": t.VALIDITY_STATUSES,
    "evidence": t.EVIDENCE_STATUSES,
}
_STATUS_COLUMNS = {
    "execution": t.run.c.execution_status,
    "validity": t.run.c.validity_status,
    "evidence": t.run.c.evidence_status,
}


def parse_status(text: str) -> tuple[str, str]:
    """`crashed` → (execution, crashed); `evidence=partial` names the kind where a value
    belongs to two (unchecked)."""
    kind, sep, value = text.partition("=")
    if sep:
        if kind not in STATUS_KINDS or value not in STATUS_KINDS[kind]:
            raise InputError(
                f"unknown status {text!r}",
                path="--status",
                expected=_status_help(),
            )
        return kind, value
    kinds = [k for k, values in STATUS_KINDS.items() if text in values]
    if not kinds:
        raise InputError(f"unknown status {text!r}", path="--status", expected=_status_help())
    if len(kinds) > 1:
        raise InputError(
            f"{text!r} is a status of {' and '.join(kinds)}",
            path="--status",
            expected=" or ".join(f"{k}={text}" for k in kinds),
        )
    return kinds[0], text


def _status_help() -> str:
    return "; ".join(f"{k}: {', '.join(v)}" for k, v in STATUS_KINDS.items())


_AGO = re.compile(r"^\s*(\d+)\s*([mhdw])\s*$")


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """`2026-11-30`, `2026-11-30T08:00:00+01:00` (no zone: UTC) or a span back from now:
    `30m`, `12h`, `7d`, `2w`."""
    match = _AGO.match(text)
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}[match.group(2)]
        return (now or utc_now()) - timedelta(**{unit: int(match.group(1))})
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(
            f"cannot read {text!r} as a time",
            path="--since",
            expected="a date (2026-11-30), a date and time, or a span such as 12h or 7d",
        ) from None
    return as_utc(parsed) or parsed


def list_runs(
    engine: Engine,
    *,
    scenario: str | None = None,
    statuses: Sequence[str] = (),
    since: datetime | None = None,
    limit: int | None = None,
    purpose: str | None = None,
) -> list[dict[str, Any]]:
    """Runs, newest first. `scenario` is a scenario id (the testbed's identity id, or the
    world's name for other worlds), optionally `id@version`; `statuses` are values of the
    three statuses, any of one kind and all kinds at once; `since` compares with the time the
    run started (or was recorded, for a run without events); `purpose` is regression or
    exploration."""
    check_for_reading(engine)
    run, manifest = t.run, t.manifest
    query = sa.select(
        run.c.run_id,
        manifest.c.scenario_id,
        manifest.c.scenario_version,
        run.c.engine,
        run.c.condition_id,
        run.c.replication,
        run.c.execution_status,
        run.c.validity_status,
        run.c.evidence_status,
        run.c.started_at,
        run.c.ended_at,
        run.c.terminal_reason,
        run.c.created_at,
        run.c.purpose,
    ).join(manifest, manifest.c.manifest_id == run.c.manifest_id)
    if purpose is not None:
        query = query.where(run.c.purpose == purpose)
    if scenario:
        sid, _, version = scenario.partition("@")
        query = query.where(manifest.c.scenario_id == sid)
        if version:
            query = query.where(manifest.c.scenario_version == version)
    wanted: dict[str, list[str]] = {}
    for text in statuses:
        kind, value = parse_status(text)
        wanted.setdefault(kind, []).append(value)
    for kind, values in wanted.items():
        query = query.where(_STATUS_COLUMNS[kind].in_(values))
    when = sa.func.coalesce(run.c.started_at, run.c.created_at)
    if since is not None:
        query = query.where(when >= since)
    query = query.order_by(when.desc(), run.c.condition_id, run.c.replication, run.c.run_id)
    if limit is not None:
        query = query.limit(limit)
    with reading(engine) as conn:
        return [
            {
                "runId": row.run_id,
                "scenario": row.scenario_id,
                "scenarioVersion": row.scenario_version,
                "engine": row.engine,
                "condition": row.condition_id,
                "replication": row.replication,
                "status": {
                    "execution": row.execution_status,
                    "validity": row.validity_status,
                    "evidence": row.evidence_status,
                },
                "startedAt": utc_text(row.started_at),
                "endedAt": utc_text(row.ended_at),
                "terminalReason": row.terminal_reason,
                "recordedAt": utc_text(row.created_at),
                "purpose": row.purpose,
            }
            for row in conn.execute(query)
        ]


def resolve_run_id(conn: Connection, text: str) -> str:
    """A run id, or a prefix of exactly one."""
    exact = conn.execute(sa.select(t.run.c.run_id).where(t.run.c.run_id == text)).scalar()
    if exact is not None:
        return str(exact)
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    found = list(
        conn.execute(
            sa.select(t.run.c.run_id)
            .where(t.run.c.run_id.like(escaped + "%", escape="\\"))
            .order_by(t.run.c.run_id)
            .limit(6)
        ).scalars()
    )
    if len(found) == 1:
        return str(found[0])
    if not found:
        raise NotRecorded(f"no run {text!r} in the ledger", expected="a run id from `ledger runs`")
    listed = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
    raise NotRecorded(f"{text!r} is the start of several run ids: {listed}")


def show_run(engine: Engine, run_id: str) -> dict[str, Any]:
    """One run: statuses and times, its manifest and the asset versions it resolved, counts
    of what it recorded, the evidence per criterion, completeness per check, the steps of every
    planned fault, and the builds that used it."""
    check_for_reading(engine)
    with reading(engine) as conn:
        rid = resolve_run_id(conn, run_id)
        run = conn.execute(sa.select(t.run).where(t.run.c.run_id == rid)).one()
        manifest = conn.execute(
            sa.select(t.manifest).where(t.manifest.c.manifest_id == run.manifest_id)
        ).one()
        assets = conn.execute(
            sa.select(
                t.manifest_asset.c.slot,
                t.asset.c.name,
                t.asset.c.asset_type,
                t.manifest_asset.c.version,
                t.manifest_asset.c.content_sha256,
                t.asset_version.c.status,
            )
            .join(t.asset, t.asset.c.asset_id == t.manifest_asset.c.asset_id)
            .join(
                t.asset_version,
                (t.asset_version.c.asset_id == t.manifest_asset.c.asset_id)
                & (t.asset_version.c.version == t.manifest_asset.c.version),
            )
            .where(t.manifest_asset.c.manifest_id == run.manifest_id)
            .order_by(t.manifest_asset.c.slot)
        ).all()
        counts = {
            name: conn.execute(
                sa.select(sa.func.count()).select_from(table).where(table.c.run_id == rid)
            ).scalar_one()
            for name, table in (
                ("events", t.event),
                ("records", t.record),
                ("observations", t.observation),
                ("missingObservations", t.observation_missing),
            )
        }
        evidence = criterion_evidence(conn, rid)
        completeness = completeness_checks(conn, rid)
        plans = conn.execute(
            sa.select(t.fault_plan)
            .where(t.fault_plan.c.run_id == rid)
            .order_by(t.fault_plan.c.fault_id)
        ).all()
        steps = conn.execute(sa.select(t.fault_record).where(t.fault_record.c.run_id == rid)).all()
        tasks = conn.execute(
            sa.select(t.run_task).where(t.run_task.c.run_id == rid).order_by(t.run_task.c.task_key)
        ).all()
        sessions = conn.execute(sa.select(t.run_session).where(t.run_session.c.run_id == rid)).all()
        builds = conn.execute(
            sa.select(
                t.build.c.build_id, t.build.c.plan_id, t.build.c.recorded_at, t.build_run.c.used
            )
            .join(t.build_run, t.build_run.c.build_id == t.build.c.build_id)
            .where(t.build_run.c.run_id == rid)
            .order_by(t.build.c.recorded_at)
        ).all()
    document = manifest.document or {}
    # What the run wrote when it ran: a service run's own manifest.json, which its shared,
    # frozen manifest row lacks; an ingested run's is that row's document.
    ran = run.recorded_manifest or document
    result = run.result or {}
    order = {stage: i for i, stage in enumerate(t.FAULT_STAGES)}
    faults = []
    for plan in plans:
        mine = sorted(
            (s for s in steps if s.fault_id == plan.fault_id), key=lambda s: order[s.stage]
        )
        faults.append(
            {
                "faultId": plan.fault_id,
                "target": plan.target,
                "type": plan.fault_type,
                "params": plan.params,
                "steps": [
                    {
                        "stage": s.stage,
                        "at": utc_text(s.observed_at),
                        "records": list((s.detail or {}).get("recordIds", [])),
                    }
                    for s in mine
                ],
                "missingSteps": [
                    stage
                    for stage in ("planned", "armed", "hit", "recovered")
                    if stage not in {s.stage for s in mine}
                ],
            }
        )
    return {
        "runId": rid,
        "tenant": run.tenant_id,
        "engine": run.engine,
        "mode": run.mode,
        "purpose": run.purpose,
        "condition": run.condition_id,
        "replication": run.replication,
        "seedPath": run.seed_path,
        "status": {
            "execution": run.execution_status,
            "validity": run.validity_status,
            "evidence": run.evidence_status,
            "quality": run.quality_ref,
        },
        "startedAt": utc_text(run.started_at),
        "endedAt": utc_text(run.ended_at),
        "terminalReason": run.terminal_reason,
        "traceId": run.trace_id,
        "recordedAt": utc_text(run.created_at),
        "sourceDir": run.source_dir,
        "contentSha256": run.content_sha256,
        "metrics": result.get("metrics", {}),
        "failure": result.get("failure"),
        "manifest": {
            "manifestId": manifest.manifest_id,
            "sha256": manifest.manifest_sha256,
            "scenario": manifest.scenario_id,
            "scenarioVersion": manifest.scenario_version,
            "seed": manifest.seed,
            "provider": ran.get("provider"),
            "model": ran.get("model"),
            "kernelVersion": ran.get("kernelVersion"),
            "kernelFingerprint": ran.get("kernelFingerprint"),
            "simreportVersion": ran.get("simreportVersion"),
            "resolved": manifest.resolved,
            "derivedFrom": (document.get("scenarioVersion") or {}).get("derivedFrom"),
            "notOnline": ran.get("notOnline") or [],
        },
        "assets": [
            {
                "slot": a.slot,
                "name": a.name,
                "type": a.asset_type,
                "version": a.version,
                "sha256": a.content_sha256,
                "status": a.status,
            }
            for a in assets
        ],
        "counts": counts,
        "evidence": [
            {
                "criterion": e.criterion,
                "sufficient": e.sufficient,
                "observations": len(e.observation_ids or []),
                "refs": list(e.evidence_refs or []),
                "missing": list((e.detail or {}).get("missing", [])),
            }
            for e in evidence
        ],
        "completeness": [
            {"check": c.check, "status": c.status, "detail": c.detail} for c in completeness
        ],
        "faults": faults,
        "tasks": [
            {
                "taskKey": task.task_key,
                "goal": task.goal,
                "outcome": task.outcome,
                "sessions": [
                    {"sessionKey": s.session_key, "transport": s.transport}
                    for s in sessions
                    if s.task_key == task.task_key
                ],
            }
            for task in tasks
        ],
        "builds": [
            {
                "buildId": b.build_id,
                "plan": b.plan_id,
                "recordedAt": utc_text(b.recorded_at),
                "used": b.used,
            }
            for b in builds
        ],
    }


def plan_history(engine: Engine, plan_id: str) -> dict[str, Any]:
    """A plan's builds, oldest first: when, plan hash, grade, audit.json hash, run counts, and
    whether the plan's meaning or the kernel changed since the build before."""
    check_for_reading(engine)
    with reading(engine) as conn:
        plan = conn.execute(sa.select(t.plan).where(t.plan.c.plan_id == plan_id)).first()
        if plan is None:
            known = list(
                conn.execute(sa.select(t.plan.c.plan_id).order_by(t.plan.c.plan_id)).scalars()
            )
            raise NotRecorded(
                f"no plan {plan_id!r} in the ledger",
                expected=", ".join(known) if known else "a plan recorded by `ledger ingest`",
            )
        builds = conn.execute(
            sa.select(t.build)
            .where(t.build.c.plan_id == plan_id)
            .order_by(t.build.c.recorded_at, t.build.c.build_id)
        ).all()
        conditions = {
            build_id: count
            for build_id, count in conn.execute(
                sa.select(t.build_condition.c.build_id, sa.func.count())
                .join(t.build, t.build.c.build_id == t.build_condition.c.build_id)
                .where(t.build.c.plan_id == plan_id)
                .group_by(t.build_condition.c.build_id)
            )
        }
    rows = []
    previous: Any = None
    for b in builds:
        summary = b.summary or {}
        rows.append(
            {
                "buildId": b.build_id,
                "recordedAt": utc_text(b.recorded_at),
                "planHash": b.plan_hash,
                "grade": b.grade,
                "gradeReasons": b.grade_reasons,
                "auditSha256": b.audit_sha256,
                "simreportVersion": b.simreport_version,
                "kernelFingerprints": b.kernel_fingerprints,
                "conditions": conditions.get(b.build_id, 0),
                "runs": summary.get("runs"),
                "failed": summary.get("failed"),
                "excluded": summary.get("excluded"),
                "planChanged": previous is not None and previous.plan_hash != b.plan_hash,
                "kernelChanged": previous is not None
                and previous.kernel_fingerprints != b.kernel_fingerprints,
                "auditDir": b.audit_dir,
            }
        )
        previous = b
    return {
        "planId": plan.plan_id,
        "title": plan.title,
        "file": plan.file,
        "firstRecordedAt": utc_text(plan.created_at),
        "builds": rows,
    }


def list_assets(engine: Engine, *, runs_listed: int = 5) -> list[dict[str, Any]]:
    """Every asset version: type, status, sha256, where it lives, and the runs that used it
    (their number and the first `runs_listed` ids)."""
    check_for_reading(engine)
    used = (
        sa.select(
            t.manifest_asset.c.asset_id,
            t.manifest_asset.c.version,
            t.run.c.run_id,
        )
        .join(t.run, t.run.c.manifest_id == t.manifest_asset.c.manifest_id)
        .distinct()
        .subquery()
    )
    with reading(engine) as conn:
        versions = conn.execute(
            sa.select(
                t.asset.c.asset_id,
                t.asset.c.name,
                t.asset.c.asset_type,
                t.asset.c.owner,
                t.asset_version.c.version,
                t.asset_version.c.status,
                t.asset_version.c.content_sha256,
                t.asset_version.c.content_ref,
                t.asset_version.c.created_at,
            )
            .join(t.asset_version, t.asset_version.c.asset_id == t.asset.c.asset_id)
            .order_by(t.asset.c.name, t.asset.c.asset_type, t.asset_version.c.version)
        ).all()
        runs: dict[tuple[str, str], list[str]] = {}
        for asset_id, version, run_id in conn.execute(
            sa.select(used.c.asset_id, used.c.version, used.c.run_id).order_by(used.c.run_id)
        ):
            runs.setdefault((asset_id, version), []).append(run_id)
    return [
        {
            "name": v.name,
            "type": v.asset_type,
            "version": v.version,
            "status": v.status,
            "sha256": v.content_sha256,
            "owner": v.owner,
            "contentRef": v.content_ref,
            "firstSeenAt": utc_text(v.created_at),
            "runCount": len(runs.get((v.asset_id, v.version), [])),
            "runs": runs.get((v.asset_id, v.version), [])[:runs_listed],
        }
        for v in versions
    ]


def counts(engine: Engine) -> dict[str, int]:
    """Rows per table, for a quick look at what the ledger holds."""
    check_for_reading(engine)
    with reading(engine) as conn:
        return {
            table.name: conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
            for table in t.metadata.sorted_tables
        }
