"""`simreport new plan --world W [--axes A,B] [--out DIR] [--replications N] [--force]`: write
a commented scenario and audit plan that validate as written, then say what to run next."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.errors import EXIT_OK
from .arguments import positive_int


def cmd_new_plan(args: argparse.Namespace) -> int:
    from ..api import new_plan

    axes = None if args.axes is None else [a.strip() for a in args.axes.split(",") if a.strip()]
    written = new_plan(
        args.world,
        axes=axes,
        out=args.out,
        replications=args.replications,
        force=args.force,
    )
    assets = len(written.files) - 2
    print(f"wrote {written.scenario_file}")
    print(f"wrote {written.plan_file}")
    if assets:
        print(f"wrote {assets} asset files under {written.folder / 'assets'}")
    print(f"next: simreport validate {written.plan_file}")
    return EXIT_OK


def register_cli(sub: Any) -> None:
    """Add `simreport new plan` to the `simreport` parser's subcommands."""
    from ..harness.new_plan import DEFAULT_REPLICATIONS

    p = sub.add_parser("new", help="write a new document to start from")
    kinds = p.add_subparsers(dest="kind", required=True, parser_class=type(p))
    plan = kinds.add_parser(
        "plan",
        help="write a commented scenario.yaml and audit.yaml for a world, ready to validate",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    plan.add_argument(
        "--world", required=True, help="the world to simulate (`simreport worlds` lists them)"
    )
    plan.add_argument(
        "--axes",
        metavar="A,B,…",
        help="TRAILS templates to vary, by id or code, comma-separated (default: two chosen for "
        "the world; `simreport worlds WORLD` lists those that apply)",
    )
    plan.add_argument("--out", metavar="DIR", help="the folder to write into (default: ./WORLD)")
    plan.add_argument(
        "--replications",
        type=positive_int,
        default=DEFAULT_REPLICATIONS,
        metavar="N",
        help=f"runs per condition (default {DEFAULT_REPLICATIONS})",
    )
    plan.add_argument("--force", action="store_true", help="replace the files if they exist")
    plan.set_defaults(func=cmd_new_plan)
