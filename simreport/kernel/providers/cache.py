"""The response cache: request → response, content-addressed, one JSON file per key renamed into
place, shared by every process of a machine without locks, so re-runs and replays of unchanged
prompts cost no calls. `SIMREPORT_CACHE_DIR` says where, `SIMREPORT_CACHE_MODE` how (`record`,
`replay` or `live`). Why files and not SQLite: docs/kernel.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ...core.canonical import canonical_json, sha256_text
from ...core.errors import InputError
from ...core.files import write_atomic
from ...core.redaction import redact_url
from ...core.schema import LLMConfig
from .base import ChatRequest, ChatResponse, Provider, ProviderError

ENV_CACHE_DIR = "SIMREPORT_CACHE_DIR"
ENV_CACHE_MODE = "SIMREPORT_CACHE_MODE"

CacheMode = Literal["live", "record", "replay"]
MODES: tuple[CacheMode, ...] = ("live", "record", "replay")
KEY_VERSION = 1
_LAYOUT = "v1"
_TOUCH_AFTER = 3600.0
"""A hit refreshes an entry's last-use time (its mtime) at most this often, in seconds: pruning
works in days, and a write per hit would slow replays."""
_DAY = 86400.0


def default_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    if environ.get(ENV_CACHE_DIR):
        return Path(environ[ENV_CACHE_DIR]).expanduser()
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]).expanduser() / "simreport"
    return Path.home() / ".cache" / "simreport"


def cache_mode(env: Mapping[str, str] | None = None) -> CacheMode:
    raw = (os.environ if env is None else env).get(ENV_CACHE_MODE, "").strip().lower()
    if not raw:
        return "record"
    for mode in MODES:
        if raw == mode:
            return mode
    raise InputError(
        f"{ENV_CACHE_MODE}={raw!r} is not a cache mode",
        expected="live, record or replay",
    )


def request_key(provider: str, base_url: str | None, request: ChatRequest) -> str:
    """sha256 over everything that can change the response: provider, endpoint, model, messages,
    temperature, token limit, seed, tools and the allowed answers (the response format).

    The endpoint counts without its credentials (userinfo, key-like query values), as the API
    key does not count either: they decide whether a call is allowed, not what it answers. So a
    run read back from its (redacted) scenario.json finds the responses its original recorded,
    and no entry is derived from a password."""
    material = {
        "v": KEY_VERSION,
        "provider": provider,
        "baseUrl": redact_url((base_url or "").strip().rstrip("/")),
        "model": request.model,
        "messages": [[m.role, m.content] for m in request.messages],
        "temperature": float(request.temperature),
        "maxTokens": request.max_tokens,
        "seed": request.seed,
        "tools": getattr(request, "tools", None),
        "options": list(request.options),
    }
    return sha256_text(canonical_json(material))


@dataclass(frozen=True)
class CacheStats:
    directory: Path
    entries: int
    bytes: int
    oldest_created: float | None
    newest_created: float | None
    least_recently_used: float | None

    def rows(self) -> list[tuple[str, str]]:
        def when(t: float | None) -> str:
            return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"

        return [
            ("directory", str(self.directory)),
            ("entries", str(self.entries)),
            ("size", _size(self.bytes)),
            ("oldest entry", when(self.oldest_created)),
            ("newest entry", when(self.newest_created)),
            ("least recently used", when(self.least_recently_used)),
        ]


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


class ResponseCache:
    """Entries on disk; safe to share between threads and processes (see the module docstring)."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.root = self.directory / _LAYOUT

    def path_of(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> ChatResponse | None:
        """The stored response (cached=True), or None. An unreadable entry is a miss."""
        path = self.path_of(key)
        try:
            with open(path, "rb") as handle:
                mtime = os.fstat(handle.fileno()).st_mtime
                data = json.loads(handle.read())
            response = data["response"]
            result = ChatResponse(
                text=str(response["text"]),
                prompt_tokens=int(response["promptTokens"]),
                completion_tokens=int(response["completionTokens"]),
                cached=True,
                extra=dict(response.get("extra") or {}),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if time.time() - mtime > _TOUCH_AFTER:
            with contextlib.suppress(OSError):
                os.utime(path)
        return result

    def put(self, key: str, response: ChatResponse, meta: Mapping[str, Any] | None = None) -> None:
        entry = {
            "key": key,
            "created": time.time(),
            "meta": dict(meta or {}),
            "response": {
                "text": response.text,
                "promptTokens": response.prompt_tokens,
                "completionTokens": response.completion_tokens,
                "extra": response.extra,
            },
        }
        text = json.dumps(entry, sort_keys=True, ensure_ascii=False)
        write_atomic(self.path_of(key), text, durable=False)

    # ----------------------------------------------------------------- maintenance

    def _entries(self) -> Iterator[Path]:
        if not self.root.is_dir():
            return
        for shard in sorted(self.root.iterdir()):
            if shard.is_dir():
                yield from sorted(shard.glob("*.json"))

    def _created(self, path: Path, fallback: float) -> float:
        try:
            value = json.loads(path.read_bytes()).get("created")
        except (OSError, ValueError, AttributeError):
            return fallback
        return float(value) if isinstance(value, (int, float)) else fallback

    def stats(self) -> CacheStats:
        count = size = 0
        oldest: float | None = None
        newest: float | None = None
        lru: float | None = None
        for path in self._entries():
            try:
                st = path.stat()
            except OSError:
                continue
            created = self._created(path, st.st_mtime)
            count += 1
            size += st.st_size
            oldest = created if oldest is None else min(oldest, created)
            newest = created if newest is None else max(newest, created)
            lru = st.st_mtime if lru is None else min(lru, st.st_mtime)
        return CacheStats(self.directory, count, size, oldest, newest, lru)

    def recorded_usage(self) -> Iterator[tuple[dict[str, Any], int, int]]:
        """(meta, prompt tokens, completion tokens) of every readable entry, in key order: what
        the recorded calls cost, for estimates before a run. Unreadable entries are skipped."""
        for path in self._entries():
            try:
                data = json.loads(path.read_bytes())
                response = data["response"]
                meta = data.get("meta") or {}
                yield (
                    dict(meta),
                    int(response["promptTokens"]),
                    int(response["completionTokens"]),
                )
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                continue

    def clear(self) -> int:
        """Remove every entry; return how many."""
        return self._remove(lambda path, st: True)

    def prune(
        self,
        *,
        older_than_days: float | None = None,
        unused_for_days: float | None = None,
        now: float | None = None,
    ) -> int:
        """Remove entries created more than `older_than_days` ago or not used (read or written)
        for `unused_for_days`; return how many."""
        if older_than_days is None and unused_for_days is None:
            raise InputError(
                "prune needs --older-than or --unused-for", expected="a number of days"
            )
        current = time.time() if now is None else now

        def stale(path: Path, st: os.stat_result) -> bool:
            if unused_for_days is not None and st.st_mtime < current - unused_for_days * _DAY:
                return True
            if older_than_days is not None:
                return self._created(path, st.st_mtime) < current - older_than_days * _DAY
            return False

        return self._remove(stale)

    def _remove(self, doomed: Callable[[Path, os.stat_result], bool]) -> int:
        removed = 0
        for path in self._entries():
            try:
                if doomed(path, path.stat()):
                    path.unlink()
                    removed += 1
            except FileNotFoundError:
                continue  # another process removed it first
        # Temporary files a killed writer left behind.
        if self.root.is_dir():
            cutoff = time.time() - _TOUCH_AFTER
            for tmp in self.root.glob("*/.*.tmp"):
                with contextlib.suppress(OSError):
                    if tmp.stat().st_mtime < cutoff:
                        tmp.unlink()
        return removed


class CachedProvider(Provider):
    """A provider behind the response cache. Hits come back with cached=True (the engine counts
    them as cacheHits, not llmCalls); misses go to the inner provider, overlapped as it likes,
    and successful responses are stored. In replay mode there is no inner provider: a miss is a
    ProviderError of kind CacheMiss naming the key."""

    def __init__(
        self,
        config: LLMConfig,
        inner: Provider | None,
        cache: ResponseCache,
        *,
        mode: CacheMode = "record",
    ) -> None:
        super().__init__(config)
        if mode == "live":
            raise ValueError("a live provider has no cache; use the inner provider directly")
        if inner is None and mode != "replay":
            raise ValueError("only replay mode works without an inner provider")
        self.inner = inner
        self.cache = cache
        self.mode = mode
        self.name = inner.name if inner is not None else config.provider

    def key(self, request: ChatRequest) -> str:
        return request_key(self.config.provider, self.config.base_url, request)

    def complete(self, request: ChatRequest) -> ChatResponse:
        result = self.complete_many([request])[0]
        if isinstance(result, ProviderError):
            raise result
        return result

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | ProviderError]:
        keys = [self.key(r) for r in requests]
        out: list[ChatResponse | ProviderError | None] = [self.cache.get(k) for k in keys]
        missing = [i for i, hit in enumerate(out) if hit is None]
        if missing and self.inner is None:
            for i in missing:
                out[i] = ProviderError(
                    f"replay: no cached response for key {keys[i]} (model {requests[i].model!r}) "
                    f"in {self.cache.directory}; record it first with "
                    f"{ENV_CACHE_MODE}=record",
                    kind="CacheMiss",
                )
        elif missing and self.inner is not None:
            fresh = self.inner.complete_many([requests[i] for i in missing])
            meta = {"provider": self.config.provider, "model": self.config.model}
            for i, response in zip(missing, fresh, strict=True):
                if isinstance(response, ChatResponse):
                    self.cache.put(keys[i], response, meta)
                out[i] = response
        return [r for r in out if r is not None]

    def describe(self) -> dict[str, Any]:
        base = self.inner.describe() if self.inner is not None else super().describe()
        return {**base, "cache": self.mode}

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def cached(
    config: LLMConfig,
    factory: Callable[[LLMConfig], Provider],
    *,
    mode: CacheMode | None = None,
    cache: ResponseCache | None = None,
) -> Provider:
    """The provider `factory` makes, behind the cache as the environment (or `mode`) says. In
    replay mode the real provider is never built, so replaying needs no endpoint and no key."""
    chosen = mode if mode is not None else cache_mode()
    if chosen == "live":
        return factory(config)
    store = cache if cache is not None else ResponseCache()
    inner = None if chosen == "replay" else factory(config)
    return CachedProvider(config, inner, store, mode=chosen)


__all__ = [
    "ENV_CACHE_DIR",
    "ENV_CACHE_MODE",
    "MODES",
    "CacheMode",
    "CacheStats",
    "CachedProvider",
    "ResponseCache",
    "cache_mode",
    "cached",
    "default_cache_dir",
    "request_key",
]
