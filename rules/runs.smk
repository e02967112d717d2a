# One job per plan writes its plan.json and conditions.json; one job per condition runs all of its
# replications (reusing finished runs from the store). A job reruns when its `key` changes: the
# condition's scenario, replication count, provider override or the kernel's code fingerprint,
# or its retry generation, one more while its last job left failed runs or a result.json of it
# was deleted (simreport_workflow.retry_token).


rule plan_spec:
    output:
        plan="{results}/{plan}/plan.json",
        conditions="{results}/{plan}/conditions.json",
    log:
        "{results}/{plan}/logs/plan_spec.log",
    localrule: True
    conda:
        "../envs/simreport.yaml"
    params:
        spec=lambda wildcards: PLANS[wildcards.plan].spec,
    run:
        simreport_workflow.write_plan_spec(WORKFLOW, wildcards.plan)


for _plan in WORKFLOW.plans:
    for _target in _plan.conditions:

        rule:
            name:
                _target.rule_name
            output:
                # The state file the job ends with. It writes one result.json per replication
                # too, undeclared: see simreport_workflow.ConditionTarget.requested.
                _target.state,
            log:
                str(_plan.out_dir / "logs" / "runs" / f"{_target.condition.dir}.log"),
            # On a cluster, condition jobs are batched into group jobs (`group-components: runs=N`
            # in the SLURM profile); the local executor ignores groups.
            group:
                "runs"
            conda:
                "../envs/simreport.yaml"
            threads: RUN_THREADS
            params:
                plan=_plan.id,
                condition=_target.condition.id,
                key=_target.key,
            run:
                simreport_workflow.run_condition(
                    WORKFLOW, params.plan, params.condition, workflow.cores, log[0]
                )


# One run asked for by its path (`snakemake results/<plan>/runs/<condition dir>/3/result.json`):
# copied from the run store or run. A default build never asks for it; it reruns a condition's
# job when one of its runs is missing or was rewritten.
rule run_replication:
    output:
        "{results}/{plan}/runs/{condition}/{replication}/result.json",
    log:
        "{results}/{plan}/logs/runs/{condition}.{replication}.log",
    wildcard_constraints:
        plan=r"[^/]+",
        condition=r"[^/]+",
        replication=r"\d+",
    conda:
        "../envs/simreport.yaml"
    run:
        simreport_workflow.run_replication(
            WORKFLOW,
            wildcards.plan,
            wildcards.condition,
            int(wildcards.replication),
            output[0],
            log[0],
        )
