"""Providers: the embedded offline stand-in and HTTP providers, registered by name."""

from __future__ import annotations

from collections.abc import Callable

from ...core.schema import LLMConfig
from ..registry import Registry
from .base import ChatRequest, ChatResponse, Message, Provider, ProviderError

ProviderFactory = Callable[[LLMConfig], Provider]

PROVIDERS: Registry[ProviderFactory] = Registry("provider")

CACHED: set[str] = set()
"""Providers whose responses cost calls (a provider module adds its name when it registers):
make_provider puts the response cache in front of them. The free offline stand-in and test
providers stay uncached."""


def make_provider(config: LLMConfig, *, path: str = "llm.provider") -> Provider:
    """The provider the config names, behind the response cache when it is a paid one (the cache's
    directory and mode come from the environment; see providers/cache.py)."""
    factory = PROVIDERS.get(config.provider, path=path)
    if config.provider not in CACHED:
        return factory(config)
    from .cache import cached

    return cached(config, factory)


from . import offline as _offline  # noqa: E402  (registers itself)
from . import openai as _openai  # noqa: E402  (registers itself)

__all__ = [
    "CACHED",
    "PROVIDERS",
    "ChatRequest",
    "ChatResponse",
    "Message",
    "Provider",
    "ProviderError",
    "make_provider",
]
del _offline, _openai
