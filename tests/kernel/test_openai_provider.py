"""The openai provider against a real HTTP server on loopback: answers, structured output and its
fallback, seeds, retries and Retry-After, timeouts, broken replies, concurrency, budgets, the API
key's secrecy, and a whole run through the engine with the cache and with a dead server."""

from __future__ import annotations

import email.utils
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simreport.core.schema import LLMConfig
from simreport.kernel import run_scenario, validate_scenario
from simreport.kernel.providers import ChatRequest, Message, ProviderError, make_provider
from simreport.kernel.providers.cache import CachedProvider
from simreport.kernel.providers.openai import (
    HttpSettings,
    OpenAIProvider,
    answer_text,
    chat_base_url,
    parse_retry_after,
)
from tests.support.llm_server import HANG_LIMIT, FakeLLM, Reply

KEY_ENV = "SIMREPORT_TEST_API_KEY"
SECRET = "sk-test-9f8e7d6c5b4a-DO-NOT-LEAK"
PD = ("cooperate", "defect")


@pytest.fixture
def server() -> Iterator[FakeLLM]:
    with FakeLLM() as fake:
        yield fake


class Sleeps(list[float]):
    """Records the provider's backoff sleeps instead of sleeping."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _config(url: str, **extra: Any) -> LLMConfig:
    return LLMConfig.model_validate(
        {"provider": "openai", "model": "test", "baseUrl": url, **extra}
    )


def _provider(
    server: FakeLLM,
    sleeps: Sleeps | None = None,
    env: dict[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    **settings: Any,
) -> OpenAIProvider:
    config = _config(server.url, **({"apiKeyEnv": KEY_ENV} if env else {}))
    base = HttpSettings.from_config(config, env or {})
    values = {**base.__dict__, "retries": 3, "backoff_seconds": 0.01, **settings}
    return OpenAIProvider(
        config,
        settings=HttpSettings(**values),
        sleep=sleeps if sleeps is not None else Sleeps(),
        env=env or {},
        clock=clock,
    )


def _request(text: str = "Hello.", options: tuple[str, ...] = (), seed: int = 7) -> ChatRequest:
    if options:
        text += f"\n\nAnswer with exactly one of: {', '.join(options)}."
    return ChatRequest(
        messages=(Message("system", "You are a player."), Message("user", text)),
        model="test",
        temperature=0.0,
        max_tokens=32,
        seed=seed,
        options=options,
    )


# --------------------------------------------------------------------------- answers


def test_a_plain_answer_with_the_servers_token_usage(server: FakeLLM) -> None:
    provider = _provider(server)
    response = provider.complete(_request("Say hi."))
    provider.close()
    assert response.text == "ok" and not response.cached
    assert (response.prompt_tokens, response.completion_tokens) == (
        server.prompt_tokens,
        server.completion_tokens,
    )
    body = server.requests[0]
    assert body["model"] == "test" and body["temperature"] == 0.0 and body["max_tokens"] == 32
    assert body["seed"] == 7
    assert body["messages"][0] == {"role": "system", "content": "You are a player."}
    assert "response_format" not in body  # nothing to constrain without options


def test_options_are_constrained_by_a_json_schema_response_format(server: FakeLLM) -> None:
    provider = _provider(server)
    response = provider.complete(_request("Choose.", PD))
    provider.close()
    assert response.text == "cooperate"
    assert json.loads(response.extra["raw"]) == {"answer": "cooperate"}
    fmt = server.requests[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "answer"
    schema = fmt["json_schema"]["schema"]
    assert schema["type"] == "object" and schema["required"] == ["answer"]
    assert schema["properties"]["answer"] == {"type": "string", "enum": ["cooperate", "defect"]}


def test_a_refused_response_format_falls_back_to_parsing_and_is_remembered() -> None:
    with FakeLLM(structured=False, answer="defect") as server:
        provider = _provider(server)
        first = provider.complete(_request("Choose.", PD))
        second = provider.complete(_request("Choose again.", PD))
        provider.close()
    assert first.text == second.text == "defect"
    # 400 with the format, the same request without it, then straight without it.
    assert server.calls == 3
    assert ["response_format" in r for r in server.requests] == [True, False, False]
    assert provider.describe()["structuredOutput"] is False
    assert provider.describe()["seed"] is True


def test_another_400_is_a_failure_and_does_not_switch_structured_output_off(
    server: FakeLLM,
) -> None:
    server.push(*[Reply(status=400)] * 3)
    provider = _provider(server)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request("Choose.", PD))
    assert caught.value.kind == "BadRequest" and "HTTP 400" in caught.value.message
    assert provider.complete(_request("Choose.", PD)).text == "cooperate"
    provider.close()
    assert "response_format" in server.requests[-1] and "seed" in server.requests[-1]


def test_a_refused_seed_is_dropped_and_remembered() -> None:
    with FakeLLM(reject_seed=True) as server:
        provider = _provider(server)
        provider.complete(_request())
        provider.complete(_request())
        provider.close()
    assert ["seed" in r for r in server.requests] == [True, False, False]
    assert provider.describe()["seed"] is False


def test_answer_text_reads_json_fences_reasoning_and_cut_off_objects() -> None:
    assert answer_text('{"answer": "defect"}') == "defect"
    assert answer_text('```json\n{"answer": "cooperate"}\n```') == "cooperate"
    assert answer_text("<think>defect? no.</think>\ncooperate") == "cooperate"
    assert answer_text('Sure: {"choice": "defect"} is my move') == "defect"
    assert answer_text('{"answer": "defect", "why": "becau') == "defect"
    assert answer_text("  I will cooperate.  ") == "I will cooperate."
    assert answer_text('{"ans') == '{"ans'
    assert answer_text("<think>unfinished reasoning") == ""


def test_a_reply_cut_inside_the_json_content_still_names_its_answer(server: FakeLLM) -> None:
    server.push(Reply(content='{"answer": "defect"'), Reply(content='{"answ'))
    provider = _provider(server)
    assert provider.complete(_request("Choose.", PD)).text == "defect"
    assert provider.complete(_request("Choose.", PD)).text == '{"answ'  # a parse failure later
    provider.close()


def test_missing_usage_is_estimated_and_marked() -> None:
    with FakeLLM(usage=False) as server:
        provider = _provider(server)
        response = provider.complete(_request("Choose.", PD))
        provider.close()
    assert response.extra["usageEstimated"] is True
    assert response.prompt_tokens > 0 and response.completion_tokens > 0


# --------------------------------------------------------------------------- failures


def test_retry_after_in_seconds_is_honoured(server: FakeLLM) -> None:
    server.push(Reply(status=429, headers={"Retry-After": "2"}))
    sleeps = Sleeps()
    provider = _provider(server, sleeps)
    assert provider.complete(_request()).text == "ok"
    provider.close()
    assert sleeps == [2.0] and server.calls == 2


NOW = 1_767_225_600.0
"""The clock the provider reads a Retry-After date against (2026-01-01T00:00:00Z)."""


def test_retry_after_as_an_http_date_is_honoured(server: FakeLLM) -> None:
    when = email.utils.formatdate(NOW + 30, usegmt=True)
    server.push(Reply(status=503, headers={"Retry-After": when}))
    sleeps = Sleeps()
    provider = _provider(server, sleeps, clock=lambda: NOW)
    provider.complete(_request())
    provider.close()
    assert sleeps == [30.0]


def test_parse_retry_after() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after(email.utils.formatdate(NOW + 90, usegmt=True), NOW) == 90.0
    assert parse_retry_after(email.utils.formatdate(NOW - 100, usegmt=True), NOW) == 0.0
    past = email.utils.formatdate(time.time() - 100, usegmt=True)
    assert parse_retry_after(past) == 0.0  # read against the machine's clock by default


def test_a_retry_after_beyond_the_cap_fails_at_once(server: FakeLLM) -> None:
    server.push(Reply(status=429, headers={"Retry-After": "86400"}))
    sleeps = Sleeps()
    provider = _provider(server, sleeps)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert caught.value.kind == "RateLimited" and "86400" in caught.value.message
    assert sleeps == [] and server.calls == 1


def test_server_errors_back_off_exponentially_with_jitter(server: FakeLLM) -> None:
    server.push(*[Reply(status=500)] * 3)
    sleeps = Sleeps()
    provider = _provider(server, sleeps, backoff_seconds=0.1, retries=4)
    assert provider.complete(_request()).text == "ok"
    provider.close()
    assert server.calls == 4
    assert len(sleeps) == 3
    for k, seconds in enumerate(sleeps):
        ceiling = 0.1 * 2**k
        assert ceiling / 2 <= seconds <= ceiling


def test_persistent_server_errors_fail_after_the_retries(server: FakeLLM) -> None:
    server.push(*[Reply(status=502)] * 10)
    provider = _provider(server, retries=2)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert (caught.value.kind, caught.value.attempts) == ("ServerError", 3)
    assert "HTTP 502" in caught.value.message
    assert server.calls == 3


def test_a_slow_answer_times_out_and_is_retried(server: FakeLLM) -> None:
    # The first call is never answered: only the provider's timeout ends it.
    server.push(Reply(hang=True))
    sleeps = Sleeps()
    provider = _provider(server, sleeps, timeout_seconds=0.2)
    assert provider.complete(_request()).text == "ok"
    provider.close()
    assert server.wait_until(lambda s: s.dropped == 1)
    assert (server.calls, server.dropped, len(sleeps)) == (2, 1, 1)


def test_timeouts_every_time_fail_as_timeout(server: FakeLLM) -> None:
    server.push(*[Reply(hang=True)] * 3)
    provider = _provider(server, timeout_seconds=0.15, retries=2)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert (caught.value.kind, caught.value.attempts) == ("Timeout", 3)
    assert server.wait_until(lambda s: s.dropped == 3)


def test_a_truncated_body_is_retried(server: FakeLLM) -> None:
    server.push(Reply(truncate=True))
    provider = _provider(server)
    assert provider.complete(_request("Choose.", PD)).text == "cooperate"
    provider.close()
    assert server.calls == 2


def test_malformed_json_is_a_bad_response_not_a_crash(server: FakeLLM) -> None:
    server.push(Reply(body=b'{"choices": [{"message": {"content": "coop'), Reply(body=b"[]"))
    provider = _provider(server)
    for _ in range(2):
        with pytest.raises(ProviderError) as caught:
            provider.complete(_request())
        assert caught.value.kind == "BadResponse"
    provider.close()
    assert server.calls == 2


def test_a_dead_server_is_a_connection_failure_after_the_retries() -> None:
    server = FakeLLM().start()
    url = server.url
    server.stop()
    config = _config(url)
    sleeps = Sleeps()
    provider = OpenAIProvider(
        config,
        settings=HttpSettings(base_url=chat_base_url(url), retries=2, timeout_seconds=2),
        sleep=sleeps,
    )
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert (caught.value.kind, caught.value.attempts) == ("ConnectionFailed", 3)
    assert url in caught.value.message
    assert len(sleeps) == 2


def test_other_statuses_fail_without_retrying(server: FakeLLM) -> None:
    server.push(Reply(status=404))
    provider = _provider(server)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert caught.value.kind == "HTTPStatus" and server.calls == 1


# --------------------------------------------------------------------------- secrets, settings


def test_the_api_key_is_sent_but_never_shown(server: FakeLLM) -> None:
    echo = json.dumps({"error": {"message": f"bad key Bearer {SECRET}"}}).encode()
    server.push(Reply(status=401, body=echo))
    provider = _provider(server, env={KEY_ENV: SECRET})
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.complete(_request())
    provider.close()
    assert server.headers[-1]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in caught.value.message and "[redacted]" in caught.value.message
    assert SECRET not in json.dumps(provider.describe())
    assert provider.describe()["apiKeyEnv"] == KEY_ENV


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=200, body=f"<html>debug: Authorization: Bearer {SECRET}</html>".encode()),
        Reply(status=200, body=json.dumps({"echo": f"Bearer {SECRET}"}).encode()),
        Reply(status=500, body=f"upstream saw Bearer {SECRET}".encode()),
    ],
    ids=["2xx-not-json", "2xx-no-choices", "5xx-after-retries"],
)
def test_no_provider_error_carries_the_api_key(server: FakeLLM, reply: Reply) -> None:
    server.push(*[reply] * 5)
    provider = _provider(server, env={KEY_ENV: SECRET}, retries=0)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    failures = provider.complete_many([_request("a"), _request("b")])
    provider.close()
    assert SECRET not in caught.value.message and SECRET not in str(caught.value)
    for failure in failures:
        assert SECRET not in str(getattr(failure, "message", failure))


def test_a_2xx_body_echoing_the_key_leaves_no_key_in_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIMREPORT_CACHE_MODE", "live")
    monkeypatch.setenv("SIMREPORT_LLM_RETRIES", "0")
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeLLM() as server:
        server.push(*[Reply(status=200, body=f"<p>Bearer {SECRET}</p>".encode())] * 200)
        result = run_scenario(_pd_scenario(server.url), tmp_path / "run")
    assert result.integrity.counters["llmFailures"] > 0
    events = (tmp_path / "run" / "events.jsonl").read_text()
    assert "llm_failure" in events and "[redacted]" in events
    assert _files_containing(tmp_path, SECRET) == []


def test_a_missing_api_key_names_the_variable_and_fails_before_any_call(server: FakeLLM) -> None:
    with pytest.raises(ProviderError) as caught:
        OpenAIProvider(_config(server.url, apiKeyEnv=KEY_ENV), env={})
    assert caught.value.kind == "MissingApiKey" and KEY_ENV in caught.value.message
    assert caught.value.stage == "initializing"
    assert server.calls == 0


def test_base_urls_are_normalised() -> None:
    assert chat_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert chat_base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    assert chat_base_url("http://h/v1/chat/completions") == "http://h/v1"
    assert chat_base_url("https://h/api/openai/v1") == "https://h/api/openai/v1"
    for bad in ("127.0.0.1:8000", "ftp://h/v1", "http://"):
        with pytest.raises(ProviderError) as caught:
            chat_base_url(bad)
        assert caught.value.kind == "BadConfig"
    with pytest.raises(ProviderError, match=r"llm\.baseUrl"):
        OpenAIProvider(LLMConfig.model_validate({"provider": "openai"}))


def test_settings_come_from_the_environment() -> None:
    config = _config("http://127.0.0.1:1/v1", timeoutSeconds=5)
    env = {
        "SIMREPORT_MAX_CONCURRENCY": "3",
        "SIMREPORT_LLM_RETRIES": "1",
        "SIMREPORT_LLM_BACKOFF_SECONDS": "0.25",
    }
    settings = HttpSettings.from_config(config, env)
    assert (settings.max_concurrency, settings.retries, settings.backoff_seconds) == (3, 1, 0.25)
    assert settings.timeout_seconds == 5
    defaults = HttpSettings.from_config(config, {})
    assert (defaults.max_concurrency, defaults.retries) == (8, 4)
    with pytest.raises(ProviderError, match="SIMREPORT_LLM_RETRIES"):
        HttpSettings.from_config(config, {"SIMREPORT_LLM_RETRIES": "many"})


# --------------------------------------------------------------------------- concurrency, budget


def test_one_batch_goes_out_concurrently_up_to_the_limit_and_keeps_order() -> None:
    # Each call is answered only once four are in flight together: a provider that sent fewer
    # at once would leave the barrier waiting (broken after HANG_LIMIT, failing the calls).
    # How fast a batch goes is bench/bench_llm.py's measure.
    together = threading.Barrier(4, timeout=HANG_LIMIT)

    def echo(body: dict[str, Any], options: list[str]) -> str:
        together.wait()
        return options[0]

    with FakeLLM(answer=echo) as server:
        provider = _provider(server, max_concurrency=4, retries=0)
        requests = [_request(f"Round {i}.", (f"move{i}", "pass")) for i in range(12)]
        responses = provider.complete_many(requests)
        provider.close()
    assert [getattr(r, "text", None) for r in responses] == [f"move{i}" for i in range(12)]
    assert server.max_in_flight == 4 and server.calls == 12


def test_failures_in_a_batch_come_back_in_place(server: FakeLLM) -> None:
    server.push(Reply(status=404))
    provider = _provider(server, max_concurrency=1)
    responses = provider.complete_many([_request(f"{i}") for i in range(3)])
    provider.close()
    assert isinstance(responses[0], ProviderError)
    assert [getattr(r, "text", None) for r in responses[1:]] == ["ok", "ok"]


def test_an_exhausted_call_budget_is_a_recorded_failure(server: FakeLLM) -> None:
    provider = _provider(server, budget_calls=3, max_concurrency=2)
    responses = provider.complete_many([_request(f"{i}") for i in range(5)])
    provider.close()
    errors = [r for r in responses if isinstance(r, ProviderError)]
    assert len(errors) == 2 and {e.kind for e in errors} == {"BudgetExhausted"}
    assert server.calls == 3


def test_retries_count_against_the_call_budget(server: FakeLLM) -> None:
    server.push(*[Reply(status=500)] * 5)
    provider = _provider(server, budget_calls=2, retries=5)
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert caught.value.kind == "BudgetExhausted" and server.calls == 2


def test_an_exhausted_token_budget_is_a_recorded_failure(server: FakeLLM) -> None:
    provider = _provider(server, budget_tokens=10)
    provider.complete(_request("A prompt long enough to spend more than ten tokens at once."))
    with pytest.raises(ProviderError) as caught:
        provider.complete(_request())
    provider.close()
    assert caught.value.kind == "BudgetExhausted" and "token budget" in caught.value.message
    assert server.calls == 1


# --------------------------------------------------------------------------- end to end


def _pd_scenario(url: str, seed: int = 3) -> Any:
    return validate_scenario(
        {
            "world": "prisoners_dilemma",
            "steps": 3,
            "seed": seed,
            "seedPath": [seed, 0],
            "population": {"n": 4, "fields": {"disposition": ["cooperative", "competitive"]}},
            "llm": {"provider": "openai", "baseUrl": url, "model": "test", "apiKeyEnv": KEY_ENV},
            "params": {"framing": "neutral", "memoryWindow": 2},
        }
    )


def _files_containing(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_run_against_the_server_then_from_the_cache_then_with_the_server_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("SIMREPORT_CACHE_DIR", str(cache_dir))
    monkeypatch.delenv("SIMREPORT_CACHE_MODE", raising=False)
    monkeypatch.setenv("SIMREPORT_LLM_BACKOFF_SECONDS", "0.001")
    monkeypatch.setenv(KEY_ENV, SECRET)
    server = FakeLLM(answer="hash").start()
    try:
        assert isinstance(make_provider(_pd_scenario(server.url).llm), CachedProvider)

        # 1. Live: every decision is one HTTP call, and the cost is the server's usage.
        first = run_scenario(_pd_scenario(server.url), tmp_path / "live")
        assert first.failure is None and first.integrity.complete
        counters = first.integrity.counters
        assert counters["decisions"] == counters["llmCalls"] == server.calls == 12
        assert counters.get("cacheHits", 0) == 0
        assert first.cost.llm_calls == 12
        assert first.cost.prompt_tokens == server.prompt_tokens
        assert first.cost.completion_tokens == server.completion_tokens
        assert set(first.distributions["choice"]) <= set(PD)
        assert all(h["authorization"] == f"Bearer {SECRET}" for h in server.headers)
        manifest = json.loads((tmp_path / "live" / "manifest.json").read_text())
        assert (manifest["provider"], manifest["model"]) == ("openai", "test")

        # 2. The same run again: all from the cache, no HTTP call, the same outcome.
        second = run_scenario(_pd_scenario(server.url), tmp_path / "cached")
        assert server.calls == 12
        assert second.integrity.counters["cacheHits"] == 12
        assert second.integrity.counters.get("llmCalls", 0) == 0
        assert second.cost.llm_calls == 0 and second.cost.prompt_tokens == 0
        assert second.metrics == first.metrics
        assert second.distributions == first.distributions
        url = server.url
    finally:
        server.stop()

    # 3. New prompts (another seed) with the server gone: once the first step's calls have failed
    # after their retries, the run stops as a failed run that says why (and is not left to retry
    # every remaining decision against a dead endpoint).
    third = run_scenario(_pd_scenario(url, seed=4), tmp_path / "dead")
    assert third.status.execution == "crashed"
    assert third.failure is not None
    assert third.failure.type == "ConnectionFailed" and third.failure.stage == "running"
    assert url in third.failure.message
    assert third.integrity.counters["llmFailures"] == 4  # the first step's four decisions
    assert not third.integrity.complete and third.status.evidence == "partial"
    events = [
        json.loads(line)
        for line in (tmp_path / "dead" / "events.jsonl").read_text().splitlines()
        if line.strip()
    ]
    failures = [e for e in events if e["type"] == "llm_failure"]
    assert len(failures) == 4
    payload = failures[0]["payload"]
    assert payload["error"] == "ConnectionFailed"
    assert url in payload["message"]

    assert _files_containing(tmp_path, SECRET) == []
