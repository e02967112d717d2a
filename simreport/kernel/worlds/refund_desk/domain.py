"""The refund desk as a domain: its rules are data (`domain.yaml`); this module fills in a run's
initial facts from the scenario's environment data and names the tools after its tool
contracts, which say what the agent sees (name, description, parameters, latency) and which of
the domain's operations answers each."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache
from importlib import resources
from typing import Any

import yaml

from ...testbed.assets import EnvironmentDataAsset, ToolParameter, ToolSpec
from ...testbed.domain.model import DomainAsset

RULES_ID = "desk"
"""The key of the one `rules` instance."""


@cache
def _rules() -> dict[str, Any]:
    """The refund desk's domain as written (`domain.yaml`), initial facts left empty."""
    text = resources.files(__package__).joinpath("domain.yaml").read_text(encoding="utf-8")
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def metric_descriptions() -> dict[str, str]:
    """The audit metrics the domain computes, each with what it measures, in its order."""
    return {name: str(spec["description"]) for name, spec in _rules()["metrics"].items()}


def refund_domain(data: EnvironmentDataAsset, tools: Iterable[ToolSpec]) -> DomainAsset:
    """The domain of one refund-desk run: the desk's rules over `data`'s facts, with one tool
    per contract tool, answered by the operation the contract names. Built once per process
    for the same facts and contracts (checking its schemas and compiling its expressions costs
    more than a run); a run never changes it (its state is a copy)."""
    tools = list(tools)
    # Keys in their written order: a contract's parameters keep theirs in the tool definitions.
    key = json.dumps({"data": data.to_doc(), "tools": [t.to_doc() for t in tools]})
    found = _BUILT.get(key)
    if found is None:
        if len(_BUILT) >= 32:
            _BUILT.clear()
        found = _BUILT[key] = _build(data, tools)
    return found


_BUILT: dict[str, DomainAsset] = {}


def _build(data: EnvironmentDataAsset, tools: list[ToolSpec]) -> DomainAsset:
    doc = copy.deepcopy(_rules())
    entities = doc["entities"]
    entities["account"]["initial"] = [{"id": a.id, "name": a.name} for a in data.accounts]
    entities["order"]["initial"] = [
        {
            "id": o.id,
            "accountId": o.account_id,
            "paidAmountMinor": o.paid_amount_minor,
            "currency": o.currency,
            "state": o.state,
            "deliveredAt": o.delivered_at,
        }
        for o in data.orders
    ]
    entities["refund"]["initial"] = [
        {"id": r.id, "orderId": r.order_id, "amountMinor": r.amount_minor, "state": r.state}
        for r in data.refunds
    ]
    entities["rules"]["initial"] = [
        {
            "id": RULES_ID,
            "refundWindowDays": data.rules.refund_window_days,
            "rejectOverRefund": data.rules.reject_over_refund,
        }
    ]
    operations = {tool["name"]: tool for tool in doc["tools"]}
    doc["tools"] = [
        {
            **copy.deepcopy(operations[spec.operation]),
            "name": spec.name,
            "description": spec.description,
            "input": input_schema(spec.parameters),
            "latencyMs": spec.latency_ms,
        }
        for spec in tools
    ]
    return DomainAsset.model_validate(doc)


def input_schema(parameters: dict[str, ToolParameter]) -> dict[str, Any]:
    """A contract's parameters as a JSON Schema: required ones required, a pattern matched
    whole, and no other argument."""
    properties: dict[str, Any] = {}
    for name, p in parameters.items():
        prop: dict[str, Any] = {"type": p.type, "description": p.description}
        if p.pattern:
            prop["pattern"] = f"^(?:{p.pattern})$"
        properties[name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name, p in parameters.items() if p.required],
        "additionalProperties": False,
    }
