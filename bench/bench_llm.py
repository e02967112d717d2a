"""LLM throughput and the response cache: an audit of 20 runs × 200 decisions against the loopback
Chat Completions server (tests/support/llm_server.py) answering after 100 ms.

First pass: every decision is an HTTP call. The limit is the number of calls in flight divided by
the latency (worker processes × SIMREPORT_MAX_CONCURRENCY ÷ 0.1 s); the goal is at least 80 % of
it. Second pass: the same audit again, with the cache in record mode; the goal is zero calls, and
a time close to what reading the cache plus the kernel's own work (the same audit offline) costs.

    python bench/bench_llm.py [--runs 20] [--agents 40] [--steps 5] [--latency 0.1]
                              [--limit 8] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simreport.harness import load_plan, run_audit
from simreport.kernel.providers.cache import CachedProvider, ResponseCache
from tests.support.llm_server import FakeLLM

_in_cache_layer = [0.0]


def _timed_cache_layer() -> None:
    """Time spent inside the cache layer (keys, reads, writes and the calls behind misses) of the
    runs in this process (all of them with --workers 1)."""
    inner = CachedProvider.complete_many

    def timed(self: CachedProvider, requests: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(self, requests)
        finally:
            _in_cache_layer[0] += time.perf_counter() - start

    CachedProvider.complete_many = timed  # type: ignore[method-assign]


GOAL = 0.8


def _plan(path: Path, url: str, runs: int, agents: int, steps: int, provider: str) -> Path:
    plan = {
        "base": {
            "world": "prisoners_dilemma",
            "steps": steps,
            "seed": 20261129,
            "population": {
                "n": agents,
                "fields": {"disposition": ["cooperative", "competitive", "cautious"]},
            },
            "llm": {"provider": provider, "baseUrl": url, "model": "test"},
            "params": {"framing": "neutral", "memoryWindow": 3},
        },
        "replications": runs,
    }
    path.mkdir(parents=True, exist_ok=True)
    (path / "audit.json").write_text(json.dumps(plan))
    return path / "audit.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--agents", type=int, default=40, help="decisions per step")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per call")
    parser.add_argument("--limit", type=int, default=8, help="SIMREPORT_MAX_CONCURRENCY")
    parser.add_argument("--workers", type=int, default=1, help="audit worker processes")
    args = parser.parse_args()

    decisions = args.runs * args.agents * args.steps
    in_flight = args.workers * args.limit
    limit_rate = in_flight / args.latency
    with tempfile.TemporaryDirectory() as tmp, FakeLLM(latency=args.latency, answer="hash") as llm:
        root = Path(tmp)
        os.environ["SIMREPORT_CACHE_DIR"] = str(root / "cache")
        os.environ["SIMREPORT_CACHE_MODE"] = "record"
        os.environ["SIMREPORT_MAX_CONCURRENCY"] = str(args.limit)
        plan = _plan(root / "plan", llm.url, args.runs, args.agents, args.steps, "openai")

        print(
            f"{args.runs} runs × {args.agents * args.steps} decisions = {decisions} decisions; "
            f"{args.workers} worker(s) × {args.limit} in flight, {args.latency * 1000:.0f} ms a "
            f"call: limit {limit_rate:.0f} calls/s"
        )
        start = time.perf_counter()
        first = run_audit(load_plan(plan), root / "first", concurrency=args.workers)
        live_seconds = time.perf_counter() - start
        calls = llm.calls
        failed = first.failed
        rate = calls / live_seconds
        print(
            f"live:   {calls} calls in {live_seconds:.2f} s = {rate:.1f} calls/s, "
            f"{rate / limit_rate:.0%} of the limit (goal ≥ {GOAL:.0%}); "
            f"most in flight {llm.max_in_flight}; failed runs {failed}"
        )

        _timed_cache_layer()
        start = time.perf_counter()
        second = run_audit(load_plan(plan), root / "second", concurrency=args.workers)
        cached_seconds = time.perf_counter() - start
        extra_calls = llm.calls - calls
        hits = sum(r.integrity.counters.get("cacheHits", 0) for _, _, r in second.results)
        print(
            f"cached: {extra_calls} calls (goal 0), {hits} cache hits in {cached_seconds:.2f} s "
            f"({cached_seconds / max(hits, 1) * 1e6:.0f} µs a decision)"
        )
        if args.workers == 1:
            print(
                f"        in the cache layer (keys + reads): {_in_cache_layer[0]:.2f} s = "
                f"{_in_cache_layer[0] / cached_seconds:.0%} of the pass; the rest is the kernel"
            )

        cache = ResponseCache(root / "cache")
        keys = [p.stem for p in (root / "cache" / "v1").rglob("*.json")]
        start = time.perf_counter()
        read = sum(1 for key in keys if cache.get(key) is not None)
        read_seconds = time.perf_counter() - start
        offline = _plan(
            root / "offline-plan", llm.url, args.runs, args.agents, args.steps, "offline"
        )
        start = time.perf_counter()
        run_audit(load_plan(offline), root / "offline", concurrency=args.workers)
        kernel_seconds = time.perf_counter() - start
        print(
            f"        reading all {read} entries alone: {read_seconds:.2f} s; the same audit "
            f"offline (kernel work and offline decisions, no cache): {kernel_seconds:.2f} s"
        )
        ok = rate / limit_rate >= GOAL and extra_calls == 0 and failed == 0
        print("PASS" if ok else "FAIL")
        if not ok:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
