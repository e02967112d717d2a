"""OpenTelemetry traces of refund-desk runs: one span per lifecycle stage, agent step, tool call
and injected fault, all in the run's trace and named by its run and manifest; the `traceparent`
sent to an HTTP agent names the span of that call; exporters come from the standard environment
(OTLP to a loopback collector here), fail without failing a run, and a run's files are the same
traced or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from simreport.core.schema import RunResult
from simreport.core.testbed_schema import ClockConfig
from simreport.kernel import run_scenario, validate_scenario
from simreport.kernel.testbed import run_spans, tracing
from simreport.kernel.testbed.clock import Clocks
from simreport.kernel.testbed.records import RecordLog
from tests.kernel.testbed import test_testbed_agents as agents
from tests.kernel.testbed.test_testbed_world import EXAMPLE, read, records, run, scenario_doc
from tests.support.service_helpers import simreport_command

agent_server = agents.agent_server
"""The loopback OpenAI-compatible agent of the agent tests."""

ROOT = Path(__file__).resolve().parents[3]
STAGES = ["LOADING", "INITIALIZING", "RUNNING", "DRAINING", "COLLECTING", "CLEANED"]
HAS_OTLP = find_spec("opentelemetry.exporter.otlp.proto.http") is not None


@pytest.fixture(autouse=True)
def no_tracing_configured(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts with no OTEL_* setting and no exporter installed, and ends so."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    tracing.uninstall()
    yield
    tracing.uninstall()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracing.install(exporter, batch=False)
    return exporter


# --------------------------------------------------------------------------- helpers


def span_id(trace: str, key: str) -> str:
    """The span id the run's record log gives `key` (RecordLog.span)."""
    return RecordLog(Clocks(ClockConfig()), trace).span(key)


def hex_span(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.span_id:016x}"


def hex_trace(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"{span.context.trace_id:032x}"


def parent_of(span: ReadableSpan) -> str | None:
    return f"{span.parent.span_id:016x}" if span.parent is not None else None


def named(finished: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in finished if s.name == name]


def one(finished: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = named(finished, name)
    assert len(found) == 1, [s.name for s in finished]
    return found[0]


def wall_ns(record: dict[str, Any]) -> int:
    wall = datetime.fromisoformat(record["clock"]["wall"])
    return (wall - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def without_real_clocks(out: Path, name: str) -> list[dict[str, Any]]:
    """records.jsonl or events.jsonl, their real-clock readings left out."""
    lines = [json.loads(line) for line in (out / name).read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line.pop("clock", None)
        line.pop("wall", None)
        if isinstance(line.get("payload"), dict):
            line["payload"].pop("durationNs", None)
            line["payload"].pop("wallClockMs", None)
    return lines


def http_agent_run(tmp_path: Path, server: Any, name: str = "run") -> tuple[RunResult, Path]:
    root = agents.copy_example(tmp_path / name)
    agents.add_agent(root, "ext-agent", {"adapter": "http", "model": "ext-model"})
    doc = scenario_doc(sut__agent="ext-agent@1.0.0", sut__entry=agents.url(server))
    out = tmp_path / name / "run"
    return run_scenario(validate_scenario(doc), out, asset_root=root), out


# --------------------------------------------------------------------------- the spans of a run


def test_a_run_has_a_span_per_stage_agent_step_tool_call_and_fault(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    result, out = run(tmp_path)
    assert result.failure is None
    finished = spans.get_finished_spans()
    recs = records(out)
    trace = read(out, "manifest.json")["traceId"]
    manifest = next(r for r in recs if r["type"] == "manifest.locked")["payload"]
    assert {hex_trace(s) for s in finished} == {trace}

    root = one(finished, "testbed.run")
    lifecycle_span = next(r for r in recs if r["type"] == "lifecycle")["spanId"]
    assert parent_of(root) is None and hex_span(root) == lifecycle_span
    assert root.attributes is not None and root.attributes["simreport.stage.final"] == "CLEANED"
    stages = [s for s in finished if s.name.startswith("stage ")]
    assert [s.name for s in sorted(stages, key=lambda s: s.start_time or 0)] == [
        f"stage {stage}" for stage in STAGES
    ]
    assert {parent_of(s) for s in stages} == {hex_span(root)}
    assert {hex_span(s) for s in stages} == {span_id(trace, f"stage:{s}") for s in STAGES}
    running = one(finished, "stage RUNNING")

    # Every span names the run and the manifest it ran, even those begun before it was locked.
    for span in finished:
        assert span.attributes is not None
        assert span.attributes[run_spans.RUN_ID] == "scenario/0"
        assert span.attributes[run_spans.RUN_CONDITION] == "scenario"
        assert span.attributes[run_spans.RUN_REPLICATION] == 0
        assert span.attributes[run_spans.MANIFEST_ID] == manifest["manifestSha256"]

    # One CLIENT span per agent call, the n-th with the id the n-th call's traceparent names.
    steps = named(finished, "agent.step")
    assert (
        len(steps)
        == result.integrity.counters["agentCalls"]
        == len([r for r in recs if r["type"] == "agent.step"])
    )
    by_call = {int(str(s.attributes["simreport.agent.call"])): s for s in steps if s.attributes}
    assert sorted(by_call) == list(range(1, len(steps) + 1))
    for n, step in by_call.items():
        assert hex_span(step) == span_id(trace, f"agent:{n}")
        assert step.kind is SpanKind.CLIENT and parent_of(step) == hex_span(running)

    # One span per tool call: the spanId its records carry, linked to the step that asked.
    requests = [r for r in recs if r["type"] == "tool.request"]
    tools = [s for s in finished if s.name.startswith("execute_tool ")]
    assert len(tools) == len(requests) == result.integrity.counters["toolCalls"]
    tool_by_id = {hex_span(s): s for s in tools}
    for request in requests:
        span = tool_by_id[request["spanId"]]
        assert span.name == f"execute_tool {request['payload']['tool']}"
        assert span.attributes is not None
        assert span.attributes["gen_ai.tool.call.id"] == request["payload"]["callId"]
        assert parent_of(span) == hex_span(running)
        assert [f"{link.context.span_id:016x}" for link in span.links] == [
            hex_span(s) for s in steps if (s.end_time or 0) <= (span.start_time or 0)
        ][-1:]
        response = next(
            r
            for r in recs
            if r["type"] == "tool.response"
            and r["payload"]["callId"] == request["payload"]["callId"]
        )
        assert span.start_time == wall_ns(request) and span.end_time == wall_ns(response)
        assert span.attributes["simreport.tool.outcome"] == response["payload"]["outcome"]
        failed = response["payload"]["outcome"] != "ok"
        assert (span.status.status_code is StatusCode.ERROR) == failed

    # The fault: from its hit to its recovery, a child of the run linked to the call it hit.
    fault = one(finished, "fault refund-timeout")
    hit = next(r for r in recs if r["type"] == "fault.hit")
    recovered = next(r for r in recs if r["type"] == "fault.recovered")
    assert hex_span(fault) == hit["spanId"] == span_id(trace, "fault:refund-timeout")
    assert parent_of(fault) == hex_span(root)
    assert (fault.start_time, fault.end_time) == (wall_ns(hit), wall_ns(recovered))
    assert [f"{link.context.span_id:016x}" for link in fault.links] == [
        span_id(trace, f"call:{hit['payload']['callId']}")
    ]
    assert fault.attributes is not None
    assert fault.attributes["simreport.fault.settled"] == "recovered"
    assert fault.attributes["simreport.fault.position"] == "committed_response_lost"
    assert fault.status.status_code is StatusCode.UNSET
    # The records the spans do not stand for are events (the lost answer on its call's span).
    lost_call = tool_by_id[span_id(trace, f"call:{hit['payload']['callId']}")]
    assert [e.name for e in lost_call.events] == ["tool.response.lost"]
    planned = [e for s in stages for e in s.events if e.name == "fault.planned"]
    assert len(planned) == 1 and planned[0].attributes is not None
    assert planned[0].attributes["simreport.record.id"] == next(
        r["recordId"] for r in recs if r["type"] == "fault.planned"
    )
    assert tracing.counters().get("tracingErrors", 0) == 0


def test_a_fault_that_never_hits_has_no_span_only_events(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    result, _ = run(tmp_path, scenario_doc(events__triggers__0__at={"call": 5}))
    assert result.status.validity == "violated"
    finished = spans.get_finished_spans()
    assert not [s for s in finished if s.name.startswith("fault ")]
    events = [e.name for s in finished for e in s.events if e.name.startswith("fault.")]
    assert events == ["fault.planned", "fault.armed", "fault.failed"]


def test_a_run_failed_while_loading_has_no_manifest_id_and_an_error_status(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    result, out = run(tmp_path, scenario_doc(sut__agent="refund-agent@9.9.9"))
    assert result.failure is not None and result.failure.type == "manifest_unresolved"
    finished = spans.get_finished_spans()
    assert sorted(s.name for s in finished) == ["stage FAILED", "stage LOADING", "testbed.run"]
    root, loading = one(finished, "testbed.run"), one(finished, "stage LOADING")
    for span in (root, loading):
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "manifest_unresolved"
        assert span.attributes is not None
        assert span.attributes["simreport.failure.stage"] == "loading"
    # Nothing was locked, so no span claims a manifest: missing, never filled in.
    assert all(s.attributes and run_spans.MANIFEST_ID not in s.attributes for s in finished)
    assert root.attributes is not None and root.attributes["simreport.stage.final"] == "FAILED"
    assert {hex_trace(s) for s in finished} == {records(out)[0]["traceId"]}


# --------------------------------------------------------------------------- traceparent


def test_the_traceparent_sent_to_an_http_agent_names_its_agent_step_span(
    tmp_path: Path, agent_server: Any, spans: InMemorySpanExporter
) -> None:
    result, out = http_agent_run(tmp_path, agent_server)
    assert result.failure is None, result.failure
    finished = spans.get_finished_spans()
    by_id = {hex_span(s): s for s in finished}
    running = one(finished, "stage RUNNING")
    headers = [r["headers"]["traceparent"] for r in agent_server.requests]
    assert len(headers) == result.integrity.counters["agentCalls"] > 1
    for n, header in enumerate(headers, start=1):
        version, trace, parent, flags = header.split("-")
        assert (version, flags) == ("00", "01")  # sampled: every run is traced whole
        assert trace == read(out, "manifest.json")["traceId"]
        span = by_id[parent]  # the agent's own spans nest under this one
        assert span.name == "agent.step" and span.kind is SpanKind.CLIENT
        assert hex_trace(span) == trace and parent_of(span) == hex_span(running)
        assert span.attributes is not None and span.attributes["simreport.agent.call"] == n
        assert span.attributes["simreport.agent.adapter"] == "http"


def test_an_agent_call_that_fails_still_has_the_span_its_header_named(
    tmp_path: Path, agent_server: Any, spans: InMemorySpanExporter
) -> None:
    agent_server.status = 500
    result, _ = http_agent_run(tmp_path, agent_server)
    assert result.failure is not None and result.failure.type == "sut_error"
    finished = spans.get_finished_spans()
    [header] = [r["headers"]["traceparent"] for r in agent_server.requests]
    step = {hex_span(s): s for s in finished}[header.split("-")[2]]
    assert step.name == "agent.step" and step.status.status_code is StatusCode.ERROR
    assert step.status.description == "sut_error"
    assert parent_of(step) == hex_span(one(finished, "stage RUNNING"))
    assert one(finished, "stage RUNNING").status.status_code is StatusCode.ERROR
    assert one(finished, "testbed.run").status.status_code is StatusCode.ERROR
    # The run still winds down after FAILED, under the FAILED stage's span.
    failed = one(finished, "stage FAILED")
    assert {"environment.snapshot", "cleanup.done"} <= {e.name for e in failed.events}


# --------------------------------------------------------------------------- run outputs


def test_a_run_without_tracing_configured_writes_the_same_files_as_a_traced_one(
    tmp_path: Path,
) -> None:
    # Untraced, in a process of its own: nothing of the tracing is even loaded there.
    untraced = tmp_path / "untraced"
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from simreport.kernel import load_scenario, run_scenario, validate_scenario\n"
        "from simreport.kernel.testbed import tracing\n"
        f"root = Path({str(EXAMPLE)!r})\n"
        "doc = load_scenario(root / 'scenario.yaml').scenario.to_doc()\n"
        f"run_scenario(validate_scenario(doc), Path({str(untraced)!r}), asset_root=root)\n"
        "print(json.dumps({'loaded': 'simreport.kernel.testbed.run_spans' in sys.modules,\n"
        "                  'sdk': 'opentelemetry.sdk.trace' in sys.modules,\n"
        "                  'counters': tracing.counters()}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "loaded": False,
        "sdk": False,
        "counters": {},
    }
    exporter = InMemorySpanExporter()
    tracing.install(exporter, batch=False)
    _, traced = run(tmp_path, name="traced")
    assert exporter.get_finished_spans()
    names = sorted(p.name for p in untraced.iterdir())
    assert names == sorted(p.name for p in traced.iterdir())
    for name in names:
        if name in ("records.jsonl", "events.jsonl"):
            assert without_real_clocks(untraced, name) == without_real_clocks(traced, name)
        else:
            assert (untraced / name).read_bytes() == (traced / name).read_bytes(), name


class _FailingExporter(SpanExporter):
    def __init__(self, how: str) -> None:
        self.how = how
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        if self.how == "raise":
            raise ConnectionError("collector went away")
        return SpanExportResult.FAILURE


@pytest.mark.parametrize("how", ["raise", "fail"])
def test_a_failing_exporter_is_counted_and_never_fails_the_run(tmp_path: Path, how: str) -> None:
    plain, plain_out = run(tmp_path, name="plain")
    exporter = _FailingExporter(how)
    tracing.install(exporter, batch=False)
    before = tracing.counters()
    traced, traced_out = run(tmp_path, name="traced")
    after = tracing.counters()
    assert traced.failure is None
    assert traced.to_doc() == plain.to_doc()
    assert read(traced_out, "result.json") == read(plain_out, "result.json")
    assert exporter.calls > 0
    assert after.get("exportFailures", 0) - before.get("exportFailures", 0) == exporter.calls
    assert after.get("spansNotExported", 0) - before.get("spansNotExported", 0) == exporter.calls
    assert after.get("spansExported", 0) == before.get("spansExported", 0)


def test_a_tracing_error_is_counted_and_never_fails_the_run(
    tmp_path: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: run_spans.RunSpans, record: Any) -> None:
        raise KeyError("payload")

    monkeypatch.setattr(run_spans.RunSpans, "_take", broken)
    before = tracing.counters().get("tracingErrors", 0)
    result, out = run(tmp_path)
    assert result.failure is None and result.status.evidence == "complete"
    assert tracing.counters()["tracingErrors"] - before == len(records(out))


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, []),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, ["otlp"]),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, []),
        ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
        ({"OTEL_TRACES_EXPORTER": "Console, otlp,console"}, ["console", "otlp"]),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"}, []),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, []),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
    ],
)
def test_the_environment_names_the_exporters(environ: dict[str, str], expected: list[str]) -> None:
    assert tracing.exporter_names(environ) == expected


def test_otlp_means_http_unless_the_protocol_says_grpc() -> None:
    assert tracing.entry_point_name("otlp", {}) == "otlp_proto_http"
    assert tracing.entry_point_name("otlp", {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == (
        "otlp_proto_grpc"
    )
    grpc_traces = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}
    assert tracing.entry_point_name("otlp", grpc_traces) == "otlp_proto_grpc"
    assert tracing.entry_point_name("console", {}) == "console"


def test_an_exporter_not_installed_is_counted_and_the_run_goes_untraced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "no-such-exporter")
    before = tracing.counters().get("exportersUnavailable", 0)
    result, _ = run(tmp_path)
    assert result.failure is None
    assert tracing.counters()["exportersUnavailable"] - before == 1
    assert tracing.current_provider() is None  # settled once for the process: asked no more
    run(tmp_path, name="again")
    assert tracing.counters()["exportersUnavailable"] - before == 1


def test_the_console_exporter_is_built_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    [exporter] = tracing.load_exporters(["console"], {"OTEL_TRACES_EXPORTER": "console"})
    assert type(exporter).__name__ == "ConsoleSpanExporter"
    assert tracing.current_provider() is not None


# --------------------------------------------------------------------------- OTLP


class _Collector(ThreadingHTTPServer):
    status: int
    bodies: list[tuple[str, bytes]]


class _CollectorHandler(BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        self.server.bodies.append((self.path, self.rfile.read(length)))
        self.send_response(self.server.status)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[_Collector]:
    server = _Collector(("127.0.0.1", 0), _CollectorHandler)
    server.status, server.bodies = 200, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def exported(collector: _Collector) -> list[tuple[str, str, Any]]:
    """Each span the collector received: (the service.name of its resource, its scope, it)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    out: list[tuple[str, str, Any]] = []
    for path, body in collector.bodies:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = next(
                a.value.string_value
                for a in resource_spans.resource.attributes
                if a.key == "service.name"
            )
            for scope_spans in resource_spans.scope_spans:
                out += [(service, scope_spans.scope.name, s) for s in scope_spans.spans]
    return out


needs_otlp = pytest.mark.requires(HAS_OTLP, "the OTLP exporter (simreport[otlp])")


@needs_otlp
def test_spans_go_to_the_otlp_endpoint_the_environment_names(
    tmp_path: Path, collector: _Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, port = collector.server_address[:2]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://{host!s}:{port}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "refund-desk-tests")
    before = tracing.counters().get("spansExported", 0)
    result, out = run(tmp_path)
    assert result.failure is None
    tracing.uninstall()  # flushes the queue the background thread was sending from
    received = exported(collector)
    assert {(service, scope) for service, scope, _ in received} == {
        ("refund-desk-tests", tracing.TRACER_NAME)
    }
    assert {s.trace_id.hex() for _, _, s in received} == {read(out, "manifest.json")["traceId"]}
    names = [s.name for _, _, s in received]
    assert "testbed.run" in names and "fault refund-timeout" in names
    assert names.count("agent.step") == result.integrity.counters["agentCalls"]
    assert tracing.counters()["spansExported"] - before == len(names)


@needs_otlp
def test_a_collector_refusing_spans_costs_them_and_not_the_run(
    tmp_path: Path, collector: _Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector.status = 400  # not retried: the exporter gives the batch up at once
    host, port = collector.server_address[:2]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://{host!s}:{port}/v1/traces")
    before = tracing.counters()
    result, _ = run(tmp_path)
    tracing.uninstall()
    after = tracing.counters()
    assert result.failure is None and collector.bodies
    assert after.get("exportFailures", 0) - before.get("exportFailures", 0) == len(collector.bodies)
    assert after.get("spansNotExported", 0) > before.get("spansNotExported", 0)


PLAN = """\
title: Refund desk, traced
baseScenario: scenario.yaml
design: one_at_a_time
replications: 2
concurrency: 2
metrics: [duplicateRefunds]
axes:
  - template: agent_specification
    id: user_patience
    target: user.persona.patience
    levels: [high]
"""


@pytest.mark.slow
@needs_otlp
def test_an_audit_in_worker_processes_sends_every_runs_spans(
    tmp_path: Path, collector: _Collector
) -> None:
    # The operator's way: the environment names the collector, `simreport audit` runs the
    # replications in a pool of worker processes, whose queued spans go out as they end.
    root = agents.copy_example(tmp_path)
    (root / "traced.yaml").write_text(PLAN, encoding="utf-8")
    host, port = collector.server_address[:2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://{host!s}:{port}"
    done = subprocess.run(
        [*simreport_command(), "audit", str(root / "traced.yaml"), "--out", str(tmp_path / "out")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    manifests = sorted((tmp_path / "out" / "runs").glob("*/*/manifest.json"))
    assert len(manifests) == 4  # two conditions × two replications
    runs = {json.loads(m.read_text(encoding="utf-8"))["traceId"] for m in manifests}
    received = [span for _, _, span in exported(collector)]
    roots = [s for s in received if s.name == "testbed.run"]
    assert sorted(s.trace_id.hex() for s in roots) == sorted(runs)
    assert {s.trace_id.hex() for s in received} == runs


# --------------------------------------------------------------------------- one trace per run


def test_the_caller_may_give_the_execution_its_trace_id(tmp_path: Path) -> None:
    """The service gives each run its row's trace id: two runs of one version and seed are two
    traces. Without one (a batch run, whose run key is its scenario's) the id is made from the
    scenario, as it always was; a replay keeps the recorded one."""
    from simreport.core.versions import RunChecks
    from simreport.kernel.replay_runner import replay_run

    scenario = validate_scenario(scenario_doc())
    given = "4bf92f3577b34da6a3ce929d0e0e4736"

    def trace(name: str, trace_id: str | None) -> str:
        out = tmp_path / name
        run_scenario(scenario, out, asset_root=EXAMPLE, checks=RunChecks(trace_id=trace_id))
        return str(read(out, "manifest.json")["traceId"])

    assert trace("given", given) == given
    assert {r["traceId"] for r in records(tmp_path / "given")} == {given}
    plain = trace("plain", None)
    assert plain != given and plain == trace("plain2", None)
    report = replay_run(tmp_path / "given", tmp_path / "replayed")
    assert report.ok, report
    assert read(tmp_path / "replayed", "manifest.json")["traceId"] == given
    with pytest.raises(ValueError):
        RunChecks(trace_id="not-a-trace-id")
