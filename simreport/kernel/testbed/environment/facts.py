"""The fact model behind every tool surrogate: orders, refunds and accounts in one state, so
what one tool says the others confirm; each change it makes is a `Change` the gateway records,
and `inconsistencies` says where a read would disagree with what is stored."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ....core.canonical import content_hash
from ..assets import EnvironmentDataAsset


@dataclass
class Order:
    id: str
    account_id: str
    paid_amount_minor: int
    currency: str
    state: str
    delivered_at: str | None


@dataclass
class Refund:
    id: str
    order_id: str
    amount_minor: int
    state: str  # processing | accepted | rejected | withdrawn


REFUND_STATES = ("processing", "accepted", "rejected", "withdrawn")
WITHDRAW_EVENT = "refund.withdraw"
"""The business event the linkage ledger follows: a user withdrawing a refund request."""
REFUNDED_STATES = ("refunded", "partially_refunded")


@dataclass
class Change:
    """One state change of an entity, recorded as a state_change record."""

    entity: str
    id: str
    before: Any
    after: Any


class FactModel:
    """Orders, refunds and accounts of one run (a private copy: runs share no mutable state)."""

    def __init__(self, data: EnvironmentDataAsset) -> None:
        source = copy.deepcopy(data)
        self.rules = source.rules
        self.orders = {
            o.id: Order(
                o.id, o.account_id, o.paid_amount_minor, o.currency, o.state, o.delivered_at
            )
            for o in source.orders
        }
        self.refunds = {
            r.id: Refund(r.id, r.order_id, r.amount_minor, r.state) for r in source.refunds
        }
        self.accounts = {a.id: a.name for a in source.accounts}
        # What an order returns to when every refund of it is withdrawn.
        self._base_state = {o.id: o.state for o in self.orders.values()}
        self._next_refund = len(self.refunds) + 1
        self._initial_problems: frozenset[str] = frozenset()
        # A recovery answers for what the fault left, not for what the data held from the start.
        self._initial_problems = frozenset(self.inconsistencies())

    # -- queries

    def order_view(self, order: Order) -> dict[str, Any]:
        return {
            "orderNo": order.id,
            "state": order.state,
            "paidAmountMinor": order.paid_amount_minor,
            "currency": order.currency,
            "deliveredAt": order.delivered_at,
        }

    def refund_view(self, refund: Refund) -> dict[str, Any]:
        return {
            "refundId": refund.id,
            "orderNo": refund.order_id,
            "amountMinor": refund.amount_minor,
            "state": refund.state,
        }

    def get_order(self, order_no: str) -> dict[str, Any]:
        order = self.orders.get(order_no)
        if order is None:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}
        return {"ok": True, "order": self.order_view(order)}

    def get_refund(self, order_no: str) -> dict[str, Any]:
        if order_no not in self.orders:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}
        found = [self.refund_view(r) for r in self.refunds.values() if r.order_id == order_no]
        return {"ok": True, "refunds": found}

    # -- the one submission entry

    def create_refund(
        self, order_no: str, amount_minor: int, business_now: datetime, *, hold: bool = False
    ) -> tuple[dict[str, Any], list[Change]]:
        """Submit a refund. With `hold` the service has received it but not processed it: the
        refund exists as `processing` until `commit_held`."""
        order = self.orders.get(order_no)
        if order is None:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}, []
        if order.delivered_at is not None:
            delivered = datetime.fromisoformat(order.delivered_at)
            if business_now > delivered + timedelta(days=self.rules.refund_window_days):
                return {
                    "ok": False,
                    "error": "outside_refund_window",
                    "message": f"refunds close {self.rules.refund_window_days} days after delivery",
                }, []
        if amount_minor <= 0:
            return {
                "ok": False,
                "error": "invalid_amount",
                "message": "amount must be positive",
            }, []
        refunded = sum(
            r.amount_minor
            for r in self.refunds.values()
            if r.order_id == order_no and r.state != "rejected"
        )
        if self.rules.reject_over_refund and refunded + amount_minor > order.paid_amount_minor:
            return {
                "ok": False,
                "error": "over_refund",
                "message": "the amount exceeds what is left to refund",
            }, []
        refund = Refund(f"RF-{self._next_refund:04d}", order_no, amount_minor, "processing")
        self._next_refund += 1
        self.refunds[refund.id] = refund
        changes = [Change("refund", refund.id, None, "processing")]
        if not hold:
            changes += self.commit_held(refund.id)
        return {"ok": True, "refund": self.refund_view(refund)}, changes

    def withdraw_refund(self, order_no: str) -> tuple[dict[str, Any], list[Change]]:
        """Withdraw the customer's refund request for an order: every refund of it still
        `processing` (a request in flight, perhaps held by a fault) or `accepted` (not yet paid
        out) becomes `withdrawn`, and the order's state follows the refunds that remain."""
        order = self.orders.get(order_no)
        if order is None:
            return {"ok": False, "error": "order_not_found", "message": f"no order {order_no}"}, []
        open_ = [
            r
            for r in self.refunds.values()
            if r.order_id == order_no and r.state in ("processing", "accepted")
        ]
        if not open_:
            return {
                "ok": False,
                "error": "nothing_to_withdraw",
                "message": f"order {order_no} has no refund request to withdraw",
            }, []
        changes = []
        for refund in open_:
            changes.append(Change("refund", refund.id, refund.state, "withdrawn"))
            refund.state = "withdrawn"
        accepted = sum(
            r.amount_minor
            for r in self.refunds.values()
            if r.order_id == order.id and r.state == "accepted"
        )
        if accepted >= order.paid_amount_minor:
            new_state = "refunded"
        elif accepted > 0:
            new_state = "partially_refunded"
        else:
            new_state = self._base_state.get(order.id, order.state)
        if new_state != order.state:
            changes.append(Change("order", order.id, order.state, new_state))
            order.state = new_state
        return {"ok": True, "withdrawn": [self.refund_view(r) for r in open_]}, changes

    def commit_held(self, refund_id: str) -> list[Change]:
        """Process a received refund: it is accepted and the order's state follows."""
        refund = self.refunds[refund_id]
        if refund.state != "processing":
            return []
        changes = [Change("refund", refund.id, refund.state, "accepted")]
        refund.state = "accepted"
        order = self.orders[refund.order_id]
        total = sum(
            r.amount_minor
            for r in self.refunds.values()
            if r.order_id == order.id and r.state == "accepted"
        )
        new_state = "refunded" if total >= order.paid_amount_minor else "partially_refunded"
        if new_state != order.state:
            changes.append(Change("order", order.id, order.state, new_state))
            order.state = new_state
        return changes

    # -- consistency (what a recovery is verified against)

    def inconsistencies(self, pending: Iterable[str] = ()) -> list[str]:
        """What does not hold together in the model, beyond what already did not at the start:
        a refund of no order, a refund `processing` with no request pending (`pending`: the ids
        of refunds held in the service's backlog) — a half-applied write — or an order whose
        state does not follow its accepted refunds."""
        waiting = set(pending)
        problems: list[str] = []
        for refund in self.refunds.values():
            if refund.order_id not in self.orders:
                problems.append(f"refund {refund.id} names order {refund.order_id}, which is gone")
            if refund.state not in REFUND_STATES:
                problems.append(f"refund {refund.id} is in no known state ({refund.state})")
            if refund.state == "processing" and refund.id not in waiting:
                problems.append(
                    f"refund {refund.id} of order {refund.order_id} is processing with no "
                    "request pending: a half-applied write"
                )
        for order in self.orders.values():
            accepted = sum(
                r.amount_minor
                for r in self.refunds.values()
                if r.order_id == order.id and r.state == "accepted"
            )
            if accepted >= order.paid_amount_minor:
                expected: str | None = "refunded"
            elif accepted > 0:
                expected = "partially_refunded"
            else:
                expected = None
            follows = order.state == expected if expected else order.state not in REFUNDED_STATES
            if not follows:
                problems.append(
                    f"order {order.id} is {order.state}, but its accepted refunds total "
                    f"{accepted} of {order.paid_amount_minor} paid"
                    + (f": expected {expected}" if expected else "")
                )
        return [p for p in problems if p not in self._initial_problems]

    def read_back(self, order_no: str) -> tuple[list[str], list[str]]:
        """Read an order and its refunds through the tools' answers and compare them with what
        is stored: (disagreements, the refund ids read)."""
        stored = {r.id: r for r in self.refunds.values() if r.order_id == order_no}
        problems: list[str] = []
        order = self.orders.get(order_no)
        answer = self.get_order(order_no)
        if order is None or not answer.get("ok"):
            return [f"get_order({order_no}) finds no order"], sorted(stored)
        if answer["order"]["state"] != order.state:
            problems.append(
                f"get_order({order_no}) says {answer['order']['state']}, the store {order.state}"
            )
        listed = {str(x["refundId"]): x for x in self.get_refund(order_no).get("refunds", [])}
        for rid in sorted(set(stored) | set(listed)):
            if rid not in listed:
                problems.append(f"refund {rid} is stored but get_refund({order_no}) misses it")
            elif rid not in stored:
                problems.append(f"get_refund({order_no}) lists {rid}, which is not stored")
            elif (listed[rid]["state"], listed[rid]["amountMinor"]) != (
                stored[rid].state,
                stored[rid].amount_minor,
            ):
                problems.append(
                    f"get_refund({order_no}) says {rid} is {listed[rid]['state']} for "
                    f"{listed[rid]['amountMinor']}, the store {stored[rid].state} for "
                    f"{stored[rid].amount_minor}"
                )
        return problems, sorted(stored)

    def snapshot(self) -> dict[str, Any]:
        return {
            "orders": [self.order_view(o) | {"id": o.id} for o in self.orders.values()],
            "refunds": [
                {
                    "id": r.id,
                    "orderId": r.order_id,
                    "amountMinor": r.amount_minor,
                    "state": r.state,
                }
                for r in self.refunds.values()
            ],
            "accounts": sorted(self.accounts),
        }

    def digest(self) -> str:
        return content_hash(self.snapshot())
