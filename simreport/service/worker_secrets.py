"""What a worker blanks out of everything it records and logs: the values of its endpoints'
key variables, of the variable holding the service's tokens and of every variable named like a
credential, and the ledger's password (`worker_scrubber`, installed once per worker with
`install`); and the variables its run processes go without (`hidden_variables`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.execution_policy import ExecutionPolicy
    from ..core.redaction import Scrubber

_SCRUB: Scrubber | None = None
"""The secrets this worker knows of, blanked out of everything it records or logs."""


def worker_scrubber(
    policy: ExecutionPolicy, tokens_env: str, ledger_password: str | None
) -> Scrubber:
    """What a worker blanks out of the runs it records and the lines it logs: the values of its
    endpoints' key variables, of the variable holding the service's tokens and of every
    variable named like a credential, and the ledger's password. A run whose error quotes a key
    (an HTTP library refusing a header) never carries it into the ledger."""
    from ..core.redaction import Scrubber, environment_secrets

    names = [*policy.key_variables(), tokens_env]
    return Scrubber([*environment_secrets(os.environ, names), ledger_password])


def install(scrubber: Scrubber) -> None:
    """Blank out what `scrubber` knows from everything this process records or logs."""
    global _SCRUB
    _SCRUB = scrubber


def scrub(text: str) -> str:
    return _SCRUB.text(text) if _SCRUB else text


def scrubbed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return _SCRUB.document(events) if _SCRUB else events


def files_holding_secrets(run_dir: Path) -> list[Path]:
    """The files of `run_dir` that still hold a secret this worker knows of."""
    return _SCRUB.files_holding(run_dir) if _SCRUB else []


def say(text: str) -> None:
    """One line on the worker's log, scrubbed."""
    print(f"simreport worker: {scrub(text)}", file=sys.stderr, flush=True)


def hidden_variables(tokens_env: str) -> tuple[str, ...]:
    """The environment variables a run process goes without: the service's API tokens, its
    ledger's URL and PostgreSQL's password settings."""
    return (tokens_env, "SIMREPORT_LEDGER_URL", "PGPASSWORD", "PGPASSFILE")
