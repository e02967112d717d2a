"""A condition job's key reuses the canonical JSON its condition kept from being built, and is
the same hash as over the whole key document with the scenario dumped and hashed again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simreport.core.canonical import canonical_json, content_hash
from simreport.core.versions import run_document
from simreport.harness import Condition, build_conditions, load_plan
from simreport.workflow.targets import condition_key
from tests.harness.test_conditions import OAT, load

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*/*audit.yaml"))

FIELDS: dict[str, Any] = {
    "keyVersion": 3,
    "id": "x",
    "replications": 2,
    "provider": None,
    "llm": {"model": "m"},
    "kernel": "k" * 64,
    "inputs": {"a.txt": "0" * 64},
}


def _expected(condition: Condition, fields: dict[str, Any]) -> str:
    return content_hash({**fields, "scenario": run_document(condition.scenario.to_doc())})


@pytest.mark.parametrize("plan_file", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_condition_keeps_the_json_its_scenario_dumps_to(plan_file: Path) -> None:
    for condition in build_conditions(load_plan(plan_file)):
        assert condition.runs_read is not None
        assert condition.runs_read == canonical_json(run_document(condition.scenario.to_doc()))
        assert condition_key(condition, FIELDS) == _expected(condition, FIELDS)


def test_model_variants_compute_their_own_json(tmp_path: Path) -> None:
    conditions = build_conditions(load(tmp_path, OAT + "models: [small, large]\n"))
    assert [c.runs_read for c in conditions] == [None] * len(conditions)
    keys = {condition_key(c, FIELDS) for c in conditions}
    assert keys == {_expected(c, FIELDS) for c in conditions}


def test_no_other_fields_and_a_field_after_the_scenario(tmp_path: Path) -> None:
    condition = build_conditions(load(tmp_path, OAT))[1]
    assert condition_key(condition, {}) == _expected(condition, {})
    with pytest.raises(ValueError):
        condition_key(condition, {**FIELDS, "seeds": 1})
