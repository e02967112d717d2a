"""DRAINING, COLLECTING and CLEANED: settle the faults and the backlog, collect the records into
observations (a world's own), evidence and completeness (with the world's user quality control),
and destroy the workspace; what fails here is recorded and makes the run violated."""

from __future__ import annotations

import shutil
from contextlib import suppress
from pathlib import Path
from typing import Any

from ....core.files import read_json, write_json
from ....core.run_digests import LAYER_SHA256, layer_digests
from ...run_cost import ENVIRONMENT, EVALUATION
from ..agents import AgentAdapter
from ..assets import EvaluationSpecAsset, expectation_needs
from ..records import (
    COMPLETENESS_FILE,
    EVIDENCE_FILE,
    OBSERVATIONS_FILE,
    Observations,
    build_evidence,
    canonical_records,
    check_linkages,
    completeness,
    completeness_missing,
    linkage_record_faults,
    write_layers,
)
from .state import RunState


class Collecting(RunState):
    """The stages after RUNNING, and the record writing every stage ends with."""

    written_layers: tuple[str, ...] = ()
    """The result layers this run wrote so far (their sha256 join the manifest)."""

    def _write_records(self) -> None:
        self.log.write(self.run_dir)
        # Logical time no segment claimed passed in the environment (tool latencies, timeouts).
        self.ctx.cost.settle_logical(self.clocks.logical_ms, ENVIRONMENT)
        self.ctx.cost.record_bytes["records"] = record_content_bytes(self.log.records)
        self._record_layer_digests()

    def _record_layer_digests(self) -> None:
        """The sha256 of the records and of each layer this run wrote join manifest.json
        (`layerSha256`, core/run_digests.py), so a layer altered after the run is refused by
        whoever reads it. Written at once, as the resolved versions are, so a run that fails
        later still states them; the engine's last write of the manifest keeps them."""
        if self.run_dir is None:
            return
        digests = layer_digests(
            (str(r["sha256"]) for r in self.log.records),
            {name: (self.run_dir / name).read_bytes() for name in self.written_layers},
        )
        self.ctx.manifest_extra[LAYER_SHA256] = digests
        manifest = self.run_dir / "manifest.json"
        if manifest.is_file():
            write_json(manifest, {**read_json(manifest), LAYER_SHA256: digests})

    def _drain(self) -> None:
        if not hasattr(self, "faults"):
            return
        self.faults.drain()
        self.gateway.process_backlog()
        self.log.add(
            "drain.settled",
            "harness",
            "control",
            {"inFlight": len(self.gateway.in_flight), "held": len(self.gateway.held)},
        )
        for problem in self.faults.violations():
            self.validity_problems.append(problem)
        for problem in self.user.violations:
            self.validity_problems.append("user simulator: " + problem)
        for problem in linkage_record_faults(check_linkages(self.log.records)):
            # The linkage ledger's own points out of order or doubled: the records cannot say
            # when the event took effect.
            self.validity_problems.append("event linkage: " + problem)
        for name, value in sorted(self.user.counters.items()):
            self.ctx.count(name, value)

    def _collect(self) -> tuple[Observations, str]:
        self.log.add("environment.snapshot", "environment", "state_change", self.facts.snapshot())
        self._write_records()
        faults_planned = bool(self.scenario.events and self.scenario.events.triggers)
        try:
            obs = self._observe()
        except Exception as exc:  # failure is data: extraction failed, everything is missing
            obs = Observations()
            obs.miss("*", f"extraction failed: {type(exc).__name__}: {exc}")
            self.ctx.count("extractionFailures")
        self._assess_user(obs)
        complete = completeness(self.log.records, faults_planned=faults_planned)
        spec = self.resolved["evaluationRef.assertions"].typed(EvaluationSpecAsset)
        evidence = build_evidence(
            obs, [(c.key, c.check) for c in spec.criteria], expectation_needs(spec)
        )
        # The evaluation segment's share inside the run: evidence assembled per criterion (the
        # verdicts are `simreport evaluate`'s, with their own cost in evaluation.json).
        self.ctx.cost.charge(EVALUATION, operations=len(spec.criteria))
        write_layers(self.run_dir, obs, evidence, complete)
        self.written_layers += (OBSERVATIONS_FILE, EVIDENCE_FILE, COMPLETENESS_FILE)
        missing = completeness_missing(complete)
        for key in missing:
            self.ctx.count(f"missing:{key}")
        # Evidence is complete only when every check is present and no observation is missing
        # (a lost decision is a missing check, so it leaves the evidence partial too).
        return obs, "partial" if missing or obs.missing else "complete"

    def _observe(self) -> Observations:
        """The run's observations, from its records. Each world supplies its own."""
        raise NotImplementedError

    def _assess_user(self, obs: Observations) -> None:
        """The user's quality control on this run's records, adding to `obs` and to the run's
        validity problems. Each world supplies its own."""
        raise NotImplementedError

    def _release_environment(self) -> None:
        """Close what the world's environment holds open; nothing by default."""

    def _cleanup(self) -> bool:
        """Close the agent's adapter, destroy the run's workspace and credentials. Whether that
        succeeded; a failure is recorded as an alert and makes the run violated."""
        if self.user_provider is not None:
            # The user's model connection must not stop cleanup (it holds no record of the run).
            with suppress(Exception):
                self.user_provider.close()
            self.user_provider = None
        # Connections the environment holds (a sandbox's client) end with the run, however it
        # ended: a run that failed while initializing never collects.
        with suppress(Exception):
            self._release_environment()
        agent: AgentAdapter | None = getattr(self, "agent", None)
        if agent is not None:
            try:
                agent.close()
            except Exception as exc:  # failure is data: recorded, and cleanup goes on
                self.log.add(
                    "agent.close_failed",
                    "harness",
                    "control",
                    {"error": f"{type(exc).__name__}: {exc}"},
                )
        ok = True
        detail: dict[str, Any] = {}
        if self.workspace is not None and self.workspace.exists():
            try:
                remove_workspace(self.workspace)
            except OSError as exc:
                ok, detail = False, {"error": f"{type(exc).__name__}: {exc}"}
            if ok and self.workspace.exists():
                ok, detail = False, {"error": f"{self.workspace.name} still exists"}
        if self._temp is not None:
            with suppress(OSError):
                self._temp.cleanup()
        if ok:
            self.log.add("cleanup.done", "harness", "control", {"workspace": "removed"})
        else:
            self.cleanup_error = "the workspace could not be removed: " + str(detail["error"])
            self.ctx.count("cleanupFailures")
            self.validity_problems.append("cleanup failed: " + self.cleanup_error)
            self.log.add(
                "cleanup.failed",
                "harness",
                "control",
                {"alert": True, "workspace": "left in place", **detail},
            )
        return ok


def record_content_bytes(records: list[dict[str, Any]]) -> int:
    """UTF-8 bytes of records.jsonl without the real-clock readings (the same on every rerun)."""
    return sum(len(line.encode()) + 1 for line in canonical_records(records))


def remove_workspace(path: Path) -> None:
    """Delete a run's workspace (a seam for tests that simulate a failed cleanup)."""
    shutil.rmtree(path)
