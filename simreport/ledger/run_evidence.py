"""One run's evidence as the ledger holds it: its records, observations (and the facts that
could not be observed), evidence per criterion and completeness checks.

The one place these are read back: `simreport ledger show` (queries.py) and the run service's
evidence package (service/queue/reads.py) both read them here, each inside a read transaction
of its own and after checking that the run is theirs to show. Ids are the run's own (`obs-1`,
not the ledger's `<run id>/obs-1`); values are the JSON the run wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import tables as t


@dataclass(frozen=True, slots=True)
class RecordBody:
    """A record of the run's records.jsonl, as it was written."""

    record_id: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Observation:
    """A fact the run's extractor observed, and the records it was derived from."""

    observation_id: str
    fact_key: str
    value: Any
    derived_from: Any
    extractor: str


@dataclass(frozen=True, slots=True)
class MissingObservation:
    """A fact the extractor could not observe, and why."""

    fact_key: str
    reason: str
    extractor: str


@dataclass(frozen=True, slots=True)
class CriterionEvidence:
    """The evidence for one criterion: whether it sufficed, the observations and records it
    cites, and what else the run said of it (`detail`, e.g. what is `missing`)."""

    criterion: str
    sufficient: bool | None
    observation_ids: Any
    evidence_refs: Any
    detail: Any


@dataclass(frozen=True, slots=True)
class CompletenessCheck:
    """One completeness check: present, missing or not_applicable, with its detail."""

    check: str
    status: str
    detail: Any


@dataclass(frozen=True)
class EvidencePackage:
    """Everything a run recorded as evidence, in a stable order: records by seq, observations
    by id, missing facts, evidence and checks by key."""

    records: Sequence[RecordBody]
    observations: Sequence[Observation]
    missing: Sequence[MissingObservation]
    evidence: Sequence[CriterionEvidence]
    completeness: Sequence[CompletenessCheck]


def criterion_evidence(
    conn: Connection, run_id: str, *, criterion: str | None = None
) -> list[CriterionEvidence]:
    """The run's evidence per criterion, by criterion (only `criterion`'s, when named: empty
    when the run has none for it)."""
    query = sa.select(t.evidence).where(t.evidence.c.run_id == run_id)
    if criterion is not None:
        query = query.where(t.evidence.c.criterion_key == criterion)
    return [
        CriterionEvidence(
            criterion=e.criterion_key,
            sufficient=e.sufficient,
            observation_ids=e.observation_ids,
            evidence_refs=e.evidence_refs,
            detail=e.detail,
        )
        for e in conn.execute(query.order_by(t.evidence.c.criterion_key))
    ]


def completeness_checks(conn: Connection, run_id: str) -> list[CompletenessCheck]:
    """The run's completeness checks, by key."""
    return [
        CompletenessCheck(check=c.check_key, status=c.status, detail=c.detail)
        for c in conn.execute(
            sa.select(t.completeness)
            .where(t.completeness.c.run_id == run_id)
            .order_by(t.completeness.c.check_key)
        )
    ]


def evidence_package(
    conn: Connection, run_id: str, *, criterion: str | None = None
) -> EvidencePackage:
    """The run's evidence package. With `criterion`, that criterion's evidence with only the
    observations and records it cites, and no missing facts; an empty package when the run has
    no evidence for it."""
    found = criterion_evidence(conn, run_id, criterion=criterion)
    if criterion is not None and not found:
        return EvidencePackage([], [], [], [], [])
    prefix = run_id + "/"

    def local(text: str) -> str:
        return text[len(prefix) :] if text.startswith(prefix) else text

    observations = [
        Observation(
            observation_id=local(o.observation_id),
            fact_key=o.fact_key,
            value=o.fact_value,
            derived_from=o.derived_from,
            extractor=o.extractor,
        )
        for o in conn.execute(
            sa.select(t.observation)
            .where(t.observation.c.run_id == run_id)
            .order_by(t.observation.c.observation_id)
        )
    ]
    missing = [
        MissingObservation(fact_key=m.fact_key, reason=m.reason, extractor=m.extractor)
        for m in conn.execute(
            sa.select(t.observation_missing)
            .where(t.observation_missing.c.run_id == run_id)
            .order_by(t.observation_missing.c.fact_key)
        )
    ]
    records = [
        RecordBody(record_id=local(r.record_id), body=dict(r.body))
        for r in conn.execute(
            sa.select(t.record.c.record_id, t.record.c.body)
            .where(t.record.c.run_id == run_id)
            .order_by(t.record.c.seq)
        )
    ]
    checks = completeness_checks(conn, run_id)
    if criterion is not None:
        cited = {str(i) for e in found for i in (e.observation_ids or [])}
        observations = [o for o in observations if o.observation_id in cited]
        refs = {str(i) for e in found for i in (e.evidence_refs or [])}
        refs |= {str(i) for o in observations for i in (o.derived_from or [])}
        records = [r for r in records if r.record_id in refs]
        missing = []
    return EvidencePackage(
        records=records,
        observations=observations,
        missing=missing,
        evidence=found,
        completeness=checks,
    )
