"""What the Snakemake workflow calls: the Snakefile and rules/*.smk call these names, one per rule
step, and the logic behind them is tested here. Parse time: `load_workflow` expands the config's
plans into targets (targets). Jobs: condition jobs and their state files (condition_jobs), run
in a pool shared by the jobs of one Snakemake process (pool); the evaluation, analysis, pages and
site (outputs); ledger recording (ledger); the end-of-build report of failed runs (failures),
the terminal and the build's last line (terminal); the config check, one-line input errors and
lock explanations around Snakemake's start (startup). docs/workflow.md describes the design."""

from .condition_jobs import (
    failure_lines,
    remove_obsolete_runs,
    retry_token,
    run_condition,
    run_conditions,
    run_replication,
    write_plan_spec,
)
from .failures import report_run_failures
from .outputs import (
    analyse_plan,
    analysis_fingerprint,
    build_site,
    evaluate_condition,
    evaluation_fingerprint,
    report_fingerprint,
    site_outputs,
    write_figures,
    write_methods_pages,
    write_pages,
)
from .pool import forward_stop_signals
from .startup import (
    check_config,
    compare_params_without_pandas,
    explain_locks,
    note_build_ended,
    note_build_started,
    stop_on_input_error,
)
from .targets import ConditionTarget, RunBatch, load_workflow, retype_command_line, validate_config
from .terminal import announce_site, announce_site_when_up_to_date, keep_terminal_short

__all__ = [
    "ConditionTarget",
    "RunBatch",
    "analyse_plan",
    "analysis_fingerprint",
    "announce_site",
    "announce_site_when_up_to_date",
    "build_site",
    "check_config",
    "compare_params_without_pandas",
    "evaluate_condition",
    "evaluation_fingerprint",
    "explain_locks",
    "failure_lines",
    "forward_stop_signals",
    "keep_terminal_short",
    "load_workflow",
    "note_build_ended",
    "note_build_started",
    "remove_obsolete_runs",
    "report_fingerprint",
    "report_run_failures",
    "retry_token",
    "retype_command_line",
    "run_condition",
    "run_conditions",
    "run_replication",
    "site_outputs",
    "stop_on_input_error",
    "validate_config",
    "write_figures",
    "write_methods_pages",
    "write_pages",
    "write_plan_spec",
]
