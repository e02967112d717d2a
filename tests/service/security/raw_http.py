"""Raw HTTP/1.1 over a loopback socket, for the clients no HTTP library would be: slow,
oversized, or too many. Every read has a deadline."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass, field

from tests.support.service_helpers import TOKEN

ANSWER_WAIT = 20.0
"""The longest a test waits for an answer that should come at once or after a short timeout."""


@dataclass
class Answer:
    """What a raw connection read: one response (status None: none came) and whether the
    server closed the connection after it (or reset it)."""

    status: int | None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    closed: bool = False
    complete: bool = False


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=ANSWER_WAIT)
    return sock


def request_head(
    method: str, path: str, headers: dict[str, str] | None = None, *, token: bool = True
) -> bytes:
    """A request's line and headers, with the test token unless `token` is false."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if token:
        lines.append(f"Authorization: Bearer {TOKEN}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(
    sock: socket.socket, *, until_closed: bool = True, wait: float = ANSWER_WAIT
) -> Answer:
    """Read one response, and then (`until_closed`) on until the server closes the connection;
    for at most `wait` seconds in all."""
    deadline = time.monotonic() + wait
    data = b""
    closed = False
    while time.monotonic() < deadline:
        if not until_closed and _parse(data, closed).complete:
            break
        sock.settimeout(max(0.01, min(0.5, deadline - time.monotonic())))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    return _parse(data, closed)


def _parse(data: bytes, closed: bool) -> Answer:
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return Answer(None, closed=closed)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    return Answer(status, headers, body[:length], closed, complete=len(body) >= length)


def error_code(answer: Answer) -> str | None:
    """The `error.code` of an answer in the service's error shape."""
    try:
        code: str = json.loads(answer.body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code


def answered(sock: socket.socket) -> bool:
    """Whether the server has sent something (or closed) by now: a look, no wait."""
    sock.settimeout(0.0)
    try:
        return sock.recv(1, socket.MSG_PEEK) is not None
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(ANSWER_WAIT)
