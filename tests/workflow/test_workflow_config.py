"""The workflow's configuration: overrides reach the plans, and bad configs are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simreport.core.errors import InputError
from simreport.workflow import load_workflow, site_outputs

ROOT = Path(__file__).resolve().parents[2]
PD = "examples/prisoners_dilemma/audit.yaml"
EC = "examples/echo_chamber/audit.yaml"


def _load(**config: Any) -> Any:
    return load_workflow({"plans": [PD, EC], **config}, root=ROOT)


def test_defaults() -> None:
    workflow = _load()
    assert [p.id for p in workflow.plans] == ["prisoners_dilemma", "echo_chamber"]
    pd = workflow.plan("prisoners_dilemma")
    assert pd.loaded.plan.replications == 10
    assert pd.provider is None and pd.llm == {} and pd.include_incomplete is False
    assert len(pd.results) == 10 * len(pd.conditions)
    assert pd.figures[0] == "sensitivity.svg"
    assert str(workflow.site_dir / "index.html") in site_outputs(workflow)


def test_global_and_per_plan_overrides() -> None:
    workflow = _load(
        replications=3,
        provider="offline",
        model="offline-small",
        baseUrl="http://127.0.0.1:9/v1",
        includeIncomplete=True,
        overrides={"echo_chamber": {"replications": 2, "includeIncomplete": False}},
    )
    pd, ec = workflow.plan("prisoners_dilemma"), workflow.plan("echo_chamber")
    assert pd.loaded.plan.replications == 3 and ec.loaded.plan.replications == 2
    assert pd.include_incomplete is True and ec.include_incomplete is False
    assert pd.provider == "offline"
    assert pd.llm == {"model": "offline-small", "baseUrl": "http://127.0.0.1:9/v1"}
    assert pd.plan_doc["providerOverride"] == "offline"
    assert pd.plan_doc["llmOverride"] == pd.llm


def test_overrides_change_the_condition_keys() -> None:
    plain = {t.condition.id: t.key for t in _load().plan("prisoners_dilemma").conditions}
    other = {
        t.condition.id: t.key
        for t in _load(model="offline-large").plan("prisoners_dilemma").conditions
    }
    assert plain.keys() == other.keys()
    assert all(plain[k] != other[k] for k in plain)
    again = {t.condition.id: t.key for t in _load().plan("prisoners_dilemma").conditions}
    assert again == plain


def test_model_override_refused_for_a_plan_with_models(tmp_path: Path) -> None:
    plan = tmp_path / "audit.yaml"
    plan.write_text(
        f"baseScenario: {ROOT / 'examples/prisoners_dilemma/scenario.yaml'}\n"
        "models: [offline-small, offline-large]\n"
    )
    with pytest.raises(InputError) as caught:
        load_workflow({"plans": [str(plan)], "model": "x"})
    assert (caught.value.file, caught.value.path) == (str(plan), "models")


def test_two_plans_with_one_id_are_refused(tmp_path: Path) -> None:
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "audit.yaml").write_text(
            f"id: same\nbaseScenario: {ROOT / 'examples/prisoners_dilemma/scenario.yaml'}\n"
        )
    with pytest.raises(InputError) as caught:
        load_workflow({"plans": [str(tmp_path / "a/audit.yaml"), str(tmp_path / "b/audit.yaml")]})
    # The second plan is blamed, naming the first, and the id they share.
    error = caught.value
    assert (error.file, error.path) == (str(tmp_path / "b/audit.yaml"), "id")
    assert str(tmp_path / "a/audit.yaml") in error.message and "'same'" in error.message


def test_include_incomplete_unset_keeps_the_plans_own(tmp_path: Path) -> None:
    plan = tmp_path / "audit.yaml"
    plan.write_text(
        f"baseScenario: {ROOT / 'examples/prisoners_dilemma/scenario.yaml'}\n"
        "includeIncomplete: true\n"
    )
    assert load_workflow({"plans": [str(plan)]}).plans[0].include_incomplete is True
    config = {"plans": [str(plan)], "includeIncomplete": None}
    assert load_workflow(config).plans[0].include_incomplete is True
    config = {"plans": [str(plan)], "includeIncomplete": False}
    assert load_workflow(config).plans[0].include_incomplete is False
