"""A small shop domain and user flow, written as data, for the domain package's tests."""

from __future__ import annotations

import copy
from typing import Any

from simreport.core.testbed_schema import ClockConfig
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.domain.model import DomainAsset
from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.testbed.records import RecordLog

ID = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}

SHOP: dict[str, Any] = {
    "description": "A shop with items in stock and orders.",
    "entities": {
        "item": {
            "schema": {
                "type": "object",
                "required": ["id", "stock", "price"],
                "properties": {
                    "id": {"type": "string"},
                    "stock": {"type": "integer", "minimum": 0},
                    "price": {"type": "integer", "minimum": 0},
                },
            },
            "initial": [
                {"id": "a", "stock": 2, "price": 5},
                {"id": "b", "stock": 0, "price": 7},
            ],
        },
        "order": {
            "schema": {
                "type": "object",
                "required": ["id", "item", "state"],
                "properties": {
                    "id": {"type": "string"},
                    "item": {"type": "string"},
                    "state": {"enum": ["placed", "cancelled"]},
                },
            },
        },
    },
    "tools": [
        {
            "name": "get_item",
            "input": ID,
            "preconditions": [{"require": "args.id in state.item", "error": "not_found"}],
            "answer": '{"item": state.item[args.id]}',
            "latencyMs": 100,
        },
        {
            "name": "buy",
            "input": ID,
            "preconditions": [
                {"require": "args.id in state.item", "error": "not_found"},
                {"require": "state.item[args.id].stock > 0", "error": "out_of_stock"},
            ],
            "effects": [
                {
                    "update": "item",
                    "id": "args.id",
                    "set": {"stock": "state.item[args.id].stock - 1"},
                },
                {
                    "create": "order",
                    "value": '{"id": "O" + string(next.order), "item": args.id, "state": "placed"}',
                },
            ],
            "answer": '{"order": created[0], "stock": state.item[args.id].stock}',
            "latencyMs": 200,
        },
        {
            "name": "force_buy",
            "description": "Buys without checking the stock (its effect can break the schema).",
            "input": ID,
            "preconditions": [{"require": "args.id in state.item", "error": "not_found"}],
            "effects": [
                {
                    "create": "order",
                    "value": '{"id": "O" + string(next.order), "item": args.id, "state": "placed"}',
                },
                {
                    "update": "item",
                    "id": "args.id",
                    "set": {"stock": "state.item[args.id].stock - 1"},
                },
            ],
            "answer": "{}",
        },
        {
            "name": "swap_stock",
            "description": "Two effects that each read the state before the call.",
            "input": {"type": "object", "properties": {}},
            "effects": [
                {"update": "item", "id": '"a"', "set": {"stock": 'state.item["b"].stock'}},
                {"update": "item", "id": '"b"', "set": {"stock": 'state.item["a"].stock'}},
            ],
        },
        {
            "name": "reprice",
            "description": "Two effects on one instance: both apply.",
            "input": ID,
            "preconditions": [{"require": "args.id in state.item", "error": "not_found"}],
            "effects": [
                {
                    "update": "item",
                    "id": "args.id",
                    "set": {"price": "state.item[args.id].price + 1"},
                },
                {
                    "update": "item",
                    "id": "args.id",
                    "set": {"stock": "state.item[args.id].stock + 10"},
                },
            ],
            "answer": '{"item": state.item[args.id]}',
        },
    ],
    "invariants": [
        {"name": "orders_of_known_items", "holds": "items.order.all(o, o.item in state.item)"},
        {"name": "some_stock", "holds": "items.item.exists(i, i.stock > 0)"},
    ],
    "observations": [
        {"key": "order.count", "value": "size(items.order)"},
        {"key": "item.stock", "value": "state.item[user.itemId].stock"},
        {"key": "agent.buy_calls", "value": 'size(calls.filter(c, c.tool == "buy"))'},
        {"key": "closed.turns", "value": "conversation.turns"},
    ],
    "metrics": {
        "orders": {"value": 'double(obs["order.count"])'},
        "stockLeft": {"value": 'double(obs["item.stock"])'},
    },
}


def shop_doc() -> dict[str, Any]:
    """A fresh copy of the shop domain's document (tests change it freely)."""
    return copy.deepcopy(SHOP)


def shop(doc: dict[str, Any] | None = None) -> DomainAsset:
    return DomainAsset.model_validate(doc or shop_doc())


def shop_state(doc: dict[str, Any] | None = None) -> DomainState:
    return DomainState(shop(doc))


def log() -> RecordLog:
    return RecordLog(Clocks(ClockConfig()), "d" * 32)


NOW = "2026-05-04T08:00:00.000+02:00"
