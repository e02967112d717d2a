"""Analysis and report rendering for 20 conditions × 30 replications × 5 metrics.

Writes a synthetic audit directory, then times, side by side in one process: reading the run
results, the analysis (the bootstrap dominates) and rendering report.html. Prints each figure and
the ratio of analysis time to reading time.

    python bench/bench_analysis.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from simreport.analysis.audit import analyse, load_audit_inputs
from simreport.core.files import write_json

CONDITIONS, REPLICATIONS = 20, 30
METRICS = ("m1", "m2", "m3", "m4", "m5")
GOAL_ANALYSIS, GOAL_REPORT = 1.0, 0.5


def build(root: Path) -> None:
    rng = np.random.default_rng(0)
    axes = [
        {
            "id": f"a{i}",
            "level": "micro",
            "kind": "design",
            "dimension": "d",
            "target": f"params.a{i}",
            "levels": [0, 1],
            "code": None,
        }
        for i in range(10)
    ]
    plan = {
        "id": "bench",
        "hash": "0" * 64,
        "replications": REPLICATIONS,
        "models": [],
        "metrics": list(METRICS),
        "claimType": "exploratory",
        "design": "one_at_a_time",
        "base": {"params": {f"a{i}": 0 for i in range(10)}},
        "hypothesis": {"outcomes": {m: "increase" for m in METRICS}},
        "axes": axes,
    }
    write_json(root / "plan.json", plan)
    conditions: list[dict[str, Any]] = [
        {
            "id": "base",
            "dir": "base",
            "isBase": True,
            "baseId": "base",
            "levels": {},
            "replications": REPLICATIONS,
        }
    ]
    for c in range(1, CONDITIONS):
        axis = f"a{(c - 1) // 2}"
        conditions.append(
            {
                "id": f"{axis}={c % 2}",
                "dir": f"{axis}~3d{c % 2}",
                "isBase": False,
                "baseId": "base",
                "axis": axis,
                "levels": {axis: c % 2},
                "replications": REPLICATIONS,
            }
        )
    write_json(root / "conditions.json", conditions)
    for k, cond in enumerate(conditions):
        for r in range(REPLICATIONS):
            write_json(
                root / "runs" / cond["dir"] / str(r) / "result.json",
                {
                    "schemaVersion": 1,
                    "condition": cond["id"],
                    "replication": r,
                    "seedPath": [r],
                    "status": {
                        "execution": "completed",
                        "validity": "unchecked",
                        "evidence": "complete",
                    },
                    "metrics": {m: float(rng.normal(0.05 * k, 1)) for m in METRICS},
                    "distributions": {},
                    "integrity": {"complete": True, "counters": {"decisions": 9}},
                    "cost": {"llmCalls": 9, "promptTokens": 900, "completionTokens": 9},
                    "failure": None,
                },
            )


def best_of(repeat: int, fn: Any) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        build(root)
        read_s, (plan, conditions, records) = best_of(args.repeat, lambda: load_audit_inputs(root))
        analyse_s, audit = best_of(args.repeat, lambda: analyse(plan, conditions, records))
        print(f"read {len(records)} run results: {read_s:.3f} s")
        ratio = analyse_s / GOAL_ANALYSIS
        print(
            f"analysis ({CONDITIONS} conditions × {REPLICATIONS} replications × {len(METRICS)} "
            f"metrics): {analyse_s:.3f} s (goal < {GOAL_ANALYSIS} s: ratio {ratio:.2f})"
        )
        print(f"analysis / reading: {analyse_s / read_s:.2f}")
        try:
            from simreport.report import render_report
        except ImportError:
            print("report: not available")
            return
        report_s, _ = best_of(args.repeat, lambda: render_report(audit))
        ratio = report_s / GOAL_REPORT
        print(f"report rendering: {report_s:.3f} s (goal < {GOAL_REPORT} s: ratio {ratio:.2f})")


if __name__ == "__main__":
    main()
