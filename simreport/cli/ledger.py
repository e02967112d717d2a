"""`simreport ledger …`: create or upgrade a ledger, record result folders in it, read it.

Thin: parses arguments, calls the ledger's functions, prints tables (or JSON with --json).
Database libraries are imported when a ledger command runs, not when the CLI starts.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..core.errors import EXIT_INPUT, EXIT_OK
from .arguments import int64, positive_int
from .output import distinct_shortened, print_json, print_table, short_time

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def command_group(
    sub: Any, name: str, *, help_: str, description: str
) -> Callable[[str, str, Callable[[argparse.Namespace], int]], Any]:
    """Add the command group `name` (ledger, review) to the `simreport` parser's subcommands;
    returns how to add one of its commands, each taking `--ledger URL` and `--results DIR`."""
    parser = sub.add_parser(name, help=help_, description=description)
    group = parser.add_subparsers(dest=f"{name}_command", required=True, parser_class=type(parser))

    def command(name: str, help_: str, func: Callable[[argparse.Namespace], int]) -> Any:
        p = group.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".")
        p.add_argument(
            "--ledger",
            metavar="URL",
            help="the ledger database: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
            "(default: $SIMREPORT_LEDGER_URL, else sqlite:///RESULTS/ledger.sqlite)",
        )
        p.add_argument(
            "--results",
            metavar="DIR",
            default="results",
            help="the results folder whose ledger.sqlite is the default ledger (default: results)",
        )
        p.set_defaults(func=func)
        return p

    return command


def register_cli(sub: Any) -> None:
    """Add the `ledger` command group to the `simreport` parser's subcommands."""
    command = command_group(
        sub,
        "ledger",
        help_="the run ledger: record runs and builds in a database, and read them back",
        description="The run ledger: a database of every run and build, beside the files.",
    )

    command("upgrade", "create the ledger or bring it to the current schema", cmd_upgrade)

    p = command("ingest", "record the runs and analysed audits in result folders", cmd_ingest)
    p.add_argument(
        "paths",
        nargs="+",
        metavar="RESULTS_DIR",
        help="a results folder, an audit directory or a run directory",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes that read and check run directories while one writes "
        "(default: one per core)",
    )

    p = command("runs", "list recorded runs, newest first", cmd_runs)
    p.add_argument("--scenario", metavar="S", help="scenario id (or id@version; a world's name)")
    p.add_argument(
        "--status",
        action="append",
        default=[],
        metavar="STATUS",
        help="execution, validity or evidence status (completed, crashed, violated, partial, "
        "evidence=unchecked, …); repeat for more",
    )
    p.add_argument("--since", metavar="WHEN", help="started since: 2026-11-30, 12h, 7d, …")
    p.add_argument("--limit", type=int64, metavar="N", help="at most N runs")
    p.add_argument(
        "--purpose", choices=("regression", "exploration"), help="only runs made for this purpose"
    )
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("show", "show one run: statuses, manifest, evidence, fault steps", cmd_show)
    p.add_argument("run_id", metavar="RUN_ID", help="a run id, or the start of one")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("history", "list a plan's builds with grade and hashes", cmd_history)
    p.add_argument("plan_id", metavar="PLAN_ID")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("assets", "list asset versions, their status, sha256 and runs", cmd_assets)
    p.add_argument("--json", action="store_true", help="print JSON")


# --------------------------------------------------------------------------- plumbing


def ledger_url_from(args: argparse.Namespace) -> str:
    """The ledger a command's `--ledger` and `--results` name."""
    from ..ledger.location import ledger_url

    url = ledger_url(args.ledger, results_dir=args.results)
    assert url is not None  # no config here can turn it off
    return url


@contextmanager
def open_ledger(args: argparse.Namespace, *, must_exist: bool) -> Iterator[Engine]:
    """An engine on the command's ledger (see `ledger_url_from`), disposed when the block ends;
    `must_exist`: a SQLite file that is not there is refused rather than created."""
    from ..ledger.db import connect

    engine = connect(ledger_url_from(args), must_exist=must_exist)
    try:
        yield engine
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- commands


def cmd_upgrade(args: argparse.Namespace) -> int:
    from ..ledger.db import describe
    from ..ledger.migrate import upgrade

    with open_ledger(args, must_exist=False) as engine:
        done = upgrade(engine)
    where = describe(ledger_url_from(args))
    if not done.changed:
        print(f"ledger {where}: already at schema revision {done.after}")
    elif done.before is None:
        print(f"ledger {where}: created at schema revision {done.after}")
    else:
        print(f"ledger {where}: upgraded from revision {done.before} to {done.after}")
    return EXIT_OK


def cmd_ingest(args: argparse.Namespace) -> int:
    from ..ledger.db import describe
    from ..ledger.ingest import BULK_GROUP, ingest_paths

    jobs = args.jobs if args.jobs is not None else max(1, os.cpu_count() or 1)
    with open_ledger(args, must_exist=False) as engine:
        summary = ingest_paths(engine, args.paths, jobs=jobs, group=BULK_GROUP)
    rows = summary.rows
    print(
        f"runs: {summary.runs_recorded} recorded, {summary.runs_present} already recorded"
        + (f", {len(summary.refused)} refused" if summary.refused else "")
    )
    print(f"builds: {summary.builds_recorded} recorded, {summary.builds_present} already recorded")
    if rows:
        listed = ", ".join(f"{count} {table}" for table, count in sorted(rows.items()))
        print(f"rows written: {listed}")
    print(f"ledger: {describe(ledger_url_from(args))}")
    for path, reason in summary.refused:
        print(f"simreport: refused {path}: {reason}", file=sys.stderr)
    return EXIT_INPUT if summary.refused else EXIT_OK


def cmd_runs(args: argparse.Namespace) -> int:
    from ..ledger.queries import list_runs, parse_since

    since = parse_since(args.since) if args.since else None
    with open_ledger(args, must_exist=True) as engine:
        runs = list_runs(
            engine,
            scenario=args.scenario,
            statuses=args.status,
            since=since,
            limit=args.limit,
            purpose=args.purpose,
        )
    if args.json:
        print_json(runs)
        return EXIT_OK
    if not runs:
        print("no runs match")
        return EXIT_OK
    # Cut to fit, but never so that two different conditions (or reasons) read alike.
    conditions = distinct_shortened([r["condition"] for r in runs], 40)
    reasons = distinct_shortened([r["terminalReason"] for r in runs], 40)
    print_table(
        (
            "run",
            "scenario",
            "condition",
            "rep",
            "execution",
            "validity",
            "evidence",
            "purpose",
            "started",
            "reason",
        ),
        [
            (
                r["runId"],
                r["scenario"],
                condition,
                r["replication"],
                r["status"]["execution"],
                r["status"]["validity"],
                r["status"]["evidence"],
                r["purpose"],
                short_time(r["startedAt"] or r["recordedAt"]),
                reason,
            )
            for r, condition, reason in zip(runs, conditions, reasons, strict=True)
        ],
    )
    print(f"{len(runs)} run{'s' if len(runs) != 1 else ''}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from ..ledger.queries import show_run

    with open_ledger(args, must_exist=True) as engine:
        run = show_run(engine, args.run_id)
    if args.json:
        print_json(run)
        return EXIT_OK
    status, manifest = run["status"], run["manifest"]
    print(
        f"run {run['runId']}: {run['engine']}, condition {run['condition']}, "
        f"replication {run['replication']}"
    )
    print(
        f"  status       execution {status['execution']} · validity {status['validity']} · "
        f"evidence {status['evidence']} · quality {status['quality'] or '-'}"
    )
    started, ended = short_time(run["startedAt"]), short_time(run["endedAt"])
    print(
        f"  time         started {started} · ended {ended} · "
        f"recorded {short_time(run['recordedAt'])}"
    )
    print(f"  ended by     {run['terminalReason'] or '-'}")
    not_online = manifest.get("notOnline") or []
    print(
        f"  purpose      {run['purpose']}"
        + (
            " · not online: "
            + ", ".join(f"{v['name']}@{v['version']} ({v['status']})" for v in not_online)
            if not_online
            else ""
        )
    )
    print(
        f"  manifest     {manifest['manifestId']} (sha256 {manifest['sha256'][:16]}…): "
        f"scenario {manifest['scenario']}@{manifest['scenarioVersion']}, seed {manifest['seed']}"
    )
    ran = _ran_with(manifest)
    if ran:
        print("               " + " · ".join(ran))
    counts = run["counts"]
    print(
        f"  recorded     {counts['events']} events · {counts['records']} records · "
        f"{counts['observations']} observations ({counts['missingObservations']} missing)"
    )
    if run["metrics"]:
        print(
            "  metrics      "
            + ", ".join(f"{k}={_number(v)}" for k, v in sorted(run["metrics"].items()))
        )
    if run["failure"]:
        failure = run["failure"]
        print(
            f"  failure      {failure.get('type')} in {failure.get('stage')}: "
            f"{failure.get('message')}"
        )
    if run["assets"]:
        print("\nassets")
        print_table(
            ("slot", "asset", "type", "status", "sha256"),
            [
                (a["slot"], f"{a['name']}@{a['version']}", a["type"], a["status"], a["sha256"][:16])
                for a in run["assets"]
            ],
        )
    if run["evidence"]:
        print("\nevidence")
        print_table(
            ("criterion", "sufficient", "observations", "records", "missing"),
            [
                (
                    e["criterion"],
                    e["sufficient"],
                    e["observations"],
                    ", ".join(e["refs"]) or "-",
                    ", ".join(e["missing"]) or "-",
                )
                for e in run["evidence"]
            ],
        )
    if run["completeness"]:
        print("\ncompleteness")
        print_table(("check", "status"), [(c["check"], c["status"]) for c in run["completeness"]])
    if run["faults"]:
        print("\nfaults")
        for fault in run["faults"]:
            steps = " → ".join(s["stage"] for s in fault["steps"]) or "no step recorded"
            missing = fault["missingSteps"]
            print(
                f"  {fault['faultId']}: {fault['type']} on {fault['target']}: {steps}"
                + (f" (missing: {', '.join(missing)})" if missing else "")
            )
    if run["builds"]:
        print("\nbuilds")
        print_table(
            ("build", "plan", "recorded", "used"),
            [
                (b["buildId"], b["plan"], short_time(b["recordedAt"]), b["used"])
                for b in run["builds"]
            ],
        )
    return EXIT_OK


def _ran_with(manifest: Mapping[str, Any]) -> list[str]:
    """What the run's manifest says it ran with (provider, model, kernel, simreport), each only
    when the run recorded it."""
    shown = []
    for label, key in (("provider", "provider"), ("model", "model"), ("kernel", "kernelVersion")):
        if manifest.get(key) is not None:
            shown.append(f"{label} {manifest[key]}")
    fingerprint = manifest.get("kernelFingerprint")
    if fingerprint:
        if manifest.get("kernelVersion") is not None:
            shown[-1] += f" ({str(fingerprint)[:12]})"
        else:
            shown.append(f"kernel fingerprint {str(fingerprint)[:12]}")
    if manifest.get("simreportVersion") is not None:
        shown.append(f"simreport {manifest['simreportVersion']}")
    return shown


def _number(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cmd_history(args: argparse.Namespace) -> int:
    from ..ledger.queries import plan_history

    with open_ledger(args, must_exist=True) as engine:
        history = plan_history(engine, args.plan_id)
    if args.json:
        print_json(history)
        return EXIT_OK
    title = f" — {history['title']}" if history["title"] else ""
    print(f"plan {history['planId']}{title}")
    builds = history["builds"]
    if not builds:
        print("no builds recorded")
        return EXIT_OK
    print_table(
        ("recorded", "build", "grade", "plan hash", "audit sha256", "runs", "failed", "changed"),
        [
            (
                short_time(b["recordedAt"]),
                b["buildId"],
                b["grade"],
                b["planHash"][:12],
                b["auditSha256"][:12],
                b["runs"],
                b["failed"],
                ", ".join(
                    w
                    for w, flag in (("plan", b["planChanged"]), ("kernel", b["kernelChanged"]))
                    if flag
                )
                or "-",
            )
            for b in builds
        ],
    )
    print(f"{len(builds)} build{'s' if len(builds) != 1 else ''}")
    return EXIT_OK


def cmd_assets(args: argparse.Namespace) -> int:
    from ..ledger.queries import list_assets

    with open_ledger(args, must_exist=True) as engine:
        assets = list_assets(engine)
    if args.json:
        print_json(assets)
        return EXIT_OK
    if not assets:
        print("no asset versions recorded")
        return EXIT_OK
    print_table(
        ("asset", "type", "version", "status", "sha256", "owner", "runs"),
        [
            (
                a["name"],
                a["type"],
                a["version"],
                a["status"],
                a["sha256"][:16],
                a["owner"],
                a["runCount"],
            )
            for a in assets
        ],
    )
    return EXIT_OK
