"""The evidence grade: a property of an audit's design, decided before any statistics run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MODERATE_MIN_REPLICATIONS = 10
MODERATE_MIN_LEVELS = 2
STRONG_MIN_REPLICATIONS = 30
STRONG_MIN_LEVELS = 3
STRONG_MIN_MODELS = 2
TRAILS_LEVELS = ("micro", "meso", "macro")
CLAIM_TYPES = ("exploratory", "mechanism", "policy")

GRADE_RULE = (
    "The evidence grade judges the design, not the results. It is weak when the plan has no "
    f"perturbation axes, fewer than {MODERATE_MIN_REPLICATIONS} replications per condition, or an "
    "axis with a single level. It is moderate with at least "
    f"{MODERATE_MIN_REPLICATIONS} replications and at least {MODERATE_MIN_LEVELS} levels on every "
    f"axis. It is strong with at least {STRONG_MIN_REPLICATIONS} replications, at least "
    f"{STRONG_MIN_LEVELS} levels on every axis and at least {STRONG_MIN_MODELS} models; a policy "
    "claim additionally needs axes at the micro, meso and macro levels."
)


@dataclass(frozen=True)
class Grade:
    """A grade and the sentences that explain it and name what the next grade would need."""

    grade: str
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"grade": self.grade, "reasons": list(self.reasons)}


def _plural(n: int, singular: str, plural: str | None = None) -> str:
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


def _axis_list(ids: Sequence[str]) -> str:
    quoted = [f"'{i}'" for i in ids]
    if len(quoted) == 1:
        return f"axis {quoted[0]}"
    return "axes " + ", ".join(quoted[:-1]) + f" and {quoted[-1]}"


def _sentence_start(text: str) -> str:
    # Not str.capitalize(): that would lowercase axis ids such as 'D1'.
    return text[:1].upper() + text[1:]


def _few_levels(axis_levels: Sequence[tuple[str, str, int]], minimum: int) -> list[str]:
    return [axis_id for axis_id, _, n in axis_levels if n < minimum]


def _moderate_blockers(replications: int, axis_levels: Sequence[tuple[str, str, int]]) -> list[str]:
    blockers: list[str] = []
    if not axis_levels:
        blockers.append(
            "The plan perturbs nothing (no axes); moderate needs at least one axis with "
            f"at least {MODERATE_MIN_LEVELS} levels."
        )
    if replications < MODERATE_MIN_REPLICATIONS:
        blockers.append(
            f"{_plural(replications, 'replication')} per condition; moderate needs at least "
            f"{MODERATE_MIN_REPLICATIONS}."
        )
    single = _few_levels(axis_levels, MODERATE_MIN_LEVELS)
    if single:
        verb = "has" if len(single) == 1 else "have"
        counts = {n for _, _, n in axis_levels if n < MODERATE_MIN_LEVELS}
        what = "a single level" if counts == {1} else f"fewer than {MODERATE_MIN_LEVELS} levels"
        blockers.append(
            f"{_sentence_start(_axis_list(single))} {verb} {what}; moderate needs at least "
            f"{MODERATE_MIN_LEVELS} levels on every axis."
        )
    return blockers


def _strong_blockers(
    replications: int,
    axis_levels: Sequence[tuple[str, str, int]],
    n_models: int,
    claim_type: str,
) -> list[str]:
    blockers: list[str] = []
    if replications < STRONG_MIN_REPLICATIONS:
        blockers.append(
            f"{_plural(replications, 'replication')} per condition; strong needs at least "
            f"{STRONG_MIN_REPLICATIONS}."
        )
    few = _few_levels(axis_levels, STRONG_MIN_LEVELS)
    if few:
        verb = "has" if len(few) == 1 else "have"
        blockers.append(
            f"{_sentence_start(_axis_list(few))} {verb} fewer than {STRONG_MIN_LEVELS} levels; "
            f"strong needs at least {STRONG_MIN_LEVELS} levels on every axis."
        )
    if n_models < STRONG_MIN_MODELS:
        have = "No models are listed" if n_models == 0 else f"Only {_plural(n_models, 'model')}"
        blockers.append(f"{have}; strong needs at least {STRONG_MIN_MODELS} models.")
    if claim_type == "policy":
        present = {level for _, level, _ in axis_levels}
        missing = [level for level in TRAILS_LEVELS if level not in present]
        if missing:
            blockers.append(
                f"A policy claim with no axis at the {' or '.join(missing)} level; strong needs "
                "axes at the micro, meso and macro levels."
            )
    return blockers


def _validate(
    replications: int,
    axis_levels: Sequence[tuple[str, str, int]],
    n_models: int,
    claim_type: str,
) -> None:
    if replications < 0:
        raise ValueError(f"replications must not be negative, got {replications}")
    if n_models < 0:
        raise ValueError(f"n_models must not be negative, got {n_models}")
    if claim_type not in CLAIM_TYPES:
        raise ValueError(f"claim_type must be one of {CLAIM_TYPES}, got {claim_type!r}")
    for axis_id, level, n in axis_levels:
        if level not in TRAILS_LEVELS:
            raise ValueError(
                f"axis {axis_id!r}: level must be one of {TRAILS_LEVELS}, got {level!r}"
            )
        if n < 0:
            raise ValueError(f"axis {axis_id!r}: number of levels must not be negative, got {n}")


def evidence_grade(
    *,
    replications: int,
    axis_levels: Sequence[tuple[str, str, int]],
    n_models: int,
    claim_type: str,
) -> Grade:
    """Grade a design from its replications, its axes (id, TRAILS level, number of levels),
    the number of models the plan lists (0 when none) and its claim type."""
    _validate(replications, axis_levels, n_models, claim_type)
    moderate_blockers = _moderate_blockers(replications, axis_levels)
    if moderate_blockers:
        return Grade("weak", tuple(moderate_blockers))
    strong_blockers = _strong_blockers(replications, axis_levels, n_models, claim_type)
    if strong_blockers:
        met = (
            f"Moderate: at least {MODERATE_MIN_REPLICATIONS} replications per condition and at "
            f"least {MODERATE_MIN_LEVELS} levels on every axis."
        )
        return Grade("moderate", (met, *strong_blockers))
    met = (
        f"Strong: {_plural(replications, 'replication')} per condition, at least "
        f"{STRONG_MIN_LEVELS} levels on every axis and {_plural(n_models, 'model')}"
    )
    if claim_type == "policy":
        met += ", with axes at the micro, meso and macro levels"
    return Grade("strong", (met + ".",))
