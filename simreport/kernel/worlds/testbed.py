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
    AssetLibrary,
    SimulatorConfigAsset,
)
from ..testbed.domain.gateway import DomainGateway
from ..testbed.domain.joint_model import domain_joint_model
from ..testbed.domain.model import DomainAsset, UserFlowAsset
from ..testbed.domain.observations import domain_metrics, observe
from ..testbed.domain.real_tools import RealTools
from ..testbed.domain.state import DomainState
from ..testbed.domain.user import FlowUser
from ..testbed.lifecycle import TestbedFailure
from ..testbed.lifecycle.run import TestbedRun
from ..testbed.lifecycle.state import USER
from ..testbed.records import Observations
from ..world import WorldOutcome
from . import WORLDS
from .refund_desk import RefundDesk


class TestbedParams(WorldParams):
    """The testbed reads its settings from the testbed groups; `params` stays empty."""


class DomainRun(TestbedRun):
    """One run of a domain through the testbed lifecycle."""

    __test__ = False
    domain: DomainAsset
    domain_state: DomainState

    def _check_joint_model(self) -> None:
        """The domain, the user flow, the participants, the planned faults and the entity
        bindings must fit together before the agent is called (testbed/domain/joint_model.py)."""
        model = domain_joint_model(self.scenario, self.resolved, resources=self.ctx.resources)
        self.domain, self.participants = model.domain, model.participants
        environment = self.scenario.environment
        if environment is not None and environment.real_tools and self.ctx.resources is not None:
            # Without its key a sandbox refuses every call: the run would test the credentials,
            # not the agent. Only the variable's name is said, never a value.
            missing = RealTools(dict(environment.real_tools), self.ctx.resources).missing_keys()
            if missing:
                raise TestbedFailure(
                    "the operator's key for "
                    + ", ".join(f"sandbox {name} ({var})" for name, var in missing.items())
                    + " is not set in this process's environment",
                    stage="loading",
                    kind="sandbox_credentials_missing",
                )

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
                {
                    "sent": gateway.real.sent,
                    "failed": gateway.real.failed,
                    "noState": silent,
                    **({"refused": dict(gateway.real.refused)} if gateway.real.refused else {}),
                },
            )
            for sandbox, count in sorted(gateway.real.refused.items()):
                # The sandbox refused the operator's credentials: what the agent met was not
                # the tool's behaviour, so the run's evidence is not about the agent.
                self.validity_problems.append(
                    f"sandbox {sandbox} refused the run's credentials on {count} call(s) "
                    "(HTTP 401/403)"
                )
        return observe(self.log.records, self.domain, self.scenario.user.facts)

    def _release_environment(self) -> None:
        gateway: Any = getattr(self, "gateway", None)
        if isinstance(gateway, DomainGateway) and gateway.real is not None:
            gateway.real.close()

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
