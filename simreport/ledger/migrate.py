"""The ledger's schema history: Alembic revisions shipped in the package, run from Python.

Writers bring a ledger to the current revision themselves (`prepare_for_writing`): a new ledger is
created, an older one upgraded, in one transaction that holds a lock (SQLite's write lock, a
PostgreSQL advisory lock) so that parallel writers migrate it once. Readers never migrate: an
older ledger is refused with the command that upgrades it. A ledger written by a newer
simreport is refused by both.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from .db import describe, reading
from .errors import LedgerOutdated, LedgerUnavailable
from .tables import SCHEMA

SCRIPT_LOCATION = "simreport.ledger:migrations"
VERSION_TABLE = "alembic_version"
_LOCK_KEY = 0x73_69_6D_6C_65_64_67_72  # b"simledgr": the advisory lock every migration takes
HEAD_REVISION: Final = "0009"
"""The newest revision in migrations/versions (a test holds it to Alembic's own head). Checking
a ledger against it needs no Alembic: a process whose ledger is current never imports it."""

if TYPE_CHECKING:
    from alembic.config import Config


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration, built in memory: no alembic.ini is needed."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The newest revision this simreport ships."""
    return HEAD_REVISION


def version_table_schema(conn: Connection | Engine) -> str | None:
    """Alembic's version table sits in `sim` on PostgreSQL (beside the tables, so it cannot
    clash with another application's) and in the main database on SQLite."""
    return SCHEMA if conn.dialect.name == "postgresql" else None


def current_revision(conn: Connection) -> str | None:
    """The revision the ledger is at (None: an empty database), read from Alembic's version
    table as Alembic reads it (one row: the history has no branches)."""
    schema = version_table_schema(conn)
    if not sa.inspect(conn).has_table(VERSION_TABLE, schema=schema):
        return None
    version = sa.table(VERSION_TABLE, sa.column("version_num"), schema=schema)
    rows = conn.execute(sa.select(version.c.version_num)).scalars().all()
    if len(rows) > 1:
        raise LedgerOutdated(
            f"the ledger's {VERSION_TABLE} table holds several revisions ({', '.join(rows)}); "
            "simreport's schema history has one line",
            revision=None,
            expected=f"one row in {VERSION_TABLE}",
        )
    return str(rows[0]) if rows else None


@dataclass(frozen=True)
class Upgrade:
    """What an upgrade did."""

    before: str | None
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


def _known(revision: str | None, url: str) -> None:
    if revision is None or revision == HEAD_REVISION:
        return
    from alembic.script import ScriptDirectory
    from alembic.util.exc import CommandError

    try:
        ScriptDirectory.from_config(alembic_config()).get_revision(revision)
    except CommandError:
        raise LedgerOutdated(
            f"the ledger at {url} is at schema revision {revision}, which this simreport does "
            "not know: it was written by a newer simreport; upgrade simreport to use it",
            revision=revision,
            newer=True,
        ) from None


def upgrade(engine: Engine, revision: str = "head") -> Upgrade:
    """Bring the ledger to `revision` (default: the newest), in one locked transaction."""
    url = describe(engine.url.render_as_string(hide_password=False))
    try:
        with engine.begin() as conn:  # SQLite: BEGIN IMMEDIATE holds the write lock throughout
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            before = current_revision(conn)
            _known(before, url)
            target = head_revision() if revision == "head" else revision
            if before != target:
                from alembic import command

                command.upgrade(alembic_config(conn), revision)
            after = current_revision(conn)
    except sa.exc.DBAPIError as exc:
        # Typically a role that may write rows but not create tables: nothing was changed.
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        raise LedgerUnavailable(
            f"cannot bring the ledger at {url} to the current schema: {reason}",
            expected="a role that may create tables (the database's owner), running "
            "`simreport ledger upgrade`",
        ) from None
    assert after is not None
    return Upgrade(before, after)


def downgrade(engine: Engine, revision: str) -> None:
    """Take the ledger back to `revision` (`base`: empty). For tests and for undoing an upgrade
    by hand; it drops what later revisions created, data included."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
        from alembic import command

        command.downgrade(alembic_config(conn), revision)


def prepare_for_writing(engine: Engine) -> None:
    """A writer's first step: a ledger that is not at the newest revision is brought there."""
    with reading(engine) as conn:
        current = current_revision(conn)
    if current != head_revision():
        upgrade(engine)


_prepared: weakref.WeakSet[Engine] = weakref.WeakSet()


def prepare_once(engine: Engine) -> None:
    """`prepare_for_writing`, once per engine: a writer that records many things checks the
    schema before the first."""
    if engine not in _prepared:
        prepare_for_writing(engine)
        _prepared.add(engine)


def check_for_reading(engine: Engine) -> None:
    """A reader's first step: refuse a ledger that is not at the newest revision."""
    url = describe(engine.url.render_as_string(hide_password=False))
    with reading(engine) as conn:
        current = current_revision(conn)
    head = head_revision()
    if current == head:
        return
    _known(current, url)
    if current is None:
        raise LedgerOutdated(
            f"the ledger at {url} holds no ledger tables yet",
            revision=None,
            expected="a ledger written by `simreport ledger ingest` (or `simreport ledger "
            "upgrade` to create an empty one)",
        )
    raise LedgerOutdated(
        f"the ledger at {url} is at schema revision {current}; this simreport reads {head}: "
        f"run `simreport ledger upgrade --ledger {url}` first",
        revision=current,
    )
