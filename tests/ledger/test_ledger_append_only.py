"""Revision 0008 on SQLite and on PostgreSQL: a ledger migrated from 0007 with rows in it keeps
them, refuses UPDATE, DELETE and TRUNCATE on a run's observations, evidence, completeness and
fault rows and on the content of scenario and asset versions (whose review status still moves),
takes new rows, and stores no logical time for a fault plan that has none; a downgrade removes
the triggers again."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from simreport.cli import main
from simreport.core.errors import EXIT_OK
from simreport.ledger import ingest_run
from simreport.ledger import tables as t
from simreport.ledger.migrate import current_revision, downgrade, head_revision, upgrade

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refund_desk"

RESULT_TABLES = (
    "observation",
    "observation_missing",
    "evidence",
    "completeness",
    "fault_plan",
    "fault_record",
)
"""Append-only from revision 0008 on, every column."""
VERSION_CONTENT = {"scenario_version": "spec_sha256", "asset_version": "content_sha256"}
"""Tables whose content is frozen from 0008 on: a content column of each."""


def rows(n: int) -> dict[str, list[dict[str, Any]]]:
    """Rows of every table 0008 guards (`n` tells one set from another)."""
    call = {"at": {"call": 1, "turn": None}, "atLogicalMs": None, "recoverAfterMs": None}
    return {
        "scenario": [
            {
                "scenario_id": f"s{n}",
                "tenant_id": "local",
                "namespace": "default",
                "name": f"s{n}",
                "owner": "o",
                "risk_level": "low",
            }
        ],
        "scenario_version": [
            {
                "scenario_id": f"s{n}",
                "version": "1.0.0",
                "spec": {"seed": n},
                "spec_sha256": "a" * 64,
                "status": "draft",
                "created_by": "ana",
            }
        ],
        "asset": [
            {
                "asset_id": f"a{n}",
                "tenant_id": "local",
                "asset_type": "prompt",
                "name": f"p{n}",
                "owner": "o",
            }
        ],
        "asset_version": [
            {
                "asset_id": f"a{n}",
                "version": "1.0.0",
                "content_ref": "file:///p.yaml",
                "content_sha256": "b" * 64,
                "status": "draft",
            }
        ],
        "observation": [
            {
                "observation_id": f"r{n}/o0001",
                "run_id": f"r{n}",
                "fact_key": "refund.count",
                "fact_value": 2,
                "derived_from": ["r000001"],
                "extractor": "x/1",
            }
        ],
        "observation_missing": [
            {"run_id": f"r{n}", "fact_key": "order.state", "reason": "why", "extractor": "x/1"}
        ],
        "evidence": [
            {
                "evidence_id": f"r{n}/no_duplicate_refund",
                "run_id": f"r{n}",
                "criterion_key": "no_duplicate_refund",
                "observation_ids": ["o0001"],
                "evidence_refs": ["r000001"],
            }
        ],
        "completeness": [{"run_id": f"r{n}", "check_key": "tool_result", "status": "present"}],
        "fault_plan": [
            {
                "run_id": f"r{n}",
                "fault_id": "by-call",
                "target": "create_refund",
                "fault_type": "timeout",
                "params": call,
                "at_logical_ms": 0,  # what ingest stored before 0008
            },
            {
                "run_id": f"r{n}",
                "fault_id": "timed",
                "target": "create_refund",
                "fault_type": "timeout",
                "params": {**call, "at": {"logicalMs": 4000}, "atLogicalMs": 4000},
                "at_logical_ms": 4000,
            },
        ],
        "fault_record": [
            {"run_id": f"r{n}", "fault_id": "by-call", "stage": "planned", "detail": {}}
        ],
    }


def insert(engine: sa.Engine, n: int) -> None:
    with engine.begin() as conn:
        for name, values in rows(n).items():
            conn.execute(sa.insert(t.metadata.tables[f"sim.{name}"]), values)


def count(engine: sa.Engine, name: str) -> int:
    table = t.metadata.tables[f"sim.{name}"]
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def refused(engine: sa.Engine, statement: sa.Executable | str) -> None:
    with pytest.raises(sa.exc.IntegrityError, match="append-only"), engine.begin() as conn:
        if isinstance(statement, str):
            conn.exec_driver_sql(statement)
        else:
            conn.execute(statement)


def triggers(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            found = conn.exec_driver_sql(
                "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal "
                "AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'sim'::regnamespace)"
            )
        else:
            found = conn.exec_driver_sql("SELECT name FROM sqlite_schema WHERE type = 'trigger'")
        return {str(name) for (name,) in found}


def guarded(engine: sa.Engine) -> set[str]:
    """The triggers of revision 0008 the database holds."""
    mine = (*RESULT_TABLES, *VERSION_CONTENT)
    return {name for name in triggers(engine) if name.startswith(mine)}


def expected(engine: sa.Engine) -> set[str]:
    """The triggers revision 0008 makes: PostgreSQL's refuse TRUNCATE too."""
    if engine.dialect.name == "postgresql":
        whole, versions = ("append_only", "no_truncate"), ("content", "no_delete", "no_truncate")
    else:
        whole, versions = ("no_update", "no_delete"), ("content", "no_delete")
    return {f"{name}_{kind}" for name in RESULT_TABLES for kind in whole} | {
        f"{name}_{kind}" for name in VERSION_CONTENT for kind in versions
    }


def test_0008_keeps_the_rows_and_makes_results_and_version_content_append_only(
    engine: sa.Engine,
) -> None:
    upgrade(engine, "0007")
    insert(engine, 1)
    assert not guarded(engine)
    done = upgrade(engine)
    assert (done.before, done.after) == ("0007", head_revision())
    assert guarded(engine) == expected(engine)
    for name, values in rows(1).items():
        assert count(engine, name) == len(values), name
    plan = t.fault_plan
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.select(plan.c.fault_id, plan.c.at_logical_ms)).all())
    # A plan opened by a call has no logical time; a timed one keeps its own.
    assert stored == {"by-call": None, "timed": 4000}

    postgresql = engine.dialect.name == "postgresql"
    for name in RESULT_TABLES:
        table = t.metadata.tables[f"sim.{name}"]
        refused(engine, sa.update(table).values(run_id="other"))
        refused(engine, sa.delete(table))
        refused(engine, f"DELETE FROM {'sim.' if postgresql else ''}{name}")
        if postgresql:
            refused(engine, f"TRUNCATE sim.{name}")
            refused(engine, f"TRUNCATE sim.{name} CASCADE")
    for name, column in VERSION_CONTENT.items():
        table = t.metadata.tables[f"sim.{name}"]
        refused(engine, sa.update(table).values({column: "c" * 64}))
        refused(engine, sa.update(table).values(version="9.9.9"))
        refused(engine, sa.delete(table))
        if postgresql:
            refused(engine, f"TRUNCATE sim.{name} CASCADE")
        # The review status still moves, the content unchanged.
        with engine.begin() as conn:
            assert conn.execute(sa.update(table).values(status="reviewing")).rowcount == 1
        with engine.connect() as conn:
            assert conn.execute(sa.select(table.c.status, table.c[column])).one() == (
                "reviewing",
                rows(1)[name][0][column],
            )
    # New rows still go in; nothing was lost.
    insert(engine, 2)
    for name, values in rows(1).items():
        assert count(engine, name) == 2 * len(values), name


def test_a_downgrade_to_0007_removes_the_triggers(engine: sa.Engine) -> None:
    upgrade(engine)
    # A ledger created at the newest revision has them too.
    assert guarded(engine) == expected(engine)
    insert(engine, 1)
    downgrade(engine, "0007")
    with engine.connect() as conn:
        assert current_revision(conn) == "0007"
    assert not guarded(engine)
    plan = t.fault_plan
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.select(plan.c.fault_id, plan.c.at_logical_ms)).all())
    assert stored == {"by-call": 0, "timed": 4000}  # as 0007 stored them
    with engine.begin() as conn:
        for name in (*RESULT_TABLES, *VERSION_CONTENT):
            table = t.metadata.tables[f"sim.{name}"]
            if name in VERSION_CONTENT:
                conn.execute(sa.update(table).values({VERSION_CONTENT[name]: "c" * 64}))
            else:
                conn.execute(sa.update(table).values(run_id="other"))
    with engine.begin() as conn:
        conn.execute(sa.delete(t.manifest_asset))  # none: nothing refers to the versions
        for name in (*RESULT_TABLES, *VERSION_CONTENT):
            conn.execute(sa.delete(t.metadata.tables[f"sim.{name}"]))
    assert upgrade(engine).after == head_revision()
    assert guarded(engine) == expected(engine)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run") / "run"
    scenario = EXAMPLE / "scenario.yaml"
    assert main(["run", str(scenario), "--out", str(out), "--no-ledger"]) == EXIT_OK
    return out


def test_a_fault_opened_by_a_call_is_recorded_without_a_logical_time(
    engine: sa.Engine, run_dir: Path, tmp_path: Path
) -> None:
    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    ingest_run(engine, run)
    with engine.connect() as conn:
        plan = conn.execute(sa.select(t.fault_plan)).one()
    # The example's fault strikes the first refund submission, whenever it comes.
    assert plan.params["at"]["call"] == 1 and plan.params["atLogicalMs"] is None
    assert plan.at_logical_ms is None
