"""`simreport review …`: import scenario files and their asset libraries into the ledger, move
versions through review, list them and show their history. The reviewer (`--reviewer`) is the
operator's user; `--policy FILE` is the operator's policy file, whose `review:` section says
whether a version's author may approve and publish it (by default not).

Thin, like `simreport ledger …` (whose ledger options it shares): it parses arguments, calls
ledger/review/ and prints tables (or JSON with --json). The database libraries are imported when
a review command runs, not when the CLI starts.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..core.errors import EXIT_OK
from ..core.versions import REVIEW_STATUSES
from .arguments import version_ref
from .ledger import command_group, ledger_url_from, open_ledger
from .output import print_json, print_table, short_time

KINDS = ("scenario", "asset")
ACTION_HELP = {
    "submit": "send a draft version to review (draft → reviewing)",
    "approve": "approve a version under review (reviewing → reviewed)",
    "publish": "put a reviewed version online (reviewed → online; a high-risk scenario needs "
    "the reviewer's --risk-signoff)",
    "retire": "take an online version offline (online → offline)",
}
"""The review actions as the command line offers them (review.ACTIONS decides what they do)."""


def register_cli(sub: Any) -> None:
    """Add the `review` command group to the `simreport` parser's subcommands."""
    command = command_group(
        sub,
        "review",
        help_="the scenario library's review: import versions, move them through review, list them",
        description="Review scenario and asset versions in the ledger: draft → reviewing → "
        "reviewed → online → offline, every step kept with its reviewer.",
    )

    p = command("list", "list scenario and asset versions with their review status", cmd_list)
    p.add_argument("--kind", choices=KINDS, help="only scenarios or only assets")
    p.add_argument("--status", choices=REVIEW_STATUSES, help="only versions in this status")
    p.add_argument("--name", metavar="NAME", help="only this scenario id or asset name")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command(
        "import",
        "register scenario files and their asset libraries, every new version as a draft",
        cmd_import,
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="an agent-testbed scenario file")
    p.add_argument(
        "--reviewer",
        default="import",
        metavar="NAME",
        help="who imports (recorded with each new version as its author; default: import)",
    )

    for action, help_ in ACTION_HELP.items():
        p = command(action, help_, cmd_transition)
        _version_arguments(p)
        p.add_argument(
            "--reviewer",
            required=True,
            metavar="NAME",
            help="who takes this step (by default not the version's author for approve and "
            "publish)",
        )
        p.add_argument("--note", metavar="TEXT", help="why, recorded with the step")
        if action == "publish":
            p.add_argument(
                "--risk-signoff",
                metavar="SHA256",
                help="the reviewer signs off the risk of the version with this sha256 (as "
                "`review list` shows it, 12 hex digits or more); required for a high-risk "
                "scenario",
            )
        p.add_argument(
            "--policy",
            metavar="FILE",
            help="the operator's policy file (as `simreport api --policy`): its `review:` "
            "section may let authors approve and publish their own versions (default: never)",
        )
        p.set_defaults(action=action)

    p = command("history", "show every review step of one version", cmd_history)
    _version_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON")


def _version_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", choices=KINDS, metavar="KIND", help="scenario or asset")
    p.add_argument(
        "ref",
        metavar="NAME@VERSION",
        help="a scenario id or an asset name (TYPE:NAME where two asset types share it), "
        "and the version",
    )


def _split_ref(ref: str) -> tuple[str, str]:
    return version_ref(
        ref, path="NAME@VERSION", example="refund-timeout-retry@1.3.0 or refund-prompt@1.0.0"
    )


# --------------------------------------------------------------------------- commands


def cmd_list(args: argparse.Namespace) -> int:
    from ..ledger.review import list_versions

    with open_ledger(args, must_exist=True) as engine:
        versions = list_versions(engine, kind=args.kind, status=args.status, name=args.name)
    if args.json:
        print_json(versions)
        return EXIT_OK
    if not versions:
        print("no versions match")
        return EXIT_OK
    print_table(
        ("kind", "type", "name", "version", "status", "risk", "sha256", "last step"),
        [
            (
                v["kind"],
                v["type"],
                v["name"],
                v["version"],
                v["status"],
                v["riskLevel"],
                v["sha256"][:12],
                _last_step(v["lastTransition"]),
            )
            for v in versions
        ],
    )
    print(f"{len(versions)} version{'s' if len(versions) != 1 else ''}")
    return EXIT_OK


def _last_step(step: dict[str, Any] | None) -> str:
    if step is None:
        return "-"
    return f"{step['to']} by {step['reviewer']}, {short_time(step['at'])}"


def cmd_import(args: argparse.Namespace) -> int:
    from ..kernel import load_scenario
    from ..ledger.db import describe
    from ..ledger.review import import_scenario

    # The ledger never imports the kernel: the command hands it the kernel's scenario loader.
    with open_ledger(args, must_exist=False) as engine:
        done = [
            import_scenario(engine, path, load=load_scenario, reviewer=args.reviewer)
            for path in args.paths
        ]
    for imported in done:
        print(f"{imported.path}: {imported.recorded} of {len(imported.versions)} versions new")
        print_table(
            ("kind", "type", "name", "version", "status", "sha256", "ledger"),
            [
                (
                    v.kind,
                    v.asset_type,
                    v.name,
                    v.version,
                    v.status,
                    v.sha256[:12],
                    "recorded" if v.outcome == "recorded" else "already recorded",
                )
                for v in imported.versions
            ],
        )
    print(f"ledger: {describe(ledger_url_from(args))}")
    return EXIT_OK


def cmd_transition(args: argparse.Namespace) -> int:
    from ..core.execution_policy import load_policy
    from ..ledger.review import transition

    name, version = _split_ref(args.ref)
    policy = load_policy(args.policy).review if args.policy else None
    with open_ledger(args, must_exist=True) as engine:
        step = transition(
            engine,
            args.kind,
            name,
            version,
            args.action,
            reviewer=args.reviewer,
            note=args.note,
            risk_signoff=getattr(args, "risk_signoff", None),
            policy=policy,
        )
    signoff = step.risk_signoff
    signed = (
        f", risk signed off by {signoff.by} for sha256 {signoff.sha256}"
        if signoff is not None
        else ""
    )
    print(
        f"{step.kind} {step.name}@{step.version}: {step.from_status} → {step.to_status} "
        f"by {step.reviewer}{signed}"
    )
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from ..ledger.review import history

    name, version = _split_ref(args.ref)
    with open_ledger(args, must_exist=True) as engine:
        found = history(engine, args.kind, name, version)
    if args.json:
        print_json(found)
        return EXIT_OK
    risk = f", {found['riskLevel']} risk" if found["riskLevel"] else ""
    print(f"{found['kind']} {found['name']}@{found['version']}: {found['status']}{risk}")
    print(f"sha256 {found['sha256']}, written by {', '.join(found['authors']) or '-'}")
    if not found["transitions"]:
        print("no review steps recorded")
        return EXIT_OK
    print_table(
        ("at", "from", "to", "reviewer", "risk sign-off", "note"),
        [
            (
                short_time(s["at"]),
                s["from"],
                s["to"],
                s["reviewer"],
                s["riskSignoff"] and s["riskSignoff"]["by"],
                s["note"],
            )
            for s in found["transitions"]
        ],
    )
    return EXIT_OK
