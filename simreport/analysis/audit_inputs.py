"""Read an audit directory for `analyse`: plan.json, conditions.json and, per expected run, its
result.json with its evaluation, manifest, fault steps, validity problems and user quality.
The reading side of the I/O edge; nothing here computes a statistic.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..core.canonical import sha256_bytes
from ..core.errors import InputError
from ..core.files import read_json
from ..core.quality_ref import EVALUATION_FILE, quality_ref_problem
from ..core.run_digests import USER_QUALITY_FILE
from ..core.schema import RunResult
from ..kernel.testbed.records import RECORDS_FILE
from .run_records import RunRecord
from .testbed_summary import fault_steps


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
    problems: tuple[str, ...] = ()
    for record in _records_marked(run_dir / RECORDS_FILE, '"run.validity"'):
        payload = record.get("payload")
        if record.get("type") == "run.validity" and isinstance(payload, dict):
            problems = tuple(str(p) for p in payload.get("problems") or ())
    return problems


def read_user_quality(run_dir: Path) -> Mapping[str, Any] | None:
    """An agent-testbed run's user-quality.json, None when it has none."""
    file = run_dir / USER_QUALITY_FILE
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
    # An unreadable line is no step, so it can only keep the run out, never let it in.
    return fault_steps(list(_records_marked(records_file, '"fault.')), declared)


def _records_marked(records_file: Path, marker: str) -> Iterator[dict[str, Any]]:
    """The records of a records.jsonl whose line holds `marker` (none without the file). Only
    those lines are parsed, since a run's records can be many; an unreadable line is skipped."""
    if not records_file.is_file():
        return
    with records_file.open(encoding="utf-8") as lines:
        for line in lines:
            if marker not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
