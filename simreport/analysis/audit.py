"""Assemble audit.json: a pure function of the plan, the conditions and the run results.

No clock and no randomness except the bootstrap, whose generator is seeded from the plan hash, the
metric and the condition. `analyse_dir` is the I/O edge: it reads an audit directory and writes
audit.json and runs.parquet.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.files import read_json, write_atomic, write_json
from ..core.schema import RunResult
from ..core.version import __version__
from . import stats
from .grade import GRADE_RULE, evidence_grade
from .testbed import summarise_testbed

AUDIT_SCHEMA_VERSION = 1
EVALUATION_FILE = "evaluation.json"
"""An agent-testbed run's evaluator output, next to its result.json."""


@dataclass(frozen=True)
class RunRecord:
    """One expected run: its result, or None when no result.json exists."""

    condition: str
    replication: int
    result: RunResult | None
    evaluation: Mapping[str, Any] | None = None
    """The agent testbed's evaluation.json for this run, when it has one."""


def usable(result: RunResult | None, include_incomplete: bool) -> bool:
    """Whether a run enters the statistics."""
    if result is None:
        return False
    if include_incomplete:
        return result.failure is None or bool(result.metrics)
    return (
        result.status.execution == "completed"
        and result.failure is None
        and result.integrity.complete
        and result.status.validity != "violated"
        and result.status.evidence != "partial"
    )


def _status_of(result: RunResult | None) -> dict[str, Any]:
    if result is None:
        return {"execution": "missing", "validity": "unchecked", "evidence": "unchecked"}
    return result.status.to_doc()


def _differs(value: Any, base_value: Any) -> bool:
    from ..core.canonical import canonical_json

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
    """Compute every quantity of audit.json (SPEC §6). `category_order` gives each target
    distribution's categories in the order the plan wrote them (JSON objects lose it)."""
    include = (
        bool(plan.get("includeIncomplete", False))
        if include_incomplete is None
        else include_incomplete
    )
    plan_hash = str(plan["hash"])
    metrics: list[str] = list(plan.get("metrics") or [])
    hypothesis = plan.get("hypothesis") or {}
    outcomes: Mapping[str, str] = hypothesis.get("outcomes") or {}
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
    condition_rows: list[dict[str, Any]] = []
    for cond in conditions:
        cid = str(cond["id"])
        records = sorted(by_condition.get(cid, []), key=lambda r: r.replication)
        kept = [r for r in records if usable(r.result, include)]
        samples[cid] = {
            m: [r.result.metrics.get(m, math.nan) for r in kept if r.result is not None]
            for m in metrics
        }
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
                "identicalToBase": bool(cond.get("identicalToBase", False)),
                "runs": len(records),
                "succeeded": succeeded,
                "complete": complete,
                "excluded": len(records) - len(kept),
                "means": {m: stats.mean(samples[cid][m]) for m in metrics},
            }
        )

    tests: dict[str, list[dict[str, Any]]] = {}
    notes: dict[str, str] = {}
    for metric in metrics:
        rows: list[dict[str, Any]] = []
        for row in condition_rows:
            if row["isBase"]:
                continue
            base_id = row["baseId"]
            base_sample = samples.get(base_id, {}).get(metric, [])
            cond_sample = samples[row["id"]][metric]
            result = stats.pairwise(
                base_sample,
                cond_sample,
                seed=stats.bootstrap_seed(plan_hash, metric, row["id"]),
                expected=outcomes.get(metric),
            )
            result["condition"] = row["id"]
            result["baseId"] = base_id
            result["note"] = _row_note(result)
            rows.append(result)
        adjusted = stats.holm([r["mwuP"] for r in rows])
        for r, p in zip(rows, adjusted, strict=True):
            r["holmP"] = p
        tests[metric] = rows
        note = _metric_note(metric, rows, condition_rows, samples)
        if note:
            notes[metric] = note

    sensitivity = _sensitivity(axes, condition_rows, tests, base_doc)
    direction = _direction_consistency(metrics, outcomes, tests)
    distribution = _distribution(condition_rows, by_condition, targets, include)
    cross_model = _cross_model(condition_rows, samples, metrics)

    integrity: dict[str, int] = defaultdict(int)
    cost = {"llmCalls": 0, "promptTokens": 0, "completionTokens": 0}
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
            cost["llmCalls"] += res.cost.llm_calls
            cost["promptTokens"] += res.cost.prompt_tokens
            cost["completionTokens"] += res.cost.completion_tokens
        run_rows.append(
            {
                "condition": record.condition,
                "replication": record.replication,
                "seedPath": res.seed_path if res is not None else None,
                "status": _status_of(res),
                "complete": bool(res is not None and res.integrity.complete),
                "used": usable(res, include),
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
    grade = evidence_grade(
        replications=int(plan.get("replications", 1)),
        axis_levels=[(str(a["id"]), str(a["level"]), len(a.get("levels") or [])) for a in axes],
        n_models=len(models),
        claim_type=str(plan.get("claimType", "exploratory")),
    )
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
        "grade": {**grade.to_dict(), "rule": GRADE_RULE},
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
        "sensitivity": sensitivity,
        "directionConsistency": direction,
        "distribution": distribution,
        "distributionCategories": {
            name: [str(c) for c in (category_order or {}).get(name) or sorted(target)]
            for name, target in sorted(targets.items())
        },
        "crossModel": cross_model,
        "integrity": dict(sorted(integrity.items())),
        "cost": cost,
    }
    # Agent-testbed runs carry evaluations: verdicts per criterion, validity exclusions and the
    # zero-violation bound (analysis/testbed.py). Other audits keep their exact form.
    testbed = summarise_testbed(conditions, [(r.condition, r.result, r.evaluation) for r in runs])
    if testbed is not None:
        audit["testbed"] = testbed
    return audit


def _order(rows: Sequence[Mapping[str, Any]], cid: str) -> int:
    for i, row in enumerate(rows):
        if row["id"] == cid:
            return i
    return len(rows)


def _row_note(row: Mapping[str, Any]) -> str | None:
    n_base, n_cond = row["nBase"], row["nCond"]
    if n_base == 0 and n_cond == 0:
        return "no usable runs in the condition or its base"
    if n_base == 0:
        return "the base has no usable runs"
    if n_cond == 0:
        return "the condition has no usable runs"
    if row["cohenD"] is None:
        return "fewer than two usable replications per condition: no effect size"
    return None


def _metric_note(
    metric: str,
    rows: Sequence[Mapping[str, Any]],
    conditions: Sequence[Mapping[str, Any]],
    samples: Mapping[str, Mapping[str, list[float]]],
) -> str | None:
    if not rows:
        return "no conditions besides the base: nothing to test"
    if all(r["mwuP"] is None for r in rows):
        bases = [c["id"] for c in conditions if c["isBase"]]
        if all(not stats.finite(samples[b][metric]).size for b in bases):
            return "the base has no usable runs with a finite value of this metric"
        return "no condition has usable runs with a finite value of this metric"
    if all(r["cohenD"] is None for r in rows):
        return "fewer than two usable replications per condition: p values only, no effect sizes"
    return None


def _sensitivity(
    axes: Sequence[Mapping[str, Any]],
    conditions: Sequence[Mapping[str, Any]],
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
    base_doc: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """Per axis, the largest |d| at any of its levels across all metrics, ranked.

    In a full factorial design a cell moves several axes at once, so its d is not one axis's
    effect: an axis is judged on the cells where it is the only axis off its base value
    (`isolated`), and only when it has none on every cell that moves it (`isolated` false).
    """
    by_id = {c["id"]: c for c in conditions}
    best: dict[str, dict[str, Any]] = {
        str(a["id"]): {
            "axis": str(a["id"]),
            "code": a.get("code"),
            "maxAbsD": None,
            "metric": None,
            "condition": None,
            "isolated": None,
        }
        for a in axes
    }
    targets = {str(a["id"]): str(a["target"]) for a in axes}
    for metric, rows in tests.items():
        for row in rows:
            d = row.get("cohenD")
            if d is None or (isinstance(d, float) and math.isnan(d)):
                continue
            levels = by_id[row["condition"]].get("levels") or {}
            moved = [
                axis_id
                for axis_id, value in levels.items()
                if axis_id in best
                and (len(levels) == 1 or _differs(value, _base_value(base_doc, targets[axis_id])))
            ]
            for axis_id in moved:
                entry, isolated = best[axis_id], len(moved) == 1
                if entry["isolated"] and not isolated:
                    continue  # an isolated estimate beats any confounded one
                if (
                    entry["maxAbsD"] is None
                    or (isolated and not entry["isolated"])
                    or abs(d) > entry["maxAbsD"]
                ):
                    entry.update(
                        maxAbsD=abs(d), metric=metric, condition=row["condition"], isolated=isolated
                    )
    ranked = sorted(
        best.values(),
        key=lambda e: (e["maxAbsD"] is None, -(e["maxAbsD"] or 0.0), e["axis"]),
    )
    for rank, entry in enumerate(ranked, start=1):
        entry["rank"] = rank
    return ranked


def _base_value(doc: Mapping[str, Any], path: str) -> Any:
    node: Any = doc
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _direction_consistency(
    metrics: Sequence[str],
    outcomes: Mapping[str, str],
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        expected = outcomes.get(metric)
        if expected is None:
            continue
        diffs = [r["diff"] for r in tests.get(metric, []) if r["diff"] is not None]
        if expected == "increase":
            consistent = sum(1 for d in diffs if d > 0)
        else:
            consistent = sum(1 for d in diffs if d < 0)
        out[metric] = {
            "expected": expected,
            "consistent": consistent,
            "total": len(diffs),
            "share": consistent / len(diffs) if diffs else None,
        }
    return out


def _distribution(
    conditions: Sequence[Mapping[str, Any]],
    by_condition: Mapping[str, Sequence[RunRecord]],
    targets: Mapping[str, Mapping[str, float]],
    include: bool,
) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for name, target in sorted(targets.items()):
        pooled: dict[str, dict[str, int]] = {}
        for cond in conditions:
            counts: dict[str, int] = defaultdict(int)
            for record in by_condition.get(cond["id"], []):
                if usable(record.result, include) and record.result is not None:
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


# --------------------------------------------------------------------------- I/O edge


def load_audit_inputs(
    audit_dir: Path,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[RunRecord]]:
    """Read plan.json, conditions.json and every expected run's result.json."""
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
            result = RunResult.model_validate(read_json(path)) if path.is_file() else None
            evaluation_file = path.with_name(EVALUATION_FILE)
            evaluation = read_json(evaluation_file) if evaluation_file.is_file() else None
            records.append(RunRecord(str(cond["id"]), r, result, evaluation))
    return plan, conditions, records


def analyse_dir(
    audit_dir: str | Path,
    *,
    include_incomplete: bool | None = None,
    provider_override: str | None = None,
) -> dict[str, Any]:
    """Analyse an audit directory; write audit.json and runs.parquet; return the audit."""
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
    write_json(root / "audit.json", audit)
    write_runs_table(root / "runs.parquet", audit, conditions)
    return audit


def write_runs_table(
    path: Path, audit: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]]
) -> None:
    """runs.parquet: one row per run with axis values, model, status and one column per metric."""
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
    }
    schema.update({f"axis:{a}": pl.String for a in axes})
    schema.update({m: pl.Float64 for m in audit["metrics"]})
    frame = pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)
    buffer = io.BytesIO()
    frame.write_parquet(buffer, statistics=False)
    write_atomic(path, buffer.getvalue())
