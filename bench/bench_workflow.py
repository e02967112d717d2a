"""The workflow's daily loop at two shapes of plan, against the goals of issue 30.

Three goals, each measured at a few conditions and at many (the prisoner's dilemma example;
`ledger: null`; everything in a temporary copy of the workflow):
  no-op   `snakemake` with nothing to do, 10,000 runs: 20 conditions × 500 replications and the
          10×10×10 factorial (1,001 conditions) × 10. Goal < 2 s.
  dry     `snakemake --dry-run`, 100,000 runs: 20 conditions × 5,000 and the 10×10×50 factorial
          (5,001 conditions) × 20. Goal < 10 s.
  first   a first `snakemake --cores N` against `simreport audit --concurrency N` on the same
          plan: 20 conditions × 50 and the 10×10×10 factorial × 2 (--first-replications).
          Goal: ratio ≤ 1.3.
Each figure is the best of `--repeat` runs; the two sides of a ratio run alternately, so drift in
the machine's load hits both alike. On a shared machine the seconds are noisy: read the ratios.
Python writes its bytecode (and the fingerprints' digest cache beside it) as for any user, even
when PYTHONDONTWRITEBYTECODE is set here.

    python bench/bench_workflow.py [--cores 2] [--repeat 2] [--goals noop,dry,first]
                                   [--shapes few,many] [--first-replications 2]
    python bench/bench_workflow.py --quick      # the few-conditions shape of every goal
    python bench/bench_workflow.py --declared   # the same for the earlier design (every
                                                # result.json a declared output), to compare
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
COPY = ("Snakefile", "rules", "config", "profiles", "envs", "examples", "report")
PAGE = "results/bench/report.html"
GOALS = {"noop": 2.0, "dry": 10.0, "first": 1.3}


def few_axes() -> list[dict[str, object]]:
    """20 conditions (one at a time): the base, 9 memory windows and 10 population sizes."""
    return [
        {"template": "memory_temporality", "levels": list(range(1, 10))},
        {"template": "population_scale", "levels": list(range(4, 24, 2))},
    ]


def factorial_axes(temptations: int) -> list[dict[str, object]]:
    """10 memory windows × 10 population sizes × `temptations` payoffs for defecting (each
    between the reward, 3, and 6, which keeps the game a prisoner's dilemma), none the base's."""
    step = 3 / (temptations + 2)
    levels = [round(3 + step * k, 4) for k in range(1, temptations + 2)]
    levels = [level for level in levels if level != 5][:temptations]
    return [
        {"template": "memory_temporality", "levels": [1, 2, 3, 4, 6, 7, 8, 9, 10, 11]},
        {"template": "population_scale", "levels": [4, 6, 8, 12, 14, 16, 18, 20, 22, 24]},
        {
            "template": "environment_structure",
            "id": "temptation",
            "target": "params.payoffs.temptation",
            "levels": levels,
        },
    ]


@dataclass(frozen=True)
class Shape:
    label: str
    axes: list[dict[str, object]]
    replications: int

    @property
    def conditions(self) -> int:
        sizes = [len(axis["levels"]) for axis in self.axes]  # type: ignore[arg-type]
        if len(self.axes) == 2:
            return 1 + sum(sizes)
        product = 1
        for size in sizes:
            product *= size
        return 1 + product

    @property
    def runs(self) -> int:
        return self.conditions * self.replications

    def plan(self) -> dict[str, object]:
        return {
            "id": "bench",
            "baseScenario": "../prisoners_dilemma/scenario.yaml",
            "design": "one_at_a_time" if len(self.axes) == 2 else "full_factorial",
            "replications": self.replications,
            "axes": self.axes,
        }


def shapes(goal: str, first_replications: int) -> dict[str, Shape]:
    """The two shapes of each goal: `few` conditions and `many`."""
    if goal == "noop":
        return {
            "few": Shape("20 × 500", few_axes(), 500),
            "many": Shape("1001 × 10", factorial_axes(10), 10),
        }
    if goal == "dry":
        return {
            "few": Shape("20 × 5000", few_axes(), 5000),
            "many": Shape("5001 × 20", factorial_axes(50), 20),
        }
    return {
        "few": Shape("20 × 50", few_axes(), 50),
        "many": Shape(f"1001 × {first_replications}", factorial_axes(10), first_replications),
    }


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        command, cwd=cwd, env=environment(), capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds


def workspace(tmp: Path, shape: Shape) -> Path:
    for name in COPY:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp / name, symlinks=True)
        else:
            shutil.copy2(source, tmp / name)
    (tmp / "examples" / "bench").mkdir()
    (tmp / "examples" / "bench" / "audit.yaml").write_text(yaml.safe_dump(shape.plan()))
    config = yaml.safe_load((tmp / "config" / "config.yaml").read_text())
    config.update(plans=["examples/bench/audit.yaml"], ledger=None, maxRuns=max(shape.runs, 100))
    (tmp / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    if DECLARED:
        declared_runs(tmp)
    return tmp


DECLARED: list[bool] = []
"""Set by --declared: the workspaces use the earlier design (see `declared_runs`)."""


def declared_runs(space: Path) -> None:
    """Make the workspace's condition jobs declare every result.json they write as an output
    (the earlier design, whose no-op start read metadata for every run), the state file last."""
    rules = space / "rules" / "runs.smk"
    text = rules.read_text()
    declared = "                _target.state,\n"
    if declared not in text:
        raise SystemExit(f"{rules} no longer says {declared.strip()!r}: update this benchmark")
    rules.write_text(text.replace(declared, "                [*_target.outputs, _target.state],\n"))


def best(repeat: int, measure: Callable[[], float]) -> float:
    return min(measure() for _ in range(repeat))


def noop(shape: Shape, cores: str, repeat: int) -> tuple[float, str]:
    snakemake = [str(BIN / "snakemake"), "--cores", cores, PAGE]
    with tempfile.TemporaryDirectory() as tmp:
        space = workspace(Path(tmp), shape)
        timed(snakemake, space)
        # One untimed no-op first: the build's last processes and writes settle.
        timed(snakemake, space)
        seconds = best(repeat, lambda: timed(snakemake, space))
    return seconds, f"{seconds:.2f} s"


def dry(shape: Shape, cores: str, repeat: int) -> tuple[float, str]:
    snakemake = [str(BIN / "snakemake"), "--cores", cores, "--dry-run", PAGE]
    with tempfile.TemporaryDirectory() as tmp:
        space = workspace(Path(tmp), shape)
        seconds = best(repeat, lambda: timed(snakemake, space))
    return seconds, f"{seconds:.2f} s"


def first(shape: Shape, cores: str, repeat: int) -> tuple[float, str]:
    """The ratio of a first build's wall time to `simreport audit`'s, best of `repeat` each."""
    snakemake = [str(BIN / "snakemake"), "--cores", cores, PAGE, "results/bench/methods.html"]
    audit = [str(BIN / "simreport"), "audit", "examples/bench/audit.yaml", "--out", "cli"]
    audit += ["--concurrency", cores, "--max-runs", str(max(shape.runs, 100))]
    audit_times, build_times = [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            audit_times.append(timed(audit, workspace(Path(a), shape)))
            build_times.append(timed(snakemake, workspace(Path(b), shape)))
    ratio = min(build_times) / min(audit_times)
    return ratio, f"build {min(build_times):.1f} s / audit {min(audit_times):.1f} s"


MEASURES = {"noop": noop, "dry": dry, "first": first}
TITLES = {
    "noop": "no-op build, 10,000 runs  < 2 s",
    "dry": "dry run, 100,000 runs    < 10 s",
    "first": "first build / audit      ≤ 1.3",
}


def cell(goal: str, shape: Shape, value: float, detail: str) -> str:
    """`shape: figure (figure / goal, pass or FAIL)` and what the figure is made of."""
    verdict = "pass" if value <= GOALS[goal] else "FAIL"
    figure = f"{value:.2f}" if goal == "first" else f"{value:.2f} s"
    extra = f"; {detail}" if goal == "first" else ""
    return f"{shape.label}: {figure} ({value / GOALS[goal]:.2f} of goal, {verdict}{extra})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    parser.add_argument("--goals", default="noop,dry,first", help="of noop, dry, first")
    parser.add_argument("--shapes", default="few,many", help="few and/or many conditions")
    parser.add_argument("--first-replications", type=int, default=2, metavar="N")
    parser.add_argument("--quick", action="store_true", help="--shapes few --repeat 1")
    parser.add_argument(
        "--declared",
        action="store_true",
        help="the earlier design: condition jobs declare every result.json (run both ways to "
        "compare)",
    )
    args = parser.parse_args()
    if args.declared:
        DECLARED.append(True)
    wanted = ["few"] if args.quick else args.shapes.split(",")
    repeat = 1 if args.quick else args.repeat
    table: dict[str, list[str]] = {}
    for goal in args.goals.split(","):
        for name, shape in shapes(goal, args.first_replications).items():
            if name in wanted:
                value, detail = MEASURES[goal](shape, str(args.cores), repeat)
                table.setdefault(goal, []).append(cell(goal, shape, value, detail))
                print(f"{goal}: {table[goal][-1]}", flush=True)
    print(f"\n{args.cores} cores, best of {repeat}; shapes are conditions × replications")
    for goal, cells in table.items():
        print(f"{TITLES[goal]} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
