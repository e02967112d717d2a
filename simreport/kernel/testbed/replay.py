"""Event replay of a testbed run: run it again from its recorded responses and faults, and say
whether the records match one by one.

The replay uses the run's scenario.json, pins every asset to the version its manifest recorded
(labels are not resolved again), answers every provider decision with the recorded choice, plays
back an external agent's recorded steps, and strikes exactly the calls the recorded faults hit.
The environment and the harness run for real, so a change in their logic, in an asset's content
or in a record shows up as a difference. Each original record's own sha256 is checked too, so a
record edited after the run is reported even where the replay would follow the edit.

`simreport replay <runDir>` exits 0 when the records match, 1 (with a summary) when not, and 2
when the replay itself could not run (an error, not a difference: nothing was compared). A replay
never builds the scenario's provider: it makes no call, so it needs no API key.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.errors import InputError
from ...core.files import read_json
from ...core.schema import FailureInfo, RunResult, Scenario
from ..world import Decision, DecisionRequest
from .records import RECORDS_FILE, read_records, record_digest

REPLAY_ERROR = 2
"""`simreport replay`'s exit status when the replay itself could not run (nothing compared)."""

_ACTIVE: ContextVar[ReplaySource | None] = ContextVar("simreport_testbed_replay", default=None)


@dataclass
class ReplaySource:
    """What a replay takes from the recorded run."""

    decisions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """role ("agent" | "user") → recorded decisions in order."""
    agent_steps: list[dict[str, Any]] = field(default_factory=list)
    """Recorded steps of an external agent, in order."""
    fault_hits: list[tuple[str, str, int]] = field(default_factory=list)
    """(fault id, tool, call index) of every recorded hit."""
    pins: dict[str, str] = field(default_factory=dict)
    """Asset name → the version the manifest recorded."""
    agent_failure: tuple[str, str] | None = None
    """(kind, message) of the external agent's recorded failure at its entry, if it failed."""

    @classmethod
    def from_run(
        cls, records: Sequence[Mapping[str, Any]], manifest: Mapping[str, Any]
    ) -> ReplaySource:
        source = cls()
        for record in records:
            payload = record["payload"]
            kind = record["type"]
            if kind in ("agent.decision", "user.decision"):
                source.decisions.setdefault(kind.split(".")[0], []).append(dict(payload))
            elif kind == "agent.step" and payload.get("adapter") not in ("reference", "scripted"):
                source.agent_steps.append(dict(payload["step"]))
            elif (
                kind == "run.failure"
                and payload.get("stage") == "running"
                and str(payload.get("kind", "")).startswith("sut_")
            ):
                source.agent_failure = (str(payload["kind"]), str(payload.get("message", "")))
            elif kind == "fault.hit":
                source.fault_hits.append(
                    (str(payload["faultId"]), str(payload["target"]), int(payload["callIndex"]))
                )
        for entry in (manifest.get("resolved") or {}).values():
            source.pins[str(entry["name"])] = str(entry["version"])
        return source

    def decide(self, role: str, request: DecisionRequest) -> Decision:
        queue = self.decisions.get(role, [])
        if not queue:
            return Decision(None, "replay", failure="replay_exhausted")
        recorded = queue.pop(0)
        chosen = recorded.get("chosen")
        if chosen is None and recorded.get("failure"):
            # The recorded run lost this decision: replay it lost, with its recorded failure.
            raw = recorded.get("raw")
            return Decision(
                None,
                "replay",
                raw="" if raw is None else str(raw),
                failure=str(recorded["failure"]),
            )
        if chosen is None or chosen not in request.options:
            return Decision(None, "replay", failure="replay_mismatch")
        return Decision(str(chosen), "replay", raw=str(recorded.get("raw", chosen)))


def active_replay() -> ReplaySource | None:
    """The replay source while a replay runs in this context, else None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def replaying(source: ReplaySource) -> Iterator[None]:
    token = _ACTIVE.set(source)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


# --------------------------------------------------------------------------- comparison


@dataclass
class ReplayReport:
    """The outcome of comparing a run's records with its replay."""

    original: int
    replayed: int
    matched: int
    tampered: list[str]
    """Original records whose content no longer matches their own sha256."""
    first_difference: dict[str, Any] | None
    error: str | None = None
    """Why the replay itself could not run (nothing was compared); None when it ran."""

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and not self.tampered
            and self.first_difference is None
            and self.original == self.replayed == self.matched
        )

    def summary(self) -> str:
        if self.error is not None:
            return f"replay failed, records not compared ({self.original} recorded): {self.error}"
        if self.ok:
            return f"records match: {self.matched} of {self.original} aligned one by one"
        lines = [
            f"records differ: {self.matched} aligned before the first difference; "
            f"{self.original} recorded, {self.replayed} replayed"
        ]
        if self.tampered:
            lines.append(
                "altered after the run (content does not match its sha256): "
                + ", ".join(self.tampered[:10])
                + (" …" if len(self.tampered) > 10 else "")
            )
        if self.first_difference is not None:
            diff = self.first_difference
            lines.append(f"first difference at seq {diff['seq']}: {diff['what']}")
            for side in ("recorded", "replayed"):
                if diff.get(side) is not None:
                    lines.append(f"  {side}: {json.dumps(diff[side], sort_keys=True)[:300]}")
        return "\n".join(lines)


def _content(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("clock", "sha256")}


def compare_records(
    original: Sequence[Mapping[str, Any]], replayed: Sequence[Mapping[str, Any]]
) -> ReplayReport:
    """Align two record lists one by one (real-clock readings left out)."""
    tampered = [str(r.get("recordId")) for r in original if record_digest(r) != r.get("sha256")]
    matched = 0
    first: dict[str, Any] | None = None
    for a, b in zip(original, replayed, strict=False):
        if _content(a) == _content(b):
            matched += 1
            continue
        keys = sorted(k for k in set(_content(a)) | set(_content(b)) if a.get(k) != b.get(k))
        first = {
            "seq": a.get("seq"),
            "what": "fields " + ", ".join(keys) + " differ",
            "recorded": {k: a.get(k) for k in keys},
            "replayed": {k: b.get(k) for k in keys},
        }
        break
    if first is None and len(original) != len(replayed):
        longer, side = (
            (original, "recorded") if len(original) > len(replayed) else (replayed, "replayed")
        )
        extra = longer[min(len(original), len(replayed))]
        first = {
            "seq": extra.get("seq"),
            "what": f"only the {side} run has this record",
            side: _content(extra),
        }
    return ReplayReport(len(original), len(replayed), matched, tampered, first)


def replay_run(run_dir: str | Path, out_dir: str | Path | None = None) -> ReplayReport:
    """Re-run a testbed run from its recorded responses and faults; compare the records."""
    from ..engine import run_scenario
    from .versions import recorded_checks

    root = Path(run_dir)
    needed = [root / "scenario.json", root / "manifest.json", root / RECORDS_FILE]
    for path in needed:
        if not path.is_file():
            raise InputError(
                "not a testbed run directory",
                file=path,
                expected="scenario.json, manifest.json and records.jsonl of a refund_desk run",
            )
    scenario = Scenario.model_validate(read_json(root / "scenario.json"))
    manifest = read_json(root / "manifest.json")
    original = read_records(root / RECORDS_FILE)
    source = ReplaySource.from_run(original, manifest)
    asset_root = manifest.get("assetRoot")
    with contextlib.ExitStack() as stack:
        if out_dir is None:
            target = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
        else:
            target = Path(out_dir)
        with replaying(source):
            result = run_scenario(
                scenario,
                target,
                condition=str(manifest.get("condition", "scenario")),
                replication=int(manifest.get("replication", 0)),
                asset_root=asset_root,
                checks=recorded_checks(manifest),
            )
        error = _replay_error(root, result.failure)
        if error is not None:
            return ReplayReport(len(original), 0, 0, [], None, error=error)
        replayed = read_records(target / RECORDS_FILE) if (target / RECORDS_FILE).is_file() else []
    return compare_records(original, replayed)


def _replay_error(root: Path, failure: FailureInfo | None) -> str | None:
    """Why the replay could not run, or None. A replayed run that failed where the recorded run
    did not (or otherwise) failed for a reason of its own — an asset library gone, a provider that
    cannot be set up — is an error, not a difference in the records. A failure the recorded run
    had too, or a replay running off its records (`replay_*`), is compared as usual."""
    if failure is None or failure.type.startswith("replay_"):
        return None
    recorded: FailureInfo | None = None
    if (root / "result.json").is_file():
        with contextlib.suppress(Exception):
            recorded = RunResult.model_validate(read_json(root / "result.json")).failure
    if recorded is not None and (recorded.stage, recorded.type) == (failure.stage, failure.type):
        return None
    return f"the replayed run failed in {failure.stage}: {failure.type}: {failure.message}"


# --------------------------------------------------------------------------- command line


def cmd_replay(args: argparse.Namespace) -> int:
    report = replay_run(args.run_dir, args.out)
    print(report.summary())
    if report.error is not None:
        return REPLAY_ERROR
    return 0 if report.ok else 1


def register_cli(subparsers: Any) -> None:
    """Add `simreport replay <runDir> [--out DIR]` to the command line's subcommands."""
    p = subparsers.add_parser(
        "replay",
        help="re-run a testbed run from its recorded responses and faults; compare the records",
    )
    p.add_argument("run_dir", help="a refund_desk run directory (with records.jsonl)")
    p.add_argument("--out", help="where to write the replayed run (default: a temporary folder)")
    p.set_defaults(func=cmd_replay)
