"""Cost by segment (issue 14 item 10, design "成本按段归因"): a run's calls, tokens, operations and
logical time split between the system under test and the simulation, the bytes of its records,
summed per condition and per audit in audit.json, and shown in the report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simreport.analysis.audit import RunRecord, analyse
from simreport.core.errors import SchemaError
from simreport.core.schema import RunResult
from simreport.kernel import run_scenario, validate_scenario
from simreport.report import render_report
from simreport.report.figures import format_number
from tests.analysis.test_audit import PLAN, _conditions, _result
from tests.kernel.testbed.test_testbed_agents import AGENT_MODULE, add_agent, copy_example
from tests.kernel.testbed.test_testbed_world import records, run, scenario_doc
from tests.report.page_structure import part, tables
from tests.support.audits import with_provenance

SEGMENT_KEYS = ("llmCalls", "promptTokens", "completionTokens")


def _segments(result: RunResult) -> dict[str, dict[str, Any]]:
    return result.to_doc()["cost"]["segments"]


def _adds_up(cost: dict[str, Any]) -> None:
    for key in SEGMENT_KEYS:
        assert cost[key] == sum(seg[key] for seg in cost["segments"].values()), key


@pytest.fixture(scope="module")
def refund_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunResult, Path]:
    return run(tmp_path_factory.mktemp("cost"))


def test_a_refund_desk_run_splits_its_cost_between_the_sut_and_the_simulation(
    refund_run: tuple[RunResult, Path],
) -> None:
    result, out = refund_run
    cost = json.loads((out / "result.json").read_text())["cost"]
    _adds_up(cost)
    segments = cost["segments"]
    assert set(segments) == {"sut", "userWording", "environment", "evaluation"}
    assert segments["sut"]["side"] == "sut"
    assert all(segments[s]["side"] == "simulation" for s in segments if s != "sut")
    kinds = [r["type"] for r in records(out)]
    # The SUT's calls are the reference agent's decisions, the wording calls the user's.
    assert segments["sut"]["llmCalls"] == kinds.count("agent.decision") > 0
    assert segments["userWording"]["llmCalls"] == kinds.count("user.decision") > 0
    counters = result.integrity.counters
    assert segments["sut"]["operations"] == counters["agentCalls"]
    assert segments["environment"]["operations"] == counters["toolCalls"] > 0
    assert segments["userWording"]["operations"] == kinds.count("user.message")
    assert segments["environment"]["llmCalls"] == segments["evaluation"]["llmCalls"] == 0
    assert segments["evaluation"]["operations"] > 0  # the criteria evaluated
    # Logical time: the user's turns and the environment's latencies make up the whole clock.
    assert sum(s["logicalMs"] for s in segments.values()) == records(out)[-1]["logicalMs"]
    assert segments["userWording"]["logicalMs"] > 0 and segments["environment"]["logicalMs"] > 0
    assert cost["recordBytes"] > (out / "records.jsonl").stat().st_size // 2
    # Real durations are kept apart, with the other real-clock readings, for every segment.
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "run_finished"
    assert set(events[-1]["payload"]["wallClockMs"]) == set(segments)


def test_the_split_is_the_same_on_a_rerun(
    refund_run: tuple[RunResult, Path], tmp_path: Path
) -> None:
    first, out = refund_run
    again, again_out = run(tmp_path)
    assert again.cost == first.cost
    cost = json.loads((out / "result.json").read_text())["cost"]
    assert json.loads((again_out / "result.json").read_text())["cost"] == cost


def test_a_python_sut_s_own_calls_and_reported_tokens_are_the_sut_s(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    # The agent answers as a chat completion that reports its token usage.
    module = AGENT_MODULE + (
        "\ndef completion(body):\n"
        '    return {"choices": [{"message": respond(body)}],\n'
        '            "usage": {"prompt_tokens": 7, "completion_tokens": 3}}\n'
    )
    (root / "pyagent_cost.py").write_text(module, encoding="utf-8")
    add_agent(root, "py-agent", {"adapter": "python", "entry": "pyagent_cost:completion"})
    doc = scenario_doc(sut__agent="py-agent@1.0.0")
    result = run_scenario(validate_scenario(doc), tmp_path / "run", asset_root=root)
    assert result.failure is None, result.failure
    sut = _segments(result)["sut"]
    steps = result.integrity.counters["agentCalls"]
    assert sut["llmCalls"] == sut["operations"] == steps
    assert sut["promptTokens"] == 7 * steps == result.integrity.counters["agentPromptTokens"]
    assert sut["completionTokens"] == 3 * steps
    _adds_up(result.to_doc()["cost"])


def test_in_worlds_without_a_sut_every_call_is_the_simulation_s(tmp_path: Path) -> None:
    scenario = validate_scenario(
        {
            "world": "prisoners_dilemma",
            "steps": 4,
            "seed": 11,
            "seedPath": [11, 0],
            "population": {"n": 4, "fields": {"disposition": ["cooperative", "competitive"]}},
            "params": {"framing": "neutral", "memoryWindow": 2},
        }
    )
    result = run_scenario(scenario, tmp_path / "run")
    segments = _segments(result)
    assert set(segments) == {"agents"}
    assert segments["agents"]["side"] == "simulation"
    assert segments["agents"]["llmCalls"] == result.cost.llm_calls == 16
    assert segments["agents"]["operations"] == result.integrity.counters["decisions"]
    assert result.cost.record_bytes is not None and result.cost.record_bytes > 0


def test_a_result_written_before_the_split_still_reads() -> None:
    old = {
        "condition": "base",
        "replication": 0,
        "seedPath": [0],
        "status": {"execution": "completed", "validity": "unchecked", "evidence": "complete"},
        "integrity": {"complete": True, "counters": {}},
        "cost": {"llmCalls": 3, "promptTokens": 30, "completionTokens": 2},
    }
    result = RunResult.model_validate(old)
    assert result.cost.segments == {} and result.cost.record_bytes is None


def _cost(sut: int, user: int, *, record_bytes: int = 100) -> dict[str, Any]:
    def seg(side: str, calls: int, ms: int) -> dict[str, Any]:
        return {
            "side": side,
            "llmCalls": calls,
            "promptTokens": 10 * calls,
            "completionTokens": calls,
            "operations": calls + 1,
            "logicalMs": ms,
        }

    segments = {"sut": seg("sut", sut, 0), "userWording": seg("simulation", user, 500)}
    return {
        **{k: sum(s[k] for s in segments.values()) for k in SEGMENT_KEYS},
        "segments": segments,
        "recordBytes": record_bytes,
    }


def _audit() -> tuple[dict[str, Any], list[RunRecord]]:
    rng = np.random.default_rng(5)
    conditions = _conditions()
    runs = []
    for i, cond in enumerate(conditions):
        for r in range(3):
            cost = _cost(i + r, 2 * r + 1, record_bytes=1000 + i)
            runs.append(RunRecord(cond["id"], r, _result(cond["id"], r, rng, cost=cost)))
    # One run written before the split: its totals go to `unattributed`, never guessed.
    first = conditions[0]["id"]
    runs[0] = RunRecord(first, 0, _result(first, 0, rng))
    return analyse(PLAN, conditions, runs), runs


def test_audit_cost_sums_the_runs_per_condition_and_in_all() -> None:
    audit, runs = _audit()
    cost = audit["cost"]
    results = [r.result for r in runs if r.result is not None]
    assert cost["llmCalls"] == sum(r.cost.llm_calls for r in results)
    assert cost["recordBytes"] == sum(r.cost.record_bytes or 0 for r in results)
    _adds_up(cost)
    assert cost["unattributedRuns"] == 1
    assert cost["segments"]["unattributed"]["llmCalls"] == results[0].cost.llm_calls
    assert cost["sides"]["sut"]["llmCalls"] == sum(
        r.cost.segments["sut"].llm_calls for r in results if r.cost.segments
    )
    assert cost["sides"]["simulation"]["logicalMs"] == 500 * (len(results) - 1)
    assert [row["condition"] for row in cost["conditions"]] == [
        c["id"] for c in audit["conditions"]
    ]
    for row in cost["conditions"]:
        mine = [r.result for r in runs if r.condition == row["condition"] and r.result]
        assert row["runs"] == len(mine)
        assert row["llmCalls"] == sum(r.cost.llm_calls for r in mine)
        assert row["promptTokens"] == sum(r.cost.prompt_tokens for r in mine)
        _adds_up(row)
        for name, seg in row["segments"].items():
            assert seg["operations"] == sum(
                r.cost.segments[name].operations for r in mine if name in r.cost.segments
            )
    for key in (*SEGMENT_KEYS, "recordBytes"):
        assert cost[key] == sum(row[key] for row in cost["conditions"])


def test_the_report_shows_the_split_per_segment_and_condition() -> None:
    audit, _ = _audit()
    page = render_report(with_provenance(audit))
    cost = audit["cost"]
    section = part(page, "cost")
    assert re.search(r'<p class="note">[^<]+</p>', section)  # how to read the split
    by_segment, by_condition = tables(section)[:2]
    # A row per segment, the system under test first, each under its own name, with its counts.
    rows = by_segment.rows[1:]
    assert len(rows) == len(cost["segments"]) == 3
    assert not {row[0] for row in rows} & set(cost["segments"])
    numbers = ("llmCalls", "promptTokens", "completionTokens", "operations", "logicalMs")
    shown = [tuple(row[2:]) for row in rows]
    assert shown[0] == tuple(format_number(cost["segments"]["sut"][k]) for k in numbers)
    assert sorted(shown) == sorted(
        tuple(format_number(seg[k]) for k in numbers) for seg in cost["segments"].values()
    )
    # A row per condition: its runs and record bytes.
    rows = by_condition.rows[1:]
    assert [(row[1], row[-1]) for row in rows] == [
        (format_number(c["runs"]), format_number(c["recordBytes"])) for c in cost["conditions"]
    ]
    # Schema 3 always has the split: an audit without it breaks the contract and is refused.
    old = {**audit, "cost": {k: audit["cost"][k] for k in SEGMENT_KEYS}}
    with pytest.raises(SchemaError) as refused:
        render_report(with_provenance(old))
    assert str(refused.value.path).startswith("cost.")
