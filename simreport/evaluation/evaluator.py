"""Evaluators by name and version, and evaluation as a step of its own: one run, the runs of one
condition, or every run of an audit. Each writes evaluation.json into the run's folder,
atomically; the run's own files are only read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.canonical import sha256_bytes
from ..core.errors import DocumentError, InputError
from ..core.files import read_json, write_json
from ..core.fingerprint import PACKAGE_ROOT
from ..core.quality_ref import EVALUATION_FILE, QUALITY_REF_KEY, quality_ref
from .judgement import VERDICTS, judge
from .layers import NotEvaluable, read_run

EVALUATION_SCHEMA_VERSION = 1
SUMMARY_FILE = "evaluations.json"
"""An audit's evaluation summary, next to its audit.json."""
CONDITION_SUMMARIES = "evaluations"
"""Folder of an audit's per-condition evaluation summaries (`<condition dir>.json`)."""


@dataclass(frozen=True)
class Evaluator:
    """A named, versioned evaluator. Its sha256 is over the bytes of the source files that make
    its verdicts (each named by its path under the package), so two evaluations carrying the
    same sha256 were made by the same code, whatever its version string says."""

    name: str
    version: str
    sources: tuple[str, ...]
    judge: Callable[..., dict[str, Any]]

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def sha256(self) -> str:
        digest = hashlib.sha256()
        for source in sorted(self.sources):
            data = (PACKAGE_ROOT / source).read_bytes()
            digest.update(f"{source}\0{sha256_bytes(data)}\0".encode())
        return digest.hexdigest()

    def identity(self) -> dict[str, str]:
        return {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "sha256Of": "the bytes of " + ", ".join(f"simreport/{s}" for s in self.sources),
        }


EVALUATORS: dict[str, Evaluator] = {
    evaluator.ref: evaluator
    for evaluator in (
        Evaluator(
            "simreport-checks",
            "1.0.0",
            ("evaluation/judgement.py", "evaluation/layers.py", "evaluation/extraction.py"),
            judge,
        ),
    )
}
DEFAULT_EVALUATOR = "simreport-checks@1.0.0"


def evaluator_named(ref: str | None) -> Evaluator:
    """The evaluator `NAME@VERSION` names (the default when None); an unknown one is refused,
    listing the known ones."""
    wanted = ref or DEFAULT_EVALUATOR
    found = EVALUATORS.get(wanted)
    if found is None:
        raise InputError(
            f"unknown evaluator {wanted!r}",
            path="--evaluator",
            expected="one of " + ", ".join(sorted(EVALUATORS)),
        )
    return found


def evaluation_document(run_dir: Path, evaluator: Evaluator) -> dict[str, Any]:
    """The content of a run's evaluation.json (see `layers.read_run` for what raises)."""
    layers = read_run(run_dir)
    judged = evaluator.judge(layers.spec, layers)
    doc: dict[str, Any] = {
        "schemaVersion": EVALUATION_SCHEMA_VERSION,
        "evaluator": evaluator.identity(),
        "spec": layers.spec_version,
        "run": {**layers.run, "inputs": dict(sorted(layers.inputs.items()))},
        **judged,
        "verdicts": _verdict_counts(judged["criteria"]),
    }
    doc[QUALITY_REF_KEY] = quality_ref(doc)
    return doc


def evaluate_run(run_dir: str | Path, evaluator: Evaluator | None = None) -> dict[str, Any]:
    """Evaluate one run directory and write its evaluation.json; returns the document. When the
    run cannot be evaluated, an evaluation.json left from before is removed and the error
    raised, so no verdict outlives the material it was made from."""
    path = Path(run_dir)
    try:
        doc = evaluation_document(path, evaluator or evaluator_named(None))
    except InputError:
        if path.is_dir():
            (path / EVALUATION_FILE).unlink(missing_ok=True)
        raise
    write_json(path / EVALUATION_FILE, doc)
    return doc


@dataclass
class RunEvaluation:
    """What evaluating one run of a batch came to."""

    run_dir: Path
    outcome: str
    """evaluated, not_evaluable or error"""
    document: dict[str, Any] | None = None
    reason: str | None = None


def evaluate_runs(run_dirs: Iterable[Path], evaluator: Evaluator) -> list[RunEvaluation]:
    """Evaluate many runs: a run that cannot be evaluated does not stop the others."""
    out: list[RunEvaluation] = []
    for run_dir in run_dirs:
        try:
            doc = evaluate_run(run_dir, evaluator)
        except NotEvaluable as exc:
            out.append(RunEvaluation(run_dir, "not_evaluable", reason=exc.one_line()))
        except InputError as exc:
            out.append(RunEvaluation(run_dir, "error", reason=exc.one_line()))
        else:
            out.append(RunEvaluation(run_dir, "evaluated", document=doc))
    return out


def condition_summary(
    condition: str, evaluations: Sequence[RunEvaluation], evaluator: Evaluator
) -> dict[str, Any]:
    """One condition's evaluations: counts, verdicts per criterion, each run not evaluated with
    why, and each evaluated run's quality_ref."""
    criteria: dict[str, dict[str, int]] = {}
    for item in evaluations:
        for key, criterion in ((item.document or {}).get("criteria") or {}).items():
            counts = criteria.setdefault(key, dict.fromkeys(VERDICTS, 0))
            counts[str(criterion["verdict"])] += 1
    return {
        "condition": condition,
        "evaluator": evaluator.identity(),
        "runs": len(evaluations),
        "evaluated": sum(1 for e in evaluations if e.outcome == "evaluated"),
        "notEvaluable": sum(1 for e in evaluations if e.outcome == "not_evaluable"),
        "errors": sum(1 for e in evaluations if e.outcome == "error"),
        "verdicts": {key: criteria[key] for key in sorted(criteria)},
        "qualityRefs": {
            e.run_dir.name: (e.document or {})[QUALITY_REF_KEY]
            for e in evaluations
            if e.document is not None
        },
        "notEvaluated": [
            {"run": e.run_dir.name, "outcome": e.outcome, "reason": e.reason}
            for e in evaluations
            if e.document is None
        ],
    }


def audit_runs(audit_dir: Path) -> list[tuple[str, str, list[Path]]]:
    """(condition id, condition folder, its replications' run folders) of an audit directory,
    in conditions.json's order."""
    cond_file = audit_dir / "conditions.json"
    if not (audit_dir / "plan.json").is_file() or not cond_file.is_file():
        raise InputError(
            "not an audit directory", file=cond_file, expected="plan.json and conditions.json"
        )
    plan = read_json(audit_dir / "plan.json")
    conditions = read_json(cond_file)
    if isinstance(conditions, dict):
        conditions = conditions.get("conditions", [])
    if not isinstance(conditions, list) or not isinstance(plan, dict):
        raise DocumentError("expected a list of conditions", file=cond_file)
    out = []
    for cond in conditions:
        reps = int(cond.get("replications", plan.get("replications", 1)))
        folder = audit_dir / "runs" / str(cond["dir"])
        out.append((str(cond["id"]), str(cond["dir"]), [folder / str(r) for r in range(reps)]))
    return out


def evaluate_batch(
    audit_dir: Path,
    condition: str,
    condition_dir: str,
    runs: Sequence[Path],
    evaluator: Evaluator,
) -> dict[str, Any]:
    """Evaluate the given runs of one condition and write the condition's summary
    (`evaluations/<condition dir>.json`, last); returns it."""
    summary = condition_summary(condition, evaluate_runs(runs, evaluator), evaluator)
    write_json(audit_dir / CONDITION_SUMMARIES / f"{condition_dir}.json", summary)
    return summary


def evaluate_condition(
    audit_dir: Path, condition_dir: str, evaluator: Evaluator | None = None
) -> dict[str, Any]:
    """Evaluate every run of one condition of an audit and write its summary
    (`evaluations/<condition dir>.json`); returns it."""
    chosen = evaluator or evaluator_named(None)
    for cid, folder, runs in audit_runs(audit_dir):
        if folder == condition_dir:
            return evaluate_batch(audit_dir, cid, folder, runs, chosen)
    raise InputError(
        f"the audit has no condition folder {condition_dir!r}",
        file=audit_dir / "conditions.json",
    )


def evaluate_audit(audit_dir: str | Path, evaluator: Evaluator | None = None) -> dict[str, Any]:
    """Evaluate every run of an audit, condition by condition, and write the per-condition
    summaries and the audit's (`evaluations.json`); returns the audit's summary."""
    root = Path(audit_dir)
    chosen = evaluator or evaluator_named(None)
    for _, folder, _ in audit_runs(root):
        evaluate_condition(root, folder, chosen)
    return write_audit_summary(root)


def write_audit_summary(audit_dir: Path) -> dict[str, Any]:
    """`evaluations.json` from the audit's per-condition summaries (a condition without one is
    listed as not evaluated)."""
    conditions: list[dict[str, Any]] = []
    missing: list[str] = []
    for cid, folder, _ in audit_runs(audit_dir):
        path = audit_dir / CONDITION_SUMMARIES / f"{folder}.json"
        if path.is_file():
            conditions.append(read_json(path))
        else:
            missing.append(cid)
    totals: dict[str, dict[str, int]] = {}
    for summary in conditions:
        for key, counts in summary["verdicts"].items():
            into = totals.setdefault(key, dict.fromkeys(VERDICTS, 0))
            for verdict, n in counts.items():
                into[verdict] += int(n)
    evaluators = sorted(
        {tuple(str(s["evaluator"][k]) for k in ("name", "version", "sha256")) for s in conditions}
    )
    doc = {
        "evaluators": [{"name": n, "version": v, "sha256": d} for n, v, d in evaluators],
        "runs": sum(int(s["runs"]) for s in conditions),
        "evaluated": sum(int(s["evaluated"]) for s in conditions),
        "notEvaluable": sum(int(s["notEvaluable"]) for s in conditions),
        "errors": sum(int(s["errors"]) for s in conditions),
        "conditionsNotEvaluated": missing,
        "verdicts": {key: totals[key] for key in sorted(totals)},
        "conditions": conditions,
    }
    write_json(audit_dir / SUMMARY_FILE, doc)
    return doc


def problems_of(summary: Mapping[str, Any]) -> list[str]:
    """One line for each run an audit's evaluation refused (tampering, unreadable files)."""
    return [
        str(item["reason"])
        for cond in summary.get("conditions") or ()
        for item in cond.get("notEvaluated") or ()
        if item.get("outcome") == "error"
    ]


def _verdict_counts(criteria: Mapping[str, Any]) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for item in criteria.values():
        counts[str(item["verdict"])] += 1
    return {("notApplicable" if k == "not_applicable" else k): v for k, v in counts.items()}
