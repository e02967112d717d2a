"""Simulated coverage of the mean-difference intervals, and the size of the equivalence test.

For normal and lognormal (skewed) data at n = 3, 5, 10 and 30 per group, draws many samples
with a known mean difference and counts how often each interval method of
simreport.analysis.inference contains it (nominal 0.95); then the rejection rate of TOST at a
true difference equal to the margin (at most 0.05 is correct). Everything is seeded; the
defaults take about a minute of two idle cores (the bootstraps dominate).

    python bench/bench_coverage.py [--simulations 2000] [--processes 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from multiprocessing import Pool

import numpy as np

from simreport.analysis import inference as inf

SIZES = (3, 5, 10, 30)
DISTRIBUTIONS = ("normal", "lognormal")
TOST_SIZES = (5, 10, 30)
ALPHA = 0.05

Draw = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


def unpaired_normal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(0.0, 1.0, n), rng.normal(1.0, 2.0, n)  # unequal spreads


def unpaired_lognormal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.lognormal(0.0, 1.0, n), 2.0 * rng.lognormal(0.0, 1.0, n)


def paired_normal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    # A shared component per replication, as common random numbers give.
    shared = rng.normal(0.0, 1.0, n)
    return shared + rng.normal(0.0, 0.5, n), shared + rng.normal(1.0, 0.5, n)


def paired_lognormal(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    shared = rng.normal(0.0, 1.0, n)
    return np.exp(shared), np.exp(shared + rng.normal(0.0, 0.5, n))


# (draw, true mean difference) per design and distribution.
DESIGNS: dict[tuple[str, str], tuple[Draw, float]] = {
    ("unpaired", "normal"): (unpaired_normal, 1.0),
    ("unpaired", "lognormal"): (unpaired_lognormal, math.exp(0.5)),
    ("paired", "normal"): (paired_normal, 1.0),
    ("paired", "lognormal"): (paired_lognormal, math.exp(0.625) - math.exp(0.5)),
}

IntervalMethod = Callable[[np.ndarray, np.ndarray, int], inf.Interval | None]


def _unpaired(method: str) -> IntervalMethod:
    return lambda b, c, seed: inf.unpaired_interval(b, c, seed=seed, method=method)


def _paired(method: str) -> IntervalMethod:
    return lambda b, c, seed: inf.paired_bootstrap_ci(b, c, seed=seed, method=method)


METHODS: dict[str, list[tuple[str, IntervalMethod]]] = {
    "unpaired": [(name, _unpaired(name)) for name in inf.UNPAIRED_METHODS],
    "paired": [(name, _paired(name)) for name in inf.PAIRED_BOOTSTRAP_METHODS]
    + [(inf.PAIRED_T, lambda b, c, seed: inf.paired_t_interval(b, c))],
}


def coverage_cell(task: tuple[str, str, int, int, int]) -> tuple[str, str, int, dict[str, float]]:
    """Coverage of each method of one design at one distribution and size."""
    design, distribution, n, simulations, seed = task
    draw, truth = DESIGNS[(design, distribution)]
    rng = np.random.default_rng([seed, SIZES.index(n), DISTRIBUTIONS.index(distribution)])
    hits = dict.fromkeys((name for name, _ in METHODS[design]), 0)
    for i in range(simulations):
        base, cond = draw(rng, n)
        for name, interval_of in METHODS[design]:
            interval = interval_of(base, cond, i)
            hits[name] += interval is not None and interval.lo <= truth <= interval.hi
    return design, distribution, n, {name: count / simulations for name, count in hits.items()}


def tost_cell(task: tuple[bool, int, int, int]) -> tuple[bool, int, float]:
    """Rejection rate of TOST at α = 0.05 when the true difference equals the margin."""
    paired, n, simulations, seed = task
    draw = paired_normal if paired else unpaired_normal
    rng = np.random.default_rng([seed, n, int(paired), 1])
    margin = 1.0  # both normal designs have a true difference of 1
    rejected = 0
    for _ in range(simulations):
        base, cond = draw(rng, n)
        rejected += inf.equivalence_test(base, cond, margin, paired=paired).p < ALPHA
    return paired, n, rejected / simulations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulations", type=int, default=2000)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sims, seed = args.simulations, args.seed
    started = time.perf_counter()
    coverage_tasks = [
        (design, distribution, n, sims, seed)
        for design in ("unpaired", "paired")
        for distribution in DISTRIBUTIONS
        for n in SIZES
    ]
    tost_tasks = [(paired, n, sims, seed) for paired in (False, True) for n in TOST_SIZES]
    with Pool(args.processes) as pool:
        coverage = pool.map(coverage_cell, coverage_tasks, chunksize=1)
        sizes = pool.map(tost_cell, tost_tasks, chunksize=1)

    se = math.sqrt(0.95 * 0.05 / sims)
    print(f"Coverage of 95 % intervals, {sims} simulated samples per row (SE about {se:.3f})")
    for design in ("unpaired", "paired"):
        names = [name for name, _ in METHODS[design]]
        print(f"\n{design}: " + " | ".join(f"[{i}] {name}" for i, name in enumerate(names)))
        print(f"{'data':<10} {'n':>3} " + " ".join(f"{f'[{i}]':>7}" for i in range(len(names))))
        for row_design, distribution, n, rates in coverage:
            if row_design == design:
                cells = " ".join(f"{rates[name]:>7.3f}" for name in names)
                print(f"{distribution:<10} {n:>3} {cells}")

    se = math.sqrt(ALPHA * (1 - ALPHA) / sims)
    print("\nTOST rejection rate at a true difference equal to the margin, normal data, α = 0.05")
    print(f"(correct: at most 0.05; SE about {se:.3f})")
    print(f"{'design':<9} " + " ".join(f"{f'n={n}':>7}" for n in TOST_SIZES))
    for paired in (False, True):
        rates = {n: rate for row_paired, n, rate in sizes if row_paired == paired}
        label = "paired" if paired else "unpaired"
        print(f"{label:<9} " + " ".join(f"{rates[n]:>7.3f}" for n in TOST_SIZES))
    print(f"\n{time.perf_counter() - started:.0f} s with {args.processes} processes")


if __name__ == "__main__":
    main()
