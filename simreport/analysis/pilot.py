"""A pilot audit and what a plan will cost before it runs: reading a pilot's audit.json (checking
that it belongs to the plan being sized) and estimating LLM calls and tokens from a pilot or the
response cache."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.canonical import canonical_json, parse_number
from ..core.errors import InputError
from ..core.files import read_json

# --------------------------------------------------------------------------- cost estimates


@dataclass(frozen=True)
class PilotCost:
    """What a pilot's runs cost: audit.json `cost`, the cache hits among its requests and the
    provider it ran with."""

    runs: int
    llm_calls: int
    cache_hits: int
    prompt_tokens: int
    completion_tokens: int
    provider: str | None


@dataclass(frozen=True)
class TokenRates:
    """Average tokens per call from recorded responses."""

    entries: int
    prompt_tokens: float
    completion_tokens: float
    models: tuple[str, ...]
    note: str | None = None


def cache_token_rates(
    usage: Iterable[tuple[Mapping[str, Any], int, int]],
    provider: str,
    models: Sequence[str],
) -> TokenRates | None:
    """Tokens per call from the response cache's entries: those of the plan's provider and
    models, else (with a note) those of the provider's other models.

    Args:
        usage: the cache's entries as (meta, prompt tokens, completion tokens)
            (`ResponseCache.recorded_usage`).
        provider: the plan's provider.
        models: the plan's models.

    Returns:
        The rates and what they rest on; None when the cache holds no response of the
        provider.
    """
    wanted = set(models)
    same_model: list[tuple[str, int, int]] = []
    same_provider: list[tuple[str, int, int]] = []
    for meta, prompt, completion in usage:
        if meta.get("provider") != provider:
            continue
        model = str(meta.get("model"))
        (same_model if model in wanted else same_provider).append((model, prompt, completion))
    chosen, note = same_model, None
    if not chosen:
        chosen = same_provider
        note = (
            f"no recorded response of {', '.join(sorted(wanted)) or 'the plan model'}: tokens "
            f"per call from other models of provider {provider}"
        )
    if not chosen:
        return None
    return TokenRates(
        entries=len(chosen),
        prompt_tokens=math.fsum(p for _, p, _ in chosen) / len(chosen),
        completion_tokens=math.fsum(c for _, _, c in chosen) / len(chosen),
        models=tuple(sorted({m for m, _, _ in chosen})),
        note=note,
    )


OFFLINE_PROVIDER = "offline"
OFFLINE_PILOT_HINT = (
    "an offline pilot costs nothing and counts the calls: `simreport audit PLAN --provider "
    "offline --replications 2 --out DIR`, then `--pilot DIR`"
)
OFFLINE_TOKENS_NOTE = "the offline provider estimates tokens at about four characters a token"
OFFLINE_FREE_NOTE = "the offline provider is free: its calls are counted, nothing is billed"
OFFLINE_UNCACHED_NOTE = "no basis for an estimate without a pilot: offline responses are not cached"


def other_provider_note(pilot_provider: str, provider: str) -> str:
    """The note of a pilot that ran with another provider than the plan names."""
    return (
        f"the pilot ran with provider {pilot_provider}, the plan names {provider}: the calls per "
        "run carry over, the token counts may not"
    )


def cache_basis_note(rates: TokenRates) -> str:
    """The note of an estimate without a pilot, from the response cache's recorded responses."""
    return (
        f"no pilot: tokens per call from {rates.entries} recorded responses of "
        f"{', '.join(rates.models)}; the calls per run are unknown before a run"
    )


def estimate_cost(
    *,
    runs: int,
    provider: str,
    pilot: PilotCost | None = None,
    rates: TokenRates | None = None,
) -> dict[str, Any]:
    """LLM calls and tokens for `runs` runs: per-run averages of a pilot times the runs, or
    without a pilot, the tokens per call the response cache recorded (the calls per run then
    stay unknown). Every request counts as a call: requests already in the response cache
    will cost none, so this is an upper bound.

    Args:
        runs: the runs planned.
        provider: the plan's provider.
        pilot: the pilot's cost (`Pilot.cost`), if there is a pilot.
        rates: tokens per call from the response cache (`cache_token_rates`).

    Returns:
        The estimate: `perRun`, `perCall` and `total` calls and tokens (None where unknown),
        what it rests on (`basis`: "pilot", "cache" or "none"), how (`notes`), and whether the
        provider is `free`.
    """
    notes: list[str] = []
    per_run: dict[str, float] | None = None
    per_call: dict[str, float] | None = None
    basis = "none"
    if pilot is not None and pilot.runs > 0:
        basis = "pilot"
        requests = pilot.llm_calls + pilot.cache_hits
        per_run = {"llmCalls": requests / pilot.runs}
        if pilot.llm_calls > 0:
            per_call = {
                "promptTokens": pilot.prompt_tokens / pilot.llm_calls,
                "completionTokens": pilot.completion_tokens / pilot.llm_calls,
            }
        elif requests > 0 and rates is not None:
            per_call = {
                "promptTokens": rates.prompt_tokens,
                "completionTokens": rates.completion_tokens,
            }
            notes.append(
                f"every pilot request was a cache hit: tokens per call from {rates.entries} "
                "recorded responses"
            )
        if pilot.provider is not None and pilot.provider != provider:
            notes.append(other_provider_note(pilot.provider, provider))
        if pilot.provider == OFFLINE_PROVIDER and provider != OFFLINE_PROVIDER:
            notes.append(OFFLINE_TOKENS_NOTE)
    elif rates is not None:
        basis = "cache"
        per_call = {
            "promptTokens": rates.prompt_tokens,
            "completionTokens": rates.completion_tokens,
        }
        notes.append(cache_basis_note(rates))
        if rates.note:
            notes.append(rates.note)
    elif provider == OFFLINE_PROVIDER:
        notes.append(OFFLINE_UNCACHED_NOTE)
    else:
        notes.append(
            "no basis for an estimate: no pilot, and the response cache holds no response of "
            f"provider {provider}"
        )
    if basis != "pilot":
        notes.append(OFFLINE_PILOT_HINT)
    if provider == OFFLINE_PROVIDER:
        notes.append(OFFLINE_FREE_NOTE)

    calls = None if per_run is None else round(per_run["llmCalls"] * runs)
    if per_run is not None and per_call is not None:
        per_run["promptTokens"] = per_run["llmCalls"] * per_call["promptTokens"]
        per_run["completionTokens"] = per_run["llmCalls"] * per_call["completionTokens"]
    total = {
        "llmCalls": calls,
        "promptTokens": None,
        "completionTokens": None,
    }
    if calls is not None and per_call is not None and per_run is not None:
        total["promptTokens"] = round(per_run["promptTokens"] * runs)
        total["completionTokens"] = round(per_run["completionTokens"] * runs)
    return {
        "runs": runs,
        "provider": provider,
        "basis": basis,
        "perRun": per_run,
        "perCall": per_call,
        "total": total,
        "free": provider == OFFLINE_PROVIDER,
        "notes": notes,
    }


# --------------------------------------------------------------------------- I/O edge: a pilot


@dataclass(frozen=True)
class Pilot:
    """What sizing and estimates need from a pilot's audit.json."""

    directory: Path
    file: Path
    plan: Mapping[str, Any]
    plan_hash: str
    replications: int
    conditions: tuple[str, ...]
    identical: frozenset[str]
    tests: Mapping[str, list[dict[str, Any]]]
    cost: PilotCost


def _need(value: Any, kind: type | tuple[type, ...], file: Path, path: str, expected: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InputError("unexpected content", file=file, path=path, expected=expected)
    return value


def read_pilot(audit_dir: str | Path) -> Pilot:
    """Read a pilot audit directory's audit.json.

    Args:
        audit_dir: an analysed audit directory.

    Returns:
        What sizing and estimates use of it: its plan hash, replications, tests and cost.

    Raises:
        InputError: audit.json is missing or is not an audit, naming the file and the path
            inside it.
    """
    root = Path(audit_dir)
    file = root / "audit.json"
    if not file.is_file():
        hint = (
            "run `simreport analyse` on it first"
            if (root / "plan.json").is_file()
            else "an audit directory built by `simreport audit`"
        )
        raise InputError("no audit.json in the pilot directory", file=file, expected=hint)
    try:
        doc = read_json(file)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)  # a JSON syntax error's; not a decoding error's
        raise InputError(
            f"not valid JSON: {exc}", file=file, line=line, expected="audit.json"
        ) from exc
    doc = _need(doc, dict, file, "", "a JSON object")
    plan = _need(doc.get("plan"), dict, file, "plan", "the audit's plan")
    plan_hash = _need(plan.get("hash"), str, file, "plan.hash", "the plan hash")
    replications = _need(plan.get("replications"), int, file, "plan.replications", "an integer")
    conditions = _need(doc.get("conditions"), list, file, "conditions", "a list of conditions")
    ids: list[str] = []
    identical: set[str] = set()
    for i, cond in enumerate(conditions):
        cond = _need(cond, dict, file, f"conditions.{i}", "a condition")
        cid = _need(cond.get("id"), str, file, f"conditions.{i}.id", "a condition id")
        ids.append(cid)
        if cond.get("identicalToBase"):
            identical.add(cid)
    tests_doc = _need(doc.get("tests"), dict, file, "tests", "metric → list of test rows")
    tests: dict[str, list[dict[str, Any]]] = {}
    for metric, rows in tests_doc.items():
        rows = _need(rows, list, file, f"tests.{metric}", "a list of test rows")
        checked = []
        for i, row in enumerate(rows):
            where = f"tests.{metric}.{i}"
            row = _need(row, dict, file, where, "a test row")
            cid = _need(row.get("condition"), str, file, f"{where}.condition", "a condition id")
            for key in ("nBase", "nCond"):
                _need(row.get(key), int, file, f"{where}.{key}", "an integer")
            d = row.get("cohenD")
            if not (d is None or isinstance(parse_number(d), (int, float))):
                raise InputError(
                    "unexpected content", file=file, path=f"{where}.cohenD", expected="a number"
                )
            checked.append({**row, "identicalToBase": cid in identical})
        tests[str(metric)] = checked
    cost = _need(doc.get("cost"), dict, file, "cost", "the summed cost")
    counters = doc.get("integrity") if isinstance(doc.get("integrity"), dict) else {}
    runs = doc.get("runs")
    run_count = len(runs) if isinstance(runs, list) else 0
    options = doc.get("options") if isinstance(doc.get("options"), dict) else {}
    base_llm = (plan.get("base") or {}).get("llm") if isinstance(plan.get("base"), dict) else None
    provider = options.get("providerOverride") or (
        base_llm.get("provider") if isinstance(base_llm, dict) else None
    )
    pilot_cost = PilotCost(
        runs=run_count,
        llm_calls=int(_need(cost.get("llmCalls"), int, file, "cost.llmCalls", "an integer")),
        cache_hits=int(counters.get("cacheHits", 0) or 0),
        prompt_tokens=int(
            _need(cost.get("promptTokens"), int, file, "cost.promptTokens", "an integer")
        ),
        completion_tokens=int(
            _need(cost.get("completionTokens"), int, file, "cost.completionTokens", "an integer")
        ),
        provider=str(provider) if provider is not None else None,
    )
    return Pilot(
        directory=root,
        file=file,
        plan=plan,
        plan_hash=plan_hash,
        replications=replications,
        conditions=tuple(ids),
        identical=frozenset(identical),
        tests=tests,
        cost=pilot_cost,
    )


def replications_warning(directory: str | Path, ran: int, planned: int) -> str:
    """The warning for a pilot of the plan that ran another number of replications."""
    return (
        f"the pilot in {directory} ran {ran} replications where the plan asks for {planned}: "
        "only the replications differ"
    )


class PilotMismatch(InputError):
    """A pilot run from another plan than the one being sized: the conditions only one of them
    has, or (with the same conditions) the plan keys that differ."""

    def __init__(
        self,
        message: str,
        *,
        only_in_pilot: Sequence[str] = (),
        only_in_plan: Sequence[str] = (),
        keys: Sequence[str] = (),
        **where: Any,
    ) -> None:
        super().__init__(message, **where)
        self.only_in_pilot = list(only_in_pilot)
        self.only_in_plan = list(only_in_plan)
        self.keys = list(keys)


_IDENTITY_KEYS = frozenset(
    {"hash", "identity", "identityHash", "id", "title", "file", "replications", "planFile"}
)


def check_pilot(
    plan_path: str | Path,
    planned_hash: str,
    planned_replications: int,
    pilot: Pilot,
    *,
    max_runs: int | None = None,
) -> str | None:
    """Whether `pilot` ran the plan at `plan_path` as it stands.

    Args:
        plan_path: the plan file.
        planned_hash: the plan's meaning hash, with `planned_replications`.
        planned_replications: the replications the plan asks for now.
        pilot: the pilot audit (`read_pilot`).
        max_runs: the most runs the plan may ask for, as the plan was loaded.

    Returns:
        None when the pilot ran the plan as it stands; a warning when only the replications
        differ.

    Raises:
        PilotMismatch: the pilot ran something else, naming what differs.
    """
    if pilot.plan_hash == planned_hash:
        return None
    from ..harness import build_conditions, load_plan

    as_pilot = load_plan(plan_path, replications=pilot.replications, max_runs=max_runs)
    if as_pilot.hash == pilot.plan_hash:
        return replications_warning(pilot.directory, pilot.replications, planned_replications)
    planned_ids = [c.id for c in build_conditions(as_pilot)]
    only_pilot = [c for c in pilot.conditions if c not in planned_ids]
    only_plan = [c for c in planned_ids if c not in pilot.conditions]
    keys: list[str] = []
    if only_pilot or only_plan:
        parts = []
        if only_pilot:
            parts.append(f"only in the pilot: {', '.join(only_pilot)}")
        if only_plan:
            parts.append(f"only in the plan: {', '.join(only_plan)}")
        detail = "its conditions differ (" + "; ".join(parts) + ")"
    else:
        normalised = as_pilot.normalised()
        keys = sorted(
            k
            for k in set(normalised) | set(pilot.plan)
            if k not in _IDENTITY_KEYS
            and canonical_json(normalised.get(k)) != canonical_json(pilot.plan.get(k))
        )
        detail = "its plan differs" + (f" in {', '.join(keys)}" if keys else "")
    raise PilotMismatch(
        f"the pilot was run from another plan: {detail}",
        only_in_pilot=only_pilot,
        only_in_plan=only_plan,
        keys=keys,
        file=pilot.file,
        path="plan.hash",
        expected=f"a pilot of {plan_path} (meaning hash {as_pilot.hash[:12]}…; only the "
        "replications may differ)",
    )
