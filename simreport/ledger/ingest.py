"""Recording run directories and audits in the ledger.

`ingest_run` writes one run — its manifest (shared by runs of the same frozen combination), the
asset versions the manifest resolved, the run row with its four statuses, its events, and for an
agent-testbed run its task and session, records, observations, evidence, completeness, fault plans
and fault steps — in one transaction: a process killed half-way leaves nothing of the run behind,
and running the ingest again records it whole. Ingesting a run that is already recorded with the
same content changes nothing; a run id that arrives with other content is refused (RunConflict),
as is an asset version whose sha256 differs from the one pinned the first time the ledger saw it
(AssetVersionChanged). Nothing is ever overwritten.

`ingest_build` records an analysis (audit.json) as a build of its plan, with its conditions and
the runs it used; `ingest_paths` walks result folders and records every run and build in them.
"""

from __future__ import annotations

import functools
import gc
import json
import math
import multiprocessing
import os
import pickle
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.canonical import sha256_bytes, sha256_text
from ..core.errors import DocumentError, InputError, SimreportError
from ..core.files import load_document
from ..core.versions import design_document, design_sha256
from . import tables as t
from .db import reading, utc_now
from .errors import AssetVersionChanged, RunConflict
from .evaluations import evaluation_quality_ref
from .migrate import prepare_once
from .rundir import (
    SCENARIO_FILE,
    RunDirectory,
    RunFiles,
    is_run_dir,
    iso_time,
    read_run_dir,
    read_run_files,
    run_identity,
    strict_json,
    wall_time,
)

DEFAULT_TENANT = "local"
"""The tenant of everything a local simreport records (the run service will set its own)."""

HARNESS_EVENTS = frozenset({"run_started", "run_finished"})
"""The kernel's own events: their actor is the harness even where the file says null."""

UNKNOWN_OWNER = "unknown"

Outcome = Literal["recorded", "present"]


@dataclass(frozen=True)
class RunIngest:
    """What ingesting one run did."""

    run_id: str
    outcome: Outcome
    path: Path
    rows: Mapping[str, int] = field(default_factory=dict)
    """Rows written per table (empty when the run was already present)."""


@dataclass(frozen=True)
class BuildIngest:
    """What ingesting one analysis did."""

    build_id: str
    plan_id: str
    outcome: Outcome
    path: Path
    runs: int


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


# --------------------------------------------------------------------------- preparing


def _prepare(engine: Engine) -> None:
    """Bring the ledger to the current schema once per engine (see migrate.py)."""
    prepare_once(engine)


# --------------------------------------------------------------------------- statements

# A run writes a few hundred to a few thousand rows in a dozen statements and looks up a few
# single rows. Through SQLAlchemy's per-statement and per-row parameter handling those cost
# more than the database does, so the rows go to the driver's executemany as plain tuples, each
# value through its column type's own bind processing, with the SQL built once per table.

_json_text = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False
).encode
"""A JSON column's value as text, as the ledger's engines write it (db.py's serializer: strict,
a NaN is an error), with one encoder for every value (what json parsed has no cycles). None is
JSON null, as SQLAlchemy's JSON type stores it; PostgreSQL reads the text into jsonb."""


def _json_as_read(text: str | None, value: Any) -> str:
    """JSON text for `value`: `text`, what json parsed it from, unless there is none or it may
    spell a non-finite number, which strict JSON has not (then encoding `value` says so)."""
    strict = strict_json(text)
    return _json_text(value) if strict is None else strict


_Processors = tuple[tuple[int, Callable[[Any], Any]], ...]


def _schema(conn: Connection, table: sa.Table) -> str | None:
    translate = conn.get_execution_options().get("schema_translate_map")
    return translate.get(table.schema, table.schema) if translate else table.schema


def _name(dialect: sa.Dialect, table: sa.Table, schema: str | None) -> str:
    prepare = dialect.identifier_preparer
    name = prepare.quote(table.name)
    return f"{prepare.quote_schema(schema)}.{name}" if schema else name


def _mark(dialect: sa.Dialect) -> str:
    return "?" if dialect.paramstyle == "qmark" else "%s"


@functools.lru_cache(maxsize=256)
def _insert_statement(
    dialect: sa.Dialect,
    table: sa.Table,
    schema: str | None,
    keys: tuple[str, ...],
    ignore_duplicates: bool,
    count: int = 1,
) -> str:
    """INSERT of `count` rows of `keys`, each a row of VALUES."""
    quote = dialect.identifier_preparer.quote
    row = f"({', '.join(_mark(dialect) for _ in keys)})"
    sql = (
        f"INSERT INTO {_name(dialect, table, schema)} ({', '.join(quote(k) for k in keys)}) "
        f"VALUES {', '.join(row for _ in range(count))}"
    )
    if ignore_duplicates:
        sql += " ON CONFLICT DO NOTHING"  # SQLite ≥ 3.24 and PostgreSQL alike
    return sql


@functools.lru_cache(maxsize=256)
def _processors(
    dialect: sa.Dialect, table: sa.Table, keys: tuple[str, ...], bound: frozenset[str]
) -> _Processors:
    """(index, processor) of each of `keys` not in `bound` whose type processes what is bound."""
    return tuple(
        (index, process)
        for index, key in enumerate(keys)
        if key not in bound and (process := _processor(dialect, table, key)) is not None
    )


def _processed(values: list[tuple[Any, ...]], processors: _Processors) -> list[tuple[Any, ...]]:
    """`values` (rows) with the columns `processors` name put through them."""
    if not processors or not values:
        return values
    columns = list(zip(*values, strict=True))
    for index, process in processors:
        columns[index] = tuple(map(process, columns[index]))
    return list(zip(*columns, strict=True))


@functools.lru_cache(maxsize=256)
def _processor(dialect: sa.Dialect, table: sa.Table, key: str) -> Callable[[Any], Any] | None:
    """What a value of the column goes through before the driver takes it (None: nothing)."""
    kind = table.c[key].type
    if isinstance(kind, sa.JSON):
        return _json_text
    process = kind._cached_bind_processor(dialect)
    if process is not None and isinstance(kind, sa.DateTime):
        return _same_or(process, _datetime_text)
    return process


def _unchanged(value: Any) -> Any:
    return value


def _datetime_text(value: datetime | None) -> str | None:
    """A timestamp as SQLAlchemy stores it in SQLite ("2026-05-01 12:00:00.000000", the zone
    left out), in a third of the time its processor takes."""
    return None if value is None else value.isoformat(" ", "microseconds")[:26]


def epoch_text(seconds: float) -> str:
    """`_datetime_text(wall_time(seconds))` in a third of the time: the date and time of each
    second is made once, and the microseconds are rounded as `datetime.fromtimestamp` rounds
    them (half to even, carried into the second)."""
    fraction, whole = math.modf(seconds)
    micro = round(fraction * 1e6)
    if micro >= 1_000_000:
        micro -= 1_000_000
        whole += 1
    elif micro < 0:
        micro += 1_000_000
        whole -= 1
    return f"{_second_text(int(whole))}.{micro:06d}"


@functools.lru_cache(maxsize=4096)
def _second_text(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).isoformat(" ")[:19]


_PROBES = (
    datetime(2026, 5, 1, 12, 30, 5, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, 59, 999999),
    None,
)


def _same_or(process: Callable[[Any], Any], faster: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`faster` where it gives what the dialect's `process` gives (checked here, once per
    statement), else `process`."""
    try:
        same = all(process(probe) == faster(probe) for probe in _PROBES)
    except (TypeError, ValueError):
        same = False
    return faster if same else process


def _insert_rows(
    conn: Connection,
    table: sa.Table,
    keys: tuple[str, ...],
    rows: Sequence[tuple[Any, ...]],
    *,
    ignore_duplicates: bool = False,
    bound: frozenset[str] = frozenset(),
) -> int:
    """INSERT `rows`, tuples of the values of `keys`, in one executemany (on PostgreSQL, many
    rows in one COPY). `ignore_duplicates`: ON CONFLICT DO NOTHING, so a row another writer
    recorded first stays as it was. The columns named in `bound` hold their values as the
    driver takes them already (JSON as text, what `_processor` makes of the others)."""
    if not rows:
        return 0
    dialect, schema = conn.dialect, _schema(conn, table)
    values = _processed(list(rows), _processors(dialect, table, keys, bound))
    if dialect.name != "postgresql":
        conn.exec_driver_sql(
            _insert_statement(dialect, table, schema, keys, ignore_duplicates), values
        )
    elif not ignore_duplicates and _copies(conn, len(values)):
        _copy(conn, _copy_statement(dialect, table, schema, keys), values)
    else:
        per = max(1, VALUES_PARAMETERS // len(keys))
        for start in range(0, len(values), per):
            chunk = values[start : start + per]
            conn.exec_driver_sql(
                _insert_statement(dialect, table, schema, keys, ignore_duplicates, len(chunk)),
                tuple(value for row in chunk for value in row),
            )
    return len(values)


COPY_ROWS = 16
"""From this many rows on, PostgreSQL takes them in a COPY; fewer go in one INSERT with a row of
VALUES each. psycopg's executemany sends a statement per row: for ten rows it costs the client
about four times as much as one INSERT of them all, and the server eight times."""
VALUES_PARAMETERS = 1000
"""Parameters one INSERT of many rows of VALUES takes at most (PostgreSQL, rows a COPY cannot
take: ON CONFLICT DO NOTHING); more rows go in further INSERTs."""


@functools.lru_cache(maxsize=64)
def _copy_statement(
    dialect: sa.Dialect, table: sa.Table, schema: str | None, keys: tuple[str, ...]
) -> str:
    quote = dialect.identifier_preparer.quote
    return f"COPY {_name(dialect, table, schema)} ({', '.join(quote(k) for k in keys)}) FROM STDIN"


def _copy(conn: Connection, sql: str, values: Sequence[tuple[Any, ...]]) -> None:
    """COPY `values` in the connection's transaction. The driver's errors are raised as
    SQLAlchemy raises them for a statement (an IntegrityError, an OperationalError, …)."""
    dbapi = conn.dialect.loaded_dbapi
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        with driver.cursor() as cursor, cursor.copy(sql) as copy:
            for row in values:
                copy.write_row(row)
    except dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(
            sql, None, exc, dbapi.Error, dialect=conn.dialect
        ) from None


@contextmanager
def pipelined(conn: Connection) -> Iterator[None]:
    """On PostgreSQL, the block's statements sent together, without waiting for each one's
    answer (psycopg's pipeline mode): a dozen INSERTs of a run cost one round trip instead of a
    dozen. Nothing in the block may read what a statement returns, and rows go in INSERTs of
    many rows of VALUES rather than a COPY, which a pipeline cannot carry (so write many rows
    before, with `write_bulk`). The first statement the database refuses is raised at the end
    of the block, as SQLAlchemy raises a statement's error (an IntegrityError, an
    OperationalError, …). On SQLite the block runs as it is."""
    if conn.dialect.name != "postgresql":
        yield
        return
    dbapi = conn.dialect.loaded_dbapi
    driver = conn.connection.driver_connection
    assert driver is not None
    try:
        with driver.pipeline():
            yield
    except dbapi.Error as exc:
        raise sa.exc.DBAPIError.instance(
            None, None, exc, dbapi.Error, dialect=conn.dialect
        ) from None


def _copies(conn: Connection, rows: int) -> bool:
    """Whether `rows` rows go to PostgreSQL in a COPY: many, and not in a pipeline."""
    if conn.dialect.name != "postgresql" or rows < COPY_ROWS:
        return False
    driver = conn.connection.driver_connection
    return not driver.pgconn.pipeline_status  # type: ignore[union-attr]


def write_bulk(conn: Connection, tables: Sequence[TableRows]) -> list[TableRows]:
    """Write now the tables whose rows go to PostgreSQL in a COPY (many rows: for the client
    a COPY costs a fraction of the same rows' INSERT), and return the others, for a pipeline
    to carry together (`pipelined`). On SQLite, all of them are returned."""
    rest = []
    for rows in tables:
        if _copies(conn, len(rows.values)):
            _write_rows(conn, rows)
        else:
            rest.append(rows)
    return rest


def _insert(conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> int:
    """INSERT rows given as mappings, each with the keys of the first."""
    if not rows:
        return 0
    keys = tuple(rows[0])
    return _insert_rows(conn, table, keys, [tuple(row[k] for k in keys) for row in rows])


def _insert_ignoring_duplicates(
    conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    """INSERT … ON CONFLICT DO NOTHING: a row another writer recorded first stays as it was."""
    if rows:
        keys = tuple(rows[0])
        _insert_rows(
            conn,
            table,
            keys,
            [tuple(row[k] for k in keys) for row in rows],
            ignore_duplicates=True,
        )


@functools.lru_cache(maxsize=64)
def _lookup_statement(
    dialect: sa.Dialect, table: sa.Table, schema: str | None, column: str, key: str
) -> str:
    quote = dialect.identifier_preparer.quote
    return (
        f"SELECT {quote(column)} FROM {_name(dialect, table, schema)} "
        f"WHERE {quote(key)} = {_mark(dialect)}"
    )


def _lookup(conn: Connection, table: sa.Table, column: str, key: str, value: str) -> Any:
    """`column` of the row whose primary key `key` is `value`, or None when there is none."""
    sql = _lookup_statement(conn.dialect, table, _schema(conn, table), column, key)
    return conn.exec_driver_sql(sql, (value,)).scalar()


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
    _prepare(engine)
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
        f"cannot record run {run.run_id}: the ledger refused it ({_first_line(exc)})",
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
    if jobs > 1 and _can_fork():
        _ingest_in_workers(engine, paths, tenant, jobs, max(1, group), report)
        return
    with few_collections(group > 1):
        for batch in _chunks(paths, RUNS_AT_ONCE):
            report(_ingest_batch(engine, batch, tenant, group))


_Outcome = tuple[Path, "RunIngest | Exception"]


def _chunks(paths: Iterable[Path], size: int) -> Iterator[list[Path]]:
    chunk: list[Path] = []
    for path in paths:
        chunk.append(path)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


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
        _prepare(engine)
        recorded = _recorded_contents(engine, [run_id for _, _, run_id in read if run_id])
    except Exception as exc:
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
        except Exception as exc:
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
        except Exception as exc:
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


# --------------------------------------------------------------------------- in bulk

WORKER_RUNS = 16
"""Runs a worker process takes at a time (and writes in one transaction, at most `group`)."""


def _can_fork() -> bool:
    """Worker processes are forked, so they start in milliseconds with everything imported;
    not while this process runs other threads (a fork copies none of them, and may copy a
    lock one of them holds), nor where fork is not available."""
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def _ingest_in_workers(
    engine: Engine,
    paths: Iterable[Path],
    tenant: str,
    jobs: int,
    group: int,
    report: Callable[[Sequence[_Outcome]], None],
) -> None:
    """`_ingest_batch` in `jobs` forked processes, each with its own connection, on chunks of
    runs taken in order; what became of each run is reported in order as chunks finish."""
    _prepare(engine)  # the schema, once, before the workers open the ledger
    url = engine.url.render_as_string(hide_password=False)
    size = min(group, WORKER_RUNS)
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_worker,
        initargs=(url,),
    ) as pool:
        running: deque[Future[list[_Outcome]]] = deque()
        try:
            for chunk in _chunks(paths, size):
                running.append(pool.submit(_ingest_in_worker, chunk, tenant, size))
                if len(running) >= 2 * jobs:
                    report(running.popleft().result())
            while running:
                report(running.popleft().result())
        finally:
            for future in running:
                future.cancel()


_worker_engine: Engine | None = None


def _start_worker(url: str) -> None:
    global _worker_engine
    # Parsed run files hold no reference cycles: collecting while thousands of their objects
    # are alive costs a third of reading them, and finds nothing.
    gc.freeze()
    gc.set_threshold(*_BULK_THRESHOLDS)
    from .db import connect

    _worker_engine = connect(url)


def _ingest_in_worker(paths: list[Path], tenant: str, group: int) -> list[_Outcome]:
    assert _worker_engine is not None
    return [
        (path, outcome if _pickles(outcome) else InputError(f"{type(outcome).__name__}: {outcome}"))
        for path, outcome in _ingest_batch(_worker_engine, paths, tenant, group)
    ]


def _pickles(outcome: RunIngest | Exception) -> bool:
    if isinstance(outcome, (RunIngest, InputError)):
        return True
    try:
        pickle.dumps(outcome)
    except Exception:
        return False
    return True


_BULK_THRESHOLDS = (100_000, 50, 100)


_collecting_rarely = 0
_collection_lock = threading.Lock()
_thresholds_before: tuple[int, int, int] = gc.get_threshold()


@contextmanager
def few_collections(rarely: bool = True) -> Iterator[None]:
    """While reading and recording runs, the cyclic garbage collector runs rarely: parsed run
    files hold no reference cycles, and collecting while thousands of their objects are alive
    (in a process whose heap is large, as a workflow's is, each full collection walks all of
    it) costs a third of reading them and finds nothing. Threads may nest this: the
    thresholds come back when the last one leaves."""
    global _collecting_rarely, _thresholds_before
    if not rarely:
        yield
        return
    with _collection_lock:
        if _collecting_rarely == 0:
            _thresholds_before = gc.get_threshold()
            gc.set_threshold(*_BULK_THRESHOLDS)
        _collecting_rarely += 1
    try:
        yield
    finally:
        with _collection_lock:
            _collecting_rarely -= 1
            if _collecting_rarely == 0:
                gc.set_threshold(*_thresholds_before)


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


ATTEMPTS = 3
RETRY_SQLSTATES = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure


def worth_retrying(exc: sa.exc.DBAPIError) -> bool:
    """Whether a transaction that failed with `exc` was rolled back whole and may simply be
    tried again: PostgreSQL chose it to break a deadlock (or a serialisation conflict), or its
    connection was lost (a server restarted since the connection was last used; the pool then
    replaces every connection). A commit lost with its connection is tried again too: what
    records runs and queues them finds then what the first try wrote."""
    return bool(exc.connection_invalidated) or _sqlstate(exc) in RETRY_SQLSTATES


def _sqlstate(exc: sa.exc.DBAPIError) -> str | None:
    state = getattr(exc.orig, "sqlstate", None)
    return state if isinstance(state, str) else None


def _first_line(exc: sa.exc.DBAPIError) -> str:
    """The first line of what the database answered (its error's name when it said nothing)."""
    lines = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _recorded_content(conn: Connection, run_id: str) -> str | None:
    found = _lookup(conn, t.run, "content_sha256", "run_id", run_id)
    return None if found is None else str(found)


def _same_content(run: RunRows | _Fingerprint, recorded: str) -> None:
    if recorded != run.content_sha256:
        raise RunConflict(
            f"run {run.run_id} is already recorded with other content (content sha256 "
            f"{recorded[:16]}… recorded, {run.content_sha256[:16]}… here): a file of this run "
            "was changed after it was recorded; the ledger keeps what it recorded",
            file=run.path,
        )


class TableRows(NamedTuple):
    """Rows of one table: tuples of the values of `keys`, each as the driver takes it (JSON
    as text, a timestamp as the dialect binds it). Made where the run is read — in a worker
    process when many runs are recorded at once — and written where the ledger is."""

    table: str
    keys: tuple[str, ...]
    values: list[tuple[Any, ...]]


_TABLES: Mapping[str, sa.Table] = {table.name: table for table in t.metadata.sorted_tables}


def _bind(
    dialect: sa.Dialect,
    table: sa.Table,
    keys: tuple[str, ...],
    values: list[tuple[Any, ...]],
    bound: frozenset[str] = frozenset(),
) -> TableRows:
    """`values` with each column not in `bound` through its type's bind processing."""
    return TableRows(table.name, keys, _processed(values, _processors(dialect, table, keys, bound)))


def _bind_mappings(
    dialect: sa.Dialect, table: sa.Table, rows: Sequence[Mapping[str, Any]]
) -> TableRows:
    """`_bind` for rows given as mappings, each with the keys of the first."""
    if not rows:
        return TableRows(table.name, (), [])
    keys = tuple(rows[0])
    return _bind(dialect, table, keys, [tuple(row[k] for k in keys) for row in rows])


def _write_rows(conn: Connection, rows: TableRows) -> int:
    """INSERT rows bound by `_bind` (for the same dialect)."""
    if not rows.values:
        return 0
    table = _TABLES[rows.table]
    return _insert_rows(conn, table, rows.keys, rows.values, bound=frozenset(rows.keys))


@dataclass(frozen=True)
class _LibraryFile:
    """Where an asset version's file was when the run resolved it, as the manifest says."""

    relative: str
    root: str
    library: str
    name_version: str

    def where(self) -> tuple[Path | None, str]:
        """Its path (None when the manifest does not say) and the location the ledger
        records: a file URI, or its path in the library."""
        if not self.relative:
            return None, f"library:{self.name_version}"
        if not self.root:
            return None, f"library:{self.relative}"
        path = Path(self.root) / self.library / self.relative
        return path, path.as_uri() if path.is_absolute() else f"library:{self.relative}"


@dataclass(frozen=True)
class RunRows:
    """Every row a run adds to the ledger, made from its files alone; `write_rows` checks them
    against what the ledger holds (pinned asset versions, the manifest id) and inserts them."""

    run_id: str
    path: Path
    content_sha256: str
    shared: tuple[TableRows, ...]
    """Rows other runs may have written first (the scenario, a derived scenario version):
    inserted unless present."""
    assets: tuple[tuple[_AssetEntry, _LibraryFile], ...]
    manifest: TableRows
    manifest_sha256: str
    manifest_assets: TableRows
    owned: tuple[TableRows, ...]
    """The run's own rows, table by table in the order of their foreign keys."""


def run_rows(
    run: RunDirectory,
    *,
    dialect: sa.Dialect,
    tenant: str = DEFAULT_TENANT,
    now: datetime | None = None,
) -> RunRows:
    """The rows of `run` for a ledger of `dialect`. Pure: it reads no database (and no file
    but the run's own, already read). Raises DocumentError for a result layer that breaks
    its contract."""
    now = utc_now() if now is None else now
    scenario = run.scenario
    engine_name = _engine_name(run)
    shared: list[TableRows] = []
    if scenario.identity is not None:
        identity = scenario.identity
        shared.append(
            _bind_mappings(
                dialect,
                t.scenario,
                [
                    {
                        "scenario_id": identity.id,
                        "tenant_id": tenant,
                        "namespace": "default",
                        "name": identity.id,
                        "owner": identity.owner or UNKNOWN_OWNER,
                        "risk_level": identity.risk_level,
                        "created_at": now,
                    }
                ],
            )
        )
        recorded_version = run.manifest.get("scenarioVersion") or {}
        scenario_id = identity.id
        scenario_version = str(recorded_version.get("version") or identity.version)
        derived_from = recorded_version.get("derivedFrom")
        if isinstance(derived_from, str) and derived_from:
            # An audit condition that changed the design ran a version of its own (see
            # core.versions): its spec is this run's design, and nobody has reviewed it.
            spec, spec_sha256 = _derived_spec(run)
            shared.append(
                _bind_mappings(
                    dialect,
                    t.scenario_version,
                    [
                        {
                            "scenario_id": scenario_id,
                            "version": scenario_version,
                            "spec": spec,
                            "spec_sha256": spec_sha256,
                            "status": "draft",
                            "source": f"condition {run.result.condition} of an audit",
                            "derived_from": derived_from,
                            "created_by": "audit",
                            "created_at": now,
                        }
                    ],
                )
            )
    else:
        scenario_id = engine_name
        scenario_version = "sha256:" + str(run.manifest.get("scenarioSha256") or "")[:12]

    assets = _asset_entries(run, tenant)
    manifest_sha = run.identity.manifest_sha256
    manifest_id = _manifest_id(manifest_sha)
    seed = run.manifest.get("seed")
    manifest = _bind_mappings(
        dialect,
        t.manifest,
        [
            {
                "manifest_id": manifest_id,
                "tenant_id": tenant,
                "scenario_id": scenario_id,
                "scenario_version": scenario_version,
                "resolved": _resolved(run.manifest),
                "manifest_sha256": manifest_sha,
                "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                "created_at": now,
                "document": run.manifest,
            }
        ],
    )
    manifest_assets = _bind_mappings(
        dialect,
        t.manifest_asset,
        [
            {
                "manifest_id": manifest_id,
                "slot": e.slot,
                "asset_id": e.asset_id,
                "version": e.version,
                "content_sha256": e.sha,
            }
            for e, _ in sorted(assets, key=lambda pair: pair[0].slot)
        ],
    )

    result = run.result
    events = run.events
    started = wall_time(float(events[0]["wall"])) if events else None
    finished = [e for e in events if e["type"] == "run_finished"]
    ended = wall_time(float(finished[-1]["wall"])) if finished else None
    mode = scenario.execution.mode if scenario.execution is not None else "surrogate"
    trace = run.manifest.get("traceId")
    owned = [
        _bind_mappings(
            dialect,
            t.run,
            [
                {
                    "run_id": run.run_id,
                    "tenant_id": tenant,
                    "manifest_id": manifest_id,
                    "mode": mode,
                    "execution_status": result.status.execution,
                    "validity_status": result.status.validity,
                    "evidence_status": result.status.evidence,
                    "quality_ref": _quality_ref(run.path),
                    "started_at": started,
                    "ended_at": ended,
                    "terminal_reason": _terminal_reason(run),
                    "trace_id": trace
                    if isinstance(trace, str) and trace
                    else sha256_text("trace|" + run.run_id)[:32],
                    "created_at": now,
                    "condition_id": result.condition,
                    "replication": result.replication,
                    "seed_path": list(result.seed_path),
                    "engine": engine_name,
                    "result": run.result_doc,
                    "content_sha256": run.content_sha256,
                    "source_dir": str(run.path.resolve()),
                    "purpose": result.purpose,
                }
            ],
        ),
        event_rows(dialect, run.run_id, events, run.event_payloads),
    ]
    if run.records is not None:
        owned.append(record_rows(dialect, run.run_id, run.records, now, run.record_lines))
        plans, steps = _faults(run.run_id, run.records, now)
        owned.append(_bind_mappings(dialect, t.fault_plan, plans))
        owned.append(_bind_mappings(dialect, t.fault_record, steps))
    owned.extend(_task_and_session_rows(dialect, run))
    owned.extend(_layer_rows(dialect, run, now))
    return RunRows(
        run_id=run.run_id,
        path=run.path,
        content_sha256=run.content_sha256,
        shared=tuple(shared),
        assets=tuple(assets),
        manifest=manifest,
        manifest_sha256=manifest_sha,
        manifest_assets=manifest_assets,
        owned=tuple(rows for rows in owned if rows.values),
    )


_SPECS: dict[str, tuple[dict[str, Any], str]] = {}
"""scenario.json's sha256 → the design it holds and the design's sha256: every run of a
condition has the same scenario file, and the canonical hash of its design costs more than
writing a run's events."""


def _derived_spec(run: RunDirectory) -> tuple[dict[str, Any], str]:
    key = run.file_sha256.get(SCENARIO_FILE)
    if key is not None and key in _SPECS:
        return _SPECS[key]
    spec = design_document(run.scenario_doc)
    made = spec, design_sha256(spec)
    if key is not None:
        if len(_SPECS) >= 256:
            _SPECS.clear()
        _SPECS[key] = made
    return made


def _quality_ref(run_dir: Path) -> str | None:
    """The evaluation a run folder was judged in before it was recorded (see
    ledger/evaluations.py); None when there is none, or one that no longer fits the run (the
    run is recorded all the same, unjudged)."""
    try:
        return evaluation_quality_ref(run_dir)
    except InputError:
        return None


def _manifest_id(manifest_sha256: str) -> str:
    return "manifest-" + manifest_sha256[:24]


def write_rows(conn: Connection, rows: RunRows, *, tenant: str = DEFAULT_TENANT) -> dict[str, int]:
    """Insert the rows of a run inside the caller's transaction, after checking its asset
    versions against their pins and its manifest id; returns rows per table. The caller has
    checked that the run is not recorded yet."""
    for shared in rows.shared:
        _insert_rows(
            conn,
            _TABLES[shared.table],
            shared.keys,
            shared.values,
            ignore_duplicates=True,
            bound=frozenset(shared.keys),
        )
    _pin_asset_versions(conn, rows, tenant)
    manifest = rows.manifest
    _insert_rows(
        conn,
        t.manifest,
        manifest.keys,
        manifest.values,
        ignore_duplicates=True,
        bound=frozenset(manifest.keys),
    )
    _check_manifest(conn, _manifest_id(rows.manifest_sha256), rows.manifest_sha256, rows.path)
    if rows.manifest_assets.values:
        _insert_rows(
            conn,
            t.manifest_asset,
            rows.manifest_assets.keys,
            rows.manifest_assets.values,
            ignore_duplicates=True,
            bound=frozenset(rows.manifest_assets.keys),
        )
    return {owned.table: _write_rows(conn, owned) for owned in rows.owned}


def write_run(
    conn: Connection, run: RunDirectory, *, tenant: str = DEFAULT_TENANT
) -> dict[str, int]:
    """Insert every row of `run` inside the caller's transaction; returns rows per table.
    The caller has checked that the run is not recorded yet."""
    return write_rows(conn, run_rows(run, dialect=conn.dialect, tenant=tenant), tenant=tenant)


def _task_and_session_rows(dialect: sa.Dialect, run: RunDirectory) -> list[TableRows]:
    """An agent-testbed run's task (the user's goal) and its conversation session."""
    scenario = run.scenario
    if scenario.user is None:
        return []
    channels = scenario.interaction.channels if scenario.interaction is not None else []
    return [
        _bind_mappings(
            dialect,
            t.run_task,
            [
                {
                    "run_id": run.run_id,
                    "task_key": "goal",
                    "sut_task_id": None,
                    "goal": {"goal": scenario.user.goal},
                    "outcome": None,
                }
            ],
        ),
        _bind_mappings(
            dialect,
            t.run_session,
            [
                {
                    "run_id": run.run_id,
                    "task_key": "goal",
                    "session_key": "conversation",
                    "sut_session_id": None,
                    "transport": channels[0] if channels else "chat-completions",
                }
            ],
        ),
    ]


def _engine_name(run: RunDirectory) -> str:
    """What ran the scenario: the world's name, or `external:<program>`, the program being the
    last file of the simulator's command (the script an interpreter runs), else the command."""
    if run.scenario.world is not None:
        return run.scenario.world
    simulator = run.scenario.simulator
    if simulator is not None and simulator.name is not None:
        return "external:" + simulator.name  # the operator's simulator, by the name it declared
    command = simulator.command or [] if simulator is not None else []
    files = run.manifest.get("assets") or {}
    named = [arg for arg in command if arg in files]
    program = named[-1] if named else (command[0] if command else "simulator")
    return "external:" + Path(program).name


def _resolved(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Every exact version and sha256 the run used: the testbed's resolved assets by slot, an
    external simulator's files by name."""
    slots = manifest.get("resolved") or {}
    if slots:
        return {slot: dict(entry) for slot, entry in sorted(slots.items())}
    return {
        f"file:{name}": {"name": name, "sha256": sha}
        for name, sha in sorted((manifest.get("assets") or {}).items())
    }


def _check_manifest(conn: Connection, manifest_id: str, sha: str, run_dir: Path) -> None:
    recorded = _lookup(conn, t.manifest, "manifest_sha256", "manifest_id", manifest_id)
    if recorded is None:  # inserted (or found) just before, in this transaction
        raise AssertionError(f"manifest {manifest_id} is not in the ledger")
    if recorded != sha:  # two manifests whose hashes share their first 96 bits
        raise RunConflict(
            f"manifest id {manifest_id} is recorded for another manifest ({recorded})",
            file=run_dir / "manifest.json",
        )


def _asset_entries(run: RunDirectory, tenant: str) -> list[tuple[_AssetEntry, _LibraryFile]]:
    """Every asset version the manifest resolved, by slot, with where its file was."""
    resolved = run.manifest.get("resolved") or {}
    if not isinstance(resolved, dict):
        raise DocumentError("'resolved' is not an object", file=run.path / "manifest.json")
    entries = []
    for slot, entry in sorted(resolved.items()):
        asset = _asset_entry(run, slot, entry, tenant)
        entries.append((asset, _library_location(run, asset.entry)))
    return entries


def _pin_asset_versions(conn: Connection, rows: RunRows, tenant: str) -> None:
    """Register every asset version the run resolved, pinning its sha256 the first time.
    Refuses a version seen before with other content. Only a version seen for the first time
    costs more than one query."""
    if not rows.assets:
        return
    pinned = _pinned(conn, [e.asset_id for e, _ in rows.assets])
    now = utc_now()
    for e, library in rows.assets:
        if (e.asset_id, e.version) in pinned:
            continue
        path, location = library.where()
        header = _library_header(path, e.sha)
        _insert_ignoring_duplicates(
            conn,
            t.asset,
            [
                {
                    "asset_id": e.asset_id,
                    "tenant_id": tenant,
                    "asset_type": e.kind,
                    "name": e.name,
                    "owner": header.get("owner") or UNKNOWN_OWNER,
                }
            ],
        )
        _insert_ignoring_duplicates(
            conn,
            t.asset_version,
            [
                {
                    "asset_id": e.asset_id,
                    "version": e.version,
                    "content_ref": location,
                    "content_sha256": e.sha,
                    "status": header.get("status") or "draft",
                    "created_at": now,
                }
            ],
        )
        # Another writer may have pinned it first: what is in the ledger now is the pin.
        pinned.update(_pinned(conn, [e.asset_id]))
    for e, _ in rows.assets:
        recorded = pinned[(e.asset_id, e.version)]
        if recorded != e.sha:
            raise AssetVersionChanged(
                f"asset_version_changed: {e.name}@{e.version} "
                f"({e.entry.get('file') or 'its library file'}) is pinned in the ledger with "
                f"sha256 {recorded}, but this run used {e.sha}: its content changed without a "
                "new version",
                file=rows.path / "manifest.json",
                path=f"resolved.{e.slot}",
            )


@dataclass(frozen=True)
class _AssetEntry:
    slot: str
    asset_id: str
    name: str
    version: str
    sha: str
    kind: str
    entry: Mapping[str, Any]


def _asset_entry(run: RunDirectory, slot: str, entry: Any, tenant: str) -> _AssetEntry:
    where = f"resolved.{slot}"
    manifest = os.path.join(run.path, "manifest.json")  # for an error: cheaper than a Path
    if not isinstance(entry, dict):
        raise DocumentError("expected an object", file=manifest, path=where)
    name, version, sha, kind = (entry.get(k) for k in ("name", "version", "sha256", "kind"))
    if not (
        isinstance(name, str)
        and isinstance(version, str)
        and isinstance(sha, str)
        and isinstance(kind, str)
        and all((name, version, sha, kind))
    ):
        raise DocumentError(
            "an asset entry needs name, version, sha256 and kind", file=manifest, path=where
        )
    if kind not in t.ASSET_TYPES:
        raise DocumentError(
            f"unknown asset kind {kind!r}",
            file=manifest,
            path=f"{where}.kind",
            expected=", ".join(t.ASSET_TYPES),
        )
    return _AssetEntry(slot, f"{tenant}:{kind}:{name}", name, version, sha, kind, entry)


def _pinned(conn: Connection, asset_ids: Sequence[str]) -> dict[tuple[str, str], str]:
    """(asset id, version) → the sha256 the ledger pinned, for every version of these assets."""
    wanted = sorted(set(asset_ids))
    if not wanted:
        return {}
    sql = _pinned_statement(conn.dialect, _schema(conn, t.asset_version), len(wanted))
    return {(a, v): sha for a, v, sha in conn.exec_driver_sql(sql, tuple(wanted))}


@functools.lru_cache(maxsize=64)
def _pinned_statement(dialect: sa.Dialect, schema: str | None, count: int) -> str:
    marks = ", ".join(_mark(dialect) for _ in range(count))
    return (
        f"SELECT asset_id, version, content_sha256 FROM {_name(dialect, t.asset_version, schema)} "
        f"WHERE asset_id IN ({marks})"
    )


def _library_location(run: RunDirectory, entry: Mapping[str, Any]) -> _LibraryFile:
    """Where the asset's file was when the run resolved it (worked out only for a version
    the ledger has not seen: see `_LibraryFile.where`)."""
    root = run.manifest.get("assetRoot")
    library = run.scenario.provenance.asset_library if run.scenario.provenance else "assets"
    return _LibraryFile(
        str(entry.get("file") or ""),
        root if isinstance(root, str) else "",
        library,
        f"{entry.get('name')}@{entry.get('version')}",
    )


def _library_header(path: Path | None, sha: str) -> dict[str, str]:
    """The asset file's header (owner, status) when the file is still where the run found it
    with the content it had."""
    if path is None:
        return {}
    try:
        if not path.is_file() or sha256_bytes(path.read_bytes()) != sha:
            return {}
        data = load_document(path).data
    except (OSError, SimreportError):
        return {}
    header: dict[str, str] = {}
    if isinstance(data, dict):
        owner, status = data.get("owner"), data.get("status")
        if isinstance(owner, str) and owner:
            header["owner"] = owner
        if isinstance(status, str) and status in t.REVIEW_STATUSES:
            header["status"] = status
    return header


def _terminal_reason(run: RunDirectory) -> str:
    failure = run.result.failure
    if failure is not None:
        return f"{failure.type} in {failure.stage}: {failure.message}"
    for record in reversed(run.records or []):
        if record["type"] == "conversation.closed":
            closed_by = record["payload"].get("closedBy")
            if isinstance(closed_by, str) and closed_by:
                return closed_by
    return run.result.status.execution


EVENT_COLUMNS = (
    "run_id",
    "seq",
    "event_type",
    "actor",
    "payload",
    "logical_time",
    "wall_time",
    "trace_id",
    "span_id",
    "actor_ref",
    "step",
)


def event_rows(
    dialect: sa.Dialect,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    payloads: Sequence[str | None] = (),
) -> TableRows:
    """The rows of the run's events; `payloads`, the strict JSON text each payload was read
    from (`RunDirectory.event_payloads`; None where it is not known), spares encoding them
    again. Thousands of rows a run: bound here, row by row, in one loop, so they go to the
    driver as they are.

    `actor` is the seed's actor kind; `actor_ref` the exact actor where the kind alone does
    not say it (an agent index, `3`, or an actor name outside the four kinds)."""
    process = _processor(dialect, t.event, "wall_time")
    timestamp: Callable[[float], Any]
    if process is _datetime_text:
        timestamp = epoch_text
    else:
        process = process or _unchanged
        timestamp = lambda seconds: process(wall_time(seconds))  # noqa: E731
    harness, actors = HARNESS_EVENTS, _ACTOR_KINDS
    texts = payloads or [None] * len(events)
    rows = []
    for event, text in zip(events, texts, strict=True):
        payload = event["payload"]
        actor = event.get("actor")
        if actor is None:
            kind, ref = ("harness" if event["type"] in harness else "environment"), None
        elif type(actor) is str and actor in actors:
            kind, ref = actor, None
        else:
            kind, ref = "agent", str(actor)
        logical, trace, span = (
            payload.get("logicalMs"),
            payload.get("traceId"),
            payload.get("spanId"),
        )
        step = event.get("t")
        rows.append(
            (
                run_id,
                event["seq"],
                event["type"],
                kind,
                text if text is not None else _json_text(payload),
                logical if type(logical) is int else None,
                timestamp(float(event["wall"])),
                trace if type(trace) is str else None,
                span if type(span) is str else None,
                ref,
                step if type(step) is int else None,
            )
        )
    return _bind(dialect, t.event, EVENT_COLUMNS, rows, bound=_EVENT_BOUND)


_ACTOR_KINDS = frozenset(t.ACTORS)


def insert_events(
    conn: Connection,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    payloads: Sequence[str | None] = (),
) -> int:
    """INSERT the run's events (see `event_rows`)."""
    return _write_rows(conn, event_rows(conn.dialect, run_id, events, payloads))


_EVENT_BOUND = frozenset({"payload", "wall_time"})


def _first_int(*values: Any) -> Any:
    """The first of `values` that is an integer (the last one when none is)."""
    for value in values:
        if _is_int(value):
            return value
    return values[-1]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


RECORD_COLUMNS = (
    "record_id",
    "run_id",
    "record_type",
    "ref",
    "sha256",
    "redaction",
    "created_at",
    "seq",
    "kind",
    "actor",
    "logical_ms",
    "body",
)


def record_rows(
    dialect: sa.Dialect,
    run_id: str,
    records: Sequence[Mapping[str, Any]],
    now: datetime,
    lines: Sequence[str] | None = None,
) -> TableRows:
    """The rows of the run's records; `lines`, the text each was parsed from, is stored as its
    body."""
    rows = []
    for index, record in enumerate(records):
        clock = record.get("clock")
        written = iso_time(clock.get("wall")) if isinstance(clock, dict) else None
        logical = record.get("logicalMs")
        actor = record.get("actor")
        redaction = record.get("redaction")
        rows.append(
            (
                f"{run_id}/{record['recordId']}",
                run_id,
                record["recordType"],
                f"records.jsonl#{record['recordId']}",
                record["sha256"],
                redaction if type(redaction) is str and redaction else "none",
                written or now,
                record["seq"],
                record["type"],
                actor if isinstance(actor, str) else None,
                logical if _is_int(logical) else None,
                _json_as_read(lines[index] if lines else None, record),
            )
        )
    return _bind(dialect, t.record, RECORD_COLUMNS, rows, bound=_BODY)


_BODY = frozenset({"body"})


def _faults(
    run_id: str, records: Sequence[Mapping[str, Any]], now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Fault plans and the four steps (planned → armed → hit → recovered, or failed) from the
    run's `fault.*` records. A stage seen more than once (several hits) is one row listing
    every record of it."""
    plans: list[dict[str, Any]] = []
    stages: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for record in records:
        kind = str(record["type"])
        if not kind.startswith("fault."):
            continue
        stage = kind[len("fault.") :]
        payload = record["payload"]
        fault_id = payload.get("faultId")
        if stage not in t.FAULT_STAGES or not isinstance(fault_id, str):
            continue
        stages.setdefault((fault_id, stage), []).append(record)
        if stage == "planned":
            logical = record.get("logicalMs")
            plans.append(
                {
                    "run_id": run_id,
                    "fault_id": fault_id,
                    "target": str(payload.get("target", "")),
                    "fault_type": str(payload.get("effect", "")),
                    "params": {
                        k: v for k, v in payload.items() if k not in ("faultId", "target", "effect")
                    },
                    # When the window opens in logical milliseconds, if the plan says so, else
                    # from when the plan is in force (the call or turn that opens it is in
                    # params.at); how long after it opened it closes, if timed.
                    "at_logical_ms": _first_int(payload.get("atLogicalMs"), logical, 0),
                    "recover_after_ms": _first_int(payload.get("recoverAfterMs"), None),
                }
            )
    steps = []
    for (fault_id, stage), found in stages.items():
        clock = found[0].get("clock")
        observed = iso_time(clock.get("wall")) if isinstance(clock, dict) else None
        steps.append(
            {
                "run_id": run_id,
                "fault_id": fault_id,
                "stage": stage,
                "detail": {
                    "recordIds": [r["recordId"] for r in found],
                    "payloads": [r["payload"] for r in found],
                },
                "observed_at": observed or now,
            }
        )
    return plans, steps


def _layer_rows(dialect: sa.Dialect, run: RunDirectory, now: datetime) -> list[TableRows]:
    """Observations (and the facts that could not be extracted), evidence and completeness."""
    rows: list[TableRows] = []
    run_id = run.run_id
    if run.observations is not None:
        extractor = str(run.observations.get("extractor") or "")
        cited = _citing_criteria(run.evidence)
        rows.append(
            _bind_mappings(
                dialect,
                t.observation,
                [
                    {
                        "observation_id": f"{run_id}/{item['observationId']}",
                        "run_id": run_id,
                        "criterion_key": _one(cited.get(item["observationId"])),
                        "fact_key": item["factKey"],
                        "fact_value": item["value"],
                        "derived_from": item["derivedFrom"],
                        "extractor": str(item.get("extractor") or extractor),
                        "created_at": now,
                    }
                    for item in run.observations["observations"]
                ],
            )
        )
        rows.append(
            _bind_mappings(
                dialect,
                t.observation_missing,
                [
                    {
                        "run_id": run_id,
                        "fact_key": item["factKey"],
                        "reason": str(item.get("reason") or ""),
                        "extractor": extractor,
                    }
                    for item in run.observations.get("missing", [])
                ],
            )
        )
    if run.evidence is not None:
        rows.append(
            _bind_mappings(
                dialect,
                t.evidence,
                [
                    {
                        "evidence_id": f"{run_id}/{criterion}",
                        "run_id": run_id,
                        "criterion_key": criterion,
                        "observation_ids": list(item.get("observationIds") or []),
                        "evidence_refs": list(item.get("evidenceRefs") or []),
                        "created_at": now,
                        "sufficient": item.get("sufficient")
                        if isinstance(item.get("sufficient"), bool)
                        else None,
                        "detail": {
                            k: v
                            for k, v in item.items()
                            if k not in ("observationIds", "evidenceRefs", "sufficient")
                        },
                    }
                    for criterion, item in sorted(run.evidence["criteria"].items())
                ],
            )
        )
    if run.completeness is not None:
        checks = run.completeness["checks"]
        for key, item in checks.items():
            if item["status"] not in t.COMPLETENESS_STATUSES:
                raise DocumentError(
                    f"unknown completeness status {item['status']!r}",
                    file=run.path / "completeness.json",
                    path=f"checks.{key}.status",
                    expected=", ".join(t.COMPLETENESS_STATUSES),
                )
        rows.append(
            _bind_mappings(
                dialect,
                t.completeness,
                [
                    {
                        "run_id": run_id,
                        "check_key": key,
                        "status": item["status"],
                        "detail": item.get("detail"),
                    }
                    for key, item in sorted(checks.items())
                ],
            )
        )
    return rows


def _citing_criteria(evidence: Mapping[str, Any] | None) -> dict[str, set[str]]:
    """observation id → the criteria whose evidence cites it."""
    cited: dict[str, set[str]] = {}
    for criterion, item in ((evidence or {}).get("criteria") or {}).items():
        for observation_id in item.get("observationIds") or []:
            if isinstance(observation_id, str):
                cited.setdefault(observation_id, set()).add(criterion)
    return cited


def _one(criteria: set[str] | None) -> str | None:
    """An observation's `criterion_key`: the criterion it is evidence for, when it is evidence
    for one (for several, the evidence rows name each; for none, it is a plain fact)."""
    return next(iter(criteria)) if criteria is not None and len(criteria) == 1 else None


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
    _prepare(engine)
    audit_path = Path(audit_dir) / "audit.json"
    try:
        raw = audit_path.read_bytes()
    except FileNotFoundError:
        raise DocumentError(
            "file not found", file=audit_path, expected="an analysed audit"
        ) from None
    try:
        audit = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocumentError(f"not valid JSON: {exc}", file=audit_path) from None
    build = _build_row(audit, audit_path, sha256_bytes(raw))
    conditions = _build_conditions(audit, audit_path, build["build_id"])
    dirs = {row["condition_id"]: dir_ for row, dir_ in conditions}
    build_runs: list[dict[str, Any]] = []
    for index, entry in enumerate(audit.get("runs") or []):
        if not isinstance(entry, dict):
            raise DocumentError("expected an object", file=audit_path, path=f"runs.{index}")
        condition, replication = entry.get("condition"), entry.get("replication")
        if condition not in dirs or not _is_int(replication):
            raise DocumentError(
                "a run of an unknown condition, or without a replication",
                file=audit_path,
                path=f"runs.{index}",
            )
        run_dir = Path(audit_dir) / "runs" / str(dirs[condition]) / str(replication)
        if not is_run_dir(run_dir):
            continue  # the run's folder is gone: the build is recorded without it
        identity = run_identity(run_dir)
        build_runs.append(
            {
                "build_id": build["build_id"],
                "run_id": identity.run_id,
                "condition_id": condition,
                "replication": replication,
                "used": bool(entry.get("used", False)),
                "_dir": run_dir,
            }
        )
    with reading(engine) as conn:
        known = set(
            conn.execute(
                sa.select(t.run.c.run_id).where(
                    t.run.c.run_id.in_([r["run_id"] for r in build_runs])
                )
            ).scalars()
        )
    for row in build_runs:
        if row["run_id"] not in known:
            done = ingest_run(engine, row["_dir"], tenant=tenant)
            if on_run is not None:
                on_run(done)
    plan_row = {
        "plan_id": build["plan_id"],
        "tenant_id": tenant,
        "title": _text(audit["plan"].get("title")),
        "file": _text((audit["plan"].get("identity") or {}).get("file")),
        "created_at": utc_now(),
    }
    build_id = build["build_id"]
    present = BuildIngest(build_id, build["plan_id"], "present", Path(audit_dir), len(build_runs))
    try:
        with engine.begin() as conn:
            if _build_recorded(conn, build_id):
                return present
            _insert_ignoring_duplicates(conn, t.plan, [plan_row])
            build["audit_dir"] = str(Path(audit_dir).resolve())
            build["recorded_at"] = utc_now()
            _insert(conn, t.build, [build])
            _insert(conn, t.build_condition, [row for row, _ in conditions])
            _insert(
                conn,
                t.build_run,
                [{k: v for k, v in row.items() if k != "_dir"} for row in build_runs],
            )
    except sa.exc.IntegrityError:
        # Another writer recorded the same build between the check and the insert.
        with reading(engine) as conn:
            if _build_recorded(conn, build_id):
                return present
        raise
    return BuildIngest(build_id, build["plan_id"], "recorded", Path(audit_dir), len(build_runs))


def _build_recorded(conn: Connection, build_id: str) -> bool:
    found = conn.execute(sa.select(t.build.c.build_id).where(t.build.c.build_id == build_id))
    return found.first() is not None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _build_row(audit: Any, path: Path, sha: str) -> dict[str, Any]:
    if not isinstance(audit, dict) or not isinstance(audit.get("plan"), dict):
        raise DocumentError("not an audit.json: no plan", file=path, expected="an audit.json")
    plan = audit["plan"]
    plan_id = plan.get("id") or (plan.get("identity") or {}).get("id")
    if not isinstance(plan_id, str) or not plan_id:
        raise DocumentError("the plan has no id", file=path, path="plan.id")
    if not isinstance(plan.get("hash"), str):
        raise DocumentError("the plan has no hash", file=path, path="plan.hash")
    grade = audit.get("grade") or {}
    if grade.get("grade") not in t.GRADES:
        raise DocumentError(
            "unknown grade", file=path, path="grade.grade", expected=", ".join(t.GRADES)
        )
    provenance = audit.get("provenance") or {}
    return {
        "build_id": "build-" + sha[:24],
        "plan_id": plan_id,
        "plan_hash": plan["hash"],
        "plan_identity_hash": _text(plan.get("identityHash")),
        "kernel_fingerprints": list(provenance.get("kernelFingerprints") or []),
        "simreport_version": str((audit.get("software") or {}).get("simreport") or "unknown"),
        "audit_sha256": sha,
        "grade": grade["grade"],
        "grade_reasons": list(grade.get("reasons") or []),
        "summary": dict(audit.get("summary") or {}),
    }


def _build_conditions(
    audit: Mapping[str, Any], path: Path, build_id: str
) -> list[tuple[dict[str, Any], str]]:
    provenance = (audit.get("provenance") or {}).get("conditions") or {}
    found = []
    for position, cond in enumerate(audit.get("conditions") or []):
        if not isinstance(cond, dict) or not isinstance(cond.get("id"), str):
            raise DocumentError(
                "a condition without an id", file=path, path=f"conditions.{position}"
            )
        cid = cond["id"]
        row = {
            "build_id": build_id,
            "condition_id": cid,
            "position": position,
            "label": _text(cond.get("label")),
            "axis": _text(cond.get("axis")),
            "levels": dict(cond.get("levels") or {}),
            "model": _text(cond.get("model")),
            "is_base": bool(cond.get("isBase", False)),
            "identical_to_base": bool(cond.get("identicalToBase", False)),
            "scenario_hash": _text((provenance.get(cid) or {}).get("scenarioHash")),
            "runs": int(cond.get("runs") or 0),
            "succeeded": int(cond.get("succeeded") or 0),
            "complete": int(cond.get("complete") or 0),
            "excluded": int(cond.get("excluded") or 0),
            "means": dict(cond.get("means") or {}),
        }
        found.append((row, str(cond.get("dir") or cid)))
    return found


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
