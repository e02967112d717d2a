"""A domain's joint model, checked while LOADING: the domain, the user flow, the participants,
the planned faults (each on a fault point its tool exposes), the real tools' sandboxes and the
entity bindings must fit together before the agent is called. A pure function of the scenario,
its resolved assets and the execution policy; every refusal is a `TestbedFailure` of the loading
stage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ....core.execution_policy import ExecutionPolicy
from ....core.schema import Scenario
from ..assets import ResolvedAsset, SimulatorConfigAsset
from ..lifecycle import TestbedFailure
from ..participants import SurrogateParticipant
from .model import DomainAsset, UserFlowAsset
from .real_tools import binding_problems

FAULT_POINT = {"delay": "delay", "abort": "abort"}
"""A trigger's effect → the fault point it needs (a timeout's is its position, else `error`)."""


@dataclass(frozen=True)
class DomainJointModel:
    """What a domain run takes from its joint model."""

    domain: DomainAsset
    participants: dict[str, SurrogateParticipant]
    """The surrogate participants by the tool that reaches them."""


def domain_joint_model(
    scenario: Scenario,
    resolved: Mapping[str, ResolvedAsset],
    *,
    resources: ExecutionPolicy | None,
) -> DomainJointModel:
    """Check that a domain scenario and its resolved assets fit together.

    Args:
        scenario: the run's scenario (with its `user` group).
        resolved: the manifest's resolved assets by slot (`environment.domain`, `user.policy`
            (the user flow), `user.simulator`, …).
        resources: the execution policy declaring the sandboxes of `environment.realTools`.

    Returns:
        The domain and the participants of the run.

    Raises:
        TestbedFailure: of the loading stage, its kind naming the mismatch.
    """
    s = scenario
    assert s.user is not None
    domain = resolved["environment.domain"].typed(DomainAsset)
    tools = {t.name: t for t in domain.tools}
    participants: dict[str, SurrogateParticipant] = {}
    for i, participant in enumerate(s.participants or []):
        surrogate = SurrogateParticipant.of(participant)
        if surrogate.name in tools:
            _refuse(
                f"participants.{i} ({participant.id}) is reached through {surrogate.name!r}, "
                f"a tool of the domain; give it a tool of its own (participants.{i}.tool)",
                "manifest_unresolved",
            )
        participants[surrogate.name] = surrogate
    for i, trigger in enumerate(s.events.triggers if s.events is not None else []):
        tool = tools.get(trigger.target)
        if tool is None:
            if trigger.target in participants:
                continue
            _refuse(
                f"events.triggers.{i} targets {trigger.target!r}, which is neither a tool of "
                "the domain nor a participant",
                "fault_plan_incomplete",
            )
            continue
        point = FAULT_POINT.get(trigger.effect) or (
            trigger.position if trigger.effect == "timeout" else "error"
        )
        if point not in tool.faults:
            _refuse(
                f"events.triggers.{i}: tool {tool.name} does not expose the fault point "
                f"{point!r}; it exposes {', '.join(tool.faults) or 'none'}",
                "fault_plan_incomplete",
            )
    _check_real_tools(scenario, domain, resources)
    flow = resolved["user.policy"].typed(UserFlowAsset)
    wording = resolved["user.simulator"].typed(SimulatorConfigAsset)
    missing = sorted(i for i in flow.intents() if not wording.intents.get(i))
    if missing:
        _refuse(
            f"user.simulator has no wording for intents {', '.join(missing)}",
            "manifest_unresolved",
        )
    unknown = sorted(set(s.user.facts) - set(flow.facts))
    if unknown:
        _refuse(
            f"user.facts: {', '.join(unknown)} is not a fact of the user flow; expected "
            + (", ".join(sorted(flow.facts)) or "none"),
            "entity_binding_mismatch",
        )
    _check_bindings(scenario, domain)
    return DomainJointModel(domain=domain, participants=participants)


def _check_real_tools(
    scenario: Scenario, domain: DomainAsset, resources: ExecutionPolicy | None
) -> None:
    """Each tool of `environment.realTools` is the domain's and bound to a sandbox the
    execution policy declares; isolated_real leaves no tool to the fact model."""
    environment = scenario.environment
    if environment is None or environment.backend_mode == "surrogate":
        return
    problems = binding_problems(
        environment.real_tools,
        environment.backend_mode,
        (t.name for t in domain.tools),
        resources,
    )
    if problems:
        _refuse(
            "; ".join(f"{path}: {message}" for path, message in problems),
            "sandbox_undeclared",
        )


def _check_bindings(scenario: Scenario, domain: DomainAsset) -> None:
    """Each `interaction.entityBinding` (user.<fact> → env.<entity>.<field>) names a fact of
    the user, an entity and a field the domain's schema declares, and the user's value is
    the field's value of one of the entity's initial instances."""
    s = scenario
    assert s.user is not None
    bindings = s.interaction.entity_binding if s.interaction is not None else {}
    for key, target in bindings.items():
        fact = key.removeprefix("user.").removeprefix("facts.")
        if fact not in s.user.facts:
            _refuse(
                f"interaction.entityBinding: {key!r} names no fact of the user (expected "
                f"user.<fact>, one of {', '.join(sorted(s.user.facts)) or 'none'})",
                "entity_binding_mismatch",
            )
        parts = target.split(".")
        entity = domain.entities.get(parts[1]) if len(parts) == 3 else None
        if parts[0] != "env" or entity is None:
            _refuse(
                f"interaction.entityBinding.{key}: cannot read {target!r}; expected "
                "env.<entity>.<field> with an entity of the domain ("
                + ", ".join(sorted(domain.entities))
                + ")",
                "entity_binding_mismatch",
            )
            continue
        if parts[2] not in entity.fields():
            _refuse(
                f"interaction.entityBinding.{key}: {parts[1]} has no field {parts[2]!r} in "
                f"its schema; expected one of {', '.join(sorted(entity.fields()))}",
                "entity_binding_mismatch",
            )
        values = {str(item.get(parts[2])) for item in entity.initial}
        if str(s.user.facts[fact]) not in values:
            _refuse(
                f"interaction.entityBinding.{key}: the user's {fact} "
                f"{s.user.facts[fact]!r} is no {parts[1]}.{parts[2]} of the domain's facts",
                "entity_binding_mismatch",
            )


def _refuse(message: str, kind: str) -> None:
    raise TestbedFailure(message, stage="loading", kind=kind)
