"""A payments sandbox for the airline example's hybrid mode (README.md beside it): it answers
`POST /tools/pay_fare_difference` and `POST /tools/get_payments` with a JSON object, and
`GET /state` with the payments it holds, as docs/testbed.md describes the protocol. Every
request must carry `Authorization: Bearer $PAYMENTS_SANDBOX_TOKEN` (401 without it). The
payments live in memory until the process ends. Standard library only.

    PAYMENTS_SANDBOX_TOKEN=... python payments_sandbox.py --port 8765

The first line it prints is the URL it listens on (`--port 0` picks a free port)."""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN_ENV = "PAYMENTS_SANDBOX_TOKEN"


class PaymentsSandbox(ThreadingHTTPServer):
    """The server and what it holds: the payments, and each request it received as (method,
    path, Authorization header). Without `serve_state`, `GET /state` is 404."""

    def __init__(self, address: tuple[str, int], token: str, *, serve_state: bool = True) -> None:
        super().__init__(address, PaymentsHandler)
        self.token = token
        self.serve_state = serve_state
        self.payments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def pay(self, booking_ref: str, amount_minor: int) -> dict[str, Any]:
        with self.lock:
            payment = {
                "id": f"SBX-{len(self.payments) + 1}",
                "bookingId": booking_ref,
                "amountMinor": amount_minor,
                "state": "captured",
            }
            self.payments.append(payment)
            return dict(payment)

    def payments_of(self, booking_ref: str) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(p) for p in self.payments if p["bookingId"] == booking_ref]


class PaymentsHandler(BaseHTTPRequestHandler):
    """One request to the sandbox."""

    server: PaymentsSandbox

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self, method: str) -> bool:
        header = self.headers.get("Authorization")
        with self.server.lock:
            self.server.requests.append((method, self.path, header))
        expected = f"Bearer {self.server.token}"
        if header is not None and hmac.compare_digest(header.encode(), expected.encode()):
            return True
        self._answer(401, {"ok": False, "error": "unauthorized"})
        return False

    def do_GET(self) -> None:
        if not self._authorized("GET"):
            return
        if self.path == "/state" and self.server.serve_state:
            with self.server.lock:
                payments = [dict(p) for p in self.server.payments]
            self._answer(200, {"entities": {"payment": payments}})
        else:
            self._answer(404, {"ok": False, "error": "not_found"})

    def do_POST(self) -> None:
        if not self._authorized("POST"):
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            args = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._answer(400, {"ok": False, "error": "bad_request", "message": "not JSON"})
            return
        ref = args.get("booking_ref") if isinstance(args, dict) else None
        if not isinstance(ref, str):
            self._answer(400, {"ok": False, "error": "bad_request", "message": "no booking_ref"})
            return
        if self.path == "/tools/pay_fare_difference":
            amount = args.get("amount_minor")
            if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
                message = "amount_minor must be a positive integer"
                self._answer(400, {"ok": False, "error": "bad_request", "message": message})
                return
            self._answer(200, {"ok": True, "payment": self.server.pay(ref, amount)})
        elif self.path == "/tools/get_payments":
            self._answer(200, {"ok": True, "payments": self.server.payments_of(ref)})
        else:
            self._answer(404, {"ok": False, "error": "unknown_tool"})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The airline example's payments sandbox.")
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--no-state",
        action="store_true",
        help="answer GET /state with 404: recoveries of faults on payments cannot be verified",
    )
    options = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV)
    if not token:
        print(f"set {TOKEN_ENV} to the bearer token the calls must carry", file=sys.stderr)
        return 2
    server = PaymentsSandbox((options.host, options.port), token, serve_state=not options.no_state)
    print(server.url, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
