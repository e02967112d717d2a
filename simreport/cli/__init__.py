"""The `simreport` command line: `main` parses the arguments, runs one command and returns its
exit code. Each group of commands is a module here (audit, ledger, review, replay, doctor, mcp);
they call the package's public functions and print through output.py."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
