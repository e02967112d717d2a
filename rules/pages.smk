# Figures (standalone SVG), report.html and the methods paragraphs of one plan.


for _plan in WORKFLOW.plans:

    rule:
        name:
            f"figures_{_plan.id}"
        input:
            str(_plan.out_dir / "audit.json"),
        output:
            [str(_plan.out_dir / "figures" / name) for name in _plan.figures],
        log:
            str(_plan.out_dir / "logs" / "figures.log"),
        conda:
            "../envs/simreport.yaml"
        params:
            plan=_plan.id,
        run:
            simreport_workflow.write_figures(WORKFLOW, params.plan, output)


rule report:
    input:
        audit="{results}/{plan}/audit.json",
        figures=plan_figures,
    output:
        "{results}/{plan}/report.html",
    log:
        "{results}/{plan}/logs/report.log",
    conda:
        "../envs/simreport.yaml"
    run:
        simreport_workflow.write_pages(WORKFLOW, wildcards.plan)


rule methods:
    input:
        "{results}/{plan}/audit.json",
    output:
        md="{results}/{plan}/methods.md",
        html="{results}/{plan}/methods.html",
    log:
        "{results}/{plan}/logs/methods.log",
    conda:
        "../envs/simreport.yaml"
    run:
        simreport_workflow.write_methods_pages(WORKFLOW, wildcards.plan)
