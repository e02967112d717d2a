"""A domain as data: the asset kinds `domain` (entities, tools, clock, invariants, observations,
metrics) and `user_flow` (how a simulated user of the domain reads the agent and answers).

Entities and tool inputs and answers are described with JSON Schema (checked with `jsonschema`);
every rule is a CEL expression (`expressions.py`). Both are checked when the asset is read, so a
mistake names the asset file and the path inside it before any run.
The reference: docs/howto/new-domain.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import jsonschema
from pydantic import Field, PrivateAttr, field_validator, model_validator

from ....core.document_model import Model
from ....core.testbed_schema import ClockConfig
from ....core.values import Int64, check_regex
from .expressions import Expression, ExpressionError

NAME = r"^[a-z][a-z0-9_]*$"
KEY = r"^[a-z][A-Za-z0-9_.]*$"
FaultPoint = Literal[
    "not_sent", "sent_not_committed", "committed_response_lost", "delay", "abort", "error"
]
FAULT_POINTS: tuple[FaultPoint, ...] = (
    "not_sent",
    "sent_not_committed",
    "committed_response_lost",
    "delay",
    "abort",
    "error",
)

# What each kind of expression may read.
PRECONDITION_VARS = frozenset({"args", "state", "items", "now"})
EFFECT_VARS = frozenset({"args", "state", "items", "now", "next", "initial", "received"})
# An update's `set` may read the instance it changes (`this`: the instance before the call).
SET_VARS = EFFECT_VARS | {"this"}
# `changed`: entity → the instances the call created or changed, as they stand after it.
ANSWER_VARS = frozenset({"args", "state", "items", "now", "created", "changed"})
# `pending`: entity → the keys of instances received by calls a fault holds, not yet processed.
INVARIANT_VARS = frozenset({"state", "items", "initial", "pending"})
OBSERVATION_VARS = frozenset(
    {"state", "items", "initial", "calls", "user", "conversation", "conversations", "tasks"}
)
METRIC_VARS = frozenset({"obs"})
# Observations every testbed run reports itself (`records.add_conversation_facts`).
REPORTED = ("conversation.", "linkage.", "fault.", "user.goal_reached", "tasks.", "sessions.")


def _schema(value: dict[str, Any]) -> dict[str, Any]:
    try:
        jsonschema.Draft202012Validator.check_schema(value)
    except jsonschema.SchemaError as exc:
        raise ValueError(f"not a JSON Schema: {exc.message}") from None
    return value


class EntityType(Model):
    """One kind of entity: its schema, the field that identifies it, and its initial facts."""

    description: str = Field("", description="What the entity is.")
    key: str = Field("id", min_length=1, description="The field whose value identifies one.")
    schema_: dict[str, Any] = Field(
        alias="schema", description="JSON Schema (2020-12) every instance satisfies."
    )
    initial: list[dict[str, Any]] = Field(
        default_factory=list, description="The instances present when a run starts."
    )

    @field_validator("schema_")
    @classmethod
    def _check_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _schema(value)

    @model_validator(mode="after")
    def _initial_valid(self) -> EntityType:
        declared = self.fields()
        if declared and self.key not in declared:
            raise ValueError(
                f"key: {self.key!r} is not a field of the schema; expected one of "
                + ", ".join(sorted(declared))
            )
        validator = jsonschema.Draft202012Validator(self.schema_)
        seen: set[str] = set()
        for i, item in enumerate(self.initial):
            error = jsonschema.exceptions.best_match(validator.iter_errors(item))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path)
                raise ValueError(f"initial.{i}{'.' + where if where else ''}: {error.message}")
            if self.key not in item:
                raise ValueError(f"initial.{i} has no {self.key!r}, the entity's key")
            ident = str(item[self.key])
            if ident in seen:
                raise ValueError(f"initial.{i}: {self.key} {ident!r} appears twice")
            seen.add(ident)
        return self

    def fields(self) -> set[str]:
        """The fields the schema declares (its top-level properties)."""
        return set((self.schema_.get("properties") or {}).keys())


class Precondition(Model):
    """A condition a call must meet; when it does not, the tool answers with `error`."""

    require: str = Field(min_length=1, description="CEL over args, state, now; true to proceed.")
    error: str = Field(pattern=NAME, description="The error code the agent receives otherwise.")
    message: str = Field("", description="The error's message to the agent.")
    explain: str | None = Field(
        None,
        description=(
            "CEL over args, state, now giving the message (text) in place of `message`, "
            "for a message that names what the call asked for."
        ),
    )


class Effect(Model):
    """One change a successful call makes: create an entity, or set fields of one or several.
    Every effect of a phase is computed from the state before that phase, then all are applied."""

    create: str | None = Field(None, pattern=NAME, description="Entity kind to create.")
    update: str | None = Field(None, pattern=NAME, description="Entity kind to update.")
    when: str | None = Field(
        None, description="CEL; the effect applies only when it is true (default: always)."
    )
    value: str | None = Field(
        None, description="create: CEL giving the new instance (a map) over args, state, now, next."
    )
    id: str | None = Field(
        None,
        description=(
            "update: CEL giving the key of the instance, or a list of keys (each is updated; "
            "`set` reads the one at hand as `this`)."
        ),
    )
    set: dict[str, str] = Field(
        default_factory=dict, description="update: field → CEL giving its new value."
    )

    @model_validator(mode="after")
    def _one_kind(self) -> Effect:
        if (self.create is None) == (self.update is None):
            raise ValueError("an effect either creates or updates: give one of create, update")
        if self.create is not None and (self.value is None or self.id or self.set):
            raise ValueError("a create effect gives `value` (and no id or set)")
        if self.update is not None and (self.id is None or not self.set or self.value):
            raise ValueError("an update effect gives `id` and `set` (and no value)")
        return self

    @property
    def entity(self) -> str:
        return self.create or self.update or ""


class DomainTool(Model):
    """A tool the agent may call: its input schema, preconditions, effects and answer."""

    name: str = Field(pattern=NAME, description="Tool name, as the agent calls it.")
    description: str = Field("", description="What the tool does (shown to the agent).")
    input: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (an object).",
    )
    preconditions: list[Precondition] = Field(
        default_factory=list, description="Checked in order; the first that fails answers."
    )
    receive: list[Effect] = Field(
        default_factory=list,
        description=(
            "What the service records when it receives the call, before processing it. A call "
            "a fault holds (sent_not_committed) is received at once and processed when the "
            "fault recovers; `effects` then read what was received as `received`."
        ),
    )
    effects: list[Effect] = Field(
        default_factory=list, description="What a success changes (when the call is processed)."
    )
    linkage: str | None = Field(
        None,
        pattern=KEY,
        description=(
            "The business event (e.g. refund.withdraw) whose effect this tool's changes are: "
            "the first change records the environment point of the oldest open linkage."
        ),
    )
    answer: str = Field(
        "{}", description="CEL over args, state (after), now, created: the answer's body (a map)."
    )
    output: dict[str, Any] | None = Field(
        None, description="JSON Schema the answer must satisfy (`ok` is added to it)."
    )
    faults: list[FaultPoint] = Field(
        default_factory=lambda: list(FAULT_POINTS),
        description=(
            "The fault points the tool exposes: the three timeout positions (not_sent, "
            "sent_not_committed, response_lost), delay, abort and error."
        ),
    )
    latency_ms: Int64 = Field(500, ge=0, description="Logical milliseconds a normal call costs.")

    @field_validator("output")
    @classmethod
    def _check_output(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _schema(value)

    @field_validator("input")
    @classmethod
    def _object(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError("a tool's input schema describes an object (type: object)")
        return _schema(value)

    @property
    def writes(self) -> bool:
        return bool(self.effects or self.receive)


class Invariant(Model):
    """What must hold of the facts at rest; a recovery is verified against every invariant."""

    name: str = Field(pattern=NAME, description="Invariant name.")
    each: str | None = Field(
        None,
        pattern=NAME,
        description=(
            "An entity kind: `holds` is checked for each of its instances (read as `this`), and "
            "a failure names the instances it does not hold for."
        ),
    )
    holds: str = Field(
        min_length=1,
        description="CEL over state, items, initial, pending (this); true when it holds.",
    )


class ObservationSpec(Model):
    """A fact a run reports, read from its records when it ends; criteria and metrics read it."""

    key: str = Field(pattern=KEY, description="Observation key (e.g. booking.seat).")
    value: str = Field(
        min_length=1,
        description="CEL over state (final), initial, calls, user (facts), conversation.",
    )
    description: str = Field("", description="What it means.")


class MetricSpec(Model):
    """An audit metric computed from the observations; NaN when one it reads is missing."""

    value: str = Field(min_length=1, description='CEL over obs (e.g. obs["booking.count"]).')
    description: str = Field("", description="What it measures.")


class DomainAsset(Model):
    """A domain: entities with their initial facts, tools, the business clock, invariants, the
    observations criteria can read and the metrics an audit compares."""

    description: str = Field("", description="What the domain is.")
    clock: ClockConfig | None = Field(
        None, description="The business calendar (a scenario's environment.clock overrides it)."
    )
    entities: dict[str, EntityType] = Field(min_length=1, description="Entity kind → its type.")
    tools: list[DomainTool] = Field(min_length=1, description="The tools the agent may call.")
    invariants: list[Invariant] = Field(
        default_factory=list, description="What must hold at rest (recoveries are checked)."
    )
    observations: list[ObservationSpec] = Field(
        default_factory=list, description="Facts a run reports."
    )
    metrics: dict[str, MetricSpec] = Field(
        default_factory=dict, description="Metric name → how it is computed."
    )

    _compiled: dict[str, Expression] = PrivateAttr(default_factory=dict)

    @field_validator("entities")
    @classmethod
    def _entity_names(cls, value: dict[str, EntityType]) -> dict[str, EntityType]:
        for name in value:
            if not re.match(NAME, name):
                raise ValueError(f"entity name {name!r} is not lower_snake_case")
        return value

    @model_validator(mode="after")
    def _compile(self) -> DomainAsset:
        names = [t.name for t in self.tools]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"tool {name!r} is defined twice")
        keys = [o.key for o in self.observations]
        for i, key in enumerate(keys):
            if keys.count(key) > 1:
                raise ValueError(f"observation {key!r} is defined twice")
            if key.startswith(REPORTED):
                raise ValueError(
                    f"observations.{i}.key: {key!r} is a fact every testbed run reports "
                    "(conversation.*, linkage.*, fault.*, tasks.*, sessions.*, user.goal_reached)"
                )
        compiled: dict[str, Expression] = {}

        def add(path: str, source: str, allowed: frozenset[str]) -> None:
            try:
                compiled[path] = Expression.compile(source, path, allowed)
            except ExpressionError as exc:
                raise ValueError(f"{path}: {exc.message}") from None

        for i, tool in enumerate(self.tools):
            base = f"tools.{i}"
            for j, pre in enumerate(tool.preconditions):
                add(f"{base}.preconditions.{j}.require", pre.require, PRECONDITION_VARS)
                if pre.explain is not None:
                    add(f"{base}.preconditions.{j}.explain", pre.explain, PRECONDITION_VARS)
            for phase in ("receive", "effects"):
                for j, effect in enumerate(getattr(tool, phase)):
                    self._compile_effect(f"{base}.{phase}.{j}", effect, add)
            add(f"{base}.answer", tool.answer, ANSWER_VARS)
        for i, invariant in enumerate(self.invariants):
            if invariant.each is not None and invariant.each not in self.entities:
                raise ValueError(
                    f"invariants.{i}.each: no entity {invariant.each!r}; expected one of "
                    + ", ".join(sorted(self.entities))
                )
            allowed = INVARIANT_VARS | {"this"} if invariant.each else INVARIANT_VARS
            add(f"invariants.{i}.holds", invariant.holds, allowed)
        for i, observation in enumerate(self.observations):
            add(f"observations.{i}.value", observation.value, OBSERVATION_VARS)
        for name, metric in self.metrics.items():
            add(f"metrics.{name}.value", metric.value, METRIC_VARS)
        self._compiled = compiled
        return self

    def _compile_effect(
        self, path: str, effect: Effect, add: Callable[[str, str, frozenset[str]], None]
    ) -> None:
        if effect.entity not in self.entities:
            raise ValueError(
                f"{path}: no entity {effect.entity!r}; expected one of "
                + ", ".join(sorted(self.entities))
            )
        for name in ("when", "value", "id"):
            source = getattr(effect, name)
            if source is not None:
                add(f"{path}.{name}", source, EFFECT_VARS)
        known = self.entities[effect.entity].fields()
        key = self.entities[effect.entity].key
        if key in effect.set:
            raise ValueError(
                f"{path}.set.{key}: {key} is the key of {effect.entity}; an instance's key does "
                "not change"
            )
        for field_name, source in effect.set.items():
            if known and field_name not in known:
                raise ValueError(
                    f"{path}.set.{field_name}: {effect.entity} has no field {field_name!r}; "
                    f"expected one of {', '.join(sorted(known))}"
                )
            add(f"{path}.set.{field_name}", source, SET_VARS)

    def expression(self, path: str) -> Expression:
        """The compiled expression written at `path` (e.g. `tools.0.answer`)."""
        return self._compiled[path]

    def tool(self, name: str) -> DomainTool | None:
        return next((t for t in self.tools if t.name == name), None)

    def tool_index(self, name: str) -> int:
        return next(i for i, t in enumerate(self.tools) if t.name == name)


# --------------------------------------------------------------------------- the user


DisclosureRule = Literal["upfront", "on-request", "never"]


class UserFact(Model):
    """A private fact of the user: how it looks in text and when it may be said."""

    pattern: str | None = Field(
        None, description="Regular expression a value of this kind matches in text."
    )
    disclose: DisclosureRule = Field(
        "on-request",
        description=(
            "upfront: may be said at any time; on-request: once a rule discloses it; never."
        ),
    )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        return None if value is None else check_regex(value)


class FlowRule(Model):
    """After each agent turn the first rule whose signals all appeared decides what the user
    says next."""

    when: list[str] = Field(
        min_length=1, description="Signals that must all appear in the agent's messages."
    )
    say: str = Field(pattern=NAME, description="The intent the user answers with.")
    discloses: list[str] = Field(
        default_factory=list, description="Facts this answer may now give."
    )
    ends: bool = Field(False, description="The answer closes the conversation.")
    goal_reached: bool = Field(False, description="Closing with this answer means success.")
    times: Int64 = Field(0, ge=0, description="How often the rule may fire (0: any number).")


class GiveUp(Model):
    """When a user stops trying."""

    after_turns: Int64 = Field(ge=1, description="User turns after which they give up.")
    say: str = Field("give_up", pattern=NAME, description="The intent they close with.")


class UserFlowAsset(Model):
    """How a simulated user of a domain reads the agent and answers: their private facts, the
    signals they recognise, and rules as a small state machine."""

    instructions: str = Field(
        min_length=1, description="Who the user is, told to the model that words their messages."
    )
    facts: dict[str, UserFact] = Field(
        default_factory=dict, description="Fact name → how it looks in text and may be said."
    )
    signals: dict[str, str] = Field(
        default_factory=dict,
        description="Signal name → regular expression read in each agent message.",
    )
    opening: str = Field("open", pattern=NAME, description="The intent of the first message.")
    rules: list[FlowRule] = Field(default_factory=list, description="Checked in order.")
    otherwise: str = Field(
        "ask_status", pattern=NAME, description="The intent when no rule matches."
    )
    give_up: GiveUp = Field(
        default_factory=lambda: GiveUp(after_turns=8), description="When the user gives up."
    )

    @field_validator("signals")
    @classmethod
    def _patterns(cls, value: dict[str, str]) -> dict[str, str]:
        for name, pattern in value.items():
            if not re.match(NAME, name):
                raise ValueError(f"signal name {name!r} is not lower_snake_case")
            check_regex(pattern, f"signal {name}: ")
        return value

    @model_validator(mode="after")
    def _rules_known(self) -> UserFlowAsset:
        for i, rule in enumerate(self.rules):
            for signal in rule.when:
                if signal not in self.signals:
                    raise ValueError(
                        f"rules.{i}.when: no signal {signal!r}; expected one of "
                        + (", ".join(sorted(self.signals)) or "(none declared)")
                    )
            for fact in rule.discloses:
                if fact not in self.facts:
                    raise ValueError(
                        f"rules.{i}.discloses: no fact {fact!r}; expected one of "
                        + (", ".join(sorted(self.facts)) or "(none declared)")
                    )
                if self.facts[fact].disclose == "never":
                    raise ValueError(
                        f"rules.{i}.discloses: fact {fact!r} is never disclosed (facts.{fact})"
                    )
            if rule.goal_reached and not rule.ends:
                raise ValueError(f"rules.{i}.goalReached: a goal is reached by an answer that ends")
        return self

    def intents(self) -> set[str]:
        """Every intent the flow may say (each needs wording)."""
        return {self.opening, self.otherwise, self.give_up.say, *(r.say for r in self.rules)}
