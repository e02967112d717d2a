"""How the ledger's commands print (and the run service's, which share its look): JSON documents,
plain-text tables whose cells are one line each, times to the second and text cut to a width."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def print_json(value: Any) -> None:
    """`value` as indented JSON with sorted keys, on stdout."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout, each column as wide as its widest cell: None prints as `-`, a bool as
    yes or no, anything else as its text on one line."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return " ".join(str(value).split())


def short_time(iso: str | None) -> str:
    """2026-11-30T17:01:49.237188Z → 2026-11-30 17:01:49Z"""
    if not iso:
        return "-"
    return iso.replace("T", " ")[:19] + "Z"


def shortened(text: str | None, width: int = 48) -> str:
    """`text` on one line, cut to `width` characters with an ellipsis (`-` for none)."""
    if not text:
        return "-"
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
