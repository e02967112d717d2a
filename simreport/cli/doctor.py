"""`simreport doctor --llm` checks an OpenAI-compatible endpoint before an audit spends calls on it
(see doctor.py); `simreport cache stats|clear|prune` looks after the response cache. The doctor
exits 3 when a check failed (warnings exit 0)."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..core.errors import EXIT_OK, InputError
from ..doctor import EXIT_CHECK_FAILED, doctor_rows, format_table
from ..kernel.providers.cache import ResponseCache, cache_mode, default_cache_dir
from ..kernel.providers.openai import DEFAULT_MAX_CONCURRENCY, ENV_MAX_CONCURRENCY
from .arguments import int64
from .output import print_json, table_lines


def register_cli(subparsers: Any) -> None:
    """Add the `doctor` and `cache` subcommands to the `simreport` parser's subparsers."""
    p = subparsers.add_parser("doctor", help="check an LLM endpoint before an audit uses it")
    p.add_argument("--llm", action="store_true", help="check the LLM endpoint")
    p.add_argument("--scenario", help="read llm.baseUrl, model and apiKeyEnv from this scenario")
    p.add_argument("--base-url", help="endpoint, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", help="model name to ask")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument(
        "--parallel",
        type=int64,
        help=f"requests fired at once in the concurrency check (default ${ENV_MAX_CONCURRENCY} or "
        f"{DEFAULT_MAX_CONCURRENCY})",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_doctor)

    p = subparsers.add_parser("cache", help="inspect or trim the LLM response cache")
    p.add_argument("action", choices=["stats", "clear", "prune"])
    p.add_argument("--dir", help="cache directory (default $SIMREPORT_CACHE_DIR)")
    p.add_argument("--older-than", type=float, metavar="DAYS", help="prune: created before")
    p.add_argument("--unused-for", type=float, metavar="DAYS", help="prune: not used since")
    p.add_argument("--json", action="store_true", help="stats: print JSON")
    p.set_defaults(func=cmd_cache)


def _doctor_target(args: argparse.Namespace) -> tuple[str, str, str | None]:
    base_url, model, key_env = args.base_url, args.model, args.api_key_env
    if args.scenario:
        from ..kernel import load_scenario

        llm = load_scenario(args.scenario).scenario.llm
        base_url = base_url or llm.base_url
        model = model or llm.model
        key_env = key_env or llm.api_key_env
    if not base_url:
        raise InputError(
            "no endpoint to check",
            path="llm.baseUrl",
            expected="--base-url URL or a --scenario whose llm.baseUrl is set",
        )
    if not model:
        raise InputError("no model to ask", path="llm.model", expected="--model NAME")
    return str(base_url), str(model), key_env


def cmd_doctor(args: argparse.Namespace) -> int:
    if not args.llm:
        raise InputError("nothing to check", expected="--llm")
    base_url, model, key_env = _doctor_target(args)
    parallel = args.parallel
    if parallel is None:
        raw = os.environ.get(ENV_MAX_CONCURRENCY, "")
        parallel = int(raw) if raw.strip().isdigit() else DEFAULT_MAX_CONCURRENCY
    if parallel < 1:
        raise InputError("--parallel must be at least 1", expected="a positive integer")
    if not args.timeout > 0:
        raise InputError("--timeout must be positive", expected="seconds, e.g. 30")
    rows = doctor_rows(base_url, model, key_env, parallel=parallel, timeout_seconds=args.timeout)
    if args.json:
        print_json([asdict(r) for r in rows], sort_keys=False, ensure_ascii=True)
    else:
        print(format_table(rows))
    return EXIT_CHECK_FAILED if any(r.status == "fail" for r in rows) else EXIT_OK


def cmd_cache(args: argparse.Namespace) -> int:
    cache = ResponseCache(Path(args.dir).expanduser() if args.dir else default_cache_dir())
    if args.action == "stats":
        stats = cache.stats()
        rows = [*stats.rows(), ("mode", cache_mode())]
        if args.json:
            print_json(dict(rows), sort_keys=False, ensure_ascii=True)
        else:
            for line in table_lines(None, rows):
                print(line)
        return EXIT_OK
    if args.action == "clear":
        print(f"removed {cache.clear()} entries from {cache.directory}")
        return EXIT_OK
    for flag, value in (("--older-than", args.older_than), ("--unused-for", args.unused_for)):
        if value is not None and not value >= 0:
            raise InputError(f"{flag} must be a number of days", expected="0 or more")
    removed = cache.prune(older_than_days=args.older_than, unused_for_days=args.unused_for)
    print(f"removed {removed} entries from {cache.directory}")
    return EXIT_OK
