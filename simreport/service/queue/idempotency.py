"""Every write request's Idempotency-Key, stored in the ledger with the sha256 of its request
and its answer. A write takes its key in the transaction that does the write (`take_key`) and
stores its answer there (`store_answer`), so of two concurrent requests with one key exactly one
writes and the other gets its answer; the same key with another request is refused (409)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.errors import SimreportError
from ...ledger import tables as t
from ...ledger.db import insert_new, reading, utc_now
from ...ledger.migrate import prepare_once
from ..errors import Conflict
from .transaction import write_transaction


@dataclass(frozen=True)
class Stored:
    """The answer an Idempotency-Key got, as stored."""

    status_code: int
    response: dict[str, Any]
    request_sha256: str


@dataclass(frozen=True)
class IdempotencyKey:
    """A write request's key, to be stored with its answer in the transaction that does the
    write: of two concurrent requests with the same key exactly one writes, and the other gets
    its answer."""

    principal: str
    key: str
    request_sha256: str


class StoredAnswer(SimreportError):
    """The Idempotency-Key already has an answer this operation cannot return as its own (an
    error the app stored with `remember`): not a refusal, but the answer to give again,
    `stored.status_code` with `stored.response`."""

    def __init__(self, stored: Stored) -> None:
        super().__init__("this Idempotency-Key was answered before")
        self.stored = stored

    @property
    def status(self) -> int:
        return self.stored.status_code


def take_key(conn: Connection, idem: IdempotencyKey | None, tenant: str) -> Stored | None:
    """Take the key for this transaction (None), or the answer it got before (a concurrent
    holder of the key is waited for on PostgreSQL; SQLite lets one writer in at a time)."""
    if idem is None:
        return None
    placeholder = {
        "principal": idem.principal,
        "key": idem.key,
        "tenant_id": tenant,
        "request_sha256": idem.request_sha256,
        "status_code": 0,
        "response": {},
        "created_at": utc_now(),
    }
    if insert_new(conn, t.idempotency_key, placeholder):
        return None
    return _stored(conn, idem.principal, idem.key, tenant, idem.request_sha256)


_KEY_IS: Final = (t.idempotency_key.c.principal == sa.bindparam("p_principal")) & (
    t.idempotency_key.c.key == sa.bindparam("p_key")
)
_ANSWERED: Final = t.idempotency_key.update().where(_KEY_IS)
"""Executed with the key's status_code and response, beside the _KEY_IS parameters."""
_KEY_ANSWER: Final = sa.select(
    t.idempotency_key.c.tenant_id,
    t.idempotency_key.c.request_sha256,
    t.idempotency_key.c.status_code,
    t.idempotency_key.c.response,
).where(_KEY_IS)


def store_answer(
    conn: Connection, idem: IdempotencyKey | None, status_code: int, response: dict[str, Any]
) -> None:
    """Store the answer to the key `take_key` took, in the same transaction."""
    if idem is None:
        return
    conn.execute(
        _ANSWERED,
        {
            "p_principal": idem.principal,
            "p_key": idem.key,
            "status_code": status_code,
            "response": response,
        },
    )


def _stored(
    conn: Connection, principal: str, key: str, tenant: str, request_sha256: str
) -> Stored | None:
    row = conn.execute(_KEY_ANSWER, {"p_principal": principal, "p_key": key}).first()
    if row is None:
        return None
    if row.request_sha256 != request_sha256 or row.tenant_id != tenant:
        # The key's own request said what it started (only to the principal that sent both).
        started = (row.response or {}).get("run_id") if row.tenant_id == tenant else None
        raise Conflict(
            f"the Idempotency-Key {key!r} was used with a different request: a new request "
            "needs a new key",
            code="idempotency_key_reused",
            fields={"run_id": started} if isinstance(started, str) else None,
        )
    return Stored(int(row.status_code), dict(row.response or {}), str(row.request_sha256))


def replayed(stored: Stored, field_name: str) -> Any:
    """The value `field_name` of a stored success, or StoredAnswer for anything else."""
    if 200 <= stored.status_code < 300 and field_name in stored.response:
        return stored.response[field_name]
    raise StoredAnswer(stored)


def idempotent(
    engine: Engine, *, principal: str, tenant: str, key: str, request_sha256: str
) -> Stored | None:
    """The answer stored for `principal`'s `key`, or None when the key is new. 409 when the
    key was used with another request (its sha256 differs)."""
    prepare_once(engine)
    with reading(engine) as conn:
        stored = _stored(conn, principal, key, tenant, request_sha256)
    # A key whose request is still being written is not visible (its transaction has not
    # committed), so a stored answer is always a final one.
    return stored


def remember(
    engine: Engine,
    *,
    principal: str,
    tenant: str,
    key: str,
    request_sha256: str,
    status_code: int,
    response: dict[str, Any],
) -> Stored:
    """Store the answer to `principal`'s `key`, unless one is stored already: then that one is
    returned (a concurrent duplicate gets the first answer). 409 when the key was used with
    another request."""

    def write(conn: Connection) -> Stored:
        row = {
            "principal": principal,
            "key": key,
            "tenant_id": tenant,
            "request_sha256": request_sha256,
            "status_code": status_code,
            "response": response,
            "created_at": utc_now(),
        }
        insert_new(conn, t.idempotency_key, row)
        stored = _stored(conn, principal, key, tenant, request_sha256)
        assert stored is not None
        return stored

    return write_transaction(engine, write)
