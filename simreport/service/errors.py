"""What the run service refuses, as errors that carry a stable `code` for programs, the HTTP
status that says so, and for a 422 the located issues ({path, expected, message}). The queue's
functions raise them; the HTTP app turns them into answers in one place."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class ServiceError(Exception):
    """What the caller asked cannot be done: `status` is the HTTP status that says so, `code`
    a stable word for programs, `issues` the located problems of a 422 ({path, expected,
    message}), `retry_after` the seconds to wait before asking again (429, 503)."""

    status: int = 500
    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        issues: Sequence[Mapping[str, Any]] = (),
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """`fields`: what else the response body says, for programs (e.g. the cursor to resume
        from after a 410, the run a reused key started)."""
        super().__init__(message)
        self.message = message
        self.fields = dict(fields or {})
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.retry_after = retry_after
        self.issues = [dict(issue) for issue in issues]

    def body(self) -> dict[str, Any]:
        """The error as a response body."""
        found: dict[str, Any] = {"code": self.code, "message": self.message, **self.fields}
        if self.issues:
            found["issues"] = self.issues
        return found


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    """409: read the state before anything else; retrying the same request will not help."""

    status = 409
    code = "conflict"


class LeaseLost(Conflict):
    """The worker no longer holds the run's lease: another ended it (reclaimed, cancelled)."""

    code = "lease_lost"


class Gone(ServiceError):
    """410: the cursor points before what is still kept; re-read the snapshot."""

    status = 410
    code = "gone"


class Unprocessable(ServiceError):
    """422: fix the request and make a new one."""

    status = 422
    code = "unprocessable"


def issue(path: str, message: str, expected: str | None = None) -> dict[str, Any]:
    """One located problem of a 422."""
    return {"path": path, "expected": expected, "message": message}


def one_of(values: Sequence[str]) -> str:
    """What a field expects: one of `values`."""
    return "one of " + ", ".join(values)
