"""The run service's settings: its ledger, where it listens, who may call it, how much it queues.

`simreport api` builds them from its options; a wrong value is refused before anything starts,
with the option it came from, what was given and what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..core.errors import SchemaError, ValidationIssue
from ..core.execution_policy import ExecutionPolicy, load_policy
from ..core.validation import issues_from

DEFAULT_TOKENS_ENV: Final = "SIMREPORT_API_TOKENS"
"""The environment variable read for tokens unless the settings name another."""

DEFAULT_PORT: Final = 8080
DEFAULT_WORKERS: Final = 1
DEFAULT_MAX_BODY: Final = 1024 * 1024

OPTIONS: Final = {
    "ledger": "--ledger",
    "host": "--host",
    "port": "--port",
    "workers": "--workers",
    "tokens_file": "--tokens-file",
    "tokens_env": "--tokens-env",
    "library": "--library",
    "max_queue": "--max-queue",
    "max_pending_age_seconds": "--max-pending-age",
    "restart_backoff_seconds": "--restart-backoff",
    "max_body_bytes": "--max-body",
    "header_timeout_seconds": "--header-timeout",
    "body_timeout_seconds": "--body-timeout",
    "max_connections": "--max-connections",
    "events_retention_seconds": "--events-retention",
    "lease_seconds": "--lease-seconds",
    "retry_after_seconds": "--retry-after",
    "retry_lost_runs": "--retry-lost-runs",
    "policy": "--policy",
}
"""The `simreport api` option behind each setting, named in errors."""

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ServiceSettings(BaseModel):
    """Everything the run service needs to start. Paths are kept as given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ledger: str = Field(
        description="the ledger database: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB"
    )
    host: str = Field("127.0.0.1", min_length=1, description="the address to listen on")
    port: int = Field(DEFAULT_PORT, ge=1, le=65535, description="the TCP port to listen on")
    workers: int = Field(
        DEFAULT_WORKERS,
        ge=0,
        le=64,
        description="worker processes started beside the API (0: none; run `simreport worker`)",
    )
    tokens_file: Path | None = Field(
        None, description="a YAML file listing the bearer tokens that may call the service"
    )
    tokens_env: str = Field(
        DEFAULT_TOKENS_ENV,
        description="the environment variable holding tokens: one bare token, or the same "
        "YAML list as a tokens file",
    )
    library: Path | None = Field(
        None,
        description="the asset library runs resolve their references in (default: the "
        "current folder's `assets`)",
    )
    max_queue: int = Field(
        1000, ge=1, description="runs waiting or running at once before new ones get 503"
    )
    max_pending_age_seconds: float = Field(
        600.0,
        ge=0,
        description="/healthz answers degraded (503) once the oldest pending run has waited "
        "longer (0: never for this reason)",
    )
    restart_backoff_seconds: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="the wait before a worker process that died is started again; it doubles "
        "for each further death in a row, up to a minute (or this, if longer)",
    )
    max_body_bytes: int = Field(
        DEFAULT_MAX_BODY,
        ge=1,
        description="the largest request body; a longer one gets 413 without being read",
    )
    header_timeout_seconds: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="how long a request's line and headers may take to arrive; then 408 and "
        "the connection is closed",
    )
    body_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="how long a request's body may take to arrive after its headers; then 408 "
        "and the connection is closed",
    )
    max_connections: int = Field(
        500,
        ge=1,
        description="connections open at once; one more gets 503 and is closed",
    )
    events_retention_seconds: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="how long a run's events stay readable; an older cursor gets 410",
    )
    lease_seconds: float = Field(
        30.0, gt=0, description="how long a worker's claim on a run lasts without a heartbeat"
    )
    retry_after_seconds: int = Field(
        5, ge=1, le=3600, description="the Retry-After of a 429 or 503 answer"
    )
    retry_lost_runs: int = Field(
        0,
        ge=0,
        le=1,
        strict=True,
        description="how many times a run whose worker was lost goes back to pending before it "
        "ends crashed (worker_lost); kept with each run when it is queued",
    )

    policy: Path | None = Field(
        None,
        description="the execution policy: the providers, model endpoints and external "
        "simulators runs may use (default: the offline provider only)",
    )

    @field_validator("ledger")
    @classmethod
    def _known_database(cls, value: str) -> str:
        from ..ledger.errors import LedgerUnavailable
        from ..ledger.location import normalise_url

        try:
            return normalise_url(value)
        except LedgerUnavailable as exc:
            raise ValueError(exc.message) from None

    @field_validator("tokens_env")
    @classmethod
    def _variable_name(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @property
    def library_dir(self) -> Path:
        """The asset library runs resolve in."""
        return self.library if self.library is not None else Path("assets")


def load_service_policy(path: Path | None) -> ExecutionPolicy:
    """The execution policy in `path` (None: the default, the offline provider only), checked
    against this installation: every provider it allows exists and reaches no host (a model
    server is declared as an endpoint, with its URL and key variable)."""
    from ..kernel.providers import CACHED, PROVIDERS

    if path is None:
        return ExecutionPolicy()
    policy = load_policy(path)
    issues = []
    for i, name in enumerate(policy.providers):
        if name not in PROVIDERS:
            issues.append(
                ValidationIssue(
                    f"providers.{i}",
                    f"there is no provider {name!r}",
                    "one of " + ", ".join(p for p in sorted(PROVIDERS) if p not in CACHED),
                )
            )
        elif name in CACHED:
            issues.append(
                ValidationIssue(
                    f"providers.{i}",
                    f"provider {name!r} reaches a host: declare the host under endpoints, with "
                    "its URL, key variable and models",
                    "providers that reach no host, such as offline",
                )
            )
    if issues:
        raise SchemaError(issues, file=path)
    return policy


def settings_from_options(options: Mapping[str, Any]) -> ServiceSettings:
    """Validate settings given by option (None: the default), raising SchemaError whose issues
    name the options (`--port`) rather than the fields."""
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return ServiceSettings.model_validate(given)
    except ValidationError as exc:
        issues = [
            ValidationIssue(_option(issue.path), issue.message, issue.expected)
            for issue in issues_from(exc, ServiceSettings)
        ]
        raise SchemaError(issues) from None


def _option(path: str) -> str:
    head, _, rest = path.partition(".")
    option = OPTIONS.get(head, head)
    return f"{option}.{rest}" if rest else option
