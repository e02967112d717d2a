"""The simulated user of a domain, driven by its `user_flow` asset: it reads signals in the
agent's messages, lets the first matching rule choose its intent, has the provider word it from
the simulator's templates, and checks every wording for facts outside its knowledge and facts it
may not say yet before it is sent."""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...world import DecisionRequest
from ..assets import SimulatorConfigAsset
from ..records import RecordLog
from ..wording import Decide, UserMessage, WordingUser
from .model import FlowRule, UserFlowAsset


def slots(template: str) -> set[str]:
    """The `{slot}` names of a wording template."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


@dataclass
class FlowUser(WordingUser):
    """One simulated user of a domain run."""

    flow: UserFlowAsset
    wording: SimulatorConfigAsset
    facts: Mapping[str, Any]
    """The user's private facts (the scenario's `user.facts`)."""
    goal: str
    log: RecordLog
    decide: Decide
    seed: int = 0
    mode: str = "regression"
    rng: np.random.Generator | None = None
    turn: int = 0
    disclosed: set[str] = field(default_factory=set)
    fired: dict[int, int] = field(default_factory=dict)
    history: list[dict[str, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.allowed = {n for n, f in self.flow.facts.items() if f.disclose == "upfront"}
        self._signals = {name: re.compile(p) for name, p in self.flow.signals.items()}

    def signals_in(self, text: str) -> list[str]:
        """The signals the user reads in one agent message, in name order."""
        return sorted(name for name, pattern in self._signals.items() if pattern.search(text))

    def opening(self) -> UserMessage:
        self.turn = 1
        return self._say(self.flow.opening, ends=False, goal=False)

    def reply(self, agent_texts: Sequence[str]) -> UserMessage:
        """The next message after the agent's messages of this turn."""
        self.turn += 1
        for text in agent_texts:
            self.history.append({"speaker": "agent", "text": text})
        seen = {s for text in agent_texts for s in self.signals_in(text)}
        rule = self._rule(seen)
        if rule is not None:
            self.allowed.update(f for f in rule.discloses if self.flow.facts[f].disclose != "never")
            return self._say(rule.say, ends=rule.ends, goal=rule.goal_reached and rule.ends)
        if self.turn > self.flow.give_up.after_turns:
            return self._say(self.flow.give_up.say, ends=True, goal=False)
        return self._say(self.flow.otherwise, ends=False, goal=False)

    def _rule(self, seen: set[str]) -> FlowRule | None:
        for i, rule in enumerate(self.flow.rules):
            if rule.times and self.fired.get(i, 0) >= rule.times:
                continue
            if set(rule.when) <= seen:
                self.fired[i] = self.fired.get(i, 0) + 1
                return rule
        return None

    # -- wording

    def _fill(self, template: str) -> str | None:
        values = {**{k: str(v) for k, v in self.facts.items()}, "goal": self.goal}
        if not slots(template) <= set(values):
            return None  # the user does not know what the template needs
        return template.format_map(values)

    def check(self, intent: str, text: str) -> list[str]:
        """Why a wording may not be sent: a fact outside the user's knowledge, or one they may
        not say yet."""
        problems: list[str] = []
        for name, fact in sorted(self.flow.facts.items()):
            value = self.facts.get(name)
            if fact.pattern is not None:
                for found in re.findall(fact.pattern, text):
                    if value is None or str(found) != str(value):
                        problems.append(f"fact: {name} {found} is outside the user's knowledge")
            if value is not None and str(value) in text and name not in self.allowed:
                problems.append(f"disclosure: {name} may not be given now")
        return problems

    def _say(self, intent: str, *, ends: bool, goal: bool) -> UserMessage:
        chosen, blocked = self._word(intent)
        if chosen is None:
            return self._silent(intent)
        self.disclosed.update(name for name, value in self.facts.items() if str(value) in chosen)
        return self._send(
            intent, chosen, blocked, ends=ends, goal=goal, extra={"goalReached": goal}
        )

    def _request(self, intent: str, options: Sequence[str]) -> DecisionRequest:
        last = self._last_agent_text()
        situation = (
            (f'The agent wrote: "{last}"\n\n' if last else "You open the conversation.\n\n")
            + f"Your intent now: {intent.replace('_', ' ')}. "
            + "Choose the wording that sounds most like you."
        )
        return self._wording_request(
            intent,
            options,
            situation=situation,
            instructions=self.flow.instructions,
            goals=self.goal,
        )
