"""Plans from the config, checked and expanded at parse time into the targets of the DAG: a
`Workflow` of `PlanTarget`s, each with a `ConditionTarget` per condition whose `key` changes
exactly when that condition's runs must be redone (its scenario, replications, overrides, the
kernel's fingerprint, the files its runs read, its retry generation). `retype_command_line` and
`validate_config` check a config as a build does before anything is expanded."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.canonical import canonical_json, content_hash, sha256_text
from ..core.errors import InputError, SchemaError, ValidationIssue, join_path
from ..core.files import Document, check_output_dir, load_document
from ..harness import (
    Condition,
    LoadedPlan,
    RunStore,
    build_conditions,
    conditions_document,
    load_plan,
    plan_document,
)
from ..harness.plan import bounded_workers, plan_id_of
from ..harness.runner import check_llm_access, validate_llm_override
from ..harness.store import RUN_KEY_VERSION
from ..kernel import input_hashes, kernel_fingerprint
from .condition_jobs import STATE_DIR, read_state, retry_token, runs_changed, state_file
from .ledger import ledger_of

DEFAULT_STORE = ".store"
CONFIG_FILE = "config/config.yaml"
"""Where the Snakefile reads the config from; errors about the config name it."""
CONFIG_SCHEMA = "config/schema.yaml"
"""The JSON Schema the Snakefile validates the config against, in the workflow's folder."""


@dataclass(frozen=True)
class LLMOverride:
    """Config overrides of every run's model access."""

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None

    def llm_fields(self) -> dict[str, Any]:
        """The scenario `llm` keys every run gets (document form)."""
        fields: dict[str, Any] = {}
        if self.model is not None:
            fields["model"] = self.model
        if self.base_url is not None:
            fields["baseUrl"] = self.base_url
        return fields


RUN_JOBS = 128
"""Most run jobs per plan unless the config's `runJobs` says otherwise. A plan with more
conditions shares them out among this many jobs, several conditions each: every Snakemake start
pays for each job of the DAG, and at thousands of conditions that cost dominates a no-op build."""

RULE_NAME_LIMIT = 72
"""Longest readable run-rule name; a longer one is cut and ends in a short hash of the id."""


def _slug(text: str) -> str:
    """`linguistic_framing=moralised` → `linguistic_framing_moralised` (ASCII letters, digits,
    single underscores)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


@dataclass
class ConditionTarget:
    plan_id: str
    condition: Condition
    outputs: list[str]
    """One result.json per replication."""
    key: str
    """Changes exactly when this condition's runs must be redone (Snakemake `params`)."""
    state: str
    """The state file the condition's job ends with."""
    slug_shared: bool = False
    """Another condition of the plan has the same slug: the rule name carries a hash."""
    retry: int = 0
    """The retry generation this build runs the condition as (part of `key`; see `retry_token`)."""
    batch_summary: str | None = None
    """In a plan with more conditions than `runJobs`: the summary its batch's job ends with."""

    @property
    def requested(self) -> str:
        """What the analysis and the evaluation ask of this condition's run job, and the job's
        one declared output: its state file, the job's last write, or in a batched plan the
        batch's summary (`RunBatch.output`). Every result.json of the condition is written by
        the job too, but declaring them would cost Snakemake a metadata read and more per run at
        every start (a no-op build of 10,000 runs took 4.3 s, 2.8 s of it Snakemake's own cost
        for 10,000 declared outputs; see bench/bench_workflow.py). A run deleted or rewritten
        after the job is caught by the retry token instead (see `runs_changed`), and a single
        run can be asked for by its path (the `run_replication` rule)."""
        return self.batch_summary or self.state

    @property
    def audit_dir(self) -> Path:
        """The plan's audit folder, where the state file's folder is."""
        return Path(self.state).parent.parent

    @property
    def log(self) -> str:
        """The condition's log: `<audit dir>/logs/runs/<condition dir>.log`, one line per run
        as it ends and the job's summary last."""
        return str(self.audit_dir / "logs" / "runs" / f"{self.condition.dir}.log")

    @property
    def evaluated(self) -> bool:
        """Whether the condition's runs are judged by an evaluator (an agent-testbed scenario
        with an `evaluationRef`): then an evaluation job follows its run job."""
        return self.condition.scenario.evaluation_ref is not None

    @property
    def evaluation(self) -> str:
        """The evaluation job's output: `<audit dir>/evaluations/<condition dir>.json`, the
        summary written once each run of the condition has its evaluation.json."""
        from ..evaluation import CONDITION_SUMMARIES

        return str(self.audit_dir / CONDITION_SUMMARIES / f"{self.condition.dir}.json")

    @property
    def rule_name(self) -> str:
        """`run_<plan>_<condition slug>`: a Python identifier that depends on this condition
        alone, unless its slug is shared with another condition of the plan or too long; then
        the slug is cut and ends in a short hash of the condition id."""
        slug = _slug(self.condition.id)
        name = f"run_{_slug(self.plan_id) or 'plan'}_{slug}"
        if slug and not self.slug_shared and len(name) <= RULE_NAME_LIMIT:
            return name
        digest = sha256_text(self.condition.id)[:8]
        return f"{name[: RULE_NAME_LIMIT - len(digest) - 1].rstrip('_')}_{digest}"


@dataclass(frozen=True)
class RunBatch:
    """One run job of a plan and what Snakemake knows of it: the conditions it runs (one, unless
    the plan has more conditions than `runJobs`), its rule name, its log and its key, which
    changes exactly when one of its conditions' keys does."""

    name: str
    targets: list[ConditionTarget]
    key: str
    log: str
    summary: str | None = None
    """A batch's summary file (None for a job of one condition)."""

    @property
    def output(self) -> str:
        """The job's one declared output, its last write: the state file of its condition, or
        a batch's summary (each condition's state file is then written undeclared, as its runs
        are: fewer declared files is what keeps Snakemake's start short)."""
        return self.summary or self.targets[0].state

    @property
    def condition_ids(self) -> list[str]:
        return [target.condition.id for target in self.targets]


def run_batches(
    plan_id: str, out_dir: Path, targets: Sequence[ConditionTarget], run_jobs: int
) -> list[RunBatch]:
    """The run jobs of a plan. Up to `run_jobs` conditions, one job each, named, logged and keyed
    as the condition. Beyond that, each condition goes to one of `run_jobs` batches chosen by a
    hash of its id alone (`batch_of`), in plan order within a batch: adding, removing or editing
    a condition changes the key of its own batch only, and only that job reruns (its other
    conditions' runs come back from the run store). Sets each batched target's `batch_summary`."""
    if len(targets) <= run_jobs:
        return [RunBatch(t.rule_name, [t], t.key, t.log) for t in targets]
    members: dict[int, list[ConditionTarget]] = {}
    for target in targets:
        members.setdefault(batch_of(target.condition.id, run_jobs), []).append(target)
    width = len(str(run_jobs - 1))
    prefix = f"run_{(_slug(plan_id) or 'plan')[:40]}_batch_"
    batches = []
    for k, batch in sorted(members.items()):
        summary = os.path.join(out_dir, STATE_DIR, BATCHES, f"{k:0{width}d}.json")
        for target in batch:
            target.batch_summary = summary
        batches.append(
            RunBatch(
                name=f"{prefix}{k:0{width}d}",
                targets=batch,
                key=sha256_text("\n".join(t.key for t in batch)),
                log=str(out_dir / "logs" / "runs" / BATCHES / f"{k:0{width}d}.log"),
                summary=summary,
            )
        )
    return batches


BATCHES = "batches"
"""Folder of the batch summaries (under state/) and batch logs (under logs/runs/)."""


def batch_of(condition_id: str, run_jobs: int) -> int:
    """The batch (0 to run_jobs - 1) a condition of a plan with more than `run_jobs` conditions
    runs in: a function of its id and the number of batches, nothing else."""
    return int(sha256_text(condition_id)[:12], 16) % run_jobs


@dataclass
class PlanTarget:
    id: str
    plan_file: Path
    out_dir: Path
    loaded: LoadedPlan
    conditions: list[ConditionTarget]
    figures: list[str]
    spec: str
    """Hash of plan.json and conditions.json: the plan-spec job reruns exactly when it changes."""
    provider: str | None
    llm: dict[str, Any]
    include_incomplete: bool
    plan_doc: dict[str, Any] = field(repr=False, default_factory=dict)
    conditions_doc: list[dict[str, Any]] = field(repr=False, default_factory=list)
    batches: list[RunBatch] = field(repr=False, default_factory=list)
    """The plan's run jobs (`run_batches`): one per condition unless it has more than `runJobs`."""
    _by_dir: dict[str, ConditionTarget] = field(init=False, repr=False, default_factory=dict)
    _by_id: dict[str, ConditionTarget] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._by_dir.update((t.condition.dir, t) for t in self.conditions)
        self._by_id.update((t.condition.id, t) for t in self.conditions)

    def by_dir(self, condition_dir: str) -> ConditionTarget | None:
        """The condition whose folder (and state file, and log) is named `condition_dir`."""
        return self._by_dir.get(condition_dir)

    def by_id(self, condition_id: str) -> ConditionTarget | None:
        """The condition with this id."""
        return self._by_id.get(condition_id)

    @property
    def results(self) -> list[str]:
        return [path for target in self.conditions for path in target.outputs]

    @property
    def requested(self) -> list[str]:
        """What the analysis asks of the run jobs: each one's declared output (see
        `ConditionTarget.requested`)."""
        return [batch.output for batch in self.batches]

    @property
    def evaluations(self) -> list[str]:
        """What the analysis asks of the evaluation jobs: one summary per evaluated condition
        (none for a plan without an evaluator)."""
        return [target.evaluation for target in self.conditions if target.evaluated]


@dataclass
class Workflow:
    plans: list[PlanTarget]
    results_dir: Path
    site_dir: Path
    store: RunStore
    title: str
    workers: int | None
    ledger: str | None = None
    """The ledger's URL (None: `ledger: null`, nothing is recorded); see `ledger_of`."""

    def plan(self, plan_id: str) -> PlanTarget:
        for plan in self.plans:
            if plan.id == plan_id:
                return plan
        raise KeyError(plan_id)


def load_workflow(
    config: Mapping[str, Any], root: str | Path = ".", *, config_file: str | Path = CONFIG_FILE
) -> Workflow:
    """Every plan the config lists, validated and expanded into targets. What the config itself
    sets (overrides, limits, workers) is checked before any plan is expanded; errors about it
    name `config_file` and the key."""
    base = Path(root)
    results_dir = Path(config.get("results", "results"))
    site_dir = Path(config.get("site", "site"))
    store_dir = Path(config.get("store") or results_dir / DEFAULT_STORE)
    shared = _globals(config, config_file)
    run_jobs = _run_jobs(config.get("runJobs"), config_file)
    for key, folder in (("results", results_dir), ("site", site_dir), ("store", store_dir)):
        _check_folder(key, folder, config_file)
    plan_files = [base / str(entry) for entry in config.get("plans") or []]
    plan_ids = [plan_id_of(plan_file) for plan_file in plan_files]
    per_plan = _per_plan(config, config_file, plan_ids)
    plans: list[PlanTarget] = []
    seen: dict[str, Path] = {}
    for plan_file, plan_id in zip(plan_files, plan_ids, strict=True):
        local = {**shared, **per_plan.get(plan_id, {})}
        loaded = load_plan(
            plan_file, replications=local.get("replications"), max_runs=local.get("maxRuns")
        )
        if loaded.plan_id in seen:
            raise InputError(
                f"two plans have the id {loaded.plan_id!r} ({seen[loaded.plan_id]} and "
                f"{plan_file}); give one an `id`",
                file=plan_file,
                path="id",
                expected="unique plan ids",
            )
        seen[loaded.plan_id] = plan_file
        llm = LLMOverride(local.get("provider"), local.get("model"), local.get("baseUrl"))
        fields = validate_llm_override(loaded, llm.llm_fields()) or {}
        include = local.get("includeIncomplete")
        plans.append(
            _plan_target(
                loaded,
                results_dir / loaded.plan_id,
                provider=llm.provider,
                llm=fields,
                # Unset in the config: the plan's own setting holds.
                include_incomplete=(
                    loaded.plan.include_incomplete if include is None else bool(include)
                ),
                run_jobs=run_jobs,
            )
        )
    return Workflow(
        plans=plans,
        results_dir=results_dir,
        site_dir=site_dir,
        store=RunStore(store_dir),
        title=str(config.get("title") or "simreport audits"),
        workers=_workers(config.get("workers"), config_file),
        ledger=ledger_of(config, results_dir, config_file),
    )


def _check_folder(key: str, folder: Path, config_file: str | Path) -> None:
    """Refuse a config folder that cannot be one (a file, a path under a file), naming the key.
    Nothing is made to try it: other build processes may be writing there."""
    try:
        check_output_dir(folder, name=key, try_making=False)
    except InputError as exc:
        raise InputError(
            f"{folder}: {exc.message}", file=config_file, path=key, expected=exc.expected
        ) from None


def validate_config(document: Document, root: str | Path = ".") -> Workflow:
    """Check a workflow config file as a build would before its first job (`simreport validate`
    on a config from elsewhere): against the workflow's JSON Schema (`CONFIG_SCHEMA` under
    `root`, the workflow's folder, where its plan paths resolve too), then every plan it names,
    loaded and expanded. Raises SchemaError or InputError naming the file, its line and key."""
    issues = config_schema_issues(document.data, root)
    if issues:
        raise SchemaError(issues, file=document.path, line=document.line_of(issues[0].path))
    return load_workflow(document.data, root, config_file=document.path)


def config_schema_issues(config: Any, root: str | Path = ".") -> list[ValidationIssue]:
    """What the workflow's JSON Schema (`CONFIG_SCHEMA` under `root`) finds wrong with a config,
    by path; each issue's `expected` is the schema's description of the key."""
    import jsonschema

    schema_file = Path(root) / CONFIG_SCHEMA
    if not schema_file.is_file():
        raise InputError(
            "no workflow here to check the config against",
            file=schema_file,
            expected="the workflow's folder as the current folder: its Snakefile and "
            f"{CONFIG_SCHEMA} are there, and the config's plan paths resolve there",
        )
    schema = load_document(schema_file).data
    validator = jsonschema.validators.validator_for(schema)(schema)
    problems = sorted(validator.iter_errors(config), key=lambda e: [str(p) for p in e.path])
    return [
        ValidationIssue(
            join_path(*problem.absolute_path, *_unexpected_keys(problem)[:1]),
            problem.message,
            expected=_described(problem.validator, problem.schema),
            kind=str(problem.validator),
        )
        for problem in problems
    ]


def _unexpected_keys(problem: Any) -> list[str]:
    """The keys an `additionalProperties` problem is about, so its path names the first."""
    known = problem.schema.get("properties") if isinstance(problem.schema, Mapping) else None
    if problem.validator != "additionalProperties" or not isinstance(problem.instance, Mapping):
        return []
    return sorted(str(k) for k in problem.instance if k not in (known or {}))


def _described(validator: Any, schema: Any) -> str | None:
    if not isinstance(schema, Mapping):
        return None
    if validator == "additionalProperties" and isinstance(schema.get("properties"), Mapping):
        return "one of the keys " + ", ".join(schema["properties"])
    text = " ".join(str(schema.get("description") or "").split()).rstrip(".")
    types = schema.get("type")
    if validator == "type" and types:
        kinds = " or ".join(types) if isinstance(types, list) else str(types)
        return f"{kinds}: {text}" if text else str(kinds)
    return text or None


_OVERRIDES = ("replications", "maxRuns", "provider", "model", "baseUrl", "includeIncomplete")
"""The config keys that apply to every plan, and to one plan under `overrides.<plan id>`."""


_TYPED = (
    "replications",
    "maxRuns",
    "workers",
    "runThreads",
    "runJobs",
    "includeIncomplete",
    "failOnRunFailure",
    "verbose",
)
"""Config keys whose values are numbers, switches or null, never text."""


def retype_command_line(
    config: MutableMapping[str, Any], command_line: Mapping[str, Any] | None = None
) -> None:
    """Give `--config` values their types back before the config is validated. Snakemake reads
    `key=value` as text unless it is a number or `True`/`False`, and a mapping's leaves always as
    text: `--config failOnRunFailure=true overrides='{echo_chamber: {replications: 5}}'` arrive
    as "true" and "5". Only the keys that are never text are converted, at the top level and
    in each plan's `overrides`; a value that still does not fit is left for the schema to refuse.

    `plans=PATH` becomes a list of that one plan. When `command_line` (what `--config` gave)
    names the plans, the config file's `overrides` of plans it leaves out are dropped: building
    one plan of several needs no edit of the config."""
    if isinstance(config.get("plans"), str) and config["plans"].strip():
        config["plans"] = [config["plans"].strip()]
    if command_line and "plans" in command_line:
        _drop_overrides_of_unlisted_plans(config, command_line)
    _retype(config)
    if isinstance(config.get("ledger"), str) and config["ledger"].strip().lower() in _NULL:
        config["ledger"] = None  # `--config ledger=null`: no ledger
    overrides = config.get("overrides")
    if isinstance(overrides, MutableMapping):
        for entry in overrides.values():
            if isinstance(entry, MutableMapping):
                _retype(entry)


def _drop_overrides_of_unlisted_plans(
    config: MutableMapping[str, Any], command_line: Mapping[str, Any]
) -> None:
    overrides, plans = config.get("overrides"), config.get("plans")
    if not isinstance(overrides, MutableMapping) or not isinstance(plans, list):
        return  # the schema refuses them
    given = command_line.get("overrides")
    kept = set(given) if isinstance(given, Mapping) else set()
    for entry in plans:
        try:
            kept.add(plan_id_of(str(entry)))
        except InputError:
            return  # a plan that cannot be read: loading it names the problem
    for plan_id in [k for k in overrides if k not in kept]:
        del overrides[plan_id]


def _retype(values: MutableMapping[str, Any]) -> None:
    for key in _TYPED:
        text = values.get(key)
        if not isinstance(text, str):
            continue
        word = text.strip()
        if word.lower() in ("true", "false"):
            values[key] = word.lower() == "true"
        elif word.lower() in _NULL:
            values[key] = None
        elif re.fullmatch(r"[+-]?[0-9]+", word):
            values[key] = int(word)


_NULL = ("null", "~", "")


def _globals(config: Mapping[str, Any], config_file: str | Path = CONFIG_FILE) -> dict[str, Any]:
    """The overrides the config sets for every plan, checked."""
    values = {k: config[k] for k in _OVERRIDES if config.get(k) is not None}
    _check_overrides(values, config_file, "")
    return values


def _per_plan(
    config: Mapping[str, Any], config_file: str | Path, plan_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """`overrides`, keyed by plan id, checked: each names a listed plan and sets known keys."""
    raw = config.get("overrides") or {}
    if not isinstance(raw, Mapping):
        raise InputError(
            "overrides must be a mapping", file=config_file, path="overrides", expected=_BY_ID
        )
    known = ", ".join(plan_ids) or "none: no plans are listed"
    out: dict[str, dict[str, Any]] = {}
    for plan_id, entry in raw.items():
        path = f"overrides.{plan_id}"
        if plan_id not in plan_ids:
            raise InputError(
                f"overrides for unknown plan id {plan_id!r}",
                file=config_file,
                path=path,
                expected=f"the id of a plan in `plans` ({known})",
            )
        if not isinstance(entry, Mapping):
            raise InputError(
                "a plan's overrides must be a mapping", file=config_file, path=path, expected=_BY_ID
            )
        unknown = sorted(str(k) for k in entry if k not in _OVERRIDES)
        if unknown:
            raise InputError(
                f"unknown override {unknown[0]!r}",
                file=config_file,
                path=f"{path}.{unknown[0]}",
                expected="one of " + ", ".join(_OVERRIDES),
            )
        values = {k: v for k, v in entry.items() if v is not None}
        _check_overrides(values, config_file, f"{path}.")
        out[plan_id] = values
    return out


_BY_ID = "plan id → {replications: 5, …}"


def _check_overrides(values: Mapping[str, Any], config_file: str | Path, prefix: str) -> None:
    """Refuse values every run would fail on, before any plan is expanded."""
    check_llm_access(
        values.get("provider"),
        values.get("baseUrl"),
        provider_at=f"{prefix}provider",
        base_url_at=f"{prefix}baseUrl",
        file=config_file,
    )
    for key in ("replications", "maxRuns"):
        value = values.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InputError(
                f"{key} must be a whole number, not {value!r}",
                file=config_file,
                path=f"{prefix}{key}",
                expected="an integer ≥ 1",
            )
        if value is not None and value < 1:
            raise InputError(
                f"{key} must be at least 1, not {value}",
                file=config_file,
                path=f"{prefix}{key}",
                expected="an integer ≥ 1",
            )


def _run_jobs(value: Any, config_file: str | Path) -> int:
    """`runJobs`, checked (null or unset: RUN_JOBS)."""
    if value is None:
        return RUN_JOBS
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(
            f"runJobs must be a whole number of at least 1, not {value!r}",
            file=config_file,
            path="runJobs",
            expected=f"an integer ≥ 1: the most run jobs per plan (null: {RUN_JOBS})",
        )
    return value


def _workers(value: Any, config_file: str | Path) -> int | None:
    """`workers`, checked and capped at the machine's worker limit (with a note on stderr)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(
            f"workers must be a whole number, not {value!r}",
            file=config_file,
            path="workers",
            expected="an integer ≥ 1, or null for the cores given",
        )
    try:
        workers, note = bounded_workers(value, name="workers")
    except InputError as exc:
        raise exc.located(file=config_file) from None
    if note is not None:
        print(f"simreport: note: {note}", file=sys.stderr)
    return workers


def condition_key(condition: Condition, fields: Mapping[str, Any]) -> str:
    """`content_hash` of `fields` with "scenario": the condition's scenario as its runs read it
    (a description edit or a reordered mapping reruns nothing). "scenario" sorts after every
    other key, so the canonical JSON ends with the scenario's own, which the condition keeps
    from when it was built: hashing each scenario again at every start cost a plan of 5,000
    conditions seconds."""
    if any(name >= "scenario" for name in fields):
        raise ValueError("condition_key: the fields must sort before 'scenario'")
    head = canonical_json(dict(fields))
    return sha256_text(
        f'{head[:-1]}{"," if fields else ""}"scenario":{condition.runs_read_json()}}}'
    )


def _plan_target(
    loaded: LoadedPlan,
    out_dir: Path,
    *,
    provider: str | None,
    llm: dict[str, Any],
    include_incomplete: bool,
    run_jobs: int = RUN_JOBS,
) -> PlanTarget:
    conditions = build_conditions(loaded)
    fingerprints: dict[str | None, str] = {}
    targets = []
    reps = loaded.plan.replications
    for condition in conditions:
        world = condition.scenario.world
        if world not in fingerprints:
            fingerprints[world] = kernel_fingerprint(world)
        key = condition_key(
            condition,
            {
                "keyVersion": RUN_KEY_VERSION,
                "id": condition.id,
                "replications": reps,
                "provider": provider,
                "llm": llm,
                "kernel": fingerprints[world],
                # Only the files this condition's runs read (for an agent scenario, the asset
                # versions its own manifest resolves), as in the run store's keys.
                "inputs": input_hashes(condition.scenario, loaded.asset_root),
            },
        )
        # Text, not Path objects: a plan of 100,000 runs builds this many paths at every start.
        folder = os.path.join(out_dir, "runs", condition.dir)
        outputs = [f"{folder}{os.sep}{r}{os.sep}result.json" for r in range(reps)]
        # Failed runs left by the condition's last job, or a result.json deleted or rewritten
        # since, rerun it once per build. (Snakemake itself does not rerun a job for a deleted
        # or edited intermediate file while what depends on it is up to date; one stat per run
        # here is cheap.)
        state_path = state_file(out_dir, condition.dir)
        state = read_state(state_path)
        retry = retry_token(state, deleted=runs_changed(outputs, state_path, state))
        if retry:
            key = f"{key}.retry{retry}"
        targets.append(
            ConditionTarget(loaded.plan_id, condition, outputs, key, str(state_path), retry=retry)
        )
    slugs = Counter(_slug(t.condition.id) for t in targets)
    for target in targets:
        target.slug_shared = slugs[_slug(target.condition.id)] > 1
    plan_doc = plan_document(loaded, provider, llm)
    conditions_doc = conditions_document(loaded, conditions)
    metrics = list(loaded.plan.metrics) or sorted(loaded.metrics_available)
    targets_dist = sorted(
        (loaded.hypothesis.target_distribution or {}) if loaded.hypothesis else {}
    )
    from ..report.naming import planned_figure_names

    figures = list(planned_figure_names(metrics, loaded.plan.design, targets_dist))
    return PlanTarget(
        id=loaded.plan_id,
        plan_file=loaded.plan_file,
        out_dir=out_dir,
        loaded=loaded,
        conditions=targets,
        figures=figures,
        spec=content_hash({"plan": plan_doc, "conditions": conditions_doc}),
        provider=provider,
        llm=llm,
        include_incomplete=include_incomplete,
        plan_doc=plan_doc,
        conditions_doc=conditions_doc,
        batches=run_batches(loaded.plan_id, out_dir, targets, run_jobs),
    )
