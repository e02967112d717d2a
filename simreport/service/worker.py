"""Workers of the run service: claim queued runs from the ledger and execute them, one after
another, in a run process of their own (run_process.py), streaming their events into the ledger
and recording each run once; the keeper (keeper.py) renews leases and empties the spool, and the
cancel watch (cancellation.py) hears of a cancelled run within a second. How a run is handed
over, reclaimed and retried: docs/service.md."""

from __future__ import annotations

import gc
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from .cancellation import CancelWatch
from .execution import Execution
from .keeper import Keeper, describe_outage
from .run_process import RunProcess
from .scratch import sweep_scratch
from .worker_secrets import hidden_variables, install, say, worker_scrubber

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from .spool import Spool

RUNS_PER_PROCESS: Final = 200
"""Runs one run process executes at most before a fresh one takes over, so that what agents'
code leaves behind in its process does not pile up."""
FIRST_POLL_SECONDS: Final = 0.01
"""How soon a worker that found nothing to claim looks again; each further look waits twice
as long, up to its poll interval (runs started one after another are claimed at once, while an
idle worker looks seldom)."""
ERROR_BACKOFF_SECONDS: Final = 1.0
"""How long a worker waits after the ledger failed to answer a claim, and how often a worker
whose spool holds runs looks whether they were recorded (it claims no run before)."""


class StopEvent(Protocol):
    """What tells a worker to stop (a threading or multiprocessing Event)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def run_worker(
    url: str,
    *,
    worker_id: str,
    lease_seconds: float = 30.0,
    heartbeat_seconds: float = 5.0,
    poll_seconds: float = 0.05,
    library: str | Path,
    stop_event: StopEvent,
    max_runs: int | None = None,
    drain_seconds: float = 5.0,
    on_run: Callable[[str, str], None] | None = None,
    policy: str | Path | None = None,
    tokens_env: str = "SIMREPORT_API_TOKENS",
    spool: str | Path | None = None,
) -> int:
    """Claim and execute runs of the ledger at `url` until `stop_event` is set (or `max_runs`
    runs were executed); returns how many. `library` is the asset library the runs' manifests
    were frozen from. When `stop_event` is set during a run, the run has `drain_seconds` to
    end by itself before it is cancelled; either way it is recorded (runs kept in the spool
    get `drain_seconds` more to be recorded, and are left there after). `on_run(run_id,
    outcome)` hears of each run once: its execution status when recorded (for a run kept in
    the spool, once recorded from there), "lease_lost", or "unrecorded" (the ledger refused
    it). `policy`: the execution policy file (None: the offline provider only) every run is
    checked against before it executes and resolves its endpoints and simulators in.
    `tokens_env`: the variable holding the service's API tokens, which run processes never
    see. `spool`: the folder runs the ledger could not take yet are kept in (default:
    `spool.default_spool()`)."""
    import sqlalchemy as sa

    from ..core.redaction import url_secrets
    from ..ledger.db import connect, unavailability
    from ..ledger.migrate import prepare_for_writing
    from .config import load_service_policy
    from .spool import Spool, default_spool, ledger_name

    if not 0 < heartbeat_seconds < lease_seconds:
        raise ValueError("heartbeat_seconds must be positive and shorter than lease_seconds")
    execution_policy = load_service_policy(Path(policy) if policy is not None else None)
    engine = connect(url)
    install(worker_scrubber(execution_policy, tokens_env, engine.url.password))
    worker = Worker(
        engine,
        worker_id=worker_id,
        library=Path(library),
        lease_seconds=lease_seconds,
        heartbeat_seconds=heartbeat_seconds,
        stop_event=stop_event,
        drain_seconds=drain_seconds,
        spool=Spool(Path(spool) if spool is not None else default_spool(), ledger_name(url)),
        secrets=url_secrets(url),
        on_run=on_run,
        policy=execution_policy.to_doc(),
        key_variables=execution_policy.key_variables(),
        hidden=hidden_variables(tokens_env),
    )
    keeper = worker.keeper
    try:
        prepare_for_writing(engine)
        swept = sweep_scratch()
        if swept:
            say(f"removed {swept} run folder(s) left by workers that were killed")
        worker.start_process()  # ready before the first run is claimed
        keeper.start()  # first takes over what dead workers left in the spool
        worker.cancels.start()
        # What is loaded by now lives as long as the worker: full collections need not walk it.
        gc.freeze()
        done = idle = 0
        running: Execution | None = None
        while True:
            if running is None:
                if stop_event.is_set() or (max_runs is not None and done >= max_runs):
                    keeper.wait_recorded(drain_seconds)
                    return done
                if keeper.spooled():
                    # Runs kept in the spool are recorded before any other is claimed.
                    keeper.wait_recorded(ERROR_BACKOFF_SECONDS)
                    continue
                running = worker.next_run()
                if running is None:
                    wait = min(poll_seconds, FIRST_POLL_SECONDS * 2**idle)
                    stop_event.wait(ERROR_BACKOFF_SECONDS if worker.ledger_away else wait)
                    idle = min(idle + 1, 30)
                    continue
                idle = 0
            upcoming = None
            outcome: str | None = "lease_lost"
            try:
                if running.follow():
                    if not running.handed_back:
                        worker.discard_process()  # it died: the next run gets a fresh one
                    elif (
                        not stop_event.is_set()
                        and (max_runs is None or done + 1 < max_runs)
                        and not keeper.spooled()
                    ):
                        # The run process is free: the next run executes while this one is
                        # recorded.
                        upcoming = worker.next_run_or_none()
                    outcome = running.record()
            except sa.exc.DBAPIError as exc:
                if unavailability(exc) is not None:
                    # Kept on disk, its lease renewed, until the ledger takes it.
                    keeper.keep(running, exc)
                    outcome = None
                else:
                    # Refused even as crashed: its lease runs out and it ends `worker_lost`,
                    # as if this worker had died, while the worker goes on with the next run.
                    say(f"{running.claim.run_id} not recorded: {worker.why(exc)}")
                    outcome = "unrecorded"
                if not running.handed_back:
                    worker.discard_process()
            running.discard()
            done += 1
            if on_run is not None and outcome is not None:
                on_run(running.claim.run_id, outcome)
            running = upcoming
    finally:
        worker.close()
        engine.dispose()


class Worker:
    """What a worker keeps from one run to the next: its ledger, its run process, the keeper of
    its leases and spool."""

    def __init__(
        self,
        engine: Engine,
        *,
        worker_id: str,
        library: Path,
        lease_seconds: float,
        heartbeat_seconds: float,
        stop_event: StopEvent,
        drain_seconds: float,
        spool: Spool,
        secrets: tuple[str, ...],
        on_run: Callable[[str, str], None] | None,
        policy: dict[str, Any] | None = None,
        key_variables: Sequence[str] = (),
        hidden: tuple[str, ...] = (),
    ) -> None:
        self.engine = engine
        self.policy = policy if policy is not None else {}
        """The execution policy's document, sent with every run to its run process."""
        self.key_variables = key_variables
        """The variables the policy's endpoints and sandboxes read keys from."""
        self.hidden = hidden
        """The environment variables run processes go without."""
        self.worker_id = worker_id
        self.library = library
        self.lease_seconds = lease_seconds
        self.heartbeat_seconds = heartbeat_seconds
        self.stop_event = stop_event
        self.drain_seconds = drain_seconds
        self.secrets = secrets
        self.process: RunProcess | None = None
        self.ledger_away = False
        """Whether the ledger failed to answer the last claim."""
        self.claimed_last = False
        """Whether the last claim found a run (the next one need not look first)."""
        self.executions: set[Execution] = set()
        """The runs claimed and not yet recorded."""
        self.keeper = Keeper(self, spool, on_run)
        self.cancels = CancelWatch(engine, self.keeper.held, say)
        """Hears of the cancellation of a run it executes within a second (cancellation.py)."""

    def keys(self) -> dict[str, str | None]:
        """The values of the policy's key variables in this worker's environment (None: unset),
        sent with each run: a run process starts from a fork server that may have read the
        environment earlier, so this worker's environment, as it is now, decides."""
        return {name: os.environ.get(name) for name in self.key_variables}

    def why(self, exc: BaseException) -> str:
        """What the ledger said, on one line, without the credentials of its URL."""
        from ..core.redaction import redact_secrets

        orig = getattr(exc, "orig", None)
        lines = str(orig if orig is not None else exc).strip().splitlines()
        said = f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")
        return redact_secrets(said, self.secrets)

    def next_run(self) -> Execution | None:
        """The oldest pending run claimed and sent to the run process (None when nothing is
        pending, or the ledger did not answer)."""
        import sqlalchemy as sa

        from ..ledger.db import unavailability
        from .queue import claim

        try:
            claimed = claim(
                self.engine,
                self.worker_id,
                lease_seconds=self.lease_seconds,
                look_first=not self.claimed_last,
            )
        except sa.exc.DBAPIError as exc:
            if unavailability(exc) is None:
                raise
            # The database is away for a moment (restarting, failing over, its disk full):
            # wait for it.
            say(f"no run claimed: {describe_outage(unavailability(exc))} ({self.why(exc)})")
            self.ledger_away = True
            return None
        self.ledger_away = False
        self.claimed_last = claimed is not None
        if claimed is None:
            return None
        if self.process is not None and self.process.runs >= RUNS_PER_PROCESS:
            self.process.close()
            self.process = None
        for attempt in (1, 2):
            process = self.start_process()
            execution = Execution(self, claimed, process)
            self.executions.add(execution)
            try:
                execution.start()
                return execution
            except OSError:  # the idle run process died: a fresh one executes the run
                execution.discard()
                self.discard_process()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def next_run_or_none(self) -> Execution | None:
        """`next_run`, None when the ledger refused the claim (the loop claims again)."""
        import sqlalchemy as sa

        try:
            return self.next_run()
        except sa.exc.DBAPIError as exc:
            say(f"no run claimed: {self.why(exc)}")
            return None

    def start_process(self) -> RunProcess:
        """The run process, started afresh when there is none alive."""
        if self.process is None or not self.process.alive():
            self.discard_process()
            self.process = RunProcess(f"simreport-run-{self.worker_id}")
        return self.process

    def discard_process(self) -> None:
        """Kill the run process (a fresh one executes the next run)."""
        if self.process is not None:
            self.process.kill()
            self.process = None

    def close(self) -> None:
        """Stop the keeper (runs left in the spool stay there for a worker to take over) and
        the run process. Runs still claimed (left by an error) are dropped, to be reclaimed
        when their leases run out."""
        self.cancels.close()
        self.keeper.close()
        for execution in list(self.executions):
            execution.discard()
            self.discard_process()
        if self.process is not None:
            self.process.close()
            self.process = None


__all__ = ["StopEvent", "default_worker_id", "run_worker", "sweep_scratch"]
