"""The TRAILS axis catalogue: thirteen named templates for the design and representation choices an
audit can perturb, and the expansion of `{template: ...}` entries in plan documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from ..core.errors import InputError, join_path
from ..core.files import Document
from ..core.schema import PerturbationAxis
from ..core.validation import validate_model

Level = Literal["micro", "meso", "macro"]
Kind = Literal["design", "representation"]


@dataclass(frozen=True)
class AxisTemplate:
    """One TRAILS dimension: where it sits, what it is called and where it usually points."""

    code: str
    """TRAILS code: D1–D8 for design, R1–R5 for representation."""
    id: str
    """Axis id used when a plan does not give its own."""
    level: Level
    kind: Kind
    dimension: str
    target: str
    """Default target: the dotted path the example scenarios expose for this dimension."""
    description: str
    """What varies along this dimension."""


_TEMPLATES = (
    AxisTemplate(
        "D1",
        "model_substrate",
        "micro",
        "design",
        "model substrate",
        "llm.model",
        "Which model family or size makes the agents' decisions.",
    ),
    AxisTemplate(
        "D2",
        "agent_specification",
        "micro",
        "design",
        "agent specification",
        "population.fields",
        "Which persona fields the agents have and how each is sampled.",
    ),
    AxisTemplate(
        "D3",
        "internal_state",
        "micro",
        "design",
        "internal state",
        "executors.0.options.components",
        "Which internal components (instructions, memory, goals) an agent carries.",
    ),
    AxisTemplate(
        "D4",
        "memory_temporality",
        "micro",
        "design",
        "memory and temporality",
        "params.memoryWindow",
        "How much of the past an agent recalls and how it is condensed.",
    ),
    AxisTemplate(
        "D5",
        "interaction_protocol",
        "meso",
        "design",
        "interaction protocol",
        "policy.options.p",
        "Who acts when: the activation policy, turn taking and synchrony.",
    ),
    AxisTemplate(
        "D6",
        "intervention_design",
        "macro",
        "design",
        "intervention design",
        "params.intervention",
        "How a treatment is delivered: its timing, dose and who receives it.",
    ),
    AxisTemplate(
        "D7",
        "environment_structure",
        "meso",
        "design",
        "environment structure",
        "params.homophily",
        "The network topology and platform mechanics such as recommenders.",
    ),
    AxisTemplate(
        "D8",
        "population_scale",
        "macro",
        "design",
        "population scale",
        "population.n",
        "How many agents take part.",
    ),
    AxisTemplate(
        "R1",
        "representational_format",
        "micro",
        "representation",
        "representational format",
        "prompt.personaFormat",
        "The same persona written as prose, as bullets or as a table.",
    ),
    AxisTemplate(
        "R2",
        "instruction_hierarchy",
        "micro",
        "representation",
        "instruction hierarchy",
        "prompt.instructionOrder",
        "Whether the task instructions come before or after the persona.",
    ),
    AxisTemplate(
        "R3",
        "linguistic_framing",
        "micro",
        "representation",
        "linguistic framing",
        "params.framing",
        "How the same situation is worded: neutral, moralised or framed as risk.",
    ),
    AxisTemplate(
        "R4",
        "context_representation",
        "micro",
        "representation",
        "context representation",
        "prompt.memoryRepresentation",
        "The same memory written as a transcript, as JSON or as bullets.",
    ),
    AxisTemplate(
        "R5",
        "interaction_sequencing",
        "meso",
        "representation",
        "interaction sequencing",
        "prompt.rolePlacement",
        "Whether the role is given in the system turn or in the user turn.",
    ),
)

AXIS_CATALOG: Mapping[str, AxisTemplate] = MappingProxyType({t.id: t for t in _TEMPLATES})
"""The thirteen TRAILS templates by id, in catalogue order (D1–D8, then R1–R5)."""

_BY_CODE = {t.code: t for t in _TEMPLATES}

# Keys a `{template: ...}` plan entry may carry; level, kind, dimension and code come from the
# template so that a code in a report always means the same dimension. `label` and `labels`
# (display text) pass through to the axis as they are.
TEMPLATE_ENTRY_KEYS = ("template", "levels", "target", "id", "label", "labels")
_EXPANDED_KEYS = ("template", "levels", "target", "id")
_FIXED_BY_TEMPLATE = ("level", "kind", "dimension", "code")


def _known() -> str:
    return ", ".join(f"{t.id} ({t.code})" for t in _TEMPLATES)


def axis_template(key: str) -> AxisTemplate:
    """The template with this id (`linguistic_framing`) or code (`R3`, any case)."""
    if isinstance(key, str):
        if key in AXIS_CATALOG:
            return AXIS_CATALOG[key]
        if key.upper() in _BY_CODE:
            return _BY_CODE[key.upper()]
    raise InputError(f"unknown axis template {key!r}", expected="one of " + _known())


def axis_from_template(
    id: str, levels: Sequence[Any], target: str | None = None, *, axis_id: str | None = None
) -> PerturbationAxis:
    """A validated axis from the template `id` (an id or a code) with the given levels.

    `target` replaces the template's default target; `axis_id` replaces the axis id (useful when
    one plan perturbs the same dimension at two places).
    """
    return validate_model(
        PerturbationAxis, template_axis_doc(axis_template(id), levels, target, axis_id)
    )


def template_axis_doc(
    template: AxisTemplate, levels: Any, target: str | None = None, axis_id: str | None = None
) -> dict[str, Any]:
    """The axis document a template expands to (not yet validated)."""
    return {
        "id": template.id if axis_id is None else axis_id,
        "level": template.level,
        "kind": template.kind,
        "dimension": template.dimension,
        "target": template.target if target is None else target,
        "levels": levels,
        "code": template.code,
    }


def expand_axis_templates(data: Any, *, document: Document | None = None) -> Any:
    """A copy of a plan document with every `{template: ...}` axis entry written out in full.

    Anything that is not shaped like a plan is returned unchanged for the schema to reject.
    """
    if not isinstance(data, dict) or not isinstance(data.get("axes"), list):
        return data
    axes = [
        _expand_entry(entry, index, document)
        if isinstance(entry, dict) and "template" in entry
        else entry
        for index, entry in enumerate(data["axes"])
    ]
    return {**data, "axes": axes}


def _expand_entry(entry: dict[str, Any], index: int, document: Document | None) -> dict[str, Any]:
    file = document.path if document is not None else None

    def where(key: str) -> tuple[str, int | None]:
        path = join_path("axes", index, key)
        return path, document.line_of(path) if document is not None else None

    name = entry["template"]
    try:
        template = axis_template(name)
    except InputError as exc:
        path, line = where("template")
        raise InputError(
            exc.message, file=file, path=path, line=line, expected=exc.expected
        ) from None
    for key in _FIXED_BY_TEMPLATE:
        if key in entry:
            path, line = where(key)
            raise InputError(
                f"{key!r} is fixed by the template {template.id} ({template.code})",
                file=file,
                path=path,
                line=line,
                expected="only " + ", ".join(TEMPLATE_ENTRY_KEYS) + " in a template entry",
            )
    expanded = template_axis_doc(
        template, entry.get("levels"), entry.get("target"), entry.get("id")
    )
    if "levels" not in entry:
        del expanded["levels"]  # let the schema report the missing key at its usual path
    # Unknown keys pass through so the schema rejects them at their own path and line.
    extra = {k: v for k, v in entry.items() if k not in _EXPANDED_KEYS}
    return {**expanded, **extra}
