"""The runs of an audit: one expected run (`RunRecord`), why a run stays out of the statistics
(`exclusion_reasons`), and audit.json `runs`, `summary` and `purpose`. Pure functions of the
records; reading them from an audit directory is in `audit_inputs`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.quality_ref import QUALITY_REF_KEY
from ..core.schema import RunResult
from .testbed_summary import FaultSteps, fault_problems


@dataclass(frozen=True)
class RunRecord:
    """One expected run: its result, or None when no result.json exists."""

    condition: str
    replication: int
    result: RunResult | None
    evaluation: Mapping[str, Any] | None = None
    """The agent testbed's evaluation.json for this run (written by `simreport evaluate`, never
    by the run), when it has one whose qualityRef matches its content and which was made from
    the result.json the run has now (`current_evaluation`)."""
    not_online: tuple[Mapping[str, str], ...] = ()
    """Versions the run recorded that were not online (its manifest's `notOnline`)."""
    faults: FaultSteps | None = None
    """The agent testbed's fault steps (fault id → planned, armed, hit, recovered …) from the
    run's records.jsonl and the faults its scenario plans; None for a run without records."""
    user_quality: Mapping[str, Any] | None = None
    """The agent testbed's user-quality.json (the user simulator's quality control)."""
    validity_problems: tuple[str, ...] = ()
    """Why the run is violated, as the run's own `run.validity` record says."""
    seed: tuple[int, ...] | None = None
    """The seed lineage the run ran under: its root seed, then its seed path (from its
    manifest); None when it recorded none. Base and condition runs with the same lineage are
    paired."""


LOST_DECISIONS = ("parseFailures", "llmFailures", "promptTooLong")
"""The integrity counters of decisions a run lost (each leaves it incomplete)."""


def exclusion_reasons(
    result: RunResult | None,
    include_incomplete: bool,
    purpose: str = "exploration",
    *,
    faults: FaultSteps | None = None,
    validity_problems: Sequence[str] = (),
    unchecked_problems: Sequence[str] = (),
) -> list[str]:
    """Why a run stays out of the statistics (empty when it enters), each reason as the report
    states it. `include_incomplete` widens only to incomplete runs (and failed runs that still
    reported metrics): an exploration run never enters a regression audit, and a run whose
    conditions did not hold — its validity violated, or a planned fault that never hit or never
    recovered by its own records — never enters any conclusion."""
    if result is None:
        return ["no result.json"]
    if purpose == "regression" and result.purpose != "regression":
        return ["exploration run in a regression audit"]
    failure = result.failure
    if failure is not None and not (include_incomplete and result.metrics):
        return [failed_reason(failure.stage, failure.type)]
    reasons = fault_problems(faults or {})
    if result.status.validity == "violated":
        # The kernel states a fault problem among the validity problems too; the fault steps
        # above already say which step was missing.
        problems = [p for p in validity_problems if not (reasons and p.startswith("fault "))]
        if problems:
            reasons.append(violated_reason(problems))
        elif not reasons:
            reasons.append("validity violated (the run's conditions did not hold)")
    elif result.status.validity == "unchecked" and unchecked_problems:
        # The user simulator's quality control could not establish the run's validity (it
        # stopped without the rules' reason): out of every conclusion, like a violated run.
        reasons.append("validity unchecked: " + "; ".join(unchecked_problems))
    if not include_incomplete:
        if result.status.execution != "completed" and failure is None:
            reasons.append(f"execution {result.status.execution}")
        if result.status.evidence == "partial" or not result.integrity.complete:
            reasons.append(_incompleteness(result))
    return reasons


def failed_reason(stage: str, kind: str) -> str:
    """The exclusion reason of a run that failed in `stage` with a failure of type `kind`."""
    return f"failed in {stage} ({kind})"


def violated_reason(problems: Sequence[str]) -> str:
    """The exclusion reason of a run whose validity was violated, with the problems it recorded."""
    return "validity violated: " + "; ".join(problems)


def _incompleteness(result: RunResult) -> str:
    counters = result.integrity.counters
    detail = [f"{k} {counters[k]}" for k in LOST_DECISIONS if counters.get(k)] + [
        f"{k.removeprefix('missing:')} missing"
        for k in sorted(counters)
        if k.startswith("missing:") and counters[k]
    ]
    what = "evidence partial" if result.status.evidence == "partial" else "integrity incomplete"
    return what + (f" ({', '.join(detail)})" if detail else "")


def usable(
    result: RunResult | None,
    include_incomplete: bool,
    purpose: str = "exploration",
    faults: FaultSteps | None = None,
) -> bool:
    """Whether a run enters the statistics (`exclusion_reasons` says why not)."""
    return not exclusion_reasons(result, include_incomplete, purpose, faults=faults)


def excluded_because(record: RunRecord, include_incomplete: bool, purpose: str) -> str | None:
    """audit.json's `excludedBecause` of a run: its reasons joined, or None when it is used."""
    reasons = exclusion_reasons(
        record.result,
        include_incomplete,
        purpose,
        faults=record.faults,
        validity_problems=record.validity_problems,
        unchecked_problems=user_quality_unchecked(record.user_quality),
    )
    return "; ".join(reasons) if reasons else None


def user_quality_unchecked(quality: Mapping[str, Any] | None) -> list[str]:
    """The user simulator's quality-control problems that left a run's validity unchecked."""
    disposition = (quality or {}).get("disposition") or {}
    return [f"user simulator QC: {p}" for p in disposition.get("unchecked") or ()]


def _status_of(
    result: RunResult | None, evaluation: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A run's statuses; `quality` is the qualityRef of its evaluation, when it has one (the
    run's own result.json leaves it null)."""
    if result is None:
        return {"execution": "missing", "validity": "unchecked", "evidence": "unchecked"}
    status = result.status.to_doc()
    if evaluation is not None:
        status["quality"] = evaluation.get(QUALITY_REF_KEY)
    return status


@dataclass(frozen=True)
class RunRows:
    """audit.json `runs` in condition and replication order, with the totals taken from them."""

    rows: list[dict[str, Any]]
    integrity: dict[str, int]
    """Each integrity counter summed over the runs with a result, by counter name."""
    spent: list[tuple[str, RunResult]]
    """(condition, result) of every run with a result, for the cost section."""
    violated: int
    """Runs finished and complete, yet out of the statistics: the run broke its own rules
    (validity violated) or its evidence is partial (the agent testbed sets both)."""

    def summary(self, conditions: int) -> dict[str, int]:
        """audit.json `summary`: how many conditions and runs, and how the runs ended."""
        failed = sum(1 for r in self.rows if r["failure"] is not None)
        incomplete = sum(1 for r in self.rows if r["failure"] is None and not r["complete"])
        excluded = sum(1 for r in self.rows if not r["used"])
        return {
            "conditions": conditions,
            "runs": len(self.rows),
            "failed": failed,
            "incomplete": incomplete,
            "violated": self.violated,
            "excluded": excluded,
            "used": len(self.rows) - excluded,
        }


def run_rows(
    runs: Sequence[RunRecord],
    condition_rows: Sequence[Mapping[str, Any]],
    include: bool,
    purpose: str,
) -> RunRows:
    """One audit.json `runs` row per expected run, in the order of `condition_rows`, then by
    replication: its statuses, whether it is used (or why not), its metrics and its failure."""
    integrity: dict[str, int] = defaultdict(int)
    spent: list[tuple[str, RunResult]] = []
    rows = []
    violated = 0
    for record in sorted(runs, key=lambda r: (_order(condition_rows, r.condition), r.replication)):
        res = record.result
        if (
            res is not None
            and res.failure is None
            and res.integrity.complete
            and (res.status.validity == "violated" or res.status.evidence == "partial")
        ):
            violated += 1
        if res is not None:
            for k, v in res.integrity.counters.items():
                integrity[k] += v
            spent.append((record.condition, res))
        why = excluded_because(record, include, purpose)
        rows.append(
            {
                "condition": record.condition,
                "replication": record.replication,
                "seedPath": res.seed_path if res is not None else None,
                "status": _status_of(res, record.evaluation),
                "complete": bool(res is not None and res.integrity.complete),
                "used": why is None,
                "excludedBecause": why,
                "purpose": res.purpose if res is not None else None,
                "metrics": dict(res.metrics) if res is not None else {},
                "failure": (
                    res.failure.to_doc()
                    if res is not None and res.failure is not None
                    else (
                        {"stage": "harness", "type": "MissingResult", "message": "no result.json"}
                        if res is None
                        else None
                    )
                ),
            }
        )
    return RunRows(rows, dict(sorted(integrity.items())), spent, violated)


def _order(rows: Sequence[Mapping[str, Any]], cid: str) -> int:
    for i, row in enumerate(rows):
        if row["id"] == cid:
            return i
    return len(rows)


def purpose_section(purpose: str, runs: Sequence[RunRecord]) -> dict[str, Any]:
    """Why the audit ran, how many runs were exploration runs (never in a regression audit's
    statistics) and every version its runs recorded that was not online."""
    versions = {
        (str(v.get("kind")), str(v.get("name")), str(v.get("version"))): str(v.get("status"))
        for record in runs
        for v in record.not_online
    }
    return {
        "purpose": purpose,
        "explorationRuns": sum(
            1 for r in runs if r.result is not None and r.result.purpose == "exploration"
        ),
        "notOnline": [
            {"kind": kind, "name": name, "version": version, "status": status}
            for (kind, name, version), status in sorted(versions.items())
        ],
    }
