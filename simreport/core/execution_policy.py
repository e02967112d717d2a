"""The execution policy (SPEC §11a): what a run may execute and which hosts and secrets it may
reach, as the operator declares it in a policy file (`simreport api --policy FILE`), and who may
approve and publish a version in review (`review:`, `ReviewPolicy`).

A spec sent over HTTP only names declared resources: `spec_issues` lists what it carries that a
client may not send, and `resolve_llm` and `resolve_simulator` turn names into settings when a
run starts. The file's format and the design: docs/core.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from .errors import RunError, SchemaError, ValidationIssue
from .schema import RESOURCE_NAME, LLMConfig, Model
from .values import Int64, Name, Number

if TYPE_CHECKING:
    from .schema import Scenario

ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BASE_ENVIRONMENT: Final = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR")
"""What a declared simulator's process gets of the environment besides the variables its
declaration lists."""
DEFAULT_PROVIDERS: Final = ("offline",)


def _env_name(value: str | None) -> str | None:
    if value is not None and not ENV_NAME.match(value):
        raise ValueError(f"{value!r} is not an environment variable name")
    return value


class Endpoint(Model):
    """A model endpoint that speaks the OpenAI Chat Completions protocol, with its limits."""

    base_url: str = Field(description="The API root, e.g. http://gpu.internal:8000/v1.")
    api_key_env: str | None = Field(
        None, description="The environment variable of the worker holding the endpoint's key."
    )
    models: list[Name] = Field(
        min_length=1, description="The model names a spec may ask of this endpoint."
    )
    max_tokens: Int64 | None = Field(
        None, ge=1, description="The most completion tokens a spec may ask per decision."
    )
    budget_calls: Int64 | None = Field(
        None, ge=1, description="The most requests one run sends (the spec's, when lower)."
    )
    budget_tokens: Int64 | None = Field(
        None, ge=1, description="The most tokens one run spends (the spec's, when lower)."
    )
    timeout_seconds: Number | None = Field(
        None, gt=0, description="The longest one request may take (the spec's, when shorter)."
    )

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"^https?://[^/?#\s]+", value.strip()):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.strip()

    @field_validator("api_key_env")
    @classmethod
    def _variable(cls, value: str | None) -> str | None:
        return _env_name(value)

    @field_validator("models")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        if any(not m.strip() for m in value):
            raise ValueError("a model name is empty")
        return value


class Simulator(Model):
    """An external simulator the operator lets runs execute."""

    command: list[Name] = Field(
        min_length=1,
        description="Program and arguments; simreport appends --config, --seed and --out.",
    )
    timeout_seconds: Number | None = Field(
        None, gt=0, description="The longest a run of it may take (the spec's, when shorter)."
    )
    environment: list[str] = Field(
        default_factory=list,
        description="Environment variables it gets besides " + ", ".join(BASE_ENVIRONMENT) + ".",
    )

    @field_validator("environment")
    @classmethod
    def _variables(cls, value: list[str]) -> list[str]:
        for name in value:
            _env_name(name)
        return value


class Sandbox(Model):
    """A team's sandbox that answers a domain's tools for real (`environment.realTools`): each
    call is `POST {baseUrl}/tools/{tool}` with the arguments as JSON; docs/testbed.md."""

    base_url: str = Field(description="The sandbox's root, e.g. http://payments.sandbox:8080.")
    api_key_env: str | None = Field(
        None,
        description="The environment variable holding a bearer token the calls carry.",
    )
    timeout_seconds: Number = Field(
        10.0, gt=0, le=600, description="The longest one call may take before it fails."
    )

    @field_validator("base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if not re.match(r"^https?://[^/?#\s]+", value.strip()):
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value.strip().rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _variable(cls, value: str | None) -> str | None:
        return _env_name(value)

    def host(self) -> str:
        """`host:port` of the sandbox (the scheme's port when the URL names none)."""
        return host_of(self.base_url)


def host_of(url: str) -> str:
    """`host:port` of an http(s) URL, the port the scheme's when the URL names none."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{(parts.hostname or '').lower()}:{port}"


RiskLevel = Literal["low", "medium", "high"]


class ReviewPolicy(Model):
    """Who may approve a version (reviewing → reviewed) and publish it (reviewed → online, with
    the risk sign-off of a high-risk scenario): by default anyone but its author, who created
    or submitted it. The operator may let authors approve their own versions where it matters
    less."""

    self_approval: list[RiskLevel] = Field(
        default_factory=list,
        description=(
            "Risk levels (low, medium, high) at which a scenario version's author may also "
            "approve and publish it, and sign off its risk. Default: none."
        ),
    )
    asset_self_approval: bool = Field(
        False,
        description="Whether an asset version's author may also approve and publish it.",
    )

    def allows_self_approval(self, kind: str, risk_level: str | None) -> bool:
        """Whether the author of a `kind` version (scenario, asset) of `risk_level` may approve
        and publish it."""
        if kind == "asset":
            return self.asset_self_approval
        return risk_level in self.self_approval


class ExecutionPolicy(Model):
    """What runs started over the run service may execute and reach, and who may approve and
    publish versions in review."""

    providers: list[str] = Field(
        default_factory=lambda: list(DEFAULT_PROVIDERS),
        description="Providers a spec may name itself (`llm.provider`): ones that reach no host.",
    )
    endpoints: dict[str, Endpoint] = Field(
        default_factory=dict, description="Model endpoints by name (`llm.endpoint`)."
    )
    simulators: dict[str, Simulator] = Field(
        default_factory=dict, description="External simulators by name (`simulator.name`)."
    )
    review: ReviewPolicy = Field(
        default_factory=ReviewPolicy,
        description="Who may approve and publish scenario and asset versions.",
    )
    sandboxes: dict[str, Sandbox] = Field(
        default_factory=dict,
        description="Sandboxes answering domain tools for real, by name (`environment.realTools`).",
    )
    egress: list[str] | None = Field(
        None,
        description=(
            "The hosts (`host:port`) real tool calls may reach; every sandbox's host must be "
            "one. Unset: the hosts of the declared sandboxes."
        ),
    )

    @field_validator("egress")
    @classmethod
    def _hosts(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for host in value:
            if not re.fullmatch(r"[A-Za-z0-9.\-]+:[0-9]{1,5}|\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}", host):
                raise ValueError(f"{host!r} is not host:port")
        return [h.lower() for h in value]

    @model_validator(mode="after")
    def _sandboxes_reachable(self) -> ExecutionPolicy:
        if self.egress is None:
            return self
        for name, sandbox in self.sandboxes.items():
            if sandbox.host() not in self.egress:
                raise ValueError(
                    f"sandboxes.{name}.baseUrl reaches {sandbox.host()}, which egress does not "
                    "allow; expected one of " + (", ".join(self.egress) or "none")
                )
        return self

    def allowed_hosts(self) -> frozenset[str]:
        """The `host:port`s real tool calls may reach (`egress`, or the sandboxes' hosts)."""
        if self.egress is not None:
            return frozenset(self.egress)
        return frozenset(s.host() for s in self.sandboxes.values())

    @field_validator("endpoints", "simulators", "sandboxes")
    @classmethod
    def _resource_names(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if not re.match(RESOURCE_NAME, name):
                raise ValueError(
                    f"{name!r} is not a resource name (letters, digits, '.', '_' and '-')"
                )
        return value

    def key_variables(self) -> list[str]:
        """The environment variables the policy's endpoints and sandboxes read keys from."""
        keys = [e.api_key_env for e in self.endpoints.values()]
        keys += [s.api_key_env for s in self.sandboxes.values()]
        return sorted({k for k in keys if k})


def load_policy(path: str | Path) -> ExecutionPolicy:
    """The policy in `path` (YAML or JSON), or InputError/SchemaError naming the file and the
    path inside it."""
    from .files import load_document
    from .validation import validate_model

    document = load_document(path)
    if document.data is None:
        return ExecutionPolicy()
    return validate_model(ExecutionPolicy, document.data, document=document)


# --------------------------------------------------------------------------- what a client may send


def _one_of(names: Iterator[str] | list[str], none: str) -> str:
    found = sorted(names)
    return "one of " + ", ".join(found) if found else none


def spec_issues(
    scenario: Scenario, policy: ExecutionPolicy, *, agent_entry: str | None = None
) -> list[ValidationIssue]:
    """Everything `scenario` carries that a client of the run service may not send under
    `policy`, each located in the spec: a URL or key variable of a model, a provider or
    endpoint or model the policy does not declare, an external simulator's command, an agent
    or participant entry of its own (`agent_entry`: the entry of the agent asset the spec names,
    as the server's library holds it, which `sut.entry` may repeat), an asset library outside
    the service's."""
    issues: list[ValidationIssue] = []
    llms: list[tuple[str, LLMConfig]] = [("llm", scenario.llm)]
    if scenario.user is not None and scenario.user.llm is not None:
        llms.append(("user.llm", scenario.user.llm))
    for where, llm in llms:
        issues += _llm_issues(where, llm, policy)
    simulator = scenario.simulator
    if simulator is not None:
        declared = _one_of(iter(policy.simulators), "no simulator: the policy declares none")
        if simulator.command is not None:
            issues.append(
                ValidationIssue(
                    "simulator.command",
                    "a spec sent to the run service names a simulator the operator declared; "
                    "it never carries a command",
                    f"simulator.name: {declared}",
                )
            )
        elif simulator.name not in policy.simulators:
            issues.append(
                ValidationIssue(
                    "simulator.name",
                    f"the run service's policy declares no simulator {simulator.name!r}",
                    declared,
                )
            )
    sut = scenario.sut
    if sut is not None and sut.entry is not None and sut.entry != agent_entry:
        issues.append(
            ValidationIssue(
                "sut.entry",
                "a spec sent to the run service reaches its agent through the agent asset's "
                "entry in the server's library, never an entry of its own",
                "no sut.entry",
            )
        )
    for i, participant in enumerate(scenario.participants or []):
        if participant.entry is not None:
            issues.append(
                ValidationIssue(
                    f"participants.{i}.entry",
                    "a spec sent to the run service does not name where a participant is reached",
                    "no entry",
                )
            )
    issues += sandbox_issues(scenario, policy)
    if scenario.provenance is not None:
        folder = scenario.provenance.asset_library
        if not re.match(RESOURCE_NAME, folder) or folder in (".", ".."):
            issues.append(
                ValidationIssue(
                    "provenance.assetLibrary",
                    f"{folder!r} is not a folder name: runs of the run service resolve their "
                    "assets in the server's library",
                    "a folder name such as assets",
                )
            )
    return issues


def sandbox_issues(scenario: Scenario, policy: ExecutionPolicy | None) -> list[ValidationIssue]:
    """Each tool of `environment.realTools` bound to a sandbox `policy` does not declare (None:
    no policy, so none is declared), located at the binding."""
    environment = scenario.environment
    if environment is None or not environment.real_tools:
        return []
    declared = policy.sandboxes if policy is not None else {}
    expected = _one_of(iter(declared), "a sandbox the execution policy declares (none does)")
    return [
        ValidationIssue(
            f"environment.realTools.{tool}",
            f"{sandbox!r} is no sandbox "
            + (
                "of the execution policy"
                if policy is not None
                else "here: no execution policy is given (simreport run --policy FILE)"
            ),
            expected,
        )
        for tool, sandbox in sorted(environment.real_tools.items())
        if sandbox not in declared
    ]


def _llm_issues(where: str, llm: LLMConfig, policy: ExecutionPolicy) -> list[ValidationIssue]:
    endpoints = _one_of(iter(policy.endpoints), "none: the policy declares no endpoint")
    issues = []
    if llm.base_url is not None:
        issues.append(
            ValidationIssue(
                f"{where}.baseUrl",
                "a spec sent to the run service names a model endpoint the operator declared; "
                "it never carries a URL",
                f"{where}.endpoint: {endpoints}",
            )
        )
    if llm.api_key_env is not None:
        issues.append(
            ValidationIssue(
                f"{where}.apiKeyEnv",
                "a spec sent to the run service never names an environment variable: the "
                "endpoint's key is the operator's",
                f"{where}.endpoint: {endpoints}",
            )
        )
    if llm.endpoint is None:
        if llm.provider not in policy.providers and llm.base_url is None:
            issues.append(
                ValidationIssue(
                    f"{where}.provider",
                    f"the run service's policy does not allow provider {llm.provider!r}",
                    _one_of(iter(policy.providers), "no provider")
                    + f"; or {where}.endpoint: {endpoints}",
                )
            )
        return issues
    endpoint = policy.endpoints.get(llm.endpoint)
    if endpoint is None:
        issues.append(
            ValidationIssue(
                f"{where}.endpoint",
                f"the run service's policy declares no endpoint {llm.endpoint!r}",
                endpoints,
            )
        )
        return issues
    if llm.model not in endpoint.models:
        issues.append(
            ValidationIssue(
                f"{where}.model",
                f"endpoint {llm.endpoint!r} does not serve model {llm.model!r}",
                _one_of(iter(endpoint.models), "no model"),
            )
        )
    if endpoint.max_tokens is not None and llm.max_tokens > endpoint.max_tokens:
        issues.append(
            ValidationIssue(
                f"{where}.maxTokens",
                f"endpoint {llm.endpoint!r} allows at most {endpoint.max_tokens} tokens per "
                f"decision, and the spec asks {llm.max_tokens}",
                f"at most {endpoint.max_tokens}",
            )
        )
    return issues


def check_spec(scenario: Scenario, policy: ExecutionPolicy, *, agent_entry: str | None) -> None:
    """SchemaError with every issue of `spec_issues`, when there is any."""
    issues = spec_issues(scenario, policy, agent_entry=agent_entry)
    if issues:
        raise SchemaError(issues)


# --------------------------------------------------------------------------- names → settings


def resolve_llm(llm: LLMConfig, policy: ExecutionPolicy | None, where: str = "llm") -> LLMConfig:
    """The settings a provider is built from: `llm` itself, or — when it names an endpoint —
    the endpoint's URL and key variable, with the spec's budgets and timeout capped by the
    endpoint's. RunError (stage loading) when no policy declares the endpoint or the model."""
    if llm.endpoint is None:
        return llm
    endpoint = policy.endpoints.get(llm.endpoint) if policy is not None else None
    if endpoint is None:
        raise RunError(
            f"{where}.endpoint names {llm.endpoint!r}, which "
            + (
                "no execution policy declares here (simreport run --policy FILE)"
                if policy is None
                else "this execution policy does not declare"
            ),
            stage="loading",
            kind="endpoint_undeclared",
        )
    if llm.model not in endpoint.models:
        raise RunError(
            f"{where}.model {llm.model!r} is not served by endpoint {llm.endpoint!r}",
            stage="loading",
            kind="endpoint_undeclared",
        )
    if endpoint.max_tokens is not None and llm.max_tokens > endpoint.max_tokens:
        raise RunError(
            f"{where}.maxTokens {llm.max_tokens} is above endpoint {llm.endpoint!r}'s "
            f"{endpoint.max_tokens}",
            stage="loading",
            kind="endpoint_undeclared",
        )
    return llm.model_copy(
        update={
            "provider": "openai",
            "base_url": endpoint.base_url,
            "api_key_env": endpoint.api_key_env,
            "timeout_seconds": _lowest(llm.timeout_seconds, endpoint.timeout_seconds),
            "budget_calls": _lowest(llm.budget_calls, endpoint.budget_calls),
            "budget_tokens": _lowest(llm.budget_tokens, endpoint.budget_tokens),
        }
    )


def resolve_simulator(
    scenario: Scenario, policy: ExecutionPolicy | None
) -> tuple[list[str], float, tuple[str, ...] | None]:
    """The command, the timeout and the environment variables (None: all of this process's) of
    the scenario's external simulator: its own command, or the one the policy declares under
    its name. RunError (stage loading) when no policy declares it."""
    simulator = scenario.simulator
    assert simulator is not None
    if simulator.command is not None:
        return list(simulator.command), simulator.timeout_seconds, None
    declared = policy.simulators.get(simulator.name or "") if policy is not None else None
    if declared is None:
        raise RunError(
            f"simulator.name names {simulator.name!r}, which "
            + (
                "no execution policy declares here (simreport run --policy FILE)"
                if policy is None
                else "this execution policy does not declare"
            ),
            stage="loading",
            kind="simulator_undeclared",
        )
    timeout = _lowest(simulator.timeout_seconds, declared.timeout_seconds)
    assert timeout is not None
    return list(declared.command), timeout, (*BASE_ENVIRONMENT, *declared.environment)


N = TypeVar("N", int, float)


def _lowest(own: N | None, cap: N | None) -> N | None:
    if own is None:
        return cap
    if cap is None:
        return own
    return min(own, cap)


__all__ = [
    "BASE_ENVIRONMENT",
    "Endpoint",
    "ExecutionPolicy",
    "ReviewPolicy",
    "RiskLevel",
    "Sandbox",
    "Simulator",
    "check_spec",
    "host_of",
    "load_policy",
    "resolve_llm",
    "resolve_simulator",
    "sandbox_issues",
    "spec_issues",
]
