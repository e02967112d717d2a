"""The `domain` and `user_flow` assets refuse mistakes when they are read, each with the path of
the mistake inside the asset."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from simreport.kernel.testbed.domain.model import DomainAsset, UserFlowAsset
from tests.kernel.testbed.domain.domains import shop, shop_doc

FLOW: dict[str, Any] = {
    "instructions": "You are a shopper.",
    "facts": {
        "itemId": {"pattern": r"\bI\d{3}\b", "disclose": "on-request"},
        "card": {"disclose": "never"},
    },
    "signals": {"asks_item": "(?i)which item", "confirms": "(?i)ordered"},
    "rules": [
        {"when": ["confirms"], "say": "thank", "ends": True, "goalReached": True},
        {"when": ["asks_item"], "say": "give_item", "discloses": ["itemId"]},
    ],
}


def located(error: ValidationError) -> list[str]:
    """Each error as `loc: message` (a model-wide check puts its path in the message)."""
    return [".".join(str(p) for p in e["loc"]) + ": " + e["msg"] for e in error.errors()]


def refused_domain(change: Callable[[dict[str, Any]], None]) -> list[str]:
    doc = shop_doc()
    change(doc)
    with pytest.raises(ValidationError) as caught:
        DomainAsset.model_validate(doc)
    return located(caught.value)


def refused_flow(change: Callable[[dict[str, Any]], None]) -> list[str]:
    doc = copy.deepcopy(FLOW)
    change(doc)
    with pytest.raises(ValidationError) as caught:
        UserFlowAsset.model_validate(doc)
    return located(caught.value)


def test_the_shop_and_its_flow_are_accepted() -> None:
    domain = shop()
    assert domain.tool("buy") is not None and domain.tool_index("buy") == 1
    assert domain.expression("tools.1.answer").variables == {"created", "state", "args"}
    assert UserFlowAsset.model_validate(FLOW).intents() == {
        "open",
        "thank",
        "give_item",
        "ask_status",
        "give_up",
    }


def test_initial_facts_that_break_their_schema_are_refused_where_they_are() -> None:
    def negative(doc: dict[str, Any]) -> None:
        doc["entities"]["item"]["initial"][1]["stock"] = -1

    (error,) = refused_domain(negative)
    assert error.startswith("entities.item: ")
    assert "initial.1.stock" in error


def test_initial_facts_without_their_key_or_with_a_repeated_key_are_refused() -> None:
    def no_key(doc: dict[str, Any]) -> None:
        doc["entities"]["order"]["schema"]["required"] = ["item"]
        doc["entities"]["order"]["initial"] = [{"item": "a", "state": "placed"}]

    def twice(doc: dict[str, Any]) -> None:
        doc["entities"]["item"]["initial"].append({"id": "a", "stock": 1, "price": 1})

    assert "initial.0" in refused_domain(no_key)[0]
    assert "initial.2" in refused_domain(twice)[0]


def test_an_entity_key_the_schema_does_not_declare_is_refused() -> None:
    def bad_key(doc: dict[str, Any]) -> None:
        doc["entities"]["order"]["key"] = "number"

    (error,) = refused_domain(bad_key)
    assert error.startswith("entities.order: ") and "key" in error


def test_an_entity_schema_that_is_not_a_json_schema_is_refused() -> None:
    def bad_schema(doc: dict[str, Any]) -> None:
        doc["entities"]["item"]["schema"] = {"type": "thing"}

    (error,) = refused_domain(bad_schema)
    assert error.startswith("entities.item.schema")


def test_an_effect_on_an_unknown_entity_is_refused_with_its_path() -> None:
    def unknown(doc: dict[str, Any]) -> None:
        doc["tools"][1]["effects"][1]["create"] = "invoice"

    (error,) = refused_domain(unknown)
    assert "tools.1.effects.1" in error and "invoice" in error


def test_an_effect_setting_an_undeclared_field_or_the_key_is_refused() -> None:
    def undeclared(doc: dict[str, Any]) -> None:
        doc["tools"][1]["effects"][0]["set"]["colour"] = '"red"'

    def key(doc: dict[str, Any]) -> None:
        doc["tools"][1]["effects"][0]["set"]["id"] = '"c"'

    assert "tools.1.effects.0.set.colour" in refused_domain(undeclared)[0]
    assert "tools.1.effects.0.set.id" in refused_domain(key)[0]


def test_an_effect_that_neither_or_both_creates_and_updates_is_refused() -> None:
    def both(doc: dict[str, Any]) -> None:
        doc["tools"][1]["effects"][0]["create"] = "order"

    (error,) = refused_domain(both)
    assert error.startswith("tools.1.effects.0")


@pytest.mark.parametrize(
    ("where", "source", "path"),
    [
        ("precondition", "args.id in", "tools.0.preconditions.0.require"),
        ("precondition", "calls.size() > 0", "tools.0.preconditions.0.require"),
        ("answer", "{'calls': calls}", "tools.0.answer"),
        ("invariant", "args.id == 'a'", "invariants.0.holds"),
        ("observation", "now", "observations.0.value"),
        ("metric", "state.item", "metrics.orders.value"),
        ("map", "state.item.map(k, k)", "tools.0.preconditions.0.require"),
    ],
)
def test_a_bad_expression_is_refused_with_its_path(where: str, source: str, path: str) -> None:
    def change(doc: dict[str, Any]) -> None:
        if where in ("precondition", "map"):
            doc["tools"][0]["preconditions"][0]["require"] = source
        elif where == "answer":
            doc["tools"][0]["answer"] = source
        elif where == "invariant":
            doc["invariants"][0]["holds"] = source
        elif where == "observation":
            doc["observations"][0]["value"] = source
        else:
            doc["metrics"]["orders"]["value"] = source

    (error,) = refused_domain(change)
    assert f"{path}: " in error


def test_repeated_tools_or_observations_are_refused() -> None:
    def tool_twice(doc: dict[str, Any]) -> None:
        doc["tools"].append(dict(doc["tools"][0]))

    def observation_twice(doc: dict[str, Any]) -> None:
        doc["observations"].append(dict(doc["observations"][0]))

    assert "get_item" in refused_domain(tool_twice)[0]
    assert "order.count" in refused_domain(observation_twice)[0]


@pytest.mark.parametrize(
    "key", ["conversation.turns", "user.goal_reached", "fault.stages", "tasks.resolved"]
)
def test_an_observation_the_run_reports_itself_is_refused(key: str) -> None:
    def reported(doc: dict[str, Any]) -> None:
        doc["observations"][0]["key"] = key

    assert "observations.0.key" in refused_domain(reported)[0]


def test_a_tool_input_that_is_not_an_object_and_an_unknown_fault_point_are_refused() -> None:
    def not_object(doc: dict[str, Any]) -> None:
        doc["tools"][0]["input"] = {"type": "string"}

    def fault(doc: dict[str, Any]) -> None:
        doc["tools"][0]["faults"] = ["meteor"]

    assert refused_domain(not_object)[0].startswith("tools.0.input")
    assert refused_domain(fault)[0].startswith("tools.0.faults.0")


def test_a_rule_reading_an_unknown_signal_is_refused() -> None:
    def unknown(doc: dict[str, Any]) -> None:
        doc["rules"][1]["when"] = ["asks_colour"]

    (error,) = refused_flow(unknown)
    assert "rules.1.when" in error and "asks_colour" in error


def test_a_rule_disclosing_an_unknown_fact_is_refused() -> None:
    def unknown(doc: dict[str, Any]) -> None:
        doc["rules"][1]["discloses"] = ["address"]

    (error,) = refused_flow(unknown)
    assert "rules.1.discloses" in error and "address" in error


def test_a_rule_disclosing_a_fact_that_is_never_disclosed_is_refused() -> None:
    def never(doc: dict[str, Any]) -> None:
        doc["rules"][1]["discloses"] = ["card"]

    (error,) = refused_flow(never)
    assert "rules.1.discloses" in error and "facts.card" in error


def test_a_goal_reached_by_an_answer_that_does_not_end_is_refused() -> None:
    def open_goal(doc: dict[str, Any]) -> None:
        doc["rules"][0]["ends"] = False

    (error,) = refused_flow(open_goal)
    assert "rules.0.goalReached" in error


def test_bad_patterns_are_refused_where_they_are() -> None:
    def fact(doc: dict[str, Any]) -> None:
        doc["facts"]["itemId"]["pattern"] = "(unclosed"

    def signal(doc: dict[str, Any]) -> None:
        doc["signals"]["asks_item"] = "[a-"

    assert refused_flow(fact)[0].startswith("facts.itemId.pattern")
    (error,) = refused_flow(signal)
    assert error.startswith("signals") and "asks_item" in error
