"""Where an audit came from, and the audits earlier builds of it wrote.

`provenance` reads the run manifests (SPEC §4) and conditions.json into the compact record that
audit.json carries, so two builds can say why they differ. `write_audit` writes audit.json and
first keeps the audit it replaces under `history/`.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import files
from ..core.canonical import pretty_json, sha256_bytes
from ..core.errors import InputError
from ..core.files import load_document
from .audit_document import check_contract

AUDIT_FILE = "audit.json"
HISTORY_DIR = "history"
LAST_WRITTEN = ".last.json"
"""A copy of the last audit.json written, in the history folder. Snakemake removes a job's
outputs before running it, so the analysis would otherwise never see the audit it replaces."""

KEPT_NAME = re.compile(r"^(?P<n>[1-9][0-9]*)-(?P<hash>[0-9a-f]{12})\.json$")
"""`<n>-<first 12 hex digits of the sha256 of its bytes>.json`, n counting from 1."""


# --------------------------------------------------------------------------- provenance


def provenance(
    audit_dir: str | Path, conditions: Sequence[Mapping[str, Any]], plan: Mapping[str, Any]
) -> dict[str, Any]:
    """The facts a build rests on, per condition rather than per run: the plan's meaning hash,
    the kernel fingerprints, providers and models the runs' manifests name, and for each
    condition its scenario hash and the sha256 of every input file its runs read (keyed as the
    manifest keys them: a file name, or `name@version` for a resolved asset). A value the runs
    of one condition disagree on is the sorted list of its distinct values. Machine-specific
    facts (the asset root) and per-run facts (seeds) are left out. `plan` is the audit's
    normalised plan (its `hash` and `replications`)."""
    root = Path(audit_dir)
    fingerprints: set[str] = set()
    models: set[str] = set()
    providers: set[str] = set()
    deciders: dict[str, None] = {}
    per_condition: dict[str, Any] = {}
    for cond in conditions:
        for who in decision_makers(_first_scenario(root, cond)):
            deciders.setdefault(who)
        inputs: dict[str, set[str]] = defaultdict(set)
        replications = int(cond.get("replications", plan.get("replications", 1)))
        for manifest in _manifests(root, cond, replications):
            _add(fingerprints, manifest.get("kernelFingerprint"))
            _add(models, manifest.get("model"))
            _add(providers, manifest.get("provider"))
            assets = manifest.get("assets")
            if isinstance(assets, Mapping):
                for name, digest in assets.items():
                    _add(inputs[str(name)], digest)
        per_condition[str(cond["id"])] = {
            "scenarioHash": cond.get("scenarioHash"),
            "inputs": {name: _one_or_all(values) for name, values in sorted(inputs.items())},
        }
    return {
        "planHash": plan.get("hash"),
        "kernelFingerprints": sorted(fingerprints),
        "models": sorted(models),
        "providers": sorted(providers),
        "decisions": list(deciders),
        "conditions": per_condition,
    }


OFFLINE_STAND_IN = "the offline stand-in (not a language model)"
"""How pages name the offline provider: a seeded rule set that imitates an agent's answers, so
no effect it shows is a finding about a language model."""


def _first_scenario(root: Path, cond: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The scenario.json of a condition's first run that has one; None when none ran."""
    runs = root / "runs" / str(cond["dir"])
    for r in range(int(cond.get("replications") or 1)):
        path = runs / str(r) / "scenario.json"
        if path.is_file():
            doc = load_document(path, allow_control_characters=True).data
            return doc if isinstance(doc, Mapping) else None
    return None


def decision_makers(scenario: Mapping[str, Any] | None) -> list[str]:
    """Who made a scenario's decisions, as every page names them: the language model and its
    provider, the offline stand-in ("not a language model"), a fixed rule by its name, an
    external simulator or the agent under test."""
    if scenario is None:
        return []
    raw = scenario.get("llm")
    llm: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    provider, model = str(llm.get("provider") or "offline"), llm.get("model")
    if provider == "offline":
        by_model = OFFLINE_STAND_IN
    else:
        via = f" at endpoint {llm['endpoint']}" if llm.get("endpoint") else ""
        by_model = f"the language model {model} ({provider} provider{via})"
    out: list[str] = []
    simulator = scenario.get("simulator")
    if isinstance(simulator, Mapping):
        name = simulator.get("name") or " ".join(str(c) for c in simulator.get("command") or [])
        out.append(f"the external simulator {name}")
    sut = scenario.get("sut")
    if isinstance(sut, Mapping) and sut.get("agent"):
        out.append(f"the agent under test {sut['agent']}")
    executors = scenario.get("executors")
    if not isinstance(executors, list) or not executors:
        executors = [] if out else [{"kind": "llm"}]
    for executor in executors:
        if not isinstance(executor, Mapping):
            continue
        if executor.get("kind") == "rule":
            out.append(f"the fixed rule {executor.get('rule')}")
        else:
            out.append(by_model)
    if isinstance(sut, Mapping) and by_model not in out:
        # The scenario's own model calls (the reference agent, the simulated user) name theirs.
        out.append(f"{by_model} for the scenario's model calls")
    return list(dict.fromkeys(out))


def _manifests(root: Path, cond: Mapping[str, Any], replications: int) -> list[dict[str, Any]]:
    found = []
    for r in range(replications):
        path = root / "runs" / str(cond["dir"]) / str(r) / "manifest.json"
        if not path.is_file():
            continue  # a run that never started has no manifest; its result says so
        doc = load_document(path, allow_control_characters=True).data
        if not isinstance(doc, dict):
            raise InputError("not a run manifest", file=path, expected="a JSON object")
        found.append(doc)
    return found


def _add(values: set[str], value: Any) -> None:
    if isinstance(value, str) and value:
        values.add(value)


def _one_or_all(values: set[str]) -> str | list[str]:
    return next(iter(values)) if len(values) == 1 else sorted(values)


# --------------------------------------------------------------------------- history


def kept_audits(audit_dir: str | Path) -> list[Path]:
    """The audits earlier builds left in `<audit dir>/history/`, oldest first."""
    folder = Path(audit_dir) / HISTORY_DIR
    if not folder.is_dir():
        return []
    numbered = []
    for path in folder.iterdir():
        match = KEPT_NAME.match(path.name)
        if match is not None and path.is_file():
            numbered.append((int(match.group("n")), path.name, path))
    return [path for _, _, path in sorted(numbered)]


def kept_number(path: Path) -> int:
    """The build number a kept audit's file name carries."""
    match = KEPT_NAME.match(path.name)
    if match is None:
        raise ValueError(f"{path.name} is not a kept audit's name")
    return int(match.group("n"))


def write_audit(audit_dir: str | Path, audit: Mapping[str, Any]) -> Path | None:
    """Write `<audit dir>/audit.json` atomically. When the audit it replaces (audit.json, or the
    copy of the last one written if audit.json was removed) differs from the new one, that one is
    first kept as `history/<n>-<hash>.json`, unless the latest kept audit already has its bytes.

    Args:
        audit_dir: the audit directory.
        audit: the audit to write.

    Returns:
        The path of the audit kept in `history/`, or None when none was.

    Raises:
        SimreportError: the audit breaks its contract (`AuditDoc`), an internal error; nothing
            is written.
    """
    root = Path(audit_dir)
    check_contract(audit, file=root / AUDIT_FILE)
    new = pretty_json(audit).encode("utf-8")
    old = _replaced(root)
    kept = _keep(root, old) if old is not None and old != new else None
    files.write_atomic(root / AUDIT_FILE, new)
    last = root / HISTORY_DIR / LAST_WRITTEN
    if not last.is_file() or last.read_bytes() != new:
        files.write_atomic(last, new)
    return kept


def _replaced(root: Path) -> bytes | None:
    """The audit a new build replaces, when there is one that reads as an audit."""
    for source in (root / AUDIT_FILE, root / HISTORY_DIR / LAST_WRITTEN):
        if source.is_file():
            data = source.read_bytes()
            return data if _is_audit(data) else None
    return None


def _is_audit(data: bytes) -> bool:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(doc, dict) and "plan" in doc and "schemaVersion" in doc


def _keep(root: Path, data: bytes) -> Path | None:
    kept = kept_audits(root)
    if kept and kept[-1].read_bytes() == data:
        return None
    number = kept_number(kept[-1]) + 1 if kept else 1
    target = root / HISTORY_DIR / f"{number}-{sha256_bytes(data)[:12]}.json"
    files.write_atomic(target, data)
    return target
