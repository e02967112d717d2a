"""Conditions: the scenarios an audit compares, derived from the plan's design, axes and models,
and the replications of each.

The base condition(s) first, then the perturbed ones in design order, each with its model
variants (condition-major). Ids (`<axis>=<level>` joined with `|`, then `@<model>`) read one way,
directory names encode them reversibly and labels are unique within a plan: docs/harness.md.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.canonical import canonical_json, document_json, sha256_text
from ..core.errors import (
    InputError,
    InvalidOverride,
    PlanError,
    SchemaError,
    UnknownOverride,
    ValidationIssue,
)
from ..core.overrides import get_path, split_path
from ..core.redaction import redact_document
from ..core.schema import AuditPlan, PerturbationAxis, Scenario
from ..core.versions import design_sha256, recorded_version, run_document_json
from ..kernel import validate_scenario
from .plan import LoadedPlan

BASE_ID = "base"
MAX_DIR_LENGTH = 120
_DIR_PREFIX_LENGTH = 80
_DIR_HASH_LENGTH = 16
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-=@")
_JOIN, _JOIN_IN_DIR = ord("|"), "+"
"""The `|` that joins a factorial cell's levels is written `+` (a literal `+` is escaped)."""
_ESCAPE = re.compile(r"~([0-9a-f]{2})")


@dataclass(frozen=True)
class Condition:
    """One scenario the audit runs `replications` times."""

    id: str
    dir: str
    """Directory name under runs/: `condition_dir(id)`."""
    axis: str | None
    """The axis id (one_at_a_time), the `|`-joined axis ids (full_factorial), None for a base."""
    level: Any
    """The level value (one_at_a_time), axis id → value (full_factorial), None for a base."""
    levels: dict[str, Any]
    """Axis id → level value for every axis this condition sets; {} for a base."""
    model: str | None
    """The plan model this variant runs with; None when the plan lists no models."""
    is_base: bool
    scenario: Scenario
    """The condition's scenario (temperature 0, model applied), before any replication."""
    scenario_hash: str
    """sha256 of the scenario document before the model is applied."""
    identical_to_base: bool
    """The scenario hashes the same as its base's (judged before the model is applied). Always
    False for a base condition itself."""
    base_id: str
    """The base this condition is compared against: the base of the same model (itself for a
    base)."""
    label: str = ""
    """How reports name the condition, unique within the plan (the rules: docs/harness.md)."""
    runs_read: str | None = field(default=None, repr=False, compare=False)
    """The canonical JSON of `run_document(scenario.to_doc())`, what its runs read, when the
    condition was built with it (`build_conditions`): keys that hash it reuse it."""

    def runs_read_json(self) -> str:
        """The canonical JSON of the scenario as its runs read it (`run_document`)."""
        if self.runs_read is not None:
            return self.runs_read
        return run_document_json(self.scenario.to_doc())

    def to_doc(self, replications: int) -> dict[str, Any]:
        """This condition's entry in conditions.json."""
        return {
            "id": self.id,
            "label": self.label,
            "dir": self.dir,
            "isBase": self.is_base,
            "axis": self.axis,
            "level": self.level,
            "levels": self.levels,
            "model": self.model,
            "identicalToBase": self.identical_to_base,
            "baseId": self.base_id,
            "scenarioHash": self.scenario_hash,
            "replications": replications,
        }


# --------------------------------------------------------------------------- ids and directories


def level_text(value: Any) -> str:
    """How a level appears in a condition id: strings as they are, anything else as compact
    canonical JSON (`5`, `true`, `null`, `{"dose":0.2}`)."""
    return value if isinstance(value, str) else canonical_json(value)


ID_SEPARATORS = ("|", "=")
"""Characters a level's text may not contain: they separate the parts of a condition id."""
MODEL_SEPARATOR = "@"
"""Separates a condition id from its model; refused in a level's text when the plan lists
models."""


def condition_id(levels: Sequence[tuple[str, Any]], model: str | None = None) -> str:
    """`<axis>=<level>` joined with `|` (`base` when empty), then `@<model>` if given."""
    core = "|".join(f"{axis}={level_text(value)}" for axis, value in levels) or BASE_ID
    return f"{core}@{model}" if model is not None else core


def condition_dir(condition_id: str) -> str:
    """A safe directory name for a condition id.

    Readable and reversible: bytes of the UTF-8 id in [A-Za-z0-9._=@-] are kept, the `|`
    joining a cell's levels is written `+` (`framing=moralised+memoryWindow=5@gpt-4o`), and every
    other byte is written `~xx` (lowercase hex; a literal `+` too); a leading '.' is escaped, so a
    name is never hidden, '.' or '..'. An
    encoding longer than 120 characters becomes its first 80 characters (never cutting an
    escape) + `~~` + the first 16 hex digits of sha256(id); only conditions.json maps such a name
    back. Plain encodings never contain `~~`, so the two forms cannot collide.
    """
    raw = condition_id.encode("utf-8")
    parts = []
    for i, byte in enumerate(raw):
        if byte in _SAFE and not (i == 0 and byte == ord(".")):
            parts.append(chr(byte))
        elif byte == _JOIN:
            parts.append(_JOIN_IN_DIR)
        else:
            parts.append(f"~{byte:02x}")
    encoded = "".join(parts)
    if len(encoded) <= MAX_DIR_LENGTH:
        return encoded
    prefix = ""
    for part in parts:
        if len(prefix) + len(part) > _DIR_PREFIX_LENGTH:
            break
        prefix += part
    digest = hashlib.sha256(raw).hexdigest()[:_DIR_HASH_LENGTH]
    return f"{prefix}~~{digest}"


def condition_id_from_dir(name: str) -> str:
    """The condition id a directory name encodes. Raises ValueError for a shortened (hashed) name,
    which only conditions.json can map back, and for anything `condition_dir` cannot produce."""
    if "~~" in name:
        raise ValueError(f"{name!r} is a shortened condition directory; see conditions.json")
    out = bytearray()
    i = 0
    while i < len(name):
        char = name[i]
        if char == "~":
            match = _ESCAPE.match(name, i)
            if match is None:
                raise ValueError(f"{name!r} has a malformed escape at position {i}")
            out.append(int(match.group(1), 16))
            i = match.end()
        elif ord(char) < 128 and ord(char) in _SAFE:
            out.append(ord(char))
            i += 1
        elif char == _JOIN_IN_DIR:
            out.append(_JOIN)
            i += 1
        else:
            raise ValueError(f"{name!r} is not a condition directory name")
    try:
        decoded = out.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{name!r} does not decode to UTF-8 text") from None
    if condition_dir(decoded) != name:
        raise ValueError(f"{name!r} is not the canonical directory name of {decoded!r}")
    return decoded


# --------------------------------------------------------------------------- building


def count_conditions(plan: AuditPlan) -> int:
    """How many conditions `build_conditions` makes, counted from the axes' levels and the models
    without building any (a factorial design's product can be astronomically large)."""
    sizes = [len(axis.levels) for axis in plan.axes]
    if not sizes:
        perturbed = 0
    elif plan.design == "one_at_a_time":
        perturbed = sum(sizes)
    else:
        perturbed = math.prod(sizes)
    return (1 + perturbed) * max(1, len(plan.models))


def build_conditions(loaded: LoadedPlan) -> list[Condition]:
    """Every condition of the plan, in order: the base (one per model, in model order), then each
    perturbed condition in design order (one_at_a_time: axes in plan order, levels in order;
    full_factorial: the Cartesian product, first axis slowest) with its model variants.

    Raises UnknownOverride (a target missing from the normalised base), InvalidOverride (a level
    the scenario rejects) and PlanError (two levels of one axis, or two conditions, with the same
    id), each located in the plan file.
    """
    if loaded._conditions is not None:
        return list(loaded._conditions)
    plan = loaded.plan
    axes = list(plan.axes)
    base_doc = loaded.base_document
    for i, axis in enumerate(axes):
        _check_target(loaded, base_doc, i, axis)
        _check_level_ids(loaded, i, axis)
        _check_labels(loaded, i, axis)

    # (axis indices, level indices) per perturbed condition, in design order.
    combos: list[tuple[tuple[int, int], ...]]
    if not axes:
        combos = []
    elif plan.design == "one_at_a_time":
        combos = [((i, j),) for i, axis in enumerate(axes) for j in range(len(axis.levels))]
    else:
        combos = [
            tuple(enumerate(choice))
            for choice in itertools.product(*(range(len(a.levels)) for a in axes))
        ]

    base_plain = _prepare(base_doc)
    base_hash = sha256_text(document_json(base_plain))
    # Identical to the base when its runs would read the same scenario: a level that changes
    # only what no run reads (a description) runs byte-identically, so it is no test.
    base_runs_read = _runs_read(base_plain)
    models: list[str | None] = list(plan.models) if plan.models else [None]
    # Every condition's (axis, level) indices and model, in plan order; labels need them all.
    cells = [((), model) for model in models] + [
        (combo, model) for combo in combos for model in models
    ]
    labels = condition_labels(axes, cells)

    conditions: list[Condition] = []
    for model, label in zip(models, labels[: len(models)], strict=True):
        base_id = condition_id((), model)
        conditions.append(
            Condition(
                id=base_id,
                dir=condition_dir(base_id),
                axis=None,
                level=None,
                levels={},
                model=model,
                is_base=True,
                scenario=_with_model(base_plain, model),
                scenario_hash=base_hash,
                runs_read=base_runs_read if model is None else None,
                identical_to_base=False,
                base_id=base_id,
                label=label,
            )
        )
    perturbed_labels = iter(labels[len(models) :])
    for combo in combos:
        plain = _prepare(_apply(loaded, base_doc, combo))
        scenario_hash = sha256_text(document_json(plain))
        runs_read = _runs_read(plain)
        identical = runs_read == base_runs_read
        pairs = [(axes[i].id, axes[i].levels[j]) for i, j in combo]
        levels = dict(pairs)
        if plan.design == "one_at_a_time":
            axis_name: str = pairs[0][0]
            level: Any = pairs[0][1]
        else:
            axis_name = "|".join(a.id for a in axes)
            level = dict(levels)
        for model in models:
            cid = condition_id(pairs, model)
            conditions.append(
                Condition(
                    id=cid,
                    dir=condition_dir(cid),
                    axis=axis_name,
                    level=copy.deepcopy(level),
                    levels=copy.deepcopy(levels),
                    model=model,
                    is_base=False,
                    scenario=_with_model(plain, model),
                    scenario_hash=scenario_hash,
                    runs_read=runs_read if model is None else None,
                    identical_to_base=identical,
                    base_id=condition_id((), model),
                    label=next(perturbed_labels),
                )
            )
    _check_unique(loaded, conditions)
    return conditions


# --------------------------------------------------------------------------- labels

Cell = tuple[tuple[tuple[int, int], ...], str | None]
"""A condition before it is built: its (axis index, level index) pairs and its model."""


def level_label(axis: PerturbationAxis, value: Any) -> str:
    """How reports show one level of `axis`: its entry in the axis's `labels`, else its text."""
    text = level_text(value)
    return axis.labels.get(text, text)


def condition_labels(axes: Sequence[PerturbationAxis], cells: Sequence[Cell]) -> list[str]:
    """The display label of each cell, unique among them.

    Plain labels first (`framing: moralised`); where two coincide, the parts that hide
    something say it (an axis label gains its id in brackets, a level label its value in
    parentheses); where they still coincide, the condition id is appended; a last resort
    numbers the rest, so labels never repeat."""
    styles = (_plain_label, _detailed_label, _label_with_id)
    chosen = [_plain_label(axes, cell) for cell in cells]
    for style in styles[1:]:
        repeated = _repeated(chosen)
        if not repeated:
            return chosen
        chosen = [
            style(axes, cell) if label in repeated else label
            for cell, label in zip(cells, chosen, strict=True)
        ]
    seen: dict[str, int] = {}
    out = []
    for label in chosen:
        candidate = label
        while candidate in seen:
            seen[label] += 1
            candidate = f"{label} #{seen[label]}"
        seen.setdefault(candidate, 1)
        out.append(candidate)
    return out


def _repeated(labels: Sequence[str]) -> set[str]:
    seen: set[str] = set()
    repeated: set[str] = set()
    for label in labels:
        (repeated if label in seen else seen).add(label)
    return repeated


def _label_with_model(core: str, model: str | None) -> str:
    return core if model is None else f"{core} @ {model}"


def _plain_label(axes: Sequence[PerturbationAxis], cell: Cell) -> str:
    combo, model = cell
    parts = [
        f"{axes[i].label or axes[i].id}: {level_label(axes[i], axes[i].levels[j])}"
        for i, j in combo
    ]
    return _label_with_model(", ".join(parts) or BASE_ID, model)


def _detailed_label(axes: Sequence[PerturbationAxis], cell: Cell) -> str:
    combo, model = cell
    parts = []
    for i, j in combo:
        axis, value = axes[i], axes[i].levels[j]
        name = axis.id if axis.label in (None, axis.id) else f"{axis.label} [{axis.id}]"
        shown, text = level_label(axis, value), level_text(value)
        parts.append(f"{name}: {shown if shown == text else f'{shown} ({text})'}")
    return _label_with_model(", ".join(parts) or BASE_ID, model)


def _label_with_id(axes: Sequence[PerturbationAxis], cell: Cell) -> str:
    combo, model = cell
    cid = condition_id([(axes[i].id, axes[i].levels[j]) for i, j in combo], model)
    return f"{_detailed_label(axes, cell)} [{cid}]"


def replication_scenarios(condition: Condition, replications: int) -> list[Scenario]:
    """The scenario of each replication r = 0, 1, …: replicationId = r and r appended to the
    condition's seedPath, so every seed descends from the plan's."""
    if replications < 1:
        raise ValueError("replications must be at least 1")
    base = condition.scenario
    return [
        base.model_copy(update={"replication_id": r, "seed_path": [*base.seed_path, r]})
        for r in range(replications)
    ]


def _prepare(doc: dict[str, Any]) -> dict[str, Any]:
    """Audit settings every condition shares: temperature 0."""
    return replace_paths(doc, [("llm.temperature", 0.0)])  # type: ignore[no-any-return]


def replace_paths(document: Any, items: Sequence[tuple[str, Any]]) -> Any:
    """`document` with each (path, value) of `items` set, as `set_path` sets it (the paths must
    exist; UnknownOverride otherwise), copying only the mappings and lists on the way to each
    path and the values set: the result shares every other part with `document`, so neither
    may be changed in place afterwards. For documents validated next, which makes a fresh
    document (copying each condition's whole scenario for each of its levels cost a plan of
    1,000 conditions 600,000 copy calls at every workflow start)."""
    result = document
    copied: set[int] = set()
    for path, value in items:
        get_path(result, path)  # raises UnknownOverride, naming what is missing
        *spine, last = split_path(path)
        result = node = _copied(result, copied)
        for part in spine:
            key: Any = int(part) if isinstance(node, list) else part
            node[key] = _copied(node[key], copied)
            node = node[key]
        node[int(last) if isinstance(node, list) else last] = copy.deepcopy(value)
    return result


def _copied(node: Any, copied: set[int]) -> Any:
    """A shallow copy of a mapping or list, once per result (`copied` holds the copies' ids)."""
    if id(node) in copied:
        return node
    fresh = dict(node) if isinstance(node, dict) else list(node)
    copied.add(id(fresh))
    return fresh


def _runs_read(doc: dict[str, Any]) -> str:
    """The canonical JSON of a condition's scenario document as its runs read it. The scenario
    validated from `doc` gives the same document back, so it is the JSON of the condition's
    scenario too (without a model set; a model variant computes its own)."""
    return run_document_json(doc)


def _with_model(doc: dict[str, Any], model: str | None) -> Scenario:
    final = doc if model is None else replace_paths(doc, [("llm.model", model)])
    return Scenario.model_validate(final)


def _check_target(
    loaded: LoadedPlan, base_doc: dict[str, Any], i: int, axis: PerturbationAxis
) -> None:
    try:
        get_path(base_doc, axis.target)
    except UnknownOverride as exc:
        file, line = loaded.locate(f"axes.{i}.target")
        raise UnknownOverride(
            f"axis {axis.id!r}: {exc.message}",
            file=file,
            path=f"axes.{i}.target",
            line=line,
            expected=exc.expected,
        ) from None


def _check_level_ids(loaded: LoadedPlan, i: int, axis: PerturbationAxis) -> None:
    forbidden = ID_SEPARATORS + ((MODEL_SEPARATOR,) if loaded.plan.models else ())
    seen: dict[str, int] = {}
    for j, value in enumerate(axis.levels):
        text = level_text(value)
        found = [char for char in forbidden if char in text]
        if found:
            path = f"axes.{i}.levels.{j}"
            file, line = loaded.locate(path)
            why = (
                "it ends a condition id before its model"
                if found == [MODEL_SEPARATOR]
                else "it separates the parts of a condition id"
            )
            raise PlanError(
                f"axis {axis.id!r}: level {text!r} contains {found[0]!r}, which cannot appear in "
                f"a condition id: {why}",
                file=file,
                path=path,
                line=line,
                expected=(
                    "a level without "
                    + ", ".join(repr(c) for c in forbidden)
                    + "; give it a display text with the axis's `labels` instead"
                ),
            )
        if text in seen:
            path = f"axes.{i}.levels.{j}"
            file, line = loaded.locate(path)
            raise PlanError(
                f"axis {axis.id!r}: levels {seen[text]} and {j} both appear as {text!r} in "
                "condition ids",
                file=file,
                path=path,
                line=line,
                expected="levels that differ in their id text",
            )
        seen[text] = j


def _check_labels(loaded: LoadedPlan, i: int, axis: PerturbationAxis) -> None:
    """Every key of the axis's `labels` names one of its levels."""
    texts = [level_text(value) for value in axis.levels]
    for key in axis.labels:
        if key not in texts:
            path = f"axes.{i}.labels.{key}"
            file, line = loaded.locate(path)
            raise PlanError(
                f"axis {axis.id!r} has a label for {key!r}, which is not one of its levels",
                file=file,
                path=path,
                line=line,
                expected="one of " + ", ".join(texts),
            )


_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "boolean"),
    ((int, float), "number"),
    (str, "text"),
)


def _kind(value: Any) -> str | None:
    """boolean, number or text for a scalar; None for anything else (null, lists, mappings)."""
    for types, name in _KINDS:
        if isinstance(value, types):
            return name
    return None


def _check_level_kinds(
    loaded: LoadedPlan, validated: dict[str, Any], combo: tuple[tuple[int, int], ...]
) -> None:
    """Refuse a level of another kind than the base scenario's value at its target: `true` for
    an integer, "5" for a number (the schema converts neither)."""
    axes = loaded.plan.axes
    for i, j in combo:
        given = _kind(axes[i].levels[j])
        try:
            kept = _kind(get_path(validated, axes[i].target))
        except UnknownOverride:
            continue
        if given is None or kept is None or given == kept:
            continue
        path = f"axes.{i}.levels.{j}"
        file, line = loaded.locate(path)
        raise InvalidOverride(
            f"level {level_text(axes[i].levels[j])} of axis {axes[i].id!r} is not a {kept}, "
            f"which {axes[i].target} takes (a {given} is not converted)",
            [ValidationIssue(axes[i].target, f"expected a {kept}", f"a {kept}", "level_kind")],
            file=file,
            path=path,
            line=line,
            expected=f"a {kept}",
        )


def _apply(
    loaded: LoadedPlan, base_doc: dict[str, Any], combo: tuple[tuple[int, int], ...]
) -> dict[str, Any]:
    """The base document with each (axis, level) of `combo` set, validated by the kernel."""
    axes = loaded.plan.axes
    # Validation builds a fresh document: the levels' copy may share the rest with the base.
    doc = replace_paths(base_doc, [(axes[i].target, axes[i].levels[j]) for i, j in combo])
    try:
        validated = validate_scenario(doc).to_doc()
    except InputError as exc:
        # A level of another kind than the value it replaces (`true` for an integer) is
        # reported as the wrong kind of level, which is the mistake to fix.
        _check_level_kinds(loaded, loaded.base.to_doc(), combo)
        issues = (
            list(exc.issues)
            if isinstance(exc, SchemaError)
            else [ValidationIssue(exc.path or "", exc.message, exc.expected)]
        )
        i, j = _blame(loaded, combo, issues)
        path = f"axes.{i}.levels.{j}"
        file, line = loaded.locate(path)
        summary = "; ".join(f"{issue.path or 'scenario'}: {issue.message}" for issue in issues)
        what = (
            f"level {level_text(axes[i].levels[j])} of axis {axes[i].id!r}"
            if len(combo) == 1
            else "condition " + condition_id([(axes[a].id, axes[a].levels[b]) for a, b in combo])
        )
        raise InvalidOverride(
            f"{what} makes an invalid scenario: {summary}",
            issues,
            file=file,
            path=path,
            line=line,
            expected=issues[0].expected,
        ) from None
    _check_level_kinds(loaded, validated, combo)
    return validated


def _blame(
    loaded: LoadedPlan, combo: tuple[tuple[int, int], ...], issues: list[ValidationIssue]
) -> tuple[int, int]:
    """The (axis, level) most likely at fault for the first issue: the axis whose target contains
    the issue's path, else the last one set inside the issue's path (a cross-field check on an
    object several axes write into), else the last one set."""
    first = issues[0].path if issues else ""
    targets = [(loaded.plan.axes[i].target, (i, j)) for i, j in combo]
    for target, at in targets:
        if first == target or first.startswith(target + "."):
            return at
    inside = [at for target, at in targets if target.startswith(first + ".") or not first]
    return inside[-1] if inside else combo[-1]


def _check_unique(loaded: LoadedPlan, conditions: list[Condition]) -> None:
    seen: set[str] = set()
    for condition in conditions:
        if condition.id in seen:
            file, line = loaded.locate("axes")
            raise PlanError(
                f"two conditions share the id {condition.id!r}: a level's text contains "
                "'|', '=' or '@' and reads like another combination",
                file=file,
                path="axes",
                line=line,
                expected="levels whose text does not imitate other axes",
            )
        seen.add(condition.id)


def recorded_versions(
    loaded: LoadedPlan, conditions: Iterable[Condition], llm: Mapping[str, Any] | None = None
) -> dict[str, tuple[str | None, str | None]]:
    """Condition id → (the scenario version its runs record, the version it derives from). A
    condition whose design is the base scenario's under the audit's own settings (temperature 0,
    the `llm` overrides) records the declared version; one that changes the design records a
    derived version (core.versions). (None, None) for a scenario without `identity`."""
    identity = loaded.base.identity
    if identity is None:
        return {c.id: (None, None) for c in conditions}

    def design(doc: dict[str, Any]) -> str:
        if llm:
            doc = {**doc, "llm": {**doc["llm"], **llm}}
        return design_sha256(redact_document(doc))

    reference = design(Scenario.model_validate(_prepare(loaded.base.to_doc())).to_doc())
    return {
        c.id: recorded_version(identity.version, design(c.scenario.to_doc()), reference)
        for c in conditions
    }


def declared_design(loaded: LoadedPlan) -> str:
    """Design digest of the base scenario as its file declares it: its version's spec."""
    return design_sha256(redact_document(loaded.base.to_doc()))
