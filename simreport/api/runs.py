"""The Python API: the same verbs as the command line.

import simreport
simreport.validate("examples/prisoners_dilemma/audit.yaml")
simreport.audit("examples/prisoners_dilemma/audit.yaml", out="results/pd", replications=3)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core.errors import InputError
from .core.files import check_output_dir, load_document
from .core.schema import RunResult, Scenario
from .core.values import INT64_MAX, SEED_EXPECTED
from .core.versions import DEFAULT_PURPOSE, PURPOSES, Purpose, RunChecks, version_key

if TYPE_CHECKING:
    from .ledger.recording import LedgerRecorder


@dataclass
class Validated:
    kind: str  # "scenario" | "plan" | "workflow config"
    summary: str
    details: dict[str, Any]


PLAN_ONLY_KEYS = frozenset(
    {
        "axes",
        "design",
        "replications",
        "models",
        "metrics",
        "claimType",
        "concurrency",
        "includeIncomplete",
    }
)
"""Keys only an audit plan has: a document with one of them and no `world` or `simulator` is a
plan, even when it lacks its base scenario."""


def is_plan_document(data: Any) -> bool:
    """Whether a document is an audit plan: it names a base scenario (`baseScenario`, `base`),
    or it has a key only plans have and names no world or simulator."""
    if not isinstance(data, dict):
        return False
    if "baseScenario" in data or "base" in data:
        return True
    engine = "world" in data or "simulator" in data
    return not engine and any(key in data for key in PLAN_ONLY_KEYS)


def is_workflow_config(data: Any) -> bool:
    """Whether a document is a workflow config: it lists `plans` and names no base scenario,
    world or simulator."""
    if not isinstance(data, dict) or "plans" not in data:
        return False
    return not any(key in data for key in ("baseScenario", "base", "world", "simulator"))


def validate(path: str | Path, *, max_runs: int | None = None) -> Validated:
    """Validate a scenario, a plan or a workflow config file, as `simreport validate` does.

    The document says which it is (`is_plan_document`, `is_workflow_config`): a plan without a
    base scenario is reported as such, not as a scenario without a world. A workflow config is
    checked as a build checks it, in the current folder (the workflow's: see
    `workflow.validate_config`); its own `maxRuns` applies to its plans.

    Args:
        path: the scenario, plan or workflow config file (YAML or JSON).
        max_runs: the most runs a plan may ask for (default: the harness's DEFAULT_MAX_RUNS).

    Returns:
        What was validated: its kind, a one-line summary and its details (a plan's id,
        conditions, runs and hashes; a scenario's world and agents; a config's plans,
        conditions and runs).

    Raises:
        InputError: the file cannot be read or does not validate (SchemaError, PlanError and the
            other InputErrors, each located in the file), or a plan asks for too many runs.
    """
    from .harness import build_conditions, load_plan
    from .kernel import validate_scenario

    document = load_document(path)
    if is_workflow_config(document.data):
        from .workflow import validate_config

        workflow = validate_config(document)
        planned = sum(len(plan.conditions) for plan in workflow.plans)
        runs = sum(len(plan.results) for plan in workflow.plans)
        return Validated(
            "workflow config",
            f"workflow config: {len(workflow.plans)} plans, {planned} conditions, {runs} runs",
            {"plans": [plan.id for plan in workflow.plans], "conditions": planned, "runs": runs},
        )
    if is_plan_document(document.data):
        loaded = load_plan(path, max_runs=max_runs)
        conditions = build_conditions(loaded)
        runs = len(conditions) * loaded.plan.replications
        return Validated(
            "plan",
            f"plan {loaded.plan_id}: {len(conditions)} conditions × "
            f"{loaded.plan.replications} replications = {runs} runs",
            {
                "planId": loaded.plan_id,
                "conditions": len(conditions),
                "runs": runs,
                "hash": loaded.hash,
                "identityHash": loaded.identity_hash,
            },
        )
    scenario = validate_scenario(document.data, document=document)
    engine = scenario.world or "external simulator"
    return Validated(
        "scenario",
        f"scenario: {engine}, {scenario.population.n} agents, {scenario.steps} steps",
        {"world": scenario.world, "agents": scenario.population.n},
    )


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
        ledger: where the run is recorded (see `_recorder`): True for the default ledger, a URL,
            False for none, or the caller's LedgerRecorder.
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
    from .core.execution_policy import load_policy
    from .core.redaction import redact_document
    from .core.versions import design_sha256, recorded_version
    from .harness.runner import check_llm_access
    from .kernel import load_scenario, run_scenario

    check_output_dir(out)
    check_llm_access(provider, base_url, base_url_at="base_url")
    resources = load_policy(policy) if policy is not None else None
    recorder, owned = _recorder(ledger, Path(out).parent)
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
    _finish(recorder, owned)
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
    from .harness import build_conditions, load_plan

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
        ledger: where the runs and the build are recorded, as in `run` (see `_recorder`).
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
    from .harness import build_conditions, load_plan, run_audit
    from .harness.conditions import recorded_versions
    from .harness.plan import bounded_workers
    from .harness.runner import check_llm_access, run_dir, validate_llm_override

    if out is not None:
        check_output_dir(out)
    check_llm_access(provider, base_url, base_url_at="base_url")
    loaded = load_plan(
        plan_path, replications=replications, concurrency=concurrency, max_runs=max_runs
    )
    llm = validate_llm_override(loaded, {"model": model, "baseUrl": base_url})
    target = Path(out) if out is not None else Path("results") / loaded.plan_id
    check_output_dir(target)
    recorder, owned = _recorder(ledger, target.parent)
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
        _analyse_if_available(target, include_incomplete)
        recorder.record_build(target)
    _finish(recorder, owned)
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
    from .evaluation import evaluate_audit, evaluate_run, evaluator_named, problems_of
    from .evaluation.evaluator import audit_runs

    chosen = evaluator_named(evaluator)
    root = Path(path)
    recorder, owned = _recorder(ledger, root.parent) if ledger is not False else (None, False)
    if (root / "plan.json").is_file() and (root / "conditions.json").is_file():
        summary = evaluate_audit(root, chosen)
        if recorder is not None:
            folders = runs or [run for _, _, batch in audit_runs(root) for run in batch]
            recorder.record_evaluations(folders)
            _finish(recorder, owned)
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
        _finish(recorder, owned)
    return doc


RENDERED_PAGES = ("report.html", "methods.md", "methods.html", "figures")
"""What `report` renders from audit.json: re-rendered whenever `analyse` rewrites it."""


def analyse(
    audit_dir: str | Path,
    *,
    include_incomplete: bool | None = None,
    ledger: LedgerRecorder | str | bool = True,
) -> dict[str, Any]:
    """Compute audit.json and runs.parquet from an audit directory's runs, as `simreport
    analyse` does. Pages already in the directory (report, methods, figures) are re-rendered
    from the new audit.json, so none is left describing the old one; a directory without pages
    gets none. The analysis is recorded in the ledger as a build, with its runs.

    Args:
        audit_dir: the audit directory (plan.json, conditions.json and the runs).
        include_incomplete: whether incomplete runs enter the statistics (default: the plan's
            `includeIncomplete`).
        ledger: where the build is recorded, as in `run` (see `_recorder`).

    Returns:
        The audit: audit.json's content.

    Raises:
        InputError: not an audit directory (plan.json and conditions.json).
        LedgerIncomplete: the files are complete, but the ledger did not record the build (when
            this call made the recorder).
    """
    from .analysis.audit import analyse_dir

    root = Path(audit_dir)
    recorder, owned = _recorder(ledger, root.parent)
    had_pages = any((root / name).exists() for name in RENDERED_PAGES)
    audit = analyse_dir(root, include_incomplete=include_incomplete)
    if had_pages:
        report(root)
    recorder.record_build(root)
    _finish(recorder, owned)
    return audit


def _recorder(
    ledger: LedgerRecorder | str | bool, results_dir: Path
) -> tuple[LedgerRecorder, bool]:
    """Where `run`, `audit` and `analyse` record what they wrote: `ledger` True (the default) is
    the ledger $SIMREPORT_LEDGER_URL names, else `ledger.sqlite` in `results_dir`, the folder
    that holds the output; a string is a URL; False records nothing; a LedgerRecorder is the
    caller's (it reads its `problems`). Returns the recorder and whether this call owns it (then
    it closes it, and raises LedgerIncomplete when something was not recorded). A URL that
    cannot be one is refused here, before anything runs."""
    from .ledger.recording import LedgerRecorder

    if isinstance(ledger, LedgerRecorder):
        return ledger, False
    if isinstance(ledger, str):
        return LedgerRecorder.resolve(ledger, results_dir=results_dir), True
    return LedgerRecorder.resolve(results_dir=results_dir, enabled=bool(ledger)), True


def _finish(recorder: LedgerRecorder, owned: bool) -> None:
    if owned:
        recorder.close()
        recorder.raise_if_incomplete()


def report(audit_dir: str | Path) -> Path:
    """Render report.html (and the figures) and the methods pages from audit.json, as
    `simreport report` does. report.html's section of changes also reads the build kept in
    `history/`.

    Args:
        audit_dir: an analysed audit directory.

    Returns:
        The path of report.html.

    Raises:
        InputError: the directory has no audit.json, or one of an older schema or that breaks
            its contract.
    """
    from .report import write_methods, write_report

    root = Path(audit_dir)
    if not (root / "audit.json").is_file():
        raise InputError(
            "no audit.json here", file=root / "audit.json", expected="run `simreport analyse` first"
        )
    path = write_report(root)
    write_methods(root)
    return path


def site(audit_dirs: list[str | Path], out: str | Path, *, title: str = "simreport audits") -> Path:
    """Build a static site (an index and one folder per audit) from finished audit directories,
    as `simreport site` does.

    Args:
        audit_dirs: the audit directories, in the order the index lists them.
        out: the site's folder; refused before anything is written when it cannot be one.
        title: the index page's title.

    Returns:
        The path of the site's index.html.

    Raises:
        InputError: an audit directory without audit.json, or one whose pages are missing or
            out of date with it, or two audits of one plan id; all before anything is written.
    """
    from .report import write_site
    from .report.document import read_audit_document

    check_output_dir(out)
    entries = []
    for audit_dir in audit_dirs:
        root = Path(audit_dir)
        if not (root / "audit.json").is_file():
            raise InputError(
                "no audit.json here",
                file=root / "audit.json",
                expected="an audit directory built by `simreport audit`",
            )
        plan_id = read_audit_document(root / "audit.json").plan.id or ""
        entries.append((plan_id, root))
    return write_site(Path(out), entries, title=title)


def serve(site_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve a built site over HTTP until interrupted, as `simreport serve` does.

    Args:
        site_dir: a site built by `snakemake` or `site`.
        host: the address to bind (default: localhost only).
        port: the port to listen on.

    Raises:
        InputError: the folder has no index.html.
    """
    from .report import serve as serve_site

    root = Path(site_dir)
    if not (root / "index.html").is_file():
        raise InputError(
            "no index.html here",
            file=root / "index.html",
            expected="a site built by `snakemake` or `simreport site`",
        )
    serve_site(root, host=host, port=port)


def _analyse_if_available(audit_dir: Path, include_incomplete: bool | None) -> None:
    from .analysis.audit import analyse_dir

    analyse_dir(audit_dir, include_incomplete=include_incomplete)
    report(audit_dir)


def _sizing_levels(power: float, alpha: float, effect: float | None) -> None:
    """Refuse a power, α or effect size no sizing can use, naming the setting."""
    import math

    if not 0.0 < alpha < 1.0:
        raise InputError(f"alpha is {alpha}", path="alpha", expected="a number between 0 and 1")
    if not alpha < power < 1.0:
        raise InputError(
            f"power is {power}", path="power", expected=f"a number between alpha ({alpha}) and 1"
        )
    if effect is not None and not (math.isfinite(effect) and effect > 0):
        raise InputError(f"effect is {effect}", path="effect", expected="a positive finite |d|")


def power(
    plan_path: str | Path,
    *,
    pilot: str | Path,
    effect: float | None = None,
    power: float = 0.8,
    alpha: float = 0.05,
    design: str = "auto",
    correlation: float = 0.0,
    max_runs: int | None = None,
) -> dict[str, Any]:
    """Replications per condition the plan needs for the rank test the audit will run to
    detect, with `power` at α/m, each effect a pilot audit saw, or `effect` (a pooled |d|) for
    every comparison; and the smallest effect the plan's own replications detect. As
    `simreport power` does.

    m is the decision family: the plan's tested conditions times its metrics (the conservative
    end of Holm over all of them). A plan pairs base and condition replications by their shared
    seeds unless an axis varies the seed.

    Args:
        plan_path: the plan file.
        pilot: an analysed audit directory of this plan; only its replications may differ (then
            `warnings` says so).
        effect: a pooled |d| to size every comparison for (default: each effect the pilot saw).
        power: the power to reach, between `alpha` and 1.
        alpha: the family-wise α, between 0 and 1.
        design: "paired", "unpaired" or "auto" (paired unless an axis varies the seed).
        correlation: the pairing correlation ρ in [-1, 1): paired sizing converts a pooled |d|
            to δ = |d| / sqrt(2 (1 - ρ)), in SDs of the differences.
        max_runs: the most runs the plan may ask for, as in `audit`.

    Returns:
        The plan, the pilot, the family and its α per comparison, the test, one row per metric
        and the recommendation, and the smallest detectable effect at the planned replications
        (`atPlannedReplications`).

    Raises:
        InputError: a power, α, effect, design or correlation no sizing can use; a plan that
            does not load; a pilot that is not an audit, or ran something other than this plan
            (naming what differs).
    """
    from .analysis import pilot as pilots
    from .analysis import power as sizing
    from .analysis.rank_power import test_kind
    from .harness import build_conditions, load_plan

    _sizing_levels(power, alpha, effect)
    if design not in ("auto", "paired", "unpaired"):
        raise InputError(f"design is {design}", path="design", expected="auto, paired or unpaired")
    if not -1.0 <= correlation < 1.0:
        raise InputError(
            f"correlation is {correlation}", path="correlation", expected="a number in [-1, 1)"
        )
    loaded = load_plan(plan_path, max_runs=max_runs)
    ran = pilots.read_pilot(pilot)
    warning = pilots.check_pilot(
        plan_path, loaded.hash, loaded.plan.replications, ran, max_runs=max_runs
    )
    tested = [c for c in build_conditions(loaded) if not c.is_base and not c.identical_to_base]
    seed_axes = [a.id for a in loaded.plan.axes if sizing.varies_seed(a.target)]
    paired = design == "paired" or (design == "auto" and not seed_axes)
    metrics = list(ran.tests)
    m = max(len(tested) * max(len(metrics), 1), 1)
    seed = sizing.simulation_seed(loaded.hash)
    rows = sizing.recommend_replications(
        ran.tests,
        effect=effect,
        power=power,
        alpha=alpha,
        m=m,
        paired=paired,
        correlation=correlation,
        seed=seed,
    )
    planned = loaded.plan.replications
    at_plan_mde, at_plan_note = (
        sizing.detectable_effect(planned, planned, alpha / m, power, paired=paired, seed=seed)
        if tested
        else (None, "no conditions besides the base: nothing to test")
    )
    return {
        "plan": {"id": loaded.plan_id, "hash": loaded.hash, "replications": planned},
        "pilot": {
            "dir": str(pilot),
            "hash": ran.plan_hash,
            "replications": ran.replications,
            "runs": ran.cost.runs,
        },
        "power": power,
        "alpha": alpha,
        "paired": paired,
        "design": design,
        "seedAxes": seed_axes,
        "correlation": correlation if paired else None,
        "test": test_kind(paired),
        "comparisons": len(tested),
        "familyMetrics": metrics,
        "familySize": m,
        "alphaPerComparison": alpha / m,
        "effect": effect,
        "warnings": [warning] if warning else [],
        "metrics": rows,
        "recommendation": sizing.plan_recommendation(rows),
        "atPlannedReplications": {
            "replications": planned,
            "alpha": alpha / m,
            "mde": at_plan_mde,
            "paired": paired,
            "note": at_plan_note,
        },
    }


def estimate(
    plan_path: str | Path,
    *,
    pilot: str | Path | None = None,
    replications: int | None = None,
    max_runs: int | None = None,
    cache_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Runs, LLM calls and tokens the plan will take, before running it, as `simreport
    estimate` does: per-run averages of a pilot audit of the same plan times the planned runs,
    or without a pilot the tokens per call the response cache recorded for the plan's models.

    Args:
        plan_path: the plan file.
        pilot: an analysed audit directory of this plan (optional).
        replications: replaces the plan's replications.
        max_runs: the most runs the plan may ask for, as in `audit`.
        cache_dir: the response cache to read (default: the environment's).

    Returns:
        The estimate: `basis` says what it rests on ("pilot", "cache" or "none") and `notes`
        how, with the plan's conditions, replications, models and any `warnings`.

    Raises:
        InputError: a plan that does not load, or a pilot that is not an audit of this plan.
    """
    from .analysis import pilot as pilots
    from .harness import build_conditions, load_plan
    from .kernel.providers import CACHED
    from .kernel.providers.cache import ResponseCache

    loaded = load_plan(plan_path, replications=replications, max_runs=max_runs)
    conds = build_conditions(loaded)
    reps = loaded.plan.replications
    provider = loaded.base.llm.provider
    models = sorted({c.scenario.llm.model for c in conds})
    warnings_: list[str] = []
    pilot_cost = None
    if pilot is not None:
        ran = pilots.read_pilot(pilot)
        warning = pilots.check_pilot(plan_path, loaded.hash, reps, ran, max_runs=max_runs)
        if warning:
            warnings_.append(warning)
        pilot_cost = ran.cost
    rates = None
    if provider in CACHED and (pilot_cost is None or pilot_cost.llm_calls == 0):
        cache = ResponseCache(cache_dir)
        rates = pilots.cache_token_rates(cache.recorded_usage(), provider, models)
    result = pilots.estimate_cost(
        runs=len(conds) * reps, provider=provider, pilot=pilot_cost, rates=rates
    )
    return {
        **result,
        "conditions": len(conds),
        "replications": reps,
        "models": models,
        "pilot": str(pilot) if pilot is not None else None,
        "warnings": warnings_,
    }


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
