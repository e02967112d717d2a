"""How a client's call reaches the run service (`Transport`, the base of `SimClient`): one HTTP
exchange, sent again within bounds. 429, 502–504, a dropped connection and a timeout are retried
with the same Idempotency-Key, after Retry-After or else an exponential backoff with jitter, and
never after a wait longer than `max_wait`; any other refusal raises at once (`errors.refusal`).
Answers are read as JSON objects, and no message holds the token."""

from __future__ import annotations

import email.utils
import math
import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Self

import httpx

from ..core.redaction import redact_secrets
from .errors import NotAuthenticated, RemoteError, ServiceUnavailable, key_hint, refusal
from .tokens import TOKEN_SETTING

RETRIED = frozenset({429, 502, 503, 504})
"""Answers worth asking again: rate limited, or the service (or its gateway) briefly away."""


class Transport:
    """The connections to one service, and the retries of each call made through them; a
    context manager that closes them. `SimClient` documents the arguments.

    Raises:
        RemoteError: the URL is not an http(s) URL.
        NotAuthenticated: the token is empty or holds white space.
        ValueError: a timeout that is not positive, or a negative retry setting.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 5,
        max_wait: float = 60.0,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        token_source: str = TOKEN_SETTING,
    ) -> None:
        url = base_url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise RemoteError(
                f"the service URL must start with http:// or https://, not {url!r}",
                code="bad_url",
            )
        if not token or any(c.isspace() for c in token):
            raise NotAuthenticated(
                f"the token from {token_source} is empty or holds white space",
                code="bad_token",
            )
        if max_retries < 0 or timeout <= 0 or max_wait < 0 or backoff < 0:
            raise ValueError("timeout must be positive; max_retries, max_wait, backoff >= 0")
        self.base_url = url
        self.max_retries = max_retries
        self.max_wait = max_wait
        self.backoff = backoff
        self.token_source = token_source
        self._token = token
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=url,
            timeout=timeout,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            follow_redirects=False,
        )

    def close(self) -> None:
        """Close the client's connections (leaving a `with` block does)."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(
        self, what: str, path: str, params: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        return _json_object(self._call(what, "GET", path, params=params), what)

    def _write(
        self, what: str, path: str, body: Mapping[str, Any], *, key: str | None
    ) -> dict[str, Any]:
        # One key per logical call, the same on every retry: the service answers a repeat
        # from its record instead of writing twice.
        key = key or str(uuid.uuid4())
        return _json_object(self._call(what, "POST", path, body=body, key=key), what)

    def _call(
        self,
        what: str,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Mapping[str, Any] | None = None,
        key: str | None = None,
    ) -> httpx.Response:
        headers = {"Idempotency-Key": key} if key else {}
        attempts = self.max_retries + 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._http.request(
                    method, path, params=params, json=body, headers=headers
                )
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if last:
                    raise ServiceUnavailable(
                        self._clean(
                            f"{what}: no answer from {self.base_url} after {attempts} "
                            f"attempt{'s' if attempts > 1 else ''} "
                            f"({type(exc).__name__}: {exc or 'connection lost'})"
                        )
                        + key_hint(key),
                        idempotency_key=key,
                        attempts=attempts,
                    ) from None
                self._sleep(self._pause(attempt, None))
                continue
            except httpx.HTTPError as exc:
                raise RemoteError(
                    self._clean(f"{what}: {type(exc).__name__}: {exc}"), idempotency_key=key
                ) from None
            if response.is_success:
                return response
            retry_after = _retry_after(response.headers.get("Retry-After"))
            if response.status_code in RETRIED and not last:
                wait = self._pause(attempt, retry_after)
                if wait <= self.max_wait:
                    self._sleep(wait)
                    continue
            raise refusal(
                what,
                response,
                retry_after=retry_after,
                key=key,
                attempts=attempt + 1,
                token_source=self.token_source,
                max_wait=self.max_wait,
                clean=self._clean,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    def _pause(self, attempt: int, retry_after: float | None) -> float:
        """Retry-After when the service gave one, else exponential backoff with jitter."""
        if retry_after is not None:
            return retry_after
        return min(self.max_wait, self.backoff * 2.0**attempt) * random.uniform(0.5, 1.0)

    def _clean(self, text: str) -> str:
        """Text without the token, wherever a server or a library may have echoed it."""
        return redact_secrets(text, [self._token])


def _json_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        raise RemoteError(
            f"{what}: the service answered {response.status_code} with a body that is not JSON",
            status=response.status_code,
            code="bad_body",
        ) from None
    if not isinstance(data, dict):
        raise RemoteError(
            f"{what}: the service answered {response.status_code} with JSON that is not an object",
            status=response.status_code,
            code="bad_body",
        )
    return data


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (a number or an HTTP date); None when absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - time.time()
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)
