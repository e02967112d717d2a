"""Manifests: a scenario's asset references resolved in the service's library to exact
versions and sha256s (`resolve`), pinned in the ledger as `simreport review import` pins them
(`pin`: content changed under a pinned version is refused), and checked against the execution
policy before a client's spec is stored or run (`refuse_unrunnable`). A run's manifest is
frozen when it is queued (`freeze`), with what its run will lock its manifest.json with
(`run_lock`, the run's checks made by `version_checks` with the statuses it was accepted
under, `frozen_status`), and read back with `get_manifest`, whose digest is the run's."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from ...core.canonical import content_hash
from ...core.errors import join_path
from ...core.execution_policy import ExecutionPolicy, spec_issues
from ...core.versions import RunChecks, VersionState, version_key
from ...ledger import tables as t
from ...ledger.asset_pins import pinned_versions
from ...ledger.db import reading, utc_now
from ...ledger.errors import AssetVersionChanged
from ...ledger.migrate import prepare_once
from ...ledger.review import import_asset, read_asset_file
from ..errors import NotFound, ServiceError, Unprocessable, issue
from .transaction import write_transaction

if TYPE_CHECKING:
    from ...core.schema import Scenario
    from ...kernel.testbed.assets import AgentAsset

SERVICE_REVIEWER: Final = "run service"
"""Who the review transitions of versions first seen by the service name."""


@dataclass(frozen=True)
class Resolved:
    slot: str
    kind: str
    name: str
    version: str
    sha256: str
    file: str
    path: Path
    content: Any = None
    """The asset's content, as its kind's model."""
    asset: Any = None
    """The kernel's ResolvedAsset: what a run's loading resolves it to."""


def resolve(scenario: Scenario, library: Path) -> list[Resolved]:
    """Every asset reference of the scenario resolved in `library` (labels → exact versions),
    or 422 naming each that does not resolve."""
    from ...kernel.testbed.assets import AssetError, AssetLibrary, manifest_references

    references = manifest_references(scenario)
    if not references:
        return []
    if not library.is_dir():
        raise ServiceError(
            f"the run service's asset library {library} is not a folder",
            code="library_unavailable",
        )
    assets = AssetLibrary(library)
    found: list[Resolved] = []
    issues = []
    for slot, ref, kind in references:
        try:
            asset = assets.resolve(ref, kind, slot)
        except AssetError as exc:
            issues.append(issue(join_path("spec", slot), exc.message, "an asset in the library"))
            continue
        try:
            file = asset.path.relative_to(library).as_posix()
        except ValueError:
            file = asset.path.as_posix()
        found.append(
            Resolved(
                slot,
                kind,
                asset.name,
                asset.version,
                asset.sha256,
                file,
                asset.path,
                asset.content,
                asset,
            )
        )
    if issues:
        raise Unprocessable(
            f"the manifest does not resolve: {issues[0]['path']}: {issues[0]['message']}",
            code="manifest_unresolved",
            issues=issues,
        )
    return found


_PINS: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], str]] = weakref.WeakKeyDictionary()
"""The pins (asset id, version) → sha256 each ledger was seen to hold, by its engine."""


def pin(engine: Engine, resolved: Sequence[Resolved], tenant: str) -> dict[str, str]:
    """Record every resolved asset version the ledger has not seen (as a draft),
    in a transaction of its own, so that a refused regression run leaves them there to be
    reviewed. A version seen before with other content is refused (422). Returns slot →
    sha256 as pinned."""
    if not resolved:
        return {}
    ids = {r.slot: asset_id(tenant, r.kind, r.name) for r in resolved}
    # A pin never changes once recorded: those seen before need no query.
    held = _PINS.setdefault(engine, {})
    if any((ids[r.slot], r.version) not in held for r in resolved):
        with reading(engine) as conn:
            held.update(pinned_versions(conn, list(ids.values())))
    unseen = [r for r in resolved if (ids[r.slot], r.version) not in held]

    def write(conn: Connection) -> dict[tuple[str, str], str]:
        now, pinned = utc_now(), {}
        for r in unseen:
            try:
                asset = read_asset_file(r.path, r.name, r.version)
                done = import_asset(conn, asset, tenant, SERVICE_REVIEWER, now)
            except AssetVersionChanged as exc:
                raise _changed(r, exc.message) from None
            pinned[(ids[r.slot], r.version)] = done.sha256
        return pinned

    if unseen:
        held.update(write_transaction(engine, write))  # once committed
    for r in resolved:
        pinned = held[(ids[r.slot], r.version)]
        if pinned != r.sha256:
            raise _changed(
                r,
                f"asset_version_changed: {r.name}@{r.version} is pinned in the ledger with "
                f"sha256 {pinned}, but {r.file} in the library now has sha256 {r.sha256}: its "
                "content changed without a new version",
            )
    return {r.slot: r.sha256 for r in resolved}


def _changed(r: Resolved, message: str) -> Unprocessable:
    return Unprocessable(
        message,
        code="asset_version_changed",
        issues=[issue(join_path("spec", r.slot), message, "a new version for new content")],
    )


def refuse_unrunnable(
    scenario: Scenario, policy: ExecutionPolicy, library: Path, locate: Callable[[str], str]
) -> list[Resolved]:
    """What a client's spec must pass before it is stored or run: 422 naming every field it may
    not carry under `policy` (`not_allowed`: a command, a URL, a key variable, an entry, a
    provider, endpoint or model the operator did not declare), every asset reference that does
    not resolve in `library` (`manifest_unresolved`), every surrogate or script inside the SUT
    boundary (`refuse_boundary_replaced`). (A setting the testbed does not implement fails the
    scenario's validation before.) `locate` turns a path in the spec into one in the request.
    Returns the resolved assets."""
    try:
        resolved = resolve(scenario, library)
    except Unprocessable:
        # What the policy refuses is said first: it does not depend on the library.
        _refuse_disallowed(scenario, policy, None, locate)
        raise
    agent = agent_under_test(resolved)
    _refuse_disallowed(scenario, policy, agent.entry if agent is not None else None, locate)
    refuse_boundary_replaced(scenario, agent, locate)
    return resolved


def agent_under_test(resolved: Sequence[Resolved]) -> AgentAsset | None:
    """The agent asset `sut.agent` resolved to (None: the scenario has none)."""
    from ...kernel.testbed.assets import AgentAsset

    agent = next((r.content for r in resolved if r.slot == "sut.agent"), None)
    return agent if isinstance(agent, AgentAsset) else None


def refuse_boundary_replaced(
    scenario: Scenario, agent: AgentAsset | None, locate: Callable[[str], str]
) -> None:
    """422 `sut_boundary_replaced` naming every field that replaces something inside the SUT
    boundary, as loading the run would refuse it (the kernel's `located_replacements`); without
    the agent's asset, what the scenario replaces whatever the agent is."""
    from ...kernel.testbed.boundary import REFUSAL, located_replacements

    if scenario.sut is None:
        return
    replaced = [
        issue(
            locate(found.path),
            found.message,
            f"{', '.join(found.replaced)} left to the agent under test, or out of sut.boundary",
        )
        for found in located_replacements(scenario, agent)
    ]
    if replaced:
        raise _refused(REFUSAL, "the spec replaces what it tests", replaced)


def sut_agent(scenario: Scenario, library: Path) -> AgentAsset | None:
    """The agent asset the scenario's `sut.agent` resolves to in `library` (None: it has none,
    or it does not resolve there)."""
    from ...kernel.testbed.assets import AgentAsset, AssetError, AssetLibrary

    if scenario.sut is None or not library.is_dir():
        return None
    try:
        asset = AssetLibrary(library).resolve(scenario.sut.agent, "agent", "sut.agent")
        return asset.typed(AgentAsset)
    except (AssetError, TypeError):
        return None


def _refuse_disallowed(
    scenario: Scenario,
    policy: ExecutionPolicy,
    agent_entry: str | None,
    locate: Callable[[str], str],
) -> None:
    found = [
        issue(locate(i.path), i.message, i.expected)
        for i in spec_issues(scenario, policy, agent_entry=agent_entry)
    ]
    if found:
        raise _refused("not_allowed", "not allowed by the run service's execution policy", found)


def _refused(code: str, what: str, issues: list[dict[str, Any]]) -> Unprocessable:
    first = issues[0]
    return Unprocessable(f"{what}: {first['path']}: {first['message']}", code=code, issues=issues)


def operator_resources(scenario: Scenario) -> dict[str, str]:
    """The operator's resources a scenario names, by where it names them: what its manifest
    records."""
    found = {}
    if scenario.llm.endpoint is not None:
        found["llm.endpoint"] = scenario.llm.endpoint
    user_llm = scenario.user.llm if scenario.user is not None else None
    if user_llm is not None and user_llm.endpoint is not None:
        found["user.llm.endpoint"] = user_llm.endpoint
    if scenario.simulator is not None and scenario.simulator.name is not None:
        found["simulator.name"] = scenario.simulator.name
    return found


@dataclass(frozen=True)
class Frozen:
    """A run's manifest as frozen when the run is queued: its document, its sha256, and the
    asset versions it resolved with the sha256 each is pinned with (slot → sha256)."""

    document: dict[str, Any]
    sha256: str
    resolved: Sequence[Resolved]
    pinned: Mapping[str, str]

    @property
    def manifest_id(self) -> str:
        return "manifest-" + self.sha256[:24]

    def rows(
        self, *, tenant: str, scenario_id: str, version: str, seed: int, now: datetime
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The manifest's row and its assets' rows."""
        manifest_row = {
            "manifest_id": self.manifest_id,
            "tenant_id": tenant,
            "scenario_id": scenario_id,
            "scenario_version": version,
            "resolved": self.document["resolved"],
            "manifest_sha256": self.sha256,
            "seed": seed,
            "created_at": now,
            "document": self.document,
        }
        asset_rows = [
            {
                "manifest_id": self.manifest_id,
                "slot": r.slot,
                "asset_id": asset_id(tenant, r.kind, r.name),
                "version": r.version,
                "content_sha256": self.pinned[r.slot],
            }
            for r in self.resolved
        ]
        return manifest_row, asset_rows


def freeze(
    scenario: Scenario,
    *,
    scenario_id: str,
    version: str,
    spec_sha256: str,
    resolved: Sequence[Resolved],
    pinned: Mapping[str, str],
    mode: str,
    purpose: str,
    lock: Mapping[str, Any] | None = None,
) -> Frozen:
    """The manifest of a run of `scenario` (the run document of `scenario_id@version`):
    the version, the asset versions resolved and pinned, world, seed, mode, budget and purpose,
    the operator's resources it names, and — an agent-testbed run's — the `lock` its run will
    lock its manifest.json with (`run_lock`)."""
    document: dict[str, Any] = {
        "scenario": {
            "scenarioId": scenario_id,
            "id": scenario.identity.id if scenario.identity is not None else None,
            "version": version,
            "specSha256": spec_sha256,
        },
        "resolved": {
            r.slot: {
                "kind": r.kind,
                "name": r.name,
                "version": r.version,
                "sha256": pinned[r.slot],
                "file": r.file,
            }
            for r in resolved
        },
        "world": scenario.world,
        "seed": scenario.seed,
        "mode": mode,
        "budget": scenario.execution.budget.to_doc() if scenario.execution is not None else None,
        "purpose": purpose,
    }
    resources = operator_resources(scenario)
    if resources:  # absent when the run uses none, so other manifests keep their digests
        document["resources"] = resources
    if lock is not None:
        document["lock"] = dict(lock)
    return Frozen(document, content_hash(document), resolved, pinned)


LOCK_FIELDS: Final = ("purpose", "notOnline", "scenarioVersion", "seed", "seedPath")
"""What a frozen manifest's `lock` holds besides `manifestSha256`: the parts of manifest.json
the run's digest covers beside the resolved assets (core.run_digests.locked_manifest)."""


def version_checks(
    *,
    purpose: str,
    scenario: Mapping[str, Any],
    scenario_status: str,
    resolved: Mapping[str, Mapping[str, Any]],
    statuses: Mapping[str, str],
    ledger: str | None = None,
) -> RunChecks:
    """The checks a run's loading is given: its purpose; the scenario version (`scenario`: the
    frozen document's `scenario` part) with its design digest and `scenario_status`; each asset
    version resolved (slot → kind, name, version, sha256) with its status (`statuses`, by slot;
    draft when missing), pinned to that version."""
    identity_id = scenario.get("id")
    version = str(scenario.get("version"))
    spec_sha256 = str(scenario.get("specSha256"))
    scenarios = {}
    if identity_id:
        scenarios[version_key(str(identity_id), version)] = VersionState(
            sha256=spec_sha256, status=scenario_status
        )
    return RunChecks(
        purpose=purpose,
        spec_sha256=spec_sha256 if identity_id else None,
        version=version if identity_id else None,
        scenarios=scenarios,
        assets={
            version_key(entry["name"], entry["version"]): VersionState(
                sha256=entry["sha256"], status=statuses.get(slot, "draft")
            )
            for slot, entry in resolved.items()
        },
        ledger=ledger,
        pins={entry["name"]: entry["version"] for entry in resolved.values()},
    )


def run_lock(
    scenario: Scenario, resolved: Sequence[Resolved], library: Path, checks: RunChecks
) -> dict[str, Any] | None:
    """What a run of `scenario` (an agent-testbed scenario; None for any other) will lock its
    manifest with while loading, given `checks`: its LOCK_FIELDS and `manifestSha256`, made by
    the functions the run's loading makes them with. 422 for what loading would refuse of
    those versions (`version_not_online`: a retired version; a changed pin)."""
    from ...kernel.engine import canonical_scenario, recorded_scenario
    from ...kernel.testbed.assets import manifest_facts
    from ...kernel.testbed.lifecycle import TestbedFailure
    from ...kernel.testbed.version_checks import check_versions

    if scenario.sut is None:
        return None
    doc = recorded_scenario(canonical_scenario(scenario))
    assets = {r.slot: r.asset for r in resolved}
    identity = doc.get("identity")
    try:
        not_online = check_versions(identity or {}, assets, checks)
    except TestbedFailure as exc:
        raise Unprocessable(str(exc.message), code=exc.kind) from None
    facts = manifest_facts(
        doc, assets, library, identity=identity, checks=checks, not_online=not_online
    )
    lock = {
        "purpose": checks.purpose,
        "notOnline": facts["notOnline"],
        "scenarioVersion": facts["scenarioVersion"],
        "seed": doc.get("seed"),
        "seedPath": doc.get("seedPath"),
    }
    return {**lock, "manifestSha256": facts["manifestSha256"]}


def frozen_status(document: Mapping[str, Any], kind: str, name: str, version: str, now: str) -> str:
    """The review status a frozen manifest's run checks a version with: the one it had when
    the run was accepted (its lock's `notOnline`; online when not listed there), unless it was
    retired since (`now` offline: loading refuses it). Without a lock (frozen before it had
    one), `now`."""
    lock = document.get("lock")
    if not isinstance(lock, Mapping) or now == "offline":
        return now
    for entry in lock.get("notOnline") or []:
        if (entry.get("kind"), entry.get("name"), entry.get("version")) == (kind, name, version):
            return str(entry.get("status"))
    return "online"


def asset_id(tenant: str, kind: str, name: str) -> str:
    return f"{tenant}:{kind}:{name}"  # as ingest and review name asset rows


def get_manifest(engine: Engine, manifest_id: str, *, tenant: str) -> dict[str, Any]:
    """The frozen manifest: every asset version it resolved (`resolved`: slot → kind, name,
    version, sha256, file), what its digest covers (`locked`) and the digest,
    `manifest_sha256`: the sha256 of the canonical JSON of `locked` (core.canonical). For an
    agent-testbed run, `locked` is what the run locks its manifest.json and its
    `manifest.locked` record with (core.run_digests.locked_manifest: purpose, notOnline,
    scenario, each resolved asset's kind, name, version and sha256, seed, seedPath), so the
    digest is the run's `manifestSha256`; for any other, the frozen document itself."""
    from ...core.run_digests import locked_manifest

    prepare_once(engine)
    m = t.manifest.c
    with reading(engine) as conn:
        row = conn.execute(
            sa.select(m.resolved, m.manifest_sha256, m.document).where(
                m.manifest_id == manifest_id, m.tenant_id == tenant
            )
        ).first()
    if row is None:
        raise NotFound(f"there is no manifest {manifest_id}", code="unknown_manifest")
    document = dict(row.document or {})
    # A service run's lock, or the manifest.json of a run recorded from its folder.
    held = document.get("lock")
    lock: Mapping[str, Any] = held if isinstance(held, Mapping) else document
    if isinstance(lock.get("manifestSha256"), str):
        locked = locked_manifest({**lock, "resolved": row.resolved})
        return {"resolved": row.resolved, "locked": locked, "manifest_sha256": content_hash(locked)}
    if document and content_hash(document) == row.manifest_sha256:
        return {
            "resolved": row.resolved,
            "locked": document,
            "manifest_sha256": row.manifest_sha256,
        }
    return {"resolved": row.resolved, "locked": None, "manifest_sha256": row.manifest_sha256}
