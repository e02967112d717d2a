"""Loading an audit plan: read the document, expand axis templates, validate it, resolve and
validate its base scenario, check it against what the world reports, and build every condition so
that nothing the plan asks for can fail after the first run has started.

The plan hash is the sha256 of the canonical normalised plan (see `LoadedPlan.normalised`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.canonical import content_hash
from ..core.errors import InputError, PlanError, SchemaError, join_path
from ..core.files import Document, load_document
from ..core.schema import AuditPlan, Hypothesis, Scenario
from ..core.validation import validate_model
from ..kernel import load_scenario, scenario_outputs, validate_scenario
from .axes import expand_axis_templates

if TYPE_CHECKING:
    from .conditions import Condition

# Paths the harness itself sets in every condition or replication: an axis on them would be
# silently overwritten.
_HARNESS_OWNED = {
    "llm.temperature": "the temperature is forced to 0 inside an audit",
    "seedPath": "the seed lineage is set per replication",
    "replicationId": "the replication index is set per replication",
}


@dataclass
class LoadedPlan:
    """A validated plan with its resolved base scenario, ready to become conditions."""

    plan: AuditPlan
    """The plan as validated, with the caller's overrides (replications, concurrency, models)."""
    plan_file: Path
    plan_id: str
    """The plan's `id`, or its file's folder name made safe."""
    base: Scenario
    """The fully validated base scenario (world parameters filled with their defaults)."""
    asset_root: Path
    """Where the base scenario's relative paths resolve: its file's folder, or for an inline
    `base` the plan's folder."""
    hypothesis: Hypothesis | None
    """The plan's hypothesis if it gives one, else the base scenario's."""
    document: Document
    """The plan document, for locating errors found later."""
    base_file: Path | None = None
    """The base scenario file: the plan file's folder joined with `baseScenario` (None for an
    inline `base`)."""
    metrics_available: tuple[str, ...] = ()
    """Every metric the base scenario's world (or simulator) reports."""
    distributions_available: tuple[str, ...] = ()
    _conditions: tuple[Condition, ...] | None = field(default=None, repr=False)

    def normalised(self) -> dict[str, Any]:
        """The canonical plan: every field with its default, `id` filled in, `hypothesis` the
        effective one, `base` the fully validated base scenario document, `baseScenario` the text
        the plan gave (or null), and no `concurrency` (so the same plan hashes the same on any
        machine)."""
        doc = self.plan.to_doc()
        doc.pop("concurrency", None)
        doc["id"] = self.plan_id
        doc["base"] = self.base.to_doc()
        doc["hypothesis"] = self.hypothesis.to_doc() if self.hypothesis is not None else None
        return doc

    @property
    def hash(self) -> str:
        """sha256 of the canonical JSON of `normalised()`."""
        return content_hash(self.normalised())

    @property
    def base_document(self) -> dict[str, Any]:
        """The validated base scenario document (a fresh copy)."""
        return copy.deepcopy(self.base.to_doc())

    def locate(self, path: str) -> tuple[Path, int | None]:
        """The plan file and the line of `path` in it, for errors about the plan."""
        return self.plan_file, self.document.line_of(path)


def plan_id_from_folder(folder_name: str) -> str:
    """A plan id from a folder name: characters outside [A-Za-z0-9._-] become '-', and the id
    starts with a letter or digit."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", folder_name)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)
    return safe or "plan"


def load_plan(
    path: str | Path,
    *,
    replications: int | None = None,
    concurrency: int | None = None,
    models: Sequence[str] | None = None,
) -> LoadedPlan:
    """Read, validate and resolve an audit plan, and build its conditions.

    `replications`, `concurrency` and `models` override the plan's values (the CLI's and the
    workflow's overrides). Raises InputError subclasses located in the plan file (or the base
    scenario file): SchemaError, UnknownOverride, InvalidOverride, PlanError, DocumentError.
    """
    plan_file = Path(path)
    document = load_document(plan_file)
    data = expand_axis_templates(document.data, document=document)
    plan = validate_model(AuditPlan, data, document=document)
    plan = _with_overrides(plan, replications=replications, concurrency=concurrency, models=models)
    plan_folder = plan_file.resolve().parent

    base_file: Path | None = None
    base_doc: Document
    base_prefix = ""
    if plan.base_scenario is not None:
        base_file = _resolve_base_file(plan.base_scenario, plan_file, document)
        loaded_base = load_scenario(base_file)
        base, asset_root, base_doc = (
            loaded_base.scenario,
            loaded_base.asset_root,
            loaded_base.document,
        )
    else:
        base = validate_scenario(plan.base or {}, file=plan_file, document=document, prefix="base")
        asset_root, base_doc, base_prefix = plan_folder, document, "base"

    metrics, distributions = scenario_outputs(base)
    _check_metrics(plan, metrics, plan_file, document)
    hypothesis = plan.hypothesis if plan.hypothesis is not None else base.hypothesis
    if plan.hypothesis is not None:
        _check_hypothesis(plan.hypothesis, metrics, distributions, document, "hypothesis")
    elif base.hypothesis is not None:
        _check_hypothesis(
            base.hypothesis, metrics, distributions, base_doc, join_path(base_prefix, "hypothesis")
        )
    _check_axis_targets(plan, plan_file, document)

    loaded = LoadedPlan(
        plan=plan,
        plan_file=plan_file,
        plan_id=plan.id if plan.id is not None else plan_id_from_folder(plan_folder.name),
        base=base,
        asset_root=asset_root,
        hypothesis=hypothesis,
        document=document,
        base_file=base_file,
        metrics_available=metrics,
        distributions_available=distributions,
    )
    # Building the conditions applies and re-validates every level, so UnknownOverride and
    # InvalidOverride surface here, before anything runs.
    from .conditions import build_conditions

    loaded._conditions = tuple(build_conditions(loaded))
    return loaded


def _with_overrides(
    plan: AuditPlan,
    *,
    replications: int | None,
    concurrency: int | None,
    models: Sequence[str] | None,
) -> AuditPlan:
    updates: dict[str, Any] = {}
    if replications is not None:
        updates["replications"] = replications
    if concurrency is not None:
        updates["concurrency"] = concurrency
    if models is not None:
        updates["models"] = list(models)
    if not updates:
        return plan
    try:
        return validate_model(AuditPlan, {**plan.to_doc(), **updates})
    except SchemaError as exc:
        raise InputError(
            f"invalid override: {exc.message}", path=exc.path, expected=exc.expected
        ) from None


def _resolve_base_file(text: str, plan_file: Path, document: Document) -> Path:
    candidate = Path(text)
    # Joined, not resolved, so errors name the file the way the user reaches it.
    resolved = candidate if candidate.is_absolute() else plan_file.parent / candidate
    if not resolved.is_file():
        raise InputError(
            f"base scenario {text!r} not found (looked for {resolved})",
            file=plan_file,
            path="baseScenario",
            line=document.line_of("baseScenario"),
            expected="a scenario file, relative to the plan file's folder",
        )
    return resolved


def _check_metrics(
    plan: AuditPlan, available: tuple[str, ...], plan_file: Path, document: Document
) -> None:
    for i, name in enumerate(plan.metrics):
        if name not in available:
            path = f"metrics.{i}"
            raise PlanError(
                f"unknown metric {name!r}: the base scenario does not report it",
                file=plan_file,
                path=path,
                line=document.line_of(path),
                expected=_one_of(available, "metrics"),
            )


def _check_hypothesis(
    hypothesis: Hypothesis,
    metrics: tuple[str, ...],
    distributions: tuple[str, ...],
    document: Document,
    prefix: str,
) -> None:
    for name in hypothesis.outcomes:
        if name not in metrics:
            path = join_path(prefix, "outcomes", name)
            raise PlanError(
                f"hypothesis names unknown metric {name!r}: the base scenario does not report it",
                file=document.path,
                path=path,
                line=document.line_of(path),
                expected=_one_of(metrics, "metrics"),
            )
    for name in hypothesis.target_distribution or {}:
        if name not in distributions:
            path = join_path(prefix, "targetDistribution", name)
            raise PlanError(
                f"target distribution for unknown distribution {name!r}",
                file=document.path,
                path=path,
                line=document.line_of(path),
                expected=_one_of(distributions, "distributions"),
            )


def _one_of(names: tuple[str, ...], what: str) -> str:
    return (
        "one of " + ", ".join(names) if names else f"nothing: the base scenario reports no {what}"
    )


def paths_overlap(owner: str, target: str) -> bool:
    """Whether setting `owner` also sets `target` (or the other way round)."""
    return owner == target or target.startswith(owner + ".") or owner.startswith(target + ".")


def _check_axis_targets(plan: AuditPlan, plan_file: Path, document: Document) -> None:
    owned = dict(_HARNESS_OWNED)
    if plan.models:
        owned["llm.model"] = "the plan's `models` set the model of every condition"
    for i, axis in enumerate(plan.axes):
        path = f"axes.{i}.target"
        for owner, why in owned.items():
            if paths_overlap(owner, axis.target):
                raise PlanError(
                    f"axis {axis.id!r} targets {axis.target!r}, which the harness sets: {why}",
                    file=plan_file,
                    path=path,
                    line=document.line_of(path),
                    expected="a target the harness does not set",
                )
    if plan.design != "full_factorial":
        return
    # In a factorial design every condition sets every axis: overlapping targets would overwrite
    # each other.
    for i, axis in enumerate(plan.axes):
        for other in plan.axes[:i]:
            if paths_overlap(other.target, axis.target):
                path = f"axes.{i}.target"
                raise PlanError(
                    f"axes {other.id!r} and {axis.id!r} both set {axis.target!r} in a "
                    "full_factorial design",
                    file=plan_file,
                    path=path,
                    line=document.line_of(path),
                    expected="axes with separate targets",
                )
