"""How long a refusal of hostile or oversized input takes: a YAML alias bomb (in process, and by
`simreport validate` with the interpreter's start-up), and plans of 10^12 conditions or of 3 × 10^12
runs (by the command, and through the workflow's config).

The tests check that these are refused from a counter or a limit, building nothing; this measures
that it is also quick. Prints the milliseconds of each (best of `--repeat`) against its goal.

    python bench/bench_refusals.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simreport.cli import main as simreport
from simreport.core.errors import SimreportError
from simreport.core.files import parse_document
from simreport.workflow import load_workflow
from tests.core.test_hostile_documents import billion_laughs
from tests.support.studies import PLAN, SCENARIO

ROOT = Path(__file__).resolve().parent.parent
HUGE = 1_000_000_000_000
FACTORIAL = (
    "baseScenario: scenario.yaml\ndesign: full_factorial\nreplications: 1\naxes:\n"
    + "".join(
        f"  - {{id: a{i}, level: micro, kind: design, dimension: d, "
        f"target: params.memoryWindow, levels: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}}\n"
        for i in range(12)
    )
)


def best_ms(refuse: Callable[[], None], repeat: int) -> float:
    """The quickest of `repeat` refusals, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        refuse()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def refused_in_process(text: str) -> Callable[[], None]:
    def refuse() -> None:
        with contextlib.suppress(SimreportError):
            parse_document(text, Path("laughs.yaml"))
            raise SystemExit("the alias bomb was read")

    return refuse


def refused_by(argv: list[str]) -> Callable[[], None]:
    def refuse() -> None:
        with contextlib.redirect_stderr(io.StringIO()):
            if simreport(argv) != 2:
                raise SystemExit(f"not refused: simreport {' '.join(argv)}")

    return refuse


def refused_by_a_new_process(argv: list[str]) -> Callable[[], None]:
    exe = Path(sys.executable).with_name("simreport")
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "simreport.cli"]

    def refuse() -> None:
        done = subprocess.run([*command, *argv], capture_output=True, timeout=120, check=False)
        if done.returncode != 2:
            raise SystemExit(f"not refused: simreport {' '.join(argv)}: {done.stderr!r}")

    return refuse


def refused_workflow(config: dict[str, object]) -> Callable[[], None]:
    def refuse() -> None:
        with contextlib.suppress(SimreportError):
            load_workflow(config, ROOT)
            raise SystemExit("the workflow config was accepted")

    return refuse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        study = Path(tmp)
        (study / "scenario.yaml").write_text(SCENARIO)
        (study / "laughs.yaml").write_text("title: laughs\n" + billion_laughs("axes"))
        (study / "huge.yaml").write_text(PLAN.replace("replications: 2", f"replications: {HUGE}"))
        (study / "factorial.yaml").write_text(FACTORIAL)
        results = str(study / "results")
        plans = ["examples/prisoners_dilemma/audit.yaml"]
        cases = [
            ("alias bomb, in process", refused_in_process(billion_laughs("axes")), 1000),
            (
                "alias bomb, simreport validate",
                refused_by_a_new_process(["validate", str(study / "laughs.yaml")]),
                15_000,
            ),
            (
                "3e12 runs, simreport audit",
                refused_by(["audit", str(study / "huge.yaml"), "--out", str(study / "out")]),
                5000,
            ),
            (
                "1e12 conditions, simreport conditions",
                refused_by(["conditions", str(study / "factorial.yaml")]),
                5000,
            ),
            (
                "huge replications, workflow config",
                refused_workflow({"plans": plans, "results": results, "replications": HUGE}),
                5000,
            ),
        ]
        failed = 0
        for name, refuse, goal in cases:
            ms = best_ms(refuse, args.repeat)
            failed += ms > goal
            print(f"{name:<40} {ms:9.1f} ms  (goal < {goal:,} ms)")
    print("PASS" if not failed else "FAIL")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
