"""One refund-desk run: the generic testbed lifecycle (testbed/lifecycle/) over the refund
domain (domain.yaml, behind the domain gateway like every domain), with the refund desk's own
parts: its joint model (joint_model.py), its user simulator and their quality control, its
reference agent, and the observations of the agent's conduct (observations.py)."""

from __future__ import annotations

from ...context import STREAM_TESTBED_USER
from ...testbed.agents import AgentAdapter
from ...testbed.assets import (
    EnvironmentDataAsset,
    PromptAsset,
    SimulatorConfigAsset,
    ToolSpec,
    UserPolicyAsset,
)
from ...testbed.domain.gateway import DomainGateway
from ...testbed.domain.model import DomainAsset
from ...testbed.domain.observations import domain_metrics
from ...testbed.domain.state import DomainState
from ...testbed.lifecycle.run import TestbedRun
from ...testbed.lifecycle.state import AGENT, USER
from ...testbed.records import Observations
from .domain import refund_domain
from .joint_model import refund_joint_model
from .observations import refund_observations
from .reference_agent import ReferenceAgent
from .user import UserSimulator, read_agent_message
from .user_quality import (
    QUALITY_FILE,
    add_quality_observations,
    assess_run,
    named_rules,
    write_quality,
)


class RefundDeskRun(TestbedRun):
    """One refund-desk run through the lifecycle."""

    __test__ = False

    # Set while LOADING, by the joint model.
    tools: dict[str, ToolSpec]
    """The contracts' tools by name (what the reference agent may call)."""
    action_entry: str
    bound_order: str | None
    domain: DomainAsset

    def _check_joint_model(self) -> None:
        model = refund_joint_model(self.scenario, self.resolved)
        self.tools, self.participants = model.tools, model.participants
        self.action_entry, self.bound_order = model.action_entry, model.bound_order
        env = self.resolved["environment.data"].typed(EnvironmentDataAsset)
        self.domain = refund_domain(env, self.tools.values())

    def _make_environment(self) -> None:
        """The refund domain's state and the gateway to it."""
        state = DomainState(self.domain)
        self.facts = state
        self.gateway = DomainGateway(state, self.log, self.clocks, participants=self.participants)

    def _make_user(self, goal: str | None = None) -> None:
        """The user simulator."""
        s = self.scenario
        assert s.user is not None
        self.user = UserSimulator(
            config=s.user if goal is None else s.user.model_copy(update={"goal": goal}),
            policy=self.resolved["user.policy"].typed(UserPolicyAsset),
            wording=self.resolved["user.simulator"].typed(SimulatorConfigAsset),
            log=self.log,
            clocks=self.clocks,
            decide=lambda request: self._decide("user", USER, request),
            mode="exploration" if self.user_mode == "exploration" else "regression",
            rng=self.ctx.seeds.generator(STREAM_TESTBED_USER),
            seed=s.seed,
        )

    def _make_reference_agent(self, script: list[str]) -> AgentAdapter:
        """The refund desk's built-in agent under test (reference_agent.py): each step a provider
        decision of the agent, its tool calls taken from `script` while it lasts."""
        return ReferenceAgent(
            self.resolved["sut.prompt"].typed(PromptAsset),
            list(self.tools.values()),
            lambda request: self._decide("agent", AGENT, request),
            script=script,
        )

    def _signals(self, text: str) -> list[str]:
        """What a reader takes from an agent message (recorded with it)."""
        return list(read_agent_message(text, self.user.wording.order_number_pattern).signals)

    def _observe(self) -> Observations:
        """The run's observations, from its records."""
        return refund_observations(
            self.log.records,
            self.domain,
            order_id=self.bound_order,
            action_entry=self.action_entry,
            participants={p.id: p.name for p in self.participants.values()},
        )

    def _assess_user(self, obs: Observations) -> None:
        """The user simulator's quality control on this run's records (user_quality.py):
        user-quality.json, `user.qc.*` observations, a counter per failed check, and the
        thresholds' consequences for the run's validity."""
        s = self.scenario
        user: UserSimulator | None = getattr(self, "user", None)
        if user is None or s.user is None:
            return
        try:
            doc = assess_run(
                self.log.records,
                s.user,
                rules=named_rules(user.policy.reaction_rules, s.user.behavior.reaction_rules),
                give_up_ms=user.give_up_ms,
                order_pattern=user.wording.order_number_pattern,
                mode=user.mode,
            )
        except Exception as exc:  # failure is data: quality control failed, its facts missing
            obs.miss("user.qc.*", f"user quality control failed: {type(exc).__name__}: {exc}")
            self.ctx.count("userQualityFailures")
            return
        write_quality(self.run_dir, doc)
        self.written_layers += (QUALITY_FILE,)
        add_quality_observations(obs, doc, self.log.records)
        for check in doc["failed"]:
            self.ctx.count(f"userQualityFailed:{check}")
        disposition = doc["disposition"]
        self.validity_problems += [f"user simulator QC: {p}" for p in disposition["violating"]]
        self.qc_unchecked += [f"user simulator QC: {p}" for p in disposition["unchecked"]]

    def _metrics(self, obs: Observations) -> dict[str, float]:
        """The audit metrics, from the observations (domain.yaml)."""
        return domain_metrics(self.domain, obs)
