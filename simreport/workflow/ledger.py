"""Recording in the run ledger from workflow jobs: which ledger a config names (`ledger_of`), the
finished runs handed to the ledger's writer thread as they end (`with_recording`), and each job's
runs, evaluations and analysis recorded once it ends (`record_in_ledger`), never at the cost of
its files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import InputError
from ..core.schema import RunResult
from ..harness import RunJob
from .terminal import say

if TYPE_CHECKING:
    from ..ledger.recording import LedgerRecorder
    from .targets import Workflow


def ledger_of(config: Mapping[str, Any], results_dir: Path, config_file: str | Path) -> str | None:
    """The ledger the workflow records in: $SIMREPORT_LEDGER_URL, else the config's `ledger`
    (a URL or a SQLite file path; null turns recording off), else
    `sqlite:///<results>/ledger.sqlite`. A config value that cannot be one names the file."""
    from ..ledger.location import UNSET, ledger_url, normalise_url

    configured = config.get("ledger", UNSET)
    if isinstance(configured, str):
        try:
            normalise_url(configured, where="ledger")
        except InputError as exc:
            raise exc.located(file=config_file) from None
    elif configured is not None and configured is not UNSET:
        raise InputError(
            f"ledger must be a URL or null, not {configured!r}",
            file=config_file,
            path="ledger",
            expected="sqlite:///PATH, postgresql+psycopg://USER@HOST/DB, or null for no ledger",
        )
    return ledger_url(results_dir=results_dir, configured=configured)


def ledger_recorder(workflow: Workflow) -> LedgerRecorder | None:
    """A recorder of the workflow's ledger for one job (None with `ledger: null`)."""
    if workflow.ledger is None:
        return None
    from ..ledger.recording import LedgerRecorder

    return LedgerRecorder(workflow.ledger, say=say, shared=True)


def with_recording(
    finished: Callable[[RunJob, RunResult], None], recorder: LedgerRecorder | None
) -> Callable[[RunJob, RunResult], None]:
    """`finished`, then a finished run handed to the ledger's writer thread, which records it
    while the condition's other runs still run (the ledger's share of a build then mostly
    overlaps the runs, instead of following each job's last run). Its folder is complete and
    stays: only runs that did not finish are removed after an interrupt."""
    if recorder is None:
        return finished

    def finished_and_recorded(job: RunJob, result: RunResult) -> None:
        finished(job, result)
        if result.final:
            recorder.record_soon(job.out_dir)

    return finished_and_recorded


def record_in_ledger(
    workflow: Workflow,
    *,
    runs: Sequence[Path] = (),
    build: Path | None = None,
    recorder: LedgerRecorder | None = None,
    evaluations: Sequence[Path] = (),
) -> None:
    """Record a job's runs (each whole or not at all) and its analysis in the workflow's
    ledger, with `recorder` when the job has one already. What the ledger cannot record is said
    in one line each (the run, the ledger's URL with credentials redacted) and then fails the
    job: its files are complete and stay, the finished runs are in the run store, and the next
    build records them without running them again. With `ledger: null` nothing happens."""
    recorder = recorder or ledger_recorder(workflow)
    if recorder is None:
        return
    with recorder:
        recorder.record_runs(runs)
        if evaluations:
            recorder.record_evaluations(evaluations)
        if build is not None:
            recorder.record_build(build)
    recorder.raise_if_incomplete()
