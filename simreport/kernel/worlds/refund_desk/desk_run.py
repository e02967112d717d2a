"""One refund-desk run: the generic testbed lifecycle (testbed/lifecycle/) with the refund desk's
own parts — its joint model (joint_model.py), the fact model of orders and refunds behind the
tool contracts, the refund desk's user simulator and its quality control, and the refund
observations and audit metrics."""

from __future__ import annotations

from ...context import STREAM_TESTBED_USER
from ...testbed.assets import EnvironmentDataAsset, SimulatorConfigAsset, UserPolicyAsset
from ...testbed.environment import FactModel, ToolGateway
from ...testbed.lifecycle.run import TestbedRun
from ...testbed.lifecycle.state import USER
from ...testbed.records import Observations, extract_observations, metrics_from
from ...testbed.user import UserSimulator, read_agent_message
from ...testbed.user_quality import (
    QUALITY_FILE,
    add_quality_observations,
    assess_run,
    named_rules,
    write_quality,
)
from .joint_model import refund_joint_model


class RefundDeskRun(TestbedRun):
    """One refund-desk run through the lifecycle."""

    __test__ = False

    # Set while LOADING, by the joint model.
    action_entry: str
    bound_order: str | None

    def _check_joint_model(self) -> None:
        model = refund_joint_model(self.scenario, self.resolved)
        self.tools, self.participants = model.tools, model.participants
        self.action_entry, self.bound_order = model.action_entry, model.bound_order

    def _make_environment(self) -> None:
        """The fact model and the gateway to it."""
        env = self.resolved["environment.data"].typed(EnvironmentDataAsset)
        self.facts = FactModel(env)
        self.gateway = ToolGateway(
            self.tools, self.facts, self.log, self.clocks, participants=self.participants
        )

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

    def _signals(self, text: str) -> list[str]:
        """What a reader takes from an agent message (recorded with it)."""
        return list(read_agent_message(text, self.user.wording.order_number_pattern).signals)

    def _observe(self) -> Observations:
        """The run's observations, from its records."""
        return extract_observations(
            self.log.records,
            order_id=self.bound_order,
            action_entry=self.action_entry,
            participants={p.id: p.name for p in self.participants.values()},
        )

    def _assess_user(self, obs: Observations) -> None:
        """The user simulator's quality control on this run's records (testbed/user_quality.py):
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
        """The audit metrics, from the observations."""
        return metrics_from(obs)
