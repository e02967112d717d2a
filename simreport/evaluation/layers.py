"""A run directory as the evaluator reads it: the run's own outputs, checked before any verdict.

A manifest, evaluation spec, record or layer altered after the run is an `InputError` (located;
`RunAltered`, `LayerMismatch`); a run that never finished or never resolved an evaluation spec is
`NotEvaluable`; missing or disagreeing layers make every criterion undecidable, naming the check
that failed. The rules: docs/evaluation.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.canonical import sha256_bytes, to_plain
from ..core.errors import DocumentError, InputError
from ..core.run_digests import RunAltered, locked_manifest_sha256
from ..core.schema import RunResult
from ..kernel.testbed.assets import (
    EvaluationSpecAsset,
    expectation_needs,
)
from ..kernel.testbed.records import (
    COMPLETENESS_FILE,
    DECISIONS_CHECK,
    EVIDENCE_FILE,
    OBSERVATIONS_FILE,
    Observation,
    Observations,
    build_evidence,
)
from .extraction import check_against_records, locked_asset

MANIFEST_FILE = "manifest.json"
RESULT_FILE = "result.json"
SCENARIO_FILE = "scenario.json"
SPEC_SLOT = "evaluationRef.assertions"
LAYER_FILES = (OBSERVATIONS_FILE, EVIDENCE_FILE, COMPLETENESS_FILE)
CHECK_STATUSES = ("present", "missing", "not_applicable")
EVIDENCE_FIELDS = ("check", "observationIds", "factKeys", "evidenceRefs", "missing", "sufficient")
"""What evidence.json says of each criterion, all of it derivable from observations.json."""

__all__ = ["DECISIONS_CHECK", "NotEvaluable", "RunLayers", "read_run"]


class NotEvaluable(InputError):
    """The run resolved no evaluation spec, so there is nothing to judge it by."""


@dataclass
class RunLayers:
    """One run's outputs as read (`read_run`), or as given (`from_documents`), with the
    evaluation spec its manifest locked."""

    spec: EvaluationSpecAsset
    validity: str
    """result.json's `status.validity`."""
    evidence_status: str
    """result.json's `status.evidence`."""
    observations: dict[str, Any] | None = None
    evidence: dict[str, Any] | None = None
    completeness: dict[str, Any] | None = None
    unreadable: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    """Which run: its condition, replication and manifestSha256."""
    spec_version: dict[str, str] = field(default_factory=dict)
    inputs: dict[str, str | None] = field(default_factory=dict)
    """sha256 of each file read (None: absent), so a later change to one shows; the manifest
    counts by its own manifestSha256 (`run`)."""

    @classmethod
    def from_documents(
        cls,
        spec: EvaluationSpecAsset,
        *,
        observations: dict[str, Any],
        evidence: dict[str, Any],
        completeness: dict[str, Any],
        validity: str = "valid",
        evidence_status: str = "complete",
    ) -> RunLayers:
        """Layers given as documents (what the files would hold)."""
        return cls(spec, validity, evidence_status, observations, evidence, completeness)

    @property
    def facts(self) -> dict[str, Any]:
        """Fact key → value, from observations.json."""
        return {
            str(item["factKey"]): item.get("value")
            for item in (self.observations or {}).get("observations") or ()
            if isinstance(item, Mapping) and isinstance(item.get("factKey"), str)
        }

    def completeness_missing(self) -> list[str]:
        checks = (self.completeness or {}).get("checks") or {}
        return sorted(k for k, v in checks.items() if v.get("status") == "missing")

    def evidence_item(self, key: str) -> Mapping[str, Any]:
        item = ((self.evidence or {}).get("criteria") or {}).get(key)
        return item if isinstance(item, Mapping) else {}

    def inconsistencies(self, spec: EvaluationSpecAsset) -> list[str]:
        """Where the layers disagree with each other or with the spec: evidence.json must be
        what observations.json and the spec's criteria give, completeness.json must state each
        check's status, and result.json's evidence status must match what is missing."""
        problems: list[str] = []
        obs = self._observations(problems)
        checks = (self.completeness or {}).get("checks")
        if not isinstance(checks, Mapping) or not all(
            isinstance(v, Mapping) and v.get("status") in CHECK_STATUSES for v in checks.values()
        ):
            problems.append(
                f"{COMPLETENESS_FILE}: checks must each have a status ({', '.join(CHECK_STATUSES)})"
            )
        if obs is None:
            return problems
        stated = (self.evidence or {}).get("criteria")
        if not isinstance(stated, Mapping):
            return [*problems, f"{EVIDENCE_FILE}: no criteria"]
        wanted = {c.key for c in spec.criteria}
        if set(stated) != wanted:
            problems.append(
                f"{EVIDENCE_FILE} covers criteria {sorted(stated)}, the spec has {sorted(wanted)}"
            )
            return problems
        derived = build_evidence(
            obs, [(c.key, c.check) for c in spec.criteria], expectation_needs(spec)
        )["criteria"]
        for key in sorted(wanted):
            item = stated[key]
            for name in EVIDENCE_FIELDS:
                given = item.get(name) if isinstance(item, Mapping) else None
                if to_plain(given) != to_plain(derived[key][name]):
                    problems.append(
                        f"{EVIDENCE_FILE} criteria.{key}.{name} is {json.dumps(given)}, "
                        f"{OBSERVATIONS_FILE} gives {json.dumps(derived[key][name])}"
                    )
        if not problems and self.evidence_status == "complete":
            gaps = self.completeness_missing() + sorted(obs.missing)
            if gaps:
                problems.append(
                    f"{RESULT_FILE} says the evidence is complete, but the layers miss "
                    + ", ".join(gaps)
                )
        return problems

    def _observations(self, problems: list[str]) -> Observations | None:
        """observations.json back as Observations, ids checked; None (a problem named) when it
        cannot be."""
        doc = self.observations or {}
        items, missing = doc.get("observations"), doc.get("missing")
        if not isinstance(items, list) or not isinstance(missing, list):
            problems.append(f"{OBSERVATIONS_FILE}: expected lists `observations` and `missing`")
            return None
        obs = Observations()
        ids: dict[str, str] = {}
        for n, item in enumerate(items):
            if not (
                isinstance(item, Mapping)
                and isinstance(item.get("factKey"), str)
                and isinstance(item.get("derivedFrom"), list)
                and "value" in item
            ):
                problems.append(f"{OBSERVATIONS_FILE}: observations.{n} is not an observation")
                return None
            key = str(item["factKey"])
            obs.facts[key] = Observation(key, item["value"], [str(r) for r in item["derivedFrom"]])
            ids[key] = str(item.get("observationId"))
        for item in missing:
            if isinstance(item, Mapping):
                obs.missing[str(item.get("factKey"))] = str(item.get("reason"))
        if ids != obs.ids():
            problems.append(
                f"{OBSERVATIONS_FILE}: observation ids do not follow their fact keys in order "
                "(observations added, removed or renumbered)"
            )
        return obs


def read_run(run_dir: Path) -> RunLayers:
    """Read a run directory for evaluation (see the module's docstring for what is an error)."""
    if not run_dir.is_dir():
        raise InputError("not a folder", file=run_dir, expected="a run directory")
    inputs: dict[str, str | None] = {}
    # The manifest counts by the digest it locks itself with (checked below), not by its bytes:
    # those hold where this machine keeps the asset library, and an evaluation must not.
    manifest = _object(_required(run_dir / MANIFEST_FILE, None), run_dir / MANIFEST_FILE)
    result_doc = _required(run_dir / RESULT_FILE, inputs)
    try:
        result = RunResult.model_validate(result_doc)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise DocumentError(
            f"not a run result: {first}", file=run_dir / RESULT_FILE, expected="result.json"
        ) from None
    entry = (manifest.get("resolved") or {}).get(SPEC_SLOT)
    if not isinstance(entry, Mapping):
        why = (
            f"the run failed in {result.failure.stage} ({result.failure.type}) before"
            if result.failure is not None
            else "the run never"
        )
        raise NotEvaluable(
            f"{why} resolved an evaluation spec: nothing to evaluate",
            file=run_dir / MANIFEST_FILE,
            path=f"resolved.{SPEC_SLOT}",
            expected="an agent-testbed run",
        )
    recorded = manifest.get("manifestSha256")
    if recorded != locked_manifest_sha256(manifest):
        raise RunAltered(
            "manifest.json was altered after the run: what it locks no longer hashes to its "
            "manifestSha256",
            file=run_dir / MANIFEST_FILE,
            path="manifestSha256",
            expected=locked_manifest_sha256(manifest),
            recorded=None if recorded is None else str(recorded),
            found=locked_manifest_sha256(manifest),
        )
    spec, spec_version = _spec(run_dir, manifest, entry, inputs)
    layers = RunLayers(
        spec,
        result.status.validity,
        result.status.evidence,
        run={
            "condition": result.condition,
            "replication": result.replication,
            "manifestSha256": recorded,
        },
        spec_version=spec_version,
        inputs=inputs,
    )
    for name in LAYER_FILES:
        path = run_dir / name
        data = _bytes(path)
        inputs[name] = sha256_bytes(data) if data is not None else None
        if data is None:
            layers.unreadable.append(f"{name} missing")
            continue
        try:
            value = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            layers.unreadable.append(f"{name} is not valid JSON ({exc})")
            continue
        if not isinstance(value, dict):
            layers.unreadable.append(f"{name} is not a JSON object")
            continue
        setattr(layers, name.removesuffix(".json"), value)
    written = {name: getattr(layers, name.removesuffix(".json")) for name in LAYER_FILES}
    layers.unreadable += check_against_records(run_dir, manifest, written, inputs)
    return layers


def _spec(
    run_dir: Path, manifest: Mapping[str, Any], entry: Mapping[str, Any], inputs: dict[str, Any]
) -> tuple[EvaluationSpecAsset, dict[str, str]]:
    """The evaluation spec the manifest locked, read from the run's asset library and checked
    against the sha256 the manifest recorded."""
    scenario = _object(_required(run_dir / SCENARIO_FILE, inputs), run_dir / SCENARIO_FILE)
    provenance = scenario.get("provenance")
    folder = provenance.get("assetLibrary") if isinstance(provenance, Mapping) else None
    asset = locked_asset(
        run_dir, manifest, str(folder) if folder else None, SPEC_SLOT, "evaluation_spec"
    )
    name, version, digest = (str(entry.get(k)) for k in ("name", "version", "sha256"))
    version_doc = {"slot": SPEC_SLOT, "name": name, "version": version, "sha256": digest}
    return asset.typed(EvaluationSpecAsset), version_doc


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror}", file=path) from None


def _required(path: Path, inputs: dict[str, str | None] | None) -> Any:
    data = _bytes(path)
    if data is None:
        # A run that never finished (or was never made) has nothing to judge: in an audit it is
        # listed as not evaluable, like a run that failed before resolving its spec.
        raise NotEvaluable(
            "file not found", file=path, expected="a run directory's manifest.json and result.json"
        )
    if inputs is not None:
        inputs[path.name] = sha256_bytes(data)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DocumentError(f"not valid JSON: {exc}", file=path) from None


def _object(value: Any, path: Path) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DocumentError("expected a JSON object", file=path)
    return value
