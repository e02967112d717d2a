"""How often an audit of nothing reports a move: the headline's family-wise error rate.

Simulates audits under a global null: one base and `--conditions` perturbed conditions of
`--replications` runs each, every metric independent normal noise, no condition different from
its base. Each audit is judged two ways, side by side on the same data:

- per metric (the reference's `holmP`): Holm within each metric over its conditions' Mann-Whitney
  p (normal approximation), and the audit "moved" when any row of any metric is below 0.05;
- one family (what the headline reports now): the exact rank-sum p of every row of every metric,
  Holm over all of them at once.

Prints the share of audits that report a move, with its binomial standard error, for 1, 3 and 5
metrics. Seeded; no clock.

    python bench/bench_family.py [--audits 2000] [--conditions 12] [--replications 10]
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from simreport.analysis import inference, stats

ALPHA = 0.05


def false_alarms(
    metrics: int, audits: int, conditions: int, replications: int, seed: int
) -> tuple[float, float]:
    """(per-metric Holm rate, one-family rate) over `audits` simulated null audits."""
    rng = np.random.default_rng(seed)
    per_metric = one_family = 0
    for _ in range(audits):
        reference_moved = False
        exact_p: list[float] = []
        for _ in range(metrics):
            base = rng.normal(size=replications)
            conds = rng.normal(size=(conditions, replications))
            mwu = [stats.mann_whitney_p(base, c) for c in conds]
            adjusted = stats.holm(mwu)
            reference_moved |= any(p is not None and p < ALPHA for p in adjusted)
            exact_p += [inference.rank_sum_test(base, c).p for c in conds]
        per_metric += reference_moved
        family = stats.holm(exact_p)
        one_family += any(p is not None and p < ALPHA for p in family)
    return per_metric / audits, one_family / audits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--audits", type=int, default=2000)
    parser.add_argument("--conditions", type=int, default=12)
    parser.add_argument("--replications", type=int, default=10)
    args = parser.parse_args()
    se = math.sqrt(ALPHA * (1 - ALPHA) / args.audits)
    print(
        f"{args.audits} null audits, {args.conditions} conditions, {args.replications} "
        f"replications each; SE of a rate near 0.05: {se:.3f}"
    )
    print(f"{'metrics':>8} {'per-metric Holm':>16} {'one family':>11}")
    for metrics in (1, 3, 5):
        old, new = false_alarms(
            metrics, args.audits, args.conditions, args.replications, seed=20261202 + metrics
        )
        print(f"{metrics:>8} {old:>16.3f} {new:>11.3f}")


if __name__ == "__main__":
    main()
