"""Agents under test, reached only through their public entry: an `HttpAgent` (OpenAI-compatible
chat completions with tool calls), a `PythonAgent` (`module:function`), a `ReplayAgent`, and
`probe_http_agent`, LOADING's check that an HTTP agent is there (the refund desk's built-in
`ReferenceAgent` is its world's own: kernel/worlds/refund_desk/). The harness only executes the
calls an agent decides. The design: docs/testbed.md.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import socket
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urljoin, urlsplit

from ...core.errors import RunError
from ...core.redaction import redact_secrets, redact_url
from ..world import Decision, DecisionRequest

Decide = Callable[[DecisionRequest], Decision]


class AgentError(RunError):
    """The agent failed at its entry (crashed, timed out, unreachable, answered nonsense); `kind`
    says how (`sut_timeout`, `sut_crashed`, …)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message, kind=kind)


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any] | None
    """None when the agent's arguments were not a JSON object."""
    raw_arguments: str = ""


@dataclass
class AgentStep:
    """One step of the agent: tool calls to execute, or a reply to the user (or neither, when
    the agent produced nothing usable)."""

    tool_calls: list[ToolCall] = field(default_factory=list)
    reply: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    lost: str | None = None
    """The failure kind when the provider's decision for this step was lost (the call failed,
    the answer was unreadable, the prompt too long): not the agent's behaviour, and not silence."""
    sut_task_id: str | None = None
    sut_session_id: str | None = None
    """The SUT's own task and session ids, when its answer carried them (never made up)."""

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "toolCalls": [
                {
                    "id": c.id,
                    "name": c.name,
                    "arguments": c.arguments,
                    "rawArguments": c.raw_arguments,
                }
                for c in self.tool_calls
            ],
            "reply": self.reply,
        }
        if self.lost is not None:
            doc["lost"] = self.lost
        if self.sut_task_id is not None:
            doc["sutTaskId"] = self.sut_task_id
        if self.sut_session_id is not None:
            doc["sutSessionId"] = self.sut_session_id
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> AgentStep:
        return cls(
            tool_calls=[
                ToolCall(
                    str(c["id"]), str(c["name"]), c.get("arguments"), str(c.get("rawArguments", ""))
                )
                for c in doc.get("toolCalls", [])
            ],
            reply=doc.get("reply"),
            lost=doc.get("lost"),
            sut_task_id=doc.get("sutTaskId"),
            sut_session_id=doc.get("sutSessionId"),
        )


@dataclass
class Session:
    """The conversation as the agent sees it (OpenAI chat format)."""

    system: str | None
    messages: list[dict[str, Any]] = field(default_factory=list)
    sut_task_id: str | None = None
    sut_session_id: str | None = None
    """The SUT's own ids as it returned them in this conversation (its task's id carried over
    into the task's later sessions); sent back in each request's `metadata` once known."""

    def metadata(self) -> dict[str, str]:
        """The SUT's ids known so far, as a request's `metadata` (empty: none known)."""
        ids = {"task_id": self.sut_task_id, "session_id": self.sut_session_id}
        return {k: v for k, v in ids.items() if v is not None}

    def user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def assistant(self, step: AgentStep) -> None:
        message: dict[str, Any] = {"role": "assistant", "content": step.reply}
        if step.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.name,
                        "arguments": c.raw_arguments
                        or json.dumps(c.arguments or {}, sort_keys=True),
                    },
                }
                for c in step.tool_calls
            ]
        self.messages.append(message)

    def tool(self, call_id: str, body: Mapping[str, Any]) -> None:
        self.messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps(body, sort_keys=True)}
        )

    def payload(self) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + [dict(m) for m in self.messages]


class AgentAdapter(ABC):
    """The agent's public entry."""

    adapter = "agent"

    @abstractmethod
    def step(self, session: Session) -> AgentStep:
        """The agent's next step given the conversation so far."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    @property
    def secrets(self) -> tuple[str, ...]:
        """Texts the adapter holds that no record may (an API key)."""
        return ()


# --------------------------------------------------------------------------- external agents


def parse_assistant(doc: Any, serial: Callable[[], str]) -> AgentStep:
    """An assistant message (or a chat completion holding one) as an agent step."""
    if isinstance(doc, Mapping) and "choices" in doc:
        choices = doc.get("choices") or []
        if not choices or not isinstance(choices[0], Mapping):
            raise AgentError("sut_bad_response", "the completion has no choices")
        message = choices[0].get("message")
        usage = doc.get("usage") or {}
    else:
        message, usage = doc, {}
    if not isinstance(message, Mapping):
        raise AgentError("sut_bad_response", "the agent's answer is not an assistant message")
    calls: list[ToolCall] = []
    for raw in message.get("tool_calls") or []:
        if not isinstance(raw, Mapping):
            raise AgentError("sut_bad_response", "a tool call is not an object")
        fn = raw.get("function") or {}
        name = str(fn.get("name", ""))
        arguments_raw = fn.get("arguments", "{}")
        parsed: dict[str, Any] | None
        if isinstance(arguments_raw, Mapping):
            parsed, text = dict(arguments_raw), json.dumps(arguments_raw, sort_keys=True)
        else:
            text = str(arguments_raw)
            try:
                value = json.loads(text or "{}")
            except json.JSONDecodeError:
                value = None
            parsed = dict(value) if isinstance(value, dict) else None
        calls.append(ToolCall(str(raw.get("id") or serial()), name, parsed, text))
    content = message.get("content")
    reply = str(content) if isinstance(content, str) and content.strip() and not calls else None
    tokens = {
        k: int(v)
        for k, v in usage.items()
        if k in ("prompt_tokens", "completion_tokens") and isinstance(v, int)
    }
    task_id, session_id = sut_ids(doc, message)
    return AgentStep(
        tool_calls=calls,
        reply=reply,
        usage=tokens,
        sut_task_id=task_id,
        sut_session_id=session_id,
    )


def sut_ids(*docs: Any) -> tuple[str | None, str | None]:
    """The SUT's own task and session ids from the `metadata` ({task_id, session_id}) of the
    first of `docs` that has each (a completion, then its message); a string or an integer,
    anything else is no id."""
    found: dict[str, str | None] = {"task_id": None, "session_id": None}
    for doc in docs:
        metadata = doc.get("metadata") if isinstance(doc, Mapping) else None
        if not isinstance(metadata, Mapping):
            continue
        for key in found:
            found[key] = found[key] or _id_text(metadata.get(key))
    return found["task_id"], found["session_id"]


def _id_text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


class _ChatAgent(AgentAdapter):
    """An agent that takes an OpenAI-style chat request with tools."""

    def __init__(self, model: str | None, tools: list[dict[str, Any]]) -> None:
        self.model = model
        self.tools = tools
        self._serial = 0

    def _next_id(self) -> str:
        self._serial += 1
        return f"call-{self._serial:04d}"

    def request_body(self, session: Session) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messages": session.payload(),
            "tools": self.tools,
            "tool_choice": "auto",
            "temperature": 0,
        }
        if self.model:
            body["model"] = self.model
        if metadata := session.metadata():
            body["metadata"] = metadata
        return body

    @abstractmethod
    def complete(self, body: dict[str, Any]) -> Any:
        """Send the request; return the decoded answer."""

    def step(self, session: Session) -> AgentStep:
        return parse_assistant(self.complete(self.request_body(session)), self._next_id)


class HttpAgent(_ChatAgent):
    """An agent behind an OpenAI-compatible `/chat/completions` endpoint."""

    adapter = "http"

    def __init__(
        self,
        entry: str,
        model: str | None,
        tools: list[dict[str, Any]],
        *,
        timeout: float,
        api_key_env: str | None = None,
        traceparent: Callable[[], str] | None = None,
    ) -> None:
        import httpx

        super().__init__(model, tools)
        self.url = entry.rstrip("/") + "/chat/completions"
        headers = {"content-type": "application/json"}
        key = os.environ.get(api_key_env, "").strip() if api_key_env else ""
        # Kept only to blank it out of error texts: a server may echo request headers.
        self._secret = key or None
        if key:
            headers["authorization"] = f"Bearer {key}"
        self._client = httpx.Client(timeout=timeout, headers=headers)
        self._traceparent = traceparent
        self._answer_ids: tuple[str | None, str | None] = (None, None)

    @property
    def secrets(self) -> tuple[str, ...]:
        return (self._secret,) if self._secret else ()

    def redact(self, text: str) -> str:
        """`text` with the API key blanked out, in whatever form an error quotes it."""
        return redact_secrets(text, [self._secret]) if self._secret else text

    def step(self, session: Session) -> AgentStep:
        """One step; the SUT's ids from the answer's body, else its `X-Task-Id` and
        `X-Session-Id` headers."""
        step = super().step(session)
        task_id, session_id = self._answer_ids
        step.sut_task_id = step.sut_task_id or task_id
        step.sut_session_id = step.sut_session_id or session_id
        return step

    def complete(self, body: dict[str, Any]) -> Any:
        try:
            return self._complete(body)
        except AgentError as exc:
            # Every error text (a body, an exception's text, the URL) passes here once.
            raise AgentError(exc.kind, self.redact(exc.message)) from None

    def _complete(self, body: dict[str, Any]) -> Any:
        import httpx

        headers = {"traceparent": self._traceparent()} if self._traceparent else {}
        known = body.get("metadata") or {}
        for key, header in (("task_id", "x-task-id"), ("session_id", "x-session-id")):
            if key in known:
                headers[header] = known[key]
        self._answer_ids = (None, None)
        try:
            response = self._client.post(self.url, json=body, headers=headers)
        except httpx.TimeoutException:
            raise AgentError("sut_timeout", f"no answer from {self.url} in time") from None
        except httpx.HTTPError as exc:
            raise AgentError(
                "sut_unreachable", f"{self.url}: {type(exc).__name__}: {exc}"
            ) from None
        self._answer_ids = (
            _id_text(response.headers.get("x-task-id")),
            _id_text(response.headers.get("x-session-id")),
        )
        if response.status_code >= 400:
            raise AgentError(
                "sut_error",
                f"{self.url} answered HTTP {response.status_code}: "
                + self.redact(response.text)[:200],
            )
        try:
            return response.json()
        except ValueError:
            raise AgentError("sut_bad_response", f"{self.url} did not answer JSON") from None

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class Probe:
    """Whether the agent under test answered the probe made while loading."""

    method: str
    """`connect` (a TCP connection to the entry's host and port) or `GET` (the health entry)."""
    target: str
    """What was probed: host:port, or the health URL (credentials redacted)."""
    reachable: bool
    kind: str | None
    """None when reachable; else sut_unreachable (no connection, no answer in time) or
    sut_unhealthy (the health entry answered with an error status)."""
    detail: str

    def to_doc(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "target": self.target,
            "reachable": self.reachable,
            "kind": self.kind,
            "detail": self.detail,
        }


def health_url(entry: str, health: str) -> str:
    """The URL a health entry names: absolute, or resolved against the entry as a browser would
    resolve a link on the page `<entry>/` (`models` → `<entry>/models`, `/health` → `/health` on
    the entry's host)."""
    return urljoin(entry.rstrip("/") + "/", health)


def probe_http_agent(
    entry: str, health: str | None, *, timeout: float, api_key_env: str | None = None
) -> Probe:
    """Ask whether an HTTP agent is there, without calling it: GET its health entry when it
    declares one (with the same credentials a call would carry), else open and close a TCP
    connection to its entry's host and port. Never raises; the answer says why not."""
    key = os.environ.get(api_key_env, "").strip() if api_key_env else ""

    def clean(text: str) -> str:
        return redact_secrets(text, [key or None])

    if health is not None:
        import httpx

        url = health_url(entry, health)
        shown = redact_url(url)
        headers = {"authorization": f"Bearer {key}"} if key else {}
        try:
            response = httpx.get(url, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            detail = f"the health entry {shown} did not answer within {timeout:g} s"
            return Probe("GET", shown, False, "sut_unreachable", detail)
        except httpx.HTTPError as exc:
            detail = clean(f"the health entry {shown} is unreachable: {type(exc).__name__}: {exc}")
            return Probe("GET", shown, False, "sut_unreachable", detail)
        if response.status_code >= 400:
            detail = f"the health entry {shown} answered HTTP {response.status_code}"
            return Probe("GET", shown, False, "sut_unhealthy", detail)
        return Probe("GET", shown, True, None, f"{shown} answered HTTP {response.status_code}")
    parts = urlsplit(entry)
    host = parts.hostname
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        shown = redact_url(entry)
        return Probe("connect", shown, False, "sut_unreachable", f"{shown} has no valid port")
    target = f"{host}:{port}"
    if not host:
        shown = redact_url(entry)
        return Probe("connect", shown, False, "sut_unreachable", f"{shown} names no host")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except TimeoutError:
        detail = f"{target} did not accept a connection within {timeout:g} s"
        return Probe("connect", target, False, "sut_unreachable", detail)
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        return Probe(
            "connect", target, False, "sut_unreachable", f"cannot connect to {target}: {why}"
        )
    return Probe("connect", target, True, None, f"{target} accepted a connection")


def resolve_entry(entry: str, search: Path | None) -> Callable[..., Any]:
    """`module:function` → the function. The scenario's folder is searched first."""
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise AgentError("manifest_unresolved", f"entry {entry!r} is not module:function")
    module = _entry_module(module_name, search)
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise AgentError("manifest_unresolved", f"{module_name!r} has no {attr!r}")
    if not callable(target):
        raise AgentError("manifest_unresolved", f"{entry!r} is not callable")
    return target  # type: ignore[no-any-return]


def _entry_module(module_name: str, search: Path | None) -> ModuleType:
    """The module an entry names. Code in the scenario's folder is imported under a name made
    from its folder and its content, so that neither another scenario's module of the same name
    nor this one before an edit is what a long-lived process (a worker) hands the run."""
    files = entry_files(module_name, search) if search is not None else []
    if search is None or not files:
        try:
            return importlib.import_module(module_name)
        except ImportError as exc:
            raise AgentError(
                "manifest_unresolved", f"cannot import {module_name!r}: {exc}"
            ) from None
    digest = hashlib.sha256(str(search.resolve()).encode())
    for path in files:
        digest.update(b"\0" + path.relative_to(search).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    top, _, rest = module_name.partition(".")
    alias = f"_simreport_entry_{digest.hexdigest()[:16]}_{top}"
    # The folder is on the path while the entry imports, for its own imports of its neighbours.
    added = str(search) not in sys.path
    if added:
        sys.path.insert(0, str(search))
    try:
        if alias not in sys.modules:
            _load_as(alias, search / top)
        return importlib.import_module(f"{alias}.{rest}" if rest else alias)
    except AgentError:
        raise
    except Exception as exc:  # failure is data: the run fails in LOADING, naming the import
        raise AgentError(
            "manifest_unresolved", f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        if added:
            sys.path.remove(str(search))


def _load_as(alias: str, path: Path) -> None:
    """Import the module file `path.py`, or the package folder `path`, as `alias`."""
    package = (path / "__init__.py").is_file()
    spec = importlib.util.spec_from_file_location(
        alias,
        path / "__init__.py" if package else path.with_suffix(".py"),
        submodule_search_locations=[str(path)] if package else None,
    )
    if spec is None or spec.loader is None:
        raise AgentError("manifest_unresolved", f"cannot import {path.name!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[alias]
        raise


def entry_files(entry: str, search: Path) -> list[Path]:
    """The files of a `module:function` entry's code that `resolve_entry` imports from `search`
    (the scenario's folder): the module's file, or every module of its top package. Empty for
    code imported from elsewhere (an installed package belongs to the environment)."""
    top = entry.partition(":")[0].split(".")[0]
    if not top:
        return []
    package = search / top
    if (package / "__init__.py").is_file():
        return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    module = search / f"{top}.py"
    return [module] if module.is_file() else []


class PythonAgent(_ChatAgent):
    """An agent as a Python function: request body in, assistant message out."""

    adapter = "python"

    def __init__(
        self, function: Callable[..., Any], model: str | None, tools: list[dict[str, Any]]
    ) -> None:
        super().__init__(model, tools)
        self.function = function

    def complete(self, body: dict[str, Any]) -> Any:
        try:
            return self.function(body)
        except Exception as exc:  # failure is data: whatever the agent's code raises is its crash
            raise AgentError("sut_crashed", f"{type(exc).__name__}: {exc}") from None


class ReplayAgent(AgentAdapter):
    """Plays back an external agent's recorded steps, in order."""

    adapter = "replay"

    def __init__(
        self, steps: Sequence[Mapping[str, Any]], failure: tuple[str, str] | None = None
    ) -> None:
        self._steps = list(steps)
        self._failure = failure

    def step(self, session: Session) -> AgentStep:
        if not self._steps:
            if self._failure is not None:
                # The recorded agent failed at its entry here: it fails the same way.
                kind, message = self._failure
                self._failure = None
                raise AgentError(kind, message)
            raise AgentError("replay_exhausted", "the recorded run has no further agent step")
        return AgentStep.from_doc(self._steps.pop(0))
