"""The user simulator: a state machine chooses the intent, the provider chooses the wording, and a
fact check and a disclosure check run before any message is sent. Exploration users walk seeded,
recorded branches; regression users say the same given the same agent. A user who cannot keep
to its specification makes the run `violated`. The design: docs/testbed.md.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ....core.testbed_schema import (
    ReactionRule,
    UserConfig,
    UserMode,
    condition_holds_for,
    parse_condition,
)
from ...testbed.assets import SimulatorConfigAsset, UserPolicyAsset
from ...testbed.clock import Clocks
from ...testbed.records import RecordLog
from ...testbed.wording import Decide, UserMessage, WordingUser
from ...world import DecisionRequest

INTENTS: dict[str, str] = {
    "open": "explain your problem and what you want",
    "open_with_order_number": "explain your problem, giving your order number",
    "provide_order_number": "give the order number the agent asked for",
    "withhold_order_number": "say you cannot give the order number right now",
    "ask_status": "ask what is happening with your refund",
    "acknowledge_wait": "agree to wait a little",
    "confirm_and_close": "thank the agent and end the conversation",
    "point_out_wrong_amount": "point out that the refund amount is wrong",
    "threaten_complaint": "say you will file a complaint if this is not fixed now",
    "give_up": "give up and end the conversation",
}
# Intents a simulator config words only when a reaction rule can lead to them.
OPTIONAL_INTENTS: dict[str, str] = {
    "withdraw_request": "say you changed your mind and want the refund request withdrawn",
}
WITHDRAW_EVENT = "refund.withdraw"
"""The business event a withdrawal opens in the event-linkage ledger (its user point)."""
ENDING = frozenset({"confirm_and_close", "give_up"})
EFFECT_INTENT = {
    "disclose_order_number": "provide_order_number",
    "threaten_complaint": "threaten_complaint",
    "give_up": "give_up",
    "ask_status": "ask_status",
    "withdraw_request": "withdraw_request",
}
EFFECT_PRIORITY = (
    "give_up",
    "withdraw_request",
    "threaten_complaint",
    "disclose_order_number",
    "ask_status",
)

_AMOUNT = re.compile(r"(?<![\d.])(\d{1,9})\.(\d{2})(?![\d])")
_ORDER_WORDS = re.compile(r"\border\s*(number|no\.?|id|#)", re.IGNORECASE)
# Within one sentence; a decimal point ("199.00") does not end it.
_CONFIRM = re.compile(
    r"\brefund\b(?:[^.?!]|\.(?=\d))*"
    r"\b(accepted|approved|created|submitted|processed|issued|completed|done)\b",
    re.IGNORECASE,
)
_NEGATION = re.compile(r"\b(not|n't|unable|failed|cannot|could not)\b", re.IGNORECASE)
_WITHDRAWN = re.compile(r"\b(withdrawn|cancell?ed|called off)\b", re.IGNORECASE)
_WAIT = re.compile(r"\b(wait|moment|checking|processing|being processed|hold on)\b", re.IGNORECASE)


def format_amount(minor: int) -> str:
    return f"{minor // 100}.{minor % 100:02d}"


def amounts_in(text: str) -> list[int]:
    """Money amounts written with two decimals (199.00), in minor units."""
    return [int(a) * 100 + int(b) for a, b in _AMOUNT.findall(text)]


@dataclass(frozen=True)
class AgentReading:
    """What a reader takes from an agent message: signals, amounts, order numbers."""

    signals: tuple[str, ...]
    amounts_minor: tuple[int, ...]
    order_numbers: tuple[str, ...]


def read_agent_message(text: str, order_pattern: str) -> AgentReading:
    """Deterministic reading of an agent's message (the same for every agent adapter)."""
    signals = ["agent.reply"]
    sentences = re.split(r"(?<=[.?!])\s+(?=\D)", text)
    if any("?" in s and _ORDER_WORDS.search(s) for s in sentences):
        signals.append("agent.asks_order_number")
    if any(_CONFIRM.search(s) and not _NEGATION.search(s) for s in sentences):
        signals.append("agent.confirms_refund")
    if any(_WITHDRAWN.search(s) and not _NEGATION.search(s) for s in sentences):
        signals.append("agent.confirms_withdrawal")
    if _WAIT.search(text):
        signals.append("agent.asks_to_wait")
    return AgentReading(
        tuple(signals), tuple(amounts_in(text)), tuple(re.findall(order_pattern, text))
    )


@dataclass
class _Rule:
    rule: ReactionRule
    source: str  # "policy" | "scenario"
    index: int
    seen: int = 0
    fired: bool = False


@dataclass
class UserSimulator(WordingUser):
    config: UserConfig
    policy: UserPolicyAsset
    wording: SimulatorConfigAsset
    log: RecordLog
    clocks: Clocks
    decide: Decide
    counters: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    turn: int = 0
    opened_ms: int = 0
    disclosed: set[str] = field(default_factory=set)
    asks: int = 0
    learned_amounts: set[int] = field(default_factory=set)
    pending: list[str] = field(default_factory=list)
    history: list[dict[str, str]] = field(default_factory=list)
    complained: bool = False
    withdrew: bool = False
    """The user asked to withdraw the refund request: the goal is now that no refund stands."""
    mode: UserMode = "regression"
    rng: np.random.Generator | None = None
    """Exploration's draws (from the run's seed tree); a regression user draws nothing."""
    seed: int = 0
    """The scenario's seed: a regression user's wording seeds derive from it alone."""

    def __post_init__(self) -> None:
        if self.mode == "exploration" and self.rng is None:
            raise ValueError("an exploration user needs its seeded generator (rng)")
        self.rules = [_Rule(r, "policy", i) for i, r in enumerate(self.policy.reaction_rules)] + [
            _Rule(r, "scenario", i) for i, r in enumerate(self.config.behavior.reaction_rules)
        ]
        self.give_up_ms = self.policy.patience[self.config.persona.patience].give_up_ms
        self.has_disclose_rule = any(r.rule.effect == "disclose_order_number" for r in self.rules)

    @staticmethod
    def needed_intents(effects: Sequence[str] = ()) -> tuple[str, ...]:
        """The intents the simulator config must word, given the reaction rules' `effects`."""
        return tuple(INTENTS) + tuple(i for i in OPTIONAL_INTENTS if i in effects)

    # ----------------------------------------------------------------- turns

    def opening(self) -> UserMessage:
        self.turn = 1
        self.opened_ms = self.clocks.logical_ms
        facts = self.config.private_facts
        upfront = self.config.disclosure.order_number == "upfront" and facts.order_number
        if upfront:
            return self._say(self._branch("opening", ("open_with_order_number", "open")))
        return self._say("open")

    def reply(self, agent_texts: Sequence[str]) -> UserMessage:
        """The next message after the agent's messages of this turn."""
        self.turn += 1
        readings = [read_agent_message(t, self.wording.order_number_pattern) for t in agent_texts]
        signals = {s for r in readings for s in r.signals}
        for r in readings:
            self.learned_amounts.update(r.amounts_minor)
        for text in agent_texts:
            self.history.append({"speaker": "agent", "text": text})
        asked = "agent.asks_order_number" in signals
        if asked:
            self.asks += 1
        self._react(signals)
        return self._say(self._intent(signals, readings, asked))

    def _variables(self) -> dict[str, int]:
        return {
            "wait_ms": self.clocks.logical_ms - self.opened_ms,
            "turns": self.turn - 1,
            "agent_asks": self.asks,
        }

    def _react(self, signals: set[str]) -> None:
        values = self._variables()
        for entry in self.rules:
            subject, op, number = parse_condition(entry.rule.when)
            if op is None:
                holds = subject in signals
            else:
                assert number is not None
                holds = condition_holds_for(values[subject], op, number)
            if not holds or entry.fired:
                continue
            entry.seen += 1
            if entry.seen < entry.rule.times:
                continue
            entry.fired = True
            self.pending.append(entry.rule.effect)
            self.log.add(
                "user.reaction",
                "user",
                "control",
                {
                    "rule": f"{entry.source}.{entry.index}",
                    "when": entry.rule.when,
                    "times": entry.rule.times,
                    "effect": entry.rule.effect,
                    "turn": self.turn,
                },
            )

    def _take(self, effect: str) -> bool:
        if effect in self.pending:
            self.pending.remove(effect)
            return True
        return False

    def _intent(self, signals: set[str], readings: Sequence[AgentReading], asked: bool) -> str:
        belief = self.config.private_facts.paid_amount_minor
        if self.withdrew:
            # The goal has changed: the user waits for the withdrawal, not for a refund.
            if "agent.confirms_withdrawal" in signals:
                return "confirm_and_close"
            if self._take("give_up") or self._variables()["wait_ms"] > self.give_up_ms:
                return "give_up"
            return "withdraw_request"
        if self._take("withdraw_request"):
            return "withdraw_request"
        if "agent.confirms_refund" in signals:
            claimed = {
                a for r in readings if "agent.confirms_refund" in r.signals for a in r.amounts_minor
            }
            if belief is not None and claimed and belief not in claimed:
                return "point_out_wrong_amount"
            return "confirm_and_close"
        waited = self._variables()["wait_ms"]
        if self._take("give_up") or waited > self.give_up_ms:
            return "give_up"
        if self._take("threaten_complaint"):
            return "threaten_complaint"
        rule = self.config.disclosure.order_number
        if self._take("disclose_order_number"):
            if rule == "never":
                self._note_suppressed("disclose_order_number", "disclosure rule is never")
                return "withhold_order_number"
            if self.config.private_facts.order_number is None:
                self._count("userReactionViolations")
                self.violations.append(
                    "reaction rule disclose_order_number fired but the user knows no order number"
                )
                return "withhold_order_number"
            return "provide_order_number"
        if asked:
            if rule == "never" or self.config.private_facts.order_number is None:
                return "withhold_order_number"
            if rule == "upfront" or "orderNumber" in self.disclosed or not self.has_disclose_rule:
                return "provide_order_number"
            return "withhold_order_number"
        if self._take("ask_status"):
            return "ask_status"
        if "agent.asks_to_wait" in signals:
            return self._branch("asked_to_wait", ("acknowledge_wait", "ask_status"))
        return self._branch("no_signal", ("ask_status", "acknowledge_wait"))

    def _branch(self, point: str, options: tuple[str, ...]) -> str:
        """The intent at a branch the persona leaves open: the first (canonical) one in
        regression, a seeded draw in exploration (recorded)."""
        if self.mode != "exploration":
            return options[0]
        assert self.rng is not None
        chosen = options[int(self.rng.integers(len(options)))]
        self.log.add(
            "user.branch",
            "user",
            "control",
            {"turn": self.turn, "point": point, "options": list(options), "chosen": chosen},
        )
        return chosen

    def _note_suppressed(self, effect: str, why: str) -> None:
        self.log.add(
            "user.reaction.suppressed",
            "user",
            "control",
            {"effect": effect, "reason": why, "turn": self.turn},
        )

    # ----------------------------------------------------------------- wording and checks

    def _fill(self, template: str) -> str | None:
        facts = self.config.private_facts
        slots: dict[str, Any] = {"goal": self.config.goal}
        if facts.order_number is not None:
            slots["orderNumber"] = facts.order_number
        if facts.paid_amount_minor is not None:
            slots["amount"] = format_amount(facts.paid_amount_minor)
        try:
            return template.format(**slots)
        except (KeyError, IndexError, ValueError):
            return None

    def check(self, intent: str, text: str) -> list[str]:
        """Violations of the fact and disclosure checks for one wording (empty: it may be sent)."""
        facts = self.config.private_facts
        problems: list[str] = []
        for number in re.findall(self.wording.order_number_pattern, text):
            if number != facts.order_number:
                problems.append(f"fact: order number {number} is outside the user's knowledge")
            elif not self._may_disclose("orderNumber", self.config.disclosure.order_number, intent):
                problems.append("disclosure: the order number may not be given now")
        known = set(self.learned_amounts)
        if facts.paid_amount_minor is not None:
            known.add(facts.paid_amount_minor)
        for amount in amounts_in(text):
            if amount not in known:
                problems.append(
                    f"fact: amount {format_amount(amount)} is outside the user's knowledge"
                )
            elif (
                amount == facts.paid_amount_minor
                and amount not in self.learned_amounts
                and not self._may_disclose("paidAmount", self.config.disclosure.paid_amount, intent)
            ):
                problems.append("disclosure: the paid amount may not be given now")
        return problems

    def _may_disclose(self, fact: str, rule: str, intent: str) -> bool:
        if rule == "upfront":
            return True
        if rule == "never":
            return False
        return fact in self.disclosed or (
            fact == "orderNumber" and intent == "provide_order_number"
        )

    def _count_blocked(self, problems: Sequence[str]) -> None:
        for problem in problems:
            kind = problem.split(":", 1)[0]
            self._count(
                "userFactViolationsBlocked" if kind == "fact" else "userDisclosureViolationsBlocked"
            )

    def _say(self, intent: str) -> UserMessage:
        ends = intent in ENDING
        chosen, blocked = self._word(intent)
        if chosen is None:
            return self._silent(intent)
        if (
            self.config.private_facts.order_number
            and self.config.private_facts.order_number in chosen
        ):
            self.disclosed.add("orderNumber")
        paid = self.config.private_facts.paid_amount_minor
        if paid is not None and paid in amounts_in(chosen):
            self.disclosed.add("paidAmount")
        if intent == "threaten_complaint":
            self.complained = True
        linkage = None
        if intent == "withdraw_request" and not self.withdrew:
            # One business event, the first time it is asked for: its user point (t1).
            self.withdrew = True
            linkage = self.log.open_linkage(WITHDRAW_EVENT)
        goal = intent == "confirm_and_close"
        return self._send(intent, chosen, blocked, ends=ends, goal=goal, linkage=linkage)

    def _request(self, intent: str, options: Sequence[str]) -> DecisionRequest:
        last = self._last_agent_text()
        situation = (
            (f'The support agent wrote: "{last}"\n\n' if last else "You open a support chat.\n\n")
            + f"Now {INTENTS.get(intent) or OPTIONAL_INTENTS[intent]}. "
            + "Choose the wording that sounds most like you."
        )
        return self._wording_request(
            intent,
            options,
            situation=situation,
            instructions=(
                "You are a customer writing to an online shop's refund desk. Stay in character "
                "and pick one of the given messages, word for word."
            ),
            goals=self.config.goal,
        )
