"""A run's events after a cursor: a cursor at the last event reads an empty page whose
`next_seq` stays there; one past the last event was never handed out by the service (events are
appended, never removed), so it is refused — 422 `cursor_past_end`, located at
`query.after_seq`, with the run's last seq as `next_seq` to go on from. On SQLite and
PostgreSQL, through the queue and over HTTP."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from simreport.service import queue as q
from tests.service.in_process import in_process_api, refund_spec
from tests.support.service_helpers import queue_run

TENANT = "local"


def event(seq: int) -> dict[str, Any]:
    return {
        "seq": seq,
        "type": "note",
        "actor": "harness",
        "t": 0,
        "wall": time.time(),
        "payload": {},
    }


def running_run(engine: Engine, library: Path, events: int) -> str:
    """A claimed run with `events` events recorded."""
    run_id = queue_run(engine, library, refund_spec(), namespace="ns")
    assert q.claim(engine, "w1", lease_seconds=30) is not None
    if events:
        q.append_events(engine, run_id, [event(s) for s in range(1, events + 1)], worker_id="w1")
    return run_id


@pytest.fixture
def library() -> Path:
    return Path(__file__).resolve().parents[2] / "examples" / "refund_desk" / "assets"


def page(engine: Engine, run_id: str, after_seq: int) -> dict[str, Any]:
    return q.events_after(engine, run_id, after_seq, tenant=TENANT, retention_seconds=None)


def test_a_cursor_at_the_last_event_reads_an_empty_page(engine: Engine, library: Path) -> None:
    run_id = running_run(engine, library, events=3)
    assert page(engine, run_id, 3) == {"events": [], "next_seq": 3}
    assert [e["seq"] for e in page(engine, run_id, 2)["events"]] == [3]


@pytest.mark.parametrize(("events", "after_seq"), [(3, 4), (3, 10**12), (0, 1)])
def test_a_cursor_past_the_last_event_is_refused_with_the_true_cursor(
    engine: Engine, library: Path, events: int, after_seq: int
) -> None:
    run_id = running_run(engine, library, events=events)
    with pytest.raises(q.Unprocessable) as refused:
        page(engine, run_id, after_seq)
    error = refused.value
    assert (error.status, error.code, error.fields) == (
        422,
        "cursor_past_end",
        {"next_seq": events},
    )
    assert [i["path"] for i in error.issues] == ["query.after_seq"]
    # The cursor it names reads on from the true end.
    assert page(engine, run_id, error.fields["next_seq"]) == {"events": [], "next_seq": events}


def test_a_run_without_events_reads_an_empty_page_from_the_start(
    engine: Engine, library: Path
) -> None:
    run_id = running_run(engine, library, events=0)
    assert page(engine, run_id, 0) == {"events": [], "next_seq": 0}


def test_over_http_a_cursor_past_the_end_is_a_located_422(ledger_url: str, tmp_path: Path) -> None:
    with in_process_api(ledger_url, tmp_path) as api:
        scenario_id = api.scenario("refund", refund_spec())
        run_id = api.run(scenario_id)["run_id"]  # pending: no events yet
        at_end = api.get(f"/runs/{run_id}/events", after_seq=0)
        assert (at_end.status_code, at_end.json()) == (200, {"events": [], "next_seq": 0})
        past = api.get(f"/runs/{run_id}/events", after_seq=5)
        assert past.status_code == 422, past.text
        error = past.json()["error"]
        assert (error["code"], error["next_seq"]) == ("cursor_past_end", 0)
        assert [i["path"] for i in error["issues"]] == ["query.after_seq"]
        unknown = api.get("/runs/run-000000000000000000000000/events", after_seq=5)
        assert unknown.status_code == 404  # an unknown run is not found, whatever the cursor
