"""audit.json's typed contract: every audit the analysis builds validates and round-trips, a
broken one is refused at its key, and `simreport schema audit` exports a JSON Schema that
accepts the same documents."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema import Draft202012Validator

import simreport
from simreport.analysis.audit import RunRecord, analyse
from simreport.analysis.audit_document import (
    AuditDoc,
    audit_json_schema,
    check_contract,
    read_audit,
    validate_audit,
)
from simreport.analysis.provenance import AUDIT_FILE, write_audit
from simreport.cli import main
from simreport.core.canonical import pretty_json, to_plain
from simreport.core.errors import EXIT_INTERNAL, SchemaError, SimreportError
from tests.analysis.test_audit import (
    PLAN,
    _base_and_one,
    _conditions,
    _factorial_case,
    _records,
    _result,
    constant_groups_audit,
)
from tests.analysis.test_audit_semantics import _identical_audit
from tests.support.audits import PROVENANCE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = (
    "prisoners_dilemma/audit.yaml",
    "echo_chamber/audit.yaml",
    "echo_chamber/factorial-audit.yaml",
    "refund_desk/audit.yaml",
)


def _written(audit: dict[str, Any]) -> dict[str, Any]:
    """An audit as audit.json holds it: with its provenance, non-finite numbers as strings."""
    doc: dict[str, Any] = json.loads(pretty_json({**audit, "provenance": PROVENANCE}))
    return doc


def _no_usable_base() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    records = [RunRecord("framing=moral", r, _result("framing=moral@m1", r, rng)) for r in range(3)]
    records += [RunRecord("base", r, None) for r in range(3)]
    return analyse({**PLAN, "models": []}, _base_and_one(), records)


def _single_replication() -> dict[str, Any]:
    plan = {**PLAN, "replications": 1, "models": [], "hypothesis": None}
    conditions = _base_and_one()
    rng = np.random.default_rng(0)
    records = [RunRecord(c["id"], 0, _result(c["id"], 0, rng)) for c in conditions]
    return analyse(plan, conditions, records)


BUILT: dict[str, Callable[[], dict[str, Any]]] = {
    "models, distributions and expectations": lambda: analyse(PLAN, _conditions(), _records()),
    "incomplete runs included": lambda: analyse(
        PLAN, _conditions(), _records(), include_incomplete=True
    ),
    "full factorial with models": lambda: analyse(*_factorial_case()),
    "one replication": _single_replication,
    "no usable base": _no_usable_base,
    "infinite d": constant_groups_audit,
    "conditions identical to the base": lambda: _identical_audit()[0],
}
"""The audits the analysis tests build (tests/analysis/test_audit.py,
tests/analysis/test_audit_semantics.py)."""


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, Any]]:
    return {name: _written(build()) for name, build in BUILT.items()}


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    return audit_json_schema()


@pytest.mark.parametrize("name", list(BUILT))
def test_built_audits_validate_and_round_trip(name: str, built: dict[str, dict[str, Any]]) -> None:
    doc = built[name]
    model = AuditDoc.model_validate(doc)
    assert model.to_doc() == doc
    assert json.dumps(model.to_doc(), sort_keys=True) == json.dumps(doc, sort_keys=True)


def test_attributes_read_what_the_keys_hold(built: dict[str, dict[str, Any]]) -> None:
    doc = built["models, distributions and expectations"]
    audit = AuditDoc.model_validate(doc)
    assert audit.schema_version == 3
    row = audit.tests["score"][0]
    assert (row.n_base, row.cohen_d, row.conclusion) == (
        doc["tests"]["score"][0]["nBase"],
        doc["tests"]["score"][0]["cohenD"],
        doc["tests"]["score"][0]["conclusion"],
    )
    assert audit.grade.usable_min == doc["grade"]["usableMin"]
    assert audit.testbed is None and audit.main_effects == {}


def test_non_finite_numbers_are_floats_and_written_back_as_strings(
    built: dict[str, dict[str, Any]],
) -> None:
    doc = built["infinite d"]
    assert doc["tests"]["score"][0]["cohenD"] == "inf"
    audit = AuditDoc.model_validate(doc)
    assert audit.tests["score"][0].cohen_d == math.inf
    assert audit.to_doc()["tests"]["score"][0]["cohenD"] == "inf"
    nan_metric = copy.deepcopy(doc)
    nan_metric["runs"][0]["metrics"]["score"] = "nan"
    value = AuditDoc.model_validate(nan_metric).runs[0].metrics["score"]
    assert math.isnan(value)
    # The analysis's own floats validate as they are, before they are written.
    assert (
        validate_audit({**constant_groups_audit(), "provenance": PROVENANCE})
        .tests["score"][0]
        .cohen_d
    )


def test_factorial_sections_are_typed(built: dict[str, dict[str, Any]]) -> None:
    """Main effects and interactions of a full factorial are part of the contract, and the
    sensitivity is ranked by main effect; other designs carry them empty."""
    audit = AuditDoc.model_validate(built["full factorial with models"])
    assert audit.main_effects and audit.interactions and audit.factorial_method
    row = audit.main_effects["score"][0]
    assert row.axis in {"framing", "window"} and row.n_cells > 0
    assert {e.ranked_by for e in audit.sensitivity} <= {"mainEffect", None}
    assert any(e.main_effect is not None for e in audit.sensitivity)
    other = AuditDoc.model_validate(built["one replication"])
    assert other.main_effects == {} and other.factorial_method is None
    broken = copy.deepcopy(built["full factorial with models"])
    del broken["interactions"]["score"][0]["nCells"]
    with pytest.raises(SchemaError) as caught:
        validate_audit(broken)
    assert caught.value.path == "interactions.score.0.nCells"


@pytest.mark.parametrize(
    ("change", "path", "says"),
    [
        (lambda d: d["tests"]["score"][0].update(nBase="12"), "tests.score.0.nBase", "an integer"),
        (
            lambda d: d["tests"]["score"][0].pop("familyP"),
            "tests.score.0.familyP",
            "missing required key",
        ),
        (lambda d: d["grade"].update(achieved="excellent"), "grade.achieved", "'insufficient'"),
        (lambda d: d["runs"][3].update(used=1), "runs.3.used", "true or false"),
        (lambda d: d.pop("verdict"), "verdict", "missing required key"),
        (lambda d: d["summary"].update(usedRuns=1), "summary.usedRuns", "unknown key"),
        (lambda d: d.update(schemaVersion=2), "schemaVersion", "3"),
        (lambda d: d["plan"].pop("hash"), "plan", "meaning hash"),
    ],
)
def test_a_broken_audit_is_refused_at_its_key(
    change: Callable[[dict[str, Any]], object],
    path: str,
    says: str,
    built: dict[str, dict[str, Any]],
) -> None:
    doc = copy.deepcopy(built["models, distributions and expectations"])
    change(doc)
    with pytest.raises(SchemaError) as caught:
        validate_audit(doc, file="audit.json")
    assert caught.value.path == path
    assert caught.value.file == "audit.json"
    assert says in caught.value.one_line()
    # Written by the analysis, the same break is its own fault: an internal error, located.
    with pytest.raises(SimreportError) as internal:
        check_contract(doc, file="audit.json")
    assert internal.value.exit_code == EXIT_INTERNAL and internal.value.path == path


def test_write_audit_refuses_a_broken_audit_and_writes_nothing(
    tmp_path: Path, built: dict[str, dict[str, Any]]
) -> None:
    doc = copy.deepcopy(built["one replication"])
    del doc["tests"]["score"][0]["conclusion"]
    with pytest.raises(SimreportError) as caught:
        write_audit(tmp_path, doc)
    assert caught.value.path == "tests.score.0.conclusion"
    assert not (tmp_path / AUDIT_FILE).exists()
    write_audit(tmp_path, built["one replication"])
    assert read_audit(tmp_path / AUDIT_FILE).to_doc() == built["one replication"]


def test_the_exported_schema_is_json_schema_and_accepts_built_audits(
    schema: dict[str, Any], built: dict[str, dict[str, Any]]
) -> None:
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    for name, doc in built.items():
        assert not [e.message for e in validator.iter_errors(doc)], name
    broken = copy.deepcopy(built["infinite d"])
    broken["tests"]["score"][0]["cohenD"] = "infinite"
    assert not validator.is_valid(broken)


def test_every_field_is_documented(schema: dict[str, Any]) -> None:
    undocumented = [
        f"{name}.{key}"
        for name, definition in {"AuditDoc": schema, **schema["$defs"]}.items()
        for key, prop in definition.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert undocumented == []


def test_schema_audit_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "audit"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(audit_json_schema()))
    assert printed["properties"]["schemaVersion"]["const"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES)
def test_example_audits_validate(example: str, tmp_path: Path, schema: dict[str, Any]) -> None:
    """Each example, run and analysed (its audit checked before it is written), reads back
    through the model unchanged and passes the exported JSON Schema."""
    out = tmp_path / "audit"
    simreport.audit(ROOT / "examples" / example, out=out, replications=2)
    doc = json.loads((out / AUDIT_FILE).read_bytes())
    assert read_audit(out / AUDIT_FILE).to_doc() == doc
    assert to_plain(doc) == doc
    assert not [e.message for e in Draft202012Validator(schema).iter_errors(doc)]
