"""The SUT boundary: what belongs to the agent under test may never be replaced.

`sut.boundary` declares which of reasoning, tool-selection, parameters and recovery are under
test. A scenario that puts a surrogate or a script inside that boundary — a fixed tool-call order,
a participant standing in for the agent's reasoning, a rule executor deciding for the agent —
would test the script, not the agent, so it is refused at load (`sut_boundary_replaced`). The run
service refuses such a spec with the same function before it stores or queues it, each
replacement located at the field that declares it (`located_replacements`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...core.schema import Scenario
from .assets import AgentAsset

REFUSAL = "sut_boundary_replaced"


@dataclass(frozen=True)
class Replacement:
    """One way a scenario replaces something inside its declared boundary."""

    path: str
    """The dotted path of the field that declares the replacement (`interaction.toolCallScript`,
    `participants.0.replaces`, `executors.0`, `sut.agent`)."""
    message: str
    replaced: tuple[str, ...]
    """The boundary items it replaces."""


def boundary_replacements(scenario: Scenario, agent: AgentAsset | None) -> list[str]:
    """Every way the scenario would replace something inside the declared boundary, said."""
    return [found.message for found in located_replacements(scenario, agent)]


def located_replacements(scenario: Scenario, agent: AgentAsset | None) -> list[Replacement]:
    """Every way the scenario would replace something inside the declared boundary, each with
    the field that declares it, in the order its fields come; empty when it replaces nothing
    there. Without the agent under test's asset (`agent` None: not resolved yet), only what the
    scenario replaces whatever that agent is."""
    assert scenario.sut is not None
    inside = set(scenario.sut.boundary)
    found: list[Replacement] = []
    adapter = agent.adapter if agent is not None else None
    if "tool-selection" in inside and adapter == "scripted":
        found.append(
            Replacement(
                "sut.agent",
                "sut.agent is a scripted agent: a fixed tool-call order replaces tool-selection",
                ("tool-selection",),
            )
        )
    script = scenario.interaction.tool_call_script if scenario.interaction is not None else []
    if "tool-selection" in inside and script:
        found.append(
            Replacement(
                "interaction.toolCallScript",
                "interaction.toolCallScript fixes the tool-call order: it replaces tool-selection",
                ("tool-selection",),
            )
        )
    for i, participant in enumerate(scenario.participants or []):
        taken = [item for item in participant.replaces if item in inside]
        if participant.kind == "surrogate" and taken:
            found.append(
                Replacement(
                    f"participants.{i}.replaces",
                    f"participants.{i} ({participant.id}) is a surrogate that replaces "
                    + ", ".join(taken),
                    tuple(taken),
                )
            )
    if inside and adapter in ("reference", "scripted"):
        # A rule deciding for the agent under test replaces every decision it makes: its
        # reasoning, but also which tool it calls, with what, and how it recovers.
        index = _executor_of_agent(scenario, 0)
        executor = scenario.executors[index]
        if executor.kind == "rule":
            found.append(
                Replacement(
                    f"executors.{index}",
                    f"executors: the agent under test is driven by rule {executor.rule!r}, "
                    "which replaces " + ", ".join(sorted(inside)),
                    tuple(sorted(inside)),
                )
            )
    return found


def _executor_of_agent(scenario: Scenario, agent: int) -> int:
    from ..context import assign_executors

    return assign_executors(scenario)[agent]
