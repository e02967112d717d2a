"""The one Jinja2 environment the pages are rendered with.

Templates live in `simreport/report/templates`. Undefined names are errors and a trailing
newline is kept; HTML pages are autoescaped and have block tags trimmed, Markdown is not escaped
by Jinja (the methods module escapes its values itself, through `finalize`). Whatever a template
prints has its control characters replaced by visible stand-ins, in every configuration. Each
configuration is built once per process, so its templates are parsed once. The `wbr` filter
escapes an identifier and marks where it may break across lines.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from ..core.files import CONTROL_CHARACTERS, visible_control_characters

Filters = tuple[tuple[str, Callable[..., Any]], ...]


@functools.cache
def environment(
    *,
    autoescape: bool = True,
    trim_blocks: bool = True,
    finalize: Callable[..., Any] | None = None,
    filters: Filters = (),
) -> Environment:
    """The environment for the package's templates.

    `trim_blocks` also sets `lstrip_blocks`; `filters` are (name, function) pairs added to
    Jinja's own. The result is shared: do not change it, pass what it needs here instead.
    """
    env = Environment(
        loader=PackageLoader("simreport.report", "templates"),
        autoescape=autoescape,
        undefined=StrictUndefined,
        trim_blocks=trim_blocks,
        lstrip_blocks=trim_blocks,
        keep_trailing_newline=True,
        finalize=_printable(finalize),
    )
    env.filters["wbr"] = break_points
    env.filters.update(filters)
    return env


# After `_`, `|`, `=`, `@` and `/`, and after a `.` that a letter follows (a dotted path, not
# a decimal point): where an identifier may break across lines without cutting a word.
_BREAK_AFTER = re.compile(r"([_|=@/]|\.(?=[^\W\d_]))(?=.)")


def break_points(value: Any) -> Markup:
    """`value` escaped, with `<wbr>` after each point where an identifier may break
    (`order_number_disclosure` → `order_<wbr>number_<wbr>disclosure`), so a narrow cell breaks
    it there and nowhere else. Markup passes as it is (its text cannot be told from its tags)."""
    if isinstance(value, Markup):
        return value
    return Markup(_BREAK_AFTER.sub(r"\1<wbr>", str(escape(value))))


def _printable(finalize: Callable[..., Any] | None) -> Callable[[Any], Any]:
    """`finalize`, then no raw control characters: the loader refuses them in plans and
    scenarios, but audit.json can carry them from elsewhere (a simulator, a provider's error)."""

    def printed(value: Any) -> Any:
        if finalize is not None:
            value = finalize(value)
        if isinstance(value, str) and CONTROL_CHARACTERS.search(value):
            # Keep the type: Markup stays markup, the methods module's Markdown stays Markdown.
            return type(value)(visible_control_characters(value))
        return value

    return printed
