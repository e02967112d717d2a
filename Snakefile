# simreport workflow: audit plans → conditions → runs → analysis → figures → pages → site.
#
#   snakemake --cores 8                       build every plan in config/config.yaml and site/
#   snakemake --cores 8 --config replications=3
#   snakemake --profile config/profiles/slurm on a SLURM cluster
#
# Rules stay thin: every step is one call into simreport.workflow, where the logic is tested.


from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


include: "rules/common.smk"
include: "rules/runs.smk"
include: "rules/analysis.smk"
include: "rules/pages.smk"
include: "rules/site.smk"


rule all:
    default_target: True
    input:
        site_files,
