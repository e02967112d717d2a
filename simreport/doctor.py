"""The doctor checks an OpenAI-compatible endpoint before an audit spends calls on it (`simreport
doctor --llm` prints its rows).

The doctor sends a handful of small requests and reports, one row per check: is the endpoint
reachable with these credentials, does it honour JSON-schema response formats, does it take a
seed (and does the same seed give the same reply), does it report token usage, and how many
requests it really serves at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from .core.errors import EXIT_RUN_FAILED, InputError
from .core.redaction import redact_url
from .kernel.providers.base import ChatRequest, Message, ProviderError
from .kernel.providers.openai import (
    DEFAULT_MAX_CONCURRENCY,
    ENV_MAX_CONCURRENCY,
    ChatEndpoint,
    answer_schema,
    answer_text,
    chat_base_url,
    chat_completions_url,
    parse_completion,
    read_api_key,
)

if TYPE_CHECKING:
    import httpx

Status = Literal["ok", "warn", "fail", "skip"]
EXIT_CHECK_FAILED = EXIT_RUN_FAILED
"""`simreport doctor`: at least one check failed (warnings exit 0)."""

_OPTIONS = ("alpha", "beta")


@dataclass(frozen=True)
class DoctorRow:
    """One check of the doctor's table."""

    check: str
    status: Status
    detail: str


@dataclass
class _Call:
    status: int | None
    seconds: float
    body: bytes = b""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    def describe(self, endpoint: ChatEndpoint) -> str:
        if self.status is None:
            return self.error
        text = endpoint.redact(self.body[:160].decode("utf-8", "replace")).strip()
        return f"HTTP {self.status}" + (f": {text}" if text and not self.ok else "")


Clock = Callable[[], float]
"""Seconds from an arbitrary origin (`time.perf_counter`); tests inject their own."""


def _call(endpoint: ChatEndpoint, body: Mapping[str, Any], clock: Clock) -> _Call:
    import httpx

    start = clock()
    try:
        response = endpoint.post(body)
    except httpx.TransportError as exc:
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return _Call(None, clock() - start, error=endpoint.redact(error))
    return _Call(response.status_code, clock() - start, response.content)


def _request(model: str, text: str, *, options: Sequence[str] = (), seed: int = 0) -> ChatRequest:
    return ChatRequest(
        messages=(Message("user", text),),
        model=model,
        temperature=0.0,
        max_tokens=16,
        seed=seed,
        options=tuple(options),
    )


def _plain_body(model: str, text: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "temperature": 0.0,
        "max_tokens": 16,
    }
    body.update(extra)
    return body


def doctor_rows(
    base_url: str,
    model: str,
    api_key_env: str | None = None,
    *,
    parallel: int = DEFAULT_MAX_CONCURRENCY,
    timeout_seconds: float = 30.0,
    transport: httpx.BaseTransport | None = None,
    env: Mapping[str, str] | None = None,
    clock: Clock = time.perf_counter,
) -> list[DoctorRow]:
    """Check one endpoint; never raises for what the endpoint does (that is what the rows say).
    `clock` times the requests (the concurrency check compares a batch's time with one call's).
    Raises InputError for a base URL that is not an http(s) URL."""
    try:
        root = chat_base_url(base_url)
    except ProviderError as exc:
        raise InputError(exc.message, path="llm.baseUrl", expected="an http(s) URL") from None
    shown = redact_url(chat_completions_url(root))
    rows = [DoctorRow("endpoint", "ok", f"{shown}, model {model!r}")]
    try:
        key = read_api_key(api_key_env, env)
    except ProviderError as exc:
        return [*rows, DoctorRow("api key", "fail", exc.message), *_skipped("no api key")]
    rows.append(
        DoctorRow("api key", "ok", f"read from ${api_key_env}")
        if key
        else DoctorRow("api key", "ok", "none (llm.apiKeyEnv is not set)")
    )
    parallel = max(1, parallel)
    endpoint = ChatEndpoint(
        root, key, timeout_seconds=timeout_seconds, max_connections=parallel, transport=transport
    )
    try:
        # Every detail passes the endpoint's redaction: a server may echo the URL, the key or
        # the Basic credentials httpx made of the URL's userinfo.
        checked = _checks(endpoint, model, parallel, clock)
        return rows + [replace(r, detail=endpoint.redact(r.detail)) for r in checked]
    finally:
        endpoint.close()


_LATER = ("structured output", "seed", "usage reporting", "concurrency")


def _skipped(reason: str, checks: Sequence[str] = ("reachable", *_LATER)) -> list[DoctorRow]:
    return [DoctorRow(check, "skip", reason) for check in checks]


def _checks(endpoint: ChatEndpoint, model: str, parallel: int, clock: Clock) -> list[DoctorRow]:
    rows: list[DoctorRow] = []
    prompt = "Reply with the single word: ok"
    first = _call(endpoint, _plain_body(model, prompt), clock)
    if not first.ok:
        rows.append(DoctorRow("reachable", "fail", first.describe(endpoint)))
        return rows + _skipped("the endpoint did not answer", _LATER)
    try:
        reply = parse_completion(first.body, _request(model, prompt))
    except ProviderError as exc:
        rows.append(DoctorRow("reachable", "fail", f"HTTP {first.status}, but {exc.message}"))
        return rows + _skipped("the endpoint's replies are unreadable", _LATER)
    rows.append(DoctorRow("reachable", "ok", f"HTTP {first.status} in {first.seconds:.2f} s"))
    rows.append(_structured(endpoint, model, clock))
    rows.append(_seed(endpoint, model, clock))
    if reply.extra.get("usageEstimated"):
        rows.append(
            DoctorRow("usage reporting", "warn", "no usage in replies: token costs are estimated")
        )
    else:
        rows.append(
            DoctorRow(
                "usage reporting",
                "ok",
                f"{reply.prompt_tokens} prompt + {reply.completion_tokens} completion tokens",
            )
        )
    rows.append(_concurrency(endpoint, model, parallel, first.seconds, clock))
    return rows


def _structured(endpoint: ChatEndpoint, model: str, clock: Clock) -> DoctorRow:
    check = "structured output"
    text = f"Pick one. Answer with exactly one of: {', '.join(_OPTIONS)}."
    call = _call(endpoint, _plain_body(model, text, response_format=answer_schema(_OPTIONS)), clock)
    if call.status == 400:
        return DoctorRow(
            check,
            "warn",
            f"response_format refused ({call.describe(endpoint)}); answers will be parsed from "
            "text",
        )
    if not call.ok:
        return DoctorRow(check, "fail", call.describe(endpoint))
    try:
        data = json.loads(call.body)
        content = data["choices"][0]["message"]["content"]
        value = json.loads(content)
    except (ValueError, KeyError, IndexError, TypeError):
        return DoctorRow(
            check, "warn", "response_format accepted but not followed; answers parsed from text"
        )
    if isinstance(value, dict) and value.get("answer") in _OPTIONS:
        return DoctorRow(check, "ok", "JSON-schema response format honoured")
    return DoctorRow(check, "warn", f"response_format accepted, but the reply was {content[:60]!r}")


def _seed(endpoint: ChatEndpoint, model: str, clock: Clock) -> DoctorRow:
    check = "seed"
    body = _plain_body(
        model, "Write one random English word.", temperature=1.0, seed=1234567, max_tokens=8
    )
    calls = [_call(endpoint, body, clock) for _ in range(2)]
    if calls[0].status == 400:
        return DoctorRow(
            check, "warn", f"seed refused ({calls[0].describe(endpoint)}); it will not be sent"
        )
    failed = next((c for c in calls if not c.ok), None)
    if failed is not None:
        return DoctorRow(check, "fail", failed.describe(endpoint))
    try:
        texts = [
            answer_text(json.loads(c.body)["choices"][0]["message"]["content"] or "") for c in calls
        ]
    except (ValueError, KeyError, IndexError, TypeError):
        return DoctorRow(check, "warn", "seed accepted; the replies could not be compared")
    if texts[0] == texts[1]:
        return DoctorRow(
            check, "ok", "accepted; the same seed gave the same reply at temperature 1"
        )
    return DoctorRow(
        check, "warn", "accepted, but the same seed gave different replies (seed ignored?)"
    )


def _concurrency(
    endpoint: ChatEndpoint, model: str, parallel: int, single: float, clock: Clock
) -> DoctorRow:
    body = _plain_body(model, "Reply with the single word: ok")
    # One untimed round opens the connections, so connection set-up is not what gets timed.
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        list(pool.map(lambda _: _call(endpoint, body, clock), range(parallel)))
        single = min(single, _call(endpoint, body, clock).seconds)
        start = clock()
        calls = list(pool.map(lambda _: _call(endpoint, body, clock), range(parallel)))
        wall = clock() - start
    failed = [c.describe(endpoint) for c in calls if not c.ok]
    return concurrency_row(parallel, single, wall, failed)


def concurrency_row(parallel: int, single: float, wall: float, failed: Sequence[str]) -> DoctorRow:
    """Judge a concurrency measurement: `parallel` requests fired at once took `wall` seconds,
    one alone took `single`; `failed` describes the requests that failed. Fewer than half of
    them served at once is a warning with the concurrency to set."""
    check = "concurrency"
    in_flight = min(float(parallel), parallel * single / wall) if wall > 0 else float(parallel)
    detail = (
        f"{parallel} parallel requests in {wall:.2f} s (one alone: {single:.2f} s): "
        f"about {in_flight:.1f} served at once"
    )
    if failed:
        return DoctorRow(
            check,
            "fail",
            f"{len(failed)} of {parallel} failed, e.g. {failed[0]}",
        )
    if single < 0.01:
        # Replies this fast are dominated by client overhead: nothing to learn about the server.
        return DoctorRow(check, "ok", detail + " (too fast to measure overlap)")
    if parallel > 1 and in_flight < 0.5 * parallel:
        return DoctorRow(
            check, "warn", detail + f"; consider {ENV_MAX_CONCURRENCY}={round(in_flight) or 1}"
        )
    return DoctorRow(check, "ok", detail)


def format_table(rows: Sequence[DoctorRow]) -> str:
    """A plain-text table: check, status, detail."""
    header = DoctorRow("check", "ok", "detail")
    width_check = max(len(r.check) for r in [header, *rows])
    lines = [f"{'check':<{width_check}}  status  detail", f"{'-' * width_check}  ------  ------"]
    lines += [f"{r.check:<{width_check}}  {r.status:<6}  {r.detail}" for r in rows]
    return "\n".join(lines)


__all__ = ["EXIT_CHECK_FAILED", "DoctorRow", "concurrency_row", "doctor_rows", "format_table"]
