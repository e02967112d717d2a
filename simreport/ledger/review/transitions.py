"""Moving a version through review: draft → reviewing → reviewed → online → offline, one action
at a time, as a compare-and-set in the transaction that records the step with its reviewer, note
and, for a high-risk scenario going online, the risk sign-off."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, cast

from sqlalchemy.engine import Connection, Engine

from .. import tables as t
from ..db import utc_now
from ..errors import ReviewRefused, UnknownVersion, WrongStatus
from ..migrate import prepare_for_writing
from ..tables import DEFAULT_TENANT
from .locating import locate, version_table

Kind = Literal["scenario", "asset"]

ACTIONS: Final[dict[str, tuple[str, str]]] = {
    "submit": ("draft", "reviewing"),
    "approve": ("reviewing", "reviewed"),
    "publish": ("reviewed", "online"),
    "retire": ("online", "offline"),
}
"""Each review action: the status it moves a version from, and to."""


@dataclass(frozen=True)
class Transition:
    """One review step as the ledger recorded it."""

    kind: Kind
    name: str
    object_id: str
    version: str
    action: str
    from_status: str
    to_status: str
    reviewer: str
    risk_signoff: str | None
    note: str | None
    at: datetime


def transition(
    engine: Engine,
    kind: str,
    name: str,
    version: str,
    action: str,
    *,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> Transition:
    """Take one review action on a version: `submit` draft → reviewing, `approve` reviewing →
    reviewed, `publish` reviewed → online, `retire` online → offline. `name` is a scenario's id
    or an asset's name (`TYPE:NAME` where two asset types share it). Refused (ReviewRefused,
    nothing changed) for an unknown version, a version not in the status the action moves
    from (also when another reviewer moved it first), an empty reviewer, or a high-risk
    scenario published without `risk_signoff`."""
    prepare_for_writing(engine)
    with engine.begin() as conn:
        return transition_in(
            conn,
            kind,
            name,
            version,
            action,
            reviewer=reviewer,
            note=note,
            risk_signoff=risk_signoff,
            tenant=tenant,
        )


def transition_in(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    action: str,
    *,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> Transition:
    """`transition` inside the caller's write transaction (the run service stores the
    request's idempotency key in the same one)."""
    if kind not in t.VERSION_KINDS:
        raise ReviewRefused(
            f"unknown kind {kind!r}", path="kind", expected=" or ".join(t.VERSION_KINDS)
        )
    if action not in ACTIONS:
        raise ReviewRefused(
            f"unknown review action {action!r}", path="action", expected=", ".join(ACTIONS)
        )
    who = reviewer_name(reviewer)
    signoff, note = clean_text(risk_signoff), clean_text(note)
    from_status, to_status = ACTIONS[action]
    found = locate(conn, kind, name, version, tenant, UnknownVersion)
    label = f"{kind} {found.name}@{version}"
    if found.status != from_status:
        raise _wrong_status(label, found.status, action)
    if action == "publish" and found.risk_level == "high" and signoff is None:
        raise ReviewRefused(
            f"{label} is high risk: it goes online only with a recorded risk sign-off",
            path="--risk-signoff",
            expected="the name of who signed off the risk",
        )
    # Compare-and-set: of two reviewers who both saw `from_status`, the second finds the
    # row moved (PostgreSQL re-checks the condition after the first commits; SQLite lets
    # one writer in at a time) and is refused with what it is now.
    table, keys = version_table(kind)
    moved = conn.execute(
        table.update()
        .where(keys[0] == found.object_id, keys[1] == version, table.c.status == from_status)
        .values(status=to_status)
    ).rowcount
    if moved != 1:
        now_status = locate(conn, kind, name, version, tenant, UnknownVersion).status
        raise _wrong_status(label, now_status, action)
    at = utc_now()
    record_transition(
        conn,
        kind,
        found.object_id,
        version,
        from_status,
        to_status,
        reviewer=who,
        risk_signoff=signoff,
        note=note,
        at=at,
    )
    return Transition(
        kind=cast(Kind, kind),  # checked against VERSION_KINDS above
        name=found.name,
        object_id=found.object_id,
        version=version,
        action=action,
        from_status=from_status,
        to_status=to_status,
        reviewer=who,
        risk_signoff=signoff,
        note=note,
        at=at,
    )


def _wrong_status(label: str, status: str, action: str) -> WrongStatus:
    from_status, to_status = ACTIONS[action]
    valid = [a for a, (start, _) in ACTIONS.items() if start == status]
    then = (
        f"from {status} only `{valid[0]}` is valid"
        if valid
        else f"no review action leaves {status}"
    )
    return WrongStatus(
        f"{label} is {status}: `{action}` moves a version from {from_status} to {to_status}; "
        + then
    )


def record_transition(
    conn: Connection,
    kind: str,
    object_id: str,
    version: str,
    from_status: str | None,
    to_status: str,
    *,
    reviewer: str,
    risk_signoff: str | None,
    note: str | None,
    at: datetime,
) -> None:
    """Add a review transition of a version (`from_status` None: the version's first) inside
    the caller's transaction."""
    conn.execute(
        t.review_transition.insert().values(
            version_kind=kind,
            object_id=object_id,
            version=version,
            from_status=from_status,
            to_status=to_status,
            reviewer=reviewer,
            risk_signoff=risk_signoff,
            note=note,
            at=at,
        )
    )


def reviewer_name(reviewer: str | None) -> str:
    """The reviewer's name without its outer spaces; refused when there is none."""
    who = clean_text(reviewer)
    if who is None:
        raise ReviewRefused(
            "every review step names its reviewer", path="--reviewer", expected="a name"
        )
    return who


def clean_text(value: str | None) -> str | None:
    """The text with its outer spaces removed; None for nothing or blanks."""
    stripped = (value or "").strip()
    return stripped or None
