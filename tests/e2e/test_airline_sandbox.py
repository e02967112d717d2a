"""The airline example's hybrid mode as a newcomer runs it (examples/airline_desk/sandbox): the
payments sandbox as its own process, the example's policy pointed at it, and `simreport run` on
scenario-hybrid.yaml. The payments go through the sandbox and are recorded `backend: real`, the
sandbox's state holds them, its token is in no output, and it refuses a request without it."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from simreport.cli import main

AIRLINE = Path(__file__).resolve().parents[2] / "examples" / "airline_desk"
SANDBOX = AIRLINE / "sandbox" / "payments_sandbox.py"
TOKEN = "example-sandbox-token-3f9e1d"
STARTUP_GUARD = 60.0
"""How long the sandbox may take to print its URL (a guard against a hang, not a measurement)."""


def _first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(STARTUP_GUARD):
            raise AssertionError("the sandbox printed no URL")
    return process.stdout.readline().strip()


@pytest.fixture(scope="module")
def sandbox_url() -> Iterator[str]:
    env = {**os.environ, "PAYMENTS_SANDBOX_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, str(SANDBOX), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        url = _first_line(process)
        assert url.startswith("http://127.0.0.1:"), (url, process.poll())
        yield url
    finally:
        process.terminate()
        try:
            process.communicate(timeout=STARTUP_GUARD)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def _get(url: str, token: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(f"{url}/state", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _policy(url: str, folder: Path) -> Path:
    """The example's policy with the sandbox's URL and egress host replaced by `url`'s."""
    doc = yaml.safe_load((AIRLINE / "sandbox" / "policy.yaml").read_text(encoding="utf-8"))
    assert doc["sandboxes"]["payments"]["baseUrl"] == "http://127.0.0.1:8765"
    assert doc["egress"] == ["127.0.0.1:8765"]
    doc["sandboxes"]["payments"]["baseUrl"] = url
    doc["egress"] = [url.removeprefix("http://")]
    path = folder / "policy.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def test_the_example_pays_through_the_sandbox_and_records_it_as_real(
    sandbox_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PAYMENTS_SANDBOX_TOKEN", TOKEN)
    out = tmp_path / "run"
    argv = ["run", str(AIRLINE / "scenario-hybrid.yaml"), "--out", str(out), "--no-ledger"]
    assert main([*argv, "--policy", str(_policy(sandbox_url, tmp_path))]) == 0

    result = json.loads((out / "result.json").read_text(encoding="utf-8"))
    assert result["failure"] is None
    assert result["metrics"]["duplicatePayments"] == 0
    assert result["metrics"]["rebookedAndSatisfied"] == 1
    records = [
        json.loads(line)
        for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    backends = {
        (r["payload"]["tool"], r["payload"]["backend"])
        for r in records
        if r["type"] == "tool.request"
    }
    assert ("pay_fare_difference", "real") in backends
    assert ("rebook", "surrogate") in backends
    assert ("pay_fare_difference", "surrogate") not in backends

    # The sandbox holds the payment the run made; the token is in none of the run's files.
    status, state = _get(sandbox_url, TOKEN)
    assert status == 200
    payments = state["entities"]["payment"]
    assert [(p["bookingId"], p["state"]) for p in payments] == [("KX4821", "captured")]
    for path in out.rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_the_sandbox_refuses_a_request_without_its_token(sandbox_url: str) -> None:
    assert _get(sandbox_url, None) == (401, {"ok": False, "error": "unauthorized"})
    assert _get(sandbox_url, "not-the-token")[0] == 401
    assert _get(sandbox_url, TOKEN)[0] == 200


def test_the_sandbox_does_not_start_without_a_token() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PAYMENTS_SANDBOX_TOKEN"}
    done = subprocess.run(
        [sys.executable, str(SANDBOX), "--port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=STARTUP_GUARD,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert "PAYMENTS_SANDBOX_TOKEN" in done.stderr
