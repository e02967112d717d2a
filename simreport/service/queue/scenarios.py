"""Scenarios and their versions: created, submitted (validated completely and stored as the
design its runs record, in review status `reviewing`) and reviewed, each in one transaction with
its Idempotency-Key. A version's spec never changes once submitted: `frozen_spec` reads it once
per ledger, and `run_document` makes of it the document a run executes."""

from __future__ import annotations

import copy
import re
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.canonical import content_hash
from ...core.errors import InputError, SchemaError, join_path
from ...core.execution_policy import ExecutionPolicy, ReviewPolicy
from ...core.redaction import redact_document
from ...core.testbed_schema import SEMVER
from ...core.values import refused_in_json
from ...core.versions import design_document, design_sha256
from ...ledger import tables as t
from ...ledger.db import insert_new, reading, utc_now
from ...ledger.migrate import prepare_once
from ...ledger.review import record_transition
from ..errors import Conflict, NotFound, Unprocessable, issue, one_of
from .idempotency import IdempotencyKey, replayed, store_answer, take_key
from .manifests import refuse_boundary_replaced, refuse_unrunnable, sut_agent
from .reviewing import last_step, review_step, step_body
from .transaction import write_transaction

if TYPE_CHECKING:
    from ...core.schema import Scenario

REVIEW_ACTIONS: Final = ("submit", "approve", "publish", "retire")


def create_scenario(
    engine: Engine,
    *,
    tenant: str,
    namespace: str,
    name: str,
    owner: str,
    risk_level: str,
    idempotency: IdempotencyKey | None = None,
) -> str:
    """A new scenario of `tenant` in `namespace`; returns its id (`scn-` + 24 hex digits of
    tenant, namespace and name). 409 when the namespace holds the name already."""
    issues = [
        issue(key, "must not be empty", "a name")
        for key, value in (("namespace", namespace), ("name", name), ("owner", owner))
        if not value.strip()
    ]
    if risk_level not in t.RISK_LEVELS:
        issues.append(
            issue("risk_level", f"unknown risk level {risk_level!r}", one_of(t.RISK_LEVELS))
        )
    if issues:
        raise Unprocessable(issues[0]["path"] + ": " + issues[0]["message"], issues=issues)
    scenario_id = "scn-" + content_hash([tenant, namespace, name])[:24]

    def write(conn: Connection) -> str:
        stored = take_key(conn, idempotency, tenant)
        if stored is not None:
            return str(replayed(stored, "scenario_id"))
        row = {
            "scenario_id": scenario_id,
            "tenant_id": tenant,
            "namespace": namespace,
            "name": name,
            "owner": owner,
            "risk_level": risk_level,
            "created_at": utc_now(),
        }
        if not insert_new(conn, t.scenario, row):
            raise Conflict(
                f"the namespace {namespace!r} holds a scenario named {name!r} already",
                code="duplicate_scenario",
            )
        store_answer(conn, idempotency, 201, {"scenario_id": scenario_id})
        return scenario_id

    return write_transaction(engine, write)


def submit_version(
    engine: Engine,
    *,
    tenant: str,
    scenario_id: str,
    version: str,
    spec: Any,
    source: str | None,
    created_by: str,
    idempotency: IdempotencyKey | None = None,
    policy: ExecutionPolicy | None = None,
    library: Path | None = None,
) -> str:
    """Submit `spec` as `version` of the scenario: validated completely (422 with every located
    issue), stored as the design its runs will record (`design_document`), in review status
    `reviewing` with its first review transition. 404 for a scenario `tenant` does not hold,
    409 when the version exists. With `policy` (a client's request), 422 as well for what the
    spec may not carry under it and for what could never run: an asset reference that does not
    resolve in `library`, a surrogate or script inside the SUT boundary (`refuse_unrunnable`).
    Without `policy`, 422 `sut_boundary_replaced` all the same (the agent's asset looked up in
    `library`, when given). Returns the status, "reviewing"."""
    if not re.match(SEMVER, version or ""):
        raise Unprocessable(
            f"version {version!r} is not a version",
            issues=[issue("version", f"{version!r} is not a version", "SemVer: 1.2.0")],
        )
    prepare_once(engine)
    with reading(engine) as conn:
        scenario_row(conn, scenario_id, tenant)  # 404 before anything about the spec
    scenario = validated(spec, lambda path: join_path("spec", path))
    identity = scenario.identity
    if identity is not None and identity.version != version:
        raise Unprocessable(
            f"the spec declares version {identity.version}, submitted as {version}",
            issues=[
                issue(
                    "spec.identity.version",
                    f"declares {identity.version}, submitted as {version}",
                    version,
                )
            ],
        )
    if policy is not None:
        refuse_unrunnable(
            scenario, policy, Path(library or "assets"), lambda path: join_path("spec", path)
        )
    else:  # what loading its runs would refuse, as far as the library says
        agent = sut_agent(scenario, Path(library)) if library is not None else None
        refuse_boundary_replaced(scenario, agent, lambda path: join_path("spec", path))
    stored_spec = design_document(redact_document(scenario.to_doc()))
    sha = design_sha256(stored_spec)

    def write(conn: Connection) -> str:
        stored = take_key(conn, idempotency, tenant)
        if stored is not None:
            return str(replayed(stored, "status"))
        now = utc_now()
        row = {
            "scenario_id": scenario_id,
            "version": version,
            "spec": stored_spec,
            "spec_sha256": sha,
            "status": "reviewing",
            "source": source,
            "created_by": created_by,
            "created_at": now,
        }
        if not insert_new(conn, t.scenario_version, row):
            raise Conflict(
                f"scenario {scenario_id} has a version {version} already: a changed spec is "
                "a new version",
                code="version_exists",
            )
        note = "submitted to the run service" + (f" from {source}" if source else "")
        record_transition(
            conn,
            "scenario",
            scenario_id,
            version,
            None,
            "reviewing",
            reviewer=created_by,
            risk_signoff=None,
            note=note,
            at=now,
        )
        store_answer(conn, idempotency, 202, {"status": "reviewing"})
        return "reviewing"

    return write_transaction(engine, write)


def scenario_row(conn: Connection, scenario_id: str, tenant: str) -> Any:
    row = conn.execute(
        sa.select(t.scenario).where(
            t.scenario.c.scenario_id == scenario_id, t.scenario.c.tenant_id == tenant
        )
    ).first()
    if row is None:
        raise NotFound(f"there is no scenario {scenario_id}", code="unknown_scenario")
    return row


def validated(doc: Any, locate: Callable[[str], str]) -> Scenario:
    """The scenario `doc` describes, or 422 naming every issue where `locate` puts it."""
    from ...kernel.engine import validate_scenario

    if not isinstance(doc, Mapping):
        raise Unprocessable(
            "the spec is not a scenario document",
            issues=[issue(locate(""), "not a mapping", "a scenario document (a JSON object)")],
        )
    # What a scenario file may not hold either (files.py refuses it while reading one), and
    # what the ledger's JSON columns cannot store: NUL and other control characters, NaN.
    refused = refused_in_json(doc)
    if refused is not None:
        path, message, expected = refused
        raise Unprocessable(
            f"{locate(path)}: {message}", issues=[issue(locate(path), message, expected)]
        )
    try:
        return validate_scenario(doc)
    except SchemaError as exc:
        issues = [issue(locate(i.path), i.message, i.expected) for i in exc.issues]
    except InputError as exc:
        issues = [issue(locate(exc.path or ""), exc.message, exc.expected)]
    raise Unprocessable(f"{issues[0]['path']}: {issues[0]['message']}", issues=issues)


def review_version(
    engine: Engine,
    *,
    tenant: str,
    scenario_id: str,
    version: str,
    action: str,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    policy: ReviewPolicy | None = None,
    idempotency: IdempotencyKey | None = None,
    at: datetime | None = None,
) -> str:
    """One review action on a scenario version, as `simreport review` takes it (the same
    transitions, kept with who took them): `queue.reviewing.review_step`, after a 404 for a
    scenario `tenant` does not hold. `risk_signoff` is the sha256 the reviewer signs off
    (needed to publish a high-risk scenario); `policy` says whether the version's author may
    approve and publish it (default: no). Returns the version's new status."""
    return review_step(
        engine,
        tenant=tenant,
        kind="scenario",
        name=scenario_id,
        version=version,
        action=action,
        reviewer=reviewer,
        note=note,
        risk_signoff=risk_signoff,
        policy=policy,
        idempotency=idempotency,
        at=at,
        check=lambda conn: scenario_row(conn, scenario_id, tenant),  # 404 for another tenant's
    )


def scenario_versions(
    engine: Engine, *, tenant: str, scenario_id: str, status: str | None = None
) -> dict[str, Any]:
    """Every version of the scenario (in `status`, when given) with its review status, risk
    level, sha256 and last review step (models.ScenarioVersionList); 404 for a scenario
    `tenant` does not hold."""
    from ...ledger.review import versions_in

    prepare_once(engine)
    with reading(engine) as conn:
        scenario_row(conn, scenario_id, tenant)
        found = versions_in(conn, kind="scenario", status=status, name=scenario_id, tenant=tenant)
    return {
        "versions": [
            {
                "scenario_id": v["id"],
                "version": v["version"],
                "status": v["status"],
                "risk_level": v["riskLevel"],
                "sha256": v["sha256"],
                "last_step": last_step(v),
            }
            for v in found
        ]
    }


def scenario_version(
    engine: Engine, *, tenant: str, scenario_id: str, version: str
) -> dict[str, Any]:
    """One version's review: its status, sha256, authors and every review step with its risk
    sign-off (models.ScenarioVersionDetail); 404 for a scenario or version `tenant` does not
    hold."""
    from ...ledger.review import history_in

    prepare_once(engine)
    with reading(engine) as conn:
        scenario_row(conn, scenario_id, tenant)
        try:
            found = history_in(conn, "scenario", scenario_id, version, tenant=tenant)
        except InputError as exc:
            raise NotFound(exc.message, code="unknown_version") from None
    return {
        "scenario_id": found["id"],
        "version": found["version"],
        "status": found["status"],
        "risk_level": found["riskLevel"],
        "sha256": found["sha256"],
        "authors": found["authors"],
        "steps": [step_body(step) for step in found["transitions"]],
    }


_SPECS: weakref.WeakKeyDictionary[
    Engine, dict[tuple[str, str, str], tuple[dict[str, Any], str]]
] = weakref.WeakKeyDictionary()
"""The spec and sha256 of each scenario version a ledger was seen to hold, by its engine."""


def frozen_spec(
    engine: Engine, scenario_id: str, version: str, tenant: str
) -> tuple[dict[str, Any], str]:
    """`_version_spec`, remembered: a version's spec never changes once submitted (only its
    review status does, which is read where it matters). The spec is shared: copy it before
    changing it (run_document does)."""
    known = _SPECS.setdefault(engine, {})
    key = (tenant, scenario_id, version)
    if key not in known:
        with reading(engine) as conn:
            known[key] = _version_spec(conn, scenario_id, version, tenant)
    return known[key]


def _version_spec(
    conn: Connection, scenario_id: str, version: str, tenant: str
) -> tuple[dict[str, Any], str]:
    scenario_row(conn, scenario_id, tenant)
    sv = t.scenario_version.c
    row = conn.execute(
        sa.select(sv.spec, sv.spec_sha256).where(
            sv.scenario_id == scenario_id, sv.version == version
        )
    ).first()
    if row is None:
        raise NotFound(f"scenario {scenario_id} has no version {version}", code="unknown_version")
    return dict(row.spec), str(row.spec_sha256)


def run_document(
    spec: Mapping[str, Any], *, seed: int | None, budget: Mapping[str, Any] | None, mode: str
) -> dict[str, Any]:
    """The scenario document a run executes: the version's spec with the request's seed, mode
    and budget (merged into the spec's) in place."""
    doc: dict[str, Any] = _json_copy(dict(spec))
    execution = doc.get("execution")
    if seed is not None:
        doc["seed"] = seed
        if isinstance(execution, dict) and execution.get("seed") is not None:
            execution["seed"] = seed
    if isinstance(execution, dict):
        execution["mode"] = mode
        if budget:
            execution["budget"] = {**(execution.get("budget") or {}), **budget}
        return doc
    issues = []
    if mode != "surrogate":
        issues.append(
            issue("mode", f"this scenario runs in surrogate mode, not {mode}", "surrogate")
        )
    if budget:
        issues.append(issue("budget", "only agent-testbed scenarios take a budget", "no budget"))
    if issues:
        raise Unprocessable(f"{issues[0]['path']}: {issues[0]['message']}", issues=issues)
    return doc


def _json_copy(value: Any) -> Any:
    """A copy of a JSON document's containers (its strings and numbers are immutable): what
    copy.deepcopy gives it, several times faster."""
    if type(value) is dict:
        return {k: _json_copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_json_copy(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return copy.deepcopy(value)
