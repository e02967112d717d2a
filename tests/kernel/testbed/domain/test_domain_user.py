"""The user of a domain follows its flow: the first matching rule decides, `times` limits a rule,
facts are checked before each message (one the user does not know, or may not say yet, is
blocked), and the user gives up after the flow's number of turns."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from simreport.kernel.testbed.assets import SimulatorConfigAsset
from simreport.kernel.testbed.domain.model import UserFlowAsset
from simreport.kernel.testbed.domain.user import FlowUser, slots
from simreport.kernel.world import Decision, DecisionRequest
from tests.kernel.testbed.domain.domains import log

FLOW: dict[str, Any] = {
    "instructions": "You are a shopper.",
    "facts": {
        "itemId": {"pattern": r"\bI\d{3}\b", "disclose": "on-request"},
        "city": {"disclose": "upfront"},
        "pin": {"pattern": r"\bPIN\d{4}\b", "disclose": "never"},
    },
    "signals": {
        "asks_item": "(?i)which item",
        "confirms": "(?i)ordered",
        "asks_wait": "(?i)please wait",
    },
    "rules": [
        {"when": ["confirms"], "say": "thank", "ends": True, "goalReached": True},
        {"when": ["asks_item"], "say": "give_item", "discloses": ["itemId"]},
        {"when": ["asks_wait"], "say": "ok_wait", "times": 1},
    ],
    "giveUp": {"afterTurns": 3, "say": "give_up"},
}
WORDING: dict[str, list[str]] = {
    "open": ["Hello from {city}, I want to buy {itemId}.", "Hello from {city}, I want to buy."],
    "give_item": ["It is {itemId}.", "The item is {itemId}."],
    "thank": ["Thanks!"],
    "ok_wait": ["Sure, I will wait."],
    "ask_status": ["Any news?", "Is it done?"],
    "give_up": ["Forget it."],
}


class First:
    """Picks the first offered wording and keeps the requests."""

    def __init__(self, option: int = 0) -> None:
        self.requests: list[DecisionRequest] = []
        self.option = option

    def __call__(self, request: DecisionRequest) -> Decision:
        self.requests.append(request)
        return Decision(request.options[self.option], "test")


def flow_user(
    *,
    facts: dict[str, Any] | None = None,
    wording: dict[str, list[str]] | None = None,
    flow: dict[str, Any] | None = None,
    **options: Any,
) -> tuple[FlowUser, First]:
    decide = First()
    user = FlowUser(
        flow=UserFlowAsset.model_validate(flow or FLOW),
        wording=SimulatorConfigAsset.model_validate({"intents": wording or WORDING}),
        facts=facts if facts is not None else {"itemId": "I123", "city": "Porto"},
        goal="Buy the item",
        log=log(),
        decide=decide,
        seed=7,
        **options,
    )
    return user, decide


def records(user: FlowUser, kind: str) -> list[dict[str, Any]]:
    return [dict(r["payload"]) for r in user.log.records if r["type"] == kind]


def test_slots_are_the_templates_names() -> None:
    assert slots("It is {itemId} in {city}.") == {"itemId", "city"}


def test_the_first_rule_that_matches_decides() -> None:
    user, _ = flow_user()
    user.opening()
    message = user.reply(["Which item? It is ordered already."])
    assert (message.intent, message.ends, message.goal_reached) == ("thank", True, True)
    assert records(user, "user.message")[-1]["goalReached"] is True


def test_no_matching_rule_says_otherwise() -> None:
    user, _ = flow_user()
    user.opening()
    assert user.reply(["Hello."]).intent == "ask_status"


def test_a_rule_fires_at_most_times_times() -> None:
    user, _ = flow_user()
    user.opening()
    assert user.reply(["Please wait."]).intent == "ok_wait"
    assert user.reply(["Please wait."]).intent == "ask_status"
    assert user.fired == {2: 1}


def test_a_fact_that_may_not_be_said_yet_is_blocked_and_another_wording_is_sent() -> None:
    user, decide = flow_user()
    opening = user.opening()
    assert opening.text == "Hello from Porto, I want to buy."
    (check,) = records(user, "user.check")
    assert check["problems"] == ["disclosure: itemId may not be given now"]
    assert user.counters == {"userChecksBlocked": 1}
    assert records(user, "user.message")[0]["checks"]["blocked"] == 1
    assert records(user, "user.message")[0]["disclosed"] == ["city"]
    assert decide.requests[0].kind == "user_wording"


def test_a_rule_that_discloses_lets_the_fact_be_said() -> None:
    user, _ = flow_user()
    user.opening()
    message = user.reply(["Which item would you like?"])
    assert (message.intent, message.text) == ("give_item", "It is I123.")
    assert records(user, "user.message")[-1]["disclosed"] == ["city", "itemId"]
    assert len(records(user, "user.check")) == 1  # the opening's only


def test_a_fact_the_user_does_not_know_is_blocked() -> None:
    wording = dict(WORDING, ask_status=["Is I999 done?", "Any news?"])
    user, _ = flow_user(wording=wording)
    user.opening()
    assert user.reply(["Hello."]).text == "Any news?"
    problems = records(user, "user.check")[-1]["problems"]
    assert problems == ["fact: itemId I999 is outside the user's knowledge"]


def test_a_fact_that_is_never_disclosed_is_always_blocked() -> None:
    wording = dict(WORDING, ask_status=["My PIN is {pin}.", "Any news?"])
    user, _ = flow_user(wording=wording, facts={"itemId": "I123", "city": "X", "pin": "PIN0001"})
    assert user.check("ask_status", "My PIN is PIN0001.") == [
        "disclosure: pin may not be given now"
    ]
    user.opening()
    assert user.reply(["Hello."]).text == "Any news?"


def test_a_template_needing_an_unknown_fact_is_not_offered() -> None:
    user, _ = flow_user(facts={"city": "Porto"})
    assert user.opening().text == "Hello from Porto, I want to buy."
    assert records(user, "user.check") == []


def test_no_compliant_wording_silences_the_user_and_is_a_violation() -> None:
    wording = dict(WORDING, open=["I want {itemId}."])
    user, _ = flow_user(wording=wording)
    message = user.opening()
    assert (message.text, message.ends) == (None, True)
    assert user.counters == {"userChecksBlocked": 1, "userNoCompliantWording": 1}
    assert records(user, "user.silent")[0]["reason"] == "no compliant wording"
    assert user.violations == ["no wording of intent 'open' passed the checks"]


def test_the_user_gives_up_after_the_flows_turns() -> None:
    user, _ = flow_user()
    user.opening()
    intents = [user.reply(["Hello."]).intent for _ in range(3)]
    assert intents == ["ask_status", "ask_status", "give_up"]
    last = records(user, "user.message")[-1]
    assert (last["ends"], last["goalReached"]) == (True, False)


def test_a_rule_that_matches_still_wins_over_giving_up() -> None:
    user, _ = flow_user()
    user.opening()
    for _ in range(3):
        user.reply(["Hello."])
    assert user.reply(["You are ordered."]).intent == "thank"


def test_signals_are_read_in_name_order() -> None:
    user, _ = flow_user()
    assert user.signals_in("Please wait, which item was ordered?") == [
        "asks_item",
        "asks_wait",
        "confirms",
    ]


def test_a_regression_user_pins_the_wording_seed_and_an_explorer_does_not() -> None:
    regression, decide = flow_user(mode="regression")
    regression.opening()
    regression.reply(["Hello."])
    again, decide_again = flow_user(mode="regression")
    again.opening()
    again.reply(["Hello."])
    assert decide.requests[-1].seed is not None
    assert decide.requests[-1].seed == decide_again.requests[-1].seed
    explorer, explorer_decide = flow_user(mode="exploration", rng=np.random.default_rng(1))
    explorer.opening()
    explorer.reply(["Hello."])
    assert explorer_decide.requests[-1].seed is None


def test_an_explorer_offers_the_wordings_in_a_seeded_order() -> None:
    wording = copy.deepcopy(WORDING)
    wording["ask_status"] = [f"News {i}?" for i in range(6)]
    offered = []
    for seed in (1, 1, 2):
        user, decide = flow_user(
            wording=wording, mode="exploration", rng=np.random.default_rng(seed)
        )
        user.opening()
        user.reply(["Hello."])
        offered.append(decide.requests[-1].options)
    assert offered[0] == offered[1] != offered[2]
    assert sorted(offered[0]) == sorted(wording["ask_status"])
