"""The workflow on a real SLURM cluster through `config/profiles/slurm` and Snakemake's SLURM
executor plugin: every condition runs inside a SLURM job, condition jobs are batched into group
jobs, and the results equal a local build's byte for byte.

Needs a running cluster (`tests/cluster/slurm.sh start DIR`, then `SLURM_CONF=DIR/slurm.conf`) and
the executor plugin: `pip install -e '.[slurm]'`, or installed in a folder of its own named by
SIMREPORT_TEST_SLURM_PLUGIN_PATH (as .ci/run does, so that no other test's Snakemake imports it)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_workflow import SNAKEMAKE, _copy, _env

ROOT = Path(__file__).resolve().parents[2]
CONDITIONS = 9
GROUP_SIZE = 4


def _cluster_cpus() -> int:
    """CPUs of the cluster's first idle node, or 0 when no SLURM controller answers."""
    if not os.environ.get("SLURM_CONF") or not shutil.which("sinfo"):
        return 0
    proc = subprocess.run(
        ["sinfo", "--noheader", "--format=%c"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    lines = proc.stdout.split()
    return int(lines[0].rstrip("+")) if proc.returncode == 0 and lines else 0


CPUS = _cluster_cpus()
PLUGIN_PATH = os.environ.get("SIMREPORT_TEST_SLURM_PLUGIN_PATH", "")
"""A folder holding the plugin apart from the environment, put on PYTHONPATH for this test's
Snakemake calls alone (empty: the plugin is installed in the environment)."""
PLUGIN = importlib.util.find_spec("snakemake_executor_plugin_slurm") is not None or (
    bool(PLUGIN_PATH) and (Path(PLUGIN_PATH) / "snakemake_executor_plugin_slurm").is_dir()
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.requires(CPUS > 0, "a running SLURM cluster (SLURM_CONF)"),
    pytest.mark.requires(
        PLUGIN,
        "snakemake-executor-plugin-slurm (pip install -e '.[slurm]', "
        "or in SIMREPORT_TEST_SLURM_PLUGIN_PATH)",
    ),
]


def _plan_copy(dest: Path) -> Path:
    """A copy of the workflow whose only plan has CONDITIONS conditions of one run each."""
    dest.mkdir()
    _copy(dest)
    plan_dir = dest / "examples" / "memory_sweep"
    plan_dir.mkdir()
    shutil.copy2(dest / "examples" / "prisoners_dilemma" / "scenario.yaml", plan_dir)
    plan = {
        "title": "Memory window sweep",
        "baseScenario": "scenario.yaml",
        "design": "one_at_a_time",
        "replications": 1,
        "claimType": "mechanism",
        "metrics": ["cooperationRate"],
        # the base condition plus one per level
        "axes": [{"template": "memory_temporality", "levels": list(range(2, CONDITIONS + 1))}],
    }
    (plan_dir / "audit.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    config = yaml.safe_load((dest / "config" / "config.yaml").read_text())
    config["plans"] = ["examples/memory_sweep/audit.yaml"]
    config["replications"] = None
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def _run(dest: Path, *args: str) -> str:
    env = _env(dest)
    # Keep a plugin installed on PYTHONPATH visible (the copy's package comes first); SLURM
    # jobs inherit this environment, so the jobs' own Snakemake finds it too.
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(dest), PLUGIN_PATH, os.environ.get("PYTHONPATH")])
    )
    proc = subprocess.run(
        [str(SNAKEMAKE), *args],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-5000:]
    return out


def _finished_slurm_jobs() -> dict[str, str]:
    """Job id → state of every finished job in the cluster's job-completion log."""
    proc = subprocess.run(
        ["sacct", "--completion", "--parsable2", "--noheader", "--format=JobID,State"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return dict(line.split("|")[:2] for line in proc.stdout.splitlines() if "|" in line)


def _outputs(dest: Path) -> dict[str, bytes]:
    plan = dest / "results" / "memory_sweep"
    files = [plan / "audit.json", *sorted(plan.glob("runs/*/*/result.json"))]
    return {str(f.relative_to(plan)): f.read_bytes() for f in files}


def test_slurm_profile_runs_every_condition_as_a_slurm_job(tmp_path: Path) -> None:
    local = _plan_copy(tmp_path / "local")
    _run(local, "--cores", "2")

    cluster = _plan_copy(tmp_path / "cluster")
    before = _finished_slurm_jobs()
    out = _run(
        cluster,
        "--profile",
        "config/profiles/slurm",
        "--workflow-profile",
        "none",
        # Fit the single small node: group jobs ask for at most its CPUs, a condition for one.
        "--group-components",
        f"runs={GROUP_SIZE}",
        "--cores",
        str(CPUS),
        "--config",
        "runThreads=1",
        "--default-resources",
        "mem_mb=500",
        "runtime=10",
        # No accounting database here: follow jobs with squeue (MinJobAge keeps finished ones).
        "--slurm-status-command",
        "squeue",
        "--slurm-init-seconds-before-status-checks",
        "1",
        "--seconds-between-status-checks",
        "1",
        "--slurm-keep-successful-logs",
        "--latency-wait",
        "5",
    )
    new_jobs = {job: state for job, state in _finished_slurm_jobs().items() if job not in before}
    assert new_jobs and set(new_jobs.values()) == {"COMPLETED"}, new_jobs

    # The plugin's log of each SLURM job names the rules that ran inside it and their outputs.
    rules_in_job: dict[str, list[str]] = {}
    group_jobs = set()
    condition_dirs = []
    for log in (cluster / ".snakemake" / "slurm_logs").rglob("*.log"):
        job_id, text = log.stem, log.read_text()
        rules_in_job[job_id] = re.findall(r"^\s*rule (\S+):$", text, re.MULTILINE)
        if log.parent.name.startswith("group_runs"):
            group_jobs.add(job_id)
            condition_dirs += re.findall(
                r"^\s*rule \S+:\n\s*output: results/memory_sweep/state/([^/]+)\.json",
                text,
                re.MULTILINE,
            )
    assert set(rules_in_job) == set(new_jobs), (sorted(rules_in_job), sorted(new_jobs), out[-3000:])

    conditions = json.loads((cluster / "results" / "memory_sweep" / "conditions.json").read_text())
    assert len(conditions) == CONDITIONS
    assert sorted(condition_dirs) == sorted(c["dir"] for c in conditions), "each ran once"
    assert len(group_jobs) == math.ceil(CONDITIONS / GROUP_SIZE)
    assert all(len(rules_in_job[job]) <= GROUP_SIZE for job in group_jobs)
    downstream = sorted(rule for job in set(new_jobs) - group_jobs for rule in rules_in_job[job])
    # plan_spec, the figures, the pages and the site are local rules; `all` is a target only
    assert downstream == ["analyse"]
    local_rules = ("figures_memory_sweep", "methods", "report", "site", "plan_spec")
    assert not any(rule in local_rules for rules in rules_in_job.values() for rule in rules)
    print(
        f"{CONDITIONS} conditions in {len(group_jobs)} SLURM group jobs "
        f"+ {len(new_jobs) - len(group_jobs)} downstream jobs = {len(new_jobs)} SLURM jobs"
    )

    assert _outputs(cluster) == _outputs(local)
    assert len(_outputs(cluster)) == 1 + CONDITIONS
    assert (cluster / "site" / "index.html").exists()
