"""Checking, while loading, the versions a testbed run resolved against what the harness handed it.

The harness reads the ledger; the run only compares. Before any agent call a run is refused when
the scenario file's design is not the one pinned for its declared version
(`scenario_version_changed`), when an asset file's content is not the one pinned for its name and
version (`asset_version_changed`), when a version was retired, and — for a regression run — when
any version it records is not online (`version_not_online`). Statuses come from the ledger where
it holds the version; a version it has not seen yet is a draft, whatever its file's header says
(only review puts a version online).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...core.versions import RunChecks, VersionState, version_key
from .assets import ResolvedAsset
from .lifecycle import TestbedFailure

SCENARIO_CHANGED = "scenario_version_changed"
ASSET_CHANGED = "asset_version_changed"
NOT_ONLINE = "version_not_online"


def _in(checks: RunChecks) -> str:
    return f"the ledger {checks.ledger}" if checks.ledger else "the ledger"


def check_versions(
    identity: Mapping[str, Any],
    resolved: Mapping[str, ResolvedAsset],
    checks: RunChecks,
) -> list[dict[str, str]]:
    """Raise TestbedFailure (stage loading) for the first kind of problem found; return the
    versions the run records that are not online (kind, name, version, status), which an
    exploration run writes into its manifest."""
    scenario_id = str(identity.get("id"))
    declared = str(identity.get("version"))
    pin = checks.scenarios.get(version_key(scenario_id, declared))
    if pin is not None and checks.spec_sha256 is not None and pin.sha256 != checks.spec_sha256:
        raise TestbedFailure(
            f"scenario {scenario_id}@{declared} is pinned in {_in(checks)} "
            f"with design sha256 {pin.sha256}, but the scenario file now has {checks.spec_sha256}: "
            "its design changed without a new version",
            stage="loading",
            kind=SCENARIO_CHANGED,
        )
    changed = []
    for slot, asset in sorted(resolved.items()):
        held = checks.assets.get(version_key(asset.name, asset.version))
        if held is not None and held.sha256 != asset.sha256:
            changed.append(
                f"{asset.name}@{asset.version} ({asset.path.name}, at {slot}) is pinned in "
                f"{_in(checks)} with sha256 {held.sha256}, but the file now has {asset.sha256}"
            )
    if changed:
        raise TestbedFailure(
            "; ".join(changed) + ": content changed without a new version",
            stage="loading",
            kind=ASSET_CHANGED,
        )

    recorded = checks.version or declared
    held_scenario = checks.scenarios.get(version_key(scenario_id, recorded))
    # Unseen, or a derived version nobody has reviewed: a draft.
    scenario_status = held_scenario.status if held_scenario is not None else "draft"
    statuses = [("scenario", scenario_id, recorded, scenario_status)]
    for _, asset in sorted(resolved.items()):
        held = checks.assets.get(version_key(asset.name, asset.version))
        statuses.append(
            ("asset", asset.name, asset.version, held.status if held is not None else "draft")
        )
    not_online = [
        {"kind": kind, "name": name, "version": version, "status": status}
        for kind, name, version, status in dict.fromkeys(statuses)
        if status != "online"
    ]
    retired = [v for v in not_online if v["status"] == "offline"]
    if retired or (checks.purpose == "regression" and not_online):
        refused = retired or not_online
        listed = ", ".join(f"{v['name']}@{v['version']} ({v['status']})" for v in refused)
        why = (
            "retired (offline) versions cannot run"
            if retired
            else "a regression run needs every version it records online; run it as "
            "exploration, or review and publish them (`simreport review`)"
        )
        raise TestbedFailure(f"{listed}: {why}", stage="loading", kind=NOT_ONLINE)
    return not_online


def recorded_checks(manifest: Mapping[str, Any]) -> RunChecks:
    """The checks a recorded run was given, as far as its manifest tells them: its purpose, the
    version it recorded, and the digest and status of every version it resolved (online unless
    its `notOnline` says otherwise). A replay runs under these, so it locks the same manifest,
    and an asset file changed since fails it as it would fail a run."""
    scenario = manifest.get("scenarioVersion") or {}
    statuses = {
        version_key(str(v.get("name")), str(v.get("version"))): str(v.get("status"))
        for v in manifest.get("notOnline") or []
        if isinstance(v, Mapping)
    }
    assets = {
        version_key(str(r["name"]), str(r["version"])): VersionState(
            sha256=str(r["sha256"]),
            status=statuses.get(version_key(str(r["name"]), str(r["version"])), "online"),
        )
        for r in (manifest.get("resolved") or {}).values()
        if isinstance(r, Mapping) and {"name", "version", "sha256"} <= set(r)
    }
    scenarios = {}
    version = scenario.get("version")
    if scenario.get("id") and version:
        key = version_key(str(scenario["id"]), str(version))
        scenarios[key] = VersionState(
            sha256=str(scenario.get("specSha256") or scenario.get("designSha256") or ""),
            status=statuses.get(key, "online"),
        )
    return RunChecks.model_validate(
        {
            "purpose": manifest.get("purpose") or "exploration",
            "specSha256": scenario.get("specSha256"),
            "version": version,
            "derivedFrom": scenario.get("derivedFrom"),
            "scenarios": {k: v.to_doc() for k, v in scenarios.items()},
            "assets": {k: v.to_doc() for k, v in assets.items()},
        }
    )


__all__ = ["ASSET_CHANGED", "NOT_ONLINE", "SCENARIO_CHANGED", "check_versions", "recorded_checks"]
