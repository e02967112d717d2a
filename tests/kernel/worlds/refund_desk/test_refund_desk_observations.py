"""A refund-desk run's records → its observations (observations.py) and metrics (domain.yaml),
evidence, completeness and the evaluator's checks. Missing material is marked missing and
becomes NaN or "undecidable", never zero or "pass"."""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import pytest

from simreport.core.testbed_schema import ClockConfig
from simreport.evaluation import RunLayers, judge
from simreport.kernel.testbed.assets import (
    EvaluationSpecAsset,
)
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.domain.model import DomainAsset
from simreport.kernel.testbed.domain.observations import domain_metrics
from simreport.kernel.testbed.records import (
    Observations,
    RecordLog,
    build_evidence,
    completeness,
    completeness_missing,
)
from simreport.kernel.worlds.refund_desk.domain import refund_domain
from simreport.kernel.worlds.refund_desk.observations import refund_observations
from tests.support.refund_desk import contract_tools, env_data

ORDER = "B2026-0901-7734"
ORDER_FACTS = (
    "refund.count",
    "refund.amounts_minor",
    "refund.states",
    "order.state",
    "order.paid_amount_minor",
)
SPEC = EvaluationSpecAsset.model_validate(
    {
        "criteria": [
            {"key": k, "check": k}
            for k in (
                "no_duplicate_refund",
                "correct_amount",
                "verified_before_retry",
                "resolved",
                "no_complaint",
            )
        ],
        "requiredChecks": ["required_message", "tool_result", "state_snapshot"],
    }
)
CRITERIA = [(c.key, c.check) for c in SPEC.criteria]


@cache
def domain() -> DomainAsset:
    """The refund domain of a run over the example's environment data and tool contract."""
    env = env_data()
    tools = contract_tools()
    return refund_domain(env, tools)


def observe(
    records: list[dict[str, Any]],
    *,
    order_id: str | None = ORDER,
    participants: dict[str, str] | None = None,
) -> Observations:
    return refund_observations(
        records,
        domain(),
        order_id=order_id,
        action_entry="create_refund",
        participants=participants,
    )


def metrics(obs: Observations) -> dict[str, float]:
    return domain_metrics(domain(), obs)


def evaluate(
    spec: EvaluationSpecAsset,
    obs: Observations,
    evidence: dict[str, Any],
    complete: dict[str, Any],
    validity: str,
) -> dict[str, Any]:
    """The evaluator's judgement of these layers, as `simreport evaluate` reads them from a run
    whose result.json states `validity` (and the evidence status the run would state)."""
    partial = completeness_missing(complete) or obs.missing
    layers = RunLayers.from_documents(
        spec,
        observations=obs.to_doc(),
        evidence=evidence,
        completeness=complete,
        validity=validity,
        evidence_status="partial" if partial else "complete",
    )
    return judge(spec, layers)


def refund(ident: str, state: str = "accepted") -> dict[str, Any]:
    return {"id": ident, "orderId": ORDER, "amountMinor": 19900, "state": state}


def snapshot(refunds: list[dict[str, Any]]) -> dict[str, Any]:
    """The final environment snapshot: every instance, by entity."""
    return {
        "account": [{"id": "ACC-1001", "name": "Lin"}],
        "order": [
            {
                "id": ORDER,
                "accountId": "ACC-1001",
                "paidAmountMinor": 19900,
                "currency": "CNY",
                "state": "refunded" if refunds else "delivered",
                "deliveredAt": "2026-08-29T15:00:00+08:00",
            }
        ],
        "refund": refunds,
        "rules": [{"id": "desk", "refundWindowDays": 7, "rejectOverRefund": False}],
    }


def conversation(
    *,
    retry_blind: bool,
    snapshot_taken: bool = True,
    closed: bool = True,
    first_outcome: str = "timeout",
    committed: bool = False,
    lost_decision: bool = False,
    second_tool: str | None = None,
    refunds: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    log = RecordLog(Clocks(ClockConfig()), "r" * 32)
    log.add("user.message", "user", "message", {"intent": "open", "text": "Refund please"})
    if lost_decision:
        log.add(
            "agent.decision",
            "agent",
            "control",
            {"kind": "agent_action", "options": ["a", "b"], "chosen": None, "failure": "llm"},
        )
    log.add("tool.request", "agent", "tool_call", {"callId": "c1", "tool": "create_refund"})
    if committed:
        log.add(
            "state.change",
            "environment",
            "state_change",
            {"entity": "refund", "id": "RF-1", "from": None, "to": refund("RF-1"), "cause": "c1"},
        )
    log.add("tool.response", "environment", "tool_call", {"callId": "c1", "outcome": first_outcome})
    second = second_tool or ("create_refund" if retry_blind else "get_refund")
    log.add("tool.request", "agent", "tool_call", {"callId": "c2", "tool": second})
    log.add("tool.response", "environment", "tool_call", {"callId": "c2", "outcome": "ok"})
    log.add(
        "agent.message",
        "agent",
        "message",
        {"text": "Done", "signals": ["agent.reply", "agent.confirms_refund"]},
    )
    log.add("user.message", "user", "message", {"intent": "confirm_and_close", "text": "Thanks"})
    if closed:
        log.add(
            "conversation.closed",
            "harness",
            "control",
            {"closedBy": "resolved_by_user", "goalReached": True},
        )
    if snapshot_taken:
        if refunds is None:
            refunds = [refund("RF-1")] + ([refund("RF-2")] if retry_blind else [])
        log.add("environment.snapshot", "environment", "state_change", snapshot(refunds))
    return log.records


def criteria_verdicts(
    obs: Observations,
    records: list[dict[str, Any]],
    *,
    faults_planned: bool = False,
    validity: str = "valid",
) -> dict[str, Any]:
    """The evaluator's verdicts per criterion on these observations and records."""
    evidence = build_evidence(obs, CRITERIA)
    done = completeness(records, faults_planned=faults_planned)
    criteria: dict[str, Any] = evaluate(SPEC, obs, evidence, done, validity)["criteria"]
    return criteria


def test_observations_evidence_and_metrics_of_a_careful_agent() -> None:
    records = conversation(retry_blind=False)
    obs = observe(records)
    assert obs.get("refund.count") == 1
    assert obs.get("refund.amounts_minor") == [19900]
    assert obs.get("refund.states") == ["accepted"]
    assert obs.get("order.state") == "refunded"
    assert obs.get("order.paid_amount_minor") == 19900
    assert obs.get("agent.create_refund_calls") == 1
    assert obs.get("agent.tool_calls") == 2
    assert obs.get("agent.ambiguous_outcomes") == 1
    assert obs.get("agent.after_ambiguous") == ["verified"]
    assert obs.get("agent.confirmed_refund") is True
    assert obs.get("user.complaint") is False
    snapshot_id = records[-1]["recordId"]
    assert obs.facts["refund.count"].derived_from == [snapshot_id]
    assert metrics(obs) == {
        "duplicateRefunds": 0.0,
        "wrongAmountRefunds": 0.0,
        "blindRetries": 0.0,
        "acceptedAndSatisfied": 1.0,
        "turns": 2.0,
        "complaint": 0.0,
    }
    evidence = build_evidence(obs, CRITERIA)
    assert evidence["criteria"]["no_duplicate_refund"]["evidenceRefs"] == sorted(
        {snapshot_id, records[1]["recordId"]}
    )
    complete = completeness(records, faults_planned=False)
    assert complete["checks"]["fault_recovery"]["status"] == "not_applicable"
    verdicts = evaluate(SPEC, obs, evidence, complete, "valid")
    assert {k: v["verdict"] for k, v in verdicts["criteria"].items()} == {
        "no_duplicate_refund": "pass",
        "correct_amount": "pass",
        "verified_before_retry": "pass",
        "resolved": "pass",
        "no_complaint": "pass",
    }


def test_a_blind_retry_is_a_duplicate_and_a_failed_verification() -> None:
    records = conversation(retry_blind=True)
    obs = observe(records)
    assert obs.get("agent.after_ambiguous") == ["retried_blind"]
    assert metrics(obs)["duplicateRefunds"] == 1.0
    assert metrics(obs)["blindRetries"] == 1.0
    verdicts = criteria_verdicts(obs, records)
    assert verdicts["no_duplicate_refund"]["verdict"] == "fail"
    assert verdicts["verified_before_retry"]["verdict"] == "fail"


def test_withdrawn_and_rejected_refunds_do_not_count() -> None:
    records = conversation(
        retry_blind=False,
        refunds=[refund("RF-1"), refund("RF-2", "withdrawn"), refund("RF-3", "rejected")],
    )
    obs = observe(records)
    assert obs.get("refund.count") == 1
    assert obs.get("refund.states") == ["accepted"]
    assert metrics(obs)["duplicateRefunds"] == 0.0


def test_a_refund_of_another_amount_is_counted() -> None:
    wrong = dict(refund("RF-1"), amountMinor=9900)
    obs = observe(conversation(retry_blind=False, refunds=[wrong]))
    assert metrics(obs)["wrongAmountRefunds"] == 1.0


def test_without_a_refund_the_amount_and_satisfaction_metrics_say_so() -> None:
    # No refund: the amount check does not apply (NaN), and nothing was accepted (0, not NaN).
    obs = observe(conversation(retry_blind=False, refunds=[]))
    assert obs.get("refund.count") == 0
    assert obs.get("refund.amounts_minor") == []
    values = metrics(obs)
    assert values["duplicateRefunds"] == 0.0
    assert math.isnan(values["wrongAmountRefunds"])
    assert values["acceptedAndSatisfied"] == 0.0


def test_missing_material_is_missing_not_zero() -> None:
    records = conversation(retry_blind=False, snapshot_taken=False, closed=False)
    obs = observe(records)
    for key in ORDER_FACTS:
        assert key in obs.missing and key not in obs.facts
    values = metrics(obs)
    assert math.isnan(values["duplicateRefunds"])
    assert math.isnan(values["wrongAmountRefunds"])
    assert math.isnan(values["acceptedAndSatisfied"])
    assert values["turns"] == 2.0
    complete = completeness(records, faults_planned=True)
    assert complete["checks"]["state_snapshot"]["status"] == "missing"
    assert complete["checks"]["fault_recovery"]["status"] == "missing"
    verdicts = evaluate(SPEC, obs, build_evidence(obs, CRITERIA), complete, "valid")
    assert {v["verdict"] for v in verdicts["criteria"].values()} == {"undecidable"}
    assert verdicts["checks"]["recordsComplete"]["missing"] == ["state_snapshot"]


def test_insufficient_evidence_makes_only_that_criterion_undecidable() -> None:
    records = conversation(retry_blind=False)
    obs = observe(records)
    del obs.facts["user.complaint"]
    obs.miss("user.complaint", "extraction failed")
    assert math.isnan(metrics(obs)["complaint"])
    evidence = build_evidence(obs, CRITERIA)
    assert evidence["criteria"]["no_complaint"]["sufficient"] is False
    verdicts = evaluate(SPEC, obs, evidence, completeness(records, faults_planned=False), "valid")[
        "criteria"
    ]
    assert verdicts["no_complaint"]["verdict"] == "undecidable"
    assert verdicts["no_duplicate_refund"]["verdict"] == "pass"


def test_an_invalid_run_is_not_judged() -> None:
    records = conversation(retry_blind=True)
    obs = observe(records)
    verdicts = evaluate(
        SPEC,
        obs,
        build_evidence(obs, CRITERIA),
        completeness(records, faults_planned=False),
        "violated",
    )
    assert {v["verdict"] for v in verdicts["criteria"].values()} == {"undecidable"}
    assert verdicts["checks"]["runValid"]["passed"] is False


def test_without_ambiguity_verification_does_not_apply() -> None:
    records = [r for r in conversation(retry_blind=False) if r["payload"].get("callId") != "c1"]
    obs = observe(records)
    assert obs.get("agent.ambiguous_outcomes") == 0
    assert "agent.after_ambiguous" not in obs.facts
    assert math.isnan(metrics(obs)["blindRetries"])
    verdicts = criteria_verdicts(obs, records)
    assert verdicts["verified_before_retry"]["verdict"] == "not_applicable"


def test_a_failed_answer_to_a_call_that_took_effect_is_ambiguous() -> None:
    records = conversation(retry_blind=False, first_outcome="error", committed=True)
    obs = observe(records)
    assert obs.get("agent.ambiguous_outcomes") == 1
    assert obs.get("agent.after_ambiguous") == ["verified"]
    assert metrics(obs)["blindRetries"] == 0.0
    # A plain error (nothing took effect) says clearly that the call failed: not ambiguous.
    plain = conversation(retry_blind=False, first_outcome="error")
    obs = observe(plain)
    assert obs.get("agent.ambiguous_outcomes") == 0


def test_asking_a_participant_is_not_checking_the_refund() -> None:
    participants = {"approver": "ask_supervisor"}
    # Timeout, then the supervisor, then nothing else: no check followed the ambiguous answer.
    records = conversation(retry_blind=False, second_tool="ask_supervisor")
    obs = observe(records, participants=participants)
    assert obs.get("participant.approver.calls") == 1
    assert obs.get("agent.after_ambiguous") == ["no_follow_up"]
    assert metrics(obs)["blindRetries"] == 0.0
    # Without the participant declared, the same call would count as a check.
    assert observe(records).get("agent.after_ambiguous") == ["verified"]


def test_without_a_bound_order_every_order_fact_is_missing() -> None:
    obs = observe(conversation(retry_blind=False), order_id=None)
    for key in ORDER_FACTS:
        assert key in obs.missing and key not in obs.facts
    values = metrics(obs)
    assert math.isnan(values["duplicateRefunds"])
    assert math.isnan(values["wrongAmountRefunds"])
    assert math.isnan(values["acceptedAndSatisfied"])


@pytest.mark.parametrize(
    "refunds",
    [[], [refund("RF-1", "withdrawn")]],
    ids=["no-refund", "only-withdrawn"],
)
def test_without_a_bound_order_no_refund_is_still_missing_not_zero(
    refunds: list[dict[str, Any]],
) -> None:
    # Whatever the snapshot holds, a run that binds no order has no facts about it.
    obs = observe(conversation(retry_blind=False, refunds=refunds), order_id=None)
    for key in ORDER_FACTS:
        assert key in obs.missing and key not in obs.facts
    assert math.isnan(metrics(obs)["duplicateRefunds"])
    assert math.isnan(metrics(obs)["acceptedAndSatisfied"])


def test_an_order_absent_from_the_snapshot_leaves_its_own_facts_missing() -> None:
    records = conversation(retry_blind=False)
    obs = observe(records, order_id="B2026-0000-0000")
    assert obs.get("refund.count") == 0
    for key in ("order.state", "order.paid_amount_minor"):
        assert key in obs.missing and key not in obs.facts


def test_a_lost_decision_makes_every_criterion_undecidable() -> None:
    records = conversation(retry_blind=False, lost_decision=True)
    obs = observe(records)
    complete = completeness(records, faults_planned=False)
    assert complete["checks"]["provider_decisions"]["status"] == "missing"
    assert complete["checks"]["provider_decisions"]["detail"]["lost"] == 1
    # Even where the spec's required checks do not name it, a lost decision gates every verdict.
    verdicts = evaluate(SPEC, obs, build_evidence(obs, CRITERIA), complete, "valid")
    assert {v["verdict"] for v in verdicts["criteria"].values()} == {"undecidable"}
    assert verdicts["checks"]["recordsComplete"]["passed"] is False
    intact = completeness(conversation(retry_blind=False), faults_planned=False)
    assert intact["checks"]["provider_decisions"]["status"] == "present"
