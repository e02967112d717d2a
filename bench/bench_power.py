"""Replications for the rank tests the audit runs, checked by an independent simulation.

For power targets 0.8 and 0.9, α = 0.05 and a Holm α (0.05 / 6, the strictest threshold of a
family of six), and effects of 2.0, 1.0 and 0.6 (unpaired: pooled SDs; paired: SDs of the
differences), prints the recommended n per condition (pairs when paired), the power the tool
states there, the rejection rate of an independent simulation (scipy's exact rank tests or
their normal approximation, 10,000 draws, its own seed), the t-test's n and the rank test's
rejection rate at that n (what sizing by the t-test delivered), and the time each sizing took.

    python bench/bench_power.py [--draws 10000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from simreport.analysis import power as pw

TARGETS = (0.8, 0.9)
ALPHAS = (0.05, 0.05 / 6)
EFFECTS = (2.0, 1.0, 0.6)


def independent_rate(effect: float, n: int, alpha: float, paired: bool, draws: int) -> float:
    """Share of draws on which scipy's own test of the audit's kind gives p < alpha."""
    rng = np.random.default_rng([n, int(paired), round(effect * 1000), 2026])
    if paired:
        sample = rng.normal(effect, 1.0, size=(draws, n))
        exact = n <= 60
        result = stats.wilcoxon(sample, axis=1, method="exact" if exact else "asymptotic")
        return float(np.mean(result.pvalue < alpha))
    first, second = rng.normal(size=(draws, n)), rng.normal(effect, 1.0, size=(draws, n))
    exact = 2 * n <= 60
    result = stats.mannwhitneyu(second, first, axis=1, method="exact" if exact else "asymptotic")
    return float(np.mean(result.pvalue < alpha))


def t_test_n(effect: float, alpha: float, target: float, paired: bool) -> int:
    """The t-test's n for the same effect, the way sizing worked before."""
    n = 2
    while True:
        power = (
            pw.paired_t_test_power(effect, n, alpha)
            if paired
            else pw.t_test_power(effect, n, n, alpha)
        )
        if power >= target:
            return n
        n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=10_000, help="independent draws per point")
    args = parser.parse_args()
    seed = pw.simulation_seed("bench")
    header = (
        f"{'target':>6} {'alpha':>7} {'design':>8} {'effect':>6} {'n':>4} {'stated':>7} "
        f"{'indep':>7} {'t-n':>4} {'at t-n':>7} {'sec':>5}"
    )
    print(f"tool: {pw.POWER_DRAWS} draws per point; independent: {args.draws} draws per point")
    print(header)
    worst = 1.0
    for target in TARGETS:
        for alpha in ALPHAS:
            for paired in (False, True):
                for effect in EFFECTS:
                    start = time.perf_counter()
                    sized = pw.size_replications(effect, alpha, target, paired=paired, seed=seed)
                    took = time.perf_counter() - start
                    n = sized.replications
                    if n is None or sized.power is None:
                        print(f"{target:>6} {alpha:>7.4f} no number: {sized.note}")
                        continue
                    rate = independent_rate(effect, n, alpha, paired, args.draws)
                    old_n = t_test_n(effect, alpha, target, paired)
                    old = independent_rate(effect, old_n, alpha, paired, args.draws)
                    worst = min(worst, rate - target)
                    print(
                        f"{target:>6} {alpha:>7.4f} {'paired' if paired else 'unpaired':>8} "
                        f"{effect:>6} {n:>4} {sized.power:>7.3f} {rate:>7.3f} {old_n:>4} "
                        f"{old:>7.3f} {took:>5.2f}"
                    )
    print(f"independent power minus target, worst case: {worst:+.3f}")


if __name__ == "__main__":
    main()
