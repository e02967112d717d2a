"""Recording many runs at once (`simreport ledger ingest`): worker processes and runs grouped in
one transaction, each in a savepoint of its own. The ledger must hold exactly what recording
the runs one by one gives, refuse a run alone, and never keep part of a run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

import simreport
from simreport.cli import main
from simreport.core.errors import InputError
from simreport.ledger import RunConflict, connect, ingest_run
from simreport.ledger import tables as t
from simreport.ledger.bulk import datetime_text, epoch_text
from simreport.ledger.db import as_utc
from simreport.ledger.ingest import RunIngest, ingest_runs
from simreport.ledger.migrate import upgrade
from simreport.ledger.queries import counts
from simreport.ledger.rundir import record_digest, wall_time
from tests.support.run_digests import relock

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Five refund-desk runs and two echo-chamber runs, each with its own seed."""
    base = tmp_path_factory.mktemp("bulk-runs")
    made = []
    for seed in range(1, 6):
        out = base / f"refund-{seed}"
        simreport.run(EXAMPLES / "refund_desk" / "scenario.yaml", out, seed=seed, ledger=False)
        made.append(out)
    for seed in (1, 2):
        out = base / f"echo-{seed}"
        simreport.run(EXAMPLES / "echo_chamber" / "scenario.yaml", out, seed=seed, ledger=False)
        made.append(out)
    return made


class Heard:
    def __init__(self) -> None:
        self.order: list[Path] = []
        self.recorded: list[RunIngest] = []
        self.refused: dict[Path, Exception] = {}

    def run(self, done: RunIngest) -> None:
        self.order.append(done.path)
        self.recorded.append(done)

    def refuse(self, path: Path, exc: Exception) -> None:
        self.order.append(path)
        self.refused[path] = exc


def _ingest(engine: sa.Engine, paths: list[Path], *, jobs: int, group: int) -> Heard:
    heard = Heard()
    ingest_runs(engine, paths, on_run=heard.run, on_refused=heard.refuse, jobs=jobs, group=group)
    return heard


def _content(engine: sa.Engine) -> dict[str, list[tuple[object, ...]]]:
    """What the run-owned tables hold, without the columns that say when rows were written."""
    columns = {
        "run": ("run_id", "manifest_id", "execution_status", "result", "content_sha256"),
        "event": ("run_id", "seq", "event_type", "actor", "payload", "wall_time"),
        "record": ("record_id", "sha256", "seq", "kind", "body", "created_at"),
        "observation": ("observation_id", "fact_key", "fact_value"),
        "evidence": ("evidence_id", "sufficient", "detail"),
        "completeness": ("run_id", "check_key", "status"),
        "fault_plan": ("run_id", "fault_id", "params"),
        "fault_record": ("run_id", "fault_id", "stage", "detail"),
        "manifest": ("manifest_id", "manifest_sha256", "document"),
        "manifest_asset": ("manifest_id", "slot", "content_sha256"),
        "asset_version": ("asset_id", "version", "content_sha256", "status"),
    }
    found = {}
    with engine.connect() as conn:
        for name, keys in columns.items():
            table = getattr(t, name)
            rows = conn.execute(sa.select(*(table.c[k] for k in keys))).all()
            found[name] = sorted(tuple(_plain(v) for v in row) for row in rows)
    return found


def _plain(value: object) -> str:
    """A value as both databases give it back alike: timestamps in UTC, JSON canonical."""
    if isinstance(value, datetime):
        return str(as_utc(value))
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return repr(value)


@pytest.mark.parametrize(("jobs", "group"), [(1, 3), (2, 2), (2, 64)])
def test_bulk_ingest_records_what_one_by_one_records(
    engine: sa.Engine, second_ledger_url: str, runs: list[Path], jobs: int, group: int
) -> None:
    heard = _ingest(engine, runs, jobs=jobs, group=group)
    assert heard.refused == {}
    assert heard.order == runs, "outcomes are reported in the order of the runs"
    assert {done.outcome for done in heard.recorded} == {"recorded"}
    assert sum(done.rows.get("record", 0) for done in heard.recorded) == counts(engine)["record"]

    one_by_one = connect(second_ledger_url)
    try:
        for run in runs:
            ingest_run(one_by_one, run)
        assert _content(engine) == _content(one_by_one)
    finally:
        one_by_one.dispose()

    again = _ingest(engine, runs, jobs=jobs, group=group)
    assert [done.outcome for done in again.recorded] == ["present"] * len(runs)


def test_a_refused_run_is_rolled_back_alone_and_the_group_is_recorded(
    engine: sa.Engine, runs: list[Path], tmp_path: Path
) -> None:
    first, second, third = runs[0], runs[1], runs[2]
    # The same run twice (a copy elsewhere), the same run with other content, a broken run.
    twin = shutil.copytree(first, tmp_path / "twin")
    changed = shutil.copytree(second, tmp_path / "changed")
    result = json.loads((changed / "result.json").read_text())
    result["metrics"] = {key: -1 for key in result["metrics"]}
    (changed / "result.json").write_text(json.dumps(result))
    broken = shutil.copytree(third, tmp_path / "broken")
    lines = (broken / "records.jsonl").read_text().splitlines()
    record = json.loads(lines[3])
    record["payload"]["edited"] = True
    lines[3] = json.dumps(record)
    (broken / "records.jsonl").write_text("\n".join(lines) + "\n")

    order = [first, twin, second, changed, broken, third, runs[3]]
    heard = _ingest(engine, order, jobs=1, group=len(order))
    assert heard.order == order
    assert set(heard.refused) == {changed, broken}
    assert isinstance(heard.refused[changed], RunConflict)
    refused = heard.refused[broken]
    assert isinstance(refused, InputError)
    assert (refused.file, refused.line) == (str(broken / "records.jsonl"), 4)
    outcomes = {done.path: done.outcome for done in heard.recorded}
    assert outcomes == {
        first: "recorded",
        twin: "present",
        second: "recorded",
        third: "recorded",
        runs[3]: "recorded",
    }
    assert counts(engine)["run"] == 4
    with engine.connect() as conn:
        kept = conn.execute(
            sa.select(t.run.c.result).where(t.run.c.source_dir == str(second.resolve()))
        ).scalar_one()
    assert kept["metrics"] != result["metrics"], "the ledger keeps what it recorded first"


def test_workers_refuse_a_run_naming_its_file(engine: sa.Engine, runs: list[Path]) -> None:
    missing = runs[0].parent / "not-a-run"
    heard = _ingest(engine, [runs[0], missing, runs[1]], jobs=2, group=8)
    assert set(heard.refused) == {missing}
    assert isinstance(heard.refused[missing], InputError)
    assert "not-a-run" in str(heard.refused[missing])
    assert counts(engine)["run"] == 2


def test_with_other_threads_running_the_runs_are_read_here(
    engine: sa.Engine, runs: list[Path]
) -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        heard = _ingest(engine, runs[:3], jobs=2, group=4)
    finally:
        stop.set()
        other.join()
    assert heard.refused == {}
    assert counts(engine)["run"] == 3


KILLED_GROUP = """\
import sys, time
from pathlib import Path
import simreport.ledger.ingest as ingest
import simreport.ledger.run_rows as run_rows
from simreport.ledger import connect

url, marker, *runs = sys.argv[1:]
original = run_rows.write_table_rows
written = []

def write_then_wait(conn, rows):
    done = original(conn, rows)
    if rows.table == "record":
        written.append(rows.values[0][1])
        if len(written) == 3:                       # three runs written, the group still open
            Path(marker).write_text(str(len(written)))
            time.sleep(120)
    return done

run_rows.write_table_rows = write_then_wait
ingest.ingest_runs(
    connect(url), runs, on_run=lambda done: None, on_refused=lambda path, exc: None, group=8
)
"""


def test_a_process_killed_mid_group_leaves_no_run_and_a_rerun_records_them(
    ledger_url: str, runs: list[Path], tmp_path: Path
) -> None:
    engine = connect(ledger_url)
    try:
        upgrade(engine)
        marker = tmp_path / "inside-group"
        refunds = runs[:5]
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_GROUP, ledger_url, str(marker), *map(str, refunds)]
        )
        deadline = time.monotonic() + 60
        while not marker.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "the ingest never wrote three runs"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
        assert {k: v for k, v in counts(engine).items() if v} == {}, "a killed group left rows"

        heard = _ingest(engine, refunds, jobs=1, group=8)
        assert [done.outcome for done in heard.recorded] == ["recorded"] * 5
        assert counts(engine)["run"] == 5
    finally:
        engine.dispose()


def test_the_ingest_command_takes_jobs(tmp_path: Path, runs: list[Path]) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    folder = tmp_path / "results"
    for run in runs[:3]:
        shutil.copytree(run, folder / run.name)
    assert main(["ledger", "ingest", str(folder), "--jobs", "2", "--ledger", url]) == 0
    engine = connect(url, must_exist=True)
    try:
        assert counts(engine)["run"] == 3
    finally:
        engine.dispose()
    with pytest.raises(SystemExit) as exit_:
        main(["ledger", "ingest", str(folder), "--jobs", "0", "--ledger", url])
    assert exit_.value.code == 2


def test_long_integers_and_python_floats_are_kept_exactly(
    engine: sa.Engine, runs: list[Path], tmp_path: Path
) -> None:
    """orjson decodes the common lines; an integer past 64 bits (which it would make a float)
    and floats it spells unlike Python are decoded by the json module, so nothing changes."""
    run = shutil.copytree(runs[0], tmp_path / "numbers")
    extra = {"big": 123456789012345678901234567890, "tiny": 1e-07, "huge": 1e16, "neg": -(2**70)}

    lines = (run / "records.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    record["payload"]["numbers"] = extra
    record["sha256"] = record_digest(record)
    lines[2] = json.dumps(record, ensure_ascii=False)
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")

    events = (run / "events.jsonl").read_text().splitlines()
    event = json.loads(events[1])
    event["payload"]["numbers"] = extra
    events[1] = json.dumps(event, ensure_ascii=False)
    (run / "events.jsonl").write_text("\n".join(events) + "\n")
    relock(run)  # as if the run had written the numbers: its digests agree

    heard = _ingest(engine, [run], jobs=1, group=4)
    assert heard.refused == {}
    with engine.connect() as conn:
        body = conn.execute(
            sa.select(t.record.c.body).where(t.record.c.seq == record["seq"])
        ).scalar_one()
        payload = conn.execute(
            sa.select(t.event.c.payload).where(t.event.c.seq == event["seq"])
        ).scalar_one()
    assert body["payload"]["numbers"] == extra
    assert payload["numbers"] == extra
    assert type(payload["numbers"]["big"]) is int


def test_a_run_evaluated_before_it_is_recorded_is_linked_to_its_evaluation(
    engine: sa.Engine, runs: list[Path], tmp_path: Path
) -> None:
    judged = shutil.copytree(runs[0], tmp_path / "judged")
    stale = shutil.copytree(runs[1], tmp_path / "stale")
    assert main(["evaluate", str(judged)]) == 0
    assert main(["evaluate", str(stale)]) == 0
    evaluation = json.loads((stale / "evaluation.json").read_text())
    evaluation["criteria"] = {}  # edited after it was written: its qualityRef no longer fits
    (stale / "evaluation.json").write_text(json.dumps(evaluation))

    heard = _ingest(engine, [judged, stale], jobs=1, group=2)
    assert heard.refused == {}
    with engine.connect() as conn:
        refs = dict(conn.execute(sa.select(t.run.c.source_dir, t.run.c.quality_ref)).all())
    expected = json.loads((judged / "evaluation.json").read_text())["qualityRef"]
    assert refs == {str(judged.resolve()): expected, str(stale.resolve()): None}


def test_an_observation_names_the_criterion_it_is_evidence_for(
    engine: sa.Engine, runs: list[Path]
) -> None:
    run = runs[0]
    ingest_run(engine, run)
    evidence = json.loads((run / "evidence.json").read_text())["criteria"]
    citing: dict[str, list[str]] = {}
    for criterion, item in evidence.items():
        for observation_id in item["observationIds"]:
            citing.setdefault(observation_id, []).append(criterion)
    with engine.connect() as conn:
        keys = dict(
            conn.execute(
                sa.select(t.observation.c.observation_id, t.observation.c.criterion_key)
            ).all()
        )
    assert keys, "the run has observations"
    expected = {
        f"{run_id}/{oid}": (found[0] if len(found) == 1 else None)
        for run_id in {k.split("/")[0] for k in keys}
        for oid, found in citing.items()
    }
    assert {k: v for k, v in keys.items() if v is not None} == {
        k: v for k, v in expected.items() if v is not None
    }
    assert any(v is None for v in keys.values()), "plain facts name no criterion"


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False, allow_infinity=False))
def test_an_event_time_is_stored_as_the_datetime_path_stores_it(seconds: float) -> None:
    assert epoch_text(seconds) == datetime_text(wall_time(seconds))


@pytest.mark.parametrize("seconds", [0.0, 0.5e-6, 1.5e-6, 2.5e-6, 1796078747.9999995, 1e9 + 5e-7])
def test_event_times_round_their_microseconds_half_to_even(seconds: float) -> None:
    assert epoch_text(seconds) == datetime_text(wall_time(seconds))
