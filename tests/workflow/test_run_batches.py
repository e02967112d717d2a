"""Run jobs at many conditions: a plan with more conditions than `runJobs` shares them out among
that many jobs, each condition in a batch chosen by its id, so an edit reruns only the batches of
the conditions it touched; a plan within the limit keeps one job per condition."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from simreport.core.errors import InputError
from simreport.workflow import RunBatch, load_workflow
from simreport.workflow.targets import RUN_JOBS, PlanTarget, batch_of
from tests.e2e.test_workflow import ROOT, SNAKEMAKE, snakemake
from tests.support.studies import write_study
from tests.support.workflow_copy import copy_workflow, write_config

EXAMPLE = ROOT / "examples" / "prisoners_dilemma"

TWO_AXES = """\
baseScenario: scenario.yaml
replications: 2
metrics: [cooperationRate]
axes:
  - template: linguistic_framing
    levels: [moralised, risk]
  - template: memory_temporality
    levels: [1, {window}]
"""
"""Five conditions; in two batches, memory windows 3 and 4 share one (`batch_of`)."""


def _plan(folder: Path, **config: object) -> PlanTarget:
    return load_workflow({"plans": [str(folder / "audit.yaml")], **config}, folder).plans[0]


@pytest.fixture
def example(tmp_path: Path) -> Path:
    """A copy of the prisoner's-dilemma example (15 conditions)."""
    shutil.copytree(EXAMPLE, tmp_path / "prisoners_dilemma")
    return tmp_path / "prisoners_dilemma"


def test_a_plan_within_the_limit_keeps_one_job_per_condition(example: Path) -> None:
    plan = _plan(example)
    assert len(plan.conditions) <= RUN_JOBS
    assert [(b.name, b.key, b.log, b.output) for b in plan.batches] == [
        (t.rule_name, t.key, t.log, t.state) for t in plan.conditions
    ]
    assert plan.requested == [t.state for t in plan.conditions]
    assert all(t.requested == t.state for t in plan.conditions)


def test_a_plan_beyond_the_limit_shares_its_conditions_among_that_many_jobs(
    example: Path,
) -> None:
    plan = _plan(example, runJobs=4)
    batches = plan.batches
    assert 1 < len(batches) <= 4
    placed = [t.condition.id for batch in batches for t in batch.targets]
    assert sorted(placed) == sorted(t.condition.id for t in plan.conditions)
    order = [t.condition.id for t in plan.conditions]
    for batch in batches:
        # Plan order within a batch, and the batch its ids hash to.
        assert batch.condition_ids == sorted(batch.condition_ids, key=order.index)
        assert {batch_of(c, 4) for c in batch.condition_ids} == {int(batch.name[-1])}
        assert batch.name.isidentifier() and batch.name.startswith("run_prisoners_dilemma_batch_")
        assert batch.log.endswith(f"/logs/runs/batches/{batch.name[-1]}.log")
        # One declared output per job: the batch's summary, which its conditions' evaluations
        # and the analysis ask for.
        assert batch.output.endswith(f"/state/batches/{batch.name[-1]}.json")
        assert {t.requested for t in batch.targets} == {batch.output}
    assert plan.requested == [batch.output for batch in batches]
    assert len({b.name for b in batches}) == len({b.key for b in batches}) == len(batches)


def test_an_edit_changes_the_keys_of_the_batches_it_touches_alone(example: Path) -> None:
    def by_name(batches: list[RunBatch]) -> dict[str, RunBatch]:
        return {batch.name: batch for batch in batches}

    before = by_name(_plan(example, runJobs=4).batches)
    plan_file = example / "audit.yaml"
    text = plan_file.read_text()
    assert "levels: [moralised, risk]" in text
    plan_file.write_text(text.replace("levels: [moralised, risk]", "levels: [moralised, neutral]"))
    after = by_name(_plan(example, runJobs=4).batches)
    touched = {batch_of(c, 4) for c in ("linguistic_framing=risk", "linguistic_framing=neutral")}
    for name in before.keys() | after.keys():
        changed = name not in before or name not in after or before[name].key != after[name].key
        assert changed == (int(name[-1]) in touched), name
        if not changed:
            assert before[name].condition_ids == after[name].condition_ids


@pytest.mark.parametrize("value", [0, -3, True, "many", 2.5])
def test_run_jobs_must_be_a_whole_number_of_at_least_one(example: Path, value: object) -> None:
    with pytest.raises(InputError) as caught:
        _plan(example, runJobs=value)
    assert caught.value.path == "runJobs"


@pytest.mark.slow
@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake is not installed next to python")
def test_batched_jobs_build_what_one_job_per_condition_builds(tmp_path: Path) -> None:
    """Five conditions in two jobs: the same audit as one job per condition, every condition's
    log and state, and an edit reruns the batch it touched alone, the rest from the store."""
    assert batch_of("memory_temporality=3", 2) == batch_of("memory_temporality=4", 2)
    study = write_study(tmp_path / "study", plan=TWO_AXES.format(window=3))
    config = {"plans": [str(study.plan)], "ledger": None, "runJobs": 2}
    dest = copy_workflow(tmp_path / "batched", config)
    jobs, out = snakemake(dest)
    plan = load_workflow(config, dest).plans[0]
    names = {batch.name for batch in plan.batches}
    assert len(plan.conditions) == 5 and len(names) == 2, names
    assert {k: v for k, v in jobs.items() if k.startswith("run_")} == dict.fromkeys(names, 1)
    audit_dir = dest / "results" / plan.id
    for target in plan.conditions:
        assert json.loads((dest / target.state).read_text())["pending"] == []
        assert (dest / target.log).read_text().splitlines()[-1].startswith(target.condition.id)
    for batch in plan.batches:
        lines = (dest / batch.log).read_text().splitlines()
        assert sorted(line.split(": ")[0] for line in lines[1:-1]) == sorted(batch.condition_ids)
        summary = json.loads((dest / batch.output).read_text())["conditions"]
        assert sorted(summary) == sorted(batch.condition_ids)

    single = copy_workflow(tmp_path / "single", {**config, "runJobs": None})
    jobs_single, out_single = snakemake(single)
    assert sum(k.startswith("run_") for k in jobs_single) == 5, out_single[-2000:]
    assert (audit_dir / "audit.json").read_bytes() == (
        single / "results" / plan.id / "audit.json"
    ).read_bytes()

    # One level edited: the batch of the condition it removes and adds reruns alone.
    study.plan.write_text(TWO_AXES.format(window=4))
    write_config(dest, config)
    edited = load_workflow(config, dest).plans[0]
    keys = {batch.name: batch.key for batch in plan.batches}
    rerun = {b.name for b in edited.batches if keys.get(b.name) != b.key}
    assert len(rerun) == 1, rerun
    untouched = {
        b.output: (dest / b.output).stat().st_mtime_ns for b in plan.batches if b.name not in rerun
    }
    jobs, out = snakemake(dest)
    assert {k for k in jobs if k.startswith("run_")} == rerun, out[-3000:]
    assert {path: (dest / path).stat().st_mtime_ns for path in untouched} == untouched
    ids = [c["id"] for c in json.loads((audit_dir / "conditions.json").read_text())]
    assert "memory_temporality=4" in ids and "memory_temporality=3" not in ids
    (moved,) = [b for b in edited.batches if b.name in rerun]
    logs = {t.condition.id: (dest / t.log).read_text() for t in moved.targets}
    assert (
        "memory_temporality=4: replications=2 computed=2 fromStore=0"
        in logs["memory_temporality=4"]
    )
    for condition_id in set(logs) - {"memory_temporality=4"}:
        assert f"{condition_id}: replications=2 computed=0 fromStore=2" in logs[condition_id]
    jobs, out = snakemake(dest)
    assert not jobs, out[-2000:]
