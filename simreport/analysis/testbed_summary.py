"""The agent-testbed summary of an audit (audit.json's `testbed`): verdicts per condition and
criterion, the runs left out because their conditions or their evidence did not hold, and the
zero-violation upper bound, one per condition and criterion. A pure function of the conditions
and the runs' results, evaluations, fault steps and user-simulator problems. Which runs count,
and why: docs/statistics.md.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from ..core.schema import RunResult
from .stats import zero_violation_upper_bound

VERDICTS = ("pass", "fail", "undecidable", "not_applicable")
BOUND_NOTE = (
    "Zero-violation bound: per condition and criterion, with n decided runs of that condition and "
    "no failure, the one-sided 95% upper bound on the violation rate is 1 − 0.05^(1/n). It assumes "
    "a fixed number of independent, identically distributed runs — the replications of one "
    "condition — and no selective exclusion; runs excluded for validity (a planned fault that "
    "never hit or recovered among them) or incomplete evidence and undecidable verdicts are "
    "listed beside it. It is never pooled across conditions."
)
TOTALS_NOTE = (
    "Totals are verdict counts summed over conditions, not a bound: the conditions are different "
    "designs, so their runs are not identically distributed, and no violation rate or bound is "
    "computed over them."
)
FAULT_STEPS = ("planned", "armed", "hit", "recovered")
"""The four steps a planned fault must show before its run may enter a conclusion."""
UNVERIFIED = "recovered_unverified"
"""A `fault.recovered` record that says its recovery was not verified."""
INCONSISTENT = "failed_inconsistent: "
"""The start of the step of a `fault.failed` record whose recovery check found the state
inconsistent; the problems it names follow."""

FaultSteps = Mapping[str, Sequence[str]]
"""Fault id → the steps its records show, in order (planned, armed, hit, recovered, failed)."""


class EvaluatedRun(NamedTuple):
    """One run as the testbed summary sees it."""

    condition: str
    result: RunResult | None
    evaluation: Mapping[str, Any] | None
    """evaluation.json's content, when the run has one."""
    fault_problems: Sequence[str] = ()
    """Why the run's fault plan did not hold (`fault_problems`); empty when it held."""
    user_problems: Sequence[str] = ()
    """The user simulator's quality-control problems that left the run's validity unchecked
    (it stopped without the rules' reason): such a run is a validity exclusion too."""


def fault_steps(
    records: Iterable[Mapping[str, Any]], declared: Iterable[str] = ()
) -> dict[str, tuple[str, ...]]:
    """The steps each fault's `fault.*` records show, faults in plan order. `declared` names the
    faults the run's scenario plans, so a fault no record mentions is still listed (with no
    step). A recovery recorded as not verified is the step `recovered_unverified`; a failure
    whose recovery check found the state inconsistent is `failed_inconsistent: ` followed by
    the problems it names."""
    steps: dict[str, list[str]] = {str(fault): [] for fault in declared}
    for record in records:
        kind = str(record.get("type", ""))
        if not kind.startswith("fault."):
            continue
        payload = record.get("payload") or {}
        stage = kind[len("fault.") :]
        if stage == "recovered" and payload.get("verified") is False:
            stage = UNVERIFIED
        elif stage == "failed" and payload.get("reason") == "inconsistent":
            problems = [str(p) for p in payload.get("problems") or []]
            stage = INCONSISTENT + "; ".join(problems)
        steps.setdefault(str(payload.get("faultId")), []).append(stage)
    return {fault: tuple(stages) for fault, stages in steps.items()}


def fault_problems(steps: FaultSteps) -> list[str]:
    """Why a run's fault plan did not hold, one sentence per fault that lacks a step, naming the
    first missing one (e.g. "fault refund-timeout planned, never hit"); empty when every planned
    fault was planned, armed, hit and recovered. The design: "没有 hit 与 recovered 的 Run，
    不得进入回归结论"."""
    out: list[str] = []
    for fault, stages in steps.items():
        if not stages:
            out.append(f"fault {fault} planned in the scenario, no step recorded")
        elif "planned" not in stages:
            out.append(f"fault {fault} recorded without its plan")
        elif "armed" not in stages:
            out.append(f"fault {fault} planned, never armed")
        elif "hit" not in stages:
            out.append(f"fault {fault} planned, never hit")
        elif "recovered" not in stages:
            inconsistent = [s[len(INCONSISTENT) :] for s in stages if s.startswith(INCONSISTENT)]
            if inconsistent:
                out.append(
                    f"fault {fault} hit, its recovery left the state inconsistent"
                    + (f" ({inconsistent[0]})" if inconsistent[0] else "")
                )
            elif UNVERIFIED in stages:
                out.append(f"fault {fault} hit, its recovery not verified")
            else:
                out.append(f"fault {fault} hit, never recovered")
    return out


def _counts() -> dict[str, int]:
    return dict.fromkeys(VERDICTS, 0)


def _count_row(counts: Mapping[str, int]) -> dict[str, int]:
    return {
        **{_key(v): counts[v] for v in VERDICTS},
        "decided": counts["pass"] + counts["fail"],
    }


def _criterion_row(counts: Mapping[str, int]) -> dict[str, Any]:
    """One condition's verdicts on one criterion, with its rate and its bound."""
    row: dict[str, Any] = _count_row(counts)
    decided = row["decided"]
    row["violationRate"] = counts["fail"] / decided if decided else None
    row["zeroViolationUpperBound"] = (
        zero_violation_upper_bound(decided) if decided and counts["fail"] == 0 else None
    )
    return row


def _key(verdict: str) -> str:
    return "notApplicable" if verdict == "not_applicable" else verdict


def _evaluators(runs: Sequence[EvaluatedRun]) -> list[dict[str, Any]]:
    """Who judged the runs: each evaluator (name, version, sha256) and evaluation spec (name,
    version, sha256) pair, with the number of runs it evaluated."""
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for run in runs:
        if run.evaluation is None:
            continue
        evaluator = run.evaluation.get("evaluator") or {}
        spec = run.evaluation.get("spec") or {}
        key = tuple(str(evaluator.get(k)) for k in ("name", "version", "sha256")) + tuple(
            str(spec.get(k)) for k in ("name", "version", "sha256")
        )
        counts[key] += 1
    return [
        {
            "name": key[0],
            "version": key[1],
            "sha256": key[2],
            "spec": {"name": key[3], "version": key[4], "sha256": key[5]},
            "runs": n,
        }
        for key, n in sorted(counts.items())
    ]


def summarise_testbed(
    conditions: Sequence[Mapping[str, Any]], runs: Sequence[EvaluatedRun]
) -> dict[str, Any] | None:
    """audit.json's `testbed` section, or None when no run carries an evaluation."""
    if not any(run.evaluation is not None for run in runs):
        return None
    criteria: list[str] = sorted(
        {
            str(key)
            for run in runs
            if run.evaluation is not None
            for key in (run.evaluation.get("criteria") or {})
        }
    )
    by_condition: dict[str, list[EvaluatedRun]] = defaultdict(list)
    for run in runs:
        by_condition[run.condition].append(run)

    totals: dict[str, dict[str, int]] = {c: _counts() for c in criteria}
    rows = []
    excluded_total = evidence_excluded_total = 0
    for cond in conditions:
        cid = str(cond["id"])
        items = by_condition.get(cid, [])
        counts: dict[str, dict[str, int]] = {c: _counts() for c in criteria}
        evaluated = violated = incomplete = not_evaluated = 0
        for run in items:
            result, evaluation = run.result, run.evaluation
            if (
                run.fault_problems
                or run.user_problems
                or (result is not None and result.status.validity == "violated")
            ):
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
        "evaluators": _evaluators(runs),
        "conditions": rows,
        "totals": {key: _count_row(totals[key]) for key in criteria},
        "totalsNote": TOTALS_NOTE,
        "validityExcluded": excluded_total,
        "evidenceExcluded": evidence_excluded_total,
        "undecidable": sum(totals[key]["undecidable"] for key in criteria),
        "note": BOUND_NOTE,
    }
