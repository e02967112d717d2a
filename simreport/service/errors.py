"""What the run service refuses: errors of simreport's one hierarchy (`ServiceError` is a
`SimreportError`), each with a stable `code` for programs and, for a 422, the located issues
({path, expected, message}). The queue, the tokens and the routes raise them; the HTTP status
each one answers with is decided in one table, `STATUS`, which the app's one exception handler
reads (refusals.py). The client has errors of its own (simreport.client), with the same codes
and statuses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ..core.errors import SimreportError


class ServiceError(SimreportError):
    """What the caller asked cannot be done: `code` a stable word for programs, `issues` the
    located problems of a 422 ({path, expected, message}), `retry_after` the seconds to wait
    before asking again (429, 503), `fields` what else the answer says, for programs (the
    cursor to resume from after a 410, the run a reused key started)."""

    code: str = "internal"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        retry_after: float | None = None,
        issues: Sequence[Mapping[str, Any]] = (),
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.fields = dict(fields or {})
        if code is not None:
            self.code = code
        self.retry_after = retry_after
        self.issues = [dict(issue) for issue in issues]

    @property
    def status(self) -> int:
        """The HTTP status that says so (`STATUS`)."""
        return status_of(self)

    def body(self) -> dict[str, Any]:
        """The error as a response body."""
        found: dict[str, Any] = {"code": self.code, "message": self.message, **self.fields}
        if self.issues:
            found["issues"] = self.issues
        return found


class Refused(ServiceError):
    """A request refused at the service's door, before it reaches the queue."""


class BadRequest(Refused):
    """A write without a usable Idempotency-Key."""

    code = "bad_request"


class Unauthenticated(Refused):
    """No token, an unknown one, or no tokens configured."""

    code = "unauthenticated"


class Forbidden(Refused):
    """The token may not use the namespace."""

    code = "forbidden"


class NotFound(ServiceError):
    """No such object in the caller's tenant (another tenant's are never revealed)."""

    code = "not_found"


class Conflict(ServiceError):
    """Read the state before anything else; retrying the same request will not help."""

    code = "conflict"


class LeaseLost(Conflict):
    """The worker no longer holds the run's lease: another ended it (reclaimed, cancelled)."""

    code = "lease_lost"


class Gone(ServiceError):
    """The cursor points before what is still kept; re-read the snapshot."""

    code = "gone"


class Unprocessable(ServiceError):
    """Fix the request and make a new one."""

    code = "unprocessable"


class QuotaExceeded(ServiceError):
    """The principal's runs pending or running reach its quota: retry after `retry_after`."""

    code = "quota_exceeded"


class QueueFull(ServiceError):
    """The queue's runs pending or running reach its limit: retry after `retry_after`."""

    code = "queue_full"


STATUS: Final[Mapping[type[ServiceError], int]] = {
    BadRequest: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Gone: 410,
    Unprocessable: 422,
    QuotaExceeded: 429,
    QueueFull: 503,
}
"""The HTTP status of each refusal, as the seed's error semantics read: 409 read the state, 410
re-read the snapshot, 422 fix and recreate, 429 and 503 retry after Retry-After. An error
answers with its nearest class's status; a ServiceError of no class here is the service's
own fault (500)."""


def status_of(error: ServiceError) -> int:
    """The HTTP status `error` answers with (`STATUS`)."""
    for cls in type(error).__mro__:
        if issubclass(cls, ServiceError) and cls in STATUS:
            return STATUS[cls]
    return 500


def issue(path: str, message: str, expected: str | None = None) -> dict[str, Any]:
    """One located problem of a 422."""
    return {"path": path, "expected": expected, "message": message}


def one_of(values: Sequence[str]) -> str:
    """What a field expects: one of `values`."""
    return "one of " + ", ".join(values)
