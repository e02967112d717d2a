"""Fixtures shared by several test modules."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support.ledgers import POSTGRES_URL, fresh_ledger
from tests.support.studies import Study, write_study

# Property-based tests draw the same examples on every run, so CI never fails by chance: a new
# counterexample comes from widening a strategy, never from the clock.
settings.register_profile("simreport", derandomize=True, database=None)
settings.load_profile("simreport")


ROOT = Path(__file__).resolve().parents[1]

LONG_FIRST = (
    "tests/e2e/test_slurm.py",
    "tests/workflow/test_invalidation.py",
    "tests/ledger/test_ledger_recording.py",
    "tests/e2e/",
    "tests/service/test_service_worker.py",
    "tests/ledger/",
    "tests/service/",
)
"""Files whose tests take longest, started first: each process takes whole files in collection
order, so a long file collected last would leave the other process idle at the end."""


def _start_rank(item: pytest.Item) -> int:
    path = item.path.relative_to(ROOT).as_posix()
    return next((i for i, head in enumerate(LONG_FIRST) if path.startswith(head)), len(LONG_FIRST))


def pytest_configure(config: pytest.Config) -> None:
    """Before any process starts testing: the package's bytecode and code fingerprints cached
    beside its sources, so workflow copies (tests/support/workflow_copy.py) carry them along
    instead of every build in a copy computing them again."""
    if hasattr(config, "workerinput"):
        return  # a worker: the controlling process did this before it started them
    # Every process writes and reuses bytecode, the test processes started next included: with
    # PYTHONDONTWRITEBYTECODE set, each process of each build compiled the package and parsed
    # its sources for their fingerprints again (a third of a small build's time).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    import compileall

    compileall.compile_dir(ROOT / "simreport", quiet=2)
    from simreport.kernel import kernel_fingerprint
    from simreport.kernel.worlds import WORLDS
    from simreport.workflow import analysis_fingerprint, report_fingerprint

    analysis_fingerprint()
    report_fingerprint()
    for world in (None, *WORLDS):
        kernel_fingerprint(world)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_start_rank)  # stable: files and tests keep their order within a rank


def pytest_runtest_setup(item: pytest.Item) -> None:
    """`@pytest.mark.requires(present, what)`: a test that needs a real component (Chromium, the
    Nu checker, PostgreSQL, SLURM) skips on a developer machine without it, and fails under
    CI=true, where .ci/run must have installed it."""
    for mark in item.iter_markers("requires"):
        present, what = mark.args
        if present:
            continue
        if os.environ.get("CI") == "true":
            pytest.fail(f"{what} is missing: .ci/run must install it", pytrace=False)
        pytest.skip(f"needs {what}")


EXAMPLE_PLAN = ROOT / "examples" / "prisoners_dilemma" / "audit.yaml"


@pytest.fixture(scope="session")
def audit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real small audit (the prisoner's dilemma example, two replications) with its
    audit.json, report and methods pages. Tests must not change it; copy it first."""
    import simreport

    out = tmp_path_factory.mktemp("example") / "pd"
    simreport.audit(EXAMPLE_PLAN, out=out, replications=2)
    return out


@pytest.fixture
def tiny_study(tmp_path: Path) -> Study:
    """The small prisoner's-dilemma study (tests/support/studies.py): scenario.yaml and
    audit.yaml in the test's tmp_path."""
    return write_study(tmp_path)


@pytest.fixture(scope="module")
def audit(audit_dir: Path) -> dict[str, Any]:
    """The example audit's audit.json, loaded afresh for each module."""
    loaded: dict[str, Any] = json.loads((audit_dir / "audit.json").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param(
            "postgresql",
            marks=pytest.mark.requires(
                bool(POSTGRES_URL), "PostgreSQL (SIMREPORT_TEST_POSTGRES_URL)"
            ),
        ),
    ]
)
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty ledger, once on SQLite and once on PostgreSQL: a new file, or
    a new database on the server SIMREPORT_TEST_POSTGRES_URL names, dropped afterwards."""
    with fresh_ledger(request.param, tmp_path / "ledger.sqlite") as url:
        yield url


@pytest.fixture
def second_ledger_url(ledger_url: str, tmp_path: Path) -> Iterator[str]:
    """Another fresh ledger on the database `ledger_url` is on."""
    kind = "sqlite" if ledger_url.startswith("sqlite") else "postgresql"
    with fresh_ledger(kind, tmp_path / "second.sqlite") as url:
        yield url


@pytest.fixture
def engine(ledger_url: str) -> Iterator[Any]:
    """An engine on the fresh ledger `ledger_url` gives (SQLite, then PostgreSQL)."""
    from simreport.ledger import connect

    made = connect(ledger_url)
    yield made
    made.dispose()
