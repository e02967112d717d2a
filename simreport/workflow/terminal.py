"""What a build shows on the terminal: a job's own lines at once (`say`), and Snakemake's
output kept to one line per job from the start of a build (`keep_terminal_short`)."""

from __future__ import annotations

import logging
import sys


def say(text: str) -> None:
    """One line (or block) on the terminal from a job, at once."""
    print(text, file=sys.stderr, flush=True)


_SHORT_HIDES = {"job_info", "job_finished", "progress", "job_started", "resources_info"}
"""Snakemake's per-job terminal events (rule blocks, timestamps, step counts) that the short
terminal leaves to the log file; errors, warnings and simreport's own lines stay."""
_SCHEDULER_CHATTER = ("Select jobs to execute...",)


class _ShortTerminal(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", None)
        if str(getattr(event, "value", event)) in _SHORT_HIDES:
            return False
        return record.getMessage() not in _SCHEDULER_CHATTER


def keep_terminal_short(logger: logging.Logger, *, verbose: bool) -> None:
    """From the start of a (non-dry) build, make Snakemake's terminal output one line per job
    (the condition jobs' run counts) plus the end-of-build summary, unless `verbose` (config
    `verbose: true`). Only terminal handlers are filtered: the log file under .snakemake/log
    keeps everything."""
    if verbose:
        return
    for handler in logger.handlers:
        stream = getattr(handler, "stream", None)
        if stream in (sys.stderr, sys.stdout) and not any(
            isinstance(f, _ShortTerminal) for f in handler.filters
        ):
            handler.addFilter(_ShortTerminal())
