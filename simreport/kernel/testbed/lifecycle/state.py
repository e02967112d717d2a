"""What one testbed run holds from stage to stage: the scenario as its run folder shows it,
the clocks, the record log and the lifecycle, and what LOADING and INITIALIZING add to them (the
resolved assets, the tools, the fact model, the faults, the user and the agent)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ....core.canonical import content_hash, sha256_text
from ....core.redaction import redact_document
from ...run_cost import SUT, USER_WORDING
from ..clock import Clocks
from ..records import RecordLog
from ..replay_records import ReplaySource, active_replay
from ..tracing import trace_run
from . import Lifecycle

if TYPE_CHECKING:
    from ...context import RunContext
    from ...providers import Provider
    from ..agents import AgentAdapter, Session
    from ..assets import AgentAsset, ResolvedAsset
    from ..environment import FaultController
    from ..environment.gateway import Gateway
    from ..participants import SurrogateParticipant
    from ..wording import WordingUser


class WorldFacts(Protocol):
    """The facts a run's tools act on, as the lifecycle reads them."""

    def snapshot(self) -> dict[str, Any]: ...

    def digest(self) -> str: ...


AGENT, USER = 0, 1
"""The run's two decision makers: the reference agent and the user's wording."""


class RunState:
    """One run's state, which the stages (loading, initializing, running, collecting) act on."""

    # Set while LOADING.
    user_mode: str
    user_mode_from: str
    resolved: dict[str, ResolvedAsset]
    agent_asset: AgentAsset
    entry_function: Callable[..., Any] | None
    participants: dict[str, SurrogateParticipant]
    # Set while INITIALIZING; absent when the run failed before.
    facts: WorldFacts
    gateway: Gateway[Any]
    faults: FaultController
    user: WordingUser
    agent: AgentAdapter
    session: Session

    def __init__(self, ctx: RunContext) -> None:
        scenario = ctx.scenario
        assert scenario.environment is not None and scenario.user is not None
        assert scenario.sut is not None and scenario.evaluation_ref is not None
        self.ctx = ctx
        self.scenario = scenario
        # The scenario as its run folder shows it: ids and hashes derived from it must neither
        # carry a credential of the endpoint's URL nor differ when a replay re-reads the folder.
        self.doc = redact_document(scenario.to_doc())
        self.replay: ReplaySource | None = active_replay()
        self.clocks = Clocks(scenario.environment.clock)
        self.log = RecordLog(self.clocks, self._trace_id(), emit=self._emit)
        self.log.secrets = self.ctx.secrets
        self.life = Lifecycle(self.log)
        # The run's OpenTelemetry spans, made from its records (None when tracing is off).
        self.tracing = trace_run(
            self.log, run_dir=ctx.run_dir, agent_calls=lambda: self.agent_calls
        )
        self.run_dir: Path | None = ctx.run_dir
        self.workspace: Path | None = None
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self.validity_problems: list[str] = []
        self.cleanup_error: str | None = None
        self.qc_unchecked: list[str] = []
        """Quality-control problems that leave the run's validity unchecked (termination)."""
        self.user_provider: Provider | None = None
        self.agent_calls = 0
        # Cost by segment: the agent's provider decisions are the SUT's, the user's wording the
        # simulation's (kernel/run_cost.py).
        ctx.cost.assign({AGENT: SUT, USER: USER_WORDING})

    def _trace_id(self) -> str:
        """The run's W3C trace id: a replay keeps the recorded one; otherwise the one the caller
        gives (the service's run), else one made from the scenario."""
        if self.replay is not None and self.replay.trace_id:
            return self.replay.trace_id
        return self.ctx.checks.trace_id or sha256_text("trace|" + content_hash(self.doc))[:32]

    def _make_user(self, goal: str | None = None) -> None:
        """The user simulator pursuing `goal` (default: the scenario's user's): INITIALIZING's,
        and again for each later task of `user.tasks`. Each world supplies its own."""
        raise NotImplementedError

    def _make_reference_agent(self, script: list[str]) -> AgentAdapter:
        """The world's own built-in agent under test, for the `reference` and `scripted` adapters
        (`script`: the tool calls it makes first, in order: the scripted agent's and the
        scenario's `interaction.toolCallScript`): INITIALIZING's. A world without one keeps this
        default, and LOADING refuses those adapters."""
        raise NotImplementedError

    def _has_reference_agent(self) -> bool:
        """Whether the world supplies its own `_make_reference_agent`."""
        return type(self)._make_reference_agent is not RunState._make_reference_agent

    def _emit(self, type_: str, actor: str, payload: dict[str, Any]) -> None:
        self.ctx.emit(type_, actor, **payload)
