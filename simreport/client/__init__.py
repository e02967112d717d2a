"""A client for the run service's `/v1/sim` API (`SimClient`): one method per call, each
applying the service's error semantics itself. 429, 502–504, a dropped connection and a timeout
are retried, within bounds, with the same Idempotency-Key; 409 and 422 never are; a 410 on
events resumes from the run's snapshot. Whatever cannot be carried out raises a `RemoteError`
(a `SimreportError`) subclass named for the answer, never the server's error classes, and no
message holds the token. The design: docs/service.md.
"""

from .calls import SimClient, StartedRun
from .errors import (
    CursorExpired,
    InvalidRequest,
    MalformedRequest,
    NoSuchResource,
    NotAuthenticated,
    NotPermitted,
    RateLimited,
    RemoteError,
    ServiceUnavailable,
    StateConflict,
)
from .events import TERMINAL, EventPage
from .tokens import TOKEN_SETTING, load_token

__all__ = [
    "TERMINAL",
    "TOKEN_SETTING",
    "CursorExpired",
    "EventPage",
    "InvalidRequest",
    "MalformedRequest",
    "NoSuchResource",
    "NotAuthenticated",
    "NotPermitted",
    "RateLimited",
    "RemoteError",
    "ServiceUnavailable",
    "SimClient",
    "StartedRun",
    "StateConflict",
    "load_token",
]
