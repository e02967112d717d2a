"""`simreport doctor --llm`: one row per check of an endpoint, against the loopback server."""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from simreport.cli.doctor import register_cli
from simreport.core.errors import InputError
from simreport.doctor import DoctorRow, concurrency_row, doctor_rows, format_table
from tests.support.llm_server import FakeLLM, Reply

KEY_ENV = "SIMREPORT_TEST_DOCTOR_KEY"
SECRET = "sk-doctor-5a4b3c2d1e"


def _status(rows: list[DoctorRow]) -> dict[str, str]:
    return {r.check: r.status for r in rows}


def _numbers(detail: str) -> list[str]:
    """The numbers a detail states, in order."""
    return re.findall(r"\d+(?:\.\d+)?", detail)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="simreport")
    register_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


class ThreadClock:
    """A clock that advances `step` seconds at every read, separately in each thread: every
    request takes one step and so does a batch fired at once, as on a server that answers
    them all together; the machine's load cannot change what the check measures."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.reads = threading.local()

    def __call__(self) -> float:
        count = getattr(self.reads, "count", 0) + 1
        self.reads.count = count
        return count * self.step


def test_a_capable_endpoint_passes_every_check() -> None:
    with FakeLLM() as server:
        rows = doctor_rows(
            server.url,
            "test",
            KEY_ENV,
            parallel=4,
            env={KEY_ENV: SECRET},
            clock=ThreadClock(0.25),
        )
        assert server.headers[0]["authorization"] == f"Bearer {SECRET}"
    assert _status(rows) == {
        "endpoint": "ok",
        "api key": "ok",
        "reachable": "ok",
        "structured output": "ok",
        "seed": "ok",
        "usage reporting": "ok",
        "concurrency": "ok",
    }
    assert f"${KEY_ENV}" in format_table(rows) and SECRET not in format_table(rows)
    concurrency = next(r for r in rows if r.check == "concurrency")
    assert _numbers(concurrency.detail)[0] == "4"  # the requests fired together


def test_missing_features_are_warnings() -> None:
    with FakeLLM(structured=False, reject_seed=True, usage=False) as server:
        rows = doctor_rows(server.url, "test", parallel=2)
    status = _status(rows)
    assert status["structured output"] == "warn" and status["seed"] == "warn"
    assert status["usage reporting"] == "warn" and status["reachable"] == "ok"
    # Refused by the server (not accepted and ignored): its answer is named.
    assert "HTTP 400" in next(r.detail for r in rows if r.check == "structured output")


def test_an_ignored_seed_and_an_ignored_format_are_noticed() -> None:
    words = random.Random(1)

    def babble(body: dict[str, Any], options: list[str]) -> str:
        return f"word{words.random()}"

    with FakeLLM(answer=babble) as server:
        server.push(Reply(), Reply(content="alpha, I think"))
        rows = doctor_rows(server.url, "test", parallel=2)
    details = {r.check: r for r in rows}
    assert details["structured output"].status == "warn"
    assert details["seed"].status == "warn" and "seed ignored" in details["seed"].detail


def test_a_server_that_serves_one_request_at_a_time_is_a_concurrency_warning() -> None:
    # Four requests fired at once took four times one alone: one at a time.
    row = concurrency_row(4, single=0.25, wall=1.0, failed=[])
    assert row.status == "warn" and "SIMREPORT_MAX_CONCURRENCY=1" in row.detail
    assert concurrency_row(8, single=0.25, wall=1.0, failed=[]).detail.endswith(
        "SIMREPORT_MAX_CONCURRENCY=2"
    )
    assert concurrency_row(4, single=0.25, wall=0.4, failed=[]).status == "ok"
    assert concurrency_row(1, single=0.25, wall=0.3, failed=[]).status == "ok"
    assert concurrency_row(4, single=0.001, wall=1.0, failed=[]).status == "ok"
    failed = concurrency_row(4, single=0.25, wall=0.25, failed=["HTTP 500"])
    assert failed.status == "fail"


def test_the_concurrency_check_fires_its_requests_together() -> None:
    with FakeLLM(max_parallel=1) as server:
        rows = doctor_rows(server.url, "test", parallel=4, clock=ThreadClock(0.25))
    row = next(r for r in rows if r.check == "concurrency")
    # Every request answered; the batch of 4 is timed on the caller's own clock reads.
    # 4 requests in 0.25 s, the time of one alone.
    assert row.status == "ok" and _numbers(row.detail)[:2] == ["4", "0.25"]


def test_an_unreachable_endpoint_fails_without_a_traceback() -> None:
    server = FakeLLM().start()
    url = server.url
    server.stop()
    rows = doctor_rows(url, "test", timeout_seconds=2)
    status = _status(rows)
    assert status["reachable"] == "fail"
    assert {status[c] for c in ("structured output", "seed", "usage reporting", "concurrency")} == {
        "skip"
    }


def test_a_refused_key_fails_and_the_key_is_not_echoed() -> None:
    echo = json.dumps({"error": {"message": f"invalid key {SECRET}"}}).encode()
    with FakeLLM() as server:
        server.push(Reply(status=401, body=echo))
        rows = doctor_rows(server.url, "test", KEY_ENV, env={KEY_ENV: SECRET})
    reachable = next(r for r in rows if r.check == "reachable")
    assert reachable.status == "fail" and "HTTP 401" in reachable.detail
    assert SECRET not in format_table(rows)


def test_a_missing_key_and_a_bad_url() -> None:
    rows = doctor_rows("http://127.0.0.1:9/v1", "test", KEY_ENV, env={})
    assert _status(rows)["api key"] == "fail" and _status(rows)["reachable"] == "skip"
    with pytest.raises(InputError) as caught:
        doctor_rows("localhost:8000", "test")
    assert caught.value.path == "llm.baseUrl"


def test_format_table_aligns_columns() -> None:
    table = format_table([DoctorRow("a", "ok", "fine"), DoctorRow("longer check", "warn", "hm")])
    lines = table.splitlines()
    assert lines[0].startswith("check") and len(lines) == 4
    assert lines[2].index("ok") == lines[3].index("warn") == lines[0].index("status")


def test_the_doctor_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError) as caught:
        _cli(["doctor"])
    assert caught.value.expected == "--llm"
    with pytest.raises(InputError) as caught:
        _cli(["doctor", "--llm", "--model", "m"])
    assert caught.value.path == "llm.baseUrl"
    with FakeLLM() as server:
        assert _cli(["doctor", "--llm", "--base-url", server.url, "--model", "test"]) == 0
        assert "structured output" in capsys.readouterr().out
        scenario = tmp_path / "scenario.yaml"
        scenario.write_text(
            "world: prisoners_dilemma\n"
            f"llm: {{provider: openai, baseUrl: '{server.url}', model: test}}\n"
        )
        # One request at a time: how many a loaded machine serves at once is wall time, which
        # concurrency_row's own tests judge from given figures.
        command = ["doctor", "--llm", "--scenario", str(scenario), "--json", "--parallel", "1"]
        assert _cli(command) == 0
        rows = json.loads(capsys.readouterr().out)
        assert {r["status"] for r in rows} == {"ok"}
        url = server.url
    assert _cli(["doctor", "--llm", "--base-url", url, "--model", "t", "--timeout", "2"]) == 3
    with pytest.raises(InputError, match="--parallel"):
        _cli(["doctor", "--llm", "--base-url", url, "--model", "t", "--parallel", "0"])
