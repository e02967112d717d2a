"""INITIALIZING: the run's workspace and credentials, the world's facts and tool gateway (a
world's own), the planned faults, the user simulator (its wording routed to `user.llm` when
declared) and the agent's adapter (a built-in reference agent is the world's own,
`_make_reference_agent`); every provider decision of the run is made (or replayed) and
recorded here."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ....core.canonical import content_hash, sha256_text
from ....core.execution_policy import resolve_llm
from ....core.files import write_json
from ... import prompts
from ...providers import make_provider
from ...world import Decision, DecisionRequest
from ..agents import (
    AgentAdapter,
    HttpAgent,
    PythonAgent,
    ReplayAgent,
    Session,
)
from ..assets import PromptAsset
from ..environment import InProcessFaultBackend, RecordedFaultBackend
from .state import AGENT, USER, RunState

# The run's counter of each kind of lost provider decision (as RunContext counts them).
LOST_COUNTERS = {"llm": "llmFailures", "parse": "parseFailures", "prompt_too_long": "promptTooLong"}


class Initializing(RunState):
    """The INITIALIZING stage of a run, and the provider decisions of the stages after it."""

    def _initialize(self) -> None:
        s = self.scenario
        assert s.user is not None and s.sut is not None
        if self.run_dir is not None:
            self.workspace = self.run_dir / "workspace"
        else:
            self._temp = tempfile.TemporaryDirectory(prefix="testbed-run-")
            self.workspace = Path(self._temp.name) / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        write_json(
            self.workspace / "credentials.json",
            {"identity": s.sut.identity, "token": sha256_text("token|" + self.log.trace_id)[:24]},
        )
        self._make_environment()
        write_json(self.workspace / "initial-state.json", self.facts.snapshot())
        triggers = list(s.events.triggers) if s.events is not None else []
        backend = (
            RecordedFaultBackend(self.replay.fault_hits)
            if self.replay is not None
            else InProcessFaultBackend()
        )
        self.faults = self.gateway.inject(triggers, backend)
        self.log.add(
            "environment.initialized",
            "environment",
            "state_change",
            {
                "stateSha256": self.facts.digest(),
                "workspace": "workspace",
                "identity": s.sut.identity,
            },
        )
        for participant in self.participants.values():
            self.log.add("participant.joined", "environment", "control", participant.joined())
        # Personas: the agent's from its prompt asset, the user's from the scenario.
        prompt = self.resolved.get("sut.prompt")
        if prompt is not None:
            self.ctx.agents[AGENT].persona = dict(prompt.typed(PromptAsset).persona)
        self.ctx.agents[USER].persona = s.user.persona.to_doc()
        self.ctx.name_actor(USER, "user")  # the user's wording is the user's, not an agent's
        self._route_user_wording()
        self._make_user()
        self.agent = self._make_agent()
        self.log.secrets = (*self.agent.secrets, *self.ctx.secrets)
        prompt_asset = self.resolved.get("sut.prompt")
        system = (
            prompt_asset.typed(PromptAsset).instructions
            if prompt_asset is not None and self.agent_asset.adapter in ("http", "python")
            else None
        )
        self.session = Session(system)

    def _make_environment(self) -> None:
        """The world's facts (`facts`) and the gateway to them (`gateway`). Each world supplies
        its own."""
        raise NotImplementedError

    def _route_user_wording(self) -> None:
        """The user's wording through `user.llm` when declared (its own provider, built here and
        closed at cleanup; a replay builds none), at temperature 0 for a regression user."""
        s = self.scenario
        assert s.user is not None
        config = s.user.llm or s.llm
        if self.user_mode == "regression":
            config = config.model_copy(update={"temperature": 0.0})
        if s.user.llm is not None and self.replay is None:
            self.user_provider = make_provider(
                resolve_llm(s.user.llm, self.ctx.resources, "user.llm"), path="user.llm.provider"
            )
        if s.user.llm is not None or self.user_mode == "regression":
            self.ctx.route(USER, config, self.user_provider)

    def _make_agent(self) -> AgentAdapter:
        s = self.scenario
        assert s.sut is not None
        agent = self.agent_asset
        if agent.adapter in ("reference", "scripted"):
            # The world's own (LOADING refused these adapters in a world without one).
            script = list(agent.script) + (
                list(s.interaction.tool_call_script) if s.interaction is not None else []
            )
            return self._make_reference_agent(script)
        if self.replay is not None:
            return ReplayAgent(self.replay.agent_steps, self.replay.agent_failure)
        definitions = self.gateway.definitions()
        if agent.adapter == "python":
            assert self.entry_function is not None
            return PythonAgent(self.entry_function, agent.model, definitions)
        return HttpAgent(
            s.sut.entry or agent.entry or "",
            agent.model,
            definitions,
            timeout=s.sut.timeout_seconds,
            api_key_env=agent.api_key_env,
            traceparent=self._traceparent,
        )

    def _traceparent(self) -> str:
        return f"00-{self.log.trace_id}-{self.log.span(f'agent:{self.agent_calls}')}-01"

    def _decide(self, role: str, agent: int, request: DecisionRequest) -> Decision:
        """Every provider decision: made (or replayed) and recorded with the prompt's digest."""
        executor = self.scenario.executors[self.ctx.executor_of[agent]]
        messages = prompts.render(
            request,
            self.ctx.agents[agent].persona,
            self.scenario.prompt,
            executor.options.components,
        )
        prompt_sha = content_hash([[m.role, m.content] for m in messages])
        if self.replay is not None:
            decision = self.replay.decide(role, request)
            lost_counter = LOST_COUNTERS.get(decision.failure or "")
            if decision.option is None and lost_counter is not None:
                # Replayed as lost, counted as the recorded run counted it.
                self.ctx.count(lost_counter)
        else:
            decision = self.ctx.decide(agent, request)
        # Cost by segment: the SUT's own decisions apart from the simulated user's wording.
        self.ctx.count("agentDecisions" if role == "agent" else "userWordingDecisions")
        self.log.add(
            f"{role}.decision",
            "agent" if role == "agent" else "user",
            "control",
            {
                "kind": request.kind,
                "options": list(request.options),
                "chosen": decision.option,
                "failure": decision.failure,
                "promptSha256": prompt_sha,
            },
        )
        return decision
