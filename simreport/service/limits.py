"""What one HTTP connection may cost the run service, bounded where uvicorn reads it:
`limited_http` is uvicorn's httptools protocol with `Limits` on open connections (503), the time
and size of a request's headers (408, 431) and of its body (408, 413). A refusal is the
service's one error shape, sent with `Connection: close` before the application sees the
request. The design: docs/service.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from starlette.responses import Response

    from .config import ServiceSettings

MAX_HEADER_BYTES: Final = 64 * 1024
"""The most a request's line and headers may take."""
LINGER_SECONDS: Final = 2.0
"""How long a refused connection stays open to let its answer be read."""


@dataclass(frozen=True)
class Limits:
    """The bounds of each connection (see docs/service.md)."""

    max_connections: int
    header_timeout: float
    body_timeout: float
    max_body: int
    max_header_bytes: int = MAX_HEADER_BYTES

    @classmethod
    def of(cls, settings: ServiceSettings) -> Limits:
        return cls(
            max_connections=settings.max_connections,
            header_timeout=settings.header_timeout_seconds,
            body_timeout=settings.body_timeout_seconds,
            max_body=settings.max_body_bytes,
        )


Refusal = Callable[[int, str, str], "Response"]
"""The answer to a refused request: (status, code, message) → the service's error response."""


def limited_http(
    limits: Limits, refusal: Refusal, refused: Callable[[str], None]
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with `limits`, each refusal answered by `refusal` and its
    code told to `refused` (answered or not)."""
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

    def answer(status: int, code: str, message: str, default_headers: Any) -> bytes:
        response = refusal(status, code, message)
        head = [STATUS_LINE[response.status_code]]
        for name, value in [*default_headers, *response.raw_headers, (b"connection", b"close")]:
            head += [name, b": ", value, b"\r\n"]
        return b"".join([*head, b"\r\n", bytes(response.body)])

    class LimitedHttp(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._timer: asyncio.TimerHandle | None = None
            self._in_headers = True  # between requests, or before a request's headers end
            self._request_begun = False
            self._header_bytes = 0
            self._body_bytes = 0
            self._refused = False  # answered and closing: what arrives is dropped

        # ------------------------------------------------------------------- the connection

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > limits.max_connections:
                self._refuse(
                    503,
                    "too_many_connections",
                    f"the service has {limits.max_connections} connections open, its limit: "
                    "retry after Retry-After",
                )
                return
            self._set_timer(limits.header_timeout, self._headers_late)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._refused:
                return
            if self._in_headers:
                self._header_bytes += len(data)
            super().data_received(data)
            # Still no end of the headers: a header that never ends is buffered by the parser
            # whole, so it is counted here, as it arrives.
            if self._in_headers and self._header_bytes > limits.max_header_bytes:
                self._refuse(
                    431,
                    "headers_too_large",
                    f"the request's line and headers take more than {limits.max_header_bytes} "
                    "bytes",
                )

        # ------------------------------------------------------------------- parser callbacks

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._request_begun = True
            self._body_bytes = 0
            if self._timer is None:  # after a keep-alive wait; a new connection has one
                self._set_timer(limits.header_timeout, self._headers_late)

        def on_headers_complete(self) -> None:
            if self._refused:
                return
            self._in_headers = False
            self._cancel_timer()
            declared = _declared_body(self.headers)
            if declared > limits.max_body:
                self._too_large(current=False)
                return
            super().on_headers_complete()
            if declared:  # most requests have no body: no timer for them
                self._set_timer(limits.body_timeout, self._body_late)

        def on_body(self, body: bytes) -> None:
            if self._refused:
                return
            self._body_bytes += len(body)
            if self._body_bytes > limits.max_body:
                self._too_large(current=True)
                return
            super().on_body(body)

        def on_message_complete(self) -> None:
            if self._refused:
                return
            self._cancel_timer()
            self._in_headers = True
            self._request_begun = False
            self._header_bytes = 0
            super().on_message_complete()

        # ------------------------------------------------------------------- refusals

        def _headers_late(self) -> None:
            self._timer = None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                # An earlier request's answer is under way, and the parser waits for it:
                # the time is the service's, not the client's.
                self._set_timer(limits.header_timeout, self._headers_late)
                return
            if not self._request_begun:
                self.transport.close()  # idle: nothing to answer
                return
            self._refuse(
                408,
                "request_timeout",
                f"the request's headers did not arrive within {limits.header_timeout:g} s",
            )

        def _body_late(self) -> None:
            self._timer = None
            if self.pipeline:  # it waits behind an earlier request's answer, unread
                self._set_timer(limits.body_timeout, self._body_late)
                return
            self._refuse(
                408,
                "request_timeout",
                f"the request's body did not arrive within {limits.body_timeout:g} s",
                current=True,
            )

        def _too_large(self, *, current: bool) -> None:
            self._refuse(
                413,
                "body_too_large",
                f"the request's body is larger than {limits.max_body} bytes, the limit",
                current=current,
            )

        def _refuse(self, status: int, code: str, message: str, *, current: bool = False) -> None:
            """Answer `status` and close. `current`: the request refused is the one the app
            was given (its body is what is refused): the refusal replaces the app's answer if
            that has not begun, and is not sent if it has (an answer under way is cut). Else
            the refusal is sent unless an earlier request's answer is under way."""
            self._refused = True
            self._cancel_timer()
            refused(code)
            cycle = self.cycle
            if current:
                may_answer = not (cycle.response_started or self.pipeline)
                if may_answer:
                    # The app reads a disconnect; whatever it answers is dropped.
                    cycle.response_started = cycle.response_complete = True
                    cycle.disconnected = True
                    cycle.message_event.set()
            else:
                may_answer = cycle is None or cycle.response_complete
            if self.transport.is_closing():
                return
            if may_answer:
                default_headers = self.server_state.default_headers
                self.transport.write(answer(status, code, message, default_headers))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._set_timer(LINGER_SECONDS, self.transport.close)

        # ------------------------------------------------------------------- the one timer

        def _set_timer(self, seconds: float, then: Callable[[], None]) -> None:
            self._cancel_timer()
            self._timer = self.loop.call_later(seconds, then)

        def _cancel_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    return LimitedHttp


def _declared_body(headers: list[tuple[bytes, bytes]]) -> int:
    """The body the headers (names in lower case) announce: its Content-Length, 1 for a
    chunked one (its length is not known yet), 0 for none."""
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the parser refuses it
        if name == b"transfer-encoding":
            return 1
    return 0
