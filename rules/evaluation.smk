# Evaluation, a step of its own after the runs (the runs judge nothing): one job per condition of
# an agent-testbed plan judges all of its runs, writing each run's evaluation.json and, last, the
# condition's summary. It reruns when the condition's run job ends again or the evaluator's code
# changes; a change to it never reruns a run.


rule evaluate:
    input:
        # What the condition's run job ends with (ConditionTarget.requested).
        condition_requested,
    output:
        "{results}/{plan}/evaluations/{condition}.json",
    log:
        "{results}/{plan}/logs/evaluations/{condition}.log",
    wildcard_constraints:
        plan=r"[^/]+",
        condition=r"[^/]+",
    conda:
        "../envs/simreport.yaml"
    params:
        code=simreport_workflow.evaluation_fingerprint(),
    run:
        simreport_workflow.evaluate_condition(
            WORKFLOW, wildcards.plan, wildcards.condition, log[0]
        )
