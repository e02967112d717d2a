"""report.html and its figures, rendered from audit.json alone (no statistics here)."""

from . import figures
from .html import render_report, write_report

__all__ = ["figures", "render_report", "write_report"]
