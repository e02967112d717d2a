"""Who may call the run service: bearer tokens (`load_tokens`, from `--tokens-file` and an
environment variable), each a `Principal` with a name, a tenant, its namespaces and a quota of
concurrent runs. Only each token's sha256 is kept; everything else knows a token by its name.
`Tokens.authenticate` answers 401, `check_namespace` 403 (never for another tenant's objects).
The design: docs/service.md.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import sqlalchemy as sa
from pydantic import Field, model_validator

from ..core.errors import DocumentError, InputError
from ..core.files import Document, load_document, parse_document
from ..core.schema import Model
from ..core.validation import validate_model
from ..core.values import Int64
from .config import OPTIONS, ServiceSettings
from .errors import Forbidden, Unauthenticated

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

DEFAULT_TENANT: Final = "local"
BARE_TOKEN_NAME: Final = "default"
MIN_TOKEN_LENGTH: Final = 16


class TokenEntry(Model):
    """One token of a tokens file."""

    key_noun = "token key"

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,99}$",
        description="the principal: recorded with its runs and idempotency keys",
    )
    token: str | None = Field(
        None,
        min_length=MIN_TOKEN_LENGTH,
        max_length=1000,
        description="the token itself (kept only as its sha256 once read)",
    )
    sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="the sha256 (hex) of the token"
    )
    tenant: str = Field(DEFAULT_TENANT, min_length=1, max_length=200)
    namespaces: list[str] | Literal["*"] = Field(
        "*", description='the namespaces the token may use, or "*" for all of its tenant'
    )
    max_concurrent_runs: Int64 | None = Field(
        None, ge=1, description="runs pending or running at once for this token"
    )

    @model_validator(mode="after")
    def _one_secret(self) -> TokenEntry:
        if (self.token is None) == (self.sha256 is None):
            raise ValueError("a token entry needs exactly one of `token` and `sha256`")
        return self


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: a token's name, tenant, namespaces (None: all) and quota."""

    name: str
    tenant: str
    namespaces: frozenset[str] | None = None
    max_concurrent_runs: int | None = None

    def may_use(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces


@dataclass
class Tokens:
    """The tokens the service accepts, by the sha256 of each, and where they came from."""

    by_digest: dict[str, Principal] = field(default_factory=dict)
    setting: str = ""
    """The settings that provide tokens, as a 401 names them when there are none."""

    def authenticate(self, authorization: str | None) -> Principal:
        """The principal an Authorization header proves, or Unauthenticated."""
        if not self.by_digest:
            raise Unauthenticated(
                f"this service has no API tokens configured: set {self.setting}",
                code="no_tokens_configured",
            )
        scheme, _, credential = (authorization or "").strip().partition(" ")
        credential = credential.strip()
        if scheme.lower() != "bearer" or not credential:
            raise Unauthenticated("an `Authorization: Bearer <token>` header is required")
        principal = self.by_digest.get(token_sha256(credential))
        if principal is None:
            raise Unauthenticated("the bearer token is not known")
        return principal


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def load_tokens(settings: ServiceSettings, environ: Mapping[str, str] | None = None) -> Tokens:
    """The tokens of the settings' file and environment variable. Refuses a malformed entry,
    a name used twice and a token given twice (InputError naming the file and the entry)."""
    env = os.environ if environ is None else environ
    option = OPTIONS["tokens_file"]
    tokens = Tokens(setting=f"{option} or the environment variable {settings.tokens_env}")
    entries: list[tuple[str, TokenEntry]] = []
    if settings.tokens_file is not None:
        document = load_document(settings.tokens_file)
        entries += _entries(document, where=str(settings.tokens_file))
    text = env.get(settings.tokens_env, "").strip()
    if text:
        where = f"${settings.tokens_env}"
        document = parse_document(text, Path(where))
        if isinstance(document.data, str):
            bare = TokenEntry(name=BARE_TOKEN_NAME, token=document.data)
            entries.append((where, _checked_bare(bare, where)))
        else:
            entries += _entries(document, where=where)
    _add(tokens, entries)
    return tokens


def _checked_bare(entry: TokenEntry, where: str) -> TokenEntry:
    if entry.token is not None and len(entry.token) < MIN_TOKEN_LENGTH:
        raise InputError(
            "the token is too short",
            file=where,
            expected=f"at least {MIN_TOKEN_LENGTH} characters",
        )
    return entry


def _entries(document: Document, *, where: str) -> list[tuple[str, TokenEntry]]:
    data = document.data
    if not isinstance(data, list):
        raise DocumentError(
            "a tokens document is a list of token entries",
            file=where,
            expected="- {name: …, sha256: … or token: …, tenant: …, namespaces: […]}",
        )
    found = []
    for i, item in enumerate(data):
        entry = validate_model(TokenEntry, item, file=where, document=document, prefix=str(i))
        found.append((f"{where}: entry {i} ({entry.name})", entry))
    return found


def _add(tokens: Tokens, entries: Iterable[tuple[str, TokenEntry]]) -> None:
    names: dict[str, str] = {}
    for where, entry in entries:
        if entry.name in names:
            raise InputError(
                f"the token name {entry.name!r} is used twice",
                file=where,
                path="name",
                expected=f"names that differ (the first is in {names[entry.name]})",
            )
        names[entry.name] = where
        digest = entry.sha256 if entry.sha256 is not None else token_sha256(entry.token or "")
        if digest in tokens.by_digest:
            raise InputError(
                "this token is listed twice",
                file=where,
                path="token",
                expected=f"one entry per token (also under {tokens.by_digest[digest].name!r})",
            )
        namespaces = None if entry.namespaces == "*" else frozenset(entry.namespaces)
        tokens.by_digest[digest] = Principal(
            name=entry.name,
            tenant=entry.tenant,
            namespaces=namespaces,
            max_concurrent_runs=entry.max_concurrent_runs,
        )


# --------------------------------------------------------------------------- namespaces

ResourceKind = Literal["scenario", "run", "manifest"]


def check_namespace(engine: Engine, principal: Principal, kind: ResourceKind, ident: str) -> None:
    """Refuse (403) a token limited to some namespaces a scenario, run or manifest of its tenant
    in another namespace. What does not exist in the token's tenant is left to the caller,
    which answers 404: another tenant's objects are never revealed, not even as forbidden."""
    if principal.namespaces is None:
        return
    namespace = resource_namespace(engine, principal.tenant, kind, ident)
    if namespace is not None and not principal.may_use(namespace):
        raise forbidden_namespace(principal, namespace)


def forbidden_namespace(principal: Principal, namespace: str) -> Forbidden:
    return Forbidden(f"the token {principal.name!r} may not use the namespace {namespace!r}")


def resource_namespace(engine: Engine, tenant: str, kind: ResourceKind, ident: str) -> str | None:
    """The namespace of the scenario behind a scenario, run or manifest id in `tenant`, or None
    when there is no such object there."""
    from ..ledger import tables as t
    from ..ledger.db import reading

    scenario, manifest, run = t.scenario, t.manifest, t.run
    query: sa.Select[Any]
    if kind == "scenario":
        query = sa.select(scenario.c.namespace).where(scenario.c.scenario_id == ident)
    elif kind == "manifest":
        query = (
            sa.select(scenario.c.namespace)
            .join(manifest, manifest.c.scenario_id == scenario.c.scenario_id)
            .where(manifest.c.manifest_id == ident, manifest.c.tenant_id == tenant)
        )
    else:
        query = (
            sa.select(scenario.c.namespace)
            .join(manifest, manifest.c.scenario_id == scenario.c.scenario_id)
            .join(run, run.c.manifest_id == manifest.c.manifest_id)
            .where(run.c.run_id == ident, run.c.tenant_id == tenant)
        )
    query = query.where(scenario.c.tenant_id == tenant)
    with reading(engine) as conn:
        found = conn.execute(query).scalar()
    return None if found is None else str(found)
