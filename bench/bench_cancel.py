"""How soon a cancelled run stops: from `request_cancel` of a running run to its stop, on SQLite
and on PostgreSQL, against the worker's heartbeat period.

A worker (`run_worker`, in a thread of this script; its runs in its run process) executes
refund_desk runs of an agent that takes `--turn` seconds a step, with heartbeats every
`--heartbeat` seconds (default 30, so that a cancellation heard only at a heartbeat would show).
Each round queues a run, waits until it has taken two steps, asks for its cancellation, and
measures:

- stopped: until the run's last event (`run_finished`, emitted by the run process as it stops;
  its own wall clock);
- recorded: until the ledger says `cancelled` (polled every 5 ms), what `GET /runs/{id}` reads.

Prints each round (one that ended otherwise before the stop reached it is not counted), the
median and the largest of each, and the median's ratio to the heartbeat period. The stop waits
for the run's next check of its stop request (the agent's step under way, and for a Python
agent the rest of its turn): `--turn` bounds it from below. PostgreSQL is measured on a fresh
database of the server SIMREPORT_TEST_POSTGRES_URL names, when set. Wall time on a shared
machine is noisy: compare numbers from one run.

    python bench/bench_cancel.py [--rounds 5] [--heartbeat 30] [--turn 0.4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simreport.core.files import load_document
from simreport.ledger import connect
from simreport.service import queue as q
from simreport.service.worker import run_worker
from tests.support.ledgers import fresh_ledger
from tests.support.service_helpers import add_agent, write_agents

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "refund_desk"
TENANT = "local"
VERSION = "1.3.0"
WAIT = 120.0


def _wait(what: str, check: Any, every: float = 0.005) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"waited {WAIT:g} s for {what}")
        time.sleep(every)


def _events(engine: Any, run_id: str) -> list[dict[str, Any]]:
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    events: list[dict[str, Any]] = page["events"]
    return events


def measure(kind: str, work: Path, rounds: int, heartbeat: float, turn: float) -> list[float]:
    """Rounds of cancel → stopped and cancel → recorded on a fresh ledger of `kind`; prints
    them and returns the stop latencies."""
    root = work / kind / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    write_agents(root, "bench_agents", delay=turn)
    add_agent(root / "assets", "paced-bench-agent", "bench_agents:respond")
    library = root / "assets"
    spec = load_document(EXAMPLE / "scenario.yaml").data
    assert isinstance(spec, dict)
    spec["sut"]["agent"] = "paced-bench-agent@1.0.0"
    stopped: list[float] = []
    recorded: list[float] = []
    with fresh_ledger(kind, work / kind / "ledger.sqlite") as url:
        engine = connect(url)
        scenario_id = q.create_scenario(
            engine, tenant=TENANT, namespace="bench", name="cancel", owner="qa", risk_level="low"
        )
        q.submit_version(
            engine,
            tenant=TENANT,
            scenario_id=scenario_id,
            version=VERSION,
            spec=spec,
            source=None,
            created_by="bench",
        )
        stop = threading.Event()
        worker = threading.Thread(
            target=run_worker,
            args=(url,),
            kwargs={
                "worker_id": f"bench-{kind}",
                "library": library,
                "stop_event": stop,
                "lease_seconds": heartbeat * 4,
                "heartbeat_seconds": heartbeat,
                "drain_seconds": 1.0,
            },
            daemon=True,
        )
        worker.start()
        try:
            for i in range(rounds):
                run_id, _ = q.start_run(
                    engine,
                    tenant=TENANT,
                    principal="bench",
                    scenario_id=scenario_id,
                    version=VERSION,
                    mode="surrogate",
                    seed=i + 1,
                    budget=None,
                    purpose="exploration",
                    library=library,
                )

                def steps(run: str = run_id) -> int:
                    return sum(e["type"] == "agent.step" for e in _events(engine, run))

                _wait("the run under way", lambda: steps() >= 2, every=0.05)
                asked = time.time()
                try:
                    q.request_cancel(engine, run_id, "bench", tenant=TENANT)
                except q.Conflict:
                    print(f"  {kind:<10} round {i + 1}: ended before the cancel, not counted")
                    continue

                def ended(run: str = run_id) -> bool:
                    status = q.get_run(engine, run, tenant=TENANT)["execution_status"]
                    return status not in ("running", "cancelling")

                _wait("the run's end", ended)
                took = time.time() - asked
                final = q.get_run(engine, run_id, tenant=TENANT)["execution_status"]
                if final != "cancelled":
                    print(f"  {kind:<10} round {i + 1}: {final} before the stop, not counted")
                    continue
                recorded.append(took)
                last = _events(engine, run_id)[-1]
                assert last["type"] == "run_finished", last
                stopped.append(_parse(last["wall_time"]).timestamp() - asked)
                print(
                    f"  {kind:<10} round {i + 1}: {final:<9} stopped {stopped[-1]:6.3f} s, "
                    f"recorded {recorded[-1]:6.3f} s"
                )
        finally:
            stop.set()
            worker.join(timeout=WAIT)
            engine.dispose()
    for what, values in (("stopped", stopped), ("recorded", recorded)):
        if not values:
            continue
        median = statistics.median(values)
        print(
            f"  {kind:<10} {what:<8} median {median:6.3f} s, largest {max(values):6.3f} s; "
            f"median / heartbeat period ({heartbeat:g} s) = {median / heartbeat:.4f}"
        )
    return stopped


def _parse(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat", type=float, default=30.0)
    parser.add_argument("--turn", type=float, default=0.4)
    args = parser.parse_args()
    kinds = ["sqlite"]
    if os.environ.get("SIMREPORT_TEST_POSTGRES_URL"):
        kinds.append("postgresql")
    else:
        print("PostgreSQL skipped: SIMREPORT_TEST_POSTGRES_URL is not set")
    print(
        f"cancel → stop of a running run; heartbeat every {args.heartbeat:g} s, "
        f"an agent step every {args.turn:g} s"
    )
    with tempfile.TemporaryDirectory() as folder:
        for kind in kinds:
            measure(kind, Path(folder), args.rounds, args.heartbeat, args.turn)


if __name__ == "__main__":
    main()
