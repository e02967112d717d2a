"""The real `snakemake` around its start and end: one plan chosen on the command line, config and
plan errors as one located line, a lock left by a killed build explained, and the build's last
line naming the site."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from simreport.core.errors import EXIT_INPUT
from simreport.workflow.startup import BUILD_NOTE
from simreport.workflow.terminal import site_line
from tests.e2e.test_workflow import _env, run_snakemake
from tests.e2e.test_workflow_failures import PLAN, SCENARIO, SNAKEMAKE, needs_snakemake
from tests.support.processes import wait_for
from tests.support.workflow_copy import copy_workflow

pytestmark = [pytest.mark.slow, needs_snakemake]


def _workspace(tmp: Path, **config: Any) -> Path:
    """A copy of the workflow with two small plans of its own, `study` and `other`."""
    dest = copy_workflow(tmp / "flow", {})
    for name in ("study", "other"):
        folder = dest / name
        folder.mkdir()
        (folder / "scenario.yaml").write_text(yaml.safe_dump(SCENARIO))
        (folder / "audit.yaml").write_text(yaml.safe_dump(PLAN))
    config = {"plans": ["study/audit.yaml", "other/audit.yaml"], **config}
    (dest / "config" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def _snakemake(dest: Path, *args: str) -> tuple[int, str, str]:
    proc = run_snakemake(dest, *args, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def _last_line(out: str) -> str:
    return out.strip().splitlines()[-1]


def test_one_plan_from_the_command_line_and_the_last_line(tmp_path: Path) -> None:
    # The config file has overrides for both plans: choosing one must not trip on the other's.
    dest = _workspace(
        tmp_path, site="public", overrides={"study": {"replications": 3}, "other": {}}
    )
    code, out, err = _snakemake(dest, "--config", "plans=study/audit.yaml")
    assert code == 0, (out + err)[-3000:]
    assert (dest / "results" / "study").is_dir() and not (dest / "results" / "other").exists()
    assert sorted(p.name for p in (dest / "results/study/runs/base").iterdir()) == ["0", "1", "2"]
    assert (dest / "public" / "study").is_dir() and not (dest / "public" / "other").exists()
    # The very last line (after Snakemake's own) names the configured site and how to serve it.
    assert _last_line(err) == site_line("public")
    assert "public/index.html" in _last_line(err) and "simreport serve public" in _last_line(err)

    # Nothing to do: the same last line.
    code, out, err = _snakemake(dest, "--config", "plans=study/audit.yaml")
    assert code == 0 and "Nothing to be done" in out + err, (out + err)[-3000:]
    assert _last_line(err) == site_line("public")

    # The list form builds just the plans it names.
    code, out, err = _snakemake(dest, "--dry-run", "--config", "plans=[other/audit.yaml]")
    assert code == 0, (out + err)[-3000:]
    jobs = [line.split()[0] for line in (out + err).splitlines() if line.startswith("run_")]
    assert jobs and all(job.startswith("run_other_") for job in jobs)


def test_config_and_plan_errors_are_one_located_line(tmp_path: Path) -> None:
    dest = _workspace(tmp_path)
    plan = dest / "study" / "audit.yaml"
    plan.write_text(plan.read_text() + "replication: 3\n")
    code, out, err = _snakemake(dest, "--dry-run")
    assert code == EXIT_INPUT, (out + err)[-3000:]
    line = plan.read_text().splitlines().index("replication: 3") + 1
    assert _last_line(err).startswith(
        f"simreport: study/audit.yaml:{line}: replication: unknown key 'replication'"
    )
    assert "did you mean replications" in _last_line(err)
    for noise in ("Traceback", "SchemaError in file", "rules/common.smk"):
        assert noise not in out + err

    plan.write_text(yaml.safe_dump(PLAN))
    code, out, err = _snakemake(dest, "--dry-run", "--config", "replications=many")
    assert code == EXIT_INPUT, (out + err)[-3000:]
    assert _last_line(err).startswith("simreport: --config: replications: 'many' is not of type")
    assert "Traceback" not in out + err

    config = dest / "config" / "config.yaml"
    config.write_text(config.read_text() + "sites: public\n")
    code, out, err = _snakemake(dest, "--dry-run")
    assert code == EXIT_INPUT, (out + err)[-3000:]
    line = config.read_text().splitlines().index("sites: public") + 1
    assert _last_line(err).startswith(f"simreport: config/config.yaml:{line}: sites: ")
    assert "Traceback" not in out + err


def test_a_lock_left_by_a_killed_build_is_explained(tmp_path: Path) -> None:
    dest = _workspace(tmp_path)
    build = subprocess.Popen(
        [str(SNAKEMAKE), "--cores", "2", "--config", "replications=20"],
        cwd=dest,
        env=_env(dest),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for((dest / BUILD_NOTE).exists, "the build to take its locks")
        # Killed while its jobs run: what they leave marked incomplete runs again (the profile's
        # rerun-incomplete), and the next build meets the lock.
        wait_for(lambda: any((dest / "results").glob("*/runs/*/*/result.json")), "a run to finish")
        os.kill(build.pid, signal.SIGKILL)
    finally:
        build.wait()
        # Its run processes die with it; should one linger, it must not write on.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(build.pid, signal.SIGKILL)
    assert list((dest / ".snakemake" / "locks").iterdir())

    code, out, err = _snakemake(dest)
    assert code != 0
    said = [line for line in (out + err).splitlines() if line.startswith("simreport: ")]
    assert len(said) == 1, (out + err)[-3000:]
    assert f"process {build.pid}" in said[0] and "no longer running" in said[0]
    assert said[0].endswith("run `snakemake --unlock`, then build again")

    # The same lock held by a live process: wait or stop it, never unlock.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        note = (dest / BUILD_NOTE).read_text().replace(str(build.pid), str(sleeper.pid))
        (dest / BUILD_NOTE).write_text(note)
        code, out, err = _snakemake(dest)
        assert code != 0
        said = [line for line in (out + err).splitlines() if line.startswith("simreport: ")]
        assert len(said) == 1 and "still running" in said[0], (out + err)[-3000:]
        assert f"kill {sleeper.pid}" in said[0] and "`snakemake --unlock`" not in said[0]
    finally:
        sleeper.kill()
        sleeper.wait()

    code, out, err = _snakemake(dest, "--unlock")
    assert code == 0, (out + err)[-3000:]
    code, out, err = _snakemake(dest)
    assert code == 0, (out + err)[-3000:]
    assert _last_line(err) == site_line("site")
    assert not (dest / BUILD_NOTE).exists()
