"""Loading an audit plan: read, expand axis templates, validate, resolve its base scenario and
build every condition, so that nothing the plan asks for can fail after the first run started.

A plan has a meaning hash (`LoadedPlan.hash`: what decides its numbers; bootstrap seeds derive
from it) and an identity hash (`LoadedPlan.identity_hash`: its id, title and file). What each
covers: docs/harness.md.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.canonical import canonical_json, content_hash
from ..core.errors import (
    ConflictingExpectations,
    InputError,
    PlanError,
    SchemaError,
    TooManyRuns,
    join_path,
)
from ..core.files import Document, load_document
from ..core.overrides import lookup
from ..core.redaction import redact_document
from ..core.schema import AuditPlan, Hypothesis, PlanHypothesis, Scenario
from ..core.validation import validate_model
from ..core.versions import run_document
from ..kernel import load_scenario, scenario_outputs, validate_scenario
from .axes import AXIS_CATALOG, TEMPLATE_ENTRY_KEYS, expand_axis_templates

if TYPE_CHECKING:
    from .conditions import Condition

# Paths the harness itself sets in every condition or replication: an axis on them would be
# silently overwritten.
_HARNESS_OWNED = {
    "llm.temperature": "the temperature is forced to 0 inside an audit",
    "seedPath": "the seed lineage is set per replication",
    "replicationId": "the replication index is set per replication",
}


IDENTITY_KEYS = ("id", "title", "baseScenario")
"""Keys of the normalised plan that name or place it rather than say what it does: left out of
the meaning hash (`baseScenario` is the path as written; the scenario it names is hashed in
full as `base`)."""

PRESENTATION_AXIS_KEYS = ("label", "labels")
"""Keys of an axis that only change how reports show it: left out of the meaning hash."""

DEFAULT_MAX_RUNS = 100_000
"""Most runs (conditions × replications) one plan may ask for unless the caller raises the limit
(`--max-runs`, the workflow's `maxRuns`): a typo such as an extra six zeros must not start weeks of
model calls or exhaust memory while the jobs are planned."""

WORKERS_PER_CORE = 4
"""Concurrency is capped at this many run processes per core: runs mostly wait for model calls,
but thousands of processes only thrash the machine."""

MAX_PLAN_ID_LENGTH = 100
"""A plan id names a folder under results/ and the site, and prefixes the workflow's rule names."""

SITE_NAMES = ("index.html", "assets")
"""What the site writes at its top level, beside one folder per plan id."""

# Names Windows reserves for devices, with or without an extension: not a folder anywhere.
_DEVICE_NAMES = frozenset(
    ["con", "prn", "aux", "nul"] + [f"{p}{i}" for p in ("com", "lpt") for i in range(1, 10)]
)


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
        effective one (with its `axes` and `levels`, empty when the scenario's applies), `base`
        the fully validated base scenario document, `baseScenario` the text the plan gave (or
        null), `identity` and `identityHash`, and no `concurrency` (a setting of the machine,
        not of the study)."""
        doc = self.plan.to_doc()
        doc.pop("concurrency", None)
        doc["id"] = self.plan_id
        doc["base"] = self.base.to_doc()
        doc["hypothesis"] = _plan_hypothesis_doc(self.hypothesis)
        doc["identity"] = self.identity
        doc["identityHash"] = self.identity_hash
        return doc

    def meaning(self) -> dict[str, Any]:
        """What the plan asks for, without what names or places it: `normalised()` with URLs'
        credentials redacted, without the identity keys (id, title, the base scenario's path as
        written), without axis display labels, and with the base scenario as its runs read it
        (`core.versions.run_document`: its name, description and own hypothesis null unless it
        is versioned; the effective hypothesis stays, at the top)."""
        doc = redact_document(self.normalised())
        for key in (*IDENTITY_KEYS, "identity", "identityHash"):
            doc.pop(key, None)
        # The base as its runs read it: a scenario's name and description (unless it is a
        # reviewed version) are no more its meaning than the plan's title.
        doc["base"] = run_document(doc["base"])
        doc["axes"] = [
            {k: v for k, v in axis.items() if k not in PRESENTATION_AXIS_KEYS}
            for axis in doc["axes"]
        ]
        return doc  # type: ignore[no-any-return]

    @property
    def hash(self) -> str:
        """The meaning hash: sha256 of the canonical JSON of `meaning()`. Bootstrap seeds derive
        from it."""
        return content_hash(self.meaning())

    @property
    def identity(self) -> dict[str, Any]:
        """Which plan this is: its id, its title and its file as given, credentials in URLs
        redacted."""
        identity = {"id": self.plan_id, "title": self.plan.title, "file": str(self.plan_file)}
        return redact_document(identity)  # type: ignore[no-any-return]

    @property
    def identity_hash(self) -> str:
        """sha256 of the canonical JSON of `identity`."""
        return content_hash(self.identity)

    @property
    def base_document(self) -> dict[str, Any]:
        """The validated base scenario document (a fresh copy)."""
        return copy.deepcopy(self.base.to_doc())

    def locate(self, path: str) -> tuple[Path, int | None]:
        """The plan file and the line of `path` in it, for errors about the plan."""
        return self.plan_file, self.document.line_of(path)


def _plan_hypothesis_doc(hypothesis: Hypothesis | None) -> dict[str, Any] | None:
    """The effective hypothesis in the plan's form: a scenario's gains empty `axes` and
    `levels`."""
    if hypothesis is None:
        return None
    if isinstance(hypothesis, PlanHypothesis):
        return hypothesis.to_doc()
    return PlanHypothesis.model_validate(hypothesis.to_doc()).to_doc()


def plan_id_from_folder(folder_name: str) -> str:
    """A plan id from a folder name: characters outside [A-Za-z0-9._-] become '-', and the id
    starts with a letter or digit."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", folder_name)
    safe = re.sub(r"^[^A-Za-z0-9]+", "", safe)
    return safe or "plan"


def plan_id_of(path: str | Path) -> str:
    """The id the plan file at `path` has, read without validating or building anything (the
    workflow needs it to pick a plan's overrides before loading the plan with them)."""
    plan_file = Path(path)
    data = load_document(plan_file).data
    explicit = data.get("id") if isinstance(data, dict) else None
    if isinstance(explicit, str):
        return explicit
    return plan_id_from_folder(plan_file.resolve().parent.name)


def load_plan(
    path: str | Path,
    *,
    replications: int | None = None,
    concurrency: int | None = None,
    models: Sequence[str] | None = None,
    max_runs: int | None = None,
) -> LoadedPlan:
    """Read, validate and resolve an audit plan, and build its conditions.

    `replications`, `concurrency` and `models` override the plan's values (the CLI's and the
    workflow's overrides). A plan of more than `max_runs` runs (default DEFAULT_MAX_RUNS) is
    refused before any condition is built. Raises InputError subclasses located in the plan file
    (or the base scenario file): SchemaError, UnknownOverride, InvalidOverride, PlanError,
    DocumentError.
    """
    plan_file = Path(path)
    document = load_document(plan_file)
    data = expand_axis_templates(document.data, document=document)
    plan = validate_model(AuditPlan, data, document=document)
    plan = _with_overrides(plan, replications=replications, concurrency=concurrency, models=models)
    plan_folder = plan_file.resolve().parent
    plan_id = plan.id if plan.id is not None else plan_id_from_folder(plan_folder.name)
    check_plan_id(plan_id, file=plan_file, line=document.line_of("id"), given=plan.id is not None)
    check_run_count(plan, plan_file, document, max_runs)

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

    metrics, distributions = scenario_outputs(base, asset_root)
    _check_metrics(plan, metrics, plan_file, document)
    hypothesis = plan.hypothesis if plan.hypothesis is not None else base.hypothesis
    if plan.hypothesis is not None:
        _check_hypothesis(plan.hypothesis, metrics, distributions, document, "hypothesis")
        _check_hypothesis_axes(plan, plan.hypothesis, metrics, document)
    elif base.hypothesis is not None:
        _check_hypothesis(
            base.hypothesis, metrics, distributions, base_doc, join_path(base_prefix, "hypothesis")
        )
    _check_axis_targets(plan, plan_file, document)

    loaded = LoadedPlan(
        plan=plan,
        plan_file=plan_file,
        plan_id=plan_id,
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
    if plan.hypothesis is not None:
        _check_hypothesis_levels(loaded, plan.hypothesis, metrics)
    return loaded


def check_plan_id(
    plan_id: str,
    *,
    file: str | Path | None = None,
    line: int | None = None,
    given: bool = True,
) -> None:
    """Refuse a plan id that cannot be a folder of its own under results/ and in the site: one
    the site's own files use (compared ignoring case, as some filesystems do), a device name, or
    one too long. `given`: the plan set `id` itself (else it came from the folder's name)."""
    lowered = plan_id.lower()
    problem = None
    if lowered in SITE_NAMES:
        problem = f"plan id {plan_id!r} is the name of one of the site's own files"
    elif lowered.split(".")[0] in _DEVICE_NAMES:
        problem = f"plan id {plan_id!r} is a device name on some systems"
    elif len(plan_id) > MAX_PLAN_ID_LENGTH:
        problem = f"plan id is {len(plan_id)} characters long"
    if problem is None:
        return
    if not given:
        problem += " (taken from the plan's folder name)"
    raise PlanError(
        problem,
        file=file,
        path="id",
        line=line if given else None,
        expected=(
            f"an id of at most {MAX_PLAN_ID_LENGTH} letters, digits, '.', '_' or '-', other than "
            + ", ".join(SITE_NAMES)
            + ("" if given else "; give the plan an `id`")
        ),
    )


def check_run_count(
    plan: AuditPlan, plan_file: Path, document: Document, max_runs: int | None = None
) -> int:
    """The number of runs the plan asks for (conditions × replications), counted without building
    anything; refused beyond `max_runs` (default DEFAULT_MAX_RUNS)."""
    from .conditions import count_conditions

    limit = DEFAULT_MAX_RUNS if max_runs is None else max_runs
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"invalid run limit {limit!r}", path="maxRuns", expected="an integer ≥ 1")
    conditions = count_conditions(plan)
    runs = conditions * plan.replications
    if runs <= limit:
        return runs
    path = "axes" if conditions > limit or plan.replications == 1 else "replications"
    raise TooManyRuns(
        f"{conditions} conditions × {plan.replications} replications = {runs} runs, more than "
        f"the limit of {limit}",
        conditions=conditions,
        replications=plan.replications,
        limit=limit,
        file=plan_file,
        path=path,
        line=document.line_of(path),
        expected=(
            f"at most {limit} runs; to run more, raise the limit with --max-runs N "
            "(workflow config: maxRuns)"
        ),
    )


def worker_limit() -> int:
    """The most run processes an audit starts: WORKERS_PER_CORE per core this process may use."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on every platform
        cores = os.cpu_count() or 1
    return WORKERS_PER_CORE * max(1, cores)


def bounded_workers(requested: int, *, name: str = "concurrency") -> tuple[int, str | None]:
    """`requested` run processes capped at `worker_limit()`, and the note to show when capped.
    Fewer than one is an input error (`name` is how the caller spells the setting)."""
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise InputError(
            f"{name} must be at least 1, not {requested!r}", path=name, expected="an integer ≥ 1"
        )
    limit = worker_limit()
    if requested <= limit:
        return requested, None
    return limit, (
        f"{name} {requested} capped at {limit} ({WORKERS_PER_CORE} run processes per core)"
    )


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
    compared = tuple(plan.metrics) or available
    checks = (
        ("metrics", plan.metrics, available, "the base scenario does not report it"),
        ("primaryMetrics", plan.primary_metrics or [], compared, "the plan does not compare it"),
    )
    for key, names, known, why in checks:
        for i, name in enumerate(names):
            if name not in known:
                path = f"{key}.{i}"
                raise PlanError(
                    f"unknown metric {name!r}: {why}",
                    file=plan_file,
                    path=path,
                    line=document.line_of(path),
                    expected=_one_of(known, "metrics"),
                )


def _check_hypothesis(
    hypothesis: Hypothesis,
    metrics: tuple[str, ...],
    distributions: tuple[str, ...],
    document: Document,
    prefix: str,
) -> None:
    _check_outcome_metrics(hypothesis.outcomes, metrics, document, join_path(prefix, "outcomes"))
    _check_outcome_metrics(
        hypothesis.margins or {}, metrics, document, join_path(prefix, "margins")
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


def _check_hypothesis_axes(
    plan: AuditPlan, hypothesis: PlanHypothesis, metrics: tuple[str, ...], document: Document
) -> None:
    axis_ids = [axis.id for axis in plan.axes]
    for axis_id, outcomes in hypothesis.axes.items():
        path = join_path("hypothesis", "axes", axis_id)
        if axis_id not in axis_ids:
            raise PlanError(
                f"hypothesis names unknown axis {axis_id!r}",
                file=document.path,
                path=path,
                line=document.line_of(path),
                expected=_one_of(tuple(axis_ids), "axes", "the plan has"),
            )
        _check_outcome_metrics(outcomes, metrics, document, path)


def hypothesis_level_keys(loaded: LoadedPlan) -> list[str]:
    """The keys `hypothesis.levels` may use, models aside: each level's own id
    (`<axis>=<level>`, which in a factorial design applies to every cell with that level) and
    each compared condition's id without its `@<model>`. A condition's full id, model
    included, is a key too."""
    from .conditions import condition_id

    keys = [condition_id([(axis.id, value)]) for axis in loaded.plan.axes for value in axis.levels]
    for condition in loaded._conditions or ():
        if not condition.is_base:
            keys.append(condition_id(list(condition.levels.items())))
    return list(dict.fromkeys(keys))


def _check_hypothesis_levels(
    loaded: LoadedPlan, hypothesis: PlanHypothesis, metrics: tuple[str, ...]
) -> None:
    """Every key of `hypothesis.levels` names a level or a condition compared with its base."""
    document = loaded.document
    listed = hypothesis_level_keys(loaded)
    known = set(listed) | {c.id for c in loaded._conditions or () if not c.is_base}
    for key, outcomes in hypothesis.levels.items():
        path = join_path("hypothesis", "levels", key)
        if key not in known:
            models = " (each may end in @<model>)" if loaded.plan.models else ""
            raise PlanError(
                f"hypothesis.levels names {key!r}, which is not a level or a condition of this "
                "plan compared with its base",
                file=loaded.plan_file,
                path=path,
                line=document.line_of(path),
                expected=_some_of(listed, "condition ids")
                + models
                + "; `simreport conditions` lists the condition ids",
            )
        _check_outcome_metrics(outcomes, metrics, document, path)
    _check_conflicting_levels(loaded, hypothesis)


def _check_conflicting_levels(loaded: LoadedPlan, hypothesis: PlanHypothesis) -> None:
    """In a full_factorial design a cell that moves two axes falls under both levels' entries
    of `hypothesis.levels`; where they expect opposite directions of a metric and the cell has
    no entry of its own, the analysis would give that cell no expectation. Refused instead,
    naming both entries."""
    if loaded.plan.design != "full_factorial" or len(hypothesis.levels) < 2:
        return
    from .conditions import condition_id, level_text

    base_doc = loaded.base.to_doc()
    base_values = {a.id: canonical_json(lookup(base_doc, a.target)[1]) for a in loaded.plan.axes}
    for condition in loaded._conditions or ():
        if condition.is_base or len(condition.levels) < 2:
            continue
        moved = [
            axis
            for axis, value in condition.levels.items()
            if canonical_json(value) != base_values.get(axis)
        ] or list(condition.levels)
        plain = condition_id(list(condition.levels.items()))
        decided = {**hypothesis.levels.get(plain, {}), **hypothesis.levels.get(condition.id, {})}
        found: dict[str, list[tuple[str, str]]] = {}
        for axis in moved:
            key = f"{axis}={level_text(condition.levels[axis])}"
            for metric, direction in hypothesis.levels.get(key, {}).items():
                if metric not in decided:
                    found.setdefault(metric, []).append((key, direction))
        for metric, entries in found.items():
            if len({direction for _, direction in entries}) > 1:
                first = entries[0]
                second = next(e for e in entries if e[1] != first[1])
                raise _conflict(loaded, plain, metric, first, second)


def _conflict(
    loaded: LoadedPlan, cell: str, metric: str, *entries: tuple[str, str]
) -> ConflictingExpectations:
    found = [
        {
            "path": join_path("hypothesis", "levels", key, metric),
            "line": loaded.document.line_of(join_path("hypothesis", "levels", key, metric)),
            "direction": direction,
        }
        for key, direction in entries
    ]
    said = " and ".join(
        f"{e['path']}"
        + (f" (line {e['line']})" if e["line"] else "")
        + f" expects {e['direction']}"
        for e in found
    )
    return ConflictingExpectations(
        f"conflicting expectations: {said}; both apply to condition {cell!r}, which moves both "
        "axes, and would leave it with no expectation",
        condition=cell,
        metric=metric,
        entries=found,
        file=loaded.plan_file,
        path=found[1]["path"],
        line=found[1]["line"],
        expected=(
            f"entries that agree, or the condition's own entry deciding it: hypothesis.levels "
            f"{cell!r}: {{{metric}: increase or decrease}}"
        ),
    )


def _check_outcome_metrics(
    outcomes: Mapping[str, Any], metrics: tuple[str, ...], document: Document, prefix: str
) -> None:
    for name in outcomes:
        if name not in metrics:
            path = join_path(prefix, name)
            raise PlanError(
                f"hypothesis names unknown metric {name!r}: the base scenario does not report it",
                file=document.path,
                path=path,
                line=document.line_of(path),
                expected=_one_of(metrics, "metrics"),
            )


MAX_LISTED = 20
"""Most names an error lists before it says how many more there are."""


def _some_of(names: Sequence[str], what: str) -> str:
    if not names:
        return f"nothing: the plan has no {what}"
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return f"one of {shown}" + (f", … ({more} more)" if more > 0 else "")


def _one_of(names: tuple[str, ...], what: str, owner: str = "the base scenario reports") -> str:
    return "one of " + ", ".join(names) if names else f"nothing: {owner} no {what}"


def paths_overlap(owner: str, target: str) -> bool:
    """Whether setting `owner` also sets `target` (or the other way round)."""
    return owner == target or target.startswith(owner + ".") or owner.startswith(target + ".")


def _check_axis_targets(plan: AuditPlan, plan_file: Path, document: Document) -> None:
    def refuse(path: str, message: str, expected: str) -> PlanError:
        return PlanError(
            message, file=plan_file, path=path, line=document.line_of(path), expected=expected
        )

    owned = dict(_HARNESS_OWNED)
    if plan.models:
        owned["llm.model"] = "the plan's `models` set the model of every condition"
    for i, axis in enumerate(plan.axes):
        for key, text in [
            ("label", axis.label),
            *((f"labels.{k}", v) for k, v in axis.labels.items()),
        ]:
            if redact_document(text) != text:
                raise refuse(
                    f"axes.{i}.{key}",
                    f"axis {axis.id!r} has a label with credentials in a URL; every page shows it",
                    "a label without user:password@ or key parameters",
                )
        for j, level in enumerate(axis.levels):
            if redact_document(level) != level:
                # A level is part of a condition's id and folder name, which every page shows.
                raise refuse(
                    f"axes.{i}.levels.{j}",
                    f"axis {axis.id!r} has a level with credentials in a URL; condition ids "
                    "would publish them",
                    "a URL without user:password@ or key parameters (keys belong in the "
                    "environment variable llm.apiKeyEnv names)",
                )
        for owner, why in owned.items():
            if paths_overlap(owner, axis.target):
                raise refuse(
                    f"axes.{i}.target",
                    f"axis {axis.id!r} targets {axis.target!r}, which the harness sets: {why}",
                    "a target the harness does not set",
                )
    if plan.design != "full_factorial":
        return
    # In a factorial design every condition sets every axis: overlapping targets would overwrite
    # each other.
    for i, axis in enumerate(plan.axes):
        for other in plan.axes[:i]:
            if paths_overlap(other.target, axis.target):
                raise refuse(
                    f"axes.{i}.target",
                    f"axes {other.id!r} and {axis.id!r} both set {axis.target!r} in a "
                    "full_factorial design",
                    "axes with separate targets",
                )


# --------------------------------------------------------------------------- JSON Schema


def plan_json_schema() -> dict[str, Any]:
    """The plan's JSON Schema as an editor should check it: an axis may be a `{template: ...}`
    entry (its keys and the catalogue's ids and codes), and an inline `base` is checked as a
    scenario (its `params` per world, persona-field shorthands included)."""
    schema = AuditPlan.model_json_schema(by_alias=True)
    scenario = Scenario.model_json_schema(by_alias=True)
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    for name, definition in scenario.pop("$defs", {}).items():
        if defs.setdefault(name, definition) != definition:
            raise RuntimeError(f"the plan and scenario schemas define {name!r} differently")
    defs["Scenario"] = scenario
    base = schema["properties"]["base"]
    base["anyOf"] = [{"$ref": "#/$defs/Scenario"}, {"type": "null"}]

    axis = defs["PerturbationAxis"]
    # A custom axis may leave these out: expand_axis_templates fills in their defaults.
    axis["required"] = [k for k in axis["required"] if k not in ("level", "kind", "dimension")]
    codes = [t.code for t in AXIS_CATALOG.values()]
    entry_keys = [k for k in TEMPLATE_ENTRY_KEYS if k != "template"]
    defs["AxisTemplateEntry"] = {
        "type": "object",
        "title": "AxisTemplateEntry",
        "description": (
            "An axis from the TRAILS catalogue: its level, kind, dimension, code and default "
            "target come from the template."
        ),
        "properties": {
            "template": {
                "description": "Template id or TRAILS code (any case).",
                "enum": [*AXIS_CATALOG, *codes, *(c.lower() for c in codes)],
            },
            **{key: axis["properties"][key] for key in entry_keys},
        },
        "required": ["template", "levels"],
        "additionalProperties": False,
    }
    schema["properties"]["axes"]["items"] = {
        "if": {"type": "object", "required": ["template"]},
        "then": {"$ref": "#/$defs/AxisTemplateEntry"},
        "else": {"$ref": "#/$defs/PerturbationAxis"},
    }
    return schema
