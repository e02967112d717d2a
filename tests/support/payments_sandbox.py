"""The airline example's payments sandbox (examples/airline_desk/sandbox), served from a thread
of the test: the operator's real tool that hybrid runs call."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Any

AIRLINE = Path(__file__).resolve().parents[2] / "examples" / "airline_desk"
TOKEN = "sandbox-token-9c8b7a6d5e4f"


def _example_server() -> Any:
    """The example's payments sandbox module (examples/airline_desk/sandbox), loaded by path."""
    path = AIRLINE / "sandbox" / "payments_sandbox.py"
    spec = importlib.util.spec_from_file_location("airline_payments_sandbox", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAYMENTS_SANDBOX = _example_server()


class Sandbox:
    """The example's payments sandbox, served from a thread: pay_fare_difference and
    get_payments, and (when `state`) GET /state, each request carrying the bearer TOKEN."""

    def __init__(self, *, state: bool = True) -> None:
        self.server = PAYMENTS_SANDBOX.PaymentsSandbox(("127.0.0.1", 0), TOKEN, serve_state=state)
        self.url: str = self.server.url
        self.payments: list[dict[str, Any]] = self.server.payments
        self.requests: list[tuple[str, str, str | None]] = self.server.requests
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def posts(self, tool: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == "POST" and p == f"/tools/{tool}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
