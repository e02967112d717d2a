"""A domain's state changes only through its tools' declared effects: preconditions answer with
their error code and change nothing; effects read the state before the call and apply together
or not at all; invariants, snapshots and digests do not depend on the order keys came in."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simreport.kernel.testbed.domain.state import DomainFault, DomainState
from tests.kernel.testbed.domain.domains import NOW, shop, shop_doc, shop_state


def call(state: DomainState, tool: str, **args: Any) -> tuple[dict[str, Any], list[Any]]:
    spec = state.domain.tool(tool)
    assert spec is not None
    return state.call(spec, args, NOW)


def stock(state: DomainState) -> dict[str, int]:
    return {k: v["stock"] for k, v in state.state["item"].items()}


def test_a_failed_precondition_answers_its_error_code_and_changes_nothing() -> None:
    state = shop_state()
    before = state.digest()
    body, changes = call(state, "buy", id="b")
    assert body == {"ok": False, "error": "out_of_stock", "message": "out_of_stock"}
    assert changes == []
    assert state.digest() == before and state.serial["order"] == 0


def test_preconditions_are_checked_in_order() -> None:
    body, _ = call(shop_state(), "buy", id="zz")
    assert body["error"] == "not_found"  # the stock check after it would read a missing item


def test_a_call_applies_its_effects_and_answers_from_the_state_after() -> None:
    state = shop_state()
    body, changes = call(state, "buy", id="a")
    assert body == {"ok": True, "order": {"id": "O1", "item": "a", "state": "placed"}, "stock": 1}
    assert [(c.entity, c.id, c.before, c.after) for c in changes] == [
        ("item", "a", {"stock": 2}, {"stock": 1}),
        ("order", "O1", None, {"id": "O1", "item": "a", "state": "placed"}),
    ]
    assert call(state, "buy", id="a")[0]["order"]["id"] == "O2"  # `next` counts creations


def test_every_effect_reads_the_state_before_the_call() -> None:
    state = shop_state()
    _, changes = call(state, "swap_stock")
    assert stock(state) == {"a": 0, "b": 2}  # applied one after the other, both would be 0
    assert {(c.id, c.before["stock"], c.after["stock"]) for c in changes} == {
        ("a", 2, 0),
        ("b", 0, 2),
    }


def test_two_effects_on_one_instance_both_apply() -> None:
    state = shop_state()
    body, changes = call(state, "reprice", id="a")
    assert body["item"] == {"id": "a", "price": 6, "stock": 12}
    assert [(c.id, c.before, c.after) for c in changes] == [
        ("a", {"price": 5, "stock": 2}, {"price": 6, "stock": 12})
    ]


def test_an_effect_that_breaks_the_schema_is_refused_and_nothing_is_applied() -> None:
    state = shop_state()
    before = state.digest()
    with pytest.raises(DomainFault) as caught:
        call(state, "force_buy", id="b")  # the order fits, the item's stock would be -1
    assert (caught.value.kind, caught.value.path) == ("domain_fault", "tools.2.effects")
    assert state.digest() == before
    assert state.state["order"] == {} and state.serial["order"] == 0


def test_an_update_of_an_instance_that_does_not_exist_is_a_domain_fault() -> None:
    doc = shop_doc()
    doc["tools"][1]["preconditions"] = []
    state = shop_state(doc)
    with pytest.raises(DomainFault) as caught:
        call(state, "buy", id="zz")
    assert caught.value.path == "tools.1.effects.0.id"
    assert state.state["order"] == {}


def test_an_answer_that_is_not_a_map_or_misses_its_output_schema_is_a_domain_fault() -> None:
    doc = shop_doc()
    doc["tools"][0]["answer"] = "[1]"
    with pytest.raises(DomainFault) as caught:
        call(shop_state(doc), "get_item", id="a")
    assert caught.value.path == "tools.0.answer"
    doc = shop_doc()
    doc["tools"][0]["output"] = {"type": "object", "required": ["price"]}
    with pytest.raises(DomainFault) as caught:
        call(shop_state(doc), "get_item", id="a")
    assert caught.value.path == "tools.0.output"


def test_arguments_are_checked_against_the_input_schema() -> None:
    state = shop_state()
    spec = state.domain.tool("get_item")
    assert spec is not None
    assert state.argument_problem(spec, {"id": "a"}) is None
    assert state.argument_problem(spec, {}) == "missing required argument 'id'"
    assert state.argument_problem(spec, {"id": 3}) == "argument 'id' must be a string"


def test_invariants_report_only_what_broke_after_the_start() -> None:
    state = shop_state()
    assert state.invariant_problems() == []
    state.state["order"]["O9"] = {"id": "O9", "item": "ghost", "state": "placed"}
    state.state["item"]["a"]["stock"] = 0
    assert sorted(state.invariant_problems()) == [
        "invariant orders_of_known_items does not hold",
        "invariant some_stock does not hold",
    ]


def test_an_invariant_broken_from_the_start_is_not_blamed_on_a_later_fault() -> None:
    doc = shop_doc()
    doc["entities"]["item"]["initial"][0]["stock"] = 0  # no item has stock
    state = shop_state(doc)
    assert state.invariant_problems() == []


def test_an_invariant_that_cannot_be_read_is_a_problem() -> None:
    doc = shop_doc()
    doc["invariants"].append({"name": "item_c", "holds": 'state.item["c"].stock > 0'})
    doc["entities"]["item"]["initial"].append({"id": "c", "stock": 1, "price": 1})
    state = shop_state(doc)
    assert state.invariant_problems() == []
    del state.state["item"]["c"]
    (problem,) = state.invariant_problems()
    assert problem.startswith("invariant item_c cannot be read")


def test_runs_share_no_state() -> None:
    domain = shop()
    first, second = DomainState(domain), DomainState(domain)
    first.call(domain.tools[1], {"id": "a"}, NOW)
    assert stock(second) == {"a": 2, "b": 0}
    assert domain.entities["item"].initial[0]["stock"] == 2


def test_items_and_snapshot_list_instances_in_key_order() -> None:
    state = shop_state()
    for _ in range(2):
        call(state, "buy", id="a")
    call(state, "reprice", id="b")
    assert [i["id"] for i in state.items()["item"]] == ["a", "b"]
    snapshot = state.snapshot()
    assert list(snapshot) == ["item", "order"]
    assert [o["id"] for o in snapshot["order"]] == ["O1", "O2"]


def shuffled(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        return {k: shuffled(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.lists(st.sampled_from("ab"), max_size=4))
def test_digest_and_snapshot_do_not_depend_on_key_order(seed: int, buys: list[str]) -> None:
    rng = random.Random(seed)
    doc = shop_doc()
    items = doc["entities"]["item"]["initial"]
    for item in items:
        item["stock"] = 5
    reordered = copy.deepcopy(doc)
    reordered["entities"]["item"]["initial"] = shuffled(list(reversed(items)), rng)
    reordered["entities"] = shuffled(reordered["entities"], rng)
    one, two = shop_state(doc), shop_state(reordered)
    for item in buys:
        call(one, "buy", id=item)
        call(two, "buy", id=item)
    assert one.snapshot() == two.snapshot()
    assert repr(one.snapshot()) == repr(two.snapshot())
    assert one.digest() == two.digest()
    two.state = shuffled(two.state, rng)
    assert two.digest() == one.digest()


def test_the_digest_changes_with_the_facts() -> None:
    state = shop_state()
    before = state.digest()
    call(state, "buy", id="a")
    assert state.digest() != before
