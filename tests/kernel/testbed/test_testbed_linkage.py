"""The event-linkage ledger (design "数据流三线、协调两账"): one business event — the user
withdrawing a refund request — recorded at its user, agent and environment points under one
linkage id, and an observation that checks all three exist and come in that order."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from simreport.core.files import load_document
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.replay_runner import replay_run
from simreport.kernel.testbed.records import (
    check_linkages,
    linkage_record_faults,
    read_records,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"


@pytest.fixture(scope="module")
def withdraw_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    loaded = load_scenario(EXAMPLE / "withdraw.yaml")
    out = tmp_path_factory.mktemp("withdraw") / "run"
    run_scenario(loaded.scenario, out, asset_root=loaded.asset_root)
    return out


def _observation(run: Path, key: str) -> Any:
    doc = json.loads((run / "observations.json").read_text())
    found = [o for o in doc["observations"] if o["factKey"] == key]
    assert found, f"no observation {key}"
    return found[0]


def test_the_withdraw_scenario_records_one_event_at_three_points_in_order(
    withdraw_run: Path,
) -> None:
    result = json.loads((withdraw_run / "result.json").read_text())
    # The linkage holds, and the user simulator's quality checks know a withdrawal: it comes
    # before the other reactions, and after it the user closes on the agent's confirmation.
    assert result["status"]["validity"] == "valid"
    quality = json.loads((withdraw_run / "user-quality.json").read_text())
    assert quality["checks"]["termination"]["status"] == "pass", quality["checks"]["termination"]
    assert quality["checks"]["reactionCompliance"]["status"] in ("pass", "not_applicable")
    records = read_records(withdraw_run / "records.jsonl")
    linked = [r for r in records if "linkage" in r]
    assert {r["linkage"]["id"] for r in linked} == {"lk-0001"}
    by_point = {r["linkage"]["point"]: r for r in linked}
    assert by_point["user"]["type"] == "user.message"
    assert by_point["user"]["payload"]["intent"] == "withdraw_request"
    assert by_point["agent"]["type"] == "agent.received"
    assert by_point["environment"]["type"] == "state.change"
    assert by_point["environment"]["payload"]["to"] == {"state": "withdrawn"}
    assert by_point["user"]["seq"] < by_point["agent"]["seq"] < by_point["environment"]["seq"]

    obs = _observation(withdraw_run, "linkage.events")
    [event] = obs["value"]
    assert event["event"] == "refund.withdraw"
    assert event["complete"] and event["ordered"] and event["ok"]
    assert event["problems"] == []
    assert sorted(obs["derivedFrom"]) == sorted(r["recordId"] for r in linked)
    # The withdrawal took effect: no refund stands at the end.
    assert _observation(withdraw_run, "refund.count")["value"] == 0


def test_the_withdraw_run_replays_record_for_record(withdraw_run: Path) -> None:
    assert replay_run(withdraw_run).ok


def test_a_scenario_without_withdrawal_records_no_linkage(tmp_path: Path) -> None:
    loaded = load_scenario(EXAMPLE / "scenario.yaml")
    run_scenario(loaded.scenario, tmp_path / "run", asset_root=loaded.asset_root)
    records = read_records(tmp_path / "run" / "records.jsonl")
    assert not any("linkage" in r for r in records)
    doc = json.loads((tmp_path / "run" / "observations.json").read_text())
    assert "linkage.events" not in {o["factKey"] for o in doc["observations"]}


def _record(seq: int, point: str | None, ms: int, *, lid: str = "lk-0001") -> dict[str, Any]:
    record: dict[str, Any] = {
        "seq": seq,
        "recordId": f"r{seq:06d}",
        "type": "x",
        "logicalMs": ms,
        "payload": {},
    }
    if point is not None:
        record["linkage"] = {"id": lid, "event": "refund.withdraw", "point": point}
    return record


def _record_ids(problem: str) -> list[str]:
    """The record ids a problem names, in order."""
    return re.findall(r"\br\d{6}\b", problem)


def test_a_missing_environment_point_fails_with_its_reason() -> None:
    records = [_record(1, "user", 0), _record(2, None, 0), _record(3, "agent", 100)]
    [result] = check_linkages(records)
    assert not result["ok"] and not result["complete"] and result["ordered"] is None
    assert result["points"] == {"user": "r000001", "agent": "r000003", "environment": None}
    [problem] = result["problems"]
    assert problem.startswith("lk-0001 ")
    # The agent never carried the withdrawal out: a finding about the agent, not broken records.
    assert linkage_record_faults([result]) == []


def test_a_missing_user_point_fails_and_says_the_records_are_broken() -> None:
    records = [_record(1, "agent", 0), _record(2, "environment", 10)]
    [result] = check_linkages(records)
    assert not result["ok"] and not result["complete"] and result["ordered"] is None
    assert result["points"] == {"user": None, "agent": "r000001", "environment": "r000002"}
    [problem] = result["problems"]
    assert problem.startswith("lk-0001 ")
    assert linkage_record_faults([result]) == [problem]


def test_points_out_of_order_fail_naming_both_records() -> None:
    records = [_record(1, "agent", 0), _record(2, "user", 0), _record(3, "environment", 5)]
    [result] = check_linkages(records)
    assert result["complete"] and result["ordered"] is False and not result["ok"]
    [problem] = result["problems"]
    assert problem.startswith("lk-0001 ") and _record_ids(problem) == ["r000001", "r000002"]
    assert linkage_record_faults([result]) == [problem]


def test_logical_time_going_back_is_out_of_order() -> None:
    records = [_record(1, "user", 500), _record(2, "agent", 400), _record(3, "environment", 600)]
    [result] = check_linkages(records)
    assert result["ordered"] is False
    assert result["logicalMs"] == {"user": 500, "agent": 400, "environment": 600}
    [problem] = result["problems"]
    assert _record_ids(problem) == ["r000002", "r000001"]  # the agent's, then the user's before


def test_a_point_recorded_twice_is_a_problem() -> None:
    records = [
        _record(1, "user", 0),
        _record(2, "agent", 0),
        _record(3, "environment", 5),
        _record(4, "environment", 6),
    ]
    [result] = check_linkages(records)
    assert not result["ok"] and result["points"]["environment"] == "r000003"
    [problem] = result["problems"]
    assert problem.startswith("lk-0001:") and _record_ids(problem) == ["r000003", "r000004"]


def test_linkages_are_checked_apart() -> None:
    records = [
        _record(1, "user", 0, lid="lk-0001"),
        _record(2, "agent", 0, lid="lk-0001"),
        _record(3, "environment", 1, lid="lk-0001"),
        _record(4, "user", 2, lid="lk-0002"),
    ]
    first, second = check_linkages(records)
    assert first["ok"] and not second["ok"]
    assert second["points"]["agent"] is None


def test_a_withdrawing_user_needs_wording_for_it(tmp_path: Path) -> None:
    doc = load_document(EXAMPLE / "withdraw.yaml").data
    doc["user"]["simulator"] = "user-sim@1.0.0"  # has no withdraw_request wording
    scenario = validate_scenario(doc)
    result = run_scenario(scenario, tmp_path / "run", asset_root=EXAMPLE)
    assert result.failure is not None
    assert (result.failure.stage, result.failure.type) == ("loading", "manifest_unresolved")
    assert "withdraw_request" in result.failure.message
