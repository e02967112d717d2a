"""Every integer and number a document or a request body declares is strict and bounded by the
one definition in simreport/core/values.py, so a field added later cannot let `true`, `"3"` or
2**63 through: the models are read as pydantic compiled them, not as they are written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

import simreport.kernel.testbed.assets  # noqa: F401  (declares the asset models)
from simreport.core.errors import SchemaError
from simreport.core.schema import CategoricalField, ConstantField, Model, RunResult
from simreport.core.values import INT64_MAX, INT64_MIN
from simreport.kernel import validate_scenario
from simreport.service import models

ROOT = Path(__file__).resolve().parents[3]

FREE_VALUES = {(RunResult, "metrics"), (CategoricalField, "values"), (ConstantField, "value")}
"""Values that are data rather than settings: a run's metric is NaN when it has nothing to
measure; a persona field's values are any scalar, written into prompts and never stored as
numbers."""


def _subclasses(cls: type[BaseModel]) -> Iterator[type[BaseModel]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


INPUT_PACKAGES = ("simreport.core.", "simreport.kernel.", "simreport.service.")
"""Where the models of what a user or a client hands in live (scenarios, plans, assets, policies,
request bodies). Named, so the models checked do not depend on which modules other test files
happened to import before this one was collected."""

MODELS = sorted(
    (
        m
        for m in {*_subclasses(Model), *_subclasses(models.RequestBody)}
        if m.__module__.startswith(INPUT_PACKAGES)
    ),
    key=lambda m: (m.__module__, m.__qualname__),
)


def _schemas(node: Any, root: type, field: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every int and float schema of `root`'s own fields (each nested model is checked as a
    model of its own), with the field it belongs to."""
    if isinstance(node, dict):
        if node.get("type") == "model" and node.get("cls") is not root:
            return
        if node.get("type") in ("int", "float"):
            yield field, node
        for key, value in node.items():
            if key == "fields" and isinstance(value, dict):
                for name, sub in value.items():
                    yield from _schemas(sub, root, name)
            else:
                yield from _schemas(value, root, field)
    elif isinstance(node, list):
        for item in node:
            yield from _schemas(item, root, field)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.__module__}.{m.__qualname__}")
def test_integers_and_numbers_are_strict_and_bounded(model: type[BaseModel]) -> None:
    for field, schema in _schemas(model.__pydantic_core_schema__, model):
        where = f"{model.__qualname__}.{field}"
        if (model, field) in FREE_VALUES:
            continue
        if schema["type"] == "int":
            assert schema.get("strict") is True, f"{where} takes true or text for an integer"
            assert schema.get("ge", schema.get("gt", INT64_MIN - 1)) >= INT64_MIN, where
            assert schema.get("le", schema.get("lt", INT64_MAX + 1)) <= INT64_MAX, where
        else:
            assert schema.get("strict") is True, f"{where} takes true or text for a number"
            assert schema.get("allow_inf_nan") is False, f"{where} takes NaN or Infinity"


def test_a_fields_own_bounds_hold_beside_the_64_bit_ones() -> None:
    base = {"world": "prisoners_dilemma"}
    assert validate_scenario({**base, "steps": 100_000, "seed": INT64_MAX}).seed == INT64_MAX
    for change, path in (({"steps": 100_001}, "steps"), ({"seed": -1}, "seed")):
        with pytest.raises(SchemaError) as refused:
            validate_scenario({**base, **change})
        assert refused.value.path == path


def test_the_workflow_configs_integers_are_bounded() -> None:
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text(encoding="utf-8"))

    def integers(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(node, dict):
            kinds = node.get("type")
            if kinds == "integer" or (isinstance(kinds, list) and "integer" in kinds):
                yield path, node
            for key, value in node.items():
                yield from integers(value, f"{path}.{key}")

    found = list(integers(schema, ""))
    assert found
    for path, node in found:
        assert node.get("maximum") == INT64_MAX, path
