"""`simreport api` and `simreport worker`: the run service's two commands. `api` serves the app
with its supervised workers (service/serve.py); `worker` claims and executes queued runs
(service/worker.py) until SIGINT or SIGTERM. FastAPI, uvicorn and SQLAlchemy load only when a
command runs."""

from __future__ import annotations

import argparse
import signal
from typing import Any

from ..core.errors import EXIT_OK, InputError
from .arguments import int64


def register_api(sub: Any) -> None:
    """Add `simreport api` to the `simreport` parser's subcommands."""
    from ..service.config import DEFAULT_MAX_BODY, DEFAULT_PORT, DEFAULT_TOKENS_ENV, DEFAULT_WORKERS

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
    from ..ledger.location import ledger_url
    from ..service.config import settings_from_options
    from ..service.serve import serve

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


def register_worker(sub: Any) -> None:
    """Add `simreport worker` to the `simreport` parser's subcommands."""
    from ..service.config import DEFAULT_TOKENS_ENV

    p = sub.add_parser(
        "worker",
        help="execute the run service's queued runs (claims them from the ledger)",
        description="Claim the run service's queued runs from the ledger and execute them, "
        "one after another in a run process of the worker's, streaming their events into the "
        "ledger, until SIGINT or SIGTERM.",
    )
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="the ledger database: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
        "(default: $SIMREPORT_LEDGER_URL, else sqlite:///results/ledger.sqlite)",
    )
    p.add_argument(
        "--library",
        metavar="DIR",
        default="assets",
        help="the asset library the service freezes manifests from (default: assets)",
    )
    p.add_argument("--lease-seconds", type=float, default=30.0, metavar="N", help="(default 30)")
    p.add_argument("--heartbeat-seconds", type=float, default=5.0, metavar="N", help="(default 5)")
    p.add_argument(
        "--poll-seconds",
        type=float,
        default=0.05,
        metavar="N",
        help="how often an idle worker looks for runs (default 0.05)",
    )
    p.add_argument(
        "--drain-seconds",
        type=float,
        default=5.0,
        metavar="N",
        help="on SIGINT/SIGTERM, how long the current run may go on before it is cancelled "
        "(default 5)",
    )
    p.add_argument(
        "--spool",
        metavar="DIR",
        help="the folder on local disk where runs the ledger could not take yet are kept until "
        "it does (default: $XDG_STATE_HOME/simreport/spool, else "
        "~/.local/state/simreport/spool)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="the execution policy: the model endpoints, external simulators and providers "
        "runs may use (default: the offline provider only); as `simreport api --policy`",
    )
    p.add_argument(
        "--tokens-env",
        metavar="NAME",
        default=DEFAULT_TOKENS_ENV,
        help="the variable holding the service's API tokens, which runs never see "
        f"(default: {DEFAULT_TOKENS_ENV})",
    )
    p.add_argument("--max-runs", type=int64, metavar="N", help="exit after N runs")
    p.add_argument("--worker-id", metavar="ID", help="(default: host-pid-random)")
    p.set_defaults(func=cmd_worker)


def cmd_worker(args: argparse.Namespace) -> int:
    import threading

    from ..ledger.db import describe
    from ..ledger.location import ledger_url
    from ..service.spool import default_spool
    from ..service.worker import default_worker_id, run_worker
    from ..service.worker_secrets import say

    if not 0 < args.heartbeat_seconds < args.lease_seconds:
        raise InputError(
            "the heartbeat must come more often than the lease runs out",
            path="--heartbeat-seconds",
            expected=f"a number of seconds between 0 and --lease-seconds ({args.lease_seconds})",
        )
    url = ledger_url(args.ledger, results_dir="results")
    assert url is not None  # an explicit or default URL, never "off"
    worker_id = args.worker_id or default_worker_id()
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    say(f"{worker_id} claims runs from {describe(url)}; its spool: {args.spool or default_spool()}")
    runs = run_worker(
        url,
        worker_id=worker_id,
        lease_seconds=args.lease_seconds,
        heartbeat_seconds=args.heartbeat_seconds,
        poll_seconds=args.poll_seconds,
        library=args.library,
        stop_event=stop,
        max_runs=args.max_runs,
        drain_seconds=args.drain_seconds,
        on_run=lambda run_id, outcome: say(f"{run_id} {outcome}"),
        policy=args.policy,
        tokens_env=args.tokens_env,
        spool=args.spool,
    )
    say(f"{worker_id} stopped after {runs} run(s)")
    return EXIT_OK
