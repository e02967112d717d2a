"""The SUT boundary: what belongs to the agent under test may never be replaced.

`sut.boundary` declares which of reasoning, tool-selection, parameters and recovery are under
test. A scenario that puts a surrogate or a script inside that boundary — a fixed tool-call order,
a participant standing in for the agent's reasoning, a rule executor deciding for the agent —
would test the script, not the agent, so it is refused at load (`sut_boundary_replaced`).
"""

from __future__ import annotations

from ...core.schema import Scenario
from .assets import AgentAsset

REFUSAL = "sut_boundary_replaced"


def boundary_replacements(scenario: Scenario, agent: AgentAsset) -> list[str]:
    """Every way the scenario would replace something inside the declared boundary."""
    assert scenario.sut is not None
    inside = set(scenario.sut.boundary)
    found: list[str] = []
    if "tool-selection" in inside and agent.adapter == "scripted":
        found.append(
            "sut.agent is a scripted agent: a fixed tool-call order replaces tool-selection"
        )
    script = scenario.interaction.tool_call_script if scenario.interaction is not None else []
    if "tool-selection" in inside and script:
        found.append(
            "interaction.toolCallScript fixes the tool-call order: it replaces tool-selection"
        )
    for i, participant in enumerate(scenario.participants or []):
        taken = [item for item in participant.replaces if item in inside]
        if participant.kind == "surrogate" and taken:
            found.append(
                f"participants.{i} ({participant.id}) is a surrogate that replaces "
                + ", ".join(taken)
            )
    if inside and agent.adapter in ("reference", "scripted"):
        # A rule deciding for the agent under test replaces every decision it makes: its
        # reasoning, but also which tool it calls, with what, and how it recovers.
        executor = scenario.executors[_executor_of_agent(scenario, 0)]
        if executor.kind == "rule":
            found.append(
                f"executors: the agent under test is driven by rule {executor.rule!r}, which "
                "replaces " + ", ".join(sorted(inside))
            )
    return found


def _executor_of_agent(scenario: Scenario, agent: int) -> int:
    from ..context import assign_executors

    return assign_executors(scenario)[agent]
