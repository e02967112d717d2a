"""A rendered page read as structure: the part of it under an element id, and each table's caption
and rows as cell texts, so a test checks which sections, tables and values a page shows rather
than the sentences around them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

_CELLS = frozenset({"td", "th"})


@dataclass
class Table:
    """One `<table>`: its caption without the `<small>` note under it, its rows (header rows
    included) as the text of each cell, and the class of each cell."""

    caption: str = ""
    rows: list[list[str]] = field(default_factory=list)
    classes: list[list[str]] = field(default_factory=list)

    def column(self, index: int) -> list[str]:
        """The cells of one column, header row included."""
        return [row[index] for row in self.rows if index < len(row)]

    def row(self, first: str) -> list[str]:
        """The row whose first cell is `first`."""
        found = [row for row in self.rows if row and row[0] == first]
        assert len(found) == 1, (first, self.rows)
        return found[0]


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[Table] = []
        self._open: list[Table] = []
        self._cell: list[str] | None = None
        self._caption: list[str] | None = None
        self._small = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._open.append(Table())
        elif not self._open:
            return
        elif tag == "caption":
            self._caption = []
        elif tag == "small":
            self._small += 1
        elif tag == "tr":
            self._open[-1].rows.append([])
            self._open[-1].classes.append([])
        elif tag in _CELLS:
            self._cell = []
            self._open[-1].classes[-1].append(dict(attrs).get("class") or "")

    def handle_endtag(self, tag: str) -> None:
        if not self._open:
            return
        if tag == "table":
            self.tables.append(self._open.pop())
        elif tag == "caption" and self._caption is not None:
            self._open[-1].caption = _text(self._caption)
            self._caption = None
        elif tag == "small":
            self._small -= 1
        elif tag in _CELLS and self._cell is not None:
            self._open[-1].rows[-1].append(_text(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._caption is not None and not self._small:
            self._caption.append(data)


def _text(parts: list[str]) -> str:
    # HTML white space only: a number's narrow no-break spaces are part of it.
    return re.sub(r"[ \t\n\r\f]+", " ", "".join(parts)).strip(" \t\n\r\f")


def tables(page: str) -> list[Table]:
    """Every table of `page` (an HTML page or fragment), in document order of their ends."""
    parser = _Tables()
    parser.feed(page)
    parser.close()
    return parser.tables


def part(page: str, start: str, end: str | None = None) -> str:
    """The page from the element with id `start` to the one with id `end` (or the page's end)."""
    begin = page.index(f'id="{start}"')
    return page[begin : page.index(f'id="{end}"', begin) if end else len(page)]
