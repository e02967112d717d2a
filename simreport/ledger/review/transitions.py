"""Moving a version through review: draft → reviewing → reviewed → online → offline, one action
at a time, as a compare-and-set in the transaction that records the step with its reviewer, note
and, for a high-risk scenario going online, the risk sign-off: the publishing reviewer's, naming
the sha256 of the version it covers. The version's authors approve and publish it only where the
review policy allows (authors.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal, cast

from sqlalchemy.engine import Connection, Engine

from ...core.execution_policy import ReviewPolicy
from .. import tables as t
from ..db import utc_now, utc_text
from ..errors import (
    ReviewRefused,
    RiskSignoffMismatch,
    RiskSignoffMissing,
    UnknownVersion,
    WrongStatus,
)
from ..migrate import prepare_for_writing
from ..tables import DEFAULT_TENANT
from .authors import check_reviewer
from .locating import Found, locate, version_table

Kind = Literal["scenario", "asset"]

ACTIONS: Final[dict[str, tuple[str, str]]] = {
    "submit": ("draft", "reviewing"),
    "approve": ("reviewing", "reviewed"),
    "publish": ("reviewed", "online"),
    "retire": ("online", "offline"),
}
"""Each review action: the status it moves a version from, and to."""

SIGNOFF_DIGITS: Final = 12
"""The fewest leading hex digits of a version's sha256 a risk sign-off may name it by (what
`simreport review list` shows)."""

_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class RiskSignoff:
    """A risk sign-off as the ledger holds it: who signed off (the publishing reviewer), when
    (the publishing step's time) and the version it covers, with that version's pinned sha256."""

    by: str
    at: datetime
    kind: str
    object_id: str
    version: str
    sha256: str

    def to_doc(self) -> dict[str, Any]:
        """As `history` and `list_versions` show it."""
        return {
            "by": self.by,
            "at": utc_text(self.at),
            "covers": {
                "kind": self.kind,
                "id": self.object_id,
                "version": self.version,
                "sha256": self.sha256,
            },
        }


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
    risk_signoff: RiskSignoff | None
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
    policy: ReviewPolicy | None = None,
) -> Transition:
    """Take one review action on a version: `submit` draft → reviewing, `approve` reviewing →
    reviewed, `publish` reviewed → online, `retire` online → offline, as `reviewer`. `name` is
    a scenario's id or an asset's name (`TYPE:NAME` where two asset types share it).

    `risk_signoff` is the sha256 (or its first 12 hex digits or more) of the version the
    reviewer signs off the risk of while publishing it: required for a high-risk scenario, and
    recorded as the reviewer's sign-off of that version. `policy` says whether a version's
    authors may approve and publish it (default: never).

    Refused (ReviewRefused, nothing changed) for an unknown version (UnknownVersion), a version
    not in the status the action moves from, also when another reviewer moved it first
    (WrongStatus), an empty reviewer, an author approving or publishing their own version
    (SelfApproval), or a high-risk scenario published without its sign-off
    (RiskSignoffMissing) or with one naming another sha256 (RiskSignoffMismatch)."""
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
            policy=policy,
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
    policy: ReviewPolicy | None = None,
    at: datetime | None = None,
) -> Transition:
    """`transition` inside the caller's write transaction (the run service stores the
    request's idempotency key in the same one). `at`: when the step is taken (default: now,
    UTC)."""
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
    if signoff is not None and action != "publish":
        raise ReviewRefused(
            f"only `publish` takes a risk sign-off, not `{action}`",
            path="--risk-signoff",
            expected="no risk sign-off",
        )
    from_status, to_status = ACTIONS[action]
    found = locate(conn, kind, name, version, tenant, UnknownVersion)
    label = f"{kind} {found.name}@{version}"
    if found.status != from_status:
        raise _wrong_status(label, found.status, action)
    check_reviewer(
        conn,
        kind=kind,
        object_id=found.object_id,
        version=version,
        label=label,
        action=action,
        reviewer=who,
        risk_level=found.risk_level,
        policy=policy or ReviewPolicy(),
    )
    if action == "publish" and (signoff is not None or found.risk_level == "high"):
        _check_signoff(label, found, signoff)
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
    at = at or utc_now()
    signed = None if signoff is None else who
    record_transition(
        conn,
        kind,
        found.object_id,
        version,
        from_status,
        to_status,
        reviewer=who,
        risk_signoff=signed,
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
        risk_signoff=signoff_of(kind, found.object_id, version, found.sha256, signed, at),
        note=note,
        at=at,
    )


def _check_signoff(label: str, found: Found, signoff: str | None) -> None:
    """Refuse a high-risk version published without a sign-off, and any sign-off that does not
    name the version's sha256."""
    expected = (
        f"the sha256 of {label} ({found.sha256}), or at least its first {SIGNOFF_DIGITS} hex digits"
    )
    if signoff is None:
        raise RiskSignoffMissing(
            f"{label} is high risk: its publisher signs off its risk, naming the sha256 of "
            "the version it covers",
            path="--risk-signoff",
            expected=expected,
        )
    digest = signoff.lower()
    if len(digest) < SIGNOFF_DIGITS or len(digest) > len(found.sha256) or not _HEX.match(digest):
        raise ReviewRefused(
            f"a risk sign-off names the sha256 of the version it covers, not {signoff!r}",
            path="--risk-signoff",
            expected=expected,
        )
    if not found.sha256.startswith(digest):
        raise RiskSignoffMismatch(
            f"the risk sign-off covers sha256 {digest}, but {label} is {found.sha256}: sign off "
            "the version that goes online",
            recorded=found.sha256,
            found=digest,
            path="--risk-signoff",
            expected=expected,
        )


def signoff_of(
    kind: str, object_id: str, version: str, sha256: str, by: str | None, at: datetime | None
) -> RiskSignoff | None:
    """The risk sign-off a review step recorded (None: none): `by` its signer, `at` its time,
    covering the version and its pinned sha256."""
    if by is None or at is None:
        return None
    return RiskSignoff(by, at, kind, object_id, version, sha256)


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
    the caller's transaction; `risk_signoff` names who signed off the version's risk with it
    (the reviewer publishing it: see `RiskSignoff`)."""
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
