# Statistics: audit.json and runs.parquet from every run of a plan, once every condition job of
# it has ended (each leaves a state file).


rule analyse:
    input:
        plan="{results}/{plan}/plan.json",
        conditions="{results}/{plan}/conditions.json",
        # One file per condition job, not every result.json (ConditionTarget.requested).
        runs=plan_requested,
        # One summary per condition an evaluator judges (none for other plans).
        evaluations=plan_evaluations,
    output:
        audit=report(
            "{results}/{plan}/audit.json",
            caption="../report/audit.rst",
            category="{plan}",
            subcategory="Data",
            labels={"file": "audit.json"},
        ),
        table="{results}/{plan}/runs.parquet",
    log:
        "{results}/{plan}/logs/analyse.log",
    conda:
        "../envs/simreport.yaml"
    params:
        include_incomplete=lambda wildcards: PLANS[wildcards.plan].include_incomplete,
        code=simreport_workflow.analysis_fingerprint(),
    run:
        simreport_workflow.analyse_plan(WORKFLOW, wildcards.plan)
