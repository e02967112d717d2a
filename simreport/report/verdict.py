"""What an audit concludes, read from audit.json alone: which rows are tests, which moved
significantly, how sensitive each axis is, and the one sentence a reviewer reads first.

Pure functions of the audit's model (`AuditDoc`), no statistics computed here: the same audit
gives the same sentence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..analysis.audit_document import (
    AuditDoc,
    AxisMeasure,
    ComparisonRow,
    ConditionRow,
    MainEffectMeasure,
    SensitivityEntry,
)
from ..analysis.conclusions import testbed_clause
from ..analysis.provenance import OFFLINE_STAND_IN
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


# --------------------------------------------------------------------------- rows


def identical_ids(audit: AuditDoc) -> set[str]:
    """The perturbed conditions whose scenario is the base's: run, never tested."""
    return {c.id for c in audit.conditions if c.identical_to_base and not c.is_base}


def is_significant(row: ComparisonRow) -> bool:
    """A tested row whose Holm-adjusted p is below ALPHA."""
    return row.tested and row.holm_p is not None and row.holm_p < ALPHA


def tested_rows(audit: AuditDoc, metric: str) -> list[ComparisonRow]:
    """The rows of `metric` that are a test, in the audit's order."""
    return [r for r in audit.tests.get(metric, []) if r.tested]


def _moved_axes(
    condition: ConditionRow | None, targets: Mapping[str, str], base: Mapping[str, Any]
) -> list[str]:
    """The axes a condition moves away from the base: its one axis in a one-at-a-time design,
    and in a factorial cell the axes whose level differs from the base scenario's value
    (`targets`: axis id → the setting it targets)."""
    levels = condition.levels if condition is not None else {}
    if len(levels) <= 1:
        return list(levels)
    moved = []
    for axis, value in levels.items():
        found, base_value = lookup(base, targets.get(axis, ""))
        if not found or canonical_json(value) != canonical_json(base_value):
            moved.append(axis)
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
    """One axis of the sensitivity ranking (audit.json `sensitivity`)."""

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


def _effect(measure: AxisMeasure | MainEffectMeasure | None) -> Effect | None:
    if measure is None or math.isnan(measure.max_abs_d):
        return None
    if isinstance(measure, MainEffectMeasure):
        # A main effect averages over the cells of the grid: no one condition carries it.
        return Effect(abs(measure.max_abs_d), measure.metric, None)
    return Effect(abs(measure.max_abs_d), measure.metric, measure.condition, measure.small_spread)


def _entry(entry: SensitivityEntry) -> Sensitivity:
    return Sensitivity(
        entry.axis,
        entry.code or None,
        entry.rank,
        entry.ranked_by,
        _effect(entry.isolated),
        _effect(entry.any_cell),
        _effect(entry.main_effect),
    )


def sensitivity(audit: AuditDoc) -> list[Sensitivity]:
    """The axes ranked first (by rank), then the unranked ones in the order audit.json lists."""
    entries = [_entry(e) for e in audit.sensitivity]
    ranked = sorted((e for e in entries if e.rank is not None), key=lambda e: e.rank or 0)
    return ranked + [e for e in entries if e.rank is None]


# --------------------------------------------------------------------------- the headline


def _join(parts: Sequence[str], conjunction: str = "and") -> str:
    if len(parts) <= 2:
        return f" {conjunction} ".join(parts)
    return ", ".join(parts[:-1]) + f" {conjunction} " + parts[-1]


def _plural(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _axis_words(audit: AuditDoc) -> dict[str, str]:
    """Axis id → how the headline names it: its TRAILS dimension, else its id."""
    return {axis.id: axis.dimension or axis.id for axis in audit.plan.axes}


@dataclass(frozen=True)
class _Finding:
    metric: str
    tested: int
    significant: int
    groups: list[tuple[str, int]]  # what the significant conditions moved, in row order
    small_spread: int  # significant rows whose |d| comes from near-zero spread


def _findings(audit: AuditDoc) -> list[_Finding]:
    conditions = {c.id: c for c in audit.conditions}
    words = _axis_words(audit)
    targets = {axis.id: axis.target for axis in audit.plan.axes}
    base = audit.plan.base_document()
    out = []
    for metric in audit.metrics:
        rows = tested_rows(audit, metric)
        hits = [r for r in rows if is_significant(r)]
        groups: dict[str, int] = {}
        for row in hits:
            moved = _moved_axes(conditions.get(row.condition), targets, base)
            group = words.get(moved[0], moved[0]) if len(moved) == 1 else SEVERAL_AXES
            groups[group] = groups.get(group, 0) + 1
        out.append(
            _Finding(
                metric,
                len(rows),
                len(hits),
                list(groups.items()),
                sum(1 for r in hits if r.small_spread),
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


def _significance(audit: AuditDoc, findings: Sequence[_Finding]) -> str:
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


def _nothing_tested(audit: AuditDoc) -> str:
    perturbed = [c for c in audit.conditions if not c.is_base]
    if not audit.metrics:
        return "the audit compares no metrics, so nothing was tested"
    if not perturbed:
        return "the plan perturbs nothing: only the base ran, so nothing was tested"
    if all(c.identical_to_base for c in perturbed):
        return (
            f"every perturbed condition ({len(perturbed)}) is identical to the base, "
            "so nothing was tested"
        )
    note = next((audit.notes[m] for m in audit.metrics if audit.notes.get(m)), None)
    why = f": {note}" if note else ""
    return f"no perturbed condition could be tested{why}"


def _direction(audit: AuditDoc) -> str | None:
    table = audit.direction_consistency
    rows = [(m, table[m]) for m in audit.metrics if m in table and table[m].total > 0]
    if not rows:
        return None if _hypothesised(audit) else "no direction was hypothesised"
    parts = []
    for i, (metric, row) in enumerate(rows[:MAX_NAMED]):
        noun = " tested conditions" if i == 0 else ""
        suffix = f" for {metric}" if len(audit.metrics) > 1 else ""
        parts.append(f"{row.consistent} of {row.total}{noun}{suffix}")
    if len(rows) > MAX_NAMED:
        parts.append(f"{len(rows) - MAX_NAMED} more metrics in the report")
    return f"the expected direction held in {_join(parts)}"


def _hypothesised(audit: AuditDoc) -> bool:
    hypothesis = audit.plan.hypothesis
    return hypothesis is not None and any((hypothesis.outcomes, hypothesis.axes, hypothesis.levels))


def _identical(audit: AuditDoc) -> str | None:
    n = len(identical_ids(audit))
    if not n or not audit.metrics:
        return None
    perturbed = sum(1 for c in audit.conditions if not c.is_base)
    if n == perturbed:
        return None  # already said by the significance clause
    return f"{_plural(n, 'condition')} identical to the base, not tested"


def _testbed(audit: AuditDoc) -> str | None:
    """Verdict counts per criterion over all conditions (bounds stay per condition)."""
    if audit.testbed is None:
        return None
    # The analysis words the clause from the section as audit.json holds it.
    return testbed_clause(audit.testbed.model_dump(mode="json", by_alias=True))


def headline(audit: AuditDoc) -> str:
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


def stated_headline(audit: AuditDoc) -> str:
    """The headline audit.json states, else (when it states none) the sentence `headline` reads
    from its rows."""
    return audit.verdict.headline or headline(audit)


def _sentence_case(text: str) -> str:
    """Capitalise the first word unless it is a name from the plan (a metric or criterion)."""
    first = text.split(" ", 1)[0]
    own_words = {"no", "none", "the", "every", "across"}
    return text[:1].upper() + text[1:] if first in own_words else text


def decisions(audit: AuditDoc) -> str:
    """Who made the simulated decisions, as every page states it: from the runs' scenarios
    (provenance), else the providers and models their manifests name."""
    provenance = audit.provenance
    named = [d for d in provenance.decisions if d]
    if not named:
        providers, models = provenance.providers, provenance.models
        named = [OFFLINE_STAND_IN if p == "offline" else f"provider {p}" for p in providers]
        if models and any(p != "offline" for p in providers):
            named.append("models " + ", ".join(models))
    return "; ".join(named) if named else "not recorded (no run left a scenario or manifest)"


def small_spread_rows(audit: AuditDoc) -> list[tuple[str, ComparisonRow]]:
    """(metric, row) for every tested row whose |d| comes from near-zero spread."""
    return [
        (metric, row)
        for metric in audit.metrics
        for row in tested_rows(audit, metric)
        if row.small_spread
    ]
