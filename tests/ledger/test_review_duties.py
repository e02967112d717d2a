"""Separation of duties in review, on SQLite and on PostgreSQL (`ledger_url`): a version's authors
(who created or submitted it) neither approve nor publish it unless the operator's review policy
allows it at its risk level; a high-risk scenario's sign-off is the publisher's, a recorded fact
naming the sha256 it covers; the policy's `review:` section as its file states it; and the
command line's `--policy`."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.core.errors import SchemaError
from simreport.core.execution_policy import ExecutionPolicy, ReviewPolicy, load_policy
from simreport.kernel import load_scenario
from simreport.ledger import tables as t
from simreport.ledger.errors import ReviewRefused, SelfApproval
from simreport.ledger.review import authors, history, import_scenario, transition
from tests.support.review import Said, publish, review_command

ROOT = Path(__file__).resolve().parents[2]
REFUND_DESK = ROOT / "examples" / "refund_desk"
SCENARIO = "refund-timeout-retry"
VERSION = "1.3.0"


@pytest.fixture
def desk(tmp_path: Path) -> Path:
    shutil.copytree(REFUND_DESK, tmp_path / "refund_desk")
    return tmp_path / "refund_desk"


def _risk(desk: Path, level: str) -> None:
    scenario = desk / "scenario.yaml"
    text = scenario.read_text(encoding="utf-8")
    scenario.write_text(text.replace("riskLevel: high", f"riskLevel: {level}"), encoding="utf-8")


def _import(engine: sa.Engine, desk: Path, reviewer: str = "import") -> None:
    import_scenario(engine, desk / "scenario.yaml", load=load_scenario, reviewer=reviewer)


def _steps(engine: sa.Engine) -> list[Any]:
    rt = t.review_transition
    with engine.connect() as conn:
        return list(conn.execute(sa.select(rt).order_by(rt.c.transition_id)))


def _step(
    engine: sa.Engine,
    action: str,
    reviewer: str,
    *,
    kind: str = "scenario",
    name: str = SCENARIO,
    version: str = VERSION,
    **options: Any,
) -> Any:
    return transition(engine, kind, name, version, action, reviewer=reviewer, **options)


def _sha(engine: sa.Engine, kind: str = "scenario", name: str = SCENARIO) -> str:
    version = VERSION if kind == "scenario" else "1.1.0"
    found: str = history(engine, kind, name, version)["sha256"]
    return found


# --------------------------------------------------------------------------- who wrote it


def test_the_authors_are_who_created_and_who_submitted_the_version(
    engine: sa.Engine, desk: Path
) -> None:
    _import(engine, desk, reviewer="ivy")
    _step(engine, "submit", "ana")
    with engine.connect() as conn:
        assert authors(conn, "scenario", SCENARIO, VERSION) == ("ana", "ivy")
        # An asset version: who recorded it (its first step) and who submitted it.
        assert authors(conn, "asset", "local:prompt:refund-prompt", "1.1.0") == ("ivy",)
    assert history(engine, "scenario", SCENARIO, VERSION)["authors"] == ["ana", "ivy"]


@pytest.mark.parametrize("author", ["ana", "ivy"], ids=["submitter", "creator"])
def test_an_author_may_not_approve_their_own_version(
    engine: sa.Engine, desk: Path, author: str
) -> None:
    _import(engine, desk, reviewer="ivy")
    _step(engine, "submit", "ana")
    before = _steps(engine)

    with pytest.raises(SelfApproval) as refused:
        _step(engine, "approve", f"  {author} ")

    error = refused.value
    assert (error.code, error.path, error.authors) == (
        "self_approval",
        "--reviewer",
        ("ana", "ivy"),
    )
    assert isinstance(error, ReviewRefused) and error.exit_code == 2
    assert error.expected == "a reviewer other than ana, ivy"
    assert _steps(engine) == before
    assert history(engine, "scenario", SCENARIO, VERSION)["status"] == "reviewing"


def test_an_author_may_not_publish_and_sign_off_their_own_version(
    engine: sa.Engine, desk: Path
) -> None:
    _import(engine, desk)
    _step(engine, "submit", "ana")
    _step(engine, "approve", "bo")
    with pytest.raises(SelfApproval) as refused:
        _step(engine, "publish", "ana", risk_signoff=_sha(engine))
    assert refused.value.authors == ("ana", "import")
    assert history(engine, "scenario", SCENARIO, VERSION)["status"] == "reviewed"
    # The approver may publish, and signs off the risk.
    done = _step(engine, "publish", "bo", risk_signoff=_sha(engine))
    assert done.risk_signoff is not None and done.risk_signoff.by == "bo"


def test_an_author_may_submit_and_retire_their_own_version(engine: sa.Engine, desk: Path) -> None:
    _import(engine, desk, reviewer="ana")
    _step(engine, "submit", "ana")
    _step(engine, "approve", "bo")
    _step(engine, "publish", "bo", risk_signoff=_sha(engine))
    assert _step(engine, "retire", "ana").to_status == "offline"


def test_an_asset_versions_author_may_not_approve_it(engine: sa.Engine, desk: Path) -> None:
    _import(engine, desk)
    _step(engine, "submit", "ana", kind="asset", name="refund-prompt", version="1.1.0")
    with pytest.raises(SelfApproval) as refused:
        _step(engine, "approve", "ana", kind="asset", name="refund-prompt", version="1.1.0")
    assert refused.value.authors == ("ana", "import")


# --------------------------------------------------------------------------- the policy


def test_the_policy_may_let_authors_approve_low_risk_versions_only(
    engine: sa.Engine, desk: Path
) -> None:
    low = ReviewPolicy(self_approval=["low"])
    _risk(desk, "low")
    _import(engine, desk)
    _step(engine, "submit", "ana")
    with pytest.raises(SelfApproval):
        _step(engine, "approve", "ana")  # the default policy
    _step(engine, "approve", "ana", policy=low)
    done = _step(engine, "publish", "ana", policy=low)
    assert (done.to_status, done.reviewer, done.risk_signoff) == ("online", "ana", None)


@pytest.mark.parametrize("level", ["medium", "high"])
def test_allowing_low_risk_self_approval_still_refuses_higher_risk(
    engine: sa.Engine, desk: Path, level: str
) -> None:
    _risk(desk, level)
    _import(engine, desk)
    _step(engine, "submit", "ana")
    with pytest.raises(SelfApproval):
        _step(engine, "approve", "ana", policy=ReviewPolicy(self_approval=["low"]))


def test_where_the_policy_allows_high_risk_self_approval_the_author_signs_off(
    engine: sa.Engine, desk: Path
) -> None:
    policy = ReviewPolicy(self_approval=["high"])
    _import(engine, desk)
    _step(engine, "submit", "ana")
    _step(engine, "approve", "ana", policy=policy)
    done = _step(engine, "publish", "ana", policy=policy, risk_signoff=_sha(engine))
    assert done.risk_signoff is not None and done.risk_signoff.by == "ana"


def test_asset_self_approval_is_its_own_setting(engine: sa.Engine, desk: Path) -> None:
    asset = {"kind": "asset", "name": "refund-prompt", "version": "1.1.0"}
    _import(engine, desk)
    _step(engine, "submit", "ana", **asset)
    every_level = ReviewPolicy(self_approval=["low", "medium", "high"])
    with pytest.raises(SelfApproval):
        _step(engine, "approve", "ana", policy=every_level, **asset)
    assets = ReviewPolicy(asset_self_approval=True)
    _step(engine, "approve", "ana", policy=assets, **asset)
    assert _step(engine, "publish", "ana", policy=assets, **asset).to_status == "online"


def test_the_review_policy_is_read_from_the_operators_policy_file(tmp_path: Path) -> None:
    assert ExecutionPolicy().review == ReviewPolicy()
    assert not ReviewPolicy().allows_self_approval("scenario", "low")
    assert not ReviewPolicy().allows_self_approval("asset", None)

    path = tmp_path / "policy.yaml"
    path.write_text(
        "providers: [offline]\nreview:\n  selfApproval: [low, medium]\n  assetSelfApproval: true\n",
        encoding="utf-8",
    )
    review = load_policy(path).review
    assert review.self_approval == ["low", "medium"] and review.asset_self_approval
    assert review.allows_self_approval("scenario", "medium")
    assert not review.allows_self_approval("scenario", "high")
    assert review.allows_self_approval("asset", None)

    for text, where in (
        ("review:\n  selfApproval: [extreme]\n", "review.selfApproval.0"),
        ("review:\n  selfApprovel: [low]\n", "review.selfApprovel"),
        ("review:\n  assetSelfApproval: maybe\n", "review.assetSelfApproval"),
    ):
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SchemaError) as refused:
            load_policy(path)
        assert [issue.path for issue in refused.value.issues] == [where]


# --------------------------------------------------------------------------- the risk sign-off


def test_a_signoff_is_taken_only_by_publish(engine: sa.Engine, desk: Path) -> None:
    _import(engine, desk)
    with pytest.raises(ReviewRefused) as refused:
        _step(engine, "submit", "ana", risk_signoff=_sha(engine))
    assert (refused.value.code, refused.value.path) == ("review_refused", "--risk-signoff")
    assert history(engine, "scenario", SCENARIO, VERSION)["status"] == "draft"


def test_a_signoff_given_for_a_lower_risk_version_is_checked_and_recorded(
    engine: sa.Engine, desk: Path
) -> None:
    _import(engine, desk)
    asset = {"kind": "asset", "name": "refund-prompt", "version": "1.1.0"}
    _step(engine, "submit", "ana", **asset)
    _step(engine, "approve", "bo", **asset)
    with pytest.raises(ReviewRefused) as refused:
        _step(engine, "publish", "bo", risk_signoff="0" * 64, **asset)
    assert refused.value.code == "risk_signoff_mismatch"
    sha = _sha(engine, "asset", "refund-prompt")
    done = _step(engine, "publish", "bo", risk_signoff=sha, **asset)
    assert done.risk_signoff is not None
    assert done.risk_signoff.to_doc()["covers"] == {
        "kind": "asset",
        "id": "local:prompt:refund-prompt",
        "version": "1.1.0",
        "sha256": sha,
    }


def test_every_step_of_a_published_high_risk_version_is_kept_with_its_signoff(
    engine: sa.Engine, desk: Path
) -> None:
    _import(engine, desk)
    publish(engine, "scenario", SCENARIO, VERSION)
    shown = history(engine, "scenario", SCENARIO, VERSION)
    steps = [(s["to"], s["reviewer"], s["riskSignoff"]) for s in shown["transitions"]]
    online = shown["transitions"][-1]
    assert steps[:-1] == [
        ("draft", "import", None),
        ("reviewing", "ana", None),
        ("reviewed", "bo", None),
    ]
    assert online["riskSignoff"] == {
        "by": "bo",
        "at": online["at"],
        "covers": {"kind": "scenario", "id": SCENARIO, "version": VERSION, "sha256": _sha(engine)},
    }


# --------------------------------------------------------------------------- the command line


def _review(ledger: str, cwd: Path, *args: str, **io: Any) -> Said:
    return review_command(*args, cwd=cwd, ledger=ledger, **io)


def test_the_command_line_refuses_self_approval_unless_the_policy_file_allows_it(
    ledger_url: str,
    desk: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    io = {"capsys": capsys, "monkeypatch": monkeypatch}
    _risk(desk, "low")
    ref = f"{SCENARIO}@{VERSION}"
    assert _review(ledger_url, desk, "import", "scenario.yaml", **io).returncode == 0
    assert (
        _review(ledger_url, desk, "submit", "scenario", ref, "--reviewer", "ana", **io).returncode
        == 0
    )

    refused = _review(ledger_url, desk, "approve", "scenario", ref, "--reviewer", "ana", **io)
    assert refused.returncode == 2 and refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert line.startswith("simreport: --reviewer: ana wrote scenario " + ref)
    assert line.endswith("(expected a reviewer other than ana, import)")

    missing = _review(
        ledger_url,
        desk,
        "approve",
        "scenario",
        ref,
        "--reviewer",
        "ana",
        "--policy",
        "nope.yaml",
        **io,
    )
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr

    policy = tmp_path / "policy.yaml"
    policy.write_text("review:\n  selfApproval: [low]\n", encoding="utf-8")
    for action in ("approve", "publish"):
        done = _review(
            ledger_url,
            desk,
            action,
            "scenario",
            ref,
            "--reviewer",
            "ana",
            "--policy",
            str(policy),
            **io,
        )
        assert done.returncode == 0, done.stderr
    shown = _review(ledger_url, desk, "history", "scenario", ref, **io)
    assert shown.stdout.splitlines()[0] == f"scenario {ref}: online, low risk"
