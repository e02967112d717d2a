"""OpenTelemetry traces of testbed runs: where this process sends spans — what the standard
OTEL_* environment says, read once, or what `install` sets — and `trace_run`, which makes one
run's spans from its record log (`run_spans`). Without configuration nothing is loaded, attached
or exported, and a run's files are the same either way. What the spans are: docs/testbed.md.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from .records import RecordLog
    from .run_spans import RunSpans

TRACER_NAME = "simreport.testbed"
EXPORTER_GROUP = "opentelemetry_traces_exporter"
"""The entry-point group naming span exporters (the OpenTelemetry SDK's own)."""

_log = logging.getLogger("simreport.tracing")
_lock = threading.Lock()
_counters: Counter[str] = Counter()
_provider: TracerProvider | None = None
_settled = False
"""Whether this process knows where spans go (the environment read, or `install` called)."""
_armed_in: int | None = None
"""The process that armed `_flush_at_exit` (a forked worker inherits the value, not the hook)."""


def counters() -> dict[str, int]:
    """What tracing did in this process, counted (failure is data): `spansExported`,
    `exportFailures` and `spansNotExported` (an exporter failed), `exporterErrors`,
    `exportersUnavailable` (a configured exporter is not installed) and `tracingErrors`."""
    with _lock:
        return dict(_counters)


def count(name: str, n: int = 1) -> None:
    with _lock:
        _counters[name] += n


def exporter_names(environ: Mapping[str, str]) -> list[str]:
    """The span exporters the standard environment asks for: `OTEL_TRACES_EXPORTER`'s list
    (`none` for none), else `otlp` when an OTLP endpoint is set; none without either, unlike
    the OpenTelemetry default — and none at all under `OTEL_SDK_DISABLED=true`."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    named = [
        n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()
    ]
    if named:
        return [] if "none" in named else list(dict.fromkeys(named))
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    return ["otlp"] if endpoint and endpoint.strip() else []


def entry_point_name(name: str, environ: Mapping[str, str]) -> str:
    """The exporter entry point an `OTEL_TRACES_EXPORTER` name means: `otlp` is OTLP over
    HTTP/protobuf (the `otlp` extra), or over gRPC when the OTLP protocol says `grpc`."""
    if name != "otlp":
        return name
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", ""
    )
    return "otlp_proto_grpc" if protocol.strip().lower() == "grpc" else "otlp_proto_http"


def load_exporters(names: list[str], environ: Mapping[str, str]) -> list[SpanExporter]:
    """The exporters `names` mean, each made with its own settings from the environment; one
    not installed, or failing to start, is counted (`exportersUnavailable`) and left out."""
    from importlib.metadata import entry_points

    out: list[SpanExporter] = []
    for name in names:
        point = entry_point_name(name, environ)
        found = list(entry_points(group=EXPORTER_GROUP, name=point))
        try:
            if not found:
                hint = " (install simreport[otlp])" if point == "otlp_proto_http" else ""
                raise LookupError(f"no span exporter {point!r} is installed{hint}")
            out.append(found[0].load()())
        except Exception as exc:  # failure is data: counted, and the run goes on untraced
            count("exportersUnavailable")
            _log.warning("tracing: exporter %s unavailable: %s: %s", name, type(exc).__name__, exc)
    return out


def install(exporter: SpanExporter, *, batch: bool = True) -> None:
    """Send the spans of every later run in this process to `exporter`, whatever the
    environment says (a program embedding simreport, a test). `batch=False` exports each span
    as it ends, in the run's thread; the default queues them for a background thread."""
    from .run_spans import build_provider

    provider = build_provider([exporter], batch=batch, count=count)
    _replace(provider, settled=True)
    _flush_at_exit()


def uninstall() -> None:
    """Flush and shut down this process's exporters; the next run reads the environment again."""
    _replace(None, settled=False)


def _replace(provider: TracerProvider | None, *, settled: bool) -> None:
    global _provider, _settled
    with _lock:
        old, _provider, _settled = _provider, provider, settled
    if old is not None:
        old.shutdown()


def _flush_at_exit() -> None:
    """Have this process send what its provider still holds when it ends. The SDK does so at
    interpreter exit, but a multiprocessing worker (where a harness runs its runs) ends through
    multiprocessing's exit hooks instead, which a forked worker starts without: armed once in
    each process that traces."""
    global _armed_in
    if _armed_in == os.getpid():
        return
    from multiprocessing.util import Finalize

    Finalize(None, _shutdown_current, exitpriority=0)
    _armed_in = os.getpid()


def _shutdown_current() -> None:
    with _lock:
        provider = _provider
    if provider is not None:
        provider.shutdown()


def current_provider() -> TracerProvider | None:
    """This process's tracer provider: set by `install`, or made from the environment at the
    first call (None when the environment configures no exporter that is installed)."""
    global _provider, _settled
    with _lock:
        if _settled:
            return _provider
    names = exporter_names(os.environ)
    provider = None
    if names:
        exporters = load_exporters(names, os.environ)
        if exporters:
            from .run_spans import build_provider

            provider = build_provider(exporters, batch=True, count=count)
    with _lock:
        if _settled:  # another thread settled it first
            if provider is not None:
                provider.shutdown()
            return _provider
        _provider, _settled = provider, True
    return provider


def run_attributes(run_dir: Path | None) -> dict[str, str | int]:
    """What names the run on every span: its condition and replication, as the engine wrote
    them into the run's manifest.json before the world started, and `simreport.run.id`, the
    two together (`<condition>/<replication>`, as the audit's run folders are laid out)."""
    from .run_spans import RUN_CONDITION, RUN_ID, RUN_REPLICATION

    if run_dir is None:
        return {}
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    condition, replication = manifest.get("condition"), manifest.get("replication")
    if not isinstance(condition, str) or not isinstance(replication, int):
        return {}
    return {
        RUN_ID: f"{condition}/{replication}",
        RUN_CONDITION: condition,
        RUN_REPLICATION: replication,
    }


def trace_run(
    log: RecordLog, *, run_dir: Path | None, agent_calls: Callable[[], int]
) -> RunSpans | None:
    """The spans of one run, listening to its record log from now on (its first record opens
    the run's span; the caller ends them with `finish`). None, with nothing attached, when
    tracing is not configured or cannot start (counted as `tracingErrors`). `agent_calls`
    counts the calls made to the agent, so a call that returned no step still has its span."""
    try:
        provider = current_provider()
        if provider is None:
            return None
        _flush_at_exit()
        from .run_spans import RunSpans

        spans = RunSpans(
            provider.get_tracer(TRACER_NAME), log, run_attributes(run_dir), agent_calls, count
        )
    except Exception as exc:  # failure is data: a run is never failed by its tracing
        count("tracingErrors")
        _log.warning("tracing: cannot trace the run: %s: %s", type(exc).__name__, exc)
        return None
    log.listeners.append(spans.on_record)
    return spans
