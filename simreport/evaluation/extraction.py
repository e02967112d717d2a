"""A run's observations and completeness as its records give them, world by world, and the check
that the run folder's observations.json and completeness.json say the same.

An `Extraction`, registered under the world's name, recomputes the layers from `RunMaterial`
(scenario, manifest, records, locked assets); a written layer that differs raises
`LayerMismatch`. A run without records, or of a world with no extraction, is undecidable.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..core.canonical import canonical_json
from ..core.errors import DocumentError, InputError
from ..core.run_digests import (
    LAYER_FILES,
    RECORDS_FILE,
    RunAltered,
    altered_layers,
    check_manifest_lock,
    check_scenario,
    records_sha256,
)
from ..core.schema import Model, Scenario
from ..core.validation import validate_model
from ..kernel.registry import Registry
from ..kernel.testbed.assets import (
    AssetError,
    AssetKind,
    AssetLibrary,
    EnvironmentDataAsset,
    ResolvedAsset,
    SimulatorConfigAsset,
    ToolContractAsset,
    UserPolicyAsset,
)
from ..kernel.testbed.domain.model import DomainAsset
from ..kernel.testbed.domain.observations import observe
from ..kernel.testbed.participants import SurrogateParticipant
from ..kernel.testbed.records import (
    COMPLETENESS_FILE,
    OBSERVATIONS_FILE,
    Observations,
    completeness,
    record_digest,
)
from ..kernel.worlds.refund_desk.domain import refund_domain
from ..kernel.worlds.refund_desk.observations import refund_observations
from ..kernel.worlds.refund_desk.user_quality import (
    add_quality_observations,
    assess_run,
    named_rules,
)

MANIFEST_FILE = "manifest.json"
SCENARIO_FILE = "scenario.json"
M = TypeVar("M", bound=Model)


class LayerMismatch(InputError):
    """A result layer of a run folder says other than the run's records give: it was altered
    after the run. `file` is the layer, `path` the place in it; `key` is the observation's fact
    key (or the completeness check), `recorded` the value the file holds and `recomputed` the
    one the records give (None where one side has no such entry). `code` names the refusal for
    programs."""

    code = "layer_mismatch"

    def __init__(
        self, message: str, *, key: str, recorded: Any, recomputed: Any, **where: Any
    ) -> None:
        super().__init__(message, **where)
        self.key = key
        self.recorded = recorded
        self.recomputed = recomputed


@dataclass(frozen=True)
class RunMaterial:
    """A run as its folder holds it, for an extraction: its scenario, its manifest, its records
    (their digests checked) and the asset library its manifest locked."""

    folder: Path
    scenario: Scenario
    manifest: Mapping[str, Any]
    records: Sequence[Mapping[str, Any]]

    def asset(self, slot: str, kind: AssetKind, model: type[M]) -> M:
        """The asset the manifest resolved in `slot`, read from the run's library and checked
        against the sha256 the manifest locked."""
        provenance = self.scenario.provenance
        library = provenance.asset_library if provenance is not None else None
        asset = locked_asset(self.folder, self.manifest, library, slot, kind)
        return asset.typed(model)


@dataclass(frozen=True)
class DerivedLayers:
    """The layers the records give: observations.json's and completeness.json's content."""

    observations: dict[str, Any]
    completeness: dict[str, Any]


Extraction = Callable[[RunMaterial], DerivedLayers]
EXTRACTIONS: Registry[Extraction] = Registry("observation extraction")
"""World name → how its runs' observations and completeness follow from their records."""


def locked_asset(
    folder: Path, manifest: Mapping[str, Any], library_dir: str | None, slot: str, kind: AssetKind
) -> ResolvedAsset:
    """The asset the manifest resolved in `slot`, from the library (`library_dir`, default
    `assets`) under its `assetRoot`; refused (InputError, located) when it is gone or differs
    from the sha256 the manifest locked."""
    where = f"resolved.{slot}"
    entry = (manifest.get("resolved") or {}).get(slot)
    if not isinstance(entry, Mapping):
        raise InputError(
            f"manifest.json resolved no {slot}",
            file=folder / MANIFEST_FILE,
            path=where,
            expected=f"the {kind} asset the run resolved",
        )
    root = manifest.get("assetRoot")
    if not isinstance(root, str) or not root:
        raise InputError(
            f"manifest.json records no assetRoot, so the run's {slot} cannot be found",
            file=folder / MANIFEST_FILE,
            path="assetRoot",
            expected="the scenario's folder",
        )
    library = Path(root) / (library_dir or "assets")
    name, version, digest = (str(entry.get(k)) for k in ("name", "version", "sha256"))
    try:
        asset = AssetLibrary(library).resolve(f"{name}@{version}", kind, slot)
    except AssetError as exc:
        raise InputError(
            f"the {slot} the run resolved cannot be read: {exc}",
            file=library / str(entry.get("file") or name),
            path=f"{MANIFEST_FILE} {where}",
            expected=f"{name}@{version} with sha256 {digest}",
        ) from None
    if asset.sha256 != digest:
        raise InputError(
            f"the {slot} asset changed since the run: its sha256 is {asset.sha256}, the "
            f"manifest locked {digest}",
            file=asset.path,
            path=f"{MANIFEST_FILE} {where}",
            expected=f"the file {name}@{version} the run resolved",
        )
    return asset


# --------------------------------------------------------------------------- the check


def check_against_records(
    folder: Path,
    manifest: Mapping[str, Any],
    layers: Mapping[str, dict[str, Any] | None],
    inputs: dict[str, str | None],
) -> list[str]:
    """Check a run folder's layers against its records (see the module's docstring): raises
    RunAltered for a digest that does not match and LayerMismatch for a layer its records do
    not give; returns why the layers cannot be checked (empty when they were). `layers` holds
    each layer file's content as read (None: missing or unreadable); `inputs` holds the sha256
    of each layer file read (None: missing) and gets records.jsonl's: the sha256 of its
    records' own digests (`records_sha256`), which leaves the real-clock readings out, so a
    rerun of the same run is evaluated to the same bytes."""
    data = _read(folder / RECORDS_FILE)
    records = _records(data, folder / RECORDS_FILE) if data is not None else None
    digest = None if records is None else records_sha256(r["sha256"] for r in records)
    inputs[RECORDS_FILE] = digest
    unchecked: list[str] = []
    world = str(manifest.get("world") or "")
    if records is None:
        unchecked.append(
            f"{RECORDS_FILE} missing: the observations cannot be checked against the records"
        )
    elif world not in EXTRACTIONS:
        unchecked.append(f"no extraction of observations is known for world {world!r}")
    if records is not None:
        # The records first: the layers are checked against them.
        _refuse_altered(manifest, {RECORDS_FILE: digest}, folder)
        check_manifest_lock(manifest, records, folder)
        if world in EXTRACTIONS:
            _check_derived(folder, manifest, layers, EXTRACTIONS.get(world), records)
    # Then every other layer the run recorded a digest of (evidence.json among them).
    others = {n: d for n, d in inputs.items() if n in LAYER_FILES and n != RECORDS_FILE}
    _refuse_altered(manifest, others, folder)
    return unchecked


def _check_derived(
    folder: Path,
    manifest: Mapping[str, Any],
    layers: Mapping[str, dict[str, Any] | None],
    extraction: Extraction,
    records: Sequence[Mapping[str, Any]],
) -> None:
    """Refuse observations.json or completeness.json where they differ from what `extraction`
    makes of the records."""
    scenario_doc = _object(folder / SCENARIO_FILE)
    check_scenario(manifest, scenario_doc, folder)
    scenario = validate_model(Scenario, scenario_doc, file=folder / SCENARIO_FILE)
    derived = extraction(RunMaterial(folder, scenario, manifest, records))
    written = layers.get(OBSERVATIONS_FILE)
    if written is not None:
        _compare_observations(written, derived.observations, folder / OBSERVATIONS_FILE)
    written = layers.get(COMPLETENESS_FILE)
    if written is not None:
        _compare_completeness(written, derived.completeness, folder / COMPLETENESS_FILE)


def _refuse_altered(
    manifest: Mapping[str, Any], found: Mapping[str, str | None], folder: Path
) -> None:
    """Raise the first layer of `found` that differs from its recorded digest; a missing one
    leaves the criteria undecidable instead (`layersReadable`)."""
    for altered in altered_layers(manifest, found, folder):
        if altered.found is not None:
            raise altered


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror}", file=path) from None


def _object(path: Path) -> dict[str, Any]:
    data = _read(path)
    if data is None:
        raise DocumentError("file not found", file=path, expected="the run's scenario.json")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DocumentError(f"not valid JSON: {exc}", file=path) from None
    if not isinstance(value, dict):
        raise DocumentError("expected a JSON object", file=path)
    return value


def _records(data: bytes, path: Path) -> list[dict[str, Any]]:
    """records.jsonl's records, each checked against its own sha256."""
    records: list[dict[str, Any]] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError("not UTF-8 text", file=path) from None
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise DocumentError(f"not valid JSON: {exc}", file=path, line=number) from None
        if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
            raise DocumentError(
                "expected a record with its sha256", file=path, line=number, path="sha256"
            )
        found = record_digest(record)
        if found != record["sha256"]:
            raise RunAltered(
                f"record {record.get('recordId')} was altered after the run: its content hashes "
                f"to {found}, its sha256 says {record['sha256']}",
                file=path,
                line=number,
                path="sha256",
                expected=record["sha256"],
                recorded=record["sha256"],
                found=found,
            )
        records.append(record)
    return records


def _same(a: Any, b: Any) -> bool:
    return canonical_json(a) == canonical_json(b)


def _shown(value: Any) -> str:
    return "none" if value is None else canonical_json(value)


def _compare_observations(
    recorded: Mapping[str, Any], derived: Mapping[str, Any], file: Path
) -> None:
    """Refuse observations.json where it differs from what the records give."""
    items = recorded.get("observations")
    written = {
        str(item.get("factKey")): (index, item)
        for index, item in enumerate(items if isinstance(items, list) else [])
        if isinstance(item, Mapping)
    }
    given = {str(item["factKey"]): item for item in derived["observations"]}
    for key in sorted(set(written) | set(given)):
        index, item = written.get(key, (None, None))
        want = given.get(key)
        if item is None or want is None:
            where = "observations" if index is None else f"observations.{index}"
            raise _mismatch(
                file, where, key, item and item.get("value"), want and want.get("value")
            )
        for field in ("value", "derivedFrom", "observationId", "extractor"):
            if not _same(item.get(field), want.get(field)):
                raise _mismatch(
                    file, f"observations.{index}.{field}", key, item.get(field), want.get(field)
                )
    missing = recorded.get("missing")
    written_missing = {
        str(m.get("factKey")): m.get("reason")
        for m in (missing if isinstance(missing, list) else [])
        if isinstance(m, Mapping)
    }
    given_missing = {str(m["factKey"]): m["reason"] for m in derived["missing"]}
    for key in sorted(set(written_missing) | set(given_missing)):
        if written_missing.get(key) != given_missing.get(key):
            raise _mismatch(
                file, "missing", key, written_missing.get(key), given_missing.get(key), "missing"
            )
    if not _same(recorded.get("extractor"), derived.get("extractor")):
        raise _mismatch(
            file, "extractor", "extractor", recorded.get("extractor"), derived.get("extractor")
        )


def _compare_completeness(
    recorded: Mapping[str, Any], derived: Mapping[str, Any], file: Path
) -> None:
    """Refuse completeness.json where it differs from what the records give."""
    written = recorded.get("checks")
    written = written if isinstance(written, Mapping) else {}
    given = derived["checks"]
    for key in sorted(set(written) | set(given)):
        item, want = written.get(key), given.get(key)
        if not isinstance(item, Mapping) or want is None:
            raise _mismatch(file, f"checks.{key}", key, item, want, "check")
        for field in ("status", "detail"):
            if not _same(item.get(field), want.get(field)):
                raise _mismatch(
                    file, f"checks.{key}.{field}", key, item.get(field), want.get(field), "check"
                )


def _mismatch(
    file: Path, path: str, key: str, recorded: Any, recomputed: Any, what: str = "observation"
) -> LayerMismatch:
    return LayerMismatch(
        f"{file.name} was altered after the run: {what} {key} is {_shown(recorded)} there, the "
        f"records give {_shown(recomputed)}",
        file=file,
        path=path,
        expected=f"{_shown(recomputed)} (what {RECORDS_FILE} gives)",
        key=key,
        recorded=recorded,
        recomputed=recomputed,
    )


# --------------------------------------------------------------------------- the refund desk


@EXTRACTIONS.register("refund_desk")
def refund_desk_layers(run: RunMaterial) -> DerivedLayers:
    """The refund desk's layers, extracted as its COLLECTING stage does: the facts about the
    order the user's private facts bind (when the environment data holds it), through the
    interaction's action entry, with each participant reached through its tool; then the user
    simulator's quality control; and completeness, with the fault check when faults were
    planned."""
    s = run.scenario
    assert s.user is not None
    env = run.asset("environment.data", "env_data", EnvironmentDataAsset)
    order = s.user.private_facts.order_number
    bound = order if order is not None and order in {o.id for o in env.orders} else None
    participants = {
        surrogate.name: surrogate
        for surrogate in (SurrogateParticipant.of(p) for p in s.participants or [])
    }
    contracts = s.environment.tool_contracts if s.environment is not None else []
    try:
        tools = [
            tool
            for i in range(len(contracts))
            for tool in run.asset(
                f"environment.toolContracts.{i}", "tool_contract", ToolContractAsset
            ).tools
        ]
        obs = refund_observations(
            run.records,
            refund_domain(env, tools),
            order_id=bound,
            action_entry=s.interaction.action_entry
            if s.interaction is not None
            else "create_refund",
            participants={p.id: p.name for p in participants.values()},
        )
    except InputError:
        raise  # a locked asset that is gone or changed: refused, located
    except Exception as exc:  # failure is data, as the run recorded it
        obs = Observations()
        obs.miss("*", f"extraction failed: {type(exc).__name__}: {exc}")
    _user_quality(run, obs)
    return _derived(obs, run)


def _user_quality(run: RunMaterial, obs: Observations) -> None:
    """The `user.qc.*` observations, as the run's quality control made them."""
    s = run.scenario
    assert s.user is not None
    policy = run.asset("user.policy", "user_policy", UserPolicyAsset)
    wording = run.asset("user.simulator", "simulator_config", SimulatorConfigAsset)
    simulator = run.manifest.get("userSimulator")
    mode = simulator.get("mode") if isinstance(simulator, Mapping) else None
    try:
        doc = assess_run(
            run.records,
            s.user,
            rules=named_rules(policy.reaction_rules, s.user.behavior.reaction_rules),
            give_up_ms=policy.patience[s.user.persona.patience].give_up_ms,
            order_pattern=wording.order_number_pattern,
            mode="exploration" if mode == "exploration" else "regression",
        )
    except Exception as exc:  # failure is data, as the run recorded it
        obs.miss("user.qc.*", f"user quality control failed: {type(exc).__name__}: {exc}")
        return
    add_quality_observations(obs, doc, run.records)


def _derived(obs: Observations, run: RunMaterial) -> DerivedLayers:
    """The layers as written: the observations, and completeness over the same records."""
    faults_planned = bool(run.scenario.events and run.scenario.events.triggers)
    return DerivedLayers(
        json.loads(canonical_json(obs.to_doc())),
        json.loads(canonical_json(completeness(run.records, faults_planned=faults_planned))),
    )


@EXTRACTIONS.register("testbed")
def testbed_layers(run: RunMaterial) -> DerivedLayers:
    """A domain run's layers, extracted as its COLLECTING stage does: the domain's declared
    observations over the records and the user's facts, then completeness."""
    s = run.scenario
    assert s.user is not None
    domain = run.asset("environment.domain", "domain", DomainAsset)
    try:
        obs = observe(run.records, domain, s.user.facts)
    except Exception as exc:  # failure is data, as the run recorded it
        obs = Observations()
        obs.miss("*", f"extraction failed: {type(exc).__name__}: {exc}")
    faults_planned = bool(s.events and s.events.triggers)
    return DerivedLayers(
        json.loads(canonical_json(obs.to_doc())),
        json.loads(canonical_json(completeness(run.records, faults_planned=faults_planned))),
    )
