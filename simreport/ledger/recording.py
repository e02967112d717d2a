"""Recording what a command or a workflow job produced, without ever losing its files.

`simreport run`, `audit` and `analyse` and the workflow's jobs hand their finished run
directories and analysed audits to a `LedgerRecorder` once the files are complete. It opens the
ledger on first use (one engine, so one connection, per command or job) and records each run in
its own transaction. What the ledger cannot record — it is unreachable, it refuses a run as a
conflict — is said in one line naming the run (or audit) and the ledger's URL with credentials
redacted, and kept in `problems`, so the caller can end non-zero: a ledger that silently misses
runs is worse than none. The files are never touched. A recorder without a URL (`ledger: null`,
`--no-ledger`) does nothing at all.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..core.errors import SimreportError
from ..core.redaction import redact_text
from .db import UNSET, _Unset, connect, describe, ledger_url
from .errors import LedgerUnavailable
from .rundir import REQUIRED_FILES

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

EXIT_LEDGER: Final = 4
"""The results were written, but the ledger did not record all of them (stderr says which)."""


class LedgerIncomplete(SimreportError):
    """Raised at the end of a command or job whose files are complete but whose runs or build
    the ledger did not record; the message lists them."""

    exit_code = EXIT_LEDGER


_SHARED: dict[str, Engine] = {}
_SHARED_LOCK = threading.Lock()


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class LedgerRecorder:
    """Records runs and builds in the ledger at `url` (None: records nothing)."""

    def __init__(
        self, url: str | None, *, say: Callable[[str], None] = _stderr, shared: bool = False
    ) -> None:
        """`shared`: keep one engine per URL for the whole process (the workflow's jobs are
        threads of one Snakemake process), so the schema check and the connection set-up are
        paid once, not once per job."""
        self.url = url
        self.shared = shared
        self.shown = describe(url) if url is not None else None
        self.problems: list[str] = []
        self.runs_recorded = 0
        self.runs_present = 0
        self.builds_recorded = 0
        self._say = say
        self._engine: Engine | None = None
        self._unreachable: str | None = None

    @classmethod
    def resolve(
        cls,
        explicit: str | None = None,
        *,
        results_dir: str | Path,
        configured: str | _Unset | None = UNSET,
        enabled: bool = True,
        say: Callable[[str], None] = _stderr,
    ) -> LedgerRecorder:
        """The recorder for a command: `enabled=False` (`--no-ledger`) records nothing; else the
        URL `ledger_url` chooses (flag > environment > config > `<results_dir>/ledger.sqlite`).
        A URL that cannot be one raises at once, before anything runs."""
        if not enabled:
            return cls(None, say=say)
        return cls(ledger_url(explicit, results_dir=results_dir, configured=configured), say=say)

    @property
    def enabled(self) -> bool:
        return self.url is not None

    @property
    def complete(self) -> bool:
        """Whether everything handed over so far is in the ledger."""
        return not self.problems

    # ------------------------------------------------------------------ recording

    def record_runs(self, run_dirs: Iterable[str | Path]) -> None:
        """Record each finished run directory, one transaction each. A folder without the files
        a run record needs (a run refused before it wrote its manifest) is skipped: there is
        nothing the ledger could say about it."""
        if self.url is None:
            return
        from .ingest import ingest_run

        for run_dir in run_dirs:
            path = Path(run_dir)
            if not all((path / name).is_file() for name in REQUIRED_FILES):
                continue
            engine = self._connected(f"run {path}")
            if engine is None:
                continue
            try:
                done = ingest_run(engine, path)
            except Exception as exc:  # ours, or a database error the ingest does not map
                self._problem(f"run {path}", exc)
                continue
            if done.outcome == "recorded":
                self.runs_recorded += 1
            else:
                self.runs_present += 1

    def record_build(self, audit_dir: str | Path) -> None:
        """Record the analysis in `audit_dir` (and any of its runs not recorded yet)."""
        if self.url is None:
            return
        from .ingest import ingest_build

        path = Path(audit_dir)
        engine = self._connected(f"the build of {path}")
        if engine is None:
            return
        try:
            done = ingest_build(engine, path)
        except Exception as exc:
            self._problem(f"the build of {path}", exc)
            return
        if done.outcome == "recorded":
            self.builds_recorded += 1

    def close(self) -> None:
        if self._engine is not None and not self.shared:
            self._engine.dispose()
        self._engine = None

    def __enter__(self) -> LedgerRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def raise_if_incomplete(self) -> None:
        """End a command or job non-zero when something handed over is not in the ledger."""
        if self.problems:
            raise LedgerIncomplete(self.summary())

    def summary(self) -> str:
        return (
            f"the ledger {self.shown} did not record {len(self.problems)} result(s) "
            "(their files are complete; `simreport ledger ingest` records them once the ledger "
            "works)"
        )

    # ------------------------------------------------------------------ plumbing

    def _connected(self, what: str) -> Engine | None:
        if self._engine is not None:
            return self._engine
        if self._unreachable is not None:
            # Said once for the first result; the others are counted in the summary.
            self._note(f"{what} not recorded: {self._unreachable}", quiet=True)
            return None
        assert self.url is not None
        try:
            if self.shared:
                with _SHARED_LOCK:
                    if self.url not in _SHARED:
                        _SHARED[self.url] = connect(self.url)
                    self._engine = _SHARED[self.url]
            else:
                self._engine = connect(self.url)
        except LedgerUnavailable as exc:
            self._unreachable = exc.message
            self._note(f"{what} not recorded: {exc.message}")
            return None
        return self._engine

    def _problem(self, what: str, exc: Exception) -> None:
        if isinstance(exc, SimreportError):
            reason = exc.one_line()
        else:
            orig = getattr(exc, "orig", None)
            text = str(orig if orig is not None else exc).strip().splitlines()
            reason = f"{type(exc).__name__}: {text[0] if text else ''}"
        self._note(f"{what} not recorded in the ledger {self.shown}: {reason}")

    def _note(self, line: str, *, quiet: bool = False) -> None:
        line = redact_text(line).replace("\n", " ")
        self.problems.append(line)
        if not quiet:
            self._say(f"simreport: ledger: {line}")


__all__ = ["EXIT_LEDGER", "LedgerIncomplete", "LedgerRecorder"]
