"""Recording run directories and audits in the ledger: the entry points.

`ingest_run` records one run whole, in one transaction, or nothing of it: a process killed
half-way leaves nothing behind, and the next ingest records the run. A run recorded already
with the same content changes nothing; other content under its id is refused (RunConflict), as
is an asset version whose sha256 differs from its pin (AssetVersionChanged): nothing is ever
overwritten. `ingest_runs` records many, in groups and in worker processes; `ingest_build`
records an analysis (audit.json) as a build of its plan, its runs first; `ingest_paths` records
every run and build in and under result folders.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.errors import InputError
from . import tables as t
from .builds import BuildIngest, Outcome, read_build, record_build
from .bulk import lookup
from .db import ATTEMPTS, database_message, reading, utc_now, worth_retrying
from .errors import RunConflict
from .migrate import prepare_once
from .parallel import WORKER_RUNS, can_fork, chunks, few_collections, ingest_in_workers
from .run_rows import RunRows, run_rows, write_rows
from .rundir import RunFiles, is_run_dir, read_run_dir, read_run_files
from .tables import DEFAULT_TENANT


@dataclass(frozen=True)
class RunIngest:
    """What ingesting one run did."""

    run_id: str
    outcome: Outcome
    path: Path
    rows: Mapping[str, int] = field(default_factory=dict)
    """Rows written per table (empty when the run was already present)."""


@dataclass
class IngestSummary:
    """What `ingest_paths` did, in counts, and what it refused."""

    runs_recorded: int = 0
    runs_present: int = 0
    builds_recorded: int = 0
    builds_present: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    refused: list[tuple[Path, str]] = field(default_factory=list)

    def add_run(self, done: RunIngest) -> None:
        if done.outcome == "recorded":
            self.runs_recorded += 1
            for table, count in done.rows.items():
                self.rows[table] = self.rows.get(table, 0) + count
        else:
            self.runs_present += 1

    def add_build(self, done: BuildIngest) -> None:
        if done.outcome == "recorded":
            self.builds_recorded += 1
        else:
            self.builds_present += 1


# --------------------------------------------------------------------------- runs


def ingest_run(
    engine: Engine,
    run_dir: str | Path,
    *,
    tenant: str = DEFAULT_TENANT,
) -> RunIngest:
    """Record the run in `run_dir` (see the module's docstring). Raises InputError (a
    RunConflict, an AssetVersionChanged, or a file that breaks the run directory contract)
    when the run cannot be recorded as it is; then nothing of it was written."""
    prepare_once(engine)
    with few_collections():
        rows = run_rows(read_run_dir(run_dir), dialect=engine.dialect, tenant=tenant)
        return _record_run(engine, rows, tenant)


def _record_run(engine: Engine, run: RunRows, tenant: str) -> RunIngest:
    for attempt in range(ATTEMPTS):
        try:
            with engine.begin() as conn:
                present = _recorded_content(conn, run.run_id)
                if present is not None:
                    _same_content(run, present)
                    return RunIngest(run.run_id, "present", run.path)
                rows = write_rows(conn, run, tenant=tenant)
            return RunIngest(run.run_id, "recorded", run.path, rows)
        except sa.exc.IntegrityError as exc:
            # Another writer recorded this run (or a row it shares) between the check and the
            # insert; its transaction has committed, so looking again settles it.
            with reading(engine) as conn:
                present = _recorded_content(conn, run.run_id)
            if present is not None:
                _same_content(run, present)
                return RunIngest(run.run_id, "present", run.path)
            if attempt == ATTEMPTS - 1:
                raise _refused_by_ledger(run, exc) from None
        except sa.exc.DBAPIError as exc:
            if not worth_retrying(exc) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def _refused_by_ledger(run: RunRows, exc: sa.exc.DBAPIError) -> InputError:
    return InputError(
        f"cannot record run {run.run_id}: the ledger refused it ({database_message(exc)})",
        file=run.path,
    )


RUNS_AT_ONCE = 200
"""How many runs `ingest_runs` reads (and looks up) before it records them: a bound on memory."""

BULK_GROUP = 64
"""Runs per transaction when `simreport ledger ingest` records many (each in its own savepoint):
a commit costs about as much as writing a run, so recording runs one commit each halves the
rate."""


def ingest_runs(
    engine: Engine,
    run_dirs: Iterable[str | Path],
    *,
    tenant: str = DEFAULT_TENANT,
    on_run: Callable[[RunIngest], None],
    on_refused: Callable[[Path, Exception], None],
    jobs: int = 1,
    group: int = 1,
) -> None:
    """Record each run as `ingest_run` does. The runs the ledger holds already are found with
    one query for many of them and cost no transaction (their content hash is compared all the
    same: one that changed is refused). `on_run` hears of each run recorded or found present,
    `on_refused` of each that was not, with the exception (an InputError for the run's own
    faults, or the database's), in the order of `run_dirs`; it may raise it.

    In bulk (`simreport ledger ingest`): `group` runs share a transaction, each in a savepoint
    of its own, so a run is recorded whole or not at all as with one transaction each (a
    refused run is rolled back alone; a process killed mid-group leaves none of the group's
    runs, and the next ingest records them), and `jobs` processes read, check and write runs
    side by side (SQLite lets one write at a time: the others read and check meanwhile). With
    `group=1` every run commits on its own, which is what a workflow job does as its runs
    finish."""

    def report(outcomes: Sequence[_Outcome]) -> None:
        for path, outcome in outcomes:
            if isinstance(outcome, RunIngest):
                on_run(outcome)
            else:
                on_refused(path, outcome)

    paths = (Path(run_dir) for run_dir in run_dirs)
    if jobs > 1 and can_fork():
        prepare_once(engine)  # the schema, once, before the workers open the ledger
        size = min(max(1, group), WORKER_RUNS)
        work = functools.partial(_ingest_batch, tenant=tenant, group=size)
        ingest_in_workers(engine, paths, jobs=jobs, size=size, batch=work, report=report)
        return
    with few_collections(group > 1):
        for batch in chunks(paths, RUNS_AT_ONCE):
            report(_ingest_batch(engine, batch, tenant, group))


_Outcome = tuple[Path, RunIngest | Exception]


class _Fingerprint(NamedTuple):
    """A run as its files' bytes give it, before they are parsed."""

    path: Path
    run_id: str
    content_sha256: str


def _ingest_batch(engine: Engine, paths: Sequence[Path], tenant: str, group: int) -> list[_Outcome]:
    """Record the runs in `paths`, `group` to a transaction; what became of each, in order."""
    read: list[tuple[Path, RunFiles | InputError, str | None]] = []
    for path in paths:
        try:
            files = read_run_files(path)
        except InputError as exc:
            read.append((path, exc, None))
            continue
        try:
            run_id: str | None = files.identity.run_id
        except InputError:
            run_id = None  # read_run_dir says what is wrong
        read.append((path, files, run_id))
    try:
        prepare_once(engine)
        recorded = _recorded_contents(engine, [run_id for _, _, run_id in read if run_id])
    except Exception as exc:  # failure is data: each run's outcome, said by the caller
        return [(path, exc) for path, _, _ in read]
    outcomes: dict[Path, RunIngest | Exception] = {}
    pending: list[RunRows] = []
    now = utc_now()
    for path, found, run_id in read:
        if isinstance(found, InputError):
            outcomes[path] = found
            continue
        try:
            if run_id is not None and run_id in recorded:
                _same_content(_Fingerprint(path, run_id, found.content_sha256), recorded[run_id])
                outcomes[path] = RunIngest(run_id, "present", path)
                continue
            pending.append(
                run_rows(read_run_dir(found), dialect=engine.dialect, tenant=tenant, now=now)
            )
        except Exception as exc:  # failure is data: this run's outcome
            outcomes[path] = exc
            continue
        if len(pending) >= group:
            outcomes.update(_record_group(engine, pending, tenant))
            pending = []
    if pending:
        outcomes.update(_record_group(engine, pending, tenant))
    return [(path, outcomes[path]) for path, _, _ in read]


def _record_group(
    engine: Engine, runs: Sequence[RunRows], tenant: str
) -> dict[Path, RunIngest | Exception]:
    """Record `runs` in one transaction, each in a savepoint of its own; when the transaction
    itself fails (a lock, a deadlock, a lost connection), each run on its own."""
    if len(runs) > 1:
        try:
            with engine.begin() as conn:
                return {run.path: _record_in_savepoint(conn, run, tenant) for run in runs}
        except sa.exc.DBAPIError:
            pass
    outcomes: dict[Path, RunIngest | Exception] = {}
    for run in runs:
        try:
            outcomes[run.path] = _record_run(engine, run, tenant)
        except Exception as exc:  # failure is data: this run's outcome
            outcomes[run.path] = exc
    return outcomes


def _record_in_savepoint(conn: Connection, run: RunRows, tenant: str) -> RunIngest | InputError:
    present = _recorded_content(conn, run.run_id)
    try:
        if present is not None:
            _same_content(run, present)
            return RunIngest(run.run_id, "present", run.path)
        savepoint = conn.begin_nested()
        try:
            rows = write_rows(conn, run, tenant=tenant)
        except (InputError, sa.exc.IntegrityError):
            savepoint.rollback()
            raise
        savepoint.commit()
        return RunIngest(run.run_id, "recorded", run.path, rows)
    except InputError as exc:
        return exc
    except sa.exc.IntegrityError as exc:
        # The run (or a row it shares) is in the ledger: recorded by an earlier run of this
        # group with the same id, or by another writer that committed first.
        present = _recorded_content(conn, run.run_id)
        if present is None:
            return _refused_by_ledger(run, exc)
        try:
            _same_content(run, present)
        except InputError as conflict:
            return conflict
        return RunIngest(run.run_id, "present", run.path)


def _recorded_contents(engine: Engine, run_ids: Sequence[str]) -> dict[str, str]:
    """run id → the content sha256 recorded, for those of `run_ids` the ledger holds."""
    if not run_ids:
        return {}
    found: dict[str, str] = {}
    with reading(engine) as conn:
        for start in range(0, len(run_ids), 500):
            rows = conn.execute(
                sa.select(t.run.c.run_id, t.run.c.content_sha256).where(
                    t.run.c.run_id.in_(run_ids[start : start + 500])
                )
            )
            found.update((str(run_id), str(sha)) for run_id, sha in rows)
    return found


def _recorded_content(conn: Connection, run_id: str) -> str | None:
    found = lookup(conn, t.run, "content_sha256", "run_id", run_id)
    return None if found is None else str(found)


def _same_content(run: RunRows | _Fingerprint, recorded: str) -> None:
    if recorded != run.content_sha256:
        raise RunConflict(
            f"run {run.run_id} is already recorded with other content (content sha256 "
            f"{recorded[:16]}… recorded, {run.content_sha256[:16]}… here): a file of this run "
            "was changed after it was recorded; the ledger keeps what it recorded",
            file=run.path,
        )


# --------------------------------------------------------------------------- builds


def ingest_build(
    engine: Engine,
    audit_dir: str | Path,
    *,
    tenant: str = DEFAULT_TENANT,
    on_run: Callable[[RunIngest], None] | None = None,
) -> BuildIngest:
    """Record the analysis in `audit_dir` (its audit.json) as a build of its plan, with its
    conditions and the runs it used. Runs of the audit that are not recorded yet are recorded
    first (each in its own transaction; `on_run` hears of each)."""
    prepare_once(engine)
    build = read_build(audit_dir)
    known = _recorded_contents(engine, [row["run_id"] for row, _ in build.runs])
    for row, run_dir in build.runs:
        if row["run_id"] not in known:
            done = ingest_run(engine, run_dir, tenant=tenant)
            if on_run is not None:
                on_run(done)
    return record_build(engine, build, tenant=tenant)


# --------------------------------------------------------------------------- folders


def is_audit_dir(path: Path) -> bool:
    return (path / "audit.json").is_file() or (
        (path / "conditions.json").is_file() and (path / "runs").is_dir()
    )


def find_results(paths: Iterable[str | Path]) -> tuple[list[Path], list[Path]]:
    """(audit directories, standalone run directories) in and under `paths`, in a stable
    order. Hidden folders (the run store `.store`, `.snakemake`) are not entered: the runs in
    them are copies of runs in the audit directories."""
    audits: list[Path] = []
    runs: list[Path] = []
    for given in paths:
        root = Path(given)
        if not root.exists():
            raise InputError("no such file or folder", file=root, expected="a results folder")
        if not root.is_dir():
            raise InputError("not a folder", file=root, expected="a results folder")
        if is_run_dir(root):
            runs.append(root)
            continue
        if is_audit_dir(root):
            audits.append(root)
            continue
        for folder, subfolders, _files in os.walk(root):
            here = Path(folder)
            subfolders[:] = sorted(s for s in subfolders if not s.startswith("."))
            if is_run_dir(here):
                runs.append(here)
                subfolders[:] = []
            elif is_audit_dir(here):
                audits.append(here)
                subfolders[:] = []
    return audits, runs


def audit_run_dirs(audit_dir: Path) -> list[Path]:
    """Every run directory under an audit directory's `runs/`."""
    found = []
    for folder, subfolders, _files in os.walk(audit_dir / "runs"):
        subfolders[:] = sorted(s for s in subfolders if not s.startswith("."))
        if is_run_dir(Path(folder)):
            found.append(Path(folder))
            subfolders[:] = []
    return found


def ingest_paths(
    engine: Engine,
    paths: Iterable[str | Path],
    *,
    tenant: str = DEFAULT_TENANT,
    on_run: Callable[[RunIngest], None] | None = None,
    jobs: int = 1,
    group: int = 1,
) -> IngestSummary:
    """Record every run and analysed audit in and under `paths`. A run or build the ledger
    refuses (a conflict, a broken file) is listed in the summary; the others are recorded.
    `jobs` and `group` as for `ingest_runs`."""
    audits, standalone = find_results(paths)
    summary = IngestSummary()

    def heard(done: RunIngest) -> None:
        summary.add_run(done)
        if on_run is not None:
            on_run(done)

    def refused(run_dir: Path, exc: Exception) -> None:
        if not isinstance(exc, InputError):
            raise exc
        summary.refused.append((run_dir, exc.one_line()))

    for audit_dir in audits:
        ingest_runs(
            engine,
            audit_run_dirs(audit_dir),
            tenant=tenant,
            on_run=heard,
            on_refused=refused,
            jobs=jobs,
            group=group,
        )
        if (audit_dir / "audit.json").is_file():
            try:
                summary.add_build(ingest_build(engine, audit_dir, tenant=tenant, on_run=heard))
            except InputError as exc:
                summary.refused.append((audit_dir, exc.one_line()))
    ingest_runs(
        engine,
        standalone,
        tenant=tenant,
        on_run=heard,
        on_refused=refused,
        jobs=jobs,
        group=group,
    )
    return summary
