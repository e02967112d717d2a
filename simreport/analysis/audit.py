"""Assemble audit.json: a pure function of the plan, the conditions and the run results.

No clock and no randomness except the bootstrap, whose generator is seeded from the plan hash, the
metric and the condition. `analyse_dir` is the I/O edge: it reads an audit directory and writes
audit.json and runs.parquet.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.canonical import canonical_json, sha256_bytes
from ..core.errors import InputError
from ..core.files import read_json, write_atomic
from ..core.overrides import lookup
from ..core.package_version import __version__
from ..core.quality_ref import EVALUATION_FILE, QUALITY_REF_KEY, quality_ref_problem
from ..core.schema import RunResult
from ..kernel.testbed.records import RECORDS_FILE
from ..kernel.testbed.user_quality import QUALITY_FILE
from . import conclusions, factorial, power, stats
from .audit_cost import cost_section
from .audit_document import AUDIT_SCHEMA_VERSION
from .coverage import coverage_matrix, read_condition_specs
from .grade import GRADE_RULE, evidence_grade
from .testbed_summary import (
    EvaluatedRun,
    FaultSteps,
    fault_problems,
    fault_steps,
    summarise_testbed,
)
from .user_quality import UserQualityRun, summarise_user_quality

IDENTICAL_NOTE = "identical to the base, not tested"
"""The note of a condition flagged identicalToBase: it ran, but it is no test (SPEC §5)."""


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
        return [f"failed in {failure.stage} ({failure.type})"]
    reasons = fault_problems(faults or {})
    if result.status.validity == "violated":
        # The kernel states a fault problem among the validity problems too; the fault steps
        # above already say which step was missing.
        problems = [p for p in validity_problems if not (reasons and p.startswith("fault "))]
        if problems:
            reasons.append("validity violated: " + "; ".join(problems))
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


def _differs(value: Any, base_value: Any) -> bool:
    return canonical_json(value) != canonical_json(base_value)


def analyse(
    plan: Mapping[str, Any],
    conditions: Sequence[Mapping[str, Any]],
    runs: Sequence[RunRecord],
    *,
    include_incomplete: bool | None = None,
    provider_override: str | None = None,
    llm_override: Mapping[str, Any] | None = None,
    category_order: Mapping[str, Sequence[str]] | None = None,
    declared_metrics: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Compute every quantity of audit.json (SPEC §6): a pure function, no I/O.

    Args:
        plan: plan.json's content without what places it (`load_audit_inputs` strips
            `planFile`, `providerOverride`, `llmOverride`, `categoryOrder`, `declaredMetrics`).
        conditions: conditions.json's entries, in plan order.
        runs: one record per expected run, in condition and replication order.
        include_incomplete: whether incomplete runs enter the statistics (default: the plan's
            `includeIncomplete`).
        provider_override: the provider every run was forced to, for the audit's `plan`.
        llm_override: the `llm` keys every run was forced to.
        category_order: each target distribution's categories in the order the plan wrote
            them (JSON objects lose it).
        declared_metrics: the metrics the world declares, compared when the plan lists none
            (failing a declaration, every metric the runs report).

    Returns:
        The audit document, without the sections `analyse_dir` adds from files (`coverage`,
        `provenance`).
    """
    include = (
        bool(plan.get("includeIncomplete", False))
        if include_incomplete is None
        else include_incomplete
    )
    plan_hash = str(plan["hash"])
    purpose = str(plan.get("purpose", "exploration"))
    metrics: list[str] = list(plan.get("metrics") or [])
    hypothesis = plan.get("hypothesis") or {}
    expectations = Expectations.from_hypothesis(hypothesis)
    targets: Mapping[str, Mapping[str, float]] = hypothesis.get("targetDistribution") or {}
    axes: list[Mapping[str, Any]] = list(plan.get("axes") or [])
    base_doc = plan.get("base") or {}

    if not metrics:
        # A plan without `metrics` compares every metric its world declares, or failing a
        # declaration, every metric the runs report.
        seen: set[str] = set(declared_metrics or ())
        if not seen:
            for record in runs:
                if record.result is not None:
                    seen.update(record.result.metrics)
        metrics = sorted(seen)

    by_condition: dict[str, list[RunRecord]] = defaultdict(list)
    for record in runs:
        by_condition[record.condition].append(record)

    samples: dict[str, dict[str, list[float]]] = {}
    replicates: dict[str, dict[str, list[conclusions.Replicate]]] = {}
    condition_rows: list[dict[str, Any]] = []
    used_runs = 0
    reported: dict[str, int] = dict.fromkeys(metrics, 0)
    """Per metric, how many used runs report a value for it at all (finite or not)."""
    for cond in conditions:
        cid = str(cond["id"])
        records = sorted(by_condition.get(cid, []), key=lambda r: r.replication)
        kept = [r for r in records if excluded_because(r, include, purpose) is None]
        samples[cid] = {
            m: [r.result.metrics.get(m, math.nan) for r in kept if r.result is not None]
            for m in metrics
        }
        replicates[cid] = {
            m: [
                conclusions.Replicate(r.replication, r.seed, r.result.metrics.get(m, math.nan))
                for r in kept
                if r.result is not None
            ]
            for m in metrics
        }
        used_runs += len(kept)
        for m in metrics:
            reported[m] += sum(1 for r in kept if r.result is not None and m in r.result.metrics)
        succeeded = sum(1 for r in records if r.result is not None and r.result.failure is None)
        complete = sum(
            1
            for r in records
            if r.result is not None and r.result.failure is None and r.result.integrity.complete
        )
        condition_rows.append(
            {
                "id": cid,
                "dir": cond.get("dir"),
                "axis": cond.get("axis"),
                "level": cond.get("level"),
                "levels": cond.get("levels") or {},
                "model": cond.get("model"),
                "baseId": cond.get("baseId"),
                "isBase": bool(cond.get("isBase", cond.get("baseId") == cid)),
                "label": cond.get("label")
                or ("base" if cond.get("isBase", cond.get("baseId") == cid) else cid),
                "identicalToBase": bool(cond.get("identicalToBase", False)),
                "runs": len(records),
                "succeeded": succeeded,
                "complete": complete,
                "excluded": len(records) - len(kept),
                "means": {m: stats.mean(samples[cid][m]) for m in metrics},
            }
        )

    moved = {
        row["id"]: _moved_axes(row, axes, base_doc) for row in condition_rows if not row["isBase"]
    }
    tests: dict[str, list[dict[str, Any]]] = {}
    notes: dict[str, str] = {}
    flags: list[dict[str, Any]] = []
    for metric in metrics:
        rows: list[dict[str, Any]] = []
        for row in condition_rows:
            if row["isBase"]:
                continue
            base_id = row["baseId"]
            base_sample = samples.get(base_id, {}).get(metric, [])
            cond_sample = samples[row["id"]][metric]
            expected = expectations.for_row(row, moved[row["id"]], metric)
            margin = expectations.margins.get(metric)
            if row["identicalToBase"]:
                result = _identical_row(base_sample, cond_sample)
            else:
                seed = stats.bootstrap_seed(plan_hash, metric, row["id"])
                result = stats.pairwise(base_sample, cond_sample, seed=seed, expected=expected)
            if result["tested"]:
                result.update(
                    conclusions.decide(
                        replicates.get(base_id, {}).get(metric, []),
                        replicates[row["id"]][metric],
                        seed=seed,
                        margin=margin,
                    )
                )
            else:
                result.update(conclusions.undecided(result["note"], margin))
            result["condition"] = row["id"]
            result["baseId"] = base_id
            result["expected"] = expected
            rows.append(result)
        # The Holm family of a metric is its tested rows: m counts nothing else.
        adjusted = stats.holm([r["mwuP"] if r["tested"] else None for r in rows])
        for r, p in zip(rows, adjusted, strict=True):
            r["holmP"] = p
        tests[metric] = rows
        flags.extend(
            {
                "kind": "smallSpread",
                "metric": metric,
                "condition": r["condition"],
                "note": r["note"],
            }
            for r in rows
            if r["smallSpread"]
        )
        note = _metric_note(rows, used_runs, reported[metric])
        if note:
            notes[metric] = note

    # One family for the headline, what the design could have detected, and each conclusion.
    family = conclusions.apply_family(tests, plan.get("primaryMetrics"))
    power_doc = _power(tests, family, plan_hash)
    for metric, rows in tests.items():
        for r, entry in zip(rows, power_doc["metrics"][metric], strict=True):
            conclusions.conclude(r, entry["mde"], entry["note"])
    base_samples = {
        m: {row["id"]: samples[row["id"]][m] for row in condition_rows if row["isBase"]}
        for m in metrics
    }
    noise_floor = power.noise_floor(
        base_samples,
        plan_hash,
        companions_by_metric=_seed_companions(condition_rows, axes, moved, samples, metrics),
    )
    sensitivity = _sensitivity(axes, moved, tests)
    # A full factorial's axes are compared by main effects over the grid, not by single cells
    # against the base (which confound the axes a cell moves together): analysis/factorial.py.
    effects = factorial.factorial_effects(plan, condition_rows, samples, metrics)
    sensitivity = factorial.rank_sensitivity(plan, sensitivity, effects["mainEffects"])
    direction = _direction_consistency(metrics, expectations, tests, axes, moved)
    distribution = _distribution(condition_rows, by_condition, targets, include, purpose)
    cross_model = _cross_model(condition_rows, samples, metrics)

    integrity: dict[str, int] = defaultdict(int)
    spent: list[tuple[str, RunResult]] = []
    run_rows = []
    # Finished and complete, yet out of the statistics: the run broke its own rules (validity
    # violated) or its evidence is partial (the agent testbed sets both).
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
        run_rows.append(
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

    models = list(plan.get("models") or [])

    def graded(replications: int) -> Any:
        return evidence_grade(
            replications=replications,
            axis_levels=[(str(a["id"]), str(a["level"]), len(a.get("levels") or [])) for a in axes],
            n_models=len(models),
            claim_type=str(plan.get("claimType", "exploratory")),
        )

    grade = graded(int(plan.get("replications", 1)))
    lost = conclusions.lost_runs(condition_rows, run_rows)
    achieved = conclusions.achieved_grade(grade.to_dict(), condition_rows, lost, graded)
    failed = sum(1 for r in run_rows if r["failure"] is not None)
    incomplete = sum(1 for r in run_rows if r["failure"] is None and not r["complete"])
    excluded = sum(1 for r in run_rows if not r["used"])
    audit = {
        "schemaVersion": AUDIT_SCHEMA_VERSION,
        "software": {"simreport": __version__},
        "plan": dict(plan),
        "options": {
            "includeIncomplete": include,
            "providerOverride": provider_override,
            "llmOverride": dict(llm_override) if llm_override else None,
        },
        "grade": {
            **grade.to_dict(),
            "rule": GRADE_RULE,
            "achieved": achieved["grade"],
            "achievedReasons": achieved["reasons"],
            "usableMin": achieved["usableMin"],
        },
        "verdict": conclusions.verdict(
            metrics, condition_rows, tests, notes, moved, lost, None, effects["mainEffects"]
        ),
        "family": family,
        "purpose": _purpose_section(purpose, runs),
        "metrics": metrics,
        "summary": {
            "conditions": len(condition_rows),
            "runs": len(run_rows),
            "failed": failed,
            "incomplete": incomplete,
            "violated": violated,
            "excluded": excluded,
            "used": len(run_rows) - excluded,
        },
        "conditions": condition_rows,
        "runs": run_rows,
        "tests": tests,
        "notes": notes,
        "flags": flags,
        "power": power_doc,
        "noiseFloor": noise_floor,
        "sensitivity": sensitivity,
        # Full-factorial designs only; {} for any other design.
        "mainEffects": effects["mainEffects"],
        "interactions": effects["interactions"],
        "factorialMethod": factorial.FACTORIAL_METHOD if effects["mainEffects"] else None,
        "directionConsistency": direction,
        "distribution": distribution,
        "distributionCategories": {
            name: [str(c) for c in (category_order or {}).get(name) or sorted(target)]
            for name, target in sorted(targets.items())
        },
        "crossModel": cross_model,
        "integrity": dict(sorted(integrity.items())),
        "cost": cost_section([str(row["id"]) for row in condition_rows], spent),
    }
    # Agent-testbed runs carry evaluations: verdicts per criterion, validity exclusions and the
    # zero-violation bound per condition (analysis/testbed.py). Other audits keep their exact
    # form. A regression audit's verdict counts never include exploration runs (purpose
    # section), and no run whose planned fault never hit or recovered counts anywhere.
    testbed = summarise_testbed(
        conditions,
        [
            EvaluatedRun(
                r.condition,
                r.result,
                r.evaluation,
                fault_problems(r.faults or {}),
                user_quality_unchecked(r.user_quality),
            )
            for r in runs
            if purpose != "regression" or r.result is None or r.result.purpose == "regression"
        ],
    )
    if testbed is not None:
        audit["testbed"] = testbed
        audit["verdict"] = conclusions.verdict(
            metrics, condition_rows, tests, notes, moved, lost, testbed, effects["mainEffects"]
        )
    # The user simulator's quality control per condition (analysis/user_quality.py), over every
    # run that has a quality-control document.
    user_quality = summarise_user_quality(
        conditions, [UserQualityRun(r.condition, r.user_quality) for r in runs]
    )
    if user_quality is not None:
        audit["userQuality"] = user_quality
    return audit


def _power(
    tests: Mapping[str, Sequence[Mapping[str, Any]]], family: Mapping[str, Any], plan_hash: str
) -> dict[str, Any]:
    """audit.json `power`: each row's MDE for the test it ran, at the Holm threshold of its rank
    in its own family (the primary metrics', or the secondary metrics')."""
    seed = power.simulation_seed(plan_hash)
    primary = power.holm_family(tests, family["primaryMetrics"])
    doc = power.power_section(tests, family=primary, seed=seed)
    if family["secondaryMetrics"]:
        secondary = power.holm_family(tests, family["secondaryMetrics"])
        other = power.power_section(tests, family=secondary, seed=seed)
        for metric in family["secondaryMetrics"]:
            doc["metrics"][metric] = other["metrics"][metric]
    return doc


def _order(rows: Sequence[Mapping[str, Any]], cid: str) -> int:
    for i, row in enumerate(rows):
        if row["id"] == cid:
            return i
    return len(rows)


def _identical_row(base: Sequence[float], cond: Sequence[float]) -> dict[str, Any]:
    """The row of a condition flagged identicalToBase: its runs are counted and averaged, but it
    is no comparison, so every statistic is None."""
    b, c = stats.finite(base), stats.finite(cond)
    return {
        "nBase": int(b.size),
        "nCond": int(c.size),
        "meanBase": stats.mean(b),
        "meanCond": stats.mean(c),
        "diff": None,
        "ci95": None,
        "cohenD": None,
        "mwuP": None,
        "w1": None,
        "cliffDelta": None,
        "directionFlip": None,
        "tested": False,
        "smallSpread": False,
        "note": IDENTICAL_NOTE,
    }


def _metric_note(rows: Sequence[Mapping[str, Any]], used_runs: int, reported: int) -> str | None:
    """Why a metric has no test at all; None when at least one row is tested."""
    if not rows:
        return "no conditions besides the base: nothing to test"
    if any(r["tested"] for r in rows):
        return None
    if used_runs == 0:
        return "no usable runs: nothing to test"
    if reported == 0:
        return "no usable run reports this metric: nothing to test"
    if all(r["nBase"] == 0 and r["nCond"] == 0 for r in rows):
        missing = used_runs - reported
        which = (
            "each reports NaN or an infinity"
            if missing == 0
            else f"{reported} report NaN or an infinity, {missing} do not report it"
        )
        return (
            f"this metric is not a finite number in any of the {used_runs} usable runs "
            f"({which}): nothing to test"
        )
    candidates = [r for r in rows if r["note"] != IDENTICAL_NOTE]
    if not candidates:
        return "every condition is identical to the base: nothing to test"
    if all(r["nBase"] == 0 for r in candidates):
        return "the base has no usable runs with a finite value of this metric"
    if all(r["nCond"] == 0 for r in candidates):
        return "no condition has usable runs with a finite value of this metric"
    return (
        f"fewer than {stats.MIN_REPLICATIONS} replications with a finite value in the base or "
        "the condition of every comparison: nothing tested"
    )


SEED_TARGETS = frozenset({"seed", "execution.seed"})
"""Scenario paths that only choose the seed: a condition that moves nothing else is the base
again under other seeds, an A/A comparison at the audit's n."""


def _seed_companions(
    condition_rows: Sequence[Mapping[str, Any]],
    axes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
    samples: Mapping[str, Mapping[str, Sequence[float]]],
    metrics: Sequence[str],
) -> dict[str, dict[str, list[tuple[str, Sequence[float]]]]]:
    """Per metric and base, the conditions that differ from the base only in their seeds, with
    their samples, in plan order (the noise floor pools them with the base)."""
    seed_axes = {str(a["id"]) for a in axes if str(a.get("target", "")) in SEED_TARGETS}
    twins = [
        row
        for row in condition_rows
        if not row["isBase"]
        and not row["identicalToBase"]
        and moved[row["id"]]
        and set(moved[row["id"]]) <= seed_axes
    ]
    return {
        m: {
            base: [
                (str(row["id"]), samples[row["id"]][m]) for row in twins if row["baseId"] == base
            ]
            for base in {str(row["baseId"]) for row in twins}
        }
        for m in metrics
    }


def _moved_axes(
    condition: Mapping[str, Any], axes: Sequence[Mapping[str, Any]], base_doc: Mapping[str, Any]
) -> list[str]:
    """The plan axes a condition moves away from their base value, in plan order.

    A one_at_a_time condition moves its one axis. A full_factorial cell also sets the axes it
    leaves at their base value; those are not moved. A cell whose every level matches the base
    (the base value could not be read, say) counts every axis it sets.
    """
    levels: Mapping[str, Any] = condition.get("levels") or {}
    own = [str(a["id"]) for a in axes if str(a["id"]) in levels]
    if len(own) <= 1:
        return own
    moved = [
        axis_id
        for axis_id, axis in ((str(a["id"]), a) for a in axes)
        if axis_id in levels
        and _differs(levels[axis_id], lookup(base_doc, str(axis.get("target", "")))[1])
    ]
    return moved or own


@dataclass(frozen=True)
class Expectations:
    """The directions a plan's hypothesis expects: per metric (`outcomes`), per axis (`axes`) and
    per level or cell (`levels`, keyed by condition id, with or without the `@model` suffix)."""

    outcomes: Mapping[str, str]
    axes: Mapping[str, Mapping[str, str]]
    levels: Mapping[str, Mapping[str, str]]
    unchanged: frozenset[str] = frozenset()
    """Metrics the hypothesis expects to stay within their margin (a robustness claim)."""
    margins: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Metric → equivalence margin in the metric's units."""

    @classmethod
    def from_hypothesis(cls, hypothesis: Mapping[str, Any]) -> Expectations:
        """Read and check the hypothesis; an unknown direction is an InputError at its path."""
        if not isinstance(hypothesis, Mapping):
            raise InputError(
                "the hypothesis is not a mapping", path="hypothesis", expected="a mapping"
            )
        outcomes = hypothesis.get("outcomes")
        unchanged = (
            frozenset(m for m, o in outcomes.items() if o == "unchanged")
            if isinstance(outcomes, Mapping)
            else frozenset()
        )
        if unchanged and isinstance(outcomes, Mapping):
            outcomes = {m: o for m, o in outcomes.items() if m not in unchanged}
        return cls(
            outcomes=_directions(outcomes, "hypothesis.outcomes"),
            axes=_directions_by_key(hypothesis.get("axes"), "hypothesis.axes"),
            levels=_directions_by_key(hypothesis.get("levels"), "hypothesis.levels"),
            unchanged=unchanged,
            margins=_margins(hypothesis.get("margins")),
        )

    def for_row(
        self, condition: Mapping[str, Any], moved: Sequence[str], metric: str
    ) -> str | None:
        """The direction expected of one row: the condition's own entry in `levels`, else what
        its moved axes expect (each axis: its level's entry, its `axes` entry, the metric's
        outcome). Moved axes that expect different directions leave the row without one; an
        axis that expects nothing does not count against the others."""
        cid = str(condition["id"])
        model = condition.get("model")
        suffix = f"@{model}" if model is not None else None
        plain = cid[: -len(suffix)] if suffix and cid.endswith(suffix) else cid
        for key in (cid, plain):
            if metric in self.levels.get(key, {}):
                return self.levels[key][metric]
        if not moved:
            return self.outcomes.get(metric)
        levels: Mapping[str, Any] = condition.get("levels") or {}
        directions = {self._for_axis(axis, levels.get(axis), metric) for axis in moved}
        directions.discard(None)  # an axis with no expectation does not disagree
        if len(directions) != 1:
            return None
        return directions.pop()

    def _for_axis(self, axis: str, value: Any, metric: str) -> str | None:
        # The id a one_at_a_time condition of this level has: `<axis>=<level>`, a level that is
        # not text written as compact canonical JSON.
        level_id = f"{axis}={value if isinstance(value, str) else canonical_json(value)}"
        for table, key in ((self.levels, level_id), (self.axes, axis)):
            if metric in table.get(key, {}):
                return table[key][metric]
        return self.outcomes.get(metric)


def _directions(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    expected = "a mapping of metric name to increase or decrease"
    if not isinstance(value, Mapping):
        raise InputError("not a mapping of metric to direction", path=path, expected=expected)
    out: dict[str, str] = {}
    for metric, direction in value.items():
        if direction not in stats.DIRECTIONS:
            raise InputError(
                f"unknown direction {direction!r}",
                path=f"{path}.{metric}",
                expected=" or ".join(stats.DIRECTIONS),
            )
        out[str(metric)] = str(direction)
    return out


def _margins(value: Any) -> dict[str, float]:
    if value is None:
        return {}
    expected = "a mapping of metric name to a positive number in the metric's units"
    if not isinstance(value, Mapping):
        raise InputError("not a mapping", path="hypothesis.margins", expected=expected)
    out: dict[str, float] = {}
    for metric, margin in value.items():
        number = margin if isinstance(margin, (int, float)) else None
        if isinstance(margin, bool) or number is None or not 0 < number < math.inf:
            raise InputError(
                f"not a positive margin: {margin!r}",
                path=f"hypothesis.margins.{metric}",
                expected=expected,
            )
        out[str(metric)] = float(number)
    return out


def _directions_by_key(value: Any, path: str) -> dict[str, dict[str, str]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(
            "not a mapping",
            path=path,
            expected="a mapping of id to a mapping of metric name to increase or decrease",
        )
    return {str(key): _directions(inner, f"{path}.{key}") for key, inner in value.items()}


def _sensitivity(
    axes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[dict[str, Any]]:
    """Per axis, the largest |d| over every metric, measured two ways, and the ranking.

    `isolated` takes the tested cells in which this axis is the only one away from its base value;
    `anyCell` every tested cell that moves it (in a full factorial design other axes may move
    too, so its d is not this axis's effect alone). An axis is ranked by `isolated` when it has
    one, else by `anyCell`; larger |d| first, ties in plan order. Axes with neither (every level
    identical to the base, or nothing testable) follow unranked, in plan order.
    """
    isolated: dict[str, dict[str, Any]] = {}
    any_cell: dict[str, dict[str, Any]] = {}
    for metric, rows in tests.items():
        for row in rows:
            d = row["cohenD"]
            if not row["tested"] or d is None or math.isnan(d):
                continue
            measure = {
                "maxAbsD": abs(d),
                "metric": metric,
                "condition": row["condition"],
                "smallSpread": row["smallSpread"],
            }
            cell_axes = moved.get(row["condition"], ())
            for axis_id in cell_axes:
                _keep_larger(any_cell, axis_id, measure)
                if len(cell_axes) == 1:
                    _keep_larger(isolated, axis_id, measure)
    entries: list[dict[str, Any]] = []
    ranking_value: dict[str, float] = {}
    for axis in axes:
        axis_id = str(axis["id"])
        ranked_by = (
            "isolated" if axis_id in isolated else "anyCell" if axis_id in any_cell else None
        )
        if ranked_by is not None:
            ranking_value[axis_id] = (isolated.get(axis_id) or any_cell[axis_id])["maxAbsD"]
        entries.append(
            {
                "axis": axis_id,
                "code": axis.get("code"),
                "rank": None,
                "rankedBy": ranked_by,
                "isolated": isolated.get(axis_id),
                "anyCell": any_cell.get(axis_id),
            }
        )
    # sorted() is stable, so equal |d| keep plan order.
    ranked = sorted(
        (e for e in entries if e["axis"] in ranking_value),
        key=lambda e: -ranking_value[e["axis"]],
    )
    for rank, entry in enumerate(ranked, start=1):
        entry["rank"] = rank
    return ranked + [e for e in entries if e["axis"] not in ranking_value]


def _keep_larger(best: dict[str, dict[str, Any]], axis_id: str, measure: Mapping[str, Any]) -> None:
    # Strictly larger: the first row seen (metric order, then condition order) wins a tie.
    if axis_id not in best or measure["maxAbsD"] > best[axis_id]["maxAbsD"]:
        best[axis_id] = dict(measure)


def _direction_consistency(
    metrics: Sequence[str],
    expectations: Expectations,
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
    axes: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
) -> dict[str, dict[str, Any]]:
    """Per metric with any expectation, how many rows concluded `moved` with an expectation
    moved as expected, overall and per moved axis (a factorial cell counts for each axis it
    moves). A row the test could not tell from the base counts neither way.

    `expected` is the direction those rows share, "mixed" when they differ, and the metric's
    outcome (or None) when there is no such row.
    """
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        rows = tests.get(metric, [])
        if metric not in expectations.outcomes and all(r["expected"] is None for r in rows):
            continue
        # Only a row that moved can hold or reverse a direction: a difference the test could not
        # tell from noise, or a zero one, is no evidence either way.
        counted = [r for r in rows if r["conclusion"] == "moved" and r["expected"] is not None]
        directions = {r["expected"] for r in counted}
        expected = (
            expectations.outcomes.get(metric)
            if not directions
            else directions.pop()
            if len(directions) == 1
            else "mixed"
        )
        as_expected = {
            r["condition"]: r["directionFlip"] is False and r["diff"] != 0 for r in counted
        }
        by_axis: dict[str, dict[str, int]] = {}
        for axis in axes:
            axis_id = str(axis["id"])
            mine = [c for c in as_expected if axis_id in moved.get(c, ())]
            if mine:
                by_axis[axis_id] = {
                    "consistent": sum(1 for c in mine if as_expected[c]),
                    "total": len(mine),
                }
        consistent = sum(1 for ok in as_expected.values() if ok)
        out[metric] = {
            "expected": expected,
            "consistent": consistent,
            "total": len(counted),
            "share": consistent / len(counted) if counted else None,
            "byAxis": by_axis,
        }
    return out


def _distribution(
    conditions: Sequence[Mapping[str, Any]],
    by_condition: Mapping[str, Sequence[RunRecord]],
    targets: Mapping[str, Mapping[str, float]],
    include: bool,
    purpose: str = "exploration",
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, target in sorted(targets.items()):
        pooled: dict[str, dict[str, int]] = {}
        for cond in conditions:
            counts: dict[str, int] = defaultdict(int)
            for record in by_condition.get(cond["id"], []):
                used = excluded_because(record, include, purpose) is None
                if used and record.result is not None:
                    for category, n in record.result.distributions.get(name, {}).items():
                        counts[category] += n
            pooled[cond["id"]] = dict(counts)
        rows = []
        for cond in conditions:
            tvd, note = stats.tvd_score(pooled[cond["id"]], target)
            base_tvd, base_note = stats.tvd_score(pooled.get(cond["baseId"], {}), target)
            rows.append(
                {
                    "condition": cond["id"],
                    "counts": dict(sorted(pooled[cond["id"]].items())),
                    "tvd": tvd,
                    "tvdBase": base_tvd,
                    "note": note or base_note,
                }
            )
        out[name] = rows
    return out


def _cross_model(
    conditions: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Mapping[str, list[float]]],
    metrics: Sequence[str],
) -> dict[str, dict[str, float | None]]:
    """Mean of each metric per model, over every run of every condition of that model."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for cond in conditions:
        model = cond.get("model")
        if model is None:
            continue
        bucket = pooled.setdefault(str(model), {m: [] for m in metrics})
        for m in metrics:
            bucket[m].extend(samples[cond["id"]][m])
    return {model: {m: stats.mean(v) for m, v in ms.items()} for model, ms in pooled.items()}


def _purpose_section(purpose: str, runs: Sequence[RunRecord]) -> dict[str, Any]:
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


# --------------------------------------------------------------------------- I/O edge


def load_audit_inputs(
    audit_dir: Path,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[RunRecord]]:
    """Read plan.json, conditions.json and every expected run's result.json (with its
    evaluation, manifest, fault steps, validity problems and user quality), for `analyse`.

    Args:
        audit_dir: the audit directory.

    Returns:
        The plan (without `planFile`, `providerOverride`, `llmOverride`, `categoryOrder` and
        `declaredMetrics`, so the audit is the same wherever and however it was run), the
        conditions, and one RunRecord per expected run (its result None when it has none).

    Raises:
        InputError: plan.json or conditions.json is missing.
    """
    plan_file = audit_dir / "plan.json"
    cond_file = audit_dir / "conditions.json"
    for needed in (plan_file, cond_file):
        if not needed.is_file():
            raise InputError(
                "not an audit directory", file=needed, expected="plan.json and conditions.json"
            )
    plan_doc = read_json(plan_file)
    # planFile is where this machine found the plan and providerOverride belongs to the options:
    # neither is part of the plan, so audit.json is the same wherever and however it was run.
    plan = {
        k: v
        for k, v in plan_doc.items()
        if k
        not in {"planFile", "providerOverride", "llmOverride", "categoryOrder", "declaredMetrics"}
    }
    conditions = read_json(cond_file)
    if isinstance(conditions, dict):
        conditions = conditions.get("conditions", [])
    records: list[RunRecord] = []
    for cond in conditions:
        reps = int(cond.get("replications", plan.get("replications", 1)))
        for r in range(reps):
            path = audit_dir / "runs" / str(cond["dir"]) / str(r) / "result.json"
            data = path.read_bytes() if path.is_file() else None
            result = RunResult.model_validate(json.loads(data)) if data is not None else None
            evaluation = current_evaluation(path.parent, data)
            manifest_file = path.with_name("manifest.json")
            manifest = read_json(manifest_file) if manifest_file.is_file() else {}
            not_online = manifest.get("notOnline") if isinstance(manifest, dict) else None
            records.append(
                RunRecord(
                    str(cond["id"]),
                    r,
                    result,
                    evaluation,
                    tuple(v for v in not_online or () if isinstance(v, dict)),
                    faults=read_fault_steps(path.parent),
                    validity_problems=read_validity_problems(path.parent),
                    user_quality=read_user_quality(path.parent),
                    seed=seed_lineage(manifest) if result is not None else None,
                )
            )
    return plan, conditions, records


def seed_lineage(manifest: Any) -> tuple[int, ...] | None:
    """A run's root seed followed by its seed path, from its manifest; None when it has none."""
    if not isinstance(manifest, Mapping):
        return None
    seed, path = manifest.get("seed"), manifest.get("seedPath")
    if not isinstance(seed, int) or isinstance(seed, bool) or not isinstance(path, list):
        return None
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in path):
        return None
    return (seed, *path)


def current_evaluation(run_dir: Path, result_bytes: bytes | None) -> dict[str, Any] | None:
    """The run's evaluation.json, when it is one to count: its qualityRef matches its content,
    and it was made from the result.json the run holds now (`result_bytes`). Otherwise None:
    the run counts as not evaluated, never with a verdict made from other material."""
    path = run_dir / EVALUATION_FILE
    if result_bytes is None or not path.is_file():
        return None
    try:
        evaluation = read_json(path)
    except ValueError:
        return None
    if quality_ref_problem(evaluation) is not None:
        return None
    inputs = (evaluation.get("run") or {}).get("inputs") or {}
    if inputs.get("result.json") != sha256_bytes(result_bytes):
        return None
    return dict(evaluation)


def read_validity_problems(run_dir: Path) -> tuple[str, ...]:
    """The problems the run's `run.validity` record names (empty without one)."""
    records_file = run_dir / RECORDS_FILE
    if not records_file.is_file():
        return ()
    problems: tuple[str, ...] = ()
    with records_file.open(encoding="utf-8") as lines:
        for line in lines:
            if '"run.validity"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            payload = record.get("payload") if isinstance(record, dict) else None
            if record.get("type") == "run.validity" and isinstance(payload, dict):
                problems = tuple(str(p) for p in payload.get("problems") or ())
    return problems


def read_user_quality(run_dir: Path) -> Mapping[str, Any] | None:
    """An agent-testbed run's user-quality.json, None when it has none."""
    file = run_dir / QUALITY_FILE
    doc = read_json(file) if file.is_file() else None
    return doc if isinstance(doc, Mapping) else None


def read_fault_steps(run_dir: Path) -> dict[str, tuple[str, ...]] | None:
    """The fault steps of an agent-testbed run: the `fault.*` records of its records.jsonl, and
    the faults its scenario.json plans (`events.triggers`, an unnamed one numbered `fault-<n>`
    as the run numbers it). None when the run has neither (not a testbed run)."""
    declared: list[str] = []
    scenario_file = run_dir / "scenario.json"
    if scenario_file.is_file():
        scenario = read_json(scenario_file)
        events = scenario.get("events") if isinstance(scenario, dict) else None
        triggers = events.get("triggers") if isinstance(events, dict) else None
        for n, trigger in enumerate(triggers or (), start=1):
            named = trigger.get("id") if isinstance(trigger, dict) else None
            declared.append(str(named or f"fault-{n}"))
    records_file = run_dir / RECORDS_FILE
    if not declared and not records_file.is_file():
        return None
    fault_records: list[dict[str, Any]] = []
    if records_file.is_file():
        with records_file.open(encoding="utf-8") as lines:
            # Only lines that can be fault records are parsed: a run's records can be many. An
            # unreadable line is no step, so it can only keep the run out, never let it in.
            for line in lines:
                if '"fault.' not in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    fault_records.append(record)
    return fault_steps(fault_records, declared)


def analyse_dir(
    audit_dir: str | Path,
    *,
    include_incomplete: bool | None = None,
    provider_override: str | None = None,
) -> dict[str, Any]:
    """Analyse an audit directory: the I/O edge of `analyse`. Writes audit.json (through
    `provenance.write_audit`, which keeps the audit it replaces in `history/`) and runs.parquet.

    Args:
        audit_dir: the audit directory (plan.json, conditions.json and the runs).
        include_incomplete: whether incomplete runs enter the statistics (default: the plan's
            `includeIncomplete`).
        provider_override: the provider the runs were forced to (default: plan.json's
            `providerOverride`).

    Returns:
        The audit, as written to audit.json (with `coverage` for an agent-testbed audit, and
        `provenance`).

    Raises:
        InputError: not an audit directory.
        SimreportError: the audit breaks its contract (an internal error); nothing is written.
    """
    root = Path(audit_dir)
    plan, conditions, records = load_audit_inputs(root)
    plan_doc = read_json(root / "plan.json")
    override = provider_override or plan_doc.get("providerOverride")
    audit = analyse(
        plan,
        conditions,
        records,
        include_incomplete=include_incomplete,
        provider_override=override,
        llm_override=plan_doc.get("llmOverride"),
        category_order=plan_doc.get("categoryOrder"),
        declared_metrics=plan_doc.get("declaredMetrics"),
    )
    from .provenance import provenance, write_audit

    # The coverage matrix of an agent-testbed audit: what its conditions test, and the gaps.
    specs = read_condition_specs(root, conditions)
    if specs is not None:
        audit["coverage"] = coverage_matrix(specs)
    audit["provenance"] = provenance(root, conditions, audit.get("plan") or {})
    # The audit this one replaces is kept in history/ first, so builds can be compared.
    write_audit(root, audit)
    write_runs_table(root / "runs.parquet", audit, conditions)
    return audit


def write_runs_table(
    path: Path, audit: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]]
) -> None:
    """Write runs.parquet atomically: one row per run with axis values, model, status and one
    column per metric.

    Args:
        path: the file to write.
        audit: the audit (its `plan.axes`, `runs` and `metrics`).
        conditions: conditions.json's entries (each run's axis levels and model).
    """
    import io

    import polars as pl

    from ..core.canonical import canonical_json

    axes = [str(a["id"]) for a in audit["plan"].get("axes") or []]
    by_id = {c["id"]: c for c in conditions}
    rows: list[dict[str, Any]] = []
    for run in audit["runs"]:
        cond = by_id.get(run["condition"], {})
        levels = cond.get("levels") or {}
        row: dict[str, Any] = {
            "condition": run["condition"],
            "model": cond.get("model"),
            "replication": run["replication"],
            "execution": run["status"]["execution"],
            "validity": run["status"]["validity"],
            "evidence": run["status"]["evidence"],
            "complete": run["complete"],
            "used": run["used"],
            "excludedBecause": run.get("excludedBecause"),
        }
        for axis in axes:
            value = levels.get(axis)
            row[f"axis:{axis}"] = (
                None
                if axis not in levels
                else (value if isinstance(value, str) else canonical_json(value))
            )
        for metric in audit["metrics"]:
            v = run["metrics"].get(metric)
            row[metric] = float(v) if v is not None else None
        rows.append(row)
    schema: dict[str, Any] = {
        "condition": pl.String,
        "model": pl.String,
        "replication": pl.Int64,
        "execution": pl.String,
        "validity": pl.String,
        "evidence": pl.String,
        "complete": pl.Boolean,
        "used": pl.Boolean,
        "excludedBecause": pl.String,
    }
    schema.update({f"axis:{a}": pl.String for a in axes})
    schema.update({m: pl.Float64 for m in audit["metrics"]})
    frame = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    buffer = io.BytesIO()
    frame.write_parquet(buffer, statistics=False)
    write_atomic(path, buffer.getvalue())
