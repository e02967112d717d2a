"""The CPU time of the same work under two Python interpreters, as a ratio: the choice `.ci/run`
makes between the distribution's Python and another one on PATH.

Each interpreter gets a virtual environment with the project installed (uv when it is on PATH,
else pip), unless it already is one that imports simreport. The two then run alternately,
`--repeat` times each, so drift in the machine's load hits both alike:
  dry-run   `snakemake --dry-run` of the two example plans, on a temporary copy of the workflow
  tests     `pytest -n 0` on a few statistics and harness test files (`--tests` names others)
The figure is the CPU time (user + system) of the child process and its own children; read the
ratio (second interpreter over first), not the seconds.

    python bench/bench_interpreter.py /usr/bin/python3 ~/.pyenv/versions/3.11.7/bin/python3
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ("tests/analysis/test_audit.py", "tests/harness/test_same_hash_same_runs.py")
PLANS = ("examples/prisoners_dilemma/audit.yaml", "examples/echo_chamber/audit.yaml")


def environment(python: str, scratch: Path, name: str) -> Path:
    """The bin folder of an environment of `python` that imports simreport."""
    check = "import sys, simreport; sys.exit(sys.prefix == sys.base_prefix)"
    probe = subprocess.run([python, "-c", check], capture_output=True, check=False)
    if probe.returncode == 0:
        return Path(python).parent
    venv = scratch / name
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    uv = shutil.which("uv")
    if uv:
        install = [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
        subprocess.run([*install, "--compile-bytecode", "-e", f"{ROOT}[dev]"], check=True)
    else:
        pip = [str(venv / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, "-e", f"{ROOT}[dev]"], check=True)
    return venv / "bin"


def workflow_copy(scratch: Path) -> Path:
    """The workflow and its examples, building the two example plans with no ledger."""
    sys.path.insert(0, str(ROOT))
    from tests.support.workflow_copy import copy_workflow

    config = {"plans": list(PLANS), "replications": 3, "ledger": None}
    return copy_workflow(scratch / "workflow", config, examples=True)


def cpu_seconds(command: list[str], cwd: Path) -> float:
    """The CPU time (user + system) that `command` and its children used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", help="a Python interpreter (the ratio's denominator)")
    parser.add_argument("second", help="another Python interpreter")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tests", nargs="+", default=list(TESTS))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        bins = [
            environment(args.first, scratch, "first"),
            environment(args.second, scratch, "second"),
        ]
        flow = workflow_copy(scratch)
        work = {
            "dry-run": lambda b: cpu_seconds(
                [str(b / "snakemake"), "--dry-run", "--cores", "2"], flow
            ),
            "tests": lambda b: cpu_seconds(
                [str(b / "pytest"), "-q", "-n", "0", "-p", "no:cacheprovider", *args.tests], ROOT
            ),
        }
        for name, run in work.items():
            seconds: list[list[float]] = [[], []]
            for _ in range(args.repeat):
                for side, b in enumerate(bins):
                    seconds[side].append(run(b))
            first, second = min(seconds[0]), min(seconds[1])
            print(
                f"{name:8}  first {first:6.2f} s  second {second:6.2f} s  "
                f"second/first {second / first:.2f}  (best of {args.repeat} CPU times)"
            )


if __name__ == "__main__":
    main()
