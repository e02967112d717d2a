"""Who a decision event names: an agent's index, unless its world named the actor the agent
speaks for. The agent testbed's agent 1 words the simulated user, so its decisions (and their
lost answers) are the user's in events.jsonl; the agent under test's stay agent 0's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simreport.core.files import load_document
from simreport.kernel.context import RunContext
from simreport.kernel.engine import run_scenario, validate_scenario
from simreport.kernel.events import EventLog
from simreport.kernel.policies import POLICIES
from simreport.kernel.providers.base import ChatResponse, ProviderError
from simreport.kernel.world import DecisionRequest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "refund_desk"


def events(out: Path) -> list[dict[str, Any]]:
    lines = (out / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_the_testbed_user_s_wording_is_the_user_s(tmp_path: Path) -> None:
    scenario = validate_scenario(load_document(EXAMPLE / "scenario.yaml").data)
    result = run_scenario(scenario, tmp_path / "run", asset_root=EXAMPLE)
    assert result.status.execution == "completed"
    actors: dict[str, set[Any]] = {}
    for event in events(tmp_path / "run"):
        actors.setdefault(event["type"], set()).add(event["actor"])
    assert actors["user_wording"] == {"user"}
    assert actors["agent_action"] == {0}


class Failing:
    """A provider whose first answer is lost and whose second cannot be parsed."""

    def __init__(self) -> None:
        self.answers: list[ChatResponse | ProviderError] = [
            ProviderError("no answer"),
            ChatResponse(text="neither option", prompt_tokens=1, completion_tokens=1),
        ]

    def complete_many(self, requests: Any) -> list[ChatResponse | ProviderError]:
        return [self.answers.pop(0) for _ in requests]


def test_a_named_actor_s_lost_answers_are_its_own(tmp_path: Path) -> None:
    doc = load_document(EXAMPLE.parent / "prisoners_dilemma" / "scenario.yaml").data
    scenario = validate_scenario(doc)
    log = EventLog()
    policy_cls = POLICIES.get(scenario.policy.name, path="policy.name")
    policy = policy_cls(
        policy_cls.Options.model_validate(scenario.policy.options), scenario.population.n
    )
    provider: Any = Failing()
    ctx = RunContext(scenario, None, provider=provider, policy=policy, events=log)
    ctx.name_actor(1, "user")
    request = DecisionRequest(situation="s", instructions="i", options=("a", "b"), kind="pick")
    assert ctx.decide(1, request).failure == "llm"
    assert ctx.decide(0, request).failure == "parse"
    log.write(tmp_path / "events.jsonl")
    said = [(e["type"], e["actor"]) for e in events(tmp_path)]
    assert said == [
        ("llm_failure", "user"),
        ("pick", "user"),
        ("parse_failure", 0),
        ("pick", 0),
    ]
    assert ctx.actor_of(1) == "user" and ctx.actor_of(0) == 0
