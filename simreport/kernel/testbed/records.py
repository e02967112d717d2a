"""Result layers of a testbed run: records → observations → evidence, plus completeness.

Records are the raw, append-only facts (messages, tool calls, state changes, control steps), each
with a trace and span id and a sha256 over its content. Observations are facts extracted from
records, each naming the records it was derived from. Evidence groups observations and record
references by evaluation criterion. Completeness says, per check of the collection contract,
whether the material is present, missing or not applicable. Nothing missing is ever filled in:
an observation that cannot be extracted is listed as missing, and metrics built on it are NaN.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from ...core.canonical import canonical_json, content_hash, sha256_text, to_plain
from ...core.files import write_atomic, write_json
from ...core.redaction import Scrubber
from .clock import Clocks

RecordType = Literal["message", "tool_call", "state_change", "control"]
Actor = Literal["user", "agent", "environment", "harness"]
LinkagePoint = Literal["user", "agent", "environment"]
LINKAGE_POINTS: tuple[LinkagePoint, ...] = ("user", "agent", "environment")
"""The event-linkage ledger's three points, in the order one business event must pass them: the
user acts (t1), the agent receives it (t2), the environment carries it out (t3)."""
EXTRACTOR = "simreport.testbed.records/1"

RECORDS_FILE = "records.jsonl"
OBSERVATIONS_FILE = "observations.json"
EVIDENCE_FILE = "evidence.json"
COMPLETENESS_FILE = "completeness.json"

Emit = Callable[[str, str, dict[str, Any]], None]
Listener = Callable[[Mapping[str, Any]], None]
"""Handed each record once it is kept (the run's OpenTelemetry spans are made from them)."""


# --------------------------------------------------------------------------- records


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 over a record's content: everything but its digest and its real-clock readings."""
    return content_hash({k: v for k, v in record.items() if k not in ("sha256", "clock")})


REDACTED_SECRETS = "secrets"
"""A record's `redaction` when a secret was blanked out of it (absent: nothing was)."""


class RecordLog:
    """The run's records, in order. Every record is mirrored as an event (events.jsonl)."""

    def __init__(self, clocks: Clocks, trace_id: str, emit: Emit | None = None) -> None:
        self.clocks = clocks
        self.trace_id = trace_id
        self.records: list[dict[str, Any]] = []
        self._emit = emit
        self._linkages: dict[str, dict[str, Any]] = {}
        self.secrets: tuple[str, ...] = ()
        """Texts no record may hold (the system under test's API key, the credentials of the
        run's environment): blanked out of every payload, in every form an error may quote
        them, and the record marked `redaction: secrets`."""
        self._scrubber = Scrubber()
        self._scrubbing: tuple[str, ...] = ()
        self.listeners: list[Listener] = []
        """Handed each record as it is kept, in order; a listener must neither raise nor change
        the record, so what a run writes is the same with listeners or without."""

    def span(self, key: str) -> str:
        """A span id, stable for the same key within this trace (W3C: 16 hex digits)."""
        return sha256_text(f"{self.trace_id}|{key}")[:16]

    # -- the event-linkage ledger (design: "数据流三线、协调两账")

    def open_linkage(self, event: str) -> dict[str, str]:
        """Open the linkage of one business event (e.g. `refund.withdraw`) at its user point:
        the `linkage` to record on the user's record. Ids count up per run (`lk-0001`)."""
        linkage_id = f"lk-{len(self._linkages) + 1:04d}"
        self._linkages[linkage_id] = {"event": event, "points": {"user"}}
        return {"id": linkage_id, "event": event, "point": "user"}

    def linkage(self, linkage_id: str, point: LinkagePoint) -> dict[str, str] | None:
        """The `linkage` to record on the record of `point` of an open linkage, or None when
        the linkage is unknown or that point is recorded already (each point is one record)."""
        entry = self._linkages.get(linkage_id)
        if entry is None or point in entry["points"]:
            return None
        entry["points"].add(point)
        return {"id": linkage_id, "event": str(entry["event"]), "point": point}

    def pending_linkage(self, event: str, point: LinkagePoint) -> str | None:
        """The oldest open linkage of `event` that has not reached `point` yet, or None."""
        for linkage_id, entry in self._linkages.items():
            if entry["event"] == event and point not in entry["points"]:
                return linkage_id
        return None

    def add(
        self,
        type_: str,
        actor: Actor,
        record_type: RecordType,
        payload: Mapping[str, Any],
        *,
        span_key: str | None = None,
        duration_ns: int | None = None,
        linkage: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        seq = len(self.records) + 1
        record_id = f"r{seq:06d}"
        plain = to_plain(dict(payload))
        if self.secrets != self._scrubbing:
            self._scrubber, self._scrubbing = Scrubber(self.secrets), self.secrets
        redacted = self._scrubber.document(plain)
        record: dict[str, Any] = {
            "seq": seq,
            "recordId": record_id,
            "recordType": record_type,
            "type": type_,
            "actor": actor,
            "logicalMs": self.clocks.logical_ms,
            "businessTime": self.clocks.business_time(),
            "traceId": self.trace_id,
            "spanId": self.span(span_key or record_id),
            "payload": redacted,
        }
        if redacted != plain:
            # Only redacted records carry the key; the ledger's `record.redaction` reads it.
            record["redaction"] = REDACTED_SECRETS
        if linkage is not None:
            # Only linked records carry the key, so every other record reads as before.
            record["linkage"] = dict(linkage)
        record["sha256"] = record_digest(record)
        clock: dict[str, Any] = {"wall": self.clocks.wall_time()}
        if duration_ns is not None:
            clock["durationNs"] = duration_ns
        record["clock"] = clock
        self.records.append(record)
        if self._emit is not None:
            # The event carries the four clocks apart: logical and business time here, the
            # monotonic duration when measured, and the event log's own wall time.
            event: dict[str, Any] = {
                "recordId": record_id,
                "logicalMs": record["logicalMs"],
                "businessTime": record["businessTime"],
                "traceId": self.trace_id,
                "spanId": record["spanId"],
                "data": record["payload"],
            }
            if duration_ns is not None:
                event["durationNs"] = duration_ns
            self._emit(type_, actor, event)
        for listener in self.listeners:
            listener(record)
        return record

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["type"] in types]

    def write(self, run_dir: Path | None) -> None:
        if run_dir is None:
            return
        text = "".join(
            json.dumps(r, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
            for r in self.records
        )
        write_atomic(run_dir / RECORDS_FILE, text)


def read_records(path: Path) -> list[dict[str, Any]]:
    """records.jsonl back as a list (blank lines skipped)."""
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


# --------------------------------------------------------------------------- observations


@dataclass
class Observation:
    fact_key: str
    value: Any
    derived_from: list[str]
    criterion_key: str | None = None

    def to_doc(self, index: int) -> dict[str, Any]:
        return {
            "observationId": f"o{index:04d}",
            "factKey": self.fact_key,
            "value": to_plain(self.value),
            "derivedFrom": list(self.derived_from),
            "extractor": EXTRACTOR,
        }


@dataclass
class Observations:
    """Extracted facts by key, and the keys that could not be extracted (with why)."""

    facts: dict[str, Observation] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, value: Any, derived_from: Iterable[str]) -> None:
        self.facts[key] = Observation(key, value, sorted(set(derived_from)))

    def miss(self, key: str, why: str) -> None:
        self.missing[key] = why

    def get(self, key: str) -> Any:
        fact = self.facts.get(key)
        return None if fact is None else fact.value

    def has(self, *keys: str) -> bool:
        return all(k in self.facts for k in keys)

    def ids(self) -> dict[str, str]:
        return {key: f"o{i:04d}" for i, key in enumerate(sorted(self.facts), start=1)}

    def to_doc(self) -> dict[str, Any]:
        return {
            "extractor": EXTRACTOR,
            "observations": [
                self.facts[key].to_doc(i) for i, key in enumerate(sorted(self.facts), start=1)
            ],
            "missing": [{"factKey": k, "reason": v} for k, v in sorted(self.missing.items())],
        }


def _ids(records: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(r["recordId"]) for r in records]


def add_conversation_facts(obs: Observations, records: Sequence[Mapping[str, Any]]) -> None:
    """The facts every testbed run reports, whatever its domain: the conversation's length and
    close, the event linkages and the stages of each planned fault."""
    user_msgs = [r for r in records if r["type"] == "user.message"]
    agent_msgs = [r for r in records if r["type"] == "agent.message"]
    obs.add("conversation.turns", len(user_msgs), _ids(user_msgs))
    obs.add("conversation.agent_messages", len(agent_msgs), _ids(agent_msgs))
    terminal = [r for r in records if r["type"] == "conversation.closed"]
    tasks = [r for r in records if r["type"] == "task.ended"]
    if terminal:
        obs.add("conversation.closed_by", terminal[-1]["payload"]["closedBy"], _ids(terminal[-1:]))
    else:
        obs.miss("conversation.closed_by", "the conversation never closed")
    if tasks:
        add_task_facts(obs, records, tasks)
    elif terminal:
        goal = terminal[-1]["payload"].get("goalReached")
        obs.add("user.goal_reached", bool(goal), _ids(terminal[-1:]))
    else:
        obs.miss("user.goal_reached", "the conversation never closed")

    linked = [r for r in records if isinstance(r.get("linkage"), Mapping)]
    if linked:
        # The event-linkage ledger: each linked event's three points and whether they hold.
        obs.add("linkage.events", check_linkages(records), _ids(linked))

    hits = [r for r in records if r["type"].startswith("fault.")]
    if hits:
        stages: dict[str, list[str]] = {}
        for r in hits:
            stages.setdefault(str(r["payload"]["faultId"]), []).append(r["type"][len("fault.") :])
        obs.add("fault.stages", stages, _ids(hits))


def add_task_facts(
    obs: Observations, records: Sequence[Mapping[str, Any]], ended: Sequence[Mapping[str, Any]]
) -> None:
    """A run of several tasks (`user.tasks`) is read task by task, not by its last conversation:
    each task's outcome, each session's close, how many tasks were resolved, and the user's goal
    reached only when every task the run started ended resolved (missing when one never ended;
    a task the budget cut ends unresolved, so later ones it kept from starting change nothing)."""
    sessions = [r for r in records if r["type"] == "session.closed"]
    outcomes = {str(r["payload"]["taskKey"]): str(r["payload"]["outcome"]) for r in ended}
    obs.add("tasks.outcomes", outcomes, _ids(ended))
    obs.add("tasks.resolved", sum(o == "resolved" for o in outcomes.values()), _ids(ended))
    obs.add(
        "sessions.closed_by",
        {
            f"{r['payload']['taskKey']}/{r['payload']['sessionKey']}": r["payload"]["closedBy"]
            for r in sessions
        },
        _ids(sessions),
    )
    started = [r for r in records if r["type"] == "task.started"]
    declared = {str(r["payload"]["taskKey"]) for r in started}
    if len(outcomes) < len(declared):
        obs.miss("user.goal_reached", "a task never ended")
    else:
        reached = all(o == "resolved" for o in outcomes.values())
        obs.add("user.goal_reached", reached, _ids(ended))


# --------------------------------------------------------------------------- event linkage


def check_linkages(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each linked business event of the records: its user, agent and environment points (record
    ids, None where missing), whether all three exist (`complete`), whether they come in the
    order user → agent → environment in the record sequence with logical time never going back
    (`ordered`; None while a point is missing), and every problem in words. A point recorded
    twice is a problem too: one event has one time at each point."""
    found: dict[str, dict[str, Any]] = {}
    for record in records:
        link = record.get("linkage")
        if not isinstance(link, Mapping):
            continue
        entry = found.setdefault(
            str(link.get("id")),
            {"event": str(link.get("event")), "records": {p: [] for p in LINKAGE_POINTS}},
        )
        point = str(link.get("point"))
        entry["records"].setdefault(point, []).append(record)
    results: list[dict[str, Any]] = []
    for linkage_id, entry in sorted(found.items()):
        problems: list[str] = []
        chosen: dict[str, Mapping[str, Any] | None] = {}
        for point, recs in sorted(entry["records"].items()):
            if point not in LINKAGE_POINTS:
                problems.append(
                    f"{linkage_id}: record {recs[0]['recordId']} names an unknown point "
                    f"{point!r} (expected one of {', '.join(LINKAGE_POINTS)})"
                )
                continue
            if len(recs) > 1:
                problems.append(
                    f"{linkage_id}: the {point} point is recorded more than once ("
                    + ", ".join(str(r["recordId"]) for r in recs)
                    + ")"
                )
            chosen[point] = recs[0] if recs else None
        missing = [p for p in LINKAGE_POINTS if chosen.get(p) is None]
        problems.extend(_missing_point(linkage_id, entry["event"], point) for point in missing)
        ordered: bool | None = None
        if not missing:
            ordered = True
            for earlier, later in pairwise(LINKAGE_POINTS):
                a, b = chosen[earlier], chosen[later]
                assert a is not None and b is not None
                if int(a["seq"]) >= int(b["seq"]) or int(a["logicalMs"]) > int(b["logicalMs"]):
                    ordered = False
                    problems.append(
                        f"{linkage_id} ({entry['event']}): the {later} point {b['recordId']} "
                        f"(seq {b['seq']}, {b['logicalMs']} ms) does not follow the {earlier} "
                        f"point {a['recordId']} (seq {a['seq']}, {a['logicalMs']} ms)"
                    )
        results.append(
            {
                "linkageId": linkage_id,
                "event": entry["event"],
                "points": {
                    p: (str(r["recordId"]) if (r := chosen.get(p)) is not None else None)
                    for p in LINKAGE_POINTS
                },
                "logicalMs": {
                    p: (int(r["logicalMs"]) if (r := chosen.get(p)) is not None else None)
                    for p in LINKAGE_POINTS
                },
                "complete": not missing,
                "ordered": ordered,
                "ok": not problems,
                "problems": problems,
            }
        )
    return results


def linkage_record_faults(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The linkage problems that say the records themselves cannot be trusted: a point out of
    order, recorded twice, unknown, or a missing user or agent point beside later ones. A missing
    environment point alone is not one of them: it is a finding about the agent (the user
    withdrew, the agent never carried it out), which the observation reports."""
    out: list[str] = []
    for result in results:
        points = result["points"]
        excused = {_missing_point(result["linkageId"], result["event"], "environment")}
        if points.get("user") and points.get("environment") is None:
            # The run ended before the agent was called again.
            excused.add(_missing_point(result["linkageId"], result["event"], "agent"))
        out.extend(str(problem) for problem in result["problems"] if problem not in excused)
    return out


def _missing_point(linkage_id: str, event: str, point: str) -> str:
    """The problem `check_linkages` reports for a point never recorded."""
    return f"{linkage_id} ({event}): no {point} point was recorded"


# --------------------------------------------------------------------------- completeness

CheckStatus = Literal["present", "missing", "not_applicable"]
DECISIONS_CHECK = "provider_decisions"
"""Every provider decision of the run was made; a lost one gates every verdict."""


def completeness(records: Sequence[Mapping[str, Any]], *, faults_planned: bool) -> dict[str, Any]:
    """Each check of the collection contract: present, missing or not applicable, with detail."""
    checks: dict[str, dict[str, Any]] = {}

    def put(key: str, status: CheckStatus, detail: Mapping[str, Any]) -> None:
        checks[key] = {"status": status, "detail": dict(detail)}

    user = [r for r in records if r["type"] == "user.message"]
    agent = [r for r in records if r["type"] == "agent.message"]
    put(
        "required_message",
        "present" if user and agent else "missing",
        {"userMessages": len(user), "agentMessages": len(agent)},
    )
    requests = {r["payload"]["callId"] for r in records if r["type"] == "tool.request"}
    answered = {r["payload"]["callId"] for r in records if r["type"] == "tool.response"}
    dangling = sorted(requests - answered)
    put(
        "tool_result",
        "not_applicable" if not requests else ("missing" if dangling else "present"),
        {"calls": len(requests), "unanswered": dangling},
    )
    snapshots = [r for r in records if r["type"] == "environment.snapshot"]
    put("state_snapshot", "present" if snapshots else "missing", {"snapshots": len(snapshots)})
    if faults_planned:
        planned = {r["payload"]["faultId"] for r in records if r["type"] == "fault.planned"}
        closed = {
            r["payload"]["faultId"]
            for r in records
            if r["type"] in ("fault.recovered", "fault.failed")
        }
        open_ = sorted(planned - closed)
        put(
            "fault_recovery",
            "missing" if open_ or not planned else "present",
            {"planned": sorted(planned), "unsettled": open_},
        )
    else:
        put("fault_recovery", "not_applicable", {"planned": []})
    closed_conv = [r for r in records if r["type"] == "conversation.closed"]
    put(
        "conversation_closed",
        "present" if closed_conv else "missing",
        {"closedBy": closed_conv[-1]["payload"]["closedBy"] if closed_conv else None},
    )
    decisions = [r for r in records if r["type"] in ("agent.decision", "user.decision")]
    lost = [
        r["recordId"]
        for r in decisions
        if r["payload"].get("chosen") is None or r["payload"].get("failure")
    ]
    # A decision the provider never made (call failed, answer unreadable, prompt too long) is
    # missing material: what followed it was not the agent's (or the user's) own behaviour.
    put(
        DECISIONS_CHECK,
        "missing" if lost else "present",
        {"decisions": len(decisions), "lost": len(lost), "lostRecords": lost},
    )
    untraced = [r["recordId"] for r in records if not r.get("traceId") or not r.get("spanId")]
    put("trace_refs", "missing" if untraced else "present", {"untraced": untraced})
    return {"checks": checks}


def completeness_missing(doc: Mapping[str, Any]) -> list[str]:
    return sorted(k for k, v in doc["checks"].items() if v["status"] == "missing")


# --------------------------------------------------------------------------- evidence

# The observations each built-in check needs; without them its verdict is "undecidable".
CHECK_NEEDS: dict[str, tuple[str, ...]] = {
    "no_duplicate_refund": ("refund.count",),
    "correct_amount": ("refund.amounts_minor", "order.paid_amount_minor"),
    "verified_before_retry": ("agent.ambiguous_outcomes",),
    "resolved": ("refund.states", "user.goal_reached"),
    "no_complaint": ("user.complaint",),
}
# Observations that add to a check's evidence when present (not required).
CHECK_EXTRA: dict[str, tuple[str, ...]] = {
    "verified_before_retry": ("agent.after_ambiguous",),
    "no_duplicate_refund": ("agent.create_refund_calls",),
    "resolved": ("agent.confirmed_refund",),
}


def build_evidence(
    obs: Observations,
    criteria: Sequence[tuple[str, str]],
    needs_of: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """criterion → the observations and record references that bear on it, and what is missing.
    `criteria` is (criterion key, built-in check) pairs from the evaluation spec; `needs_of`
    names what each `expect` criterion reads."""
    ids = obs.ids()
    out: dict[str, Any] = {}
    for key, check in criteria:
        needs = tuple(CHECK_NEEDS.get(check) or (needs_of or {}).get(key, ()))
        present = [k for k in (*needs, *CHECK_EXTRA.get(check, ())) if k in obs.facts]
        missing = [k for k in needs if k not in obs.facts]
        refs = sorted({ref for k in present for ref in obs.facts[k].derived_from})
        out[key] = {
            "check": check,
            "observationIds": [ids[k] for k in present],
            "factKeys": present,
            "evidenceRefs": refs,
            "missing": missing,
            "sufficient": not missing,
        }
    return {"criteria": out}


def write_layers(
    run_dir: Path | None,
    obs: Observations,
    evidence: Mapping[str, Any],
    complete: Mapping[str, Any],
) -> None:
    if run_dir is None:
        return
    write_json(run_dir / OBSERVATIONS_FILE, obs.to_doc())
    write_json(run_dir / EVIDENCE_FILE, dict(evidence))
    write_json(run_dir / COMPLETENESS_FILE, dict(complete))


def canonical_records(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Each record's content as canonical JSON (real-clock readings left out), for comparison."""
    return [canonical_json({k: v for k, v in r.items() if k != "clock"}) for r in records]
