"""The engine: validate a scenario fully, and run one scenario into a run directory.

A run never raises to its caller: whatever goes wrong becomes `failure` in result.json, with the
stage it happened in. Every file is written atomically, and result.json last, so a directory with a
result.json is a finished run and one without is not.
"""

from __future__ import annotations

import importlib
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.canonical import canonical_json, pretty_json, sha256_bytes
from ..core.errors import InputError, RunError, SchemaError, ValidationIssue, join_path
from ..core.execution_policy import ExecutionPolicy, resolve_llm
from ..core.files import Document, load_document, write_atomic, write_json
from ..core.fingerprint import code_fingerprint
from ..core.package_version import __version__
from ..core.redaction import Scrubber, redact_document
from ..core.schema import (
    SCHEMA_VERSION,
    Cost,
    FailureInfo,
    Integrity,
    RunResult,
    RunStatus,
    Scenario,
)
from ..core.validation import issues_from, validate_model
from ..core.versions import RunChecks, run_document
from .context import RunContext, assign_executors
from .events import EventLog
from .external import simulator_assets
from .interrupt import Interrupted, check, stop_requested
from .policies import POLICIES
from .providers import PROVIDERS, make_provider
from .rules import RULES
from .world import World, WorldOutcome
from .worlds import WORLDS

KERNEL_VERSION = "1"


@dataclass
class LoadedScenario:
    scenario: Scenario
    asset_root: Path
    document: Document


# --------------------------------------------------------------------------- validation


def validate_scenario(
    data: Any,
    *,
    file: str | Path | None = None,
    document: Document | None = None,
    prefix: str = "",
    check_provider: bool = True,
) -> Scenario:
    """Validate a scenario document completely: the schema, then the world's parameters, the
    policy's options and the executors' rules, each normalised with its defaults.

    Raises SchemaError (or InputError) located in `file` at the dotted path of the first problem.
    """
    where = file or (document.path if document is not None else None)

    def fail(
        path: str, message: str, expected: str | None = None, *, kind: str | None
    ) -> SchemaError:
        full = join_path(prefix, path) if prefix else path
        line = document.line_of(full) if document is not None else None
        return SchemaError(
            [ValidationIssue(path, message, expected, kind)], file=where, line=line, prefix=prefix
        )

    if not isinstance(data, Mapping):
        raise fail(
            "", "a scenario must be a mapping", "a mapping of scenario keys", kind="dict_type"
        )
    scenario = validate_model(Scenario, dict(data), file=where, document=document, prefix=prefix)

    if scenario.world is not None:
        if scenario.world not in WORLDS:
            raise fail(
                "world",
                f"unknown world {scenario.world!r}",
                "one of " + ", ".join(WORLDS),
                kind="unknown_world",
            )
        world_cls = WORLDS.get(scenario.world)
        params = _validate_part(world_cls.Params, scenario.params, "params", fail)
        scenario.params = params.model_dump(mode="json", by_alias=True)
        for path, message in world_cls.check(scenario, params):
            raise fail(path, message, kind="world_check")
    elif scenario.params:
        # External simulators receive params as given.
        pass

    if scenario.policy.name not in POLICIES:
        raise fail(
            "policy.name",
            f"unknown activation policy {scenario.policy.name!r}",
            "one of " + ", ".join(POLICIES),
            kind="unknown_policy",
        )
    policy_cls = POLICIES.get(scenario.policy.name)
    options = _validate_part(policy_cls.Options, scenario.policy.options, "policy.options", fail)
    scenario.policy.options = options.model_dump(mode="json", by_alias=True)

    for e, executor in enumerate(scenario.executors):
        if executor.kind == "rule" and executor.rule not in RULES:
            raise fail(
                f"executors.{e}.rule",
                f"unknown rule {executor.rule!r}",
                "one of " + ", ".join(RULES),
                kind="unknown_rule",
            )
    try:
        assign_executors(scenario)
    except RunError as exc:
        raise fail("executors", exc.message, kind="executor_assignment") from None

    uses_llm = any(e.kind == "llm" for e in scenario.executors)
    if check_provider and uses_llm and scenario.llm.provider not in PROVIDERS:
        raise fail(
            "llm.provider",
            f"unknown provider {scenario.llm.provider!r}",
            "one of " + ", ".join(PROVIDERS),
            kind="unknown_provider",
        )
    return scenario


def _validate_part(model: Any, data: Any, path: str, fail: Any) -> Any:
    from pydantic import ValidationError

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issue = issues_from(exc)[0]
        raise fail(
            join_path(path, issue.path), issue.message, issue.expected, kind=issue.kind
        ) from None


def load_scenario(path: str | Path) -> LoadedScenario:
    """Read and validate a scenario file; its folder is where its relative asset paths resolve."""
    document = load_document(path)
    scenario = validate_scenario(document.data, document=document)
    return LoadedScenario(scenario, Path(path).resolve().parent, document)


def scenario_outputs(
    scenario: Scenario, root: Path | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The metric and distribution names a scenario's world (or simulator) reports; `root` is
    the scenario's folder, where a world whose metrics are data finds them."""
    if scenario.simulator is not None:
        return tuple(scenario.simulator.metrics), tuple(scenario.simulator.distributions)
    world = WORLDS.get(scenario.world or "", path="world")
    metrics, distributions = world.outputs(scenario, root)
    return tuple(metrics), tuple(distributions)


# --------------------------------------------------------------------------- fingerprints


def kernel_fingerprint(world: str | None) -> str:
    """sha256 over the normalised sources of the kernel, of the core modules it builds on
    (schemas, their defaults and validators decide what a scenario means) and of the world's
    module (and its code packages): a code change to any of them makes earlier runs out of date
    (the workflow passes this as a parameter of the run jobs); comments and docstrings change
    nothing.

    Computed once per process for each world and set of modules: it names the code the process
    runs, which an edit of the files afterwards does not change (the next process sees the
    edit). Finding and checking the files again for every run cost a tenth of a testbed run."""
    modules: tuple[str, ...] = ()
    if world is not None and world in WORLDS:
        world_cls = WORLDS.get(world)
        modules = (world_cls.__module__, *world_cls.code_packages)
    known = _FINGERPRINTS.get(modules)
    if known is None:
        known = _FINGERPRINTS[modules] = _kernel_fingerprint(modules)
    return known


_FINGERPRINTS: dict[tuple[str, ...], str] = {}
"""The fingerprint of each world's modules (none: the kernel alone), once computed."""


_CODE_SUFFIXES = (".py", ".yaml")


def _kernel_fingerprint(modules: tuple[str, ...]) -> str:
    here = Path(__file__).resolve().parent
    files = [*here.glob("*.py"), *(here / "providers").glob("*.py"), *here.parent.glob("core/*.py")]
    for name in modules:
        module = sys.modules.get(name) or importlib.import_module(name)
        if module.__file__ is None:
            continue
        path = Path(module.__file__)
        # A package counts with every module in it, its subpackages' included, and the data
        # its code reads as rules (a world's domain written in YAML).
        if path.name == "__init__.py":
            files.extend(f for f in sorted(path.parent.rglob("*")) if f.suffix in _CODE_SUFFIXES)
        else:
            files.append(path)
    return code_fingerprint(files)


def input_hashes(scenario: Scenario, asset_root: str | Path | None) -> dict[str, str]:
    """sha256 of every file outside the scenario document that a run of it reads: an external
    simulator's files, and those its world reads (`World.input_files`: for an agent-testbed
    scenario the asset versions its manifest resolves to, labels → versions → files, resolved as
    a run resolves them, without running it). A
    change to any of them makes earlier runs of this scenario out of date, and no other's
    (workflow keys and the run store include it)."""
    root = Path(asset_root).resolve() if asset_root is not None else None
    found = {
        name: sha256_bytes(path.read_bytes())
        for name, path in simulator_assets(scenario, root).items()
    }
    if root is not None and scenario.world is not None and scenario.world in WORLDS:
        world = WORLDS.get(scenario.world)
        for slot, path in world.input_files(scenario, root).items():
            if path is None:
                # The run fails in LOADING; the key changes once the reference resolves.
                found[slot] = "unresolved"
            else:
                found[_relative_name(path, root)] = sha256_bytes(path.read_bytes())
    return found


def _relative_name(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


# --------------------------------------------------------------------------- running


def canonical_scenario(scenario: Scenario) -> Scenario:
    """The scenario as a run reads it: in its canonical form (core.versions.run_document), so
    the order a document lists its mappings' keys in, which its hash does not see, decides
    nothing, and what no run reads (a description) is not part of the run or of
    scenario.json."""
    return Scenario.model_validate(run_document(scenario.to_doc()))


def recorded_scenario(scenario: Scenario) -> dict[str, Any]:
    """The scenario.json a run of the canonical `scenario` writes (URL credentials redacted),
    whose digests its manifest records: what a run service freezes a run's manifest with."""
    doc: dict[str, Any] = redact_document(scenario.to_doc())
    return doc


def run_scenario(
    scenario: Scenario,
    out_dir: str | Path,
    *,
    condition: str = "scenario",
    replication: int | None = None,
    asset_root: str | Path | None = None,
    provider: str | None = None,
    keep_events: bool = True,
    checks: RunChecks | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    resources: ExecutionPolicy | None = None,
    secrets: Sequence[str] = (),
) -> RunResult:
    """Run one scenario into `out_dir` and return its result; never raises for run failures.
    `checks` (from the harness) carry the run's purpose and what it must verify while loading:
    the pinned digests and review statuses of the versions it may use. `on_event` is handed
    every event as it is emitted (a service streams them while the run proceeds). `resources`:
    the execution policy that turns the model endpoints and simulators the scenario names
    (`llm.endpoint`, `simulator.name`) into settings; a name it does not declare fails the run
    in LOADING. `secrets`: credentials of the run's environment (a service's worker knows
    them), blanked out of every event, record and failure message in whatever form an error
    quotes them, before any of it is written or handed on."""
    checks = checks if checks is not None else RunChecks()
    scenario = canonical_scenario(scenario)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # A stale result.json from an earlier run must not survive a rerun that is killed midway.
    (out / "result.json").unlink(missing_ok=True)
    root = Path(asset_root).resolve() if asset_root is not None else None
    rep = replication if replication is not None else (scenario.replication_id or 0)
    if provider is not None:
        # A provider given for the run replaces the scenario's, and the endpoint it may name.
        chosen = {"provider": provider, "endpoint": None}
        scenario = scenario.model_copy(update={"llm": scenario.llm.model_copy(update=chosen)})
    scrubber = Scrubber(secrets)
    events = EventLog(keep=keep_events, listener=on_event, scrubber=scrubber)
    stage = "loading"
    ctx: RunContext | None = None
    result: RunResult
    try:
        # The run uses the scenario as given; what it writes has URL credentials redacted, and
        # the manifest's hash is that of the scenario.json beside it (a hash of the real one
        # would let anyone holding the folder test guesses at a password).
        doc = recorded_scenario(scenario)
        write_atomic(out / "scenario.json", pretty_json(doc))
        assets = simulator_assets(scenario, root, resources)
        manifest = {
            "schemaVersion": SCHEMA_VERSION,
            "kernelVersion": KERNEL_VERSION,
            "simreportVersion": __version__,
            "kernelFingerprint": kernel_fingerprint(scenario.world),
            "scenarioSha256": sha256_bytes(canonical_json(doc).encode()),
            "assets": {name: sha256_bytes(path.read_bytes()) for name, path in assets.items()},
            "assetRoot": str(root) if root is not None else None,
            "world": scenario.world,
            "provider": scenario.llm.provider,
            "model": scenario.llm.model,
            "temperature": scenario.llm.temperature,
            "seed": scenario.seed,
            "seedPath": list(scenario.seed_path),
            "condition": condition,
            "replication": rep,
            "purpose": checks.purpose,
            # The operator's resources the run used, by the names they were declared under.
            **({"endpoint": scenario.llm.endpoint} if scenario.llm.endpoint else {}),
            **(
                {"simulator": scenario.simulator.name}
                if scenario.simulator is not None and scenario.simulator.name
                else {}
            ),
        }
        write_json(out / "manifest.json", manifest)
        if checks.purpose == "regression" and scenario.identity is None:
            raise RunError(
                "a regression run needs a reviewed scenario version, and this scenario has no "
                "`identity` (id and version); run it as exploration",
                stage="loading",
                kind="version_not_online",
            )
        events.emit("run_started", None, 0, {"condition": condition, "replication": rep})
        if scenario.simulator is not None:
            from .external import run_external

            stage = "running"
            result = run_external(
                scenario,
                out,
                condition=condition,
                replication=rep,
                root=root,
                resources=resources,
            )
        else:
            stage = "initializing"
            world_cls = WORLDS.get(scenario.world or "", path="world")
            params = world_cls.Params.model_validate(scenario.params)
            policy_cls = POLICIES.get(scenario.policy.name, path="policy.name")
            policy = policy_cls(
                policy_cls.Options.model_validate(scenario.policy.options), scenario.population.n
            )
            uses_llm = any(e.kind == "llm" for e in scenario.executors)
            # A world that answers every decision from elsewhere (a replay) gets no provider.
            wanted = uses_llm and world_cls.needs_provider(scenario)
            llm = make_provider(resolve_llm(scenario.llm, resources)) if wanted else None
            ctx = RunContext(
                scenario,
                params,
                provider=llm,
                policy=policy,
                events=events,
                asset_root=root,
                run_dir=out,
                checks=checks,
                resources=resources,
                secrets=tuple(secrets),
            )
            world: World = world_cls(ctx, params)
            stage = "running"
            try:
                outcome = world.run()
            finally:
                if llm is not None:
                    llm.close()
            check()  # a run the stop caught after its last call has not finished either
            stage = "collecting"
            result = _completed(scenario, ctx, condition, rep, outcome)
            if ctx.manifest_extra:
                # What the run resolved while loading (asset versions and hashes) joins the
                # manifest; labels never do.
                write_json(out / "manifest.json", {**manifest, **ctx.manifest_extra})
    except (Exception, KeyboardInterrupt) as exc:
        # KeyboardInterrupt reaches a run only in the process that was interrupted (in-process
        # runs); the run is recorded as interrupted and the interrupt goes on to the caller.
        result = _crashed(scenario, ctx, condition, rep, stage, exc)
        interrupted = isinstance(exc, KeyboardInterrupt)
    else:
        interrupted = False
    if result.failure is not None and scrubber.found(result.failure.message):
        failure = result.failure.model_copy(
            update={"message": scrubber.text(result.failure.message)}
        )
        result = result.model_copy(update={"failure": failure})
    result = result.model_copy(update={"purpose": checks.purpose})
    events.emit(
        "run_finished",
        None,
        ctx.step if ctx is not None else 0,
        {
            "execution": result.status.execution,
            "failure": result.failure is not None,
            # Real time per cost segment: not deterministic, so here, not in result.json.
            **({"wallClockMs": ctx.cost.wall_clock_ms()} if ctx is not None else {}),
        },
    )
    events.write(out / "events.jsonl")
    write_json(out / "result.json", result.to_doc())
    if interrupted:
        raise KeyboardInterrupt
    return result


def _counters(ctx: RunContext | None) -> dict[str, int]:
    if ctx is None:
        return {}
    return {k: int(v) for k, v in sorted(ctx.counters.items())}


def _cost(ctx: RunContext | None) -> Cost:
    """The run's cost by segment (kernel/run_cost.py), with the bytes of its events so far."""
    if ctx is None:
        return Cost()
    if ctx.events.keep:
        ctx.cost.record_bytes["events"] = ctx.events.content_bytes
    return ctx.cost.cost()


def _completed(
    scenario: Scenario,
    ctx: RunContext,
    condition: str,
    rep: int,
    outcome: WorldOutcome,
) -> RunResult:
    lost = ctx.lost_decisions
    # A lost decision is missing evidence whatever the world says: never "complete".
    evidence = "partial" if lost > 0 else (outcome.evidence or "complete")
    complete = lost == 0 and evidence == "complete"
    metrics, distributions = outcome.metrics, outcome.distributions
    return RunResult(
        condition=condition,
        replication=rep,
        seed_path=list(scenario.seed_path),
        status=RunStatus.model_validate(
            {
                "execution": "completed",
                "validity": outcome.validity or "unchecked",
                "evidence": evidence,
            }
        ),
        metrics={k: float(v) for k, v in metrics.items()},
        distributions={k: {c: int(n) for c, n in d.items()} for k, d in distributions.items()},
        integrity=Integrity(complete=complete, counters=_counters(ctx)),
        cost=_cost(ctx),
        failure=None,
    )


def _crashed(
    scenario: Scenario,
    ctx: RunContext | None,
    condition: str,
    rep: int,
    stage: str,
    exc: BaseException,
) -> RunResult:
    if isinstance(exc, KeyboardInterrupt) or stop_requested():
        # Whatever the world made of it (some wrap errors in their own), a run the stop ended is
        # an interrupted run.
        exc = Interrupted()
    if isinstance(exc, RunError):
        kind, message, stage = exc.kind, exc.message, exc.stage or stage
    elif isinstance(exc, InputError):
        kind, message = type(exc).__name__, exc.one_line()
    else:
        kind = type(exc).__name__
        tail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        message = tail
    return RunResult(
        condition=condition,
        replication=rep,
        seed_path=list(scenario.seed_path),
        # A world may say what its failure means for the statuses (the agent testbed: a budget
        # cancels, a failed initialisation violates, a loading failure leaves evidence unchecked).
        status=RunStatus.model_validate(
            {
                "execution": getattr(exc, "execution", None) or "crashed",
                "validity": getattr(exc, "validity", None) or "unchecked",
                "evidence": getattr(exc, "evidence", None) or "partial",
            }
        ),
        metrics={},
        distributions={},
        integrity=Integrity(complete=False, counters=_counters(ctx)),
        cost=_cost(ctx),
        failure=FailureInfo(stage=stage, type=kind, message=message),
    )


def read_result(run_dir: str | Path) -> RunResult:
    """Read a run directory's result.json."""
    from ..core.files import read_json

    return RunResult.model_validate(read_json(Path(run_dir) / "result.json"))


__all__ = [
    "KERNEL_VERSION",
    "LoadedScenario",
    "input_hashes",
    "kernel_fingerprint",
    "load_scenario",
    "read_result",
    "run_scenario",
    "scenario_outputs",
    "validate_scenario",
]
