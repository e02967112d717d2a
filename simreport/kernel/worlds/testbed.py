"""The testbed world: any agent in any domain, the domain written as data (SPEC §8).

The scenario names a `domain` asset (entities, tools, clock, invariants, observations, metrics)
and a `user_flow` asset (how the simulated user reads the agent and answers); the run goes
through the same lifecycle, gateway, faults and result layers as every testbed run. The agent
under test is reached over HTTP or as a Python entry point. The reference: docs/howto/new-domain.md.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from ...core.errors import SimreportError
from ...core.schema import Scenario, WorldParams
from ..context import STREAM_TESTBED_USER
from ..testbed.assets import (
    AgentAsset,
    AssetLibrary,
    SimulatorConfigAsset,
)
from ..testbed.domain.gateway import DomainGateway
from ..testbed.domain.model import DomainAsset, UserFlowAsset
from ..testbed.domain.observations import domain_metrics, observe
from ..testbed.domain.real_tools import RealTools, binding_problems
from ..testbed.domain.state import DomainState
from ..testbed.domain.user import FlowUser
from ..testbed.lifecycle import TestbedFailure
from ..testbed.participants import SurrogateParticipant
from ..testbed.records import Observations
from ..world import WorldOutcome
from . import WORLDS
from .refund_desk import RefundDesk, TestbedRun
from .refund_desk.state import USER

FAULT_POINT = {"delay": "delay", "abort": "abort"}


class TestbedParams(WorldParams):
    """The testbed reads its settings from the testbed groups; `params` stays empty."""


class DomainRun(TestbedRun):
    """One run of a domain through the testbed lifecycle."""

    __test__ = False
    domain: DomainAsset
    domain_state: DomainState

    def _check_entry(self, agent: AgentAsset) -> None:
        if agent.adapter in ("reference", "scripted"):
            raise TestbedFailure(
                f"the {agent.adapter} agent knows the refund desk only; a domain's agent under "
                "test is reached over http or as a python entry point",
                stage="loading",
                kind="manifest_unresolved",
            )
        super()._check_entry(agent)

    def _check_joint_model(self) -> None:
        """The domain, the user flow, the participants, the planned faults and the entity
        bindings must fit together before the agent is called."""
        s = self.scenario
        assert s.user is not None
        self.domain = self.resolved["environment.domain"].typed(DomainAsset)
        self.tools = {}
        self.action_entry = ""
        self.bound_order = None
        tools = {t.name: t for t in self.domain.tools}
        self.participants = {}
        for i, participant in enumerate(s.participants or []):
            surrogate = SurrogateParticipant.of(participant)
            if surrogate.name in tools:
                self._refuse(
                    f"participants.{i} ({participant.id}) is reached through {surrogate.name!r}, "
                    "a tool of the domain; give it a tool of its own (participants.{i}.tool)",
                    "manifest_unresolved",
                )
            self.participants[surrogate.name] = surrogate
        for i, trigger in enumerate(s.events.triggers if s.events is not None else []):
            tool = tools.get(trigger.target)
            if tool is None:
                if trigger.target in self.participants:
                    continue
                self._refuse(
                    f"events.triggers.{i} targets {trigger.target!r}, which is neither a tool of "
                    "the domain nor a participant",
                    "fault_plan_incomplete",
                )
                continue
            point = FAULT_POINT.get(trigger.effect) or (
                trigger.position if trigger.effect == "timeout" else "error"
            )
            if point not in tool.faults:
                self._refuse(
                    f"events.triggers.{i}: tool {tool.name} does not expose the fault point "
                    f"{point!r}; it exposes {', '.join(tool.faults) or 'none'}",
                    "fault_plan_incomplete",
                )
        self._check_real_tools()
        flow = self.resolved["user.policy"].typed(UserFlowAsset)
        wording = self.resolved["user.simulator"].typed(SimulatorConfigAsset)
        missing = sorted(i for i in flow.intents() if not wording.intents.get(i))
        if missing:
            self._refuse(
                f"user.simulator has no wording for intents {', '.join(missing)}",
                "manifest_unresolved",
            )
        unknown = sorted(set(s.user.facts) - set(flow.facts))
        if unknown:
            self._refuse(
                f"user.facts: {', '.join(unknown)} is not a fact of the user flow; expected "
                + (", ".join(sorted(flow.facts)) or "none"),
                "entity_binding_mismatch",
            )
        self._check_bindings()

    def _check_real_tools(self) -> None:
        """Each tool of `environment.realTools` is the domain's and bound to a sandbox the
        execution policy declares; isolated_real leaves no tool to the fact model."""
        environment = self.scenario.environment
        if environment is None or environment.backend_mode == "surrogate":
            return
        problems = binding_problems(
            environment.real_tools,
            environment.backend_mode,
            (t.name for t in self.domain.tools),
            self.ctx.resources,
        )
        if problems:
            self._refuse(
                "; ".join(f"{path}: {message}" for path, message in problems),
                "sandbox_undeclared",
            )

    def _check_bindings(self) -> None:
        """Each `interaction.entityBinding` (user.<fact> → env.<entity>.<field>) names a fact of
        the user, an entity and a field the domain's schema declares, and the user's value is
        the field's value of one of the entity's initial instances."""
        s = self.scenario
        assert s.user is not None
        bindings = s.interaction.entity_binding if s.interaction is not None else {}
        for key, target in bindings.items():
            fact = key.removeprefix("user.").removeprefix("facts.")
            if fact not in s.user.facts:
                self._refuse(
                    f"interaction.entityBinding: {key!r} names no fact of the user (expected "
                    f"user.<fact>, one of {', '.join(sorted(s.user.facts)) or 'none'})",
                    "entity_binding_mismatch",
                )
            parts = target.split(".")
            entity = self.domain.entities.get(parts[1]) if len(parts) == 3 else None
            if parts[0] != "env" or entity is None:
                self._refuse(
                    f"interaction.entityBinding.{key}: cannot read {target!r}; expected "
                    "env.<entity>.<field> with an entity of the domain ("
                    + ", ".join(sorted(self.domain.entities))
                    + ")",
                    "entity_binding_mismatch",
                )
                continue
            if parts[2] not in entity.fields():
                self._refuse(
                    f"interaction.entityBinding.{key}: {parts[1]} has no field {parts[2]!r} in "
                    f"its schema; expected one of {', '.join(sorted(entity.fields()))}",
                    "entity_binding_mismatch",
                )
            values = {str(item.get(parts[2])) for item in entity.initial}
            if str(s.user.facts[fact]) not in values:
                self._refuse(
                    f"interaction.entityBinding.{key}: the user's {fact} "
                    f"{s.user.facts[fact]!r} is no {parts[1]}.{parts[2]} of the domain's facts",
                    "entity_binding_mismatch",
                )

    def _refuse(self, message: str, kind: str) -> None:
        raise TestbedFailure(message, stage="loading", kind=kind)

    def _make_environment(self) -> None:
        self.domain_state = DomainState(self.domain)
        self.facts = self.domain_state
        environment = self.scenario.environment
        real = None
        if environment is not None and environment.real_tools:
            assert self.ctx.resources is not None  # LOADING refused a run without its sandboxes
            real = RealTools(dict(environment.real_tools), self.ctx.resources)
        self.gateway = DomainGateway(
            self.domain_state, self.log, self.clocks, participants=self.participants, real=real
        )

    def _make_user(self, goal: str | None = None) -> None:
        s = self.scenario
        assert s.user is not None
        self.user = FlowUser(
            flow=self.resolved["user.policy"].typed(UserFlowAsset),
            wording=self.resolved["user.simulator"].typed(SimulatorConfigAsset),
            facts=dict(s.user.facts),
            goal=s.user.goal if goal is None else goal,
            log=self.log,
            decide=lambda request: self._decide("user", USER, request),
            seed=s.seed,
            mode="exploration" if self.user_mode == "exploration" else "regression",
            rng=self.ctx.seeds.generator(STREAM_TESTBED_USER),
        )

    def _signals(self, text: str) -> list[str]:
        user: Any = self.user
        return [f"agent.{name}" for name in user.signals_in(text)]

    def _observe(self) -> Observations:
        assert self.scenario.user is not None
        gateway: Any = self.gateway
        if isinstance(gateway, DomainGateway) and gateway.real is not None:
            # Observations read what the sandboxes hold, where they report it (GET /state).
            silent = gateway.adopt_real_state()
            self.log.add(
                "environment.real_state",
                "environment",
                "control",
                {"sent": gateway.real.sent, "failed": gateway.real.failed, "noState": silent},
            )
            gateway.real.close()
        return observe(self.log.records, self.domain, self.scenario.user.facts)

    def _assess_user(self, obs: Observations) -> None:
        """The refund desk's user quality control reads its own intents; a flow user's checks
        run before each message instead (blocked wordings are `user.check` records)."""

    def _metrics(self, obs: Observations) -> dict[str, float]:
        return domain_metrics(self.domain, obs)


@WORLDS.register("testbed")
class Testbed(RefundDesk):
    """An agent under test in a domain written as data; one run is one conversation."""

    name = "testbed"
    Params = TestbedParams
    # Declared by each scenario's domain asset (`outputs`), not by the world.
    metrics = MappingProxyType({})
    code_packages = ("simreport.kernel.testbed", "simreport.kernel.worlds.refund_desk")

    @classmethod
    def check(cls, scenario: Scenario, params: Any) -> list[tuple[str, str]]:
        problems = [
            (path, message.replace("refund_desk", "testbed"))
            for path, message in super().check(scenario, params)
            if path != "environment"
        ]
        if scenario.environment is not None and scenario.environment.domain is None:
            problems.append(("environment.domain", "the testbed world needs a domain asset"))
        return problems

    @classmethod
    def outputs(cls, scenario: Scenario, root: Path | None) -> tuple[list[str], list[str]]:
        domain = _domain_of(scenario, root)
        return sorted(domain.metrics) if domain is not None else [], list(cls.distributions)

    def run(self) -> WorldOutcome:
        return DomainRun(self.ctx).execute()


def _domain_of(scenario: Scenario, root: Path | None) -> DomainAsset | None:
    """The scenario's domain asset, read from its library (None when it cannot be read: the
    run's loading then says why)."""
    if root is None or scenario.environment is None or scenario.environment.domain is None:
        return None
    library = root / (scenario.provenance.asset_library if scenario.provenance else "assets")
    try:
        asset = AssetLibrary(library).resolve(
            scenario.environment.domain, "domain", "environment.domain"
        )
    except SimreportError:
        return None
    return asset.typed(DomainAsset)
