"""What a build checks around Snakemake's own start: the config against its schema
(`check_config`), a config or plan error as one located line and a non-zero exit
(`stop_on_input_error`), and a lock an earlier build left explained with what to do
(`explain_locks`, with the note `note_build_started` keeps of the build that holds the lock),
and Snakemake's params comparison kept from importing pandas (`compare_params_without_pandas`)."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ..core.errors import SchemaError, SimreportError
from ..core.files import load_document, write_atomic
from .targets import config_schema_issues, retype_command_line

COMMAND_LINE = "--config"
"""How errors name a config value the command line gave."""

BUILD_NOTE = Path(".snakemake") / "simreport-build.json"
"""The running build's process id, host and start time, beside Snakemake's locks: kept while a
build runs, left behind by a build that was killed."""

LOCK_DIR = Path(".snakemake") / "locks"


def check_config(
    config: MutableMapping[str, Any],
    *,
    config_file: str | Path,
    command_line: Mapping[str, Any] | None = None,
    root: str | Path = ".",
) -> None:
    """The config as Snakemake merged it (the file, then `--config`), its command-line values
    retyped (`retype_command_line`) and checked against the workflow's schema. Raises
    SchemaError naming the config file and line, or `--config` for a key the command line gave."""
    retype_command_line(config, command_line)
    issues = config_schema_issues(config, root)
    if not issues:
        return
    top = issues[0].path.split(".", 1)[0]
    if command_line and top in command_line:
        raise SchemaError(issues, file=COMMAND_LINE)
    line = None
    with suppress(SimreportError):
        line = load_document(config_file).line_of(issues[0].path)
    raise SchemaError(issues, file=config_file, line=line)


def compare_params_without_pandas() -> None:
    """Make Snakemake compare a job's recorded params with its current ones without pandas.

    When pandas is installed (statsmodels brings it), Snakemake imports it to serialise params
    at every start that has outputs to check: a third of a second of a no-op build. No rule of
    this workflow has a pandas object among its params (they are text, numbers and lists of
    text), and for anything else Snakemake's pandas serialiser hands over to its builtin one, so
    the comparison and what is recorded stay the same. Nothing changes if Snakemake no longer
    has both serialisers under these names."""
    try:
        from snakemake.persistence import PersistenceBase as Persistence
    except ImportError:
        return
    if not all(
        hasattr(Persistence, name)
        for name in ("_serialize_param", "_serialize_param_builtin", "_serialize_param_pandas")
    ):
        return
    Persistence._serialize_param = property(_builtin_serialiser)


def _builtin_serialiser(persistence: Any) -> Any:
    return persistence._serialize_param_builtin


@contextmanager
def stop_on_input_error() -> Iterator[None]:
    """Around parse-time code in the Snakefile and rules: a SimreportError ends the process with
    its one located line on stderr and its exit code (2 for bad input), instead of Snakemake's
    traceback through the rule files."""
    try:
        yield
    except SimreportError as exc:
        print(f"simreport: {exc.one_line()}", file=sys.stderr, flush=True)
        raise SystemExit(exc.exit_code) from None


# --------------------------------------------------------------------------- locks


def note_build_started(now: float | None = None) -> None:
    """Keep which process runs this build (the Snakefile's onstart, after Snakemake took its
    locks), so the next build can tell a live build from a killed one."""
    note = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time() if now is None else now,
    }
    write_atomic(BUILD_NOTE, json.dumps(note, sort_keys=True) + "\n", durable=False)


def note_build_ended() -> None:
    """The build ended and Snakemake removes its locks: the note goes too."""
    with suppress(FileNotFoundError):
        BUILD_NOTE.unlink()


def lock_holder(note_file: Path = BUILD_NOTE) -> dict[str, Any]:
    """Who holds the lock, from the note of the build that took it: `state` is `running` (its
    process is alive on this host), `killed` (its process is gone), `elsewhere` (another host:
    unknown) or `unknown` (no note: a build that kept none, or a dry run), with `pid`, `host`
    and `started` where known."""
    try:
        note = json.loads(note_file.read_text(encoding="utf-8"))
        pid = int(note["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return {"state": "unknown"}
    holder = {"pid": pid, "host": str(note.get("host")), "started": note.get("started")}
    if holder["host"] != socket.gethostname():
        return {**holder, "state": "elsewhere"}
    return {**holder, "state": "running" if _alive(pid) else "killed"}


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # a note of this very process was left by an earlier one with its id
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    with suppress(OSError):
        # A process killed but not yet reaped by its parent is no build any more.
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def lock_explanation(holder: Mapping[str, Any]) -> str:
    """What the next build says when Snakemake finds this folder locked."""
    state = holder["state"]
    who = f"the build of process {holder.get('pid')}"
    started = holder.get("started")
    if isinstance(started, (int, float)):
        who += time.strftime(" (started %Y-%m-%d %H:%M:%S)", time.localtime(started))
    unlock = "run `snakemake --unlock`, then build again"
    if state == "running":
        return (
            f"simreport: this folder is locked by {who}, which is still running: wait for it "
            f"to end or stop it (kill {holder['pid']}), then build again; do not unlock while "
            "it runs"
        )
    if state == "killed":
        return (
            f"simreport: this folder is locked by {who}, which is no longer running: it was "
            f"stopped before it could remove its lock (.snakemake/locks); {unlock}"
        )
    where = f" on host {holder['host']}" if state == "elsewhere" else ""
    return (
        f"simreport: this folder is locked (.snakemake/locks) by another build{where}; if no "
        f"other Snakemake runs in this folder (check with `ps -ef | grep snakemake`), the lock "
        f"was left by a build that was stopped: {unlock}"
    )


class _ExplainLock(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "exception", None) == "LockException" or (
            "Directory cannot be locked" in str(record.msg)
        ):
            record.msg, record.args = lock_explanation(lock_holder()), ()
        return True


def explain_locks(logger: logging.Logger) -> None:
    """Let Snakemake's "Directory cannot be locked" say whether the build holding the lock is
    alive and what to run (`snakemake --unlock` only when it is not)."""
    if not any(isinstance(f, _ExplainLock) for f in logger.filters):
        logger.addFilter(_ExplainLock())
