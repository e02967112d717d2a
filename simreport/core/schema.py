"""Pydantic models for the scenario, the audit plan, perturbation axes and the run result.

Keys are camelCase in documents (`seedPath`, `personaFormat`) and snake_case in Python; dotted axis
targets address the document form. Unknown keys are rejected everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from pydantic_core import PydanticCustomError

from .canonical import canonical_json, parse_number

# The base model and the model access are the scenario's vocabulary: readers import them from
# here, beside the scenario that uses them.
from .document_model import Model as Model
from .llm_config import LLMConfig as LLMConfig
from .testbed_schema import (
    EnvironmentConfig,
    EvaluationRef,
    EventsConfig,
    ExecutionConfig,
    Identity,
    InteractionConfig,
    Participant,
    Provenance,
    SutConfig,
    UserConfig,
)
from .values import RESOURCE_NAME as RESOURCE_NAME
from .values import Int64, Name, Number

SCHEMA_VERSION = 1

JsonValue = Any


class WorldParams(Model):
    """Base of a world's parameters (a scenario's `params`). Every field carries a description
    and states its allowed values in its type (Literal, bounds), so `simreport worlds` and the
    scenario's JSON Schema document the world without its code."""

    key_noun: ClassVar[str] = "parameter"


WorldParamsSource = Callable[[], Mapping[str, type[WorldParams]]]
_world_params: WorldParamsSource | None = None


def set_world_params_source(source: WorldParamsSource) -> None:
    """Say where the scenario's JSON Schema finds each world's parameter model. The kernel's world
    registry calls this (core imports nothing above it); the source is read every time a schema
    is made, so worlds registered later are included."""
    global _world_params
    _world_params = source


def world_params_models() -> dict[str, type[WorldParams]]:
    """World name → its parameter model, for the worlds registered so far."""
    return dict(_world_params()) if _world_params is not None else {}


# --------------------------------------------------------------------------- population


class CategoricalField(Model):
    """A persona field drawn from a list of values, optionally weighted."""

    kind: Literal["categorical"] = Field("categorical", description="Sampling rule.")
    values: list[str | int | float | bool] = Field(
        ..., min_length=1, description="The values the field can take."
    )
    weights: list[Number] | None = Field(
        None, description="Relative weights, one per value; equal weights when omitted."
    )

    @model_validator(mode="after")
    def _weights_match(self) -> CategoricalField:
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise PydanticCustomError(
                    "weights_length",
                    "weights has {weights} entries but values has {values}",
                    {"weights": len(self.weights), "values": len(self.values)},
                )
            if any(w < 0 or not math.isfinite(w) for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be finite, non-negative and not all zero")
        return self


class UniformField(Model):
    """A numeric persona field drawn uniformly from [low, high]."""

    kind: Literal["uniform"] = Field(description="Sampling rule.")
    low: Number = Field(description="Lower bound.")
    high: Number = Field(description="Upper bound.")
    integer: bool = Field(False, description="Draw whole numbers (both bounds included).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformField:
        if self.high < self.low:
            raise ValueError("high must not be below low")
        return self


class NormalField(Model):
    """A numeric persona field drawn from a normal distribution, clipped to optional bounds."""

    kind: Literal["normal"] = Field(description="Sampling rule.")
    mean: Number = Field(description="Mean.")
    sd: Number = Field(ge=0, description="Standard deviation.")
    low: Number | None = Field(None, description="Clip draws below this value.")
    high: Number | None = Field(None, description="Clip draws above this value.")


class ConstantField(Model):
    """A persona field with the same value for every agent."""

    kind: Literal["constant"] = Field(description="Sampling rule.")
    value: str | int | float | bool = Field(description="The value.")


FieldSpec = Annotated[
    CategoricalField | UniformField | NormalField | ConstantField, Field(discriminator="kind")
]


def _allow_field_shorthand(schema: dict[str, Any]) -> None:
    """Let the JSON Schema accept the persona-field shorthands: a list, a scalar."""
    scalar = {"type": ["string", "number", "boolean"]}
    schema["additionalProperties"] = {
        "anyOf": [
            schema.get("additionalProperties", {}),
            {"type": "array", "items": scalar, "minItems": 1},
            scalar,
        ]
    }


class Population(Model):
    """Who takes part: how many agents and how their persona fields are sampled."""

    n: Int64 = Field(2, ge=1, le=1_000_000, description="Number of agents.")
    fields: dict[str, FieldSpec] = Field(
        default_factory=dict,
        description=(
            "Persona fields by name. A plain list is shorthand for a categorical field, a scalar "
            "for a constant."
        ),
        json_schema_extra=_allow_field_shorthand,
    )

    @field_validator("fields", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        out: dict[str, Any] = {}
        for name, spec in value.items():
            if isinstance(spec, list):
                out[name] = {"kind": "categorical", "values": spec}
            elif isinstance(spec, (str, int, float, bool)):
                out[name] = {"kind": "constant", "value": spec}
            elif isinstance(spec, dict) and "kind" not in spec and "values" in spec:
                out[name] = {"kind": "categorical", **spec}
            else:
                out[name] = spec
        return out


# --------------------------------------------------------------------------- model access


class PromptConfig(Model):
    """How the same content is written for the model (the representation axes)."""

    persona_format: Literal["prose", "bullets", "table"] = Field(
        "prose", description="How the persona is written."
    )
    instruction_order: Literal["persona_first", "instructions_first"] = Field(
        "persona_first", description="Whether the persona or the task instructions come first."
    )
    memory_representation: Literal["transcript", "json", "bullets"] = Field(
        "transcript", description="How remembered events are written."
    )
    role_placement: Literal["system", "user"] = Field(
        "system", description="Whether the role lives in the system turn or the user turn."
    )


class PolicyConfig(Model):
    """The activation policy: who acts in each step."""

    name: str = Field("all", min_length=1, description="all, bernoulli or round_robin.")
    options: dict[str, JsonValue] = Field(
        default_factory=dict, description="Policy options, e.g. p for bernoulli."
    )


Component = Literal["instructions", "memory", "goals"]
ALL_COMPONENTS: tuple[Component, ...] = ("instructions", "memory", "goals")


class ExecutorOptions(Model):
    """What an executor gives the agents it drives."""

    components: list[Component] = Field(
        default_factory=lambda: list(ALL_COMPONENTS),
        description="Internal components included in the agent's prompt.",
    )
    params: dict[str, JsonValue] = Field(
        default_factory=dict, description="Options of a rule executor."
    )


class ExecutorConfig(Model):
    """Which agents are driven by what: a language model or a fixed rule."""

    kind: Literal["llm", "rule"] = Field("llm", description="llm or rule.")
    agents: Literal["all", "rest"] | list[Int64] = Field(
        "all",
        description="Agent indices, 'all', or 'rest' for every agent no other executor names.",
    )
    rule: str | None = Field(None, description="Rule name for kind: rule (e.g. tit_for_tat).")
    options: ExecutorOptions = Field(
        default_factory=ExecutorOptions, description="Components and rule options."
    )

    @model_validator(mode="after")
    def _rule_named(self) -> ExecutorConfig:
        if self.kind == "rule" and not self.rule:
            raise ValueError("a rule executor needs `rule`")
        if self.kind == "llm" and self.rule:
            raise ValueError("`rule` is only for kind: rule")
        return self


Margin = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
"""An equivalence margin: a positive finite number in the metric's own units."""


class Hypothesis(Model):
    """What the study expects: a direction per metric, or that it stays within a margin, and
    optional target distributions."""

    outcomes: dict[str, Literal["increase", "decrease", "unchanged"]] = Field(
        default_factory=dict,
        description=(
            "Metric name → expected direction, or `unchanged`: a robustness claim, judged by an "
            "equivalence test against the metric's margin."
        ),
    )
    margins: dict[str, Margin] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description=(
            "Metric name → equivalence margin in the metric's units: a difference from the base "
            "smaller than this counts as no change. Required for an `unchanged` outcome."
        ),
    )
    target_distribution: dict[str, dict[str, Number]] | None = Field(
        None, description="Distribution name → category → probability."
    )

    @field_validator("target_distribution")
    @classmethod
    def _probabilities(
        cls, value: dict[str, dict[str, float]] | None
    ) -> dict[str, dict[str, float]] | None:
        if value is None:
            return value
        for name, dist in value.items():
            if not dist:
                raise ValueError(f"target distribution {name!r} has no categories")
            if any(p < 0 or not math.isfinite(p) for p in dist.values()):
                raise ValueError(f"target distribution {name!r} has a negative or non-finite value")
            if sum(dist.values()) <= 0:
                raise ValueError(f"target distribution {name!r} sums to zero")
        return value

    @model_validator(mode="after")
    def _margins_for_unchanged(self) -> Hypothesis:
        missing = sorted(
            m
            for m, o in self.outcomes.items()
            if o == "unchanged" and m not in (self.margins or {})
        )
        if missing:
            raise PydanticCustomError(
                "margin_missing",
                "an `unchanged` outcome needs its equivalence margin: give hypothesis.margins."
                "{metric} (the largest difference that still counts as no change, in the "
                "metric's units)",
                {"metric": missing[0]},
            )
        return self


Direction = Literal["increase", "decrease"]


class PlanHypothesis(Hypothesis):
    """A plan's hypothesis: the scenario's metric directions, and more specific ones for an axis
    or a single condition. The most specific applies to a comparison: a condition's own, else
    its axis's, else the metric's."""

    axes: dict[str, dict[str, Direction]] = Field(
        default_factory=dict,
        description="Axis id → metric → expected direction when that axis moves off the base.",
    )
    levels: dict[str, dict[str, Direction]] = Field(
        default_factory=dict,
        description=(
            "Condition id (as `simreport conditions` lists it) → metric → expected direction "
            "for that condition against its base."
        ),
    )


class SimulatorConfig(Model):
    """An external simulator run as a command instead of a built-in world."""

    command: list[str] | None = Field(
        None,
        min_length=1,
        exclude_if=lambda value: value is None,
        description=(
            "Program and arguments; simreport appends --config, --seed and --out. Arguments that "
            "name files next to the scenario are resolved there and hashed into the manifest."
        ),
    )
    name: str | None = Field(
        None,
        exclude_if=lambda value: value is None,
        pattern=RESOURCE_NAME,
        description=(
            "A simulator the operator declared (the run service's policy, or `simreport run "
            "--policy`), named instead of a command."
        ),
    )
    timeout_seconds: Number = Field(300.0, gt=0, description="Kill the command after this long.")
    metrics: list[str] = Field(default_factory=list, description="Metric names it reports.")
    distributions: list[str] = Field(
        default_factory=list, description="Distribution names it reports."
    )

    @model_validator(mode="after")
    def _command_or_name(self) -> SimulatorConfig:
        if (self.command is None) == (self.name is None):
            raise PydanticCustomError(
                "simulator_choice", "give exactly one of `command` and `name`"
            )
        return self


def _absent(value: Any) -> bool:
    return value is None


class Scenario(Model):
    """One simulated world, ready for the kernel."""

    name: Name | None = Field(None, description="A short name for reports.")
    description: str | None = Field(None, description="Free text.")
    world: str | None = Field(
        None, description="Built-in world: prisoners_dilemma, echo_chamber, refund_desk."
    )
    simulator: SimulatorConfig | None = Field(
        None, description="External simulator, instead of `world`."
    )
    steps: Int64 = Field(10, ge=1, le=100_000, description="Number of steps (rounds, ticks).")
    seed: Int64 = Field(0, ge=0, description="Root seed of the run.")
    seed_path: list[Int64] = Field(
        default_factory=list, description="Seed lineage: indices appended by the harness."
    )
    replication_id: Int64 | None = Field(
        None, ge=0, description="Replication index, set by audits."
    )
    population: Population = Field(default_factory=Population, description="The agents.")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="Provider and model.")
    prompt: PromptConfig = Field(default_factory=PromptConfig, description="Prompt representation.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="Activation policy.")
    executors: list[ExecutorConfig] = Field(
        default_factory=lambda: [ExecutorConfig()],
        min_length=1,
        description="What drives each agent.",
    )
    params: dict[str, JsonValue] = Field(
        default_factory=dict, description="World parameters (validated by the world)."
    )
    hypothesis: Hypothesis | None = Field(None, description="Expected directions and targets.")
    # Agent-testbed groups (SPEC §8, models in core/testbed_schema.py). Left out of the document
    # when absent, so scenarios of other worlds keep their form and hashes.
    identity: Identity | None = Field(
        None, exclude_if=_absent, description="Testbed: scenario id, version, owner, risk."
    )
    sut: SutConfig | None = Field(
        None, exclude_if=_absent, description="Testbed: the system under test and its boundary."
    )
    user: UserConfig | None = Field(
        None, exclude_if=_absent, description="Testbed: the simulated user."
    )
    environment: EnvironmentConfig | None = Field(
        None, exclude_if=_absent, description="Testbed: data, tool contracts, clock."
    )
    interaction: InteractionConfig | None = Field(
        None, exclude_if=_absent, description="Testbed: bindings, channels, action entry."
    )
    participants: list[Participant] | None = Field(
        None, exclude_if=_absent, description="Testbed: other agents and surrogates."
    )
    events: EventsConfig | None = Field(
        None, exclude_if=_absent, description="Testbed: planned faults (triggers)."
    )
    execution: ExecutionConfig | None = Field(
        None, exclude_if=_absent, description="Testbed: seed, mode and budgets."
    )
    evaluation_ref: EvaluationRef | None = Field(
        None, exclude_if=_absent, description="Testbed: versions of the evaluation spec."
    )
    provenance: Provenance | None = Field(
        None, exclude_if=_absent, description="Testbed: sources and the asset library."
    )

    @model_validator(mode="after")
    def _one_engine(self) -> Scenario:
        if (self.world is None) == (self.simulator is None):
            raise PydanticCustomError(
                "engine_choice", "give exactly one of `world` and `simulator`"
            )
        return self

    @classmethod
    def model_json_schema(
        cls,
        by_alias: bool | None = True,
        ref_template: str = "#/$defs/{model}",
        schema_generator: Any = None,
        mode: JsonSchemaMode = "validation",
        **kwargs: Any,
    ) -> dict[str, Any]:
        """The scenario's JSON Schema with `params` checked against the parameter model of the
        scenario's `world` (one `if`/`then` per registered world), so an editor completes and
        checks parameters as the kernel will."""
        if schema_generator is not None:
            kwargs["schema_generator"] = schema_generator
        worlds = world_params_models()
        if not worlds:
            return super().model_json_schema(by_alias, ref_template, mode=mode, **kwargs)
        # One generator for the scenario and every parameter model keeps $defs names unique.
        models = [(cls, mode), *((params, mode) for params in worlds.values())]
        refs, top = models_json_schema(
            models, by_alias=by_alias, ref_template=ref_template, **kwargs
        )
        defs: dict[str, Any] = top.get("$defs", {})
        schema: dict[str, Any] = defs.pop(_def_name(refs[(cls, mode)], ref_template))
        world = schema["properties"]["world"]
        world["anyOf"] = [{"enum": sorted(worlds), "type": "string"}, {"type": "null"}]
        world["description"] = "Built-in world: " + ", ".join(sorted(worlds)) + "."
        schema["allOf"] = [
            {
                "if": {"properties": {"world": {"const": name}}, "required": ["world"]},
                "then": {"properties": {"params": refs[(params, mode)]}},
            }
            for name, params in sorted(worlds.items())
        ]
        if defs:
            schema["$defs"] = defs
        return schema


def _def_name(ref: Mapping[str, Any], template: str) -> str:
    prefix = template.split("{model}", 1)[0]
    return str(ref["$ref"])[len(prefix) :]


# --------------------------------------------------------------------------- plan


def _label_key(key: Any) -> Any:
    """A `labels` key as text: YAML reads `1:` or `true:` as a number or a boolean; the key
    names the level whose condition-id text it matches (`1`, `true`)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, int, float)):
        return canonical_json(key)
    return key


class PerturbationAxis(Model):
    """One design choice or wording the audit varies."""

    id: str = Field(
        ..., min_length=1, pattern=r"^[^|=@]+$", description="Axis id (no '|', '=' or '@')."
    )
    level: Literal["micro", "meso", "macro"] = Field(
        description=(
            "TRAILS level: micro (one agent), meso (how agents meet), macro (the whole "
            "population). A plan's custom axis may leave it out when its target implies it."
        )
    )
    kind: Literal["design", "representation"] = Field(
        description=(
            "design (changes what is simulated) or representation (the same content written "
            "differently). A plan's custom axis may leave it out when its target implies it."
        )
    )
    dimension: str = Field(
        ...,
        min_length=1,
        description="TRAILS dimension, free text; in a plan, the axis id in words by default.",
    )
    target: str = Field(..., min_length=1, description="Dotted path into the scenario.")
    levels: list[JsonValue] = Field(..., min_length=1, description="One condition per level.")
    code: str | None = Field(
        None, description="TRAILS code (D1–D8, R1–R5) when from the catalogue."
    )
    label: str | None = Field(
        None,
        min_length=1,
        description="Display name of the axis in reports; the id when omitted. Not hashed.",
    )
    labels: dict[str, Annotated[str, Field(min_length=1)]] = Field(
        default_factory=dict,
        description=(
            'Level (as written, or as it reads in condition ids: 5, true, ["a","b"]) → display '
            "text in reports. Not hashed."
        ),
    )

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_by_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {_label_key(k): v for k, v in value.items()}
        return value


class AuditPlan(Model):
    """What to perturb, how often, with which models, and what to compare."""

    id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Plan id; defaults to the plan file's folder name.",
    )
    title: str | None = Field(None, description="Human title for reports.")
    base_scenario: str | None = Field(
        None, description="Base scenario file, relative to the plan file."
    )
    base: dict[str, JsonValue] | None = Field(None, description="Inline base scenario.")
    hypothesis: PlanHypothesis | None = Field(
        None,
        description=(
            "Overrides the scenario's hypothesis as a whole; may add expectations per axis and "
            "per condition."
        ),
    )
    axes: list[PerturbationAxis] = Field(default_factory=list, description="Perturbation axes.")
    design: Literal["one_at_a_time", "full_factorial"] = Field(
        "one_at_a_time", description="How axes combine into conditions."
    )
    replications: Int64 = Field(1, gt=0, description="Runs per condition.")
    models: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="Models; each becomes a variant of every condition.",
        json_schema_extra={"uniqueItems": True},
    )
    metrics: list[str] = Field(
        default_factory=list,
        description="Metrics to compare, each once.",
        json_schema_extra={"uniqueItems": True},
    )
    primary_metrics: list[str] | None = Field(
        None,
        exclude_if=lambda value: value is None,
        min_length=1,
        description=(
            "The metrics the headline's claim is about: family-wise error is controlled over "
            "their tested rows; the other metrics form a secondary family. Unset: every metric "
            "is primary."
        ),
        json_schema_extra={"uniqueItems": True},
    )
    claim_type: Literal["exploratory", "mechanism", "policy"] = Field(
        "exploratory", description="Policy claims need micro, meso and macro axes to be strong."
    )
    purpose: Literal["regression", "exploration"] = Field(
        "exploration",
        description=(
            "regression: every scenario and asset version a run records must be online (the "
            "ledger's review status); exploration (the default): any reviewed or unreviewed "
            "version runs, is recorded as such, and never enters a regression conclusion."
        ),
    )
    concurrency: Int64 = Field(1, gt=0, description="Runs in flight; not part of the hash.")
    include_incomplete: bool = Field(
        False,
        strict=True,
        description=(
            "Let incomplete runs (and failed runs that reported metrics) into the statistics; "
            "violated runs, runs whose planned fault never hit or recovered, and exploration "
            "runs of a regression audit stay out."
        ),
    )

    @field_validator("metrics", "primary_metrics")
    @classmethod
    def _metrics_once(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        repeated = sorted({m for m in value if value.count(m) > 1})
        if repeated:
            raise PydanticCustomError(
                "repeated",
                "metrics must not repeat; repeated: {repeated}",
                {"repeated": ", ".join(repeated)},
            )
        return value

    @model_validator(mode="after")
    def _one_base(self) -> AuditPlan:
        if self.base_scenario is None and self.base is None:
            raise PydanticCustomError(
                "base_missing",
                "a plan needs its base scenario: give exactly one of `baseScenario` and `base` "
                "(a scenario file relative to the plan, or the scenario inline)",
            )
        if self.base_scenario is not None and self.base is not None:
            raise PydanticCustomError(
                "base_choice", "give exactly one of `baseScenario` and `base`"
            )
        ids = [a.id for a in self.axes]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"axis ids must be unique; repeated: {', '.join(dupes)}")
        if len(set(self.models)) != len(self.models):
            raise ValueError("models must not repeat")
        return self


# --------------------------------------------------------------------------- run result


Execution = Literal["completed", "crashed", "cancelled"]
Validity = Literal["valid", "violated", "unchecked"]
Evidence = Literal["complete", "partial", "unchecked"]


class RunStatus(Model):
    """Three independent statuses: did it finish, did it keep its rules, is its evidence whole."""

    execution: Execution = Field(description="completed, crashed or cancelled.")
    validity: Validity = Field(description="valid, violated or unchecked.")
    evidence: Evidence = Field(description="complete, partial or unchecked.")
    quality: str | None = Field(
        None,
        description="Reference to an evaluator's quality judgement; the kernel leaves it null.",
    )


class Integrity(Model):
    """Whether the run produced everything it should, with the counters that say so."""

    complete: bool = Field(description="True when nothing was lost or substituted.")
    counters: dict[str, Int64] = Field(default_factory=dict, description="Counted facts.")


SEGMENT_SIDES: dict[str, Literal["sut", "simulation"]] = {
    "sut": "sut",
    "userWording": "simulation",
    "environment": "simulation",
    "evaluation": "simulation",
    "agents": "simulation",
}
"""The cost segments a run may report, and whose cost each is: the system under test's or the
simulation's (design "成本按段归因"). In worlds without a system under test (the prisoner's
dilemma, the echo chamber) the agents are the simulation: all their cost is `agents`."""


class SegmentCost(Model):
    """What one segment of a run spent. Every number is deterministic: the same run spends the
    same again. Real durations differ from run to run; they are kept with the other real-clock
    readings, in events.jsonl (the `run_finished` event's `wallClockMs`)."""

    side: Literal["sut", "simulation"] = Field(
        description="Whose cost: the system under test's, or the simulation platform's."
    )
    llm_calls: Int64 = Field(
        0, ge=0, description="Model calls made (cache hits, replays excluded)."
    )
    prompt_tokens: Int64 = Field(0, ge=0, description="Prompt tokens of those calls.")
    completion_tokens: Int64 = Field(0, ge=0, description="Completion tokens of those calls.")
    operations: Int64 = Field(
        0,
        ge=0,
        description=(
            "What the segment did, counted: steps of the SUT, worded user messages, tool calls "
            "the environment served, criteria evaluated, decisions of simulated agents."
        ),
    )
    logical_ms: Int64 = Field(
        0, ge=0, description="Logical milliseconds of the testbed's clock spent in the segment."
    )


class Cost(Model):
    """What the run spent: model calls and tokens (totals, and split by segment between the
    system under test and the simulation), logical time, and the bytes of its records."""

    llm_calls: Int64 = Field(
        0,
        ge=0,
        description=(
            "Model calls made, all segments (cache hits and replays excluded; an HTTP or Python "
            "SUT's chat requests count as its calls)."
        ),
    )
    prompt_tokens: Int64 = Field(0, ge=0, description="Prompt tokens, all segments.")
    completion_tokens: Int64 = Field(0, ge=0, description="Completion tokens, all segments.")
    segments: dict[str, SegmentCost] = Field(
        default_factory=dict,
        description=(
            "Segment (sut, userWording, environment, evaluation, agents) → its cost; the "
            "segments' calls and tokens add up to the totals. Empty in results written before "
            "the split existed, and in external simulators' results that leave it out."
        ),
    )
    record_bytes: Int64 | None = Field(
        None,
        ge=0,
        description=(
            "UTF-8 bytes of the records the run stored (events, and a testbed's records), "
            "counted over their content without real-clock readings, so a rerun counts the "
            "same. Null when not counted."
        ),
    )


class FailureInfo(Model):
    """Why a run failed."""

    stage: str = Field(description="Where it failed (loading, running, collecting, …).")
    type: str = Field(description="Error type.")
    message: str = Field(description="What happened.")


def _number(value: Any) -> Any:
    return parse_number(value)


class RunResult(Model):
    """The contract of result.json (SPEC §4)."""

    schema_version: Literal[1] = Field(1, description="Result schema version.")
    condition: str = Field(description="Condition id.")
    replication: Int64 = Field(ge=0, description="Replication index.")
    seed_path: list[Int64] = Field(description="Seed lineage of this run.")
    status: RunStatus = Field(description="Execution, validity, evidence.")
    metrics: dict[str, float] = Field(default_factory=dict, description="Metric values.")
    distributions: dict[str, dict[str, Int64]] = Field(
        default_factory=dict, description="Distribution → category → count."
    )
    integrity: Integrity = Field(description="Completeness and counters.")
    cost: Cost = Field(
        default_factory=Cost, description="Model calls, tokens and records, by segment."
    )
    failure: FailureInfo | None = Field(None, description="Set when the run failed.")
    purpose: Literal["regression", "exploration"] = Field(
        "exploration",
        description=(
            "Why the run was made: regression (every version it records online) or exploration "
            "(never part of a regression conclusion)."
        ),
    )

    @field_validator("metrics", mode="before")
    @classmethod
    def _non_finite(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: _number(v) for k, v in value.items()}
        return value

    @property
    def succeeded(self) -> bool:
        return self.status.execution == "completed" and self.failure is None

    @property
    def lost_calls(self) -> int:
        """Model calls of this run lost to provider errors (after their retries)."""
        return int(self.integrity.counters.get("llmFailures", 0))

    @property
    def final(self) -> bool:
        """Whether the run stands for good: it completed and lost no model call to a provider
        error. Such a loss (a server that answered 500 throughout, say) is retried by the next
        build; a run that merely decided badly (unparseable answers) is final."""
        return self.succeeded and self.lost_calls == 0
