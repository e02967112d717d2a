# Figures (standalone SVG), report.html and the methods paragraphs of one plan. Like the site,
# they are local rules: rendered by the build itself in seconds, never queued on a cluster.


for _plan in WORKFLOW.plans:

    rule:
        name:
            f"figures_{_plan.id}"
        input:
            str(_plan.out_dir / "audit.json"),
        output:
            [
                report(
                    str(_plan.out_dir / "figures" / name),
                    caption=f"../report/{name.removesuffix('.svg').split('-')[0]}.rst",
                    category=_plan.id,
                    subcategory="Figures",
                    labels={"figure": name.removesuffix(".svg")},
                )
                for name in _plan.figures
            ],
        log:
            str(_plan.out_dir / "logs" / "figures.log"),
        localrule: True
        conda:
            "../envs/simreport.yaml"
        params:
            plan=_plan.id,
            code=simreport_workflow.report_fingerprint(),
        run:
            simreport_workflow.write_figures(WORKFLOW, params.plan, output)


rule report:
    input:
        audit="{results}/{plan}/audit.json",
        figures=plan_figures,
    output:
        report(
            "{results}/{plan}/report.html",
            caption="../report/report.rst",
            category="{plan}",
            subcategory="Report",
            labels={"page": "report.html"},
        ),
    log:
        "{results}/{plan}/logs/report.log",
    localrule: True
    conda:
        "../envs/simreport.yaml"
    params:
        code=simreport_workflow.report_fingerprint(),
    run:
        simreport_workflow.write_pages(WORKFLOW, wildcards.plan)


rule methods:
    input:
        "{results}/{plan}/audit.json",
    output:
        md=report(
            "{results}/{plan}/methods.md",
            caption="../report/methods.rst",
            category="{plan}",
            subcategory="Methods",
            labels={"page": "methods.md"},
        ),
        html=report(
            "{results}/{plan}/methods.html",
            caption="../report/methods.rst",
            category="{plan}",
            subcategory="Methods",
            labels={"page": "methods.html"},
        ),
    log:
        "{results}/{plan}/logs/methods.log",
    localrule: True
    conda:
        "../envs/simreport.yaml"
    params:
        code=simreport_workflow.report_fingerprint(),
    run:
        simreport_workflow.write_methods_pages(WORKFLOW, wildcards.plan)
