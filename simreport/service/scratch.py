"""Scratch folders for the run directories a worker's runs write: in memory where there is
room (a run directory is scratch: the ledger holds the run once recorded, and the folder is
deleted then), named after the worker's process, so that the next worker to start removes those
a killed worker left behind (`sweep_scratch`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Final

SCRATCH_IN_MEMORY: Final = Path("/dev/shm")
"""Where run directories are written when it is there with room: a run directory is scratch
(the ledger holds the run once recorded, and it is deleted then), so it need not reach a disk,
and the run's atomic writes need not wait for one."""
SCRATCH_ROOM: Final = 1 << 30
"""The free space (bytes) the in-memory folder must have to be used."""


def _scratch() -> str | None:
    """The folder run directories are made in: in memory where possible, else the temporary
    files' folder."""
    try:
        found = os.statvfs(SCRATCH_IN_MEMORY)
    except OSError:
        return None
    roomy = found.f_bavail * found.f_frsize >= SCRATCH_ROOM
    return str(SCRATCH_IN_MEMORY) if roomy and os.access(SCRATCH_IN_MEMORY, os.W_OK) else None


SCRATCH_PREFIX: Final = "simreport-run-"


def _scratch_prefix() -> str:
    """Run directories carry their worker's process id, so that one killed before it could
    remove them is found and removed by the next worker (`sweep_scratch`)."""
    return f"{SCRATCH_PREFIX}{os.getpid()}-"


def sweep_scratch() -> int:
    """Remove the run directories that workers no longer running left behind (killed outright:
    they could not clean up), in both places run directories are made. Returns how many."""

    removed = 0
    for folder in {_scratch(), tempfile.gettempdir()}:
        if folder is None:
            continue
        with contextlib.suppress(OSError):
            for entry in os.scandir(folder):
                owner = re.fullmatch(re.escape(SCRATCH_PREFIX) + r"(\d+)-\w+", entry.name)
                if owner is None or not entry.is_dir(follow_symlinks=False):
                    continue
                if _alive(int(owner.group(1))):
                    continue
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    return True


def new_run_folder() -> Path:
    """A new scratch folder of this process, for one run."""
    return Path(tempfile.mkdtemp(prefix=_scratch_prefix(), dir=_scratch()))
