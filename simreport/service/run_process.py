"""The run process: where a worker's runs execute, one after another, apart from the worker.
Each starts as a process that has run nothing before (forked from a fork server that imported
the kernel once, or spawned) and is sent each claimed run over a pipe (`RunProcess`). It starts
each run with no stop request pending and without the agent modules an earlier run imported
from its asset root, refuses a run the execution policy does not allow (`PolicyRefusal`),
takes SIGINT as the run's stop request, exits when its worker is gone, and hands the run's
events to the worker in batches as they are emitted (`EventSender`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..core.errors import SimreportError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkServerContext, SpawnContext

    from ..core.execution_policy import ExecutionPolicy
    from ..core.schema import Scenario
    from ..core.versions import RunChecks

SEND_SECONDS: Final = 0.2
"""The longest an event waits in the run process before it is handed to the worker, which
streams what it is handed at once (a run that ends sooner has its events recorded with it)."""
BATCH_EVENTS: Final = 500
"""Events handed over, and streamed in one transaction, at most."""
EXIT_SECONDS: Final = 5.0
"""How long an idle run process asked to exit may take before it is killed."""


class RunProcess:
    """A run process and the pipe to it: it executes the runs it is sent, one after another."""

    def __init__(self, name: str) -> None:
        context = _fresh_processes()
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_run_process, args=(theirs,), name=name, daemon=True)
        self.runs = 0
        """Runs sent to it."""
        try:
            self.process.start()
        finally:
            theirs.close()  # so that the pipe ends when the run process does

    def alive(self) -> bool:
        return self.process.is_alive()

    def request_stop(self) -> None:
        if self.process.pid is not None and self.process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGINT)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()

    def close(self) -> None:
        """Ask the idle run process to exit; kill it if it does not."""
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.process.join(EXIT_SECONDS)
        self.kill()


PRELOAD: Final = [
    "simreport.cli",
    "simreport.service.run_process",
    "simreport.kernel.engine",
    "simreport.kernel.warm",
]
"""What a run process needs, imported once in the fork server that run processes start from
(warm: the code fingerprints every run records). `simreport.cli` is there because each run
process imports the command's main module again (multiprocessing prepares a child so): with
its imports loaded already, that costs milliseconds instead of a third of a second."""


def _fresh_processes() -> ForkServerContext | SpawnContext:
    """Where run processes come from: each has run nothing before (see `fresh_processes`)."""
    from ..core.processes import fresh_processes

    return fresh_processes(PRELOAD)


def _run_process(conn: Connection) -> None:
    """A run process: executes the runs it is sent — (scenario document, run directory, asset
    root, checks document, policy, hidden variables, key values) — one after another until its
    worker sends None or goes. For each it answers ("started", None), its events in batches
    ("events", [...]) and ("done", None); an error outside the run is answered ("error", why)
    and ends the process."""
    from ..kernel import interrupt

    # SIGINT and SIGTERM become the run's stop request. The process exits when orphaned: when
    # the worker that started it dies.
    interrupt.init_worker()
    from ..core.execution_policy import ExecutionPolicy
    from ..core.redaction import environment_secrets
    from ..core.versions import RunChecks
    from ..kernel.engine import run_scenario, validate_scenario

    sender = EventSender(conn)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):  # the worker is gone
            return
        if job is None:
            return
        scenario_doc, run_dir, asset_root, checks_doc, policy_doc, hidden, keys = job
        for name in hidden:  # what runs never need: the service's own credentials
            os.environ.pop(name, None)
        for name, value in keys.items():  # the policy's keys as the worker has them now
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        # A stop request that came after the last run had ended was that run's, not this one's.
        interrupt.reset()
        loaded = set(sys.modules)
        try:
            sender.send(("started", None))
            scenario = validate_scenario(scenario_doc)
            policy = ExecutionPolicy.model_validate(policy_doc)
            checks = RunChecks.model_validate(checks_doc)
            _refuse_disallowed(scenario, policy, Path(asset_root), checks)
            secrets = environment_secrets(os.environ, policy.key_variables())
            run_scenario(
                scenario,
                run_dir,
                condition="service",
                replication=0,
                asset_root=asset_root,
                checks=checks,
                on_event=sender.add,
                resources=policy,
                secrets=secrets,
            )
            _forget_imports(loaded, Path(asset_root).resolve())
            # The events not handed over yet are in the run directory the worker records.
            sender.send(("done", None), drop_events=(Path(run_dir) / "result.json").is_file())
        except BaseException as exc:  # the run process's boundary: the worker records why
            with contextlib.suppress(OSError):
                sender.send(("error", f"{type(exc).__name__}: {exc}"))
            raise SystemExit(1) from None


class PolicyRefusal(SimreportError):
    """A run its worker's execution policy does not allow (queued before the policy changed,
    or by another service): it never executes."""


def _refuse_disallowed(
    scenario: Scenario, policy: ExecutionPolicy, asset_root: Path, checks: RunChecks
) -> None:
    """PolicyRefusal naming the first thing the scenario carries that `policy` does not allow
    (as the service checks it when the run is queued): the worker decides what it executes."""
    from ..core.execution_policy import spec_issues
    from ..kernel.testbed.assets import AgentAsset, AssetError, AssetLibrary

    sut = scenario.sut
    # The agent's own entry may be repeated by sut.entry; it is looked up once the rest passed
    # (the asset library's folder name among it).
    issues = spec_issues(scenario, policy, agent_entry=sut.entry if sut is not None else None)
    if not issues and sut is not None and sut.entry is not None:
        folder = scenario.provenance.asset_library if scenario.provenance else "assets"
        library = AssetLibrary(asset_root / folder, pins=checks.pins or None)
        try:
            entry = library.resolve(sut.agent, "agent", "sut.agent").typed(AgentAsset).entry
        except (AssetError, TypeError):
            entry = None
        issues = spec_issues(scenario, policy, agent_entry=entry)
    if issues:
        first = issues[0]
        raise PolicyRefusal(
            f"not allowed by the execution policy: spec.{first.path}: {first.message}"
        )


def _forget_imports(loaded: set[str], asset_root: Path) -> None:
    """Forget the modules a run imported from its asset root (its agents' code), so that the
    next run imports them afresh, as a process of its own would."""
    for name in set(sys.modules) - loaded:
        file = getattr(sys.modules[name], "__file__", None)
        if file and Path(file).resolve().is_relative_to(asset_root):
            del sys.modules[name]
    for key in [k for k in sys.path_importer_cache if Path(k).is_relative_to(asset_root)]:
        del sys.path_importer_cache[key]


class EventSender:
    """Hands a run's events to the worker in batches: every SEND_SECONDS, and whenever
    BATCH_EVENTS are waiting. Never raises to the run: once the worker is gone, events are
    dropped (the process exits as orphaned)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.pending: list[dict[str, Any]] = []
        self.gone = False
        threading.Thread(target=self._tick, name="simreport-events", daemon=True).start()

    def add(self, event: dict[str, Any]) -> None:
        with self.lock:
            self.pending.append(event)
            if len(self.pending) >= BATCH_EVENTS:
                self._hand_over()

    def send(self, message: tuple[str, Any], *, drop_events: bool = False) -> None:
        """Send `message` after the events still waiting, or without them (`drop_events`);
        OSError when the worker is gone."""
        with self.lock:
            if drop_events:
                self.pending = []
            self._hand_over()
            self.conn.send(message)

    def _hand_over(self) -> None:
        if self.pending and not self.gone:
            try:
                self.conn.send(("events", self.pending))
            except OSError:
                self.gone = True
        self.pending = []

    def _tick(self) -> None:
        while not self.gone:
            time.sleep(SEND_SECONDS)
            with self.lock:
                self._hand_over()
