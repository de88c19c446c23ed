"""``swarm traces push ID``: send an episode's recorded spans to an OTLP receiver started later.

``swarm run`` writes every episode's spans to ``trace.jsonl`` (OTLP JSON, one export request per
line) whether or not a receiver listened. This reads that file back into the OTLP protobuf messages
the SDK's exporters send (OTLP JSON writes trace and span ids as hex, protobuf's JSON mapping wants
base64, so the ids are converted) and sends them over OTLP/HTTP (protobuf) or gRPC, as the run would
have.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import httpx
from google.protobuf.json_format import ParseDict, ParseError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agent_swarm.orchestrator.cli.telemetry_setup import OtlpTarget
from agent_swarm.swarm.errors import ConfigError, SwarmError

__all__ = ["PushError", "load_requests", "push"]

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


class PushError(SwarmError):
    """The receiver could not be reached or refused the spans."""


def _ids_to_base64(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in _ID_KEYS and isinstance(v, str):
                out[k] = base64.b64encode(bytes.fromhex(v)).decode() if v else ""
            else:
                out[k] = _ids_to_base64(v)
        return out
    if isinstance(node, list):
        return [_ids_to_base64(v) for v in node]
    return node


def load_requests(path: Path) -> list[ExportTraceServiceRequest]:
    """The export requests of a ``trace.jsonl`` file, in file order."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(ParseDict(_ids_to_base64(json.loads(line)), ExportTraceServiceRequest()))
        except (ValueError, ParseError) as exc:
            raise ConfigError(f"{path}:{n}: not an OTLP JSON export request ({exc})") from None
    return out


def _count(requests: list[ExportTraceServiceRequest]) -> int:
    return sum(len(ss.spans) for r in requests for rs in r.resource_spans for ss in rs.scope_spans)


def push(path: Path, target: OtlpTarget, timeout_s: float = 10.0) -> int:
    """Send the spans of ``path`` to ``target``; the number of spans sent."""
    requests = load_requests(path)
    where = target.endpoint
    try:
        if target.protocol == "grpc":
            _push_grpc(requests, target, timeout_s)
        else:
            with httpx.Client(timeout=timeout_s) as client:
                for req in requests:
                    resp = client.post(
                        where, content=req.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
                    )
                    if resp.status_code >= 300:
                        raise PushError(f"{where} answered HTTP {resp.status_code}: {resp.text[:200]!r}")
    except httpx.TransportError as exc:
        raise PushError(f"{where} could not be reached ({type(exc).__name__}: {exc})") from None
    return _count(requests)


def _push_grpc(requests: list[ExportTraceServiceRequest], target: OtlpTarget, timeout_s: float) -> None:
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    host, port = target.address
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = TraceServiceStub(channel)  # type: ignore[no-untyped-call]
        for req in requests:
            try:
                stub.Export(req, timeout=timeout_s)
            except grpc.RpcError as exc:
                raise PushError(f"{host}:{port} (gRPC) refused the spans: {exc.code().name}") from None
