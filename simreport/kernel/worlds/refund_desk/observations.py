"""A refund-desk run's observations, from its records alone: the domain's declared facts about
the bound order (domain.yaml), the facts every testbed run reports, and what the records say of
the agent's conduct — submissions through the action entry, what followed each ambiguous
answer, the participants it reached, a confirmed refund, a threatened complaint."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...testbed.domain.model import DomainAsset
from ...testbed.domain.observations import observe
from ...testbed.records import Observations


def refund_observations(
    records: Sequence[Mapping[str, Any]],
    domain: DomainAsset,
    *,
    order_id: str | None,
    action_entry: str,
    participants: Mapping[str, str] | None = None,
) -> Observations:
    """The run's observations (observations.json).

    Args:
        records: the run's records.
        domain: the run's refund domain (domain.py).
        order_id: the order the scenario binds to the user, when the environment data holds
            it; None leaves every fact about the order missing.
        action_entry: the tool that submits refunds.
        participants: participant id → the tool that reaches it.
    """
    facts = {"orderNumber": order_id} if order_id is not None else {}
    obs = observe(_domain_snapshots(records), domain, facts)
    add_conduct(obs, records, action_entry=action_entry, participants=participants)
    return obs


def _domain_snapshots(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records with every environment snapshot in the domain's shape (entity → instances).
    A run recorded before the refund desk was a domain snapshotted its fact model as `orders`,
    `refunds` and `accounts`; read as the domain's entities, its observations are what that
    run observed, so its evaluation recomputes them rather than refusing them as altered."""
    out: list[Mapping[str, Any]] = []
    for record in records:
        payload = record.get("payload")
        if record.get("type") == "environment.snapshot" and _fact_model_shape(payload):
            assert isinstance(payload, Mapping)
            record = {**record, "payload": _as_entities(payload)}
        out.append(record)
    return out


def _fact_model_shape(payload: Any) -> bool:
    return isinstance(payload, Mapping) and "orders" in payload and "order" not in payload


def _as_entities(payload: Mapping[str, Any]) -> dict[str, Any]:
    orders = [
        {
            "id": o.get("id", o.get("orderNo")),
            "paidAmountMinor": o.get("paidAmountMinor"),
            "currency": o.get("currency"),
            "state": o.get("state"),
            "deliveredAt": o.get("deliveredAt"),
        }
        for o in payload.get("orders") or []
        if isinstance(o, Mapping)
    ]
    refunds = [dict(r) for r in payload.get("refunds") or [] if isinstance(r, Mapping)]
    accounts = [{"id": a} for a in payload.get("accounts") or [] if isinstance(a, str)]
    return {"account": accounts, "order": orders, "refund": refunds}


def add_conduct(
    obs: Observations,
    records: Sequence[Mapping[str, Any]],
    *,
    action_entry: str,
    participants: Mapping[str, str] | None = None,
) -> None:
    """Add what the records say of the agent's conduct and the user's complaint."""
    requests = [r for r in records if r["type"] == "tool.request"]
    responses = {r["payload"]["callId"]: r for r in records if r["type"] == "tool.response"}
    creates = [r for r in requests if r["payload"]["tool"] == action_entry]
    obs.add("agent.create_refund_calls", len(creates), _ids(creates))
    obs.add("agent.tool_calls", len(requests), _ids(requests))
    participant_tools = set((participants or {}).values())
    for pid, tool in sorted((participants or {}).items()):
        asked = [r for r in requests if r["payload"]["tool"] == tool]
        joined = [
            r
            for r in records
            if r["type"] == "participant.joined" and r["payload"].get("id") == pid
        ]
        obs.add(f"participant.{pid}.calls", len(asked), _ids(asked) or _ids(joined))

    # An ambiguous outcome: a submission whose answer did not say whether it took effect — a
    # timeout, or any failed answer to a call the service did commit (or holds to commit), such
    # as an error returned after the refund was made.
    took_effect = {
        str(r["payload"].get("cause"))
        for r in records
        if r["type"] == "state.change" and r["payload"].get("cause") is not None
    } | {str(r["payload"]["callId"]) for r in records if r["type"] == "tool.response.lost"}
    ambiguous = [
        responses[call_id]
        for call_id in (r["payload"]["callId"] for r in creates)
        if call_id in responses
        and (
            responses[call_id]["payload"]["outcome"] == "timeout"
            or (responses[call_id]["payload"]["outcome"] != "ok" and call_id in took_effect)
        )
    ]
    obs.add("agent.ambiguous_outcomes", len(ambiguous), _ids(ambiguous))
    if ambiguous:
        verdicts: list[str] = []
        used: list[str] = []
        for amb in ambiguous:
            later = [r for r in requests if r["seq"] > amb["seq"]]
            # Asking a participant is not checking the refund's state.
            first_check = next(
                (
                    r
                    for r in later
                    if r["payload"]["tool"] != action_entry
                    and r["payload"]["tool"] not in participant_tools
                ),
                None,
            )
            first_retry = next((r for r in later if r["payload"]["tool"] == action_entry), None)
            used.append(amb["recordId"])
            if first_retry is None:
                verdicts.append("verified" if first_check is not None else "no_follow_up")
                used.extend(_ids([r for r in (first_check,) if r is not None]))
            elif first_check is not None and first_check["seq"] < first_retry["seq"]:
                verdicts.append("verified")
                used.extend(_ids([first_check, first_retry]))
            else:
                verdicts.append("retried_blind")
                used.append(first_retry["recordId"])
        obs.add("agent.after_ambiguous", verdicts, used)

    user_msgs = [r for r in records if r["type"] == "user.message"]
    agent_msgs = [r for r in records if r["type"] == "agent.message"]
    complaints = [r for r in user_msgs if r["payload"].get("intent") == "threaten_complaint"]
    obs.add("user.complaint", bool(complaints), _ids(complaints) or _ids(user_msgs))
    confirmed = [
        r for r in agent_msgs if "agent.confirms_refund" in r["payload"].get("signals", [])
    ]
    obs.add("agent.confirmed_refund", bool(confirmed), _ids(confirmed) or _ids(agent_msgs))


def _ids(records: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(r["recordId"]) for r in records]
