"""What the run service's routes share, as FastAPI dependencies: the service itself (its
settings, tokens, ledger and policy: `Shared`), the principal the request's token proves
(`Authenticated`), its Idempotency-Key (`Key`), an id in the path (`Id`), and the one way every
write answers once per key (`Write`)."""

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Header, Path, Request
from fastapi.security import HTTPBearer
from pydantic import BaseModel
from starlette.responses import JSONResponse

from ..core.canonical import canonical_json, sha256_text
from ..core.execution_policy import ExecutionPolicy
from ..core.values import Name
from . import queue
from .auth import Principal, Tokens
from .config import ServiceSettings
from .errors import BadRequest, ServiceError
from .metrics import ServiceCollector, Tally, service_registry
from .models import MAX_TEXT

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from .supervisor import WorkerPool

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 200


class Service:
    """What the routes share: the settings, the tokens and the ledger; the worker pool of
    `simreport api` (None: the app runs no workers), the clock the queue's waits are measured
    with, and what /metrics counts: failed ledger calls, and refusals by the connection
    limits (by code), in its registry."""

    def __init__(
        self,
        settings: ServiceSettings,
        tokens: Tokens,
        engine: "Engine",
        clock: Callable[[], datetime],
        policy: ExecutionPolicy,
    ) -> None:
        self.settings = settings
        self.tokens = tokens
        self.engine = engine
        self.policy = policy
        self.clock = clock
        self.pool: WorkerPool | None = None
        self.ledger_errors = Tally()
        self.refusals = Tally()
        self.registry = service_registry(
            ServiceCollector(engine, self.ledger_errors, self.refusals, lambda: self.pool, clock)
        )

    def capacity(self, principal: Principal) -> queue.Capacity:
        """The limits a run of `principal` is queued under (checked by queue.start_run in the
        transaction that queues it)."""
        return queue.Capacity(
            quota=principal.max_concurrent_runs,
            max_queue=self.settings.max_queue,
            retry_after=float(self.settings.retry_after_seconds),
        )


# The dependencies only read the request: as coroutines they run on the event loop, where a
# plain function would be handed to the thread pool and back for every request.


async def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


Shared = Annotated[Service, Depends(service_of)]

_bearer = HTTPBearer(auto_error=False, description="a token from the service's tokens")


async def authenticated(request: Request, _: Annotated[Any, Depends(_bearer)]) -> Principal:
    """The principal the app's middleware authenticated (`_bearer` documents the scheme)."""
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
        raise missing_key()
    if len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise BadRequest(
            f"an {IDEMPOTENCY_HEADER} is at most {MAX_KEY_LENGTH} printable characters",
            code="idempotency_key_invalid",
        )
    return key


def missing_key() -> BadRequest:
    return BadRequest(f"an {IDEMPOTENCY_HEADER} header is required", code="idempotency_key_missing")


Key = Annotated[str, Depends(idempotency_key)]
# An id in the path is a name: refused (422, `path.<name>`) before it reaches the ledger.
Id = Annotated[Name, Path(min_length=1, max_length=MAX_TEXT)]


class IdempotentWrite:
    """A write request with its principal and Idempotency-Key, answered once per key."""

    def __init__(self, request: Request, principal: Principal, key: str, service: Service):
        self.request = request
        self.principal = principal
        self.key = key
        self.service = service

    def __call__(
        self, body: BaseModel, action: Callable[[queue.IdempotencyKey], dict[str, Any]]
    ) -> JSONResponse:
        """Answer the request with what `action` returns, in the route's status. The key is
        stored with the sha256 of the request (method, path, body) and its answer in the
        transaction that does the write (`action` hands it to the queue), so the same key with
        the same request gets the stored answer (from any process, after restarts; of two sent
        together one writes and the other gets its answer) and with another request 409. A
        refused request stores nothing: it did nothing."""
        request, principal = self.request, self.principal
        request_doc = {
            "method": request.method,
            "path": request.url.path,
            "body": body.model_dump(mode="json"),
        }
        digest = sha256_text(canonical_json(request_doc))
        try:
            # The action's transaction takes the key, or finds its answer (a replay, from any
            # process); most requests are new, so nothing looks for the key before.
            answer = action(queue.IdempotencyKey(principal.name, self.key, digest))
        except queue.StoredAnswer as exc:
            stored = exc.stored
        except ServiceError:
            # Refused before its transaction took the key (a version retired since): a replay
            # still gets the answer its key holds, a new request the refusal.
            found = queue.idempotent(
                self.service.engine,
                principal=principal.name,
                tenant=principal.tenant,
                key=self.key,
                request_sha256=digest,
            )
            if found is None:
                raise
            stored = found
        else:
            return JSONResponse(answer, status_code=request.scope["route"].status_code or 200)
        return JSONResponse(stored.response, status_code=stored.status_code)


async def idempotent_write(
    request: Request, principal: Authenticated, key: Key, service: Shared
) -> IdempotentWrite:
    return IdempotentWrite(request, principal, key, service)


Write = Annotated[IdempotentWrite, Depends(idempotent_write)]
