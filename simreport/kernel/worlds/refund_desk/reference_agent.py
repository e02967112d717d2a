"""The built-in agent under test of the refund desk, `ReferenceAgent`: an LLM tool-calling agent
whose every step is a provider decision among named actions."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...testbed.agents import AgentAdapter, AgentStep, Decide, Session, ToolCall
from ...testbed.assets import PromptAsset, ToolSpec
from ...world import DecisionRequest
from .user import amounts_in, format_amount

# The actions the reference agent chooses among. Their words are distinct on purpose: a reader of
# the prompt (a model, or the offline stand-in) is swayed by which of them the instructions and
# the situation use.
ASK = "ask for the order number"
LOOK_UP = "look up the order"
CREATE = "submit the refund"
CREATE_AGAIN = "submit it again"
CHECK = "check the status"
REPLY = "send a reply"
WITHDRAW = "withdraw the request"
# A customer asking to take their refund request back.
_WITHDRAW_ASK = re.compile(r"\b(withdraw|cancel|call off|take back)\b", re.IGNORECASE)


@dataclass
class _View:
    """What the reference agent has gathered from the conversation."""

    order_no: str | None = None
    user_amount: int | None = None
    order: dict[str, Any] | None = None
    refunds: list[dict[str, Any]] | None = None
    create_outcome: str | None = None
    created: dict[str, Any] | None = None
    last_tool: tuple[str, str, dict[str, Any]] | None = None
    last_user: str = ""
    steps_this_turn: int = 0
    withdraw_asked: bool = False
    """The customer asked to withdraw the refund request."""
    withdrawal: str | None = None
    """The outcome of the last withdrawal call since then ("ok" or the error)."""


class ReferenceAgent(AgentAdapter):
    """The built-in SUT: an LLM tool-calling agent whose every step is a provider decision."""

    adapter = "reference"

    def __init__(
        self,
        prompt: PromptAsset,
        tools: Sequence[ToolSpec],
        decide: Decide,
        *,
        script: Sequence[str] = (),
    ) -> None:
        self.prompt = prompt
        self.decide = decide
        self.by_operation: dict[str, ToolSpec] = {t.operation: t for t in tools}
        self.by_name = {t.name: t for t in tools}
        order_tool = self.by_operation.get("get_order") or next(iter(tools))
        param = order_tool.parameters.get("order_no")
        self.order_pattern = param.pattern if param and param.pattern else r"[A-Z0-9][A-Z0-9-]{5,}"
        self.script = list(script)
        self._serial = 0

    # -- reading the conversation

    def _view(self, session: Session) -> _View:
        view = _View()
        names: dict[str, str] = {}
        for message in session.messages:
            role = message["role"]
            if role == "user":
                text = str(message.get("content") or "")
                view.last_user = text
                view.steps_this_turn = 0
                found = re.findall(self.order_pattern.strip("^$"), text)
                if found:
                    view.order_no = found[-1]
                amounts = amounts_in(text)
                if amounts:
                    view.user_amount = amounts[-1]
                if _WITHDRAW_ASK.search(text):
                    # A (renewed) request to withdraw: any earlier attempt is behind it.
                    view.withdraw_asked, view.withdrawal = True, None
            elif role == "assistant":
                for call in message.get("tool_calls") or []:
                    names[call["id"]] = call["function"]["name"]
                    view.steps_this_turn += 1
            elif role == "tool":
                name = names.get(str(message.get("tool_call_id")), "")
                body = json.loads(str(message.get("content") or "{}"))
                operation = self.by_name[name].operation if name in self.by_name else ""
                outcome = "ok" if body.get("ok") else str(body.get("error", "error"))
                view.last_tool = (operation, outcome, body)
                if operation == "get_order" and body.get("ok"):
                    view.order = body["order"]
                elif operation == "get_refund" and body.get("ok"):
                    view.refunds = list(body["refunds"])
                elif operation == "withdraw_refund" and view.withdraw_asked:
                    view.withdrawal = outcome
                elif operation == "create_refund":
                    view.create_outcome = outcome
                    if body.get("ok"):
                        view.created = body["refund"]
        return view

    def _confirmed(self, view: _View) -> dict[str, Any] | None:
        if view.created is not None and view.created.get("state") == "accepted":
            return view.created
        for refund in view.refunds or []:
            if refund.get("state") == "accepted":
                return refund
        return None

    def _processing(self, view: _View) -> bool:
        return any(r.get("state") == "processing" for r in view.refunds or []) or (
            view.created is not None and view.created.get("state") == "processing"
        )

    def _options(self, view: _View) -> tuple[str, ...]:
        if view.withdraw_asked and "withdraw_refund" in self.by_operation:
            if view.withdrawal is not None or view.order_no is None:
                return (REPLY, CHECK) if view.order_no is not None else (ASK, REPLY)
            return (WITHDRAW, REPLY, CREATE_AGAIN)
        if self._confirmed(view) is not None:
            return (REPLY, CHECK)
        if view.order_no is None:
            return (ASK, LOOK_UP, REPLY)
        if self._processing(view):
            return (CHECK, REPLY, CREATE_AGAIN)
        if view.create_outcome in ("timeout", "connection_failed", "service_unavailable"):
            if view.refunds == [] and view.last_tool and view.last_tool[0] == "get_refund":
                return (CREATE_AGAIN, REPLY, CHECK)
            return (CHECK, CREATE_AGAIN, REPLY)
        if view.order is None:
            return (LOOK_UP, CREATE, REPLY)
        return (CREATE, CHECK, REPLY)

    def _situation(self, view: _View) -> str:
        lines = [f'The customer wrote: "{view.last_user}"']
        if view.order_no is None:
            lines.append(
                "You do not have the order number yet, and no tool can find the order without "
                "it: ask for the order number."
            )
        else:
            lines.append(f"The customer gave {view.order_no}.")
        if view.order is not None:
            paid = format_amount(int(view.order["paidAmountMinor"]))
            lines.append(
                f"Order {view.order['orderNo']}: paid {paid}, state {view.order['state']}."
            )
        if view.last_tool is not None:
            operation, outcome, body = view.last_tool
            lines.append(_describe(operation, outcome, body))
        if view.withdraw_asked:
            lines.append("The customer wants to withdraw the refund request.")
        confirmed = self._confirmed(view)
        if confirmed is not None and not view.withdraw_asked:
            lines.append("The refund went through and is accepted: send a reply to say so.")
        lines.append(f"Steps taken since the customer's last message: {view.steps_this_turn}.")
        return "\n".join(lines)

    # -- acting

    def _call(self, operation: str, arguments: dict[str, Any]) -> AgentStep:
        spec = self.by_operation.get(operation)
        name = spec.name if spec is not None else operation
        if self.script:
            # Tool selection is outside the boundary here: the scenario's script names the tool.
            name = self.script.pop(0)
            spec = self.by_name.get(name)
        self._serial += 1
        args = {k: v for k, v in arguments.items() if v is not None}
        if spec is not None:
            args = {k: v for k, v in args.items() if k in spec.parameters}
        return AgentStep(
            tool_calls=[
                ToolCall(f"ref-{self._serial:04d}", name, args, json.dumps(args, sort_keys=True))
            ]
        )

    def _reply(self, view: _View) -> str:
        if view.withdraw_asked and view.withdrawal == "ok":
            return f"Your refund request for order {view.order_no} has been withdrawn."
        if view.withdraw_asked and view.withdrawal is not None:
            return "I could not withdraw the refund request right now. Please wait a moment."
        confirmed = self._confirmed(view)
        if confirmed is not None:
            return (
                f"Your refund of {format_amount(int(confirmed['amountMinor']))} for order "
                f"{confirmed['orderNo']} has been accepted."
            )
        if self._processing(view):
            return "Your refund request is being processed. Please wait a moment."
        if view.create_outcome == "timeout":
            return "I have sent your refund request. Please wait a moment while it goes through."
        if view.create_outcome is not None:
            return "Sorry, our refund system is not responding right now. Please wait a moment."
        if view.order is not None:
            return f"I found your order {view.order['orderNo']}. I will start the refund now."
        return "I am sorry for the trouble. I will help you with your refund."

    def step(self, session: Session) -> AgentStep:
        view = self._view(session)
        options = self._options(view)
        request = DecisionRequest(
            situation=self._situation(view),
            instructions=self.prompt.instructions,
            options=options,
            memory=_memory(session, self.prompt.memory_window),
            goals=self.prompt.goals,
            view={"state": options[0]},
            kind="agent_action",
        )
        decision = self.decide(request)
        if decision.option is None:
            return AgentStep(lost=decision.failure or "lost")
        amount = int(view.order["paidAmountMinor"]) if view.order is not None else view.user_amount
        if decision.option == ASK:
            return AgentStep(reply="Could you please tell me your order number?")
        if decision.option == LOOK_UP:
            return self._call("get_order", {"order_no": view.order_no})
        if decision.option in (CREATE, CREATE_AGAIN):
            return self._call("create_refund", {"order_no": view.order_no, "amount_minor": amount})
        if decision.option == CHECK:
            return self._call("get_refund", {"order_no": view.order_no})
        if decision.option == WITHDRAW:
            return self._call("withdraw_refund", {"order_no": view.order_no})
        return AgentStep(reply=self._reply(view))


def _describe(operation: str, outcome: str, body: Mapping[str, Any]) -> str:
    # Worded without the actions' own words, so the situation states facts and the agent's
    # instructions decide what to do about them.
    if outcome == "timeout":
        return (
            "Your last call timed out: no response came back, so whether it went through is "
            "unknown."
        )
    if outcome == "connection_failed":
        return "Your last call could not connect: the request never left."
    if outcome != "ok":
        return f"Your last call failed: {body.get('message', outcome)}."
    if operation == "get_refund":
        refunds = body.get("refunds") or []
        if not refunds:
            return "There is no refund on record for this order."
        parts = [
            f"refund {r['refundId']} of {format_amount(int(r['amountMinor']))} ({r['state']})"
            for r in refunds
        ]
        return "On record for this order: " + "; ".join(parts) + "."
    if operation == "create_refund":
        refund = body["refund"]
        return f"Refund {refund['refundId']} was registered ({refund['state']})."
    return f"The {operation.replace('_', ' ') or 'call'} went through."


def _memory(session: Session, window: int) -> tuple[Mapping[str, Any], ...]:
    items: list[dict[str, Any]] = []
    for message in session.messages:
        role = message["role"]
        if role == "user":
            items.append({"speaker": "customer", "text": f"Customer: {message['content']}"})
        elif role == "assistant" and message.get("content"):
            items.append({"speaker": "you", "text": f"You: {message['content']}"})
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                fn = call["function"]
                items.append(
                    {"speaker": "you", "text": f"You called {fn['name']} {fn['arguments']}."}
                )
        elif role == "tool":
            items.append({"speaker": "tool", "text": f"Tool answered: {message['content']}"})
    return tuple(items[-window:]) if window > 0 else ()
