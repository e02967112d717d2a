"""A plan's meaning and its identity: the meaning hash seeds the bootstrap and keys the runs, so
moving, renaming or retitling a plan changes none of its numbers; the identity hash follows the
plan's name and place."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from simreport.analysis.stats import bootstrap_seed
from simreport.api import analyse, audit
from simreport.harness import build_conditions, load_plan, run_audit
from simreport.harness.runner import plan_document, plan_jobs
from simreport.harness.store import RunStore

SCENARIO = """\
world: prisoners_dilemma
steps: 2
seed: 3
population:
  n: 2
llm:
  provider: offline
  model: offline-base
params:
  framing: neutral
"""

PLAN = """\
baseScenario: scenario.yaml
replications: 2
metrics: [cooperationRate]
axes:
  - template: R3
    levels: [moralised]
"""


def write_plan(folder: Path, plan: str = PLAN, scenario: str = SCENARIO) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.yaml").write_text(textwrap.dedent(scenario), encoding="utf-8")
    path = folder / "audit.yaml"
    path.write_text(textwrap.dedent(plan), encoding="utf-8")
    return path


def renamed(tmp_path: Path) -> Path:
    """The same plan copied elsewhere, with another id, a title, a comment and `./` before the
    scenario's file name."""
    original = write_plan(tmp_path / "first" / "study")
    copy = tmp_path / "elsewhere" / "deep" / "other_name"
    shutil.copytree(original.parent, copy)
    text = PLAN.replace("baseScenario: scenario.yaml", "baseScenario: ./scenario.yaml")
    (copy / "audit.yaml").write_text(
        "# moved and renamed\nid: renamed-study\ntitle: A title for the same study\n" + text,
        encoding="utf-8",
    )
    return copy / "audit.yaml"


# --------------------------------------------------------------------------- the two hashes


def test_identity_changes_leave_the_meaning_hash_alone(tmp_path: Path) -> None:
    first = load_plan(write_plan(tmp_path / "a" / "study"))
    second = load_plan(renamed(tmp_path))
    assert first.plan_id == "study" and second.plan_id == "renamed-study"
    assert second.hash == first.hash
    assert second.identity_hash != first.identity_hash
    assert first.identity == {"id": "study", "title": None, "file": str(first.plan_file)}
    assert second.identity["title"] == "A title for the same study"


@pytest.mark.parametrize(
    ("edit", "same"),
    [
        (lambda p: p.replace("replications: 2", "replications: 3"), False),
        (lambda p: p.replace("[moralised]", "[risk]"), False),
        (lambda p: p + "models: [m]\n", False),
        (
            lambda p: (
                p + "hypothesis:\n  axes:\n    linguistic_framing: {cooperationRate: increase}\n"
            ),
            False,
        ),
        (lambda p: p + "concurrency: 3\n", True),
        (lambda p: "title: T\n" + p, True),
        (lambda p: "id: other\n" + p, True),
    ],
    ids=["replications", "levels", "models", "hypothesis", "concurrency", "title", "id"],
)
def test_meaning_hash_follows_content_only(tmp_path: Path, edit: Any, same: bool) -> None:
    before = load_plan(write_plan(tmp_path / "a" / "study")).hash
    after = load_plan(write_plan(tmp_path / "b" / "study", edit(PLAN))).hash
    assert (after == before) is same


def test_base_scenario_content_is_meaning_its_file_name_is_not(tmp_path: Path) -> None:
    before = load_plan(write_plan(tmp_path / "a" / "study")).hash
    folder = tmp_path / "b" / "study"
    folder.mkdir(parents=True)
    (folder / "world.yaml").write_text(SCENARIO, encoding="utf-8")
    (folder / "audit.yaml").write_text(
        PLAN.replace("scenario.yaml", "world.yaml"), encoding="utf-8"
    )
    assert load_plan(folder / "audit.yaml").hash == before
    changed = write_plan(tmp_path / "c" / "study", scenario=SCENARIO.replace("seed: 3", "seed: 4"))
    assert load_plan(changed).hash != before


def test_an_inline_base_means_the_same_as_its_file(tmp_path: Path) -> None:
    before = load_plan(write_plan(tmp_path / "a" / "study")).hash
    inline = (
        PLAN.replace("baseScenario: scenario.yaml\n", "")
        + "base:\n"
        + textwrap.indent(SCENARIO, "  ")
    )
    folder = tmp_path / "b" / "study"
    folder.mkdir(parents=True)
    (folder / "audit.yaml").write_text(inline, encoding="utf-8")
    assert load_plan(folder / "audit.yaml").hash == before


def test_credentials_in_urls_do_not_enter_the_hash(tmp_path: Path) -> None:
    def with_url(url: str) -> str:
        return SCENARIO.replace("  model: offline-base", f"  model: offline-base\n  baseUrl: {url}")

    one = load_plan(write_plan(tmp_path / "a" / "s", scenario=with_url("http://u:s3cretOne@h/v1")))
    two = load_plan(write_plan(tmp_path / "b" / "s", scenario=with_url("http://u:s3cretTwo@h/v1")))
    other_host = load_plan(write_plan(tmp_path / "c" / "s", scenario=with_url("http://g/v1")))
    assert one.hash == two.hash
    assert one.hash != other_host.hash
    assert "s3cretOne" not in json.dumps(one.meaning())
    assert "s3cretOne" not in json.dumps(plan_document(one))


def test_plan_json_carries_identity_meaning_and_both_hashes(tmp_path: Path) -> None:
    loaded = load_plan(renamed(tmp_path))
    doc = plan_document(loaded)
    assert doc["hash"] == loaded.hash
    assert doc["identity"] == {
        "id": "renamed-study",
        "title": "A title for the same study",
        "file": str(loaded.plan_file),
    }
    assert doc["identityHash"] == loaded.identity_hash
    # Readers of plan.json keep finding the plan's fields where they were.
    assert (doc["id"], doc["title"], doc["baseScenario"]) == (
        "renamed-study",
        "A title for the same study",
        "./scenario.yaml",
    )
    assert doc["hypothesis"] is None


# --------------------------------------------------------------------------- what the hash drives


def test_same_meaning_gives_the_same_seeds_and_byte_identical_tests(tmp_path: Path) -> None:
    first_plan = write_plan(tmp_path / "first" / "study")
    second_plan = renamed(tmp_path)
    audits = []
    for plan, out in ((first_plan, tmp_path / "out1"), (second_plan, tmp_path / "out2")):
        audit(plan, out=out, analyse=False)
        audits.append(analyse(out))
    first, second = audits
    assert first["plan"]["hash"] == second["plan"]["hash"]
    assert first["plan"]["identity"]["id"] == "study"
    assert second["plan"]["identity"]["id"] == "renamed-study"
    condition = "linguistic_framing=moralised"
    seed = bootstrap_seed(first["plan"]["hash"], "cooperationRate", condition)
    assert seed == bootstrap_seed(second["plan"]["hash"], "cooperationRate", condition)
    assert json.dumps(first["tests"], sort_keys=True) == json.dumps(second["tests"], sort_keys=True)
    assert first["tests"]["cooperationRate"][0]["ci95"] is not None


def test_the_run_store_finds_runs_of_a_renamed_plan(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "store")
    first = load_plan(write_plan(tmp_path / "first" / "study"))
    earlier = run_audit(first, tmp_path / "out1", store=store)
    second = load_plan(renamed(tmp_path))
    conditions = build_conditions(second)
    assert [c.id for c in conditions] == [c.id for c in build_conditions(first)]
    slots, jobs, reused = plan_jobs(second, conditions, tmp_path / "out2", store=store)
    assert jobs == [], "every run of the renamed plan comes from the store"
    assert [reused[i].to_doc() for i in range(len(slots))] == [
        result.to_doc() for _, _, result in earlier.results
    ]
