"""The rows a run adds to the ledger, made from its files alone, and writing them.

`run_rows` is pure: the scenario (and a derived scenario version) other runs may share, the
asset versions the manifest resolved, the manifest, and the run's own rows — its run row with
its four statuses, its events and what an agent-testbed run recorded (run_content.py). The
rows are bound for one dialect, so a worker process can make them and another write them.
`write_rows` writes them inside the caller's transaction, after checking the asset versions
against their pins (asset_pins.py) and the manifest id against the manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..core.canonical import sha256_text
from ..core.errors import InputError
from ..core.versions import design_document, design_sha256
from . import tables as t
from .asset_pins import AssetEntry, LibraryFile, asset_entries, pin_asset_versions
from .bulk import TableRows, bind_mappings, insert_unless_present, lookup, write_table_rows
from .db import utc_now
from .errors import RunConflict
from .evaluations import evaluation_quality_ref
from .run_content import event_rows, testbed_rows
from .rundir import SCENARIO_FILE, RunDirectory, wall_time
from .tables import DEFAULT_TENANT, UNKNOWN_OWNER

if TYPE_CHECKING:
    from ..core.testbed_schema import Identity


@dataclass(frozen=True)
class RunRows:
    """Every row a run adds to the ledger, made from its files alone; `write_rows` checks them
    against what the ledger holds (pinned asset versions, the manifest id) and inserts them."""

    run_id: str
    path: Path
    content_sha256: str
    shared: tuple[TableRows, ...]
    """Rows other runs may have written first (the scenario, a derived scenario version):
    inserted unless present."""
    assets: tuple[tuple[AssetEntry, LibraryFile], ...]
    manifest: TableRows
    manifest_sha256: str
    manifest_assets: TableRows
    owned: tuple[TableRows, ...]
    """The run's own rows, table by table in the order of their foreign keys."""


def run_rows(
    run: RunDirectory,
    *,
    dialect: sa.Dialect,
    tenant: str = DEFAULT_TENANT,
    now: datetime | None = None,
) -> RunRows:
    """The rows of `run` for a ledger of `dialect`. Pure: it reads no database (and no file
    but the run's own, already read). Raises DocumentError for a result layer that breaks
    its contract."""
    now = utc_now() if now is None else now
    scenario = run.scenario
    engine_name = _engine_name(run)
    shared: list[TableRows] = []
    if scenario.identity is not None:
        identity = scenario.identity
        shared.append(bind_mappings(dialect, t.scenario, [scenario_row(identity, tenant, now)]))
        recorded_version = run.manifest.get("scenarioVersion") or {}
        scenario_id = identity.id
        scenario_version = str(recorded_version.get("version") or identity.version)
        derived_from = recorded_version.get("derivedFrom")
        if isinstance(derived_from, str) and derived_from:
            # An audit condition that changed the design ran a version of its own (see
            # core.versions): its spec is this run's design, and nobody has reviewed it.
            spec, spec_sha256 = _derived_spec(run)
            shared.append(
                bind_mappings(
                    dialect,
                    t.scenario_version,
                    [
                        {
                            "scenario_id": scenario_id,
                            "version": scenario_version,
                            "spec": spec,
                            "spec_sha256": spec_sha256,
                            "status": "draft",
                            "source": f"condition {run.result.condition} of an audit",
                            "derived_from": derived_from,
                            "created_by": "audit",
                            "created_at": now,
                        }
                    ],
                )
            )
    else:
        scenario_id = engine_name
        scenario_version = "sha256:" + str(run.manifest.get("scenarioSha256") or "")[:12]

    assets = asset_entries(run, tenant)
    manifest_sha = run.identity.manifest_sha256
    manifest_id = _manifest_id(manifest_sha)
    seed = run.manifest.get("seed")
    manifest = bind_mappings(
        dialect,
        t.manifest,
        [
            {
                "manifest_id": manifest_id,
                "tenant_id": tenant,
                "scenario_id": scenario_id,
                "scenario_version": scenario_version,
                "resolved": _resolved(run.manifest),
                "manifest_sha256": manifest_sha,
                "seed": seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                "created_at": now,
                "document": run.manifest,
            }
        ],
    )
    manifest_assets = bind_mappings(
        dialect,
        t.manifest_asset,
        [
            {
                "manifest_id": manifest_id,
                "slot": e.slot,
                "asset_id": e.asset_id,
                "version": e.version,
                "content_sha256": e.sha,
            }
            for e, _ in sorted(assets, key=lambda pair: pair[0].slot)
        ],
    )

    result = run.result
    events = run.events
    started = wall_time(float(events[0]["wall"])) if events else None
    finished = [e for e in events if e["type"] == "run_finished"]
    ended = wall_time(float(finished[-1]["wall"])) if finished else None
    mode = scenario.execution.mode if scenario.execution is not None else "surrogate"
    trace = run.manifest.get("traceId")
    owned = [
        bind_mappings(
            dialect,
            t.run,
            [
                {
                    "run_id": run.run_id,
                    "tenant_id": tenant,
                    "manifest_id": manifest_id,
                    "mode": mode,
                    "execution_status": result.status.execution,
                    "validity_status": result.status.validity,
                    "evidence_status": result.status.evidence,
                    "quality_ref": _quality_ref(run.path),
                    "started_at": started,
                    "ended_at": ended,
                    "terminal_reason": terminal_reason(run),
                    "trace_id": trace
                    if isinstance(trace, str) and trace
                    else sha256_text("trace|" + run.run_id)[:32],
                    "created_at": now,
                    "condition_id": result.condition,
                    "replication": result.replication,
                    "seed_path": list(result.seed_path),
                    "engine": engine_name,
                    "result": run.result_doc,
                    "content_sha256": run.content_sha256,
                    "source_dir": str(run.path.resolve()),
                    "purpose": result.purpose,
                }
            ],
        ),
        event_rows(dialect, run.run_id, events, run.event_payloads),
    ]
    owned.extend(testbed_rows(dialect, run, now))
    return RunRows(
        run_id=run.run_id,
        path=run.path,
        content_sha256=run.content_sha256,
        shared=tuple(shared),
        assets=tuple(assets),
        manifest=manifest,
        manifest_sha256=manifest_sha,
        manifest_assets=manifest_assets,
        owned=tuple(rows for rows in owned if rows.values),
    )


def scenario_row(identity: Identity, tenant: str, now: datetime) -> dict[str, Any]:
    """The row of a testbed scenario (its versions have rows of their own), in the default
    namespace; an identity without an owner is recorded as UNKNOWN_OWNER's."""
    return {
        "scenario_id": identity.id,
        "tenant_id": tenant,
        "namespace": "default",
        "name": identity.id,
        "owner": identity.owner or UNKNOWN_OWNER,
        "risk_level": identity.risk_level,
        "created_at": now,
    }


_SPECS: dict[str, tuple[dict[str, Any], str]] = {}
"""scenario.json's sha256 → the design it holds and the design's sha256: every run of a
condition has the same scenario file, and the canonical hash of its design costs more than
writing a run's events."""


def _derived_spec(run: RunDirectory) -> tuple[dict[str, Any], str]:
    key = run.file_sha256.get(SCENARIO_FILE)
    if key is not None and key in _SPECS:
        return _SPECS[key]
    spec = design_document(run.scenario_doc)
    made = spec, design_sha256(spec)
    if key is not None:
        if len(_SPECS) >= 256:
            _SPECS.clear()
        _SPECS[key] = made
    return made


def _quality_ref(run_dir: Path) -> str | None:
    """The evaluation a run folder was judged in before it was recorded (see
    ledger/evaluations.py); None when there is none, or one that no longer fits the run (the
    run is recorded all the same, unjudged)."""
    try:
        return evaluation_quality_ref(run_dir)
    except InputError:
        return None


def _manifest_id(manifest_sha256: str) -> str:
    return "manifest-" + manifest_sha256[:24]


def write_rows(conn: Connection, rows: RunRows, *, tenant: str = DEFAULT_TENANT) -> dict[str, int]:
    """Insert the rows of a run inside the caller's transaction, after checking its asset
    versions against their pins and its manifest id; returns rows per table. The caller has
    checked that the run is not recorded yet."""
    for shared in rows.shared:
        insert_unless_present(conn, shared)
    pin_asset_versions(conn, rows.assets, rows.path, tenant)
    insert_unless_present(conn, rows.manifest)
    _check_manifest(conn, _manifest_id(rows.manifest_sha256), rows.manifest_sha256, rows.path)
    insert_unless_present(conn, rows.manifest_assets)
    return {owned.table: write_table_rows(conn, owned) for owned in rows.owned}


def write_run(
    conn: Connection, run: RunDirectory, *, tenant: str = DEFAULT_TENANT
) -> dict[str, int]:
    """Insert every row of `run` inside the caller's transaction; returns rows per table.
    The caller has checked that the run is not recorded yet."""
    return write_rows(conn, run_rows(run, dialect=conn.dialect, tenant=tenant), tenant=tenant)


def _engine_name(run: RunDirectory) -> str:
    """What ran the scenario: the world's name, or `external:<program>`, the program being the
    last file of the simulator's command (the script an interpreter runs), else the command."""
    if run.scenario.world is not None:
        return run.scenario.world
    simulator = run.scenario.simulator
    if simulator is not None and simulator.name is not None:
        return "external:" + simulator.name  # the operator's simulator, by the name it declared
    command = simulator.command or [] if simulator is not None else []
    files = run.manifest.get("assets") or {}
    named = [arg for arg in command if arg in files]
    program = named[-1] if named else (command[0] if command else "simulator")
    return "external:" + Path(program).name


def _resolved(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Every exact version and sha256 the run used: the testbed's resolved assets by slot, an
    external simulator's files by name."""
    slots = manifest.get("resolved") or {}
    if slots:
        return {slot: dict(entry) for slot, entry in sorted(slots.items())}
    return {
        f"file:{name}": {"name": name, "sha256": sha}
        for name, sha in sorted((manifest.get("assets") or {}).items())
    }


def _check_manifest(conn: Connection, manifest_id: str, sha: str, run_dir: Path) -> None:
    recorded = lookup(conn, t.manifest, "manifest_sha256", "manifest_id", manifest_id)
    if recorded is None:  # inserted (or found) just before, in this transaction
        raise AssertionError(f"manifest {manifest_id} is not in the ledger")
    if recorded != sha:  # two manifests whose hashes share their first 96 bits
        raise RunConflict(
            f"manifest id {manifest_id} is recorded for another manifest ({recorded})",
            file=run_dir / "manifest.json",
        )


def terminal_reason(run: RunDirectory) -> str:
    failure = run.result.failure
    if failure is not None:
        return f"{failure.type} in {failure.stage}: {failure.message}"
    for record in reversed(run.records or []):
        if record["type"] == "conversation.closed":
            closed_by = record["payload"].get("closedBy")
            if isinstance(closed_by, str) and closed_by:
                return closed_by
    return run.result.status.execution
