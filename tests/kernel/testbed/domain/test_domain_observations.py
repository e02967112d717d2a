"""A domain run's observations come from its records alone, and a missing one stays missing:
the metrics that read it are NaN, never zero."""

from __future__ import annotations

import math
from typing import Any

import pytest

from simreport.kernel.testbed.domain.expressions import ExpressionError
from simreport.kernel.testbed.domain.observations import domain_metrics, observe, tool_calls
from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.testbed.records import Observations, RecordLog
from tests.kernel.testbed.domain.domains import NOW, log, shop, shop_doc, shop_state

USER = {"itemId": "a"}


def run_records(*, snapshots: int = 1, closed: bool = True, buys: int = 2) -> RecordLog:
    """The records of a small run: `buys` calls of buy, snapshots of the state, a close."""
    records = log()
    state = shop_state()
    for n in range(1, buys + 1):
        call_id = f"c{n}"
        records.add(
            "tool.request",
            "agent",
            "tool_call",
            {"callId": call_id, "tool": "buy", "arguments": {"id": "a"}, "callIndex": n},
        )
        body, _ = state.call(state.domain.tools[1], {"id": "a"}, NOW)
        records.add(
            "tool.response",
            "environment",
            "tool_call",
            {"callId": call_id, "tool": "buy", "outcome": "ok", "body": body},
        )
    if closed:
        records.add(
            "conversation.closed",
            "harness",
            "control",
            {"closedBy": "resolved_by_user", "goalReached": True, "turns": 3},
        )
    for _ in range(snapshots):
        records.add("environment.snapshot", "environment", "state_change", state.snapshot())
    return records


def test_observations_are_read_from_the_records() -> None:
    records = run_records()
    obs = observe(records.records, shop(), USER)
    assert {k: obs.get(k) for k in ("order.count", "item.stock", "agent.buy_calls")} == {
        "order.count": 2,
        "item.stock": 0,
        "agent.buy_calls": 2,
    }
    assert obs.get("closed.turns") == 3
    snapshot_id = records.records[-1]["recordId"]
    assert obs.facts["order.count"].derived_from == [snapshot_id]
    assert obs.missing == {}
    assert obs.get("user.goal_reached") is True  # the facts every testbed run reports


def test_the_last_snapshot_is_the_final_state() -> None:
    records = run_records(snapshots=1)
    state = DomainState(shop())
    records.add("environment.snapshot", "environment", "state_change", state.snapshot())
    obs = observe(records.records, shop(), USER)
    assert obs.get("order.count") == 0


def test_without_a_final_snapshot_the_state_observations_are_missing() -> None:
    obs = observe(run_records(snapshots=0).records, shop(), USER)
    assert {"order.count", "item.stock"} <= set(obs.missing)
    assert "order.count" not in obs.facts
    assert obs.get("agent.buy_calls") == 2  # calls are still in the records


def test_a_conversation_that_never_closed_leaves_its_observations_missing() -> None:
    obs = observe(run_records(closed=False).records, shop(), USER)
    assert "closed.turns" in obs.missing and "closed.turns" not in obs.facts


def test_a_user_fact_the_run_did_not_have_makes_the_observation_missing() -> None:
    obs = observe(run_records().records, shop(), {})
    assert "item.stock" in obs.missing
    assert obs.get("order.count") == 2


def test_a_user_fact_read_only_inside_a_filter_over_nothing_is_still_missing() -> None:
    doc = shop_doc()
    doc["observations"].append(
        {"key": "order.mine", "value": "size(items.order.filter(o, o.item == user.itemId))"}
    )
    records = run_records(buys=0).records  # no order: the filter never reads user.itemId
    assert "order.mine" in observe(records, shop(doc), {}).missing
    assert observe(records, shop(doc), {"itemId": "a"}).get("order.mine") == 0


def test_tool_calls_pair_requests_with_their_answers() -> None:
    records = run_records(buys=1)
    records.add(
        "tool.request",
        "agent",
        "tool_call",
        {"callId": "c9", "tool": "get_item", "arguments": {"id": "a"}, "callIndex": 1},
    )
    calls = tool_calls(records.records)
    assert [(c["callId"], c["outcome"]) for c in calls] == [("c1", "ok"), ("c9", "unanswered")]
    assert calls[0]["body"]["order"]["id"] == "O1" and calls[1]["body"] == {}


def test_a_metric_reading_a_missing_observation_is_nan_not_zero() -> None:
    obs = observe(run_records(snapshots=0).records, shop(), USER)
    metrics = domain_metrics(shop(), obs)
    assert math.isnan(metrics["orders"]) and math.isnan(metrics["stockLeft"])


def test_metrics_are_numbers_when_their_observations_are_present() -> None:
    obs = observe(run_records().records, shop(), USER)
    assert domain_metrics(shop(), obs) == {"orders": 2.0, "stockLeft": 0.0}


def test_a_boolean_metric_is_a_number() -> None:
    doc = shop_doc()
    doc["metrics"] = {"ordered": {"value": 'obs["order.count"] > 0'}}
    obs = Observations()
    obs.add("order.count", 1, [])
    assert domain_metrics(shop(doc), obs) == {"ordered": 1.0}


def test_a_metric_that_is_not_a_number_is_refused_with_its_path() -> None:
    doc: dict[str, Any] = shop_doc()
    doc["metrics"] = {"label": {"value": '"many"'}}
    with pytest.raises(ExpressionError) as caught:
        domain_metrics(shop(doc), Observations())
    assert caught.value.path == "metrics.label.value"


def test_a_run_of_several_tasks_is_observed_task_by_task() -> None:
    doc = shop_doc()
    doc["observations"] += [
        {
            "key": "open.tasks",
            "value": 'size(tasks.filter(k, tasks[k].outcome != "resolved"))',
        },
        {"key": "closed.all", "value": "size(conversations)"},
    ]
    records = run_records()
    for key, outcome in (("buy", "resolved"), ("return", "abandoned")):
        records.add("task.started", "harness", "control", {"taskKey": key, "goal": key})
        records.add(
            "session.closed",
            "harness",
            "control",
            {"taskKey": key, "sessionKey": "conversation", "closedBy": "user_gave_up"},
        )
        records.add("task.ended", "harness", "control", {"taskKey": key, "outcome": outcome})
    obs = observe(records.records, shop(doc), USER)
    assert obs.get("tasks.outcomes") == {"buy": "resolved", "return": "abandoned"}
    assert obs.get("tasks.resolved") == 1
    # The user's goal is every task's, not the last conversation's (which says reached).
    assert obs.get("user.goal_reached") is False
    assert obs.get("open.tasks") == 1 and obs.get("closed.all") == 1
    ended = [r["recordId"] for r in records.records if r["type"] == "task.ended"]
    assert obs.facts["open.tasks"].derived_from == ended
