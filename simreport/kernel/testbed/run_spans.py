"""A testbed run's OpenTelemetry spans, made from its record stream as each record is kept.

Ids are the record log's (`RecordLog.span`): the trace is the run's trace, a tool call's span and
a fault's span have the spanId their records carry, the run's span the one its lifecycle records
carry, and the span of the agent's n-th call is `span("agent:n")`, the parent id the
`traceparent` header of that call names. Times are the records' wall-clock readings (an agent
step starts its measured duration before its record); the run's logical time rides along as
attributes. Nothing here writes to the run: the spans are made from records already kept.
Loaded by `tracing` only when tracing is configured.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from ...core.package_version import __version__
from .records import RecordLog

_log = logging.getLogger("simreport.tracing")

RUN_ID = "simreport.run.id"
RUN_CONDITION = "simreport.run.condition"
RUN_REPLICATION = "simreport.run.replication"
MANIFEST_ID = "simreport.manifest.id"
"""The attributes every span of a run carries (the manifest's once it is locked)."""

Count = Callable[[str, int], None]
"""Where a counted outcome goes (`tracing.count`): failure is data."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# --------------------------------------------------------------------------- the process's provider

_PENDING: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar(
    "simreport_pending_span_ids", default=None
)
"""The (trace id, span id) of the span being started by `RunSpans`."""


class RecordIds(IdGenerator):
    """The ids of the span being started, as the run's record log decides them; random ids for
    any other span started through the same provider."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()

    def generate_trace_id(self) -> int:
        pending = _PENDING.get()
        return pending[0] if pending is not None else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        pending = _PENDING.get()
        return pending[1] if pending is not None else self._random.generate_span_id()


class CountedExporter(SpanExporter):
    """An exporter whose every outcome is counted (`tracing.counters`) and whose errors never
    leave it: an exporter that fails costs its spans, never a run."""

    def __init__(self, inner: SpanExporter, count: Count) -> None:
        self.inner = inner
        self._count = count

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # failure is data: counted below, logged here
            _log.warning("span export failed: %s: %s", type(exc).__name__, exc)
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self._count("spansExported", len(spans))
        else:
            self._count("exportFailures", 1)
            self._count("spansNotExported", len(spans))
        return result

    def shutdown(self) -> None:
        try:
            self.inner.shutdown()
        except Exception as exc:  # failure is data: counted and logged
            self._count("exporterErrors", 1)
            _log.warning("span exporter shutdown failed: %s: %s", type(exc).__name__, exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            return bool(self.inner.force_flush(timeout_millis))
        except Exception as exc:  # failure is data: counted and logged
            self._count("exporterErrors", 1)
            _log.warning("span exporter flush failed: %s: %s", type(exc).__name__, exc)
            return False


def build_provider(
    exporters: Sequence[SpanExporter], *, batch: bool, count: Count
) -> TracerProvider:
    """A tracer provider sending every span to `exporters`: from a queue a background thread
    empties (`batch`, sized by the standard OTEL_BSP_* variables), or as each span ends. Every
    run is traced whole, so the `traceparent` header's sampled flag always holds."""
    resource = Resource.create({})
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        # OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES name the service when set.
        resource = resource.merge(Resource({"service.name": "simreport"}))
    resource = resource.merge(Resource({"service.version": __version__}))
    provider = TracerProvider(sampler=ALWAYS_ON, resource=resource, id_generator=RecordIds())
    for exporter in exporters:
        counted = CountedExporter(exporter, count)
        provider.add_span_processor(
            BatchSpanProcessor(counted) if batch else SimpleSpanProcessor(counted)
        )
    return provider


# --------------------------------------------------------------------------- one run's spans


def _wall_ns(record: Mapping[str, Any]) -> int | None:
    wall = (record.get("clock") or {}).get("wall")
    if not isinstance(wall, str):
        return None
    return (datetime.fromisoformat(wall) - _EPOCH) // _MICROSECOND * 1000


def _id(hex_id: str) -> int:
    return int(hex_id, 16)


def _plain(values: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The attributes among `values` that a span can carry (None left out)."""
    return {k: v for k, v in values.items() if isinstance(v, (str, bool, int, float))}


class RunSpans:
    """The spans of one run, made as its records are kept (`on_record`, a `RecordLog` listener)
    and closed by `finish` when the run ends:

    - `testbed.run`, the run, from its first record to its end;
    - `stage <STAGE>`, one per lifecycle stage entered, children of the run;
    - `agent.step`, one per call of the agent (a CLIENT span: the agent's own spans nest under
      it), and `execute_tool <tool>`, one per tool call, children of the stage they happen in;
    - `fault <id>`, each injected fault from its first hit to its recovery (or failure), a child
      of the run linked to the call it hit.

    Every other record is an event (type, record id, logical ms) on the span it belongs to.
    """

    def __init__(
        self,
        tracer: trace.Tracer,
        log: RecordLog,
        attributes: Mapping[str, AttributeValue],
        agent_calls: Callable[[], int],
        count: Count,
    ) -> None:
        self._tracer = tracer
        self._count = count
        self._log = log
        self._trace_id = _id(log.trace_id)
        self._common: dict[str, AttributeValue] = dict(attributes)
        self._agent_calls = agent_calls
        self._root: Span | None = None
        self._stage: Span | None = None
        self._stage_name: str | None = None
        self._open: dict[str, Span] = {}
        """Tool calls and faults under way, by span id."""
        self._calls: dict[str, str] = {}
        """The span id of each tool call, by call id."""
        self._steps = 0
        self._last_step: SpanContext | None = None
        self._turn: int | None = None
        self._last_ns = 0
        self._logical_ms = 0
        self._finished = False
        self._warned = False

    # -- the listener

    def on_record(self, record: Mapping[str, Any]) -> None:
        """Take one kept record; never raises (a failure is counted as `tracingErrors`)."""
        if self._finished:
            return
        try:
            self._take(record)
        except Exception as exc:  # failure is data: tracing never fails a run
            self._count("tracingErrors", 1)
            if not self._warned:  # once a run: the counter tells how often
                self._warned = True
                _log.warning("tracing a record failed: %s: %s", type(exc).__name__, exc)

    def finish(self) -> None:
        """End every span still open at the run's end (the run's last); never raises."""
        if self._finished:
            return
        self._finished = True
        try:
            self._finish(_wall_ns({"clock": {"wall": self._log.clocks.wall_time()}}))
        except Exception as exc:  # failure is data: tracing never fails a run
            self._count("tracingErrors", 1)
            _log.warning("ending a run's spans failed: %s: %s", type(exc).__name__, exc)

    # -- spans

    def _start(
        self,
        name: str,
        span_id: str,
        parent: Span | None,
        start_ns: int,
        attributes: Mapping[str, Any],
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        links: Sequence[Link] = (),
    ) -> Span:
        # A run's span is a root even where the calling program has a span of its own going.
        context = trace.set_span_in_context(parent) if parent is not None else Context()
        token = _PENDING.set((self._trace_id, _id(span_id)))
        try:
            span = self._tracer.start_span(
                name,
                context=context,
                kind=kind,
                attributes={
                    **self._common,
                    **_plain(attributes),
                    "simreport.logical_ms.start": self._logical_ms,
                },
                links=list(links),
                start_time=start_ns,
            )
        finally:
            _PENDING.reset(token)
        return span

    def _end(self, span: Span, end_ns: int) -> None:
        span.set_attribute("simreport.logical_ms.end", self._logical_ms)
        span.end(end_time=end_ns)

    def _parent(self) -> Span | None:
        return self._stage or self._root

    def _link(self, span_id: str) -> Link:
        context = SpanContext(
            self._trace_id,
            _id(span_id),
            is_remote=False,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        return Link(context)

    # -- records

    def _take(self, record: Mapping[str, Any]) -> None:
        now = _wall_ns(record) or self._last_ns
        self._logical_ms = int(record.get("logicalMs") or 0)
        type_ = str(record["type"])
        if self._root is None:
            # The run's span is the one its lifecycle records carry (the first one is one).
            root_id = str(record["spanId"]) if type_ == "lifecycle" else self._log.span("run")
            self._root = self._start("testbed.run", root_id, None, now, {})
        payload = record.get("payload") or {}
        if type_ in ("user.message", "agent.message") and isinstance(payload.get("turn"), int):
            self._turn = payload["turn"]
        spanned = True  # the record opens or closes a span, rather than being an event
        if type_ == "lifecycle":
            self._enter(str(payload.get("to")), payload.get("from"), now)
        elif type_ == "agent.step":
            self._agent_step(record, payload, now)
        elif type_ == "tool.request":
            self._tool_request(record, payload, now)
        elif type_ == "tool.response":
            spanned = self._tool_response(record, payload, now)
        elif type_.startswith("fault."):
            spanned = self._fault(record, payload, now)
        else:
            spanned = False
            if type_ == "manifest.locked":
                self._manifest(str(payload.get("manifestSha256") or ""))
            elif type_ == "run.failure":
                self._failed(payload, now)
        if not spanned:
            self._event(record, now)
        self._last_ns = now

    def _event(self, record: Mapping[str, Any], now: int) -> None:
        target = self._open.get(str(record.get("spanId"))) or self._parent()
        if target is not None:
            target.add_event(
                str(record["type"]),
                {
                    "simreport.record.id": str(record.get("recordId")),
                    "simreport.record.seq": int(record.get("seq") or 0),
                    "simreport.logical_ms": self._logical_ms,
                },
                timestamp=now,
            )

    def _enter(self, stage: str, came_from: Any, now: int) -> None:
        if self._stage is not None:
            self._end(self._stage, now)
        self._stage_name = stage
        self._stage = self._start(
            f"stage {stage}",
            self._log.span(f"stage:{stage}"),
            self._root,
            now,
            {"simreport.stage": stage, "simreport.stage.from": came_from},
        )

    def _manifest(self, digest: str) -> None:
        if not digest:
            return
        self._common[MANIFEST_ID] = digest
        for span in (self._root, self._stage, *self._open.values()):
            if span is not None:
                span.set_attribute(MANIFEST_ID, digest)

    def _agent_step(self, record: Mapping[str, Any], payload: Mapping[str, Any], now: int) -> None:
        self._steps += 1
        duration = (record.get("clock") or {}).get("durationNs")
        start = now - int(duration) if isinstance(duration, int) else self._last_ns or now
        step = payload.get("step") or {}
        span = self._start(
            "agent.step",
            self._log.span(f"agent:{self._steps}"),
            self._parent(),
            start,
            {
                "simreport.agent.call": self._steps,
                "simreport.agent.adapter": payload.get("adapter"),
                "simreport.turn": self._turn,
                "simreport.agent.tool_calls": len(step.get("toolCalls") or []),
                "simreport.agent.replied": step.get("reply") is not None,
                "simreport.agent.lost": step.get("lost"),
                "simreport.record.id": record.get("recordId"),
            },
            kind=SpanKind.CLIENT,
        )
        if step.get("lost"):
            span.set_status(Status(StatusCode.ERROR, f"decision lost: {step['lost']}"))
        self._end(span, now)
        self._last_step = span.get_span_context()

    def _unanswered_call(self, start: int, end: int, why: str) -> None:
        """The span of an agent call that returned no step (it failed, or the run was stopped)."""
        calls = self._agent_calls()
        if calls <= self._steps:
            return
        self._steps = calls
        span = self._start(
            "agent.step",
            self._log.span(f"agent:{calls}"),
            self._parent(),
            start,
            {"simreport.agent.call": calls, "simreport.turn": self._turn},
            kind=SpanKind.CLIENT,
        )
        span.set_status(Status(StatusCode.ERROR, why))
        self._end(span, end)

    def _tool_request(
        self, record: Mapping[str, Any], payload: Mapping[str, Any], now: int
    ) -> None:
        tool = str(payload.get("tool"))
        links = [Link(self._last_step)] if self._last_step is not None else []
        span_id = str(record["spanId"])
        self._calls[str(payload.get("callId"))] = span_id
        self._open[span_id] = self._start(
            f"execute_tool {tool}",
            span_id,
            self._parent(),
            now,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": payload.get("callId"),
                "simreport.tool.call_index": payload.get("callIndex"),
                "simreport.record.id": record.get("recordId"),
            },
            links=links,
        )

    def _tool_response(
        self, record: Mapping[str, Any], payload: Mapping[str, Any], now: int
    ) -> bool:
        span = self._open.pop(str(record["spanId"]), None)
        if span is None:
            return False
        outcome = str(payload.get("outcome"))
        span.set_attribute("simreport.tool.outcome", outcome)
        if outcome != "ok":
            span.set_status(Status(StatusCode.ERROR, outcome))
        self._end(span, now)
        return True

    def _fault(self, record: Mapping[str, Any], payload: Mapping[str, Any], now: int) -> bool:
        """A fault's span opens at its first hit and closes when it is recovered or fails."""
        stage = str(record["type"]).removeprefix("fault.")
        span_id = str(record["spanId"])
        span = self._open.get(span_id)
        if stage == "hit" and span is None:
            call = payload.get("callId")
            call_span = self._calls.get(str(call))
            links = [self._link(call_span)] if call_span is not None else []
            self._open[span_id] = self._start(
                f"fault {payload.get('faultId')}",
                span_id,
                self._root,
                now,
                {
                    "simreport.fault.id": payload.get("faultId"),
                    "simreport.fault.target": payload.get("target"),
                    "simreport.fault.effect": payload.get("effect"),
                    "simreport.fault.position": payload.get("position"),
                    "simreport.fault.experiment": payload.get("experiment"),
                    "simreport.fault.call_id": call,
                    "simreport.record.id": record.get("recordId"),
                },
                links=links,
            )
            return True
        if stage in ("recovered", "failed") and span is not None:
            del self._open[span_id]
            span.set_attribute("simreport.fault.settled", stage)
            if stage == "failed":
                reason = str(payload.get("reason"))
                span.set_attribute("simreport.fault.reason", reason)
                span.set_status(Status(StatusCode.ERROR, reason))
            self._end(span, now)
            return True
        return False

    def _failed(self, payload: Mapping[str, Any], now: int) -> None:
        kind = str(payload.get("kind"))
        self._unanswered_call(self._last_ns or now, now, kind)
        for span in (self._stage, self._root):
            if span is not None:
                span.set_attribute("simreport.failure.kind", kind)
                span.set_attribute("simreport.failure.stage", str(payload.get("stage")))
                span.set_status(Status(StatusCode.ERROR, kind))

    def _finish(self, now: int | None) -> None:
        end = max(now or self._last_ns, self._last_ns)
        if self._root is None:
            return  # no record was kept: the run never started
        self._unanswered_call(self._last_ns, end, "the agent returned no step")
        for span_id, span in list(self._open.items()):
            span.set_status(Status(StatusCode.ERROR, "still open when the run ended"))
            self._end(span, end)
            del self._open[span_id]
        if self._stage is not None:
            self._end(self._stage, end)
        self._root.set_attribute("simreport.stage.final", str(self._stage_name))
        self._end(self._root, end)
