"""The digests a run folder records of its own files, and checking the folder against them.

manifest.json locks itself (`manifestSha256`) and names the sha256 of scenario.json and of each
result layer (`layerSha256`); the `manifest.locked` record locks the manifest in turn. A file
that differs from what the run recorded raises `RunAltered`. The layout: docs/ledger.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from .canonical import document_json, sha256_bytes, sha256_text
from .errors import DocumentError, InputError

MANIFEST_FILE: Final = "manifest.json"
SCENARIO_FILE: Final = "scenario.json"
RECORDS_FILE: Final = "records.jsonl"
OBSERVATIONS_FILE: Final = "observations.json"
EVIDENCE_FILE: Final = "evidence.json"
COMPLETENESS_FILE: Final = "completeness.json"
USER_QUALITY_FILE: Final = "user-quality.json"
LAYER_FILES: Final = (
    RECORDS_FILE,
    OBSERVATIONS_FILE,
    EVIDENCE_FILE,
    COMPLETENESS_FILE,
    USER_QUALITY_FILE,
)
"""The result layers whose sha256 a testbed run records, in the order they are checked."""
LAYER_SHA256: Final = "layerSha256"
"""manifest.json's key: layer file name → its sha256 (`layer_digests`)."""
LOCKED_ASSET_FIELDS: Final = ("kind", "name", "version", "sha256")
MANIFEST_LOCKED: Final = "manifest.locked"
"""The record by which a testbed run's records lock its manifest."""


class RunAltered(InputError):
    """A file of a run folder does not match the digest the run recorded of it (or a layer the
    run recorded is gone): it was changed after the run, and nothing read from it can be
    trusted. `file` is the altered file, `path` where its digest is recorded; `recorded` and
    `found` are the two digests (`found` None: the file is missing). `code` names the refusal
    for programs."""

    code = "run_altered"

    def __init__(
        self, message: str, *, recorded: str | None, found: str | None, **where: Any
    ) -> None:
        super().__init__(message, **where)
        self.recorded = recorded
        self.found = found


def locked_manifest_sha256(manifest: Mapping[str, Any]) -> str:
    """The digest a manifest locks itself with: the sha256 of the canonical JSON of its
    `locked_manifest`. Computed the same way from a manifest.json read back, so a manifest
    edited after its run no longer matches its own `manifestSha256`; the run service answers it
    for the manifest it froze."""
    # content_hash's canonical JSON, in one pass of json's C encoder: every key here is text.
    return sha256_text(document_json(locked_manifest(manifest)))


def locked_manifest(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What `locked_manifest_sha256` hashes of a manifest (manifest.json, or the part of a
    frozen manifest shaped like it): {purpose, notOnline, scenario, resolved, seed, seedPath},
    each resolved asset by its LOCKED_ASSET_FIELDS only."""
    resolved = manifest.get("resolved") or {}
    return {
        "purpose": manifest.get("purpose"),
        "notOnline": manifest.get("notOnline") or [],
        "scenario": manifest.get("scenarioVersion"),
        "resolved": {
            str(slot): {k: entry.get(k) for k in LOCKED_ASSET_FIELDS}
            if isinstance(entry, Mapping)
            else entry
            for slot, entry in resolved.items()
        }
        if isinstance(resolved, Mapping)
        else resolved,
        "seed": manifest.get("seed"),
        "seedPath": manifest.get("seedPath"),
    }


def records_sha256(record_digests: Iterable[str]) -> str:
    """The sha256 of a run's records: over each record's own sha256, one a line, in order. A
    record added, removed, moved or changed changes it; a record's clock does not."""
    digest = hashlib.sha256()
    for sha in record_digests:
        digest.update(f"{sha}\n".encode())
    return digest.hexdigest()


def layer_digests(
    record_digests: Iterable[str] | None, layers: Mapping[str, bytes | None]
) -> dict[str, str]:
    """`layerSha256` of a run: the records' sha256 (when it has records) and the sha256 of each
    JSON layer's bytes (`layers`: file name → its bytes, None when not written)."""
    out: dict[str, str] = {}
    if record_digests is not None:
        out[RECORDS_FILE] = records_sha256(record_digests)
    for name in LAYER_FILES[1:]:
        data = layers.get(name)
        if data is not None:
            out[name] = sha256_bytes(data)
    return out


def check_manifest(manifest: Mapping[str, Any], folder: Path) -> None:
    """Refuse a manifest whose `manifestSha256` no longer hashes what it locks (a manifest
    without one locks nothing: runs of other worlds)."""
    recorded = manifest.get("manifestSha256")
    if recorded is None:
        return
    found = locked_manifest_sha256(manifest)
    if recorded != found:
        raise RunAltered(
            "manifest.json was altered after the run: what it locks no longer hashes to its "
            "manifestSha256",
            file=folder / MANIFEST_FILE,
            path="manifestSha256",
            expected=found,
            recorded=str(recorded),
            found=found,
        )


def check_scenario(
    manifest: Mapping[str, Any], scenario_doc: Mapping[str, Any], folder: Path
) -> None:
    """Refuse a scenario.json whose digests differ from those the manifest recorded (the
    scenario as read from JSON: `content_hash`'s digest, every key being text)."""
    found = sha256_text(document_json(scenario_doc))
    version = manifest.get("scenarioVersion")
    version = version if isinstance(version, Mapping) else {}
    wanted = [
        ("scenarioSha256", manifest.get("scenarioSha256"), found),
        ("scenarioVersion.sha256", version.get("sha256"), found),
    ]
    for path, recorded, digest in wanted:
        if recorded is not None and recorded != digest:
            raise RunAltered(
                f"scenario.json was altered after the run: it has sha256 {digest}",
                file=folder / SCENARIO_FILE,
                path=f"{MANIFEST_FILE} {path}",
                expected=f"sha256 {recorded}, as the run recorded",
                recorded=str(recorded),
                found=digest,
            )


def check_manifest_lock(
    manifest: Mapping[str, Any], records: Sequence[Mapping[str, Any]], folder: Path
) -> None:
    """Refuse records that locked another manifest than manifest.json's `manifestSha256`."""
    recorded = manifest.get("manifestSha256")
    for record in records:
        if record.get("type") != MANIFEST_LOCKED:
            continue
        payload = record.get("payload")
        locked = payload.get("manifestSha256") if isinstance(payload, Mapping) else None
        if locked != recorded:
            raise RunAltered(
                f"manifest.json was altered after the run: its manifestSha256 is {recorded}, "
                f"but records.jsonl locked {locked} (record {record.get('recordId')})",
                file=folder / MANIFEST_FILE,
                path="manifestSha256",
                expected=f"the manifestSha256 records.jsonl locked ({locked})",
                recorded=None if locked is None else str(locked),
                found=None if recorded is None else str(recorded),
            )


def recorded_layer_digests(manifest: Mapping[str, Any], folder: Path) -> dict[str, str]:
    """manifest.json's `layerSha256` (empty for a run that recorded none: an older run, or one
    of another world)."""
    recorded = manifest.get(LAYER_SHA256)
    if recorded is None:
        return {}
    if not isinstance(recorded, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in recorded.items()
    ):
        raise DocumentError(
            f"{LAYER_SHA256} is not a mapping of file names to sha256",
            file=folder / MANIFEST_FILE,
            path=LAYER_SHA256,
            expected="{file name: sha256}",
        )
    return dict(recorded)


def altered_layers(
    manifest: Mapping[str, Any], found: Mapping[str, str | None], folder: Path
) -> list[RunAltered]:
    """Each layer whose digest the manifest recorded and that differs from `found` (file name
    → its digest as `layer_digests` computes it, None when the file is missing), in the order
    of LAYER_FILES; a layer not in `found` is not checked."""
    recorded = recorded_layer_digests(manifest, folder)
    out: list[RunAltered] = []
    for name in sorted(recorded, key=_layer_order):
        if name not in found or found[name] == recorded[name]:
            continue
        digest = found[name]
        what = "is missing" if digest is None else f"has sha256 {digest}"
        out.append(
            RunAltered(
                f"{name} was altered after the run: it {what}",
                file=folder / name,
                path=f"{MANIFEST_FILE} {LAYER_SHA256}.{name}",
                expected=f"sha256 {recorded[name]}, as the run recorded",
                recorded=recorded[name],
                found=digest,
            )
        )
    return out


def _layer_order(name: str) -> tuple[int, str]:
    return (LAYER_FILES.index(name) if name in LAYER_FILES else len(LAYER_FILES), name)
