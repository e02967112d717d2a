"""Conditions: the scenarios an audit compares, derived from the plan's design, axes and models,
and the replications of each.

Order (the order of conditions.json, of the runs and of every report table):
1. the base condition(s): `base`, or `base@<model>` for each model in the plan's model order;
2. the perturbed conditions in design order (one_at_a_time: axes in plan order, levels in order;
   full_factorial: the Cartesian product with the first axis varying slowest), and for each of
   them its model variants in model order (condition-major, model-minor).

Condition ids are `<axisId>=<level>` joined with `|`, plus `@<model>` when the plan lists models.
Their directory names are a reversible encoding of the id (see `condition_dir`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.canonical import canonical_json, content_hash
from ..core.errors import (
    InputError,
    InvalidOverride,
    PlanError,
    SchemaError,
    UnknownOverride,
    ValidationIssue,
)
from ..core.overrides import get_path, set_path
from ..core.schema import AuditPlan, PerturbationAxis, Scenario
from ..kernel import validate_scenario
from .plan import LoadedPlan

BASE_ID = "base"
MAX_DIR_LENGTH = 120
_DIR_PREFIX_LENGTH = 80
_DIR_HASH_LENGTH = 16
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
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

    def to_doc(self, replications: int) -> dict[str, Any]:
        """This condition's entry in conditions.json."""
        return {
            "id": self.id,
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


def condition_id(levels: Sequence[tuple[str, Any]], model: str | None = None) -> str:
    """`<axis>=<level>` joined with `|` (`base` when empty), then `@<model>` if given."""
    core = "|".join(f"{axis}={level_text(value)}" for axis, value in levels) or BASE_ID
    return f"{core}@{model}" if model is not None else core


def condition_dir(condition_id: str) -> str:
    """A safe directory name for a condition id.

    Bytes of the UTF-8 id in [A-Za-z0-9._-] are kept and every other byte is written `~xx`
    (lowercase hex); a leading '.' is escaped too, so a name is never hidden, '.' or '..'. An
    encoding longer than 120 characters becomes its first 80 characters (never cutting an
    escape) + `~~` + the first 16 hex digits of sha256(id); only conditions.json maps such a name
    back. Plain encodings never contain `~~`, so the two forms cannot collide.
    """
    raw = condition_id.encode("utf-8")
    parts = []
    for i, byte in enumerate(raw):
        if byte in _SAFE and not (i == 0 and byte == ord(".")):
            parts.append(chr(byte))
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
    """Every condition of the plan, in the order described in this module's docstring.

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
    base_hash = content_hash(base_plain)
    models: list[str | None] = list(plan.models) if plan.models else [None]

    conditions: list[Condition] = []
    for model in models:
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
                identical_to_base=False,
                base_id=base_id,
            )
        )
    for combo in combos:
        plain = _prepare(_apply(loaded, base_doc, combo))
        scenario_hash = content_hash(plain)
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
                    identical_to_base=scenario_hash == base_hash,
                    base_id=condition_id((), model),
                )
            )
    _check_unique(loaded, conditions)
    return conditions


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
    return set_path(doc, "llm.temperature", 0.0)  # type: ignore[no-any-return]


def _with_model(doc: dict[str, Any], model: str | None) -> Scenario:
    final = doc if model is None else set_path(doc, "llm.model", model)
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
    seen: dict[str, int] = {}
    for j, value in enumerate(axis.levels):
        text = level_text(value)
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


def _apply(
    loaded: LoadedPlan, base_doc: dict[str, Any], combo: tuple[tuple[int, int], ...]
) -> dict[str, Any]:
    """The base document with each (axis, level) of `combo` set, validated by the kernel."""
    axes = loaded.plan.axes
    doc = base_doc
    for i, j in combo:
        doc = set_path(doc, axes[i].target, axes[i].levels[j])
    try:
        return validate_scenario(doc).to_doc()
    except InputError as exc:
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
