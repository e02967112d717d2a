# Plans from the config, expanded at parse time into every target of the DAG.
from snakemake.logging import logger

from simreport import workflow as simreport_workflow

# Errors about the config name the file it came from (the last one given wins, as in Snakemake).
with simreport_workflow.stop_on_input_error():
    WORKFLOW = simreport_workflow.load_workflow(
        config, config_file=(workflow.configfiles or ["config/config.yaml"])[-1]
    )
PLANS = {plan.id: plan for plan in WORKFLOW.plans}
RUN_THREADS = int(config.get("runThreads", 1))
FAIL_ON_RUN_FAILURE = bool(config.get("failOnRunFailure", False))
VERBOSE = bool(config.get("verbose", False))


def plan_requested(wildcards):
    return PLANS[wildcards.plan].requested


def condition_requested(wildcards):
    return PLANS[wildcards.plan].by_dir(wildcards.condition).requested


def plan_evaluations(wildcards):
    return PLANS[wildcards.plan].evaluations


def plan_figures(wildcards):
    plan = PLANS[wildcards.plan]
    return [str(plan.out_dir / "figures" / name) for name in plan.figures]


def site_files(wildcards):
    return simreport_workflow.site_outputs(WORKFLOW)
