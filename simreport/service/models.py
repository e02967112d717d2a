"""The bodies of the run service's requests and answers, as pydantic models: requests refuse
unknown keys and hostile values at the door, and together they let `/openapi.json` document the
service by itself. The refusals each endpoint can give are documented with `refusals(...)`."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.values import Int64, Name, Text

MAX_TEXT = 200
"""The longest name, namespace, owner, version or id a request may carry. Names and ids hold no
control character and no bidirectional control (`Name`); free text no control character but
tab, newline and carriage return (`Text`): PostgreSQL cannot store NUL, and a name must read as
what it is."""

RunMode = Literal["surrogate", "hybrid", "isolated_real"]
RiskLevel = Literal["low", "medium", "high"]
Purpose = Literal["regression", "exploration"]
ReviewStatus = Literal["draft", "reviewing", "reviewed", "online", "offline"]
AssetType = Literal[
    "user_policy",
    "env_data",
    "tool_contract",
    "simulator_config",
    "evaluation_spec",
    "agent",
    "prompt",
    "rubric",
    "domain",
    "user_flow",
]
"""The asset types of the ledger (ledger.tables.ASSET_TYPES)."""


# --------------------------------------------------------------------------- request bodies


class RequestBody(BaseModel):
    """What every request body is: a JSON object without keys its model does not know."""

    model_config = ConfigDict(extra="forbid")


class ScenarioRequest(RequestBody):
    """POST /v1/sim/scenarios."""

    namespace: Name = Field(min_length=1, max_length=MAX_TEXT, description="the namespace")
    name: Name = Field(min_length=1, max_length=MAX_TEXT, description="unique in its namespace")
    owner: Name = Field(min_length=1, max_length=MAX_TEXT, description="who owns the scenario")
    risk_level: RiskLevel = Field(description="high: going online needs a risk sign-off")


class VersionRequest(RequestBody):
    """POST /v1/sim/scenarios/{scenario_id}/versions."""

    version: Name = Field(min_length=1, max_length=MAX_TEXT, description="semantic version")
    spec: dict[str, Any] = Field(description="the scenario document (as in a scenario file)")
    source: Name | None = Field(
        None, max_length=1000, description="where the version comes from (an incident, …)"
    )


class RunRequest(RequestBody):
    """POST /v1/sim/runs."""

    scenario_id: Name = Field(min_length=1, max_length=MAX_TEXT)
    version: Name = Field(min_length=1, max_length=MAX_TEXT, description="the scenario version")
    mode: RunMode = Field("surrogate", description="how the environment's backend runs")
    seed: Int64 | None = Field(None, ge=0, description="the run's seed (default: the scenario's)")
    budget: dict[str, Any] | None = Field(
        None, description="limits replacing the scenario's execution.budget (maxTurns, …)"
    )
    purpose: Purpose = Field(
        "exploration",
        description="regression: every version the run resolves must be online",
    )


class RiskSignoffRequest(RequestBody):
    """The risk sign-off of the version being published, by the token's name."""

    sha256: str = Field(
        pattern=r"^[0-9a-fA-F]{12,64}$",
        description="the sha256 of the version whose risk the token signs off (at least its "
        "first 12 hex digits): refused when it is not the version's",
    )


class ReviewRequest(RequestBody):
    """POST /v1/sim/scenarios/{scenario_id}/versions/{version}:{action} and
    /v1/sim/assets/{asset_type}/{name}/versions/{version}:{action} (beyond the seed: the review
    steps of `simreport review`, taken by the token's name)."""

    note: Text | None = Field(None, max_length=1000, description="kept with the step")
    risk_signoff: RiskSignoffRequest | None = Field(
        None,
        description="publish only: the token signs off the version's risk (needed to publish "
        "a high-risk scenario), recorded with the token's name and the step's time",
    )


class CancelRequest(RequestBody):
    """POST /v1/sim/runs/{run_id}:cancel."""

    reason: Text = Field(min_length=1, max_length=1000, description="why, kept with the run")


# --------------------------------------------------------------------------- answers


class ScenarioCreated(BaseModel):
    scenario_id: str


class VersionSubmitted(BaseModel):
    status: Literal["reviewing"]


class VersionReviewed(BaseModel):
    status: Literal["reviewing", "reviewed", "online", "offline"]


class SignoffCovers(BaseModel):
    kind: Literal["scenario", "asset"]
    id: str = Field(description="the scenario id, or the asset's id (tenant:type:name)")
    version: str
    sha256: str = Field(description="the version's pinned sha256")


class RiskSignoff(BaseModel):
    """A risk sign-off as the ledger holds it."""

    by: str = Field(description="who signed off: the token's or reviewer's name that published")
    at: str = Field(description="when (ISO 8601, UTC): the publishing step's time")
    covers: SignoffCovers = Field(description="the version it covers")


class ReviewStep(BaseModel):
    """One review step of a version, as the ledger keeps it."""

    from_status: ReviewStatus | None = Field(description="null: the version's first status")
    to_status: ReviewStatus
    reviewer: str = Field(description="who took it (over HTTP: the token's name)")
    risk_signoff: RiskSignoff | None
    note: str | None
    at: str = Field(description="when (ISO 8601, UTC)")


class ScenarioVersionView(BaseModel):
    scenario_id: str
    version: str
    status: ReviewStatus
    risk_level: RiskLevel
    sha256: str = Field(description="the design digest pinned for the version")
    last_step: ReviewStep | None


class ScenarioVersionList(BaseModel):
    versions: list[ScenarioVersionView]


class ScenarioVersionDetail(BaseModel):
    scenario_id: str
    version: str
    status: ReviewStatus
    risk_level: RiskLevel
    sha256: str = Field(description="the design digest pinned for the version")
    authors: list[str] = Field(
        description="who created or submitted it: by default none of them may approve or publish it"
    )
    steps: list[ReviewStep] = Field(description="every review step, oldest first")


class AssetVersionView(BaseModel):
    asset_type: AssetType
    name: str
    version: str
    status: ReviewStatus
    sha256: str = Field(description="the sha256 of the asset file's bytes, pinned")
    owner: str
    last_step: ReviewStep | None


class AssetVersionList(BaseModel):
    versions: list[AssetVersionView]


class AssetVersionDetail(BaseModel):
    asset_type: AssetType
    name: str
    version: str
    status: ReviewStatus
    sha256: str = Field(description="the sha256 of the asset file's bytes, pinned")
    authors: list[str] = Field(
        description="who recorded or submitted it: by default none of them may approve or "
        "publish it"
    )
    steps: list[ReviewStep] = Field(description="every review step, oldest first")


class RunStarted(BaseModel):
    run_id: str
    manifest_id: str = Field(description="the manifest frozen when the run was accepted")


class RunStatus(BaseModel):
    execution_status: Literal[
        "pending", "running", "cancelling", "completed", "crashed", "cancelled"
    ] = Field(
        description="cancelling: a running run whose cancellation was asked, until it has "
        "ended (cancelled; or completed, crashed, when it ended before the stop reached it)"
    )
    validity_status: Literal["unchecked", "valid", "violated"]
    evidence_status: Literal["unchecked", "complete", "partial"]
    quality_ref: str | None = Field(description="set by an evaluator, never by the run")
    attempt: int = Field(
        description="the attempt the run is on: 1, or 2 once it was queued again after its "
        "worker was lost (--retry-lost-runs)"
    )


class Event(BaseModel):
    """One event of a run, as the ledger holds it."""

    seq: int = Field(description="its place in the run's events, from 1, without a gap")
    type: str
    actor: str
    actor_ref: str | None = Field(description="which agent (its index) or other actor exactly")
    step: int | None = Field(description="the kernel's step (round, tick, turn)")
    logical_time: int | None = Field(description="logical milliseconds, where the run keeps them")
    wall_time: str = Field(description="when it was emitted (ISO 8601, UTC)")
    trace_id: str | None
    span_id: str | None
    payload: Any = Field(description="what the event says, as the run wrote it")


class EventPage(BaseModel):
    events: list[Event]
    next_seq: int = Field(description="the after_seq of the next page")


class EvidencePackage(BaseModel):
    records: list[dict[str, Any]]
    observations: list[dict[str, Any]]
    evidence: list[dict[str, Any]]
    completeness: Any


class RunCancelled(BaseModel):
    execution_status: Literal["cancelling", "cancelled"] = Field(
        description="cancelled: the run was pending and has ended; cancelling: it was running "
        "and its worker stops it at its next step (GET /runs/{id} says when it has ended)"
    )


class ManifestView(BaseModel):
    resolved: dict[str, Any] = Field(
        description="slot → the asset version it resolved to: kind, name, version, sha256, file"
    )
    locked: dict[str, Any] | None = Field(
        description="what the digest covers: for an agent-testbed run, what the run locks its "
        "manifest with (purpose, notOnline, scenario, each resolved asset's kind, name, "
        "version and sha256, seed, seedPath); for any other, the frozen manifest"
    )
    manifest_sha256: str = Field(
        description="sha256 of the canonical JSON of `locked` (sorted keys, no spaces, UTF-8): "
        "an agent-testbed run's manifestSha256"
    )


class WorkerCount(BaseModel):
    alive: int = Field(description="worker processes of this API running now")
    asked: int = Field(
        description="worker processes it was asked for (--workers; 0: workers run as "
        "`simreport worker`, which this API does not watch)"
    )


class QueueHealth(BaseModel):
    depth: int = Field(description="runs pending: queued, not claimed by a worker yet")
    running: int = Field(description="runs claimed by a worker and not ended")
    oldest_pending_seconds: float | None = Field(
        description="how long the oldest pending run has waited since it was queued (null: "
        "none pending)"
    )


class HealthReason(BaseModel):
    code: Literal["worker_missing", "pending_too_long"]
    message: str


class Health(BaseModel):
    status: Literal["ok", "degraded"] = Field(
        description="degraded (HTTP 503): a worker of this API is not running, or the oldest "
        "pending run has waited longer than --max-pending-age"
    )
    workers: WorkerCount
    queue: QueueHealth
    reasons: list[HealthReason] = Field(description="why degraded; empty when ok")


class Issue(BaseModel):
    path: str = Field(description="where in the request (dotted), empty for the whole body")
    message: str
    expected: str | None = None


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str = Field(description="stable, for programs: not_found, conflict, gone, …")
    message: str = Field(description="for people")
    issues: list[Issue] | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


ERROR_MEANINGS: dict[int, str] = {
    400: "no Idempotency-Key header",
    401: "no token, or an unknown one",
    403: "the token may not use this namespace, or may not take this review step (it wrote "
    "the version, or asset versions are shared beyond its namespaces)",
    404: "no such object in the token's tenant",
    408: "the request's headers or body did not arrive in time (--header-timeout, "
    "--body-timeout): the connection is closed",
    409: "the state does not allow it: read the state, do not retry",
    410: "the cursor is older than the events kept: re-read the snapshot",
    413: "the body is larger than --max-body: it is not read, and the connection is closed",
    422: "invalid request: fix it and make a new one",
    429: "the token's runs pending or running are at its quota: retry after Retry-After",
    431: "the request's line and headers are too large",
    503: "the queue is full, the ledger did not answer or the service has --max-connections "
    "open: retry after Retry-After with the same Idempotency-Key",
}
"""Every refusal the service gives, as the seed's error semantics read."""


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The refusals of one endpoint, for its OpenAPI description."""
    return {s: {"model": ErrorBody, "description": ERROR_MEANINGS[s]} for s in statuses}


WRITE_REFUSALS = (400, 401, 403, 404, 408, 409, 413, 422, 503)
"""What any write can be refused with."""
READ_REFUSALS = (401, 403, 404, 503)
"""What any read can be refused with."""
