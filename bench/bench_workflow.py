"""The workflow against `simreport audit` on the same runs and cores.

Prints (i) the wall time of `snakemake --cores N` for a 1,000-run plan and of `simreport audit`
with `--concurrency N` on the same plan, and their ratio (goal ≤ 1.3) — for two kinds of run:
cheap ones (the prisoner's dilemma example, ~100 decisions, where Snakemake's fixed costs weigh
most) and typical ones (the echo-chamber example, ~1,000 decisions); (ii) the wall time of a
no-op `snakemake` on a 10,000-run plan (goal < 2 s) and (iii) the dry-run time for a
100,000-run plan (goal < 10 s), each side by side with the earlier design, whose condition jobs
declared every result.json they write as an output (Snakemake then reads metadata for every run
at each start).
Everything runs in a temporary copy of the workflow.

    python bench/bench_workflow.py [--cores 2] [--repeat 2] [--worlds prisoners_dilemma,...]
                                   [--skip i,ii,iii]
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
COPY = ("Snakefile", "rules", "config", "profiles", "envs", "examples", "report")


def plan(replications: int, world: str = "prisoners_dilemma") -> dict[str, object]:
    """One of the examples with 20 conditions: the base, 9 memory windows and 10 levels of a
    second axis (population size for the prisoner's dilemma, homophily for the echo chamber)."""
    second = (
        {"template": "population_scale", "levels": list(range(4, 24, 2))}
        if world == "prisoners_dilemma"
        else {"template": "environment_structure", "levels": [k / 10 for k in range(10)]}
    )
    return {
        "id": "bench",
        "baseScenario": f"../{world}/scenario.yaml",
        "replications": replications,
        "axes": [{"template": "memory_temporality", "levels": list(range(1, 10))}, second],
    }


CONDITIONS = 20


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds


def workspace(tmp: Path, replications: int, world: str = "prisoners_dilemma") -> Path:
    for name in COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp / name, symlinks=True)
        else:
            shutil.copy2(source, tmp / name)
    (tmp / "examples" / "bench").mkdir()
    (tmp / "examples" / "bench" / "audit.yaml").write_text(
        yaml.safe_dump(plan(replications, world))
    )
    config = yaml.safe_load((tmp / "config" / "config.yaml").read_text())
    config["plans"] = ["examples/bench/audit.yaml"]
    (tmp / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp


def compare(world: str, cores: str, repeat: int) -> tuple[float, float, float]:
    """Best-of-`repeat` wall times of the audit, the workflow and a no-op workflow run."""
    snakemake, simreport = str(BIN / "snakemake"), str(BIN / "simreport")
    pages = ["results/bench/report.html", "results/bench/methods.html"]
    audit_times, workflow_times, noop_times = [], [], []
    for _ in range(repeat):
        # Alternate the two so that drift in the machine's load hits both alike.
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            cli_space = workspace(Path(a), 50, world)
            audit_times.append(
                timed(
                    [
                        simreport,
                        "audit",
                        "examples/bench/audit.yaml",
                        "--out",
                        "cli",
                        "--concurrency",
                        cores,
                    ],
                    cli_space,
                )
            )
            flow_space = workspace(Path(b), 50, world)
            workflow_times.append(timed([snakemake, "--cores", cores, *pages], flow_space))
            noop_times.append(timed([snakemake, "--cores", cores, *pages], flow_space))
    return min(audit_times), min(workflow_times), min(noop_times)


def declared_runs(space: Path) -> None:
    """Make the workspace's condition jobs declare every result.json they write as an output
    (the earlier design), the state file last."""
    rules = space / "rules" / "runs.smk"
    text = rules.read_text()
    declared = "                _target.state,\n"
    if declared not in text:
        raise SystemExit(f"{rules} no longer says {declared.strip()!r}: update this benchmark")
    rules.write_text(text.replace(declared, "                [*_target.outputs, _target.state],\n"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    parser.add_argument("--worlds", default="prisoners_dilemma,echo_chamber")
    parser.add_argument("--skip", default="", help="parts to leave out: i, ii, iii")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    cores = str(args.cores)
    snakemake = str(BIN / "snakemake")
    runs = CONDITIONS * 50
    if "i" not in skip:
        for world in args.worlds.split(","):
            audit_s, workflow_s, _ = compare(world, cores, args.repeat)
            print(
                f"(i) {runs} {world} runs (best of {args.repeat}): workflow {workflow_s:.1f} s, "
                f"simreport audit {audit_s:.1f} s, ratio {workflow_s / audit_s:.2f} (goal ≤ 1.3)"
            )
    if "ii" not in skip:
        page = "results/bench/report.html"
        noop = {}
        with tempfile.TemporaryDirectory() as c, tempfile.TemporaryDirectory() as d:
            spaces = {"undeclared": workspace(Path(c), 500), "declared": workspace(Path(d), 500)}
            declared_runs(spaces["declared"])
            for space in spaces.values():
                timed([snakemake, "--cores", cores, page], space)
            for name, space in spaces.items():
                noop[name] = min(
                    timed([snakemake, "--cores", cores, page], space) for _ in range(3)
                )
        print(
            f"(ii) no-op snakemake on {CONDITIONS * 500} runs: {noop['undeclared']:.2f} s "
            f"(goal < 2 s); with every result.json declared as an output: "
            f"{noop['declared']:.2f} s; ratio {noop['undeclared'] / noop['declared']:.2f}"
        )
    if "iii" not in skip:
        page = "results/bench/report.html"
        dry = [snakemake, page, "--cores", cores, "--dry-run", "--config", "maxRuns=100000"]
        reps = 100_000 // CONDITIONS
        with tempfile.TemporaryDirectory() as c, tempfile.TemporaryDirectory() as d:
            new = workspace(Path(c), replications=reps)
            old = workspace(Path(d), replications=reps)
            declared_runs(old)
            new_s = timed(dry, new)
            old_s = timed(dry, old)
        print(
            f"(iii) dry run of {CONDITIONS * reps} runs: {new_s:.1f} s (goal < 10 s); with every "
            f"result.json declared as an output: {old_s:.1f} s; ratio {new_s / old_s:.2f}"
        )


if __name__ == "__main__":
    main()
