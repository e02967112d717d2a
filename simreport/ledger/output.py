"""The commands' printing now lives in simreport/cli/output.py. The remote client's commands
(remote_cli.py) still import it from here until they move into simreport/cli/; then this module
goes."""

from __future__ import annotations

from ..cli.output import print_json, print_table, short_time, shortened

__all__ = ["print_json", "print_table", "short_time", "shortened"]
