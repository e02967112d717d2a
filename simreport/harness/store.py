"""A content-addressed store of finished runs.

A replication is keyed by what determines its result: the exact scenario document it runs (with
its seed lineage), the condition id and replication index written into its result, the provider
override and the kernel's code fingerprint. A batch that is executed again — because a workflow
manager removed its outputs, or a plan gained replications — copies finished runs back from the
store instead of recomputing them. Only completed runs are kept; failures always run again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..core.canonical import content_hash
from ..core.files import read_json, write_atomic
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
    "evaluation.json",
    # result.json last: a run is finished when it is there
    "result.json",
)


def run_key(
    scenario: dict[str, Any],
    *,
    condition: str,
    replication: int,
    provider: str | None,
    fingerprint: str,
    inputs: dict[str, str] | None = None,
) -> str:
    """The store key of one replication. `inputs` are the sha256 of the files the run reads
    besides its scenario (a simulator's script, an asset library)."""
    return content_hash(
        {
            "scenario": scenario,
            "condition": condition,
            "replication": replication,
            "provider": provider,
            "kernel": fingerprint,
            "inputs": inputs or {},
        }
    )


def _link_or_copy(source: Path, target: Path) -> None:
    """A hard link where the filesystem allows one, else a copy. Sharing the inode is safe
    because simreport never rewrites a run file in place: every write replaces the file."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _place(source: Path, target: Path) -> None:
    """Put `source` at `target` atomically (linked or copied under a temporary name first)."""
    staging = target.with_name(f".{target.name}.{os.getpid()}.{id(target)}.tmp")
    try:
        _link_or_copy(source, staging)
        os.replace(staging, target)
    except OSError:
        with contextlib.suppress(OSError):
            staging.unlink()
        write_atomic(target, source.read_bytes())


class RunStore:
    """Finished runs under `root/<key[:2]>/<key>/`."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key

    def fetch(self, key: str, target: Path) -> RunResult | None:
        """Copy a stored run into `target` (result.json last) and return its result, or None."""
        source = self._path(key)
        try:
            result = RunResult.model_validate(read_json(source / "result.json"))
        except (OSError, ValueError):
            return None
        target.mkdir(parents=True, exist_ok=True)
        (target / "result.json").unlink(missing_ok=True)
        for name in RUN_FILES:
            if (source / name).exists():
                _place(source / name, target / name)
        return result

    def keep(self, key: str, run_dir: Path, result: RunResult) -> None:
        """Store a completed run; a failure, or a run already stored, is left alone."""
        if not result.succeeded:
            return
        final = self._path(key)
        if (final / "result.json").exists():
            return
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{key[:8]}.", dir=final.parent))
        try:
            for name in RUN_FILES:
                if (run_dir / name).exists():
                    _link_or_copy(run_dir / name, staging / name)
            os.replace(staging, final)  # atomic: readers see a whole run or none
        except OSError:
            # Another process stored the same run first, or the disk refused: either way the
            # run itself is fine; the store is only a cache.
            with contextlib.suppress(OSError):
                shutil.rmtree(staging)
