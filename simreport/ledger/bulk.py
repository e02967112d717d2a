"""Rows to the database in bulk, past SQLAlchemy's per-row handling.

Rows are tuples bound once, each value through its column type's bind processing (`bind_rows`,
`TableRows`), and go to the driver's executemany with SQL built once per table: on PostgreSQL
many rows in one COPY (`insert_rows`), the rest in INSERTs of many rows of VALUES that a
pipeline carries in one round trip (`write_bulk`, `pipelined`). `lookup` reads one column of one
row the same way. Nothing here knows what a run is.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import tables as t
from .rundir import strict_json

# A run writes a few hundred to a few thousand rows in a dozen statements and looks up a few
# single rows. Through SQLAlchemy's per-statement and per-row parameter handling those cost
# more than the database does, so the rows go to the driver's executemany as plain tuples, each
# value through its column type's own bind processing, with the SQL built once per table.

json_text = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), check_circular=False
).encode
"""A JSON column's value as text, as the ledger's engines write it (db.py's serializer: strict,
a NaN is an error), with one encoder for every value (what json parsed has no cycles). None is
JSON null, as SQLAlchemy's JSON type stores it; PostgreSQL reads the text into jsonb."""


def json_as_read(text: str | None, value: Any) -> str:
    """JSON text for `value`: `text`, what json parsed it from, unless there is none or it may
    spell a non-finite number, which strict JSON has not (then encoding `value` says so)."""
    strict = strict_json(text)
    return json_text(value) if strict is None else strict


_Processors = tuple[tuple[int, Callable[[Any], Any]], ...]


def table_schema(conn: Connection, table: sa.Table) -> str | None:
    translate = conn.get_execution_options().get("schema_translate_map")
    return translate.get(table.schema, table.schema) if translate else table.schema


def table_name(dialect: sa.Dialect, table: sa.Table, schema: str | None) -> str:
    prepare = dialect.identifier_preparer
    name = prepare.quote(table.name)
    return f"{prepare.quote_schema(schema)}.{name}" if schema else name


def placeholder(dialect: sa.Dialect) -> str:
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
    row = f"({', '.join(placeholder(dialect) for _ in keys)})"
    sql = (
        f"INSERT INTO {table_name(dialect, table, schema)} ({', '.join(quote(k) for k in keys)}) "
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
        if key not in bound and (process := column_processor(dialect, table, key)) is not None
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
def column_processor(dialect: sa.Dialect, table: sa.Table, key: str) -> Callable[[Any], Any] | None:
    """What a value of the column goes through before the driver takes it (None: nothing)."""
    kind = table.c[key].type
    if isinstance(kind, sa.JSON):
        return json_text
    process = kind._cached_bind_processor(dialect)
    if process is not None and isinstance(kind, sa.DateTime):
        return _same_or(process, datetime_text)
    return process


def datetime_text(value: datetime | None) -> str | None:
    """A timestamp as SQLAlchemy stores it in SQLite ("2026-05-01 12:00:00.000000", the zone
    left out), in a third of the time its processor takes."""
    return None if value is None else value.isoformat(" ", "microseconds")[:26]


def epoch_text(seconds: float) -> str:
    """`datetime_text(wall_time(seconds))` in a third of the time: the date and time of each
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


def insert_rows(
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
    driver takes them already (JSON as text, what `column_processor` makes of the others)."""
    if not rows:
        return 0
    dialect, schema = conn.dialect, table_schema(conn, table)
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
    columns = ", ".join(quote(k) for k in keys)
    return f"COPY {table_name(dialect, table, schema)} ({columns}) FROM STDIN"


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
            write_table_rows(conn, rows)
        else:
            rest.append(rows)
    return rest


def insert_mappings(conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]) -> int:
    """INSERT rows given as mappings, each with the keys of the first."""
    if not rows:
        return 0
    keys = tuple(rows[0])
    return insert_rows(conn, table, keys, [tuple(row[k] for k in keys) for row in rows])


def insert_ignoring_duplicates(
    conn: Connection, table: sa.Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    """INSERT … ON CONFLICT DO NOTHING: a row another writer recorded first stays as it was."""
    if rows:
        keys = tuple(rows[0])
        insert_rows(
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
        f"SELECT {quote(column)} FROM {table_name(dialect, table, schema)} "
        f"WHERE {quote(key)} = {placeholder(dialect)}"
    )


def lookup(conn: Connection, table: sa.Table, column: str, key: str, value: str) -> Any:
    """`column` of the row whose primary key `key` is `value`, or None when there is none."""
    sql = _lookup_statement(conn.dialect, table, table_schema(conn, table), column, key)
    return conn.exec_driver_sql(sql, (value,)).scalar()


class TableRows(NamedTuple):
    """Rows of one table: tuples of the values of `keys`, each as the driver takes it (JSON
    as text, a timestamp as the dialect binds it). Made where the run is read — in a worker
    process when many runs are recorded at once — and written where the ledger is."""

    table: str
    keys: tuple[str, ...]
    values: list[tuple[Any, ...]]


_TABLES: Mapping[str, sa.Table] = {table.name: table for table in t.metadata.sorted_tables}


def bind_rows(
    dialect: sa.Dialect,
    table: sa.Table,
    keys: tuple[str, ...],
    values: list[tuple[Any, ...]],
    bound: frozenset[str] = frozenset(),
) -> TableRows:
    """`values` with each column not in `bound` through its type's bind processing."""
    return TableRows(table.name, keys, _processed(values, _processors(dialect, table, keys, bound)))


def bind_mappings(
    dialect: sa.Dialect, table: sa.Table, rows: Sequence[Mapping[str, Any]]
) -> TableRows:
    """`bind_rows` for rows given as mappings, each with the keys of the first."""
    if not rows:
        return TableRows(table.name, (), [])
    keys = tuple(rows[0])
    return bind_rows(dialect, table, keys, [tuple(row[k] for k in keys) for row in rows])


def write_table_rows(conn: Connection, rows: TableRows) -> int:
    """INSERT rows bound by `bind_rows` (for the same dialect)."""
    if not rows.values:
        return 0
    table = _TABLES[rows.table]
    return insert_rows(conn, table, rows.keys, rows.values, bound=frozenset(rows.keys))


def insert_unless_present(conn: Connection, rows: TableRows) -> None:
    """INSERT … ON CONFLICT DO NOTHING of rows bound by `bind_rows`: rows another writer (or
    another run) may have recorded first stay as they were."""
    if rows.values:
        table = _TABLES[rows.table]
        insert_rows(
            conn,
            table,
            rows.keys,
            rows.values,
            ignore_duplicates=True,
            bound=frozenset(rows.keys),
        )
