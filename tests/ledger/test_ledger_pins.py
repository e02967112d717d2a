"""What the ledger makes a run check before any agent call, and what a run's purpose means.

An asset file edited in place (same name and version, other bytes) fails the next run in
LOADING, naming the asset and both digests, with no model call made. A regression run needs
every version it records online in the ledger: it is refused before anything runs when its
scenario version is not, and fails in LOADING when an asset version is not; an exploration run
goes ahead and records which versions were not online, in its manifest, its result, audit.json and
the report. An audit condition that changes the design records a derived scenario version. A
ledger of the previous schema revision is upgraded with its rows kept. Each test runs on SQLite
and PostgreSQL (the `ledger_url` fixture)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.cli import main
from simreport.core.errors import EXIT_INPUT, EXIT_RUN_FAILED
from simreport.kernel import load_scenario
from simreport.kernel.replay_runner import replay_run
from simreport.ledger import connect
from simreport.ledger import tables as t
from simreport.ledger.location import ENV_VAR
from simreport.ledger.migrate import current_revision, upgrade
from simreport.ledger.review import import_scenario
from tests.support.refusals import refused as refusal_of
from tests.support.review import publish

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refund_desk"
PROMPT = "assets/refund-prompt/1.0.0.yaml"


@pytest.fixture(autouse=True)
def _no_ledger_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def desk(tmp_path: Path) -> Path:
    folder = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, folder)
    return folder


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _run(desk: Path, out: Path, url: str, *extra: str) -> int:
    return main(["run", str(desk / "scenario.yaml"), "--out", str(out), "--ledger", url, *extra])


def _rows(url: str, table: sa.Table, *where: Any) -> list[Any]:
    engine = connect(url)
    try:
        with engine.connect() as conn:
            return list(conn.execute(sa.select(table).where(*where)))
    finally:
        engine.dispose()


# --------------------------------------------------------------------------- pinned digests


def test_an_asset_edited_in_place_fails_the_next_run_in_loading(
    desk: Path, ledger_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(desk, tmp_path / "first", ledger_url) == 0
    pinned = _read(tmp_path / "first" / "manifest.json")["assets"]["refund-prompt@1.0.0"]

    prompt = desk / PROMPT
    prompt.write_text(prompt.read_text(encoding="utf-8") + "# edited without a new version\n")
    second = tmp_path / "second"
    capsys.readouterr()
    assert _run(desk, second, ledger_url) == EXIT_RUN_FAILED
    result = _read(second / "result.json")
    failure = result["failure"]
    assert (failure["stage"], failure["type"]) == ("loading", "asset_version_changed")
    assert "refund-prompt@1.0.0" in failure["message"] and "1.0.0.yaml" in failure["message"]
    assert pinned in failure["message"]
    assert _read(second / "manifest.json").get("resolved") is None  # never got past loading
    # Before any agent call: no model call, no message of the user or the agent.
    assert result["cost"]["llmCalls"] == 0
    events = [json.loads(line) for line in (second / "events.jsonl").read_text().splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert not {k for k in kinds if k.split(".")[0] in ("user", "agent", "tool", "llm")}, kinds
    stages = [e["payload"].get("to") for e in events if e["type"] == "lifecycle"]
    assert "RUNNING" not in stages and "INITIALIZING" not in stages, stages
    assert "asset_version_changed" in capsys.readouterr().err

    # Its failure is recorded; the pin is not moved.
    (asset_version,) = _rows(
        ledger_url, t.asset_version, t.asset_version.c.asset_id.like("%:prompt:refund-prompt")
    )
    assert asset_version.content_sha256 == pinned
    # A new version of the asset is what the change needed: bumping it runs again.
    text = prompt.read_text(encoding="utf-8").replace("version: 1.0.0", "version: 1.0.1")
    prompt.unlink()
    (prompt.parent / "1.0.1.yaml").write_text(text, encoding="utf-8")
    (prompt.parent / "labels.yaml").write_text("stable: 1.0.1\n", encoding="utf-8")
    assert _run(desk, tmp_path / "third", ledger_url) == 0


def test_a_scenario_file_whose_design_changed_under_its_version_fails_in_loading(
    desk: Path, ledger_url: str, tmp_path: Path
) -> None:
    engine = connect(ledger_url)
    try:
        import_scenario(engine, desk / "scenario.yaml", load=load_scenario)
    finally:
        engine.dispose()
    scenario = desk / "scenario.yaml"
    scenario.write_text(
        scenario.read_text(encoding="utf-8").replace("patience: low", "patience: high")
    )
    out = tmp_path / "run"
    assert _run(desk, out, ledger_url) == EXIT_RUN_FAILED
    failure = _read(out / "result.json")["failure"]
    assert (failure["stage"], failure["type"]) == ("loading", "scenario_version_changed")
    assert "refund-timeout-retry@1.3.0" in failure["message"]


# --------------------------------------------------------------------------- purpose


def _publish(url: str, kind: str, name: str, version: str) -> None:
    """Review and publish as review does: its author submits, another reviewer approves and
    publishes (signing off a high-risk scenario's risk)."""
    engine = connect(url)
    try:
        publish(engine, kind, name, version)
    finally:
        engine.dispose()


def test_a_regression_run_needs_every_version_online(
    desk: Path, ledger_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Its scenario version is only a draft: refused before anything runs.
    refused = tmp_path / "refused"
    argv = ["run", str(desk / "scenario.yaml"), "--out", str(refused), "--ledger", ledger_url]
    refusal = refusal_of(capsys, [*argv, "--purpose", "regression"])
    assert refusal.code == EXIT_INPUT and refusal.error.path == "purpose"
    # Pinned at first sight, as a draft.
    assert "refund-timeout-retry@1.3.0 (draft)" in refusal.error.message
    assert not refused.exists()

    _publish(ledger_url, "scenario", "refund-timeout-retry", "1.3.0")
    # The scenario is online, its assets are not, though some files' headers say online: the
    # run fails while loading.
    out = tmp_path / "assets-not-online"
    assert _run(desk, out, ledger_url, "--purpose", "regression") == EXIT_RUN_FAILED
    result = _read(out / "result.json")
    assert result["purpose"] == "regression"
    failure = result["failure"]
    assert (failure["stage"], failure["type"]) == ("loading", "version_not_online")
    assert "refund-agent@2.4.1 (draft)" in failure["message"]  # its header: online
    assert "refund-assertions@1.1.0 (draft)" in failure["message"]  # its header: reviewed
    assert result["cost"]["llmCalls"] == 0
    # Imported, they are drafts too; reviewed and published, they run.
    engine = connect(ledger_url)
    try:
        import_scenario(engine, desk / "scenario.yaml", load=load_scenario)
    finally:
        engine.dispose()
    held = _rows(ledger_url, t.asset_version)
    assert held and {row.status for row in held} == {"draft"}
    for row in held:
        _, asset_type, name = row.asset_id.split(":", 2)
        _publish(ledger_url, "asset", f"{asset_type}:{name}", row.version)
    out = tmp_path / "regression"
    assert _run(desk, out, ledger_url, "--purpose", "regression") == 0
    assert _read(out / "result.json")["purpose"] == "regression"
    manifest = _read(out / "manifest.json")
    assert manifest["purpose"] == "regression" and manifest["notOnline"] == []
    # Replayed under the checks its manifest records, it locks the same manifest.
    replayed = replay_run(out)
    assert replayed.ok, replayed.summary()
    rows = _rows(ledger_url, t.run, t.run.c.purpose == "regression")
    assert sorted((r.source_dir, r.execution_status) for r in rows) == [
        (str((tmp_path / "assets-not-online").resolve()), "crashed"),
        (str(out.resolve()), "completed"),
    ]


def test_an_exploration_run_records_the_versions_that_were_not_online(
    desk: Path, ledger_url: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    assert _run(desk, out, ledger_url) == 0
    manifest = _read(out / "manifest.json")
    assert manifest["purpose"] == "exploration"
    not_online = {(v["kind"], v["name"], v["status"]) for v in manifest["notOnline"]}
    assert ("scenario", "refund-timeout-retry", "draft") in not_online
    assert ("asset", "refund-assertions", "draft") in not_online  # its header: reviewed
    assert ("asset", "refund-agent", "draft") in not_online  # its header: online
    assert all(status != "online" for _, _, status in not_online)
    assert _read(out / "result.json")["purpose"] == "exploration"
    (row,) = _rows(ledger_url, t.run)
    assert row.purpose == "exploration"
    replayed = replay_run(out)
    assert replayed.ok, replayed.summary()
    # An asset changed since the run fails its replay as it would fail a run.
    prompt = desk / PROMPT
    prompt.write_text(prompt.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    replayed = replay_run(out)
    assert not replayed.ok and "asset_version_changed" in (replayed.error or "")


REGRESSION_PLAN = """\
title: Refund desk, one derived condition
baseScenario: scenario.yaml
design: one_at_a_time
replications: 2
purpose: {purpose}
metrics: [duplicateRefunds, turns]
axes:
  - template: agent_specification
    id: user_patience
    target: user.persona.patience
    levels: [high]
"""


def test_an_audit_condition_that_changes_the_design_records_a_derived_version(
    desk: Path, ledger_url: str, tmp_path: Path
) -> None:
    (desk / "audit.yaml").write_text(REGRESSION_PLAN.format(purpose="exploration"))
    out = tmp_path / "audit"
    assert main(["audit", str(desk / "audit.yaml"), "--out", str(out), "--ledger", ledger_url]) == 0
    base = _read(out / "runs" / "base" / "0" / "manifest.json")["scenarioVersion"]
    assert base["version"] == "1.3.0" and "derivedFrom" not in base
    changed = _read(out / "runs" / "user_patience=high" / "0" / "manifest.json")["scenarioVersion"]
    assert changed["version"] == f"1.3.0+d.{changed['designSha256'][:12]}"
    assert changed["derivedFrom"] == "1.3.0"
    same = _read(out / "runs" / "user_patience=high" / "1" / "manifest.json")["scenarioVersion"]
    assert same["version"] == changed["version"]  # replications share their design
    (derived,) = _rows(ledger_url, t.scenario_version, t.scenario_version.c.derived_from == "1.3.0")
    assert (derived.version, derived.status) == (changed["version"], "draft")
    assert derived.spec_sha256 == changed["designSha256"]

    audit = _read(out / "audit.json")
    assert audit["purpose"]["purpose"] == "exploration"
    assert audit["purpose"]["explorationRuns"] == 4
    assert {v["name"] for v in audit["purpose"]["notOnline"]} >= {"refund-timeout-retry"}
    report = (out / "report.html").read_text(encoding="utf-8")
    assert "Purpose: exploration." in report and "refund-assertions@1.1.0 (draft)" in report

    # A regression audit of the same plan is refused before any run: its derived version was
    # never reviewed.
    (desk / "audit.yaml").write_text(REGRESSION_PLAN.format(purpose="regression"))
    refused = tmp_path / "refused"
    code = main(["audit", str(desk / "audit.yaml"), "--out", str(refused), "--ledger", ledger_url])
    assert code == EXIT_INPUT
    assert not (refused / "runs").exists()


# --------------------------------------------------------------------------- migrations


def test_a_ledger_of_the_previous_revision_is_upgraded_with_its_rows(
    ledger_url: str, desk: Path, tmp_path: Path
) -> None:
    engine = connect(ledger_url)
    try:
        upgrade(engine, "0001")
        with engine.begin() as conn:
            conn.execute(
                sa.insert(t.manifest).values(
                    manifest_id="manifest-old",
                    tenant_id="local",
                    scenario_id="prisoners_dilemma",
                    scenario_version="sha256:0",
                    resolved={},
                    manifest_sha256="0" * 64,
                    document={},
                )
            )
            conn.execute(
                sa.insert(t.run).values(
                    run_id="run-old",
                    tenant_id="local",
                    manifest_id="manifest-old",
                    mode="surrogate",
                    execution_status="completed",
                    validity_status="unchecked",
                    evidence_status="complete",
                    trace_id="t",
                    condition_id="base",
                    replication=0,
                    seed_path=[0],
                    engine="prisoners_dilemma",
                    result={},
                    content_sha256="0" * 64,
                )
            )
        done = upgrade(engine)
        assert (done.before, done.after) == ("0001", current_revision_of(engine))
        with engine.connect() as conn:
            old = conn.execute(sa.select(t.run).where(t.run.c.run_id == "run-old")).one()
        assert old.purpose == "exploration"  # runs before purposes were exploration runs
        assert (old.attempts, old.retries_allowed, old.retries, old.event_seq_base) == (0, 0, 0, 0)
    finally:
        engine.dispose()
    # The upgraded ledger records new runs as any other.
    assert _run(desk, tmp_path / "run", ledger_url) == 0
    assert len(_rows(ledger_url, t.run)) == 2


def current_revision_of(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return current_revision(conn)
