"""A first audit plan for a world: a commented `scenario.yaml` (the world's starter, with the other
files of its folder: an asset library, an example agent) and a commented `audit.yaml` whose axes
are TRAILS templates with levels that differ from the scenario's, so both validate as written.

Every world with a starter under `starters/<world>/` can be asked for; `WORLD_PLANS` says which
templates apply to it and what they vary. Nothing is written when a file would be replaced,
unless `force` is given (`write_new_files`, which other scaffolds share).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import InputError, UnknownChoice, WouldOverwrite
from ..core.files import check_output_dir, write_atomic
from ..core.overrides import get_path
from ..core.schema import Scenario
from .axes import AXIS_CATALOG, axis_template

STARTERS = Path(__file__).resolve().parent / "starters"
"""One folder per world: its `scenario.yaml` and, for a world that needs them, its `assets/` and
the example agent's module; every file in it is written."""

SCENARIO_FILE = "scenario.yaml"
PLAN_FILE = "audit.yaml"
DEFAULT_REPLICATIONS = 10


@dataclass(frozen=True)
class AxisLevels:
    """What an axis of a new plan varies: its levels and, when the template's default target
    is not in the world's starter scenario, the target it takes instead, with a note saying what
    the template means there."""

    levels: tuple[Any, ...]
    target: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class WorldPlan:
    """A world's first plan: the question, the axes that apply (template id → levels), the
    axes a plan gets when none are asked for, and the metric the claim is about with the margin
    within which it counts as unchanged."""

    title: str
    axes: Mapping[str, AxisLevels]
    default_axes: tuple[str, ...]
    primary_metric: str
    margin: float


_PROMPT_AXES = {
    "model_substrate": AxisLevels(("offline-small", "offline-large")),
    "internal_state": AxisLevels((["instructions", "goals"], ["instructions", "memory"])),
    "representational_format": AxisLevels(("bullets", "table")),
    "instruction_hierarchy": AxisLevels(("instructions_first",)),
    "context_representation": AxisLevels(("json", "bullets")),
    "interaction_sequencing": AxisLevels(("user",)),
}
"""Axes on the scenario's model and prompt, which every starter writes the same way (except the
persona's format, which the echo chamber writes as bullets)."""

_SOCIAL_AXES = {
    **_PROMPT_AXES,
    "memory_temporality": AxisLevels((1, 10)),
    "linguistic_framing": AxisLevels(("moralised", "risk")),
}

WORLD_PLANS: Mapping[str, WorldPlan] = {
    "prisoners_dilemma": WorldPlan(
        title="Prisoner's dilemma: does cooperation survive changes to the design and wording?",
        axes={
            **_SOCIAL_AXES,
            "agent_specification": AxisLevels(
                (
                    {"disposition": ["cooperative", "competitive", "cautious"]},
                    {
                        "age": {"kind": "uniform", "low": 18, "high": 75, "integer": True},
                        "occupation": ["teacher", "trader", "nurse", "engineer", "farmer"],
                    },
                )
            ),
            # The starter's policy is `all`, which has no `p`: the axis swaps the whole policy.
            "interaction_protocol": AxisLevels(
                (
                    {"name": "bernoulli", "options": {"p": 0.5}},
                    {"name": "bernoulli", "options": {"p": 0.8}},
                ),
                target="policy",
            ),
            "population_scale": AxisLevels((4, 20)),
        },
        default_axes=("linguistic_framing", "memory_temporality"),
        primary_metric="cooperationRate",
        margin=0.1,
    ),
    "echo_chamber": WorldPlan(
        title="Echo chamber: does polarisation survive changes to the network and wording?",
        axes={
            **_SOCIAL_AXES,
            "representational_format": AxisLevels(("prose", "table")),
            "agent_specification": AxisLevels(
                (
                    {"stance": ["oppose", "neutral", "support"]},
                    {
                        "stance": {
                            "kind": "categorical",
                            "values": ["strongly oppose", "neutral", "strongly support"],
                            "weights": [0.4, 0.2, 0.4],
                        }
                    },
                )
            ),
            "interaction_protocol": AxisLevels((0.4, 1.0)),
            "intervention_design": AxisLevels(
                (
                    {"timing": 3, "dose": 0.25, "selection": "random", "message": "balanced"},
                    {"timing": 3, "dose": 0.25, "selection": "bridges", "message": "balanced"},
                )
            ),
            "environment_structure": AxisLevels((0.3, 0.95)),
            "population_scale": AxisLevels((30, 120)),
        },
        default_axes=("environment_structure", "linguistic_framing"),
        primary_metric="polarization",
        margin=0.05,
    ),
    "refund_desk": WorldPlan(
        title="Refund desk: does the agent avoid a second refund whatever its prompt and model?",
        axes=_PROMPT_AXES,
        default_axes=("context_representation", "model_substrate"),
        primary_metric="duplicateRefunds",
        margin=0.25,
    ),
    # The agent under test is the starter's Python module: the scenario's model and prompt word
    # only the simulated traveller, so the axes that matter most are retargeted onto the fault's
    # position and the agent's instructions (a version of its prompt asset).
    "testbed": WorldPlan(
        title="Airline desk: does the agent avoid a second charge wherever the fault strikes and "
        "however it is instructed?",
        axes={
            **_PROMPT_AXES,
            "environment_structure": AxisLevels(
                ("not_sent", "sent_not_committed"),
                target="events.triggers.0.position",
                note="where in the payment's life the timeout strikes.",
            ),
            "linguistic_framing": AxisLevels(
                ("rebooking-prompt@2.0.0",),
                target="sut.prompt",
                note="the agent's instructions; 2.0.0 drops the advice to verify after a timeout.",
            ),
        },
        default_axes=("environment_structure", "linguistic_framing"),
        primary_metric="duplicatePayments",
        margin=0.25,
    ),
}


@dataclass(frozen=True)
class NewPlan:
    """What `new_plan` wrote: the folder, the plan and scenario files, and every file."""

    folder: Path
    plan_file: Path
    scenario_file: Path
    files: tuple[Path, ...]


def plan_worlds() -> tuple[str, ...]:
    """The worlds a new plan can be written for, in alphabetical order."""
    return tuple(sorted(WORLD_PLANS))


def world_axes(world: str) -> tuple[str, ...]:
    """The template ids a new plan for `world` may name, in catalogue order (D1–D8, R1–R5).

    Raises:
        UnknownChoice: `world` has no starter.
    """
    known = _world_plan(world).axes
    return tuple(t for t in AXIS_CATALOG if t in known)


def new_plan(
    world: str,
    *,
    axes: Sequence[str] | None = None,
    out: str | Path | None = None,
    replications: int = DEFAULT_REPLICATIONS,
    force: bool = False,
) -> NewPlan:
    """Write a commented `scenario.yaml` and `audit.yaml` for a world, ready to validate and run.

    The scenario is the world's starter (with the asset library it names, for an agent-testbed
    world); the plan's axes are TRAILS templates whose levels differ from the scenario's values,
    and every key carries a comment saying what it does.

    Args:
        world: a built-in world (`simreport worlds` lists them).
        axes: TRAILS template ids or codes (`linguistic_framing`, `R3`); default: two axes
            chosen for the world.
        out: the folder to write into (default: a folder named after the world).
        replications: runs per condition.
        force: replace files that already exist instead of refusing.

    Returns:
        The folder, the plan and scenario files and every file written.

    Raises:
        UnknownChoice: the world has no starter, or an axis does not apply to it (`allowed`
            names the choices).
        WouldOverwrite: a file exists and `force` was not given (`existing` lists them);
            nothing was written.
        InputError: no axes, an axis named twice, fewer than one replication, or a folder that
            cannot be one.
    """
    spec = _world_plan(world)
    chosen = _chosen_axes(world, axes if axes is not None else spec.default_axes)
    if replications < 1:
        raise InputError(
            f"{replications} replications", path="--replications", expected="at least 1"
        )
    folder = Path(out) if out is not None else Path(world)
    check_output_dir(folder, name="--out")
    starter = STARTERS / world
    scenario_text = (starter / SCENARIO_FILE).read_text(encoding="utf-8")
    base = yaml.safe_load(scenario_text)
    contents: dict[Path, str | bytes] = {
        folder / SCENARIO_FILE: scenario_text,
        folder / PLAN_FILE: plan_text(world, chosen, base, replications=replications),
    }
    for path in folder_files(starter):
        contents.setdefault(folder / path.relative_to(starter), path.read_bytes())
    written = write_new_files(contents, force=force)
    return NewPlan(folder, folder / PLAN_FILE, folder / SCENARIO_FILE, written)


def folder_files(root: Path) -> list[Path]:
    """Every file under a starter or scaffold folder (its scenario, assets, an agent's module),
    in path order; Python's caches left beside a module are not part of it."""
    return [
        path
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.relative_to(root).parts
    ]


def write_new_files(contents: Mapping[Path, str | bytes], *, force: bool) -> tuple[Path, ...]:
    """Write every file of `contents` (path → text or bytes), each atomically; return the paths.

    Raises:
        WouldOverwrite: some of the files exist and `force` was not given (`existing` lists
            them); nothing was written.
    """
    existing = [path for path in contents if path.exists()]
    if existing and not force:
        raise WouldOverwrite(
            f"{len(existing)} file{'s' if len(existing) != 1 else ''} already exist here",
            existing=existing,
            file=existing[0],
            expected="a new or empty folder (--force replaces the files)",
        )
    for path, data in contents.items():
        write_atomic(path, data)
    return tuple(contents)


def _world_plan(world: str) -> WorldPlan:
    if world not in WORLD_PLANS:
        raise UnknownChoice(
            f"no plan can be written for world {world!r}",
            name=world,
            allowed=plan_worlds(),
            path="--world",
        )
    return WORLD_PLANS[world]


def _chosen_axes(world: str, names: Sequence[str]) -> list[str]:
    """Template ids for `names` (ids or codes) in the order given; unknown or repeated ones
    refused, naming the axes the world allows."""
    allowed = world_axes(world)
    if not names:
        raise InputError("no axes", path="--axes", expected="one or more of " + ", ".join(allowed))
    chosen: list[str] = []
    for name in names:
        try:
            template = axis_template(name).id
        except InputError:
            template = ""
        if template not in allowed:
            raise UnknownChoice(
                f"{world} has no axis {name!r}", name=name, allowed=allowed, path="--axes"
            )
        if template in chosen:
            raise InputError(f"axis {template!r} named twice", path="--axes")
        chosen.append(template)
    return chosen


# --------------------------------------------------------------------------- the plan's text

_HEADER = """\
# The audit plan: what to change in scenario.yaml, how often to run each version, and what to
# compare. `simreport validate {plan}` checks it; `simreport conditions {plan}` lists the
# conditions it makes without running anything.

# The question this audit answers; the reports use it as their title.
title: {title}

# The scenario every condition starts from (a path relative to this file).
baseScenario: {scenario}

# How the axes below combine into conditions. one_at_a_time: the base scenario, then one
# condition per level of each axis with every other setting as in the base. full_factorial:
# every combination of levels.
design: one_at_a_time

# Runs per condition. Each replication has its own seed, derived from the scenario's seed; a
# condition and the base share their seeds, so they are compared run by run. Once a first
# build exists, `simreport power` says how many the question needs.
replications: {replications}

# What kind of claim the audit supports: exploratory, mechanism or policy (a policy claim needs
# axes at the micro, meso and macro levels to earn a strong grade).
claimType: exploratory

# How many runs go at once on this machine. It changes no result.
concurrency: 2

# The numbers each run reports that are compared with the base, one per line.
metrics:
"""

_HYPOTHESIS = """\

# The metric the question is about. The verdict controls false positives over its comparisons;
# the other metrics are tested as a family of their own.
primaryMetrics: [{metric}]

# What you expect. `unchanged` claims that the metric stays where it is when the design or the
# wording changes; an equivalence test judges it: a difference from the base smaller than the
# margin (in the metric's own units) counts as no change. Other outcomes: increase, decrease.
hypothesis:
  outcomes:
    {metric}: unchanged
  margins:
    {metric}: {margin}

# What to vary. Each axis is one of the 13 TRAILS dimensions (`template`), which fixes the
# setting it changes and its code; each level becomes a condition compared with the base.
# To add a level, add a value to a `levels` list; `simreport worlds` lists every axis.
axes:
"""


def plan_text(
    world: str,
    axes: Sequence[str],
    base: Mapping[str, Any],
    *,
    replications: int,
    metrics: Mapping[str, str] | None = None,
    spec: WorldPlan | None = None,
) -> str:
    """The commented audit plan for `world` with these axes (template ids), read against its
    starter scenario `base` (whose values the comments quote). `metrics` (name → description)
    are those the runs report, by default those of the world's starter (`scenario_metrics`);
    `spec` replaces the world's entry in `WORLD_PLANS` (a scaffold's own question and axes)."""
    spec = WORLD_PLANS[world] if spec is None else spec
    if metrics is None:
        metrics = scenario_metrics(world, base, STARTERS / world)
    width = max(len(name) for name in metrics)
    text = _HEADER.format(
        plan=PLAN_FILE,
        title=json.dumps(spec.title, ensure_ascii=False),
        scenario=SCENARIO_FILE,
        replications=replications,
    )
    text += "".join(
        f"  - {name.ljust(width)}  # {_one_line(description)}\n"
        for name, description in metrics.items()
    )
    text += _HYPOTHESIS.format(metric=spec.primary_metric, margin=_flow(spec.margin))
    for template_id in axes:
        text += _axis_text(template_id, spec.axes[template_id], base)
    return text


def scenario_metrics(world: str, base: Mapping[str, Any], root: Path) -> dict[str, str]:
    """The metrics a run of the scenario `base` (in the folder `root`) reports, name → what it
    measures: the world's own, or for the testbed those its domain asset declares."""
    from ..kernel.worlds import WORLDS

    world_class = WORLDS.get(world)
    scenario = Scenario.model_validate(dict(base))
    names, _ = world_class.outputs(scenario, root)
    declared = {**_domain_metrics(scenario, root), **world_class.metrics}
    return {name: declared.get(name, "") for name in names}


def _domain_metrics(scenario: Scenario, root: Path) -> dict[str, str]:
    """Metric name → description from the scenario's domain asset ({} without one)."""
    from ..kernel.testbed.assets import AssetLibrary
    from ..kernel.testbed.domain.model import DomainAsset

    environment = scenario.environment
    if environment is None or environment.domain is None:
        return {}
    library = root / (scenario.provenance.asset_library if scenario.provenance else "assets")
    domain = (
        AssetLibrary(library)
        .resolve(environment.domain, "domain", "environment.domain")
        .typed(DomainAsset)
    )
    return {name: metric.description for name, metric in domain.metrics.items()}


def _axis_text(template_id: str, axis: AxisLevels, base: Mapping[str, Any]) -> str:
    template = AXIS_CATALOG[template_id]
    target = axis.target or template.target
    lines = [
        f"  # {template.code} {template.dimension}: "
        + _one_line(axis.note or template.description),
        f"  # Changes {target} ({_flow(get_path(base, target))} in {SCENARIO_FILE}).",
        f"  - template: {template_id}",
    ]
    if axis.target is not None:
        lines.append(f"    target: {axis.target}")
    lines.append(f"    levels: {_flow(list(axis.levels))}")
    return "\n".join(lines) + "\n"


def _flow(value: Any) -> str:
    """`value` as YAML on one line (flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def _one_line(text: str) -> str:
    return " ".join(text.split())
