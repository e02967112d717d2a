"""The refund desk's joint model as a pure function: the example scenario and its resolved assets,
changed one fact at a time, each refusal with its kind, and what an accepted model holds. No run
of the world."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from simreport.core.schema import Scenario
from simreport.kernel import validate_scenario
from simreport.kernel.testbed.assets import (
    ResolvedAsset,
    ToolContractAsset,
)
from simreport.kernel.testbed.lifecycle import TestbedFailure
from simreport.kernel.worlds.refund_desk.joint_model import RefundJointModel, refund_joint_model
from tests.kernel.testbed.test_testbed_faithful import SECOND_ENTRY
from tests.kernel.testbed.test_testbed_world import resolve_assets, scenario_doc, without

CONTRACT = "environment.toolContracts.0"


def example(**overrides: Any) -> tuple[Scenario, dict[str, ResolvedAsset]]:
    scenario = validate_scenario(scenario_doc(**overrides))
    return scenario, resolve_assets(scenario)


def add_contract(resolved: dict[str, ResolvedAsset], content: ToolContractAsset) -> None:
    """Another tool contract, as the scenario's second (`legacy-api@1.0.0`)."""
    resolved["environment.toolContracts.1"] = dataclasses.replace(
        resolved[CONTRACT],
        slot="environment.toolContracts.1",
        name="legacy-api",
        version="1.0.0",
        content=content,
    )


def refusal(scenario: Scenario, resolved: dict[str, ResolvedAsset]) -> TestbedFailure:
    with pytest.raises(TestbedFailure) as info:
        refund_joint_model(scenario, resolved)
    assert info.value.stage == "loading"
    return info.value


def test_the_example_is_accepted_with_its_tools_entry_and_bound_order() -> None:
    scenario, resolved = example()
    model = refund_joint_model(scenario, resolved)
    assert isinstance(model, RefundJointModel)
    contract = resolved[CONTRACT].typed(ToolContractAsset)
    assert list(model.tools) == [tool.name for tool in contract.tools]
    assert model.action_entry == "create_refund"
    assert model.bound_order == "B2026-0901-7734"
    assert model.participants == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.action_entry = "other"  # type: ignore[misc]


def test_a_participant_is_kept_by_the_tool_that_reaches_it() -> None:
    approver = {"id": "approver", "role": "approver", "tool": "ask_approver"}
    scenario, resolved = example(participants=[approver])
    model = refund_joint_model(scenario, resolved)
    assert list(model.participants) == ["ask_approver"]
    assert model.participants["ask_approver"].id == "approver"


def test_an_order_outside_the_environment_data_is_not_bound_when_nothing_binds_it() -> None:
    scenario, resolved = example(
        interaction__entityBinding={}, user__privateFacts__orderNumber="B2026-0000-0000"
    )
    assert refund_joint_model(scenario, resolved).bound_order is None


def test_a_tool_defined_twice_is_refused() -> None:
    scenario, resolved = example()
    add_contract(resolved, resolved[CONTRACT].typed(ToolContractAsset))
    failure = refusal(scenario, resolved)
    assert failure.kind == "manifest_unresolved"
    assert "defined twice" in failure.message


def test_a_participant_may_not_shadow_a_contract_tool() -> None:
    clash = {"id": "approver", "role": "approver", "tool": "get_order"}
    failure = refusal(*example(participants=[clash]))
    assert failure.kind == "manifest_unresolved"
    assert "get_order" in failure.message and "participants.0" in failure.message


def test_an_action_entry_that_is_no_refund_submission_is_refused() -> None:
    failure = refusal(*example(interaction__actionEntry="get_order"))
    assert failure.kind == "entity_binding_mismatch"
    assert "interaction.actionEntry 'get_order'" in failure.message


@pytest.mark.parametrize("entry", ["create_refund", "submit_refund"])
def test_two_refund_entries_are_refused(entry: str) -> None:
    scenario, resolved = example(interaction__actionEntry=entry)
    add_contract(resolved, ToolContractAsset.model_validate(SECOND_ENTRY))
    failure = refusal(scenario, resolved)
    assert failure.kind == "action_entry_mismatch"
    assert "create_refund (refund-api@1.4.0)" in failure.message
    assert "submit_refund (legacy-api@1.0.0)" in failure.message


@pytest.mark.parametrize(
    "overrides",
    [
        {"events__triggers__0__target": "cancel_order"},
        {"events__triggers__0__at": {"turn": 2}, "events__triggers__0__recover": {"turn": 2}},
        {"events__triggers__0__at": {"turn": 3}, "events__triggers__0__recover": {"turn": 1}},
    ],
    ids=["unknown-target", "recover-at-the-opening-turn", "recover-before-the-opening-turn"],
)
def test_a_fault_plan_that_cannot_hit_is_refused(overrides: dict[str, Any]) -> None:
    failure = refusal(*example(**overrides))
    assert failure.kind == "fault_plan_incomplete"
    assert "events.triggers.0" in failure.message


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"interaction__entityBinding": {"tool.order_no": "env.order.id"}}, "tool.order_no"),
        ({"interaction__entityBinding": {"user.orderNumber": "env.refund.id"}}, "env.refund.id"),
        ({"user__privateFacts__orderNumber": "B2026-0000-0000"}, "B2026-0000-0000"),
    ],
    ids=["key-not-a-user-fact", "unreadable-target", "order-not-in-the-data"],
)
def test_an_entity_binding_that_does_not_hold_is_refused(
    overrides: dict[str, Any], says: str
) -> None:
    failure = refusal(*example(**overrides))
    assert failure.kind == "entity_binding_mismatch"
    assert says in failure.message and "interaction.entityBinding" in failure.message


@pytest.mark.parametrize(
    ("slot", "field", "key", "says"),
    [
        ("user.simulator", "intents", "open", "user.simulator has no wording for intents open"),
        ("user.policy", "patience", "low", "user.policy has no patience level 'low'"),
    ],
    ids=["wording-without-a-needed-intent", "policy-without-the-personas-patience"],
)
def test_a_user_asset_lacking_what_the_user_needs_is_refused(
    slot: str, field: str, key: str, says: str
) -> None:
    scenario, resolved = example()
    resolved[slot] = without(resolved[slot], field, key)
    failure = refusal(scenario, resolved)
    assert (failure.kind, failure.message) == ("manifest_unresolved", says)
