"""A domain run's observations and metrics, read from its records alone: the domain's declared
observations over the final snapshot, the initial facts, the tool calls, the user's facts and the
conversation; then the facts every testbed run reports. A value an expression cannot read is
missing (with why), never zero; a metric that reads a missing observation is NaN."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..records import Observations, add_conversation_facts
from .expressions import ExpressionError, MissingValue
from .model import DomainAsset

_USER_FACT = re.compile(r"(?<![\w.])user\s*\.\s*([A-Za-z_]\w*)")


def tool_calls(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each tool call as the agent made it, with its outcome and body (the answer it received)."""
    answers = {str(r["payload"]["callId"]): r for r in records if r["type"] == "tool.response"}
    calls = []
    for request in (r for r in records if r["type"] == "tool.request"):
        payload = request["payload"]
        answer = answers.get(str(payload["callId"]))
        calls.append(
            {
                "callId": payload["callId"],
                "tool": payload["tool"],
                "arguments": payload.get("arguments") or {},
                "callIndex": payload.get("callIndex"),
                "outcome": answer["payload"]["outcome"] if answer is not None else "unanswered",
                "body": answer["payload"].get("body") or {} if answer is not None else {},
            }
        )
    return calls


def observe(
    records: Sequence[Mapping[str, Any]],
    domain: DomainAsset,
    user_facts: Mapping[str, Any],
) -> Observations:
    """The run's observations (observations.json), from its records and its domain."""
    obs = Observations()
    snapshots = [r for r in records if r["type"] == "environment.snapshot"]
    closed = [r for r in records if r["type"] == "conversation.closed"]
    ended = [r for r in records if r["type"] == "task.ended"]
    requests = [r for r in records if r["type"] in ("tool.request", "tool.response")]
    initial = {
        name: {str(item[kind.key]): item for item in kind.initial}
        for name, kind in domain.entities.items()
    }
    variables: dict[str, Any] = {
        "initial": initial,
        "calls": tool_calls(records),
        "user": dict(user_facts),
        "conversation": dict(closed[-1]["payload"]) if closed else {},
        # Task by task, for a run of several (user.tasks): key → outcome and what the SUT did.
        "tasks": {str(r["payload"]["taskKey"]): dict(r["payload"]) for r in ended},
        "conversations": [dict(r["payload"]) for r in closed],
    }
    sources: dict[str, list[str]] = {
        "initial": [],
        "calls": [str(r["recordId"]) for r in requests],
        "user": [],
        "conversation": [str(r["recordId"]) for r in closed[-1:]],
        "tasks": [str(r["recordId"]) for r in ended],
        "conversations": [str(r["recordId"]) for r in closed],
    }
    if snapshots:
        last = snapshots[-1]
        variables["state"] = {
            name: {str(item[domain.entities[name].key]): item for item in items}
            for name, items in last["payload"].items()
            if name in domain.entities
        }
        variables["items"] = {
            name: [found[k] for k in sorted(found)] for name, found in variables["state"].items()
        }
        sources["state"] = [str(last["recordId"])]
        sources["items"] = sources["state"]
    for i, spec in enumerate(domain.observations):
        expression = domain.expression(f"observations.{i}.value")
        absent = sorted(v for v in expression.variables if v not in variables)
        if absent:
            obs.miss(spec.key, f"the records hold no {', '.join(absent)} (no final snapshot)")
            continue
        # A fact of the user the run does not have: missing, even where the expression would
        # not read it (a filter over no instances never evaluates its condition).
        lacking = sorted(set(_USER_FACT.findall(expression.source)) - set(user_facts))
        if "user" in expression.variables and lacking:
            obs.miss(spec.key, f"the user has no fact {', '.join(lacking)}")
            continue
        if "conversation" in expression.variables and not closed:
            obs.miss(spec.key, "the conversation never closed")
            continue
        try:
            value = expression.evaluate(variables)
        except ExpressionError as exc:
            obs.miss(spec.key, exc.message)
            continue
        derived = [ref for v in sorted(expression.variables) for ref in sources.get(v, [])]
        obs.add(spec.key, value, derived)
    add_conversation_facts(obs, records)
    return obs


def domain_metrics(domain: DomainAsset, obs: Observations) -> dict[str, float]:
    """The domain's metrics over the observations: NaN where one they read is missing."""
    values = {key: fact.value for key, fact in obs.facts.items()}
    out: dict[str, float] = {}
    for name in domain.metrics:
        expression = domain.expression(f"metrics.{name}.value")
        try:
            value = expression.evaluate({"obs": values})
        except MissingValue:
            out[name] = math.nan
            continue
        if isinstance(value, bool):
            value = float(value)
        if not isinstance(value, int | float):
            raise ExpressionError(
                f"metric {name} gave {type(value).__name__} {value!r}, expected a number",
                path=f"metrics.{name}.value",
            )
        out[name] = float(value)
    return out
