"""The refund domain of a run (domain.py): the desk's rules over the scenario's facts, one tool
per contract tool; built once per process for the same facts and contracts, and never shared
between different ones."""

from __future__ import annotations

from simreport.kernel.testbed.domain.state import DomainState
from simreport.kernel.worlds.refund_desk.domain import refund_domain
from tests.support.refund_desk import contract_tools, env_data


def test_the_same_facts_and_contracts_give_the_one_domain_built() -> None:
    assert refund_domain(env_data(), contract_tools()) is refund_domain(
        env_data(), contract_tools()
    )


def test_other_facts_or_contracts_give_their_own_domain() -> None:
    strict = refund_domain(env_data(rejectOverRefund=True), contract_tools())
    assert strict is not refund_domain(env_data(), contract_tools())
    assert DomainState(strict).state["rules"]["desk"]["rejectOverRefund"] is True
    older = refund_domain(env_data(), contract_tools("1.4.0"))
    assert [t.name for t in older.tools] == ["get_order", "create_refund", "get_refund"]
    assert [t.name for t in refund_domain(env_data(), contract_tools()).tools][
        -1
    ] == "withdraw_refund"


def test_a_run_changes_a_copy_never_the_domain() -> None:
    domain = refund_domain(env_data(), contract_tools())
    state = DomainState(domain)
    tool = domain.tool("create_refund")
    assert tool is not None
    state.call(
        tool, {"order_no": "B2026-0901-7734", "amount_minor": 100}, "2026-09-01T10:00:00+08:00"
    )
    assert domain.entities["refund"].initial == []
    assert DomainState(refund_domain(env_data(), contract_tools())).state["refund"] == {}
