"""The TRAILS axis catalogue and `{template: ...}` axis entries in plan documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simreport.core.errors import InputError, SchemaError
from simreport.core.files import parse_document
from simreport.core.schema import PerturbationAxis
from simreport.core.validation import validate_model
from simreport.harness import AXIS_CATALOG, axis_from_template, axis_template
from simreport.harness.axes import TEMPLATE_ENTRY_KEYS, expand_axis_templates

# code, id, level, kind, dimension, default target — the seed's "Axis catalogue" table.
SEED_TABLE = [
    ("D1", "model_substrate", "micro", "design", "model substrate", "llm.model"),
    ("D2", "agent_specification", "micro", "design", "agent specification", "population.fields"),
    (
        "D3",
        "internal_state",
        "micro",
        "design",
        "internal state",
        "executors.0.options.components",
    ),
    (
        "D4",
        "memory_temporality",
        "micro",
        "design",
        "memory and temporality",
        "params.memoryWindow",
    ),
    ("D5", "interaction_protocol", "meso", "design", "interaction protocol", "policy.options.p"),
    ("D6", "intervention_design", "macro", "design", "intervention design", "params.intervention"),
    ("D7", "environment_structure", "meso", "design", "environment structure", "params.homophily"),
    ("D8", "population_scale", "macro", "design", "population scale", "population.n"),
    (
        "R1",
        "representational_format",
        "micro",
        "representation",
        "representational format",
        "prompt.personaFormat",
    ),
    (
        "R2",
        "instruction_hierarchy",
        "micro",
        "representation",
        "instruction hierarchy",
        "prompt.instructionOrder",
    ),
    (
        "R3",
        "linguistic_framing",
        "micro",
        "representation",
        "linguistic framing",
        "params.framing",
    ),
    (
        "R4",
        "context_representation",
        "micro",
        "representation",
        "context representation",
        "prompt.memoryRepresentation",
    ),
    (
        "R5",
        "interaction_sequencing",
        "meso",
        "representation",
        "interaction sequencing",
        "prompt.rolePlacement",
    ),
]


def test_catalogue_has_the_thirteen_trails_templates_in_order() -> None:
    assert len(AXIS_CATALOG) == 13
    rows = [(t.code, t.id, t.level, t.kind, t.dimension, t.target) for t in AXIS_CATALOG.values()]
    assert rows == SEED_TABLE
    assert all(key == t.id for key, t in AXIS_CATALOG.items())
    assert all(t.description for t in AXIS_CATALOG.values())


def test_catalogue_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        AXIS_CATALOG["x"] = AXIS_CATALOG["model_substrate"]  # type: ignore[index]
    with pytest.raises(AttributeError):
        AXIS_CATALOG["model_substrate"].target = "elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize("key", ["linguistic_framing", "R3", "r3"])
def test_template_lookup_by_id_or_code(key: str) -> None:
    assert axis_template(key).id == "linguistic_framing"


def test_unknown_template_lists_the_known_ids() -> None:
    with pytest.raises(InputError) as info:
        axis_template("D9")
    assert (info.value.path, info.value.file) == (None, None) and "'D9'" in info.value.message
    assert info.value.expected is not None
    assert "model_substrate (D1)" in info.value.expected
    assert "interaction_sequencing (R5)" in info.value.expected


def test_axis_from_template_uses_the_default_target_and_sets_the_code() -> None:
    axis = axis_from_template("R3", ["neutral", "moralised"])
    assert axis.id == "linguistic_framing"
    assert axis.code == "R3"
    assert (axis.level, axis.kind, axis.dimension) == (
        "micro",
        "representation",
        "linguistic framing",
    )
    assert axis.target == "params.framing"
    assert axis.levels == ["neutral", "moralised"]


def test_axis_from_template_with_a_target_and_an_id() -> None:
    axis = axis_from_template(
        "population_scale", [4, 8], target="params.groupSize", axis_id="group_size"
    )
    assert (axis.id, axis.code, axis.target, axis.level) == (
        "group_size",
        "D8",
        "params.groupSize",
        "macro",
    )


def test_axis_from_template_rejects_an_empty_level_list() -> None:
    with pytest.raises(SchemaError) as info:
        axis_from_template("D8", [])
    assert info.value.path == "levels"


PLAN = """\
baseScenario: scenario.yaml
axes:
  - template: R3
    levels: [neutral, risk]
  - template: memory_temporality
    id: memory
    target: params.memory
    levels: [1, 2]
  - id: custom
    level: meso
    kind: design
    dimension: anything
    target: population.n
    levels: [2]
"""


def test_plan_template_entries_expand_before_validation() -> None:
    doc = parse_document(PLAN, Path("audit.yaml"))
    data = expand_axis_templates(doc.data, document=doc)
    assert data["axes"][0] == {
        "id": "linguistic_framing",
        "level": "micro",
        "kind": "representation",
        "dimension": "linguistic framing",
        "target": "params.framing",
        "levels": ["neutral", "risk"],
        "code": "R3",
    }
    assert data["axes"][1]["id"] == "memory"
    assert data["axes"][1]["target"] == "params.memory"
    assert data["axes"][1]["code"] == "D4"
    assert data["axes"][2] == doc.data["axes"][2]  # full entries pass through untouched
    assert "code" not in doc.data["axes"][0]  # the document itself is not modified


def test_plan_template_entry_with_an_unknown_template_is_located() -> None:
    text = "baseScenario: s.yaml\naxes:\n  - template: R3\n    levels: [a]\n  - template: X1\n"
    doc = parse_document(text, Path("plans/audit.yaml"))
    with pytest.raises(InputError) as info:
        expand_axis_templates(doc.data, document=doc)
    err = info.value
    assert err.file == str(Path("plans/audit.yaml"))
    assert err.path == "axes.1.template"
    assert err.line == 5
    assert "'X1'" in err.message
    assert err.expected is not None and "linguistic_framing (R3)" in err.expected


def test_plan_template_entry_may_not_override_the_dimension() -> None:
    text = "axes:\n  - template: R3\n    kind: design\n    levels: [a]\n"
    doc = parse_document(text, Path("audit.yaml"))
    with pytest.raises(InputError) as info:
        expand_axis_templates(doc.data, document=doc)
    assert info.value.path == "axes.0.kind"
    assert info.value.line == 3
    assert "linguistic_framing" in info.value.message  # the template that fixes it


def test_plan_template_entries_keep_their_display_labels() -> None:
    text = (
        "axes:\n  - template: D4\n    label: Memory\n    levels: [1, 5]\n"
        "    labels: {1: one round}\n"
    )
    doc = parse_document(text, Path("audit.yaml"))
    entry = expand_axis_templates(doc.data, document=doc)["axes"][0]
    assert entry["label"] == "Memory"
    assert entry["labels"] == {1: "one round"}
    axis = validate_model(PerturbationAxis, entry)
    # A YAML key `1:` is a number; it names the level whose id text is `1`.
    assert axis.labels == {"1": "one round"}
    assert axis.code == "D4"


def test_a_fixed_key_in_a_template_entry_names_the_keys_allowed() -> None:
    doc = parse_document("axes:\n  - {template: R3, code: R1, levels: [a]}\n", Path("a.yaml"))
    with pytest.raises(InputError) as info:
        expand_axis_templates(doc.data, document=doc)
    assert info.value.path == "axes.0.code"
    assert info.value.expected is not None
    assert set(TEMPLATE_ENTRY_KEYS) <= set(re.findall(r"\w+", info.value.expected))


def test_non_plan_shapes_are_left_for_the_schema() -> None:
    assert expand_axis_templates([1, 2]) == [1, 2]
    assert expand_axis_templates({"axes": "R3"}) == {"axes": "R3"}


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_every_default_target_exists_in_the_example_scenarios() -> None:
    from simreport.core.errors import UnknownOverride
    from simreport.core.overrides import get_path
    from simreport.kernel import load_scenario

    documents = [
        load_scenario(p).scenario.to_doc() for p in sorted(EXAMPLES.glob("*/scenario.yaml"))
    ]
    assert documents, "no example scenarios"

    def exists(target: str) -> bool:
        for doc in documents:
            try:
                get_path(doc, target)
            except UnknownOverride:
                continue
            return True
        return False

    assert [t.code for t in AXIS_CATALOG.values() if not exists(t.target)] == []
