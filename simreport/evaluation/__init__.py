"""Evaluation: a step of its own after the run (design §三 "仿真不评分").

A run writes records, observations, evidence and completeness, and leaves `status.quality`
null. An evaluator reads those outputs — manifest.json (with the evaluation spec it locked),
result.json, observations.json, evidence.json, completeness.json — and writes evaluation.json:
a verdict per criterion, each undecidable one with the check that failed, the evaluator's name,
version and sha256, the spec's version and sha256, and the `qualityRef` that links the run to
it (`simreport.core.quality_ref`). The kernel never imports this package.
"""

from .evaluator import (
    CONDITION_SUMMARIES,
    DEFAULT_EVALUATOR,
    EVALUATORS,
    SUMMARY_FILE,
    Evaluator,
    RunEvaluation,
    audit_runs,
    evaluate_audit,
    evaluate_batch,
    evaluate_condition,
    evaluate_run,
    evaluate_runs,
    evaluation_document,
    evaluator_named,
    problems_of,
    write_audit_summary,
)
from .extraction import EXTRACTIONS, DerivedLayers, Extraction, LayerMismatch, RunMaterial
from .judgement import GATES, VERDICTS, decide, judge
from .layers import NotEvaluable, RunLayers, read_run

__all__ = [
    "CONDITION_SUMMARIES",
    "DEFAULT_EVALUATOR",
    "EVALUATORS",
    "EXTRACTIONS",
    "GATES",
    "SUMMARY_FILE",
    "VERDICTS",
    "DerivedLayers",
    "Evaluator",
    "Extraction",
    "LayerMismatch",
    "NotEvaluable",
    "RunEvaluation",
    "RunLayers",
    "RunMaterial",
    "audit_runs",
    "decide",
    "evaluate_audit",
    "evaluate_batch",
    "evaluate_condition",
    "evaluate_run",
    "evaluate_runs",
    "evaluation_document",
    "evaluator_named",
    "judge",
    "problems_of",
    "read_run",
    "write_audit_summary",
]
