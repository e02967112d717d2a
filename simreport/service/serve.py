"""`simreport api`: serve the run service's app (app.py) with uvicorn, its connections bounded
(limits.py), with the worker processes it starts and supervises beside it (supervisor.py).
Nothing here is imported before the command runs: FastAPI and uvicorn load when it starts."""

from __future__ import annotations

import gc
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

    from ..core.execution_policy import ExecutionPolicy
    from .config import ServiceSettings


def serve(settings: ServiceSettings) -> None:
    """Serve until SIGINT or SIGTERM, with `settings.workers` worker processes beside the API,
    supervised, and stopped when it stops."""
    import uvicorn

    from ..ledger.db import describe
    from .app import create_app
    from .dependencies import Service
    from .limits import Limits, limited_http
    from .refusals import error_response
    from .supervisor import WorkerPool

    library = settings.library_dir.resolve()
    policy = settings.policy.resolve() if settings.policy is not None else None
    settings = settings.model_copy(update={"library": library, "policy": policy})
    app = create_app(settings)
    service: Service = app.state.service
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

    def refusal(status: int, code: str, message: str) -> JSONResponse:
        retry_after = settings.retry_after_seconds if status == 503 else None
        return error_response(status, code, message, retry_after=retry_after)

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


def describe_policy(policy: ExecutionPolicy) -> str:
    """What the execution policy lets runs use, in one line (names only: never a URL)."""

    def names(found: Any) -> str:
        return ", ".join(sorted(found)) or "none"

    return (
        f"runs may use providers {names(policy.providers)}; endpoints {names(policy.endpoints)}; "
        f"simulators {names(policy.simulators)}"
    )
