"""The run ledger (SPEC §10) on SQLite and on a real PostgreSQL, from one fixture (`ledger_url`
in conftest.py): migrations, ingest of every kind of run, idempotence, refused conflicts, a
process killed mid-ingest, parallel writers, immutability in the database, and the commands
that read it back."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

import simreport
from simreport.cli import main
from simreport.core.errors import InputError
from simreport.ledger import (
    AssetVersionChanged,
    LedgerOutdated,
    LedgerUnavailable,
    RunConflict,
    connect,
    ingest_build,
    ingest_paths,
    ingest_run,
    ledger_url,
    run_identity,
)
from simreport.ledger import tables as t
from simreport.ledger.errors import NotRecorded
from simreport.ledger.location import ENV_VAR, UNSET
from simreport.ledger.migrate import current_revision, downgrade, head_revision, upgrade
from simreport.ledger.queries import counts, list_runs, plan_history, show_run
from tests.support.refusals import refused
from tests.support.run_digests import relock

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

SEED_TABLES = (
    "scenario",
    "scenario_version",
    "asset",
    "asset_version",
    "manifest",
    "run",
    "run_task",
    "run_session",
    "event",
    "record",
    "observation",
    "evidence",
    "completeness",
    "fault_plan",
    "fault_record",
)

TINY_PLAN = """\
id: tiny_pd
title: A tiny prisoner's dilemma
baseScenario: scenario.yaml
axes:
  - template: linguistic_framing
    levels: [moralised]
replications: 2
metrics: [cooperationRate]
"""


def postgres_only(test: Callable[..., None]) -> Callable[..., None]:
    """Run `test` once, on a fresh PostgreSQL ledger (`ledger_url`); without a server it is
    skipped on a developer's machine and fails under CI=true."""
    once = pytest.mark.parametrize("ledger_url", ["postgresql"], indirect=True)(test)
    needs = pytest.mark.requires(
        bool(os.environ.get("SIMREPORT_TEST_POSTGRES_URL")),
        "PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)",
    )
    marked: Callable[..., None] = needs(once)
    return marked


def terminate_backend(url: str, pid: int) -> None:
    """End the PostgreSQL server process `pid` (a connection's), as a server restart would."""
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
    finally:
        admin.dispose()


@dataclass(frozen=True)
class Results:
    """A results folder with one run of every kind: a tiny audit (prisoner's dilemma, two
    conditions × two replications), the refund-desk testbed, the echo chamber, an external
    simulator and an external simulator that fails."""

    root: Path
    audit: Path
    refund: Path
    echo: Path
    external: Path
    failed: Path

    def run_dirs(self) -> list[Path]:
        runs = sorted(p.parent for p in (self.audit / "runs").rglob("result.json"))
        return [*runs, self.refund, self.echo, self.external, self.failed]


def _lines(path: Path) -> int:
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    base = tmp_path_factory.mktemp("ledger-results")
    plan = base / "plan"
    plan.mkdir()
    shutil.copy(EXAMPLES / "prisoners_dilemma" / "scenario.yaml", plan / "scenario.yaml")
    (plan / "audit.yaml").write_text(TINY_PLAN, encoding="utf-8")
    root = base / "results"
    audit = root / "tiny_pd"
    simreport.audit(plan / "audit.yaml", out=audit)
    refund = root / "refund"
    simreport.run(EXAMPLES / "refund_desk" / "scenario.yaml", refund)
    echo = root / "echo"
    simreport.run(EXAMPLES / "echo_chamber" / "scenario.yaml", echo)
    external_dir = base / "external"
    external_dir.mkdir()
    for script in ("sim_ok.py", "sim_fail.py"):
        shutil.copy(FIXTURES / script, external_dir / script)
        (external_dir / f"{script[:-3]}.yaml").write_text(
            f"simulator:\n  command: [{sys.executable}, {script}]\n  metrics: [hitRate]\n"
            "params: {rate: 0.3}\nseed: 11\n",
            encoding="utf-8",
        )
    external = root / "external"
    simreport.run(external_dir / "sim_ok.yaml", external)
    failed = root / "external_failed"
    assert simreport.run(external_dir / "sim_fail.yaml", failed).failure is not None
    return Results(base, audit, refund, echo, external, failed)


def _copy(run_dir: Path, to: Path) -> Path:
    shutil.copytree(run_dir, to)
    return to


def _table_names(engine: sa.Engine) -> set[str]:
    schema = "sim" if engine.dialect.name == "postgresql" else None
    return set(sa.inspect(engine).get_table_names(schema=schema))


# --------------------------------------------------------------------------- migrations


def test_the_head_revision_is_alembic_s_head() -> None:
    from alembic.script import ScriptDirectory

    from simreport.ledger.migrate import HEAD_REVISION, alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD_REVISION


def test_a_current_ledger_is_written_and_read_without_alembic(tmp_path: Path) -> None:
    """Alembic (and its templates' libraries) loads only to change a ledger's schema: the
    service's processes and each build check a current ledger without it."""
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    upgrade(connect(url))
    code = (
        "import sys\n"
        "from simreport.ledger import connect\n"
        "from simreport.ledger.migrate import check_for_reading, prepare_for_writing\n"
        f"engine = connect({url!r})\n"
        "prepare_for_writing(engine)\n"
        "check_for_reading(engine)\n"
        "assert 'alembic' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_migration_takes_an_empty_database_to_head_and_back(ledger_url: str) -> None:
    engine = connect(ledger_url)
    try:
        with engine.connect() as conn:
            assert current_revision(conn) is None
        done = upgrade(engine)
        assert (done.before, done.after) == (None, head_revision())
        assert _table_names(engine) >= set(SEED_TABLES) | {
            "plan",
            "build",
            "build_condition",
            "review_transition",
        }
        assert not upgrade(engine).changed
        downgrade(engine, "base")
        assert _table_names(engine) == {"alembic_version"}
        assert upgrade(engine).before is None
        assert _table_names(engine) == {tbl.name for tbl in t.metadata.sorted_tables} | {
            "alembic_version"
        }
    finally:
        engine.dispose()


def test_the_migrated_database_matches_the_table_declarations(engine: sa.Engine) -> None:
    """The revision is written out by hand; the tables module declares the same schema."""
    upgrade(engine)
    with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            context = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "compare_server_default": True,
                    "include_schemas": True,
                    "include_name": lambda name, kind, _parent: kind != "schema" or name == "sim",
                    "version_table_schema": "sim",
                },
            )
            diffs = compare_metadata(context, t.metadata)
        else:
            plain = sa.MetaData()
            for table in t.metadata.sorted_tables:
                table.to_metadata(plain, schema=None, referred_schema_fn=_no_schema)
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            # SQLite reflects the run index's `created_at DESC` as a plain column.
            diffs = [
                d
                for d in compare_metadata(context, plain)
                if not (
                    d[0] in ("add_index", "remove_index") and d[1].name == "ix_sim_run_manifest"
                )
            ]
            indexes = {i["name"] for i in sa.inspect(conn).get_indexes("run")}
            assert "ix_sim_run_manifest" in indexes
    assert diffs == []


def _no_schema(*_args: Any) -> Any:
    return sa.schema.BLANK_SCHEMA


def test_checks_hold_the_seed_values_and_refuse_others(engine: sa.Engine) -> None:
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(t.asset).values(
                asset_id="a", tenant_id="x", asset_type="prompt", name="p", owner="o"
            )
        )
        for status in t.REVIEW_STATUSES:  # reviewed included
            conn.execute(
                sa.insert(t.asset_version).values(
                    asset_id="a", version=status, content_ref="r", content_sha256="s", status=status
                )
            )
        conn.execute(
            sa.insert(t.manifest).values(
                manifest_id="m",
                tenant_id="x",
                scenario_id="s",
                scenario_version="1",
                resolved={},
                manifest_sha256="h",
                document={},
            )
        )
        for n, status in enumerate(("pending", "running", "completed", "crashed", "cancelled")):
            conn.execute(sa.insert(t.run).values(**_run_row(f"r{n}", execution_status=status)))
    for table, row in (
        (t.run, _run_row("bad-exec", execution_status="finished")),
        (t.run, _run_row("bad-mode", mode="pending")),
        (t.run, _run_row("bad-validity", validity_status="ok")),
        (
            t.asset_version,
            {
                "asset_id": "a",
                "version": "9",
                "content_ref": "r",
                "content_sha256": "s",
                "status": "approved",
            },
        ),
    ):
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(sa.insert(table).values(**row))
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:  # foreign key
        conn.execute(sa.insert(t.run).values(**_run_row("orphan", manifest_id="nope")))


def _check_texts(conn: sa.Connection) -> dict[str, str]:
    """Each CHECK constraint of the ledger as the database holds it, by name."""
    if conn.dialect.name == "postgresql":
        rows = conn.exec_driver_sql(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'c' AND connamespace = 'sim'::regnamespace"
        )
        return {name: text for name, text in rows}
    found = {}
    for (sql,) in conn.exec_driver_sql("SELECT sql FROM sqlite_schema WHERE type = 'table'"):
        for name, text in re.findall(r"CONSTRAINT (ck_\w+) CHECK \((.*)\)", sql or ""):
            found[name] = text
    return found


def test_checks_become_comparisons_from_the_previous_revision_and_back(
    engine: sa.Engine,
) -> None:
    """Revision 0005 rewrites every `IN (…)` check as comparisons (SQLite evaluates an IN list
    in a CHECK at a cost on every row): rows written before stay, the same values are allowed
    and refused, and a downgrade brings the IN lists back."""
    upgrade(engine, "0004")
    with engine.connect() as conn:
        before = _check_texts(conn)
    assert len(before) == 19 and all(" IN " in v or "ANY" in v for v in before.values())
    with engine.begin() as conn:
        conn.execute(sa.insert(t.event).values(_event_row(1)))
    upgrade(engine)
    with engine.connect() as conn:
        after = _check_texts(conn)
        assert conn.execute(sa.select(sa.func.count()).select_from(t.event)).scalar() == 1
    assert after.keys() == before.keys()
    assert not any(" IN " in v or "ANY" in v for v in after.values()), after
    assert "actor = 'user'" in after["ck_event_actor"].replace("'user'::text", "'user'")
    with engine.begin() as conn:
        conn.execute(sa.insert(t.event).values(_event_row(2, actor="harness")))
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(sa.insert(t.event).values(_event_row(3, actor="someone")))
    downgrade(engine, "0004")
    with engine.connect() as conn:
        assert _check_texts(conn) == before
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(sa.insert(t.event).values(_event_row(3, actor="someone")))


def _event_row(seq: int, actor: str = "agent") -> dict[str, Any]:
    return {
        "run_id": "r",
        "seq": seq,
        "event_type": "step",
        "actor": actor,
        "payload": {},
        "wall_time": sa.func.current_timestamp(),
    }


def _run_row(run_id: str, **changes: Any) -> dict[str, Any]:
    row = {
        "run_id": run_id,
        "tenant_id": "x",
        "manifest_id": "m",
        "mode": "surrogate",
        "execution_status": "completed",
        "validity_status": "valid",
        "evidence_status": "complete",
        "trace_id": "t",
        "condition_id": "base",
        "replication": 0,
        "seed_path": [],
        "engine": "w",
        "result": {},
        "content_sha256": "c",
    }
    return {**row, **changes}


def test_readers_refuse_an_old_ledger_and_everyone_a_newer_one(ledger_url: str) -> None:
    engine = connect(ledger_url)
    try:
        with pytest.raises(LedgerOutdated) as caught:
            list_runs(engine)
        assert (caught.value.revision, caught.value.newer) == (None, False)
        upgrade(engine)
        assert list_runs(engine) == []
        with engine.begin() as conn:
            version = sa.table("alembic_version", sa.column("version_num"), schema=None)
            if conn.dialect.name == "postgresql":
                version.schema = "sim"
            conn.execute(sa.update(version).values(version_num="9999"))
        for refused in (list_runs, upgrade):
            with pytest.raises(LedgerOutdated) as caught:
                refused(engine)
            assert (caught.value.revision, caught.value.newer) == ("9999", True)
    finally:
        engine.dispose()


@postgres_only
def test_a_role_that_may_not_create_tables_is_told_who_can(
    ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = sa.engine.make_url(ledger_url)
    role = f"reader_{url.database}"
    owner = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with owner.connect() as conn:
            conn.exec_driver_sql(f'CREATE ROLE "{role}" LOGIN')
        limited = url.set(username=role).render_as_string(hide_password=False)
        refusal = refused(capsys, ["ledger", "upgrade", "--ledger", limited])
        assert refusal.code == 2 and isinstance(refusal.error, LedgerUnavailable)
        assert "permission denied" in refusal.error.message  # the database's own reason
        assert refusal.error.expected is not None
        assert "simreport ledger upgrade" in refusal.error.expected
    finally:
        with owner.connect() as conn:
            conn.exec_driver_sql(f'DROP ROLE IF EXISTS "{role}"')
        owner.dispose()


# --------------------------------------------------------------------------- ingest


def test_every_kind_of_run_is_recorded_with_the_tables_that_apply(
    engine: sa.Engine, results: Results
) -> None:
    summary = ingest_paths(engine, [results.root / "results"])
    runs = results.run_dirs()
    assert summary.refused == []
    assert (summary.runs_recorded, summary.builds_recorded) == (len(runs), 1)
    rows = counts(engine)
    assert rows["run"] == len(runs)
    assert rows["event"] == sum(_lines(r / "events.jsonl") for r in runs)
    assert rows["record"] == _lines(results.refund / "records.jsonl")
    observations = json.loads((results.refund / "observations.json").read_text())
    assert rows["observation"] == len(observations["observations"])
    assert rows["evidence"] == len(
        json.loads((results.refund / "evidence.json").read_text())["criteria"]
    )
    assert rows["completeness"] == len(
        json.loads((results.refund / "completeness.json").read_text())["checks"]
    )
    assert rows["fault_plan"] == 1 and rows["fault_record"] == 4
    assert rows["build"] == 1 and rows["build_condition"] == 2 and rows["build_run"] == 4
    assert rows["plan"] == 1

    by_engine = {r["engine"]: r for r in list_runs(engine)}
    assert set(by_engine) == {
        "prisoners_dilemma",
        "refund_desk",
        "echo_chamber",
        "external:sim_ok.py",
        "external:sim_fail.py",
    }
    failed = show_run(engine, by_engine["external:sim_fail.py"]["runId"])
    assert failed["status"]["execution"] == "crashed"
    assert failed["terminalReason"].startswith(failed["failure"]["type"])
    assert failed["counts"]["records"] == 0 and failed["faults"] == []
    external = show_run(engine, by_engine["external:sim_ok.py"]["runId"])
    assert (
        external["manifest"]["resolved"]["file:sim_ok.py"]["sha256"]
        == json.loads((results.external / "manifest.json").read_text())["assets"]["sim_ok.py"]
    )
    echo = show_run(engine, by_engine["echo_chamber"]["runId"])
    assert echo["counts"]["events"] == _lines(results.echo / "events.jsonl")
    assert echo["assets"] == [] and echo["evidence"] == []

    refund = show_run(engine, by_engine["refund_desk"]["runId"])
    result = json.loads((results.refund / "result.json").read_text())
    assert refund["status"] == {
        **{k: result["status"][k] for k in ("execution", "validity", "evidence")},
        "quality": None,
    }
    assert refund["manifest"]["scenario"] == "refund-timeout-retry"
    assert refund["manifest"]["scenarioVersion"] == "1.3.0"
    assert refund["startedAt"] is not None and refund["endedAt"] >= refund["startedAt"]
    assert refund["faults"][0]["missingSteps"] == []
    assert [s["stage"] for s in refund["faults"][0]["steps"]] == [
        "planned",
        "armed",
        "hit",
        "recovered",
    ]
    assert refund["tasks"][0]["sessions"][0]["transport"] == "chat-completions"
    prompt = next(a for a in refund["assets"] if a["slot"] == "sut.prompt")
    assert (prompt["name"], prompt["version"], prompt["status"]) == (
        "refund-prompt",
        "1.0.0",
        "draft",  # first seen by this ingest: its file's header (online) sets no status
    )


def test_rows_written_together_keep_every_row_once(engine: sa.Engine) -> None:
    """Rows go to the database in one statement per batch (PostgreSQL: a COPY, or INSERTs of
    many rows of VALUES, VALUES_PARAMETERS at most each; SQLite: one executemany): more rows
    than one INSERT takes are all written, and those ignoring duplicates keep the first."""
    from datetime import UTC, datetime

    from simreport.ledger.bulk import COPY_ROWS, VALUES_PARAMETERS, insert_rows
    from simreport.ledger.migrate import prepare_once

    prepare_once(engine)
    keys = ("scenario_id", "tenant_id", "namespace", "name", "owner", "risk_level", "created_at")
    when = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def rows(first: int, last: int, owner: str) -> list[tuple[Any, ...]]:
        return [(f"s{i}", "default", "n", f"s{i}", owner, "low", when) for i in range(first, last)]

    many = VALUES_PARAMETERS // len(keys) * 2 + 5  # three INSERTs on PostgreSQL
    with engine.begin() as conn:
        assert insert_rows(conn, t.scenario, keys, rows(0, many, "first")) == many
        insert_rows(conn, t.scenario, keys, rows(0, many + 7, "again"), ignore_duplicates=True)
        insert_rows(conn, t.scenario, keys, rows(5000, 5000 + COPY_ROWS - 1, "few"))
    with engine.connect() as conn:
        owners = dict(conn.execute(sa.select(t.scenario.c.name, t.scenario.c.owner)).all())
    assert len(owners) == many + 7 + COPY_ROWS - 1
    assert {owners[f"s{i}"] for i in range(many)} == {"first"}
    assert {owners[f"s{i}"] for i in range(many, many + 7)} == {"again"}
    assert owners["s5000"] == "few"


def test_rows_sent_together_arrive_whole_or_not_at_all(engine: sa.Engine) -> None:
    """`pipelined` sends a block's statements together (PostgreSQL's pipeline mode; on SQLite
    the block runs as it is): many rows go in INSERTs of VALUES instead of a COPY, every row
    arrives, and a statement the database refuses is raised as SQLAlchemy raises it, at the
    end of the block, with the transaction's rows rolled back."""
    from datetime import UTC, datetime

    from simreport.ledger.bulk import COPY_ROWS, insert_rows, pipelined
    from simreport.ledger.migrate import prepare_once

    prepare_once(engine)
    keys = ("scenario_id", "tenant_id", "namespace", "name", "owner", "risk_level", "created_at")
    when = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def rows(first: int, last: int) -> list[tuple[Any, ...]]:
        return [(f"s{i}", "default", "n", f"s{i}", "o", "low", when) for i in range(first, last)]

    with engine.begin() as conn, pipelined(conn):
        insert_rows(conn, t.scenario, keys, rows(0, COPY_ROWS * 3))
        insert_rows(conn, t.scenario, keys, rows(1000, 1002))
        conn.execute(t.scenario.update().where(t.scenario.c.name == "s1001").values(owner="x"))

    def names() -> dict[str, str]:
        with engine.connect() as conn:
            return dict(conn.execute(sa.select(t.scenario.c.name, t.scenario.c.owner)).all())

    assert len(names()) == COPY_ROWS * 3 + 2 and names()["s1001"] == "x"
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn, pipelined(conn):
        insert_rows(conn, t.scenario, keys, rows(2000, 2003))
        insert_rows(conn, t.scenario, keys, rows(0, 1))  # recorded already
        insert_rows(conn, t.scenario, keys, rows(3000, 3003))
    assert len(names()) == COPY_ROWS * 3 + 2  # nothing of the refused transaction


def test_reads_leave_the_next_write_a_transaction(engine: sa.Engine) -> None:
    """A reading connection runs its queries on their own (PostgreSQL: autocommit, no BEGIN
    and ROLLBACK); the same pooled connection then writes in a transaction again, which an
    error rolls back whole."""
    from datetime import UTC, datetime

    from simreport.ledger.db import reading
    from simreport.ledger.migrate import prepare_once

    prepare_once(engine)
    row = {
        "scenario_id": "s1",
        "tenant_id": "default",
        "namespace": "n",
        "name": "s1",
        "owner": "o",
        "risk_level": "low",
        "created_at": datetime(2026, 5, 1, tzinfo=UTC),
    }
    with reading(engine) as conn:
        if engine.dialect.name == "postgresql":
            assert conn.connection.driver_connection.autocommit  # type: ignore[union-attr]
        assert conn.execute(sa.select(sa.func.count()).select_from(t.scenario)).scalar() == 0
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(t.scenario.insert(), row)
        raise RuntimeError("after the insert")
    with reading(engine) as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(t.scenario)).scalar() == 0


@postgres_only
def test_a_pooled_connection_is_pinged_only_after_waiting(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL connection taken from the pool right after its last use is not pinged (a
    round trip saved on every query under load); one that waited longer than
    IDLE_PING_SECONDS is, and when its server process is gone a fresh connection replaces it
    before the query, which then succeeds."""
    from simreport.ledger import db

    engine = db.connect(ledger_url)
    pings: list[int] = []
    real_ping = engine.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real_ping(dbapi_connection)

    monkeypatch.setattr(engine.dialect, "do_ping", counted)
    # The limit moved, not the clock: a wait shorter than an hour, then one longer than -1 s.
    monkeypatch.setattr(db, "IDLE_PING_SECONDS", 3600.0)
    try:
        with engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() == pid
        assert pings == []
        terminate_backend(ledger_url, pid)
        monkeypatch.setattr(db, "IDLE_PING_SECONDS", -1.0)
        with db.reading(engine) as conn:
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid
        assert len(pings) == 1
    finally:
        engine.dispose()


def test_a_full_disk_and_a_ledger_away_are_told_apart_from_refusals(tmp_path: Path) -> None:
    """`unavailability` says why the ledger could not take a statement for now: its disk is
    full (SQLite's SQLITE_FULL, PostgreSQL's SQLSTATE 53100), or it did not answer (a server
    that is not there); an answer such as a broken constraint is not that."""
    import psycopg

    from simreport.ledger.db import DISK_FULL, UNAVAILABLE, unavailability

    # A SQLite database allowed no more pages than it has fails as a full disk does.
    full = sa.create_engine(f"sqlite:///{tmp_path / 'full.sqlite'}")
    try:
        with full.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE t (x TEXT UNIQUE)")
            conn.exec_driver_sql("INSERT INTO t VALUES ('a')")
        with full.begin() as conn:
            (pages,) = conn.exec_driver_sql("PRAGMA page_count").one()
            conn.exec_driver_sql(f"PRAGMA max_page_count = {pages}")
            with pytest.raises(sa.exc.OperationalError) as disk_full:
                conn.exec_driver_sql("INSERT INTO t VALUES (?)", ("x" * 100_000,))
        assert unavailability(disk_full.value) == DISK_FULL
        with full.begin() as conn, pytest.raises(sa.exc.IntegrityError) as refused:
            conn.exec_driver_sql("INSERT INTO t VALUES ('a')")
        assert unavailability(refused.value) is None
    finally:
        full.dispose()

    # PostgreSQL: a server that is not there, and the error its full disk raises.
    nowhere = sa.create_engine(f"postgresql+psycopg://postgres@/simreport?host={tmp_path}")
    try:
        with pytest.raises(sa.exc.OperationalError) as away:
            nowhere.connect()
    finally:
        nowhere.dispose()
    assert unavailability(away.value) == UNAVAILABLE
    no_room = psycopg.errors.DiskFull('could not extend file "base/16384/16400"')
    wrapped = sa.exc.OperationalError("INSERT …", {}, no_room)
    assert unavailability(wrapped) == DISK_FULL
    assert unavailability(ValueError("not the ledger")) is None


@postgres_only
def test_a_write_that_finds_its_connection_lost_is_tried_again(
    ledger_url: str, results: Results
) -> None:
    """The server process behind a pooled connection goes away right after the connection was
    used (so it is not pinged): recording a run fails on it, and is tried again, whole, on a
    fresh connection."""
    engine = connect(ledger_url)
    try:
        ingest_run(engine, results.run_dirs()[0])
        with engine.connect() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        terminate_backend(ledger_url, pid)
        done = ingest_run(engine, results.refund)
        assert done.outcome == "recorded" and done.rows["event"] > 0
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid
            recorded = conn.execute(sa.select(sa.func.count()).select_from(t.run)).scalar()
        assert recorded == 2
    finally:
        engine.dispose()


def test_ingest_is_idempotent(engine: sa.Engine, results: Results, tmp_path: Path) -> None:
    first = ingest_paths(engine, [results.root / "results"])
    before = counts(engine)
    again = ingest_paths(engine, [results.root / "results"])
    assert again.runs_recorded == 0 and again.runs_present == first.runs_recorded
    assert again.builds_present == 1 and again.rows == {}
    assert counts(engine) == before
    # A byte copy of a run (the run store hands out copies) is the same run.
    copy = _copy(results.refund, tmp_path / "copy")
    assert run_identity(copy).run_id == run_identity(results.refund).run_id
    done = ingest_run(engine, copy)
    assert done.outcome == "present"
    assert counts(engine) == before


def test_a_run_id_arriving_with_other_content_is_refused(
    engine: sa.Engine, results: Results, tmp_path: Path
) -> None:
    run_dir = _copy(results.audit / "runs" / "base" / "0", tmp_path / "run")
    first = ingest_run(engine, run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    result["metrics"]["cooperationRate"] = 0.0 if result["metrics"]["cooperationRate"] else 1.0
    (run_dir / "result.json").write_text(json.dumps(result))
    before = counts(engine)
    with pytest.raises(RunConflict, match=first.run_id):
        ingest_run(engine, run_dir)
    assert counts(engine) == before
    kept = show_run(engine, first.run_id)
    assert kept["metrics"] != result["metrics"]


def test_an_asset_version_with_other_content_is_refused(
    engine: sa.Engine, results: Results, tmp_path: Path
) -> None:
    ingest_run(engine, results.refund)
    edited = _copy(results.refund, tmp_path / "edited")
    manifest = json.loads((edited / "manifest.json").read_text())
    manifest["resolved"]["sut.prompt"]["sha256"] = "0" * 64
    (edited / "manifest.json").write_text(json.dumps(manifest))
    # As edited, the manifest no longer matches its own digest (test_tampered_runs.py); as a
    # run that resolved other content under the version would have written it, it does.
    relock(edited)
    before = counts(engine)
    with pytest.raises(AssetVersionChanged) as caught:
        ingest_run(engine, edited)
    error = caught.value
    assert (error.file, error.path) == (str(edited / "manifest.json"), "resolved.sut.prompt")
    assert error.found == "0" * 64 and error.recorded not in (None, error.found)
    # The message names the version and its library file.
    assert "refund-prompt@1.0.0" in error.message
    assert manifest["resolved"]["sut.prompt"]["file"] in error.message
    assert counts(engine) == before


def test_a_record_edited_after_the_run_is_refused(
    engine: sa.Engine, results: Results, tmp_path: Path
) -> None:
    edited = _copy(results.refund, tmp_path / "edited")
    lines = (edited / "records.jsonl").read_text().splitlines()
    record = json.loads(lines[5])
    record["payload"]["tampered"] = True
    lines[5] = json.dumps(record)
    (edited / "records.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as caught:
        ingest_run(engine, edited)
    assert (caught.value.file, caught.value.line) == (str(edited / "records.jsonl"), 6)
    upgrade(engine)
    assert counts(engine)["run"] == 0


KILLED_INGEST = """\
import sys, time
from pathlib import Path
import simreport.ledger.ingest as ingest
import simreport.ledger.run_rows as run_rows
from simreport.ledger import connect

url, run_dir, marker = sys.argv[1:]
original = run_rows.write_table_rows

def write_then_wait(conn, rows):
    written = original(conn, rows)
    if rows.table == "record":
        # The run, its events and records are written; the marker appears whole (renamed).
        Path(marker + ".part").write_text(str(written))
        Path(marker + ".part").replace(marker)
        time.sleep(120)                        # … and the transaction is still open
    return written

run_rows.write_table_rows = write_then_wait
ingest.ingest_run(connect(url), run_dir)
"""


def test_a_process_killed_mid_ingest_leaves_nothing_and_a_rerun_completes_it(
    ledger_url: str, results: Results, tmp_path: Path
) -> None:
    engine = connect(ledger_url)
    try:
        upgrade(engine)
        marker = tmp_path / "inside-transaction"
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_INGEST, ledger_url, str(results.refund), str(marker)]
        )
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the ingest never reached its records"
        assert int(marker.read_text()) == _lines(results.refund / "records.jsonl")
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL

        run_id = run_identity(results.refund).run_id
        left = counts(engine)
        assert {k: v for k, v in left.items() if v} == {}, "the killed ingest left rows behind"
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"

        done = ingest_run(engine, results.refund)
        assert (done.run_id, done.outcome) == (run_id, "recorded")
        rows = counts(engine)
        assert rows["event"] == _lines(results.refund / "events.jsonl")
        assert rows["record"] == _lines(results.refund / "records.jsonl")
        assert show_run(engine, run_id)["faults"][0]["missingSteps"] == []
    finally:
        engine.dispose()


PARALLEL_WRITER = """\
import random, sys, time
from pathlib import Path
from simreport.ledger import connect, ingest_build, ingest_run

url, go, seed, audit, *runs = sys.argv[1:]
order = list(runs)
random.Random(int(seed)).shuffle(order)
Path(go + "." + seed).touch()  # ready: waiting at the line
while not Path(go).exists():
    time.sleep(0.01)
engine = connect(url)
for run_dir in order:
    ingest_run(engine, run_dir)
ingest_build(engine, audit)
"""


def test_eight_parallel_writers_lose_nothing(
    ledger_url: str, results: Results, tmp_path: Path
) -> None:
    """Eight processes record the same runs in different orders into a ledger none of them
    has created yet: the schema is created once, every run once, and nothing is missing."""
    runs = results.run_dirs()
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                PARALLEL_WRITER,
                ledger_url,
                str(go),
                str(n),
                str(results.audit),
                *map(str, runs),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(8)
    ]
    ready = [go.with_name(f"go.{n}") for n in range(8)]
    deadline = time.monotonic() + 120  # a guard against a hang: start-up measures nothing here
    while not all(path.exists() for path in ready):
        failed = [w for w in writers if w.poll() is not None]
        assert not failed, failed[0].communicate()[1]
        assert time.monotonic() < deadline, "the writers did not start"
        time.sleep(0.05)
    go.touch()
    errors = [w.communicate(timeout=300)[1] for w in writers]
    assert [w.returncode for w in writers] == [0] * 8, "\n".join(errors)
    engine = connect(ledger_url)
    try:
        rows = counts(engine)
        assert rows["run"] == len(runs)
        assert rows["event"] == sum(_lines(r / "events.jsonl") for r in runs)
        assert rows["record"] == _lines(results.refund / "records.jsonl")
        assert rows["build"] == 1 and rows["build_run"] == 4
        assert rows["manifest"] == len(runs)
        assert {r["runId"] for r in list_runs(engine)} == {run_identity(r).run_id for r in runs}
    finally:
        engine.dispose()


def test_a_sqlite_writer_waits_for_the_lock_in_short_steps_then_with_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer tries for SQLite's write lock in short steps for LOCK_POLL_SECONDS, then waits
    with SQLite's own busy handler: either way it gets the lock once the holder commits, and
    its connection keeps its busy timeout."""
    import threading

    from simreport.ledger import db

    monkeypatch.setattr(db, "LOCK_POLL_SECONDS", 0.1)
    engine = connect(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    try:
        upgrade(engine)
        for hold in (0.05, 0.4):  # released while polling, then after it
            holding, released = threading.Event(), threading.Event()
            holder = threading.Thread(target=_hold_the_lock, args=(engine, hold, holding, released))
            holder.start()
            assert holding.wait(10)
            with engine.begin() as conn:
                assert released.is_set()  # the lock came only once the holder let it go
                conn.execute(sa.insert(t.event).values(_event_row(int(hold * 100) + 1)))
                timeout = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
            holder.join()
            assert timeout == int(db.BUSY_TIMEOUT_SECONDS * 1000)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(t.event)).scalar() == 4
    finally:
        engine.dispose()


def _hold_the_lock(engine: sa.Engine, seconds: float, holding: Any, released: Any) -> None:
    with engine.begin() as conn:
        conn.execute(sa.insert(t.event).values(_event_row(int(seconds * 100))))
        holding.set()
        time.sleep(seconds)
        released.set()


@pytest.mark.parametrize("table", ["manifest", "event", "record"])
def test_the_database_refuses_to_change_what_is_append_only(
    engine: sa.Engine, results: Results, table: str
) -> None:
    ingest_run(engine, results.refund)
    target = t.metadata.tables[f"sim.{table}"]
    column = {"manifest": "seed", "event": "event_type", "record": "ref"}[table]
    value = 1 if column == "seed" else "changed"
    with pytest.raises(sa.exc.IntegrityError, match="append-only"), engine.begin() as conn:
        conn.execute(sa.update(target).values({column: value}))
    with pytest.raises(sa.exc.IntegrityError, match="append-only"), engine.begin() as conn:
        conn.execute(sa.delete(target))
    if engine.dialect.name == "postgresql":
        with pytest.raises(sa.exc.IntegrityError, match="append-only"), engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE sim.{table} CASCADE")
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(target)).scalar_one() > 0


def test_builds_make_a_plan_history(engine: sa.Engine, results: Results, tmp_path: Path) -> None:
    audit = tmp_path / "tiny_pd"
    shutil.copytree(results.audit, audit)
    first = ingest_build(engine, audit)
    assert first.outcome == "recorded" and first.runs == 4
    assert ingest_build(engine, audit).outcome == "present"
    # Another analysis (files only here): another build.
    simreport.analyse(audit, include_incomplete=True, ledger=False)
    second = ingest_build(engine, audit)
    assert second.outcome == "recorded" and second.build_id != first.build_id
    history = plan_history(engine, "tiny_pd")
    written = json.loads((audit / "audit.json").read_bytes())
    assert [b["buildId"] for b in history["builds"]] == [first.build_id, second.build_id]
    latest = history["builds"][-1]
    assert latest["planHash"] == written["plan"]["hash"]
    assert latest["grade"] == written["grade"]["grade"]
    assert latest["kernelFingerprints"] == written["provenance"]["kernelFingerprints"]
    assert latest["conditions"] == 2 and latest["runs"] == 4


# --------------------------------------------------------------------------- the commands


def test_the_commands_record_and_read_real_runs(
    ledger_url: str, results: Results, capsys: pytest.CaptureFixture[str]
) -> None:
    at = ["--ledger", ledger_url]
    assert main(["ledger", "upgrade", *at]) == 0
    assert head_revision() in capsys.readouterr().out
    assert main(["ledger", "ingest", str(results.root / "results"), *at]) == 0
    capsys.readouterr()
    held = counts(connect(ledger_url))
    assert (held["run"], held["build"]) == (len(results.run_dirs()), 1)

    assert main(["ledger", "runs", "--json", *at]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert len(runs) == len(results.run_dirs())
    assert main(["ledger", "runs", "--scenario", "refund-timeout-retry", *at]) == 0
    table = capsys.readouterr().out
    refund_id = run_identity(results.refund).run_id
    assert refund_id in table and "1 run" in table
    assert main(["ledger", "runs", "--status", "crashed", "--since", "1d", "--json", *at]) == 0
    assert [r["engine"] for r in json.loads(capsys.readouterr().out)] == ["external:sim_fail.py"]
    assert main(["ledger", "runs", "--since", "2999-01-01", "--json", *at]) == 0
    assert json.loads(capsys.readouterr().out) == []

    assert main(["ledger", "show", refund_id[:12], *at]) == 0
    shown = capsys.readouterr().out
    for text in (
        "execution completed",
        "validity valid",
        "evidence complete",
        "refund-prompt@1.0.0",
        "no_duplicate_refund",
        "fault_recovery",
        "refund-timeout: timeout on create_refund: planned → armed → hit → recovered",
    ):
        assert text in shown
    assert main(["ledger", "show", refund_id, "--json", *at]) == 0
    assert json.loads(capsys.readouterr().out)["runId"] == refund_id

    assert main(["ledger", "history", "tiny_pd", "--json", *at]) == 0
    history = json.loads(capsys.readouterr().out)
    audit = json.loads((results.audit / "audit.json").read_text())
    assert [(b["grade"], b["planHash"]) for b in history["builds"]] == [
        (audit["grade"]["grade"], audit["plan"]["hash"])
    ]
    assert main(["ledger", "history", "tiny_pd", *at]) == 0
    assert audit["plan"]["hash"][:12] in capsys.readouterr().out

    assert main(["ledger", "assets", "--json", *at]) == 0
    assets = {(a["name"], a["version"]): a for a in json.loads(capsys.readouterr().out)}
    prompt = assets[("refund-prompt", "1.0.0")]
    assert prompt["runs"] == [refund_id] and prompt["runCount"] == 1
    assert (
        prompt["sha256"]
        == json.loads((results.refund / "manifest.json").read_text())["resolved"]["sut.prompt"][
            "sha256"
        ]
    )
    assert main(["ledger", "assets", *at]) == 0
    assert "refund-prompt" in capsys.readouterr().out

    error = refused(capsys, ["ledger", "show", "run-nothing", *at]).error
    assert isinstance(error, NotRecorded) and "'run-nothing'" in error.message
    assert main(["ledger", "history", "nope", *at]) == 2
    assert "tiny_pd" in capsys.readouterr().err  # the plans it does know


def test_ingest_reports_refused_runs_and_records_the_rest(
    ledger_url: str, results: Results, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "results"
    good = _copy(results.echo, folder / "echo")
    ingest_run(connect(ledger_url), good)
    result = json.loads((good / "result.json").read_text())
    result["metrics"] = {name: 0.5 for name in result["metrics"]}
    (good / "result.json").write_text(json.dumps(result))
    _copy(results.external, folder / "external")
    engine = connect(ledger_url)
    before = counts(engine)["run"]
    assert main(["ledger", "ingest", str(folder), "--ledger", ledger_url]) == 2
    # The external run is recorded; the edited one is refused, named on stderr.
    assert counts(engine)["run"] == before + 1
    [line] = capsys.readouterr().err.splitlines()
    assert str(good) in line
    with pytest.raises(RunConflict):  # why: its run id is recorded with other content
        ingest_run(engine, good)


# --------------------------------------------------------------------------- where it lives


def test_the_ledger_url_comes_from_the_option_the_environment_the_config_or_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert ledger_url(results_dir="results") == "sqlite:///results/ledger.sqlite"
    assert ledger_url(results_dir="r", configured=None) is None  # `ledger: null`: off
    assert ledger_url(results_dir="r", configured="x.sqlite") == "sqlite:///x.sqlite"
    monkeypatch.setenv(ENV_VAR, "postgresql://u:pw@db.example/sim")
    assert (
        ledger_url(results_dir="r", configured=None) == "postgresql+psycopg://u:pw@db.example/sim"
    )
    assert ledger_url(results_dir="r", configured=UNSET).startswith("postgresql+psycopg://")
    assert ledger_url(f"{tmp_path}/l.sqlite", results_dir="r") == f"sqlite:///{tmp_path}/l.sqlite"
    for bad in ("mysql://u:pw@h/db", "sqlite://", "postgresql+psycopg2://u:pw@h/db"):
        with pytest.raises(LedgerUnavailable) as caught:
            ledger_url(bad, results_dir="r")
        assert "pw" not in str(caught.value) and caught.value.path == "--ledger"


def test_an_unreachable_database_is_named_without_its_password() -> None:
    with pytest.raises(LedgerUnavailable) as caught:
        connect("postgresql+psycopg://reader:s3cret-pass@127.0.0.1:9/ledger?connect_timeout=5")
    message = str(caught.value)
    assert "postgresql+psycopg://***@127.0.0.1:9/ledger" in message
    assert "s3cret-pass" not in message


def test_a_database_failing_under_a_command_is_said_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The ledger's database failing under a command (here: a server gone mid-query) is the
    user's environment, not a bug: one line naming the database's answer, exit 2."""
    from simreport.ledger import queries

    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    assert main(["ledger", "upgrade", "--ledger", url]) == 0
    capsys.readouterr()

    def gone(*_args: Any, **_kwargs: Any) -> Any:
        reason = Exception("server closed the connection unexpectedly\n\tThis probably means …")
        raise sa.exc.OperationalError("SELECT …", {}, reason)

    monkeypatch.setattr(queries, "list_runs", gone)
    assert main(["ledger", "runs", "--ledger", url]) == 2
    [line] = capsys.readouterr().err.splitlines()
    # The database's answer, its first line only.
    assert line.startswith("simreport: ")
    assert line.endswith(": server closed the connection unexpectedly")


def test_reading_a_missing_sqlite_ledger_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    error = refused(capsys, ["ledger", "runs", "--results", str(tmp_path / "results")]).error
    assert isinstance(error, LedgerUnavailable) and str(tmp_path / "results") in error.message
    assert not (tmp_path / "results").exists()


def test_the_ledger_loads_its_database_libraries_only_when_used() -> None:
    code = (
        "import sys, simreport.cli, simreport.ledger\n"
        "simreport.cli.build_parser()\n"
        "assert 'sqlalchemy' not in sys.modules and 'alembic' not in sys.modules\n"
        "simreport.ledger.ingest_run\n"
        "assert 'sqlalchemy' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    import simreport.ledger as ledger

    for name in ledger.__all__:
        assert getattr(ledger, name) is not None
