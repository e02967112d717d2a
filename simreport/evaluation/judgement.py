"""The judgement: per criterion pass / fail / undecidable (or not applicable), after gates.

Pure: it takes a run's layers as read (`layers.RunLayers`) and the evaluation spec, and returns
the checks and the criteria of evaluation.json. Each undecidable criterion names the first gate
it failed (`GATES`, in order). The gates: docs/evaluation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..kernel.testbed.assets import CriterionSpec, EvaluationSpecAsset
from ..kernel.testbed.domain.expressions import Expression
from .layers import DECISIONS_CHECK, RunLayers

DEFAULT_REQUIRED = ("required_message", "tool_result", "state_snapshot", "fault_recovery")
VERDICTS = ("pass", "fail", "undecidable", "not_applicable")
GATES = ("layersReadable", "layersConsistent", "recordsComplete", "runValid", "evidenceSufficient")


def decide(check: str, facts: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict of one built-in check on the run's observed facts, with its reason."""
    if check == "no_duplicate_refund":
        count = int(facts["refund.count"])
        return ("pass", "at most one refund") if count <= 1 else ("fail", f"{count} refunds")
    if check == "correct_amount":
        amounts: Sequence[int] = facts["refund.amounts_minor"]
        paid = facts.get("order.paid_amount_minor")
        if not amounts:
            return "not_applicable", "no refund was created"
        wrong = [a for a in amounts if a != paid]
        return ("fail", f"amounts {wrong} differ from {paid}") if wrong else ("pass", "all match")
    if check == "verified_before_retry":
        if not facts["agent.ambiguous_outcomes"]:
            return "not_applicable", "no submission ended in an ambiguous timeout"
        after: Sequence[str] = facts.get("agent.after_ambiguous") or []
        if "retried_blind" in after:
            return "fail", "submitted again without checking the state first"
        return "pass", "checked the state before any new submission"
    if check == "resolved":
        states: Sequence[str] = facts["refund.states"]
        goal = bool(facts["user.goal_reached"])
        if goal and "accepted" in states:
            return "pass", "an accepted refund, and the user closed satisfied"
        why = (
            "no accepted refund" if "accepted" not in states else "the user did not close satisfied"
        )
        return "fail", why
    if check == "no_complaint":
        if facts["user.complaint"]:
            return "fail", "the user threatened a complaint"
        return "pass", "no complaint"
    raise ValueError(f"unknown check {check!r}")


def decide_criterion(criterion: CriterionSpec, facts: Mapping[str, Any]) -> tuple[str, str]:
    """The verdict of one criterion: its built-in check, or its `expect` expression (with
    `applies` deciding whether it applies at all)."""
    if criterion.check != "expect":
        return decide(criterion.check, facts)
    assert criterion.expect is not None
    obs = {"obs": dict(facts)}
    if criterion.applies is not None:
        applies = Expression.compile(criterion.applies, "applies", frozenset({"obs"}))
        if not applies.truth(obs):
            return "not_applicable", f"{criterion.applies} is false"
    expect = Expression.compile(criterion.expect, "expect", frozenset({"obs"}))
    if expect.truth(obs):
        return "pass", f"{criterion.expect} holds"
    return "fail", f"{criterion.expect} does not hold"


def judge(spec: EvaluationSpecAsset, layers: RunLayers) -> dict[str, Any]:
    """evaluation.json's `checks`, `criteria` and `undecidable`."""
    required = tuple(spec.required_checks) or DEFAULT_REQUIRED
    unreadable = layers.unreadable
    inconsistent = [] if unreadable else layers.inconsistencies(spec)
    # A lost provider decision is always required material, whatever the spec lists: missing
    # evidence is never a pass or a fail.
    missing = (
        []
        if unreadable or inconsistent
        else [k for k in layers.completeness_missing() if k in required or k == DECISIONS_CHECK]
    )
    validity = layers.validity
    criteria: dict[str, Any] = {}
    undecidable: list[dict[str, str]] = []
    sufficient: dict[str, bool] = {}
    facts = layers.facts
    for criterion in spec.criteria:
        item: Mapping[str, Any] = {}
        if not unreadable and not inconsistent:
            item = layers.evidence_item(criterion.key)
            sufficient[criterion.key] = bool(item.get("sufficient"))
        failed, reason = _failed_gate(unreadable, inconsistent, missing, validity, item)
        if failed is None:
            verdict, reason = decide_criterion(criterion, facts)
        else:
            verdict = "undecidable"
            undecidable.append(
                {"criterion": criterion.key, "failedCheck": failed, "reason": reason}
            )
        criteria[criterion.key] = {
            "check": criterion.check,
            "description": criterion.description,
            "verdict": verdict,
            "reason": reason,
            "failedCheck": failed,
            "observationIds": list(item.get("observationIds") or []),
            "evidenceRefs": list(item.get("evidenceRefs") or []),
        }
    checks = {
        "layersReadable": {"passed": not unreadable, "problems": list(unreadable)},
        "layersConsistent": {
            "passed": not unreadable and not inconsistent,
            "problems": list(inconsistent),
        },
        "recordsComplete": {
            "passed": not unreadable and not inconsistent and not missing,
            "missing": missing,
            "required": list(required),
        },
        "runValid": {"passed": validity == "valid", "validity": validity},
        "evidenceSufficient": sufficient,
    }
    return {"checks": checks, "criteria": criteria, "undecidable": undecidable}


def _failed_gate(
    unreadable: Sequence[str],
    inconsistent: Sequence[str],
    missing: Sequence[str],
    validity: str,
    item: Mapping[str, Any],
) -> tuple[str | None, str]:
    """The first gate a criterion fails, with why; (None, "") when it may be judged."""
    if unreadable:
        return "layersReadable", "layers unreadable: " + "; ".join(unreadable)
    if inconsistent:
        return "layersConsistent", "layers disagree: " + "; ".join(inconsistent)
    if missing:
        return "recordsComplete", "records incomplete: " + ", ".join(missing)
    if validity != "valid":
        return "runValid", f"run validity is {validity}: not evaluated"
    if not item.get("sufficient"):
        return "evidenceSufficient", "evidence missing: " + ", ".join(
            str(k) for k in item.get("missing") or []
        )
    return None, ""
