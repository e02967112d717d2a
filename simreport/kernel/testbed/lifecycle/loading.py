"""LOADING: resolve the run's manifest in the asset library, check the versions, the boundary,
the agent's entry and the world's joint model (`_check_joint_model`, a world's own), and
probe an HTTP agent. Nothing here calls the agent; every refusal is a `TestbedFailure` of the
loading stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ....core.files import read_json, write_json
from ..agents import AgentError, probe_http_agent, resolve_entry
from ..assets import (
    AgentAsset,
    AssetError,
    AssetLibrary,
    ResolvedAsset,
    manifest_facts,
    manifest_references,
)
from ..boundary import REFUSAL, boundary_replacements
from ..environment import InProcessFaultBackend
from ..settings import SETTING_NOT_IMPLEMENTED, channel_problems, unimplemented
from ..version_checks import check_versions
from . import TestbedFailure
from .state import RunState


class Loading(RunState):
    """The LOADING stage of a run."""

    def _load(self) -> None:
        """Resolve the manifest, check the boundary, the agent's entry and the joint model.
        Nothing here calls the agent."""
        s = self.scenario
        assert s.sut is not None and s.user is not None and s.environment is not None
        assert s.evaluation_ref is not None
        self._refuse_unimplemented(unimplemented(s))
        self.user_mode, self.user_mode_from = self._user_mode()
        library_dir = s.provenance.asset_library if s.provenance is not None else "assets"
        if self.ctx.asset_root is None:
            raise TestbedFailure(
                "the scenario has no folder, so its asset library cannot be found",
                stage="loading",
                kind="manifest_unresolved",
            )
        root = (self.ctx.asset_root / library_dir).resolve()
        pins = self.replay.pins if self.replay is not None else (self.ctx.checks.pins or None)
        library = AssetLibrary(root, pins=pins)
        resolved: dict[str, ResolvedAsset] = {}
        errors: list[str] = []
        for slot, ref, kind in self._wanted():
            try:
                resolved[slot] = library.resolve(ref, kind, slot)
            except AssetError as exc:
                errors.append(f"{slot}: {exc}")
        if errors:
            raise TestbedFailure(
                "manifest unresolved: " + "; ".join(errors),
                stage="loading",
                kind="manifest_unresolved",
            )
        self._locked(resolved, root)

    def _wanted(self) -> list[tuple[str, str, Any]]:
        """Every asset the run resolves: (slot, reference, kind)."""
        return list(manifest_references(self.scenario))

    def _locked(self, resolved: dict[str, ResolvedAsset], root: Path) -> None:
        """Check the resolved versions, the boundary, the entry and the joint model; lock the
        manifest and probe the agent."""
        s = self.scenario
        assert s.user is not None
        # Before anything else looks at them: the versions must be the pinned ones, and a
        # regression run's all online.
        identity = self.doc.get("identity") or {}
        not_online = check_versions(identity, resolved, self.ctx.checks)
        self.resolved = resolved
        agent = resolved["sut.agent"].typed(AgentAsset)
        self.agent_asset = agent

        replaced = boundary_replacements(s, agent)
        if replaced:
            raise TestbedFailure(
                "the scenario replaces the system under test inside its boundary: "
                + "; ".join(replaced),
                stage="loading",
                kind=REFUSAL,
            )
        self._refuse_unimplemented(channel_problems(s, agent.adapter))
        self._check_entry(agent)
        self._check_joint_model()
        facts = manifest_facts(
            self.doc,
            resolved,
            root,
            identity=self.doc.get("identity"),
            checks=self.ctx.checks,
            not_online=not_online,
        )
        facts["traceId"] = self.log.trace_id
        facts["faultBackend"] = (
            "recorded" if self.replay is not None else InProcessFaultBackend.name
        )
        wording_llm = s.user.llm or s.llm
        facts["userSimulator"] = {
            "mode": self.user_mode,
            "modeFrom": self.user_mode_from,
            "llm": {
                "from": "user.llm" if s.user.llm is not None else "llm",
                "provider": wording_llm.provider,
                "model": wording_llm.model,
                "temperature": 0.0 if self.user_mode == "regression" else wording_llm.temperature,
            },
        }
        self.ctx.manifest_extra.update(facts)
        if self.run_dir is not None and (self.run_dir / "manifest.json").is_file():
            # Written now, so a run that fails later still names its exact asset versions.
            write_json(
                self.run_dir / "manifest.json",
                {**read_json(self.run_dir / "manifest.json"), **facts},
            )
        self.log.add(
            "manifest.locked",
            "harness",
            "control",
            {
                "manifestSha256": facts["manifestSha256"],
                "resolved": {
                    slot: {"name": a.name, "version": a.version, "sha256": a.sha256}
                    for slot, a in sorted(resolved.items())
                },
            },
        )
        self._probe(agent)

    def _user_mode(self) -> tuple[str, str]:
        """The user simulator's mode and where it comes from: `user.mode` when declared, else the
        run's purpose. A regression run pins the user's path, so it refuses an exploring user."""
        assert self.scenario.user is not None
        declared, purpose = self.scenario.user.mode, self.ctx.checks.purpose
        if declared == "exploration" and purpose == "regression":
            raise TestbedFailure(
                "user.mode: an exploration user in a regression run; a regression run pins the "
                "user's path: set user.mode to regression or leave it unset",
                stage="loading",
                kind="user_mode_conflict",
            )
        if declared is not None:
            return declared, "user.mode"
        return ("regression" if purpose == "regression" else "exploration"), "purpose"

    def _refuse_unimplemented(self, problems: list[tuple[str, str]]) -> None:
        if problems:
            raise TestbedFailure(
                "declared settings are not implemented: "
                + "; ".join(f"{path}: {message}" for path, message in problems),
                stage="loading",
                kind=SETTING_NOT_IMPLEMENTED,
            )

    def _probe(self, agent: AgentAsset) -> None:
        """Ask an HTTP agent whether it is there before the user says a word; a replay reads the
        recorded answer instead of asking again."""
        s = self.scenario
        assert s.sut is not None
        if agent.adapter != "http":
            return
        if self.replay is not None:
            if self.replay.probe is None:
                return  # recorded before runs probed their agent
            answer = dict(self.replay.probe)
        else:
            answer = probe_http_agent(
                s.sut.entry or agent.entry or "",
                agent.health,
                timeout=s.sut.timeout_seconds,
                api_key_env=agent.api_key_env,
            ).to_doc()
        self.log.add("sut.probe", "harness", "control", answer)
        if not answer.get("reachable"):
            raise TestbedFailure(
                f"the agent under test did not answer its probe: {answer.get('detail')}",
                stage="loading",
                kind=str(answer.get("kind") or "sut_unreachable"),
            )

    def _check_entry(self, agent: AgentAsset) -> None:
        s = self.scenario
        assert s.sut is not None
        entry = s.sut.entry or agent.entry
        if agent.adapter in ("reference", "scripted") and not self._has_reference_agent():
            raise TestbedFailure(
                f"the {agent.adapter} agent is a world's own built-in agent and this world has "
                "none; its agent under test is reached over http or as a python entry point",
                stage="loading",
                kind="manifest_unresolved",
            )
        if agent.adapter in ("reference", "scripted") and "sut.prompt" not in self.resolved:
            raise TestbedFailure(
                "the reference agent needs its prompt: set sut.prompt",
                stage="loading",
                kind="manifest_unresolved",
            )
        if agent.adapter == "http" and not entry:
            raise TestbedFailure(
                "an HTTP agent needs an entry URL (sut.entry or the agent asset's entry)",
                stage="loading",
                kind="manifest_unresolved",
            )
        if agent.adapter == "http" and entry and not entry.startswith(("http://", "https://")):
            raise TestbedFailure(
                f"entry {entry!r} is not an http(s) URL",
                stage="loading",
                kind="manifest_unresolved",
            )
        self.entry_function = None
        if agent.adapter == "python":
            if not entry:
                raise TestbedFailure(
                    "a Python agent needs an entry module:function",
                    stage="loading",
                    kind="manifest_unresolved",
                )
            try:
                self.entry_function = resolve_entry(entry, self.ctx.asset_root)
            except AgentError as exc:
                raise TestbedFailure(
                    exc.message, stage="loading", kind="manifest_unresolved"
                ) from None

    def _check_joint_model(self) -> None:
        """The world's joint model (its tools, participants, faults and entity bindings must fit
        together before the agent is called): sets `tools` and `participants`, and refuses with
        a `TestbedFailure` of the loading stage. Each world supplies its own."""
        raise NotImplementedError
