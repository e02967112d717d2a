"""The run service's HTTP API (`simreport api`): the seed's eight `/v1/sim` endpoints over the
ledger, with bearer tokens, idempotency keys and quotas.

Handlers are thin: what they answer comes from simreport.service.queue, which keeps every state
in the ledger, so API processes can be restarted or multiplied. Refusals become answers in one
place (`_error_response`): `{"error": {"code", "message", …}}` with the seed's status codes,
`Retry-After` on 429 and 503. FastAPI and uvicorn are imported when the service starts, not when
the `simreport` command does.
"""

# No `from __future__ import annotations`: FastAPI reads the route functions' annotations, and
# the routes are defined inside create_app, whose local names a string annotation cannot see.

import argparse
import gc
import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.errors import EXIT_OK
from ..core.values import INT64_MAX, Int64, Name, Text

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from sqlalchemy.engine import Engine
    from starlette.responses import JSONResponse
    from starlette.types import ASGIApp, Receive, Scope, Send

    from ..core.execution_policy import ExecutionPolicy
    from .auth import Principal, Refused, Tokens
    from .config import ServiceSettings
    from .queue import Capacity, IdempotencyKey
    from .supervisor import WorkerPool

log = logging.getLogger("simreport.service")

PREFIX = "/v1/sim"
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200
MAX_TEXT = 200
"""The longest name, namespace, owner, version or id a request may carry. Names and ids hold no
control character and no bidirectional control (`Name`); free text no control character but
tab, newline and carriage return (`Text`): PostgreSQL cannot store NUL, and a name must read as
what it is."""

RunMode = Literal["surrogate", "hybrid", "isolated_real"]
RiskLevel = Literal["low", "medium", "high"]
Purpose = Literal["regression", "exploration"]


# --------------------------------------------------------------------------- request bodies


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScenarioRequest(_Body):
    """POST /v1/sim/scenarios."""

    namespace: Name = Field(min_length=1, max_length=MAX_TEXT, description="the namespace")
    name: Name = Field(min_length=1, max_length=MAX_TEXT, description="unique in its namespace")
    owner: Name = Field(min_length=1, max_length=MAX_TEXT, description="who owns the scenario")
    risk_level: RiskLevel = Field(description="high: going online needs a risk sign-off")


class VersionRequest(_Body):
    """POST /v1/sim/scenarios/{scenario_id}/versions."""

    version: Name = Field(min_length=1, max_length=MAX_TEXT, description="semantic version")
    spec: dict[str, Any] = Field(description="the scenario document (as in a scenario file)")
    source: Name | None = Field(
        None, max_length=1000, description="where the version comes from (an incident, …)"
    )


class RunRequest(_Body):
    """POST /v1/sim/runs."""

    scenario_id: Name = Field(min_length=1, max_length=MAX_TEXT)
    version: Name = Field(min_length=1, max_length=MAX_TEXT, description="the scenario version")
    mode: RunMode = Field("surrogate", description="how the environment's backend runs")
    seed: Int64 | None = Field(None, ge=0, description="the run's seed (default: the scenario's)")
    budget: dict[str, Any] | None = Field(
        None, description="limits replacing the scenario's execution.budget (maxTurns, …)"
    )
    purpose: Purpose = Field(
        "exploration",
        description="regression: every version the run resolves must be online",
    )


class ReviewRequest(_Body):
    """POST /v1/sim/scenarios/{scenario_id}/versions/{version}:{action} (beyond the seed: the
    review steps of `simreport review`, taken by the token's name)."""

    note: Text | None = Field(None, max_length=1000, description="kept with the step")
    risk_signoff: Name | None = Field(
        None,
        min_length=1,
        max_length=MAX_TEXT,
        description="who signed off the risk: needed to publish a high-risk scenario",
    )


class CancelRequest(_Body):
    """POST /v1/sim/runs/{run_id}:cancel."""

    reason: Text = Field(min_length=1, max_length=1000, description="why, kept with the run")


# --------------------------------------------------------------------------- answers


class ScenarioCreated(BaseModel):
    scenario_id: str


class VersionSubmitted(BaseModel):
    status: Literal["reviewing"]


class VersionReviewed(BaseModel):
    status: Literal["reviewing", "reviewed", "online", "offline"]


class RunStarted(BaseModel):
    run_id: str
    manifest_id: str = Field(description="the manifest frozen when the run was accepted")


class RunStatus(BaseModel):
    execution_status: Literal["pending", "running", "completed", "crashed", "cancelled"]
    validity_status: Literal["unchecked", "valid", "violated"]
    evidence_status: Literal["unchecked", "complete", "partial"]
    quality_ref: str | None = Field(description="set by an evaluator, never by the run")
    attempt: int = Field(
        description="the attempt the run is on: 1, or 2 once it was queued again after its "
        "worker was lost (--retry-lost-runs)"
    )


class EventPage(BaseModel):
    events: list[dict[str, Any]]
    next_seq: int = Field(description="the after_seq of the next page")


class EvidencePackage(BaseModel):
    records: list[dict[str, Any]]
    observations: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    completeness: Any


class RunCancelled(BaseModel):
    execution_status: Literal["cancelled"]


class ManifestView(BaseModel):
    resolved: dict[str, Any]
    manifest_sha256: str


class WorkerCount(BaseModel):
    alive: int = Field(description="worker processes of this API running now")
    asked: int = Field(
        description="worker processes it was asked for (--workers; 0: workers run as "
        "`simreport worker`, which this API does not watch)"
    )


class QueueHealth(BaseModel):
    depth: int = Field(description="runs pending: queued, not claimed by a worker yet")
    running: int = Field(description="runs claimed by a worker and not ended")
    oldest_pending_seconds: float | None = Field(
        description="how long the oldest pending run has waited since it was queued (null: "
        "none pending)"
    )


class HealthReason(BaseModel):
    code: Literal["worker_missing", "pending_too_long"]
    message: str


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(
        description="degraded (HTTP 503): a worker of this API is not running, or the oldest "
        "pending run has waited longer than --max-pending-age"
    )
    workers: WorkerCount
    queue: QueueHealth
    reasons: list[HealthReason] = Field(description="why degraded; empty when ok")


class Issue(BaseModel):
    path: str = Field(description="where in the request (dotted), empty for the whole body")
    message: str
    expected: str | None = None


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="stable, for programs: not_found, conflict, gone, …")
    message: str = Field(description="for people")
    issues: list[Issue] | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


ERROR_MEANINGS: dict[int, str] = {
    400: "no Idempotency-Key header",
    401: "no token, or an unknown one",
    403: "the token may not use this namespace",
    404: "no such object in the token's tenant",
    408: "the request's headers or body did not arrive in time (--header-timeout, "
    "--body-timeout): the connection is closed",
    409: "the state does not allow it: read the state, do not retry",
    410: "the cursor is older than the events kept: re-read the snapshot",
    413: "the body is larger than --max-body: it is not read, and the connection is closed",
    422: "invalid request: fix it and make a new one",
    429: "the token's runs pending or running are at its quota: retry after Retry-After",
    431: "the request's line and headers are too large",
    503: "the queue is full, the ledger did not answer or the service has --max-connections "
    "open: retry after Retry-After with the same Idempotency-Key",
}
"""Every refusal the service gives, as the seed's error semantics read."""


def _errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The refusals of one endpoint, for its OpenAPI description."""
    return {s: {"model": ErrorBody, "description": ERROR_MEANINGS[s]} for s in statuses}


_WRITE = (400, 401, 403, 404, 408, 409, 413, 422, 503)
_READ = (401, 403, 404, 503)

_BODY_MODELS: dict[str, type[BaseModel]] = {
    f"{PREFIX}/scenarios": ScenarioRequest,
    f"{PREFIX}/scenarios/{{scenario_id}}/versions": VersionRequest,
    f"{PREFIX}/runs": RunRequest,
    f"{PREFIX}/runs/{{run_id}}:cancel": CancelRequest,
    f"{PREFIX}/scenarios/{{scenario_id}}/versions/{{version}}:{{action}}": ReviewRequest,
}
"""The body model of each route (by path), for the keys an unknown key's error lists."""

OPEN_PATHS = frozenset({"/healthz", "/metrics", "/openapi.json"})
"""What answers without a token: the health check, the metrics (counts only) and the OpenAPI
document."""


# --------------------------------------------------------------------------- the service


class _Service:
    """What the routes share: the settings, the tokens and the ledger; the worker pool of
    `simreport api` (None: the app runs no workers), the clock the queue's waits are measured
    with, and what /metrics counts: failed ledger calls, and refusals by the connection
    limits (by code)."""

    def __init__(
        self,
        settings: "ServiceSettings",
        tokens: "Tokens",
        engine: "Engine",
        clock: Callable[[], datetime],
        policy: "ExecutionPolicy",
    ) -> None:
        from .metrics import Tally

        self.settings = settings
        self.tokens = tokens
        self.engine = engine
        self.policy = policy
        self.clock = clock
        self.pool: WorkerPool | None = None
        self.ledger_errors = Tally()
        self.refusals = Tally()

    def write(
        self,
        request: "Request",
        principal: "Principal",
        key: str,
        body: BaseModel,
        status: int,
        action: "Callable[[IdempotencyKey], dict[str, Any]]",
    ) -> "JSONResponse":
        """Answer a write request once per Idempotency-Key. The key is stored with the sha256
        of the request (method, path, body) and its answer in the transaction that does the
        write, so the same key with the same request gets the stored answer (from any process,
        after restarts; of two sent together one writes and the other gets its answer) and with
        another request 409. A refused request stores nothing: it did nothing."""
        from starlette.responses import JSONResponse

        from ..core.canonical import canonical_json, sha256_text
        from . import queue

        request_doc = {
            "method": request.method,
            "path": request.url.path,
            "body": body.model_dump(mode="json"),
        }
        digest = sha256_text(canonical_json(request_doc))
        try:
            # The action's transaction takes the key, or finds its answer (a replay, from any
            # process); most requests are new, so nothing looks for the key before.
            answer = action(queue.IdempotencyKey(principal.name, key, digest))
        except queue.StoredAnswer as exc:
            stored = exc.stored
        except queue.ServiceError:
            # Refused before its transaction took the key (a version retired since): a replay
            # still gets the answer its key holds, a new request the refusal.
            found = queue.idempotent(
                self.engine,
                principal=principal.name,
                tenant=principal.tenant,
                key=key,
                request_sha256=digest,
            )
            if found is None:
                raise
            stored = found
        else:
            return JSONResponse(answer, status_code=status)
        return JSONResponse(stored.response, status_code=stored.status_code)

    def capacity(self, principal: "Principal") -> "Capacity":
        """The limits a run of `principal` is queued under (checked by queue.start_run in the
        transaction that queues it)."""
        from . import queue

        return queue.Capacity(
            quota=principal.max_concurrent_runs,
            max_queue=self.settings.max_queue,
            retry_after=float(self.settings.retry_after_seconds),
        )


# --------------------------------------------------------------------------- the app


def create_app(
    settings: "ServiceSettings",
    *,
    tokens: "Tokens | None" = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> "FastAPI":
    """The FastAPI application for `settings`. Reads the tokens (`tokens` replaces the
    settings' file and variable; `environ` replaces os.environ) and connects to the ledger,
    creating or upgrading it, so a wrong setting is refused before the service listens.
    `clock` (UTC; default: the system's) measures how long pending runs have waited."""
    import sqlalchemy as sa
    from fastapi import Depends, FastAPI, Header, Path, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.security import HTTPBearer
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, Response

    from ..core.version import __version__
    from ..ledger.db import connect, utc_now
    from ..ledger.migrate import prepare_for_writing
    from . import queue
    from .auth import Principal, Refused, check_namespace, forbidden_namespace, load_tokens
    from .config import load_service_policy
    from .metrics import (
        CONTENT_TYPE,
        ServiceCollector,
        count_ledger_errors,
        exposition,
        service_registry,
    )

    if tokens is None:
        tokens = load_tokens(settings, environ)
    policy = load_service_policy(settings.policy)
    engine = connect(settings.ledger)
    service = _Service(settings, tokens, engine, clock or utc_now, policy)
    count_ledger_errors(engine, service.ledger_errors.add)
    prepare_for_writing(engine)
    collector = ServiceCollector(
        engine, service.ledger_errors, service.refusals, lambda: service.pool, service.clock
    )
    registry = service_registry(collector)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Runs whose worker vanished are ended here too, so they never stay `running` while
        # no worker is left to notice.
        stop = threading.Event()
        reclaimer = threading.Thread(
            target=_reclaim_until,
            args=(engine, stop, max(1.0, settings.lease_seconds / 2)),
            name="simreport-reclaim",
            daemon=True,
        )
        reclaimer.start()
        try:
            yield
        finally:
            stop.set()
            reclaimer.join(timeout=10)
            engine.dispose()

    app = FastAPI(
        lifespan=lifespan,
        title="simreport run service",
        version=__version__,
        description="The agent-testbed's /v1/sim API: scenarios, versions, runs, events, "
        "evidence and manifests, over the ledger. Every write needs an Idempotency-Key.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    bearer = HTTPBearer(auto_error=False, description="a token from the service's tokens")

    @app.exception_handler(Refused)
    def _refused(request: Request, exc: Refused) -> Response:
        return _error_response(exc.status, exc.code, exc.message, headers=exc.headers)

    @app.exception_handler(queue.ServiceError)
    def _service_error(request: Request, exc: queue.ServiceError) -> Response:
        error = exc.body()
        return _error_response(
            exc.status,
            error.pop("code"),
            error.pop("message"),
            retry_after=exc.retry_after,
            extra=error,
        )

    @app.exception_handler(RequestValidationError)
    def _invalid(request: Request, exc: RequestValidationError) -> Response:
        if any(tuple(e.get("loc", ())) == ("header", IDEMPOTENCY_HEADER) for e in exc.errors()):
            missing = _missing_key()
            return _error_response(missing.status, missing.code, missing.message)
        route = request.scope.get("route")
        model = _BODY_MODELS.get(getattr(route, "path", ""))
        issues = _request_issues(exc.errors(), model)
        first = issues[0]
        message = (f"{first['path']}: " if first["path"] else "") + str(first["message"])
        if len(issues) > 1:
            message += f" (and {len(issues) - 1} more)"
        return _error_response(422, "invalid_request", message, extra={"issues": issues})

    @app.exception_handler(HTTPException)
    def _http(request: Request, exc: HTTPException) -> Response:
        codes = {404: "not_found", 405: "method_not_allowed"}
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return _error_response(
            exc.status_code,
            codes.get(exc.status_code, "http_error"),
            message,
            headers=dict(exc.headers or {}),
        )

    @app.exception_handler(sa.exc.DBAPIError)
    def _ledger_down(request: Request, exc: sa.exc.DBAPIError) -> Response:
        from ..ledger.db import DISK_FULL, unavailability

        cause = unavailability(exc)
        if cause is None:  # the database refused the statement: ours to fix, not the client's
            log.error("the ledger refused a statement", exc_info=exc)
            return _error_response(500, "internal", "internal error")
        if cause == DISK_FULL:
            code, message = "ledger_disk_full", "the ledger's disk is full"
        else:
            code, message = "ledger_unavailable", "the ledger did not answer"
        log.warning("%s: %s", message, type(exc.orig).__name__)
        return _error_response(
            503,
            code,
            f"{message}: retry with the same Idempotency-Key",
            retry_after=settings.retry_after_seconds,
        )

    @app.exception_handler(Exception)
    def _internal(request: Request, exc: Exception) -> Response:
        # Starlette raises it again after this answer, and uvicorn logs it with its traceback.
        return _error_response(500, "internal", "internal error")

    app.add_middleware(_AuthenticateFirst, tokens=service.tokens)

    # The dependencies only read the request: as coroutines they run on the event loop, where
    # a plain function would be handed to the thread pool and back for every request.
    async def authenticated(request: Request, _: Annotated[Any, Depends(bearer)]) -> Principal:
        principal: Principal = request.state.principal
        return principal

    Authenticated = Annotated[Principal, Depends(authenticated)]

    async def idempotency_key(
        key: Annotated[
            str,
            Header(
                alias=IDEMPOTENCY_HEADER,
                description="required on every write: the same key and request get the same answer",
            ),
        ],
    ) -> str:
        key = key.strip()
        if not key:
            raise _missing_key()
        if len(key) > MAX_KEY_LENGTH or not key.isprintable():
            raise Refused(
                400,
                "idempotency_key_invalid",
                f"an {IDEMPOTENCY_HEADER} is at most {MAX_KEY_LENGTH} printable characters",
            )
        return key

    Key = Annotated[str, Depends(idempotency_key)]
    # An id in the path is a name: refused (422, `path.<name>`) before it reaches the ledger.
    Id = Annotated[Name, Path(min_length=1, max_length=MAX_TEXT)]

    # ----------------------------------------------------------------------- routes

    @app.get(
        "/healthz",
        response_model=Health,
        responses={503: {"model": Health, "description": "degraded, or the ledger did not answer"}},
        tags=["service"],
    )
    def healthz() -> Response:
        health = _health(service)
        return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE: {}}, "description": "Prometheus' text format"}},
        tags=["service"],
    )
    def metrics() -> Response:
        """Runs by status, queue depth, claim-to-finish times, ledger errors, workers and their
        restarts, and the process' CPU and memory, for Prometheus."""
        return Response(exposition(registry), media_type=CONTENT_TYPE)

    @app.post(
        f"{PREFIX}/scenarios",
        status_code=201,
        response_model=ScenarioCreated,
        responses=_errors(400, 401, 403, 409, 422, 503),
        tags=["scenarios"],
    )
    def create_scenario(
        body: ScenarioRequest,
        request: Request,
        principal: Authenticated,
        key: Key,
    ) -> Response:
        if not principal.may_use(body.namespace):
            raise forbidden_namespace(principal, body.namespace)

        def create(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
            scenario_id = queue.create_scenario(
                engine,
                tenant=principal.tenant,
                namespace=body.namespace,
                name=body.name,
                owner=body.owner,
                risk_level=body.risk_level,
                idempotency=idempotency,
            )
            return {"scenario_id": scenario_id}

        return service.write(request, principal, key, body, 201, create)

    @app.post(
        f"{PREFIX}/scenarios/{{scenario_id}}/versions",
        status_code=202,
        response_model=VersionSubmitted,
        responses=_errors(*_WRITE),
        tags=["scenarios"],
    )
    def submit_version(
        scenario_id: Id,
        body: VersionRequest,
        request: Request,
        principal: Authenticated,
        key: Key,
    ) -> Response:
        check_namespace(engine, principal, "scenario", scenario_id)

        def submit(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
            status = queue.submit_version(
                engine,
                tenant=principal.tenant,
                scenario_id=scenario_id,
                version=body.version,
                spec=body.spec,
                source=body.source,
                created_by=principal.name,
                idempotency=idempotency,
                policy=policy,
                library=settings.library_dir,
            )
            return {"status": status}

        return service.write(request, principal, key, body, 202, submit)

    @app.post(
        f"{PREFIX}/scenarios/{{scenario_id}}/versions/{{version}}:{{action}}",
        response_model=VersionReviewed,
        responses=_errors(*_WRITE),
        tags=["scenarios"],
    )
    def review_version(
        scenario_id: Id,
        version: Id,
        action: Literal["submit", "approve", "publish", "retire"],
        body: ReviewRequest,
        request: Request,
        principal: Authenticated,
        key: Key,
    ) -> Response:
        """One review step (`simreport review submit|approve|publish|retire`), recorded with
        the token's name as the reviewer."""
        check_namespace(engine, principal, "scenario", scenario_id)

        def review(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
            status = queue.review_version(
                engine,
                tenant=principal.tenant,
                scenario_id=scenario_id,
                version=version,
                action=action,
                reviewer=principal.name,
                note=body.note,
                risk_signoff=body.risk_signoff,
                idempotency=idempotency,
            )
            return {"status": status}

        return service.write(request, principal, key, body, 200, review)

    @app.post(
        f"{PREFIX}/runs",
        status_code=202,
        response_model=RunStarted,
        responses=_errors(*_WRITE, 429),
        tags=["runs"],
    )
    def start_run(
        body: RunRequest,
        request: Request,
        principal: Authenticated,
        key: Key,
    ) -> Response:
        check_namespace(engine, principal, "scenario", body.scenario_id)

        def start(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
            run_id, manifest_id = queue.start_run(
                engine,
                tenant=principal.tenant,
                principal=principal.name,
                scenario_id=body.scenario_id,
                version=body.version,
                mode=body.mode,
                seed=body.seed,
                budget=body.budget,
                purpose=body.purpose,
                library=settings.library_dir,
                idempotency=idempotency,
                capacity=service.capacity(principal),
                retries=settings.retry_lost_runs,
                policy=policy,
            )
            return {"run_id": run_id, "manifest_id": manifest_id}

        return service.write(request, principal, key, body, 202, start)

    @app.get(
        f"{PREFIX}/runs/{{run_id}}",
        response_model=RunStatus,
        responses=_errors(*_READ),
        tags=["runs"],
    )
    def get_run(run_id: Id, principal: Authenticated) -> Response:
        check_namespace(engine, principal, "run", run_id)
        return JSONResponse(queue.get_run(engine, run_id, tenant=principal.tenant))

    @app.get(
        f"{PREFIX}/runs/{{run_id}}/events",
        response_model=EventPage,
        responses=_errors(*_READ, 410, 422),
        tags=["runs"],
    )
    def get_events(
        run_id: Id,
        principal: Authenticated,
        after_seq: Annotated[
            int,
            Query(ge=0, le=INT64_MAX, description="the last seq already read (0: from the start)"),
        ] = 0,
        limit: Annotated[int, Query(ge=1, le=1000, description="at most this many events")] = 500,
    ) -> Response:
        check_namespace(engine, principal, "run", run_id)
        page = queue.events_page(
            engine,
            run_id,
            after_seq,
            tenant=principal.tenant,
            limit=limit,
            retention_seconds=settings.events_retention_seconds,
        )
        return Response(page, media_type="application/json")

    @app.get(
        f"{PREFIX}/runs/{{run_id}}/evidence",
        response_model=EvidencePackage,
        responses=_errors(*_READ, 409, 422),
        tags=["runs"],
    )
    def get_evidence(
        run_id: Id,
        principal: Authenticated,
        criterion: Annotated[
            Name | None, Query(max_length=MAX_TEXT, description="only this criterion")
        ] = None,
    ) -> Response:
        check_namespace(engine, principal, "run", run_id)
        package = queue.evidence(engine, run_id, tenant=principal.tenant, criterion=criterion)
        return JSONResponse(package)

    @app.post(
        f"{PREFIX}/runs/{{run_id}}:cancel",
        status_code=202,
        response_model=RunCancelled,
        responses=_errors(*_WRITE),
        tags=["runs"],
    )
    def cancel_run(
        run_id: Id,
        body: CancelRequest,
        request: Request,
        principal: Authenticated,
        key: Key,
    ) -> Response:
        check_namespace(engine, principal, "run", run_id)

        def cancel(idempotency: queue.IdempotencyKey) -> dict[str, Any]:
            status = queue.request_cancel(
                engine, run_id, body.reason, tenant=principal.tenant, idempotency=idempotency
            )
            return {"execution_status": status}

        return service.write(request, principal, key, body, 202, cancel)

    @app.get(
        f"{PREFIX}/manifests/{{manifest_id}}",
        response_model=ManifestView,
        responses=_errors(*_READ),
        tags=["manifests"],
    )
    def get_manifest(manifest_id: Id, principal: Authenticated) -> Response:
        check_namespace(engine, principal, "manifest", manifest_id)
        return JSONResponse(queue.get_manifest(engine, manifest_id, tenant=principal.tenant))

    return app


class _AuthenticateFirst:
    """Before routing and body parsing: every path but the open ones answers 401 without a
    valid token; the principal goes to `request.state.principal`. A plain ASGI middleware:
    Starlette's `@app.middleware("http")` costs a task and a stream per request."""

    def __init__(self, app: "ASGIApp", tokens: "Tokens") -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: "Scope", receive: "Receive", send: "Send") -> None:
        from starlette.datastructures import Headers

        from .auth import Refused

        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            try:
                principal = self.tokens.authenticate(Headers(scope=scope).get("authorization"))
            except Refused as exc:
                refusal = _error_response(exc.status, exc.code, exc.message, headers=exc.headers)
                await refusal(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def _health(service: _Service) -> Health:
    """The API's workers and the queue, degraded when a worker is missing or the oldest pending
    run has waited past --max-pending-age. A ledger that does not answer raises (503)."""
    from . import queue

    state = queue.queue_state(service.engine)
    pool = service.pool
    asked, alive = (0, 0) if pool is None else (pool.asked, pool.alive())
    waited = None
    if state.oldest_pending_at is not None:
        waited = round(max(0.0, (service.clock() - state.oldest_pending_at).total_seconds()), 3)
    reasons = []
    if alive < asked:
        reasons.append(
            HealthReason(
                code="worker_missing",
                message=f"{asked - alive} of {asked} worker(s) not running: being started again",
            )
        )
    limit = service.settings.max_pending_age_seconds
    if limit and waited is not None and waited > limit:
        reasons.append(
            HealthReason(
                code="pending_too_long",
                message=f"the oldest pending run has waited {waited:.0f} s, longer than "
                f"--max-pending-age ({limit:g} s)",
            )
        )
    return Health(
        status="degraded" if reasons else "ok",
        workers=WorkerCount(alive=alive, asked=asked),
        queue=QueueHealth(
            depth=state.pending, running=state.running, oldest_pending_seconds=waited
        ),
        reasons=reasons,
    )


def _reclaim_until(engine: "Engine", stop: threading.Event, every: float) -> None:
    """End expired leases every `every` seconds until `stop` (a ledger that does not answer
    is tried again next time)."""
    from . import queue

    while not stop.wait(every):
        try:
            for lost in queue.reclaim_expired(engine):
                if lost.outcome == "pending":
                    log.warning(
                        "run %s lost its worker: queued again for attempt %d",
                        lost.run_id,
                        lost.attempt,
                    )
                else:
                    log.warning("run %s lost its worker: ended crashed (worker_lost)", lost.run_id)
        except Exception:
            log.exception("reclaiming expired leases failed; trying again in %.0f s", every)


def describe_policy(policy: "ExecutionPolicy") -> str:
    """What the execution policy lets runs use, in one line (names only: never a URL)."""

    def names(found: Any) -> str:
        return ", ".join(sorted(found)) or "none"

    return (
        f"runs may use providers {names(policy.providers)}; endpoints {names(policy.endpoints)}; "
        f"simulators {names(policy.simulators)}"
    )


def _missing_key() -> "Refused":
    from .auth import Refused

    return Refused(400, "idempotency_key_missing", f"an {IDEMPOTENCY_HEADER} header is required")


def _error_response(
    status: int,
    code: str,
    message: str,
    *,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> "JSONResponse":
    """The one shape of every refusal: `{"error": {"code", "message", …}}`, with Retry-After
    (whole seconds) when the client should come back."""
    from starlette.responses import JSONResponse

    out = dict(headers or {})
    if retry_after is not None:
        out["Retry-After"] = str(max(1, round(retry_after)))
    if status in (429, 503) and "Retry-After" not in out:
        out["Retry-After"] = "1"
    error = {"code": code, "message": message, **(extra or {})}
    return JSONResponse({"error": error}, status_code=status, headers=out)


def _request_issues(errors: Any, model: type[BaseModel] | None) -> list[dict[str, str | None]]:
    """FastAPI's validation errors as located issues: the dotted path inside the body (or
    `query.NAME`, `header.NAME`), a message and what was expected there."""
    from ..core.validation import expectation, nearest

    issues: list[dict[str, str | None]] = []
    for error in errors:
        loc = [str(p) for p in error.get("loc", ())]
        where, rest = (loc[0], loc[1:]) if loc else ("body", [])
        path = ".".join(rest) if where == "body" else ".".join(loc)
        kind = error.get("type", "")
        message = str(error.get("msg", "invalid"))
        expected = expectation(kind)
        if kind == "extra_forbidden":
            message = f"unknown key {rest[-1]!r}" if rest else "unknown key"
            if model is not None and len(rest) == 1:
                known = sorted(model.model_fields)
                expected = "one of " + ", ".join(known)
                meant = nearest(rest[-1], known)
                if meant is not None:
                    expected += f"; did you mean {meant}?"
        elif kind == "missing":
            message = f"missing required key {rest[-1]!r}" if rest else "the body is missing"
            expected = "this key to be present" if rest else "a JSON object"
        elif kind == "json_invalid":
            message, expected = "the body is not valid JSON", "a JSON object"
        elif kind == "literal_error":
            expected = (error.get("ctx") or {}).get("expected")
        elif kind in ("model_attributes_type", "dict_type", "model_type"):
            expected = "a JSON object"
        issues.append({"path": path, "message": message, "expected": expected})
    return issues or [{"path": "", "message": "invalid request", "expected": None}]


# --------------------------------------------------------------------------- `simreport api`


def register_cli(sub: Any) -> None:
    """Add `simreport api` to the `simreport` parser's subcommands."""
    from ..core.arguments import int64
    from .config import DEFAULT_MAX_BODY, DEFAULT_PORT, DEFAULT_TOKENS_ENV, DEFAULT_WORKERS

    p = sub.add_parser(
        "api",
        help="serve the /v1/sim run service over HTTP, with workers that execute its runs",
        description="Serve the /v1/sim run service: scenarios, versions, runs, events, evidence "
        "and manifests over the ledger. Every request needs a bearer token from --tokens-file "
        f"or ${DEFAULT_TOKENS_ENV}; without any token only /healthz, /metrics and /openapi.json "
        "answer.",
    )
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="the ledger database: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
        "(default: $SIMREPORT_LEDGER_URL, else sqlite:///results/ledger.sqlite)",
    )
    p.add_argument("--host", help="the address to listen on (default: 127.0.0.1)")
    p.add_argument("--port", type=int64, help=f"the port to listen on (default: {DEFAULT_PORT})")
    p.add_argument(
        "--workers",
        type=int64,
        metavar="N",
        help=f"worker processes started beside the API (default: {DEFAULT_WORKERS}; 0: none, "
        "run `simreport worker` instead)",
    )
    p.add_argument("--tokens-file", metavar="FILE", help="a YAML list of bearer tokens")
    p.add_argument(
        "--tokens-env",
        metavar="NAME",
        help=f"the environment variable holding tokens (default: {DEFAULT_TOKENS_ENV})",
    )
    p.add_argument(
        "--library",
        metavar="DIR",
        help="the asset library runs resolve their references in (default: ./assets)",
    )
    p.add_argument(
        "--max-queue",
        type=int64,
        metavar="N",
        help="runs pending or running at once before new ones get 503 (default: 1000)",
    )
    p.add_argument(
        "--max-pending-age",
        type=float,
        metavar="SECONDS",
        help="/healthz answers degraded (503) once the oldest pending run has waited longer "
        "(default: 600; 0: never for this reason)",
    )
    p.add_argument(
        "--restart-backoff",
        type=float,
        metavar="SECONDS",
        help="the wait before a worker that died is started again, doubled for each further "
        "death in a row up to a minute (default: 1)",
    )
    p.add_argument(
        "--max-body",
        type=int,
        metavar="BYTES",
        help=f"the largest request body; a larger one gets 413, unread (default: "
        f"{DEFAULT_MAX_BODY})",
    )
    p.add_argument(
        "--header-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a request's headers may take to arrive, then 408 (default: 10)",
    )
    p.add_argument(
        "--body-timeout",
        type=float,
        metavar="SECONDS",
        help="how long a request's body may take to arrive after its headers, then 408 "
        "(default: 30)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        help="connections open at once; one more gets 503 (default: 500)",
    )
    p.add_argument(
        "--events-retention",
        type=float,
        metavar="SECONDS",
        help="how long events stay readable (default: 7 days)",
    )
    p.add_argument(
        "--lease-seconds", type=float, metavar="S", help="a worker's lease on a run (default: 30)"
    )
    p.add_argument(
        "--retry-after", type=int64, metavar="S", help="the Retry-After of 429 and 503 (default: 5)"
    )
    p.add_argument(
        "--retry-lost-runs",
        type=int64,
        metavar="N",
        help="times a run whose worker was lost is queued again before it ends crashed "
        "(0 or 1; default: 0)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="the execution policy: the model endpoints, external simulators and providers "
        "runs may use, which specs name (default: the offline provider only)",
    )
    p.set_defaults(func=cmd_api)


def cmd_api(args: argparse.Namespace) -> int:
    from ..ledger.db import ledger_url
    from .config import settings_from_options

    settings = settings_from_options(
        {
            "ledger": ledger_url(args.ledger, results_dir="results"),
            "host": args.host,
            "port": args.port,
            "workers": args.workers,
            "tokens_file": args.tokens_file,
            "tokens_env": args.tokens_env,
            "library": args.library,
            "max_queue": args.max_queue,
            "max_pending_age_seconds": args.max_pending_age,
            "restart_backoff_seconds": args.restart_backoff,
            "max_body_bytes": args.max_body,
            "header_timeout_seconds": args.header_timeout,
            "body_timeout_seconds": args.body_timeout,
            "max_connections": args.max_connections,
            "events_retention_seconds": args.events_retention,
            "lease_seconds": args.lease_seconds,
            "retry_after_seconds": args.retry_after,
            "retry_lost_runs": args.retry_lost_runs,
            "policy": args.policy,
        }
    )
    serve(settings)
    return EXIT_OK


def serve(settings: "ServiceSettings") -> None:
    """Serve until SIGINT or SIGTERM, with `settings.workers` worker processes beside the API,
    supervised, and stopped when it stops."""
    import uvicorn

    from ..ledger.db import describe
    from .limits import Limits, limited_http
    from .supervisor import WorkerPool

    library = settings.library_dir.resolve()
    policy = settings.policy.resolve() if settings.policy is not None else None
    settings = settings.model_copy(update={"library": library, "policy": policy})
    app = create_app(settings)
    service: _Service = app.state.service
    if not service.tokens.by_digest:
        print(
            "simreport api: no API tokens configured: every request but /healthz, /metrics and "
            f"/openapi.json gets 401 (set {service.tokens.setting})",
            file=sys.stderr,
        )
    if not library.is_dir():
        print(
            f"simreport api: note: the asset library {library} is not a folder: runs of "
            "scenarios that name assets will be refused (set --library)",
            file=sys.stderr,
        )
    print(
        f"simreport api: ledger {describe(settings.ledger)}, {settings.workers} worker(s), "
        f"listening on http://{settings.host}:{settings.port}",
        file=sys.stderr,
    )
    print(f"simreport api: {describe_policy(service.policy)}", file=sys.stderr)

    def refusal(status: int, code: str, message: str) -> "JSONResponse":
        retry_after = settings.retry_after_seconds if status == 503 else None
        return _error_response(status, code, message, retry_after=retry_after)

    pool = WorkerPool(settings)
    service.pool = pool
    try:
        pool.start()
        # The application and what it imported live as long as the service: full collections
        # need not walk them.
        gc.freeze()
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            server_header=False,
            http=limited_http(Limits.of(settings), refusal, service.refusals.add),
        )
    except KeyboardInterrupt:
        pass  # the signal that stopped the server, raised again once it has stopped
    finally:
        pool.stop()
