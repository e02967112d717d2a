"""The refund domain of a run (domain.py): the desk's rules over the scenario's facts, one tool
per contract tool; built once per process for the same facts and contracts, and never shared
between different ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from simreport.kernel.testbed.assets import EnvironmentDataAsset, ToolContractAsset
from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.worlds.refund_desk.domain import refund_domain

ASSETS = Path(__file__).resolve().parents[4] / "examples" / "refund_desk" / "assets"


def content(path: str) -> Any:
    return yaml.safe_load((ASSETS / path).read_text(encoding="utf-8"))["content"]


def env(**rules: Any) -> EnvironmentDataAsset:
    data = content("env/ecom-seed/3.0.1.yaml")
    data["rules"] = {**data["rules"], **rules}
    return EnvironmentDataAsset.model_validate(data)


def tools(version: str = "1.5.0") -> Any:
    return ToolContractAsset.model_validate(content(f"refund-api/{version}.yaml")).tools


def test_the_same_facts_and_contracts_give_the_one_domain_built() -> None:
    assert refund_domain(env(), tools()) is refund_domain(env(), tools())


def test_other_facts_or_contracts_give_their_own_domain() -> None:
    strict = refund_domain(env(rejectOverRefund=True), tools())
    assert strict is not refund_domain(env(), tools())
    assert DomainState(strict).state["rules"]["desk"]["rejectOverRefund"] is True
    older = refund_domain(env(), tools("1.4.0"))
    assert [t.name for t in older.tools] == ["get_order", "create_refund", "get_refund"]
    assert [t.name for t in refund_domain(env(), tools()).tools][-1] == "withdraw_refund"


def test_a_run_changes_a_copy_never_the_domain() -> None:
    domain = refund_domain(env(), tools())
    state = DomainState(domain)
    tool = domain.tool("create_refund")
    assert tool is not None
    state.call(
        tool, {"order_no": "B2026-0901-7734", "amount_minor": 100}, "2026-09-01T10:00:00+08:00"
    )
    assert domain.entities["refund"].initial == []
    assert DomainState(refund_domain(env(), tools())).state["refund"] == {}
