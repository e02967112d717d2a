"""Offline decisions per second: echo_chamber at 1,000 agents × 20 steps on one core.

Prompts are really rendered and read by the offline provider; the event log is written as in any
run. Prints the decisions per second of each run and of all runs together.

    python bench/bench_offline.py [--runs 3] [--agents 1000] [--steps 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from simreport.kernel import run_scenario, validate_scenario

GOAL = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    total_decisions = 0
    total_seconds = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):
            scenario = validate_scenario(
                {
                    "world": "echo_chamber",
                    "steps": args.steps,
                    "seed": 1,
                    "seedPath": [r],
                    "population": {
                        "n": args.agents,
                        "fields": {
                            "stance": [
                                "strongly oppose",
                                "oppose",
                                "neutral",
                                "support",
                                "strongly support",
                            ],
                            "age": {"kind": "uniform", "low": 18, "high": 80, "integer": True},
                        },
                    },
                    "policy": {"name": "all"},
                    "params": {"homophily": 0.8, "recommender": "engagement"},
                }
            )
            start = time.perf_counter()
            result = run_scenario(scenario, Path(tmp) / str(r))
            seconds = time.perf_counter() - start
            if result.failure is not None:
                raise SystemExit(f"run failed: {result.failure.message}")
            decisions = result.integrity.counters["decisions"]
            total_decisions += decisions
            total_seconds += seconds
            print(
                f"run {r}: {decisions} decisions in {seconds:.2f} s = {decisions / seconds:,.0f}/s"
            )
    rate = total_decisions / total_seconds
    print(
        f"echo_chamber {args.agents} agents × {args.steps} steps, {args.runs} runs: "
        f"{rate:,.0f} decisions/s on one core (goal {GOAL:,}: ratio {rate / GOAL:.2f})"
    )


if __name__ == "__main__":
    main()
