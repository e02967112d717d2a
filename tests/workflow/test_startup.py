"""Around Snakemake's start and end: `--config` plans and values, the config checked against its
schema with located errors, one-line input errors, who holds a lock, and the build's last line."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simreport.core.errors import EXIT_INPUT, PlanError, SchemaError
from simreport.workflow import check_config, retype_command_line, stop_on_input_error
from simreport.workflow.startup import (
    BUILD_NOTE,
    explain_locks,
    lock_explanation,
    lock_holder,
    note_build_ended,
    note_build_started,
)
from simreport.workflow.terminal import site_line

ROOT = Path(__file__).resolve().parents[2]
PD = "examples/prisoners_dilemma/audit.yaml"
EC = "examples/echo_chamber/audit.yaml"


@pytest.fixture
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


# --------------------------------------------------------------------------- --config plans


def test_one_plan_path_becomes_a_list() -> None:
    config: dict[str, Any] = {"plans": f" {PD} "}
    retype_command_line(config)
    assert config["plans"] == [PD]


def test_plans_from_the_command_line_drop_the_other_plans_overrides(in_root: None) -> None:
    config: dict[str, Any] = {
        "plans": [PD],
        "overrides": {"echo_chamber": {"replications": "2"}, "prisoners_dilemma": {}},
    }
    retype_command_line(config, {"plans": [PD]})
    assert config["overrides"] == {"prisoners_dilemma": {}}


def test_overrides_the_command_line_gives_are_kept_for_the_schema_to_judge(in_root: None) -> None:
    # A typo'd id given with the plans on the command line stays, so loading refuses it.
    config: dict[str, Any] = {"plans": [PD], "overrides": {"elsewhere": {"replications": "3"}}}
    retype_command_line(config, {"plans": [PD], "overrides": {"elsewhere": {}}})
    assert config["overrides"] == {"elsewhere": {"replications": 3}}


def test_plans_from_the_config_file_keep_every_override(in_root: None) -> None:
    config: dict[str, Any] = {"plans": [PD], "overrides": {"echo_chamber": {}}}
    retype_command_line(config, {"replications": 2})
    assert config["overrides"] == {"echo_chamber": {}}


def test_an_unreadable_plan_leaves_the_overrides_alone(in_root: None) -> None:
    config: dict[str, Any] = {"plans": ["nowhere/audit.yaml"], "overrides": {"echo_chamber": {}}}
    retype_command_line(config, {"plans": ["nowhere/audit.yaml"]})
    assert config["overrides"] == {"echo_chamber": {}}


# --------------------------------------------------------------------------- the config's schema


def _config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_check_config_accepts_a_good_config(in_root: None, tmp_path: Path) -> None:
    config: dict[str, Any] = {"plans": PD, "replications": "3", "verbose": "true"}
    check_config(config, config_file=_config_file(tmp_path, "plans: []\n"), command_line=config)
    assert config == {"plans": [PD], "replications": 3, "verbose": True}


def test_a_key_from_the_file_is_located_in_the_file(in_root: None, tmp_path: Path) -> None:
    file = _config_file(tmp_path, f"plans:\n  - {PD}\ntitel: audits\n")
    with pytest.raises(SchemaError) as caught:
        check_config({"plans": [PD], "titel": "audits"}, config_file=file, command_line={})
    error = caught.value
    assert (error.file, error.line, error.path) == (str(file), 3, "titel")
    assert error.issues[0].kind == "additionalProperties"
    assert error.expected is not None
    assert "title" in error.expected.removeprefix("one of the keys ").split(", ")


def test_a_key_from_the_command_line_names_it(in_root: None, tmp_path: Path) -> None:
    file = _config_file(tmp_path, f"plans:\n  - {PD}\n")
    with pytest.raises(SchemaError) as caught:
        check_config(
            {"plans": [PD], "workers": "many"},
            config_file=file,
            command_line={"workers": "many"},
        )
    error = caught.value
    assert (error.file, error.line, error.path) == ("--config", None, "workers")
    assert error.issues[0].kind == "type"
    assert error.expected is not None and error.expected.startswith("integer or null")


def test_stop_on_input_error_prints_one_located_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stopped, stop_on_input_error():
        raise PlanError("bad", file="plan.yaml", path="axes.0", line=4, expected="good")
    assert stopped.value.code == EXIT_INPUT
    err = capsys.readouterr().err
    assert err == "simreport: plan.yaml:4: axes.0: bad (expected good)\n"


def test_stop_on_input_error_lets_other_errors_through() -> None:
    with pytest.raises(KeyError), stop_on_input_error():
        raise KeyError("a bug, with its traceback")


# --------------------------------------------------------------------------- locks


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_no_note_holder_is_unknown(in_tmp: Path) -> None:
    assert lock_holder() == {"state": "unknown"}
    BUILD_NOTE.parent.mkdir(parents=True)
    BUILD_NOTE.write_text("{not json")
    assert lock_holder() == {"state": "unknown"}


def test_a_live_process_holds_the_lock(in_tmp: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _note(pid=sleeper.pid)
        holder = lock_holder()
        assert (holder["state"], holder["pid"]) == ("running", sleeper.pid)
        text = lock_explanation(holder)
        assert f"kill {sleeper.pid}" in text and "snakemake --unlock" not in text
    finally:
        sleeper.kill()
        sleeper.wait()
    # Once it is gone (killed and reaped) the lock it left is stale.
    holder = lock_holder()
    assert (holder["state"], holder["pid"]) == ("killed", sleeper.pid)
    assert "snakemake --unlock" in lock_explanation(holder)


def test_a_killed_process_not_yet_reaped_holds_nothing(in_tmp: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.kill()
    try:
        # A zombie until waited for: the build it ran is over all the same.
        _wait_zombie(child.pid)
        _note(pid=child.pid)
        assert lock_holder()["state"] == "killed"
    finally:
        child.wait()


def test_a_note_from_another_host_is_not_judged(in_tmp: Path) -> None:
    _note(pid=os.getppid(), host=socket.gethostname() + "-other")
    holder = lock_holder()
    assert holder["state"] == "elsewhere"
    text = lock_explanation(holder)
    assert holder["host"] in text and "snakemake --unlock" in text


def test_note_written_at_start_and_removed_at_the_end(in_tmp: Path) -> None:
    note_build_started(now=1_700_000_000.0)
    note = json.loads(BUILD_NOTE.read_text())
    assert note == {"pid": os.getpid(), "host": socket.gethostname(), "started": 1_700_000_000.0}
    # This very process is not a build holding a lock: its note was left by an earlier one.
    assert lock_holder()["state"] == "killed"
    note_build_ended()
    assert not BUILD_NOTE.exists()
    note_build_ended()  # twice is fine


def test_snakemakes_lock_message_is_replaced(in_tmp: Path) -> None:
    logger = logging.getLogger("test-startup-locks")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    explain_locks(logger)
    explain_locks(logger)  # once only
    assert len(logger.filters) == 1
    logger.error("LockException:\nError: Directory cannot be locked. Please …")
    logger.error("another error")
    assert records[0].getMessage() == lock_explanation({"state": "unknown"})
    assert records[1].getMessage() == "another error"


def _note(*, pid: int, host: str | None = None) -> None:
    BUILD_NOTE.parent.mkdir(parents=True, exist_ok=True)
    BUILD_NOTE.write_text(
        json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": 0})
    )


def _wait_zombie(pid: int) -> None:
    from tests.support.processes import wait_for

    def zombie() -> bool:
        stat = Path(f"/proc/{pid}/stat")
        return stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z")

    wait_for(zombie, "the killed child to become a zombie")


# --------------------------------------------------------------------------- the last line


def test_site_line_names_the_index_and_the_command() -> None:
    assert site_line("site") == (
        "simreport: the site is ready: site/index.html; to view it, run: simreport serve site"
    )
    assert site_line("my site").endswith("simreport serve 'my site'")


def test_an_up_to_date_build_ends_naming_the_site(tmp_path: Path) -> None:
    # A separate process: the line is printed at its exit.
    script = (
        "import logging\n"
        "from simreport.workflow.terminal import announce_site_when_up_to_date\n"
        "log = logging.getLogger('x'); logging.basicConfig()\n"
        "announce_site_when_up_to_date(log, 'public')\n"
        "log.warning('Nothing to be done (all requested files are present and up to date).')\n"
        "log.warning('Nothing to be done (all requested files are present and up to date).')\n"
        "log.warning('a later line')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    lines = proc.stderr.strip().splitlines()
    assert lines[-1] == site_line("public")
    assert lines.count(site_line("public")) == 1


# --------------------------------------------------------------------------- params without pandas


def test_params_are_compared_without_pandas_and_serialise_as_before() -> None:
    from types import SimpleNamespace

    from snakemake.persistence import PersistenceBase

    from simreport.workflow import compare_params_without_pandas

    builtin, with_pandas = (
        PersistenceBase._serialize_param_builtin,
        PersistenceBase._serialize_param_pandas,
    )
    compare_params_without_pandas()
    persistence = SimpleNamespace(_serialize_param_builtin=lambda v: builtin(persistence, v))
    serialiser = PersistenceBase._serialize_param.fget(persistence)
    assert serialiser == persistence._serialize_param_builtin
    # The values the workflow's rules have as params: the same serialisation either way.
    for value in ("a3f9", ["base", "framing=moralised"], 5, None, "prisoners_dilemma"):
        assert persistence._serialize_param_builtin(value) == with_pandas(persistence, value)
