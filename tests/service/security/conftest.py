"""What the attack tests on the run service share: real `simreport api` processes on 127.0.0.1,
as tests/e2e/test_service_load.py starts them (its Cluster and fixtures: the refund desk's
library, and a cluster on the ledger_url fixture's ledger)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_service_load import cluster, library  # noqa: F401  (fixtures)
from tests.support.service_helpers import Cluster


@pytest.fixture
def sqlite_cluster(tmp_path: Path, library: Path) -> Iterator[Cluster]:  # noqa: F811
    """API processes on a fresh SQLite ledger (what the connection limits guard is the API's
    reading of requests, not the ledger)."""
    processes = Cluster(tmp_path, f"sqlite:///{tmp_path / 'ledger.sqlite'}", library)
    try:
        yield processes
    finally:
        processes.stop()
