"""The rows of what a run recorded: its events, and for an agent-testbed run its records, fault
plans and steps, task and session, observations (and the facts that could not be extracted),
evidence and completeness.

Pure functions of the run's parsed files, bound for one dialect (bulk.py's `TableRows`): the
ingest writes them with the run's other rows (run_rows.py), the run service as a run streams
its events and when it ends. A result layer that breaks its contract raises DocumentError.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..core.errors import DocumentError
from . import tables as t
from .bulk import (
    TableRows,
    bind_mappings,
    bind_rows,
    column_processor,
    datetime_text,
    epoch_text,
    json_as_read,
    json_text,
    write_table_rows,
)
from .rundir import RunDirectory, iso_time, wall_time

HARNESS_EVENTS = frozenset({"run_started", "run_finished"})
"""The kernel's own events: their actor is the harness even where the file says null."""


EVENT_COLUMNS = (
    "run_id",
    "seq",
    "event_type",
    "actor",
    "payload",
    "logical_time",
    "wall_time",
    "trace_id",
    "span_id",
    "actor_ref",
    "step",
)


def event_rows(
    dialect: sa.Dialect,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    payloads: Sequence[str | None] = (),
) -> TableRows:
    """The rows of the run's events; `payloads`, the strict JSON text each payload was read
    from (`RunDirectory.event_payloads`; None where it is not known), spares encoding them
    again. Thousands of rows a run: bound here, row by row, in one loop, so they go to the
    driver as they are.

    `actor` is the seed's actor kind; `actor_ref` the exact actor where the kind alone does
    not say it (an agent index, `3`, or an actor name outside the four kinds)."""
    process = column_processor(dialect, t.event, "wall_time")
    timestamp: Callable[[float], Any]
    if process is datetime_text:
        timestamp = epoch_text
    else:
        process = process or _unchanged
        timestamp = lambda seconds: process(wall_time(seconds))  # noqa: E731
    harness, actors = HARNESS_EVENTS, _ACTOR_KINDS
    texts = payloads or [None] * len(events)
    rows = []
    for event, text in zip(events, texts, strict=True):
        payload = event["payload"]
        actor = event.get("actor")
        if actor is None:
            kind, ref = ("harness" if event["type"] in harness else "environment"), None
        elif type(actor) is str and actor in actors:
            kind, ref = actor, None
        else:
            kind, ref = "agent", str(actor)
        logical, trace, span = (
            payload.get("logicalMs"),
            payload.get("traceId"),
            payload.get("spanId"),
        )
        step = event.get("t")
        rows.append(
            (
                run_id,
                event["seq"],
                event["type"],
                kind,
                text if text is not None else json_text(payload),
                logical if type(logical) is int else None,
                timestamp(float(event["wall"])),
                trace if type(trace) is str else None,
                span if type(span) is str else None,
                ref,
                step if type(step) is int else None,
            )
        )
    return bind_rows(dialect, t.event, EVENT_COLUMNS, rows, bound=_EVENT_BOUND)


_ACTOR_KINDS = frozenset(t.ACTORS)


def insert_events(
    conn: Connection,
    run_id: str,
    events: Sequence[Mapping[str, Any]],
    payloads: Sequence[str | None] = (),
) -> int:
    """INSERT the run's events (see `event_rows`)."""
    return write_table_rows(conn, event_rows(conn.dialect, run_id, events, payloads))


_EVENT_BOUND = frozenset({"payload", "wall_time"})


def _first_int(*values: Any) -> Any:
    """The first of `values` that is an integer (the last one when none is)."""
    for value in values:
        if is_int(value):
            return value
    return values[-1]


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


RECORD_COLUMNS = (
    "record_id",
    "run_id",
    "record_type",
    "ref",
    "sha256",
    "redaction",
    "created_at",
    "seq",
    "kind",
    "actor",
    "logical_ms",
    "body",
)


def record_rows(
    dialect: sa.Dialect,
    run_id: str,
    records: Sequence[Mapping[str, Any]],
    now: datetime,
    lines: Sequence[str] | None = None,
) -> TableRows:
    """The rows of the run's records; `lines`, the text each was parsed from, is stored as its
    body."""
    rows = []
    for index, record in enumerate(records):
        clock = record.get("clock")
        written = iso_time(clock.get("wall")) if isinstance(clock, dict) else None
        logical = record.get("logicalMs")
        actor = record.get("actor")
        redaction = record.get("redaction")
        rows.append(
            (
                f"{run_id}/{record['recordId']}",
                run_id,
                record["recordType"],
                f"records.jsonl#{record['recordId']}",
                record["sha256"],
                redaction if type(redaction) is str and redaction else "none",
                written or now,
                record["seq"],
                record["type"],
                actor if isinstance(actor, str) else None,
                logical if is_int(logical) else None,
                json_as_read(lines[index] if lines else None, record),
            )
        )
    return bind_rows(dialect, t.record, RECORD_COLUMNS, rows, bound=_BODY)


_BODY = frozenset({"body"})


def testbed_rows(dialect: sa.Dialect, run: RunDirectory, now: datetime) -> list[TableRows]:
    """What an agent-testbed run recorded beside its events: its records, fault plans and
    steps, its task and session, observations, evidence and completeness (for another run,
    nothing)."""
    rows: list[TableRows] = []
    if run.records is not None:
        plans, steps = fault_rows(run.run_id, run.records, now)
        rows += [
            record_rows(dialect, run.run_id, run.records, now, run.record_lines),
            bind_mappings(dialect, t.fault_plan, plans),
            bind_mappings(dialect, t.fault_record, steps),
        ]
    rows += task_and_session_rows(dialect, run)
    rows += layer_rows(dialect, run, now)
    return rows


def fault_rows(
    run_id: str, records: Sequence[Mapping[str, Any]], now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Fault plans and the four steps (planned → armed → hit → recovered, or failed) from the
    run's `fault.*` records. A stage seen more than once (several hits) is one row listing
    every record of it."""
    plans: list[dict[str, Any]] = []
    stages: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for record in records:
        kind = str(record["type"])
        if not kind.startswith("fault."):
            continue
        stage = kind[len("fault.") :]
        payload = record["payload"]
        fault_id = payload.get("faultId")
        if stage not in t.FAULT_STAGES or not isinstance(fault_id, str):
            continue
        stages.setdefault((fault_id, stage), []).append(record)
        if stage == "planned":
            plans.append(
                {
                    "run_id": run_id,
                    "fault_id": fault_id,
                    "target": str(payload.get("target", "")),
                    "fault_type": str(payload.get("effect", "")),
                    "params": {
                        k: v for k, v in payload.items() if k not in ("faultId", "target", "effect")
                    },
                    # When the window opens in logical milliseconds, if the plan says so; none
                    # for a window a call or a turn opens (it is in params.at), never a made-up
                    # 0. How long after it opened it closes, if timed.
                    "at_logical_ms": _first_int(payload.get("atLogicalMs"), None),
                    "recover_after_ms": _first_int(payload.get("recoverAfterMs"), None),
                }
            )
    steps = []
    for (fault_id, stage), found in stages.items():
        clock = found[0].get("clock")
        observed = iso_time(clock.get("wall")) if isinstance(clock, dict) else None
        steps.append(
            {
                "run_id": run_id,
                "fault_id": fault_id,
                "stage": stage,
                "detail": {
                    "recordIds": [r["recordId"] for r in found],
                    "payloads": [r["payload"] for r in found],
                },
                "observed_at": observed or now,
            }
        )
    return plans, steps


def task_and_session_rows(dialect: sa.Dialect, run: RunDirectory) -> list[TableRows]:
    """An agent-testbed run's tasks and sessions: the scenario's `user.tasks` (else one task
    `goal` with one session `conversation`), each with the SUT's own ids as the run recorded
    them (NULL when it returned none) and its outcome from `task.ended` (NULL when the task
    never ended, or for a run without `user.tasks`, which records none)."""
    scenario = run.scenario
    if scenario.user is None:
        return []
    channels = scenario.interaction.channels if scenario.interaction is not None else []
    transport = channels[0] if channels else "chat-completions"
    records = run.records or []
    ended = _payloads(records, "task.ended", "taskKey")
    closed = _payloads(records, "session.closed", "taskKey", "sessionKey")
    declared: list[tuple[str, str, list[str]]]
    if scenario.user.tasks is None:
        declared = [("goal", scenario.user.goal, ["conversation"])]
        task_id, session_id = _first_step_ids(records)
        ended["goal"] = {"sutTaskId": task_id}
        closed["goal", "conversation"] = {"sutSessionId": session_id}
    else:
        declared = [
            (task.key, task.goal, [s.key for s in task.sessions]) for task in scenario.user.tasks
        ]
    tasks, sessions = [], []
    for task_key, goal, session_keys in declared:
        end = ended.get(task_key, {})
        tasks.append(
            {
                "run_id": run.run_id,
                "task_key": task_key,
                "sut_task_id": _text(end.get("sutTaskId")),
                "goal": {"goal": goal},
                "outcome": task_outcome(end),
            }
        )
        sessions += [
            {
                "run_id": run.run_id,
                "task_key": task_key,
                "session_key": session_key,
                "sut_session_id": _text(
                    closed.get((task_key, session_key), {}).get("sutSessionId")
                ),
                "transport": transport,
            }
            for session_key in session_keys
        ]
    return [
        bind_mappings(dialect, t.run_task, tasks),
        bind_mappings(dialect, t.run_session, sessions),
    ]


def task_outcome(ended: Mapping[str, Any]) -> str | None:
    """A task's ledger outcome (t.TASK_OUTCOMES) from its `task.ended` record: the goal reached
    is `root_complete`; given up or failed, `failed`; cut off by the budget, the last state the
    run saw (`accepted` once the agent answered, else `submitted`); a user who fell silent says
    nothing of the task (NULL), nor does a task that never ended."""
    outcome = ended.get("outcome")
    if outcome == "budget_exhausted":
        return "accepted" if ended.get("agentAnswered") is True else "submitted"
    return _TASK_OUTCOMES.get(outcome) if isinstance(outcome, str) else None


_TASK_OUTCOMES = {"resolved": "root_complete", "abandoned": "failed", "failed": "failed"}


def _payloads(
    records: Sequence[Mapping[str, Any]], kind: str, *keys: str
) -> dict[Any, Mapping[str, Any]]:
    """The payloads of the records of type `kind`, by the payload's `keys` (the first of each)."""
    found: dict[Any, Mapping[str, Any]] = {}
    for record in records:
        if record["type"] == kind:
            payload = record["payload"]
            key = tuple(payload.get(k) for k in keys)
            found.setdefault(key[0] if len(key) == 1 else key, payload)
    return found


def _first_step_ids(records: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """The first task and session ids the SUT returned in the run's agent steps."""
    task_id = session_id = None
    for record in records:
        if record["type"] == "agent.step":
            step = record["payload"].get("step") or {}
            task_id = task_id or _text(step.get("sutTaskId"))
            session_id = session_id or _text(step.get("sutSessionId"))
    return task_id, session_id


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def layer_rows(dialect: sa.Dialect, run: RunDirectory, now: datetime) -> list[TableRows]:
    """Observations (and the facts that could not be extracted), evidence and completeness."""
    rows: list[TableRows] = []
    run_id = run.run_id
    if run.observations is not None:
        extractor = str(run.observations.get("extractor") or "")
        cited = _citing_criteria(run.evidence)
        rows.append(
            bind_mappings(
                dialect,
                t.observation,
                [
                    {
                        "observation_id": f"{run_id}/{item['observationId']}",
                        "run_id": run_id,
                        "criterion_key": _one(cited.get(item["observationId"])),
                        "fact_key": item["factKey"],
                        "fact_value": item["value"],
                        "derived_from": item["derivedFrom"],
                        "extractor": str(item.get("extractor") or extractor),
                        "created_at": now,
                    }
                    for item in run.observations["observations"]
                ],
            )
        )
        rows.append(
            bind_mappings(
                dialect,
                t.observation_missing,
                [
                    {
                        "run_id": run_id,
                        "fact_key": item["factKey"],
                        "reason": str(item.get("reason") or ""),
                        "extractor": extractor,
                    }
                    for item in run.observations.get("missing", [])
                ],
            )
        )
    if run.evidence is not None:
        rows.append(
            bind_mappings(
                dialect,
                t.evidence,
                [
                    {
                        "evidence_id": f"{run_id}/{criterion}",
                        "run_id": run_id,
                        "criterion_key": criterion,
                        "observation_ids": list(item.get("observationIds") or []),
                        "evidence_refs": list(item.get("evidenceRefs") or []),
                        "created_at": now,
                        "sufficient": item.get("sufficient")
                        if isinstance(item.get("sufficient"), bool)
                        else None,
                        "detail": {
                            k: v
                            for k, v in item.items()
                            if k not in ("observationIds", "evidenceRefs", "sufficient")
                        },
                    }
                    for criterion, item in sorted(run.evidence["criteria"].items())
                ],
            )
        )
    if run.completeness is not None:
        checks = run.completeness["checks"]
        for key, item in checks.items():
            if item["status"] not in t.COMPLETENESS_STATUSES:
                raise DocumentError(
                    f"unknown completeness status {item['status']!r}",
                    file=run.path / "completeness.json",
                    path=f"checks.{key}.status",
                    expected=", ".join(t.COMPLETENESS_STATUSES),
                )
        rows.append(
            bind_mappings(
                dialect,
                t.completeness,
                [
                    {
                        "run_id": run_id,
                        "check_key": key,
                        "status": item["status"],
                        "detail": item.get("detail"),
                    }
                    for key, item in sorted(checks.items())
                ],
            )
        )
    return rows


def _citing_criteria(evidence: Mapping[str, Any] | None) -> dict[str, set[str]]:
    """observation id → the criteria whose evidence cites it."""
    cited: dict[str, set[str]] = {}
    for criterion, item in ((evidence or {}).get("criteria") or {}).items():
        for observation_id in item.get("observationIds") or []:
            if isinstance(observation_id, str):
                cited.setdefault(observation_id, set()).add(criterion)
    return cited


def _one(criteria: set[str] | None) -> str | None:
    """An observation's `criterion_key`: the criterion it is evidence for, when it is evidence
    for one (for several, the evidence rows name each; for none, it is a plain fact)."""
    return next(iter(criteria)) if criteria is not None and len(criteria) == 1 else None


def _unchanged(value: Any) -> Any:
    return value
