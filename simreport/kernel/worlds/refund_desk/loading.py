"""The refund desk: an agent testbed world around a system under test (SPEC §8).

A simulated customer wants a refund; the agent under test talks to them and calls tools answered
by one fact model while planned faults strike its calls. The world runs the testbed lifecycle,
writes the result layers and reports metrics — facts, never verdicts (evaluation is a step of its
own). The design: docs/testbed.md.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import suppress
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ...core.canonical import content_hash, sha256_text
from ...core.errors import RunError
from ...core.execution_policy import resolve_llm
from ...core.files import read_json, write_json
from ...core.redaction import redact_document
from ...core.schema import Scenario, WorldParams
from .. import prompts
from ..context import STREAM_TESTBED_USER, assign_executors
from ..cost import ENVIRONMENT, EVALUATION, SUT, USER_WORDING
from ..providers import PROVIDERS, Provider, make_provider
from ..testbed.agents import (
    AgentAdapter,
    AgentError,
    AgentStep,
    HttpAgent,
    PythonAgent,
    ReferenceAgent,
    ReplayAgent,
    Session,
    probe_http_agent,
    resolve_entry,
)
from ..testbed.assets import (
    AgentAsset,
    AssetError,
    AssetLibrary,
    EnvironmentDataAsset,
    EvaluationSpecAsset,
    PromptAsset,
    ResolvedAsset,
    SimulatorConfigAsset,
    ToolContractAsset,
    ToolSpec,
    UserPolicyAsset,
    manifest_facts,
    resolved_asset_files,
)
from ..testbed.boundary import REFUSAL, boundary_replacements
from ..testbed.clock import Clocks
from ..testbed.environment import (
    FactModel,
    FaultController,
    InProcessFaultBackend,
    RecordedFaultBackend,
    ToolGateway,
)
from ..testbed.lifecycle import Lifecycle, TestbedFailure
from ..testbed.participants import SurrogateParticipant
from ..testbed.quality import add_quality_observations, assess_run, named_rules, write_quality
from ..testbed.records import (
    Observations,
    RecordLog,
    build_evidence,
    canonical_records,
    check_linkages,
    completeness,
    completeness_missing,
    extract_observations,
    linkage_record_faults,
    metrics_from,
    write_layers,
)
from ..testbed.replay import ReplaySource, active_replay
from ..testbed.settings import SETTING_NOT_IMPLEMENTED, channel_problems, unimplemented
from ..testbed.user import UserSimulator, read_agent_message
from ..testbed.versions import check_versions
from ..world import Decision, DecisionRequest, World, WorldOutcome
from . import WORLDS

if TYPE_CHECKING:
    from ..context import RunContext

METRICS = MappingProxyType(
    {
        # Facts counted from the observations, never verdicts: pass or fail against a
        # criterion is the evaluation's (`simreport evaluate`), not the run's.
        "duplicateRefunds": "Refunds created beyond the first for the order (0 when at most one).",
        "wrongAmountRefunds": (
            "Refunds created for another amount than the one paid; NaN when no refund was created."
        ),
        "blindRetries": (
            "Ambiguous answers after which the agent submitted again before any check; NaN when "
            "no answer was ambiguous."
        ),
        "acceptedAndSatisfied": (
            "1 when the order has an accepted refund and the user closed with the goal reached, "
            "else 0."
        ),
        "turns": "Messages the user sent in the conversation.",
        "complaint": "1 when the user threatened a complaint, else 0.",
    }
)
# The run's counter of each kind of lost provider decision (as RunContext counts them).
LOST_COUNTERS = {"llm": "llmFailures", "parse": "parseFailures", "prompt_too_long": "promptTooLong"}
AGENT, USER = 0, 1


class RefundDeskParams(WorldParams):
    """The refund desk reads its settings from the testbed groups; `params` stays empty."""


class BudgetExhausted(Exception):
    def __init__(self, what: str) -> None:
        super().__init__(f"budget exhausted: {what}")
        self.what = what


@WORLDS.register("refund_desk")
class RefundDesk(World):
    """An agent under test at a refund desk; one run is one conversation."""

    name = "refund_desk"
    Params = RefundDeskParams
    metrics = METRICS
    distributions = MappingProxyType({"outcome": "Who closed the conversation (one per run)."})
    min_agents = 2
    pinned = ("population", "policy")
    code_packages = ("simreport.kernel.testbed",)

    @classmethod
    def check(cls, scenario: Scenario, params: Any) -> list[tuple[str, str]]:
        problems = super().check(scenario, params)
        for key, value in (
            ("sut", scenario.sut),
            ("user", scenario.user),
            ("environment", scenario.environment),
            ("evaluationRef", scenario.evaluation_ref),
        ):
            if value is None:
                problems.append((key, f"refund_desk needs the `{key}` group"))
        if scenario.population.n != 2:
            problems.append(
                (
                    "population.n",
                    "refund_desk has two decision makers: the reference agent (0) and the user's "
                    "wording (1)",
                )
            )
        if scenario.population.fields:
            problems.append(
                ("population.fields", "refund_desk personas come from sut.prompt and user.persona")
            )
        try:
            owners = assign_executors(scenario)
        except RunError:
            owners = []  # the engine reports executor problems itself
        if len(owners) > USER and scenario.executors[owners[USER]].kind != "llm":
            problems.append(
                (
                    "executors",
                    "the user's wording (agent 1) needs an llm executor: a provider words it",
                )
            )
        # Declared settings the testbed does not implement: refused here, where the error can
        # name the file and the path, and again while loading.
        problems += unimplemented(scenario)
        user_llm = scenario.user.llm if scenario.user is not None else None
        if user_llm is not None and user_llm.provider not in PROVIDERS:
            problems.append(
                (
                    "user.llm.provider",
                    f"unknown provider {user_llm.provider!r}; expected one of "
                    + ", ".join(PROVIDERS),
                )
            )
        execution = scenario.execution
        if execution is not None and execution.seed is not None and execution.seed != scenario.seed:
            problems.append(
                (
                    "execution.seed",
                    f"execution.seed {execution.seed} differs from seed {scenario.seed}",
                )
            )
        return problems

    @classmethod
    def needs_provider(cls, scenario: Scenario) -> bool:
        # A replay answers every decision from the recorded run and makes no call.
        return active_replay() is None

    @classmethod
    def input_files(cls, scenario: Scenario, root: Path) -> dict[str, Path | None]:
        if scenario.sut is None:
            return {}
        library = root / (scenario.provenance.asset_library if scenario.provenance else "assets")
        return dict(resolved_asset_files(scenario, library))

    def run(self) -> WorldOutcome:
        return TestbedRun(self.ctx).execute()


class TestbedRun:
    """One run through the lifecycle."""

    __test__ = False

    def __init__(self, ctx: RunContext) -> None:
        scenario = ctx.scenario
        assert scenario.environment is not None and scenario.user is not None
        assert scenario.sut is not None and scenario.evaluation_ref is not None
        self.ctx = ctx
        self.scenario = scenario
        # The scenario as its run folder shows it: ids and hashes derived from it must neither
        # carry a credential of the endpoint's URL nor differ when a replay re-reads the folder.
        self.doc = redact_document(scenario.to_doc())
        self.replay: ReplaySource | None = active_replay()
        self.clocks = Clocks(scenario.environment.clock)
        trace_id = sha256_text("trace|" + content_hash(self.doc))[:32]
        self.log = RecordLog(self.clocks, trace_id, emit=self._emit)
        self.log.secrets = self.ctx.secrets
        self.life = Lifecycle(self.log)
        self.run_dir: Path | None = ctx.run_dir
        self.workspace: Path | None = None
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        self.validity_problems: list[str] = []
        self.cleanup_error: str | None = None
        self.qc_unchecked: list[str] = []
        """Quality-control problems that leave the run's validity unchecked (termination)."""
        self.user_provider: Provider | None = None
        self.agent_calls = 0
        # Cost by segment: the agent's provider decisions are the SUT's, the user's wording the
        # simulation's (kernel/cost.py).
        ctx.cost.assign({AGENT: SUT, USER: USER_WORDING})

    def _emit(self, type_: str, actor: str, payload: dict[str, Any]) -> None:
        self.ctx.emit(type_, actor, **payload)

    # ----------------------------------------------------------------- lifecycle

    def execute(self) -> WorldOutcome:
        self.ctx.count("agentCalls", 0)  # stated even when the run never reaches the agent
        self.life.enter("LOADING")
        try:
            self._load()
        except TestbedFailure as loading_failure:
            loading_failure.evidence = "unchecked"
            self._fail(loading_failure)
            self._write_records()
            raise
        self.life.enter("INITIALIZING")
        try:
            self._initialize()
        except Exception as exc:  # failure is data: setting up failed, the run says why
            init_failure = TestbedFailure(
                f"initializing failed: {type(exc).__name__}: {exc}",
                stage="initializing",
                kind="initialization_failed",
                validity="violated",
            )
            self._fail(init_failure)
            self._cleanup()  # tear down what was set up
            self._write_records()
            raise init_failure from None
        self.life.enter("RUNNING")
        failure: TestbedFailure | None = None
        try:
            self._converse()
        except BudgetExhausted as exc:
            failure = TestbedFailure(
                str(exc), stage="running", kind="budget_exhausted", execution="cancelled"
            )
        except AgentError as exc:
            failure = TestbedFailure(exc.message, stage="running", kind=exc.kind)
        except RunError as exc:
            failure = TestbedFailure(exc.message, stage="running", kind=exc.kind)
        except Exception as exc:  # failure is data: the run fails, named by what was raised
            failure = TestbedFailure(
                f"{type(exc).__name__}: {exc}", stage="running", kind=type(exc).__name__
            )
        if failure is not None:
            # FAILED at once; the run still winds down below (settle, collect, clean).
            self.ctx.count("runningFailures")
            self._fail(failure)
        else:
            self.life.enter("DRAINING")
        try:
            with self.ctx.cost.timed(ENVIRONMENT):
                self._drain()
        except Exception as exc:  # failure is data: a validity problem of the run
            problem = f"draining failed: {type(exc).__name__}: {exc}"
            self.validity_problems.append(problem)
            if failure is None:
                failure = TestbedFailure(problem, stage="draining", kind="drain_failed")
                self._fail(failure)
            else:
                self.log.add("drain.failed", "harness", "control", {"error": problem})
        if failure is None:
            self.life.enter("COLLECTING")
        with self.ctx.cost.timed(EVALUATION):
            obs, evidence_status = self._collect()
        cleaned = self._cleanup()
        validity = (
            "violated"
            if self.validity_problems
            else ("unchecked" if self.qc_unchecked else "valid")
        )
        # The run's own statement of its validity, with each problem (a fact for readers of
        # the run, such as the audit's exclusion reasons; the run judges no criterion).
        self.log.add(
            "run.validity",
            "harness",
            "control",
            {"validity": validity, "problems": [*self.validity_problems, *self.qc_unchecked]},
        )
        if failure is None and cleaned:
            self.life.enter("CLEANED")
        elif failure is None:
            # The conversation ran to its end, but the world it leaves cannot be trusted.
            failure = TestbedFailure(
                f"cleanup failed: {self.cleanup_error}",
                stage="cleanup",
                kind="cleanup_failed",
                execution="completed",
            )
            self._fail(failure)
        self._write_records()
        if self.validity_problems:
            self.ctx.count("validityProblems", len(self.validity_problems))
        if failure is not None:
            failure.validity = validity
            failure.evidence = "partial" if failure.stage != "cleanup" else evidence_status
            raise failure
        closed = obs.get("conversation.closed_by")
        return WorldOutcome(
            metrics=metrics_from(obs),
            distributions={"outcome": {str(closed): 1}} if closed is not None else {},
            validity=validity,
            evidence=evidence_status,
        )

    def _fail(self, failure: TestbedFailure) -> None:
        """Record the failure and enter FAILED, the final stage."""
        self.log.add(
            "run.failure",
            "harness",
            "control",
            {"stage": failure.stage, "kind": failure.kind, "message": failure.message},
        )
        self.life.enter("FAILED", failedIn=failure.stage, kind=failure.kind)

    def _write_records(self) -> None:
        self.log.write(self.run_dir)
        # Logical time no segment claimed passed in the environment (tool latencies, timeouts).
        self.ctx.cost.settle_logical(self.clocks.logical_ms, ENVIRONMENT)
        self.ctx.cost.record_bytes["records"] = record_content_bytes(self.log.records)

    # ----------------------------------------------------------------- LOADING

    def _load(self) -> None:
        """Resolve the manifest, check the boundary, the agent's entry and the joint model.
        Nothing here calls the agent."""
        s = self.scenario
        assert s.sut is not None and s.user is not None and s.environment is not None
        assert s.evaluation_ref is not None
        self._refuse_unimplemented(unimplemented(s))
        self.user_mode, mode_from = self._user_mode()
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
        wanted: list[tuple[str, str, Any]] = [
            ("sut.agent", s.sut.agent, "agent"),
            ("user.policy", s.user.policy, "user_policy"),
            ("user.simulator", s.user.simulator, "simulator_config"),
            ("environment.data", s.environment.data, "env_data"),
            ("evaluationRef.assertions", s.evaluation_ref.assertions, "evaluation_spec"),
        ]
        if s.sut.prompt is not None:
            wanted.append(("sut.prompt", s.sut.prompt, "prompt"))
        if s.evaluation_ref.rubric is not None:
            wanted.append(("evaluationRef.rubric", s.evaluation_ref.rubric, "rubric"))
        wanted += [
            (f"environment.toolContracts.{i}", ref, "tool_contract")
            for i, ref in enumerate(s.environment.tool_contracts)
        ]
        resolved: dict[str, ResolvedAsset] = {}
        errors: list[str] = []
        for slot, ref, kind in wanted:
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
            "modeFrom": mode_from,
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
        s = self.scenario
        assert s.user is not None
        tools: dict[str, ToolSpec] = {}
        owner: dict[str, str] = {}  # tool → the contract (name@version) that defines it
        for slot, asset in sorted(self.resolved.items()):
            if asset.kind != "tool_contract":
                continue
            contract = asset.typed(ToolContractAsset)
            for tool in contract.tools:
                if tool.name in tools:
                    raise TestbedFailure(
                        f"tool {tool.name!r} is defined twice ({slot})",
                        stage="loading",
                        kind="manifest_unresolved",
                    )
                tools[tool.name] = tool
                owner[tool.name] = f"{asset.name}@{asset.version}"
        self.tools = tools
        self.participants: dict[str, SurrogateParticipant] = {}
        for i, participant in enumerate(s.participants or []):
            surrogate = SurrogateParticipant.of(participant)
            if surrogate.name in tools:
                raise TestbedFailure(
                    f"participants.{i} ({participant.id}) is reached through "
                    f"{surrogate.name!r}, a tool the contracts ({owner[surrogate.name]}) "
                    f"already define; give it a tool of its own (participants.{i}.tool)",
                    stage="loading",
                    kind="manifest_unresolved",
                )
            self.participants[surrogate.name] = surrogate
        interaction = s.interaction
        entry_tool = interaction.action_entry if interaction is not None else "create_refund"
        if entry_tool not in tools or tools[entry_tool].operation != "create_refund":
            raise TestbedFailure(
                f"interaction.actionEntry {entry_tool!r} is not a refund submission tool of the "
                "contracts",
                stage="loading",
                kind="entity_binding_mismatch",
            )
        # One submission entry: a second tool that submits refunds would let the agent act
        # where the scenario says no action is possible, and own state the scenario gives to one.
        entries = [name for name, tool in tools.items() if tool.operation == "create_refund"]
        if len(entries) > 1:
            raise TestbedFailure(
                f"interaction.actionEntry declares {entry_tool!r} as the one refund entry, but "
                f"the tool contracts offer {len(entries)}: "
                + ", ".join(f"{name} ({owner[name]})" for name in entries)
                + "; expected exactly one tool with operation create_refund",
                stage="loading",
                kind="action_entry_mismatch",
            )
        self.action_entry = entry_tool
        for i, trigger in enumerate(s.events.triggers if s.events is not None else []):
            if trigger.target not in tools and trigger.target not in self.participants:
                raise TestbedFailure(
                    f"events.triggers.{i} targets {trigger.target!r}, which no tool contract "
                    "or participant has",
                    stage="loading",
                    kind="fault_plan_incomplete",
                )
            opens, closes = trigger.at.turn, trigger.recover.turn
            if opens is not None and closes is not None and closes <= opens:
                raise TestbedFailure(
                    f"events.triggers.{i} recovers at turn {closes}, not after it opens at turn "
                    f"{opens}: its window is empty, so it can never hit",
                    stage="loading",
                    kind="fault_plan_incomplete",
                )
        env = self.resolved["environment.data"].typed(EnvironmentDataAsset)
        collections = {
            "order": {o.id for o in env.orders},
            "orders": {o.id for o in env.orders},
            "account": {a.id for a in env.accounts},
            "accounts": {a.id for a in env.accounts},
        }
        user_facts = s.user.private_facts.to_doc()
        for key, target in (interaction.entity_binding if interaction is not None else {}).items():
            fact = _binding_fact(key)
            if fact is None or fact not in user_facts:
                accepted = ", ".join(f"user.{name}" for name in sorted(user_facts))
                raise TestbedFailure(
                    f"interaction.entityBinding: the key {key!r} does not name a fact of the "
                    f"user; write it as user.<fact> or privateFacts.<fact> ({accepted}), bound "
                    "to env.order.id or env.account.id — e.g. user.orderNumber: env.order.id",
                    stage="loading",
                    kind="entity_binding_mismatch",
                )
            parts = target.split(".")
            if len(parts) != 3 or parts[0] != "env" or parts[1] not in collections:
                raise TestbedFailure(
                    f"interaction.entityBinding.{key}: cannot read {target!r} "
                    "(expected env.order.id or env.account.id)",
                    stage="loading",
                    kind="entity_binding_mismatch",
                )
            value = user_facts.get(fact)
            if value is None or value not in collections[parts[1]]:
                raise TestbedFailure(
                    f"interaction.entityBinding: the user's {fact} {value!r} is not an "
                    f"{parts[1]} of the environment data",
                    stage="loading",
                    kind="entity_binding_mismatch",
                )
        wording = self.resolved["user.simulator"].typed(SimulatorConfigAsset)
        policy = self.resolved["user.policy"].typed(UserPolicyAsset)
        effects = [r.effect for r in (*policy.reaction_rules, *s.user.behavior.reaction_rules)]
        missing = [i for i in UserSimulator.needed_intents(effects) if not wording.intents.get(i)]
        if missing:
            raise TestbedFailure(
                f"user.simulator has no wording for intents {', '.join(missing)}",
                stage="loading",
                kind="manifest_unresolved",
            )
        if s.user.persona.patience not in policy.patience:
            raise TestbedFailure(
                f"user.policy has no patience level {s.user.persona.patience!r}",
                stage="loading",
                kind="manifest_unresolved",
            )
        order = s.user.private_facts.order_number
        self.bound_order = order if order is not None and order in collections["orders"] else None

    # ----------------------------------------------------------------- INITIALIZING

    def _initialize(self) -> None:
        s = self.scenario
        assert s.user is not None and s.sut is not None
        if self.run_dir is not None:
            self.workspace = self.run_dir / "workspace"
        else:
            self._temp = tempfile.TemporaryDirectory(prefix="refund-desk-")
            self.workspace = Path(self._temp.name) / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        write_json(
            self.workspace / "credentials.json",
            {"identity": s.sut.identity, "token": sha256_text("token|" + self.log.trace_id)[:24]},
        )
        env = self.resolved["environment.data"].typed(EnvironmentDataAsset)
        self.facts = FactModel(env)
        write_json(self.workspace / "initial-state.json", self.facts.snapshot())
        self.gateway = ToolGateway(
            self.tools, self.facts, self.log, self.clocks, participants=self.participants
        )
        triggers = list(s.events.triggers) if s.events is not None else []
        backend = (
            RecordedFaultBackend(self.replay.fault_hits)
            if self.replay is not None
            else InProcessFaultBackend()
        )
        self.faults = FaultController(
            triggers,
            backend,
            self.log,
            self.gateway.release_held,
            verify=self.gateway.check_recovery,
        )
        self.gateway.faults = self.faults
        self.faults.plan()
        self.faults.arm_initial()
        self.log.add(
            "environment.initialized",
            "environment",
            "state_change",
            {
                "stateSha256": self.facts.digest(),
                "workspace": "workspace",
                "identity": s.sut.identity,
            },
        )
        for participant in self.participants.values():
            self.log.add("participant.joined", "environment", "control", participant.joined())
        # Personas: the agent's from its prompt asset, the user's from the scenario.
        prompt = self.resolved.get("sut.prompt")
        if prompt is not None:
            self.ctx.agents[AGENT].persona = dict(prompt.typed(PromptAsset).persona)
        self.ctx.agents[USER].persona = s.user.persona.to_doc()
        self._route_user_wording()
        self.user = UserSimulator(
            config=s.user,
            policy=self.resolved["user.policy"].typed(UserPolicyAsset),
            wording=self.resolved["user.simulator"].typed(SimulatorConfigAsset),
            log=self.log,
            clocks=self.clocks,
            decide=lambda request: self._decide("user", USER, request),
            mode="exploration" if self.user_mode == "exploration" else "regression",
            rng=self.ctx.seeds.generator(STREAM_TESTBED_USER),
            seed=s.seed,
        )
        self.agent = self._make_agent()
        self.log.secrets = (*self.agent.secrets, *self.ctx.secrets)
        prompt_asset = self.resolved.get("sut.prompt")
        system = (
            prompt_asset.typed(PromptAsset).instructions
            if prompt_asset is not None and self.agent_asset.adapter in ("http", "python")
            else None
        )
        self.session = Session(system)

    def _route_user_wording(self) -> None:
        """The user's wording through `user.llm` when declared (its own provider, built here and
        closed at cleanup; a replay builds none), at temperature 0 for a regression user."""
        s = self.scenario
        assert s.user is not None
        config = s.user.llm or s.llm
        if self.user_mode == "regression":
            config = config.model_copy(update={"temperature": 0.0})
        if s.user.llm is not None and self.replay is None:
            self.user_provider = make_provider(
                resolve_llm(s.user.llm, self.ctx.resources, "user.llm"), path="user.llm.provider"
            )
        if s.user.llm is not None or self.user_mode == "regression":
            self.ctx.route(USER, config, self.user_provider)

    def _make_agent(self) -> AgentAdapter:
        s = self.scenario
        assert s.sut is not None
        agent = self.agent_asset
        tools = list(self.tools.values())
        if agent.adapter in ("reference", "scripted"):
            prompt = self.resolved["sut.prompt"].typed(PromptAsset)
            script = list(agent.script) + (
                list(s.interaction.tool_call_script) if s.interaction is not None else []
            )
            return ReferenceAgent(
                prompt, tools, lambda request: self._decide("agent", AGENT, request), script=script
            )
        if self.replay is not None:
            return ReplayAgent(self.replay.agent_steps, self.replay.agent_failure)
        definitions = self.gateway.definitions()
        if agent.adapter == "python":
            assert self.entry_function is not None
            return PythonAgent(self.entry_function, agent.model, definitions)
        return HttpAgent(
            s.sut.entry or agent.entry or "",
            agent.model,
            definitions,
            timeout=s.sut.timeout_seconds,
            api_key_env=agent.api_key_env,
            traceparent=self._traceparent,
        )

    def _traceparent(self) -> str:
        return f"00-{self.log.trace_id}-{self.log.span(f'agent:{self.agent_calls}')}-01"

    def _decide(self, role: str, agent: int, request: DecisionRequest) -> Decision:
        """Every provider decision: made (or replayed) and recorded with the prompt's digest."""
        executor = self.scenario.executors[self.ctx.executor_of[agent]]
        messages = prompts.render(
            request,
            self.ctx.agents[agent].persona,
            self.scenario.prompt,
            executor.options.components,
        )
        prompt_sha = content_hash([[m.role, m.content] for m in messages])
        if self.replay is not None:
            decision = self.replay.decide(role, request)
            lost_counter = LOST_COUNTERS.get(decision.failure or "")
            if decision.option is None and lost_counter is not None:
                # Replayed as lost, counted as the recorded run counted it.
                self.ctx.count(lost_counter)
        else:
            decision = self.ctx.decide(agent, request)
        # Cost by segment: the SUT's own decisions apart from the simulated user's wording.
        self.ctx.count("agentDecisions" if role == "agent" else "userWordingDecisions")
        self.log.add(
            f"{role}.decision",
            "agent" if role == "agent" else "user",
            "control",
            {
                "kind": request.kind,
                "options": list(request.options),
                "chosen": decision.option,
                "failure": decision.failure,
                "promptSha256": prompt_sha,
            },
        )
        return decision

    # ----------------------------------------------------------------- RUNNING

    def _converse(self) -> None:
        s = self.scenario
        budget = s.execution.budget if s.execution is not None else None
        max_turns = budget.max_turns if budget is not None else 12
        max_calls = budget.max_tool_calls if budget is not None else 30
        wall_limit_ns = int((budget.wall_clock if budget is not None else 1200.0) * 1e9)
        per_turn = s.execution.max_actions_per_turn if s.execution is not None else 6
        turn_ms = s.interaction.turn_ms if s.interaction is not None else 20_000
        order_pattern = self.user.wording.order_number_pattern
        started = Clocks.monotonic_ns()

        turn = 1
        self.ctx.begin_step(turn)
        self.faults.on_turn(turn)
        with self.ctx.cost.timed(USER_WORDING, operations=1):
            message = self.user.opening()
        closed_by, goal = "user_silent", False
        if message.text is not None:
            self.session.user(message.text)
        while message.text is not None and not message.ends:
            texts: list[str] = []
            self._note_delivery(turn)
            for _ in range(per_turn):
                if Clocks.monotonic_ns() - started > wall_limit_ns:
                    raise BudgetExhausted(f"wall clock over {wall_limit_ns / 1e9:g} s")
                step = self._agent_step()
                if step.tool_calls:
                    self.session.assistant(step)
                    for call in step.tool_calls:
                        if self.gateway.calls >= max_calls:
                            raise BudgetExhausted(f"more than {max_calls} tool calls")
                        with self.ctx.cost.timed(ENVIRONMENT, operations=1):
                            result = self.gateway.call(
                                call.name, call.arguments, f"call-{self.gateway.calls + 1:04d}"
                            )
                        self.ctx.count("toolCalls")
                        self.session.tool(call.id, result.body)
                    continue
                if step.lost is not None:
                    # The provider's decision was lost: the turn ends without a message, but
                    # that is missing evidence (see completeness), not the agent falling silent.
                    self.log.add(
                        "agent.decision_lost",
                        "harness",
                        "control",
                        {"turn": turn, "failure": step.lost},
                    )
                    self.ctx.count("agentDecisionsLost")
                    break
                if step.reply:
                    self.session.assistant(step)
                    reading = read_agent_message(step.reply, order_pattern)
                    self.log.add(
                        "agent.message",
                        "agent",
                        "message",
                        {"turn": turn, "text": step.reply, "signals": list(reading.signals)},
                    )
                    texts.append(step.reply)
                    break
                self.log.add("agent.silent", "agent", "control", {"turn": turn})
                self.ctx.count("agentSilentSteps")
                break
            else:
                self.log.add(
                    "agent.step_cap", "harness", "control", {"turn": turn, "cap": per_turn}
                )
                self.ctx.count("agentStepCaps")
            if turn >= max_turns:
                raise BudgetExhausted(f"{max_turns} user turns without closing")
            self.clocks.advance(turn_ms)
            self.ctx.cost.charge(USER_WORDING, logical_ms=turn_ms)  # the user's time to answer
            turn += 1
            self.ctx.begin_step(turn)
            self.faults.on_turn(turn)
            with self.ctx.cost.timed(ENVIRONMENT):
                self.gateway.process_backlog()
            with self.ctx.cost.timed(USER_WORDING, operations=1):
                message = self.user.reply(texts)
            if message.text is not None:
                self.session.user(message.text)
        if message.text is None:
            closed_by = "user_silent"
        elif message.intent == "confirm_and_close":
            closed_by, goal = "resolved_by_user", True
        else:
            closed_by = "user_gave_up"
        self.log.add(
            "conversation.closed",
            "harness",
            "control",
            {"closedBy": closed_by, "goalReached": goal, "turns": turn},
        )

    def _note_delivery(self, turn: int) -> None:
        """The agent point of a linked event (t2): the user's message that opened it is handed
        to the agent now, at the agent's next call."""
        last = next((r for r in reversed(self.log.records) if r["type"] == "user.message"), None)
        opened = last.get("linkage") if last is not None else None
        if last is None or not isinstance(opened, dict) or opened.get("point") != "user":
            return
        link = self.log.linkage(str(opened["id"]), "agent")
        if link is not None:
            self.log.add(
                "agent.received",
                "agent",
                "message",
                {"turn": turn, "userRecord": last["recordId"], "event": opened["event"]},
                linkage=link,
            )

    def _agent_step(self) -> AgentStep:
        self.agent_calls += 1
        self.ctx.count("agentCalls")
        started = Clocks.monotonic_ns()
        with self.ctx.cost.timed(SUT, operations=1):
            step = self.agent.step(self.session)
        for key, name in (
            ("prompt_tokens", "agentPromptTokens"),
            ("completion_tokens", "agentCompletionTokens"),
        ):
            if key in step.usage:
                self.ctx.count(name, step.usage[key])
        if self.agent_asset.adapter in ("http", "python") and self.replay is None:
            # The SUT's own model call, as its endpoint reports it (a replay calls nothing).
            self.ctx.cost.charge(
                SUT,
                llm_calls=1,
                prompt_tokens=step.usage.get("prompt_tokens", 0),
                completion_tokens=step.usage.get("completion_tokens", 0),
            )
        self.log.add(
            "agent.step",
            "agent",
            "control",
            {"adapter": self.agent_asset.adapter, "step": step.to_doc()},
            duration_ns=Clocks.monotonic_ns() - started,
        )
        return step

    # ----------------------------------------------------------------- DRAINING … CLEANED

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
            obs = extract_observations(
                self.log.records,
                order_id=self.bound_order,
                action_entry=self.action_entry,
                participants={p.id: p.name for p in self.participants.values()},
            )
        except Exception as exc:  # failure is data: extraction failed, everything is missing
            obs = Observations()
            obs.miss("*", f"extraction failed: {type(exc).__name__}: {exc}")
            self.ctx.count("extractionFailures")
        self._assess_user(obs)
        complete = completeness(self.log.records, faults_planned=faults_planned)
        spec = self.resolved["evaluationRef.assertions"].typed(EvaluationSpecAsset)
        evidence = build_evidence(obs, [(c.key, c.check) for c in spec.criteria])
        # The evaluation segment's share inside the run: evidence assembled per criterion (the
        # verdicts are `simreport evaluate`'s, with their own cost in evaluation.json).
        self.ctx.cost.charge(EVALUATION, operations=len(spec.criteria))
        write_layers(self.run_dir, obs, evidence, complete)
        missing = completeness_missing(complete)
        for key in missing:
            self.ctx.count(f"missing:{key}")
        # Evidence is complete only when every check is present and no observation is missing
        # (a lost decision is a missing check, so it leaves the evidence partial too).
        return obs, "partial" if missing or obs.missing else "complete"

    def _assess_user(self, obs: Observations) -> None:
        """The user simulator's quality control on this run's records (testbed/quality.py):
        user-quality.json, `user.qc.*` observations, a counter per failed check, and the
        thresholds' consequences for the run's validity."""
        s = self.scenario
        user: UserSimulator | None = getattr(self, "user", None)
        if user is None or s.user is None:
            return
        try:
            doc = assess_run(
                self.log.records,
                s.user,
                rules=named_rules(user.policy.reaction_rules, s.user.behavior.reaction_rules),
                give_up_ms=user.give_up_ms,
                order_pattern=user.wording.order_number_pattern,
                mode=user.mode,
            )
        except Exception as exc:  # failure is data: quality control failed, its facts missing
            obs.miss("user.qc.*", f"user quality control failed: {type(exc).__name__}: {exc}")
            self.ctx.count("userQualityFailures")
            return
        write_quality(self.run_dir, doc)
        add_quality_observations(obs, doc, self.log.records)
        for check in doc["failed"]:
            self.ctx.count(f"userQualityFailed:{check}")
        disposition = doc["disposition"]
        self.validity_problems += [f"user simulator QC: {p}" for p in disposition["violating"]]
        self.qc_unchecked += [f"user simulator QC: {p}" for p in disposition["unchecked"]]

    def _cleanup(self) -> bool:
        """Close the agent's adapter, destroy the run's workspace and credentials. Whether that
        succeeded; a failure is recorded as an alert and makes the run violated."""
        if self.user_provider is not None:
            # The user's model connection must not stop cleanup (it holds no record of the run).
            with suppress(Exception):
                self.user_provider.close()
            self.user_provider = None
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


def _binding_fact(key: str) -> str | None:
    """The user's fact an entity-binding key names (`user.orderNumber`, `privateFacts.orderNumber`
    or `orderNumber`), or None for any other form (such as `tool.order_no`)."""
    for prefix in ("user.privateFacts.", "user.", "privateFacts."):
        if key.startswith(prefix):
            key = key[len(prefix) :]
            break
    return key if key and "." not in key else None


def record_content_bytes(records: list[dict[str, Any]]) -> int:
    """UTF-8 bytes of records.jsonl without the real-clock readings (the same on every rerun)."""
    return sum(len(line.encode()) + 1 for line in canonical_records(records))


def remove_workspace(path: Path) -> None:
    """Delete a run's workspace (a seam for tests that simulate a failed cleanup)."""
    shutil.rmtree(path)
