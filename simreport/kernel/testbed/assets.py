"""The local asset library and the manifest: labels resolve to exact versions and sha256.

A reference is `<name>@<version>` or `<name>@<label>`; the manifest records what it resolved to,
never the label. Anything that does not resolve exactly is an `AssetError` (LOADING fails with
`manifest_unresolved`). The library's layout: docs/testbed.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator, model_validator

from ...core.canonical import content_hash, sha256_bytes
from ...core.errors import DocumentError, InputError
from ...core.files import parse_document
from ...core.run_digests import locked_manifest_sha256
from ...core.schema import Model, Scenario
from ...core.testbed_schema import ASSET_REF, ReactionRule
from ...core.validation import issues_from
from ...core.values import Int64, check_regex, http_url
from ...core.versions import RunChecks, design_sha256
from .domain.expressions import Expression, ExpressionError
from .domain.model import DomainAsset, UserFlowAsset

AssetKind = Literal[
    "agent",
    "prompt",
    "user_policy",
    "simulator_config",
    "env_data",
    "tool_contract",
    "evaluation_spec",
    "rubric",
    "domain",
    "user_flow",
]
AssetStatus = Literal["draft", "reviewing", "reviewed", "online", "offline"]
SUFFIXES = (".yaml", ".yml", ".json")
LABELS_FILE = "labels.yaml"
M = TypeVar("M", bound=Model)
_VERSION = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


class AssetError(InputError):
    """An asset reference that does not resolve to one valid, exact version. `message` says why;
    the one-line form starts with the reference."""

    def __init__(self, ref: str, message: str) -> None:
        super().__init__(message)
        self.ref = ref

    def one_line(self) -> str:
        return f"{self.ref}: {super().one_line()}"


# --------------------------------------------------------------------------- content models


class AgentAsset(Model):
    """How the agent under test is reached."""

    adapter: Literal["reference", "http", "python", "scripted"] = Field(
        description=(
            "reference: the built-in tool-calling agent driven through the scenario's provider; "
            "http: an OpenAI-compatible chat endpoint with tool calls; python: a `module:function` "
            "entry point; scripted: a fixed tool-call order (refused when tool-selection is in "
            "the boundary)."
        )
    )
    entry: str | None = Field(None, description="Base URL (http) or module:function (python).")
    model: str | None = Field(None, description="Model name sent to an HTTP agent.")
    api_key_env: str | None = Field(
        None, description="Environment variable holding an HTTP agent's API key."
    )
    script: list[str] = Field(default_factory=list, description="Tool order of a scripted agent.")
    health: str | None = Field(
        None,
        min_length=1,
        description=(
            "An HTTP agent's health entry, probed with GET while loading (a status below 400 "
            "means ready): an absolute URL, or a reference resolved against the entry as a "
            "browser would (`models` → <entry>/models, `/health` → the host's /health). "
            "Without it, loading opens a connection to the entry's host and port."
        ),
    )

    @model_validator(mode="after")
    def _health_is_http(self) -> AgentAsset:
        if self.adapter == "http" and self.entry is not None and http_url(self.entry) is None:
            raise ValueError(
                "an http agent's entry is not an http(s) URL with a host; expected e.g. "
                "http://127.0.0.1:8000/v1"
            )
        if self.health is not None and self.adapter != "http":
            raise ValueError(
                f"health is probed only for an http agent; this agent's adapter is "
                f"{self.adapter!r}: remove health"
            )
        return self


class PromptAsset(Model):
    """The agent's instructions: its wording is part of the agent version under test."""

    instructions: str = Field(min_length=1, description="What the agent is told to do.")
    persona: dict[str, str] = Field(default_factory=dict, description="Who the agent is.")
    goals: str | None = Field(None, description="The agent's goal.")
    memory_window: Int64 = Field(8, ge=0, description="Conversation items the agent remembers.")


class PatienceLevel(Model):
    """How long a user with this patience waits before giving up."""

    give_up_ms: Int64 = Field(ge=0, description="Logical milliseconds of waiting before giving up.")


class UserPolicyAsset(Model):
    """The user simulator's behaviour policy: patience table and default reaction rules."""

    patience: dict[Literal["low", "medium", "high"], PatienceLevel] = Field(
        description="Persona patience → give-up threshold."
    )
    reaction_rules: list[ReactionRule] = Field(
        default_factory=list, description="Rules every user of this policy follows (checked first)."
    )


class SimulatorConfigAsset(Model):
    """The user simulator's wording: templates per intent, and how facts are recognised in text."""

    intents: dict[str, list[str]] = Field(
        description=(
            "Intent → wording templates. Slots {orderNumber}, {amount}, {goal} are filled from "
            "the user's knowledge; the provider picks one template."
        )
    )
    order_number_pattern: str = Field(
        r"[A-Z]\d{4}-\d{4}-\d{4}", description="How an order number looks in text."
    )

    @field_validator("order_number_pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return check_regex(value)


class OrderData(Model):
    """An order in the environment's fact model."""

    id: str = Field(min_length=1, description="Order number.")
    account_id: str = Field(min_length=1, description="Owning account.")
    paid_amount_minor: Int64 = Field(ge=0, description="Amount paid, minor units.")
    currency: str = Field("CNY", description="ISO 4217 currency.")
    state: str = Field("delivered", description="Order state.")
    delivered_at: str | None = Field(None, description="Delivery time (ISO 8601).")


class RefundData(Model):
    """A refund already present when the run starts."""

    id: str = Field(min_length=1, description="Refund id.")
    order_id: str = Field(min_length=1, description="Order it refunds.")
    amount_minor: Int64 = Field(ge=0, description="Amount, minor units.")
    state: Literal["processing", "accepted", "rejected"] = Field(description="Refund state.")


class AccountData(Model):
    """A customer account."""

    id: str = Field(min_length=1, description="Account id.")
    name: str = Field("", description="Display name.")


class BusinessRules(Model):
    """Rules the environment enforces."""

    refund_window_days: Int64 = Field(
        7, ge=0, description="Days after delivery a refund is allowed."
    )
    reject_over_refund: bool = Field(
        False,
        description=(
            "Reject refunds beyond the amount paid. Off by default: many real back ends lack the "
            "guard, which is why duplicate refunds happen."
        ),
    )


class EnvironmentDataAsset(Model):
    """The environment's initial facts."""

    orders: list[OrderData] = Field(default_factory=list, description="Orders.")
    refunds: list[RefundData] = Field(default_factory=list, description="Existing refunds.")
    accounts: list[AccountData] = Field(default_factory=list, description="Accounts.")
    rules: BusinessRules = Field(default_factory=BusinessRules, description="Business rules.")


class ToolParameter(Model):
    """One parameter of a tool."""

    type: Literal["string", "integer"] = Field(description="JSON type.")
    required: bool = Field(True, description="Whether the call must give it.")
    pattern: str | None = Field(None, description="Regular expression a string must match.")
    description: str = Field("", description="What it means.")


OPERATION_ARGUMENTS: dict[str, dict[str, str]] = {
    "get_order": {"order_no": "string"},
    "get_refund": {"order_no": "string"},
    "create_refund": {"order_no": "string", "amount_minor": "integer"},
    "withdraw_refund": {"order_no": "string"},
}


class ToolSpec(Model):
    """One tool the agent may call, answered by the environment's fact model."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Tool name.")
    operation: Literal["get_order", "create_refund", "get_refund", "withdraw_refund"] = Field(
        description="Which fact-model operation answers it."
    )
    description: str = Field("", description="What the tool does (shown to the agent).")
    parameters: dict[str, ToolParameter] = Field(
        default_factory=dict, description="Parameters by name."
    )
    latency_ms: Int64 = Field(500, ge=0, description="Logical milliseconds a normal call costs.")

    @model_validator(mode="after")
    def _operation_arguments(self) -> ToolSpec:
        needed = OPERATION_ARGUMENTS[self.operation]
        for name, type_ in needed.items():
            param = self.parameters.get(name)
            if param is None or param.type != type_ or not param.required:
                raise ValueError(
                    f"tool {self.name!r} ({self.operation}) needs a required {type_} "
                    f"parameter {name!r}"
                )
        return self


class ToolContractAsset(Model):
    """A versioned set of tool contracts."""

    tools: list[ToolSpec] = Field(min_length=1, description="Tools.")


class CriterionSpec(Model):
    """One evaluation criterion: a built-in check, or an expression over the observations
    (`check: expect`) with the observations it needs."""

    key: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="Criterion key.")
    check: Literal[
        "no_duplicate_refund",
        "correct_amount",
        "verified_before_retry",
        "resolved",
        "no_complaint",
        "expect",
    ] = Field(
        description=(
            "The built-in check that decides it; `expect` decides it by the `expect` expression."
        )
    )
    description: str = Field("", description="What it asks.")
    expect: str | None = Field(
        None,
        description=(
            'check: expect — CEL over `obs` (observation key → value, e.g. obs["booking.count"] '
            "<= 1): true passes, false fails."
        ),
    )
    applies: str | None = Field(
        None, description="check: expect — CEL over `obs`; false makes the verdict not_applicable."
    )
    needs: list[str] = Field(
        default_factory=list,
        description="check: expect — the observations it reads; without one it is undecidable.",
    )

    @model_validator(mode="after")
    def _expectation(self) -> CriterionSpec:
        if (self.check == "expect") != (self.expect is not None):
            raise ValueError("`expect` goes with `check: expect`, and only with it")
        if self.check != "expect" and (self.needs or self.applies is not None):
            raise ValueError("`needs` and `applies` go with `check: expect` only")
        for name, source in (("expect", self.expect), ("applies", self.applies)):
            if source is not None:
                try:
                    Expression.compile(source, name, frozenset({"obs"}))
                except ExpressionError as exc:
                    raise ValueError(f"{name}: {exc.message}") from None
        return self


class EvaluationSpecAsset(Model):
    """Criteria and the completeness checks the evaluation requires."""

    criteria: list[CriterionSpec] = Field(min_length=1, description="Criteria.")
    required_checks: list[str] = Field(
        default_factory=list,
        description="Completeness checks that must be present for any verdict.",
    )


def expectation_needs(spec: EvaluationSpecAsset) -> dict[str, list[str]]:
    """Criterion key → the observations an `expect` criterion reads."""
    return {c.key: list(c.needs) for c in spec.criteria if c.check == "expect"}


class RubricAsset(Model):
    """A rubric for graders outside the run; recorded in the manifest, not read by the run."""

    content: dict[str, Any] = Field(default_factory=dict, description="Free content.")


CONTENT_MODELS: dict[str, type[Model]] = {
    "agent": AgentAsset,
    "prompt": PromptAsset,
    "user_policy": UserPolicyAsset,
    "simulator_config": SimulatorConfigAsset,
    "env_data": EnvironmentDataAsset,
    "tool_contract": ToolContractAsset,
    "evaluation_spec": EvaluationSpecAsset,
    "rubric": RubricAsset,
    "domain": DomainAsset,
    "user_flow": UserFlowAsset,
}


class AssetHeader(Model):
    """The envelope every asset file has."""

    kind: AssetKind = Field(description="What the asset is.")
    name: str = Field(min_length=1, description="Its name (its folder in the library).")
    version: str = Field(pattern=_VERSION.pattern, description="Its exact version (SemVer).")
    status: AssetStatus = Field(
        "draft",
        description=(
            "Informative, save offline (refused): the ledger starts every version as a draft, "
            "and only review puts it online."
        ),
    )
    owner: str | None = Field(None, description="Who maintains it.")
    content: Any = Field(description="The content, validated by the model of its kind.")


# --------------------------------------------------------------------------- resolution


@dataclass(frozen=True)
class ResolvedAsset:
    """One asset reference resolved to an exact version."""

    slot: str
    """Where the scenario refers to it (`sut.agent`, `environment.toolContracts.0`, …)."""
    kind: str
    name: str
    version: str
    sha256: str
    path: Path
    content: Model
    status: AssetStatus = "draft"
    """The review status its file's header declares: informative, never what a run checks
    (the ledger's, or draft)."""

    def typed(self, model: type[M]) -> M:
        """The content as the model of its kind (checked)."""
        if not isinstance(self.content, model):
            raise TypeError(f"{self.slot} holds a {self.kind} asset, not {model.__name__}")
        return self.content

    def record(self, root: Path) -> dict[str, Any]:
        """What the manifest keeps: exact version and digest, never the label."""
        try:
            file = self.path.relative_to(root).as_posix()
        except ValueError:
            file = self.path.as_posix()
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "file": file,
        }


class AssetLibrary:
    """Versioned assets under one folder. `pins` (name → version) replace label resolution, so a
    replay uses exactly the versions its manifest recorded."""

    def __init__(self, root: Path, pins: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.pins = dict(pins or {})

    def locate(self, ref: str) -> tuple[str, str, Path]:
        """The name, exact version and file a reference resolves to (labels and pins applied),
        without reading the asset itself."""
        match = ASSET_REF.match(ref)
        if match is None:
            raise AssetError(ref, "not an asset reference (<name>@<version or label>)")
        name, selector = match.group("name"), match.group("selector")
        folder = self.root / name
        if not folder.is_dir():
            raise AssetError(ref, f"no asset named {name!r} in the library {self.root}")
        version = self.pins.get(name) or (
            selector if _VERSION.match(selector) else self._label(ref, folder, selector)
        )
        path = next(
            (folder / f"{version}{s}" for s in SUFFIXES if (folder / f"{version}{s}").is_file()),
            None,
        )
        if path is None:
            raise AssetError(ref, f"version {version} of {name!r} does not exist")
        return name, version, path

    def resolve(self, ref: str, kind: AssetKind, slot: str) -> ResolvedAsset:
        name, version, path = self.locate(ref)
        data = path.read_bytes()
        digest = sha256_bytes(data)
        header = _HEADERS.get(digest)
        if header is None:
            try:
                document = parse_document(data.decode("utf-8"), path)
            except (UnicodeDecodeError, DocumentError) as exc:
                raise AssetError(ref, f"{path.name} cannot be read: {exc}") from None
            header = _validated(AssetHeader, document.data, ref, path)
            _remember(_HEADERS, digest, header)
        if header.kind != kind:
            raise AssetError(ref, f"is a {header.kind} asset where a {kind} asset is needed")
        if header.name != name or header.version != version:
            raise AssetError(
                ref,
                f"{path.name} declares {header.name}@{header.version}, not {name}@{version}",
            )
        if header.status == "offline":
            raise AssetError(ref, f"version {version} is offline")
        content = _CONTENTS.get((digest, kind))
        if content is None:
            content = _validated(CONTENT_MODELS[kind], header.content, ref, path)
            _remember(_CONTENTS, (digest, kind), content)
        return ResolvedAsset(slot, kind, name, version, digest, path, content, header.status)

    def _label(self, ref: str, folder: Path, label: str) -> str:
        labels_file = folder / LABELS_FILE
        if not labels_file.is_file():
            raise AssetError(ref, f"label {label!r} cannot resolve: {labels_file} does not exist")
        data = labels_file.read_bytes()
        digest = sha256_bytes(data)
        labels = _LABELS.get(digest)
        if labels is None:
            try:
                labels = parse_document(data.decode("utf-8"), labels_file).data
            except (UnicodeDecodeError, DocumentError) as exc:
                raise AssetError(ref, f"{labels_file.name} cannot be read: {exc}") from None
            _remember(_LABELS, digest, labels)
        if not isinstance(labels, Mapping) or label not in labels:
            raise AssetError(ref, f"label {label!r} is not defined in {labels_file.name}")
        version = str(labels[label])
        if not _VERSION.match(version):
            raise AssetError(ref, f"label {label!r} points at {version!r}, not a version")
        return version


def manifest_references(scenario: Scenario) -> list[tuple[str, str, AssetKind]]:
    """Every asset reference of a testbed scenario's manifest: (slot, reference, kind)."""
    refs: list[tuple[str, str, AssetKind]] = []
    if scenario.sut is not None:
        refs.append(("sut.agent", scenario.sut.agent, "agent"))
    domain = scenario.environment.domain if scenario.environment is not None else None
    if scenario.user is not None:
        policy: AssetKind = "user_flow" if domain is not None else "user_policy"
        refs.append(("user.policy", scenario.user.policy, policy))
        refs.append(("user.simulator", scenario.user.simulator, "simulator_config"))
    if domain is not None:
        refs.append(("environment.domain", domain, "domain"))
    if scenario.environment is not None and scenario.environment.data is not None:
        refs.append(("environment.data", scenario.environment.data, "env_data"))
    if scenario.evaluation_ref is not None:
        refs.append(
            ("evaluationRef.assertions", scenario.evaluation_ref.assertions, "evaluation_spec")
        )
    if scenario.sut is not None and scenario.sut.prompt is not None:
        refs.append(("sut.prompt", scenario.sut.prompt, "prompt"))
    if scenario.evaluation_ref is not None and scenario.evaluation_ref.rubric is not None:
        refs.append(("evaluationRef.rubric", scenario.evaluation_ref.rubric, "rubric"))
    if scenario.environment is not None:
        refs += [
            (f"environment.toolContracts.{i}", ref, "tool_contract")
            for i, ref in enumerate(scenario.environment.tool_contracts)
        ]
    return refs


def resolved_asset_files(scenario: Scenario, library: Path) -> dict[str, Path | None]:
    """Slot → the file each of a scenario's asset references resolves to in `library` (None where
    it does not resolve), found without reading or validating the assets: what a run of the
    scenario will read, so a change to any other file of the library leaves it up to date."""
    found: dict[str, Path | None] = {}
    assets = AssetLibrary(library)
    for slot, ref, _ in manifest_references(scenario):
        try:
            found[slot] = assets.locate(ref)[2]
        except AssetError:
            found[slot] = None
    return found


# Parsed asset and label files by the sha256 of their bytes: the same bytes always parse the
# same, so a process that resolves an asset again (a service, a worker, a long audit) reads the
# YAML once.
_CACHED_FILES: Final = 256
_HEADERS: dict[str, AssetHeader] = {}
_CONTENTS: dict[tuple[str, str], Any] = {}
_LABELS: dict[str, Any] = {}
K = TypeVar("K")


def _remember(cache: dict[K, Any], key: K, value: Any) -> None:
    if len(cache) >= _CACHED_FILES:
        cache.pop(next(iter(cache)))  # the oldest: plenty for a library's versions in use
    cache[key] = value


def _validated(model: type[Model], data: Any, ref: str, path: Path) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issue = issues_from(exc)[0]
        where = f" at {issue.path}" if issue.path else ""
        raise AssetError(ref, f"{path.name} is not a valid asset{where}: {issue.message}") from None


def manifest_facts(
    scenario_doc: Mapping[str, Any],
    resolved: Mapping[str, ResolvedAsset],
    root: Path,
    *,
    identity: Mapping[str, Any] | None,
    checks: RunChecks | None = None,
    not_online: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """What the testbed adds to manifest.json: every asset's exact version and digest, the
    scenario's id, the version the run records (a derived one says which it derives from) and
    digests, the run's purpose and the versions it used that are not online, and the manifest
    digest over all of them (plus the seed lineage), so two runs of one manifest can be
    recognised as such."""
    checks = checks if checks is not None else RunChecks()
    records = {slot: asset.record(root) for slot, asset in sorted(resolved.items())}
    declared = identity.get("version") if identity else None
    scenario: dict[str, Any] = {
        "id": identity.get("id") if identity else None,
        "version": checks.version or declared,
        "sha256": content_hash(dict(scenario_doc)),
        "designSha256": design_sha256(scenario_doc),
    }
    if checks.derived_from is not None:
        scenario["derivedFrom"] = checks.derived_from
    if checks.spec_sha256 is not None:
        scenario["specSha256"] = checks.spec_sha256
    facts: dict[str, Any] = {
        "assets": {f"{r['name']}@{r['version']}": r["sha256"] for r in records.values()},
        "resolved": records,
        "notOnline": not_online or [],
        "scenarioVersion": scenario,
    }
    # The purpose and the seed lineage sit in the engine's part of manifest.json; they are
    # locked too.
    locked = {
        **facts,
        "purpose": checks.purpose,
        "seed": scenario_doc.get("seed"),
        "seedPath": scenario_doc.get("seedPath"),
    }
    facts["manifestSha256"] = locked_manifest_sha256(locked)
    return facts
