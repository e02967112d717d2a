"""Alembic revisions of the ledger schema, run by simreport.ledger.migrate."""
