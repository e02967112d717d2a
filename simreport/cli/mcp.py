"""`simreport mcp [--results DIR]` (also `python -m simreport.mcp_server`): serve the audits under
a results root to MCP clients over stdio (see mcp_server.py). The MCP SDK is imported when the
server starts, not when the command line does."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..core.errors import SimreportError
from ..mcp_server import DEFAULT_RESULTS, serve_stdio


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        default=DEFAULT_RESULTS,
        metavar="DIR",
        help="the results root holding the audit directories (default: results)",
    )


def cmd_mcp(args: argparse.Namespace) -> int:
    return serve_stdio(args.results)


def register_cli(subparsers: Any) -> None:
    """Add `simreport mcp [--results DIR]` to the CLI's subcommands."""
    parser = subparsers.add_parser(
        "mcp", help="serve the audits to MCP clients over stdio (Model Context Protocol)"
    )
    _add_arguments(parser)
    parser.set_defaults(func=cmd_mcp)


def main(argv: Sequence[str] | None = None) -> int:
    """`simreport mcp` on its own, for `python -m simreport.mcp_server`."""
    parser = argparse.ArgumentParser(
        prog="simreport mcp", description="Serve simreport audits over MCP (stdio)."
    )
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return serve_stdio(args.results)
    except SimreportError as exc:
        print(f"simreport: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
