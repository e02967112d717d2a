"""The user simulator: the state machine picks the intent, the provider picks the wording, and the
fact and disclosure checks run on every message before it is sent."""

from __future__ import annotations

from typing import Any

from simreport.core.testbed_schema import ClockConfig, UserConfig
from simreport.kernel.testbed.assets import SimulatorConfigAsset, UserPolicyAsset
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.records import RecordLog
from simreport.kernel.world import Decision, DecisionRequest
from simreport.kernel.worlds.refund_desk.user import UserSimulator, read_agent_message
from tests.support.refund_desk import asset_content

ORDER = "B2026-0901-7734"
PATTERN = r"B\d{4}-\d{4}-\d{4}"
ASK = "Could you please tell me your order number?"
DONE = f"Your refund of 199.00 for order {ORDER} has been accepted."


class First:
    """Picks the first offered wording and keeps the requests."""

    def __init__(self) -> None:
        self.requests: list[DecisionRequest] = []

    def __call__(self, request: DecisionRequest) -> Decision:
        self.requests.append(request)
        return Decision(request.options[0], "test")


def user(
    *,
    disclosure: str = "on-request",
    rules: list[dict[str, Any]] | None = None,
    facts: dict[str, Any] | None = None,
    intents: dict[str, list[str]] | None = None,
    patience: str = "low",
) -> tuple[UserSimulator, RecordLog, Clocks, First]:
    clocks = Clocks(ClockConfig())
    log = RecordLog(clocks, "u" * 32)
    config = UserConfig.model_validate(
        {
            "policy": "user-policy@stable",
            "simulator": "user-sim@stable",
            "persona": {"patience": patience},
            "goal": "Get my refund",
            "privateFacts": facts or {"orderNumber": ORDER, "paidAmountMinor": 19900},
            "disclosure": {"orderNumber": disclosure},
            "behavior": {"reactionRules": rules or []},
        }
    )
    wording = asset_content("user-sim/1.0.0.yaml")
    if intents:
        wording["intents"].update(intents)
    decide = First()
    simulator = UserSimulator(
        config=config,
        policy=UserPolicyAsset.model_validate(asset_content("user-policy/1.2.0.yaml")),
        wording=SimulatorConfigAsset.model_validate(wording),
        log=log,
        clocks=clocks,
        decide=decide,
    )
    return simulator, log, clocks, decide


def test_reading_agent_messages() -> None:
    assert "agent.asks_order_number" in read_agent_message(ASK, PATTERN).signals
    done = read_agent_message(DONE, PATTERN)
    assert "agent.confirms_refund" in done.signals
    assert done.amounts_minor == (19900,) and done.order_numbers == (ORDER,)
    assert (
        "agent.confirms_refund"
        not in read_agent_message("Your refund has not been accepted yet.", PATTERN).signals
    )
    assert "agent.asks_to_wait" in read_agent_message("Please wait a moment.", PATTERN).signals


def test_on_request_without_a_rule_gives_the_number_when_asked() -> None:
    simulator, log, _, _ = user()
    opening = simulator.opening()
    assert opening.intent == "open" and ORDER not in (opening.text or "")
    answer = simulator.reply([ASK])
    assert answer.intent == "provide_order_number" and ORDER in (answer.text or "")
    sent = [r for r in log.records if r["type"] == "user.message"]
    assert sent[-1]["payload"]["disclosed"] == ["orderNumber", "paidAmount"]


def test_a_reaction_rule_fires_on_its_nth_occurrence() -> None:
    rule = {"when": "agent.asks_order_number", "times": 3, "effect": "disclose_order_number"}
    simulator, log, _, _ = user(rules=[rule])
    simulator.opening()
    intents = [simulator.reply([ASK]).intent for _ in range(3)]
    assert intents == ["withhold_order_number", "withhold_order_number", "provide_order_number"]
    fired = [r for r in log.records if r["type"] == "user.reaction"]
    assert [r["payload"]["turn"] for r in fired] == [4]


def test_never_means_never_even_when_a_rule_says_disclose() -> None:
    rule = {"when": "agent.asks_order_number", "effect": "disclose_order_number"}
    simulator, log, _, _ = user(disclosure="never", rules=[rule])
    simulator.opening()
    for _ in range(3):
        message = simulator.reply([ASK])
        assert message.intent == "withhold_order_number"
        assert ORDER not in (message.text or "")
    assert any(r["type"] == "user.reaction.suppressed" for r in log.records)
    assert simulator.violations == []


def test_upfront_opens_with_the_order_number() -> None:
    simulator, _, _, _ = user(disclosure="upfront")
    assert ORDER in (simulator.opening().text or "")


def test_wording_that_fails_a_check_is_blocked_and_replaced() -> None:
    leaky = {"ask_status": ["Is order {orderNumber} refunded yet?", "Any news on my refund?"]}
    simulator, log, _, decide = user(intents=leaky)
    simulator.opening()
    message = simulator.reply(["I am looking into it."])
    assert message.intent == "ask_status" and message.text == "Any news on my refund?"
    blocked = [r for r in log.records if r["type"] == "user.check"]
    assert len(blocked) == 1 and "disclosure" in blocked[0]["payload"]["problems"][0]
    assert simulator.counters == {"userDisclosureViolationsBlocked": 1}
    assert simulator.violations == []
    assert decide.requests[-1].kind == "user_wording"


def test_a_fact_outside_the_users_knowledge_is_blocked() -> None:
    simulator, _, _, _ = user()
    assert simulator.check("ask_status", "Is B2026-0815-1180 refunded?") == [
        "fact: order number B2026-0815-1180 is outside the user's knowledge"
    ]
    assert simulator.check("ask_status", "I paid 45.00") == [
        "fact: amount 45.00 is outside the user's knowledge"
    ]
    assert simulator.check("ask_status", "I paid 199.00") == []


def test_no_compliant_wording_violates_the_run() -> None:
    only_leaky = {"ask_status": ["Is order {orderNumber} done?"]}
    simulator, log, _, _ = user(intents=only_leaky)
    simulator.opening()
    message = simulator.reply(["Working on it."])
    assert message.text is None and message.ends
    assert simulator.violations and any(r["type"] == "user.silent" for r in log.records)


def test_a_rule_the_user_cannot_carry_out_is_a_violation() -> None:
    rule = {"when": "agent.asks_order_number", "effect": "disclose_order_number"}
    simulator, _, _, _ = user(rules=[rule], facts={"paidAmountMinor": 19900})
    simulator.opening()
    assert simulator.reply([ASK]).intent == "withhold_order_number"
    assert simulator.counters["userReactionViolations"] == 1
    assert simulator.violations


def test_confirmation_closes_and_a_wrong_amount_is_pointed_out() -> None:
    simulator, _, _, _ = user()
    simulator.opening()
    wrong = simulator.reply(["Your refund of 99.00 has been accepted."])
    assert wrong.intent == "point_out_wrong_amount" and "199.00" in (wrong.text or "")
    right = simulator.reply([DONE])
    assert (right.intent, right.ends, right.goal_reached) == ("confirm_and_close", True, True)


def test_waiting_drives_complaints_and_giving_up() -> None:
    rule = {"when": "wait_ms > 120000", "effect": "threaten_complaint"}
    simulator, _, clocks, _ = user(rules=[rule])
    simulator.opening()
    clocks.advance(130_000)
    assert simulator.reply(["Please wait a moment."]).intent == "threaten_complaint"
    assert simulator.reply(["Please wait a moment."]).intent == "acknowledge_wait"
    clocks.advance(60_000)  # past the low-patience give-up threshold (180 s)
    message = simulator.reply(["Please wait a moment."])
    assert (message.intent, message.ends) == ("give_up", True)
    patient, _, patient_clock, _ = user(patience="high")
    patient.opening()
    patient_clock.advance(190_000)
    assert patient.reply(["Please wait a moment."]).intent == "acknowledge_wait"
