"""The `simreport` command line: `main` parses the arguments, runs one command and returns its
exit code."""

from __future__ import annotations

from .main import build_parser, main

__all__ = ["build_parser", "main"]
