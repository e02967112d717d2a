"""A worker's spool: the runs it executed that the ledger could not take yet, kept on local disk
(`<spool>/<ledger>/<run id>.<attempt>`) until it does. An entry is written whole or not at all;
a live worker holds a lock on each of its entries, and a worker that finds one nobody holds takes
it over (`Spool.adopt`), so no entry is recorded twice. Workers of other ledgers leave each
other's entries alone. The design: docs/service.md.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ENTRY_FILE: Final = "entry.json"
RUN_FOLDER: Final = "run"
NEW_PREFIX: Final = ".new-"
STALE_NEW_SECONDS: Final = 60.0
"""How old a half-made entry (a temporary folder nobody holds) must be to be removed: its maker
locks it as it makes it, so one older than this was left by a worker that died making it."""


def default_spool() -> Path:
    """Where workers keep their spool unless told: `$XDG_STATE_HOME/simreport/spool` (by
    default `~/.local/state/simreport/spool`): local disk that outlives the worker, shared by
    the workers of one user on one host, so a restarted worker finds what a dead one left."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "simreport" / "spool"


def ledger_name(url: str) -> str:
    """The ledger at `url` as its spool knows it: the URL without its credentials, a SQLite
    file by its absolute path (workers started in other folders may name it relatively)."""
    from ..ledger.db import describe, sqlite_path

    path = sqlite_path(url)
    return describe(url) if path is None else f"sqlite:///{path.resolve().as_posix()}"


@dataclass(frozen=True)
class Ending:
    """How a run that ended is to be recorded: `finish` (from its run directory, with `reason`
    replacing the terminal reason its files give when set) or `fail` (ended `execution`, its
    terminal reason `reason`, with what it streamed)."""

    kind: str
    execution: str
    reason: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {"kind": self.kind, "execution": self.execution, "reason": self.reason}


@dataclass(eq=False)
class Entry:
    """One run kept: where (`folder`, holding the run directory `run/`), how to record it, and
    the lock that says a live worker holds it (None: in memory only, see `Spool.keep`)."""

    run_id: str
    attempt: int
    owner: str
    """The worker id that holds the run's lease."""
    ending: Ending
    events: list[dict[str, Any]]
    """The events not streamed yet (a run directory that ended whole holds all of them)."""
    folder: Path
    on_disk: bool
    lock: int | None = field(default=None, repr=False)

    @property
    def run_dir(self) -> Path:
        return self.folder / RUN_FOLDER


class Spool:
    """The spool of one ledger's workers under `root` (see docs/service.md)."""

    def __init__(self, root: Path, ledger: str) -> None:
        """`ledger`: the ledger's `ledger_name`."""
        self.root = root
        self.ledger = ledger
        self.folder = root / hashlib.sha256(ledger.encode("utf-8")).hexdigest()[:16]

    def keep(
        self,
        *,
        run_id: str,
        attempt: int,
        owner: str,
        ending: Ending,
        events: list[dict[str, Any]],
        work: Path,
    ) -> Entry:
        """Keep the run whose run directory is `work`/run. Copied into the spool (then `work`
        may go; a run that failed is recorded from `events` alone, without its directory);
        when the spool cannot be written (its disk full, not writable), the entry stays in
        `work`, in memory only: the caller must not remove `work` (`on_disk` False), and a
        worker that dies then loses it."""
        doc = {
            "run_id": run_id,
            "attempt": attempt,
            "owner": owner,
            "ledger": self.ledger,
            "ending": ending.to_doc(),
            "events": events,
        }
        try:
            folder, lock = self._write(doc, work)
        except (OSError, ValueError, TypeError):  # ValueError, TypeError: not JSON
            return Entry(run_id, attempt, owner, ending, list(events), work, on_disk=False)
        return Entry(run_id, attempt, owner, ending, list(events), folder, True, lock)

    def _write(self, doc: dict[str, Any], work: Path) -> tuple[Path, int]:
        """The entry `doc` with the run directory in `work` written into the spool: its
        folder, and the descriptor holding its lock."""
        from ..core.files import write_atomic

        self.folder.mkdir(parents=True, exist_ok=True)
        new = self.folder / f"{NEW_PREFIX}{uuid.uuid4().hex}"
        new.mkdir()
        lock = _lock(new)  # nobody else knows the folder yet: only a lack of descriptors fails
        if lock is None:
            shutil.rmtree(new, ignore_errors=True)
            raise OSError(errno.EMFILE, "cannot lock a new spool entry", str(new))
        try:
            if doc["ending"]["kind"] == "finish":
                shutil.copytree(work / RUN_FOLDER, new / RUN_FOLDER, symlinks=True)
            write_atomic(new / ENTRY_FILE, json.dumps(doc, ensure_ascii=False, allow_nan=False))
            name = f"{doc['run_id']}.{doc['attempt']}"
            folder = self.folder / name
            try:
                os.rename(new, folder)
            except OSError as exc:  # an entry of that name is there already (left behind)
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                folder = self.folder / f"{name}.{uuid.uuid4().hex[:8]}"
                os.rename(new, folder)
        except BaseException:  # whatever stopped it: nothing half-made stays, and it is raised
            shutil.rmtree(new, ignore_errors=True)
            os.close(lock)
            raise
        return folder, lock

    def adopt(self) -> tuple[list[Entry], list[str]]:
        """Take over the entries no live worker holds; also remove half-made ones left by a
        worker that died making them. Returns the entries, and a line for each one found that
        cannot be read (left where it is)."""
        found: list[Entry] = []
        unreadable: list[str] = []
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return found, unreadable
        for name in names:
            folder = self.folder / name
            if name.startswith(NEW_PREFIX):
                _remove_stale(folder)
                continue
            lock = _lock(folder)
            if lock is None:
                continue  # a live worker holds it
            try:
                doc = json.loads((folder / ENTRY_FILE).read_text(encoding="utf-8"))
                ending = doc["ending"]
                entry = Entry(
                    run_id=str(doc["run_id"]),
                    attempt=int(doc["attempt"]),
                    owner=str(doc["owner"]),
                    ending=Ending(
                        str(ending["kind"]),
                        str(ending["execution"]),
                        None if ending["reason"] is None else str(ending["reason"]),
                    ),
                    events=list(doc["events"]),
                    folder=folder,
                    on_disk=True,
                    lock=lock,
                )
            except FileNotFoundError:  # recorded and removed as we looked
                os.close(lock)
                continue
            except (OSError, ValueError, KeyError, TypeError) as exc:
                os.close(lock)
                unreadable.append(f"{folder}: {type(exc).__name__}: {exc}")
                continue
            if entry.ending.kind not in ("finish", "fail"):
                os.close(lock)
                unreadable.append(f"{folder}: unknown ending {entry.ending.kind!r}")
                continue
            found.append(entry)
        return found, unreadable

    @staticmethod
    def remove(entry: Entry) -> None:
        """The entry was recorded (or its lease is lost): delete it (one kept in memory: the
        run's scratch folder). Its description goes first, so a worker looking meanwhile never
        takes a half-deleted entry for one."""
        if entry.on_disk:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.folder / ENTRY_FILE)
        shutil.rmtree(entry.folder, ignore_errors=True)
        Spool.release(entry)

    @staticmethod
    def release(entry: Entry) -> None:
        """Let the entry go, left in the spool for another worker to take over."""
        if entry.lock is not None:
            os.close(entry.lock)
            entry.lock = None


def _lock(folder: Path) -> int | None:
    """A descriptor of `folder` holding its lock, or None when a live process holds it."""
    import fcntl  # not on Windows; workers run on POSIX hosts

    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _remove_stale(folder: Path) -> None:
    lock = _lock(folder)
    if lock is None:
        return
    try:
        if time.time() - folder.stat().st_mtime > STALE_NEW_SECONDS:
            shutil.rmtree(folder, ignore_errors=True)
    except OSError:
        pass
    finally:
        os.close(lock)


__all__ = ["Ending", "Entry", "Spool", "default_spool", "ledger_name"]
