"""Same plan hash, same runs (SPEC §6a): the order a plan or scenario lists its mappings' keys in
decides nothing a run does, a change that changes a run changes the plan hash and the run keys,
and a field no run reads (a scenario's name, description, hypothesis) changes no run key. Runs go
through the real kernel, on every example plan made small."""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simreport.core.canonical import content_hash
from simreport.core.files import load_document
from simreport.core.overrides import set_path
from simreport.core.schema import Scenario
from simreport.harness import (
    RunJob,
    build_conditions,
    load_plan,
    plan_jobs,
    replication_scenarios,
    run_audit,
)
from simreport.harness.runner import KEYED_CHECKS, plan_document
from simreport.harness.store import RunStore
from simreport.kernel import kernel_fingerprint, run_scenario, validate_scenario
from simreport.workflow import load_workflow
from tests.harness.test_plan_meaning import PLAN
from tests.harness.test_plan_meaning import write_plan as write_plan_files

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PLANS = sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.glob("*/*audit.yaml"))
"""Every example plan, as `<example>/<plan file>`."""

SMALL = {
    "prisoners_dilemma": {"population.n": 4, "steps": 3},
    "echo_chamber": {"population.n": 10, "steps": 4},
}
"""Scenario settings that keep an example's runs fast (the testbed examples are small already)."""

CLOCK_KEYS = frozenset({"wall", "clock", "durationNs", "wallClockMs"})
"""Real-clock readings in a run's event and record lines: the only bytes two executions of the
same run may differ in."""


# --------------------------------------------------------------------------- helpers


def shuffled(value: Any, rnd: random.Random) -> Any:
    """`value` with every mapping's keys in an order drawn from `rnd`, at every depth; lists keep
    their order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: shuffled(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def reversed_keys(value: Any) -> Any:
    """`value` with every mapping's keys in reverse order, at every depth."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(v) for v in value]
    return value


def _without_clock(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items() if k not in CLOCK_KEYS}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    return value


def run_files(folder: Path) -> dict[str, bytes]:
    """Every file of every run under `folder`, by its path there; event and record lines
    without their real-clock readings, every other file as its bytes."""
    files = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.suffix == ".jsonl":
            lines = [json.loads(line) for line in data.decode().splitlines()]
            data = "\n".join(json.dumps(_without_clock(line)) for line in lines).encode()
        files[path.relative_to(folder).as_posix()] = data
    return files


def _plan_paths(plan: str) -> tuple[str, str]:
    """The example folder and the plan file name of `plan` (`<example>/<file>`)."""
    example, name = plan.split("/")
    return example, name


def _base_file(plan_file: Path) -> Path:
    return plan_file.parent / str(load_document(plan_file).data["baseScenario"])


def write_docs(plan_file: Path, plan_doc: Any, scenario_doc: Any) -> None:
    """Write a plan and its base scenario as YAML in the order their mappings have."""
    plan_file.write_text(yaml.safe_dump(plan_doc, sort_keys=False, allow_unicode=True))
    _base_file(plan_file).write_text(
        yaml.safe_dump(scenario_doc, sort_keys=False, allow_unicode=True)
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the examples, each scenario made small, and a counter for output folders."""
    dest = tmp_path_factory.mktemp("orders")
    shutil.copytree(EXAMPLES, dest / "examples")
    for plan in PLANS:
        example, _ = _plan_paths(plan)
        plan_file = dest / "examples" / plan
        scenario_doc = load_document(_base_file(plan_file)).data
        for path, value in SMALL.get(example, {}).items():
            scenario_doc = set_path(scenario_doc, path, value)
        write_docs(plan_file, load_document(plan_file).data, scenario_doc)
    return dest


_OUTPUTS = iter(range(1_000_000))


class Audited:
    """One plan written in some key order, run once: its hash, its run keys and its run files."""

    def __init__(
        self,
        workspace: Path,
        plan: str,
        reorder: Callable[[Any], Any],
        docs: tuple[Any, Any],
    ) -> None:
        plan_file = workspace / "examples" / plan
        write_docs(plan_file, reorder(docs[0]), reorder(docs[1]))
        loaded = load_plan(plan_file, replications=1)
        out = workspace / "out" / f"{next(_OUTPUTS)}"
        _, jobs, _ = plan_jobs(loaded, build_conditions(loaded), out)
        self.hash = loaded.hash
        self.keys = {(job.condition, job.replication): job.key for job in jobs}
        run_audit(loaded, out, concurrency=1)
        self.files = run_files(out / "runs")


_BASELINES: dict[str, tuple[tuple[Any, Any], Audited]] = {}


def baseline(workspace: Path, plan: str) -> tuple[tuple[Any, Any], Audited]:
    """The plan and scenario documents of `plan` as its files list them, and their audit
    (computed once per plan)."""
    if plan not in _BASELINES:
        plan_file = workspace / "examples" / plan
        docs = (load_document(plan_file).data, load_document(_base_file(plan_file)).data)
        _BASELINES[plan] = docs, Audited(workspace, plan, lambda doc: doc, docs)
    return _BASELINES[plan]


def assert_same_runs(first: Audited, second: Audited) -> None:
    assert second.hash == first.hash
    assert second.keys == first.keys
    assert second.files.keys() == first.files.keys()
    differing = [name for name in first.files if first.files[name] != second.files[name]]
    assert differing == []


# --------------------------------------------------------------------------- key order


@pytest.mark.parametrize("plan", PLANS)
def test_reversed_key_order_runs_the_same(workspace: Path, plan: str) -> None:
    docs, first = baseline(workspace, plan)
    assert_same_runs(first, Audited(workspace, plan, reversed_keys, docs))


@pytest.mark.parametrize("plan", PLANS)
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rnd=st.randoms(use_true_random=False))
def test_any_key_order_gives_the_same_hash_keys_and_runs(
    workspace: Path, plan: str, rnd: random.Random
) -> None:
    docs, first = baseline(workspace, plan)
    assert_same_runs(first, Audited(workspace, plan, lambda doc: shuffled(doc, rnd), docs))


FIELDS = {
    "disposition": {"kind": "categorical", "values": ["cooperative", "competitive", "cautious"]},
    "age": {"kind": "uniform", "low": 18, "high": 75, "integer": True},
    "occupation": ["teacher", "trader", "nurse"],
}


def test_the_kernel_reads_a_scenario_the_same_in_any_key_order(tmp_path: Path) -> None:
    """`simreport run`, the run service and the harness share the kernel's entry: a scenario
    given with its keys in another order runs the same there too."""
    doc = {**yaml.safe_load(SCENARIO), "steps": 4, "population": {"n": 6, "fields": FIELDS}}
    for name, variant in (("given", doc), ("reversed", reversed_keys(doc))):
        run_scenario(validate_scenario(variant), tmp_path / name)
    assert run_files(tmp_path / "reversed") == run_files(tmp_path / "given")


# --------------------------------------------------------------------------- small plans

SCENARIO = """\
name: Two players
description: Two agents play two rounds.
world: prisoners_dilemma
steps: 2
seed: 3
population:
  n: 2
  fields:
    disposition: [cooperative, competitive, cautious]
    age: {kind: uniform, low: 18, high: 75, integer: true}
llm:
  provider: offline
  model: offline-base
params:
  framing: neutral
hypothesis:
  outcomes: {cooperationRate: increase}
"""


def write_plan(folder: Path, scenario: str = SCENARIO, plan: str = PLAN) -> Path:
    return write_plan_files(folder, plan, scenario)


def run_keys(plan_file: Path) -> dict[tuple[str, int], str]:
    loaded = load_plan(plan_file)
    _, jobs, _ = plan_jobs(loaded, build_conditions(loaded), plan_file.parent / "out")
    return {(job.condition, job.replication): job.key for job in jobs}


def workflow_keys(plan_file: Path) -> dict[str, str]:
    plan = load_workflow({"plans": [str(plan_file)]}, plan_file.parent).plans[0]
    return {target.condition.id: target.key for target in plan.conditions}


RUN_CHANGES = {
    "field value": ("cautious]", "careful]"),
    "field weights": (
        "[cooperative, competitive, cautious]",
        "{values: [cooperative, competitive, cautious], weights: [1, 2, 3]}",
    ),
    "new field": ("    age:", "    mood: calm\n    age:"),
    "field bounds": ("high: 75", "high: 76"),
    "seed": ("seed: 3", "seed: 4"),
    "agents": ("n: 2", "n: 4"),
    "steps": ("steps: 2", "steps: 3"),
    "model": ("model: offline-base", "model: offline-large"),
    "world parameter": ("framing: neutral", "framing: neutral\n  memoryWindow: 2"),
}


@pytest.mark.parametrize("change", list(RUN_CHANGES), ids=list(RUN_CHANGES))
def test_a_change_that_changes_runs_changes_the_hash_and_every_key(
    tmp_path: Path, change: str
) -> None:
    old, new = RUN_CHANGES[change]
    assert old in SCENARIO
    before = write_plan(tmp_path / "before" / "study")
    after = write_plan(tmp_path / "after" / "study", SCENARIO.replace(old, new, 1))
    assert load_plan(after).hash != load_plan(before).hash
    first, second = run_keys(before), run_keys(after)
    assert first.keys() == second.keys()
    assert all(first[slot] != second[slot] for slot in first)
    first_jobs, second_jobs = workflow_keys(before), workflow_keys(after)
    assert all(first_jobs[c] != second_jobs[c] for c in first_jobs)


def test_a_base_edit_an_axis_overrides_changes_only_the_other_conditions(tmp_path: Path) -> None:
    before = write_plan(tmp_path / "before" / "study")
    after = write_plan(
        tmp_path / "after" / "study", SCENARIO.replace("framing: neutral", "framing: risk")
    )
    first, second = run_keys(before), run_keys(after)
    assert {slot for slot in first if first[slot] != second[slot]} == {("base", 0), ("base", 1)}
    assert (
        workflow_keys(after)["linguistic_framing=moralised"]
        == (workflow_keys(before)["linguistic_framing=moralised"])
    )


def test_a_replication_runs_another_seed_under_another_key(tmp_path: Path) -> None:
    keys = run_keys(write_plan(tmp_path / "study"))
    assert keys[("base", 0)] != keys[("base", 1)]
    assert len(set(keys.values())) == len(keys)


def test_what_no_run_reads_changes_no_run(tmp_path: Path) -> None:
    """Name, description and the scenario's own hypothesis: same run keys, same workflow keys,
    the same runs byte for byte (clock readings aside); the plan.json the pages read has the
    new description, and a second audit takes every run from the store."""
    plan_file = write_plan(tmp_path / "study")
    keys, jobs_keys = run_keys(plan_file), workflow_keys(plan_file)
    store = RunStore(tmp_path / "store")
    run_audit(load_plan(plan_file), tmp_path / "out1", store=store)
    edited = (
        SCENARIO.replace("Two players", "Two careful players")
        .replace("play two rounds", "play two short rounds")
        .replace("{cooperationRate: increase}", "{cooperationRate: decrease}")
    )
    # Rewritten in place: a run's manifest names the folder its assets resolve in.
    write_plan(tmp_path / "study", edited)
    assert run_keys(plan_file) == keys
    assert workflow_keys(plan_file) == jobs_keys
    run_audit(load_plan(plan_file), tmp_path / "out2")
    assert run_files(tmp_path / "out2" / "runs") == run_files(tmp_path / "out1" / "runs")
    scenario_json = json.loads(
        (tmp_path / "out2" / "runs" / "base" / "0" / "scenario.json").read_text()
    )
    assert (scenario_json["name"], scenario_json["description"], scenario_json["hypothesis"]) == (
        None,
        None,
        None,
    )
    loaded = load_plan(plan_file)
    assert plan_document(loaded)["base"]["description"] == "Two agents play two short rounds."
    _, jobs, fetched = plan_jobs(loaded, build_conditions(loaded), tmp_path / "out3", store=store)
    assert jobs == [] and len(fetched) == 4


def test_name_and_description_are_not_the_plans_meaning(tmp_path: Path) -> None:
    before = write_plan(tmp_path / "before" / "study")
    after = write_plan(
        tmp_path / "after" / "study",
        SCENARIO.replace("Two players", "Others").replace("two rounds", "a couple of rounds"),
    )
    assert load_plan(after).hash == load_plan(before).hash


def test_the_effective_hypothesis_is_meaning_though_no_run_reads_it(tmp_path: Path) -> None:
    before = write_plan(tmp_path / "before" / "study")
    after = write_plan(
        tmp_path / "after" / "study",
        SCENARIO.replace("{cooperationRate: increase}", "{cooperationRate: decrease}"),
    )
    assert load_plan(after).hash != load_plan(before).hash
    assert run_keys(after) == run_keys(before)


def test_a_reviewed_version_keeps_its_description_in_its_runs(tmp_path: Path) -> None:
    """A versioned scenario's runs record the digest of the whole version (its pin in the
    ledger): its description is part of what they read."""
    folder = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLES / "refund_desk", folder)
    plan_file = folder / "audit.yaml"
    before = run_keys(plan_file)
    scenario = folder / "scenario.yaml"
    scenario.write_text(scenario.read_text().replace("A customer asks", "A client asks", 1))
    after = run_keys(plan_file)
    assert all(before[slot] != after[slot] for slot in before)


# --------------------------------------------------------------------------- older stores


def scheme_one_key(job: RunJob, scenario: Scenario) -> str:
    """The key `job` had before run keys carried a scheme version: the replication's scenario as
    the plan gave it (name, description and key order included), without `keyVersion`."""
    return content_hash(
        {
            "scenario": scenario.to_doc(),
            "condition": job.condition,
            "replication": job.replication,
            "provider": job.provider,
            "kernel": kernel_fingerprint(scenario.world),
            "inputs": {
                "checks": content_hash({k: (job.checks or {}).get(k) for k in KEYED_CHECKS})
            },
        }
    )


def test_runs_stored_under_the_old_key_scheme_are_never_handed_out(tmp_path: Path) -> None:
    """Runs of scheme 1 read persona fields in the order the file listed them, which their key
    did not cover: the store must not hand them out for runs of today's scheme."""
    loaded = load_plan(write_plan(tmp_path / "study"))
    conditions = build_conditions(loaded)
    _, jobs, _ = plan_jobs(loaded, conditions, tmp_path / "out1")
    finished = run_audit(loaded, tmp_path / "out1")
    old_store = RunStore(tmp_path / "old-store")
    for job, (condition, r, result) in zip(jobs, finished.results, strict=True):
        scenario = replication_scenarios(condition, loaded.plan.replications)[r]
        old_key = scheme_one_key(job, scenario)
        assert old_key != job.key
        old_store.keep(old_key, Path(job.out_dir), result)
    assert len(list(old_store.root.glob("*/*"))) == len(jobs)
    _, again, fetched = plan_jobs(loaded, conditions, tmp_path / "out2", store=old_store)
    assert fetched == {} and len(again) == len(jobs)
