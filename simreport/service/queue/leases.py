"""The run service's state, all of it in the ledger: scenarios and their versions, queued runs
with leases, their events while they run, what they recorded when they end, and every write
request's Idempotency-Key.

A run starts as a `pending` row whose manifest is frozen at once: every asset reference of the
scenario resolved in the service's library to an exact version and sha256, pinned in the ledger
as `simreport review import` pins it. A worker `claim`s the oldest pending run (PostgreSQL:
`SELECT … FOR UPDATE SKIP LOCKED`; SQLite: one write transaction, which takes the write lock at
BEGIN), holds a lease it renews with `heartbeat`, streams the run's events with `append_events`
and ends the run with `finish`, which records everything else in one transaction and only while
the worker still holds the lease. A run whose lease expired is ended `crashed` ("worker_lost") by
`reclaim_expired`, which every worker calls on the others' behalf: no run stays `running`. A run
queued with a retry allowed (`start_run(retries=1)`) goes back to `pending` instead, once, with
the same manifest and seed: its events so far stay, a harness event `run_retried` follows them,
and the retry's events are numbered after it (the run's `event_seq_base`), so the run's events
are one sequence without a gap.

Every function takes an Engine and raises ServiceError (404, 409, 410, 422, …) for what the
caller asked wrongly; the HTTP app maps those to responses in one place.
"""

from __future__ import annotations

import copy
import functools
import re
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.canonical import content_hash
from ...core.errors import InputError, SchemaError, join_path
from ...core.execution_policy import ExecutionPolicy, spec_issues
from ...core.redaction import redact_document
from ...core.testbed import SEMVER
from ...core.values import refused_in_json
from ...core.versions import RunChecks, VersionState, design_document, design_sha256, version_key
from ...ledger import tables as t
from ...ledger.asset_pins import pinned_versions
from ...ledger.bulk import (
    TableRows,
    bind_mappings,
    insert_ignoring_duplicates,
    pipelined,
    write_bulk,
    write_table_rows,
)
from ...ledger.db import (
    ATTEMPTS,
    as_utc,
    describe,
    insert_new,
    reading,
    utc_now,
    worth_retrying,
)
from ...ledger.errors import AssetVersionChanged
from ...ledger.migrate import prepare_once
from ...ledger.parallel import few_collections
from ...ledger.review import import_asset, read_asset_file, record_transition
from ...ledger.run_content import (
    event_rows,
    fault_rows,
    insert_events,
    layer_rows,
    record_rows,
    task_and_session_rows,
)
from ...ledger.run_evidence import evidence_package
from ...ledger.run_rows import terminal_reason
from ...ledger.rundir import RunDirectory, read_run_dir, wall_time

if TYPE_CHECKING:
    from ...core.schema import Scenario

SERVICE_REVIEWER: Final = "run service"
"""Who the review transitions of versions first seen by the service name."""

CONDITION: Final = "service"
"""The condition id of every run the service starts (it runs no audit)."""

TERMINAL: Final = ("completed", "crashed", "cancelled")
ACTIVE: Final = ("pending", "running")
WORKER_LOST: Final = "worker_lost"
MAX_RETRIES: Final = 1
"""How many times a run whose worker was lost may go back to pending, at most."""
RETRIED: Final = "run_retried"
"""The harness event that marks a retry in a run's events: the attempt that follows, why, and
what became of the lost one."""

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class ServiceError(Exception):
    """What the caller asked cannot be done: `status` is the HTTP status that says so, `code`
    a stable word for programs, `issues` the located problems of a 422 ({path, expected,
    message}), `retry_after` the seconds to wait before asking again (429, 503)."""

    status: int = 500
    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        issues: Sequence[Mapping[str, Any]] = (),
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """`fields`: what else the response body says, for programs (e.g. the cursor to resume
        from after a 410, the run a reused key started)."""
        super().__init__(message)
        self.message = message
        self.fields = dict(fields or {})
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.retry_after = retry_after
        self.issues = [dict(issue) for issue in issues]

    def body(self) -> dict[str, Any]:
        """The error as a response body."""
        found: dict[str, Any] = {"code": self.code, "message": self.message, **self.fields}
        if self.issues:
            found["issues"] = self.issues
        return found


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    """409: read the state before anything else; retrying the same request will not help."""

    status = 409
    code = "conflict"


class LeaseLost(Conflict):
    """The worker no longer holds the run's lease: another ended it (reclaimed, cancelled)."""

    code = "lease_lost"


class Gone(ServiceError):
    """410: the cursor points before what is still kept; re-read the snapshot."""

    status = 410
    code = "gone"


class Unprocessable(ServiceError):
    """422: fix the request and make a new one."""

    status = 422
    code = "unprocessable"


class StoredAnswer(ServiceError):
    """The Idempotency-Key already has an answer this operation cannot return as its own (an
    error the app stored with `remember`): answer `stored.status_code` with `stored.response`."""

    def __init__(self, stored: Stored) -> None:
        super().__init__(
            "this Idempotency-Key was answered before", code="replayed", status=stored.status_code
        )
        self.stored = stored


def _issue(path: str, message: str, expected: str | None = None) -> dict[str, Any]:
    return {"path": path, "expected": expected, "message": message}


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Stored:
    """The answer an Idempotency-Key got, as stored."""

    status_code: int
    response: dict[str, Any]
    request_sha256: str


@dataclass(frozen=True)
class IdempotencyKey:
    """A write request's key, to be stored with its answer in the transaction that does the
    write: of two concurrent requests with the same key exactly one writes, and the other gets
    its answer."""

    principal: str
    key: str
    request_sha256: str


@dataclass(frozen=True)
class Claim:
    """A run a worker claimed: everything needed to execute it."""

    run_id: str
    tenant: str
    manifest_id: str
    manifest: dict[str, Any]
    """The frozen manifest (its document in the ledger)."""
    request: dict[str, Any]
    scenario: dict[str, Any]
    """The scenario document to run: the version's spec with the request's seed, mode, budget."""
    checks: RunChecks
    """Purpose, pins (asset name → the frozen version) and the ledger's digests and statuses."""
    attempts: int
    trace_id: str
    library_dir: str
    """The folder name the scenario expects its asset library under (provenance.assetLibrary)."""


@dataclass(frozen=True)
class Heartbeat:
    """What a heartbeat learned: the lease is gone, or a cancellation was requested."""

    lease_lost: bool
    cancel: bool
    cancel_reason: str | None = None


@dataclass(frozen=True)
class Reclaimed:
    """A run whose worker was lost: `outcome` "crashed" (ended, "worker_lost") or "pending"
    (queued again for attempt `attempt`)."""

    run_id: str
    outcome: str
    attempt: int


# --------------------------------------------------------------------------- transactions


def _write(engine: Engine, work: Callable[[Connection], T]) -> T:
    """`work` in one write transaction (SQLite: BEGIN IMMEDIATE), tried again when PostgreSQL
    broke a deadlock by rolling it back or the connection turned out lost (see
    `worth_retrying`)."""
    prepare_once(engine)
    for attempt in range(ATTEMPTS):
        try:
            with engine.begin() as conn:
                return work(conn)
        except sa.exc.DBAPIError as exc:
            if not worth_retrying(exc) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


_LEASE_COLUMNS = (
    t.run.c.run_id,
    t.run.c.execution_status,
    t.run.c.lease_owner,
    t.run.c.event_seq_base,
    t.run.c.cancel_requested_at,
    t.run.c.cancel_reason,
    t.run.c.terminal_reason,
    t.run.c.content_sha256,
)
"""What a worker's or a cancellation's write reads of the run it changes (the terminal reason
and content hash say whether a worker's earlier try ended it already)."""


# The statements a run takes through the service are built once, here and beside the functions
# that execute them, with their values bound at execution: SQLAlchemy then finds each compiled
# statement in its cache without building the statement and its cache key again (which cost
# more than SQLite's own work for most of them). SQLite renders no FOR UPDATE.

_LOCKED_RUN: Final = (
    sa.select(*_LEASE_COLUMNS).where(t.run.c.run_id == sa.bindparam("p_run_id")).with_for_update()
)
_LOCKED_RUN_OF_TENANT: Final = _LOCKED_RUN.where(t.run.c.tenant_id == sa.bindparam("p_tenant"))
_LOCKED_RUN_AND_LAST_SEQ: Final = (
    sa.select(
        *_LEASE_COLUMNS,
        sa.select(sa.func.max(t.event.c.seq))
        .where(t.event.c.run_id == t.run.c.run_id)
        .scalar_subquery()
        .label("last_seq"),
    )
    .where(t.run.c.run_id == sa.bindparam("p_run_id"))
    .with_for_update(of=t.run)
)


def _locked_run(conn: Connection, run_id: str, tenant: str | None = None) -> Any:
    """The run's lease and state (`_LEASE_COLUMNS`), locked until the transaction ends
    (SQLite: the write lock holds it)."""
    if tenant is None:
        return conn.execute(_LOCKED_RUN, {"p_run_id": run_id}).first()
    return conn.execute(_LOCKED_RUN_OF_TENANT, {"p_run_id": run_id, "p_tenant": tenant}).first()


def _locked_run_to_append(conn: Connection, run_id: str, worker_id: str | None) -> Any:
    """`_locked_run` with `last_seq`, the last event recorded (None: none), in one query; 404
    for an unknown run, LeaseLost when `worker_id` does not hold it."""
    row = conn.execute(_LOCKED_RUN_AND_LAST_SEQ, {"p_run_id": run_id}).first()
    if row is None:
        raise NotFound(f"there is no run {run_id}", code="unknown_run")
    if worker_id is not None:
        _holds_lease(row, worker_id)
    return row


def _keyed(conn: Connection, idem: IdempotencyKey | None, tenant: str) -> Stored | None:
    """Take the key for this transaction (None), or the answer it got before (a concurrent
    holder of the key is waited for on PostgreSQL; SQLite lets one writer in at a time)."""
    if idem is None:
        return None
    placeholder = {
        "principal": idem.principal,
        "key": idem.key,
        "tenant_id": tenant,
        "request_sha256": idem.request_sha256,
        "status_code": 0,
        "response": {},
        "created_at": utc_now(),
    }
    if insert_new(conn, t.idempotency_key, placeholder):
        return None
    return _stored(conn, idem.principal, idem.key, tenant, idem.request_sha256)


_KEY_IS: Final = (t.idempotency_key.c.principal == sa.bindparam("p_principal")) & (
    t.idempotency_key.c.key == sa.bindparam("p_key")
)
_ANSWERED: Final = t.idempotency_key.update().where(_KEY_IS)
"""Executed with the key's status_code and response, beside the _KEY_IS parameters."""
_KEY_ANSWER: Final = sa.select(
    t.idempotency_key.c.tenant_id,
    t.idempotency_key.c.request_sha256,
    t.idempotency_key.c.status_code,
    t.idempotency_key.c.response,
).where(_KEY_IS)


def _store(
    conn: Connection, idem: IdempotencyKey | None, status_code: int, response: dict[str, Any]
) -> None:
    if idem is None:
        return
    conn.execute(
        _ANSWERED,
        {
            "p_principal": idem.principal,
            "p_key": idem.key,
            "status_code": status_code,
            "response": response,
        },
    )


def _stored(
    conn: Connection, principal: str, key: str, tenant: str, request_sha256: str
) -> Stored | None:
    row = conn.execute(_KEY_ANSWER, {"p_principal": principal, "p_key": key}).first()
    if row is None:
        return None
    if row.request_sha256 != request_sha256 or row.tenant_id != tenant:
        # The key's own request said what it started (only to the principal that sent both).
        started = (row.response or {}).get("run_id") if row.tenant_id == tenant else None
        raise Conflict(
            f"the Idempotency-Key {key!r} was used with a different request: a new request "
            "needs a new key",
            code="idempotency_key_reused",
            fields={"run_id": started} if isinstance(started, str) else None,
        )
    return Stored(int(row.status_code), dict(row.response or {}), str(row.request_sha256))


def _replayed(stored: Stored, field_name: str) -> Any:
    """The value `field_name` of a stored success, or StoredAnswer for anything else."""
    if 200 <= stored.status_code < 300 and field_name in stored.response:
        return stored.response[field_name]
    raise StoredAnswer(stored)


# --------------------------------------------------------------------------- scenarios


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
        _issue(key, "must not be empty", "a name")
        for key, value in (("namespace", namespace), ("name", name), ("owner", owner))
        if not value.strip()
    ]
    if risk_level not in t.RISK_LEVELS:
        issues.append(
            _issue("risk_level", f"unknown risk level {risk_level!r}", _one_of(t.RISK_LEVELS))
        )
    if issues:
        raise Unprocessable(issues[0]["path"] + ": " + issues[0]["message"], issues=issues)
    scenario_id = "scn-" + content_hash([tenant, namespace, name])[:24]

    def write(conn: Connection) -> str:
        stored = _keyed(conn, idempotency, tenant)
        if stored is not None:
            return str(_replayed(stored, "scenario_id"))
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
        _store(conn, idempotency, 201, {"scenario_id": scenario_id})
        return scenario_id

    return _write(engine, write)


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
    Returns the status, "reviewing"."""
    if not re.match(SEMVER, version or ""):
        raise Unprocessable(
            f"version {version!r} is not a version",
            issues=[_issue("version", f"{version!r} is not a version", "SemVer: 1.2.0")],
        )
    prepare_once(engine)
    with reading(engine) as conn:
        _scenario_row(conn, scenario_id, tenant)  # 404 before anything about the spec
    scenario = _validated(spec, lambda path: join_path("spec", path))
    identity = scenario.identity
    if identity is not None and identity.version != version:
        raise Unprocessable(
            f"the spec declares version {identity.version}, submitted as {version}",
            issues=[
                _issue(
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
    stored_spec = design_document(redact_document(scenario.to_doc()))
    sha = design_sha256(stored_spec)

    def write(conn: Connection) -> str:
        stored = _keyed(conn, idempotency, tenant)
        if stored is not None:
            return str(_replayed(stored, "status"))
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
        _store(conn, idempotency, 202, {"status": "reviewing"})
        return "reviewing"

    return _write(engine, write)


def _scenario_row(conn: Connection, scenario_id: str, tenant: str) -> Any:
    row = conn.execute(
        sa.select(t.scenario).where(
            t.scenario.c.scenario_id == scenario_id, t.scenario.c.tenant_id == tenant
        )
    ).first()
    if row is None:
        raise NotFound(f"there is no scenario {scenario_id}", code="unknown_scenario")
    return row


def _validated(doc: Any, locate: Callable[[str], str]) -> Scenario:
    """The scenario `doc` describes, or 422 naming every issue where `locate` puts it."""
    from ...kernel.engine import validate_scenario

    if not isinstance(doc, Mapping):
        raise Unprocessable(
            "the spec is not a scenario document",
            issues=[_issue(locate(""), "not a mapping", "a scenario document (a JSON object)")],
        )
    # What a scenario file may not hold either (files.py refuses it while reading one), and
    # what the ledger's JSON columns cannot store: NUL and other control characters, NaN.
    refused = refused_in_json(doc)
    if refused is not None:
        path, message, expected = refused
        raise Unprocessable(
            f"{locate(path)}: {message}", issues=[_issue(locate(path), message, expected)]
        )
    try:
        return validate_scenario(doc)
    except SchemaError as exc:
        issues = [_issue(locate(i.path), i.message, i.expected) for i in exc.issues]
    except InputError as exc:
        issues = [_issue(locate(exc.path or ""), exc.message, exc.expected)]
    raise Unprocessable(f"{issues[0]['path']}: {issues[0]['message']}", issues=issues)


def _one_of(values: Sequence[str]) -> str:
    return "one of " + ", ".join(values)


# --------------------------------------------------------------------------- starting runs


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
            _issue("mode", f"this scenario runs in surrogate mode, not {mode}", "surrogate")
        )
    if budget:
        issues.append(_issue("budget", "only agent-testbed scenarios take a budget", "no budget"))
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


def _request_path(path: str) -> str:
    """Where in a run request a problem of its run document lies."""
    for inner, outer in (
        ("execution.budget", "budget"),
        ("execution.mode", "mode"),
        ("execution.seed", "seed"),
    ):
        if path == inner or path.startswith(inner + "."):
            return outer + path[len(inner) :]
    return "seed" if path == "seed" else join_path("spec", path)


@dataclass(frozen=True)
class _Resolved:
    slot: str
    kind: str
    name: str
    version: str
    sha256: str
    file: str
    path: Path
    content: Any = None
    """The asset's content, as its kind's model."""


def _resolve(scenario: Scenario, library: Path) -> list[_Resolved]:
    """Every asset reference of the scenario resolved in `library` (labels → exact versions),
    or 422 naming each that does not resolve."""
    from ...kernel.testbed.assets import AssetError, AssetLibrary, manifest_references

    references = manifest_references(scenario)
    if not references:
        return []
    if not library.is_dir():
        raise ServiceError(
            f"the run service's asset library {library} is not a folder",
            code="library_unavailable",
        )
    assets = AssetLibrary(library)
    found: list[_Resolved] = []
    issues = []
    for slot, ref, kind in references:
        try:
            asset = assets.resolve(ref, kind, slot)
        except AssetError as exc:
            issues.append(_issue(join_path("spec", slot), exc.message, "an asset in the library"))
            continue
        try:
            file = asset.path.relative_to(library).as_posix()
        except ValueError:
            file = asset.path.as_posix()
        found.append(
            _Resolved(
                slot, kind, asset.name, asset.version, asset.sha256, file, asset.path, asset.content
            )
        )
    if issues:
        raise Unprocessable(
            f"the manifest does not resolve: {issues[0]['path']}: {issues[0]['message']}",
            code="manifest_unresolved",
            issues=issues,
        )
    return found


_PINS: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], str]] = weakref.WeakKeyDictionary()
"""The pins (asset id, version) → sha256 each ledger was seen to hold, by its engine."""


def _pin(engine: Engine, resolved: Sequence[_Resolved], tenant: str) -> dict[str, str]:
    """Record every resolved asset version the ledger has not seen (with its header's status),
    in a transaction of its own, so that a refused regression run leaves them there to be
    reviewed. A version seen before with other content is refused (422). Returns slot →
    sha256 as pinned."""
    if not resolved:
        return {}
    ids = {r.slot: _asset_id(tenant, r.kind, r.name) for r in resolved}
    # A pin never changes once recorded: those seen before need no query.
    held = _PINS.setdefault(engine, {})
    if any((ids[r.slot], r.version) not in held for r in resolved):
        with reading(engine) as conn:
            held.update(pinned_versions(conn, list(ids.values())))
    unseen = [r for r in resolved if (ids[r.slot], r.version) not in held]

    def write(conn: Connection) -> dict[tuple[str, str], str]:
        now, pinned = utc_now(), {}
        for r in unseen:
            try:
                asset = read_asset_file(r.path, r.name, r.version)
                done = import_asset(conn, asset, tenant, SERVICE_REVIEWER, now)
            except AssetVersionChanged as exc:
                raise _changed(r, exc.message) from None
            pinned[(ids[r.slot], r.version)] = done.sha256
        return pinned

    if unseen:
        held.update(_write(engine, write))  # once committed
    for r in resolved:
        pinned = held[(ids[r.slot], r.version)]
        if pinned != r.sha256:
            raise _changed(
                r,
                f"asset_version_changed: {r.name}@{r.version} is pinned in the ledger with "
                f"sha256 {pinned}, but {r.file} in the library now has sha256 {r.sha256}: its "
                "content changed without a new version",
            )
    return {r.slot: r.sha256 for r in resolved}


def _changed(r: _Resolved, message: str) -> Unprocessable:
    return Unprocessable(
        message,
        code="asset_version_changed",
        issues=[_issue(join_path("spec", r.slot), message, "a new version for new content")],
    )


def refuse_unrunnable(
    scenario: Scenario, policy: ExecutionPolicy, library: Path, locate: Callable[[str], str]
) -> list[_Resolved]:
    """What a client's spec must pass before it is stored or run: 422 naming every field it may
    not carry under `policy` (`not_allowed`: a command, a URL, a key variable, an entry, a
    provider, endpoint or model the operator did not declare), every asset reference that does
    not resolve in `library` (`manifest_unresolved`), every surrogate or script inside the SUT
    boundary (`sut_boundary_replaced`). (A setting the testbed does not implement fails the
    scenario's validation before.) `locate` turns a path in the spec into one in the request.
    Returns the resolved assets."""
    from ...kernel.testbed.assets import AgentAsset
    from ...kernel.testbed.boundary import REFUSAL, boundary_replacements

    try:
        resolved = _resolve(scenario, library)
    except Unprocessable:
        # What the policy refuses is said first: it does not depend on the library.
        _refuse_disallowed(scenario, policy, None, locate)
        raise
    agent = next((r.content for r in resolved if r.slot == "sut.agent"), None)
    entry = agent.entry if isinstance(agent, AgentAsset) else None
    _refuse_disallowed(scenario, policy, entry, locate)
    if isinstance(agent, AgentAsset) and scenario.sut is not None:
        replaced = [
            _issue(locate("sut.boundary"), text, "nothing inside the boundary replaced")
            for text in boundary_replacements(scenario, agent)
        ]
        if replaced:
            raise _refused(REFUSAL, "the spec replaces what it tests", replaced)
    return resolved


def _refuse_disallowed(
    scenario: Scenario,
    policy: ExecutionPolicy,
    agent_entry: str | None,
    locate: Callable[[str], str],
) -> None:
    found = [
        _issue(locate(i.path), i.message, i.expected)
        for i in spec_issues(scenario, policy, agent_entry=agent_entry)
    ]
    if found:
        raise _refused("not_allowed", "not allowed by the run service's execution policy", found)


def _refused(code: str, what: str, issues: list[dict[str, Any]]) -> Unprocessable:
    first = issues[0]
    return Unprocessable(f"{what}: {first['path']}: {first['message']}", code=code, issues=issues)


def operator_resources(scenario: Scenario) -> dict[str, str]:
    """The operator's resources a scenario names, by where it names them: what its manifest
    records."""
    found = {}
    if scenario.llm.endpoint is not None:
        found["llm.endpoint"] = scenario.llm.endpoint
    user_llm = scenario.user.llm if scenario.user is not None else None
    if user_llm is not None and user_llm.endpoint is not None:
        found["user.llm.endpoint"] = user_llm.endpoint
    if scenario.simulator is not None and scenario.simulator.name is not None:
        found["simulator.name"] = scenario.simulator.name
    return found


def start_run(
    engine: Engine,
    *,
    tenant: str,
    principal: str | None,
    scenario_id: str,
    version: str,
    mode: str,
    seed: int | None,
    budget: Mapping[str, Any] | None,
    purpose: str,
    library: Path,
    idempotency: IdempotencyKey | None = None,
    capacity: Capacity | None = None,
    retries: int = 0,
    policy: ExecutionPolicy | None = None,
) -> tuple[str, str]:
    """Queue a run of `scenario_id@version`: its manifest frozen now (every asset reference
    resolved in `library` and pinned), the run `pending` with the request and who made it.
    Returns (run_id, manifest_id). 404 for an unknown scenario or version; 422 for a request
    the version cannot run with, an asset reference that does not resolve or changed under its
    version, and — purpose regression — a scenario version or resolved asset version that is
    not online (each named). With `capacity`, 429 when `principal`'s runs pending or running
    reach its quota and 503 when the queue's reach its limit, counted in the transaction that
    queues the run (requests sent together never overshoot them). `retries`: how many times
    (0 to MAX_RETRIES) the run goes back to pending when its worker is lost. With `policy` (a
    client's request), 422 for what the version's spec may not carry under it or could never
    run (`refuse_unrunnable`), whoever submitted it."""
    if not 0 <= retries <= MAX_RETRIES:
        raise ValueError(f"retries must be 0 to {MAX_RETRIES}, not {retries}")
    issues = []
    if mode not in t.RUN_MODES:
        issues.append(_issue("mode", f"unknown mode {mode!r}", _one_of(t.RUN_MODES)))
    if purpose not in t.PURPOSES:
        issues.append(_issue("purpose", f"unknown purpose {purpose!r}", _one_of(t.PURPOSES)))
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        issues.append(_issue("seed", f"{seed!r} is not a seed", "an integer ≥ 0"))
    if budget is not None and not isinstance(budget, Mapping):
        issues.append(_issue("budget", "not a mapping", "maxTurns, maxToolCalls, wallClock"))
    if issues:
        raise Unprocessable(f"{issues[0]['path']}: {issues[0]['message']}", issues=issues)
    prepare_once(engine)
    spec, spec_sha = _frozen_spec(engine, scenario_id, version, tenant)
    doc = run_document(spec, seed=seed, budget=budget, mode=mode)
    scenario = _validated(doc, _request_path)
    if purpose == "regression" and scenario.identity is None:
        raise Unprocessable(
            "a regression run needs a scenario with an identity (id and version)",
            code="version_not_online",
            issues=[_issue("spec.identity", "missing", "an identity; or purpose exploration")],
        )
    if policy is not None:
        resolved = refuse_unrunnable(scenario, policy, Path(library), _request_path)
    else:
        resolved = _resolve(scenario, Path(library))
    pinned = _pin(engine, resolved, tenant)
    frozen = {
        "scenario": {
            "scenarioId": scenario_id,
            "id": scenario.identity.id if scenario.identity is not None else None,
            "version": version,
            "specSha256": spec_sha,
        },
        "resolved": {
            r.slot: {
                "kind": r.kind,
                "name": r.name,
                "version": r.version,
                "sha256": pinned[r.slot],
                "file": r.file,
            }
            for r in resolved
        },
        "world": scenario.world,
        "seed": scenario.seed,
        "mode": mode,
        "budget": scenario.execution.budget.to_doc() if scenario.execution is not None else None,
        "purpose": purpose,
    }
    resources = operator_resources(scenario)
    if resources:  # absent when the run uses none, so other manifests keep their digests
        frozen["resources"] = resources
    manifest_sha = content_hash(frozen)
    manifest_id = "manifest-" + manifest_sha[:24]
    request = {
        "scenario_id": scenario_id,
        "version": version,
        "mode": mode,
        "seed": seed,
        "budget": dict(budget) if budget is not None else None,
        "purpose": purpose,
    }

    def write(conn: Connection) -> tuple[str, str]:
        stored = _keyed(conn, idempotency, tenant)
        if stored is not None:
            return str(_replayed(stored, "run_id")), str(_replayed(stored, "manifest_id"))
        if capacity is not None:
            _check_capacity(conn, capacity, principal)
        if purpose == "regression":
            _all_online(conn, scenario_id, version, resolved, tenant)
        now = utc_now()
        run_id = "run-" + uuid.uuid4().hex[:24]
        manifest_row = {
            "manifest_id": manifest_id,
            "tenant_id": tenant,
            "scenario_id": scenario_id,
            "scenario_version": version,
            "resolved": frozen["resolved"],
            "manifest_sha256": manifest_sha,
            "seed": scenario.seed,
            "created_at": now,
            "document": frozen,
        }
        asset_rows = [
            {
                "manifest_id": manifest_id,
                "slot": r.slot,
                "asset_id": _asset_id(tenant, r.kind, r.name),
                "version": r.version,
                "content_sha256": pinned[r.slot],
            }
            for r in resolved
        ]
        run_row = {
            "run_id": run_id,
            "tenant_id": tenant,
            "manifest_id": manifest_id,
            "mode": mode,
            "execution_status": "pending",
            "validity_status": "unchecked",
            "evidence_status": "unchecked",
            "quality_ref": None,
            "trace_id": uuid.uuid4().hex,
            "created_at": now,
            "condition_id": CONDITION,
            "replication": 0,
            "seed_path": [scenario.seed],
            "engine": scenario.world or "external",
            "result": {},
            "content_sha256": "",
            "purpose": purpose,
            "request": request,
            "principal": principal,
            "attempts": 0,
            "retries_allowed": retries,
        }
        # These read nothing back: on PostgreSQL they go in one round trip (a round trip each
        # was most of queueing's cost), the manifest's assets in one statement.
        with pipelined(conn):
            insert_ignoring_duplicates(conn, t.manifest, [manifest_row])
            insert_ignoring_duplicates(conn, t.manifest_asset, asset_rows)
            conn.execute(_QUEUED, run_row)
            _store(conn, idempotency, 202, {"run_id": run_id, "manifest_id": manifest_id})
        return run_id, manifest_id

    return _write(engine, write)


_QUEUED: Final = t.run.insert()
"""A run queued: executed with its columns' values."""


def _asset_id(tenant: str, kind: str, name: str) -> str:
    return f"{tenant}:{kind}:{name}"  # as ingest and review name asset rows


_SPECS: weakref.WeakKeyDictionary[
    Engine, dict[tuple[str, str, str], tuple[dict[str, Any], str]]
] = weakref.WeakKeyDictionary()
"""The spec and sha256 of each scenario version a ledger was seen to hold, by its engine."""


def _frozen_spec(
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
    _scenario_row(conn, scenario_id, tenant)
    sv = t.scenario_version.c
    row = conn.execute(
        sa.select(sv.spec, sv.spec_sha256).where(
            sv.scenario_id == scenario_id, sv.version == version
        )
    ).first()
    if row is None:
        raise NotFound(f"scenario {scenario_id} has no version {version}", code="unknown_version")
    return dict(row.spec), str(row.spec_sha256)


def _all_online(
    conn: Connection, scenario_id: str, version: str, resolved: Sequence[_Resolved], tenant: str
) -> None:
    """422 naming every version a regression run would record that is not online."""
    sv, av = t.scenario_version.c, t.asset_version.c
    status = conn.execute(
        sa.select(sv.status).where(sv.scenario_id == scenario_id, sv.version == version)
    ).scalar_one()
    refused = []
    if status != "online":
        refused.append(("version", f"{scenario_id}@{version}", status))
    for r in resolved:
        held = conn.execute(
            sa.select(av.status).where(
                av.asset_id == _asset_id(tenant, r.kind, r.name), av.version == r.version
            )
        ).scalar_one()
        if held != "online":
            refused.append((join_path("spec", r.slot), f"{r.name}@{r.version}", held))
    if refused:
        listed = ", ".join(f"{name} ({held})" for _, name, held in refused)
        raise Unprocessable(
            f"a regression run needs every version it records online: {listed}; review and "
            "publish them, or run as exploration",
            code="version_not_online",
            issues=[_issue(path, f"{name} is {held}", "online") for path, name, held in refused],
        )


@dataclass(frozen=True)
class Capacity:
    """How many runs may be pending or running: per principal (None: no limit) and in all."""

    quota: int | None
    max_queue: int
    retry_after: float


QUEUE_LOCK: Final = 0x51_4D_52_51  # any constant: the one advisory lock queueing takes


def _check_capacity(conn: Connection, capacity: Capacity, principal: str | None) -> None:
    """429 or 503 (see start_run), inside the write transaction. On PostgreSQL queueing takes
    one transaction-scoped advisory lock first, so two transactions never count the same
    state; SQLite lets one writer in at a time already."""
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({QUEUE_LOCK})")
    quota = capacity.quota
    in_all, of_principal = conn.execute(_ACTIVE_COUNTS, {"p_principal": principal}).one()
    if quota is not None and principal is not None and of_principal >= quota:
        raise ServiceError(
            f"the token {principal!r} has {quota} run(s) pending or running, its quota",
            status=429,
            code="quota_exceeded",
            retry_after=capacity.retry_after,
        )
    if in_all >= capacity.max_queue:
        raise ServiceError(
            f"the queue holds {capacity.max_queue} runs, its limit",
            status=503,
            code="queue_full",
            retry_after=capacity.retry_after,
        )


def count_active(engine: Engine, *, principal: str | None = None) -> int:
    """Runs pending or running (of `principal` only, when given): for quotas and a full queue."""
    prepare_once(engine)
    with reading(engine) as conn:
        return _active(conn, principal)


_ACTIVE_RUNS: Final = (
    sa.select(sa.func.count())
    .select_from(t.run)
    .where(
        # OR, not IN: SQLite would build a temporary index of the list for every count.
        sa.or_(*(t.run.c.execution_status == status for status in ACTIVE))
    )
)
_ACTIVE_RUNS_OF: Final = _ACTIVE_RUNS.where(t.run.c.principal == sa.bindparam("p_principal"))
_ACTIVE_COUNTS: Final = _ACTIVE_RUNS.add_columns(
    sa.func.count().filter(t.run.c.principal == sa.bindparam("p_principal"))
)
"""Runs pending or running: in all, and of one principal."""


def _active(conn: Connection, principal: str | None = None) -> int:
    if principal is None:
        return int(conn.execute(_ACTIVE_RUNS).scalar_one())
    return int(conn.execute(_ACTIVE_RUNS_OF, {"p_principal": principal}).scalar_one())


# --------------------------------------------------------------------------- health and metrics


@dataclass(frozen=True)
class QueueState:
    """What /healthz says of the queue: runs pending (waiting for a worker), runs running, and
    when the oldest pending run was queued (None: nothing pending)."""

    pending: int
    running: int
    oldest_pending_at: datetime | None


_QUEUE_STATE: Final = sa.select(
    sa.func.count().filter(t.run.c.execution_status == "pending"),
    sa.func.count().filter(t.run.c.execution_status == "running"),
    sa.func.min(t.run.c.created_at).filter(t.run.c.execution_status == "pending"),
).where(sa.or_(*(t.run.c.execution_status == status for status in ACTIVE)))
"""Runs pending and running and the oldest pending one's queueing: read on the index of
(execution_status, created_at), however long the ledger's history."""


def queue_state(engine: Engine) -> QueueState:
    prepare_once(engine)
    with reading(engine) as conn:
        pending, running, oldest = conn.execute(_QUEUE_STATE).one()
    return QueueState(int(pending), int(running), as_utc(oldest))


CLAIM_TO_FINISH_BUCKETS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
"""The upper bounds (seconds) of the claim-to-finish histogram's buckets."""


@dataclass(frozen=True)
class Durations:
    """Claim-to-finish times of ended runs: how many, their sum (seconds), and how many took at
    most each bound of CLAIM_TO_FINISH_BUCKETS (cumulative, as Prometheus' buckets)."""

    count: int
    total_seconds: float
    at_most: tuple[int, ...]


@dataclass(frozen=True)
class RunStatistics:
    """The runs the service queued, by execution status (every status, 0 when none), and the
    claim-to-finish times of those that ended after a worker claimed them, by status."""

    by_status: dict[str, int]
    claim_to_finish: dict[str, Durations]


def _claim_to_finish(dialect: str) -> sa.ColumnElement[Any]:
    """Seconds from a run's first claim (started_at) to its end; NULL unless both are set."""
    r = t.run.c
    if dialect == "postgresql":
        return sa.cast(sa.extract("epoch", r.ended_at - r.started_at), sa.Float)
    # SQLite keeps UTC text, which julianday reads (days, with a fraction).
    return (sa.func.julianday(r.ended_at) - sa.func.julianday(r.started_at)) * 86400.0


@functools.cache
def _run_statistics_query(dialect: str) -> sa.Select[Any]:
    timed = (
        sa.select(t.run.c.execution_status, _claim_to_finish(dialect).label("seconds"))
        # Runs queued through the service: an audit's ingested runs have no principal.
        .where(t.run.c.principal.is_not(None))
        .subquery()
    )
    seconds = timed.c.seconds
    return sa.select(
        timed.c.execution_status,
        sa.func.count(),
        sa.func.count(seconds),
        sa.func.coalesce(sa.func.sum(seconds), 0.0),
        *(
            sa.func.sum(sa.case((seconds <= bound, 1), else_=0))
            for bound in CLAIM_TO_FINISH_BUCKETS
        ),
    ).group_by(timed.c.execution_status)


def run_statistics(engine: Engine) -> RunStatistics:
    """One aggregate over the run table (for /metrics: it reads every run the service queued,
    so its cost grows with the ledger's history)."""
    prepare_once(engine)
    by_status = dict.fromkeys(t.EXECUTION_STATUSES, 0)
    durations = {
        status: Durations(0, 0.0, (0,) * len(CLAIM_TO_FINISH_BUCKETS)) for status in TERMINAL
    }
    with reading(engine) as conn:
        rows = conn.execute(_run_statistics_query(conn.dialect.name)).all()
    for status, runs, ended, total, *at_most in rows:
        by_status[status] = int(runs)
        if status in durations:
            durations[status] = Durations(
                int(ended), float(total), tuple(int(n or 0) for n in at_most)
            )
    return RunStatistics(by_status, durations)


# --------------------------------------------------------------------------- workers


_ANY_PENDING: Final = (
    sa.select(t.run.c.run_id).where(t.run.c.execution_status == "pending").limit(1)
)
_OLDEST_PENDING: Final = (
    sa.select(t.run.c.run_id)
    .where(t.run.c.execution_status == "pending")
    .order_by(t.run.c.created_at, t.run.c.run_id)
    .limit(1)
    .with_for_update(skip_locked=True)
)
_TAKE: Final = (
    t.run.update()
    .where(
        t.run.c.run_id == _OLDEST_PENDING.scalar_subquery(),
        t.run.c.execution_status == "pending",
    )
    .values(
        execution_status="running",
        lease_owner=sa.bindparam("p_owner"),
        lease_expires_at=sa.bindparam("p_expires", type_=t.run.c.lease_expires_at.type),
        heartbeat_at=sa.bindparam("p_now", type_=t.run.c.heartbeat_at.type),
        lease_suspected_at=None,
        # The first attempt's start stays; a retry's is its run_started event.
        started_at=sa.func.coalesce(
            t.run.c.started_at, sa.bindparam("p_now", type_=t.run.c.started_at.type)
        ),
        attempts=t.run.c.attempts + 1,
    )
    .returning(*t.run.columns)
)
"""The oldest pending run, claimed in one statement (PostgreSQL: the queue's usual
`UPDATE … WHERE run_id = (SELECT … FOR UPDATE SKIP LOCKED)`); its row as claimed."""


def claim(
    engine: Engine, worker_id: str, *, lease_seconds: float, look_first: bool = True
) -> Claim | None:
    """The oldest pending run, now `running` under a lease of `worker_id` for `lease_seconds`
    (None when nothing is pending). Two workers never claim the same run. `look_first`: see
    whether any run is pending before taking the write lock (an idle worker's poll, which on
    SQLite then costs no write lock; a worker that has just claimed one expects more)."""
    prepare_once(engine)
    if look_first:
        with reading(engine) as conn:
            if conn.execute(_ANY_PENDING).first() is None:
                return None

    def write(conn: Connection) -> Claim | None:
        r = t.run.c
        now = utc_now()
        taken = conn.execute(
            _TAKE,
            {
                "p_owner": worker_id,
                "p_expires": now + timedelta(seconds=lease_seconds),
                "p_now": now,
            },
        ).first()
        if taken is None:
            return None
        run_id = taken.run_id
        try:
            return _claim_of(conn, taken, engine)
        except (ServiceError, LookupError, TypeError, ValueError, sa.exc.NoResultFound) as exc:
            # A run that cannot even be described to a worker must not be claimed forever.
            conn.execute(
                t.run.update()
                .where(r.run_id == run_id)
                .values(
                    execution_status="crashed",
                    ended_at=now,
                    terminal_reason=f"unclaimable: {type(exc).__name__}: {exc}",
                    lease_expires_at=None,
                )
            )
            return None

    return _write(engine, write)


_CLAIMED_MANIFEST: Final = (
    sa.select(
        t.manifest.c.manifest_id,
        t.manifest.c.scenario_id,
        t.manifest.c.scenario_version,
        t.manifest.c.document,
        t.scenario_version.c.spec_sha256,
        t.scenario_version.c.status,
    )
    .join(
        t.scenario_version,
        (t.scenario_version.c.scenario_id == t.manifest.c.scenario_id)
        & (t.scenario_version.c.version == t.manifest.c.scenario_version),
    )
    .where(t.manifest.c.manifest_id == sa.bindparam("p_manifest_id"))
)
"""A claimed run's manifest, with the state of the scenario version it froze."""
_ASSET_STATUSES: Final = (
    sa.select(t.manifest_asset.c.slot, t.asset_version.c.status)
    .join(
        t.asset_version,
        (t.asset_version.c.asset_id == t.manifest_asset.c.asset_id)
        & (t.asset_version.c.version == t.manifest_asset.c.version),
    )
    .where(t.manifest_asset.c.manifest_id == sa.bindparam("p_manifest_id"))
)


def _claim_of(conn: Connection, run: Any, engine: Engine) -> Claim:
    """What a worker needs to execute the claimed run (`run`: its row as the claim left it)."""
    manifest = conn.execute(_CLAIMED_MANIFEST, {"p_manifest_id": run.manifest_id}).one()
    spec, _ = _frozen_spec(engine, manifest.scenario_id, manifest.scenario_version, run.tenant_id)
    statuses = {
        slot: status
        for slot, status in conn.execute(_ASSET_STATUSES, {"p_manifest_id": manifest.manifest_id})
    }
    request = dict(run.request or {})
    document = dict(manifest.document)
    scenario = run_document(
        spec,
        seed=request.get("seed"),
        budget=request.get("budget"),
        mode=str(request.get("mode") or run.mode),
    )
    resolved = document.get("resolved") or {}
    identity_id = (document.get("scenario") or {}).get("id")
    scenarios = {}
    if identity_id:
        scenarios[version_key(identity_id, manifest.scenario_version)] = VersionState(
            sha256=manifest.spec_sha256, status=manifest.status
        )
    checks = RunChecks(
        purpose=run.purpose,
        spec_sha256=manifest.spec_sha256 if identity_id else None,
        version=manifest.scenario_version if identity_id else None,
        scenarios=scenarios,
        assets={
            version_key(entry["name"], entry["version"]): VersionState(
                sha256=entry["sha256"], status=statuses.get(slot, "draft")
            )
            for slot, entry in resolved.items()
        },
        ledger=describe(engine.url.render_as_string(hide_password=False)),
        pins={entry["name"]: entry["version"] for entry in resolved.values()},
    )
    provenance = scenario.get("provenance")
    library_dir = "assets"
    if isinstance(provenance, Mapping) and isinstance(provenance.get("assetLibrary"), str):
        library_dir = provenance["assetLibrary"]
    return Claim(
        run_id=str(run.run_id),
        tenant=run.tenant_id,
        manifest_id=manifest.manifest_id,
        manifest=document,
        request=request,
        scenario=scenario,
        checks=checks,
        attempts=int(run.attempts),
        trace_id=run.trace_id,
        library_dir=library_dir,
    )


_HELD: Final = (
    (t.run.c.run_id == sa.bindparam("p_run_id"))
    & (t.run.c.lease_owner == sa.bindparam("p_owner"))
    & (t.run.c.execution_status == "running")
)
"""The run, while the worker named holds its lease."""
_RENEW: Final = (
    t.run.update()
    .where(_HELD)
    .values(
        lease_expires_at=sa.bindparam("p_expires", type_=t.run.c.lease_expires_at.type),
        heartbeat_at=sa.bindparam("p_now", type_=t.run.c.heartbeat_at.type),
        lease_suspected_at=None,  # the worker is alive: no reclaimer may take the run
    )
    .returning(t.run.c.cancel_requested_at, t.run.c.cancel_reason)
)


def heartbeat(engine: Engine, run_id: str, worker_id: str, *, lease_seconds: float) -> Heartbeat:
    """Renew the worker's lease on the run for `lease_seconds` from now, even when it has
    expired (while no reclaimer has taken the run), and clear a reclaimer's mark; says whether
    the lease is lost (another ended the run) and whether a cancellation was requested."""

    def write(conn: Connection) -> Heartbeat:
        now = utc_now()
        row = conn.execute(
            _RENEW,
            {
                "p_run_id": run_id,
                "p_owner": worker_id,
                "p_expires": now + timedelta(seconds=lease_seconds),
                "p_now": now,
            },
        ).first()
        if row is None:
            return Heartbeat(lease_lost=True, cancel=False)
        return Heartbeat(False, row.cancel_requested_at is not None, row.cancel_reason)

    return _write(engine, write)


def append_events(
    engine: Engine,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    *,
    worker_id: str | None = None,
) -> None:
    """Record events of a running run as the kernel emitted them ({seq, type, actor, t, wall,
    payload}), in seq order; a retried run's are numbered after its retry mark (the kernel's
    seq n is recorded as the run's event_seq_base + n). Events recorded already are skipped, so
    sending a batch again changes nothing; a batch that would leave a gap is refused (409).
    With `worker_id`, only while that worker holds the run's lease (LeaseLost otherwise)."""
    if not events:
        return
    ordered = sorted(events, key=lambda e: int(e["seq"]))

    def write(conn: Connection) -> None:
        row = _locked_run_to_append(conn, run_id, worker_id)
        base, last = int(row.event_seq_base), row.last_seq
        write_table_rows(conn, _fresh_events(conn, run_id, ordered, base=base, last=last))

    _write(engine, write)


def _fresh_events(
    conn: Connection,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    payloads: Sequence[str | None] = (),
    *,
    base: int,
    last: int | None,
) -> TableRows:
    """The rows of the events after `last`, the last one recorded (None: none); the first must
    follow it. The events are numbered as the kernel numbered them: each is recorded at seq
    `base` + its seq."""
    if base:
        events = [{**e, "seq": base + int(e["seq"])} for e in events]
    last = int(last or 0)
    fresh = [i for i, e in enumerate(events) if int(e["seq"]) > last]
    for offset, index in enumerate(fresh):
        if int(events[index]["seq"]) != last + 1 + offset:
            raise Conflict(
                f"events of run {run_id} would leave a gap: seq {events[index]['seq']} after "
                f"{last + offset}",
                code="event_gap",
            )
    return event_rows(
        conn.dialect,
        run_id,
        [events[i] for i in fresh],
        [payloads[i] for i in fresh] if payloads else (),
    )


def _holds_lease(row: Any, worker_id: str) -> None:
    if row.execution_status != "running" or row.lease_owner != worker_id:
        raise LeaseLost(
            f"worker {worker_id} no longer holds run {row.run_id} (it is "
            f"{row.execution_status}, lease of {row.lease_owner})"
        )


def _ended_by(
    row: Any,
    worker_id: str,
    execution: str,
    *,
    content: str | None = None,
    reason: str | None = None,
) -> bool:
    """Whether `worker_id` ended the run `row` as `execution`, with this content hash or this
    terminal reason (a reclaimer that ended it keeps the worker as the lease's owner, but gives
    its own reason and records no content)."""
    if row.lease_owner != worker_id or row.execution_status != execution:
        return False
    if content is not None:
        return bool(row.content_sha256 == content)
    return bool(row.terminal_reason == reason)


@dataclass(frozen=True)
class _ServiceRun(RunDirectory):
    """A run directory recorded under the service's run id, not the one its files make."""

    service_run_id: str = field(default="")

    @property
    def run_id(self) -> str:
        return self.service_run_id


def finish(
    engine: Engine,
    run_id: str,
    worker_id: str,
    run_dir: Path,
    *,
    reason: str | None = None,
    again: bool = False,
) -> str:
    """Record the finished run in `run_dir` under `run_id`, in one transaction and only while
    `worker_id` holds its lease (LeaseLost otherwise): its statuses, end, terminal reason,
    result and content hash on the run row, the events not streamed yet (a retry's numbered
    after its retry mark, as `append_events` numbers them), and its records,
    fault plans and steps, observations, evidence and completeness. `reason` replaces the
    terminal reason the files give. Returns the execution status recorded. Raises InputError
    for a run directory that breaks its contract (then nothing is written).

    `again`: this may repeat a try whose answer was lost with the ledger's connection after it
    committed; a run `worker_id` ended already with this very content is then taken as
    recorded, not as a lost lease."""
    with few_collections():
        return _finish(engine, run_id, worker_id, run_dir, reason, again)


_FINISHED: Final = t.run.update().where(_HELD)
"""Executed with the values of the columns to set, beside the _HELD parameters."""


def _finish(
    engine: Engine, run_id: str, worker_id: str, run_dir: Path, reason: str | None, again: bool
) -> str:
    read = read_run_dir(run_dir)
    run = _ServiceRun(
        **{f.name: getattr(read, f.name) for f in fields(RunDirectory)}, service_run_id=run_id
    )
    finished = [e for e in run.events if e["type"] == "run_finished"]

    def write(conn: Connection) -> None:
        row = _locked_run_to_append(conn, run_id, None)
        status = run.result.status
        if again and _ended_by(row, worker_id, status.execution, content=run.content_sha256):
            return
        _holds_lease(row, worker_id)
        now = utc_now()
        terminal = reason
        cancelled = row.cancel_requested_at is not None and status.execution == "cancelled"
        if terminal is None and cancelled:
            terminal = f"cancelled: {row.cancel_reason or 'requested'}"
        dialect = conn.dialect
        tables = [
            _fresh_events(
                conn,
                run_id,
                run.events,
                run.event_payloads,
                base=int(row.event_seq_base),
                last=row.last_seq,
            )
        ]
        if run.records is not None:
            plans, steps = fault_rows(run_id, run.records, now)
            tables += [
                record_rows(dialect, run_id, run.records, now, run.record_lines),
                bind_mappings(dialect, t.fault_plan, plans),
                bind_mappings(dialect, t.fault_record, steps),
            ]
        tables += task_and_session_rows(dialect, run)
        tables += layer_rows(dialect, run, now)
        rest = write_bulk(conn, tables)
        # The rest reads nothing back: on PostgreSQL it goes in one round trip.
        with pipelined(conn):
            for rows in rest:
                write_table_rows(conn, rows)
            conn.execute(
                _FINISHED,
                {
                    "p_run_id": run_id,
                    "p_owner": worker_id,
                    "execution_status": status.execution,
                    "validity_status": status.validity,
                    "evidence_status": status.evidence,
                    "ended_at": wall_time(float(finished[-1]["wall"])) if finished else now,
                    "terminal_reason": terminal or terminal_reason(run),
                    "result": run.result_doc,
                    "content_sha256": run.content_sha256,
                    "lease_expires_at": None,
                },
            )

    _write(engine, write)
    return run.result.status.execution


def fail(
    engine: Engine,
    run_id: str,
    worker_id: str,
    reason: str,
    *,
    execution: str = "crashed",
    again: bool = False,
) -> None:
    """End a run the worker holds without a result: `crashed` (or `cancelled`) with `reason`,
    its evidence partial (what was streamed stays). LeaseLost when the worker no longer holds
    it. `again`: as `finish` takes it (a run this worker ended so already is left as it is)."""

    def write(conn: Connection) -> None:
        row = _locked_run(conn, run_id)
        if row is None:
            raise NotFound(f"there is no run {run_id}", code="unknown_run")
        if again and _ended_by(row, worker_id, execution, reason=reason):
            return
        _holds_lease(row, worker_id)
        r = t.run.c
        conn.execute(
            t.run.update()
            .where(r.run_id == run_id, r.lease_owner == worker_id, r.execution_status == "running")
            .values(
                execution_status=execution,
                evidence_status="partial",
                ended_at=utc_now(),
                terminal_reason=reason,
                lease_expires_at=None,
            )
        )

    _write(engine, write)


_ANY_EXPIRED: Final = (
    sa.select(t.run.c.run_id)
    .where(
        t.run.c.execution_status == "running",
        t.run.c.lease_expires_at < sa.bindparam("p_moment", type_=t.run.c.lease_expires_at.type),
    )
    .limit(1)
)


CONFIRM_SHARE: Final = 0.5
"""How long an expired lease must stay expired and unrenewed after a reclaimer first found it
so before the run is reclaimed, as a share of the lease's length (its last renewal's)."""
CONFIRM_MIN_SECONDS: Final = 1.0
"""The shortest confirmation period, whatever the lease."""


def confirmation_seconds(lease_seconds: float) -> float:
    """The confirmation period of a lease of `lease_seconds` (see `reclaim_expired`)."""
    return max(CONFIRM_MIN_SECONDS, lease_seconds * CONFIRM_SHARE)


def _confirmation(row: Any) -> float:
    expires, renewed = as_utc(row.lease_expires_at), as_utc(row.heartbeat_at)
    lease = (expires - renewed).total_seconds() if expires and renewed else 0.0
    return confirmation_seconds(lease)


def reclaim_expired(engine: Engine, *, now: datetime | None = None) -> list[Reclaimed]:
    """Reclaim every running run whose lease expired before `now` and whose worker is gone.

    Reclaiming takes two looks: the first that finds a lease expired only marks the run
    (`lease_suspected_at`); a look at least the confirmation period later (half the lease, see
    `confirmation_seconds`) that finds it still expired and the mark still there reclaims it.
    A heartbeat renews the lease and clears the mark. A worker whose heartbeats could not reach
    the ledger (down, its disk full) keeps trying, so once the ledger answers again it renews
    its lease within that period: marking needs the ledger to take writes too.

    A run reclaimed with a retry left (queued with `retries`, not retried as often yet, and no
    cancellation requested) goes back to `pending` for the next claim: a `run_retried` event
    follows the events it recorded and the retry's are numbered after it. Any other ends
    `crashed`, terminal reason "worker_lost" (for a retry lost too: "worker_lost: …" saying
    so), evidence partial. Returns those reclaimed, by run id."""
    moment = now if now is not None else utc_now()
    r = t.run.c
    expired = (r.execution_status == "running") & (r.lease_expires_at < moment)
    prepare_once(engine)
    with reading(engine) as conn:
        if conn.execute(_ANY_EXPIRED, {"p_moment": moment}).first() is None:
            return []

    def write(conn: Connection) -> list[Reclaimed]:
        query = sa.select(t.run).where(expired).order_by(r.run_id)
        if conn.dialect.name == "postgresql":
            query = query.with_for_update()  # another reclaimer's runs are then no longer expired
        done = []
        marked = []
        for row in conn.execute(query).all():
            suspected = as_utc(row.lease_suspected_at)
            if suspected is None:
                marked.append(row.run_id)
                continue
            if (moment - suspected).total_seconds() < _confirmation(row):
                continue  # its worker still has time to renew the lease
            attempt = int(row.retries) + 1
            if row.retries < row.retries_allowed and row.cancel_requested_at is None:
                _retry(conn, row, moment)
                done.append(Reclaimed(row.run_id, "pending", attempt + 1))
                continue
            reason = WORKER_LOST
            if row.retries:
                reason += f": attempt {attempt}, the retry, lost its worker too"
            conn.execute(
                t.run.update()
                .where(r.run_id == row.run_id)
                .values(
                    execution_status="crashed",
                    evidence_status="partial",
                    ended_at=moment,
                    terminal_reason=reason,
                    lease_expires_at=None,
                )
            )
            done.append(Reclaimed(row.run_id, "crashed", attempt))
        if marked:
            conn.execute(
                t.run.update()
                .where(r.run_id.in_(marked), r.lease_suspected_at.is_(None))
                .values(lease_suspected_at=moment)
            )
        return done

    return _write(engine, write)


def _retry(conn: Connection, row: Any, moment: datetime) -> None:
    """Queue the run `row` again for its next attempt: a `run_retried` event after the last
    one recorded, saying which attempt follows and what became of the lost one (its worker,
    last heartbeat and lease, which the next claim replaces), and the next attempt's events
    numbered after it."""
    last = conn.execute(
        sa.select(sa.func.max(t.event.c.seq)).where(t.event.c.run_id == row.run_id)
    ).scalar()
    seq = int(last or 0) + 1
    lost = int(row.retries) + 1
    mark = {
        "seq": seq,
        "type": RETRIED,
        "actor": "harness",
        "t": None,
        "wall": moment.timestamp(),
        "payload": {
            "attempt": lost + 1,
            "of": int(row.retries_allowed) + 1,
            "reason": WORKER_LOST,
            "lost": {
                "attempt": lost,
                "worker": row.lease_owner,
                "heartbeatAt": _iso(row.heartbeat_at),
                "leaseExpiredAt": _iso(row.lease_expires_at),
                "eventsRecorded": seq - 1 - int(row.event_seq_base),
            },
        },
    }
    insert_events(conn, row.run_id, [mark])
    conn.execute(
        t.run.update()
        .where(t.run.c.run_id == row.run_id)
        .values(
            execution_status="pending",
            lease_owner=None,
            lease_expires_at=None,
            heartbeat_at=None,
            lease_suspected_at=None,
            retries=t.run.c.retries + 1,
            event_seq_base=seq,
        )
    )


# --------------------------------------------------------------------------- cancelling


def request_cancel(
    engine: Engine,
    run_id: str,
    reason: str,
    *,
    tenant: str,
    idempotency: IdempotencyKey | None = None,
) -> str:
    """Cancel a run: a pending one ends `cancelled` at once; for a running one the request is
    recorded and its worker stops it at the run's next step (it ends cancelled, its evidence
    partial). 404 for a run `tenant` does not hold, 409 when it has ended. Returns
    "cancelled"."""

    def write(conn: Connection) -> str:
        stored = _keyed(conn, idempotency, tenant)
        if stored is not None:
            return str(_replayed(stored, "execution_status"))
        row = _locked_run(conn, run_id, tenant)
        if row is None:
            raise NotFound(f"there is no run {run_id}", code="unknown_run")
        if row.execution_status in TERMINAL:
            raise Conflict(
                f"run {run_id} has ended already ({row.execution_status})", code="terminal"
            )
        now = utc_now()
        r = t.run.c
        if row.execution_status == "pending":
            conn.execute(
                t.run.update()
                .where(r.run_id == run_id, r.execution_status == "pending")
                .values(
                    execution_status="cancelled",
                    ended_at=now,
                    terminal_reason=f"cancelled: {reason}",
                    cancel_requested_at=now,
                    cancel_reason=reason,
                )
            )
        elif row.cancel_requested_at is None:
            conn.execute(
                t.run.update()
                .where(r.run_id == run_id)
                .values(cancel_requested_at=now, cancel_reason=reason)
            )
        _store(conn, idempotency, 202, {"execution_status": "cancelled"})
        return "cancelled"

    return _write(engine, write)


REVIEW_ACTIONS: Final = ("submit", "approve", "publish", "retire")


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
    idempotency: IdempotencyKey | None = None,
) -> str:
    """One review action on a scenario version, as `simreport review` takes it (the same
    transitions, kept with who took them). 404 for a version `tenant` does not hold, 409 when
    the version is not in the status the action starts from, 422 for a high-risk scenario
    published without a risk sign-off. Returns the version's new status."""
    from ...ledger.errors import ReviewRefused, UnknownVersion, WrongStatus
    from ...ledger.review import transition_in

    def write(conn: Connection) -> str:
        stored = _keyed(conn, idempotency, tenant)
        if stored is not None:
            return str(_replayed(stored, "status"))
        _scenario_row(conn, scenario_id, tenant)  # 404 for another tenant's
        try:
            done = transition_in(
                conn,
                "scenario",
                scenario_id,
                version,
                action,
                reviewer=reviewer,
                note=note,
                risk_signoff=risk_signoff,
                tenant=tenant,
            )
        except UnknownVersion as exc:
            raise NotFound(exc.message, code="unknown_version") from None
        except WrongStatus as exc:
            raise Conflict(exc.message, code="review_status") from None
        except ReviewRefused as exc:
            raise Unprocessable(exc.message, code="review_refused") from None
        _store(conn, idempotency, 200, {"status": done.to_status})
        return done.to_status

    return _write(engine, write)


# --------------------------------------------------------------------------- reading


def _run_row(conn: Connection, run_id: str, tenant: str, *columns: Any) -> Any:
    """The run's row in `tenant` (only `columns`, when named), or 404."""
    query = sa.select(*columns) if columns else sa.select(t.run)
    row = conn.execute(query.where(t.run.c.run_id == run_id, t.run.c.tenant_id == tenant)).first()
    if row is None:
        raise NotFound(f"there is no run {run_id}", code="unknown_run")
    return row


_RUN_OF_TENANT: Final = (t.run.c.run_id == sa.bindparam("p_run_id")) & (
    t.run.c.tenant_id == sa.bindparam("p_tenant")
)
_RUN_STATUSES: Final = sa.select(
    t.run.c.execution_status,
    t.run.c.validity_status,
    t.run.c.evidence_status,
    t.run.c.quality_ref,
    t.run.c.retries,
).where(_RUN_OF_TENANT)
_RUN_SEEN: Final = sa.select(t.run.c.run_id).where(_RUN_OF_TENANT)


def _known_run(conn: Connection, query: sa.Select[Any], run_id: str, tenant: str) -> Any:
    """The row `query` (one of the statements over _RUN_OF_TENANT) finds, or 404."""
    row = conn.execute(query, {"p_run_id": run_id, "p_tenant": tenant}).first()
    if row is None:
        raise NotFound(f"there is no run {run_id}", code="unknown_run")
    return row


def get_run(engine: Engine, run_id: str, *, tenant: str) -> dict[str, Any]:
    """The run's four statuses, and the attempt it is on: 1, or 2 once it was queued again
    after its worker was lost."""
    prepare_once(engine)
    with reading(engine) as conn:
        row = _known_run(conn, _RUN_STATUSES, run_id, tenant)
    return {
        "execution_status": row.execution_status,
        "validity_status": row.validity_status,
        "evidence_status": row.evidence_status,
        "quality_ref": row.quality_ref,
        "attempt": int(row.retries) + 1,
    }


def run_detail(engine: Engine, run_id: str, *, tenant: str) -> dict[str, Any]:
    """The run's statuses with its times, terminal reason, lease, attempt (`attempts`: how
    many times it was claimed) and retries allowed, and request."""
    prepare_once(engine)
    with reading(engine) as conn:
        row = _run_row(conn, run_id, tenant)
    return {
        "run_id": row.run_id,
        "manifest_id": row.manifest_id,
        "execution_status": row.execution_status,
        "validity_status": row.validity_status,
        "evidence_status": row.evidence_status,
        "quality_ref": row.quality_ref,
        "purpose": row.purpose,
        "created_at": _iso(row.created_at),
        "started_at": _iso(row.started_at),
        "ended_at": _iso(row.ended_at),
        "terminal_reason": row.terminal_reason,
        "lease_owner": row.lease_owner,
        "attempt": int(row.retries) + 1,
        "attempts": row.attempts,
        "retries_allowed": row.retries_allowed,
        "cancel_reason": row.cancel_reason,
        "request": row.request,
        "principal": row.principal,
    }


def _iso(value: datetime | None) -> str | None:
    moment = as_utc(value)
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def events_after(
    engine: Engine,
    run_id: str,
    after_seq: int,
    *,
    tenant: str,
    limit: int = 500,
    retention_seconds: float | None,
) -> dict[str, Any]:
    """Up to `limit` events of the run after seq `after_seq`, oldest first, and `next_seq`, the
    cursor to ask with next (the last seq returned, or `after_seq` when none is new). Events
    older than `retention_seconds` are no longer served: a cursor before the newest of them is
    gone (410)."""
    page: dict[str, Any] = orjson.loads(
        events_page(
            engine,
            run_id,
            after_seq,
            tenant=tenant,
            limit=limit,
            retention_seconds=retention_seconds,
        )
    )
    return page


_EXPIRED_UP_TO: Final = sa.select(sa.func.max(t.event.c.seq)).where(
    t.event.c.run_id == sa.bindparam("p_run_id"),
    t.event.c.wall_time < sa.bindparam("p_cutoff", type_=t.event.c.wall_time.type),
)
_EVENTS_AFTER: Final = (
    sa.select(
        t.event.c.seq,
        t.event.c.event_type,
        t.event.c.actor,
        t.event.c.actor_ref,
        t.event.c.step,
        t.event.c.logical_time,
        t.event.c.wall_time,
        t.event.c.trace_id,
        t.event.c.span_id,
        sa.cast(t.event.c.payload, sa.Text),
    )
    .where(
        t.event.c.run_id == sa.bindparam("p_run_id"),
        t.event.c.seq > sa.bindparam("p_after", type_=t.event.c.seq.type),
    )
    .order_by(t.event.c.seq)
    .limit(sa.bindparam("p_limit", type_=sa.Integer))
)


def events_page(
    engine: Engine,
    run_id: str,
    after_seq: int,
    *,
    tenant: str,
    limit: int = 500,
    retention_seconds: float | None,
) -> bytes:
    """`events_after` as the JSON the service answers, each payload the text the ledger holds
    (a page of events is not decoded only to be encoded again)."""
    prepare_once(engine)
    with reading(engine) as conn:
        _known_run(conn, _RUN_SEEN, run_id, tenant)
        if retention_seconds is not None:
            cutoff = utc_now() - timedelta(seconds=retention_seconds)
            expired = conn.execute(
                _EXPIRED_UP_TO, {"p_run_id": run_id, "p_cutoff": cutoff}
            ).scalar()
            if expired is not None and after_seq < int(expired):
                raise Gone(
                    f"events of run {run_id} up to seq {expired} are past the retention window "
                    f"({retention_seconds:g} s): ask again with after_seq={expired} or later",
                    code="cursor_expired",
                    fields={"next_seq": int(expired)},
                )
        rows = conn.execute(
            _EVENTS_AFTER,
            {"p_run_id": run_id, "p_after": after_seq, "p_limit": max(1, min(limit, 5000))},
        ).all()
    events = [
        {
            "seq": seq,
            "type": kind,
            "actor": actor,
            "actor_ref": actor_ref,
            "step": step,
            "logical_time": logical_time,
            "wall_time": _iso(wall),
            "trace_id": trace,
            "span_id": span,
            "payload": orjson.Fragment(payload),
        }
        for seq, kind, actor, actor_ref, step, logical_time, wall, trace, span, payload in rows
    ]
    next_seq = events[-1]["seq"] if events else after_seq
    return orjson.dumps({"events": events, "next_seq": next_seq})


def evidence(
    engine: Engine, run_id: str, *, tenant: str, criterion: str | None = None
) -> dict[str, Any]:
    """The run's evidence package: its records, observations (and the facts that could not be
    observed, `missing`), evidence per criterion and completeness checks. With `criterion`,
    that criterion's evidence with only the observations and records it cites (404 for a
    criterion the run has no evidence for). 409 while the run has not ended."""
    prepare_once(engine)
    with reading(engine) as conn:
        row = _run_row(conn, run_id, tenant)
        if row.execution_status not in TERMINAL:
            raise Conflict(
                f"run {run_id} is {row.execution_status}: its evidence has not converged; "
                "ask again once it has ended",
                code="not_converged",
            )
        package = evidence_package(conn, run_id, criterion=criterion)
    if criterion is not None and not package.evidence:
        raise NotFound(
            f"run {run_id} has no evidence for criterion {criterion!r}",
            code="unknown_criterion",
        )
    return {
        "records": [{"record_id": r.record_id, **r.body} for r in package.records],
        "observations": [
            {
                "observation_id": o.observation_id,
                "fact_key": o.fact_key,
                "value": o.value,
                "derived_from": o.derived_from,
                "extractor": o.extractor,
            }
            for o in package.observations
        ]
        + [
            {"fact_key": m.fact_key, "missing": True, "reason": m.reason, "extractor": m.extractor}
            for m in package.missing
        ],
        "evidence": [
            {
                "criterion": e.criterion,
                "sufficient": e.sufficient,
                "observation_ids": e.observation_ids,
                "evidence_refs": e.evidence_refs,
                "detail": e.detail,
            }
            for e in package.evidence
        ],
        "completeness": [
            {"check": c.check, "status": c.status, "detail": c.detail} for c in package.completeness
        ],
    }


def get_manifest(engine: Engine, manifest_id: str, *, tenant: str) -> dict[str, Any]:
    """The frozen manifest: every asset version it resolved (slot → kind, name, version,
    sha256, file) and its sha256."""
    prepare_once(engine)
    m = t.manifest.c
    with reading(engine) as conn:
        row = conn.execute(
            sa.select(m.resolved, m.manifest_sha256).where(
                m.manifest_id == manifest_id, m.tenant_id == tenant
            )
        ).first()
    if row is None:
        raise NotFound(f"there is no manifest {manifest_id}", code="unknown_manifest")
    return {"resolved": row.resolved, "manifest_sha256": row.manifest_sha256}


# --------------------------------------------------------------------------- idempotency


def idempotent(
    engine: Engine, *, principal: str, tenant: str, key: str, request_sha256: str
) -> Stored | None:
    """The answer stored for `principal`'s `key`, or None when the key is new. 409 when the
    key was used with another request (its sha256 differs)."""
    prepare_once(engine)
    with reading(engine) as conn:
        stored = _stored(conn, principal, key, tenant, request_sha256)
    # A key whose request is still being written is not visible (its transaction has not
    # committed), so a stored answer is always a final one.
    return stored


def remember(
    engine: Engine,
    *,
    principal: str,
    tenant: str,
    key: str,
    request_sha256: str,
    status_code: int,
    response: dict[str, Any],
) -> Stored:
    """Store the answer to `principal`'s `key`, unless one is stored already: then that one is
    returned (a concurrent duplicate gets the first answer). 409 when the key was used with
    another request."""

    def write(conn: Connection) -> Stored:
        row = {
            "principal": principal,
            "key": key,
            "tenant_id": tenant,
            "request_sha256": request_sha256,
            "status_code": status_code,
            "response": response,
            "created_at": utc_now(),
        }
        insert_new(conn, t.idempotency_key, row)
        stored = _stored(conn, principal, key, tenant, request_sha256)
        assert stored is not None
        return stored

    return _write(engine, write)


__all__ = [
    "REVIEW_ACTIONS",
    "Capacity",
    "Claim",
    "Conflict",
    "Gone",
    "Heartbeat",
    "IdempotencyKey",
    "LeaseLost",
    "NotFound",
    "Reclaimed",
    "ServiceError",
    "Stored",
    "StoredAnswer",
    "Unprocessable",
    "append_events",
    "claim",
    "confirmation_seconds",
    "count_active",
    "create_scenario",
    "events_after",
    "events_page",
    "evidence",
    "fail",
    "finish",
    "get_manifest",
    "get_run",
    "heartbeat",
    "idempotent",
    "reclaim_expired",
    "remember",
    "request_cancel",
    "review_version",
    "run_detail",
    "run_document",
    "start_run",
    "submit_version",
]
