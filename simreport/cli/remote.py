"""`simreport remote …`: start runs on a run service (`simreport api`), read their status, follow
their events, fetch their evidence and cancel them, through simreport.client.

Thin: parses arguments, calls the client and prints tables (or JSON with --json). The client's
errors (`RemoteError`, a `SimreportError`) become one line on stderr and exit code 2; the token
is read from a file and never shown.
httpx is imported when a remote command runs, not when the CLI starts.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.errors import EXIT_OK, InputError
from ..core.versions import DEFAULT_PURPOSE, PURPOSES
from .arguments import count, positive_int, version_ref
from .output import print_json, print_table, shortened

if TYPE_CHECKING:
    from ..client import EventPage, SimClient

URL_ENV = "SIMREPORT_URL"
TOKEN_FILE_ENV = "SIMREPORT_TOKEN_FILE"


def register_cli(sub: Any) -> None:
    """Add the `remote` command group to the `simreport` parser's subcommands."""
    remote = sub.add_parser(
        "remote",
        help="use a run service (simreport api): start runs, follow events, fetch evidence, cancel",
        description="Use a run service (`simreport api`) over HTTP: start runs of online "
        "scenario versions, read their status, follow their events, fetch their evidence and "
        "cancel them. Retries follow the service's answers (429 waits for Retry-After, 503 "
        "and lost connections retry with the same Idempotency-Key).",
    )
    group = remote.add_subparsers(dest="remote_command", required=True, parser_class=type(remote))

    def command(name: str, help_: str, func: Callable[[argparse.Namespace], int]) -> Any:
        p = group.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        p.add_argument(
            "--url",
            metavar="URL",
            help=f"the service, e.g. http://127.0.0.1:8080 (default: ${URL_ENV})",
        )
        p.add_argument(
            "--token-file",
            metavar="FILE",
            help=f"a file holding the bearer token (default: ${TOKEN_FILE_ENV})",
        )
        p.add_argument(
            "--timeout",
            type=_positive_float,
            default=30.0,
            metavar="SECONDS",
            help="longest wait for one answer (default: 30)",
        )
        p.add_argument(
            "--retries",
            type=count,
            default=5,
            metavar="N",
            help="retries of one request on 429, 503 or a lost connection (default: 5)",
        )
        p.set_defaults(func=func)
        return p

    p = command("scenario", "create a scenario; prints its id", cmd_scenario)
    p.add_argument("--namespace", required=True, help="the namespace it belongs to")
    p.add_argument("--name", required=True, help="its name, unique in the namespace")
    p.add_argument("--owner", required=True, help="who answers for it")
    p.add_argument(
        "--risk-level", choices=("low", "medium", "high"), default="medium", help="(medium)"
    )
    _key_option(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command(
        "version", "submit a scenario file as a new version of a scenario, for review", cmd_version
    )
    p.add_argument("scenario_id", metavar="SCENARIO_ID")
    p.add_argument("file", metavar="SCENARIO_FILE", help="the scenario (YAML or JSON)")
    p.add_argument(
        "--version", help="the version (default: the file's identity.version)", metavar="V"
    )
    p.add_argument("--source", help="where it comes from (default: the file's name)")
    _key_option(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command(
        "run", "queue a run of an online scenario version; prints its run and manifest", cmd_run
    )
    p.add_argument("ref", metavar="SCENARIO_ID@VERSION", help="the scenario and its version")
    p.add_argument(
        "--mode",
        default="surrogate",
        help="surrogate, hybrid or isolated_real (default: surrogate)",
    )
    p.add_argument(
        "--seed", type=count, metavar="N", help="the run's seed (default: the scenario's)"
    )
    p.add_argument(
        "--purpose",
        choices=PURPOSES,
        default=DEFAULT_PURPOSE,
        help=f"regression needs every version it resolves online (default: {DEFAULT_PURPOSE})",
    )
    p.add_argument(
        "--budget-calls",
        type=positive_int,
        metavar="N",
        help="most tool calls by the agent (the scenario's budget.maxToolCalls)",
    )
    p.add_argument(
        "--budget-turns",
        type=positive_int,
        metavar="N",
        help="most user turns (the scenario's budget.maxTurns)",
    )
    p.add_argument(
        "--budget-wall-clock",
        metavar="DURATION",
        help="most real time, in seconds or as 20m (the scenario's budget.wallClock)",
    )
    _key_option(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("status", "show a run's four statuses", cmd_status)
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("events", "show a run's events; --follow tails it until it ends", cmd_events)
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--follow", action="store_true", help="keep printing events until the run ends")
    p.add_argument(
        "--after-seq",
        type=count,
        default=0,
        metavar="N",
        help="only events after this sequence number (default: 0, from the first)",
    )
    p.add_argument(
        "--poll",
        type=_positive_float,
        default=1.0,
        metavar="SECONDS",
        help="with --follow: pause between reads when nothing new came (default: 1)",
    )
    p.add_argument(
        "--json", action="store_true", help="print JSON (with --follow: one event per line)"
    )

    p = command("evidence", "fetch a finished run's evidence package", cmd_evidence)
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--criterion", metavar="C", help="only this criterion")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("cancel", "cancel a pending or running run", cmd_cancel)
    p.add_argument("run_id", metavar="RUN_ID")
    p.add_argument("--reason", required=True, metavar="TEXT", help="why, recorded with the run")
    _key_option(p)
    p.add_argument("--json", action="store_true", help="print JSON")


def _key_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="send the write with this key (repeat a command with the key an earlier failure "
        "printed, and the service answers it instead of writing twice; default: a new key)",
    )


# --------------------------------------------------------------------------- commands


def cmd_scenario(args: argparse.Namespace) -> int:
    with _client(args) as client:
        scenario_id = client.create_scenario(
            args.namespace,
            args.name,
            owner=args.owner,
            risk_level=args.risk_level,
            idempotency_key=args.idempotency_key,
        )
    if args.json:
        print_json({"scenario_id": scenario_id})
    else:
        print(scenario_id)
    return EXIT_OK


def cmd_version(args: argparse.Namespace) -> int:
    from ..core.files import load_document

    spec = load_document(args.file).data
    if not isinstance(spec, dict):
        raise InputError("a scenario is a mapping", file=args.file, expected="a YAML mapping")
    identity = spec.get("identity")
    version = args.version or (identity.get("version") if isinstance(identity, dict) else None)
    if not isinstance(version, str) or not version:
        raise InputError(
            "no version given and the file names none",
            file=args.file,
            path="identity.version",
            expected="--version V, or identity.version in the file",
        )
    with _client(args) as client:
        status = client.submit_version(
            args.scenario_id,
            version,
            spec,
            source=args.source or str(args.file),
            idempotency_key=args.idempotency_key,
        )
    if args.json:
        print_json({"scenario_id": args.scenario_id, "version": version, "status": status})
    else:
        print(f"{args.scenario_id}@{version}: {status}")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    scenario_id, version = version_ref(
        args.ref, path="SCENARIO_ID@VERSION", example="refund_desk@1.0.0"
    )
    limits = {
        "maxToolCalls": args.budget_calls,
        "maxTurns": args.budget_turns,
        "wallClock": _duration(args.budget_wall_clock),
    }
    budget = {name: value for name, value in limits.items() if value is not None} or None
    with _client(args) as client:
        started = client.start_run(
            scenario_id,
            version,
            mode=args.mode,
            seed=args.seed,
            budget=budget,
            purpose=args.purpose,
            idempotency_key=args.idempotency_key,
        )
    if args.json:
        print_json({"run_id": started.run_id, "manifest_id": started.manifest_id})
        return EXIT_OK
    print_table(
        ["run", "manifest", "state"],
        [[started.run_id, started.manifest_id, "accepted: queued, not started yet"]],
    )
    print(f"follow it with: simreport remote events {started.run_id} --follow")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.run_status(args.run_id)
    if args.json:
        print_json(status)
        return EXIT_OK
    _print_status(args.run_id, status)
    return EXIT_OK


def cmd_events(args: argparse.Namespace) -> int:
    with _client(args) as client:
        if not args.follow:
            page = client.events(args.run_id, args.after_seq)
            if page.snapshot is not None:
                _gap_note(page)
            if args.json:
                print_json(page.as_dict())
            else:
                _event_table(page.events)
            return EXIT_OK
        if not args.json:
            print(_event_line(_EVENT_HEADERS), flush=True)
        for event in client.follow_events(
            args.run_id, args.after_seq, poll_interval=args.poll, on_gap=_gap_note
        ):
            if args.json:
                print(json.dumps(event, sort_keys=True, ensure_ascii=False), flush=True)
            else:
                print(_event_line(_event_row(event)), flush=True)
        status = client.run_status(args.run_id)
    ended = status.get("execution_status", "ended")
    print(f"simreport: run {args.run_id} {ended}", file=sys.stderr)
    return EXIT_OK


def cmd_evidence(args: argparse.Namespace) -> int:
    with _client(args) as client:
        package = client.evidence(args.run_id, args.criterion)
    if args.json:
        print_json(package)
        return EXIT_OK
    records = _items(package, "records")
    observations = _items(package, "observations")
    kinds = Counter(str(r.get("kind") or r.get("type") or r.get("record_type")) for r in records)
    summary = ", ".join(f"{kind} {n}" for kind, n in kinds.most_common(6))
    summary += ", …" if len(kinds) > 6 else ""
    print(f"records: {len(records)}" + (f" ({summary})" if summary else ""))
    missing = sum(1 for o in observations if o.get("missing"))
    print(
        f"observations: {len(observations) - missing}"
        + (f" ({missing} missing)" if missing else "")
    )
    evidence = _items(package, "evidence")
    print(f"\nevidence: {len(evidence)}")
    if evidence:
        print_table(
            ["criterion", "sufficient", "observations", "refs"],
            [
                [
                    e.get("criterion", e.get("criterion_key")),
                    e.get("sufficient"),
                    _length(e.get("observation_ids")),
                    _length(e.get("evidence_refs")),
                ]
                for e in evidence
            ],
        )
    completeness = _items(package, "completeness")
    print(f"\ncompleteness: {len(completeness)}")
    if completeness:
        print_table(
            ["check", "status", "detail"],
            [
                [
                    c.get("check", c.get("check_key")),
                    c.get("status"),
                    shortened(_compact(c.get("detail")), 60),
                ]
                for c in completeness
            ],
        )
    return EXIT_OK


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(args) as client:
        answer = client.cancel(
            args.run_id, reason=args.reason, idempotency_key=args.idempotency_key
        )
    if args.json:
        print_json(answer)
        return EXIT_OK
    state = answer.get("execution_status", "cancelled")
    print(f"run {args.run_id}: {state} (a running run stops at its next step)")
    return EXIT_OK


# --------------------------------------------------------------------------- helpers


def _client(args: argparse.Namespace) -> SimClient:
    from ..client import SimClient, load_token

    url = args.url or os.environ.get(URL_ENV)
    if not url:
        raise InputError(f"no service URL: pass --url or set {URL_ENV}", path="--url")
    if args.token_file:
        path, setting = args.token_file, f"--token-file {args.token_file}"
    elif os.environ.get(TOKEN_FILE_ENV):
        path = os.environ[TOKEN_FILE_ENV]
        setting = f"{TOKEN_FILE_ENV} ({path})"
    else:
        raise InputError(
            f"no token: pass --token-file FILE or set {TOKEN_FILE_ENV}", path="--token-file"
        )
    token = load_token(path, setting="--token-file" if args.token_file else TOKEN_FILE_ENV)
    return SimClient(
        url,
        token,
        timeout=args.timeout,
        max_retries=args.retries,
        token_source=setting,
    )


def _print_status(run_id: str, status: dict[str, Any]) -> None:
    names = ("execution_status", "validity_status", "evidence_status", "quality_ref")
    rows = [[name.removesuffix("_status"), status.get(name)] for name in names]
    rows += [[k, v] for k, v in sorted(status.items()) if k not in names and k != "run_id"]
    print(f"run {run_id}")
    print_table(["status", "value"], rows)


_EVENT_HEADERS = ["seq", "t", "type", "actor", "payload"]
_EVENT_WIDTHS = (5, 6, 26, 12)


def _event_row(event: dict[str, Any]) -> list[Any]:
    return [
        event.get("seq"),
        event.get("t", event.get("logical_time")),
        event.get("type"),
        event.get("actor"),
        shortened(_compact(_payload_data(event.get("payload"))), 80),
    ]


def _payload_data(payload: Any) -> Any:
    """What an event says: its `data` when the payload wraps it (beside its business time)."""
    if isinstance(payload, dict) and isinstance(payload.get("data"), dict):
        return payload["data"]
    return payload


def _event_line(row: list[Any]) -> str:
    """A row with fixed widths, so rows printed one by one while following line up."""
    cells = ["-" if v is None else " ".join(str(v).split()) for v in row]
    head = [c.ljust(w) for c, w in zip(cells, _EVENT_WIDTHS, strict=False)]
    return "  ".join([*head, *cells[len(_EVENT_WIDTHS) :]]).rstrip()


def _event_table(events: list[dict[str, Any]]) -> None:
    print(_event_line(_EVENT_HEADERS))
    for event in events:
        print(_event_line(_event_row(event)))


def _gap_note(page: EventPage) -> None:
    state = (page.snapshot or {}).get("execution_status", "unknown")
    first = page.events[0].get("seq") if page.events else None
    resumed = f"resumed at seq {first}" if first is not None else "none newer served yet"
    print(
        f"simreport: the events after seq {page.expired_after} are past the service's retention; "
        f"re-read the snapshot (run {state}), {resumed}",
        file=sys.stderr,
    )


def _items(package: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found = package.get(name)
    if isinstance(found, dict):
        found = [found]
    if not isinstance(found, list):
        return []
    return [item if isinstance(item, dict) else {"value": item} for item in found]


def _length(value: Any) -> int | None:
    return len(value) if isinstance(value, list | dict) else None


def _compact(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _duration(text: str | None) -> float | str | None:
    """Seconds as a number; a duration such as 20m as it is (the service reads it)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, not {text!r}")
    return value
