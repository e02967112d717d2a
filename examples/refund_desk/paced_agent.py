"""An agent under test that takes its time: it answers as a careful refund agent would, each
turn after PAUSE_SECONDS, as an agent behind a model's API does. Offline runs of the reference
agent end within a second; a run of this one lasts a few seconds, long enough to follow its
events as they arrive and to cancel it while it runs (see "The run service" in the README).

The asset `paced-agent@1.0.0` reaches it through the python adapter: a run imports this module
from the asset library's parent folder and calls `respond` with the conversation so far."""

from __future__ import annotations

import json
import re
import time
from typing import Any

PAUSE_SECONDS = 2.0
ORDER_NUMBER = re.compile(r"B\d{4}-\d{4}-\d{4}")


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The next assistant message for the chat-completions `body`: ask for the order number,
    submit the refund once, check its state after the answer (which may be lost), then close."""
    time.sleep(PAUSE_SECONDS)
    messages = body["messages"]
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    orders = ORDER_NUMBER.findall(said)
    if not orders:
        return {"role": "assistant", "content": "Could you please tell me your order number?"}
    answers = [m for m in messages if m["role"] == "tool"]
    if not answers:
        return _call("create_refund", {"order_no": orders[-1], "amount_minor": 19900})
    if len(answers) == 1:
        return _call("get_refund", {"order_no": orders[-1]})
    return {"role": "assistant", "content": "Your refund of 199.00 has been accepted."}


def _call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": tool, "arguments": json.dumps(arguments)}
    call = {"id": f"call-{tool}", "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}
