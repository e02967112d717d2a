"""The command line's argument types now live in simreport/cli/arguments.py. The run service's
and the remote client's commands (service/app.py, service/worker.py, remote_cli.py) still import
them from here until those commands move into simreport/cli/; then this module goes."""

from __future__ import annotations

from ..cli.arguments import count, int64, positive_int

__all__ = ["count", "int64", "positive_int"]
