"""Putting versions online in tests the way review does: the author submits, another reviewer
approves and publishes, signing off the risk of a high-risk scenario (its sha256). Nothing is
online because a file's header says so."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from simreport.ledger.review import history, transition

AUTHOR = "ana"
"""Who submits a version."""
APPROVER = "bo"
"""Who approves and publishes it: not its author."""


def publish(
    engine: Engine,
    kind: str,
    name: str,
    version: str,
    *,
    author: str = AUTHOR,
    approver: str = APPROVER,
) -> None:
    """Take the version from where it stands (draft, reviewing or reviewed) to online."""
    found = history(engine, kind, name, version)
    status = found["status"]
    if status == "draft":
        transition(engine, kind, name, version, "submit", reviewer=author)
        status = "reviewing"
    if status == "reviewing":
        transition(engine, kind, name, version, "approve", reviewer=approver)
        status = "reviewed"
    if status == "reviewed":
        signoff = found["sha256"] if found["riskLevel"] == "high" else None
        transition(engine, kind, name, version, "publish", reviewer=approver, risk_signoff=signoff)
    assert history(engine, kind, name, version)["status"] == "online"


def publish_assets(engine: Engine, names: list[tuple[str, str]]) -> None:
    """Put these asset versions (`TYPE:NAME` or a name, and a version) online."""
    for name, version in names:
        publish(engine, "asset", name, version)


@dataclass
class Said:
    """What a command printed, and its exit code."""

    returncode: int
    stdout: str
    stderr: str


def review_command(
    *args: str,
    cwd: Path,
    ledger: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Said:
    """`simreport review ARGS --ledger LEDGER` in `cwd`, in this process."""
    from simreport.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.delenv("SIMREPORT_LEDGER_URL", raising=False)
    code = main(["review", *args, "--ledger", ledger])
    out, err = capsys.readouterr()
    return Said(code, out, err)
