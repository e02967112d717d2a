"""Providers: the embedded offline stand-in and HTTP providers, registered by name."""

from __future__ import annotations

from collections.abc import Callable

from ...core.schema import LLMConfig
from ..registry import Registry
from .base import ChatRequest, ChatResponse, Message, Provider, ProviderError

ProviderFactory = Callable[[LLMConfig], Provider]

PROVIDERS: Registry[ProviderFactory] = Registry("provider")


def make_provider(config: LLMConfig, *, path: str = "llm.provider") -> Provider:
    return PROVIDERS.get(config.provider, path=path)(config)


from . import offline as _offline  # noqa: E402  (registers itself)

__all__ = [
    "PROVIDERS",
    "ChatRequest",
    "ChatResponse",
    "Message",
    "Provider",
    "ProviderError",
    "make_provider",
]
del _offline
