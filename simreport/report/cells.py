"""One value as a cell of report.html's tables shows it: numbers, p values, intervals and shares
as display strings, `–` where there is none, and a condition by its name."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .figures import format_number
from .verdict import as_float

MISSING = "–"
P_FLOOR = 0.0001
IDENTICAL_NOTE = "identical to the base, not tested"


def format_p(value: Any) -> str:
    """A p value: four decimals, `<0.0001` below that, `–` when there is none."""
    p = as_float(value)
    if p is None:
        return MISSING
    if math.isnan(p):
        return "nan"
    if p < P_FLOOR:
        return "<" + f"{P_FLOOR:.4f}"
    return f"{p:.4f}"


def format_interval(value: Any) -> str:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        return MISSING
    return f"[{format_number(value[0])}, {format_number(value[1])}]"


def format_share(value: Any) -> str:
    share = as_float(value)
    if share is None or not math.isfinite(share):
        return MISSING
    return f"{100 * share:.0f}%"


def short_number(value: Any) -> str:
    """A setting such as α as it would be written (0.05), `–` when there is none."""
    x = as_float(value)
    return MISSING if x is None else f"{x:g}"


def display_text(value: Any, missing: str = MISSING) -> str:
    """The value as text, `missing` for none or an empty string."""
    return missing if value is None or value == "" else str(value)


def in_order(keys: Sequence[str], mapping: Mapping[str, Any]) -> list[str]:
    """`keys` that `mapping` has, then its other keys sorted: a stable order whatever the
    mapping's own order (audit.json is written with sorted keys)."""
    first = [k for k in keys if k in mapping]
    return first + sorted(k for k in mapping if k not in set(first))


def condition_cell(names: Mapping[str, str], cid: Any) -> dict[str, str]:
    """How a table shows a condition: its name, and its id beside it when they differ."""
    text = str(cid)
    name = names.get(text, text)
    return {"name": name, "id": "" if name == text else text}
