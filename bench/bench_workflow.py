"""The workflow against `simreport audit` on the same runs and cores.

Prints (i) the wall time of `snakemake --cores N` for a 1,000-run plan and of `simreport audit`
with `--concurrency N` on the same plan, and their ratio (goal ≤ 1.3); (ii) the wall time of a
no-op `snakemake` on that plan (goal < 3 s); (iii) the dry-run time for a 10,000-run plan (goal
< 15 s). Everything runs in a temporary copy of the workflow.

    python bench/bench_workflow.py [--cores 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
COPY = ("Snakefile", "rules", "config", "profiles", "envs", "examples")


def plan(replications: int) -> dict[str, object]:
    """The prisoner's dilemma example with 20 conditions: the base, 9 memory windows and 10
    population sizes."""
    return {
        "id": "bench",
        "baseScenario": "../prisoners_dilemma/scenario.yaml",
        "replications": replications,
        "metrics": ["cooperationRate", "averagePayoff"],
        "axes": [
            {"template": "memory_temporality", "levels": list(range(1, 10))},
            {"template": "population_scale", "levels": list(range(4, 24, 2))},
        ],
    }


CONDITIONS = 20


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds


def workspace(tmp: Path, replications: int) -> Path:
    for name in COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp / name, symlinks=True)
        else:
            shutil.copy2(source, tmp / name)
    (tmp / "examples" / "bench").mkdir()
    (tmp / "examples" / "bench" / "audit.yaml").write_text(yaml.safe_dump(plan(replications)))
    config = yaml.safe_load((tmp / "config" / "config.yaml").read_text())
    config["plans"] = ["examples/bench/audit.yaml"]
    (tmp / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    cores = str(args.cores)
    snakemake, simreport = str(BIN / "snakemake"), str(BIN / "simreport")
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        # 20 conditions × 50 replications = 1,000 runs.
        small = workspace(Path(a), replications=50)
        runs = CONDITIONS * 50
        audit_s = timed(
            [
                simreport,
                "audit",
                "examples/bench/audit.yaml",
                "--out",
                "cli",
                "--concurrency",
                cores,
            ],
            small,
        )
        pages = ["results/bench/report.html", "results/bench/methods.html"]
        workflow_s = timed([snakemake, "--cores", cores, *pages], small)
        print(
            f"(i) {runs} runs: workflow {workflow_s:.1f} s, simreport audit {audit_s:.1f} s, "
            f"ratio {workflow_s / audit_s:.2f} (goal ≤ 1.3)"
        )
        noop_s = timed([snakemake, "--cores", cores, *pages], small)
        print(f"(ii) no-op snakemake on {runs} runs: {noop_s:.1f} s (goal < 3 s)")
        big = workspace(Path(b), replications=500)
        dry_s = timed([snakemake, "--cores", cores, "--dry-run", "results/bench/audit.json"], big)
        print(f"(iii) dry run of {CONDITIONS * 500} runs: {dry_s:.1f} s (goal < 15 s)")


if __name__ == "__main__":
    main()
