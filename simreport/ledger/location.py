"""Which ledger a command or a workflow config names, as a URL simreport can open: the
explicit `--ledger`, $SIMREPORT_LEDGER_URL, the config's `ledger:` or the default SQLite file
beside the results. Reads URLs only (no database driver is loaded), so every start of the
workflow can ask cheaply."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import ArgumentError

from ..core.redaction import redact_url
from .errors import LedgerUnavailable

ENV_VAR: Final = "SIMREPORT_LEDGER_URL"
"""The environment variable naming the ledger when `--ledger` does not."""

DEFAULT_FILE: Final = "ledger.sqlite"
"""The default ledger's file name, inside the results folder."""

_SQLITE_DRIVERS = ("sqlite", "sqlite+pysqlite")
_POSTGRES_ALIASES = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg"}
SUPPORTED = "a sqlite:///PATH or postgresql+psycopg://HOST/DATABASE URL"


class _Unset:
    """The workflow config says nothing about the ledger."""


UNSET: Final = _Unset()


def ledger_url(
    explicit: str | None = None,
    *,
    results_dir: str | Path,
    configured: str | _Unset | None = UNSET,
) -> str | None:
    """The ledger to use: `explicit` (`--ledger URL`) > $SIMREPORT_LEDGER_URL > `configured`
    (the workflow config's `ledger:`; None there turns the ledger off) > the default,
    `sqlite:///<results_dir>/ledger.sqlite`. A value without a scheme is a SQLite file path.
    Returns None when the ledger is off."""
    if explicit:
        return normalise_url(explicit, where="--ledger")
    from_env = os.environ.get(ENV_VAR, "").strip()
    if from_env:
        return normalise_url(from_env, where=ENV_VAR)
    if not isinstance(configured, _Unset):
        return None if configured is None else normalise_url(configured, where="ledger")
    return "sqlite:///" + (Path(results_dir) / DEFAULT_FILE).as_posix()


def normalise_url(text: str, *, where: str = "ledger") -> str:
    """`text` as a URL simreport can open: a bare path becomes `sqlite:///path`, `postgresql://`
    and `postgres://` use psycopg 3. Anything else is refused, naming `where`."""
    text = text.strip()
    if "://" not in text:
        if not text:
            raise LedgerUnavailable("empty ledger location", path=where, expected=SUPPORTED)
        return "sqlite:///" + Path(text).as_posix()
    try:
        url = make_url(text)
    except ArgumentError:
        raise LedgerUnavailable(
            f"cannot read the ledger URL {redact_url(text)!r}", path=where, expected=SUPPORTED
        ) from None
    driver = _POSTGRES_ALIASES.get(url.drivername, url.drivername)
    if driver in _SQLITE_DRIVERS:
        if not url.database or url.database == ":memory:":
            raise LedgerUnavailable(
                f"{redact_url(text)!r} names no file: an in-memory ledger keeps nothing",
                path=where,
                expected=SUPPORTED,
            )
        return text
    if driver == "postgresql+psycopg":
        return url.set(drivername=driver).render_as_string(hide_password=False)
    raise LedgerUnavailable(
        f"unsupported ledger database {redact_url(text)!r} (driver {url.drivername})",
        path=where,
        expected=SUPPORTED,
    )
