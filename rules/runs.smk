# One job per plan writes its plan.json and conditions.json; one job per condition runs all of its
# replications (reusing finished runs from the store), or, in a plan with more conditions than
# `runJobs`, one job per batch of conditions (simreport_workflow.RunBatch). A job reruns when its
# `key` changes: a condition's scenario, replication count, provider override or the kernel's
# code fingerprint, or its retry generation, one more while its last job left failed runs or a
# result.json of it was deleted (simreport_workflow.retry_token).


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
    for _batch in _plan.batches:

        rule:
            name:
                _batch.name
            output:
                # The state file its condition ends with, or its batch's summary. The job writes
                # one result.json per replication too, undeclared (and in a batch each
                # condition's state file): see simreport_workflow.ConditionTarget.requested.
                _batch.output,
            log:
                _batch.log,
            # On a cluster, run jobs are batched into group jobs (`group-components: runs=N` in
            # the SLURM profile); the local executor ignores groups.
            group:
                "runs"
            conda:
                "../envs/simreport.yaml"
            threads: RUN_THREADS
            params:
                plan=_plan.id,
                conditions=_batch.condition_ids,
                key=_batch.key,
            run:
                simreport_workflow.run_conditions(
                    WORKFLOW, params.plan, params.conditions, workflow.cores, log[0]
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
