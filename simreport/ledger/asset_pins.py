"""Asset versions pinned in the ledger: the first sha256 the ledger saw for a version is its pin.

`asset_entries` reads the versions a run's manifest resolved (pure); `pin_asset_versions`
registers those the ledger has not seen, inside the caller's transaction, and refuses one seen
before with other content (AssetVersionChanged). `pinned_versions` reads the pins.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..core.canonical import sha256_bytes
from ..core.errors import DocumentError, SimreportError
from ..core.files import load_document
from . import tables as t
from .bulk import insert_ignoring_duplicates, placeholder, table_name, table_schema
from .db import utc_now
from .errors import AssetVersionChanged
from .rundir import RunDirectory
from .tables import UNKNOWN_OWNER


@dataclass(frozen=True)
class AssetEntry:
    """An asset version the run's manifest resolved, in the slot it filled."""

    slot: str
    asset_id: str
    name: str
    version: str
    sha: str
    kind: str
    entry: Mapping[str, Any]


@dataclass(frozen=True)
class LibraryFile:
    """Where an asset version's file was when the run resolved it, as the manifest says."""

    relative: str
    root: str
    library: str
    name_version: str

    def where(self) -> tuple[Path | None, str]:
        """Its path (None when the manifest does not say) and the location the ledger
        records: a file URI, or its path in the library."""
        if not self.relative:
            return None, f"library:{self.name_version}"
        if not self.root:
            return None, f"library:{self.relative}"
        path = Path(self.root) / self.library / self.relative
        return path, path.as_uri() if path.is_absolute() else f"library:{self.relative}"


def asset_entries(run: RunDirectory, tenant: str) -> list[tuple[AssetEntry, LibraryFile]]:
    """Every asset version the manifest resolved, by slot, with where its file was."""
    resolved = run.manifest.get("resolved") or {}
    if not isinstance(resolved, dict):
        raise DocumentError("'resolved' is not an object", file=run.path / "manifest.json")
    entries = []
    for slot, entry in sorted(resolved.items()):
        asset = _asset_entry(run, slot, entry, tenant)
        entries.append((asset, _library_location(run, asset.entry)))
    return entries


def pin_asset_versions(
    conn: Connection,
    assets: Sequence[tuple[AssetEntry, LibraryFile]],
    run_dir: Path,
    tenant: str,
) -> None:
    """Register every asset version the run resolved, pinning its sha256 the first time.
    Refuses a version seen before with other content. Only a version seen for the first time
    costs more than one query."""
    if not assets:
        return
    pinned = pinned_versions(conn, [e.asset_id for e, _ in assets])
    now = utc_now()
    for e, library in assets:
        if (e.asset_id, e.version) in pinned:
            continue
        path, location = library.where()
        header = _library_header(path, e.sha)
        insert_ignoring_duplicates(
            conn,
            t.asset,
            [
                {
                    "asset_id": e.asset_id,
                    "tenant_id": tenant,
                    "asset_type": e.kind,
                    "name": e.name,
                    "owner": header.get("owner") or UNKNOWN_OWNER,
                }
            ],
        )
        insert_ignoring_duplicates(
            conn,
            t.asset_version,
            [
                {
                    "asset_id": e.asset_id,
                    "version": e.version,
                    "content_ref": location,
                    "content_sha256": e.sha,
                    # A header never sets a status: only review does (ledger/review).
                    "status": "draft",
                    "created_at": now,
                }
            ],
        )
        # Another writer may have pinned it first: what is in the ledger now is the pin.
        pinned.update(pinned_versions(conn, [e.asset_id]))
    for e, _ in assets:
        recorded = pinned[(e.asset_id, e.version)]
        if recorded != e.sha:
            raise AssetVersionChanged(
                f"asset_version_changed: {e.name}@{e.version} "
                f"({e.entry.get('file') or 'its library file'}) is pinned in the ledger with "
                f"sha256 {recorded}, but this run used {e.sha}: its content changed without a "
                "new version",
                file=run_dir / "manifest.json",
                path=f"resolved.{e.slot}",
                recorded=recorded,
                found=e.sha,
            )


def _asset_entry(run: RunDirectory, slot: str, entry: Any, tenant: str) -> AssetEntry:
    where = f"resolved.{slot}"
    manifest = os.path.join(run.path, "manifest.json")  # for an error: cheaper than a Path
    if not isinstance(entry, dict):
        raise DocumentError("expected an object", file=manifest, path=where)
    name, version, sha, kind = (entry.get(k) for k in ("name", "version", "sha256", "kind"))
    if not (
        isinstance(name, str)
        and isinstance(version, str)
        and isinstance(sha, str)
        and isinstance(kind, str)
        and all((name, version, sha, kind))
    ):
        raise DocumentError(
            "an asset entry needs name, version, sha256 and kind", file=manifest, path=where
        )
    if kind not in t.ASSET_TYPES:
        raise DocumentError(
            f"unknown asset kind {kind!r}",
            file=manifest,
            path=f"{where}.kind",
            expected=", ".join(t.ASSET_TYPES),
        )
    return AssetEntry(slot, f"{tenant}:{kind}:{name}", name, version, sha, kind, entry)


def pinned_versions(conn: Connection, asset_ids: Sequence[str]) -> dict[tuple[str, str], str]:
    """(asset id, version) → the sha256 the ledger pinned, for every version of these assets."""
    wanted = sorted(set(asset_ids))
    if not wanted:
        return {}
    sql = _pinned_statement(conn.dialect, table_schema(conn, t.asset_version), len(wanted))
    return {(a, v): sha for a, v, sha in conn.exec_driver_sql(sql, tuple(wanted))}


@functools.lru_cache(maxsize=64)
def _pinned_statement(dialect: sa.Dialect, schema: str | None, count: int) -> str:
    marks = ", ".join(placeholder(dialect) for _ in range(count))
    versions = table_name(dialect, t.asset_version, schema)
    return f"SELECT asset_id, version, content_sha256 FROM {versions} WHERE asset_id IN ({marks})"


def _library_location(run: RunDirectory, entry: Mapping[str, Any]) -> LibraryFile:
    """Where the asset's file was when the run resolved it (worked out only for a version
    the ledger has not seen: see `LibraryFile.where`)."""
    root = run.manifest.get("assetRoot")
    library = run.scenario.provenance.asset_library if run.scenario.provenance else "assets"
    return LibraryFile(
        str(entry.get("file") or ""),
        root if isinstance(root, str) else "",
        library,
        f"{entry.get('name')}@{entry.get('version')}",
    )


def _library_header(path: Path | None, sha: str) -> dict[str, str]:
    """The asset file's header (its owner) when the file is still where the run found it with
    the content it had."""
    if path is None:
        return {}
    try:
        if not path.is_file() or sha256_bytes(path.read_bytes()) != sha:
            return {}
        data = load_document(path).data
    except (OSError, SimreportError):
        return {}
    header: dict[str, str] = {}
    if isinstance(data, dict):
        owner = data.get("owner")
        if isinstance(owner, str) and owner:
            header["owner"] = owner
    return header
