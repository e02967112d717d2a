"""An example agent under test: it reads the OpenAI-style chat request it is given and answers
with one assistant message (a tool call or a reply), as a model behind an API would. Told to
verify (its system message), it reads the shipments back after a lost answer before sending
again; otherwise it sends again.

Reached two ways: the python adapter imports this module and calls `respond`; or
`python {{module}}_agent.py [--port 8000]` serves it over HTTP at http://127.0.0.1:8000/v1 (POST
/v1/chat/completions, GET /v1/models), the way your own agent is reached."""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ORDER_ID = re.compile(r"\b[A-Z][0-9]{5}\b")


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """The next assistant message for the chat request `body`."""
    messages = body["messages"]
    system = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
    careful = "verify" in system.lower()
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    ids = ORDER_ID.findall(said)
    if not ids:
        return _reply("I am sorry to hear that. What is your order number?")
    order_id = ids[-1]
    calls = _calls(messages)
    last_tool, last = calls[-1] if calls else (None, {})

    def call(tool: str) -> dict[str, Any]:
        # The id numbers calls within this conversation: the agent keeps no state between runs.
        function = {"name": tool, "arguments": json.dumps({"order_id": order_id})}
        tool_call = {"id": f"call-{len(calls) + 1}", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [tool_call]}

    if not calls:
        return call("get_order")
    if last_tool == "get_order" and not last.get("ok"):
        return _reply(f"I cannot find order {order_id}; could you check the order number?")
    sent = [answer for tool, answer in calls if tool == "send_replacement" and answer.get("ok")]
    if sent:
        return _done(sent[-1]["shipment"]["id"])
    if last_tool == "send_replacement" and last.get("error") == "not_delivered":
        return _reply("Your order has not been delivered yet, so I cannot replace it.")
    if last_tool == "send_replacement" and careful:
        return call("list_shipments")
    if last_tool == "list_shipments" and last.get("shipments"):
        return _done(last["shipments"][0]["id"])
    if sum(1 for tool, _ in calls if tool == "send_replacement") < 3:
        return call("send_replacement")
    return _reply("I could not send a replacement; let me hand you over to a colleague.")


def _calls(messages: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(tool, answer) of every call so far, in order."""
    names: dict[str, str] = {}
    out = []
    for m in messages:
        for tool_call in m.get("tool_calls") or []:
            names[tool_call["id"]] = tool_call["function"]["name"]
        if m["role"] == "tool":
            try:
                answer = json.loads(m.get("content") or "{}")
            except ValueError:
                answer = {}
            out.append((names.get(m.get("tool_call_id", ""), "?"), answer))
    return out


def _done(shipment_id: str) -> dict[str, Any]:
    return _reply(f"Your replacement is on its way (shipment {shipment_id}).")


def _reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


class _Handler(BaseHTTPRequestHandler):
    """POST /v1/chat/completions answers a chat completion; GET /v1/models is the health entry."""

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "my-agent", "object": "model"}]})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": "not found"})
            return
        length = int(self.headers.get("content-length") or 0)
        message = respond(json.loads(self.rfile.read(length) or b"{}"))
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        self._send(200, {"object": "chat.completion", "choices": [choice]})

    def _send(self, status: int, document: dict[str, Any]) -> None:
        payload = json.dumps(document).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would drown the run's own output."""


def serve(host: str = "127.0.0.1", port: int = 8000) -> ThreadingHTTPServer:
    """The agent's HTTP server at http://HOST:PORT/v1, not yet started (`serve_forever`)."""
    return ThreadingHTTPServer((host, port), _Handler)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve the example agent over HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    options = parser.parse_args()
    server = serve(options.host, options.port)
    print(f"agent at http://{options.host}:{server.server_address[1]}/v1 (Ctrl-C stops it)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.server_close()
