"""Figure file names, known before any figure is drawn (the workflow declares them as targets)
— kept apart from the drawing code so that naming a figure does not load matplotlib."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]")


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


def figure_names(audit: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Filename → (kind, name) for every figure of the audit, in report order: `sensitivity.svg`,
    `effects-<metric>.svg` per metric, `distribution-<name>.svg` per target distribution."""
    out: dict[str, tuple[str, str]] = {"sensitivity.svg": ("sensitivity", "")}
    taken = set(out)
    for metric in audit.get("metrics") or []:
        out[_unique("effects", str(metric), taken)] = ("effects", str(metric))
    for name in sorted(audit.get("distribution") or {}):
        out[_unique("distribution", str(name), taken)] = ("distribution", str(name))
    return out
