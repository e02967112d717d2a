"""The `simreport` command line. Thin: parses arguments, calls the API, prints, sets exit codes.

Exit codes: 0 success (failed runs inside an audit are data, not errors); 1 internal error;
2 invalid input or usage (nothing was run), or the environment refused a file operation (disk
full, read-only or forbidden folder, a file where a folder should be: the line names the path);
3 `run`: the run failed, `doctor`: a check failed; 4 the results were written but the ledger
did not record all of them (one line each says which); 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..core.errors import (
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT_CLOSED,
    EnvironmentProblem,
    SimreportError,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_INPUT)


COMMAND_GROUPS: tuple[tuple[str, str], ...] = (
    (
        "audit:register_cli",
        "validate schema run conditions power audit analyse evaluate report site diff serve",
    ),
    ("new:register_cli", "new"),
    ("new:register_testbed_cli", "testbed"),
    ("doctor:register_cli", "doctor cache"),
    ("replay:register_cli", "replay"),
    ("ledger:register_cli", "ledger"),
    ("review:register_cli", "review"),
    ("mcp:register_cli", "mcp"),
    ("service:register_api", "api"),
    ("service:register_worker", "worker"),
    ("remote:register_cli", "remote"),
    ("audit:register_worlds", "worlds"),
)
"""Each group of commands: its registering function (module:function in simreport.cli) and the
commands it registers, in the order of `simreport --help`. A test holds each row to what its
function registers."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Given the arguments, and when they name a command, only that
    command's group is registered: a command's start does not import the modules of all the
    others (the service's `api` and `worker` start often). Otherwise every group is, so that
    `--help` and an unknown command list them all."""
    parser = _Parser(prog="simreport", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"simreport {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    command = _command_named(argv)
    for function, commands in COMMAND_GROUPS:
        if command is None or command in commands.split():
            register_group(function, sub)
    return parser


def _command_named(argv: Sequence[str] | None) -> str | None:
    """The command `argv` names, if it names one a group registers (the first argument that is
    not an option: the top-level options take no value); None when help is asked for before it."""
    for arg in argv or ():
        if arg in ("-h", "--help"):
            return None
        if not arg.startswith("-"):
            known = any(arg in commands.split() for _, commands in COMMAND_GROUPS)
            return arg if known else None
    return None


def register_group(function: str, sub: Any) -> None:
    """Register the commands of the group whose registering function is `function` (a row of
    `COMMAND_GROUPS`) on the subparsers `sub`."""
    # Imported here, not above: `import simreport.cli` stays cheap (the service and the remote
    # client read their argument types through it), and a command imports its own group only.
    module, name = function.split(":")
    getattr(importlib.import_module(f"{__package__}.{module}"), name)(sub)


def _stop_on_signals() -> None:
    """SIGTERM stops a command like Ctrl-C: runs end as interrupted runs, nothing is analysed, the
    exit code is 130. A second signal kills the run processes and exits at once."""
    from ..kernel.interrupt import stop_on_signals

    stop_on_signals()


def main(argv: Sequence[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(arguments)
    args = parser.parse_args(arguments)
    _stop_on_signals()
    try:
        code: int = args.func(args)
        return code
    except SimreportError as exc:
        _complain(exc.one_line())
        return exc.exit_code
    except KeyboardInterrupt:
        _complain("interrupted")
        return EXIT_INTERRUPTED
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) and _output_closed():
            # `simreport … | head`: what was asked for was read; stop quietly, as a pipe's
            # writer does.
            return EXIT_OUTPUT_CLOSED
        # The user's machine, not a bug: a full disk, a read-only or forbidden folder.
        near = getattr(args, "out", None) or getattr(args, "audit_dir", None)
        problem = EnvironmentProblem.from_os_error(exc, near=near)
        if problem is None:
            return _internal_error(args, exc)
        _complain(problem.one_line())
        return problem.exit_code
    except Exception as exc:  # the command's boundary: anything else is reported, never lost
        failed = _ledger_failed(exc)
        if failed is None or args.debug:
            return _internal_error(args, exc)
        _complain(failed)
        return EXIT_INPUT


def _output_closed() -> bool:
    """Whether standard output is a pipe whose reader has gone (not some other pipe of the
    command's: the pipe's end reports an error when polled); if so, what is left to print goes
    nowhere, so that exiting prints no error."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):  # no poll here, or no stdout file
        return False
    poller.register(fd, select.POLLOUT)
    if not any(events & select.POLLERR for _, events in poller.poll(0)):
        return False
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return True


def _ledger_failed(exc: Exception) -> str | None:
    """What to say when the ledger's database failed under a command (a connection lost, a
    server shutting down, a disk error): the user's environment, not a bug. None for anything
    else. SQLAlchemy is looked up, not imported: a command that never opened a ledger has not
    loaded it."""
    errors = sys.modules.get("sqlalchemy.exc")
    if errors is None or not isinstance(exc, errors.OperationalError):
        return None
    from ..ledger.db import database_message

    return f"the ledger's database failed: {database_message(exc)}"


def _internal_error(args: argparse.Namespace, exc: Exception) -> int:
    if args.debug:
        raise exc
    _complain(f"internal error: {type(exc).__name__}: {exc}")
    return EXIT_INTERNAL


def _complain(message: str) -> None:
    """One line on stderr: credentials in URLs redacted, control characters made visible (a
    message may quote a plan's or a server's text)."""
    from ..core.files import visible_control_characters
    from ..core.redaction import redact_text

    print(f"simreport: {visible_control_characters(redact_text(message))}", file=sys.stderr)
