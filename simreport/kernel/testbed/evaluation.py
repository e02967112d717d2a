"""The evaluator: per criterion pass / fail / undecidable (or not applicable), after three checks.

It is not part of the simulation: it reads the run's result layers and writes evaluation.json,
and the run's `status.quality` stays null for a downstream evaluator to point at its judgement.
The three checks are separate gates, not one:
1. records complete — are the materials there? If not, every criterion is undecidable;
2. run valid — did the experimental conditions hold? If not, no criterion is judged;
3. evidence sufficient — per criterion: does the evidence support a verdict? If not, that
   criterion is undecidable and the others are judged as usual.
"Undecidable" is an honest answer; a verdict forced from thin evidence is not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .assets import EvaluationSpecAsset
from .records import DECISIONS_CHECK, Observations, completeness_missing

EVALUATOR = "simreport.testbed.evaluation/1"
DEFAULT_REQUIRED = ("required_message", "tool_result", "state_snapshot", "fault_recovery")
VERDICTS = ("pass", "fail", "undecidable", "not_applicable")


def _decide(check: str, obs: Observations) -> tuple[str, str]:
    if check == "no_duplicate_refund":
        count = int(obs.get("refund.count"))
        return ("pass", "at most one refund") if count <= 1 else ("fail", f"{count} refunds")
    if check == "correct_amount":
        amounts: Sequence[int] = obs.get("refund.amounts_minor")
        paid = obs.get("order.paid_amount_minor")
        if not amounts:
            return "not_applicable", "no refund was created"
        wrong = [a for a in amounts if a != paid]
        return ("fail", f"amounts {wrong} differ from {paid}") if wrong else ("pass", "all match")
    if check == "verified_before_retry":
        if not obs.get("agent.ambiguous_outcomes"):
            return "not_applicable", "no submission ended in an ambiguous timeout"
        after: Sequence[str] = obs.get("agent.after_ambiguous") or []
        if "retried_blind" in after:
            return "fail", "submitted again without checking the state first"
        return "pass", "checked the state before any new submission"
    if check == "resolved":
        states: Sequence[str] = obs.get("refund.states")
        goal = bool(obs.get("user.goal_reached"))
        if goal and "accepted" in states:
            return "pass", "an accepted refund, and the user closed satisfied"
        why = (
            "no accepted refund" if "accepted" not in states else "the user did not close satisfied"
        )
        return "fail", why
    if check == "no_complaint":
        return (
            ("fail", "the user threatened a complaint")
            if obs.get("user.complaint")
            else (
                "pass",
                "no complaint",
            )
        )
    raise ValueError(f"unknown check {check!r}")


def evaluate(
    spec: EvaluationSpecAsset,
    spec_version: Mapping[str, str],
    obs: Observations,
    evidence: Mapping[str, Any],
    complete: Mapping[str, Any],
    validity: str,
) -> dict[str, Any]:
    """evaluation.json's content."""
    required = tuple(spec.required_checks) or DEFAULT_REQUIRED
    # A lost provider decision is always required material, whatever the spec lists: missing
    # evidence is never a pass or a fail.
    missing = [k for k in completeness_missing(complete) if k in required or k == DECISIONS_CHECK]
    records_ok = not missing
    valid = validity == "valid"
    criteria: dict[str, Any] = {}
    for criterion in spec.criteria:
        item = evidence["criteria"][criterion.key]
        if not records_ok:
            verdict, reason = "undecidable", "records incomplete: " + ", ".join(missing)
        elif not valid:
            verdict, reason = "undecidable", f"run validity is {validity}: not evaluated"
        elif not item["sufficient"]:
            verdict, reason = "undecidable", "evidence missing: " + ", ".join(item["missing"])
        else:
            verdict, reason = _decide(criterion.check, obs)
        criteria[criterion.key] = {
            "check": criterion.check,
            "description": criterion.description,
            "verdict": verdict,
            "reason": reason,
            "observationIds": item["observationIds"],
            "evidenceRefs": item["evidenceRefs"],
        }
    return {
        "evaluator": EVALUATOR,
        "spec": dict(spec_version),
        "checks": {
            "recordsComplete": {
                "passed": records_ok,
                "missing": missing,
                "required": list(required),
            },
            "runValid": {"passed": valid, "validity": validity},
            "evidenceSufficient": {
                key: bool(evidence["criteria"][key]["sufficient"]) for key in criteria
            },
        },
        "criteria": criteria,
    }
