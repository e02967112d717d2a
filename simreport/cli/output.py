"""How the commands print: JSON documents, plain-text tables whose cells are one line each, times
to the second, text cut to a width, and the notes and warnings they add on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def print_json(value: Any, *, sort_keys: bool = True, ensure_ascii: bool = False) -> None:
    """`value` as indented JSON on stdout, with sorted keys and its text as it is unless told."""
    sys.stdout.write(
        json.dumps(value, indent=2, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n"
    )


def table_lines(headers: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> list[str]:
    """A table's lines (its header first, when it has one): each column as wide as its widest
    cell, two spaces between columns, no trailing space."""
    body = [headers, *rows] if headers is not None else list(rows)
    if not body:
        return []
    widths = [max(len(row[i]) for row in body) for i in range(len(body[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body
    ]


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout, each column as wide as its widest cell: None prints as `-`, a bool as
    yes or no, anything else as its text on one line."""
    for line in table_lines(headers, [[_cell(v) for v in row] for row in rows]):
        print(line)


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


_SEPARATORS = "|=@,;: /"


def distinct_shortened(texts: Sequence[str | None], width: int = 48) -> list[str]:
    """Each of `texts` as `shortened` prints it, except that two different texts never print
    alike: where cutting makes them equal, the shortened ones keep their tails too
    (`head…tail`), one more character of tail at a time, and print in full when even that
    does not tell them apart. Equal texts print equally."""
    whole = [" ".join(t.split()) if t else "" for t in texts]
    tails = [0] * len(whole)

    def shown(i: int) -> str:
        text, tail = whole[i], tails[i]
        if not text:
            return "-"
        if len(text) <= width or tail < 0:
            return text
        if tail:
            # The tail starts after a separator where one is near: `…environment_structure=0.95`
            # reads better than `…95`.
            starts = [text.rfind(c, len(text) - (width - 2), len(text) - tail) for c in _SEPARATORS]
            tail = len(text) - 1 - max(starts) if max(starts) >= 0 else tail
        return text[: width - 1 - tail] + "…" + (text[-tail:] if tail else "")

    while True:
        seen: dict[str, set[str]] = {}
        for i in range(len(whole)):
            seen.setdefault(shown(i), set()).add(whole[i])
        clashing = {short for short, originals in seen.items() if len(originals) > 1}
        cut = [i for i in range(len(whole)) if shown(i) in clashing and len(whole[i]) > width]
        if not cut:
            return [shown(i) for i in range(len(whole))]
        for i in cut:
            # A head of one character is the least a cut keeps; past it, the text in full.
            tails[i] = tails[i] + 1 if tails[i] + 1 < width - 1 else -1


def note(text: str) -> None:
    """`simreport: note: …` on stderr: something the user may want to know; nothing failed."""
    print(f"simreport: note: {text}", file=sys.stderr)


def warning(text: str) -> None:
    """`simreport: warning: …` on stderr: the command goes on, but its answer may mislead."""
    print(f"simreport: warning: {text}", file=sys.stderr)
