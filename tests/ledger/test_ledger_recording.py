"""Every run and every build lands in the ledger from the normal commands and the workflow:
`simreport run`, `audit` and `analyse`, and the workflow's condition and analysis jobs. Where it
lives (flag > environment > config > beside the results), `--no-ledger` and `ledger: null`, and
what happens when the ledger cannot record: the files stay complete, one line names the run and
the ledger, and the command or build ends non-zero."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simreport.cli import main
from simreport.core.errors import EXIT_RUN_FAILED, InputError
from simreport.ledger import (
    EXIT_LEDGER,
    LedgerIncomplete,
    LedgerRecorder,
    RunConflict,
    connect,
    ingest_run,
)
from simreport.ledger.location import ENV_VAR
from simreport.ledger.queries import counts, list_runs
from simreport.workflow import load_workflow, retype_command_line
from tests.e2e.test_workflow_failures import (
    SNAKEMAKE,
    SwitchableLLM,
    _config,
    _snakemake,
    _workspace,
    needs_snakemake,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UNREACHABLE = "postgresql+psycopg://auditor:hunter2@127.0.0.1:1/ledger"

TINY_PLAN = """\
id: tiny_pd
baseScenario: scenario.yaml
axes:
  - template: linguistic_framing
    levels: [moralised]
replications: 2
metrics: [cooperationRate]
"""


@pytest.fixture(autouse=True)
def _no_ledger_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    folder = tmp_path / "plan"
    folder.mkdir()
    shutil.copy(EXAMPLES / "prisoners_dilemma" / "scenario.yaml", folder / "scenario.yaml")
    (folder / "audit.yaml").write_text(TINY_PLAN, encoding="utf-8")
    return folder / "audit.yaml"


def _rows(url: str) -> dict[str, int]:
    engine = connect(url, must_exist=True)
    try:
        return counts(engine)
    finally:
        engine.dispose()


def _run_ids(url: str) -> set[str]:
    engine = connect(url, must_exist=True)
    try:
        return {row["runId"] for row in list_runs(engine)}
    finally:
        engine.dispose()


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# --------------------------------------------------------------------------- commands


def test_run_records_beside_its_output_and_no_ledger_records_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "echo"
    assert main(["run", str(EXAMPLES / "echo_chamber" / "scenario.yaml"), "--out", str(out)]) == 0
    default = f"sqlite:///{tmp_path / 'results' / 'ledger.sqlite'}"
    rows = _rows(default)
    assert rows["run"] == 1 and rows["event"] > 0

    other = tmp_path / "files-only" / "echo"
    echo = str(EXAMPLES / "echo_chamber" / "scenario.yaml")
    code = main(["run", echo, "--out", str(other), "--no-ledger"])
    assert code == 0 and (other / "result.json").is_file()
    assert not (other.parent / "ledger.sqlite").exists()
    capsys.readouterr()


def test_flag_beats_environment_beats_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = str(EXAMPLES / "refund_desk" / "scenario.yaml")
    from_env = f"sqlite:///{tmp_path / 'env.sqlite'}"
    from_flag = f"sqlite:///{tmp_path / 'flag.sqlite'}"
    monkeypatch.setenv(ENV_VAR, from_env)
    assert main(["run", scenario, "--out", str(tmp_path / "r" / "a")]) == 0
    assert main(["run", scenario, "--out", str(tmp_path / "r" / "b"), "--ledger", from_flag]) == 0
    assert not (tmp_path / "r" / "ledger.sqlite").exists()
    assert _rows(from_env)["run"] == 1
    flag_rows = _rows(from_flag)
    assert flag_rows["run"] == 1 and flag_rows["record"] > 0 and flag_rows["evidence"] > 0


def test_a_failed_run_is_recorded_and_keeps_its_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "sim"
    folder.mkdir()
    shutil.copy(FIXTURES / "sim_fail.py", folder / "sim_fail.py")
    (folder / "sim_fail.yaml").write_text(
        f"simulator:\n  command: [{sys.executable}, sim_fail.py]\n  metrics: [hitRate]\n"
        "params: {rate: 0.3}\nseed: 11\n",
        encoding="utf-8",
    )
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    out = tmp_path / "results" / "failed"
    assert main(["run", str(folder / "sim_fail.yaml"), "--out", str(out), "--ledger", url]) == (
        EXIT_RUN_FAILED
    )
    engine = connect(url, must_exist=True)
    try:
        (run,) = list_runs(engine)
    finally:
        engine.dispose()
    assert run["status"]["execution"] != "completed"
    capsys.readouterr()


@pytest.mark.slow
def test_audit_records_every_run_and_its_build(
    plan: Path, tmp_path: Path, ledger_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On SQLite and on PostgreSQL."""
    out = tmp_path / "results" / "tiny_pd"
    assert main(["audit", str(plan), "--out", str(out), "--ledger", ledger_url]) == 0
    rows = _rows(ledger_url)
    assert (rows["run"], rows["build"], rows["build_run"], rows["build_condition"]) == (4, 1, 4, 2)
    files = _tree_digest(out)

    # `ledger show` reads one back with its statuses.
    run_id = sorted(_run_ids(ledger_url))[0]
    capsys.readouterr()
    assert main(["ledger", "show", run_id, "--ledger", ledger_url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["runId"] == run_id and shown["status"]["execution"] == "completed", shown

    # Analysing again records nothing new, and no file of the audit changed for the ledger.
    assert main(["analyse", str(out), "--ledger", ledger_url]) == 0
    assert _rows(ledger_url) == rows
    assert _tree_digest(out) == files


@pytest.mark.slow
def test_analyse_records_a_build_in_the_default_ledger(
    plan: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "tiny_pd"
    assert main(["audit", str(plan), "--out", str(out), "--no-ledger"]) == 0
    assert not (tmp_path / "results" / "ledger.sqlite").exists()
    assert main(["analyse", str(out)]) == 0
    rows = _rows(f"sqlite:///{tmp_path / 'results' / 'ledger.sqlite'}")
    assert (rows["build"], rows["run"]) == (1, 4)
    capsys.readouterr()


@pytest.mark.slow
def test_unreachable_ledger_keeps_the_files_and_exits_non_zero(
    plan: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "tiny_pd"
    code = main(["audit", str(plan), "--out", str(out), "--ledger", UNREACHABLE])
    err = capsys.readouterr().err
    assert code == EXIT_LEDGER, err
    assert (out / "audit.json").is_file() and (out / "report.html").is_file()
    assert len(list((out / "runs").glob("*/*/result.json"))) == 4
    lines = [line for line in err.splitlines() if line.startswith("simreport: ledger: ")]
    assert len(lines) == 1, err  # one line, not one per run
    assert str(out / "runs" / "base" / "0") in lines[0]
    assert "127.0.0.1:1/ledger" in lines[0] and "hunter2" not in err
    # The last line counts what the ledger did not record: four runs and the build.
    last = err.splitlines()[-1]
    assert re.findall(r"\d+", last.split("127.0.0.1:1/ledger", 1)[1]) == ["5"], last

    # Once the ledger works, the files are recorded as they are.
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    assert main(["ledger", "ingest", str(out.parent), "--ledger", url]) == 0
    assert _rows(url)["run"] == 4


def test_a_conflicting_run_is_reported_not_overwritten(plan: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    out = tmp_path / "results" / "echo"
    assert main(["run", str(EXAMPLES / "echo_chamber" / "scenario.yaml"), "--out", str(out)]) == 0
    assert main(["ledger", "ingest", str(out), "--ledger", url]) == 0
    result = json.loads((out / "result.json").read_text())
    result["metrics"] = {k: 0.0 for k in result["metrics"]}
    (out / "result.json").write_text(json.dumps(result))
    said: list[str] = []
    with LedgerRecorder(url, say=said.append) as recorder:
        recorder.record_runs([out])
    assert not recorder.complete and len(said) == 1
    assert str(out) in said[0]
    with pytest.raises(LedgerIncomplete) as caught:
        recorder.raise_if_incomplete()
    assert len(caught.value.problems) == 1 and caught.value.problems[0] in said[0]
    with pytest.raises(RunConflict):  # why: the run id is recorded with other content
        ingest_run(connect(url), out)


def test_bad_ledger_flag_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results" / "echo"
    echo = str(EXAMPLES / "echo_chamber" / "scenario.yaml")
    code = main(["run", echo, "--out", str(out), "--ledger", "mysql://u:secret@db/x"])
    err = capsys.readouterr().err
    assert code == 2 and "--ledger" in err and "secret" not in err
    assert not out.exists()


# --------------------------------------------------------------------------- workflow config


def _workflow_config(tmp_path: Path, **values: Any) -> dict[str, Any]:
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir(exist_ok=True)
    shutil.copy(EXAMPLES / "prisoners_dilemma" / "scenario.yaml", plan_dir / "scenario.yaml")
    (plan_dir / "audit.yaml").write_text(TINY_PLAN, encoding="utf-8")
    return {"plans": [str(plan_dir / "audit.yaml")], "results": str(tmp_path / "res"), **values}


def test_workflow_ledger_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = load_workflow(_workflow_config(tmp_path), config_file="my.yaml")
    assert default.ledger == f"sqlite:///{tmp_path / 'res' / 'ledger.sqlite'}"
    assert load_workflow(_workflow_config(tmp_path, ledger=None)).ledger is None
    pg = load_workflow(_workflow_config(tmp_path, ledger="postgresql://u@db/sim")).ledger
    assert pg == "postgresql+psycopg://u@db/sim"
    for bad in (5, "mysql://u:secret@db/x"):
        with pytest.raises(InputError) as caught:
            load_workflow(_workflow_config(tmp_path, ledger=bad), config_file="my.yaml")
        line = caught.value.one_line()
        assert line.startswith("my.yaml: ledger: ") and "secret" not in line, line
    # The environment wins over the config, and `--config ledger=null` arrives as text.
    monkeypatch.setenv(ENV_VAR, "sqlite:///elsewhere.sqlite")
    assert load_workflow(_workflow_config(tmp_path, ledger=None)).ledger == (
        "sqlite:///elsewhere.sqlite"
    )
    given: dict[str, Any] = {"ledger": "null"}
    retype_command_line(given)
    assert given == {"ledger": None}


# --------------------------------------------------------------------------- workflow


def _ledger_cli(dest: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SNAKEMAKE.parent / "simreport"), "ledger", *args],
        cwd=dest,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.mark.slow
@needs_snakemake
def test_workflow_builds_the_ledger_and_a_rerun_adds_nothing(tmp_path: Path) -> None:
    dest = _workspace(tmp_path)
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    assert (dest / "site" / "index.html").is_file()
    url = f"sqlite:///{dest / 'results' / 'ledger.sqlite'}"
    rows = _rows(url)
    assert (rows["run"], rows["build"], rows["build_run"]) == (4, 1, 4)

    listed = _ledger_cli(dest, "runs", "--json")  # the default: results/ledger.sqlite
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert len(runs) == 4 and {r["condition"] for r in runs} == set(
        ["base", "linguistic_framing=moralised"]
    )
    shown = _ledger_cli(
        dest, "show", runs[0]["runId"], "--ledger", "sqlite:///results/ledger.sqlite"
    )
    assert shown.returncode == 0 and "completed" in shown.stdout, shown.stderr

    code, out = _snakemake(dest)
    assert code == 0 and "Nothing to be done" in out, out[-3000:]
    assert _rows(url) == rows


@pytest.mark.slow
@needs_snakemake
def test_workflow_with_an_unreachable_ledger_fails_then_records_from_the_store(
    tmp_path: Path,
) -> None:
    dest = _workspace(tmp_path, ledger=UNREACHABLE)
    code, out = _snakemake(dest)
    assert code != 0, out[-3000:]
    assert "not recorded" in out and "127.0.0.1:1/ledger" in out and "hunter2" not in out, out
    runs = list((dest / "results" / "study" / "runs").glob("*/*/result.json"))
    assert runs, "the run files stay"

    # The ledger works again: the next build records the runs without running them again.
    _config(dest, plans=["study/audit.yaml"])
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    assert _rows(f"sqlite:///{dest / 'results' / 'ledger.sqlite'}")["run"] == 4
    for log in (dest / "results" / "study" / "logs" / "runs").glob("*.log"):
        assert "computed=0" in log.read_text().splitlines()[-1], log.read_text()


@pytest.mark.slow
@needs_snakemake
def test_workflow_off_records_nothing_and_a_retried_run_keeps_the_failed_one(
    tmp_path: Path,
) -> None:
    dest = _workspace(tmp_path, ledger=None)
    code, out = _snakemake(dest)
    assert code == 0, out[-3000:]
    assert not (dest / "results" / "ledger.sqlite").exists()

    with SwitchableLLM(answer="hash") as server:
        server.failing = True
        llm = {"provider": "openai", "baseUrl": server.url, "model": "test"}
        dest = _workspace(tmp_path / "retry", llm)
        code, out = _snakemake(dest)
        assert code == 0, out[-3000:]
        url = f"sqlite:///{dest / 'results' / 'ledger.sqlite'}"
        failed = _run_ids(url)
        assert len(failed) == 4
        server.failing = False
        code, out = _snakemake(dest)
        assert code == 0, out[-3000:]
        every = _run_ids(url)
        assert failed < every and len(every) == 8


# --------------------------------------------------------------------------- as runs end


def _refund_runs(tmp_path: Path, seeds: list[int]) -> list[Path]:
    import simreport

    runs = []
    for seed in seeds:
        out = tmp_path / "runs" / str(seed)
        simreport.run(EXAMPLES / "refund_desk" / "scenario.yaml", out, seed=seed, ledger=False)
        runs.append(out)
    return runs


def test_runs_handed_over_as_they_end_are_recorded_once(tmp_path: Path, ledger_url: str) -> None:
    """A workflow job hands each finished run to the ledger's writer thread as it ends, then
    all of its runs once every one has: each run is recorded once; a later job that hands the
    same runs over finds them present with one query."""
    runs = _refund_runs(tmp_path, [1, 2, 3])
    with LedgerRecorder(ledger_url, shared=True) as recorder:
        for run in runs[:2]:
            recorder.record_soon(run)
        recorder.record_runs(runs)
    assert recorder.complete, recorder.problems
    assert (recorder.runs_recorded, recorder.runs_present) == (3, 0)
    with LedgerRecorder(ledger_url) as again:
        again.record_runs(runs)
    assert again.complete, again.problems
    assert (again.runs_recorded, again.runs_present) == (0, 3)
    assert _rows(ledger_url)["run"] == 3


def test_runs_handed_over_while_the_writer_is_busy_share_one_commit(
    tmp_path: Path, ledger_url: str
) -> None:
    """The writer thread takes every run handed over while it was busy at once, and records
    them in one transaction (each in a savepoint); a run handed over to an idle writer is
    recorded without waiting for company."""
    import threading

    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

    runs = _refund_runs(tmp_path, [1, 2, 3, 4, 5, 6])
    commits: list[object] = []

    def count(conn: object) -> None:
        commits.append(conn)

    with LedgerRecorder(ledger_url) as recorder:
        recorder.record_runs(runs[:1])  # opens the ledger (its schema check commits too)
        sa.event.listen(Engine, "commit", count)
        try:
            busy = threading.Event()
            recorder._submit(lambda: busy.wait(30))  # the writer thread is busy meanwhile
            for run in runs[1:5]:
                recorder.record_soon(run)
            busy.set()
            recorder.record_runs(runs[1:5])
            assert len(commits) == 1
            recorder.record_soon(runs[5])
            recorder.record_runs(runs[5:])
            assert len(commits) == 2
        finally:
            sa.event.remove(Engine, "commit", count)
    assert recorder.complete, recorder.problems
    assert (recorder.runs_recorded, recorder.runs_present) == (6, 0)
    assert _rows(ledger_url)["run"] == 6


def test_a_run_handed_over_is_recorded_when_nobody_waits(tmp_path: Path, ledger_url: str) -> None:
    """A run handed over is recorded by the writer thread without anyone waiting for it."""
    import time

    (run,) = _refund_runs(tmp_path, [1])
    with LedgerRecorder(ledger_url) as recorder:
        recorder.record_soon(run)
        deadline = time.monotonic() + 30
        while recorder.runs_recorded == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert recorder.runs_recorded == 1
    assert recorder.complete, recorder.problems
    assert _rows(ledger_url)["run"] == 1


def test_runs_handed_over_and_not_taken_are_dropped_when_the_job_is_closed(
    tmp_path: Path, ledger_url: str
) -> None:
    """An interrupted job closes its recorder: the runs it handed over that the writer thread
    has not taken yet are dropped (the next build records them), and nothing is said."""
    import threading

    runs = _refund_runs(tmp_path, [1, 2])
    said: list[str] = []
    with LedgerRecorder(ledger_url, say=said.append) as recorder:
        recorder.record_runs(runs[:1])
        busy = threading.Event()
        recorder._submit(lambda: busy.wait(30))
        recorder.record_soon(runs[1])
        # close() drops the run at once, then waits for the writer thread to be free: it is
        # freed only once the run handed over is dropped (its future cancelled).
        recorder._soon[-1].add_done_callback(lambda _: busy.set())
        recorder.close()
    assert recorder.complete and not said, said
    assert _rows(ledger_url)["run"] == 1


def test_payloads_and_records_read_back_as_the_run_files_hold_them(
    tmp_path: Path, ledger_url: str
) -> None:
    """The ledger keeps an event's payload and a record as the run's lines spell them instead
    of encoding them again: what it reads back is what json reads from the files, for lines
    the kernel writes and for odd ones (a line separator inside a string, a nested "payload",
    members after the payload, spaces)."""
    import sqlalchemy as sa

    from simreport.ledger import ingest_run
    from simreport.ledger import tables as t

    (run,) = _refund_runs(tmp_path, [1])
    events = run / "events.jsonl"
    lines = events.read_text(encoding="utf-8").rstrip("\n").split("\n")
    last = json.loads(lines[-1])
    seq, wall = last["seq"], last["wall"]
    odd = [
        {"seq": seq + 1, "type": "note", "actor": None, "wall": wall, "payload": payload}
        for payload in ({"text": "one\u2028two"}, {"payload": {"payload": [1, {"x": None}]}})
    ]
    odd[1]["seq"] = seq + 2
    lines += [json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in odd]
    lines.append(
        f'{{"seq": {seq + 3}, "payload": {{"a": 1}}, "type": "note", "actor": "user", '
        f'"wall": {wall}}}'
    )
    events.write_text("\n".join(lines) + "\n", encoding="utf-8")

    engine = connect(ledger_url)
    try:
        done = ingest_run(engine, run)
        with engine.connect() as conn:
            stored = conn.execute(
                sa.select(t.event.c.seq, t.event.c.payload)
                .where(t.event.c.run_id == done.run_id)
                .order_by(t.event.c.seq)
            ).all()
            bodies = conn.execute(
                sa.select(t.record.c.body)
                .where(t.record.c.run_id == done.run_id)
                .order_by(t.record.c.seq)
            ).scalars()
            bodies = list(bodies)
    finally:
        engine.dispose()
    read = [json.loads(line) for line in lines]
    assert [(row.seq, row.payload) for row in stored] == [(e["seq"], e["payload"]) for e in read]
    records = (run / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert bodies == [json.loads(line) for line in records]
