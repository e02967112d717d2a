"""What validating a scenario costs: `validate_scenario` on each shipped example scenario.

A workflow build validates every condition of every plan (thousands of scenarios), so the schema's
checks sit on a hot path. Prints the microseconds per validation of each example, best of
`--repeat` rounds of `--calls` validations; run it on two checkouts (PYTHONPATH) to compare.

    python bench/bench_validation.py [--calls 2000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from simreport.core.files import load_document
from simreport.kernel import validate_scenario

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCENARIOS = ("prisoners_dilemma", "echo_chamber", "refund_desk")


def per_call_us(data: object, calls: int, repeat: int) -> float:
    """The best round's microseconds per validation of `data`."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            validate_scenario(data)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    total = 0.0
    for name in SCENARIOS:
        data = load_document(EXAMPLES / name / "scenario.yaml").data
        validate_scenario(data)  # warm: schemas built, modules imported
        us = per_call_us(data, args.calls, args.repeat)
        total += us
        print(f"{name:<18} {us:8.1f} µs per validation")
    print(f"{'all three':<18} {total:8.1f} µs")


if __name__ == "__main__":
    main()
