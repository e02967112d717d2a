"""The verbs that run: one scenario (`run`), a plan's conditions (`conditions`), a whole audit
(`audit`) and the evaluation of its runs (`evaluate`); each checks what it was given before
anything runs, and a regression refuses versions that are not online (`refuse_unpublished`)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import InputError
from ..core.files import check_output_dir
from ..core.schema import RunResult, Scenario
from ..core.values import INT64_MAX, SEED_EXPECTED
from ..core.versions import DEFAULT_PURPOSE, PURPOSES, Purpose, RunChecks, version_key
from .pages import analyse_and_report
from .recording import finish_recording, ledger_recorder

if TYPE_CHECKING:
    from ..ledger.recording import LedgerRecorder


def run(
    scenario_path: str | Path,
    out: str | Path,
    *,
    seed: int | None = None,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    ledger: LedgerRecorder | str | bool = True,
    purpose: Purpose = DEFAULT_PURPOSE,
    policy: str | Path | None = None,
) -> RunResult:
    """Run one scenario file into `out`, as `simreport run` does. Input errors raise; run
    failures come back as data. The run, failed or not, is recorded in the ledger.

    Args:
        scenario_path: the scenario file.
        out: the run directory to write; refused before anything runs when it cannot be one.
        seed: replaces the scenario's seed (an integer from 0 to 2^63 - 1).
        provider: forces the run onto this registered provider.
        model: replaces `llm.model`.
        base_url: replaces `llm.baseUrl` (an http(s) URL with a host).
        ledger: where the run is recorded (see `ledger_recorder`): True for the default ledger,
            a URL, False for none, or the caller's LedgerRecorder.
        purpose: `exploration` (the default) or `regression`, which needs every version the run
            records online in the ledger; the run checks the ledger's pinned digests while
            loading either way.
        policy: an execution policy file whose model endpoints and simulators the scenario may
            name (`llm.endpoint`, `simulator.name`), as a run of the run service resolves them.

    Returns:
        The run's result (result.json); a failed run's has its `failure` filled in.

    Raises:
        InputError: the scenario, an override, the output folder, the policy or the purpose
            cannot be used, or a regression would record a version that is not online; all
            before the run starts.
        LedgerIncomplete: the files are complete, but the ledger did not record the run (when
            this call made the recorder).
    """
    from ..core.execution_policy import load_policy
    from ..core.redaction import redact_document
    from ..core.versions import design_sha256, recorded_version
    from ..harness.runner import check_llm_access
    from ..kernel import load_scenario, run_scenario

    check_output_dir(out)
    check_llm_access(provider, base_url, base_url_at="base_url")
    resources = load_policy(policy) if policy is not None else None
    recorder, owned = ledger_recorder(ledger, Path(out).parent)
    loaded = load_scenario(scenario_path)
    scenario: Scenario = loaded.scenario
    update = {k: v for k, v in (("model", model), ("base_url", base_url)) if v is not None}
    if update:
        scenario = scenario.model_copy(update={"llm": scenario.llm.model_copy(update=update)})
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= INT64_MAX:
            raise InputError(f"invalid seed {seed!r}", path="seed", expected=SEED_EXPECTED)
        scenario = scenario.model_copy(update={"seed": seed})
    _check_purpose(purpose)
    checks = recorder.run_checks(loaded.scenario, purpose=purpose, file=scenario_path)
    spec = design_sha256(redact_document(loaded.scenario.to_doc()))
    if scenario.identity is not None:
        own = design_sha256(redact_document(scenario.to_doc()))
        version, derived_from = recorded_version(scenario.identity.version, own, spec)
        checks = checks.model_copy(
            update={"spec_sha256": spec, "version": version, "derived_from": derived_from}
        )
        refuse_unpublished(checks, scenario.identity.id, [version], file=scenario_path)
    else:
        refuse_unpublished(checks, None, [], file=scenario_path)
    result = run_scenario(
        scenario,
        out,
        asset_root=loaded.asset_root,
        provider=provider,
        checks=checks,
        resources=resources,
    )
    recorder.record_runs([out])
    finish_recording(recorder, owned)
    return result


def conditions(
    plan_path: str | Path, *, replications: int | None = None, max_runs: int | None = None
) -> Any:
    """The plan's conditions, in order, without running anything (`simreport conditions`).

    Args:
        plan_path: the plan file.
        replications: replaces the plan's replications.
        max_runs: the most runs the plan may ask for, as in `audit`.

    Returns:
        The loaded plan (`harness.LoadedPlan`) and its conditions in order (`harness.Condition`).

    Raises:
        InputError: the plan cannot be read or does not validate, or asks for more than
            `max_runs` runs.
    """
    from ..harness import build_conditions, load_plan

    loaded = load_plan(plan_path, replications=replications, max_runs=max_runs)
    return loaded, build_conditions(loaded)


def audit(
    plan_path: str | Path,
    out: str | Path | None = None,
    *,
    replications: int | None = None,
    concurrency: int | None = None,
    provider: str | None = None,
    model: str | None = None,
    base_url: str | None = None,
    include_incomplete: bool | None = None,
    progress: Callable[[int, int], None] | None = None,
    analyse: bool = True,
    max_runs: int | None = None,
    notify: Callable[[str], None] | None = None,
    ledger: LedgerRecorder | str | bool = True,
    purpose: Purpose | None = None,
) -> Any:
    """Run every replication of every condition of a plan, then analyse and report, as
    `simreport audit` does. Every check happens before anything is written. Every run, then the
    analysis as a build, is recorded in the ledger. When the base scenario names an evaluation
    spec, the runs are evaluated after they all ran (the runs judge nothing themselves).

    Args:
        plan_path: the plan file.
        out: the audit directory (default: `results/<plan id>`).
        replications: replaces the plan's replications.
        concurrency: replaces the plan's concurrency; beyond the machine's worker limit it is
            capped and `notify` is told.
        provider: forces every run onto this registered provider.
        model: replaces every run's `llm.model` (refused for a plan that lists `models`).
        base_url: replaces every run's `llm.baseUrl`. The three overrides are recorded in
            plan.json, every manifest and the report.
        include_incomplete: whether incomplete runs enter the statistics (default: the plan's
            `includeIncomplete`).
        progress: called as `progress(done, total)`: once with 0 before the first run, then
            after each run.
        analyse: False stops after the runs (no audit.json, no pages, no build in the ledger).
        max_runs: the most runs the plan may ask for (default: the harness's DEFAULT_MAX_RUNS).
        notify: told when the concurrency is capped (default: a Python warning).
        ledger: where the runs and the build are recorded, as in `run` (see `ledger_recorder`).
        purpose: replaces the plan's `purpose` (default: the plan's, else exploration).

    Returns:
        The harness's AuditRun: the conditions, and one result per condition and replication
        in plan order.

    Raises:
        InputError: the plan, an override, the output folder or the purpose cannot be used, the
            plan asks for more than `max_runs` runs, or a regression audit would record a
            scenario version that is not online; all before any run.
        LedgerIncomplete: the files are complete, but the ledger did not record everything
            (when this call made the recorder).
        KeyboardInterrupt: a run was stopped from outside; an interrupted audit is not analysed.
    """
    from ..harness import build_conditions, load_plan, run_audit
    from ..harness.conditions import recorded_versions
    from ..harness.plan import bounded_workers
    from ..harness.runner import check_llm_access, run_dir, validate_llm_override

    if out is not None:
        check_output_dir(out)
    check_llm_access(provider, base_url, base_url_at="base_url")
    loaded = load_plan(
        plan_path, replications=replications, concurrency=concurrency, max_runs=max_runs
    )
    llm = validate_llm_override(loaded, {"model": model, "baseUrl": base_url})
    target = Path(out) if out is not None else Path("results") / loaded.plan_id
    check_output_dir(target)
    recorder, owned = ledger_recorder(ledger, target.parent)
    if purpose is not None:
        _check_purpose(purpose)
        loaded = replace(loaded, plan=loaded.plan.model_copy(update={"purpose": purpose}))
    checks = recorder.run_checks(
        loaded.base, purpose=loaded.plan.purpose, file=loaded.base_file or loaded.plan_file
    )
    versions = recorded_versions(loaded, build_conditions(loaded), llm)
    refuse_unpublished(
        checks,
        loaded.base.identity.id if loaded.base.identity is not None else None,
        [version for version, _ in versions.values() if version is not None],
        file=loaded.plan_file,
    )
    workers, note = bounded_workers(loaded.plan.concurrency)
    if note is not None:
        if notify is not None:
            notify(note)
        else:
            warnings.warn(note, stacklevel=2)
    result = run_audit(
        loaded,
        target,
        provider=provider,
        concurrency=workers,
        progress=progress,
        llm=llm,
        checks=checks,
    )
    # In this process, once every run's folder is complete (never inside the run workers).
    run_dirs = [run_dir(target, condition, r) for condition, r, _ in result.results]
    recorder.record_runs(run_dirs)
    if loaded.base.evaluation_ref is not None:
        # The runs judged nothing: evaluation is its own step, as in the workflow's rule.
        evaluate(target, ledger=recorder, runs=run_dirs)
    if analyse:
        analyse_and_report(target, include_incomplete)
        recorder.record_build(target)
    finish_recording(recorder, owned)
    return result


def evaluate(
    path: str | Path,
    *,
    evaluator: str | None = None,
    ledger: LedgerRecorder | str | bool = False,
    runs: Iterable[Path] | None = None,
) -> dict[str, Any]:
    """Evaluate an agent-testbed run directory (its evaluation.json) or every run of an audit
    directory (each run's evaluation.json, `evaluations/<condition dir>.json` and the audit's
    `evaluations.json`), as `simreport evaluate` does. Runs that never resolved an evaluation
    spec are listed, not refused.

    Args:
        path: a run directory or an audit directory.
        evaluator: `NAME@VERSION` (default: the built-in one); an unknown one is refused before
            anything is read.
        ledger: False (the default) records nothing; otherwise each evaluated run's
            `quality_ref` is set in the ledger it names (True: the default ledger, a URL, or the
            caller's LedgerRecorder). The runs must be recorded already.
        runs: the audit's run folders to link in the ledger (default: every run of the audit).

    Returns:
        The run's evaluation (evaluation.json's content), or the audit's summary.

    Raises:
        InputError: an unknown evaluator; a folder that is neither a run's nor an audit's; or
            runs of the audit that could not be evaluated (an altered manifest, an evaluation
            spec changed since the run), raised once every other run is evaluated.
        LedgerIncomplete: a run's evaluation could not be linked in the ledger (when this call
            made the recorder).
    """
    from ..evaluation import evaluate_audit, evaluate_run, evaluator_named, problems_of
    from ..evaluation.evaluator import audit_runs

    chosen = evaluator_named(evaluator)
    root = Path(path)
    recorder, owned = ledger_recorder(ledger, root.parent) if ledger is not False else (None, False)
    if (root / "plan.json").is_file() and (root / "conditions.json").is_file():
        summary = evaluate_audit(root, chosen)
        if recorder is not None:
            folders = runs or [run for _, _, batch in audit_runs(root) for run in batch]
            recorder.record_evaluations(folders)
            finish_recording(recorder, owned)
        problems = problems_of(summary)
        if problems:
            raise InputError(
                f"{len(problems)} run(s) of the audit could not be evaluated; the first: "
                + problems[0],
                file=root / "evaluations.json",
                expected="run folders as their runs wrote them",
            )
        return summary
    if not (root / "result.json").is_file() and not (root / "manifest.json").is_file():
        raise InputError(
            "neither a run directory nor an audit directory",
            file=root,
            expected="a run's folder (manifest.json, result.json) or an audit's (plan.json, "
            "conditions.json)",
        )
    doc = evaluate_run(root, chosen)
    if recorder is not None:
        recorder.record_evaluations([root])
        finish_recording(recorder, owned)
    return doc


def _check_purpose(purpose: str) -> None:
    if purpose not in PURPOSES:
        raise InputError(
            f"unknown purpose {purpose!r}", path="purpose", expected=" or ".join(PURPOSES)
        )


def refuse_unpublished(
    checks: RunChecks,
    scenario_id: str | None,
    versions: Iterable[str],
    *,
    file: str | Path | None,
) -> None:
    """Before any run of a regression: every scenario version the runs would record must be
    online in the ledger (asset versions are checked by each run while loading, once their labels
    are resolved). Anything but a regression passes.

    Args:
        checks: what the ledger holds for the runs (`LedgerRecorder.run_checks`).
        scenario_id: the scenario's `identity.id`; None for an unversioned scenario.
        versions: the scenario versions the runs would record.
        file: the file errors name.

    Raises:
        InputError: a regression of an unversioned scenario, or one that would record a version
            that is not online.
    """
    if checks.purpose != "regression":
        return
    if scenario_id is None:
        raise InputError(
            "a regression run needs a versioned scenario, and this one has no `identity`",
            file=file,
            path="purpose",
            expected="identity (id, version) in the scenario, or purpose exploration",
        )
    missing = []
    for version in dict.fromkeys(versions):
        held = checks.scenarios.get(version_key(scenario_id, version))
        status = held.status if held is not None else "not in the ledger"
        if status != "online":
            missing.append(f"{scenario_id}@{version} ({status})")
    if missing:
        raise InputError(
            "a regression run needs every scenario version it records online: "
            + ", ".join(missing)
            + "; a condition that changes the design records a derived version, which needs a "
            "review of its own",
            file=file,
            path="purpose",
            expected="online versions (`simreport review`), or purpose exploration",
        )
