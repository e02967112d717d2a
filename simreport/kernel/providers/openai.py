"""The `openai` provider: any server that speaks the OpenAI Chat Completions protocol over HTTP
(vLLM, llama.cpp server, Ollama, hosted APIs), with structured answers, seeds, retries, a limit
on requests in flight and budgets. The API key goes in the Authorization header and nowhere
else. Its settings and environment variables: docs/kernel.md.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ...core.redaction import MARK, is_redacted, redact_secrets, redact_url, url_secrets
from ...core.schema import LLMConfig
from ...core.values import http_url
from .. import interrupt
from . import CACHED, PROVIDERS
from .base import ChatRequest, ChatResponse, Provider, ProviderError, estimate_tokens

if TYPE_CHECKING:
    import httpx  # imported when a provider is built, so offline runs never load it

ENV_MAX_CONCURRENCY = "SIMREPORT_MAX_CONCURRENCY"
ENV_RETRIES = "SIMREPORT_LLM_RETRIES"
ENV_BACKOFF = "SIMREPORT_LLM_BACKOFF_SECONDS"

DEFAULT_MAX_CONCURRENCY = 8
DEFAULT_RETRIES = 4
DEFAULT_BACKOFF_SECONDS = 0.5

# Optional request features a server may reject with a 400; each is dropped (and remembered as
# unsupported) when it is.
STRUCTURED, SEED = "response_format", "seed"
_FEATURE_WORDS = {STRUCTURED: ("response_format", "json_schema"), SEED: ("seed",)}

Sleep = Callable[[float], None]


# --------------------------------------------------------------------------- settings


def config_error(message: str, kind: str = "BadConfig") -> ProviderError:
    """A provider that cannot be set up: the run fails while initialising, before any call."""
    error = ProviderError(message, kind=kind)
    error.stage = "initializing"
    return error


def _env_number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        raise config_error(
            f"environment variable {name}={raw!r} is not a valid {kind.__name__}"
        ) from None
    if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise config_error(f"environment variable {name} must be a non-negative number")
    return value


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


@dataclass(frozen=True)
class HttpSettings:
    """How one provider instance talks to its endpoint. Built from the scenario's `llm` section
    and the environment (machine properties such as the concurrency limit live there, so every
    process of an audit sees the same)."""

    base_url: str
    api_key_env: str | None = None
    timeout_seconds: float = 60.0
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    retries: int = DEFAULT_RETRIES
    """Attempts after the first on 429, 5xx, timeouts and dropped connections."""
    backoff_seconds: float = DEFAULT_BACKOFF_SECONDS
    """The first backoff; each retry doubles it (with jitter) up to `backoff_cap_seconds`."""
    backoff_cap_seconds: float = 30.0
    retry_after_cap_seconds: float = 120.0
    """A Retry-After longer than this fails the call at once instead of stalling the run."""
    budget_calls: int | None = None
    """Most HTTP requests this instance sends (retries included); None = no limit."""
    budget_tokens: int | None = None
    """Most prompt + completion tokens this instance spends; None = no limit."""

    @classmethod
    def from_config(cls, config: LLMConfig, env: Mapping[str, str] | None = None) -> HttpSettings:
        """Settings for `config`; fields the schema may not have yet are read with getattr, and
        a scenario value wins over the environment, which wins over the default."""
        environ = os.environ if env is None else env
        if not config.base_url:
            raise config_error(
                "the openai provider needs llm.baseUrl, e.g. http://127.0.0.1:8000/v1 for a local "
                "server or https://api.openai.com/v1 for the hosted API"
            )
        concurrency = _first(
            getattr(config, "max_concurrency", None),
            _env_number(environ, ENV_MAX_CONCURRENCY, int),
            DEFAULT_MAX_CONCURRENCY,
        )
        return cls(
            base_url=chat_base_url(config.base_url),
            api_key_env=config.api_key_env or None,
            timeout_seconds=float(config.timeout_seconds),
            max_concurrency=max(1, int(concurrency)),
            retries=int(
                _first(
                    getattr(config, "retries", None),
                    _env_number(environ, ENV_RETRIES, int),
                    DEFAULT_RETRIES,
                )
            ),
            backoff_seconds=float(
                _first(_env_number(environ, ENV_BACKOFF, float), DEFAULT_BACKOFF_SECONDS)
            ),
            budget_calls=getattr(config, "budget_calls", None),
            budget_tokens=getattr(config, "budget_tokens", None),
        )


def chat_base_url(base_url: str) -> str:
    """The API root that `/chat/completions` is appended to. A bare host gets `/v1` (what vLLM,
    llama.cpp, Ollama and the hosted API serve); a pasted full endpoint loses its tail. A query
    (`?api-version=…`, `?api_key=…`) stays a query; a fragment, never sent, is dropped."""
    parts = http_url(base_url)
    if parts is None:
        raise config_error(f"llm.baseUrl {redact_url(base_url)!r} is not an http(s) URL")
    if is_redacted(base_url):
        # A scenario.json or plan.json read back: sending the marker as a password would fail
        # with a misleading 401, or worse, reach a server that ignores it.
        raise config_error(
            f"llm.baseUrl {redact_url(base_url)!r} carries credentials that were redacted when "
            f"it was written ({MARK}); give the real URL, e.g. with --base-url"
        )
    path = parts.path.rstrip("/")
    if path.endswith("/chat/completions"):
        path = path[: -len("/chat/completions")]
    return urlunsplit((parts.scheme, parts.netloc, path or "/v1", parts.query, ""))


def chat_completions_url(base_url: str) -> str:
    """The Chat Completions endpoint under the API root `base_url` (its query kept at the end)."""
    parts = urlsplit(chat_base_url(base_url))
    path = parts.path + "/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def read_api_key(env_name: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The key held by the variable `env_name` names; None when no variable is named. A named but
    unset variable is an error that names the variable (never a value)."""
    if not env_name:
        return None
    value = (os.environ if env is None else env).get(env_name, "")
    if not value.strip():
        raise config_error(
            f"llm.apiKeyEnv names the environment variable {env_name}, which is not set",
            kind="MissingApiKey",
        )
    key = value.strip()
    if not usable_in_header(key):
        # Refused here, before an HTTP library refuses the header quoting the value.
        raise config_error(
            f"the environment variable {env_name} does not hold a usable key: it has a line "
            "break, a control character or a character outside ASCII",
            kind="BadApiKey",
        )
    return key


def usable_in_header(value: str) -> bool:
    """Whether `value` can be sent in an HTTP header as it is (visible ASCII and spaces)."""
    return value.isascii() and all(" " <= c <= "~" or c == "\t" for c in value)


# --------------------------------------------------------------------------- wire format


def answer_schema(options: Sequence[str]) -> dict[str, Any]:
    """The response format that constrains an answer to one of `options`."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"answer": {"type": "string", "enum": list(options)}},
                "required": ["answer"],
                "additionalProperties": False,
            },
        },
    }


def request_body(request: ChatRequest, features: frozenset[str]) -> dict[str, Any]:
    """The JSON body of one Chat Completions request with the optional `features` it may use."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [{"role": m.role, "content": m.content} for m in request.messages],
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }
    if SEED in features:
        body["seed"] = request.seed
    if STRUCTURED in features and request.options:
        body["response_format"] = answer_schema(request.options)
    return body


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_ANSWER_FIELD = re.compile(r'"(answer|choice|option|action)"\s*:\s*"((?:[^"\\]|\\.)*)"')


def answer_text(content: str) -> str:
    """The answer inside a model's reply: reasoning blocks and code fences removed, and the value
    of an `answer` field taken out of a JSON object, even one cut off after that field. Anything
    else comes back stripped, for the prompt's answer parser to judge."""
    text = _FENCE.sub("", _THINK.sub("", content).strip()).strip()
    start, end = text.find("{"), text.rfind("}")
    if start >= 0 and end > start:
        try:
            value = json.loads(text[start : end + 1])
        except ValueError:
            value = None
        if isinstance(value, dict):
            for key in ("answer", "choice", "option", "action"):
                if isinstance(value.get(key), str):
                    return str(value[key]).strip()
    if start >= 0:
        match = _ANSWER_FIELD.search(text[start:])
        if match:
            try:
                return str(json.loads(f'"{match.group(2)}"')).strip()
            except ValueError:
                return match.group(2).strip()
    return text


def _content_of(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _usage(data: Mapping[str, Any]) -> tuple[int, int] | None:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if isinstance(prompt, int) and isinstance(completion, int) and prompt >= 0 and completion >= 0:
        return prompt, completion
    return None


def parse_completion(raw: bytes, request: ChatRequest) -> ChatResponse:
    """A ChatResponse from a 2xx body; ProviderError(BadResponse) when it is not a completion."""
    try:
        data = json.loads(raw)
    except ValueError:
        snippet = raw[:120].decode("utf-8", "replace")
        raise ProviderError(
            f"the server's reply is not valid JSON: {snippet!r}", kind="BadResponse"
        ) from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ProviderError("the server's reply has no choices", kind="BadResponse")
    content = _content_of(choices[0].get("message"))
    text = answer_text(content)
    extra: dict[str, Any] = {}
    finish = choices[0].get("finish_reason")
    if isinstance(finish, str):
        extra["finishReason"] = finish
    if text != content:
        extra["raw"] = content
    usage = _usage(data)
    if usage is None:
        extra["usageEstimated"] = True
        usage = (
            sum(estimate_tokens(m.content) for m in request.messages),
            estimate_tokens(content) if content else 0,
        )
    return ChatResponse(text=text, prompt_tokens=usage[0], completion_tokens=usage[1], extra=extra)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date), or None."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.now(UTC).timestamp() if now is None else now
        return max(0.0, when.timestamp() - current)
    return max(0.0, seconds) if math.isfinite(seconds) else None


# --------------------------------------------------------------------------- transport


class ChatEndpoint:
    """One Chat Completions endpoint: its URL, credentials and a pooled, thread-safe client."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout_seconds: float,
        max_connections: int = DEFAULT_MAX_CONCURRENCY,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = chat_base_url(base_url)
        self.url = chat_completions_url(self.base_url)
        self.shown_url = redact_url(self.url)
        """The endpoint as messages show it: userinfo and key-like query values redacted."""
        import httpx

        self._api_key = api_key
        self._secrets = (api_key, *url_secrets(self.url))
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(timeout_seconds, connect=min(timeout_seconds, 10.0)),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            transport=transport,
            trust_env=False,  # proxies from the environment must not see prompts or the key
        )

    def post(self, body: Mapping[str, Any]) -> httpx.Response:
        """POST `body`; httpx exceptions propagate for the caller to classify."""
        return self._client.post(self.url, content=json.dumps(body).encode("utf-8"))

    def redact(self, text: str) -> str:
        """`text` with the API key and the URL's credentials blanked out (a server may echo
        request headers or the URL), and every URL in it redacted."""
        return redact_secrets(text, self._secrets)

    def redact_bytes(self, raw: bytes) -> bytes:
        """A body with the API key and the URL's credentials blanked out, before any of it is
        parsed or quoted."""
        # Only credentials long enough not to be words: a 2xx body is data (the model's answer),
        # and a short password such as "open" must not rewrite it.
        long_enough = (s for s in self._secrets if s and (s == self._api_key or len(s) >= 8))
        for secret in sorted(long_enough, key=len, reverse=True):
            raw = raw.replace(secret.encode(), b"[redacted]")
        return raw

    def close(self) -> None:
        self._client.close()


def _transport_failure(exc: httpx.TransportError) -> tuple[str, str]:
    import httpx

    detail = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return "Timeout", f"timed out ({type(exc).__name__}: {detail})"
    if isinstance(exc, httpx.ConnectError):
        return "ConnectionFailed", f"could not connect ({detail})"
    return "ConnectionFailed", f"connection failed ({type(exc).__name__}: {detail})"


def _error_detail(response: httpx.Response, redact: Callable[[str], str]) -> str:
    """The server's error text, with the key blanked out before it is cut short (so no part of
    it survives the cut)."""
    text = redact(response.text)
    try:
        data = json.loads(text)
    except ValueError:
        return text[:200].strip()
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:200]
        if isinstance(error, str):
            return error[:200]
    return text[:200].strip()


# --------------------------------------------------------------------------- provider


class OpenAIProvider(Provider):
    """Chat Completions over HTTP; one instance per run (see the module docstring)."""

    name = "openai"

    def __init__(
        self,
        config: LLMConfig,
        *,
        settings: HttpSettings | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Sleep = interrupt.pause,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`sleep` waits out a backoff; `clock` (epoch seconds) dates a Retry-After given as an
        HTTP date."""
        super().__init__(config)
        self.settings = settings if settings is not None else HttpSettings.from_config(config, env)
        # Checked now, so a missing key fails the run before it starts; the HTTP client itself
        # (tens of milliseconds to build) waits for the first call, which a run answered wholly
        # from the cache never makes.
        self._api_key = read_api_key(self.settings.api_key_env, env)
        self._transport = transport
        self._endpoint: ChatEndpoint | None = None
        self._sleep = sleep
        self._clock = clock
        self._random = random.Random()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.settings.max_concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._unsupported: set[str] = set()
        self.calls_sent = 0
        self.tokens_spent = 0

    # ----------------------------------------------------------------- public

    def complete(self, request: ChatRequest) -> ChatResponse:
        with self._slots:
            try:
                return self._complete(request)
            except ProviderError as exc:
                raise self._redacted(exc) from None

    def _redacted(self, error: ProviderError) -> ProviderError:
        """`error` with the API key and the base URL's credentials blanked out of its message:
        every failure of a request passes here, so no path (a body quoted in a message, an
        exception's text, the endpoint's URL) can carry them."""
        secrets = (self._api_key, *url_secrets(self.settings.base_url))
        message = redact_secrets(error.message, secrets)
        if message == error.message:
            return error
        clean = ProviderError(message, kind=error.kind, attempts=error.attempts)
        clean.stage = error.stage
        return clean

    def complete_many(self, requests: Sequence[ChatRequest]) -> list[ChatResponse | ProviderError]:
        """All requests overlapped up to the concurrency limit; results in request order."""
        if len(requests) <= 1:
            return super().complete_many(requests)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self.settings.max_concurrency, thread_name_prefix="simreport-llm"
                )
            pool = self._pool
        return list(pool.map(self._complete_or_error, requests))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.config.model,
            "baseUrl": redact_url(self.settings.base_url),
            "apiKeyEnv": self.settings.api_key_env,
            "structuredOutput": STRUCTURED not in self._unsupported,
            "seed": SEED not in self._unsupported,
            "maxConcurrency": self.settings.max_concurrency,
        }

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            endpoint, self._endpoint = self._endpoint, None
        if endpoint is not None:
            endpoint.close()

    @property
    def endpoint(self) -> ChatEndpoint:
        with self._lock:
            if self._endpoint is None:
                self._endpoint = ChatEndpoint(
                    self.settings.base_url,
                    self._api_key,
                    timeout_seconds=self.settings.timeout_seconds,
                    max_connections=self.settings.max_concurrency,
                    transport=self._transport,
                )
            return self._endpoint

    @property
    def supports(self) -> frozenset[str]:
        """The optional features still believed supported (`response_format`, `seed`)."""
        with self._lock:
            return frozenset({STRUCTURED, SEED} - self._unsupported)

    # ----------------------------------------------------------------- internals

    def _complete_or_error(self, request: ChatRequest) -> ChatResponse | ProviderError:
        try:
            return self.complete(request)
        except ProviderError as exc:
            return exc

    def _spend_call(self) -> None:
        s = self.settings
        with self._lock:
            if s.budget_calls is not None and self.calls_sent >= s.budget_calls:
                raise ProviderError(
                    f"the call budget of {s.budget_calls} requests is used up",
                    kind="BudgetExhausted",
                )
            if s.budget_tokens is not None and self.tokens_spent >= s.budget_tokens:
                raise ProviderError(
                    f"the token budget of {s.budget_tokens} tokens is used up "
                    f"({self.tokens_spent} spent)",
                    kind="BudgetExhausted",
                )
            self.calls_sent += 1

    def _backoff(self, attempt: int) -> float:
        s = self.settings
        ceiling = min(s.backoff_cap_seconds, s.backoff_seconds * 2.0 ** (attempt - 1))
        # "Equal jitter": at least half the exponential delay, so retries neither synchronise
        # across workers nor collapse to zero.
        return ceiling * (0.5 + 0.5 * self._random.random())

    def _complete(self, request: ChatRequest) -> ChatResponse:
        import httpx

        endpoint = self.endpoint
        features = self.supports
        dropped: set[str] = set()
        attempt = 0
        while True:
            # Before every attempt, retries included: a stopped run sends nothing more.
            interrupt.check()
            self._spend_call()
            wait: float | None = None
            try:
                response = endpoint.post(request_body(request, features))
            except httpx.TransportError as exc:
                kind, message = _transport_failure(exc)
            except httpx.HTTPError as exc:  # undecodable body, redirect loop: not transient
                raise ProviderError(
                    f"POST {endpoint.shown_url}: {type(exc).__name__}: {endpoint.redact(str(exc))}",
                    kind="BadResponse",
                ) from None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    result = parse_completion(endpoint.redact_bytes(response.content), request)
                    with self._lock:
                        self._unsupported |= dropped
                        self.tokens_spent += result.prompt_tokens + result.completion_tokens
                    return result
                detail = _error_detail(response, endpoint.redact)
                message = f"HTTP {status}" + (f": {detail}" if detail else "")
                sent = features & ({SEED} | ({STRUCTURED} if request.options else set()))
                if status == 400 and sent:
                    # Not a retry: the same request without the feature the server refused.
                    feature = _refused_feature(detail, sent)
                    features, dropped = features - {feature}, dropped | {feature}
                    continue
                if status == 429:
                    kind = "RateLimited"
                elif status >= 500 or status == 408:
                    kind = "ServerError"
                else:
                    raise ProviderError(
                        f"POST {endpoint.shown_url} was refused: {message}",
                        kind="BadRequest" if status == 400 else "HTTPStatus",
                    )
                wait = parse_retry_after(response.headers.get("retry-after"), self._clock())
            attempt += 1
            if attempt > self.settings.retries:
                raise ProviderError(
                    f"POST {endpoint.shown_url} failed after {attempt} attempts: {message}",
                    kind=kind,
                    attempts=attempt,
                )
            if wait is not None and wait > self.settings.retry_after_cap_seconds:
                raise ProviderError(
                    f"POST {endpoint.shown_url}: the server asked to retry after {wait:.0f} s, "
                    f"longer than the {self.settings.retry_after_cap_seconds:.0f} s this provider "
                    f"waits ({message})",
                    kind=kind,
                )
            self._sleep(wait if wait is not None else self._backoff(attempt))


def _refused_feature(detail: str, sent: frozenset[str]) -> str:
    """Which optional feature a 400 refused: the one its message names, else the response format
    (the usual culprit), else the seed."""
    low = detail.lower()
    for feature in (STRUCTURED, SEED):
        if feature in sent and any(word in low for word in _FEATURE_WORDS[feature]):
            return feature
    return STRUCTURED if STRUCTURED in sent else SEED


@PROVIDERS.register("openai")
def _make(config: LLMConfig) -> Provider:
    return OpenAIProvider(config)


CACHED.add("openai")


__all__ = [
    "ChatEndpoint",
    "HttpSettings",
    "OpenAIProvider",
    "answer_schema",
    "answer_text",
    "chat_base_url",
    "parse_completion",
    "parse_retry_after",
    "read_api_key",
    "request_body",
]
