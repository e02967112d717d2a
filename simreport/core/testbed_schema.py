"""The scenario groups of the agent testbed: a simulated world around a system under test (SUT).

Ten groups answer the whole design, from what is tested to how it is judged: `identity`, `sut`,
`user`, `environment`, `interaction`, `participants`, `events`, `execution`, `evaluationRef` and
`provenance`. Asset references (`refund-agent@stable`, `env/ecom-seed@3.0.1`) name a versioned file
in the scenario's asset library; the run resolves every label to an exact version and sha256 and
records only those.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from .document_model import Model
from .llm_config import LLMConfig
from .values import Int64, Name, Number

BoundaryItem = Literal["reasoning", "tool-selection", "parameters", "recovery"]
BOUNDARY_ITEMS: tuple[BoundaryItem, ...] = ("reasoning", "tool-selection", "parameters", "recovery")

DisclosureRule = Literal["upfront", "on-request", "never"]
Channel = Literal["chat-completions", "internal", "ag-ui", "a2a"]
DEFAULT_CHANNELS: tuple[Channel, ...] = ("chat-completions",)
FaultPosition = Literal["not_sent", "sent_not_committed", "committed_response_lost"]
FAULT_POSITIONS: tuple[FaultPosition, ...] = (
    "not_sent",
    "sent_not_committed",
    "committed_response_lost",
)
FaultEffect = Literal["timeout", "error", "delay", "abort"]
FAULT_EFFECTS: tuple[FaultEffect, ...] = ("timeout", "error", "delay", "abort")
UNPOSITIONED_EFFECTS: tuple[FaultEffect, ...] = ("delay", "abort")
"""Effects that strike no point of a request's life: a delay commits and answers late, an abort
cuts the call before anything happens."""
DEFAULT_DELAY_MS = 5_000

ASSET_REF = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._/-]*)@(?P<selector>[A-Za-z0-9][A-Za-z0-9._+-]*)$"
)
"""`<name>@<version or label>`; a name may have folders (`env/ecom-seed`)."""

SEMVER = r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$"


def check_asset_ref(value: str) -> str:
    """An asset reference must name a version or a label: `name@1.2.0` or `name@stable`."""
    match = ASSET_REF.match(value)
    if match is None or ".." in match.group("name").split("/"):
        raise ValueError(
            f"{value!r} is not an asset reference; expected <name>@<version or label>, "
            "e.g. refund-agent@2.4.1 or user-policy@stable"
        )
    return value


def _ref(value: str | None) -> str | None:
    return check_asset_ref(value) if value is not None else None


# --------------------------------------------------------------------------- identity


class Identity(Model):
    """Which scenario this is: its id, version and owner (a changed design is a new version)."""

    id: str = Field(
        ...,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Scenario id, stable across versions.",
    )
    version: str = Field(..., pattern=SEMVER, description="Scenario version (SemVer).")
    labels: list[Name] = Field(default_factory=list, description="Free labels, e.g. regression.")
    owner: Name | None = Field(None, description="Who answers for the scenario.")
    risk_level: Literal["low", "medium", "high"] = Field(
        "medium", description="Risk level; high-risk scenarios need a risk review."
    )
    status: Literal["draft", "reviewing", "reviewed", "online", "offline"] = Field(
        "draft",
        description=(
            "Informative only: the ledger starts every version as a draft and holds its status "
            "from then on; only review moves it (`simreport review`)."
        ),
    )
    risk_signoff: Name | None = Field(
        None,
        description=(
            "Informative only: a high-risk version's risk sign-off is its publisher's, recorded "
            "by the ledger (`simreport review publish --risk-signoff SHA256`)."
        ),
    )


# --------------------------------------------------------------------------- sut


class SutConfig(Model):
    """The system under test: which agent version, reached how, and what belongs to it."""

    agent: str = Field(
        ...,
        description=(
            "Agent asset reference (`refund-agent@2.4.1` or `@stable`). The asset says how the "
            "agent is reached: the built-in reference agent, an HTTP endpoint or a Python entry "
            "point."
        ),
    )
    prompt: str | None = Field(
        None,
        description=(
            "Prompt asset reference: the agent's instructions (and persona). The reference agent "
            "needs one; an HTTP agent gets it as its system message."
        ),
    )
    boundary: list[BoundaryItem] = Field(
        default_factory=lambda: list(BOUNDARY_ITEMS),
        min_length=1,
        description=(
            "What belongs to the SUT and must never be replaced by a surrogate or a script: "
            "reasoning, tool-selection, parameters, recovery."
        ),
    )
    entry: str | None = Field(
        None,
        description=(
            "Overrides the agent asset's entry: the base URL of an OpenAI-compatible endpoint "
            "(HTTP agents) or `module:function` (Python agents)."
        ),
    )
    identity: str = Field(
        "sim-tester", min_length=1, description="The test identity the harness presents."
    )
    timeout_seconds: Number = Field(
        30.0, gt=0, description="How long one call into the agent may take."
    )

    @field_validator("agent", "prompt")
    @classmethod
    def _refs(cls, value: str | None) -> str | None:
        return _ref(value)

    @field_validator("boundary")
    @classmethod
    def _unique(cls, value: list[BoundaryItem]) -> list[BoundaryItem]:
        if len(set(value)) != len(value):
            raise ValueError("boundary items must not repeat")
        return value


# --------------------------------------------------------------------------- user


class Persona(Model):
    """How the simulated user comes across; `patience` also sets when they give up."""

    expertise: str = Field("novice", description="Domain expertise (novice, expert, …).")
    patience: Literal["low", "medium", "high"] = Field(
        "medium", description="How long they wait before giving up (the user policy's table)."
    )
    tone: str = Field("neutral", description="Tone of their messages (neutral, annoyed, …).")


class PrivateFacts(Model):
    """What the user knows; it may differ from the environment's facts (a misremembered amount)."""

    order_number: str | None = Field(None, description="The order number the user has.")
    paid_amount_minor: Int64 | None = Field(
        None, ge=0, description="What the user believes they paid, in minor units (cents, fen)."
    )
    currency: str = Field("CNY", min_length=3, max_length=3, description="ISO 4217 currency.")


class Disclosure(Model):
    """When the user may reveal each private fact: upfront, on-request (when asked) or never."""

    order_number: DisclosureRule = Field("on-request", description="The order number.")
    paid_amount: DisclosureRule = Field("upfront", description="The amount they paid.")


REACTION_SIGNALS = (
    "agent.asks_order_number",
    "agent.confirms_refund",
    "agent.asks_to_wait",
    "agent.confirms_withdrawal",
    "agent.reply",
)
REACTION_VARIABLES = ("wait_ms", "turns", "agent_asks")
ReactionEffect = Literal[
    "disclose_order_number", "threaten_complaint", "give_up", "ask_status", "withdraw_request"
]
_CONDITION = re.compile(r"^\s*(?P<var>[a-z_]+)\s*(?P<op>>=|<=|>|<|==)\s*(?P<num>\d+)\s*$")


def parse_condition(text: str) -> tuple[str, str | None, int | None]:
    """(`signal`, None, None) or (`variable`, operator, number) for a reaction rule's `when`."""
    if text.strip() in REACTION_SIGNALS:
        return text.strip(), None, None
    match = _CONDITION.match(text)
    if match is None or match.group("var") not in REACTION_VARIABLES:
        raise ValueError(
            f"cannot read condition {text!r}; expected a signal ("
            + ", ".join(REACTION_SIGNALS)
            + ") or `<variable> <op> <number>` with a variable of "
            + ", ".join(REACTION_VARIABLES)
        )
    return match.group("var"), match.group("op"), int(match.group("num"))


def condition_holds_for(value: int, op: str, number: int) -> bool:
    """Whether `value <op> number` holds, for a condition `parse_condition` read."""
    return {
        ">": value > number,
        ">=": value >= number,
        "<": value < number,
        "<=": value <= number,
        "==": value == number,
    }[op]


class ReactionRule(Model):
    """When something happens (`when`), the user reacts (`effect`) on its `times`-th occurrence."""

    when: str = Field(
        ...,
        description=(
            "A signal read from the agent's messages (agent.asks_order_number, "
            "agent.confirms_refund, agent.asks_to_wait, agent.reply) or a comparison such as "
            "`wait_ms > 120000` (variables: wait_ms, turns, agent_asks)."
        ),
    )
    times: Int64 = Field(
        1, ge=1, description="Fire on the n-th time the condition holds (once per rule)."
    )
    effect: ReactionEffect = Field(..., description="The intent the user switches to.")

    @field_validator("when")
    @classmethod
    def _readable(cls, value: str) -> str:
        parse_condition(value)
        return value


class UserBehavior(Model):
    """The behaviour policy: reaction rules on top of the user policy asset's defaults."""

    reaction_rules: list[ReactionRule] = Field(
        default_factory=list, description="Checked in order at the start of every user turn."
    )


UserMode = Literal["exploration", "regression"]
USER_MODES: tuple[UserMode, ...] = ("exploration", "regression")


class UserQualityControl(Model):
    """Thresholds of the user simulator's quality control (design §四 "独立质控"), checked on every
    run's records: each says what falls short and what that does to the run."""

    min_persona_consistency: Number = Field(
        1.0,
        ge=0,
        le=1,
        description=(
            "Share of the user's messages that must agree with the persona (no fact or style "
            "contradiction). Below it the run is marked for review with the messages named; its "
            "statuses do not change (the design: mark the message, rerun or review)."
        ),
    )
    min_reaction_compliance: Number = Field(
        1.0,
        ge=0,
        le=1,
        description=(
            "Share of reaction-rule triggers the user must carry out. Below it the run is "
            "`violated`."
        ),
    )
    max_visibility_violations: Int64 = Field(
        0,
        ge=0,
        description=(
            "Disclosures of a fact against the disclosure rules, or of a fact outside the user's "
            "knowledge, a run may have. Above it the run is `violated`."
        ),
    )
    termination: Literal["enforce", "report"] = Field(
        "enforce",
        description=(
            "enforce: a user who stops for a reason the rules do not give (or goes on when they "
            "say stop) leaves the run's validity `unchecked`, out of every conclusion; report: "
            "the check is only reported."
        ),
    )
    min_distinct_openings: Int64 = Field(
        2,
        ge=1,
        description=(
            "Exploration: fewest distinct opening messages a condition's replications must show "
            "(checked when it has at least this many runs); fewer flags the condition. A "
            "regression condition is flagged when its openings differ at all."
        ),
    )
    min_distinct_paths: Int64 = Field(
        2,
        ge=1,
        description=(
            "Exploration: fewest distinct user paths (intent sequences) a condition's "
            "replications must show (checked when it has at least this many runs)."
        ),
    )
    style_contradictions: dict[Literal["tone", "expertise", "patience"], dict[str, list[str]]] = (
        Field(
            default_factory=dict,
            description=(
                "Phrases that contradict a persona, by attribute and value, e.g. "
                "{tone: {annoyed: [no rush]}}; they replace the built-in lists for that value."
            ),
        )
    )


KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class UserSession(Model):
    """One conversation of a task: the user comes (back) to the agent in a new conversation; the
    agent's history starts empty, the environment's facts are kept."""

    key: str = Field(
        ..., pattern=KEY_PATTERN, description="The session's key (the ledger's session_key)."
    )
    max_turns: Int64 | None = Field(
        None,
        ge=1,
        description=(
            "User turns this conversation may take; unset, `execution.budget.maxTurns` (each "
            "conversation has the whole of it; tool calls and wall clock are the run's)."
        ),
    )


class UserTask(Model):
    """One of the user's tasks: a goal pursued over one or more sessions, in order."""

    key: str = Field(..., pattern=KEY_PATTERN, description="The task's key (ledger task_key).")
    goal: str = Field(..., min_length=1, description="What the user wants in this task.")
    sessions: list[UserSession] = Field(
        default_factory=lambda: [UserSession(key="conversation")],
        min_length=1,
        description="The task's conversations, in order; unset, one session `conversation`.",
    )

    @field_validator("sessions")
    @classmethod
    def _unique_sessions(cls, value: list[UserSession]) -> list[UserSession]:
        keys = [s.key for s in value]
        if len(set(keys)) != len(keys):
            raise ValueError("session keys must be unique within a task")
        return value


class UserConfig(Model):
    """The simulated user: persona, goal, private facts, disclosure rules and reaction rules."""

    policy: str = Field(..., description="User policy asset (patience table, default rules).")
    simulator: str = Field(
        ..., description="Simulator config asset: the wording templates of every intent."
    )
    persona: Persona = Field(default_factory=Persona, description="Persona.")
    goal: str = Field(..., min_length=1, description="What the user wants, in their words.")
    private_facts: PrivateFacts = Field(
        default_factory=PrivateFacts, description="What the user knows."
    )
    disclosure: Disclosure = Field(default_factory=Disclosure, description="Disclosure rules.")
    facts: dict[str, str | Int64] = Field(
        default_factory=dict,
        description=(
            "The user's private facts in a domain (world `testbed`): name → value; the user "
            "flow says how each looks in text and when it may be said."
        ),
    )
    behavior: UserBehavior = Field(default_factory=UserBehavior, description="Reaction rules.")
    mode: UserMode | None = Field(
        None,
        description=(
            "exploration: branch choices the persona leaves open and the order of the wordings "
            "offered are drawn from the run's seeds, so replications walk different paths; "
            "regression: the path is pinned (canonical branches, wordings in declared order, the "
            "wording seed fixed by the scenario's seed, temperature 0). Unset, it follows the "
            "run's purpose; a regression run refuses an exploration user."
        ),
    )
    llm: LLMConfig | None = Field(
        None,
        description=(
            "The provider and model that word the user's messages, apart from the scenario's "
            "`llm` (design: generation and judging by different models). Unset: the scenario's."
        ),
    )
    quality_control: UserQualityControl | None = Field(
        None, description="Quality-control thresholds; unset, the defaults."
    )
    tasks: list[UserTask] | None = Field(
        None,
        min_length=1,
        description=(
            "The user's tasks, run in order, each over its sessions; unset, one task `goal` (the "
            "user's `goal`) with one session `conversation`."
        ),
    )

    @field_validator("policy", "simulator")
    @classmethod
    def _refs(cls, value: str) -> str:
        return check_asset_ref(value)

    @field_validator("tasks")
    @classmethod
    def _unique_tasks(cls, value: list[UserTask] | None) -> list[UserTask] | None:
        keys = [t.key for t in value or []]
        if len(set(keys)) != len(keys):
            raise ValueError("task keys must be unique")
        return value

    @property
    def thresholds(self) -> UserQualityControl:
        """The quality-control thresholds in force (the defaults when none are declared)."""
        return self.quality_control or UserQualityControl()

    @model_serializer(mode="wrap")
    def _doc(self, handler: SerializerFunctionWrapHandler) -> Any:
        doc = _without_unset(
            handler(self), "mode", "llm", "qualityControl", "quality_control", "tasks"
        )
        return _without_empty(doc, "facts")


# --------------------------------------------------------------------------- environment


class ClockConfig(Model):
    """The business calendar: where business time starts and whether it moves."""

    policy: Literal["virtual", "frozen"] = Field(
        "virtual",
        description=(
            "virtual: business time follows the simulated timeline from `start`; frozen: it "
            "stays at `start`. Logical time is the harness's scheduler clock either way."
        ),
    )
    start: str = Field(
        "2026-09-01T10:00:00+08:00",
        description="Business start time, ISO 8601 with a UTC offset.",
    )

    @field_validator("start")
    @classmethod
    def _aware(cls, value: str) -> str:
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 date and time") from None
        if parsed.tzinfo is None:
            raise ValueError("the start time needs a UTC offset, e.g. +08:00")
        return value


BackendMode = Literal["surrogate", "hybrid", "isolated_real"]


class EnvironmentConfig(Model):
    """The simulated environment: its initial data, tool contracts, backend and clock."""

    backend_mode: BackendMode = Field(
        "surrogate",
        description=(
            "surrogate: every tool is answered by the fact model; hybrid: the tools of "
            "`realTools` by their sandboxes, the others by the fact model; isolated_real: every "
            "tool by a sandbox (world `testbed`)."
        ),
    )
    real_tools: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Tool → the name of the sandbox answering it, one the operator's execution policy "
            "declares (never a URL): {pay_fare_difference: payments-sandbox}."
        ),
    )
    clock: ClockConfig = Field(default_factory=ClockConfig, description="Business calendar.")
    domain: str | None = Field(
        None,
        description=(
            "Domain asset (world `testbed`): entities, tools, clock, invariants, observations "
            "and metrics, all as data."
        ),
    )
    data: str | None = Field(
        None, description="Environment data asset (refund_desk): orders, refunds, accounts."
    )
    tool_contracts: list[str] = Field(
        default_factory=list,
        description="Tool contract assets (refund_desk): the tools the agent may call.",
    )

    @field_validator("data", "domain")
    @classmethod
    def _data_ref(cls, value: str | None) -> str | None:
        return None if value is None else check_asset_ref(value)

    @field_validator("tool_contracts")
    @classmethod
    def _contract_refs(cls, value: list[str]) -> list[str]:
        return [check_asset_ref(v) for v in value]

    @field_validator("real_tools")
    @classmethod
    def _sandbox_names(cls, value: dict[str, str]) -> dict[str, str]:
        for tool, sandbox in value.items():
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,100}", sandbox):
                raise ValueError(
                    f"{tool}: {sandbox!r} is not a sandbox name; a scenario names a sandbox the "
                    "operator's execution policy declares, never a URL"
                )
        return value

    @model_serializer(mode="wrap")
    def _doc(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Keys added with domains and sandboxes stay out of a document that leaves them unset.
        keys = ("domain", "data", "toolContracts", "tool_contracts", "realTools", "real_tools")
        return _without_empty(handler(self), *keys)

    @model_validator(mode="after")
    def _one_source(self) -> EnvironmentConfig:
        if self.domain is not None and (self.data is not None or self.tool_contracts):
            raise ValueError(
                "a domain brings its own facts and tools: give either `domain`, or `data` with "
                "`toolContracts`"
            )
        if self.backend_mode == "surrogate" and self.real_tools:
            raise ValueError(
                "realTools binds tools to sandboxes, but backendMode is surrogate; expected "
                "backendMode hybrid or isolated_real"
            )
        if self.backend_mode == "hybrid" and not self.real_tools:
            raise ValueError(
                "backendMode hybrid needs realTools (tool → sandbox); expected at least one"
            )
        if self.backend_mode != "surrogate" and self.domain is None:
            raise ValueError(
                f"backendMode {self.backend_mode} binds a domain's tools; expected `domain`"
            )
        return self


# --------------------------------------------------------------------------- interaction


class InteractionConfig(Model):
    """How the parts meet: entity bindings, channels, the one action entry, turn timing."""

    entity_binding: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "User facts bound to environment entities, e.g. {user.orderNumber: env.order.id}: "
            "checked at load so the user's order, the tool parameters and the data are one entity."
        ),
    )
    channels: list[Channel] = Field(
        default_factory=lambda: list(DEFAULT_CHANNELS),
        min_length=1,
        description="Channels the user sees the agent through (recorded; chat is built in).",
    )
    action_entry: str = Field(
        "create_refund", min_length=1, description="The one tool that submits the business action."
    )
    turn_ms: Int64 = Field(
        20_000, ge=0, description="Logical milliseconds a user takes to read and answer."
    )
    tool_call_script: list[str] = Field(
        default_factory=list,
        description=(
            "A fixed tool-call order imposed on the agent (a replayed session). Allowed only when "
            "tool-selection is outside sut.boundary; otherwise the run is refused with "
            "sut_boundary_replaced."
        ),
    )


TOOL_NAME = r"^[a-z][a-z0-9_]*$"


class Participant(Model):
    """Another party the agent under test works with: a surrogate answered by the testbed, reached
    by the agent through a tool of its own (`tool`), so faults can strike it like any tool. A
    `real` participant (another live agent) is part of the design's vocabulary but not
    implemented: it is refused at load rather than left uncontacted."""

    id: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="Participant id.")
    role: str = Field(..., min_length=1, description="What it does (e.g. planner, supervisor).")
    kind: Literal["real", "surrogate"] = Field(
        "surrogate",
        description="surrogate (answered by the testbed) or real (refused: not implemented).",
    )
    replaces: list[BoundaryItem] = Field(
        default_factory=list,
        description=(
            "Parts of the SUT's own work this participant takes over. A surrogate that replaces "
            "anything inside sut.boundary is refused (sut_boundary_replaced)."
        ),
    )
    entry: str | None = Field(
        None, description="Where a real participant is reached (a surrogate has none)."
    )
    tool: str | None = Field(
        None,
        pattern=TOOL_NAME,
        description=(
            "The tool the agent under test calls to reach a surrogate, with one string argument "
            "`message`; defaults to ask_<id> (lower case, other characters as _)."
        ),
    )
    replies: list[str] = Field(
        default_factory=lambda: ["Noted."],
        min_length=1,
        description=(
            "A surrogate's answers, one per call in order; the last one repeats (a script: the "
            "most deterministic kind of surrogate)."
        ),
    )

    @property
    def tool_name(self) -> str:
        """The tool the agent reaches this participant through."""
        if self.tool is not None:
            return self.tool
        return "ask_" + re.sub(r"[^a-z0-9_]", "_", self.id.lower())


# --------------------------------------------------------------------------- events


def _without_unset(doc: Any, *keys: str) -> Any:
    """A fault document without the later-added keys it leaves unset, so a plan that does not use
    them keeps the document, and so the design digest, it had before they existed."""
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if not (k in keys and v is None)}
    return doc


def _without_empty(doc: Any, *keys: str) -> Any:
    """A document without the later-added keys it leaves unset or empty, so that a scenario
    which does not use them keeps its document, and so its digest, as before they existed."""
    if isinstance(doc, dict):
        return {k: v for k, v in doc.items() if not (k in keys and v in (None, {}, []))}
    return doc


class FaultAt(Model):
    """When a fault's window opens: at the n-th call to its target, at a user turn, or once the
    run's logical clock reaches a millisecond."""

    call: Int64 | None = Field(
        None,
        ge=1,
        description=(
            "Strike calls to the target from the n-th on (counted over the run; 1 = the first). "
            "Defaults to 1 when `turn` is not given either."
        ),
    )
    turn: Int64 | None = Field(None, ge=1, description="The user turn at which the window opens.")
    logical_ms: Int64 | None = Field(
        None,
        ge=0,
        description=(
            "The run's logical millisecond from which the window is open (the harness checks it "
            "at every tool call and turn boundary). Not with `turn`: one window has one opening."
        ),
    )

    @model_validator(mode="after")
    def _default(self) -> FaultAt:
        if self.turn is not None and self.logical_ms is not None:
            raise ValueError(
                f"the window opens either at turn {self.turn} or at logicalMs {self.logical_ms}, "
                "not both; give one of turn and logicalMs"
            )
        if self.call is None and self.turn is None:
            self.call = 1
        return self

    @model_serializer(mode="wrap")
    def _doc(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_unset(handler(self), "logicalMs", "logical_ms")


class FaultRecover(Model):
    """When a fault's window closes and the service must be back to normal."""

    after_hits: Int64 | None = Field(
        None,
        ge=1,
        description=(
            "Recover after this many hits (defaults to 1 when neither `turn` nor `afterMs` is "
            "given)."
        ),
    )
    turn: Int64 | None = Field(None, ge=1, description="Recover at the start of this user turn.")
    after_ms: Int64 | None = Field(
        None,
        ge=1,
        description=(
            "Recover this many logical milliseconds after the window opened (checked at every "
            "tool call and turn boundary). Not with `afterHits` or `turn`: one window has one "
            "closing."
        ),
    )

    @model_validator(mode="after")
    def _default(self) -> FaultRecover:
        if self.after_ms is not None:
            other = "afterHits" if self.after_hits is not None else "turn" if self.turn else None
            if other is not None:
                raise ValueError(
                    f"the window closes either by {other} or after afterMs {self.after_ms}, "
                    f"not both; give one of {other} and afterMs"
                )
        elif self.after_hits is None and self.turn is None:
            self.after_hits = 1
        return self

    @model_serializer(mode="wrap")
    def _doc(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_unset(handler(self), "afterMs", "after_ms")


POSITION_ALIASES = {
    "unsent": "not_sent",
    "sent": "sent_not_committed",
    "uncommitted": "sent_not_committed",
    "committed": "committed_response_lost",
    "response_lost": "committed_response_lost",
}
"""Short names the design document uses for the three positions."""


def _shorthand(value: Any, default_key: str) -> Any:
    """`turn-2`, `call-1`, `hits-1` → {turn: 2} / {call: 1} / {afterHits: 1}; an integer n →
    {default_key: n}."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {default_key: value}
    if isinstance(value, str):
        match = re.fullmatch(r"(turn|call|hits?)-(\d+)", value.strip())
        if match is None:
            raise ValueError(f"cannot read {value!r}; expected e.g. turn-2 or call-1")
        key = {"turn": "turn", "call": "call", "hit": "afterHits", "hits": "afterHits"}
        return {key[match.group(1)]: int(match.group(2))}
    return value


class FaultTrigger(Model):
    """A planned fault (a plan, not a fact: the fact is the `fault.hit` record when it lands)."""

    id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Fault id; defaults to fault-<n> (its position in the list, from 1).",
    )
    target: str = Field(..., min_length=1, description="Tool name the fault lands on.")
    effect: FaultEffect = Field(
        "timeout",
        description=(
            "What the agent sees: timeout (no answer within `timeoutMs`), error (an immediate "
            "service error), delay (the right answer, `delayMs` late) or abort (the call is cut "
            "off at once, with no answer and no effect)."
        ),
    )
    position: FaultPosition | None = Field(
        None,
        description=(
            "Where in the request's life a timeout or error strikes: not_sent (nothing reached "
            "the service), sent_not_committed (received, held until recovery) or "
            "committed_response_lost (the business action took effect, the answer was lost; the "
            "default). A delay (it commits and answers) and an abort (nothing happens) have none."
        ),
    )
    at: FaultAt = Field(default_factory=FaultAt, description="When the window opens.")
    recover: FaultRecover = Field(
        default_factory=FaultRecover, description="When the window closes."
    )
    timeout_ms: Int64 = Field(30_000, ge=0, description="Logical milliseconds a timeout costs.")
    delay_ms: Int64 | None = Field(
        None,
        ge=0,
        description=(
            f"Logical milliseconds a delay adds to the tool's latency (delay only; defaults to "
            f"{DEFAULT_DELAY_MS})."
        ),
    )

    @field_validator("position", mode="before")
    @classmethod
    def _position(cls, value: Any) -> Any:
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_").replace(" ", "_")
            return POSITION_ALIASES.get(key, key)
        return value

    @field_validator("position")
    @classmethod
    def _positioned(cls, value: FaultPosition | None, info: ValidationInfo) -> Any:
        effect = info.data.get("effect")
        if value is not None and effect in UNPOSITIONED_EFFECTS:
            raise ValueError(
                f"a {effect} fault has no position ({value} given): a delay commits and answers "
                "late, an abort has no effect; position applies to timeout and error faults"
            )
        return value

    @field_validator("delay_ms")
    @classmethod
    def _delayed(cls, value: int | None, info: ValidationInfo) -> int | None:
        effect = info.data.get("effect")
        if value is not None and effect is not None and effect != "delay":
            raise ValueError(f"delayMs applies to delay faults only, not to a {effect} fault")
        return value

    @model_validator(mode="after")
    def _defaults(self) -> FaultTrigger:
        if self.effect in UNPOSITIONED_EFFECTS:
            if self.effect == "delay" and self.delay_ms is None:
                self.delay_ms = DEFAULT_DELAY_MS
        elif self.position is None:
            self.position = "committed_response_lost"
        return self

    @model_serializer(mode="wrap")
    def _doc(self, handler: SerializerFunctionWrapHandler) -> Any:
        return _without_unset(handler(self), "delayMs", "delay_ms")

    @field_validator("at", mode="before")
    @classmethod
    def _at(cls, value: Any) -> Any:
        return _shorthand(value, "call")

    @field_validator("recover", mode="before")
    @classmethod
    def _recover(cls, value: Any) -> Any:
        return _shorthand(value, "afterHits")


class EventsConfig(Model):
    """Planned events: fault triggers and how they recover."""

    triggers: list[FaultTrigger] = Field(default_factory=list, description="Planned faults.")

    @field_validator("triggers")
    @classmethod
    def _unique(cls, value: list[FaultTrigger]) -> list[FaultTrigger]:
        for n, trigger in enumerate(value, start=1):
            if trigger.id is None:
                trigger.id = f"fault-{n}"
        ids = [t.id for t in value]
        if len(set(ids)) != len(ids):
            raise ValueError("fault ids must be unique")
        return value


# --------------------------------------------------------------------------- execution


_DURATION = r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*"


def _seconds(value: Any) -> Any:
    if isinstance(value, str):
        match = re.fullmatch(_DURATION, value)
        if match is None:
            raise ValueError(f"cannot read duration {value!r}; expected e.g. 90s, 20m or 1h")
        scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
        return float(match.group(1)) * scale
    return value


def _number_or_duration(schema: dict[str, Any]) -> None:
    """What an editor should accept for a duration: seconds, or text such as 20m."""
    schema.pop("type", None)
    schema.pop("exclusiveMinimum", None)
    schema["anyOf"] = [
        {"type": "number", "exclusiveMinimum": 0},
        {"type": "string", "pattern": f"^{_DURATION}$"},
    ]


class Budget(Model):
    """Limits of one run; running out cancels it (records kept, evidence partial)."""

    max_turns: Int64 = Field(12, ge=1, description="User turns.")
    max_tool_calls: Int64 = Field(30, ge=1, description="Tool calls by the agent.")
    wall_clock: Number = Field(
        1200.0,
        gt=0,
        description="Real seconds (or a duration such as 20m).",
        json_schema_extra=lambda schema: _number_or_duration(schema),
    )

    @field_validator("wall_clock", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return _seconds(value)


class ExecutionConfig(Model):
    """How the run is executed: seed, mode, budgets."""

    seed: Int64 | None = Field(
        None, ge=0, description="The scenario's seed; when given it must equal the top-level seed."
    )
    mode: BackendMode = Field(
        "surrogate",
        description=(
            "surrogate (every dependency simulated), hybrid or isolated_real: the run mode, "
            "equal to `environment.backendMode`."
        ),
    )
    budget: Budget = Field(default_factory=Budget, description="Turn, tool-call and time limits.")
    max_actions_per_turn: Int64 = Field(
        6, ge=1, description="Agent steps (tool calls) between two user messages."
    )


# --------------------------------------------------------------------------- evaluation, provenance


class EvaluationRef(Model):
    """Versions of what judges the run; the judging itself is the evaluator's, not the run's."""

    assertions: str = Field(..., description="Evaluation spec asset: criteria and observations.")
    rubric: str | None = Field(None, description="Rubric asset for human or model graders.")

    @field_validator("assertions", "rubric")
    @classmethod
    def _refs(cls, value: str | None) -> str | None:
        return _ref(value)


class Provenance(Model):
    """Where the scenario came from and where its assets live."""

    source: Name | None = Field(None, description="Requirement, trace, incident or manual.")
    reviewed_by: Name | None = Field(None, description="Who reviewed it.")
    incidents: list[str] = Field(default_factory=list, description="Incident references.")
    asset_library: str = Field(
        "assets", min_length=1, description="Asset library folder, relative to the scenario."
    )
