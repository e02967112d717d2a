"""Names the pages give things: figure file names, known before any figure is drawn (the
workflow declares them as targets), the name each condition is shown by, and the fingerprint that
ties a page to the audit.json it was rendered from — kept apart from the drawing code so that
naming a figure does not load matplotlib."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.audit_document import AuditDoc, PlanSection

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")

AUDIT_STAMP = "data-audit-sha256"
"""The attribute of a page's <html> that names the audit.json it was rendered from (its
`audit_fingerprint`): the site refuses a page whose audit.json has changed since."""


def safe_name(name: str) -> str:
    """`name` with every character outside [A-Za-z0-9._-] replaced by `_`."""
    return _SAFE_NAME.sub("_", name) or "_"


def _unique(stem: str, name: str, taken: set[str]) -> str:
    filename = f"{stem}-{safe_name(name)}.svg"
    if filename in taken:
        # Two names that sanitise alike ("a b", "a_b") keep apart by a hash of the original.
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
        filename = f"{stem}-{safe_name(name)}-{digest}.svg"
    taken.add(filename)
    return filename


def planned_figure_names(
    metrics: Sequence[str], design: str, distributions: Iterable[str]
) -> dict[str, tuple[str, str]]:
    """The figures an audit will have, known before the audit exists.

    Args:
        metrics: the plan's metrics.
        design: the plan's design (a full-factorial one adds main-effect figures).
        distributions: the names of the target distributions.

    Returns:
        Filename → (kind, name), in report order: `sensitivity.svg`, `effects-<metric>.svg`
        per metric, `main-effects-<metric>.svg` per metric of a full-factorial plan,
        `distribution-<name>.svg` per target distribution.
    """
    out: dict[str, tuple[str, str]] = {"sensitivity.svg": ("sensitivity", "")}
    taken = set(out)
    for metric in metrics:
        out[_unique("effects", metric, taken)] = ("effects", metric)
    if design == "full_factorial":
        for metric in metrics:
            out[_unique("main-effects", metric, taken)] = ("mainEffects", metric)
    for name in sorted(distributions):
        out[_unique("distribution", name, taken)] = ("distribution", name)
    return out


def figure_names(audit: AuditDoc) -> dict[str, tuple[str, str]]:
    """Filename → (kind, name) for every figure of the audit (`planned_figure_names`)."""
    return planned_figure_names(audit.metrics, audit.plan.design, audit.distribution)


# --------------------------------------------------------------------------- conditions


def condition_names(audit: AuditDoc) -> dict[str, str]:
    """Condition id → the name pages show: its `label` when audit.json gives one, else its id.

    Two conditions never share a name: a label that repeats gains its model (`@model`), and one
    that still repeats gains its id in parentheses. A condition the audit does not list is shown
    by its id (`names.get(cid, cid)`).
    """
    models = {c.id: c.model for c in audit.conditions}
    names = {c.id: c.label if c.label.strip() else c.id for c in audit.conditions}
    names = _distinct(names, lambda cid, name: _with_model(name, models.get(cid)))
    return _distinct(names, lambda cid, name: name if name == cid else f"{name} ({cid})")


def world_name(plan: PlanSection) -> str | None:
    """What the pages call the base scenario's engine: its world, `external simulator` for a
    command, None without a base."""
    base = plan.base
    if base is None:
        return None
    return base.world or ("external simulator" if base.simulator else None)


def _with_model(name: str, model: str | None) -> str:
    if model is None or name.endswith(f"@{model}"):
        return name
    return f"{name} @{model}"


def _distinct(names: dict[str, str], widen: Callable[[str, str], str]) -> dict[str, str]:
    """`names` with every name that more than one id shares replaced by `widen(id, name)`."""
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    return {cid: widen(cid, name) if counts[name] > 1 else name for cid, name in names.items()}


def audit_fingerprint(audit: AuditDoc) -> str:
    """The sha256 of an audit's canonical JSON: the pages carry it to say which audit.json they
    were rendered from, whatever the file's formatting (the mapping `analyse` returns and its
    JSON give the same)."""
    from ..core.canonical import content_hash

    return content_hash(audit.to_doc())
