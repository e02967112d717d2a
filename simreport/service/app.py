"""The run service's HTTP app (`create_app`): the seed's `/v1/sim` endpoints over the ledger,
with bearer tokens, idempotency keys and quotas, assembled from the routers (routers/), the
dependencies they share (dependencies.py) and the one place refusals are answered
(refusals.py). Serving it is serve.py's job.

Routes are thin: what they answer comes from simreport.service.queue, which keeps every state
in the ledger, so API processes can be restarted or multiplied.
"""

import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime

import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.engine import Engine
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from ..core.package_version import __version__
from ..ledger.db import connect, utc_now
from ..ledger.migrate import prepare_for_writing
from . import queue, refusals
from .auth import Tokens, load_tokens
from .config import ServiceSettings, load_service_policy
from .dependencies import Service
from .errors import Unauthenticated
from .metrics import count_ledger_errors
from .routers import assets, events, health, manifests, runs, scenarios

log = logging.getLogger("simreport.service")

PREFIX = "/v1/sim"

OPEN_PATHS = frozenset({"/healthz", "/metrics", "/openapi.json"})
"""What answers without a token: the health check, the metrics (counts only) and the OpenAPI
document."""


def create_app(
    settings: ServiceSettings,
    *,
    tokens: Tokens | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> FastAPI:
    """The FastAPI application for `settings`. Reads the tokens (`tokens` replaces the
    settings' file and variable; `environ` replaces os.environ) and connects to the ledger,
    creating or upgrading it, so a wrong setting is refused before the service listens.
    `clock` (UTC; default: the system's) measures how long pending runs have waited."""
    if tokens is None:
        tokens = load_tokens(settings, environ)
    policy = load_service_policy(settings.policy)
    engine = connect(settings.ledger)
    service = Service(settings, tokens, engine, clock or utc_now, policy)
    count_ledger_errors(engine, service.ledger_errors.add)
    prepare_for_writing(engine)

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
    refusals.install(app)
    app.add_middleware(_AuthenticateFirst, tokens=service.tokens)
    app.include_router(health.router)
    for resource in (scenarios, assets, runs, events, manifests):
        app.include_router(resource.router, prefix=PREFIX)
    return app


class _AuthenticateFirst:
    """Before routing and body parsing: every path but the open ones answers 401 without a
    valid token; the principal goes to `request.state.principal`. A plain ASGI middleware:
    Starlette's `@app.middleware("http")` costs a task and a stream per request."""

    def __init__(self, app: ASGIApp, tokens: Tokens) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            try:
                principal = self.tokens.authenticate(Headers(scope=scope).get("authorization"))
            except Unauthenticated as exc:
                await refusals.refusal(exc)(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def _reclaim_until(engine: Engine, stop: threading.Event, every: float) -> None:
    """End expired leases every `every` seconds until `stop` (a ledger that does not answer
    is tried again next time)."""
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
        except sa.exc.SQLAlchemyError:
            log.exception("reclaiming expired leases failed; trying again in %.0f s", every)
