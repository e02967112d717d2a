"""What an audit concludes, read from audit.json alone: which rows are tests, which moved
significantly, how sensitive each axis is, and the one sentence a reviewer reads first.

Pure functions of the audit (the dict `analyse` returns or audit.json read back; schema 1 or 2),
no statistics computed here: the same audit gives the same sentence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.conclusions import testbed_clause
from ..core.canonical import canonical_json, parse_number
from ..core.overrides import lookup

ALPHA = 0.05
"""A tested row moved significantly when its Holm-adjusted p is below this."""
MAX_NAMED = 3
"""The headline names at most this many metrics (or testbed criteria) one by one."""
SMALL_SPREAD = "|d| from near-zero spread"
SEVERAL_AXES = "cells moving several axes"


def as_float(value: Any) -> float | None:
    """A number from audit.json as a float: None stays None, "inf"/"-inf"/"nan" become floats,
    anything that is not a number becomes None."""
    value = parse_number(value)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _count(value: Any) -> int:
    number = as_float(value)
    return int(number) if number is not None and math.isfinite(number) else 0


# --------------------------------------------------------------------------- rows


def identical_ids(audit: Mapping[str, Any]) -> set[str]:
    """The perturbed conditions whose scenario is the base's: run, never tested."""
    return {
        str(c.get("id"))
        for c in audit.get("conditions") or []
        if c.get("identicalToBase") and not c.get("isBase")
    }


def is_tested(row: Mapping[str, Any], identical: set[str]) -> bool:
    """Whether a test row has a p value in its metric's Holm family. Schema 2 says so in
    `tested`; schema 1 rows are tests when they have a p value and their condition is not
    identical to the base."""
    if "tested" in row:
        return row.get("tested") is True
    return row.get("mwuP") is not None and str(row.get("condition")) not in identical


def is_significant(row: Mapping[str, Any], identical: set[str]) -> bool:
    p = as_float(row.get("holmP"))
    return is_tested(row, identical) and p is not None and p < ALPHA


def small_spread(row: Mapping[str, Any]) -> bool:
    """Whether a row's |d| comes from near-zero spread (schema 2's `smallSpread`)."""
    return row.get("smallSpread") is True


def metrics_of(audit: Mapping[str, Any]) -> list[str]:
    return [str(m) for m in audit.get("metrics") or []]


def tested_rows(audit: Mapping[str, Any], metric: str) -> list[Mapping[str, Any]]:
    identical = identical_ids(audit)
    rows = (audit.get("tests") or {}).get(metric) or []
    return [r for r in rows if is_tested(r, identical)]


def moved_axes(audit: Mapping[str, Any], condition: Mapping[str, Any]) -> list[str]:
    """The axes a condition moves away from the base: its one axis in a one-at-a-time design,
    and in a factorial cell the axes whose level differs from the base scenario's value."""
    levels = condition.get("levels") or {}
    if len(levels) <= 1:
        return [str(a) for a in levels]
    plan = audit.get("plan") or {}
    base = plan.get("base") or {}
    targets = {str(a.get("id")): str(a.get("target") or "") for a in plan.get("axes") or []}
    moved = []
    for axis, value in levels.items():
        found, base_value = lookup(base, targets.get(str(axis), ""))
        if not found or canonical_json(value) != canonical_json(base_value):
            moved.append(str(axis))
    return moved


# --------------------------------------------------------------------------- sensitivity


@dataclass(frozen=True)
class Effect:
    """One sensitivity measure of an axis: the largest |d|, on which metric and condition."""

    max_abs_d: float
    metric: str | None
    condition: str | None
    small_spread: bool = False  # the |d| comes from near-zero spread


@dataclass(frozen=True)
class Sensitivity:
    """One axis of the sensitivity ranking (audit.json `sensitivity`, either schema)."""

    axis: str
    code: str | None
    rank: int | None
    ranked_by: str | None  # "isolated" | "anyCell" | "mainEffect" | None
    isolated: Effect | None
    any_cell: Effect | None
    main_effect: Effect | None = None
    """A full factorial's largest |standardized main effect| (its `condition` is None: a main
    effect averages over the cells of the grid)."""

    @property
    def ranking_effect(self) -> Effect | None:
        """The measure the axis is ranked by, if any."""
        if self.ranked_by == "isolated":
            return self.isolated
        if self.ranked_by == "anyCell":
            return self.any_cell
        if self.ranked_by == "mainEffect":
            return self.main_effect
        return None


def _effect(value: Any) -> Effect | None:
    if not isinstance(value, Mapping):
        return None
    d = as_float(value.get("maxAbsD"))
    if d is None or math.isnan(d):
        return None
    metric, condition = value.get("metric"), value.get("condition")
    return Effect(
        abs(d),
        None if metric is None else str(metric),
        None if condition is None else str(condition),
        value.get("smallSpread") is True,
    )


def _entry(raw: Mapping[str, Any]) -> Sensitivity:
    code = raw.get("code")
    axis, code_text = str(raw.get("axis")), None if code in (None, "") else str(code)
    if "anyCell" in raw or isinstance(raw.get("isolated"), Mapping):
        rank = raw.get("rank")
        ranked_by = raw.get("rankedBy")
        return Sensitivity(
            axis,
            code_text,
            int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None,
            str(ranked_by) if ranked_by in ("isolated", "anyCell", "mainEffect") else None,
            _effect(raw.get("isolated")),
            _effect(raw.get("anyCell")),
            _effect(raw.get("mainEffect")),
        )
    # Schema 1: one measure, `isolated` true when it came from cells moving this axis alone.
    effect = _effect(raw)
    alone = raw.get("isolated") is not False
    rank = raw.get("rank") if effect is not None else None
    return Sensitivity(
        axis,
        code_text,
        int(rank) if isinstance(rank, int) and not isinstance(rank, bool) else None,
        None if effect is None else ("isolated" if alone else "anyCell"),
        effect if alone else None,
        None if alone else effect,
    )


def sensitivity(audit: Mapping[str, Any]) -> list[Sensitivity]:
    """The axes ranked first (by rank), then the unranked ones in the order audit.json lists."""
    entries = [_entry(e) for e in audit.get("sensitivity") or [] if isinstance(e, Mapping)]
    ranked = sorted((e for e in entries if e.rank is not None), key=lambda e: e.rank or 0)
    return ranked + [e for e in entries if e.rank is None]


# --------------------------------------------------------------------------- the headline


def _join(parts: Sequence[str], conjunction: str = "and") -> str:
    if len(parts) <= 2:
        return f" {conjunction} ".join(parts)
    return ", ".join(parts[:-1]) + f" {conjunction} " + parts[-1]


def _plural(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _axis_words(audit: Mapping[str, Any]) -> dict[str, str]:
    """Axis id → how the headline names it: its TRAILS dimension, else its id."""
    words = {}
    for axis in (audit.get("plan") or {}).get("axes") or []:
        dimension = axis.get("dimension")
        words[str(axis.get("id"))] = str(dimension) if dimension else str(axis.get("id"))
    return words


@dataclass(frozen=True)
class _Finding:
    metric: str
    tested: int
    significant: int
    groups: list[tuple[str, int]]  # what the significant conditions moved, in row order
    small_spread: int  # significant rows whose |d| comes from near-zero spread


def _findings(audit: Mapping[str, Any]) -> list[_Finding]:
    identical = identical_ids(audit)
    conditions = {str(c.get("id")): c for c in audit.get("conditions") or []}
    words = _axis_words(audit)
    out = []
    for metric in metrics_of(audit):
        rows = tested_rows(audit, metric)
        hits = [r for r in rows if is_significant(r, identical)]
        groups: dict[str, int] = {}
        for row in hits:
            moved = moved_axes(audit, conditions.get(str(row.get("condition"))) or {})
            group = words.get(moved[0], moved[0]) if len(moved) == 1 else SEVERAL_AXES
            groups[group] = groups.get(group, 0) + 1
        out.append(
            _Finding(
                metric,
                len(rows),
                len(hits),
                list(groups.items()),
                sum(1 for r in hits if small_spread(r)),
            )
        )
    return out


def _which(finding: _Finding) -> str:
    """` (both linguistic framing; 1 with |d| from near-zero spread)` or empty."""
    if not finding.groups:
        return ""
    if len(finding.groups) == 1:
        lead = {1: "", 2: "both "}.get(finding.significant, "all ")
        what = lead + finding.groups[0][0]
    else:
        what = ", ".join(f"{n} {group}" for group, n in finding.groups)
    if finding.small_spread:
        spread = (
            f"with {SMALL_SPREAD}"
            if finding.small_spread == finding.significant == 1
            else f"{finding.small_spread} with {SMALL_SPREAD}"
        )
        what += f"; {spread}"
    return f" ({what})"


def _significance(audit: Mapping[str, Any], findings: Sequence[_Finding]) -> str:
    tested = [f for f in findings if f.tested]
    if not tested:
        return _nothing_tested(audit)
    untested = [f.metric for f in findings if not f.tested]
    if not any(f.significant for f in tested):
        counts = {f.tested for f in tested}
        of = f"any of the {tested[0].tested}" if len(counts) == 1 else "any of their"
        if len(tested) == 1:
            clause = (
                f"{tested[0].metric} did not move significantly (Holm p < {ALPHA:g}) under {of} "
                f"tested {'perturbation' if tested[0].tested == 1 else 'perturbations'}"
            )
        else:
            which = (
                f"no metric ({_join([f.metric for f in tested])})"
                if len(tested) <= MAX_NAMED
                else f"none of the {len(tested)} metrics"
            )
            clause = (
                f"{which} moved significantly (Holm p < {ALPHA:g}) under {of} tested perturbations"
            )
    else:
        significant = [f for f in tested if f.significant]
        top = sorted(significant, key=lambda f: -f.significant)[:MAX_NAMED]
        named = [f for f in significant if f in top]  # plan order among the named ones
        parts = []
        for i, f in enumerate(named):
            count = f"{f.significant} of {f.tested}"
            if i == 0:
                noun = "perturbation" if f.tested == 1 else "perturbations"
                parts.append(
                    f"{f.metric} moved significantly (Holm p < {ALPHA:g}) under {count} "
                    f"tested {noun}{_which(f)}"
                )
            else:
                parts.append(f"{f.metric} under {count}{_which(f)}")
        more = len(significant) - len(named)
        if more:
            parts.append(f"{more} more {'metric' if more == 1 else 'metrics'} under at least one")
        clause = _join(parts)
        still = [f.metric for f in tested if not f.significant]
        if still:
            clause += (
                f"; {_join(still)} did not"
                if len(still) <= MAX_NAMED
                else f"; the other {len(still)} metrics did not"
            )
    if untested:
        clause += f"; {_join(untested)} could not be tested"
    return clause


def _nothing_tested(audit: Mapping[str, Any]) -> str:
    conditions = audit.get("conditions") or []
    perturbed = [c for c in conditions if not c.get("isBase")]
    if not metrics_of(audit):
        return "the audit compares no metrics, so nothing was tested"
    if not perturbed:
        return "the plan perturbs nothing: only the base ran, so nothing was tested"
    if all(c.get("identicalToBase") for c in perturbed):
        return (
            f"every perturbed condition ({len(perturbed)}) is identical to the base, "
            "so nothing was tested"
        )
    notes = audit.get("notes") or {}
    note = next((str(notes[m]) for m in metrics_of(audit) if notes.get(m)), None)
    why = f": {note}" if note else ""
    return f"no perturbed condition could be tested{why}"


def _direction(audit: Mapping[str, Any]) -> str | None:
    table = audit.get("directionConsistency") or {}
    rows = [(m, table[m]) for m in metrics_of(audit) if isinstance(table.get(m), Mapping)]
    rows = [(m, r) for m, r in rows if _count(r.get("total")) > 0]
    if not rows:
        return None if _hypothesised(audit) else "no direction was hypothesised"
    parts = []
    for i, (metric, row) in enumerate(rows[:MAX_NAMED]):
        consistent, total = _count(row.get("consistent")), _count(row.get("total"))
        noun = " tested conditions" if i == 0 else ""
        suffix = f" for {metric}" if len(metrics_of(audit)) > 1 else ""
        parts.append(f"{consistent} of {total}{noun}{suffix}")
    if len(rows) > MAX_NAMED:
        parts.append(f"{len(rows) - MAX_NAMED} more metrics in the report")
    return f"the expected direction held in {_join(parts)}"


def _hypothesised(audit: Mapping[str, Any]) -> bool:
    hypothesis = (audit.get("plan") or {}).get("hypothesis") or {}
    return any(hypothesis.get(k) for k in ("outcomes", "axes", "levels"))


def _identical(audit: Mapping[str, Any]) -> str | None:
    n = len(identical_ids(audit))
    if not n or not metrics_of(audit):
        return None
    perturbed = sum(1 for c in audit.get("conditions") or [] if not c.get("isBase"))
    if n == perturbed:
        return None  # already said by the significance clause
    return f"{_plural(n, 'condition')} identical to the base, not tested"


def _testbed(audit: Mapping[str, Any]) -> str | None:
    """Verdict counts per criterion over all conditions (bounds stay per condition)."""
    return testbed_clause(audit.get("testbed"))


def headline(audit: Mapping[str, Any]) -> str:
    """One sentence on what the audit found, e.g. "cooperationRate moved significantly (Holm p <
    0.05) under 2 of 14 tested perturbations (both linguistic framing); the expected direction
    held in 7 of 12 tested conditions; 2 conditions identical to the base, not tested."

    Only tested rows count (rows of conditions identical to the base are not perturbations
    tested); effects whose |d| comes from near-zero spread are named; an agent-testbed audit
    leads with its verdict counts.
    """
    findings = _findings(audit)
    clauses = [
        _testbed(audit),
        _significance(audit, findings),
        _direction(audit) if any(f.tested for f in findings) else None,
        _identical(audit),
    ]
    sentence = "; ".join(c for c in clauses if c)
    return _sentence_case(sentence) + "."


def _sentence_case(text: str) -> str:
    """Capitalise the first word unless it is a name from the plan (a metric or criterion)."""
    first = text.split(" ", 1)[0]
    own_words = {"no", "none", "the", "every", "across"}
    return text[:1].upper() + text[1:] if first in own_words else text


def decisions(audit: Mapping[str, Any]) -> str:
    """Who made the simulated decisions, as every page states it: from the runs' scenarios
    (provenance), else the providers and models their manifests name."""
    prov = audit.get("provenance") or {}
    named = [str(d) for d in prov.get("decisions") or [] if d]
    if not named:
        providers = [str(p) for p in prov.get("providers") or []]
        models = [str(m) for m in prov.get("models") or []]
        named = [
            "the offline stand-in (not a language model)" if p == "offline" else f"provider {p}"
            for p in providers
        ]
        if models and any(p != "offline" for p in providers):
            named.append("models " + ", ".join(models))
    return "; ".join(named) if named else "not recorded (no run left a scenario or manifest)"


def small_spread_rows(audit: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(metric, row) for every tested row whose |d| comes from near-zero spread."""
    return [
        (metric, row)
        for metric in metrics_of(audit)
        for row in tested_rows(audit, metric)
        if small_spread(row)
    ]
