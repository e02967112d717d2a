"""The ten scenario groups of the testbed: document keys, shorthands, refusals, and that scenarios
of other worlds keep their exact form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from simreport.core.overrides import get_path
from simreport.core.schema import Scenario
from simreport.core.testbed_schema import (
    Budget,
    FaultTrigger,
    ReactionRule,
    SutConfig,
    check_asset_ref,
    parse_condition,
)
from simreport.kernel import load_scenario

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "refund_desk"
GROUPS = (
    "identity",
    "sut",
    "user",
    "environment",
    "interaction",
    "participants",
    "events",
    "execution",
    "evaluationRef",
    "provenance",
)


def test_example_has_every_group_and_the_audit_targets() -> None:
    doc = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    assert set(GROUPS) <= set(doc)
    for path in (
        "events.triggers.0.position",
        "user.persona.patience",
        "user.disclosure.orderNumber",
        "sut.prompt",
        "prompt.memoryRepresentation",
        "llm.model",
    ):
        get_path(doc, path)


def test_other_worlds_keep_their_document_form() -> None:
    doc = Scenario.model_validate({"world": "prisoners_dilemma"}).to_doc()
    assert not set(GROUPS) & set(doc)


@pytest.mark.parametrize(
    "ref", ["refund-agent@2.4.1", "user-policy@stable", "env/ecom-seed@3.0.1", "a@1.0.0-rc.1"]
)
def test_asset_references(ref: str) -> None:
    assert check_asset_ref(ref) == ref


@pytest.mark.parametrize("ref", ["refund-agent", "@stable", "a@", "../x@1.0.0", "a b@1"])
def test_bad_asset_references(ref: str) -> None:
    with pytest.raises(ValueError):
        check_asset_ref(ref)


def test_boundary_items_are_checked() -> None:
    with pytest.raises(ValidationError):
        SutConfig.model_validate({"agent": "a@1.0.0", "boundary": ["reasoning", "reasoning"]})
    with pytest.raises(ValidationError):
        SutConfig.model_validate({"agent": "a@1.0.0", "boundary": ["planning"]})
    assert SutConfig.model_validate({"agent": "a@1.0.0"}).boundary == [
        "reasoning",
        "tool-selection",
        "parameters",
        "recovery",
    ]


def test_fault_trigger_shorthands_and_defaults() -> None:
    doc: dict[str, Any] = {
        "id": "f",
        "target": "create_refund",
        "at": "turn-1",
        "recover": "turn-2",
    }
    trigger = FaultTrigger.model_validate(doc)
    assert (trigger.at.turn, trigger.at.call) == (1, None)
    assert (trigger.recover.turn, trigger.recover.after_hits) == (2, None)
    plain = FaultTrigger.model_validate({"id": "f", "target": "x"})
    assert (plain.at.call, plain.recover.after_hits) == (1, 1)
    assert plain.position == "committed_response_lost"
    with pytest.raises(ValidationError):
        FaultTrigger.model_validate({"id": "f", "target": "x", "position": "lost"})
    with pytest.raises(ValidationError):
        FaultTrigger.model_validate({"id": "f", "target": "x", "at": "soon"})


def test_reaction_rule_conditions() -> None:
    assert parse_condition("agent.asks_order_number") == ("agent.asks_order_number", None, None)
    assert parse_condition("wait_ms > 120000") == ("wait_ms", ">", 120000)
    with pytest.raises(ValueError):
        parse_condition("mood > 3")
    with pytest.raises(ValidationError):
        ReactionRule.model_validate({"when": "agent.smiles", "effect": "give_up"})


def test_durations_read_like_the_design() -> None:
    assert Budget.model_validate({"wallClock": "20m"}).wall_clock == 1200.0
    assert Budget.model_validate({"wallClock": 90}).wall_clock == 90.0
    with pytest.raises(ValidationError):
        Budget.model_validate({"wallClock": "soon"})


def test_groups_reject_unknown_keys() -> None:
    doc = load_scenario(EXAMPLE / "scenario.yaml").scenario.to_doc()
    doc["user"]["mood"] = "grumpy"
    with pytest.raises(ValidationError):
        Scenario.model_validate(doc)


def test_the_design_documents_trigger_shorthand_reads() -> None:
    from simreport.core.testbed_schema import EventsConfig

    events = EventsConfig.model_validate(
        {
            "triggers": [
                {
                    "target": "create_refund",
                    "effect": "timeout",
                    "at": "turn-1",
                    "recover": "turn-2",
                    "position": "committed",
                }
            ]
        }
    )
    trigger = events.triggers[0]
    assert (trigger.id, trigger.position) == ("fault-1", "committed_response_lost")
    assert FaultTrigger.model_validate({"id": "f", "target": "x", "position": "sent"}).position == (
        "sent_not_committed"
    )
