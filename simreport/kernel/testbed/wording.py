"""How a simulated user words an intent, for every user simulator: the templates it can fill,
their order (drawn in exploration), the provider's pick, and the user's own checks before a
wording is sent; a blocked wording is recorded and the next is tried, and when none passes the
user falls silent (a violation). Each user says what it knows, checks and counts."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.canonical import sha256_text
from ..world import Decision, DecisionRequest
from .assets import SimulatorConfigAsset
from .records import RecordLog

Decide = Callable[[DecisionRequest], Decision]


@dataclass
class UserMessage:
    turn: int
    intent: str
    text: str | None
    """None when no wording passed the checks (the user falls silent and the run is violated)."""
    ends: bool
    goal_reached: bool = False


class WordingUser(ABC):
    """The wording half of a user simulator. Subclasses (dataclasses) hold these attributes and
    say how a template is filled, what blocks a wording and how the provider is asked."""

    wording: SimulatorConfigAsset
    log: RecordLog
    decide: Decide
    mode: str
    rng: np.random.Generator | None
    seed: int
    turn: int
    history: list[dict[str, str]]
    disclosed: set[str]
    counters: dict[str, int]
    violations: list[str]

    @abstractmethod
    def opening(self) -> UserMessage:
        """The user's first message."""

    @abstractmethod
    def reply(self, agent_texts: Sequence[str]) -> UserMessage:
        """The user's next message after the agent's messages of this turn."""

    @abstractmethod
    def _fill(self, template: str) -> str | None:
        """The template filled from what the user knows; None when it needs something else."""

    @abstractmethod
    def check(self, intent: str, text: str) -> list[str]:
        """Why `text` may not be sent for `intent` (`fact: …`, `disclosure: …`); empty: it may."""

    @abstractmethod
    def _request(self, intent: str, options: Sequence[str]) -> DecisionRequest:
        """The provider's question: which of `options` the user would write."""

    def _count_blocked(self, problems: Sequence[str]) -> None:
        """Count one blocked wording (a subclass may count by the problems' kinds)."""
        self._count("userChecksBlocked")

    def _count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def _word(self, intent: str) -> tuple[str | None, int]:
        """The wording sent for `intent` and how many were blocked before it; None (recorded as
        `user.silent`, a violation) when no wording passed the checks."""
        candidates: list[str] = []
        for template in self.wording.intents.get(intent, []):
            text = self._fill(template)
            if text is not None and text not in candidates:
                candidates.append(text)
        if self.mode == "exploration" and self.rng is not None and len(candidates) > 1:
            candidates = [candidates[int(i)] for i in self.rng.permutation(len(candidates))]
        blocked = 0
        while candidates:
            pick = candidates[0]
            if len(candidates) > 1:
                decision = self.decide(self._request(intent, candidates))
                if decision.option is None:
                    self._count("userWordingLost")
                pick = decision.option or candidates[0]
            problems = self.check(intent, pick)
            if not problems:
                return pick, blocked
            blocked += 1
            self._count_blocked(problems)
            self.log.add(
                "user.check",
                "user",
                "control",
                {
                    "turn": self.turn,
                    "intent": intent,
                    "text": pick,
                    "blocked": True,
                    "problems": problems,
                },
            )
            candidates.remove(pick)
        self._count("userNoCompliantWording")
        self.violations.append(f"no wording of intent {intent!r} passed the checks")
        self.log.add(
            "user.silent",
            "user",
            "control",
            {"turn": self.turn, "intent": intent, "reason": "no compliant wording"},
        )
        return None, blocked

    def _silent(self, intent: str) -> UserMessage:
        """The message of a user who found no wording that passed (already recorded)."""
        return UserMessage(self.turn, intent, None, True)

    def _send(
        self,
        intent: str,
        text: str,
        blocked: int,
        *,
        ends: bool,
        goal: bool,
        extra: Mapping[str, Any] | None = None,
        linkage: Mapping[str, str] | None = None,
    ) -> UserMessage:
        """Send a wording that passed: remember it and record it (`user.message`, with the
        facts disclosed so far and the wordings blocked before it)."""
        self.history.append({"speaker": "you", "text": text})
        self.log.add(
            "user.message",
            "user",
            "message",
            {
                "turn": self.turn,
                "intent": intent,
                "text": text,
                "disclosed": sorted(self.disclosed),
                "checks": {"fact": "passed", "disclosure": "passed", "blocked": blocked},
                "ends": ends,
                **(extra or {}),
            },
            linkage=linkage,
        )
        return UserMessage(self.turn, intent, text, ends, goal_reached=goal)

    def _last_agent_text(self) -> str | None:
        return next((h["text"] for h in reversed(self.history) if h["speaker"] == "agent"), None)

    def _wording_request(
        self, intent: str, options: Sequence[str], *, situation: str, instructions: str, goals: str
    ) -> DecisionRequest:
        """The provider's question with the parts every user shares: the last six messages as
        memory and, in regression, a seed pinned by the scenario's seed, the turn and the
        intent (never the replication)."""
        return DecisionRequest(
            situation=situation,
            instructions=instructions,
            options=tuple(options),
            memory=tuple(
                {"speaker": h["speaker"], "text": f"{h['speaker']}: {h['text']}"}
                for h in self.history[-6:]
            ),
            goals=goals,
            view={"intent": intent},
            kind="user_wording",
            seed=None
            if self.mode == "exploration"
            else int(sha256_text(f"user-wording|{self.seed}|{self.turn}|{intent}")[:15], 16),
        )
