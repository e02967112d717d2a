"""Pages rendered from audit.json (no statistics here): report.html and its figures (with what
changed since the build kept in `history/`), the methods paragraphs, and the static site that
lists every audit.

The names load lazily: the workflow asks for figure names at parse time without paying for
matplotlib, Jinja2 and markdown-it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import figures
    from .html import render_report, write_report
    from .methods import methods_html, methods_markdown, write_methods
    from .site import render_index, serve, site_entry, write_site

_HOMES = {
    "render_report": "html",
    "write_report": "html",
    "methods_html": "methods",
    "methods_markdown": "methods",
    "write_methods": "methods",
    "render_index": "site",
    "serve": "site",
    "site_entry": "site",
    "write_site": "site",
}

__all__ = [
    "figures",
    "methods_html",
    "methods_markdown",
    "render_index",
    "render_report",
    "serve",
    "site_entry",
    "write_methods",
    "write_report",
    "write_site",
]


def __getattr__(name: str) -> Any:
    if name == "figures":
        return importlib.import_module(f"{__name__}.figures")
    if name in _HOMES:
        return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
