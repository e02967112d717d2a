"""A run directory as the ledger reads it: parsed through the core schemas, checked, hashed.

The run id is the identity of one execution, computed from the directory alone:
`run-` + the first 24 hex digits of the sha256 over the canonical JSON of
{manifest: sha256 of manifest.json's canonical content, condition, replication,
started: the wall-clock time of the run's first event}. The same folder, or a byte copy of it
(the run store hands out copies), always has the same id; running the same scenario again gives
a new id, because it starts at another time. The content hash covers every file the ledger
reads, so a run id that arrives with other content means a file was changed after the run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..core.canonical import content_hash, sha256_bytes
from ..core.errors import DocumentError, InputError
from ..core.schema import RunResult, Scenario
from ..core.validation import validate_model
from .tables import RECORD_TYPES

SCENARIO_FILE = "scenario.json"
MANIFEST_FILE = "manifest.json"
RESULT_FILE = "result.json"
EVENTS_FILE = "events.jsonl"
RECORDS_FILE = "records.jsonl"
OBSERVATIONS_FILE = "observations.json"
EVIDENCE_FILE = "evidence.json"
COMPLETENESS_FILE = "completeness.json"

REQUIRED_FILES = (SCENARIO_FILE, MANIFEST_FILE, RESULT_FILE)
CONTENT_FILES = (
    SCENARIO_FILE,
    MANIFEST_FILE,
    RESULT_FILE,
    EVENTS_FILE,
    RECORDS_FILE,
    OBSERVATIONS_FILE,
    EVIDENCE_FILE,
    COMPLETENESS_FILE,
)
"""What the ledger reads of a run; evaluation.json is an evaluator's, not the run's."""


def is_run_dir(path: Path) -> bool:
    return all((path / name).is_file() for name in (MANIFEST_FILE, RESULT_FILE))


@dataclass(frozen=True)
class RunIdentity:
    """What makes a run this run, and the id made from it."""

    manifest_sha256: str
    condition: str
    replication: int
    started: float | None

    @property
    def run_id(self) -> str:
        key = {
            "manifest": self.manifest_sha256,
            "condition": self.condition,
            "replication": self.replication,
            "started": self.started,
        }
        return "run-" + content_hash(key)[:24]


@dataclass(frozen=True)
class RunDirectory:
    """Everything the ledger records of one run directory, read and checked."""

    path: Path
    identity: RunIdentity
    content_sha256: str
    scenario_doc: dict[str, Any]
    scenario: Scenario
    manifest: dict[str, Any]
    result_doc: dict[str, Any]
    result: RunResult
    events: list[dict[str, Any]]
    records: list[dict[str, Any]] | None
    observations: dict[str, Any] | None
    evidence: dict[str, Any] | None
    completeness: dict[str, Any] | None

    @property
    def run_id(self) -> str:
        return self.identity.run_id


# --------------------------------------------------------------------------- reading


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DocumentError(
            "file not found", file=path, expected="a run directory's file"
        ) from None
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror}", file=path) from None


def _json(data: bytes, path: Path) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DocumentError(f"not valid JSON: {exc}", file=path) from None


def _object(value: Any, path: Path, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DocumentError(f"expected {what}", file=path, expected="a JSON object")
    return value


def _lines(data: bytes, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError("not UTF-8 text", file=path) from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"not valid JSON: {exc.msg}", file=path, line=number) from None
        if not isinstance(value, dict):
            raise DocumentError("expected a JSON object per line", file=path, line=number)
        yield number, value


def _need(
    doc: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: Path,
    line: int | None = None,
) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        names = " or ".join(k.__name__ for k in _kinds(kind))
        raise DocumentError(
            f"{key!r} is missing or not {names}", file=where, line=line, path=key, expected=names
        )
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _first_event_wall(data: bytes, path: Path) -> float | None:
    for number, event in _lines(data, path):
        wall = _need(event, "wall", (int, float), path, number)
        return float(wall)
    return None


def manifest_sha256(manifest: Mapping[str, Any]) -> str:
    return content_hash(manifest)


def run_identity(path: str | Path) -> RunIdentity:
    """The identity of the run in `path`, from its manifest, result and first event only."""
    run_dir = Path(path)
    manifest = _object(
        _json(_read_bytes(run_dir / MANIFEST_FILE), run_dir / MANIFEST_FILE),
        run_dir / MANIFEST_FILE,
        "the run's manifest",
    )
    result = _object(
        _json(_read_bytes(run_dir / RESULT_FILE), run_dir / RESULT_FILE),
        run_dir / RESULT_FILE,
        "the run's result",
    )
    events = run_dir / EVENTS_FILE
    started = _first_event_wall(_read_bytes(events), events) if events.is_file() else None
    return RunIdentity(
        manifest_sha256(manifest),
        _need(result, "condition", str, run_dir / RESULT_FILE),
        _need(result, "replication", int, run_dir / RESULT_FILE),
        started,
    )


def read_run_dir(path: str | Path) -> RunDirectory:
    """Read and check a run directory (SPEC §4, and the testbed's result layers when present).

    Raises InputError naming the file (and line) of anything that does not match its contract,
    including a testbed record whose sha256 does not match its content."""
    run_dir = Path(path)
    if not run_dir.is_dir():
        raise InputError("not a folder", file=run_dir, expected="a run directory")
    missing = [name for name in REQUIRED_FILES if not (run_dir / name).is_file()]
    if missing:
        raise InputError(
            f"not a run directory: {', '.join(missing)} missing",
            file=run_dir,
            expected="scenario.json, manifest.json and result.json",
        )
    raw = {
        name: _read_bytes(run_dir / name) for name in CONTENT_FILES if (run_dir / name).is_file()
    }
    content = content_hash({name: sha256_bytes(data) for name, data in sorted(raw.items())})

    scenario_path = run_dir / SCENARIO_FILE
    scenario_doc = _object(_json(raw[SCENARIO_FILE], scenario_path), scenario_path, "a scenario")
    scenario = validate_model(Scenario, scenario_doc, file=scenario_path)
    manifest_path = run_dir / MANIFEST_FILE
    manifest = _object(_json(raw[MANIFEST_FILE], manifest_path), manifest_path, "a manifest")
    result_path = run_dir / RESULT_FILE
    result_doc = _object(_json(raw[RESULT_FILE], result_path), result_path, "a run result")
    result = validate_model(RunResult, result_doc, file=result_path)

    events_path = run_dir / EVENTS_FILE
    events = [_event(e, events_path, n) for n, e in _lines(raw.get(EVENTS_FILE, b""), events_path)]
    started = float(events[0]["wall"]) if events else None
    identity = RunIdentity(manifest_sha256(manifest), result.condition, result.replication, started)

    records = None
    if RECORDS_FILE in raw:
        records_path = run_dir / RECORDS_FILE
        records = [_record(r, records_path, n) for n, r in _lines(raw[RECORDS_FILE], records_path)]
    layers: dict[str, dict[str, Any] | None] = {}
    for name in (OBSERVATIONS_FILE, EVIDENCE_FILE, COMPLETENESS_FILE):
        layer_path = run_dir / name
        layers[name] = (
            _object(_json(raw[name], layer_path), layer_path, "a JSON object")
            if name in raw
            else None
        )
    return RunDirectory(
        path=run_dir,
        identity=identity,
        content_sha256=content,
        scenario_doc=scenario_doc,
        scenario=scenario,
        manifest=manifest,
        result_doc=result_doc,
        result=result,
        events=events,
        records=records,
        observations=_observations(layers[OBSERVATIONS_FILE], run_dir / OBSERVATIONS_FILE),
        evidence=_evidence(layers[EVIDENCE_FILE], run_dir / EVIDENCE_FILE),
        completeness=_completeness(layers[COMPLETENESS_FILE], run_dir / COMPLETENESS_FILE),
    )


def _event(event: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    _need(event, "seq", int, path, line)
    _need(event, "type", str, path, line)
    _need(event, "wall", (int, float), path, line)
    _need(event, "payload", dict, path, line)
    actor = event.get("actor")
    if actor is not None and not isinstance(actor, (str, int)):
        raise DocumentError("'actor' is not text, an agent index or null", file=path, line=line)
    return event


def record_digest(record: Mapping[str, Any]) -> str:
    """sha256 over a testbed record's content: everything but its digest and its clock."""
    return content_hash({k: v for k, v in record.items() if k not in ("sha256", "clock")})


def _record(record: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    for key, kind in (
        ("seq", int),
        ("recordId", str),
        ("recordType", str),
        ("type", str),
        ("sha256", str),
        ("payload", dict),
    ):
        _need(record, key, kind, path, line)
    if record["recordType"] not in RECORD_TYPES:
        raise DocumentError(
            f"record {record['recordId']} has the record type {record['recordType']!r}",
            file=path,
            line=line,
            expected=", ".join(RECORD_TYPES),
        )
    if record_digest(record) != record["sha256"]:
        raise DocumentError(
            f"record {record['recordId']}'s sha256 does not match its content (was it edited "
            "after the run?)",
            file=path,
            line=line,
        )
    return record


def _observations(doc: dict[str, Any] | None, path: Path) -> dict[str, Any] | None:
    if doc is None:
        return None
    for index, item in enumerate(_need(doc, "observations", list, path)):
        where = f"observations.{index}"
        if not isinstance(item, dict):
            raise DocumentError("expected an object", file=path, path=where)
        for key, kind in (("observationId", str), ("factKey", str), ("derivedFrom", list)):
            if not isinstance(item.get(key), kind):
                raise DocumentError(f"{key!r} is missing", file=path, path=f"{where}.{key}")
        if "value" not in item:
            raise DocumentError("'value' is missing", file=path, path=f"{where}.value")
    for index, item in enumerate(doc.get("missing", [])):
        if not isinstance(item, dict) or not isinstance(item.get("factKey"), str):
            raise DocumentError("expected {factKey, reason}", file=path, path=f"missing.{index}")
    return doc


def _evidence(doc: dict[str, Any] | None, path: Path) -> dict[str, Any] | None:
    if doc is None:
        return None
    for key, item in _need(doc, "criteria", dict, path).items():
        if not isinstance(item, dict):
            raise DocumentError("expected an object", file=path, path=f"criteria.{key}")
    return doc


def _completeness(doc: dict[str, Any] | None, path: Path) -> dict[str, Any] | None:
    if doc is None:
        return None
    for key, item in _need(doc, "checks", dict, path).items():
        if not isinstance(item, dict) or not isinstance(item.get("status"), str):
            raise DocumentError("expected {status, detail}", file=path, path=f"checks.{key}")
    return doc


def wall_time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def iso_time(text: Any) -> datetime | None:
    """An ISO 8601 time from a record's clock, in UTC (None when absent or unreadable)."""
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
