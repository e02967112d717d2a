"""Assemble audit.json: a pure function of the plan, the conditions and the run results.

No clock and no randomness except the bootstrap, whose generator is seeded from the plan hash, the
metric and the condition. `analyse` assembles the sections its sibling modules compute (the runs,
the conditions, the pairwise tests, power, the noise floor, sensitivity, expectations);
`analyse_dir` is the I/O edge: it reads an audit directory and writes audit.json and runs.parquet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.files import read_json, write_atomic
from ..core.package_version import __version__
from . import conclusions, factorial
from .audit_cost import cost_section
from .audit_document import AUDIT_SCHEMA_VERSION
from .audit_inputs import load_audit_inputs, read_fault_steps
from .condition_table import condition_table, cross_model, distribution, moved_axes
from .coverage import coverage_matrix, read_condition_specs
from .expectations import Expectations, direction_consistency
from .grade import GRADE_RULE, evidence_grade
from .noise_floor import noise_floor, seed_companions
from .pairwise_rows import pairwise_rows
from .power_section import power_by_family
from .run_records import (
    RunRecord,
    exclusion_reasons,
    purpose_section,
    run_rows,
    usable,
    user_quality_unchecked,
)
from .sensitivity import sensitivity
from .testbed_summary import EvaluatedRun, fault_problems, summarise_testbed
from .user_quality import UserQualityRun, summarise_user_quality

__all__ = [
    "RunRecord",
    "analyse",
    "analyse_dir",
    "exclusion_reasons",
    "load_audit_inputs",
    "read_fault_steps",
    "usable",
    "user_quality_unchecked",
    "write_runs_table",
]


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

    table = condition_table(conditions, by_condition, metrics, include, purpose)
    condition_rows, samples = table.rows, table.samples

    moved = {
        row["id"]: moved_axes(row, axes, base_doc) for row in condition_rows if not row["isBase"]
    }
    compared = pairwise_rows(metrics, table, moved, expectations, plan_hash)
    tests, notes = compared.tests, compared.notes

    # One family for the headline, what the design could have detected, and each conclusion.
    family = conclusions.apply_family(tests, plan.get("primaryMetrics"))
    power_doc = power_by_family(tests, family, plan_hash)
    for metric, rows in tests.items():
        for r, entry in zip(rows, power_doc["metrics"][metric], strict=True):
            conclusions.conclude(r, entry["mde"], entry["note"])
    base_samples = {
        m: {row["id"]: samples[row["id"]][m] for row in condition_rows if row["isBase"]}
        for m in metrics
    }
    floor = noise_floor(
        base_samples,
        plan_hash,
        companions_by_metric=seed_companions(condition_rows, axes, moved, samples, metrics),
    )
    ranked = sensitivity(axes, moved, tests)
    # A full factorial's axes are compared by main effects over the grid, not by single cells
    # against the base (which confound the axes a cell moves together): analysis/factorial.py.
    effects = factorial.factorial_effects(plan, condition_rows, samples, metrics)
    ranked = factorial.rank_sensitivity(plan, ranked, effects["mainEffects"])
    direction = direction_consistency(metrics, expectations, tests, axes, moved)
    by_category = distribution(condition_rows, by_condition, targets, include, purpose)
    by_model = cross_model(condition_rows, samples, metrics)
    ran = run_rows(runs, condition_rows, include, purpose)

    models = list(plan.get("models") or [])

    def graded(replications: int) -> Any:
        return evidence_grade(
            replications=replications,
            axis_levels=[(str(a["id"]), str(a["level"]), len(a.get("levels") or [])) for a in axes],
            n_models=len(models),
            claim_type=str(plan.get("claimType", "exploratory")),
        )

    grade = graded(int(plan.get("replications", 1)))
    lost = conclusions.lost_runs(condition_rows, ran.rows)
    achieved = conclusions.achieved_grade(grade.to_dict(), condition_rows, lost, graded)
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
        "purpose": purpose_section(purpose, runs),
        "metrics": metrics,
        "summary": ran.summary(len(condition_rows)),
        "conditions": condition_rows,
        "runs": ran.rows,
        "tests": tests,
        "notes": notes,
        "flags": compared.flags,
        "power": power_doc,
        "noiseFloor": floor,
        "sensitivity": ranked,
        # Full-factorial designs only; {} for any other design.
        "mainEffects": effects["mainEffects"],
        "interactions": effects["interactions"],
        "factorialMethod": factorial.FACTORIAL_METHOD if effects["mainEffects"] else None,
        "directionConsistency": direction,
        "distribution": by_category,
        "distributionCategories": {
            name: [str(c) for c in (category_order or {}).get(name) or sorted(target)]
            for name, target in sorted(targets.items())
        },
        "crossModel": by_model,
        "integrity": ran.integrity,
        "cost": cost_section([str(row["id"]) for row in condition_rows], ran.spent),
    }
    # Agent-testbed runs carry evaluations: verdicts per criterion, validity exclusions and the
    # zero-violation bound per condition (analysis/testbed_summary.py). Other audits keep their
    # exact form. A regression audit's verdict counts never include exploration runs (purpose
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
