"""A domain's tools answered by the operator's sandboxes (`environment.realTools`): a call is
`POST {baseUrl}/tools/{tool}` with the arguments as JSON, answered by a JSON object; the state
the invariants read is `GET {baseUrl}/state` when the sandbox serves it. Every request passes
an egress guard: a host the execution policy does not allow is refused before anything is sent.
A transport failure is an error answer, never a crash. The protocol: docs/testbed.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from ....core.errors import SimreportError
from ....core.execution_policy import ExecutionPolicy, Sandbox, host_of

MAX_ANSWER_BYTES = 1_000_000
"""The largest answer a sandbox may send (a larger one is an error answer)."""


class EgressRefused(SimreportError):
    """A request to a host the execution policy does not allow (nothing was sent)."""

    def __init__(self, host: str) -> None:
        super().__init__(f"{host} is not an allowed egress host", expected="a host of `egress`")


class GuardedClient:
    """An HTTP client that sends only to the allowed `host:port`s (redirects are not followed,
    and each request is checked as it leaves, so none can lead elsewhere)."""

    def __init__(self, allowed: Iterable[str], *, timeout: float) -> None:
        self.allowed = frozenset(allowed)
        self._client = httpx.Client(
            timeout=timeout,
            follow_redirects=False,
            trust_env=False,
            event_hooks={"request": [self._guard]},
        )

    def _guard(self, request: httpx.Request) -> None:
        host = host_of(str(request.url))
        if host not in self.allowed:
            raise EgressRefused(host)

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> httpx.Response:
        # Checked before the client opens a connection, too (the hook guards what it sends).
        host = host_of(url)
        if host not in self.allowed:
            raise EgressRefused(host)
        return self._client.request(
            method,
            url,
            json=json,
            headers=dict(headers or {}),
            timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
        )

    def close(self) -> None:
        self._client.close()


@dataclass
class RealTools:
    """The tools of one run bound to sandboxes: tool name → sandbox name, with the policy that
    declares them. Counts what it sent and what failed (failure is data)."""

    bindings: Mapping[str, str]
    policy: ExecutionPolicy
    sent: int = 0
    failed: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    """Sandbox name → calls it answered 401 or 403: the operator's credentials, not the agent."""
    _client: GuardedClient | None = field(default=None, repr=False)

    def bound(self, tool: str) -> bool:
        return tool in self.bindings

    def sandbox(self, tool: str) -> Sandbox:
        return self.policy.sandboxes[self.bindings[tool]]

    def _http(self) -> GuardedClient:
        if self._client is None:
            self._client = GuardedClient(self.policy.allowed_hosts(), timeout=10.0)
        return self._client

    def missing_keys(self) -> dict[str, str]:
        """Sandbox name → the key variable it declares that this process's environment lacks."""
        out = {}
        for name in sorted(set(self.bindings.values())):
            variable = self.policy.sandboxes[name].api_key_env
            if variable and not os.environ.get(variable):
                out[name] = variable
        return out

    def _headers(self, sandbox: Sandbox) -> dict[str, str]:
        token = os.environ.get(sandbox.api_key_env) if sandbox.api_key_env else None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The sandbox's answer to one call, always a map with `ok` (an error answer when the
        call could not be made or its answer is not a JSON object)."""
        sandbox = self.sandbox(tool)
        url = f"{sandbox.base_url}/tools/{tool}"
        try:
            self.sent += 1
            response = self._http().request(
                "POST",
                url,
                json=dict(arguments),
                headers=self._headers(sandbox),
                timeout=float(sandbox.timeout_seconds),
            )
            body = _json_object(response)
        except EgressRefused as exc:
            self.sent -= 1
            return self._failure("egress_refused", str(exc))
        except (httpx.HTTPError, ValueError) as exc:
            return self._failure("sandbox_unreachable", f"{type(exc).__name__}: {exc}")
        if response.status_code in (401, 403):
            name = self.bindings[tool]
            self.refused[name] = self.refused.get(name, 0) + 1
        if body is None:
            return self._failure(
                "sandbox_bad_answer",
                f"the sandbox answered HTTP {response.status_code} without a JSON object",
            )
        if "ok" not in body:
            body = {"ok": response.is_success, **body}
        return body

    def _failure(self, error: str, message: str) -> dict[str, Any]:
        self.failed += 1
        return {"ok": False, "error": error, "message": message}

    def states(self) -> dict[str, dict[str, list[dict[str, Any]]] | None]:
        """Sandbox name → the entity instances its `GET /state` reports ({entity: [instance]}),
        or None when it serves no state (or could not be read)."""
        out: dict[str, dict[str, list[dict[str, Any]]] | None] = {}
        for name in sorted(set(self.bindings.values())):
            sandbox = self.policy.sandboxes[name]
            try:
                response = self._http().request(
                    "GET",
                    f"{sandbox.base_url}/state",
                    headers=self._headers(sandbox),
                    timeout=float(sandbox.timeout_seconds),
                )
                body = _json_object(response) if response.is_success else None
            except (EgressRefused, httpx.HTTPError, ValueError):
                body = None
            entities = body.get("entities") if body is not None else None
            out[name] = (
                {
                    str(k): [dict(i) for i in v if isinstance(i, dict)]
                    for k, v in entities.items()
                    if isinstance(v, list)
                }
                if isinstance(entities, dict)
                else None
            )
        return out

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    if len(response.content) > MAX_ANSWER_BYTES:
        return None
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def binding_problems(
    real_tools: Mapping[str, str],
    mode: str,
    tools: Iterable[str],
    policy: ExecutionPolicy | None,
) -> list[tuple[str, str]]:
    """(dotted path, message) for each binding that cannot run: a tool the domain lacks, a
    sandbox no policy declares, and — isolated_real — a tool left to the fact model."""
    names = sorted(tools)
    declared = policy.sandboxes if policy is not None else {}
    problems = []
    for tool, sandbox in sorted(real_tools.items()):
        if tool not in names:
            problems.append(
                (
                    f"environment.realTools.{tool}",
                    f"{tool!r} is no tool of the domain; expected one of {', '.join(names)}",
                )
            )
        if sandbox not in declared:
            problems.append(
                (
                    f"environment.realTools.{tool}",
                    f"sandbox {sandbox!r} is not declared by "
                    + (
                        "the execution policy"
                        if policy is not None
                        else "any execution policy here (simreport run --policy FILE)"
                    )
                    + "; expected one of "
                    + (", ".join(sorted(declared)) or "none"),
                )
            )
    if mode == "isolated_real":
        unbound = [t for t in names if t not in real_tools]
        if unbound:
            problems.append(
                (
                    "environment.realTools",
                    "backendMode isolated_real answers every tool by a sandbox, but "
                    + ", ".join(unbound)
                    + " has none; expected a sandbox for each, or backendMode hybrid",
                )
            )
    return problems
