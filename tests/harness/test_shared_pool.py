"""A shared pool of run processes that breaks (a worker died) loses no run and stops nothing."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from simreport.harness import RunJob, execute_jobs
from simreport.kernel import validate_scenario


def _die() -> None:
    os._exit(1)


@pytest.mark.slow
def test_jobs_finish_in_fresh_pools_after_the_shared_one_broke(tmp_path: Path) -> None:
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    with pytest.raises(BrokenProcessPool):
        pool.submit(_die).result()
    scenario = validate_scenario(
        {"world": "prisoners_dilemma", "steps": 2, "population": {"n": 2}}
    ).to_doc()
    jobs = [
        RunJob(
            index=i,
            condition="base",
            replication=i,
            scenario=scenario,
            out_dir=str(tmp_path / str(i)),
            asset_root=str(tmp_path),
            provider=None,
        )
        for i in range(2)
    ]
    results = execute_jobs(jobs, pool)
    assert sorted(results) == [0, 1]
    assert all(r.failure is None for r in results.values())
    assert (tmp_path / "1" / "result.json").exists()
    pool.shutdown()


HEAVY_MODULE = """\
import os

# Every process that imports this module leaves a line.
with open(os.environ["IMPORTS"], "a") as f:
    f.write(str(os.getpid()) + "\\n")
"""

MAIN_SCRIPT = """\
import os
import time

import heavy

if __name__ == "__main__":
    from simreport.harness.runner import worker_pool

    pool = worker_pool(3)
    # Every worker busy at once, so that all three have started.
    futures = [pool.submit(time.sleep, 0.3) for _ in range(6)]
    for future in futures:
        future.result()
    print(os.getpid(), len(pool._processes), flush=True)
    pool.shutdown()
"""


def test_workers_do_not_pay_for_the_main_script_s_imports(tmp_path: Path) -> None:
    """A pool started from a script (Snakemake's, or a command's) has its workers forked from a
    server that runs nothing of the script, and neither do they: only the script's own process
    imports what it imports (a spawned worker, or one forked from a server that did not take
    the script's path, runs the script's imports again)."""
    (tmp_path / "heavy.py").write_text(HEAVY_MODULE)
    (tmp_path / "main.py").write_text(MAIN_SCRIPT)
    imports = tmp_path / "imports"
    proc = subprocess.run(
        [sys.executable, "main.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={
            **os.environ,
            "IMPORTS": str(imports),
            "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        },
    )
    assert proc.returncode == 0, proc.stderr
    pid, workers = proc.stdout.split()
    assert workers == "3"
    assert imports.read_text().split() == [pid]
