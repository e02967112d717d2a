"""The TRAILS axis catalogue: thirteen named templates for the design and representation choices an
audit can perturb, the expansion of `{template: ...}` entries in plan documents, and the defaults
of a custom axis's `level`, `kind` and `dimension` (docs/harness.md, "Custom axes")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from ..core.errors import InputError, SchemaError, ValidationIssue, join_path
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


LEVEL_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "micro": "one agent: its model, persona, memory, prompt",
        "meso": "how agents meet: who acts when, the network, the platform's mechanics",
        "macro": "the whole population or institution: its size, interventions, rules",
    }
)
"""TRAILS levels, each with what an axis at that level varies."""

KIND_MEANINGS: Mapping[str, str] = MappingProxyType(
    {
        "design": "changes what is simulated: a mechanism, a parameter, a structure",
        "representation": "the same content written differently for the model: wording, "
        "format, order",
    }
)
"""TRAILS kinds, each with what an axis of that kind varies."""

# Where a custom axis's target says its level and kind: every template's default target, and
# the scenario's groups whose every path is one agent's prompt, model, executor or activation.
_TARGET_DEFAULTS: Mapping[str, tuple[Level, Kind]] = MappingProxyType(
    {
        "prompt": ("micro", "representation"),
        "llm": ("micro", "design"),
        "executors": ("micro", "design"),
        "policy": ("meso", "design"),
        **{t.target: (t.level, t.kind) for t in _TEMPLATES},
    }
)


def target_defaults(target: str) -> tuple[Level, Kind] | None:
    """The level and kind a custom axis on `target` gets when it leaves them out: those of the
    longest of `_TARGET_DEFAULTS`' paths that is `target` or holds it (None: no default)."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        found = _TARGET_DEFAULTS.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None


def custom_axis_doc(
    entry: Mapping[str, Any], index: int = 0, document: Document | None = None
) -> dict[str, Any]:
    """A custom axis entry (not a template) with its defaults filled in: `dimension` the axis
    id in words, `level` and `kind` from its target (`target_defaults`). A level or kind that
    is missing and has no default is a SchemaError at `axes.<index>.<key>` that lists the values
    to choose from, each with its meaning."""
    filled = dict(entry)
    axis_id, target = entry.get("id"), entry.get("target")
    if "dimension" not in entry and isinstance(axis_id, str) and axis_id.strip():
        filled["dimension"] = " ".join(axis_id.replace("_", " ").replace("-", " ").split())
    if not isinstance(target, str):
        return filled  # the schema names the missing or malformed target
    defaults = target_defaults(target)
    missing = [key for key in ("level", "kind") if key not in entry]
    if defaults is not None:
        for key, value in zip(("level", "kind"), defaults, strict=True):
            filled.setdefault(key, value)
        return filled
    if not missing:
        return filled
    name = f"axis {axis_id!r}" if isinstance(axis_id, str) else "a custom axis"
    choices = {"level": LEVEL_MEANINGS, "kind": KIND_MEANINGS}
    expected = "; ".join(
        f"{key}: " + ", ".join(f"{v} ({meaning})" for v, meaning in choices[key].items())
        for key in missing
    )
    path = join_path("axes", index, missing[0])
    issue = ValidationIssue(
        path,
        f"{name} needs `{'` and `'.join(missing)}`: its target {target} does not say which "
        "(a template's target, or one under prompt, llm, executors or policy, would)",
        expected=expected,
        kind="axis_" + "_".join(missing) + "_missing",
    )
    file = document.path if document is not None else None
    line = document.line_of(join_path("axes", index)) if document is not None else None
    raise SchemaError([issue], file=file, line=line)


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
    """A copy of a plan document with every `{template: ...}` axis entry written out in full,
    and every custom axis with its defaults (`custom_axis_doc`).

    Anything that is not shaped like a plan is returned unchanged for the schema to reject.
    """
    if not isinstance(data, dict) or not isinstance(data.get("axes"), list):
        return data
    axes = [
        (
            _expand_entry(entry, index, document)
            if "template" in entry
            else custom_axis_doc(entry, index, document)
        )
        if isinstance(entry, dict)
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
