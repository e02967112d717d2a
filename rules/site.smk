# The static site: an index and one folder per audit.


rule site:
    input:
        expand(
            "{results}/{plan}/{page}",
            results=str(WORKFLOW.results_dir),
            plan=list(PLANS),
            page=["report.html", "methods.md", "methods.html", "audit.json"],
        ),
    output:
        simreport_workflow.site_outputs(WORKFLOW),
    log:
        str(WORKFLOW.results_dir / "logs" / "site.log"),
    localrule: True
    conda:
        "../envs/simreport.yaml"
    params:
        title=WORKFLOW.title,
        code=simreport_workflow.report_fingerprint(),
    run:
        simreport_workflow.build_site(WORKFLOW)
