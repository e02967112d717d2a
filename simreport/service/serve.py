"""`simreport api`: serve the run service's app (app.py) with uvicorn, its connections bounded
(limits.py), with the worker processes it starts and supervises beside it (supervisor.py).
Nothing here is imported before the command runs: FastAPI and uvicorn load when it starts."""

from __future__ import annotations

import argparse
import gc
import sys
from typing import TYPE_CHECKING, Any

from ..core.errors import EXIT_OK

if TYPE_CHECKING:
    from starlette.responses import JSONResponse

    from ..core.execution_policy import ExecutionPolicy
    from .config import ServiceSettings


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
