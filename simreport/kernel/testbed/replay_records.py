"""Event replay of a testbed run: what a replay takes from the recorded run (`ReplaySource`, read
through `active_replay`), the manifest checked against itself (`manifest_problems`), tampered
records (`tampered_records`), and the comparison of two record lists. Running a replay is
`simreport.kernel.replay_runner`, above the engine. The design: docs/testbed.md.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ...core.canonical import content_hash
from ...core.run_digests import locked_manifest_sha256
from ..world import Decision, DecisionRequest
from .records import record_digest

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
    probe: dict[str, Any] | None = None
    """The recorded answer of the agent's probe in LOADING (an HTTP agent), if it was probed."""
    trace_id: str | None = None
    """The recorded run's trace id (its manifest's `traceId`)."""

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
            elif kind == "sut.probe":
                source.probe = dict(payload)
            elif kind == "fault.hit":
                source.fault_hits.append(
                    (str(payload["faultId"]), str(payload["target"]), int(payload["callIndex"]))
                )
        for entry in (manifest.get("resolved") or {}).values():
            source.pins[str(entry["name"])] = str(entry["version"])
        trace = manifest.get("traceId")
        source.trace_id = str(trace) if isinstance(trace, str) and trace else None
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
    manifest_problems: list[str] = field(default_factory=list)
    """How the manifest (or the scenario.json it locks) was altered after the run; when any,
    nothing was replayed."""

    @property
    def ok(self) -> bool:
        return (
            self.error is None
            and not self.manifest_problems
            and not self.tampered
            and self.first_difference is None
            and self.original == self.replayed == self.matched
        )

    def summary(self) -> str:
        if self.manifest_problems:
            lines = ["manifest check failed, nothing replayed:"]
            lines += [f"  {problem}" for problem in self.manifest_problems]
            if self.tampered:
                lines.append(
                    "records altered after the run (content does not match its sha256): "
                    + ", ".join(self.tampered[:10])
                    + (" …" if len(self.tampered) > 10 else "")
                )
            return "\n".join(lines)
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


def tampered_records(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ids of records whose content no longer matches their own sha256."""
    return [str(r.get("recordId")) for r in records if record_digest(r) != r.get("sha256")]


def manifest_problems(
    manifest: Mapping[str, Any],
    scenario_doc: Any,
    records: Sequence[Mapping[str, Any]],
) -> list[str]:
    """How a run's manifest disagrees with itself, with the digest its records locked, or with
    the scenario.json beside it: each a sign it was altered after the run."""
    problems: list[str] = []
    recorded = manifest.get("manifestSha256")
    locked = [r for r in records if r.get("type") == "manifest.locked"]
    if recorded is None:
        if locked:
            problems.append(
                "manifest.json has no manifestSha256, but records.jsonl locked "
                f"{locked[-1]['payload'].get('manifestSha256')}"
            )
    else:
        recomputed = locked_manifest_sha256(manifest)
        if recomputed != recorded:
            problems.append(
                f"manifest.json was altered after the run: the parts its digest locks (purpose, "
                f"scenario version, resolved assets, seed lineage) hash to {recomputed}, not to "
                f"the manifestSha256 it records ({recorded})"
            )
        for record in locked:
            if record["payload"].get("manifestSha256") != recorded:
                problems.append(
                    f"records.jsonl locked manifest {record['payload'].get('manifestSha256')} "
                    f"(record {record.get('recordId')}), but manifest.json's manifestSha256 is "
                    f"{recorded}"
                )
        resolved = manifest.get("resolved") or {}
        listed = {
            f"{r.get('name')}@{r.get('version')}": r.get("sha256")
            for r in resolved.values()
            if isinstance(r, Mapping)
        }
        if isinstance(manifest.get("assets"), Mapping) and dict(manifest["assets"]) != listed:
            problems.append(
                "manifest.json's assets disagree with the versions and sha256 it resolved"
            )
    version = manifest.get("scenarioVersion")
    locked_scenario = version.get("sha256") if isinstance(version, Mapping) else None
    if locked_scenario is not None and content_hash(scenario_doc) != locked_scenario:
        problems.append(
            f"scenario.json was altered after the run: its sha256 is {content_hash(scenario_doc)}, "
            f"the manifest locked {locked_scenario}"
        )
    return problems


def compare_records(
    original: Sequence[Mapping[str, Any]], replayed: Sequence[Mapping[str, Any]]
) -> ReplayReport:
    """Align two record lists one by one (real-clock readings left out)."""
    tampered = tampered_records(original)
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
