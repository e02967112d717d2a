"""The user simulator's quality per condition: audit.json's `userQuality` section.

A pure function of the conditions and each run's user-quality.json: it sums the four per-run
checks and measures diversity across a condition's replications, flagging a batch that falls
short of its thresholds. The design: docs/statistics.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

NOTE = (
    "User-simulator quality is measured on each run's records, never on the agent's success: "
    "persona consistency per message (a fact or phrase that contradicts the persona marks the run "
    "for review), reaction-rule compliance per trigger (below its threshold the run is violated), "
    "visibility per disclosure (a fact disclosed against the rules or outside the user's "
    "knowledge violates the run), termination per run (stopping without the rules' reason leaves "
    "its validity unchecked) and, per condition, diversity across replications."
)


class UserQualityRun(NamedTuple):
    condition: str
    quality: Mapping[str, Any] | None
    """The run's user-quality.json, when it has one."""


def _share(good: int, total: int) -> float | None:
    return good / total if total else None


def summarise_user_quality(
    conditions: Sequence[Mapping[str, Any]], runs: Sequence[UserQualityRun]
) -> dict[str, Any] | None:
    """audit.json's `userQuality`, or None when no run has a quality-control document."""
    if not any(run.quality is not None for run in runs):
        return None
    rows: list[dict[str, Any]] = []
    for cond in conditions:
        cid = str(cond["id"])
        docs = [r.quality for r in runs if r.condition == cid and r.quality is not None]
        rows.append(_condition_row(cid, docs, sum(1 for r in runs if r.condition == cid)))
    return {"conditions": rows, "note": NOTE}


def _condition_row(cid: str, docs: Sequence[Mapping[str, Any]], runs: int) -> dict[str, Any]:
    messages = consistent = triggers = compliant = disclosures = violations = 0
    review = reaction_failed = visibility_failed = 0
    ended = {"pass": 0, "fail": 0, "not_applicable": 0}
    for doc in docs:
        checks = doc.get("checks") or {}
        persona = checks.get("personaConsistency") or {}
        messages += int(persona.get("messages") or 0)
        consistent += int(persona.get("consistent") or 0)
        review += persona.get("status") == "review"
        reaction = checks.get("reactionCompliance") or {}
        triggers += int(reaction.get("triggers") or 0)
        compliant += int(reaction.get("compliant") or 0)
        reaction_failed += reaction.get("status") == "fail"
        seen = checks.get("visibility") or {}
        disclosures += int(seen.get("disclosures") or 0)
        violations += len(seen.get("violations") or [])
        visibility_failed += seen.get("status") == "fail"
        status = str((checks.get("termination") or {}).get("status"))
        ended[status if status in ended else "not_applicable"] += 1
    modes = sorted({str(doc.get("mode")) for doc in docs})
    openings = {str(doc.get("opening")) for doc in docs if doc.get("opening") is not None}
    paths = {tuple(str(i) for i in doc.get("path") or ()) for doc in docs}
    thresholds = (docs[0].get("thresholds") or {}) if docs else {}
    flags = _diversity_flags(modes, len(docs), len(openings), len(paths), thresholds)
    return {
        "condition": cid,
        "runs": runs,
        "assessed": len(docs),
        "modes": modes,
        "personaConsistency": {
            "messages": messages,
            "consistent": consistent,
            "rate": _share(consistent, messages),
            "runsForReview": review,
        },
        "reactionCompliance": {
            "triggers": triggers,
            "compliant": compliant,
            "rate": _share(compliant, triggers),
            "runsViolated": reaction_failed,
        },
        "visibility": {
            "disclosures": disclosures,
            "violations": violations,
            "runsViolated": visibility_failed,
        },
        "termination": {
            "compliant": ended["pass"],
            "notCompliant": ended["fail"],
            "notApplicable": ended["not_applicable"],
        },
        "diversity": {
            "distinctOpenings": len(openings),
            "distinctPaths": len(paths),
            "openingShare": _share(len(openings), len(docs)),
            "pathShare": _share(len(paths), len(docs)),
        },
        "flags": flags,
        "failedRuns": sum(1 for doc in docs if doc.get("failed")),
    }


def _diversity_flags(
    modes: Sequence[str], n: int, openings: int, paths: int, thresholds: Mapping[str, Any]
) -> list[str]:
    """Why a condition's batch falls short of its diversity thresholds (empty when it does not)."""
    if len(modes) > 1:
        return [f"replications ran in different user modes ({', '.join(modes)})"]
    if not modes or n < 2:
        return []
    if modes[0] == "regression":
        if openings > 1:
            return [
                f"regression user not pinned: {openings} distinct openings over {n} runs "
                "(expected one)"
            ]
        return []
    flags = []
    for what, found, key in (
        ("openings", openings, "minDistinctOpenings"),
        ("paths", paths, "minDistinctPaths"),
    ):
        wanted = int(thresholds.get(key) or 2)
        if n >= wanted and found < wanted:
            flags.append(
                f"exploration: {found} distinct {what} over {n} runs, fewer than {wanted}; "
                "adjust the scenario or the user policy version"
            )
    return flags
