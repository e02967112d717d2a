"""`simreport replay <runDir>`: re-run a recorded testbed run and compare its records (see
kernel/replay_runner.py). Exits 0 when the records match, 1 when not, 2 when nothing could be
compared."""

from __future__ import annotations

import argparse
from typing import Any

from ..core.files import check_output_dir


def cmd_replay(args: argparse.Namespace) -> int:
    from ..kernel.replay_runner import REPLAY_ERROR, replay_run

    if args.out is not None:
        check_output_dir(args.out, name="--out")
    report = replay_run(args.run_dir, args.out)
    print(report.summary())
    if report.error is not None:
        return REPLAY_ERROR
    return 0 if report.ok else 1


def register_cli(subparsers: Any) -> None:
    """Add `simreport replay <runDir> [--out DIR]` to the command line's subcommands."""
    p = subparsers.add_parser(
        "replay",
        help="re-run a testbed run from its recorded responses and faults; compare the records",
    )
    p.add_argument("run_dir", help="a refund_desk run directory (with records.jsonl)")
    p.add_argument("--out", help="where to write the replayed run (default: a temporary folder)")
    p.set_defaults(func=cmd_replay)
