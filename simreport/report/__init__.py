"""Pages rendered from audit.json alone (no statistics here): report.html and its figures, the
methods paragraphs, and the static site that lists every audit."""

from . import figures
from .html import render_report, write_report
from .methods import methods_html, methods_markdown, write_methods
from .site import render_index, serve, site_entry, write_site

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
