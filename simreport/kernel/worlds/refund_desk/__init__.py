"""The refund desk: an agent testbed world around a system under test (SPEC §8).

A simulated customer wants a refund; the agent under test talks to them and calls tools answered
by the refund domain (domain.yaml) while planned faults strike its calls. The world runs the
testbed lifecycle, writes the result layers and reports metrics — facts, never verdicts
(evaluation is a step of its own). The design: docs/testbed.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from ....core.errors import RunError, SimreportError
from ....core.schema import Scenario, WorldParams
from ...context import assign_executors
from ...providers import PROVIDERS
from ...testbed.assets import AgentAsset, AssetLibrary, resolved_asset_files
from ...testbed.lifecycle.state import USER
from ...testbed.replay_records import active_replay
from ...testbed.settings import unimplemented
from ...world import World, WorldOutcome
from .. import WORLDS
from .desk_run import RefundDeskRun
from .domain import metric_descriptions

__all__ = [
    "METRICS",
    "RefundDesk",
    "RefundDeskParams",
    "RefundDeskRun",
]

# Facts counted from the observations, never verdicts: pass or fail against a criterion is the
# evaluation's (`simreport evaluate`), not the run's. Written with the domain (domain.yaml).
METRICS = MappingProxyType(metric_descriptions())


class RefundDeskParams(WorldParams):
    """The refund desk reads its settings from the testbed groups; `params` stays empty."""


@WORLDS.register("refund_desk")
class RefundDesk(World):
    """An agent under test at a refund desk; one run is one conversation."""

    name = "refund_desk"
    Params: ClassVar[type[WorldParams]] = RefundDeskParams
    metrics: ClassVar[Mapping[str, str]] = METRICS
    distributions = MappingProxyType({"outcome": "Who closed the conversation (one per run)."})
    min_agents = 2
    pinned = ("population", "policy")
    code_packages: ClassVar[tuple[str, ...]] = ("simreport.kernel.testbed",)

    @classmethod
    def check(cls, scenario: Scenario, params: Any) -> list[tuple[str, str]]:
        problems = super().check(scenario, params)
        for key, value in (
            ("sut", scenario.sut),
            ("user", scenario.user),
            ("environment", scenario.environment),
            ("evaluationRef", scenario.evaluation_ref),
        ):
            if value is None:
                problems.append((key, f"refund_desk needs the `{key}` group"))
        environment = scenario.environment
        if environment is not None and (environment.data is None or not environment.tool_contracts):
            problems.append(
                (
                    "environment",
                    "refund_desk reads its facts and tools from `data` and `toolContracts`; "
                    "a `domain` runs in the `testbed` world",
                )
            )
        if scenario.population.n != 2:
            problems.append(
                (
                    "population.n",
                    "refund_desk has two decision makers: the reference agent (0) and the user's "
                    "wording (1)",
                )
            )
        if scenario.population.fields:
            problems.append(
                ("population.fields", "refund_desk personas come from sut.prompt and user.persona")
            )
        try:
            owners = assign_executors(scenario)
        except RunError:
            owners = []  # the engine reports executor problems itself
        if len(owners) > USER and scenario.executors[owners[USER]].kind != "llm":
            problems.append(
                (
                    "executors",
                    "the user's wording (agent 1) needs an llm executor: a provider words it",
                )
            )
        # Declared settings the testbed does not implement: refused here, where the error can
        # name the file and the path, and again while loading.
        problems += unimplemented(scenario)
        user_llm = scenario.user.llm if scenario.user is not None else None
        if user_llm is not None and user_llm.provider not in PROVIDERS:
            problems.append(
                (
                    "user.llm.provider",
                    f"unknown provider {user_llm.provider!r}; expected one of "
                    + ", ".join(PROVIDERS),
                )
            )
        execution = scenario.execution
        if execution is not None and execution.seed is not None and execution.seed != scenario.seed:
            problems.append(
                (
                    "execution.seed",
                    f"execution.seed {execution.seed} differs from seed {scenario.seed}",
                )
            )
        return problems

    @classmethod
    def needs_provider(cls, scenario: Scenario) -> bool:
        # A replay answers every decision from the recorded run and makes no call.
        return active_replay() is None

    @classmethod
    def input_files(cls, scenario: Scenario, root: Path) -> dict[str, Path | None]:
        if scenario.sut is None:
            return {}
        library = root / (scenario.provenance.asset_library if scenario.provenance else "assets")
        files = dict(resolved_asset_files(scenario, library))
        from ...testbed.agents import entry_files

        # An agent under test that is a Python entry: its code is an input of the run too.
        try:
            agent = AssetLibrary(library).resolve(scenario.sut.agent, "agent", "sut.agent")
        except SimreportError:
            return files  # the run fails in LOADING; the key has the agent's slot unresolved
        entry = agent.typed(AgentAsset)
        if entry.adapter == "python" and entry.entry is not None:
            for path in entry_files(entry.entry, root):
                files[f"sut.agent.entry:{path.relative_to(root).as_posix()}"] = path
        return files

    def run(self) -> WorldOutcome:
        return RefundDeskRun(self.ctx).execute()
