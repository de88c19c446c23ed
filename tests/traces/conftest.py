"""Fixtures for the tracing tests: in-memory spans and real OTLP receivers on loopback ephemeral ports.

The receivers are built from ``opentelemetry-proto``: they parse exactly the protobuf messages that
Jaeger v2's OTLP receiver (the collector's ``otlpreceiver``) parses, fed by the SDK's real exporters.
"""

from __future__ import annotations

import gzip
import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.proto_json.trace.v1.trace import TracesData
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Received:
    """What a receiver got: the decoded requests, their sizes, and the HTTP paths/content types."""

    requests: list[trace_service_pb2.ExportTraceServiceRequest] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def attrs(span: trace_pb2.Span) -> dict[str, Any]:
        return span_attrs(span)

    def spans(self) -> list[tuple[dict[str, Any], trace_pb2.Span]]:
        """Every span with its resource attributes."""
        out = []
        with self.lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    resource = {kv.key: any_value(kv.value) for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out += [(resource, s) for s in ss.spans]
        return out


def any_value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(any_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


def span_attrs(span: trace_pb2.Span) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in span.attributes}


@dataclass
class HttpReceiver:
    url: str
    received: Received


@pytest.fixture
def otlp_http() -> Iterator[HttpReceiver]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            with received.lock:
                received.requests.append(request)
                received.sizes.append(len(body))
                received.paths.append(self.path)
                received.content_types.append(self.headers.get("Content-Type", ""))
            payload = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield HttpReceiver(f"http://127.0.0.1:{server.server_address[1]}", received)
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class GrpcReceiver:
    url: str
    received: Received


@pytest.fixture
def otlp_grpc() -> Iterator[GrpcReceiver]:
    """A gRPC TraceService with grpc's default 4 MiB receive limit, like Jaeger's."""
    received = Received()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # the gRPC method name
            with received.lock:
                received.requests.append(request)
                received.sizes.append(request.ByteSize())
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield GrpcReceiver(f"http://127.0.0.1:{port}", received)
    finally:
        server.stop(grace=None).wait()


@dataclass
class Memory:
    provider: TracerProvider
    exporter: InMemorySpanExporter


@pytest.fixture
def memory() -> Iterator[Memory]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield Memory(provider, exporter)
    finally:
        provider.shutdown()


SpanReader = Callable[[Path], list[Any]]
"""Reads the spans of a per-episode OTLP JSON-lines trace file (what ``swarm run`` writes)."""


def _file_spans(path: Path) -> list[Any]:
    return [
        s
        for line in path.read_text(encoding="utf-8").splitlines()
        for rs in TracesData.from_json(line).resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]


@pytest.fixture
def file_spans() -> SpanReader:
    """The spans of a per-episode OTLP trace file, in file order."""
    return _file_spans


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's tracing as a user without OTel settings gets it: no OTEL_* variables, no Jaeger UI
    link configured, and the demo without simulated latency."""
    for key in list(os.environ):
        if key.startswith("OTEL_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SWARM_DEMO_LATENCY", "0")
    monkeypatch.delenv("SWARM_JAEGER_UI", raising=False)
