"""The refund desk's joint model, checked while LOADING: its tool contracts, participants, the one
`create_refund` action entry, the planned faults' targets and windows, the entity bindings
against the environment data, the user's wording intents and patience must fit together before
the agent is called. A pure function of the scenario and its resolved assets; every refusal is
a `TestbedFailure` of the loading stage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ....core.schema import Scenario
from ...testbed.assets import (
    EnvironmentDataAsset,
    ResolvedAsset,
    SimulatorConfigAsset,
    ToolContractAsset,
    ToolSpec,
    UserPolicyAsset,
)
from ...testbed.lifecycle import TestbedFailure
from ...testbed.participants import SurrogateParticipant
from .user import UserSimulator


@dataclass(frozen=True)
class RefundJointModel:
    """What a refund-desk run takes from its joint model."""

    tools: dict[str, ToolSpec]
    """The contracts' tools by name."""
    participants: dict[str, SurrogateParticipant]
    """The surrogate participants by the tool that reaches them."""
    action_entry: str
    """The one tool that submits refunds."""
    bound_order: str | None
    """The user's order when it is one of the environment data's, else None."""


def refund_joint_model(
    scenario: Scenario, resolved: Mapping[str, ResolvedAsset]
) -> RefundJointModel:
    """Check that the refund desk's scenario and its resolved assets fit together.

    Args:
        scenario: the run's scenario (with its `user` group).
        resolved: the manifest's resolved assets by slot (`environment.data`, the tool
            contracts, `user.simulator`, `user.policy`, …).

    Returns:
        The tools, participants, action entry and bound order of the run.

    Raises:
        TestbedFailure: of the loading stage, its kind naming the mismatch.
    """
    s = scenario
    assert s.user is not None
    tools: dict[str, ToolSpec] = {}
    owner: dict[str, str] = {}  # tool → the contract (name@version) that defines it
    for slot, asset in sorted(resolved.items()):
        if asset.kind != "tool_contract":
            continue
        contract = asset.typed(ToolContractAsset)
        for tool in contract.tools:
            if tool.name in tools:
                raise TestbedFailure(
                    f"tool {tool.name!r} is defined twice ({slot})",
                    stage="loading",
                    kind="manifest_unresolved",
                )
            tools[tool.name] = tool
            owner[tool.name] = f"{asset.name}@{asset.version}"
    participants: dict[str, SurrogateParticipant] = {}
    for i, participant in enumerate(s.participants or []):
        surrogate = SurrogateParticipant.of(participant)
        if surrogate.name in tools:
            raise TestbedFailure(
                f"participants.{i} ({participant.id}) is reached through "
                f"{surrogate.name!r}, a tool the contracts ({owner[surrogate.name]}) "
                f"already define; give it a tool of its own (participants.{i}.tool)",
                stage="loading",
                kind="manifest_unresolved",
            )
        participants[surrogate.name] = surrogate
    interaction = s.interaction
    entry_tool = interaction.action_entry if interaction is not None else "create_refund"
    if entry_tool not in tools or tools[entry_tool].operation != "create_refund":
        raise TestbedFailure(
            f"interaction.actionEntry {entry_tool!r} is not a refund submission tool of the "
            "contracts",
            stage="loading",
            kind="entity_binding_mismatch",
        )
    # One submission entry: a second tool that submits refunds would let the agent act
    # where the scenario says no action is possible, and own state the scenario gives to one.
    entries = [name for name, tool in tools.items() if tool.operation == "create_refund"]
    if len(entries) > 1:
        raise TestbedFailure(
            f"interaction.actionEntry declares {entry_tool!r} as the one refund entry, but "
            f"the tool contracts offer {len(entries)}: "
            + ", ".join(f"{name} ({owner[name]})" for name in entries)
            + "; expected exactly one tool with operation create_refund",
            stage="loading",
            kind="action_entry_mismatch",
        )
    for i, trigger in enumerate(s.events.triggers if s.events is not None else []):
        if trigger.target not in tools and trigger.target not in participants:
            raise TestbedFailure(
                f"events.triggers.{i} targets {trigger.target!r}, which no tool contract "
                "or participant has",
                stage="loading",
                kind="fault_plan_incomplete",
            )
        opens, closes = trigger.at.turn, trigger.recover.turn
        if opens is not None and closes is not None and closes <= opens:
            raise TestbedFailure(
                f"events.triggers.{i} recovers at turn {closes}, not after it opens at turn "
                f"{opens}: its window is empty, so it can never hit",
                stage="loading",
                kind="fault_plan_incomplete",
            )
    env = resolved["environment.data"].typed(EnvironmentDataAsset)
    collections = {
        "order": {o.id for o in env.orders},
        "orders": {o.id for o in env.orders},
        "account": {a.id for a in env.accounts},
        "accounts": {a.id for a in env.accounts},
    }
    user_facts = s.user.private_facts.to_doc()
    for key, target in (interaction.entity_binding if interaction is not None else {}).items():
        fact = _binding_fact(key)
        if fact is None or fact not in user_facts:
            accepted = ", ".join(f"user.{name}" for name in sorted(user_facts))
            raise TestbedFailure(
                f"interaction.entityBinding: the key {key!r} does not name a fact of the "
                f"user; write it as user.<fact> or privateFacts.<fact> ({accepted}), bound "
                "to env.order.id or env.account.id — e.g. user.orderNumber: env.order.id",
                stage="loading",
                kind="entity_binding_mismatch",
            )
        parts = target.split(".")
        if len(parts) != 3 or parts[0] != "env" or parts[1] not in collections:
            raise TestbedFailure(
                f"interaction.entityBinding.{key}: cannot read {target!r} "
                "(expected env.order.id or env.account.id)",
                stage="loading",
                kind="entity_binding_mismatch",
            )
        value = user_facts.get(fact)
        if value is None or value not in collections[parts[1]]:
            raise TestbedFailure(
                f"interaction.entityBinding: the user's {fact} {value!r} is not an "
                f"{parts[1]} of the environment data",
                stage="loading",
                kind="entity_binding_mismatch",
            )
    wording = resolved["user.simulator"].typed(SimulatorConfigAsset)
    policy = resolved["user.policy"].typed(UserPolicyAsset)
    effects = [r.effect for r in (*policy.reaction_rules, *s.user.behavior.reaction_rules)]
    missing = [i for i in UserSimulator.needed_intents(effects) if not wording.intents.get(i)]
    if missing:
        raise TestbedFailure(
            f"user.simulator has no wording for intents {', '.join(missing)}",
            stage="loading",
            kind="manifest_unresolved",
        )
    if s.user.persona.patience not in policy.patience:
        raise TestbedFailure(
            f"user.policy has no patience level {s.user.persona.patience!r}",
            stage="loading",
            kind="manifest_unresolved",
        )
    order = s.user.private_facts.order_number
    return RefundJointModel(
        tools=tools,
        participants=participants,
        action_entry=entry_tool,
        bound_order=order if order is not None and order in collections["orders"] else None,
    )


def _binding_fact(key: str) -> str | None:
    """The user's fact an entity-binding key names (`user.orderNumber`, `privateFacts.orderNumber`
    or `orderNumber`), or None for any other form (such as `tool.order_no`)."""
    for prefix in ("user.privateFacts.", "user.", "privateFacts."):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key if key and "." not in key else None
