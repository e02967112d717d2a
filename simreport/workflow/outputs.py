"""The jobs after the runs, one call each from the rules: the evaluation of a condition's runs, a
plan's analysis (audit.json, runs.parquet, after damaged runs are put back), its figures, pages
and methods, and the site. Each rule's `params` carry a fingerprint of the code that makes its
outputs (ANALYSIS_CODE, REPORT_CODE, the evaluator's sha256), so a code change reruns exactly
those outputs and what follows them, never a run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.files import write_atomic
from ..core.fingerprint import code_fingerprint, package_files
from .condition_jobs import damaged_runs, repair_runs
from .ledger import record_in_ledger
from .targets import Workflow
from .terminal import say


def analyse_plan(workflow: Workflow, plan_id: str) -> None:
    """audit.json and runs.parquet of one plan, from runs checked first: a result.json that is
    missing or not the one its condition job left (its sha256 differs from the state file's) is
    copied again from the verified run store, or run again, before the analysis reads it."""
    from ..analysis.audit import analyse_dir

    plan = workflow.plan(plan_id)
    for target in plan.conditions:
        damaged = damaged_runs(plan, target)
        if damaged:
            repair_runs(workflow, plan, target, damaged)
            if target.evaluated:
                # A run put back is a new run folder: it is judged again before it is read.
                evaluate_condition(workflow, plan_id, target.condition.dir)
    if plan.evaluations:
        from ..evaluation import write_audit_summary

        write_audit_summary(plan.out_dir)
    analyse_dir(plan.out_dir, include_incomplete=plan.include_incomplete)
    evaluated = [
        Path(output).parent
        for target in plan.conditions
        if target.evaluated
        for output in target.outputs
    ]
    record_in_ledger(workflow, build=plan.out_dir, evaluations=evaluated)


def evaluate_condition(
    workflow: Workflow, plan_id: str, condition_dir: str, log: str | Path | None = None
) -> dict[str, Any]:
    """The evaluation job of one condition: every run of it judged in this one job (a job per run
    would cost Snakemake more than the judging), its summary written last (the plan's analysis
    job links the evaluations in the workflow's ledger, all in one transaction). A run that
    could not be evaluated (its manifest altered, its evaluation spec changed since it ran) fails
    the job, naming the run."""
    from ..evaluation import evaluate_batch, evaluator_named

    plan = workflow.plan(plan_id)
    target = plan.by_dir(condition_dir)
    if target is None:
        raise InputError(f"plan {plan_id!r} has no condition folder {condition_dir!r}")
    condition_id = target.condition.id
    runs = [Path(output).parent for output in target.outputs]
    summary = evaluate_batch(plan.out_dir, condition_id, condition_dir, runs, evaluator_named(None))
    line = (
        f"{condition_id}: evaluated={summary['evaluated']} runs={summary['runs']} "
        f"notEvaluable={summary['notEvaluable']} errors={summary['errors']}\n"
    )
    if log is not None:
        write_atomic(Path(log), line + "".join(f"{e['reason']}\n" for e in summary["notEvaluated"]))
    errors = [item for item in summary["notEvaluated"] if item["outcome"] == "error"]
    if errors:
        raise InputError(
            f"{plan_id} · {condition_id}: {len(errors)} run(s) could not be evaluated; the "
            f"first: {errors[0]['reason']}"
        )
    say(f"{plan_id} · {condition_id}: {summary['evaluated']} of {summary['runs']} runs evaluated")
    return summary


def evaluation_fingerprint() -> str:
    """The default evaluator's sha256 (a `params` of the evaluation rule): a change to the code
    that makes the verdicts reruns the evaluations and what follows them, never a run."""
    from ..evaluation import evaluator_named

    return evaluator_named(None).sha256[:16]


def write_figures(workflow: Workflow, plan_id: str, outputs: Sequence[str]) -> None:
    from ..report.document import read_audit_document
    from ..report.figures import figure_files

    plan = workflow.plan(plan_id)
    files = figure_files(read_audit_document(plan.out_dir / "audit.json"))
    for path in outputs:
        write_atomic(path, files[Path(path).name])


def write_pages(workflow: Workflow, plan_id: str) -> None:
    from ..report import write_report

    write_report(workflow.plan(plan_id).out_dir, draw_figures=False)


def write_methods_pages(workflow: Workflow, plan_id: str) -> None:
    from ..report.methods import write_methods

    write_methods(workflow.plan(plan_id).out_dir)


def build_site(workflow: Workflow) -> None:
    from ..report.site import write_site

    write_site(
        workflow.site_dir,
        [(plan.id, plan.out_dir) for plan in workflow.plans],
        title=workflow.title,
    )


# --------------------------------------------------------------------------- code fingerprints

ANALYSIS_CODE = ("analysis/**/*.py", "core/**/*.py")
"""The sources (under the package) that make audit.json and runs.parquet: whole folders,
subpackages included, so a module split into a package stays covered."""
REPORT_CODE = (
    "report/**/*.py",
    "report/templates/**/*",
    "harness/conditions.py",
    "core/**/*.py",
)
"""The sources that make the figures, the pages and the site, templates and styles included."""


def analysis_fingerprint() -> str:
    """Short hash of the analysis code's normalised sources (a `params` of the analyse rule):
    a change to it reruns the analysis and everything after it, never a run."""
    return code_fingerprint(package_files(*ANALYSIS_CODE))[:16]


def report_fingerprint() -> str:
    """Short hash of the report code's normalised sources (a `params` of the figure, page and
    site rules): a change to it reruns those, never the analysis or a run."""
    return code_fingerprint(package_files(*REPORT_CODE))[:16]


def site_outputs(workflow: Workflow) -> list[str]:
    """The site's files: the outputs of the site rule, which the default target asks for."""
    files = [str(workflow.site_dir / "index.html")]
    for plan in workflow.plans:
        for name in ("report.html", "methods.html", "methods.md", "audit.json"):
            files.append(str(workflow.site_dir / plan.id / name))
    return files
