"""A domain's joint model as a pure function: the airline example and its resolved assets,
changed one fact at a time, each refusal with its kind, and what an accepted model holds. No run
of the world."""

from __future__ import annotations

from typing import Any

import pytest

from simreport.core.execution_policy import ExecutionPolicy
from simreport.core.schema import Scenario
from simreport.kernel import validate_scenario
from simreport.kernel.testbed.assets import ResolvedAsset
from simreport.kernel.testbed.domain.joint_model import DomainJointModel, domain_joint_model
from simreport.kernel.testbed.lifecycle import TestbedFailure
from tests.kernel.testbed.test_real_tools import AIRLINE, BOUND
from tests.kernel.testbed.test_testbed_world import resolve_assets, scenario_doc, without

POLICY = ExecutionPolicy.model_validate(
    {"sandboxes": {"payments": {"baseUrl": "http://127.0.0.1:9"}}}
)
"""A policy declaring the sandbox the airline's payments are bound to."""


def example(
    *, participants: list[dict[str, str]] | None = None, real: bool = False, **overrides: Any
) -> tuple[Scenario, dict[str, ResolvedAsset]]:
    """The airline example with `overrides`, its `participants`, and with `real` its payments
    answered by a sandbox (hybrid, as tests/kernel/testbed/test_real_tools.py binds them)."""
    doc = scenario_doc(example=AIRLINE, **overrides)
    if participants is not None:
        doc["participants"] = participants
    if real:
        doc["environment"].update(backendMode="hybrid", realTools=BOUND)
        doc["execution"]["mode"] = "hybrid"
    scenario = validate_scenario(doc)
    return scenario, resolve_assets(scenario, AIRLINE)


def refusal(
    scenario: Scenario,
    resolved: dict[str, ResolvedAsset],
    resources: ExecutionPolicy | None = None,
) -> TestbedFailure:
    with pytest.raises(TestbedFailure) as info:
        domain_joint_model(scenario, resolved, resources=resources)
    assert info.value.stage == "loading"
    return info.value


def test_the_example_is_accepted_with_its_domain() -> None:
    scenario, resolved = example()
    model = domain_joint_model(scenario, resolved, resources=None)
    assert isinstance(model, DomainJointModel)
    assert model.domain is resolved["environment.domain"].content
    assert model.participants == {}


def test_a_fault_on_a_participant_is_accepted() -> None:
    approver = {"id": "supervisor", "role": "approver", "tool": "ask_supervisor"}
    scenario, resolved = example(
        participants=[approver], events__triggers__0__target="ask_supervisor"
    )
    model = domain_joint_model(scenario, resolved, resources=None)
    assert list(model.participants) == ["ask_supervisor"]


def test_a_participant_may_not_shadow_a_domain_tool() -> None:
    clash = {"id": "supervisor", "role": "approver", "tool": "get_booking"}
    failure = refusal(*example(participants=[clash]))
    assert failure.kind == "manifest_unresolved"
    assert "get_booking" in failure.message and "participants.0.tool" in failure.message


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"events__triggers__0__target": "cancel_booking"}, "neither a tool of the domain"),
        ({"events__triggers__0__target": "get_booking"}, "does not expose the fault point"),
    ],
    ids=["unknown-target", "fault-point-not-exposed"],
)
def test_a_fault_plan_the_domain_cannot_carry_is_refused(
    overrides: dict[str, Any], says: str
) -> None:
    failure = refusal(*example(**overrides))
    assert failure.kind == "fault_plan_incomplete"
    assert "events.triggers.0" in failure.message and says in failure.message


def test_real_tools_need_a_sandbox_the_policy_declares() -> None:
    scenario, resolved = example(real=True)
    failure = refusal(scenario, resolved)
    assert failure.kind == "sandbox_undeclared"
    assert "environment.realTools" in failure.message
    model = domain_joint_model(scenario, resolved, resources=POLICY)
    assert model.domain.tools


def test_a_wording_without_an_intent_of_the_flow_is_refused() -> None:
    scenario, resolved = example()
    resolved["user.simulator"] = without(resolved["user.simulator"], "intents", "give_up")
    failure = refusal(scenario, resolved)
    assert (failure.kind, failure.message) == (
        "manifest_unresolved",
        "user.simulator has no wording for intents give_up",
    )


def test_a_user_fact_the_flow_does_not_know_is_refused() -> None:
    failure = refusal(*example(user__facts={"bookingRef": "KX4821", "seat": "12A"}))
    assert failure.kind == "entity_binding_mismatch"
    assert "user.facts: seat" in failure.message


@pytest.mark.parametrize(
    ("binding", "facts", "says"),
    [
        ({"user.passenger": "env.booking.id"}, None, "names no fact of the user"),
        ({"user.bookingRef": "env.ticket.id"}, None, "cannot read 'env.ticket.id'"),
        ({"user.bookingRef": "env.booking.ref"}, None, "has no field 'ref'"),
        ({"user.bookingRef": "env.booking.id"}, {"bookingRef": "ZZ0000"}, "'ZZ0000' is no"),
    ],
    ids=["key-not-a-user-fact", "unknown-entity", "unknown-field", "value-not-in-the-facts"],
)
def test_an_entity_binding_that_does_not_hold_is_refused(
    binding: dict[str, str], facts: dict[str, str] | None, says: str
) -> None:
    overrides: dict[str, Any] = {"interaction__entityBinding": binding}
    if facts is not None:
        overrides["user__facts"] = facts
    failure = refusal(*example(**overrides))
    assert failure.kind == "entity_binding_mismatch"
    assert "interaction.entityBinding" in failure.message and says in failure.message
