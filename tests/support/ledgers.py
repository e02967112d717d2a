"""Fresh, empty ledgers for tests: a SQLite file, or a database of its own on the PostgreSQL
server SIMREPORT_TEST_POSTGRES_URL names (tests/cluster/postgres.sh starts one; .ci/run too)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POSTGRES_URL = os.environ.get("SIMREPORT_TEST_POSTGRES_URL", "")
"""A PostgreSQL server for the ledger tests."""


@contextmanager
def fresh_ledger(kind: str, sqlite_file: Path) -> Iterator[str]:
    """The URL of a new ledger of `kind` ("sqlite": `sqlite_file`; "postgresql": a database
    made on the server and dropped afterwards)."""
    if kind == "sqlite":
        yield f"sqlite:///{sqlite_file}"
        return
    import sqlalchemy as sa

    server = sa.engine.make_url(POSTGRES_URL)
    name = f"ledger_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
