"""The CPU time of one testbed run of each example (the refund desk's lost answer, the airline's
lost payment), in this checkout and in others given as source trees: a ratio per example to the
first tree, so a change to the testbed shows what it costs a run.

Every tree runs in a child process of this Python (`PYTHONPATH` set to the tree), the trees in
turn, `--repeat` times each, so drift in the machine's load hits them alike. A child runs each
example `--runs` times in process after two warm-up runs (imports, the kernel fingerprint and
per-process caches are paid once, as a run process of a build pays them), and reports the CPU
time per run; read the ratio, not the milliseconds.

    python bench/bench_testbed_run.py                       # this checkout alone
    git worktree add /tmp/before HEAD~3 && python bench/bench_testbed_run.py /tmp/before .
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ("refund_desk", "airline_desk")

CHILD = """
import json, sys, tempfile, time
from pathlib import Path
from simreport.core.overrides import set_path
from simreport.kernel import load_scenario, run_scenario, validate_scenario

tree, runs = Path(sys.argv[1]), int(sys.argv[2])
out = {}
for name in sys.argv[3:]:
    example = tree / "examples" / name
    doc = load_scenario(example / "scenario.yaml").scenario.to_doc()
    doc = set_path(doc, "llm.temperature", 0.0)
    scratch = Path(tempfile.mkdtemp())

    def run(r):
        one = set_path(set_path(doc, "seedPath", [r]), "replicationId", r)
        run_scenario(validate_scenario(one), scratch / str(r), asset_root=example)

    for r in range(2):
        run(1000 + r)
    started = time.process_time()
    for r in range(runs):
        run(r)
    out[name] = (time.process_time() - started) / runs
print(json.dumps(out))
"""


def measure(tree: Path, runs: int) -> dict[str, float]:
    """CPU seconds per run of each example, in a child process running `tree`'s code."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(runs), *EXAMPLES],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", type=Path, help="source trees (default: this one)")
    parser.add_argument("--runs", type=int, default=20, help="runs per example and measurement")
    parser.add_argument("--repeat", type=int, default=3, help="measurements per tree (best kept)")
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees] or [ROOT]
    best: dict[Path, dict[str, float]] = {}
    for _ in range(args.repeat):
        for tree in trees:
            for name, seconds in measure(tree, args.runs).items():
                kept = best.setdefault(tree, {})
                kept[name] = min(seconds, kept.get(name, seconds))
    first = best[trees[0]]
    for tree in trees:
        cells = "  ".join(
            f"{name} {best[tree][name] * 1000:.1f} ms/run "
            f"(ratio {best[tree][name] / first[name]:.2f})"
            for name in EXAMPLES
        )
        print(f"{tree}: {cells}")


if __name__ == "__main__":
    main()
