"""The agent-testbed summary of an audit: verdicts per condition and criterion, the runs left out
because their conditions did not hold, and the zero-violation upper bound.

A pure function of the conditions, the run results and the runs' evaluations (evaluation.json,
read at the I/O edge). Verdicts are counted over runs whose validity is not `violated` and whose
evidence is complete; violated runs are counted apart as validity exclusions (their criteria were
never judged), and runs with partial or unchecked evidence or an incomplete integrity (a lost
provider decision, a missing observation, a crash) apart as evidence exclusions: missing evidence
is never a pass or a fail. When a
criterion has n decided runs (pass or fail) and none failed, the one-sided 95% upper bound on
its violation rate is 1 − 0.05^(1/n) — valid only for a fixed n of independent runs and no
selective exclusion, which the exclusion and undecidable counts beside it let a reader judge.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.schema import RunResult
from .stats import zero_violation_upper_bound

VERDICTS = ("pass", "fail", "undecidable", "not_applicable")
BOUND_NOTE = (
    "Zero-violation bound: with n decided runs and no failure, the one-sided 95% upper bound on "
    "the violation rate is 1 − 0.05^(1/n). It assumes a fixed number of independent runs and no "
    "selective exclusion; runs excluded for validity or incomplete evidence and undecidable "
    "verdicts are listed beside it."
)

EvaluatedRun = tuple[str, RunResult | None, Mapping[str, Any] | None]
"""(condition id, result or None, evaluation.json content or None)."""


def _counts() -> dict[str, int]:
    return dict.fromkeys(VERDICTS, 0)


def _criterion_row(counts: Mapping[str, int]) -> dict[str, Any]:
    decided = counts["pass"] + counts["fail"]
    return {
        **{_key(v): counts[v] for v in VERDICTS},
        "decided": decided,
        "violationRate": counts["fail"] / decided if decided else None,
        "zeroViolationUpperBound": (
            zero_violation_upper_bound(decided) if decided and counts["fail"] == 0 else None
        ),
    }


def _key(verdict: str) -> str:
    return "notApplicable" if verdict == "not_applicable" else verdict


def summarise_testbed(
    conditions: Sequence[Mapping[str, Any]], runs: Sequence[EvaluatedRun]
) -> dict[str, Any] | None:
    """audit.json's `testbed` section, or None when no run carries an evaluation."""
    if not any(evaluation is not None for _, _, evaluation in runs):
        return None
    criteria: list[str] = sorted(
        {
            str(key)
            for _, _, evaluation in runs
            if evaluation is not None
            for key in (evaluation.get("criteria") or {})
        }
    )
    by_condition: dict[str, list[EvaluatedRun]] = defaultdict(list)
    for run in runs:
        by_condition[run[0]].append(run)

    totals: dict[str, dict[str, int]] = {c: _counts() for c in criteria}
    rows = []
    excluded_total = evidence_excluded_total = 0
    for cond in conditions:
        cid = str(cond["id"])
        items = by_condition.get(cid, [])
        counts: dict[str, dict[str, int]] = {c: _counts() for c in criteria}
        evaluated = violated = incomplete = not_evaluated = 0
        for _, result, evaluation in items:
            if result is not None and result.status.validity == "violated":
                violated += 1
                continue
            if result is not None and (
                not result.integrity.complete or result.status.evidence != "complete"
            ):
                incomplete += 1
                continue
            if evaluation is None:
                not_evaluated += 1
                continue
            evaluated += 1
            for key, item in (evaluation.get("criteria") or {}).items():
                verdict = str(item.get("verdict"))
                if key in counts and verdict in VERDICTS:
                    counts[key][verdict] += 1
                    totals[key][verdict] += 1
        excluded_total += violated
        evidence_excluded_total += incomplete
        rows.append(
            {
                "condition": cid,
                "runs": len(items),
                "evaluated": evaluated,
                "validityExcluded": violated,
                "evidenceExcluded": incomplete,
                "notEvaluated": not_evaluated,
                "criteria": {key: _criterion_row(counts[key]) for key in criteria},
            }
        )
    return {
        "criteria": criteria,
        "conditions": rows,
        "totals": {key: _criterion_row(totals[key]) for key in criteria},
        "validityExcluded": excluded_total,
        "evidenceExcluded": evidence_excluded_total,
        "undecidable": sum(totals[key]["undecidable"] for key in criteria),
        "note": BOUND_NOTE,
    }
