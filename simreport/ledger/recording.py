"""Recording what a command or a workflow job produced, without ever losing its files.

A `LedgerRecorder` records finished run directories and analysed audits, each run whole or not
at all; what the ledger cannot record is said in one line and kept in `problems`, so the caller
can end non-zero. The files are never touched; a recorder without a URL does nothing. The
design: docs/ledger.md.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ..core.errors import SimreportError
from ..core.redaction import redact_text
from .db import connect, describe
from .errors import LedgerUnavailable
from .location import UNSET, _Unset, ledger_url
from .rundir import REQUIRED_FILES

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from ..core.versions import Purpose
    from .ingest import RunIngest

T = TypeVar("T")

EXIT_LEDGER: Final = 4
"""The results were written, but the ledger did not record all of them (stderr says which)."""


class LedgerIncomplete(SimreportError):
    """Raised at the end of a command or job whose files are complete but whose runs or build
    the ledger did not record; `problems` says, one line each, what was not recorded and why."""

    exit_code = EXIT_LEDGER

    def __init__(self, message: str, *, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)


GATHER_RUNS: Final = 32
"""Runs recorded in one transaction at most, each in a savepoint of its own (see
`ingest_runs`). The writer thread takes every run a job handed over while it was busy at once: a
commit writes the pages its runs changed, and runs recorded one after another change many of
the same ones. It never holds a run back to wait for others: a job that has run all of its
runs waits only for the last ones to be recorded."""

_SHARED: dict[str, Engine] = {}
_SHARED_LOCK = threading.Lock()
_WRITERS: dict[str, ThreadPoolExecutor] = {}
"""One thread per ledger URL that records the runs shared recorders hand it, in the order given.
A job's build and evaluations are recorded in the job's own thread: they need only the job's
runs (recorded before), not the runs other jobs queued meanwhile."""
_GATHERINGS: dict[str, _Gathering] = {}


def _writer(url: str) -> ThreadPoolExecutor:
    with _SHARED_LOCK:
        if url not in _WRITERS:
            _WRITERS[url] = ThreadPoolExecutor(1, thread_name_prefix="simreport-ledger")
        return _WRITERS[url]


def _gathering(url: str) -> _Gathering:
    with _SHARED_LOCK:
        if url not in _GATHERINGS:
            _GATHERINGS[url] = _Gathering()
        return _GATHERINGS[url]


class _Gathering:
    """The runs handed over to one writer thread and not taken by it yet: each with the
    recorder that handed it over, and the future that tells that recorder it is done. While
    any run waits here, exactly one task of the writer thread is on its way to take them all
    (`take`); the first run handed over to an empty gathering submits it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[tuple[LedgerRecorder, Path, Future[None]]] = []

    def add(self, recorder: LedgerRecorder, path: Path, done: Future[None]) -> bool:
        """Gather a run; True when the gathering was empty (then the caller submits `take`)."""
        with self.lock:
            self.runs.append((recorder, path, done))
            return len(self.runs) == 1

    def take(self) -> list[tuple[LedgerRecorder, Path, Future[None]]]:
        """Every run gathered (in the writer thread)."""
        with self.lock:
            taken, self.runs = self.runs, []
            return taken

    def drop(self, recorder: LedgerRecorder) -> None:
        """Forget the runs `recorder` handed over that were not taken yet."""
        with self.lock:
            mine = [run for run in self.runs if run[0] is recorder]
            self.runs = [run for run in self.runs if run[0] is not recorder]
        for _, _, done in mine:
            done.cancel()


def _key(path: Path) -> str:
    return os.path.abspath(path)


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
        self.evaluations_recorded = 0
        self._say = say
        self._engine: Engine | None = None
        self._unreachable: str | None = None
        self._soon: list[Future[None]] = []
        self._handed: set[str] = set()
        self._own_writer: ThreadPoolExecutor | None = None
        self._own_gathering: _Gathering | None = None

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
        """Record each finished run directory, whole or not at all (GATHER_RUNS to a
        transaction, each in a savepoint of its own); the runs the ledger holds
        already are found with one query and cost none. A folder without the files a run record
        needs (a run refused before it wrote its manifest) is skipped: there is nothing the
        ledger could say about it. Waits for the runs handed over with `record_soon` first;
        they are not recorded twice."""
        if self.url is None:
            return
        self._wait_soon()
        paths = [Path(run_dir) for run_dir in run_dirs]
        self._serially(self._record_runs, [p for p in paths if _key(p) not in self._handed])

    def record_soon(self, run_dir: str | Path) -> None:
        """Hand a finished run directory over to be recorded in the background while the
        caller goes on: a workflow job's runs are recorded while its other runs still run, not
        all after them. The writer thread records the runs handed over while it was busy
        together, GATHER_RUNS to a transaction, each in a savepoint of its own (whole or not at
        all, as with a transaction each). `record_runs` waits for them."""
        if self.url is None:
            return
        path = Path(run_dir)
        if _key(path) in self._handed:
            return
        self._handed.add(_key(path))
        gathering = self._gathering()
        done: Future[None] = Future()
        self._soon.append(done)
        if gathering.add(self, path, done):
            self._submit(_record_gathered, gathering)

    def _gathering(self) -> _Gathering:
        assert self.url is not None
        if self.shared:
            return _gathering(self.url)
        if self._own_gathering is None:
            self._own_gathering = _Gathering()
        return self._own_gathering

    def _record_runs(self, paths: list[Path]) -> None:
        from .ingest import ingest_run, ingest_runs

        paths = [p for p in paths if all((p / name).is_file() for name in REQUIRED_FILES)]
        engine = self._connected(f"run {paths[0]}") if paths else None
        if engine is None:
            for path in paths[1:]:
                self._connected(f"run {path}")  # counted, said once
            return
        # Ours, or a database error the ingest does not map: said and counted, never raised.
        if len(paths) > 1:
            ingest_runs(
                engine,
                paths,
                on_run=self._recorded,
                on_refused=self._refused,
                group=GATHER_RUNS,
            )
            return
        try:
            done = ingest_run(engine, paths[0])
        except Exception as exc:  # failure is data: the build goes on, the problem is said
            self._refused(paths[0], exc)
            return
        self._recorded(done)

    def _recorded(self, run: RunIngest) -> None:
        if run.outcome == "recorded":
            self.runs_recorded += 1
        else:
            self.runs_present += 1

    def _refused(self, path: Path, exc: Exception) -> None:
        self._problem(f"run {path}", exc)

    def _wait_soon(self) -> None:
        wait(self._soon)
        for future in self._soon:
            exc = None if future.cancelled() else future.exception()
            if isinstance(exc, Exception):
                self._problem("a run handed over", exc)  # a bug of ours: said, not lost
        self._soon = []

    def record_evaluations(self, run_dirs: Iterable[str | Path]) -> None:
        """Link each recorded run to its evaluation.json (`run.quality_ref`, see
        ledger/evaluations.py), all in one transaction; folders without an evaluation are
        skipped. Waits for the runs handed over with `record_soon` first, so the runs are
        there to link."""
        if self.url is None:
            return
        from .evaluations import record_evaluations

        self._wait_soon()
        paths = [Path(run_dir) for run_dir in run_dirs]
        if not paths:
            return
        engine = self._connected(f"the evaluations of {paths[0].parent}")
        if engine is None:
            return
        try:
            done = record_evaluations(engine, paths)
        except Exception as exc:  # failure is data: the build goes on, the problem is said
            self._problem(f"the evaluations of {paths[0].parent}", exc)
            return
        for path, outcome in done:
            if isinstance(outcome, Exception):
                self._problem(f"the evaluation of {path}", outcome)
            else:
                self.evaluations_recorded += 1

    def record_build(self, audit_dir: str | Path) -> None:
        """Record the analysis in `audit_dir` (and any of its runs not recorded yet)."""
        if self.url is None:
            return
        from .ingest import ingest_build

        self._wait_soon()
        path = Path(audit_dir)
        engine = self._connected(f"the build of {path}")
        if engine is None:
            return
        try:
            done = ingest_build(engine, path)
        except Exception as exc:  # failure is data: the build goes on, the problem is said
            self._problem(f"the build of {path}", exc)
            return
        if done.outcome == "recorded":
            self.builds_recorded += 1

    def run_checks(self, scenario: Any, *, purpose: Purpose, file: str | Path | None) -> Any:
        """The RunChecks (core.versions) for runs of `scenario` (the file's, as loaded): what
        the ledger pins and holds as review status. A regression needs the ledger, where the
        statuses are held: without one (or when it cannot be read) it is refused here, before
        anything runs. Exploration runs without a ledger check only their files' headers."""
        from ..core.errors import InputError
        from ..core.versions import RunChecks

        def refuse(why: str) -> InputError:
            return InputError(
                f"a regression run needs the ledger, where review statuses are held: {why}",
                file=file,
                path="purpose",
                expected="a reachable ledger (--ledger URL), or purpose exploration",
            )

        if self.url is None:
            if purpose == "regression":
                raise refuse("the ledger is turned off")
            return RunChecks(purpose=purpose)
        engine = self._engine
        if engine is None:
            try:
                engine = self._open()
            except LedgerUnavailable as exc:
                if purpose == "regression":
                    raise refuse(exc.message) from None
                # Exploring goes on; the first run handed over says the ledger is unreachable.
                return RunChecks(purpose=purpose)
        from .run_checks import read_checks

        identity = getattr(scenario, "identity", None)
        if identity is not None and file is not None:
            # First sight of the declared version pins its design, with its file's status. A
            # file whose design changed under a pinned version is left to the runs: each fails
            # while loading, naming both digests.
            from .errors import ScenarioVersionChanged
            from .review import import_loaded

            with contextlib.suppress(ScenarioVersionChanged):
                import_loaded(engine, scenario, Path(file), reviewer="first run", assets=False)
        return read_checks(
            engine, scenario_id=identity.id if identity is not None else None, purpose=purpose
        )

    def close(self) -> None:
        """Done with the recorder. Runs handed over with `record_soon` and not started yet are
        dropped (a job that ends early, interrupted: the next build records them)."""
        if self._soon:
            self._gathering().drop(self)
        for future in self._soon:
            future.cancel()
        self._soon = []
        if self._own_writer is not None:
            self._own_writer.shutdown(wait=True)
            self._own_writer = None
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
            raise LedgerIncomplete(self.summary(), problems=self.problems)

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
        try:
            self._open()
        except LedgerUnavailable as exc:
            self._unreachable = exc.message
            self._note(f"{what} not recorded: {exc.message}")
            return None
        return self._engine

    def _submit(self, fn: Callable[..., None], *args: Any) -> Future[None]:
        """`fn(*args)` in the URL's writer thread (a shared recorder) or this recorder's own."""
        assert self.url is not None
        if self.shared:
            return _writer(self.url).submit(fn, *args)
        if self._own_writer is None:
            self._own_writer = ThreadPoolExecutor(1, thread_name_prefix="simreport-ledger")
        return self._own_writer.submit(fn, *args)

    def _serially(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, after what was handed to the writer thread before (a shared recorder's
        runs all go through it), else here."""
        if not self.shared:
            return fn(*args)
        assert self.url is not None
        return _writer(self.url).submit(fn, *args).result()

    def _open(self) -> Engine:
        """Connect (one engine per URL and process when `shared`); raises LedgerUnavailable."""
        assert self.url is not None
        if self.shared:
            with _SHARED_LOCK:
                if self.url not in _SHARED:
                    _SHARED[self.url] = connect(self.url)
                self._engine = _SHARED[self.url]
        else:
            self._engine = connect(self.url)
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


def _record_gathered(gathering: _Gathering) -> None:
    """In the writer thread: record the runs gathered, in transactions of GATHER_RUNS at most,
    and tell each recorder how its runs went."""
    taken = gathering.take()
    if not taken:
        return
    try:
        _record_taken(taken)
    except BaseException as exc:
        for _, _, done in taken:
            if done.set_running_or_notify_cancel():
                done.set_exception(exc)  # a bug of ours: said by the recorder, not lost
        if not isinstance(exc, Exception):
            raise
        return
    for _, _, done in taken:
        if done.set_running_or_notify_cancel():
            done.set_result(None)


def _record_taken(taken: list[tuple[LedgerRecorder, Path, Future[None]]]) -> None:
    """Record each recorder's runs as `record_runs` does: a transaction per recorder (the runs
    waiting at once seldom come from more than the one or two jobs running)."""
    mine: dict[LedgerRecorder, list[Path]] = {}
    for recorder, path, _ in taken:
        mine.setdefault(recorder, []).append(path)
    for recorder, paths in mine.items():
        recorder._record_runs(paths)


__all__ = ["EXIT_LEDGER", "LedgerIncomplete", "LedgerRecorder"]
