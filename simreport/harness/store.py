"""A content-addressed store of finished runs, keyed by what determines a run's result, so a batch
executed again copies its finished runs back instead of recomputing them.

Only final runs are kept; every fetch checks each file's sha256 and discards a damaged entry,
and files go in and out as copies, never hard links. The key and the design: docs/harness.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from ..core.canonical import content_hash, pretty_json
from ..core.errors import SimreportError
from ..core.schema import RunResult

RUN_FILES = (
    "scenario.json",
    "manifest.json",
    "events.jsonl",
    # the agent testbed's evidence layers
    "records.jsonl",
    "observations.json",
    "evidence.json",
    "completeness.json",
    # the user simulator's quality control, which the analysis reads
    "user-quality.json",
    # Never written by a run (`simreport evaluate` writes it later): listed so that a run fetched
    # into a folder removes an evaluation left there from another run.
    "evaluation.json",
    # result.json last: a run is finished when it is there
    "result.json",
)

DIGEST = "digest.json"
"""An entry's record of what it holds: its key and the sha256 of each run file."""

RUN_KEY_VERSION = 2
"""The scheme of `run_key`, part of every key. Raised whenever what a key stands for changes, so
that entries stored under the old scheme are never handed out for runs that now differ; they are
simply never found again. 2: a run reads its scenario with sorted keys and without its name,
description and hypothesis (a run of scheme 1 depended on key order that its key ignored)."""

_FICLONE = 0x40049409  # Linux ioctl: share the source's extents (btrfs, XFS); copy-on-write
_CHUNK = 1 << 20


def run_key(
    scenario: dict[str, Any],
    *,
    condition: str,
    replication: int,
    provider: str | None,
    fingerprint: str,
    inputs: dict[str, str] | None = None,
) -> str:
    """The store key of one replication. `scenario` is the document the run reads
    (`run_document`); `inputs` are the sha256 of the files the run reads besides its scenario (a
    simulator's script, an asset library)."""
    return content_hash(
        {
            "keyVersion": RUN_KEY_VERSION,
            "scenario": scenario,
            "condition": condition,
            "replication": replication,
            "provider": provider,
            "kernel": fingerprint,
            "inputs": inputs or {},
        }
    )


class _Damaged(SimreportError):
    """A store entry whose files are not the ones it recorded."""


def _reflink(source: io.BufferedIOBase, target: io.BufferedIOBase) -> bool:
    try:
        import fcntl  # not on Windows

        fcntl.ioctl(target.fileno(), _FICLONE, source.fileno())
    except (ImportError, OSError):
        return False
    return True


def _copy_hashed(source: io.BufferedIOBase, target: io.BufferedIOBase) -> str:
    """Copy `source` into the empty, readable `target` and return the sha256 of what `target`
    now holds: a reflink is hashed after it is made, a plain copy as it is written."""
    if _reflink(source, target):
        target.seek(0)
        return hashlib.file_digest(target, "sha256").hexdigest()
    digest = hashlib.sha256()
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
        target.write(chunk)
    return digest.hexdigest()


def _open_entry_file(path: Path) -> io.BufferedReader:
    try:
        return open(path, "rb")
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        raise _Damaged(path.name) from None


def _recorded(entry: Path, key: str) -> dict[str, str] | None:
    """The sha256 of each file `entry` recorded (result.json last), or None when its record is
    missing, unreadable, for another key, or does not list exactly the run files present."""
    try:
        present = set(os.listdir(entry))
        doc = json.loads((entry / DIGEST).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    files = doc.get("files")
    if not isinstance(files, dict) or "result.json" not in files:
        return None
    if set(files) != present.intersection(RUN_FILES) or not all(
        isinstance(h, str) and len(h) == 64 for h in files.values()
    ):
        return None
    return {name: files[name] for name in RUN_FILES if name in files}


def _intact(entry: Path, key: str) -> bool:
    files = _recorded(entry, key)
    if files is None:
        return False
    try:
        for name, expected in files.items():
            with _open_entry_file(entry / name) as handle:
                if hashlib.file_digest(handle, "sha256").hexdigest() != expected:
                    return False
    except (_Damaged, OSError):
        return False
    return True


def _discard(entry: Path) -> None:
    """Remove an entry: first renamed aside in one step, so concurrent readers see it whole or
    gone, then deleted. Another process that discarded it first is no error."""
    aside = entry.with_name(f".{entry.name[:8]}.{uuid.uuid4().hex}.discarded")
    try:
        os.rename(entry, aside)
    except OSError:
        return  # gone already (or never there)
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


class RunStore:
    """Finished runs under `root/<key[:2]>/<key>/`, each with its digest.json."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def fetch(self, key: str, target: Path) -> RunResult | None:
        """Copy a stored run into `target` and return its result; None when the run is not
        stored or its entry fails verification (the entry is then discarded).

        Every file is copied under a temporary name and checked before any is put in place, and
        result.json goes last, so `target` never holds a mix of runs marked finished."""
        entry = self._path(key)
        files = _recorded(entry, key)
        if files is None:
            _discard(entry)
            return None
        target.mkdir(parents=True, exist_ok=True)
        staged: dict[str, Path] = {}
        try:
            for name, expected in files.items():
                with _open_entry_file(entry / name) as source:
                    fd, temporary = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=target)
                    staged[name] = Path(temporary)
                    with os.fdopen(fd, "w+b") as copy:
                        # An ordinary result file, writable: it shares nothing with the store.
                        os.fchmod(copy.fileno(), 0o644)
                        if _copy_hashed(source, copy) != expected:
                            raise _Damaged(name)
            result = RunResult.model_validate_json(staged["result.json"].read_bytes())
            if not result.final:
                raise _Damaged("result.json")
            (target / "result.json").unlink(missing_ok=True)
            for name in RUN_FILES[:-1]:
                if name in staged:
                    os.replace(staged[name], target / name)
                    del staged[name]
                else:  # left by an earlier run in `target`; not part of this one
                    (target / name).unlink(missing_ok=True)
            os.replace(staged["result.json"], target / "result.json")
            del staged["result.json"]
            return result
        except (_Damaged, ValueError):  # pydantic's ValidationError is a ValueError
            _discard(entry)
            return None
        except OSError:
            return None  # `target` refused the copy; the entry may be fine, so it stays
        finally:
            for tmp in staged.values():
                with contextlib.suppress(OSError):
                    tmp.unlink()

    def keep(self, key: str, run_dir: Path, result: RunResult) -> None:
        """Store a final run (completed, no model call lost) with the sha256 of each of its
        files; any other run, or a run already stored intact, is left alone. An entry that fails
        verification is replaced."""
        if not result.final or not (run_dir / "result.json").is_file():
            return
        final = self._path(key)
        if _intact(final, key):
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:8]}.", dir=final.parent))
        try:
            files: dict[str, str] = {}
            for name in RUN_FILES:
                if not (run_dir / name).is_file():
                    continue
                with open(run_dir / name, "rb") as source, open(staging / name, "x+b") as copy:
                    files[name] = _copy_hashed(source, copy)
                # Read-only against accidents; root ignores it, which is why fetch verifies.
                os.chmod(staging / name, 0o444)
            (staging / DIGEST).write_text(pretty_json({"key": key, "files": files}))
            os.chmod(staging / DIGEST, 0o444)
            _discard(final)  # a damaged entry; an intact one returned above
            os.replace(staging, final)  # atomic: readers see a whole run or none
        except OSError:
            # Another process stored the same run first, or the disk refused: either way the
            # run itself is fine; the store is only a cache.
            shutil.rmtree(staging, ignore_errors=True)
