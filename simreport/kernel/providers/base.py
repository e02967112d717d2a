"""The provider interface: every agent decision that needs a language model goes through one."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import RunError
from ...core.schema import LLMConfig


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[Message, ...]
    model: str
    temperature: float
    max_tokens: int
    seed: int
    options: tuple[str, ...] = ()
    """The allowed answers, for providers that can constrain output (JSON schema enums)."""


@dataclass
class ChatResponse:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# Failures after which no further call of the run can succeed: the endpoint is gone (after its
# retries), the run's budget is spent, the key or the configuration is missing, or a replay has no
# recorded answer. The run stops as crashed with this failure rather than limping on with every
# remaining decision lost (and every call retried).
FATAL_KINDS = frozenset(
    {"ConnectionFailed", "BudgetExhausted", "MissingApiKey", "BadConfig", "CacheMiss"}
)


class ProviderError(RunError):
    """A call failed (network, HTTP status, budget, timeout). Counted; the decision is lost.
    `attempts`: how many times the request was sent before it was given up, when retried."""

    def __init__(
        self, message: str, *, kind: str = "ProviderError", attempts: int | None = None
    ) -> None:
        super().__init__(message, stage="running", kind=kind)
        self.attempts = attempts


class Provider(ABC):
    """Turns chat requests into responses. Implementations register a factory by name."""

    name: str = "provider"

    def __init__(self, config: LLMConfig) -> None:
        self.config = config

    @abstractmethod
    def complete(self, request: ChatRequest) -> ChatResponse:
        """One chat completion; raise ProviderError on failure."""

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | ProviderError]:
        """Several independent completions; providers with a network override this to overlap
        them. Failures come back in place, so one lost call does not lose the others."""
        out: list[ChatResponse | ProviderError] = []
        for request in requests:
            try:
                out.append(self.complete(request))
            except ProviderError as exc:
                out.append(exc)
        return out

    def describe(self) -> dict[str, Any]:
        """What the manifest records about this provider (never secrets)."""
        return {"name": self.name, "model": self.config.model}

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


def estimate_tokens(text: str) -> int:
    """A rough token count (about four characters a token) for providers that report none."""
    return max(1, (len(text) + 3) // 4)
