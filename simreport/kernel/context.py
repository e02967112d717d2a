"""The run context: what a world may use while it runs (randomness, agents, activation,
decisions, events, counters). Every decision goes through here, so counting is never optional."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..core.errors import RunError
from ..core.execution_policy import ExecutionPolicy
from ..core.schema import LLMConfig, Scenario
from ..core.versions import RunChecks
from . import prompts
from .events import EventLog
from .interrupt import check as check_interrupt
from .personas import sample_personas
from .policies import Policy
from .providers.base import (
    FATAL_KINDS,
    ChatRequest,
    ChatResponse,
    Provider,
    ProviderError,
    estimate_tokens,
)
from .rules import RULES
from .run_cost import AGENTS, CostMeter
from .world import Agent, Decision, DecisionRequest

# Independent random streams of one run, so that e.g. adding a persona field never shifts the
# activation draws.
STREAM_WORLD, STREAM_PERSONAS, STREAM_POLICY, STREAM_DECISIONS, STREAM_RULES = range(5)
STREAM_TESTBED_USER = 5
"""The agent testbed's exploring user: its branch and wording-order draws."""

ActorKind = Literal["user", "agent", "environment", "harness"]
"""Who an event may name besides an agent's index: the actor kinds of the testbed's records."""

_MASK64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """splitmix64 finaliser: a cheap, well-spread per-decision seed."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (x ^ (x >> 31)) & ((1 << 63) - 1)


class SeedTree:
    """Seeds derived from the scenario's seed and seed path (its lineage)."""

    def __init__(self, seed: int, seed_path: Sequence[int]) -> None:
        self.seed = seed
        self.seed_path = tuple(int(s) for s in seed_path)

    def generator(self, stream: int) -> np.random.Generator:
        seq = np.random.SeedSequence(self.seed, spawn_key=(*self.seed_path, stream))
        return np.random.default_rng(seq)

    def integer(self, stream: int) -> int:
        seq = np.random.SeedSequence(self.seed, spawn_key=(*self.seed_path, stream))
        return int(seq.generate_state(2, dtype=np.uint64)[0]) & ((1 << 63) - 1)


class RunContext:
    """Shared by the engine and the world for one run."""

    def __init__(
        self,
        scenario: Scenario,
        params: Any,
        *,
        provider: Provider | None,
        policy: Policy,
        events: EventLog,
        asset_root: Path | None = None,
        run_dir: Path | None = None,
        checks: RunChecks | None = None,
        resources: ExecutionPolicy | None = None,
        secrets: tuple[str, ...] = (),
    ) -> None:
        self.scenario = scenario
        self.secrets = secrets
        """Credentials of the run's environment that no event, record or failure may hold."""
        self.params = params
        self.provider = provider
        self.policy = policy
        self.events = events
        self.asset_root = asset_root
        self.run_dir = run_dir
        self.resources = resources
        """The execution policy naming the operator's endpoints and simulators (None: none)."""
        self.checks = checks if checks is not None else RunChecks()
        """What the harness asked the run to check while loading (pinned versions, purpose)."""
        """The run directory, for worlds that keep records of their own (written atomically)."""
        self.manifest_extra: dict[str, Any] = {}
        """Facts resolved during the run that belong in manifest.json (e.g. asset versions)."""
        self.seeds = SeedTree(scenario.seed, scenario.seed_path)
        self.rng = self.seeds.generator(STREAM_WORLD)
        self._policy_rng = self.seeds.generator(STREAM_POLICY)
        self._rule_rng = self.seeds.generator(STREAM_RULES)
        self._decision_base = self.seeds.integer(STREAM_DECISIONS)
        self._decision_index = 0
        self.counters: Counter[str] = Counter()
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost = CostMeter()
        """Cost by segment; provider decisions are charged here, the world charges the rest."""
        self.step = 0
        personas = sample_personas(scenario.population, self.seeds.generator(STREAM_PERSONAS))
        self.executor_of = assign_executors(scenario)
        self.agents = [
            Agent(index=i, persona=personas[i], executor=self.executor_of[i])
            for i in range(scenario.population.n)
        ]
        self._routes: dict[int, tuple[LLMConfig, Provider | None]] = {}
        self._actors: dict[int, ActorKind] = {}

    def route(self, agent: int, config: LLMConfig, provider: Provider | None = None) -> None:
        """Decide for `agent` with `config`'s model, temperature and limits, through `provider`
        (None: the run's own): a world whose agents need different models (the agent testbed's
        user wording, `user.llm`). The world owns and closes a provider it passes here."""
        self._routes[agent] = (config, provider)

    def name_actor(self, agent: int, actor: ActorKind) -> None:
        """Record `agent`'s decisions (and their lost answers) as `actor`'s rather than as an
        agent's: a world in which an agent speaks for someone else (the agent testbed's user
        wording is the user's)."""
        self._actors[agent] = actor

    def actor_of(self, agent: int) -> str | int:
        """Who `agent`'s decision events name: the actor its world named, else its index."""
        return self._actors.get(agent, agent)

    # ----------------------------------------------------------------- time and events

    def begin_step(self, step: int) -> None:
        self.step = step
        self.counters["steps"] += 1

    def emit(self, type_: str, actor: str | int | None = None, **payload: Any) -> None:
        self.events.emit(type_, actor, self.step, payload)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    # ----------------------------------------------------------------- activation

    def activate(self, step: int) -> list[int]:
        chosen = self.policy.select(step, self._policy_rng)
        self.counters["activated"] += len(chosen)
        return chosen

    # ----------------------------------------------------------------- decisions

    def decide(self, agent: int, request: DecisionRequest) -> Decision:
        return self.decide_many([(agent, request)])[0]

    def decide_many(self, items: Sequence[tuple[int, DecisionRequest]]) -> list[Decision]:
        """Decide for several agents at once; LLM calls of one batch may overlap in flight."""
        check_interrupt()  # an interrupted run makes no further decision, least of all a call
        results: list[Decision | None] = [None] * len(items)
        llm_slots: list[int] = []
        llm_requests: list[ChatRequest] = []
        llm_providers: list[Provider | None] = []
        for slot, (agent_index, request) in enumerate(items):
            agent = self.agents[agent_index]
            executor = self.scenario.executors[agent.executor]
            self.counters["decisions"] += 1
            if self.cost.segment_of(agent_index) == AGENTS:
                # Simulated agents' decisions are the segment's operations; a world that assigns
                # its agents elsewhere counts those segments' operations itself.
                self.cost.charge(AGENTS, operations=1)
            seed = _mix64(self._decision_base ^ self._decision_index)
            self._decision_index += 1
            if executor.kind == "rule":
                rule = RULES.get(executor.rule or "", path=f"executors.{agent.executor}.rule")
                option = rule(request, executor.options.params, self._rule_rng)
                self.counters["ruleDecisions"] += 1
                results[slot] = Decision(option=option, source="rule")
                continue
            messages = prompts.render(
                request, agent.persona, self.scenario.prompt, executor.options.components
            )
            config, routed = self._routes.get(agent_index, (self.scenario.llm, None))
            prompt_size = sum(estimate_tokens(m.content) for m in messages)
            if prompt_size > config.max_prompt_tokens:
                self.counters["promptTooLong"] += 1
                results[slot] = Decision(None, "llm", failure="prompt_too_long")
                continue
            llm_slots.append(slot)
            llm_providers.append(routed)
            llm_requests.append(
                ChatRequest(
                    messages=messages,
                    model=config.model,
                    temperature=config.temperature,
                    max_tokens=config.max_tokens,
                    seed=request.seed if request.seed is not None else seed,
                    options=request.options,
                )
            )
        if llm_requests:
            if self.provider is None and any(p is None for p in llm_providers):
                raise RunError("an LLM executor needs a provider", kind="NoProvider")
            started = time.monotonic_ns()
            responses = self._complete(llm_requests, llm_providers)
            if not self.cost.timing:  # a world measuring a segment's time already covers this
                share = (time.monotonic_ns() - started) // len(llm_slots)
                for slot in llm_slots:
                    self.cost.charge(self.cost.segment_of(items[slot][0]), wall_ns=share)
            for slot, request_, response in zip(llm_slots, llm_requests, responses, strict=True):
                results[slot] = self._read_response(items[slot], request_, response)
            fatal = [r for r in responses if isinstance(r, ProviderError) and r.kind in FATAL_KINDS]
            if fatal:
                raise RunError(fatal[0].message, stage="running", kind=fatal[0].kind)
        out = [r for r in results if r is not None]
        for (agent_index, request), decision in zip(items, out, strict=True):
            self.emit(
                request.kind,
                self.actor_of(agent_index),
                option=decision.option,
                source=decision.source,
                **({"failure": decision.failure} if decision.failure else {}),
            )
        return out

    def _complete(
        self, requests: Sequence[ChatRequest], providers: Sequence[Provider | None]
    ) -> list[ChatResponse | ProviderError]:
        """Each request through its agent's provider (the run's own unless routed), one batch
        per provider, answers in request order."""
        groups: dict[int, tuple[Provider, list[int]]] = {}
        for index, routed in enumerate(providers):
            provider = routed if routed is not None else self.provider
            assert provider is not None
            groups.setdefault(id(provider), (provider, []))[1].append(index)
        answers: list[ChatResponse | ProviderError | None] = [None] * len(requests)
        for provider, indices in groups.values():
            batch = provider.complete_many([requests[i] for i in indices])
            for index, answer in zip(indices, batch, strict=True):
                answers[index] = answer
        return [a for a in answers if a is not None]

    def _read_response(
        self,
        item: tuple[int, DecisionRequest],
        request: ChatRequest,
        response: ChatResponse | ProviderError,
    ) -> Decision:
        if isinstance(response, ProviderError):
            self.counters["llmFailures"] += 1
            self.emit(
                "llm_failure",
                self.actor_of(item[0]),
                error=response.kind,
                message=response.message,
            )
            return Decision(None, "llm", failure="llm")
        if response.cached:
            self.counters["cacheHits"] += 1
        else:
            self.counters["llmCalls"] += 1
            self.prompt_tokens += response.prompt_tokens
            self.completion_tokens += response.completion_tokens
            self.cost.charge(
                self.cost.segment_of(item[0]),
                llm_calls=1,
                prompt_tokens=response.prompt_tokens,
                completion_tokens=response.completion_tokens,
            )
        option = prompts.parse_answer(response.text, request.options)
        if option is None:
            self.counters["parseFailures"] += 1
            self.emit("parse_failure", self.actor_of(item[0]), raw=response.text[:200])
            return Decision(None, "llm", raw=response.text, failure="parse")
        return Decision(option, "llm", raw=response.text)

    @property
    def lost_decisions(self) -> int:
        c = self.counters
        return c["parseFailures"] + c["llmFailures"] + c["promptTooLong"]


def assign_executors(scenario: Scenario) -> list[int]:
    """Executor index per agent. Explicit indices win; 'all' covers every agent; 'rest' covers
    agents no list names. An agent claimed twice, or by none, is a scenario error."""
    n = scenario.population.n
    owner: list[int | None] = [None] * n
    rest: int | None = None
    everyone: int | None = None
    for e, executor in enumerate(scenario.executors):
        if executor.agents == "rest":
            if rest is not None:
                raise RunError("only one executor may take 'rest'", kind="ScenarioError")
            rest = e
        elif executor.agents == "all":
            if everyone is not None:
                raise RunError("only one executor may take 'all'", kind="ScenarioError")
            everyone = e
        else:
            for i in executor.agents:
                if not 0 <= i < n:
                    raise RunError(
                        f"executors.{e}.agents names agent {i}, but population.n is {n}",
                        kind="ScenarioError",
                    )
                if owner[i] is not None:
                    raise RunError(f"agent {i} is claimed by two executors", kind="ScenarioError")
                owner[i] = e
    if everyone is not None and (rest is not None or any(o is not None for o in owner)):
        raise RunError("an executor with agents: all cannot share agents", kind="ScenarioError")
    fill = everyone if everyone is not None else rest
    result = []
    for i, o in enumerate(owner):
        if o is None:
            if fill is None:
                raise RunError(f"agent {i} has no executor", kind="ScenarioError")
            o = fill
        result.append(o)
    return result


def memory_window(records: Sequence[Mapping[str, Any]], window: int) -> list[Mapping[str, Any]]:
    """The last `window` records (all of them when window is 0 or less than zero means none)."""
    if window <= 0:
        return []
    return list(records[-window:])
