"""An example agent under test for the airline domain: it reads the chat-completions body it is
given and answers with one assistant message (a tool call or a reply), as a model behind an API
would. Its instructions decide how it treats a payment whose answer was lost: told to verify, it
reads the payments back before charging again; otherwise it charges again.

The asset `rebooking-agent@1.0.0` reaches it through the python adapter: a run imports this
module from the asset library's parent folder and calls `respond`."""

from __future__ import annotations

import json
import re
from typing import Any

BOOKING_REF = re.compile(r"\b[A-Z]{2}[0-9]{4}\b")


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The next assistant message for the chat-completions `body`."""
    messages = body["messages"]
    system = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
    careful = "verify" in system.lower()
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    refs = BOOKING_REF.findall(said)
    if not refs:
        return _reply("I am sorry about the cancellation. What is your booking reference?")
    ref = refs[-1]
    calls = _calls(messages)
    last_tool, last = calls[-1] if calls else (None, {})

    def _call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        # The id numbers calls within this conversation: the agent keeps no state between runs.
        call_id = f"call-{tool}-{len(calls) + 1}"
        function = {"name": tool, "arguments": json.dumps(arguments)}
        call = {"id": call_id, "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    if not calls:
        return _call("get_booking", {"booking_ref": ref})
    if last_tool == "get_booking":
        if not last.get("ok"):
            return _reply(f"I cannot find booking {ref}; could you check the booking reference?")
        flight = last["flight"]
        return _call(
            "search_flights", {"origin": flight["origin"], "destination": flight["destination"]}
        )
    if last_tool == "search_flights":
        flights = last.get("flights") or []
        if not flights:
            return _reply("There is no free seat on your route today, I am afraid.")
        return _call("rebook", {"booking_ref": ref, "flight_id": flights[0]["id"]})
    rebooked = next((a for t, a in calls if t == "rebook" and a.get("ok")), None)
    if rebooked is None:
        return _reply("I could not rebook you; let me hand you over to a colleague.")
    flight_id = rebooked["booking"]["flightId"]
    due = int(rebooked.get("fareDifferenceMinor") or 0)
    paid = [a for t, a in calls if t == "pay_fare_difference" and a.get("ok")]
    if due > 0 and not paid:
        if last_tool == "pay_fare_difference" and careful:
            return _call("get_payments", {"booking_ref": ref})
        if last_tool == "get_payments" and last.get("payments"):
            return _done(flight_id)
        if sum(1 for t, _ in calls if t == "pay_fare_difference") < 3:
            return _call("pay_fare_difference", {"booking_ref": ref, "amount_minor": due})
    return _done(flight_id)


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(tool, answer) of every call so far, in order."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        for call in m.get("tool_calls") or []:
            names[call["id"]] = call["function"]["name"]
        if m["role"] == "tool":
            try:
                answer = json.loads(m.get("content") or "{}")
            except ValueError:
                answer = {}
            out.append((names.get(m.get("tool_call_id", ""), "?"), answer))
    return out


def _done(flight_id: str) -> dict[str, Any]:
    return _reply(f"You are now booked on flight {flight_id}. Have a good trip!")


def _reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}
