"""`simreport new plan --world W [--axes A,B] [--out DIR] [--replications N] [--force]`: write
a commented scenario and audit plan that validate as written, then say what to run next.
`simreport testbed new-domain NAME [--out DIR] [--force]`: write a folder that tests an example
agent in a new domain written as data, ready to run offline."""

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


def cmd_new_domain(args: argparse.Namespace) -> int:
    from ..harness.domain_scaffold import new_domain

    written = new_domain(args.name, out=args.out, force=args.force)
    print(f"wrote {len(written.files)} files under {written.folder}")
    print(f"wrote {written.scenario_file}")
    print(f"wrote {written.plan_file}")
    print(f"wrote {written.agent_file} (the example agent; run it to serve it over HTTP)")
    print(f"next: simreport run {written.scenario_file} --out {written.folder / 'runs' / 'first'}")
    return EXIT_OK


def register_testbed_cli(sub: Any) -> None:
    """Add `simreport testbed new-domain` to the `simreport` parser's subcommands."""
    p = sub.add_parser("testbed", help="start agent-testbed work: a new domain to test an agent in")
    kinds = p.add_subparsers(dest="kind", required=True, parser_class=type(p))
    domain = kinds.add_parser(
        "new-domain",
        help="write a domain, a user, an example agent (Python or HTTP), assertions, a scenario "
        "and an audit plan that run as written",
        description="Write a folder that tests an example agent in a new domain written as "
        "data: it validates and runs offline as written; edit it into your own domain and point "
        "the agent asset at your agent's HTTP endpoint (docs/howto/new-domain.md).",
    )
    domain.add_argument(
        "name",
        metavar="NAME",
        help="the domain's name: lower case, words joined by - or _ (e.g. parcel-desk)",
    )
    domain.add_argument("--out", metavar="DIR", help="the folder to write into (default: ./NAME)")
    domain.add_argument("--force", action="store_true", help="replace the files if they exist")
    domain.set_defaults(func=cmd_new_domain)
