"""Registering versions in the scenario library: a scenario file's version and every asset
version its library holds, each new one as a draft with a first review transition, its sha256
pinned; a version held with other content is refused and nothing is written. A file's header
never sets a status: only review does (transitions.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.canonical import sha256_bytes
from ...core.errors import DocumentError, InputError
from ...core.files import parse_document
from ...core.redaction import redact_document
from ...core.testbed_schema import SEMVER
from ...core.versions import design_document, design_sha256
from .. import tables as t
from ..db import insert_new, utc_now
from ..errors import AssetVersionChanged, ScenarioVersionChanged
from ..migrate import prepare_for_writing
from ..run_rows import scenario_row
from ..tables import DEFAULT_TENANT, UNKNOWN_OWNER
from .transitions import Kind, record_transition, reviewer_name

if TYPE_CHECKING:
    from ...core.schema import Scenario

Outcome = Literal["recorded", "present"]

DEFAULT_STATUS: Final = "draft"
"""The status every version starts with in the ledger, whatever its file's header says (as a
run's ingest records it): only review moves it on."""

IMPORT_REVIEWER: Final = "import"

ASSET_SUFFIXES: Final = (".yaml", ".yml", ".json")
"""Asset file suffixes, in the order the kernel's library prefers them."""

_VERSION = re.compile(SEMVER)


class LoadedScenario(Protocol):
    """What a scenario loader returns (the kernel's `LoadedScenario`)."""

    @property
    def scenario(self) -> Scenario: ...


ScenarioLoader = Callable[[Path], LoadedScenario]
"""Reads and fully validates a scenario file: `simreport.kernel.load_scenario`."""


# --------------------------------------------------------------------------- import


@dataclass(frozen=True)
class ImportedVersion:
    """One version an import saw."""

    kind: Kind
    name: str
    """The scenario's id, or the asset's name."""
    asset_type: str | None
    version: str
    status: str
    """Its status in the ledger now (draft, when the import recorded it)."""
    sha256: str
    outcome: Outcome
    file: Path


@dataclass(frozen=True)
class ScenarioImport:
    """What importing one scenario file did: its version first, then its library's assets."""

    path: Path
    versions: tuple[ImportedVersion, ...]

    @property
    def recorded(self) -> int:
        return sum(v.outcome == "recorded" for v in self.versions)


@dataclass(frozen=True)
class AssetFile:
    """One asset version as its library file declares it."""

    path: Path
    asset_type: str
    name: str
    version: str
    status: str
    """The status its header declares: read, never recorded (the ledger starts it as draft)."""
    owner: str
    sha256: str


def import_scenario(
    engine: Engine,
    scenario_path: str | Path,
    *,
    load: ScenarioLoader,
    reviewer: str = IMPORT_REVIEWER,
    tenant: str = DEFAULT_TENANT,
) -> ScenarioImport:
    """Register the scenario version in `scenario_path` and every asset version its library
    holds, in one transaction. A version the ledger has not seen is recorded as a draft with one
    transition (from nothing to draft, by `reviewer`, who counts as its author), whatever
    status its file's header declares; a version it holds with the same sha256 keeps the status
    the ledger records; one it holds with another sha256 is refused (ScenarioVersionChanged,
    AssetVersionChanged) and nothing is written."""
    path = Path(scenario_path)
    return import_loaded(engine, load(path).scenario, path, reviewer=reviewer, tenant=tenant)


def import_loaded(
    engine: Engine,
    scenario: Scenario,
    path: Path,
    *,
    reviewer: str = IMPORT_REVIEWER,
    tenant: str = DEFAULT_TENANT,
    assets: bool = True,
) -> ScenarioImport:
    """`import_scenario` for a scenario already loaded from `path`. Without `assets`, only the
    scenario version is registered: what a first run does, leaving its asset versions to be
    checked by the run itself while loading and pinned when it is recorded."""
    reviewer = reviewer_name(reviewer)
    identity = scenario.identity
    if identity is None:
        raise InputError(
            "only agent-testbed scenarios enter the scenario library, and this one has no identity",
            file=path,
            path="identity",
            expected="an identity with id, version, owner and riskLevel",
        )
    source = path.resolve()
    spec = design_document(redact_document(scenario.to_doc()))
    sha = design_sha256(spec)
    library_dir = scenario.provenance.asset_library if scenario.provenance else "assets"
    library = library_assets(source.parent / library_dir, where=path) if assets else []

    prepare_for_writing(engine)
    now = utc_now()
    with engine.begin() as conn:
        insert_new(conn, t.scenario, scenario_row(identity, tenant, now))
        new = insert_new(
            conn,
            t.scenario_version,
            {
                "scenario_id": identity.id,
                "version": identity.version,
                "spec": spec,
                "spec_sha256": sha,
                "status": DEFAULT_STATUS,
                "source": str(source),
                "created_by": reviewer,
                "created_at": now,
            },
        )
        key = t.scenario_version.c
        pinned, status = conn.execute(
            sa.select(key.spec_sha256, key.status).where(
                key.scenario_id == identity.id, key.version == identity.version
            )
        ).one()
        if pinned != sha:
            raise ScenarioVersionChanged(
                f"scenario_version_changed: {identity.id}@{identity.version} is pinned in the "
                f"ledger with sha256 {pinned}, but {path} now has sha256 {sha}: its design "
                "changed without a new version",
                file=path,
                recorded=pinned,
                found=sha,
            )
        if new:
            record_transition(
                conn,
                "scenario",
                identity.id,
                identity.version,
                None,
                DEFAULT_STATUS,
                reviewer=reviewer,
                risk_signoff=None,
                note=f"imported from {source}",
                at=now,
            )
        done = [
            ImportedVersion(
                "scenario",
                identity.id,
                None,
                identity.version,
                status,
                sha,
                "recorded" if new else "present",
                source,
            )
        ]
        done += [import_asset(conn, asset, tenant, reviewer, now) for asset in library]
    return ScenarioImport(source, tuple(done))


def import_asset(
    conn: Connection, asset: AssetFile, tenant: str, reviewer: str, now: datetime
) -> ImportedVersion:
    """Register the asset version of `asset`'s file in `tenant` as a draft, pinning its sha256
    the first time (the review transition that records it names `reviewer`), inside the
    caller's transaction; a version the ledger holds keeps its status. Raises
    AssetVersionChanged for a version pinned with other content."""
    asset_id = f"{tenant}:{asset.asset_type}:{asset.name}"
    insert_new(
        conn,
        t.asset,
        {
            "asset_id": asset_id,
            "tenant_id": tenant,
            "asset_type": asset.asset_type,
            "name": asset.name,
            "owner": asset.owner,
        },
    )
    new = insert_new(
        conn,
        t.asset_version,
        {
            "asset_id": asset_id,
            "version": asset.version,
            "content_ref": asset.path.as_uri(),
            "content_sha256": asset.sha256,
            "status": DEFAULT_STATUS,
            "created_at": now,
        },
    )
    key = t.asset_version.c
    pinned, status = conn.execute(
        sa.select(key.content_sha256, key.status).where(
            key.asset_id == asset_id, key.version == asset.version
        )
    ).one()
    if pinned != asset.sha256:
        raise AssetVersionChanged(
            f"asset_version_changed: {asset.name}@{asset.version} is pinned in the ledger with "
            f"sha256 {pinned}, but {asset.path} now has sha256 {asset.sha256}: its content "
            "changed without a new version",
            file=asset.path,
            recorded=pinned,
            found=asset.sha256,
        )
    if new:
        record_transition(
            conn,
            "asset",
            asset_id,
            asset.version,
            None,
            DEFAULT_STATUS,
            reviewer=reviewer,
            risk_signoff=None,
            note=f"imported from {asset.path}",
            at=now,
        )
    return ImportedVersion(
        "asset",
        asset.name,
        asset.asset_type,
        asset.version,
        status,
        asset.sha256,
        "recorded" if new else "present",
        asset.path,
    )


def library_assets(library: Path, *, where: Path | None = None) -> list[AssetFile]:
    """Every asset version in an asset library folder: `<name>/<version>.yaml` (a name may
    have folders, `env/ecom-seed`), read from its header. Raises DocumentError naming the file
    for a header that does not say what its place in the library says."""
    if not library.is_dir():
        raise InputError(
            f"the scenario's asset library {library} is not a folder",
            file=where,
            path="provenance.assetLibrary",
            expected="a folder of <name>/<version>.yaml asset files next to the scenario",
        )
    chosen: dict[tuple[str, str], Path] = {}
    for path in sorted(library.rglob("*"), key=_preference):
        if (
            path.suffix not in ASSET_SUFFIXES
            or any(part.startswith(".") for part in path.relative_to(library).parts)
            or not _VERSION.match(path.stem)
            or path.parent == library
            or not path.is_file()
        ):
            continue
        name = path.parent.relative_to(library).as_posix()
        chosen.setdefault((name, path.stem), path)
    return [read_asset_file(path, name, ver) for (name, ver), path in sorted(chosen.items())]


def _preference(path: Path) -> tuple[str, int, str]:
    suffix = ASSET_SUFFIXES.index(path.suffix) if path.suffix in ASSET_SUFFIXES else 99
    return (path.with_suffix("").as_posix(), suffix, path.name)


def read_asset_file(path: Path, name: str, version: str) -> AssetFile:
    """The asset version in the library file `path`, whose place in the library makes it
    `name`@`version`. Raises DocumentError naming the file for a header that does not say
    what its place says, or an unknown kind or status."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError("not UTF-8 text", file=path, expected="a YAML or JSON file") from None
    header = parse_document(text, path).data
    if not isinstance(header, dict):
        raise DocumentError(
            "an asset file must be a mapping", file=path, expected="kind, name, version, content"
        )
    kind = header.get("kind")
    if kind not in t.ASSET_TYPES:
        raise DocumentError(
            f"unknown asset kind {kind!r}",
            file=path,
            path="kind",
            expected=", ".join(t.ASSET_TYPES),
        )
    for field, placed in (("name", name), ("version", version)):
        if str(header.get(field)) != placed:
            raise DocumentError(
                f"the file declares {field} {header.get(field)!r}, but its place in the library "
                f"makes it {placed!r}",
                file=path,
                path=field,
                expected=repr(placed),
            )
    status = header.get("status", DEFAULT_STATUS)
    if status not in t.REVIEW_STATUSES:
        raise DocumentError(
            f"unknown review status {status!r}",
            file=path,
            path="status",
            expected=", ".join(t.REVIEW_STATUSES),
        )
    owner = header.get("owner")
    return AssetFile(
        path=path,
        asset_type=str(kind),
        name=name,
        version=version,
        status=str(status),
        owner=owner if isinstance(owner, str) and owner.strip() else UNKNOWN_OWNER,
        sha256=sha256_bytes(data),
    )
