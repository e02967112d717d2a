"""The run service's `/metrics`, in Prometheus' text format, open like `/healthz`: counts, never a
token, a name or a run's content. `ServiceCollector` reads the queue's families from the ledger
at each scrape (so every API of a ledger says the same) and this process' own (workers, ledger
errors, refused connections); `count_ledger_errors` counts the ledger calls that failed.
The design: docs/service.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Final

import sqlalchemy as sa
from prometheus_client import CONTENT_TYPE_LATEST, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.engine.interfaces import ExceptionContext

    from .supervisor import WorkerPool

CONTENT_TYPE = CONTENT_TYPE_LATEST


REFUSAL_CODES: Final = (
    "body_too_large",
    "headers_too_large",
    "request_timeout",
    "too_many_connections",
)
"""The refusals of simreport.service.limits, counted by code."""


class Tally:
    """Counts by key, added to from any thread of the process."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, key: str = "") -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def count(self, key: str = "") -> int:
        with self._lock:
            return self._counts.get(key, 0)


def count_ledger_errors(target: Engine | type[Engine], add: Callable[[], None]) -> None:
    """Call `add` for every ledger call of `target` (an engine, or the Engine class: every
    engine of the process) that failed because the database refused or did not answer. A
    constraint the queue expects to meet (IntegrityError) is not a failure; nor is a pooled
    connection found dead by its pre-ping, which is replaced."""

    def failed(context: ExceptionContext) -> None:
        unavailable = (sa.exc.OperationalError, sa.exc.InterfaceError)
        if context.is_pre_ping:
            return
        if context.is_disconnect or isinstance(context.sqlalchemy_exception, unavailable):
            add()

    sa.event.listen(target, "handle_error", failed)


class ServiceCollector(Collector):
    """The families of one API process (see docs/service.md), read at each scrape."""

    def __init__(
        self,
        engine: Engine,
        ledger_errors: Tally,
        refusals: Tally,
        pool: Callable[[], WorkerPool | None],
        clock: Callable[[], datetime],
    ) -> None:
        self.engine = engine
        self.ledger_errors = ledger_errors
        self.refusals = refusals
        self.pool = pool
        self.clock = clock

    def collect(self) -> Iterable[Metric]:
        from . import queue

        pool = self.pool()
        yield _gauge(
            "simreport_workers_asked",
            "worker processes this API was asked for",
            0 if pool is None else pool.asked,
        )
        yield _gauge(
            "simreport_workers_alive",
            "worker processes of this API running now",
            0 if pool is None else pool.alive(),
        )
        yield CounterMetricFamily(
            "simreport_worker_restarts",
            "worker processes of this API started again after they died",
            value=0 if pool is None else pool.restarts,
        )
        try:
            statistics = queue.run_statistics(self.engine)
            state = queue.queue_state(self.engine)
        except (sa.exc.OperationalError, sa.exc.InterfaceError):
            up = False  # counted by count_ledger_errors
        else:
            up = True
        errors = CounterMetricFamily(
            "simreport_ledger_errors",
            "ledger calls that failed: the database refused or did not answer",
            labels=["process"],
        )
        errors.add_metric(["api"], self.ledger_errors.count())
        errors.add_metric(["workers"], 0 if pool is None else pool.ledger_errors())
        yield errors
        yield _gauge("simreport_ledger_up", "1 when this scrape read the ledger", int(up))
        refused = CounterMetricFamily(
            "simreport_http_refused",
            "requests and connections refused by the connection limits, by error code",
            labels=["code"],
        )
        for code in REFUSAL_CODES:
            refused.add_metric([code], self.refusals.count(code))
        yield refused
        if not up:
            return
        runs = GaugeMetricFamily(
            "simreport_runs",
            "runs the service queued, by execution status",
            labels=["status"],
        )
        for status, count in statistics.by_status.items():
            runs.add_metric([status], count)
        yield runs
        yield _gauge(
            "simreport_queue_depth", "runs pending: queued, not claimed yet", state.pending
        )
        oldest = state.oldest_pending_at
        age = 0.0 if oldest is None else max(0.0, (self.clock() - oldest).total_seconds())
        yield _gauge(
            "simreport_oldest_pending_seconds",
            "how long the oldest pending run has waited (0: none pending)",
            age,
        )
        histogram = HistogramMetricFamily(
            "simreport_run_claim_to_finish_seconds",
            "time from a run's first claim by a worker to its end, by execution status",
            labels=["status"],
        )
        for status, durations in statistics.claim_to_finish.items():
            buckets: list[tuple[str, float]] = [
                (str(float(bound)), count)
                for bound, count in zip(
                    queue.CLAIM_TO_FINISH_BUCKETS, durations.at_most, strict=True
                )
            ]
            buckets.append(("+Inf", durations.count))
            histogram.add_metric([status], buckets, durations.total_seconds)
        yield histogram


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def service_registry(collector: ServiceCollector) -> CollectorRegistry:
    """A registry of the service's families and the process' own (CPU, memory, open files)."""
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's families as Prometheus' text format (CONTENT_TYPE)."""
    text: bytes = generate_latest(registry)
    return text


__all__ = [
    "CONTENT_TYPE",
    "REFUSAL_CODES",
    "ServiceCollector",
    "Tally",
    "count_ledger_errors",
    "exposition",
    "service_registry",
]
