"""Setting a condition's levels without copying its whole scenario: the same document as
`set_path` gives, the input untouched, and the same errors for a path that does not exist."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from simreport.core.errors import UnknownOverride
from simreport.core.overrides import set_path
from simreport.harness.conditions import replace_paths


def _doc() -> dict[str, Any]:
    return {
        "llm": {"model": "m", "temperature": 0.7},
        "params": {"payoffs": {"temptation": 5, "reward": 3}, "memoryWindow": 5},
        "executors": [{"kind": "llm", "options": {"components": ["instructions"]}}],
        "population": {"n": 10, "fields": {"age": {"low": 18, "high": 75}}},
    }


ITEMS = [
    ("params.payoffs.temptation", 4.5),
    ("params.memoryWindow", 2),
    ("executors.0.options.components", ["memory", "goals"]),
]


def test_the_result_equals_set_path_applied_in_turn_and_the_input_is_untouched() -> None:
    doc = _doc()
    before = copy.deepcopy(doc)
    expected = doc
    for path, value in ITEMS:
        expected = set_path(expected, path, value)
    result = replace_paths(doc, ITEMS)
    assert result == expected
    assert doc == before


def test_only_the_spine_is_copied_and_values_set_are_copies() -> None:
    doc = _doc()
    level = ["memory", "goals"]
    result = replace_paths(doc, [("params.payoffs.temptation", 4.5), *ITEMS[2:]])
    # Untouched parts are shared, the way to each path is not.
    assert result["population"] is doc["population"]
    assert result["llm"] is doc["llm"]
    assert result["params"] is not doc["params"]
    assert result["params"]["payoffs"] is not doc["params"]["payoffs"]
    assert result["executors"][0] is not doc["executors"][0]
    result_level = result["executors"][0]["options"]["components"]
    assert result_level == level and result_level is not ITEMS[2][1]


def test_two_paths_under_one_mapping_copy_it_once() -> None:
    doc = _doc()
    result = replace_paths(doc, [("params.memoryWindow", 1), ("params.payoffs.reward", 2)])
    assert result["params"]["memoryWindow"] == 1
    assert result["params"]["payoffs"]["reward"] == 2
    assert doc["params"]["memoryWindow"] == 5 and doc["params"]["payoffs"]["reward"] == 3


def test_no_items_return_the_document_itself() -> None:
    doc = _doc()
    assert replace_paths(doc, []) is doc


@pytest.mark.parametrize(
    "path",
    ["params.nothing", "executors.3.kind", "llm.model.name", "params..memoryWindow", ""],
)
def test_a_missing_path_raises_as_set_path_does(path: str) -> None:
    with pytest.raises(UnknownOverride) as expected:
        set_path(_doc(), path, 1)
    with pytest.raises(UnknownOverride) as got:
        replace_paths(_doc(), [("params.memoryWindow", 1), (path, 1)])
    assert (got.value.path, got.value.expected) == (expected.value.path, expected.value.expected)
