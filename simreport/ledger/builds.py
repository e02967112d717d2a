"""An analysis recorded as a build of its plan: its audit.json, its conditions and its runs.

`read_build` reads an audit directory into the rows of its build (pure but for reading the
audit and the identities of its runs); `record_build` writes them in one transaction, once:
a build already recorded (the same audit.json) is found present. The runs a build used are
recorded first, by the ingest (`ingest.ingest_build`), so the build's rows can refer to them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.canonical import sha256_bytes
from ..core.errors import DocumentError
from . import tables as t
from .bulk import insert_ignoring_duplicates, insert_mappings
from .db import reading, utc_now
from .run_content import is_int
from .rundir import is_run_dir, run_identity
from .tables import DEFAULT_TENANT

Outcome = Literal["recorded", "present"]
"""What ingesting a run or a build did: recorded it, or found it recorded already."""


@dataclass(frozen=True)
class BuildIngest:
    """What ingesting one analysis did."""

    build_id: str
    plan_id: str
    outcome: Outcome
    path: Path
    runs: int


@dataclass(frozen=True)
class BuildRows:
    """An analysis's rows, read from its audit directory."""

    path: Path
    """The audit directory."""
    audit: Mapping[str, Any]
    build: dict[str, Any]
    conditions: list[dict[str, Any]]
    runs: list[tuple[dict[str, Any], Path]]
    """The build's runs whose folders are still there (a run whose folder is gone is left
    out), each with its folder."""

    @property
    def build_id(self) -> str:
        return str(self.build["build_id"])

    @property
    def plan_id(self) -> str:
        return str(self.build["plan_id"])


def read_build(audit_dir: str | Path) -> BuildRows:
    """The rows of the analysis in `audit_dir`. Raises DocumentError for an audit.json that is
    missing or not an analysed audit, InputError for a run folder that breaks its contract."""
    audit_path = Path(audit_dir) / "audit.json"
    try:
        raw = audit_path.read_bytes()
    except FileNotFoundError:
        raise DocumentError(
            "file not found", file=audit_path, expected="an analysed audit"
        ) from None
    try:
        audit = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocumentError(f"not valid JSON: {exc}", file=audit_path) from None
    build = _build_row(audit, audit_path, sha256_bytes(raw))
    conditions = _build_conditions(audit, audit_path, build["build_id"])
    dirs = {row["condition_id"]: dir_ for row, dir_ in conditions}
    build_runs: list[tuple[dict[str, Any], Path]] = []
    for index, entry in enumerate(audit.get("runs") or []):
        if not isinstance(entry, dict):
            raise DocumentError("expected an object", file=audit_path, path=f"runs.{index}")
        condition, replication = entry.get("condition"), entry.get("replication")
        if condition not in dirs or not is_int(replication):
            raise DocumentError(
                "a run of an unknown condition, or without a replication",
                file=audit_path,
                path=f"runs.{index}",
            )
        run_dir = Path(audit_dir) / "runs" / str(dirs[condition]) / str(replication)
        if not is_run_dir(run_dir):
            continue  # the run's folder is gone: the build is recorded without it
        identity = run_identity(run_dir)
        row = {
            "build_id": build["build_id"],
            "run_id": identity.run_id,
            "condition_id": condition,
            "replication": replication,
            "used": bool(entry.get("used", False)),
        }
        build_runs.append((row, run_dir))
    return BuildRows(
        path=Path(audit_dir),
        audit=audit,
        build=build,
        conditions=[row for row, _ in conditions],
        runs=build_runs,
    )


def record_build(engine: Engine, rows: BuildRows, *, tenant: str = DEFAULT_TENANT) -> BuildIngest:
    """Record the build in one transaction, unless it is recorded already. Its runs are in the
    ledger already (those it names that are not make the database refuse the build)."""
    plan = rows.audit["plan"]
    plan_row = {
        "plan_id": rows.plan_id,
        "tenant_id": tenant,
        "title": _text(plan.get("title")),
        "file": _text((plan.get("identity") or {}).get("file")),
        "created_at": utc_now(),
    }
    build_id, audit_dir = rows.build_id, rows.path
    present = BuildIngest(build_id, rows.plan_id, "present", audit_dir, len(rows.runs))
    try:
        with engine.begin() as conn:
            if _build_recorded(conn, build_id):
                return present
            build = {
                **rows.build,
                "audit_dir": str(audit_dir.resolve()),
                "recorded_at": utc_now(),
            }
            insert_ignoring_duplicates(conn, t.plan, [plan_row])
            insert_mappings(conn, t.build, [build])
            insert_mappings(conn, t.build_condition, rows.conditions)
            insert_mappings(conn, t.build_run, [row for row, _ in rows.runs])
    except sa.exc.IntegrityError:
        # Another writer recorded the same build between the check and the insert.
        with reading(engine) as conn:
            if _build_recorded(conn, build_id):
                return present
        raise
    return BuildIngest(build_id, rows.plan_id, "recorded", audit_dir, len(rows.runs))


def _build_recorded(conn: Connection, build_id: str) -> bool:
    found = conn.execute(sa.select(t.build.c.build_id).where(t.build.c.build_id == build_id))
    return found.first() is not None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _build_row(audit: Any, path: Path, sha: str) -> dict[str, Any]:
    if not isinstance(audit, dict) or not isinstance(audit.get("plan"), dict):
        raise DocumentError("not an audit.json: no plan", file=path, expected="an audit.json")
    plan = audit["plan"]
    plan_id = plan.get("id") or (plan.get("identity") or {}).get("id")
    if not isinstance(plan_id, str) or not plan_id:
        raise DocumentError("the plan has no id", file=path, path="plan.id")
    if not isinstance(plan.get("hash"), str):
        raise DocumentError("the plan has no hash", file=path, path="plan.hash")
    grade = audit.get("grade") or {}
    if grade.get("grade") not in t.GRADES:
        raise DocumentError(
            "unknown grade", file=path, path="grade.grade", expected=", ".join(t.GRADES)
        )
    provenance = audit.get("provenance") or {}
    return {
        "build_id": "build-" + sha[:24],
        "plan_id": plan_id,
        "plan_hash": plan["hash"],
        "plan_identity_hash": _text(plan.get("identityHash")),
        "kernel_fingerprints": list(provenance.get("kernelFingerprints") or []),
        "simreport_version": str((audit.get("software") or {}).get("simreport") or "unknown"),
        "audit_sha256": sha,
        "grade": grade["grade"],
        "grade_reasons": list(grade.get("reasons") or []),
        "summary": dict(audit.get("summary") or {}),
    }


def _build_conditions(
    audit: Mapping[str, Any], path: Path, build_id: str
) -> list[tuple[dict[str, Any], str]]:
    provenance = (audit.get("provenance") or {}).get("conditions") or {}
    found = []
    for position, cond in enumerate(audit.get("conditions") or []):
        if not isinstance(cond, dict) or not isinstance(cond.get("id"), str):
            raise DocumentError(
                "a condition without an id", file=path, path=f"conditions.{position}"
            )
        cid = cond["id"]
        row = {
            "build_id": build_id,
            "condition_id": cid,
            "position": position,
            "label": _text(cond.get("label")),
            "axis": _text(cond.get("axis")),
            "levels": dict(cond.get("levels") or {}),
            "model": _text(cond.get("model")),
            "is_base": bool(cond.get("isBase", False)),
            "identical_to_base": bool(cond.get("identicalToBase", False)),
            "scenario_hash": _text((provenance.get(cid) or {}).get("scenarioHash")),
            "runs": int(cond.get("runs") or 0),
            "succeeded": int(cond.get("succeeded") or 0),
            "complete": int(cond.get("complete") or 0),
            "excluded": int(cond.get("excluded") or 0),
            "means": dict(cond.get("means") or {}),
        }
        found.append((row, str(cond.get("dir") or cid)))
    return found
