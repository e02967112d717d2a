# simreport workflow: audit plans → conditions → runs → evaluation → analysis → figures → pages →
# site.
#
#   snakemake --cores 8                       build every plan in config/config.yaml and site/
#   snakemake --cores 8 --config replications=3
#   snakemake --profile config/profiles/slurm on a SLURM cluster
#
# Rules stay thin: every step is one call into simreport.workflow, where the logic is tested.


from snakemake.utils import min_version, validate

from simreport import workflow as simreport_workflow
from simreport.core.files import check_config_file

min_version("9.0")

# The config is checked by simreport's bounded loader (alias expansion, duplicate keys, control
# characters) before Snakemake's own loader reads it.
check_config_file("config/config.yaml")


configfile: "config/config.yaml"


# `--config key=value` arrives as text; numbers and switches get their types back first.
simreport_workflow.retype_command_line(config)
validate(config, "config/schema.yaml")


# What `snakemake --report report.zip` says about the workflow; captions are in report/.
report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/runs.smk"
include: "rules/evaluation.smk"
include: "rules/analysis.smk"
include: "rules/pages.smk"
include: "rules/site.smk"


onstart:
    # A stop signal sent to Snakemake alone also stops the runs in flight.
    simreport_workflow.forward_stop_signals()
    # One line per job on the terminal (`--config verbose=true` keeps Snakemake's detail).
    simreport_workflow.keep_terminal_short(logger, verbose=VERBOSE)


onsuccess:
    # Failed or missing runs: a warning block, or with failOnRunFailure a failed build.
    if simreport_workflow.report_run_failures(
        WORKFLOW, fail=FAIL_ON_RUN_FAILURE, log=log
    ):
        raise SystemExit(1)


onerror:
    simreport_workflow.report_run_failures(
        WORKFLOW, fail=FAIL_ON_RUN_FAILURE, build_failed=True, log=log
    )


rule all:
    default_target: True
    input:
        site_files,
