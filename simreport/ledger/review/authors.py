"""Separation of duties in review: who wrote a version (who created it, and who submitted it
for review), and the refusal of an approver or publisher among them where the operator's review
policy (core.execution_policy.ReviewPolicy) does not let authors approve their own versions."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ...core.execution_policy import ReviewPolicy
from .. import tables as t
from ..errors import SelfApproval

GUARDED_ACTIONS = frozenset({"approve", "publish"})
"""The review actions an author may not take on a version of their own by default."""


def authors(conn: Connection, kind: str, object_id: str, version: str) -> tuple[str, ...]:
    """Who wrote the version, sorted: a scenario version's creator (`created_by`), the
    reviewer of the version's first review step (its import or submission) and whoever
    submitted it for review (draft → reviewing)."""
    rt = t.review_transition
    found = set(
        conn.execute(
            sa.select(rt.c.reviewer).where(
                rt.c.version_kind == kind,
                rt.c.object_id == object_id,
                rt.c.version == version,
                sa.or_(
                    rt.c.from_status.is_(None),
                    sa.and_(rt.c.from_status == "draft", rt.c.to_status == "reviewing"),
                ),
            )
        ).scalars()
    )
    if kind == "scenario":
        sv = t.scenario_version
        found.update(
            conn.execute(
                sa.select(sv.c.created_by).where(
                    sv.c.scenario_id == object_id, sv.c.version == version
                )
            ).scalars()
        )
    return tuple(sorted(found))


def check_reviewer(
    conn: Connection,
    *,
    kind: str,
    object_id: str,
    version: str,
    label: str,
    action: str,
    reviewer: str,
    risk_level: str | None,
    policy: ReviewPolicy,
) -> None:
    """Refuse (SelfApproval) `reviewer` approving or publishing a version they wrote, unless
    `policy` lets authors do so at the version's risk level (or, for an asset, at all)."""
    if action not in GUARDED_ACTIONS or policy.allows_self_approval(kind, risk_level):
        return
    wrote = authors(conn, kind, object_id, version)
    if reviewer not in wrote:
        return
    level = "an asset version" if kind == "asset" else f"a {risk_level}-risk scenario version"
    raise SelfApproval(
        f"{reviewer} wrote {label} (created or submitted it) and may not {action} it: "
        f"the review policy wants {level} approved and published by someone else",
        authors=wrote,
        path="--reviewer",
        expected="a reviewer other than " + ", ".join(wrote),
    )


__all__ = ["GUARDED_ACTIONS", "authors", "check_reviewer"]
