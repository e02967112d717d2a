# simreport workflow: audit plans → conditions → runs → evaluation → analysis → figures → pages →
# site.
#
#   snakemake --cores 8                       build every plan in config/config.yaml and site/
#   snakemake --cores 8 --config replications=3
#   snakemake --cores 8 --config plans=examples/echo_chamber/audit.yaml    that plan only
#   snakemake --profile config/profiles/slurm on a SLURM cluster
#
# Rules stay thin: every step is one call into simreport.workflow, where the logic is tested.


from snakemake.logging import logger
from snakemake.utils import min_version

from simreport import workflow as simreport_workflow
from simreport.core.files import check_config_file

min_version("9.0")

# "Directory cannot be locked" says whether the build holding the lock still runs, and what to do.
simreport_workflow.explain_locks(logger)
# Snakemake's check of each job's params, without importing pandas at every start.
simreport_workflow.compare_params_without_pandas()

# The config is checked by simreport's bounded loader (alias expansion, duplicate keys, control
# characters) before Snakemake's own loader reads it. A config or plan error ends the build with
# one located line (file, path, expected), not a traceback through the rule files.
with simreport_workflow.stop_on_input_error():
    check_config_file("config/config.yaml")


configfile: "config/config.yaml"


# `--config key=value` arrives as text: numbers and switches get their types back, `plans=PATH`
# becomes a list, then the config is checked against config/schema.yaml.
with simreport_workflow.stop_on_input_error():
    simreport_workflow.check_config(
        config,
        config_file=(workflow.configfiles or ["config/config.yaml"])[-1],
        command_line=workflow.config_settings.config,
    )


# What `snakemake --report report.zip` says about the workflow; captions are in report/.
report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/runs.smk"
include: "rules/evaluation.smk"
include: "rules/analysis.smk"
include: "rules/pages.smk"
include: "rules/site.smk"


# A build with nothing to do (no onsuccess) still ends naming the site.
simreport_workflow.announce_site_when_up_to_date(logger, WORKFLOW.site_dir)


onstart:
    # A stop signal sent to Snakemake alone also stops the runs in flight.
    simreport_workflow.forward_stop_signals()
    # One line per job on the terminal (`--config verbose=true` keeps Snakemake's detail).
    simreport_workflow.keep_terminal_short(logger, verbose=VERBOSE)
    # Which process holds the locks, so a next build can tell a killed build from a live one.
    simreport_workflow.note_build_started()


onsuccess:
    simreport_workflow.note_build_ended()
    # Failed or missing runs: a warning block, or with failOnRunFailure a failed build.
    if simreport_workflow.report_run_failures(
        WORKFLOW, fail=FAIL_ON_RUN_FAILURE, log=log
    ):
        raise SystemExit(1)
    # The last line: where the site is and how to view it.
    simreport_workflow.announce_site(WORKFLOW.site_dir)


onerror:
    simreport_workflow.note_build_ended()
    simreport_workflow.report_run_failures(
        WORKFLOW, fail=FAIL_ON_RUN_FAILURE, build_failed=True, log=log
    )


rule all:
    default_target: True
    input:
        site_files,
