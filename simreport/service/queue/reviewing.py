"""One review step over HTTP, on a scenario or an asset version: the ledger's transition
(ledger.review) in the transaction that stores the request's Idempotency-Key, with the ledger's
refusals as the service's. The reviewer, and the signer of a risk sign-off, is always the
token's name; the operator's review policy says whether a version's author may approve and
publish it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection, Engine

from ...core.execution_policy import ReviewPolicy
from ...ledger.errors import (
    ReviewRefused,
    RiskSignoffMismatch,
    RiskSignoffMissing,
    SelfApproval,
    UnknownVersion,
    WrongStatus,
)
from ...ledger.review import Kind, transition_in
from ..errors import Conflict, Forbidden, NotFound, ServiceError, Unprocessable, issue
from .idempotency import IdempotencyKey, replayed, store_answer, take_key
from .transaction import write_transaction

SIGNOFF_FIELD = "risk_signoff.sha256"
"""Where a request carries the sha256 its risk sign-off covers."""


def review_step(
    engine: Engine,
    *,
    tenant: str,
    kind: Kind,
    name: str,
    version: str,
    action: str,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    policy: ReviewPolicy | None = None,
    idempotency: IdempotencyKey | None = None,
    check: Callable[[Connection], Any] | None = None,
    at: datetime | None = None,
) -> str:
    """Take `action` on the version as `reviewer` (signing off its risk when `risk_signoff`,
    the sha256 it covers, is given) at `at` (the service's clock; default: now); returns its
    new status. `check` runs first in the same transaction (a scenario's 404 for another
    tenant's). 404 for a version `tenant` does not hold (`unknown_version`), 409 when the
    version is not in the status the action starts from (`review_status`), 403 for its author
    approving or publishing it where `policy` wants someone else (`self_approval`, with the
    version's `authors`), 422 for a high-risk scenario published without a sign-off or with
    one naming another sha256."""

    def write(conn: Connection) -> str:
        stored = take_key(conn, idempotency, tenant)
        if stored is not None:
            return str(replayed(stored, "status"))
        if check is not None:
            check(conn)
        try:
            done = transition_in(
                conn,
                kind,
                name,
                version,
                action,
                reviewer=reviewer,
                note=note,
                risk_signoff=risk_signoff,
                tenant=tenant,
                policy=policy,
                at=at,
            )
        except ReviewRefused as exc:
            raise review_refusal(exc) from None
        store_answer(conn, idempotency, 200, {"status": done.to_status})
        return done.to_status

    return write_transaction(engine, write)


def review_refusal(error: ReviewRefused) -> ServiceError:
    """The service's refusal for the ledger's: its code, and the status the service's one
    table gives its class (errors.STATUS)."""
    if isinstance(error, UnknownVersion):
        return NotFound(error.message, code=error.code)
    if isinstance(error, WrongStatus):
        return Conflict(error.message, code=error.code)
    if isinstance(error, SelfApproval):
        # The version's state allows the step; this token may not take it (403, as for a
        # namespace it may not use): another principal must.
        return Forbidden(error.message, code=error.code, fields={"authors": list(error.authors)})
    where = None
    if isinstance(error, (RiskSignoffMissing, RiskSignoffMismatch)):
        where = SIGNOFF_FIELD
    elif error.path == "--risk-signoff":  # a sign-off on another action than publish
        where = "risk_signoff"
    issues = [] if where is None else [issue(where, error.message, error.expected)]
    return Unprocessable(error.message, code=error.code, issues=issues)


# --------------------------------------------------------------------------- read model


def step_body(step: dict[str, Any]) -> dict[str, Any]:
    """A review step of the ledger's read model (ledger.review.history) as the service
    answers it (models.ReviewStep)."""
    return {
        "from_status": step["from"],
        "to_status": step["to"],
        "reviewer": step["reviewer"],
        "risk_signoff": step["riskSignoff"],
        "note": step["note"],
        "at": step["at"],
    }


def last_step(version: dict[str, Any]) -> dict[str, Any] | None:
    """A listed version's last review step as the service answers it."""
    last = version.get("lastTransition")
    return None if last is None else step_body(last)


__all__ = ["SIGNOFF_FIELD", "last_step", "review_refusal", "review_step", "step_body"]
