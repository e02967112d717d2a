"""The response cache: content-addressed keys, record / replay / live modes, safety under
concurrent processes, maintenance (stats, clear, prune) and the `simreport cache` commands."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from simreport.cli.doctor import register_cli
from simreport.core.errors import InputError
from simreport.core.schema import LLMConfig
from simreport.kernel.providers import (
    ChatRequest,
    ChatResponse,
    Message,
    Provider,
    ProviderError,
    make_provider,
)
from simreport.kernel.providers.cache import (
    CachedProvider,
    ResponseCache,
    cache_mode,
    cached,
    default_cache_dir,
    request_key,
)
from simreport.kernel.providers.offline import OfflineProvider
from simreport.kernel.providers.openai import OpenAIProvider
from tests.support.llm_server import FakeLLM

DAY = 86400.0


class Counting(Provider):
    """Answers "cooperate" and counts how often it was asked."""

    name = "counting"

    def __init__(self, config: LLMConfig) -> None:
        super().__init__(config)
        self.calls = 0
        self.batches: list[int] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.calls += 1
        return ChatResponse("cooperate", 11, 2, extra={"finishReason": "stop"})

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | ProviderError]:
        self.batches.append(len(requests))
        return super().complete_many(requests)


def _request(text: str = "Choose.", seed: int = 1, **changes: Any) -> ChatRequest:
    request = ChatRequest(
        messages=(Message("user", text),),
        model="m",
        temperature=0.0,
        max_tokens=16,
        seed=seed,
        options=("cooperate", "defect"),
    )
    return replace(request, **changes)


def _config(**extra: Any) -> LLMConfig:
    return LLMConfig.model_validate({"provider": "openai", "model": "m", **extra})


# --------------------------------------------------------------------------- keys


def test_the_key_covers_everything_that_can_change_the_response() -> None:
    base = request_key("openai", "http://h/v1", _request())
    assert base == request_key("openai", "http://h/v1/", _request())
    assert len(base) == 64
    variants = [
        request_key("other", "http://h/v1", _request()),
        request_key("openai", "http://g/v1", _request()),
        request_key("openai", "http://h/v1", _request(model="n")),
        request_key("openai", "http://h/v1", _request("Choose!")),
        request_key("openai", "http://h/v1", _request(messages=(Message("system", "Choose."),))),
        request_key("openai", "http://h/v1", _request(temperature=0.5)),
        request_key("openai", "http://h/v1", _request(seed=2)),
        request_key("openai", "http://h/v1", _request(max_tokens=17)),
        request_key("openai", "http://h/v1", _request(options=("defect", "cooperate"))),
        request_key("openai", "http://h/v1", _request(options=())),
    ]
    assert len({base, *variants}) == len(variants) + 1


# --------------------------------------------------------------------------- modes


def test_record_mode_stores_misses_and_answers_hits_without_calling(tmp_path: Path) -> None:
    inner = Counting(_config())
    provider = CachedProvider(_config(), inner, ResponseCache(tmp_path))
    first = provider.complete_many([_request(seed=1), _request(seed=2)])
    again = provider.complete_many([_request(seed=2), _request(seed=3), _request(seed=1)])
    assert inner.calls == 3 and inner.batches == [2, 1]  # only the miss went out
    assert [getattr(r, "cached", None) for r in first] == [False, False]
    assert [getattr(r, "cached", None) for r in again] == [True, False, True]
    hit = again[0]
    assert isinstance(hit, ChatResponse)
    assert (hit.text, hit.prompt_tokens, hit.completion_tokens) == ("cooperate", 11, 2)
    assert hit.extra == {"finishReason": "stop"}


def test_failures_are_not_cached(tmp_path: Path) -> None:
    class Failing(Counting):
        def complete(self, request: ChatRequest) -> ChatResponse:
            self.calls += 1
            raise ProviderError("down", kind="ConnectionFailed")

    inner = Failing(_config())
    provider = CachedProvider(_config(), inner, ResponseCache(tmp_path))
    for _ in range(2):
        with pytest.raises(ProviderError):
            provider.complete(_request())
    assert inner.calls == 2


def test_replay_fails_clearly_on_a_miss_and_needs_no_endpoint(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    CachedProvider(_config(), Counting(_config()), cache).complete(_request(seed=1))
    # Replay builds no real provider: no endpoint and no key are needed.
    config = _config(baseUrl=None, apiKeyEnv="SIMREPORT_TEST_UNSET_KEY")
    provider = cached(config, lambda c: OpenAIProvider(c), mode="replay", cache=cache)
    assert isinstance(provider, CachedProvider) and provider.inner is None
    hit, miss = provider.complete_many([_request(seed=1), _request(seed=9)])
    assert isinstance(hit, ChatResponse) and hit.cached
    assert isinstance(miss, ProviderError) and miss.kind == "CacheMiss"
    key = request_key("openai", None, _request(seed=9))
    assert key in miss.message and "SIMREPORT_CACHE_MODE=record" in miss.message
    assert not cache.path_of(key).exists()


def test_live_mode_has_no_cache(tmp_path: Path) -> None:
    provider = cached(_config(), Counting, mode="live", cache=ResponseCache(tmp_path))
    assert isinstance(provider, Counting)
    provider.complete(_request())
    assert not (tmp_path / "v1").exists()


def test_the_offline_provider_can_be_cached_when_asked(tmp_path: Path) -> None:
    config = LLMConfig()
    provider = CachedProvider(config, OfflineProvider(config), ResponseCache(tmp_path))
    fresh = provider.complete(_request(model="offline-base"))
    hit = provider.complete(_request(model="offline-base"))
    assert hit.cached and not fresh.cached and hit.text == fresh.text


def test_make_provider_caches_paid_providers_as_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMREPORT_CACHE_DIR", str(tmp_path))
    offline = make_provider(LLMConfig())
    assert isinstance(offline, OfflineProvider)  # free: never cached
    with FakeLLM() as server:
        config = _config(baseUrl=server.url)
        monkeypatch.delenv("SIMREPORT_CACHE_MODE", raising=False)
        recorded = make_provider(config)
        assert isinstance(recorded, CachedProvider) and recorded.mode == "record"
        assert isinstance(recorded.inner, OpenAIProvider)
        assert recorded.cache.directory == tmp_path
        recorded.complete(_request())
        recorded.close()
        monkeypatch.setenv("SIMREPORT_CACHE_MODE", "live")
        live = make_provider(config)
        assert isinstance(live, OpenAIProvider)
        live.close()
        monkeypatch.setenv("SIMREPORT_CACHE_MODE", "replay")
        replayed = make_provider(config)
        assert replayed.complete(_request()).cached
        assert server.calls == 1
    monkeypatch.setenv("SIMREPORT_CACHE_MODE", "sometimes")
    with pytest.raises(InputError, match="SIMREPORT_CACHE_MODE"):
        make_provider(config)


def test_cache_location_and_mode_defaults() -> None:
    home = Path.home()
    assert default_cache_dir({}) == home / ".cache" / "simreport"
    assert default_cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/simreport")
    assert default_cache_dir({"XDG_CACHE_HOME": "/x", "SIMREPORT_CACHE_DIR": "/y"}) == Path("/y")
    assert cache_mode({}) == "record"
    assert cache_mode({"SIMREPORT_CACHE_MODE": " Replay "}) == "replay"


# --------------------------------------------------------------------------- storage


def test_an_unreadable_entry_is_a_miss_and_is_rewritten(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    key = request_key("openai", None, _request())
    path = cache.path_of(key)
    path.parent.mkdir(parents=True)
    path.write_text('{"response": {"text": "coop')
    inner = Counting(_config())
    provider = CachedProvider(_config(), inner, cache)
    assert not provider.complete(_request()).cached
    assert provider.complete(_request()).cached and inner.calls == 1


def _hammer(directory: str, worker: int) -> int:
    """Write and read 60 keys, half of them shared with every other worker."""
    cache = ResponseCache(directory)
    bad = 0
    for i in range(60):
        name = f"shared-{i}" if i % 2 else f"own-{worker}-{i}"
        key = request_key("openai", None, _request(name))
        cache.put(key, ChatResponse(name, 5, 1))
        got = cache.get(key)
        if got is None or got.text != name:
            bad += 1
    return bad


def test_concurrent_worker_processes_share_the_cache_safely(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        bad = pool.starmap(_hammer, [(str(tmp_path), w) for w in range(4)])
    assert bad == [0, 0, 0, 0]
    cache = ResponseCache(tmp_path)
    assert cache.stats().entries == 30 + 4 * 30
    assert list(tmp_path.rglob("*.tmp")) == []
    for path in (tmp_path / "v1").rglob("*.json"):
        json.loads(path.read_text())  # every entry is whole


def test_a_hit_refreshes_the_last_use_time(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    cache.put("ab" * 32, ChatResponse("x", 1, 1))
    path = cache.path_of("ab" * 32)
    old = time.time() - 3 * DAY
    os.utime(path, (old, old))
    assert cache.get("ab" * 32) is not None
    assert path.stat().st_mtime > old + 2 * DAY  # used now, no longer three days ago


def _aged(cache: ResponseCache, key: str, created_days: float, used_days: float) -> None:
    cache.put(key, ChatResponse(key[:4], 1, 1))
    path = cache.path_of(key)
    entry = json.loads(path.read_text())
    entry["created"] = time.time() - created_days * DAY
    path.write_text(json.dumps(entry))
    used = time.time() - used_days * DAY
    os.utime(path, (used, used))


def test_stats_clear_and_prune(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    assert cache.stats().entries == 0
    _aged(cache, "a" * 64, created_days=40, used_days=1)
    _aged(cache, "b" * 64, created_days=5, used_days=5)
    _aged(cache, "c" * 64, created_days=1, used_days=0)
    stats = cache.stats()
    assert stats.entries == 3 and stats.bytes > 0
    assert stats.oldest_created is not None and stats.oldest_created < time.time() - 39 * DAY
    assert dict(stats.rows())["entries"] == "3"
    with pytest.raises(InputError):
        cache.prune()
    assert cache.prune(older_than_days=30) == 1
    assert cache.prune(unused_for_days=3) == 1
    assert cache.get("c" * 64) is not None
    assert cache.clear() == 1 and cache.stats().entries == 0


# --------------------------------------------------------------------------- command line


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simreport")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


def _counts(out: str, folder: Path) -> list[str]:
    """The numbers a command's line states, the folder it names aside."""
    assert str(folder) in out
    return re.findall(r"\d+", out.replace(str(folder), ""))


def test_cache_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = ResponseCache(tmp_path)
    _aged(cache, "a" * 64, created_days=40, used_days=40)
    _aged(cache, "b" * 64, created_days=1, used_days=1)
    assert _cli(["cache", "stats", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "entries" in out and "2" in out and str(tmp_path) in out
    assert _cli(["cache", "stats", "--dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == "2"
    assert _cli(["cache", "prune", "--dir", str(tmp_path), "--unused-for", "30"]) == 0
    assert _counts(capsys.readouterr().out, tmp_path) == ["1"]  # entries removed
    assert not cache.path_of("a" * 64).exists() and cache.stats().entries == 1
    with pytest.raises(InputError, match="--older-than or --unused-for"):
        _cli(["cache", "prune", "--dir", str(tmp_path)])
    with pytest.raises(InputError, match="--older-than"):
        _cli(["cache", "prune", "--dir", str(tmp_path), "--older-than", "-1"])
    assert _cli(["cache", "clear", "--dir", str(tmp_path)]) == 0
    assert _counts(capsys.readouterr().out, tmp_path) == ["1"]
    assert cache.stats().entries == 0


# --------------------------------------------------------------------------- audits


@pytest.mark.slow
def test_an_audit_rerun_with_unchanged_prompts_makes_no_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from simreport.harness import load_plan, run_audit

    monkeypatch.setenv("SIMREPORT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SIMREPORT_CACHE_MODE", raising=False)
    with FakeLLM(answer="hash") as server:
        plan = {
            "base": {
                "world": "prisoners_dilemma",
                "steps": 2,
                "seed": 5,
                "population": {"n": 4},
                "llm": {"provider": "openai", "baseUrl": server.url, "model": "test"},
            },
            "replications": 2,
            "axes": [{"template": "linguistic_framing", "levels": ["moralised"]}],
        }
        plan_file = tmp_path / "plan" / "audit.json"
        plan_file.parent.mkdir()
        plan_file.write_text(json.dumps(plan))
        # Worker processes (spawned) see the same cache through the environment.
        first = run_audit(load_plan(plan_file), tmp_path / "a", concurrency=2)
        calls = server.calls
        second = run_audit(load_plan(plan_file), tmp_path / "b", concurrency=2)
        assert server.calls == calls == 2 * 2 * 8  # conditions × replications × decisions
    totals = [sum(r.cost.llm_calls for _, _, r in run.results) for run in (first, second)]
    assert totals == [32, 0]
    hits = sum(r.integrity.counters.get("cacheHits", 0) for _, _, r in second.results)
    assert hits == 32
    assert [r.metrics for _, _, r in first.results] == [r.metrics for _, _, r in second.results]
