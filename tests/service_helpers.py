"""What the run service's tests share: agents under test as Python entry points that take their
time (so a run can be cancelled or killed midway) or kill their own process, a free loopback
port, and the command that runs `simreport`."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

AGENTS = """
import json, os, re, signal, time

DELAY = {delay}

def respond(body):
    time.sleep(DELAY)
    messages = body["messages"]
    said = " ".join(str(m.get("content") or "") for m in messages if m["role"] == "user")
    found = re.findall(r"B\\d{{4}}-\\d{{4}}-\\d{{4}}", said)
    if not found:
        return {{"role": "assistant", "content": "Could you please tell me your order number?"}}
    done = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
    if not done:
        args = json.dumps({{"order_no": found[-1], "amount_minor": 19900}})
        return {{"role": "assistant", "content": None, "tool_calls": [
            {{"id": "c1", "type": "function",
             "function": {{"name": "create_refund", "arguments": args}}}}]}}
    if len(done) == 1:
        args = json.dumps({{"order_no": found[-1]}})
        return {{"role": "assistant", "content": None, "tool_calls": [
            {{"id": "c2", "type": "function",
             "function": {{"name": "get_refund", "arguments": args}}}}]}}
    return {{"role": "assistant", "content": "Your refund of 199.00 has been accepted."}}

def die(body):
    time.sleep(DELAY)
    os.kill(os.getpid(), signal.SIGKILL)
"""
"""A careful refund agent answering after DELAY seconds (`respond`), and one whose process
dies (`die`)."""


def write_agents(root: Path, module: str, *, delay: float) -> None:
    """The agents as the module `module` in `root` (a run's asset root: the library's parent,
    where python entry points are imported from)."""
    (root / f"{module}.py").write_text(AGENTS.format(delay=delay), encoding="utf-8")


def add_agent(library: Path, name: str, entry: str) -> None:
    """Agent asset `name@1.0.0` in `library`, reached through the python entry `entry`."""
    folder = library / name
    folder.mkdir()
    doc = {
        "kind": "agent",
        "name": name,
        "version": "1.0.0",
        "content": {"adapter": "python", "entry": entry},
    }
    (folder / "1.0.0.json").write_text(json.dumps(doc), encoding="utf-8")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def simreport_command() -> list[str]:
    exe = Path(sys.executable).with_name("simreport")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "simreport.cli"]
