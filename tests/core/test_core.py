"""Core: canonical JSON, hashing, document loading with lines, atomic writes, overrides, schema."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simreport.core.canonical import (
    canonical_json,
    content_hash,
    document_json,
    parse_number,
    pretty_json,
)
from simreport.core.errors import DocumentError, SchemaError, UnknownOverride
from simreport.core.files import load_document, write_atomic
from simreport.core.overrides import get_path, set_path
from simreport.core.schema import AuditPlan, RunResult, Scenario
from simreport.core.validation import validate_model


def test_canonical_json_sorts_keys_and_writes_non_finite_as_strings() -> None:
    value = {"b": 1, "a": [math.inf, -math.inf, math.nan, 0.1]}
    text = canonical_json(value)
    assert text == '{"a":["inf","-inf","nan",0.1],"b":1}'
    json.loads(text)  # strict JSON
    assert pretty_json(value).endswith("\n")
    assert math.isinf(parse_number("inf")) and math.isnan(parse_number("nan"))


_LEAVES = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_DOCUMENTS = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), _DOCUMENTS, max_size=6))
def test_document_json_is_canonical_json_for_text_keyed_documents(document: dict) -> None:
    # The fast path of condition building: the same text, non-finite floats and all.
    assert document_json(document) == canonical_json(document)


def test_run_document_json_is_the_canonical_json_of_the_run_document() -> None:
    from simreport.core.versions import run_document, run_document_json
    from simreport.kernel import load_scenario

    root = Path(__file__).resolve().parents[2] / "examples"
    for path in sorted(root.glob("*/scenario.yaml")):
        doc = load_scenario(path).scenario.to_doc()
        assert run_document_json(doc) == canonical_json(run_document(doc)), path
        assert document_json(doc) == canonical_json(doc), path


def test_content_hash_ignores_key_order() -> None:
    assert content_hash({"a": 1, "b": {"c": 2, "d": 3}}) == content_hash(
        {"b": {"d": 3, "c": 2}, "a": 1}
    )
    assert content_hash({"a": 1}) != content_hash({"a": 1.5})


def test_yaml_document_knows_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("world: prisoners_dilemma\npopulation:\n  n: 2\n  fields:\n    age: [1, 2]\n")
    doc = load_document(path)
    assert doc.data["population"]["n"] == 2
    assert doc.line_of("population.n") == 3
    assert doc.line_of("population.fields.age.1") == 5
    assert doc.line_of("population.missing") == 2  # nearest ancestor


def test_yaml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("world: x\npopulation:\n  n: [1, 2\n  fields: {}\n")
    with pytest.raises(DocumentError) as info:
        load_document(path)
    assert info.value.file == str(path)
    assert info.value.line is not None and info.value.line >= 3
    assert info.value.kind == "yaml_syntax"


def test_missing_file_is_a_document_error(tmp_path: Path) -> None:
    with pytest.raises(DocumentError) as info:
        load_document(tmp_path / "nope.yaml")
    assert (info.value.kind, info.value.file) == ("file_missing", str(tmp_path / "nope.yaml"))


def test_write_atomic_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "d" / "x.json"
    write_atomic(target, "one")
    write_atomic(target, "two")
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["x.json"]


def test_overrides_copy_and_reject_missing_paths() -> None:
    doc = {
        "executors": [{"options": {"components": ["memory"]}}],
        "policy": {"options": {"p": 0.5}},
    }
    new = set_path(doc, "executors.0.options.components", ["goals"])
    assert new["executors"][0]["options"]["components"] == ["goals"]
    assert doc["executors"][0]["options"]["components"] == ["memory"]
    assert get_path(new, "policy.options.p") == 0.5
    with pytest.raises(UnknownOverride) as info:
        set_path(doc, "policy.options.q", 1)
    assert info.value.path == "policy.options.q"
    assert "p" in (info.value.expected or "")
    with pytest.raises(UnknownOverride):
        get_path(doc, "executors.3.options")
    with pytest.raises(UnknownOverride):
        get_path(doc, "policy..p")


def test_scenario_rejects_unknown_keys_and_snake_case() -> None:
    with pytest.raises(SchemaError) as info:
        validate_model(Scenario, {"world": "x", "seed_path": [1]}, file="s.yaml")
    assert info.value.path == "seed_path"
    assert info.value.issues[0].kind == "extra_forbidden"
    with pytest.raises(SchemaError) as info:
        validate_model(Scenario, {"world": "x", "prompt": {"personaFormat": "poem"}}, file="s.yaml")
    assert info.value.path == "prompt.personaFormat"
    assert "prose" in (info.value.expected or "")


def test_scenario_needs_exactly_one_engine() -> None:
    with pytest.raises(SchemaError) as info:
        validate_model(Scenario, {"steps": 3})
    assert [i.kind for i in info.value.issues] == ["engine_choice"]
    with pytest.raises(SchemaError) as info:
        validate_model(Scenario, {"world": "x", "simulator": {"command": ["sim"]}})
    assert [i.kind for i in info.value.issues] == ["engine_choice"]


def test_population_shorthand_and_weights_checked() -> None:
    s = Scenario.model_validate(
        {"world": "x", "population": {"n": 4, "fields": {"a": ["x", "y"], "b": 3}}}
    )
    doc = s.to_doc()
    assert doc["population"]["fields"]["a"]["kind"] == "categorical"
    assert doc["population"]["fields"]["b"] == {"kind": "constant", "value": 3}
    with pytest.raises(SchemaError) as info:
        validate_model(
            Scenario,
            {"world": "x", "population": {"fields": {"a": {"values": [1, 2], "weights": [1]}}}},
        )
    assert info.value.path == "population.fields.a"
    assert info.value.issues[0].kind == "weights_length"


def test_plan_needs_exactly_one_base_and_positive_replications() -> None:
    with pytest.raises(SchemaError) as info:
        validate_model(AuditPlan, {"replications": 2})
    assert [i.kind for i in info.value.issues] == ["base_missing"]
    with pytest.raises(SchemaError) as info:
        validate_model(AuditPlan, {"baseScenario": "s.yaml", "base": {"world": "x"}})
    assert [i.kind for i in info.value.issues] == ["base_choice"]
    with pytest.raises(SchemaError) as info:
        validate_model(AuditPlan, {"baseScenario": "s.yaml", "replications": 0})
    assert info.value.path == "replications"


def test_run_result_reads_non_finite_strings() -> None:
    r = RunResult.model_validate(
        {
            "condition": "base",
            "replication": 0,
            "seedPath": [0],
            "status": {"execution": "completed", "validity": "valid", "evidence": "complete"},
            "metrics": {"x": "inf", "y": 0.5},
            "integrity": {"complete": True},
        }
    )
    assert math.isinf(r.metrics["x"])
    assert json.loads(canonical_json(r.to_doc()))["metrics"]["x"] == "inf"
