"""A scenario's `user.tasks`: tasks in order, sessions in order, each a conversation; the records
hold each task's outcome and the SUT's own task and session ids when it returned them (never made
up), and the ledger's run_task and run_session rows hold the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from simreport.core.errors import InputError
from simreport.core.overrides import set_path
from simreport.kernel import load_scenario, run_scenario, validate_scenario
from simreport.kernel.testbed.agents import (
    AgentStep,
    HttpAgent,
    PythonAgent,
    Session,
    parse_assistant,
)
from simreport.kernel.testbed.records import read_records
from simreport.ledger import connect, ingest_run
from simreport.ledger import tables as t
from simreport.ledger.run_content import task_outcome

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"

AGENT_MODULE = """
import itertools, json, re

_tasks, _sessions = itertools.count(1), itertools.count(1)

def _answer(messages):
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    found = re.findall(r"B\\d{4}-\\d{4}-\\d{4}", said)
    if not found:
        return {"role": "assistant", "content": "Could you please tell me your order number?"}
    done = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not done:
        args = json.dumps({"order_no": found[-1]})
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_refund", "arguments": args}}]}
    if not any(r.get("state") == "accepted" for d in done for r in d.get("refunds") or []):
        if len(done) == 1:
            args = json.dumps({"order_no": found[-1], "amount_minor": 19900})
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c2", "type": "function",
                 "function": {"name": "create_refund", "arguments": args}}]}
        if len(done) == 2:
            args = json.dumps({"order_no": found[-1]})
            return {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c3", "type": "function",
                 "function": {"name": "get_refund", "arguments": args}}]}
    return {"role": "assistant", "content": "Your refund of 199.00 has been accepted."}

def with_ids(body):
    known = body.get("metadata") or {}
    message = _answer(body["messages"])
    message["metadata"] = {
        "task_id": known.get("task_id") or f"T-{next(_tasks)}",
        "session_id": known.get("session_id") or f"S-{next(_sessions)}",
    }
    return message

def without_ids(body):
    return _answer(body["messages"])

def stalls(body):
    return {"role": "assistant", "content": "Let me look into it.", "metadata": {"task_id": 7}}
"""

TASKS = [
    {"key": "refund", "goal": "Get the refund for the headphones I sent back"},
    {
        "key": "follow-up",
        "goal": "Make sure the refund really went through",
        "sessions": [{"key": "first"}, {"key": "back-again", "maxTurns": 6}],
    },
]


def tasks_run(tmp_path: Path, entry: str, tasks: Any = TASKS, *, fails: bool = False) -> Path:
    """A refund-desk run of a Python agent (`entry` of a module in the run's asset folder)."""
    root = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, root)
    module = f"tasks_agent_{tmp_path.name.replace('-', '_')}"
    (root / f"{module}.py").write_text(AGENT_MODULE, encoding="utf-8")
    folder = root / "assets" / "py-agent"
    folder.mkdir(parents=True)
    content = {"adapter": "python", "entry": f"{module}:{entry}"}
    doc = {"kind": "agent", "name": "py-agent", "version": "1.0.0", "content": content}
    (folder / "1.0.0.json").write_text(json.dumps(doc), encoding="utf-8")
    scenario = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    scenario = set_path(scenario, "sut.agent", "py-agent@1.0.0")
    if tasks is not None:
        scenario["user"]["tasks"] = tasks
    run = tmp_path / "run"
    result = run_scenario(validate_scenario(scenario), run, asset_root=root)
    assert (result.failure is not None) is fails, result.failure
    return run


def of_type(run: Path, *types: str) -> list[dict[str, Any]]:
    return [
        {"type": r["type"], **r["payload"]}
        for r in read_records(run / "records.jsonl")
        if r["type"] in types
    ]


def observations(run: Path) -> dict[str, Any]:
    """The run's observed values, by key (absent when missing)."""
    doc = json.loads((run / "observations.json").read_text(encoding="utf-8"))
    return {o["factKey"]: o["value"] for o in doc["observations"]}


def rows(engine: Engine, table: sa.Table) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        found = conn.execute(sa.select(table).order_by(*table.primary_key.columns)).mappings()
        return [dict(row) for row in found]


@pytest.fixture(scope="module")
def with_ids(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tasks_run(tmp_path_factory.mktemp("with_ids"), "with_ids")


@pytest.fixture(scope="module")
def without_ids(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tasks_run(tmp_path_factory.mktemp("without_ids"), "without_ids")


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tasks_run(tmp_path_factory.mktemp("default"), "with_ids", tasks=None)


# --------------------------------------------------------------------------- the run


def test_tasks_and_their_sessions_run_in_order_with_the_sut_ids(with_ids: Path) -> None:
    marks = of_type(with_ids, "task.started", "task.ended", "session.opened", "session.closed")
    assert [(m["type"], m["taskKey"], m.get("sessionKey")) for m in marks] == [
        ("task.started", "refund", None),
        ("session.opened", "refund", "conversation"),
        ("session.closed", "refund", "conversation"),
        ("task.ended", "refund", None),
        ("task.started", "follow-up", None),
        ("session.opened", "follow-up", "first"),
        ("session.closed", "follow-up", "first"),
        ("session.opened", "follow-up", "back-again"),
        ("session.closed", "follow-up", "back-again"),
        ("task.ended", "follow-up", None),
    ]
    closed = [m for m in marks if m["type"] == "session.closed"]
    # A new session is a new conversation (the SUT gives a new session id); the task's id is
    # sent back, so the SUT keeps it.
    assert [(m["sutTaskId"], m["sutSessionId"]) for m in closed] == [
        ("T-1", "S-1"),
        ("T-2", "S-2"),
        ("T-2", "S-3"),
    ]
    ended = [m for m in marks if m["type"] == "task.ended"]
    assert [(m["outcome"], m["sutTaskId"]) for m in ended] == [
        ("resolved", "T-1"),
        ("resolved", "T-2"),
    ]
    # Each session starts the agent's history afresh: its first request holds one user message.
    steps = of_type(with_ids, "agent.step", "session.opened")
    firsts = [steps[i + 1] for i, s in enumerate(steps) if s["type"] == "session.opened"]
    assert [s["step"]["sutSessionId"] for s in firsts] == ["S-1", "S-2", "S-3"]
    # Observed task by task, not by the last conversation alone.
    facts = observations(with_ids)
    assert facts["tasks.outcomes"] == {"refund": "resolved", "follow-up": "resolved"}
    assert facts["tasks.resolved"] == 2 and facts["user.goal_reached"] is True
    assert sorted(facts["sessions.closed_by"]) == [
        "follow-up/back-again",
        "follow-up/first",
        "refund/conversation",
    ]


def test_an_agent_returning_no_ids_leaves_them_unknown(without_ids: Path) -> None:
    marks = of_type(without_ids, "task.ended", "session.closed", "agent.step")
    assert all(m.get("sutTaskId") is None for m in marks)
    assert all(m.get("sutSessionId") is None for m in marks)
    assert not any("sutTaskId" in m["step"] for m in marks if m["type"] == "agent.step")


def test_a_scenario_without_tasks_records_no_task_marks(default_run: Path) -> None:
    assert of_type(default_run, "task.started", "session.opened") == []
    assert len(of_type(default_run, "conversation.closed")) == 1


# --------------------------------------------------------------------------- the ledger


def test_the_ledger_holds_each_task_and_session(engine: Engine, with_ids: Path) -> None:
    run_id = ingest_run(engine, with_ids).run_id
    assert [
        (r["task_key"], r["sut_task_id"], r["goal"], r["outcome"]) for r in rows(engine, t.run_task)
    ] == [
        ("follow-up", "T-2", {"goal": "Make sure the refund really went through"}, "root_complete"),
        (
            "refund",
            "T-1",
            {"goal": "Get the refund for the headphones I sent back"},
            "root_complete",
        ),
    ]
    assert [
        (r["run_id"], r["task_key"], r["session_key"], r["sut_session_id"], r["transport"])
        for r in rows(engine, t.run_session)
    ] == [
        (run_id, "follow-up", "back-again", "S-3", "chat-completions"),
        (run_id, "follow-up", "first", "S-2", "chat-completions"),
        (run_id, "refund", "conversation", "S-1", "chat-completions"),
    ]


def test_the_ledger_never_invents_ids(engine: Engine, without_ids: Path) -> None:
    ingest_run(engine, without_ids)
    assert {r["sut_task_id"] for r in rows(engine, t.run_task)} == {None}
    assert {r["sut_session_id"] for r in rows(engine, t.run_session)} == {None}
    assert {r["outcome"] for r in rows(engine, t.run_task)} == {"root_complete"}


def test_a_default_run_keeps_its_one_task_and_session(engine: Engine, default_run: Path) -> None:
    run_id = ingest_run(engine, default_run).run_id
    goal = "Get the refund for the headphones I sent back"
    # As before tasks existed, but for the SUT's own ids, which the agent here returns.
    assert rows(engine, t.run_task) == [
        {
            "run_id": run_id,
            "task_key": "goal",
            "sut_task_id": "T-1",
            "goal": {"goal": goal},
            "outcome": None,
        }
    ]
    assert rows(engine, t.run_session) == [
        {
            "run_id": run_id,
            "task_key": "goal",
            "session_key": "conversation",
            "sut_session_id": "S-1",
            "transport": "chat-completions",
        }
    ]


@pytest.mark.parametrize(
    ("ended", "outcome"),
    [
        ({"outcome": "resolved"}, "root_complete"),
        ({"outcome": "abandoned"}, "failed"),
        ({"outcome": "failed"}, "failed"),
        ({"outcome": "budget_exhausted", "agentAnswered": True}, "accepted"),
        ({"outcome": "budget_exhausted", "agentAnswered": False}, "submitted"),
        ({"outcome": "user_silent"}, None),
        ({}, None),
    ],
)
def test_task_outcomes_map_to_the_ledger_honestly(ended: dict[str, Any], outcome: Any) -> None:
    assert task_outcome(ended) == outcome
    assert outcome is None or outcome in t.TASK_OUTCOMES


def test_a_task_cut_by_the_budget_ends_the_run_and_later_tasks_never_start(
    tmp_path: Path,
) -> None:
    tasks = [
        {"key": "refund", "goal": "Get my refund", "sessions": [{"key": "s1", "maxTurns": 2}]},
        {"key": "later", "goal": "Ask again"},
    ]
    run = tasks_run(tmp_path, "stalls", tasks, fails=True)
    marks = of_type(run, "task.started", "task.ended", "session.closed")
    assert [(m["type"], m["taskKey"]) for m in marks] == [
        ("task.started", "refund"),
        ("session.closed", "refund"),
        ("task.ended", "refund"),
    ]
    assert marks[1]["closedBy"] == "budget_exhausted" and marks[1]["sutSessionId"] is None
    assert marks[2]["outcome"] == "budget_exhausted" and marks[2]["sutTaskId"] == "7"
    facts = observations(run)
    assert facts["tasks.outcomes"] == {"refund": "budget_exhausted"}
    assert facts["tasks.resolved"] == 0 and facts["user.goal_reached"] is False
    ingest_run(engine := connect(f"sqlite:///{tmp_path / 'ledger.sqlite'}"), run)
    try:
        found = {r["task_key"]: (r["outcome"], r["sut_task_id"]) for r in rows(engine, t.run_task)}
    finally:
        engine.dispose()
    # The SUT answered, so it had taken the task on; the later task never started.
    assert found == {"refund": ("accepted", "7"), "later": (None, None)}


# --------------------------------------------------------------------------- the contract


def test_the_ids_come_from_the_answer_s_metadata() -> None:
    def serial() -> str:
        return "c"

    step = parse_assistant(
        {
            "choices": [{"message": {"role": "assistant", "content": "Hi"}}],
            "metadata": {"task_id": 42, "session_id": "s-9"},
        },
        serial,
    )
    assert (step.sut_task_id, step.sut_session_id) == ("42", "s-9")
    odd = parse_assistant(
        {"role": "assistant", "content": "Hi", "metadata": {"task_id": True, "session_id": ""}},
        serial,
    )
    assert (odd.sut_task_id, odd.sut_session_id) == (None, None)
    assert "sutTaskId" not in odd.to_doc()
    assert AgentStep.from_doc(step.to_doc()).sut_task_id == "42"  # a replay records them again


def test_known_ids_are_sent_back_in_the_request() -> None:
    seen: list[dict[str, Any]] = []

    def agent(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        return {"role": "assistant", "content": "ok", "metadata": {"session_id": "s-1"}}

    python = PythonAgent(agent, None, [])
    session = Session(None, sut_task_id="t-1")
    session.user("hello")
    step = python.step(session)
    assert seen[0]["metadata"] == {"task_id": "t-1"}
    session.sut_session_id = step.sut_session_id
    python.step(session)
    assert seen[1]["metadata"] == {"task_id": "t-1", "session_id": "s-1"}
    assert "metadata" not in python.request_body(Session(None))  # none known: none sent


def test_an_http_agent_s_ids_may_come_as_headers() -> None:
    import httpx

    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        body = {"choices": [{"message": {"role": "assistant", "content": "Hello"}}]}
        return httpx.Response(200, json=body, headers={"X-Task-Id": "t-7", "X-Session-Id": "s-3"})

    http = HttpAgent("http://agent.test/v1", None, [], timeout=5)
    http._client = httpx.Client(transport=httpx.MockTransport(answer))
    session = Session(None, sut_task_id="t-7")
    session.user("hello")
    step = http.step(session)
    http.close()
    assert (step.sut_task_id, step.sut_session_id) == ("t-7", "s-3")
    assert sent[0].headers["x-task-id"] == "t-7" and "x-session-id" not in sent[0].headers


def test_task_and_session_keys_are_unique() -> None:
    doc = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    assert "tasks" not in doc["user"]  # unset, the scenario's document is as before
    for tasks in (
        [{"key": "a", "goal": "x"}, {"key": "a", "goal": "y"}],
        [{"key": "a", "goal": "x", "sessions": [{"key": "s"}, {"key": "s"}]}],
        [{"key": "a", "goal": "x", "sessions": []}],
        [],
    ):
        doc["user"]["tasks"] = tasks
        with pytest.raises(InputError):
            validate_scenario(doc)
    doc["user"]["tasks"] = [{"key": "a", "goal": "x"}]
    scenario = validate_scenario(doc)
    assert scenario.user is not None and scenario.user.tasks is not None
    assert [s.key for s in scenario.user.tasks[0].sessions] == ["conversation"]
