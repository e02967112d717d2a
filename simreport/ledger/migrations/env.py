"""Alembic's entry for the ledger. simreport.ledger.migrate hands it a connection inside an open
transaction; the revisions run in that transaction and are committed with it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from simreport.ledger.migrate import VERSION_TABLE, version_table_schema
from simreport.ledger.tables import SCHEMA, metadata


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None or context.is_offline_mode():
        raise RuntimeError(
            "the ledger's migrations run through `simreport ledger upgrade` (or "
            "simreport.ledger.migrate.upgrade), with a connection"
        )
    if connection.dialect.name == "postgresql":
        # The version table lives in the schema, so the schema comes first.
        connection.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        version_table_schema=version_table_schema(connection),
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
