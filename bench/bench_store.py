"""What verifying the run store costs a fetch.

Stores a few hundred runs of the prisoner's dilemma example, then fetches every one into fresh
run directories in one process, alternating run by run: with `RunStore.fetch` (each file copied
and checked against the sha256 recorded at `keep`) and without verification (the same files
copied under a temporary name and renamed, result.json parsed and last). Prints both times, best
of `--repeat` rounds, and their ratio.

    python bench/bench_store.py [--replications 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from simreport.core.files import read_json
from simreport.core.schema import RunResult
from simreport.harness import RunStore, load_plan, run_audit
from simreport.harness.store import RUN_FILES

PLAN = Path(__file__).resolve().parent.parent / "examples" / "prisoners_dilemma" / "audit.yaml"


def fetch_unverified(entry: Path, target: Path) -> RunResult:
    """The fetch without its checks: copies placed atomically, result.json last."""
    result = RunResult.model_validate(read_json(entry / "result.json"))
    target.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (entry / name).exists():
            staging = target / f".{name}.tmp"
            shutil.copyfile(entry / name, staging)
            os.replace(staging, target / name)
    return result


def timed_round(store: RunStore, keys: list[str], out: Path) -> tuple[float, float]:
    """Seconds spent fetching every run with and without verification, alternating run by run
    so that drift in the machine's load hits both alike."""
    shutil.rmtree(out, ignore_errors=True)
    verified = plain = 0.0
    for key in keys:
        start = time.perf_counter()
        assert store.fetch(key, out / "verified" / key) is not None
        middle = time.perf_counter()
        fetch_unverified(store.root / key[:2] / key, out / "plain" / key)
        verified, plain = verified + middle - start, plain + time.perf_counter() - middle
    return verified, plain


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=20, help="per condition (15)")
    parser.add_argument("--repeat", type=int, default=5, help="best of this many rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        store = RunStore(root / "store")
        loaded = load_plan(PLAN, replications=args.replications)
        run_audit(loaded, root / "audit", store=store)
        keys = sorted(p.name for p in store.root.glob("*/*") if not p.name.startswith("."))
        rounds = [timed_round(store, keys, root / "fetched") for _ in range(args.repeat)]
    v, p = min(r[0] for r in rounds), min(r[1] for r in rounds)
    print(
        f"fetch of {len(keys)} runs (best of {args.repeat}): verified {v * 1000:.0f} ms "
        f"({v / len(keys) * 1e6:.0f} µs/run), unverified {p * 1000:.0f} ms, ratio {v / p:.2f}"
    )


if __name__ == "__main__":
    main()
