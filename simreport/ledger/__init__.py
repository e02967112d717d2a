"""The run ledger (SPEC §10): a database of what ran, beside the files — SQLite by default
(`<results>/ledger.sqlite`), PostgreSQL for teams. It reads run directories through the core
schemas only; the kernel, the analysis and the report never import it. The names it exports
load the database libraries on first use, so importing this package is cheap. The design:
docs/ledger.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .builds import BuildIngest
    from .db import connect
    from .errors import (
        AssetVersionChanged,
        LedgerOutdated,
        LedgerUnavailable,
        NotRecorded,
        RunConflict,
    )
    from .ingest import (
        IngestSummary,
        RunIngest,
        ingest_build,
        ingest_paths,
        ingest_run,
    )
    from .location import ledger_url
    from .migrate import upgrade
    from .recording import EXIT_LEDGER, LedgerIncomplete, LedgerRecorder
    from .rundir import run_identity

_WHERE = {
    "connect": "db",
    "ledger_url": "location",
    "AssetVersionChanged": "errors",
    "LedgerOutdated": "errors",
    "LedgerUnavailable": "errors",
    "NotRecorded": "errors",
    "RunConflict": "errors",
    "BuildIngest": "builds",
    "IngestSummary": "ingest",
    "RunIngest": "ingest",
    "ingest_build": "ingest",
    "ingest_paths": "ingest",
    "ingest_run": "ingest",
    "upgrade": "migrate",
    "EXIT_LEDGER": "recording",
    "LedgerIncomplete": "recording",
    "LedgerRecorder": "recording",
    "run_identity": "rundir",
}

__all__ = [
    "EXIT_LEDGER",
    "AssetVersionChanged",
    "BuildIngest",
    "IngestSummary",
    "LedgerIncomplete",
    "LedgerOutdated",
    "LedgerRecorder",
    "LedgerUnavailable",
    "NotRecorded",
    "RunConflict",
    "RunIngest",
    "connect",
    "ingest_build",
    "ingest_paths",
    "ingest_run",
    "ledger_url",
    "run_identity",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
