"""Declared settings the testbed does not implement are refused, naming the field, never run as
something else: a scenario that declares an AG-UI channel must not run as a chat, and one that
declares a real participant must not run as if nobody else were there.

- `unimplemented(scenario)` needs only the scenario. The world runs it when the scenario is
  validated (so the refusal names the file, the dotted path and what is expected) and again in
  LOADING, for a scenario that reached the run without that validation.
- `channel_problems(scenario, adapter)` needs the resolved agent, so it runs in LOADING.
Both return (dotted path, message) pairs; LOADING refuses with `setting_not_implemented`.
"""

from __future__ import annotations

from ...core.schema import Scenario

SETTING_NOT_IMPLEMENTED = "setting_not_implemented"

IMPLEMENTED_CHANNELS = ("chat-completions", "internal")
"""How the conversation reaches the agent: as Chat Completions messages (every adapter), or
in the harness's own process (`internal`: the reference, scripted and Python agents)."""
IN_PROCESS_ADAPTERS = ("reference", "scripted", "python")


def unimplemented(scenario: Scenario) -> list[tuple[str, str]]:
    """Every declared setting of the scenario the testbed would otherwise ignore."""
    problems: list[tuple[str, str]] = []
    channels = list(scenario.interaction.channels) if scenario.interaction is not None else []
    for i, channel in enumerate(channels):
        if channel not in IMPLEMENTED_CHANNELS:
            problems.append(
                (
                    f"interaction.channels.{i}",
                    f"channel {channel!r} is not implemented: the testbed would carry the "
                    "conversation as chat instead; expected one of "
                    + ", ".join(IMPLEMENTED_CHANNELS),
                )
            )
    if not problems and len(channels) > 1:
        problems.append(
            (
                "interaction.channels",
                f"{len(channels)} channels are declared, but a run is one conversation through "
                "one channel; expected exactly one of " + ", ".join(IMPLEMENTED_CHANNELS),
            )
        )
    seen: dict[str, int] = {}
    for i, participant in enumerate(scenario.participants or []):
        if participant.kind == "real":
            problems.append(
                (
                    f"participants.{i}.kind",
                    f"participant {participant.id!r} is of kind real, which is not implemented: "
                    "the testbed cannot contact another live agent, and would run as if it were "
                    "absent; expected kind surrogate (answered by its replies), or remove it",
                )
            )
            continue
        if participant.entry is not None:
            problems.append(
                (
                    f"participants.{i}.entry",
                    f"participant {participant.id!r} is a surrogate, answered by the testbed "
                    "from its replies: it has no entry (only a real participant would)",
                )
            )
        tool = participant.tool_name
        if tool in seen:
            problems.append(
                (
                    f"participants.{i}.tool",
                    f"participant {participant.id!r} is reached through {tool!r}, as "
                    f"participants.{seen[tool]} is; expected a tool name of its own",
                )
            )
        seen.setdefault(tool, i)
    return problems + _mode_problems(scenario)


def _mode_problems(scenario: Scenario) -> list[tuple[str, str]]:
    """The run mode (`execution.mode`, a run request's mode) must be the environment's."""
    backend = scenario.environment.backend_mode if scenario.environment is not None else None
    mode = scenario.execution.mode if scenario.execution is not None else "surrogate"
    if mode == (backend or "surrogate"):
        return []
    return [
        (
            "execution.mode",
            f"the run mode is {mode}, but environment.backendMode is {backend or 'surrogate'}: "
            "a run never answers a tool otherwise than its environment declares; expected "
            + (backend or "surrogate"),
        )
    ]


def channel_problems(scenario: Scenario, adapter: str) -> list[tuple[str, str]]:
    """A channel the resolved agent cannot be reached through."""
    channels = list(scenario.interaction.channels) if scenario.interaction is not None else []
    return [
        (
            f"interaction.channels.{i}",
            "channel 'internal' needs an agent in the harness's process ("
            + ", ".join(IN_PROCESS_ADAPTERS)
            + f"), but sut.agent is an {adapter} agent, reached over chat-completions",
        )
        for i, channel in enumerate(channels)
        if channel == "internal" and adapter not in IN_PROCESS_ADAPTERS
    ]
