"""What each comparison concludes, and the headline a reviewer signs (SPEC §6a).

A row pairs a condition's replications with its base's by seed when it can, decides with an exact
rank test, adjusts p with Holm over its family (primary or secondary metrics), and concludes
`moved`, `unchanged`, `inconclusive` or `untested`. Pure: no clock, no randomness except the
seeded bootstrap. The design: docs/statistics.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import inference, stats

ALPHA = 0.05
"""A row moves when its family-adjusted p is below this; it is unchanged when its equivalence p
is below it."""

CONCLUSIONS = ("moved", "unchanged", "inconclusive", "untested")

PAIRED_REASON = (
    "paired: replication r of the base and of the condition share their seed (common random "
    "numbers)"
)
UNSEEDED_REASON = "unpaired: the runs' seeds are not recorded"
SEEDS_DIFFER_REASON = (
    "unpaired: the condition's replications run with other seeds than the base's (a seed axis "
    "or another seed lineage)"
)

PAIRED_COVERAGE = {3: 0.76, 5: 0.92, 10: 0.95}
"""Simulated coverage of the 95 % paired bootstrap interval (expanded percentile) on normal
data, by number of pairs (`bench/bench_coverage.py`). Below 10 pairs no bootstrap of the pairs
reaches 95 %: its resampled means never leave the range of the differences."""
PAIRED_COVERAGE_FULL = 10
"""From this many pairs on, the paired interval covers about 95 % and needs no note."""

FAMILY_METHOD = (
    "Holm's step-down over every tested row of every primary metric (one family for the "
    "headline); secondary metrics form a family of their own"
)


@dataclass(frozen=True)
class Replicate:
    """One usable run's value of a metric, with the seed lineage it ran under."""

    replication: int
    seed: tuple[int, ...] | None
    """The run's root seed followed by its seed path; None when the run did not record it."""
    value: float


@dataclass(frozen=True)
class Pairing:
    """How a condition's replications line up with its base's."""

    paired: bool
    reason: str
    base: tuple[float, ...]
    cond: tuple[float, ...]
    """The finite values; pair i is (base[i], cond[i]) when `paired`."""


def _finite(reps: Sequence[Replicate]) -> list[Replicate]:
    return [r for r in reps if math.isfinite(r.value)]


def pair(base: Sequence[Replicate], cond: Sequence[Replicate]) -> Pairing:
    """Pair the replications of a base and a condition that ran under the same seed.

    Paired only when both have the same set of seeds, each once: then pair i shares its seed.
    Otherwise the values stay two independent samples, and `reason` says what broke the pairing.
    """
    b, c = _finite(base), _finite(cond)
    values_b = tuple(r.value for r in b)
    values_c = tuple(r.value for r in c)

    def unpaired(reason: str) -> Pairing:
        return Pairing(False, reason, values_b, values_c)

    if any(r.seed is None for r in (*b, *c)):
        return unpaired(UNSEEDED_REASON)
    seeds_b = {r.seed: r for r in b}
    seeds_c = {r.seed: r for r in c}
    if len(seeds_b) != len(b) or len(seeds_c) != len(c):
        return unpaired("unpaired: two replications of one condition share a seed")
    shared = seeds_b.keys() & seeds_c.keys()
    if not shared:
        return unpaired(SEEDS_DIFFER_REASON)
    if len(shared) != len(seeds_b) or len(shared) != len(seeds_c):
        alone_b = sorted(r.replication for s, r in seeds_b.items() if s not in shared)
        alone_c = sorted(r.replication for s, r in seeds_c.items() if s not in shared)
        return unpaired(broken_pairing_reason(alone_b, alone_c))
    order = sorted(shared, key=lambda s: seeds_b[s].replication)
    return Pairing(
        True,
        PAIRED_REASON,
        tuple(seeds_b[s].value for s in order),
        tuple(seeds_c[s].value for s in order),
    )


def broken_pairing_reason(alone_base: Sequence[int], alone_cond: Sequence[int]) -> str:
    """Why seeded replications are unpaired: the replications of the base and of the condition
    whose seed has no partner on the other side."""
    where = [
        f"{side} replication{'s' if len(reps) > 1 else ''} {', '.join(map(str, reps))}"
        for side, reps in (("base", alone_base), ("condition", alone_cond))
        if reps
    ]
    return (
        "unpaired: the pairing is broken, "
        + " and ".join(where)
        + " lack a partner (failed, excluded or not a finite value)"
    )


def decide(
    base: Sequence[Replicate],
    cond: Sequence[Replicate],
    *,
    seed: int,
    margin: float | None,
) -> dict[str, Any]:
    """The design-fitting columns of one tested row: pairing, the test that decides and its p,
    an interval of the mean difference, and the equivalence p against `margin` (None without
    one). `seed` seeds the interval's bootstrap."""
    pairing = pair(base, cond)
    if pairing.paired:
        result = inference.signed_rank_test(pairing.base, pairing.cond)
        interval = inference.paired_bootstrap_ci(pairing.base, pairing.cond, seed=seed)
    else:
        result = inference.rank_sum_test(pairing.base, pairing.cond)
        interval = inference.unpaired_interval(pairing.base, pairing.cond, seed=seed)
    note = None
    if pairing.paired and interval is not None and len(pairing.base) < PAIRED_COVERAGE_FULL:
        measured = ", ".join(f"{c:.2f} at {n} pairs" for n, c in PAIRED_COVERAGE.items())
        note = (
            f"with {len(pairing.base)} pairs this interval covers less than 95 % "
            f"(simulated: {measured})"
        )
    equivalence = (
        None
        if margin is None
        else inference.equivalence_test(pairing.base, pairing.cond, margin, paired=pairing.paired)
    )
    if pairing.paired:
        differences = [c - b for b, c in zip(pairing.base, pairing.cond, strict=True)]
        scale = float(np.std(differences, ddof=1))
    else:
        scale = stats.pooled_sd(pairing.base, pairing.cond) or 0.0
    return {
        "paired": pairing.paired,
        "nPairs": len(pairing.base) if pairing.paired else None,
        "effectScale": scale,
        "pairing": pairing.reason,
        "test": result.method,
        "p": result.p,
        "interval95": None if interval is None else [interval.lo, interval.hi],
        "intervalMethod": None if interval is None else interval.method,
        "intervalNote": note,
        "margin": margin,
        "equivalenceP": None if equivalence is None else equivalence.p,
        "equivalenceTest": None if equivalence is None else equivalence.method,
    }


def undecided(note: str | None, margin: float | None) -> dict[str, Any]:
    """The design-fitting columns of a row that is no test: every one empty."""
    return {
        "paired": False,
        "nPairs": None,
        "effectScale": None,
        "pairing": None,
        "test": None,
        "p": None,
        "interval95": None,
        "intervalMethod": None,
        "intervalNote": None,
        "margin": margin,
        "equivalenceP": None,
        "equivalenceTest": None,
    }


def apply_family(
    tests: Mapping[str, list[dict[str, Any]]], primary: Sequence[str] | None
) -> dict[str, Any]:
    """Set each row's `family` and `familyP` (Holm over its family's tested rows, on `p`) and
    return audit.json's `family` section: which metrics are primary and how many rows each
    family holds."""
    primary_set = set(primary) if primary else set(tests)
    members: dict[str, list[dict[str, Any]]] = {"primary": [], "secondary": []}
    for metric, rows in tests.items():
        family = "primary" if metric in primary_set else "secondary"
        for row in rows:
            row["family"] = family
            row["familyP"] = None
            if row.get("tested") and row.get("p") is not None:
                members[family].append(row)
    for rows in members.values():
        for row, adjusted in zip(rows, stats.holm([r["p"] for r in rows]), strict=True):
            row["familyP"] = adjusted
    return {
        "alpha": ALPHA,
        "method": FAMILY_METHOD,
        "primaryMetrics": [m for m in tests if m in primary_set],
        "secondaryMetrics": [m for m in tests if m not in primary_set],
        "primaryRows": len(members["primary"]),
        "secondaryRows": len(members["secondary"]),
    }


def conclude(row: dict[str, Any], mde: float | None, mde_note: str | None) -> None:
    """Set a row's `conclusion`, `reason` and `mde` from its family p and equivalence p."""
    row["mde"] = mde
    scale = row.get("effectScale")
    row["mdeInUnits"] = mde * scale if mde is not None and scale else None
    if not row.get("tested"):
        row["conclusion"] = "untested"
        row["reason"] = row.get("note") or "not tested"
        return
    family_p, equivalence_p = row.get("familyP"), row.get("equivalenceP")
    if family_p is not None and family_p < ALPHA:
        row["conclusion"] = "moved"
        row["reason"] = f"{row['family']} family Holm p {_p(family_p)} < {ALPHA:g} ({row['test']})"
        return
    if equivalence_p is not None and equivalence_p < ALPHA:
        row["conclusion"] = "unchanged"
        row["reason"] = (
            f"equivalence p {_p(equivalence_p)} < {ALPHA:g}: the difference lies within "
            f"±{row['margin']:g}"
        )
        return
    row["conclusion"] = "inconclusive"
    parts = [f"not moved ({row['family']} family Holm p {_p(family_p)})"]
    if row.get("margin") is None:
        proposal = (
            f" (a margin of at least {_num(row['mdeInUnits'])}, the smallest change this row "
            "could detect, would make the claim testable)"
            if row.get("mdeInUnits")
            else ""
        )
        parts.append(f"no equivalence margin, so it cannot be called unchanged{proposal}")
    else:
        parts.append(f"not shown within ±{row['margin']:g} (equivalence p {_p(equivalence_p)})")
    if mde is not None and row["mdeInUnits"] is not None:
        unit = "SDs of the paired differences" if row.get("paired") else "pooled SDs"
        parts.append(
            f"detectable only from a change of {_num(row['mdeInUnits'])} ({mde:.2g} {unit})"
        )
    elif mde is not None:
        parts.append(f"detectable only from {mde:.2g} SDs")
    elif mde_note:
        parts.append(mde_note)
    row["reason"] = "; ".join(parts)


def _p(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2g}" if value >= 0.001 else f"{value:.1e}"


# --------------------------------------------------------------------------- achieved grade


INSUFFICIENT = "insufficient"
"""The achieved grade of an audit whose base, or every perturbed condition, kept no usable run:
nothing can be compared."""


def _loss_class(run: Mapping[str, Any]) -> str:
    failure = run.get("failure")
    if isinstance(failure, Mapping) and failure.get("type"):
        return str(failure["type"])
    why = str(run.get("excludedBecause") or "excluded")
    return why.split(";")[0].split(" (")[0]


def lost_runs(
    condition_rows: Sequence[Mapping[str, Any]], run_rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per condition that lost runs (failed, missing or excluded): how many it ran, how many it
    kept and what it lost them to (failure type or exclusion reason → count), in plan order."""
    out = []
    for cond in condition_rows:
        cid = cond["id"]
        lost = [r for r in run_rows if r["condition"] == cid and not r["used"]]
        if not lost:
            continue
        classes: dict[str, int] = {}
        for run in lost:
            key = _loss_class(run)
            classes[key] = classes.get(key, 0) + 1
        out.append(
            {
                "condition": cid,
                "label": cond.get("label") or cid,
                "runs": cond["runs"],
                "usable": cond["runs"] - len(lost),
                "lostTo": dict(sorted(classes.items())),
            }
        )
    return out


def lost_reason(entry: Mapping[str, Any]) -> str:
    """The grade reason of a condition that lost runs (an entry of `lost_runs`)."""
    to = ", ".join(f"{n} {what}" for what, n in entry["lostTo"].items())
    return f"{entry['label']} kept {entry['usable']} of {entry['runs']} runs (lost: {to})."


def achieved_grade(
    design: Mapping[str, Any],
    condition_rows: Sequence[Mapping[str, Any]],
    lost: Sequence[Mapping[str, Any]],
    regrade: Any,
) -> dict[str, Any]:
    """The grade the runs achieved: the design's rule applied to the usable runs of the
    thinnest condition that kept any (`regrade(n)` grades a design of n replications);
    `insufficient` when a base, or every perturbed condition, kept none. Its reasons name the
    conditions that lost runs and to what; a condition that lost every run compares nothing."""
    usable = {c["id"]: c["runs"] - c["excluded"] for c in condition_rows}
    if not usable:
        return {"grade": INSUFFICIENT, "reasons": ["the audit has no conditions"], "usableMin": 0}
    perturbed = [c["id"] for c in condition_rows if not c.get("isBase")]
    empty_base = any(usable[c["id"]] == 0 for c in condition_rows if c.get("isBase"))
    all_lost = bool(perturbed) and all(usable[cid] == 0 for cid in perturbed)
    kept = {cid: n for cid, n in usable.items() if n > 0}
    thinnest = min(kept, key=lambda cid: kept[cid]) if kept else next(iter(usable))
    least = 0 if empty_base or all_lost or not kept else kept[thinnest]
    reasons = [lost_reason(entry) for entry in lost]
    if least == 0:
        which = "the base" if empty_base else "any perturbed condition"
        return {
            "grade": INSUFFICIENT,
            "reasons": [f"No usable run in {which}: nothing can be compared.", *reasons],
            "usableMin": 0,
        }
    grade = regrade(least)
    if least == min((c["runs"] for c in condition_rows), default=0) and not lost:
        return {"grade": grade.grade, "reasons": list(grade.reasons), "usableMin": least}
    lead = (
        f"Graded on {least} usable runs, the fewest a condition with usable runs kept ({thinnest})."
    )
    empty = [c.get("label") or c["id"] for c in condition_rows if usable[c["id"]] == 0]
    if empty:
        lead += f" {_join(empty)} kept none and compare{'s' if len(empty) == 1 else ''} nothing."
    return {
        "grade": grade.grade,
        "reasons": [lead, *reasons, *grade.reasons],
        "usableMin": least,
    }


# --------------------------------------------------------------------------- the headline


def _join(parts: Sequence[str]) -> str:
    parts = list(parts)
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _num(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–" if value is None else str(value)
    number = float(value)
    if number == 0:
        return "0"
    return f"{number:.3g}".replace("-", "−")


def _signed(value: float) -> str:
    text = _num(abs(value))
    return ("+" if value > 0 else "−" if value < 0 else "") + text


def _base_sentence(
    metrics: Sequence[str], condition_rows: Sequence[Mapping[str, Any]], lost: Sequence[Any]
) -> str:
    lost_by_id = {e["condition"]: e for e in lost}
    parts = []
    bases = [c for c in condition_rows if c.get("isBase")]
    for cond in bases:
        where = "the base" if len(bases) == 1 else str(cond["id"])
        usable = cond["runs"] - cond["excluded"]
        if usable == 0:
            loss = lost_by_id.get(cond["id"], {}).get("lostTo") or {}
            to = ", ".join(f"{what}" for what in loss) or "no run"
            parts.append(f"{where} has no usable run ({cond['runs']} lost: {to})")
            continue
        values = [
            f"{m} {'is ' if i == 0 else ''}{_num(cond['means'].get(m))}"
            for i, m in enumerate(m for m in metrics if cond["means"].get(m) is not None)
        ]
        missing = [m for m in metrics if cond["means"].get(m) is None]
        text = f"at {where}, " + (_join(values) if values else "no metric has a value")
        if missing:
            text += f" ({_join(missing)} without a finite value)"
        text += f" (mean of {usable} usable run{'s' if usable != 1 else ''})"
        parts.append(text)
    if not parts:
        return "The audit has no base condition."
    sentence = "; ".join(parts)
    return sentence[:1].upper() + sentence[1:] + "."


def _axis_names(rows: Sequence[Mapping[str, Any]], moved: Mapping[str, Sequence[str]]) -> str:
    names: list[str] = []
    for row in rows:
        for axis in moved.get(str(row["condition"]), ()):
            if axis not in names:
                names.append(axis)
    return _join(names) if names else "the base's own settings"


def _metric_clause(
    metric: str,
    rows: Sequence[Mapping[str, Any]],
    moved: Mapping[str, Sequence[str]],
    labels: Mapping[str, str],
    note: str | None,
) -> tuple[str, dict[str, Any]]:
    by = {c: [r for r in rows if r.get("conclusion") == c] for c in CONCLUSIONS}
    tested = [r for r in rows if r.get("tested")]
    detail: dict[str, Any] = {
        "metric": metric,
        "family": rows[0].get("family") if rows else None,
        "tested": len(tested),
        **{c: [str(r["condition"]) for r in by[c]] for c in CONCLUSIONS},
    }
    if not tested:
        why = note or (rows[0].get("reason") if rows else None) or "nothing to test"
        detail["largest"] = None
        detail["detectable"] = None
        detail["margin"] = None
        detail["suggestedMargin"] = None
        return f"could not be tested ({why})", detail
    parts = []
    if by["moved"]:
        largest = max(by["moved"], key=lambda r: abs(float(r.get("diff") or 0.0)))
        detail["largest"] = {"condition": largest["condition"], "diff": largest.get("diff")}
        parts.append(
            f"moved under {_axis_names(by['moved'], moved)} ({len(by['moved'])} of "
            f"{len(tested)} tested; largest {_signed(float(largest.get('diff') or 0.0))} at "
            f"{labels.get(str(largest['condition']), largest['condition'])})"
        )
    else:
        detail["largest"] = None
    if by["unchanged"]:
        margin = by["unchanged"][0].get("margin")
        every = "every one" if len(by["unchanged"]) == len(tested) else str(len(by["unchanged"]))
        parts.append(f"stayed within ±{_num(margin)} under {every} of {len(tested)} tested")
    if by["inconclusive"]:
        mdes = [
            float(r["mdeInUnits"]) for r in by["inconclusive"] if r.get("mdeInUnits") is not None
        ]
        detail["detectable"] = min(mdes) if mdes else None
        count = (
            f"all {len(tested)} tested"
            if len(by["inconclusive"]) == len(tested)
            else f"{len(by['inconclusive'])} of {len(tested)} tested"
        )
        blind = sum(1 for r in by["inconclusive"] if r.get("mde") is None)
        if not mdes:
            reach = "no effect of any size could reach significance with these runs"
        else:
            reach = f"only a change of {_num(min(mdes))} or more was detectable"
            if blind:
                reach += (
                    f"; {blind} could not reach significance at any effect size with these runs"
                )
        parts.append(f"was inconclusive under {count} ({reach})")
    else:
        detail["detectable"] = None
    margins = [r.get("margin") for r in tested if r.get("margin") is not None]
    scales = [float(r["mdeInUnits"]) for r in tested if r.get("mdeInUnits") is not None]
    detail["margin"] = margins[0] if margins else None
    # Without a margin, the smallest one every tested row could resolve: its largest MDE.
    detail["suggestedMargin"] = None if margins or not scales else max(scales)
    clause = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1]
    return clause, detail


def verdict(
    metrics: Sequence[str],
    condition_rows: Sequence[Mapping[str, Any]],
    tests: Mapping[str, Sequence[Mapping[str, Any]]],
    notes: Mapping[str, str],
    moved: Mapping[str, Sequence[str]],
    lost: Sequence[Mapping[str, Any]],
    testbed: Any = None,
    main_effects: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, Any]:
    """audit.json's `verdict`: a headline of two sentences — the base value of every metric,
    then per metric what moved (under which axes, by how much), what stayed within its margin,
    what was inconclusive (with what could have been detected), and the conditions lost to
    failures — and the per-metric details a table shows under it. Every metric is named. An
    agent-testbed audit (`testbed`, its summary) leads the second sentence with its verdict
    counts per criterion. A full factorial audit (`main_effects`) states, per metric, the main
    effects whose interval excludes 0: a cell against the base moves several axes at once, a main
    effect one."""
    first = _base_sentence(metrics, condition_rows, lost)
    labels = {str(c["id"]): str(c.get("label") or c["id"]) for c in condition_rows}
    said: dict[str, list[str]] = {}
    details: list[dict[str, Any]] = []
    lead = testbed_clause(testbed)
    for metric in metrics:
        clause, detail = _metric_clause(
            metric, tests.get(metric, []), moved, labels, notes.get(metric)
        )
        clause += _main_effects_clause((main_effects or {}).get(metric) or [])
        named = f"{metric} (secondary)" if detail["family"] == "secondary" else metric
        said.setdefault(clause, []).append(named)
        details.append(detail)
    # Metrics that concluded alike share one clause: every one is still named.
    clauses = [
        f"{_join(names)} {clause if len(names) == 1 else _plural_verbs(clause)}"
        for clause, names in said.items()
    ]
    if not metrics:
        clauses.append("the audit compares no metric")
    perturbed = [e for e in lost if not _is_base(condition_rows, e["condition"])]
    if perturbed:
        described = [
            f"{e['label']} ({e['runs'] - e['usable']} of {e['runs']}: "
            + ", ".join(e["lostTo"])
            + ")"
            for e in perturbed
        ]
        clauses.append("runs were lost in " + _join(described))
    second = "; ".join([lead, *clauses] if lead else clauses)
    if not any(second.startswith(m) for m in metrics):
        second = second[:1].upper() + second[1:]
    headline = f"{first} {second}."
    return {"headline": headline, "details": details}


def _main_effects_clause(rows: Sequence[Mapping[str, Any]]) -> str:
    """`; main effects of homophily 0.3 (vs 0.8) −0.552 and …`, for the main effects whose
    interval excludes 0; empty when there are none."""
    clear = []
    for row in rows:
        ci = row.get("ci95")
        diff = row.get("diff")
        if not isinstance(ci, list) or len(ci) != 2 or not isinstance(diff, (int, float)):
            continue
        lo, hi = (float(v) if isinstance(v, (int, float)) else math.nan for v in ci)
        if lo > 0 or hi < 0:
            model = f" @ {row['model']}" if row.get("model") else ""
            clear.append(
                f"{row['axis']} {_level(row.get('level'))} (vs {_level(row.get('reference'))})"
                f"{model} {_signed(float(diff))}"
            )
    if not clear:
        return ", with no main effect whose interval excludes 0" if rows else ""
    return f", with main effect{'s' if len(clear) > 1 else ''} of {_join(clear)}"


def _level(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _plural_verbs(clause: str) -> str:
    return clause.replace("was inconclusive", "were inconclusive")


def testbed_clause(table: Any) -> str | None:
    """An agent-testbed audit's verdict counts per criterion over all its conditions (failures
    among decided runs, criteria never failed or never decided, exclusions); None for other
    audits. The headline leads its second sentence with it."""
    if not isinstance(table, Mapping):
        return None
    totals = table.get("totals") or {}
    criteria = [str(c) for c in table.get("criteria") or []]
    if not criteria:
        return "the agent testbed judged no criterion"
    failing = sorted(
        (c for c in criteria if _int((totals.get(c) or {}).get("fail"))),
        key=lambda c: (-_int(totals[c].get("fail")), c),
    )
    clean = [
        c for c in criteria if c not in failing and _int((totals.get(c) or {}).get("decided")) > 0
    ]
    undecided = [c for c in criteria if c not in failing and c not in clean]
    parts = []
    # Every failing criterion is named, most failures first.
    for i, c in enumerate(failing):
        fail, decided = _int(totals[c].get("fail")), _int(totals[c].get("decided"))
        lead = f"{c} failed in " if i == 0 else f"{c} in "
        parts.append(f"{lead}{fail} of {decided}{' decided runs' if i == 0 else ''}")
    clause = "across the testbed's conditions, " + (
        _join(parts) if parts else "no criterion failed in any decided run"
    )
    if parts and clean:
        clause += f"; {_join(clean)} never failed"
    if undecided:
        clause += f"; {_join(undecided)} {'was' if len(undecided) == 1 else 'were'} never decided"
    extra = []
    if _int(table.get("undecidable")):
        extra.append(f"{_plural(_int(table.get('undecidable')), 'verdict')} undecidable")
    if _int(table.get("validityExcluded")):
        runs = _plural(_int(table.get("validityExcluded")), "run")
        extra.append(f"{runs} excluded because their conditions did not hold")
    if _int(table.get("evidenceExcluded")):
        runs = _plural(_int(table.get("evidenceExcluded")), "run")
        extra.append(f"{runs} left out for incomplete evidence")
    return "; ".join([clause, *extra])


def _int(value: Any) -> int:
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return int(number) if number is not None and math.isfinite(number) else 0


def _plural(n: int, singular: str) -> str:
    return f"{n} {singular if n == 1 else singular + 's'}"


def _is_base(condition_rows: Sequence[Mapping[str, Any]], cid: str) -> bool:
    return any(c["id"] == cid and c.get("isBase") for c in condition_rows)
