"""Who the events a service run streams and records name, as the ledger stores and serves them:
the simulated user's wording is the user's (`actor: user`), the agent under test's decisions an
agent's with its index (`actor: agent`, `actor_ref: "0"`). On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine

from simreport.core.files import load_document
from simreport.kernel.engine import run_scenario, validate_scenario
from simreport.service import queue as q
from tests.support.service_helpers import queue_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"
TENANT = "local"


def test_streamed_and_recorded_events_name_the_user(engine: Engine, tmp_path: Path) -> None:
    spec = load_document(EXAMPLE / "scenario.yaml").data
    assert isinstance(spec, dict)
    run_id = queue_run(engine, EXAMPLE / "assets", spec, namespace="ns")
    claimed = q.claim(engine, "w1", lease_seconds=30)
    assert claimed is not None
    streamed: list[dict[str, Any]] = []
    out = tmp_path / "run"
    run_scenario(
        validate_scenario(claimed.scenario),
        out,
        condition="service",
        replication=0,
        asset_root=EXAMPLE,
        checks=claimed.checks,
        on_event=streamed.append,
    )
    half = len(streamed) // 2
    q.append_events(engine, run_id, streamed[:half], worker_id="w1")  # streamed while it ran
    assert q.finish(engine, run_id, "w1", out) == "completed"  # the rest recorded with it
    page = q.events_after(engine, run_id, 0, tenant=TENANT, limit=5000, retention_seconds=None)
    named: dict[str, set[tuple[str, str | None]]] = {}
    for event in page["events"]:
        named.setdefault(event["type"], set()).add((event["actor"], event["actor_ref"]))
    assert named["user_wording"] == {("user", None)}
    assert named["agent_action"] == {("agent", "0")}
    assert any(e["type"] == "user_wording" for e in page["events"][:half])
    assert any(e["type"] == "user_wording" for e in page["events"][half:])
