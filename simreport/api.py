"""The Python API: the same verbs as the command line.

import simreport
simreport.validate("examples/prisoners_dilemma/audit.yaml")
simreport.audit("examples/prisoners_dilemma/audit.yaml", out="results/pd", replications=3)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .core.errors import InputError
from .core.files import load_document
from .core.schema import RunResult, Scenario


@dataclass
class Validated:
    kind: str  # "scenario" | "plan"
    summary: str
    details: dict[str, Any]


def is_plan_document(data: Any) -> bool:
    return isinstance(data, dict) and ("baseScenario" in data or "base" in data)


def validate(path: str | Path, *, max_runs: int | None = None) -> Validated:
    """Validate a scenario or a plan file (told apart by `baseScenario`/`base`); raise on error.
    A plan of more than `max_runs` runs (default: the harness's DEFAULT_MAX_RUNS) is refused."""
    from .harness import build_conditions, load_plan
    from .kernel import validate_scenario

    document = load_document(path)
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
) -> RunResult:
    """Run one scenario file into `out`. Input errors raise; run failures come back as data."""
    from .harness.runner import check_llm_access
    from .kernel import load_scenario, run_scenario

    check_output_dir(out)
    check_llm_access(provider, base_url, base_url_at="base_url")
    loaded = load_scenario(scenario_path)
    scenario: Scenario = loaded.scenario
    update = {k: v for k, v in (("model", model), ("base_url", base_url)) if v is not None}
    if update:
        scenario = scenario.model_copy(update={"llm": scenario.llm.model_copy(update=update)})
    if seed is not None:
        if seed < 0:
            raise InputError("seed must not be negative", expected="an integer ≥ 0")
        scenario = scenario.model_copy(update={"seed": seed})
    return run_scenario(scenario, out, asset_root=loaded.asset_root, provider=provider)


def conditions(
    plan_path: str | Path, *, replications: int | None = None, max_runs: int | None = None
) -> Any:
    """The plan's conditions, in order, without running anything (refused beyond `max_runs`
    runs, as in `audit`)."""
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
) -> Any:
    """Run every replication of every condition of a plan, then analyse and report. `provider`,
    `model` and `base_url` override every run's model access (recorded in plan.json, every
    manifest and the report). A plan of more than `max_runs` runs (default: the harness's
    DEFAULT_MAX_RUNS) is refused; a concurrency beyond the machine's worker limit is capped and
    `notify` (default: a Python warning) is told. Every check happens before anything is written.
    Returns the harness's AuditRun."""
    from .harness import load_plan, run_audit
    from .harness.plan import bounded_workers
    from .harness.runner import check_llm_access, validate_llm_override

    if out is not None:
        check_output_dir(out)
    check_llm_access(provider, base_url, base_url_at="base_url")
    loaded = load_plan(
        plan_path, replications=replications, concurrency=concurrency, max_runs=max_runs
    )
    llm = validate_llm_override(loaded, {"model": model, "baseUrl": base_url})
    target = Path(out) if out is not None else Path("results") / loaded.plan_id
    check_output_dir(target)
    workers, note = bounded_workers(loaded.plan.concurrency)
    if note is not None:
        if notify is not None:
            notify(note)
        else:
            warnings.warn(note, stacklevel=2)
    result = run_audit(
        loaded, target, provider=provider, concurrency=workers, progress=progress, llm=llm
    )
    if analyse:
        _analyse_if_available(target, include_incomplete)
    return result


def analyse(audit_dir: str | Path, *, include_incomplete: bool | None = None) -> dict[str, Any]:
    """Compute audit.json and runs.parquet from an audit directory's runs."""
    from .analysis.audit import analyse_dir

    return analyse_dir(Path(audit_dir), include_incomplete=include_incomplete)


def report(audit_dir: str | Path) -> Path:
    """Render report.html (and the figures) and the methods pages from audit.json alone."""
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
    """Build a static site (index + one folder per audit) from finished audit directories."""
    from .core.files import read_json
    from .report import write_site

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
        plan_id = str(read_json(root / "audit.json")["plan"]["id"])
        entries.append((plan_id, root))
    return write_site(Path(out), entries, title=title)


def serve(site_dir: str | Path, *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve a built site over HTTP until interrupted."""
    from .report import serve as serve_site

    root = Path(site_dir)
    if not (root / "index.html").is_file():
        raise InputError(
            "no index.html here",
            file=root / "index.html",
            expected="a site built by `snakemake` or `simreport site`",
        )
    serve_site(root, host=host, port=port)


def check_output_dir(out: str | Path, *, name: str = "out") -> None:
    """Refuse an output folder that cannot be one, before anything is written: an empty path
    (which would mean the current folder), an existing file, or a path under a file. `name` is
    how the caller spells the setting."""
    if str(out).strip() == "":
        raise InputError(
            "the output folder is empty", path=name, expected="a folder path, e.g. results/x"
        )
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InputError("is a file, not a folder", file=path, expected=f"a folder path for {name}")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(
            f"{parent} is a file, so no folder can be made under it",
            file=path,
            expected=f"a folder path for {name}",
        )


def _analyse_if_available(audit_dir: Path, include_incomplete: bool | None) -> None:
    analyse(audit_dir, include_incomplete=include_incomplete)
    report(audit_dir)
