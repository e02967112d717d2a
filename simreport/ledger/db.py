"""Where the ledger lives and how simreport talks to it.

A ledger is a database URL: SQLite (`sqlite:///results/ledger.sqlite`, the default beside the
results) or PostgreSQL through psycopg 3 (`postgresql+psycopg://user@host/db`, or `postgresql://`,
read the same way). SQLite runs in WAL mode with a busy timeout and foreign keys on, and every
write transaction takes the write lock when it begins (BEGIN IMMEDIATE), so parallel writers wait
for each other instead of failing half-way; on PostgreSQL the tables live in the schema `sim`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Engine, make_url

from ..core.redaction import redact_secrets, redact_url, url_secrets
from .errors import LedgerUnavailable
from .location import _SQLITE_DRIVERS, normalise_url
from .tables import SCHEMA

BUSY_TIMEOUT_SECONDS: Final = 60.0
"""How long a SQLite writer waits for another writer's transaction to end before giving up."""

CACHE_KIB: Final = 32 * 1024
"""SQLite's page cache per connection, in KiB."""

LOCK_POLL_SECONDS: Final = 1.0
"""How long a SQLite writer tries for the write lock in short steps before it waits with
SQLite's own busy handler (for BUSY_TIMEOUT_SECONDS more)."""
LOCK_POLL_FIRST: Final = 0.0002
LOCK_POLL_LONGEST: Final = 0.002
"""The first and the longest pause between two tries (seconds)."""

READ_ONLY: Final = "simreport_read_only"
"""Execution option marking a connection that only reads (SQLite: a deferred transaction)."""

IDLE_PING_SECONDS: Final = 1.0
"""A PostgreSQL connection that waited in the pool longer than this is pinged before use (one
that was just used is not: under load every checkout would otherwise cost a round trip)."""


def is_sqlite(url_or_engine: str | Engine | Connection) -> bool:
    if isinstance(url_or_engine, str):
        return make_url(url_or_engine).drivername in _SQLITE_DRIVERS
    return url_or_engine.dialect.name == "sqlite"


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL (None for other databases)."""
    parsed = make_url(url)
    if parsed.drivername not in _SQLITE_DRIVERS or not parsed.database:
        return None
    return Path(parsed.database)


def _dumps(value: Any) -> str:
    # Strict JSON: a NaN that reached a document is a bug to report, not text to store.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def connect(url: str, *, must_exist: bool = False) -> Engine:
    """An Engine for the ledger at `url`, checked by connecting once. `must_exist`: refuse a
    SQLite file that is not there yet (readers), instead of creating it (writers)."""
    url = normalise_url(url)
    shown = redact_url(url)
    if is_sqlite(url):
        path = sqlite_path(url)
        assert path is not None
        if must_exist and not path.is_file():
            raise LedgerUnavailable(
                f"there is no ledger at {shown}",
                expected="a ledger written by `simreport ledger ingest`; --ledger names another",
            )
        if not must_exist:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LedgerUnavailable(
                    f"cannot create the folder of the ledger {shown}: {exc.strerror}"
                ) from None
        engine = sa.create_engine(
            url,
            connect_args={"timeout": BUSY_TIMEOUT_SECONDS},
            execution_options={"schema_translate_map": {SCHEMA: None}},
            json_serializer=_dumps,
        )
        _sqlite_pragmas(engine)
    else:
        # LIFO: the connections in use stay few and busy, the others idle (and get pinged).
        engine = sa.create_engine(url, pool_use_lifo=True, json_serializer=_dumps)
        _ping_when_idle(engine)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except sa.exc.DBAPIError as exc:
        engine.dispose()
        reason = redact_secrets(str(exc.orig).strip().splitlines()[0], url_secrets(url))
        raise LedgerUnavailable(f"cannot reach the ledger at {shown}: {reason}") from None
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before use when it has been idle longer than IDLE_PING_SECONDS,
    and replace it when the server does not answer (a restarted server, a dropped connection).
    One used within the last second was in use while the server answered; should the server
    have gone since, its first statement fails with a disconnection, which replaces every
    pooled connection: writers try their transaction again (`worth_retrying`), and a
    read fails once (the run service answers 503, which its clients retry)."""
    import time

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.pop("idle_since", None)
        if idle_since is None or time.monotonic() - idle_since <= IDLE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)  # outside any transaction
        except engine.dialect.loaded_dbapi.Error:
            raise sa.exc.DisconnectionError("the ledger's connection was lost") from None


def _sqlite_pragmas(engine: Engine) -> None:
    timeout_ms = int(BUSY_TIMEOUT_SECONDS * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # simreport begins transactions itself (below), so the driver must not.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")
        _wal_mode(cursor)
        # In WAL mode NORMAL loses no committed transaction when a process dies; only a power
        # cut may lose the last ones.
        cursor.execute("PRAGMA synchronous = NORMAL")
        # Runs are keyed by hashes, so their rows go all over the indexes: a page cache of
        # 32 MiB (taken as it fills) keeps a growing ledger's index pages at hand.
        cursor.execute(f"PRAGMA cache_size = {-CACHE_KIB}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A deferred transaction that reads first and writes later cannot wait for the lock
        # (SQLite answers "database is locked" at once), so writers take it at BEGIN.
        read_only = conn.get_execution_options().get(READ_ONLY, False)
        if read_only:
            conn.exec_driver_sql("BEGIN DEFERRED")
            return
        if not _begin_immediate_soon(conn.connection.dbapi_connection, timeout_ms):
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # SQLite's own wait from here on


def _begin_immediate_soon(dbapi_connection: Any, timeout_ms: int) -> bool:
    """Try BEGIN IMMEDIATE every fraction of a millisecond, backing off to a few, for up to
    LOCK_POLL_SECONDS; False when the write lock stayed taken that long. SQLite's own busy
    handler sleeps 1, 2, 5, 10 … 100 ms between tries, so a writer waiting on a transaction
    of a few milliseconds (a run service's writes) often slept long after it had ended."""
    import sqlite3
    import time

    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA busy_timeout = 0")
        try:
            deadline = time.monotonic() + LOCK_POLL_SECONDS
            pause = LOCK_POLL_FIRST
            while True:
                try:
                    cursor.execute("BEGIN IMMEDIATE")
                    return True
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc):
                        return False  # BEGIN IMMEDIATE again, through SQLAlchemy, says why
                if time.monotonic() > deadline:
                    return False
                time.sleep(pause)
                pause = min(2 * pause, LOCK_POLL_LONGEST)
        finally:
            cursor.execute(f"PRAGMA busy_timeout = {timeout_ms}")
    finally:
        cursor.close()


def _wal_mode(cursor: Any) -> None:
    """Switch to WAL, waiting for other writers: SQLite answers "database is locked" at once
    (without its busy handler) while another connection creates the file or holds its lock,
    as happens when parallel jobs open a new ledger together."""
    import sqlite3
    import time

    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def reading(engine: Engine) -> Iterator[Connection]:
    """A connection for queries only: on SQLite it never takes the write lock; on PostgreSQL it
    runs each query on its own (autocommit), without the BEGIN and ROLLBACK round trips of a
    transaction, which at the default isolation (read committed) would give each query its own
    snapshot all the same."""
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT", **{READ_ONLY: True})
        else:
            conn.execution_options(**{READ_ONLY: True})
        yield conn


DISK_FULL: Final = "disk_full"
UNAVAILABLE: Final = "unavailable"
_DISK_FULL_SQLSTATE: Final = "53100"
_SQLITE_FULL: Final = 13
_NO_SPACE: Final = ("no space left on device", "database or disk is full")


def unavailability(exc: BaseException) -> str | None:
    """Why the ledger could not take a statement for now, when `exc` says so: DISK_FULL when
    its disk is full (SQLite's SQLITE_FULL, PostgreSQL's SQLSTATE 53100 or "No space left on
    device"), UNAVAILABLE when it did not answer (connection refused or lost, the server
    shutting down or starting, SQLite's lock still taken when its wait ran out). None for an
    answer that asking again will not change (a constraint, a malformed statement)."""
    if not isinstance(exc, sa.exc.DBAPIError):
        return None
    orig = exc.orig
    if getattr(orig, "sqlite_errorcode", None) == _SQLITE_FULL:
        return DISK_FULL
    if getattr(orig, "sqlstate", None) == _DISK_FULL_SQLSTATE:
        return DISK_FULL
    if any(words in str(orig).lower() for words in _NO_SPACE):
        return DISK_FULL
    if exc.connection_invalidated or isinstance(
        exc, sa.exc.OperationalError | sa.exc.InterfaceError
    ):
        return UNAVAILABLE
    return None


ATTEMPTS: Final = 3
"""How many times a writer tries a transaction that `worth_retrying` says may be tried again."""
RETRY_SQLSTATES: Final = frozenset({"40P01", "40001"})  # deadlock_detected, serialization_failure


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


def database_message(exc: sa.exc.DBAPIError) -> str:
    """The first line of what the database answered (its error's name when it said nothing)."""
    lines = str(exc.orig if exc.orig is not None else exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def as_utc(value: datetime | None) -> datetime | None:
    """A timestamp read from the ledger, with its zone: SQLite gives UTC without one."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utc_text(value: datetime | None) -> str | None:
    """A timestamp read from the ledger as its readers show it: ISO 8601 in UTC, with `Z`."""
    moment = as_utc(value)
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def utc_now() -> datetime:
    return datetime.now(UTC)


def describe(url: str) -> str:
    """The URL as it may be shown: credentials redacted."""
    return redact_url(url)


# --------------------------------------------------------------------------- insert if new


class _SqliteNothing(sqlite.dml.OnConflictDoNothing):
    # Target-less DO NOTHING renders the same for every statement, so it adds nothing to the
    # cache key (SQLAlchemy leaves ON CONFLICT clauses out of its statement cache).
    _traverse_internals = []  # noqa: RUF012 (SQLAlchemy reads it from the class)


class _PostgresNothing(postgresql.dml.OnConflictDoNothing):
    _traverse_internals = []  # noqa: RUF012 (SQLAlchemy reads it from the class)


class _SqliteInsert(sqlite.Insert):
    inherit_cache = True


class _PostgresInsert(postgresql.Insert):
    inherit_cache = True


@functools.cache
def _insert_new_statement(dialect: str, table: sa.Table) -> sa.Insert:
    """INSERT INTO table … ON CONFLICT DO NOTHING RETURNING its primary key, built once and
    compiled once per engine (the dialects' own ON CONFLICT statements are compiled anew on
    every execution)."""
    insert: sa.Insert
    if dialect == "postgresql":
        insert = _PostgresInsert(table)
        insert._post_values_clause = _PostgresNothing()
    else:
        insert = _SqliteInsert(table)
        insert._post_values_clause = _SqliteNothing()
    return insert.returning(*table.primary_key)


def insert_new(conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
    """INSERT … ON CONFLICT DO NOTHING; True when the row is new. A row another writer
    recorded first stays as it was (on PostgreSQL this waits for that writer to commit).
    RETURNING says whether it was written: psycopg reports no row count for an INSERT."""
    statement = _insert_new_statement(conn.dialect.name, table)
    return conn.execute(statement, row).first() is not None
