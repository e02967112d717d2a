# simreport workflow: audit plans → conditions → runs → analysis → figures → pages → site.
#
#   snakemake --cores 8                       build every plan in config/config.yaml and site/
#   snakemake --cores 8 --config replications=3
#   snakemake --profile config/profiles/slurm on a SLURM cluster
#
# Rules stay thin: every step is one call into simreport.workflow, where the logic is tested.


from snakemake.utils import min_version, validate

from simreport.core.files import check_config_file

min_version("9.0")

# The config is checked by simreport's bounded loader (alias expansion, duplicate keys, control
# characters) before Snakemake's own loader reads it.
check_config_file("config/config.yaml")


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


include: "rules/common.smk"
include: "rules/runs.smk"
include: "rules/analysis.smk"
include: "rules/pages.smk"
include: "rules/site.smk"


onstart:
    # A stop signal sent to Snakemake alone also stops the runs in flight.
    simreport_workflow.forward_stop_signals()


rule all:
    default_target: True
    input:
        site_files,
