"""One write transaction of the queue: every write of the run service's state goes through
`write_transaction`, which takes SQLite's write lock at BEGIN and tries again what PostgreSQL
rolled back to break a deadlock."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...ledger.db import ATTEMPTS, worth_retrying
from ...ledger.migrate import prepare_once

T = TypeVar("T")


def write_transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """`work` in one write transaction (SQLite: BEGIN IMMEDIATE), tried again when PostgreSQL
    broke a deadlock by rolling it back or the connection turned out lost (see
    `worth_retrying`)."""
    prepare_once(engine)
    for attempt in range(ATTEMPTS):
        try:
            with engine.begin() as conn:
                return work(conn)
        except sa.exc.DBAPIError as exc:
            if not worth_retrying(exc) or attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
