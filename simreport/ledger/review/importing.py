"""The scenario library's review, held in the ledger: every scenario version and asset version
goes draft → reviewing → reviewed → online → offline, each step kept with who took it, when, a
note and, for a high-risk scenario going online, who signed off the risk. `import_scenario`
registers versions; only `transition` moves a status, as a compare-and-set. The design:
docs/ledger.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ..core.canonical import sha256_bytes
from ..core.errors import DocumentError, InputError
from ..core.files import parse_document
from ..core.redaction import redact_document
from ..core.testbed import SEMVER
from ..core.versions import design_document, design_sha256
from . import tables as t
from .db import as_utc, insert_new, reading, utc_now
from .errors import (
    AssetVersionChanged,
    NotRecorded,
    ReviewRefused,
    ScenarioVersionChanged,
    UnknownVersion,
    WrongStatus,
)
from .migrate import check_for_reading, prepare_for_writing
from .run_rows import scenario_row
from .tables import DEFAULT_TENANT, UNKNOWN_OWNER

if TYPE_CHECKING:
    from ..core.schema import Scenario

Kind = Literal["scenario", "asset"]
Outcome = Literal["recorded", "present"]

ACTIONS: Final[dict[str, tuple[str, str]]] = {
    "submit": ("draft", "reviewing"),
    "approve": ("reviewing", "reviewed"),
    "publish": ("reviewed", "online"),
    "retire": ("online", "offline"),
}
"""Each review action: the status it moves a version from, and to."""

DEFAULT_STATUS: Final = "draft"
"""A version whose header names no status starts as a draft (as a run's ingest records it)."""

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
    """Its status in the ledger now (its header's, when the import recorded it)."""
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
    holds, in one transaction. A version the ledger has not seen is recorded with its header's
    status and one transition (from nothing to that status, by `reviewer`); a version it holds
    with the same sha256 is left as it is; one it holds with another sha256 is refused
    (ScenarioVersionChanged, AssetVersionChanged) and nothing is written."""
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
    reviewer = _reviewer(reviewer)
    identity = scenario.identity
    if identity is None:
        raise InputError(
            "only agent-testbed scenarios enter the scenario library, and this one has no identity",
            file=path,
            path="identity",
            expected="an identity with id, version, owner and riskLevel",
        )
    signoff = _text(identity.risk_signoff)
    if identity.risk_level == "high" and identity.status == "online" and signoff is None:
        raise InputError(
            "a high-risk scenario starts online only with a recorded risk sign-off",
            file=path,
            path="identity.riskSignoff",
            expected="the name of who signed off the risk, or a status other than online",
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
                "status": identity.status,
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
                identity.status,
                reviewer=reviewer,
                risk_signoff=signoff,
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
    """Register the asset version of `asset`'s file in `tenant`, pinning its sha256 the first
    time (the review transition that records it names `reviewer`), inside the caller's
    transaction. Raises AssetVersionChanged for a version pinned with other content."""
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
            "status": asset.status,
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
            asset.status,
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


# --------------------------------------------------------------------------- transitions


@dataclass(frozen=True)
class Transition:
    """One review step as the ledger recorded it."""

    kind: Kind
    name: str
    object_id: str
    version: str
    action: str
    from_status: str
    to_status: str
    reviewer: str
    risk_signoff: str | None
    note: str | None
    at: datetime


def transition(
    engine: Engine,
    kind: str,
    name: str,
    version: str,
    action: str,
    *,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> Transition:
    """Take one review action on a version: `submit` draft → reviewing, `approve` reviewing →
    reviewed, `publish` reviewed → online, `retire` online → offline. `name` is a scenario's id
    or an asset's name (`TYPE:NAME` where two asset types share it). Refused (ReviewRefused,
    nothing changed) for an unknown version, a version not in the status the action moves
    from (also when another reviewer moved it first), an empty reviewer, or a high-risk
    scenario published without `risk_signoff`."""
    prepare_for_writing(engine)
    with engine.begin() as conn:
        return transition_in(
            conn,
            kind,
            name,
            version,
            action,
            reviewer=reviewer,
            note=note,
            risk_signoff=risk_signoff,
            tenant=tenant,
        )


def transition_in(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    action: str,
    *,
    reviewer: str,
    note: str | None = None,
    risk_signoff: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> Transition:
    """`transition` inside the caller's write transaction (the run service stores the
    request's idempotency key in the same one)."""
    if kind not in t.VERSION_KINDS:
        raise ReviewRefused(
            f"unknown kind {kind!r}", path="kind", expected=" or ".join(t.VERSION_KINDS)
        )
    if action not in ACTIONS:
        raise ReviewRefused(
            f"unknown review action {action!r}", path="action", expected=", ".join(ACTIONS)
        )
    who = _reviewer(reviewer)
    signoff, note = _text(risk_signoff), _text(note)
    from_status, to_status = ACTIONS[action]
    found = _locate(conn, kind, name, version, tenant, UnknownVersion)
    label = f"{kind} {found.name}@{version}"
    if found.status != from_status:
        raise _wrong_status(label, found.status, action)
    if action == "publish" and found.risk_level == "high" and signoff is None:
        raise ReviewRefused(
            f"{label} is high risk: it goes online only with a recorded risk sign-off",
            path="--risk-signoff",
            expected="the name of who signed off the risk",
        )
    # Compare-and-set: of two reviewers who both saw `from_status`, the second finds the
    # row moved (PostgreSQL re-checks the condition after the first commits; SQLite lets
    # one writer in at a time) and is refused with what it is now.
    table, keys = _version_table(kind)
    moved = conn.execute(
        table.update()
        .where(keys[0] == found.object_id, keys[1] == version, table.c.status == from_status)
        .values(status=to_status)
    ).rowcount
    if moved != 1:
        now_status = _locate(conn, kind, name, version, tenant, UnknownVersion).status
        raise _wrong_status(label, now_status, action)
    at = utc_now()
    record_transition(
        conn,
        kind,
        found.object_id,
        version,
        from_status,
        to_status,
        reviewer=who,
        risk_signoff=signoff,
        note=note,
        at=at,
    )
    return Transition(
        kind=cast(Kind, kind),  # checked against VERSION_KINDS above
        name=found.name,
        object_id=found.object_id,
        version=version,
        action=action,
        from_status=from_status,
        to_status=to_status,
        reviewer=who,
        risk_signoff=signoff,
        note=note,
        at=at,
    )


def _wrong_status(label: str, status: str, action: str) -> WrongStatus:
    from_status, to_status = ACTIONS[action]
    valid = [a for a, (start, _) in ACTIONS.items() if start == status]
    then = (
        f"from {status} only `{valid[0]}` is valid"
        if valid
        else f"no review action leaves {status}"
    )
    return WrongStatus(
        f"{label} is {status}: `{action}` moves a version from {from_status} to {to_status}; "
        + then
    )


def record_transition(
    conn: Connection,
    kind: str,
    object_id: str,
    version: str,
    from_status: str | None,
    to_status: str,
    *,
    reviewer: str,
    risk_signoff: str | None,
    note: str | None,
    at: datetime,
) -> None:
    """Add a review transition of a version (`from_status` None: the version's first) inside
    the caller's transaction."""
    conn.execute(
        t.review_transition.insert().values(
            version_kind=kind,
            object_id=object_id,
            version=version,
            from_status=from_status,
            to_status=to_status,
            reviewer=reviewer,
            risk_signoff=risk_signoff,
            note=note,
            at=at,
        )
    )


def _reviewer(reviewer: str | None) -> str:
    who = _text(reviewer)
    if who is None:
        raise ReviewRefused(
            "every review step names its reviewer", path="--reviewer", expected="a name"
        )
    return who


def _text(value: str | None) -> str | None:
    """The text with its outer spaces removed; None for nothing or blanks."""
    stripped = (value or "").strip()
    return stripped or None


# --------------------------------------------------------------------------- finding versions


@dataclass(frozen=True)
class _Found:
    object_id: str
    name: str
    status: str
    risk_level: str | None


def _version_table(kind: str) -> tuple[sa.Table, tuple[sa.ColumnElement[Any], ...]]:
    if kind == "scenario":
        return t.scenario_version, (
            t.scenario_version.c.scenario_id,
            t.scenario_version.c.version,
        )
    return t.asset_version, (t.asset_version.c.asset_id, t.asset_version.c.version)


def _locate(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    tenant: str,
    missing: type[InputError],
) -> _Found:
    """The version `name@version` of a scenario or asset, raising `missing` when the ledger
    does not hold it."""
    if kind == "scenario":
        sv, s = t.scenario_version, t.scenario
        row = conn.execute(
            sa.select(sv.c.status, sv.c.spec, s.c.risk_level)
            .join(s, s.c.scenario_id == sv.c.scenario_id)
            .where(s.c.tenant_id == tenant, sv.c.scenario_id == name, sv.c.version == version)
        ).one_or_none()
        if row is None:
            raise _unknown(conn, kind, name, version, missing, [name])
        return _Found(name, name, row.status, _risk_level(row.spec, row.risk_level))
    asset_id = _asset_id(conn, name, tenant, missing)
    status = conn.execute(
        sa.select(t.asset_version.c.status).where(
            t.asset_version.c.asset_id == asset_id, t.asset_version.c.version == version
        )
    ).scalar_one_or_none()
    if status is None:
        raise _unknown(conn, kind, name, version, missing, [asset_id])
    return _Found(asset_id, asset_id.split(":", 2)[2], status, None)


def _risk_level(spec: Any, recorded: str) -> str:
    """The version's own risk level (its spec's identity), else the scenario's."""
    identity = spec.get("identity") if isinstance(spec, dict) else None
    level = identity.get("riskLevel") if isinstance(identity, dict) else None
    return level if isinstance(level, str) else recorded


def _asset_id(conn: Connection, name: str, tenant: str, missing: type[InputError]) -> str:
    """The asset `name` (or `TYPE:NAME`) names; two asset types sharing a name need the type."""
    asset_type, sep, bare = name.partition(":")
    query = sa.select(t.asset.c.asset_id, t.asset.c.asset_type).where(t.asset.c.tenant_id == tenant)
    if sep:
        query = query.where(t.asset.c.asset_type == asset_type, t.asset.c.name == bare)
    else:
        query = query.where(t.asset.c.name == name)
    found = conn.execute(query.order_by(t.asset.c.asset_type)).all()
    if not found:
        raise missing(
            f"the ledger holds no asset {name!r}",
            expected="an asset name `simreport review list --kind asset` shows",
        )
    if len(found) > 1:
        raise missing(
            f"{len(found)} asset types share the name {name!r}: say which",
            expected=" or ".join(f"{row.asset_type}:{name}" for row in found),
        )
    return str(found[0].asset_id)


def _unknown(
    conn: Connection,
    kind: str,
    name: str,
    version: str,
    error: type[InputError],
    object_ids: Sequence[str],
) -> InputError:
    _, keys = _version_table(kind)
    versions = sorted(conn.execute(sa.select(keys[1]).where(keys[0].in_(object_ids))).scalars())
    held = (
        f"it holds {', '.join(versions)}" if versions else f"it holds no version of {kind} {name}"
    )
    return error(f"the ledger holds no {kind} {name}@{version}: {held}")


# --------------------------------------------------------------------------- reading


def list_versions(
    engine: Engine,
    *,
    kind: str | None = None,
    status: str | None = None,
    name: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> list[dict[str, Any]]:
    """Every scenario and asset version with its review status, sha256, a scenario's risk
    level, and its last transition (who, when, to what), scenarios first, then by name and
    version. `kind`, `status` and `name` (a scenario id or an asset name) narrow the list."""
    if kind is not None and kind not in t.VERSION_KINDS:
        raise InputError(
            f"unknown kind {kind!r}", path="--kind", expected=" or ".join(t.VERSION_KINDS)
        )
    if status is not None and status not in t.REVIEW_STATUSES:
        raise InputError(
            f"unknown review status {status!r}",
            path="--status",
            expected=", ".join(t.REVIEW_STATUSES),
        )
    check_for_reading(engine)
    rows: list[dict[str, Any]] = []
    with reading(engine) as conn:
        last = _last_transitions(conn)
        if kind in (None, "scenario"):
            sv, s = t.scenario_version, t.scenario
            query = (
                sa.select(sv, s.c.owner, s.c.risk_level)
                .join(s, s.c.scenario_id == sv.c.scenario_id)
                .where(s.c.tenant_id == tenant)
            )
            if status is not None:
                query = query.where(sv.c.status == status)
            if name is not None:
                query = query.where(sv.c.scenario_id == name)
            for row in conn.execute(query.order_by(sv.c.scenario_id, sv.c.version)):
                rows.append(
                    {
                        "kind": "scenario",
                        "id": row.scenario_id,
                        "name": row.scenario_id,
                        "type": None,
                        "version": row.version,
                        "status": row.status,
                        "sha256": row.spec_sha256,
                        "riskLevel": _risk_level(row.spec, row.risk_level),
                        "owner": row.owner,
                        "source": row.source,
                        "lastTransition": last.get(("scenario", row.scenario_id, row.version)),
                    }
                )
        if kind in (None, "asset"):
            a, av = t.asset, t.asset_version
            query = (
                sa.select(av, a.c.name, a.c.asset_type, a.c.owner)
                .join(a, a.c.asset_id == av.c.asset_id)
                .where(a.c.tenant_id == tenant)
            )
            if status is not None:
                query = query.where(av.c.status == status)
            if name is not None:
                asset_type, sep, bare = name.partition(":")
                query = query.where(
                    sa.and_(a.c.asset_type == asset_type, a.c.name == bare)
                    if sep
                    else a.c.name == name
                )
            for row in conn.execute(query.order_by(a.c.name, a.c.asset_type, av.c.version)):
                rows.append(
                    {
                        "kind": "asset",
                        "id": row.asset_id,
                        "name": row.name,
                        "type": row.asset_type,
                        "version": row.version,
                        "status": row.status,
                        "sha256": row.content_sha256,
                        "riskLevel": None,
                        "owner": row.owner,
                        "source": row.content_ref,
                        "lastTransition": last.get(("asset", row.asset_id, row.version)),
                    }
                )
    return rows


def _last_transitions(conn: Connection) -> dict[tuple[str, str, str], dict[str, Any]]:
    rt = t.review_transition
    latest = (
        sa.select(sa.func.max(rt.c.transition_id).label("transition_id"))
        .group_by(rt.c.version_kind, rt.c.object_id, rt.c.version)
        .subquery()
    )
    found = conn.execute(
        sa.select(rt).join(latest, latest.c.transition_id == rt.c.transition_id)
    ).all()
    return {(r.version_kind, r.object_id, r.version): _transition_doc(r) for r in found}


def history(
    engine: Engine, kind: str, name: str, version: str, *, tenant: str = DEFAULT_TENANT
) -> dict[str, Any]:
    """A version's status and every transition it went through, oldest first."""
    if kind not in t.VERSION_KINDS:
        raise InputError(
            f"unknown kind {kind!r}", path="kind", expected=" or ".join(t.VERSION_KINDS)
        )
    check_for_reading(engine)
    rt = t.review_transition
    with reading(engine) as conn:
        found = _locate(conn, kind, name, version, tenant, NotRecorded)
        steps = conn.execute(
            sa.select(rt)
            .where(
                rt.c.version_kind == kind,
                rt.c.object_id == found.object_id,
                rt.c.version == version,
            )
            .order_by(rt.c.transition_id)
        ).all()
    return {
        "kind": kind,
        "id": found.object_id,
        "name": found.name,
        "version": version,
        "status": found.status,
        "riskLevel": found.risk_level,
        "transitions": [_transition_doc(step) for step in steps],
    }


def _transition_doc(row: Any) -> dict[str, Any]:
    at = as_utc(row.at)
    return {
        "from": row.from_status,
        "to": row.to_status,
        "reviewer": row.reviewer,
        "riskSignoff": row.risk_signoff,
        "note": row.note,
        "at": None if at is None else at.isoformat().replace("+00:00", "Z"),
    }
