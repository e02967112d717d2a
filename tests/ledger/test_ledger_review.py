"""The scenario library's review in the ledger, on SQLite and on PostgreSQL (`ledger_url`):
importing the refund desk's scenario and library as drafts whatever their headers say, importing
again, content changed under a pinned version, every review transition and every refused one,
two reviewers racing, and `simreport review …` end to end. Who may approve, publish and sign off
is test_review_duties.py's."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.cli.review import ACTION_HELP
from simreport.core.errors import InputError
from simreport.core.redaction import redact_document
from simreport.core.versions import design_document, design_sha256
from simreport.kernel import load_scenario
from simreport.ledger import db
from simreport.ledger import tables as t
from simreport.ledger.errors import (
    AssetVersionChanged,
    NotRecorded,
    ReviewRefused,
    RiskSignoffMismatch,
    RiskSignoffMissing,
    ScenarioVersionChanged,
    UnknownVersion,
    WrongStatus,
)
from simreport.ledger.review import (
    ACTIONS,
    history,
    import_scenario,
    list_versions,
    transition,
)
from tests.support.review import review_command

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCENARIO = "refund-timeout-retry"

HEADER_STATUSES = {
    ("env_data", "env/ecom-seed", "3.0.1"): "reviewed",
    ("agent", "paced-agent", "1.0.0"): "draft",
    ("agent", "refund-agent", "2.4.1"): "online",
    ("tool_contract", "refund-api", "1.4.0"): "online",
    ("tool_contract", "refund-api", "1.5.0"): "reviewed",
    ("evaluation_spec", "refund-assertions", "1.1.0"): "reviewed",
    ("prompt", "refund-prompt", "1.0.0"): "online",
    ("prompt", "refund-prompt", "1.1.0"): "reviewed",
    ("prompt", "refund-prompt", "2.0.0"): "reviewed",
    ("rubric", "refund-rubric", "2.0.0"): "reviewed",
    ("user_policy", "user-policy", "1.2.0"): "reviewed",
    ("simulator_config", "user-sim", "1.0.0"): "reviewed",
    ("simulator_config", "user-sim", "1.1.0"): "reviewed",
}
"""The refund desk library's asset versions and the status each file's header declares (which
the ledger never takes: every new version starts as a draft)."""


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    """A copy of the refund desk example (scenario and asset library) to import and edit."""
    shutil.copytree(EXAMPLES / "refund_desk", tmp_path / "refund_desk")
    return tmp_path / "refund_desk" / "scenario.yaml"


def _import(engine: sa.Engine, path: Path, **kwargs: Any) -> Any:
    return import_scenario(engine, path, load=load_scenario, **kwargs)


def _transitions(engine: sa.Engine, kind: str | None = None) -> list[Any]:
    rt = t.review_transition
    query = sa.select(rt).order_by(rt.c.transition_id)
    if kind is not None:
        query = query.where(rt.c.version_kind == kind)
    with engine.connect() as conn:
        return list(conn.execute(query))


def _status(engine: sa.Engine, kind: str, object_id: str, version: str) -> str:
    table = t.scenario_version if kind == "scenario" else t.asset_version
    key = table.c.scenario_id if kind == "scenario" else table.c.asset_id
    with engine.connect() as conn:
        return str(
            conn.execute(
                sa.select(table.c.status).where(key == object_id, table.c.version == version)
            ).scalar_one()
        )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _to_reviewed(engine: sa.Engine, kind: str, name: str, version: str) -> None:
    """Submitted by its author, approved by another reviewer."""
    transition(engine, kind, name, version, "submit", reviewer="ana")
    transition(engine, kind, name, version, "approve", reviewer="bo")


def _sha(engine: sa.Engine, kind: str, name: str, version: str) -> str:
    found: str = history(engine, kind, name, version)["sha256"]
    return found


# --------------------------------------------------------------------------- import


def test_import_records_the_scenario_and_its_library_as_drafts_whatever_their_headers_say(
    engine: sa.Engine, scenario: Path
) -> None:
    assert "online" in HEADER_STATUSES.values()  # headers that say online, for nothing
    done = _import(engine, scenario)

    assert done.path == scenario.resolve()
    assert done.recorded == len(done.versions) == 1 + len(HEADER_STATUSES)
    first, *assets = done.versions
    expected_sha = design_sha256(redact_document(load_scenario(scenario).scenario.to_doc()))
    assert (first.kind, first.name, first.version, first.status, first.sha256) == (
        "scenario",
        SCENARIO,
        "1.3.0",
        "draft",  # the header names no status
        expected_sha,
    )
    assert {(a.asset_type, a.name, a.version): a.status for a in assets} == dict.fromkeys(
        HEADER_STATUSES, "draft"
    )

    with engine.connect() as conn:
        row = conn.execute(sa.select(t.scenario)).one()
        assert (row.scenario_id, row.owner, row.risk_level) == (SCENARIO, "quality-team", "high")
        version = conn.execute(sa.select(t.scenario_version)).one()
        assert version.spec_sha256 == expected_sha
        assert version.spec == design_document(
            redact_document(load_scenario(scenario).scenario.to_doc())
        )
        assert version.source == str(scenario.resolve())
        assert version.created_by == "import"
        prompt = conn.execute(
            sa.select(t.asset_version).where(
                t.asset_version.c.asset_id == "local:prompt:refund-prompt",
                t.asset_version.c.version == "1.0.0",
            )
        ).one()
        library = scenario.parent.resolve() / "assets"
        prompt_file = library / "refund-prompt" / "1.0.0.yaml"
        assert prompt.content_ref == prompt_file.as_uri()
        owners = {r.name: r.owner for r in conn.execute(sa.select(t.asset.c.name, t.asset.c.owner))}
        assert owners["refund-api"] == "payments-team"

    steps = _transitions(engine)
    assert len(steps) == len(done.versions)
    assert all(s.from_status is None and s.reviewer == "import" for s in steps)
    assert {s.to_status for s in steps} == {"draft"}
    assert all(s.risk_signoff is None for s in steps)
    by_version = {(s.object_id, s.version): s for s in steps}
    assert by_version[(SCENARIO, "1.3.0")].note == f"imported from {scenario.resolve()}"
    agent = by_version[("local:agent:refund-agent", "2.4.1")]  # its header says online
    assert agent.note == f"imported from {library / 'refund-agent' / '2.4.1.yaml'}"
    assert not list_versions(engine, status="online")


def test_importing_again_changes_nothing(engine: sa.Engine, scenario: Path) -> None:
    _import(engine, scenario, reviewer="ana")
    transition(engine, "scenario", SCENARIO, "1.3.0", "submit", reviewer="ana")
    before = _transitions(engine)

    again = _import(engine, scenario, reviewer="bo")

    assert again.recorded == 0
    assert {v.outcome for v in again.versions} == {"present"}
    # The ledger holds the status now; the header's draft does not reset it.
    assert again.versions[0].status == "reviewing"
    assert _transitions(engine) == before


def test_a_new_asset_version_in_the_library_is_added_on_the_next_import(
    engine: sa.Engine, scenario: Path
) -> None:
    _import(engine, scenario)
    prompts = scenario.parent / "assets" / "refund-prompt"
    text = (prompts / "2.0.0.yaml").read_text(encoding="utf-8")
    (prompts / "2.1.0.yaml").write_text(
        text.replace("version: 2.0.0", "version: 2.1.0").replace(
            "status: reviewed", "status: online"
        ),
        encoding="utf-8",
    )

    again = _import(engine, scenario)

    assert [(v.name, v.version, v.status) for v in again.versions if v.outcome == "recorded"] == [
        ("refund-prompt", "2.1.0", "draft")
    ]


def test_an_asset_file_edited_in_place_is_refused_naming_the_file_and_both_hashes(
    engine: sa.Engine, scenario: Path
) -> None:
    _import(engine, scenario)
    prompt = scenario.parent / "assets" / "refund-prompt" / "1.0.0.yaml"
    with engine.connect() as conn:
        pinned = conn.execute(
            sa.select(t.asset_version.c.content_sha256).where(
                t.asset_version.c.asset_id == "local:prompt:refund-prompt",
                t.asset_version.c.version == "1.0.0",
            )
        ).scalar_one()
    _edit(prompt, "status: online", "status: online\n# edited without a new version")
    # A new version in the same import: the refused import records nothing of it.
    user_sim = scenario.parent / "assets" / "user-sim"
    (user_sim / "1.0.1.yaml").write_text(
        (user_sim / "1.0.0.yaml").read_text(encoding="utf-8").replace("1.0.0", "1.0.1"),
        encoding="utf-8",
    )
    before = _transitions(engine)

    with pytest.raises(AssetVersionChanged) as refused:
        _import(engine, scenario)

    error = refused.value
    found = hashlib.sha256(prompt.read_bytes()).hexdigest()
    assert (error.recorded, error.found) == (pinned, found)
    assert error.file == str(prompt.resolve())
    assert error.kind == "asset_version_changed" and "refund-prompt@1.0.0" in error.message
    line = error.one_line()
    assert str(prompt.resolve()) in line and pinned in line and found in line
    assert _transitions(engine) == before
    assert not [v for v in list_versions(engine, kind="asset") if v["version"] == "1.0.1"]


def test_a_scenario_edited_in_place_is_refused_naming_the_file_and_both_hashes(
    engine: sa.Engine, scenario: Path
) -> None:
    first = _import(engine, scenario).versions[0].sha256
    _edit(scenario, "  labels: [regression, refunds]", "  labels: [regression]")
    found = design_sha256(redact_document(load_scenario(scenario).scenario.to_doc()))

    with pytest.raises(ScenarioVersionChanged) as refused:
        _import(engine, scenario)

    assert (refused.value.recorded, refused.value.found) == (first, found)
    assert refused.value.kind == "scenario_version_changed"
    line = refused.value.one_line()
    assert str(scenario) in line and first in line and found in line


def test_a_scenario_whose_file_says_online_with_a_signoff_is_imported_as_a_draft(
    engine: sa.Engine, scenario: Path
) -> None:
    _edit(
        scenario,
        "  riskLevel: high",
        "  riskLevel: high\n  status: online\n  riskSignoff: risk-team",
    )
    done = _import(engine, scenario)
    assert done.versions[0].status == "draft"
    [first] = _transitions(engine, "scenario")
    assert (first.from_status, first.to_status, first.risk_signoff) == (None, "draft", None)


def test_a_version_the_ledger_holds_keeps_its_status_whatever_its_header_says_now(
    engine: sa.Engine, scenario: Path
) -> None:
    _import(engine, scenario)
    _to_reviewed(engine, "scenario", SCENARIO, "1.3.0")
    # The review fields are not part of the design: the version is the same one.
    _edit(scenario, "  riskLevel: high", "  riskLevel: high\n  status: online")
    again = _import(engine, scenario)
    assert (again.versions[0].outcome, again.versions[0].status) == ("present", "reviewed")
    _edit(scenario, "  status: online", "  status: draft")
    assert _import(engine, scenario).versions[0].status == "reviewed"
    assert _status(engine, "scenario", SCENARIO, "1.3.0") == "reviewed"


def test_a_scenario_without_identity_cannot_be_imported(engine: sa.Engine) -> None:
    path = EXAMPLES / "prisoners_dilemma" / "scenario.yaml"
    with pytest.raises(InputError) as refused:
        _import(engine, path)
    assert refused.value.path == "identity"
    assert refused.value.one_line().startswith(f"{path}: identity: ")


# --------------------------------------------------------------------------- transitions


def test_every_transition_in_order_is_recorded(engine: sa.Engine, scenario: Path) -> None:
    _import(engine, scenario)
    sha = _sha(engine, "scenario", SCENARIO, "1.3.0")
    steps = [
        ("submit", "ana", "ready for review", None),
        ("approve", "bo", None, None),
        ("publish", "cy", "go", sha),
        ("retire", "ana", "replaced by 1.4.0", None),
    ]
    done = [
        transition(
            engine,
            "scenario",
            SCENARIO,
            "1.3.0",
            action,
            reviewer=who,
            note=note,
            risk_signoff=signoff,
        )
        for action, who, note, signoff in steps
    ]

    assert [(d.from_status, d.to_status) for d in done] == list(ACTIONS.values())
    assert _status(engine, "scenario", SCENARIO, "1.3.0") == "offline"
    rows = _transitions(engine, "scenario")[1:]  # after the import's
    assert [(r.from_status, r.to_status, r.reviewer, r.note, r.risk_signoff) for r in rows] == [
        (start, end, who, note, who if signoff else None)
        for (start, end), (_, who, note, signoff) in zip(ACTIONS.values(), steps, strict=True)
    ]
    shown = history(engine, "scenario", SCENARIO, "1.3.0")
    assert shown["status"] == "offline" and shown["riskLevel"] == "high"
    assert [(s["from"], s["to"]) for s in shown["transitions"]] == [
        (None, "draft"),
        *ACTIONS.values(),
    ]
    stamps = [as_time(s["at"]) for s in shown["transitions"]]
    assert stamps == sorted(stamps) and all(s.tzinfo == UTC for s in stamps)
    assert done[2].at.tzinfo is not None

    # An asset: no risk sign-off needed; `TYPE:NAME` names it too.
    _to_reviewed(engine, "asset", "refund-prompt", "1.1.0")
    transition(engine, "asset", "refund-prompt", "1.1.0", "publish", reviewer="bo")
    transition(engine, "asset", "prompt:refund-prompt", "1.1.0", "retire", reviewer="ana")
    assert _status(engine, "asset", "local:prompt:refund-prompt", "1.1.0") == "offline"
    listed = list_versions(engine, kind="asset", name="refund-prompt")
    last = {v["version"]: v["lastTransition"] for v in listed}
    assert (last["1.1.0"]["to"], last["1.1.0"]["reviewer"]) == ("offline", "ana")
    assert (last["1.0.0"]["to"], last["1.0.0"]["reviewer"]) == ("draft", "import")


def as_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


WRONG = {
    "draft": ("approve", "publish", "retire"),
    "reviewing": ("submit", "publish", "retire"),
    "reviewed": ("submit", "approve", "retire"),
    "online": ("submit", "approve", "publish"),
    "offline": ("submit", "approve", "publish", "retire"),
}
VALID = {"draft": "submit", "reviewing": "approve", "reviewed": "publish", "online": "retire"}


def test_every_action_from_a_wrong_status_is_refused(engine: sa.Engine, scenario: Path) -> None:
    """Walk the scenario version through every status; in each, every action that does not
    start there is refused, naming the version, its status and the action valid from there."""
    _import(engine, scenario)
    sha = _sha(engine, "scenario", SCENARIO, "1.3.0")
    for status, wrong in WRONG.items():
        assert _status(engine, "scenario", SCENARIO, "1.3.0") == status
        before = _transitions(engine)
        for action in wrong:
            with pytest.raises(ReviewRefused) as refused:
                transition(
                    engine,
                    "scenario",
                    SCENARIO,
                    "1.3.0",
                    action,
                    reviewer="bo",
                    risk_signoff=sha if action == "publish" else None,
                )
            assert isinstance(refused.value, WrongStatus)
            message = refused.value.message
            assert f"{SCENARIO}@1.3.0" in message and status in message
            # The action refused, then the one valid from here (none leaves offline).
            named = re.findall(r"`(\w+)`", message)
            assert named == [action, VALID[status]] if status in VALID else named == [action]
        assert _transitions(engine) == before
        if status in VALID:
            transition(
                engine,
                "scenario",
                SCENARIO,
                "1.3.0",
                VALID[status],
                reviewer="ana" if VALID[status] == "submit" else "bo",
                risk_signoff=sha if VALID[status] == "publish" else None,
            )


def test_unknown_versions_names_and_reviewers_are_refused(
    engine: sa.Engine, scenario: Path
) -> None:
    _import(engine, scenario)
    before = _transitions(engine)
    # The error class and the option it blames, and the version or the versions held it names.
    cases: list[tuple[tuple[str, str, str], dict[str, str], type[ReviewRefused], str | None, str]]
    cases = [
        (("scenario", SCENARIO, "9.9.9"), {}, UnknownVersion, None, f"{SCENARIO}@9.9.9"),
        (("scenario", "no-such", "1.0.0"), {}, UnknownVersion, None, "no-such@1.0.0"),
        (("asset", "refund-prompt", "9.9.9"), {}, UnknownVersion, None, "1.0.0, 1.1.0, 2.0.0"),
        (("asset", "no-such-asset", "1.0.0"), {}, UnknownVersion, None, "'no-such-asset'"),
        (("asset", "refund-prompt", "1.1.0"), {"reviewer": ""}, ReviewRefused, "--reviewer", ""),
        (("asset", "refund-prompt", "1.1.0"), {"reviewer": "  "}, ReviewRefused, "--reviewer", ""),
    ]
    for (kind, name, version), extra, error, path, named in cases:
        options: dict[str, Any] = {"reviewer": "ana", **extra}
        with pytest.raises(ReviewRefused) as caught:
            transition(engine, kind, name, version, "publish", **options)
        assert type(caught.value) is error and caught.value.path == path
        assert named in caught.value.message
    with pytest.raises(ReviewRefused) as caught:
        transition(engine, "asset", "refund-prompt", "1.1.0", "promote", reviewer="ana")
    assert caught.value.path == "action" and "'promote'" in caught.value.message
    with pytest.raises(NotRecorded) as missing:
        history(engine, "scenario", SCENARIO, "2.0.0")
    assert f"{SCENARIO}@2.0.0" in missing.value.message
    assert _transitions(engine) == before
    assert _status(engine, "asset", "local:prompt:refund-prompt", "1.1.0") == "draft"


def test_an_asset_name_two_types_share_needs_its_type(engine: sa.Engine, scenario: Path) -> None:
    folder = scenario.parent / "assets" / "refund-prompt"
    (folder / "9.0.0.yaml").write_text(
        "kind: rubric\nname: refund-prompt\nversion: 9.0.0\nstatus: draft\ncontent: {}\n",
        encoding="utf-8",
    )
    _import(engine, scenario)
    with pytest.raises(UnknownVersion) as e:
        transition(engine, "asset", "refund-prompt", "9.0.0", "submit", reviewer="ana")
    assert e.value.expected == "prompt:refund-prompt or rubric:refund-prompt"
    done = transition(engine, "asset", "rubric:refund-prompt", "9.0.0", "submit", reviewer="ana")
    assert (done.object_id, done.to_status) == ("local:rubric:refund-prompt", "reviewing")


def test_a_high_risk_scenario_goes_online_only_with_a_risk_signoff(
    engine: sa.Engine, scenario: Path
) -> None:
    _import(engine, scenario)
    _to_reviewed(engine, "scenario", SCENARIO, "1.3.0")
    sha = _sha(engine, "scenario", SCENARIO, "1.3.0")
    before = _transitions(engine)

    def publish(signoff: str | None) -> Any:
        return transition(
            engine, "scenario", SCENARIO, "1.3.0", "publish", reviewer="bo", risk_signoff=signoff
        )

    for signoff in (None, "", "   "):
        with pytest.raises(RiskSignoffMissing) as missing:
            publish(signoff)
        assert (missing.value.code, missing.value.path) == (
            "risk_signoff_missing",
            "--risk-signoff",
        )
        assert sha in (missing.value.expected or "")
    # A name is no sign-off, nor are too few digits or anything but hex.
    for signoff in ("risk-team", sha[:11], sha + "0", "z" * 64):
        with pytest.raises(ReviewRefused) as malformed:
            publish(signoff)
        assert (malformed.value.code, malformed.value.path) == ("review_refused", "--risk-signoff")
    # The sha256 of something else: the signer did not sign off this version.
    other = ("0" if sha[0] != "0" else "1") + sha[1:]
    with pytest.raises(RiskSignoffMismatch) as mismatch:
        publish(other)
    assert mismatch.value.code == "risk_signoff_mismatch"
    assert (mismatch.value.recorded, mismatch.value.found) == (sha, other)
    assert _transitions(engine) == before
    assert _status(engine, "scenario", SCENARIO, "1.3.0") == "reviewed"

    done = publish("  " + sha[:12].upper() + " ")  # the first 12 digits, as listed, any case
    assert done.to_status == "online" and done.risk_signoff is not None
    assert done.risk_signoff.to_doc() == {
        "by": "bo",
        "at": done.at.isoformat().replace("+00:00", "Z"),
        "covers": {"kind": "scenario", "id": SCENARIO, "version": "1.3.0", "sha256": sha},
    }
    assert _transitions(engine, "scenario")[-1].risk_signoff == "bo"
    shown = history(engine, "scenario", SCENARIO, "1.3.0")["transitions"][-1]
    assert shown["riskSignoff"] == done.risk_signoff.to_doc()


def test_a_low_risk_scenario_goes_online_without_a_signoff(
    engine: sa.Engine, scenario: Path
) -> None:
    _edit(scenario, "  riskLevel: high", "  riskLevel: low")
    _import(engine, scenario)
    _to_reviewed(engine, "scenario", SCENARIO, "1.3.0")
    done = transition(engine, "scenario", SCENARIO, "1.3.0", "publish", reviewer="bo")
    assert (done.to_status, done.risk_signoff) == ("online", None)


# --------------------------------------------------------------------------- races


def _race(engine: sa.Engine, name: str, version: str, reviewers: tuple[str, ...]) -> list[str]:
    """Every reviewer publishes the asset version at once; what each got."""
    start = threading.Barrier(len(reviewers))
    outcomes: list[str] = []

    def publish(who: str) -> None:
        start.wait()
        try:
            transition(engine, "asset", name, version, "publish", reviewer=who)
            outcomes.append("won")
        except ReviewRefused as refused:
            outcomes.append(refused.one_line())

    threads = [threading.Thread(target=publish, args=(who,)) for who in reviewers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes


def test_two_reviewers_publishing_at_once_exactly_one_wins(
    engine: sa.Engine, scenario: Path
) -> None:
    _import(engine, scenario)
    reviewed = [(n, v) for (_, n, v), s in HEADER_STATUSES.items() if s == "reviewed"]
    for name, version in reviewed:
        _to_reviewed(engine, "asset", name, version)
        outcomes = _race(engine, name, version, ("bo", "cy"))
        assert sorted(outcomes) == sorted(
            [
                "won",
                f"asset {name}@{version} is online: `publish` moves a version from reviewed "
                "to online; from online only `retire` is valid",
            ]
        ), outcomes

    published = [s for s in _transitions(engine, "asset") if s.from_status == "reviewed"]
    assert sorted((s.object_id.split(":", 2)[2], s.version) for s in published) == sorted(reviewed)


def _waits_for_the_lock(
    engine: sa.Engine, racer: threading.Thread, monkeypatch: pytest.MonkeyPatch
) -> Callable[[], bool]:
    """Whether `racer` waits for a lock another transaction holds: on PostgreSQL a backend that
    waits on a lock; on SQLite the racer trying for the write lock (which it cannot have)."""
    if engine.dialect.name == "postgresql":
        waiting = sa.text(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )

        def postgres() -> bool:
            with engine.connect() as conn:
                return bool(conn.execute(waiting).scalar())

        return postgres
    trying = threading.Event()
    original = db._begin_immediate_soon

    def begin(dbapi_connection: Any, timeout_ms: int) -> bool:
        if threading.current_thread() is racer:
            trying.set()
        return original(dbapi_connection, timeout_ms)

    monkeypatch.setattr(db, "_begin_immediate_soon", begin)
    return trying.is_set


def test_a_publish_waiting_on_another_reviewers_step_is_refused(
    engine: sa.Engine, scenario: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other reviewer's transaction has moved the version but not committed yet when this
    one starts: once it commits, this one finds the version online and is refused."""
    _import(engine, scenario)
    _to_reviewed(engine, "scenario", SCENARIO, "1.3.0")
    sha = _sha(engine, "scenario", SCENARIO, "1.3.0")
    outcome: list[BaseException | str] = []

    def publish() -> None:
        try:
            transition(
                engine, "scenario", SCENARIO, "1.3.0", "publish", reviewer="bo", risk_signoff=sha
            )
            outcome.append("won")
        except BaseException as exc:  # reported below
            outcome.append(exc)

    sv = t.scenario_version
    with engine.begin() as conn:
        conn.execute(
            sv.update()
            .where(sv.c.scenario_id == SCENARIO, sv.c.version == "1.3.0")
            .values(status="online")
        )
        racer = threading.Thread(target=publish)
        waiting = _waits_for_the_lock(engine, racer, monkeypatch)
        racer.start()
        deadline = time.monotonic() + 60  # a guard against a hang, not a measure
        while not waiting():
            assert racer.is_alive() and time.monotonic() < deadline, outcome
            time.sleep(0.01)
        assert racer.is_alive()  # it waits for this transaction
    racer.join(timeout=60)

    assert len(outcome) == 1 and isinstance(outcome[0], ReviewRefused), outcome
    assert "is online" in outcome[0].one_line()
    assert [s.to_status for s in _transitions(engine, "scenario")] == [
        "draft",
        "reviewing",
        "reviewed",
    ]


# --------------------------------------------------------------------------- command line


def test_the_command_line_offers_every_review_action() -> None:
    assert list(ACTION_HELP) == list(ACTIONS)


def test_review_commands_end_to_end(
    ledger_url: str,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cwd = scenario.parent.parent
    io = {"capsys": capsys, "monkeypatch": monkeypatch}

    def ok(*args: str) -> str:
        done = review_command(*args, cwd=cwd, ledger=ledger_url, **io)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def refused(*args: str) -> str:
        done = review_command(*args, cwd=cwd, ledger=ledger_url, **io)
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("simreport: "), done.stderr
        assert "Traceback" not in done.stderr
        return lines[0]

    def counts(said: str) -> list[int]:
        """The numbers the first line states after the file it names (how many versions are
        new, of how many)."""
        return [int(n) for n in re.findall(r"\d+", said.splitlines()[0].rsplit(": ", 1)[1])]

    def row(table: str, name: str) -> list[str]:
        """The words of the table row of `name`, from `name` on."""
        words = next(line.split() for line in table.splitlines() if name in line.split())
        return words[words.index(name) :]

    def moved(said: str) -> tuple[str, ...]:
        """The statuses a review step went from and to."""
        found = re.search(r"(\w+) → (\w+)", said)
        assert found is not None, said
        return found.groups()

    imported = ok("import", "refund_desk/scenario.yaml", "--reviewer", "ana")
    versions = 1 + len(HEADER_STATUSES)  # the scenario and its library
    assert counts(imported) == [versions, versions]
    assert row(imported, "refund-timeout-retry")[:3] == ["refund-timeout-retry", "1.3.0", "draft"]
    assert counts(ok("import", "refund_desk/scenario.yaml")) == [0, versions]

    table = ok("list", "--kind", "scenario")
    assert table.splitlines()[0].split() == [
        "kind",
        "type",
        "name",
        "version",
        "status",
        "risk",
        "sha256",
        "last",
        "step",
    ]
    scenario_row = row(table, "refund-timeout-retry")
    assert scenario_row[:4] == ["refund-timeout-retry", "1.3.0", "draft", "high"]
    assert "ana" in [word.strip(",") for word in scenario_row]  # who took its last step
    sha12 = scenario_row[4]
    listed = json.loads(ok("list", "--json", "--status", "draft"))
    assert len(listed) == versions  # whatever the headers say
    assert json.loads(ok("list", "--json", "--status", "online")) == []

    ref = "refund-timeout-retry@1.3.0"
    said = ok("submit", "scenario", ref, "--reviewer", "ana", "--note", "ready")
    assert ref in said and moved(said) == ("draft", "reviewing") and "ana" in said
    # Refused, naming the version, where it stands and the step that is valid from there.
    line = refused("submit", "scenario", ref, "--reviewer", "ana")
    assert ref in line and "reviewing" in line and "`approve`" in line
    # Its author does not approve it.
    line = refused("approve", "scenario", ref, "--reviewer", "ana")
    assert line.startswith("simreport: --reviewer: ") and "ana" in line
    said = ok("approve", "scenario", ref, "--reviewer", "bo")
    assert moved(said) == ("reviewing", "reviewed") and "bo" in said
    line = refused("publish", "scenario", ref, "--reviewer", "ana", "--risk-signoff", sha12)
    assert line.startswith("simreport: --reviewer: ")
    line = refused("publish", "scenario", ref, "--reviewer", "bo")
    assert line.startswith("simreport: --risk-signoff: ")
    line = refused("publish", "scenario", ref, "--reviewer", "bo", "--risk-signoff", "risk-team")
    assert line.startswith("simreport: --risk-signoff: ")
    published = ok("publish", "scenario", ref, "--reviewer", "bo", "--risk-signoff", sha12)
    assert moved(published) == ("reviewed", "online")
    assert "risk signed off by bo for sha256 " + sha12 in published
    said = ok("retire", "scenario", ref, "--reviewer", "cy", "--note", "replaced")
    assert moved(said) == ("online", "offline") and "cy" in said
    refused("retire", "asset", "refund-prompt@7.0.0", "--reviewer", "cy")
    line = refused("history", "scenario", "refund-timeout-retry")
    assert line.startswith("simreport: NAME@VERSION: ") and "'refund-timeout-retry'" in line

    shown = ok("history", "scenario", ref)
    lines = shown.splitlines()
    assert lines[0] == "scenario refund-timeout-retry@1.3.0: offline, high risk"
    assert lines[1].startswith(f"sha256 {sha12}") and lines[1].endswith("written by ana")
    assert [row.split()[2:4] for row in lines[3:]] == [
        ["-", "draft"],
        ["draft", "reviewing"],
        ["reviewing", "reviewed"],
        ["reviewed", "online"],
        ["online", "offline"],
    ]
    assert lines[6].split()[4:6] == ["bo", "bo"] and "replaced" in lines[7]
    steps = json.loads(ok("history", "scenario", ref, "--json"))
    assert steps["authors"] == ["ana"]
    assert [
        (s["to"], s["reviewer"], s["riskSignoff"] and s["riskSignoff"]["by"], s["note"])
        for s in steps["transitions"]
    ][1:] == [
        ("reviewing", "ana", None, "ready"),
        ("reviewed", "bo", None, None),
        ("online", "bo", "bo", None),
        ("offline", "cy", None, "replaced"),
    ]
    assert steps["transitions"][3]["riskSignoff"]["covers"]["sha256"] == steps["sha256"]
