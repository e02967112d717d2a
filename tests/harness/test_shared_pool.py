"""A shared pool of run processes that breaks (a worker died) loses no run and stops nothing."""

from __future__ import annotations

import multiprocessing
import os
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
