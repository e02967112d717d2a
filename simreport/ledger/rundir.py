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

import functools
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..core.canonical import content_hash, sha256_bytes, sha256_text
from ..core.errors import DocumentError, InputError
from ..core.run_digests import (
    USER_QUALITY_FILE,
    altered_layers,
    check_manifest,
    check_manifest_lock,
    check_scenario,
    recorded_layer_digests,
    records_sha256,
)
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

    @functools.cached_property
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
    event_payloads: tuple[str | None, ...] = ()
    """The JSON text of each event's payload as its line in events.jsonl spells it, strict
    JSON with no white space around it (None where the line does not end with the payload, or
    the payload spells a non-finite number, which strict JSON has not)."""
    record_lines: tuple[str, ...] | None = None
    """The text of each record's line in records.jsonl, as read (one per record)."""
    file_sha256: Mapping[str, str] = field(default_factory=dict)
    """sha256 of each file read, by name."""

    @property
    def run_id(self) -> str:
        return self.identity.run_id


# --------------------------------------------------------------------------- reading


def _read_bytes(path: str | Path) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
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


_scan = json.JSONDecoder().raw_decode


def _lines(data: bytes, path: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """The JSON objects of a JSON Lines file with their line numbers and text (blank lines
    skipped).

    Lines end at "\\n" only: a JSON string may hold U+2028 and the other characters that
    `str.splitlines` would also break at."""
    for number, line in enumerate(_text(data, path).split("\n"), start=1):
        value = _line_value(line, path, number)
        if value is not None:
            yield number, line, value


def _text(data: bytes, path: Path) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DocumentError("not UTF-8 text", file=path) from None


def _fast_object(line: str) -> dict[str, Any] | None:
    """The JSON object on `line` as orjson decodes it (None where orjson refuses it: NaN, a
    lone surrogate, a blank line, an error; the json module then decides). orjson makes an
    integer past 64 bits a float, where json keeps it exact: callers check for that (a
    record's digest, an event's numbers) before they take what orjson gives."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if type(value) is dict else None


def _line_value(line: str, path: Path, number: int) -> dict[str, Any] | None:
    """The object on a line (None for a blank one). The scanner decodes it directly; a line it
    does not take whole (white space around it, an error) goes to `json.loads`, which gives
    the verdict and the message."""
    try:
        value, end = _scan(line)
    except ValueError:
        end = -1
    if end != len(line):
        if not line.strip():
            return None
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocumentError(f"not valid JSON: {exc.msg}", file=path, line=number) from None
    if type(value) is not dict:
        raise DocumentError("expected a JSON object per line", file=path, line=number)
    return value


_PAYLOAD = '"payload":'


def _read_events(data: bytes, path: Path) -> tuple[list[dict[str, Any]], tuple[str | None, ...]]:
    """The events of events.jsonl, checked, with the JSON text of each event's payload where
    its line ends with it (as the kernel writes events; see `RunDirectory.event_payloads`),
    else None. orjson encodes no NaN, so the text it gives is strict JSON. A line as the kernel
    writes it is decoded and checked in one step here (a run has thousands); any other goes
    through `_event_line` and `_event`, which give the verdict and the message."""
    events: list[dict[str, Any]] = []
    payloads: list[str | None] = []
    loads, dumps, refused = orjson.loads, orjson.dumps, orjson.JSONDecodeError
    for number, line in enumerate(_text(data, path).split("\n"), start=1):
        try:
            event = loads(line)
        except refused:
            event = None
        # A float where the kernel writes an integer (seq, step, agent index) may be an
        # integer past 64 bits that orjson could not keep, as may a payload's float spelled
        # with an exponent: `_event_line` lets json decide those.
        if (
            type(event) is dict
            and type(payload := event.get("payload")) is dict
            and type(event.get("seq")) is int
            and type(event.get("type")) is str
            and type(event.get("wall")) in _NUMBER
            and ((actor := event.get("actor")) is None or type(actor) in _ACTOR)
            and type(event.get("t")) is not float
            and b"e+" not in (text := dumps(payload))
        ):
            events.append(event)
            payloads.append(text.decode("utf-8"))
            continue
        read = _event_line(line, path, number)
        if read is not None:
            events.append(_event(read[0], path, number))
            payloads.append(strict_json(read[1]))
    return events, tuple(payloads)


def strict_json(text: str | None) -> str | None:
    """`text` without the white space around it, or None where it may spell a non-finite
    number (json reads NaN and Infinity; strict JSON, which the ledger stores, has neither:
    the ledger then encodes the value read, which says so)."""
    if text is None or "NaN" in text or "Infinity" in text:
        return None
    return text.strip()


def _event_line(line: str, path: Path, number: int) -> tuple[dict[str, Any], str | None] | None:
    """The event on one line of events.jsonl, not checked yet, and its payload's JSON text
    where the line ends with it (None for a blank line)."""
    fast = _fast_object(line)
    if fast is not None and type(payload := fast.get("payload")) is dict:
        text = orjson.dumps(payload)
        if (
            b"e+" not in text
            and type(fast.get("seq")) is not float
            and type(fast.get("t")) is not float
            and type(fast.get("actor")) is not float
        ):
            return fast, text.decode("utf-8")
    split = _split_event(line)
    if split is not None:
        return split
    value = _line_value(line, path, number)
    return None if value is None else (value, None)


def _split_event(line: str) -> tuple[dict[str, Any], str] | None:
    """The object on `line` and its payload's text, decoded as two parts: the line up to
    `,"payload":` and the payload after it. This is the object json.loads makes of the line
    when the first part, closed with a brace, is an object with members that ends right there
    (so the comma after it is the object's own, and `"payload"` its key: a quote inside a
    string is escaped) and only the object's closing brace follows the payload (so it is the
    last member, whose value json keeps for a repeated key). Otherwise None: `_line_value`
    decodes the line whole."""
    at = line.find(_PAYLOAD)
    if at < 2 or line[at - 1] != ",":
        return None
    start = at + len(_PAYLOAD)
    try:
        head, end = _scan(line[: at - 1] + "}")
        if end != at or type(head) is not dict or not head:
            return None
        payload, end = _scan(line, start)
    except ValueError:
        return None
    if line[end:].strip() != "}":
        return None
    head["payload"] = payload
    return head, line[start:end]


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
    for number, _, event in _lines(data, path):  # decodes the first object only
        wall = _need(event, "wall", (int, float), path, number)
        return float(wall)
    return None


def manifest_sha256(manifest: Mapping[str, Any]) -> str:
    return content_hash(manifest)


def run_identity(path: str | Path) -> RunIdentity:
    """The identity of the run in `path`, from its manifest, result and first event only."""
    run_dir = Path(path)
    events = run_dir / EVENTS_FILE
    return _identity(
        run_dir,
        _read_bytes(run_dir / MANIFEST_FILE),
        _read_bytes(run_dir / RESULT_FILE),
        _read_bytes(events) if events.is_file() else None,
    )


def _identity(
    run_dir: Path, manifest_data: bytes, result_data: bytes, events_data: bytes | None
) -> RunIdentity:
    manifest = _object(
        _json(manifest_data, run_dir / MANIFEST_FILE), run_dir / MANIFEST_FILE, "the run's manifest"
    )
    result = _object(
        _json(result_data, run_dir / RESULT_FILE), run_dir / RESULT_FILE, "the run's result"
    )
    events = run_dir / EVENTS_FILE
    started = _first_event_wall(events_data, events) if events_data is not None else None
    return RunIdentity(
        manifest_sha256(manifest),
        _need(result, "condition", str, run_dir / RESULT_FILE),
        _need(result, "replication", int, run_dir / RESULT_FILE),
        started,
    )


@dataclass(frozen=True)
class RunFiles:
    """The files of a run directory that the ledger reads, as bytes, and the hash over them:
    enough to tell whether the ledger holds this run already, before anything is parsed."""

    path: Path
    raw: Mapping[str, bytes]
    content_sha256: str
    file_sha256: Mapping[str, str]
    """sha256 of each file, by name (the content hash is made of them)."""

    @functools.cached_property
    def identity(self) -> RunIdentity:
        """As `run_identity` reads it (raises InputError where the files cannot give it)."""
        return _identity(
            self.path, self.raw[MANIFEST_FILE], self.raw[RESULT_FILE], self.raw.get(EVENTS_FILE)
        )

    def identity_if_known(self) -> RunIdentity | None:
        """`identity`, if it was asked for already (it costs a canonical hash of the
        manifest, so the ledger asks once)."""
        known = self.__dict__.get("identity")
        return known if isinstance(known, RunIdentity) else None


def read_run_files(path: str | Path) -> RunFiles:
    """The bytes of every file of the run in `path` that the ledger reads, each read once."""
    run_dir = Path(path)
    folder = os.fspath(run_dir)  # file names joined as text: a Path per file costs more
    if not os.path.isdir(folder):
        raise InputError("not a folder", file=run_dir, expected="a run directory")
    files = {name: os.path.join(folder, name) for name in CONTENT_FILES}
    present = {name for name, file in files.items() if os.path.isfile(file)}
    missing = [name for name in REQUIRED_FILES if name not in present]
    if missing:
        raise InputError(
            f"not a run directory: {', '.join(missing)} missing",
            file=run_dir,
            expected="scenario.json, manifest.json and result.json",
        )
    raw = {name: _read_bytes(files[name]) for name in CONTENT_FILES if name in present}
    digests = {name: sha256_bytes(data) for name, data in sorted(raw.items())}
    return RunFiles(run_dir, raw, content_hash(digests), digests)


def read_run_dir(source: str | Path | RunFiles) -> RunDirectory:
    """Read and check a run directory (SPEC §4, and the testbed's result layers when present),
    or the files of one that `read_run_files` read already.

    Raises InputError naming the file (and line) of anything that does not match its contract,
    including a testbed record whose sha256 does not match its content, and RunAltered for a
    file that differs from the digest the run recorded of it (`check_digests`)."""
    files = source if isinstance(source, RunFiles) else read_run_files(source)
    run_dir, raw, content = files.path, files.raw, files.content_sha256
    scenario_path = run_dir / SCENARIO_FILE
    scenario_doc = _object(_json(raw[SCENARIO_FILE], scenario_path), scenario_path, "a scenario")
    scenario = validate_model(Scenario, scenario_doc, file=scenario_path)
    manifest_path = run_dir / MANIFEST_FILE
    manifest = _object(_json(raw[MANIFEST_FILE], manifest_path), manifest_path, "a manifest")
    result_path = run_dir / RESULT_FILE
    result_doc = _object(_json(raw[RESULT_FILE], result_path), result_path, "a run result")
    result = validate_model(RunResult, result_doc, file=result_path)

    events, event_payloads = _read_events(raw.get(EVENTS_FILE, b""), run_dir / EVENTS_FILE)
    started = float(events[0]["wall"]) if events else None
    known = files.identity_if_known()  # made of the same bytes
    sha = known.manifest_sha256 if known is not None else manifest_sha256(manifest)
    identity = RunIdentity(sha, result.condition, result.replication, started)

    records = record_lines = None
    if RECORDS_FILE in raw:
        records_path = run_dir / RECORDS_FILE
        parsed = [
            (_record(r, records_path, n, line), line)
            for n, line, r in _record_lines(raw[RECORDS_FILE], records_path)
        ]
        records = [record for record, _ in parsed]
        record_lines = tuple(line for _, line in parsed)
    check_digests(run_dir, scenario_doc, manifest, records, files.file_sha256)
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
        event_payloads=event_payloads,
        record_lines=record_lines,
        file_sha256=files.file_sha256,
    )


def check_digests(
    run_dir: Path,
    scenario_doc: Mapping[str, Any],
    manifest: Mapping[str, Any],
    records: list[dict[str, Any]] | None,
    file_sha256: Mapping[str, str],
) -> None:
    """Refuse a run folder a file of which differs from the digest the run recorded of it
    (core/run_digests.py): the manifest's own, the scenario's, the manifest its records locked,
    and each layer in `layerSha256` (one that is gone too). Raises RunAltered, naming the file
    and where its digest is recorded."""
    check_manifest(manifest, run_dir)
    check_scenario(manifest, scenario_doc, run_dir)
    if records is not None:
        check_manifest_lock(manifest, records, run_dir)
    recorded = recorded_layer_digests(manifest, run_dir)
    found: dict[str, str | None] = {
        name: file_sha256.get(name) for name in recorded if name in CONTENT_FILES
    }
    if RECORDS_FILE in recorded:
        found[RECORDS_FILE] = (
            None if records is None else records_sha256(str(r["sha256"]) for r in records)
        )
    if USER_QUALITY_FILE in recorded:  # not recorded in the ledger, but locked all the same
        path = run_dir / USER_QUALITY_FILE
        found[USER_QUALITY_FILE] = sha256_bytes(_read_bytes(path)) if path.is_file() else None
    for altered in altered_layers(manifest, found, run_dir):
        raise altered


_NUMBER = (int, float)
_ACTOR = (str, int)


def _event(event: dict[str, Any], path: Path, line: int) -> dict[str, Any]:
    # The common case in one expression (exact types, as json gives them); anything else goes
    # through the checks below, which name what is wrong.
    if (
        type(event.get("seq")) is int
        and type(event.get("type")) is str
        and type(event.get("wall")) in _NUMBER
        and type(event.get("payload")) is dict
        and ((actor := event.get("actor")) is None or type(actor) in _ACTOR)
    ):
        return event
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


def _fast_record_digest(record: Mapping[str, Any]) -> str | None:
    """`record_digest` through orjson, for a record orjson decoded: its sorted, compact
    UTF-8 is the canonical form except where a float is spelled differently (1e-7 against
    Python's 1e-07), so a digest that does not match is computed again by `record_digest`'s
    rules before the record is refused. None where orjson cannot encode it."""
    content = {k: v for k, v in record.items() if k not in ("sha256", "clock")}
    try:
        return hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    except orjson.JSONEncodeError:
        return None


def _parsed_record_digest(record: Mapping[str, Any]) -> str:
    """`record_digest` of a record as json parsed it: its canonical JSON is then plain
    `json.dumps` with sorted keys, unless a non-finite number is in it (which the canonical
    form spells as a string: then `record_digest` computes it)."""
    content = {k: v for k, v in record.items() if k not in ("sha256", "clock")}
    try:
        text = json.dumps(
            content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except ValueError:
        return content_hash(content)
    return sha256_text(text)


_RECORD_FIELDS = (
    ("seq", int),
    ("recordId", str),
    ("recordType", str),
    ("type", str),
    ("sha256", str),
    ("payload", dict),
)


def _record_lines(data: bytes, path: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """`_lines` for records.jsonl, decoded by orjson where it can (`_record` checks what it
    gives against the record's digest)."""
    for number, line in enumerate(_text(data, path).split("\n"), start=1):
        value = _fast_object(line)
        if value is None:
            value = _line_value(line, path, number)
        if value is not None:
            yield number, line, value


def _record(record: dict[str, Any], path: Path, line: int, text: str) -> dict[str, Any]:
    sha = record.get("sha256")
    if type(sha) is str and _fast_record_digest(record) == sha:
        return _record_checked(record, path, line, digest_checked=True)
    # Decoded again by the json module: orjson may have made a long integer a float, and
    # spells some floats unlike the canonical form.
    exact = _line_value(text, path, line)
    assert exact is not None
    return _record_checked(exact, path, line, digest_checked=False)


def _record_checked(
    record: dict[str, Any], path: Path, line: int, *, digest_checked: bool
) -> dict[str, Any]:
    if not all(type(record.get(key)) is kind for key, kind in _RECORD_FIELDS):
        _record_fields(record, path, line)
    if record["recordType"] not in RECORD_TYPES:
        raise DocumentError(
            f"record {record['recordId']} has the record type {record['recordType']!r}",
            file=path,
            line=line,
            expected=", ".join(RECORD_TYPES),
        )
    if not digest_checked and _parsed_record_digest(record) != record["sha256"]:
        raise DocumentError(
            f"record {record['recordId']}'s sha256 does not match its content (was it edited "
            "after the run?)",
            file=path,
            line=line,
        )
    return record


def _record_fields(record: dict[str, Any], path: Path, line: int) -> None:
    for key, kind in _RECORD_FIELDS:
        _need(record, key, kind, path, line)


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
