"""Revision 0009 and the airline desk in the ledger: a ledger migrated from 0008 with rows in it
keeps them and its append-only triggers, takes `domain` and `user_flow` asset versions and still
refuses changes to a version's content; a downgrade is refused while such assets are recorded.
An airline run made with the default SQLite ledger is recorded with its manifest and its domain
and user-flow versions, and ingesting an airline run folder records it once. Migration tests run
on SQLite and PostgreSQL (the `engine` fixture)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.cli import main
from simreport.core.errors import EXIT_OK
from simreport.ledger import connect, run_identity
from simreport.ledger import tables as t
from simreport.ledger.location import ENV_VAR
from simreport.ledger.migrate import current_revision, downgrade, head_revision, upgrade
from simreport.ledger.queries import counts, show_run

ROOT = Path(__file__).resolve().parents[2]
AIRLINE = ROOT / "examples" / "airline_desk"


@pytest.fixture(autouse=True)
def _no_ledger_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def _asset(asset_id: str, kind: str) -> dict[str, Any]:
    return {
        "asset_id": asset_id,
        "tenant_id": "local",
        "asset_type": kind,
        "name": asset_id,
        "owner": "o",
    }


def _version(asset_id: str) -> dict[str, Any]:
    return {
        "asset_id": asset_id,
        "version": "1.0.0",
        "content_ref": f"file:///{asset_id}.yaml",
        "content_sha256": "b" * 64,
        "status": "draft",
    }


def _triggers(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            found = conn.exec_driver_sql(
                "SELECT tgrelid::regclass || '.' || tgname FROM pg_trigger "
                "WHERE NOT tgisinternal "
                "AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'sim'::regnamespace)"
            )
        else:
            found = conn.exec_driver_sql(
                "SELECT tbl_name || '.' || name FROM sqlite_schema WHERE type = 'trigger'"
            )
        return {str(name) for (name,) in found}


def _insert(engine: sa.Engine, table: sa.Table, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(sa.insert(table), list(rows))


def _refused(engine: sa.Engine, statement: sa.Executable, match: str) -> None:
    with pytest.raises(sa.exc.IntegrityError, match=match), engine.begin() as conn:
        conn.execute(statement)


def _kinds(engine: sa.Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(t.asset.c.asset_id, t.asset.c.asset_type)).all())


def _foreign_keys_hold(engine: sa.Engine) -> None:
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"


# --------------------------------------------------------------------------- revision 0009


def test_0009_from_0008_takes_domain_assets_and_keeps_rows_and_triggers(
    engine: sa.Engine,
) -> None:
    upgrade(engine, "0008")
    _insert(engine, t.asset, _asset("prompt-a", "prompt"))
    _insert(engine, t.asset_version, _version("prompt-a"))
    _refused(engine, sa.insert(t.asset).values(_asset("airline", "domain")), "ck_asset")
    before = _triggers(engine)
    assert {"asset_version_content", "asset_version_no_delete"} <= {
        name.rsplit(".", 1)[1] for name in before
    }

    done = upgrade(engine, "0009")
    assert (done.before, done.after) == ("0008", "0009")
    assert _triggers(engine) == before  # rebuilding `asset` dropped none
    assert _kinds(engine) == {"prompt-a": "prompt"}
    _foreign_keys_hold(engine)

    # A domain and a user flow are recorded like any asset version.
    _insert(engine, t.asset, _asset("airline", "domain"), _asset("traveller", "user_flow"))
    _insert(engine, t.asset_version, _version("airline"), _version("traveller"))
    assert _kinds(engine) == {"prompt-a": "prompt", "airline": "domain", "traveller": "user_flow"}
    _refused(engine, sa.insert(t.asset).values(_asset("x", "scenario")), "ck_asset")
    # The foreign key to `asset` still holds after the rebuild.
    _refused(engine, sa.insert(t.asset_version).values(_version("nowhere")), "(?i)foreign key")

    # Version content stays append-only; the review status still moves.
    versions = t.asset_version
    for asset_id in ("prompt-a", "airline"):
        mine = versions.c.asset_id == asset_id
        _refused(engine, sa.update(versions).where(mine).values(content_sha256="c" * 64), "append")
        _refused(engine, sa.delete(versions).where(mine), "append-only")
        with engine.begin() as conn:
            assert conn.execute(sa.update(versions).where(mine).values(status="reviewing")).rowcount
    with engine.connect() as conn:
        stored = conn.execute(sa.select(versions.c.asset_id, versions.c.content_sha256)).all()
    assert sorted(stored) == sorted((a, "b" * 64) for a in ("prompt-a", "airline", "traveller"))


def test_a_downgrade_to_0008_is_refused_while_a_domain_asset_is_recorded(
    engine: sa.Engine,
) -> None:
    upgrade(engine, "0009")
    before = _triggers(engine)
    _insert(engine, t.asset, _asset("prompt-a", "prompt"), _asset("airline", "domain"))
    _insert(engine, t.asset_version, _version("prompt-a"))
    with pytest.raises(RuntimeError, match="1 asset"):
        downgrade(engine, "0008")
    with engine.connect() as conn:
        assert current_revision(conn) == "0009"
    assert _kinds(engine) == {"prompt-a": "prompt", "airline": "domain"}

    with engine.begin() as conn:  # an asset without versions may go
        conn.execute(sa.delete(t.asset).where(t.asset.c.asset_id == "airline"))
    downgrade(engine, "0008")
    with engine.connect() as conn:
        assert current_revision(conn) == "0008"
    assert _triggers(engine) == before
    assert _kinds(engine) == {"prompt-a": "prompt"}
    _foreign_keys_hold(engine)
    _refused(engine, sa.insert(t.asset).values(_asset("airline", "domain")), "ck_asset")
    assert upgrade(engine).after == head_revision()


# --------------------------------------------------------------------------- the airline desk


@pytest.fixture(scope="module")
def airline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One airline desk run, made without a ledger."""
    out = tmp_path_factory.mktemp("airline") / "run"
    assert main(["run", str(AIRLINE / "scenario.yaml"), "--out", str(out), "--no-ledger"]) == 0
    return out


def _domain_versions(recorded: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {a["slot"]: (a["type"], a["name"], a["version"]) for a in recorded["assets"]}


AIRLINE_SLOTS = {
    "environment.domain": ("domain", "airline", "1.0.0"),
    "user.policy": ("user_flow", "traveller-flow", "1.0.0"),
}


def test_an_airline_run_is_recorded_in_the_default_sqlite_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "run"
    assert main(["run", str(AIRLINE / "scenario.yaml"), "--out", str(out)]) == EXIT_OK
    assert "did not record" not in capsys.readouterr().err
    engine = connect(f"sqlite:///{tmp_path / 'results' / 'ledger.sqlite'}")
    try:
        recorded = show_run(engine, run_identity(out).run_id)
        assert recorded["status"]["execution"] == "completed"
        resolved = recorded["manifest"]["resolved"]
        assert resolved["environment.domain"]["kind"] == "domain"
        assert resolved["user.policy"]["kind"] == "user_flow"
        slots = _domain_versions(recorded)
        assert AIRLINE_SLOTS.items() <= slots.items()
        assert len(slots) == len(resolved)  # every resolved version has its row
        for slot, row in resolved.items():
            mine = next(a for a in recorded["assets"] if a["slot"] == slot)
            assert mine["sha256"] == row["sha256"], slot
        assert counts(engine)["run"] == 1
    finally:
        engine.dispose()


def test_ingesting_an_airline_run_folder_records_it_once(
    ledger_url: str, airline_run: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "results"
    shutil.copytree(airline_run, folder / "run")
    assert main(["ledger", "ingest", str(folder), "--ledger", ledger_url]) == EXIT_OK
    engine = connect(ledger_url)
    try:
        first = counts(engine)
        assert first["run"] == 1 and first["manifest"] == 1
        recorded = show_run(engine, run_identity(folder / "run").run_id)
        assert AIRLINE_SLOTS.items() <= _domain_versions(recorded).items()
        assert main(["ledger", "ingest", str(folder), "--ledger", ledger_url]) == EXIT_OK
        assert counts(engine) == first
    finally:
        engine.dispose()
