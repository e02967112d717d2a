"""Records → observations → evidence, completeness, metrics, and the evaluator's three checks.
Missing material is marked missing and becomes NaN or "undecidable", never zero or "pass"."""

from __future__ import annotations

import math
from typing import Any

from simreport.core.testbed_schema import ClockConfig
from simreport.evaluation import RunLayers, judge
from simreport.kernel.testbed.assets import EvaluationSpecAsset
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.records import (
    Observations,
    RecordLog,
    build_evidence,
    completeness,
    completeness_missing,
    extract_observations,
    metrics_from,
    record_digest,
)

ORDER = "B2026-0901-7734"
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


def evaluate(
    spec: EvaluationSpecAsset,
    _version: dict[str, str],
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


def conversation(
    *,
    retry_blind: bool,
    snapshot: bool = True,
    closed: bool = True,
    first_outcome: str = "timeout",
    committed: bool = False,
    lost_decision: bool = False,
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
            {"entity": "refund", "id": "RF-1", "from": None, "to": "accepted", "cause": "c1"},
        )
    log.add("tool.response", "environment", "tool_call", {"callId": "c1", "outcome": first_outcome})
    second = "create_refund" if retry_blind else "get_refund"
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
    if snapshot:
        refunds = [{"id": "RF-1", "orderId": ORDER, "amountMinor": 19900, "state": "accepted"}]
        if retry_blind:
            refunds.append(
                {"id": "RF-2", "orderId": ORDER, "amountMinor": 19900, "state": "accepted"}
            )
        log.add(
            "environment.snapshot",
            "environment",
            "state_change",
            {
                "orders": [{"id": ORDER, "paidAmountMinor": 19900, "state": "refunded"}],
                "refunds": refunds,
            },
        )
    return log.records


def test_records_carry_trace_span_and_a_digest_of_their_content() -> None:
    records = conversation(retry_blind=False)
    first = records[0]
    assert len(first["traceId"]) == 32 and len(first["spanId"]) == 16
    assert first["sha256"] == record_digest(first)
    changed = dict(first, payload={"text": "edited"})
    assert record_digest(changed) != first["sha256"]
    assert record_digest(dict(first, clock={"wall": "another time"})) == first["sha256"]


def test_observations_evidence_and_metrics_of_a_careful_agent() -> None:
    records = conversation(retry_blind=False)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    assert obs.get("refund.count") == 1
    assert obs.get("agent.after_ambiguous") == ["verified"]
    snapshot_id = records[-1]["recordId"]
    assert obs.facts["refund.count"].derived_from == [snapshot_id]
    metrics = metrics_from(obs)
    assert metrics == {
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
    verdicts = evaluate(SPEC, {"name": "s"}, obs, evidence, complete, "valid")
    assert {k: v["verdict"] for k, v in verdicts["criteria"].items()} == {
        "no_duplicate_refund": "pass",
        "correct_amount": "pass",
        "verified_before_retry": "pass",
        "resolved": "pass",
        "no_complaint": "pass",
    }


def test_a_blind_retry_is_a_duplicate_and_a_failed_verification() -> None:
    records = conversation(retry_blind=True)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    assert metrics_from(obs)["duplicateRefunds"] == 1.0
    assert metrics_from(obs)["blindRetries"] == 1.0
    verdicts = evaluate(
        SPEC,
        {},
        obs,
        build_evidence(obs, CRITERIA),
        completeness(records, faults_planned=False),
        "valid",
    )["criteria"]
    assert verdicts["no_duplicate_refund"]["verdict"] == "fail"
    assert verdicts["verified_before_retry"]["verdict"] == "fail"


def test_missing_material_is_missing_not_zero() -> None:
    records = conversation(retry_blind=False, snapshot=False, closed=False)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    assert "refund.count" in obs.missing and "refund.count" not in obs.facts
    metrics = metrics_from(obs)
    assert math.isnan(metrics["duplicateRefunds"])
    assert math.isnan(metrics["acceptedAndSatisfied"])
    assert metrics["turns"] == 2.0
    complete = completeness(records, faults_planned=True)
    assert complete["checks"]["state_snapshot"]["status"] == "missing"
    assert complete["checks"]["fault_recovery"]["status"] == "missing"
    verdicts = evaluate(SPEC, {}, obs, build_evidence(obs, CRITERIA), complete, "valid")
    assert {v["verdict"] for v in verdicts["criteria"].values()} == {"undecidable"}
    assert verdicts["checks"]["recordsComplete"]["missing"] == ["state_snapshot"]


def test_insufficient_evidence_makes_only_that_criterion_undecidable() -> None:
    records = conversation(retry_blind=False)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    del obs.facts["user.complaint"]
    obs.miss("user.complaint", "extraction failed")
    evidence = build_evidence(obs, CRITERIA)
    assert evidence["criteria"]["no_complaint"]["sufficient"] is False
    verdicts = evaluate(
        SPEC, {}, obs, evidence, completeness(records, faults_planned=False), "valid"
    )["criteria"]
    assert verdicts["no_complaint"]["verdict"] == "undecidable"
    assert verdicts["no_duplicate_refund"]["verdict"] == "pass"


def test_an_invalid_run_is_not_judged() -> None:
    records = conversation(retry_blind=True)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    verdicts = evaluate(
        SPEC,
        {},
        obs,
        build_evidence(obs, CRITERIA),
        completeness(records, faults_planned=False),
        "violated",
    )
    assert {v["verdict"] for v in verdicts["criteria"].values()} == {"undecidable"}
    assert verdicts["checks"]["runValid"]["passed"] is False


def test_without_ambiguity_verification_does_not_apply() -> None:
    records = [r for r in conversation(retry_blind=False) if r["payload"].get("callId") != "c1"]
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    assert math.isnan(metrics_from(obs)["blindRetries"])
    verdicts = evaluate(
        SPEC,
        {},
        obs,
        build_evidence(obs, CRITERIA),
        completeness(records, faults_planned=False),
        "valid",
    )["criteria"]
    assert verdicts["verified_before_retry"]["verdict"] == "not_applicable"


def test_a_failed_answer_to_a_call_that_took_effect_is_ambiguous() -> None:
    records = conversation(retry_blind=False, first_outcome="error", committed=True)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    assert obs.get("agent.ambiguous_outcomes") == 1
    assert obs.get("agent.after_ambiguous") == ["verified"]
    assert metrics_from(obs)["blindRetries"] == 0.0
    # A plain error (nothing took effect) says clearly that the call failed: not ambiguous.
    plain = conversation(retry_blind=False, first_outcome="error")
    obs = extract_observations(plain, order_id=ORDER, action_entry="create_refund")
    assert obs.get("agent.ambiguous_outcomes") == 0


def test_without_a_bound_order_every_order_fact_is_missing() -> None:
    obs = extract_observations(
        conversation(retry_blind=False), order_id=None, action_entry="create_refund"
    )
    for key in ("refund.count", "order.state", "order.paid_amount_minor"):
        assert key in obs.missing and key not in obs.facts


def test_a_lost_decision_makes_every_criterion_undecidable() -> None:
    records = conversation(retry_blind=False, lost_decision=True)
    obs = extract_observations(records, order_id=ORDER, action_entry="create_refund")
    complete = completeness(records, faults_planned=False)
    assert complete["checks"]["provider_decisions"]["status"] == "missing"
    assert complete["checks"]["provider_decisions"]["detail"]["lost"] == 1
    # Even where the spec's required checks do not name it, a lost decision gates every verdict.
    verdicts = evaluate(SPEC, {}, obs, build_evidence(obs, CRITERIA), complete, "valid")
    assert {v["verdict"] for v in verdicts["criteria"].values()} == {"undecidable"}
    assert verdicts["checks"]["recordsComplete"]["passed"] is False
    intact = completeness(conversation(retry_blind=False), faults_planned=False)
    assert intact["checks"]["provider_decisions"]["status"] == "present"
