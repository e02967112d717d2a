"""A fake Chat Completions server on loopback, for tests and the LLM benchmark.

It binds 127.0.0.1 on a free port, serves `POST /v1/chat/completions` (and `GET /v1/models`) from
a thread, and can answer validly, answer through a JSON-schema response format, refuse features
with a 400, rate-limit with Retry-After, fail with 5xx, answer slowly, answer nothing until the
client hangs up, hold every request until told to answer, cut a body short or send malformed JSON.
It counts calls and the calls a client gave up on, keeps every request body and header, and tracks
how many requests were in flight at once. It never contacts any other address.

    with FakeLLM(latency=0.05, answer="hash") as server:
        server.push(Reply(status=429, headers={"Retry-After": "1"}))  # the next call only
        ... llm: {provider: openai, baseUrl: server.url, model: test} ...
        assert server.calls == ...
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER_MARK = "answer with exactly one of:"
HANG_LIMIT = 60.0
"""The longest a hanging reply or a held request waits: a guard against a hung test only."""

Answer = str | Callable[[dict[str, Any], list[str]], str]
"""How the server picks an answer: "first" (the first option), "hash" (an option chosen by a hash
of the messages and seed, so answers vary but repeat exactly), any other string (said as is), or
a function of (request body, options)."""


@dataclass
class Reply:
    """One scripted reply; the server uses queued replies first, in order, then its defaults."""

    status: int = 200
    content: str | None = None
    """Assistant content; None lets the server answer as configured."""
    body: bytes | None = None
    """A raw body sent as is (malformed JSON and the like); overrides everything else."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering, on top of the server's latency."""
    truncate: bool = False
    """Announce the whole body, send half of it, then drop the connection."""
    hang: bool = False
    """Answer nothing until the client hangs up (counted in `dropped`); a client that waits
    HANG_LIMIT seconds gets the answer after all, so one without a timeout is told apart."""
    usage: bool = True
    """Report token usage."""


def options_of(body: dict[str, Any]) -> list[str]:
    """The allowed answers of a request: the response format's enum, else the prompt's list."""
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        with contextlib.suppress(KeyError, TypeError):
            enum = fmt["json_schema"]["schema"]["properties"]["answer"]["enum"]
            return [str(o) for o in enum]
    messages = body.get("messages") or []
    text = str(messages[-1].get("content", "")) if messages else ""
    pos = text.lower().rfind(ANSWER_MARK)
    if pos < 0:
        return []
    line = text[pos + len(ANSWER_MARK) :].split("\n", 1)[0].strip().rstrip(".")
    return [part.strip() for part in line.split(",") if part.strip()]


def hashed_choice(body: dict[str, Any], options: list[str]) -> str:
    if not options:
        return "ok"
    digest = hashlib.sha256(
        json.dumps([body.get("messages"), body.get("seed")], sort_keys=True).encode()
    ).digest()
    return options[digest[0] % len(options)]


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


class FakeLLM:
    """The server; use as a context manager or call start() and stop()."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        answer: Answer = "first",
        structured: bool = True,
        reject_seed: bool = False,
        usage: bool = True,
        model: str = "test",
        max_parallel: int | None = None,
    ) -> None:
        self.latency = latency
        self.answer = answer
        self.structured = structured
        self.reject_seed = reject_seed
        self.usage = usage
        self.model = model
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.dropped = 0
        """Calls whose client hung up before any answer (see Reply.hang)."""
        self.held = 0
        """Requests waiting now to be answered (see `hold`)."""
        self.holds = 0
        """Requests that had to wait, all told."""
        self._answering = threading.Event()  # the gate requests arriving now pass or wait at
        self._answering.set()
        self._script: deque[Reply] = deque()
        # A server that serves only this many requests at once (the others queue).
        self._gate = threading.BoundedSemaphore(max_parallel) if max_parallel else None
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- control

    @property
    def url(self) -> str:
        """The base URL a client appends `/chat/completions` to."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the server is not running")
        return int(self._server.server_address[1])

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next calls, in order."""
        with self._lock:
            self._script.extend(replies)

    def hold(self) -> None:
        """From now on, answer no request until `answer_held` or `release`: each waits, counted
        in `held`."""
        with self._lock:
            if self._answering.is_set():
                self._answering = threading.Event()

    def answer_held(self) -> None:
        """Answer the requests held now; hold the later ones."""
        with self._lock:
            gate, self._answering = self._answering, threading.Event()
        gate.set()

    def release(self) -> None:
        """Answer the requests held, and every later one, as usual."""
        with self._lock:
            self._answering.set()

    def wait_until(self, check: Callable[[FakeLLM], bool], timeout: float = HANG_LIMIT) -> bool:
        """Whether `check(self)` came to hold within `timeout` seconds: the server's threads
        count a call a client hung up on a moment after the client has moved on."""
        deadline = time.monotonic() + timeout
        while not check(self):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def reset_counts(self) -> None:
        with self._lock:
            self.calls = self.prompt_tokens = self.completion_tokens = 0
            self.max_in_flight = 0
            self.requests.clear()
            self.headers.clear()

    def start(self) -> FakeLLM:
        owner = self

        class Handler(_Handler):
            server_owner = owner

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
        server.daemon_threads = True
        server.request_queue_size = 128
        server.server_bind()
        server.server_activate()
        server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and drop every open connection, as a killed server would."""
        server, self._server = self._server, None
        if server is None:
            return
        self.release()
        server.shutdown()
        server.server_close()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- answering

    def _next_reply(self) -> Reply | None:
        with self._lock:
            return self._script.popleft() if self._script else None

    def _choose(self, body: dict[str, Any]) -> str:
        options = options_of(body)
        if callable(self.answer):
            return self.answer(body, options)
        if self.answer == "first":
            return options[0] if options else "ok"
        if self.answer == "hash":
            return hashed_choice(body, options)
        return self.answer

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes, Reply]:
        """(status, headers, body, reply) for one request body."""
        with self._lock:
            gate = self._answering
            waits = not gate.is_set()
            if waits:
                self.held += 1
                self.holds += 1
        if waits:
            try:
                gate.wait(HANG_LIMIT)
            finally:
                with self._lock:
                    self.held -= 1
        if self._gate is None:
            return self._respond(body)
        with self._gate:
            return self._respond(body)

    def _respond(self, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes, Reply]:
        reply = self._next_reply() or Reply()
        time.sleep(self.latency + reply.delay)
        if reply.body is not None:
            return reply.status, reply.headers, reply.body, reply
        if reply.status != 200:
            error = {"error": {"message": f"scripted status {reply.status}", "type": "test"}}
            return reply.status, reply.headers, json.dumps(error).encode(), reply
        if "response_format" in body and not self.structured:
            error = {"error": {"message": "response_format is not supported", "type": "invalid"}}
            return 400, {}, json.dumps(error).encode(), reply
        if "seed" in body and self.reject_seed:
            error = {"error": {"message": "unknown field: seed", "type": "invalid"}}
            return 400, {}, json.dumps(error).encode(), reply
        answer = self._choose(body)
        if reply.content is not None:
            content = reply.content
        elif "response_format" in body:
            content = json.dumps({"answer": answer})
        else:
            content = answer
        data: dict[str, Any] = {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": body.get("model", self.model),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
        }
        if self.usage and reply.usage:
            prompt = sum(_tokens(str(m.get("content", ""))) for m in body.get("messages", []))
            completion = _tokens(content)
            data["usage"] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            with self._lock:
                self.prompt_tokens += prompt
                self.completion_tokens += completion
        return 200, reply.headers, json.dumps(data).encode(), reply


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_owner: FakeLLM

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every reply.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server_owner._lock:
            self.server_owner._sockets.add(self.connection)

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        with self.server_owner._lock:
            self.server_owner._sockets.discard(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _client_hung_up(self) -> bool:
        """Wait (HANG_LIMIT seconds at most) for the client to close the connection."""
        ready, _, _ = select.select([self.connection], [], [], HANG_LIMIT)
        if not ready:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:  # reset by the client: hung up all the same
            return True

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            owner = self.server_owner
            self._send(200, {}, json.dumps({"data": [{"id": owner.model}]}).encode())
        else:
            self._send(404, {}, b'{"error": {"message": "not found"}}')

    def do_POST(self) -> None:
        owner = self.server_owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/chat/completions":
            self._send(404, {}, b'{"error": {"message": "not found"}}')
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {}, b'{"error": {"message": "request body is not JSON"}}')
            return
        with owner._lock:
            owner.calls += 1
            owner.requests.append(body)
            owner.headers.append({k.lower(): v for k, v in self.headers.items()})
            owner.in_flight += 1
            owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
        try:
            status, headers, payload, reply = owner.respond(body)
            if reply.hang and self._client_hung_up():
                with owner._lock:
                    owner.dropped += 1
                self.close_connection = True
                return
        finally:
            with owner._lock:
                owner.in_flight -= 1
        if reply.truncate:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(status, headers, payload)
