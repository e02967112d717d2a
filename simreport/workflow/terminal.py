"""What a build shows on the terminal: a job's own lines at once (`say`), Snakemake's
output kept to one line per job from the start of a build (`keep_terminal_short`), and the
build's last line naming the site and how to view it (`announce_site`)."""

from __future__ import annotations

import atexit
import logging
import shlex
import sys
from pathlib import Path


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


def site_line(site_dir: str | Path) -> str:
    """The line that ends a successful build: where the site's index is and the command that
    serves it."""
    index = Path(site_dir) / "index.html"
    return (
        f"simreport: the site is ready: {index}; to view it, run: simreport serve "
        f"{shlex.quote(str(site_dir))}"
    )


def announce_site(site_dir: str | Path) -> None:
    """Print `site_line` as the build's very last line: when the process exits, after
    Snakemake's own closing lines (its log's path, the elapsed time). Once per process."""
    global _announced
    if not _announced:
        _announced = True
        atexit.register(say, site_line(site_dir))


_announced = False
_UP_TO_DATE = "Nothing to be done"
"""How Snakemake starts the message of a build with nothing to do (it calls no onsuccess then)."""


class _AnnounceWhenUpToDate(logging.Filter):
    def __init__(self, site_dir: str | Path) -> None:
        super().__init__()
        self.site_dir = site_dir

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(_UP_TO_DATE):
            announce_site(self.site_dir)
        return True


def announce_site_when_up_to_date(logger: logging.Logger, site_dir: str | Path) -> None:
    """A build with nothing to do ends with `site_line` too."""
    if not any(isinstance(f, _AnnounceWhenUpToDate) for f in logger.filters):
        logger.addFilter(_AnnounceWhenUpToDate(site_dir))
