"""The client's errors: `RemoteError` (a `SimreportError`) and one subclass per kind of answer,
never the server's error classes. `refusal` turns a refused answer (its status and error body)
into one of them, with a message that says what to do next; every string the service sent
passes through the caller's `clean`, which takes the token out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ..core.errors import EXIT_INPUT, SimreportError

_MAX_ISSUES_SHOWN = 5


class RemoteError(SimreportError):
    """The service refused a request or could not be reached. `status` is the HTTP status (None
    when no answer came), `code` the service's error code, `body` its error object (`{"code",
    "message", …}`), `idempotency_key` the key a write was sent with (retry with it later to
    get the original answer rather than a second write), `attempts` how many requests were sent
    before giving up."""

    exit_code = EXIT_INPUT

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        body: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        idempotency_key: str | None = None,
        attempts: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body: dict[str, Any] = dict(body or {})
        self.retry_after = retry_after
        self.idempotency_key = idempotency_key
        self.attempts = attempts


class MalformedRequest(RemoteError):
    """400: the request is malformed (for instance a write without an Idempotency-Key)."""


class NotAuthenticated(RemoteError):
    """401: no token, or one the service does not know. The message names the token setting,
    never the token."""


class NotPermitted(RemoteError):
    """403: the token is known but may not act on this tenant or namespace."""


class NoSuchResource(RemoteError):
    """404: no such scenario, version, run or manifest (for this token's tenant)."""


class StateConflict(RemoteError):
    """409: read the state and do not retry. `state` is the run's current status when the
    client could read it (start_run with a reused key, cancel of a finished run)."""

    def __init__(
        self, message: str, *, state: Mapping[str, Any] | None = None, **details: Any
    ) -> None:
        super().__init__(message, **details)
        self.state: dict[str, Any] | None = dict(state) if state is not None else None


class CursorExpired(RemoteError):
    """410: the event cursor is older than the service's retention window, and no newer cursor
    could be found to resume from."""


class InvalidRequest(RemoteError):
    """422: the request cannot be carried out as it is; fix it and create anew. `errors` holds
    the located problems, each {path, message, expected}."""

    def __init__(
        self, message: str, *, errors: list[dict[str, Any]] | None = None, **details: Any
    ) -> None:
        super().__init__(message, **details)
        self.errors: list[dict[str, Any]] = list(errors or [])


class RateLimited(RemoteError):
    """429 after the allowed retries, or a Retry-After longer than the client waits."""


class ServiceUnavailable(RemoteError):
    """503 (or 502/504), a dropped connection or a timeout, after the allowed retries. A write
    can be sent again later with `idempotency_key`."""


_ERRORS: dict[int, type[RemoteError]] = {
    400: MalformedRequest,
    401: NotAuthenticated,
    403: NotPermitted,
    404: NoSuchResource,
    409: StateConflict,
    410: CursorExpired,
    422: InvalidRequest,
    429: RateLimited,
    502: ServiceUnavailable,
    503: ServiceUnavailable,
    504: ServiceUnavailable,
}


def refusal(
    what: str,
    response: httpx.Response,
    *,
    retry_after: float | None,
    key: str | None,
    attempts: int,
    token_source: str,
    max_wait: float,
    clean: Callable[[str], str],
) -> RemoteError:
    """The error a refused answer raises, named for its status.

    Args:
        what: the call, first in the message ("start run").
        response: the service's answer.
        retry_after: its Retry-After in seconds, if any.
        key: the Idempotency-Key the call was sent with, if any.
        attempts: how many times the call was sent.
        token_source: where the token came from, named for a 401 or 403.
        max_wait: the longest the client waits between attempts.
        clean: takes the token out of a text.

    Returns:
        A `RemoteError` subclass for the status (`RemoteError` itself for one without).
    """
    status = response.status_code
    error: dict[str, Any] = _scrubbed(_error_object(response), clean)
    code = str(error.get("code") or response.reason_phrase or "error").strip()
    text = str(error.get("message") or "").strip() or response.reason_phrase or "refused"
    message = f"{what}: {status} {code}: {text}"
    cls = _ERRORS.get(status, RemoteError)
    issues: list[dict[str, Any]] = []
    if cls is InvalidRequest:
        issues = _issues(error)
        shown = "; ".join(_issue_line(i) for i in issues[:_MAX_ISSUES_SHOWN])
        if shown:
            message += f" — {shown}"
        if len(issues) > _MAX_ISSUES_SHOWN:
            message += f" (and {len(issues) - _MAX_ISSUES_SHOWN} more)"
        message += "; fix the request and send it anew"
    elif cls is NotAuthenticated:
        message += (
            f"; the token is read from {token_source}: "
            "point it at a file holding a token the service knows"
        )
    elif cls is NotPermitted:
        message += f"; the token from {token_source} may not act on this tenant or namespace"
    elif cls in (RateLimited, ServiceUnavailable):
        if retry_after is not None and retry_after > max_wait:
            message += f" (the service asks to retry after {retry_after:g} s)"
        elif attempts > 1:
            message += f" (gave up after {attempts} attempts)"
        message += key_hint(key)
    details: dict[str, Any] = {"errors": issues} if cls is InvalidRequest else {}
    return cls(
        clean(message),
        status=status,
        code=code,
        body=error,
        retry_after=retry_after,
        idempotency_key=key,
        attempts=attempts,
        **details,
    )


def key_hint(key: str | None) -> str:
    """The end of a message that tells how to send a write again for its original answer."""
    return f"; send it again with Idempotency-Key {key}" if key else ""


def _scrubbed(value: Any, clean: Callable[[str], str]) -> Any:
    """A service's error object with `clean` applied to every string in it."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k)): _scrubbed(v, clean) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrubbed(v, clean) for v in value]
    return value


def _error_object(response: httpx.Response) -> dict[str, Any]:
    """The service's `{"error": {...}}`; FastAPI's `{"detail": ...}` and plain text too."""
    try:
        data = response.json()
    except ValueError:
        text = " ".join(response.text.split())[:300]
        return {"message": text} if text else {}
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict):
            return error
        if isinstance(error, str):
            return {"message": error}
        detail = data.get("detail")
        if isinstance(detail, list):
            return {"code": "unprocessable", "message": "invalid request", "issues": detail}
        if isinstance(detail, str):
            return {"message": detail}
    return {}


def _issues(error: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The located problems of a 422 as {path, message, expected}: the service's `issues`
    (or `errors`, `details`), or FastAPI's `loc`/`msg` items."""
    for name in ("issues", "errors", "details", "detail"):
        found = error.get(name)
        if isinstance(found, list):
            break
    else:
        return []
    out = []
    for item in found:
        if not isinstance(item, dict):
            out.append({"path": "", "message": str(item), "expected": None})
            continue
        path = item.get("path", item.get("loc", ""))
        if isinstance(path, list | tuple):
            path = ".".join(str(p) for p in path)
        message = item.get("message", item.get("msg", ""))
        out.append(
            {"path": str(path or ""), "message": str(message), "expected": item.get("expected")}
        )
    return out


def _issue_line(issue: Mapping[str, Any]) -> str:
    text = f"{issue['path']}: " if issue.get("path") else ""
    text += str(issue.get("message") or "invalid")
    if issue.get("expected"):
        text += f" (expected {issue['expected']})"
    return text
