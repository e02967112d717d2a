"""The audit's commands: validate, schema, run, conditions, power, audit, analyse, evaluate, report,
site, diff and serve; and `worlds`, the catalogue of what each world takes and reports.

Thin: each parses its arguments, calls simreport.api (or the module that does the job), prints a
summary and returns its exit code; failed runs inside an audit are data, not errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import EXIT_OK, EXIT_RUN_FAILED
from ..core.schema import WorldParams, set_world_params_source
from .arguments import correlation, count, effect_size, int64, positive_int, probability
from .output import note, print_json, table_lines, warning

MAX_RUNS_HELP = "allow a plan of up to N runs (conditions × replications; raises the default limit)"


def _check_options(args: argparse.Namespace) -> None:
    """Refuse an output folder that cannot be one and provider or base URL overrides that every
    run would fail on, naming the option, before anything is written."""
    from ..core.files import check_output_dir
    from ..harness.runner import check_llm_access

    if getattr(args, "out", None) is not None:
        check_output_dir(args.out, name="--out")
    check_llm_access(
        getattr(args, "provider", None),
        getattr(args, "base_url", None),
        provider_at="--provider",
        base_url_at="--base-url",
    )


def _ledger_options(p: argparse.ArgumentParser) -> None:
    """`--ledger URL` and `--no-ledger`, on every command that writes runs or builds."""
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="record in this ledger: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB "
        "(default: $SIMREPORT_LEDGER_URL, else ledger.sqlite in the folder holding the output)",
    )
    p.add_argument("--no-ledger", action="store_true", help="record nothing in a ledger")


def _recorder(args: argparse.Namespace, results_dir: str | Path) -> Any:
    """The command's LedgerRecorder; a URL that cannot be one is refused before anything runs."""
    from ..ledger.recording import LedgerRecorder

    if args.no_ledger and args.ledger:
        from ..core.errors import InputError

        raise InputError("--ledger and --no-ledger contradict each other", path="--no-ledger")
    return LedgerRecorder.resolve(args.ledger, results_dir=results_dir, enabled=not args.no_ledger)


def _ledger_exit(recorder: Any, code: int) -> int:
    """`code`, or EXIT_LEDGER when the ledger did not record everything (a failed run's own
    exit code wins)."""
    from ..ledger.recording import EXIT_LEDGER

    recorder.close()
    if recorder.complete:
        return code
    print(f"simreport: {recorder.summary()}", file=sys.stderr)
    return code if code != EXIT_OK else EXIT_LEDGER


def _progress_bar() -> Callable[[int, int], None] | None:
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = int(width * done / total) if total else width
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} runs")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def cmd_validate(args: argparse.Namespace) -> int:
    from ..api import validate

    for path in args.files:
        result = validate(path, max_runs=args.max_runs)
        print(f"ok  {path}: {result.summary}")
    return EXIT_OK


def document_schema(which: str) -> dict[str, Any]:
    """The JSON Schema of a document kind: scenario, plan, result or audit."""
    from ..analysis.audit_document import audit_json_schema
    from ..core.schema import RunResult, Scenario
    from ..harness.plan import plan_json_schema

    schemas: dict[str, Callable[[], dict[str, Any]]] = {
        "scenario": lambda: Scenario.model_json_schema(by_alias=True),
        "plan": plan_json_schema,
        "result": lambda: RunResult.model_json_schema(by_alias=True),
        "audit": audit_json_schema,
    }
    return schemas[which]()


def cmd_schema(args: argparse.Namespace) -> int:
    if args.format == "markdown":
        from .reference import document_markdown

        sys.stdout.write(document_markdown(args.which))
    else:
        print_json(document_schema(args.which), ensure_ascii=True)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from ..api import run

    _check_options(args)
    recorder = _recorder(args, Path(args.out).parent)
    result = run(
        args.scenario,
        args.out,
        seed=args.seed,
        provider=args.provider,
        model=args.model,
        base_url=args.base_url,
        ledger=recorder,
        purpose=args.purpose,
        policy=args.policy,
    )
    if result.failure is not None:
        failure = result.failure
        print(f"run failed in {failure.stage}: {failure.type}: {failure.message}", file=sys.stderr)
        print(f"result: {args.out}/result.json")
        return _ledger_exit(recorder, EXIT_OK if args.allow_failure else EXIT_RUN_FAILED)
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in sorted(result.metrics.items()))
    print(f"completed: {metrics}")
    print(f"result: {args.out}/result.json")
    return _ledger_exit(recorder, EXIT_OK)


def cmd_conditions(args: argparse.Namespace) -> int:
    from ..api import conditions

    if args.estimate or args.pilot is not None:
        return _print_estimate(args)
    loaded, conds = conditions(args.plan, replications=args.replications, max_runs=args.max_runs)
    reps = loaded.plan.replications
    if args.json:
        rows = [
            {
                "id": c.id,
                "label": c.label,
                "dir": c.dir,
                "model": c.model,
                "identicalToBase": c.identical_to_base,
                "replications": reps,
            }
            for c in conds
        ]
        print_json(rows, sort_keys=False, ensure_ascii=True)
        return EXIT_OK
    width = max(len(c.id) for c in conds)
    for c in conds:
        flag = "  identicalToBase" if c.identical_to_base else ""
        print(f"{c.id:<{width}}  {c.dir}{flag}")
    print(f"{len(conds)} conditions × {reps} replications = {len(conds) * reps} runs")
    return EXIT_OK


def _count(value: float | None) -> str:
    return "unknown" if value is None else f"{round(value):,}"


def _print_estimate(args: argparse.Namespace) -> int:
    """`conditions --estimate`: runs, LLM calls and tokens before running."""
    from ..api import estimate
    from ..core.errors import InputError

    if not args.estimate:
        raise InputError("--pilot goes with --estimate", path="--pilot", expected="--estimate")
    result = estimate(
        args.plan, pilot=args.pilot, replications=args.replications, max_runs=args.max_runs
    )
    for text in result["warnings"]:
        warning(text)
    if args.json:
        print_json(result, ensure_ascii=True)
        return EXIT_OK
    print(
        f"{result['conditions']} conditions × {result['replications']} replications = "
        f"{result['runs']} runs (provider {result['provider']}, "
        f"model{'s' if len(result['models']) > 1 else ''} {', '.join(result['models'])})"
    )
    per_run, per_call = result["perRun"], result["perCall"]
    if result["basis"] == "pilot":
        tokens = (
            f", {_count(per_run.get('promptTokens'))} prompt and "
            f"{_count(per_run.get('completionTokens'))} completion tokens"
            if per_call is not None
            else ""
        )
        print(
            f"basis: the pilot {result['pilot']}: {per_run['llmCalls']:.4g} LLM calls{tokens} "
            "per run"
        )
    elif result["basis"] == "cache":
        print(
            f"basis: the response cache: {per_call['promptTokens']:.4g} prompt and "
            f"{per_call['completionTokens']:.4g} completion tokens per call"
        )
    else:
        print("basis: none")
    total = result["total"]
    print(f"LLM calls          {_count(total['llmCalls'])}")
    print(f"prompt tokens      {_count(total['promptTokens'])}")
    print(f"completion tokens  {_count(total['completionTokens'])}")
    for text in result["notes"]:
        print(f"note: {text}")
    return EXIT_OK


def cmd_power(args: argparse.Namespace) -> int:
    from ..api import power

    result = power(
        args.plan,
        pilot=args.pilot,
        effect=args.effect,
        power=args.power,
        alpha=args.alpha,
        design=args.design,
        correlation=args.correlation,
    )
    for text in result["warnings"]:
        warning(text)
    if args.json:
        print_json(result, ensure_ascii=True)
        return EXIT_OK
    header = ("metric", "condition", "pilot n base/cond", "pilot |d|", "replications", "power")
    table = [
        (
            metric,
            row["condition"],
            f"{row['nBase']}/{row['nCond']}",
            "-" if row["pilotD"] is None else f"{abs(row['pilotD']):.3g}",
            "-" if row["replications"] is None else f"{row['replications']:,}",
            "-" if row["power"] is None else f"{row['power']:.3f}",
            row["note"],
        )
        for metric, rows in result["metrics"].items()
        for row in rows
    ]
    lines = table_lines(header, [cells for *cells, _ in table])
    indent = max(len(r[0]) for r in [header, *table])
    print(lines[0])
    for line, (*_, row_note) in zip(lines[1:], table, strict=True):
        print(line)
        if row_note:
            print(f"{'':{indent}}  note: {row_note}")
    level = f"power {result['power']:g} at α = {result['alpha']:g}/{result['familySize']}"
    planned = result["plan"]["replications"]
    if result["paired"]:
        design = (
            f"test: the paired {result['test']} (replications share seeds); a pooled |d| is "
            f"sized as δ = |d| / sqrt(2 (1 - ρ)) in SDs of the differences, ρ = "
            f"{result['correlation']:g}"
        )
    else:
        why = (
            f" (the axes {', '.join(result['seedAxes'])} vary the seed)"
            if result["seedAxes"]
            else ""
        )
        design = f"test: the unpaired {result['test']}{why}"
    print(
        f"{design}; family: {result['comparisons']} conditions × {len(result['familyMetrics'])} "
        "metrics, Holm"
    )
    best = result["recommendation"]
    if best is None:
        print("plan: no row gives a number of replications; --effect d sizes it for an effect")
    elif result["effect"] is not None:
        print(
            f"plan: {best['replications']:,} replications per condition detect |d| "
            f"{result['effect']:g} with {level}; the plan has {planned}"
        )
    else:
        print(
            f"plan: {best['replications']:,} replications per condition detect every effect the "
            f"pilot saw with {level} (driven by {best['metric']}, {best['condition']}, |d| "
            f"{best['effect']:.3g}); the plan has {planned}"
        )
        if best["replications"] > 10 * max(planned, result["pilot"]["replications"]):
            print(
                "the smallest effects the pilot saw drive this number, and a pilot's |d| is "
                "noisy: --effect d sizes the plan for the smallest effect that matters"
            )
    at_plan = result["atPlannedReplications"]
    if at_plan["mde"] is not None:
        unit = "δ" if result["paired"] else "|d|"
        print(
            f"at the plan's {planned} replications the smallest detectable {unit} is "
            f"{at_plan['mde']:.3g} ({level})"
        )
    elif at_plan["note"]:
        print(f"at the plan's {planned} replications: {at_plan['note']}")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from ..api import audit

    _check_options(args)
    include = True if args.include_incomplete else None
    # The default audit directory is results/<plan-id>: its ledger is results/ledger.sqlite.
    recorder = _recorder(args, Path(args.out).parent if args.out else Path("results"))
    run = audit(
        args.plan,
        args.out,
        replications=args.replications,
        concurrency=args.concurrency,
        provider=args.provider,
        model=args.model,
        base_url=args.base_url,
        include_incomplete=include,
        progress=_progress_bar(),
        max_runs=args.max_runs,
        notify=note,
        ledger=recorder,
        purpose=args.purpose,
    )
    results = [r for _, _, r in run.results]
    failed = sum(1 for r in results if r.failure is not None)
    incomplete = sum(1 for r in results if r.failure is None and not r.integrity.complete)
    print(
        f"{len(results)} runs in {run.out_dir}: {len(results) - failed} completed, "
        f"{failed} failed, {incomplete} incomplete"
    )
    return _ledger_exit(recorder, EXIT_OK)


def cmd_analyse(args: argparse.Namespace) -> int:
    from ..api import analyse

    recorder = _recorder(args, Path(args.audit_dir).parent)
    audit = analyse(
        args.audit_dir,
        include_incomplete=True if args.include_incomplete else None,
        ledger=recorder,
    )
    summary = audit["summary"]
    print(
        f"audit.json: grade {audit['grade']['grade']}, {summary['runs']} runs "
        f"({summary['used']} used, {summary['excluded']} excluded)"
    )
    report = Path(args.audit_dir) / "report.html"
    if report.is_file():
        print(f"report: {report} (re-rendered with the methods pages and figures)")
    return _ledger_exit(recorder, EXIT_OK)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from ..api import evaluate
    from ..evaluation import SUMMARY_FILE
    from ..ledger.recording import LedgerRecorder

    recorder = LedgerRecorder.resolve(args.ledger, results_dir=".") if args.ledger else None
    target = Path(args.path)
    try:
        doc = evaluate(
            target, evaluator=args.evaluator, ledger=recorder if recorder is not None else False
        )
    finally:
        if recorder is not None:
            recorder.close()
    if "conditions" in doc:
        verdicts = doc["verdicts"]
        counts = ", ".join(
            f"{key} {c['pass']} pass / {c['fail']} fail / {c['undecidable']} undecidable"
            for key, c in verdicts.items()
        )
        print(
            f"{doc['evaluated']} of {doc['runs']} runs evaluated ({doc['notEvaluable']} with "
            f"nothing to evaluate): {target / SUMMARY_FILE}" + (f"\n  {counts}" if counts else "")
        )
    else:
        evaluator = doc["evaluator"]
        verdicts = ", ".join(f"{k} {v['verdict']}" for k, v in doc["criteria"].items())
        print(
            f"{evaluator['name']}@{evaluator['version']}: {verdicts}\n"
            f"evaluation: {target / 'evaluation.json'} ({doc['qualityRef']})"
        )
    return EXIT_OK if recorder is None else _ledger_exit(recorder, EXIT_OK)


def cmd_report(args: argparse.Namespace) -> int:
    from ..api import report

    path = report(args.audit_dir)
    print(f"report: {path}")
    return EXIT_OK


def cmd_site(args: argparse.Namespace) -> int:
    from ..api import site

    _check_options(args)
    index = site(args.audit_dirs, args.out, title=args.title)
    print(f"site: {index}")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from ..core.canonical import pretty_json
    from ..report.history import diff_audits, diff_lines, load_audit

    diff = diff_audits(load_audit(args.audit_a), load_audit(args.audit_b))
    if args.json:
        sys.stdout.write(pretty_json(diff))
        return EXIT_OK
    for line in diff_lines(diff):
        print(line)
    return EXIT_OK


def cmd_worlds(args: argparse.Namespace) -> int:
    from ..worlds_catalog import format_catalog, world_catalog

    catalog = world_catalog(args.world)
    if args.json:
        print_json(catalog, sort_keys=False)
    else:
        print(format_catalog(catalog))
    return EXIT_OK


def _registered_world_params() -> dict[str, type[WorldParams]]:
    from ..kernel.worlds import WORLDS

    return {name: WORLDS.get(name).Params for name in WORLDS}


def cmd_serve(args: argparse.Namespace) -> int:
    from ..api import serve

    print(f"serving {args.site_dir} at http://{args.host}:{args.port}/ (Ctrl-C stops)")
    sys.stdout.flush()
    serve(args.site_dir, host=args.host, port=args.port)
    return EXIT_OK


# --------------------------------------------------------------------------- the parser


def register_cli(sub: Any) -> None:
    """Add the audit's commands to the `simreport` parser's subcommands."""
    p = sub.add_parser("validate", help="validate scenario or plan files")
    p.add_argument("files", nargs="+")
    p.add_argument("--max-runs", type=positive_int, metavar="N", help=MAX_RUNS_HELP)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of a document kind (scenario, plan, result.json, audit.json)",
    )
    p.add_argument("which", choices=["scenario", "plan", "result", "audit"])
    p.add_argument(
        "--format",
        choices=["json", "markdown"],
        default="json",
        help="json: the JSON Schema, for editors; markdown: one table per type, for reading",
    )
    p.set_defaults(func=cmd_schema)
    # `simreport schema scenario` checks `params` per world: the registry loads when a schema
    # is made, not when the command line starts.
    set_world_params_source(_registered_world_params)

    p = sub.add_parser("run", help="run one scenario into a directory")
    p.add_argument("scenario")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=count, metavar="N", help="override the scenario's seed")
    p.add_argument("--provider")
    p.add_argument("--model", help="override llm.model")
    p.add_argument("--base-url", help="override llm.baseUrl (HTTP providers)")
    p.add_argument(
        "--policy",
        metavar="FILE",
        help="an execution policy declaring the model endpoints and simulators the scenario "
        "names (llm.endpoint, simulator.name), as the run service's --policy",
    )
    p.add_argument("--allow-failure", action="store_true", help="exit 0 even when the run failed")
    p.add_argument(
        "--purpose",
        choices=("exploration", "regression"),
        default="exploration",
        help="regression: every version the run records must be online in the ledger "
        "(default: exploration)",
    )
    _ledger_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("conditions", help="list a plan's conditions without running")
    p.add_argument("plan")
    p.add_argument("--replications", type=int64)
    p.add_argument("--max-runs", type=positive_int, metavar="N", help=MAX_RUNS_HELP)
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="estimate runs, LLM calls and tokens instead of listing (--json: the estimate)",
    )
    p.add_argument("--pilot", metavar="AUDIT_DIR", help="with --estimate: a pilot audit's costs")
    p.set_defaults(func=cmd_conditions)

    p = sub.add_parser("power", help="replications a plan needs, sized from a pilot audit")
    p.add_argument("plan")
    p.add_argument("--pilot", required=True, metavar="AUDIT_DIR", help="a pilot audit directory")
    p.add_argument("--effect", type=effect_size, metavar="D", help="size for this |d| instead")
    p.add_argument("--power", type=probability, default=0.8)
    p.add_argument(
        "--alpha", type=probability, default=0.05, help="family α over all metrics' comparisons"
    )
    p.add_argument(
        "--design",
        choices=("auto", "paired", "unpaired"),
        default="auto",
        help="the test to size; auto: paired unless an axis varies the seed",
    )
    p.add_argument(
        "--correlation",
        type=correlation,
        default=0.0,
        metavar="RHO",
        help="paired: the base-condition correlation that turns a pooled |d| into δ (default 0)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_power)

    p = sub.add_parser("audit", help="run an audit plan, then analyse and report")
    p.add_argument("plan")
    p.add_argument("--out", help="audit directory (default results/<plan-id>)")
    p.add_argument("--replications", type=int64)
    p.add_argument("--max-runs", type=positive_int, metavar="N", help=MAX_RUNS_HELP)
    p.add_argument(
        "--concurrency",
        type=int64,
        help="run processes (capped at 4 per core; default: the plan's)",
    )
    p.add_argument("--provider", help="override every run's provider")
    p.add_argument("--model", help="override every run's model (plans without `models`)")
    p.add_argument("--base-url", help="override every run's llm.baseUrl")
    p.add_argument("--include-incomplete", action="store_true")
    p.add_argument(
        "--purpose",
        choices=("exploration", "regression"),
        help="replace the plan's purpose (default: the plan's, else exploration)",
    )
    _ledger_options(p)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "analyse",
        help="compute audit.json and runs.parquet from an audit's runs; re-render the pages it has",
    )
    p.add_argument("audit_dir")
    p.add_argument("--include-incomplete", action="store_true")
    _ledger_options(p)
    p.set_defaults(func=cmd_analyse)

    p = sub.add_parser(
        "evaluate",
        help="judge agent-testbed runs: write evaluation.json for a run or every run of an audit",
    )
    p.add_argument("path", metavar="RUN_DIR|AUDIT_DIR")
    p.add_argument(
        "--evaluator", metavar="NAME@VERSION", help="the evaluator (default: the built-in one)"
    )
    p.add_argument(
        "--ledger",
        metavar="URL",
        help="also set each evaluated run's quality_ref in this ledger (the runs recorded there)",
    )
    p.set_defaults(func=cmd_evaluate)

    p = sub.add_parser("report", help="re-render report.html and methods from audit.json")
    p.add_argument("audit_dir")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("site", help="build a static site from audit directories")
    p.add_argument("audit_dirs", nargs="+")
    p.add_argument("--out", default="site")
    p.add_argument("--title", default="simreport audits")
    p.set_defaults(func=cmd_site)

    p = sub.add_parser("diff", help="what changed between two audits, and why")
    p.add_argument("audit_a", help="the earlier audit: its directory or an audit.json file")
    p.add_argument("audit_b", help="the later audit: its directory or an audit.json file")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("serve", help="serve a built site on this machine")
    p.add_argument("site_dir", nargs="?", default="site")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int64, default=8000)
    p.set_defaults(func=cmd_serve)


def register_worlds(sub: Any) -> None:
    """Add `simreport worlds` to the `simreport` parser's subcommands (it comes last in the list
    of commands)."""
    p = sub.add_parser(
        "worlds", help="list each world's parameters, metrics and applicable TRAILS templates"
    )
    p.add_argument("world", nargs="?", help="show only this world")
    p.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    p.set_defaults(func=cmd_worlds)
