"""Replaying a recorded testbed run through the engine: `simreport replay <runDir>`
(`replay_run`). The manifest is checked against its own digests first (an altered one replays
nothing); then the run is re-run from its recorded decisions, agent steps and faults, its assets
pinned, and the records are compared. The `ReplayReport` says whether they match, where they
first differ, or why the replay could not run (the command then exits `REPLAY_ERROR`). No
provider is built. The module sits above the engine; neither the engine nor the testbed imports
it. The design: docs/testbed.md.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from ..core.errors import InputError
from ..core.files import read_json
from ..core.schema import FailureInfo, RunResult, Scenario
from .engine import run_scenario
from .testbed.records import RECORDS_FILE, read_records
from .testbed.replay_records import (
    ReplayReport,
    ReplaySource,
    compare_records,
    manifest_problems,
    replaying,
    tampered_records,
)
from .testbed.version_checks import recorded_checks

REPLAY_ERROR = 2
"""`simreport replay`'s exit status when the replay itself could not run (nothing compared)."""


def replay_run(run_dir: str | Path, out_dir: str | Path | None = None) -> ReplayReport:
    """Re-run a testbed run from its recorded responses and faults; compare the records."""
    root = Path(run_dir)
    needed = [root / "scenario.json", root / "manifest.json", root / RECORDS_FILE]
    for path in needed:
        if not path.is_file():
            raise InputError(
                "not a testbed run directory",
                file=path,
                expected="scenario.json, manifest.json and records.jsonl of a refund_desk run",
            )
    scenario_doc = read_json(root / "scenario.json")
    manifest = read_json(root / "manifest.json")
    original = read_records(root / RECORDS_FILE)
    altered = manifest_problems(manifest, scenario_doc, original)
    if altered:
        return ReplayReport(
            len(original), 0, 0, tampered_records(original), None, manifest_problems=altered
        )
    scenario = Scenario.model_validate(scenario_doc)
    source = ReplaySource.from_run(original, manifest)
    asset_root = manifest.get("assetRoot")
    with contextlib.ExitStack() as stack:
        if out_dir is None:
            target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
        else:
            target = Path(out_dir)
        with replaying(source):
            result = run_scenario(
                scenario,
                target,
                condition=str(manifest.get("condition", "scenario")),
                replication=int(manifest.get("replication", 0)),
                asset_root=asset_root,
                checks=recorded_checks(manifest),
            )
        error = _replay_error(root, result.failure)
        if error is not None:
            return ReplayReport(len(original), 0, 0, [], None, error=error)
        replayed = read_records(target / RECORDS_FILE) if (target / RECORDS_FILE).is_file() else []
    return compare_records(original, replayed)


def _replay_error(root: Path, failure: FailureInfo | None) -> str | None:
    """Why the replay could not run, or None. A replayed run that failed where the recorded run
    did not (or otherwise) failed for a reason of its own — an asset library gone, a provider that
    cannot be set up — is an error, not a difference in the records. A failure the recorded run
    had too, or a replay running off its records (`replay_*`), is compared as usual."""
    if failure is None or failure.type.startswith("replay_"):
        return None
    recorded: FailureInfo | None = None
    if (root / "result.json").is_file():
        # A result.json that cannot be read or is not a result: nothing recorded to compare.
        with contextlib.suppress(OSError, ValueError):
            recorded = RunResult.model_validate(read_json(root / "result.json")).failure
    if recorded is not None and (recorded.stage, recorded.type) == (failure.stage, failure.type):
        return None
    return f"the replayed run failed in {failure.stage}: {failure.type}: {failure.message}"


__all__ = ["REPLAY_ERROR", "replay_run"]
