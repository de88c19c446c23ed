"""Export: the SDK's real OTLP exporters (HTTP and gRPC) send to receivers started in the test, and the
per-episode OTLP JSON-lines file is decoded with ``opentelemetry-proto-json`` (hex ids, as Jaeger's
"Upload JSON" expects; protobuf's ``json_format`` would mis-decode them)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto_json.trace.v1.trace import TracesData

from agent_swarm.orchestrator.cli.telemetry_setup import (
    TRACE_FILE,
    OtlpTarget,
    TracingOptions,
    receiver_listening,
    resolve_otlp,
    start_tracing,
)
from agent_swarm.orchestrator.demo import demo
from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import EpisodeRecord
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.swarm.tracing import CONTENT_LIMIT


def run_demo(tracing: Any, name: str = "capitals") -> EpisodeRecord:
    d = demo(name, latency_s=0.0)
    o = Orchestrator(
        d.orchestrator_backend,
        d.config,
        tools=d.tools,
        subagent_backend=d.subagent_backend,
        tracer_provider=tracing.provider,
        capture_content=tracing.capture_content,
    )
    return o.run_sync(d.task)


def check_wire_trace(received: Any, record: EpisodeRecord) -> None:
    spans = received.spans()
    assert spans, "the receiver got nothing"
    assert {r["service.name"] for r, _ in spans} == {"agent-swarm"}
    assert {s.trace_id.hex() for _, s in spans} == {record.trace_id}
    ids = {s.span_id for _, s in spans}
    roots = [s for _, s in spans if not s.parent_span_id]
    assert len(roots) == 1 and roots[0].name == "invoke_agent orchestrator"
    assert all(s.parent_span_id in ids for _, s in spans if s.parent_span_id), "a parent never arrived"
    root = received.attrs(roots[0])
    assert root["gen_ai.conversation.id"] == record.episode_id == root["swarm.episode.id"]
    assert root["swarm.dag.critical_steps"] == record.dag.critical_steps
    by_id = {s.span_id: s for _, s in spans}
    chats = [s for _, s in spans if s.name.startswith("chat ")]
    assert len(chats) == len(record.turns) + sum(len(r.step_records) for r in record.subagent_results)
    for c in chats:
        a = received.attrs(c)
        assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.usage.input_tokens"] > 0
        assert c.kind == 3  # SPAN_KIND_CLIENT
        assert by_id[c.parent_span_id].name.startswith("invoke_agent ")
    agents = [s for _, s in spans if s.name == "invoke_agent researcher"]
    assert sorted(received.attrs(s)["gen_ai.agent.id"] for s in agents) == sorted(
        r.agent_id for r in record.subagent_results
    )
    assert all(by_id[s.parent_span_id].name == "stage 0" for s in agents)


def test_otlp_http_export_reaches_a_receiver(otlp_http: Any, tmp_path: Path) -> None:
    tracing = start_tracing(TracingOptions(otlp_endpoint=otlp_http.url), out=tmp_path, env={})
    record = run_demo(tracing)
    assert tracing.shutdown() == []
    received = otlp_http.received
    assert set(received.paths) == {"/v1/traces"}
    assert set(received.content_types) == {"application/x-protobuf"}
    check_wire_trace(received, record)


def test_otlp_grpc_export_reaches_a_receiver(otlp_grpc: Any, tmp_path: Path) -> None:
    tracing = start_tracing(TracingOptions(otlp_endpoint=otlp_grpc.url, otlp_protocol="grpc"), out=tmp_path, env={})
    record = run_demo(tracing)
    assert tracing.shutdown() == []
    check_wire_trace(otlp_grpc.received, record)


def test_standard_env_vars_configure_the_exporter(otlp_http: Any, otlp_grpc: Any, tmp_path: Path) -> None:
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={"OTEL_EXPORTER_OTLP_ENDPOINT": otlp_http.url})
    record = run_demo(tracing)
    tracing.shutdown()
    check_wire_trace(otlp_http.received, record)
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": otlp_grpc.url, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    tracing = start_tracing(TracingOptions(), out=tmp_path, env=env)
    record = run_demo(tracing)
    tracing.shutdown()
    check_wire_trace(otlp_grpc.received, record)


def test_json_lines_file_is_valid_otlp_json_with_every_span(otlp_http: Any, tmp_path: Path) -> None:
    tracing = start_tracing(TracingOptions(otlp_endpoint=otlp_http.url), out=tmp_path, env={})
    first = run_demo(tracing)
    second = run_demo(tracing, "budget")
    tracing.shutdown()
    for record in (first, second):
        path = tmp_path / record.episode_id / TRACE_FILE
        assert tracing.trace_file(record.episode_id) == path
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines and all(line.startswith('{"resourceSpans":') for line in lines)
        spans = [
            s
            for line in lines
            for rs in TracesData.from_json(line).resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]
        # exactly this episode's spans, with the same ids the wire receiver decoded from protobuf
        assert {s.trace_id.hex() for s in spans} == {record.trace_id}
        wire = {
            (s.span_id, s.parent_span_id, s.name)
            for _, s in otlp_http.received.spans()
            if s.trace_id.hex() == record.trace_id
        }
        assert {(s.span_id, s.parent_span_id or b"", s.name) for s in spans} == wire
        root = next(s for s in spans if not s.parent_span_id)
        attrs = {kv.key: kv.value.string_value for kv in root.attributes}
        assert attrs["gen_ai.conversation.id"] == record.episode_id


def test_no_trace_file_writes_no_file(otlp_http: Any, tmp_path: Path) -> None:
    tracing = start_tracing(TracingOptions(otlp_endpoint=otlp_http.url, trace_file=False), out=tmp_path, env={})
    record = run_demo(tracing)
    tracing.shutdown()
    assert not list(tmp_path.rglob(TRACE_FILE))
    check_wire_trace(otlp_http.received, record)


def test_captured_content_stays_under_the_4_mib_grpc_limit(otlp_grpc: Any, tmp_path: Path) -> None:
    """~300 chat spans each carrying two capped 16 KiB content attributes (about 10 MB in all) reach a
    gRPC receiver with the default 4 MiB message limit, because the CLI shrinks export batches."""
    big = "z" * (CONTENT_LIMIT * 2)

    def policy(request: ModelRequest) -> Completion:
        if request.agent_id == "orchestrator":
            if any(m.role == "tool" for m in request.messages):
                return Completion(text="done")
            calls = [call("create_subagent", name="w", system_prompt=big)]
            calls += [call("assign_task", agent="w", task=f"{i} {big}") for i in range(16)]
            return Completion(tool_calls=tuple(calls))
        if sum(m.role == "assistant" for m in request.messages) < 18:
            return Completion(text="", tool_calls=(call("nope", x=big),))
        return Completion(text=big)

    tracing = start_tracing(
        TracingOptions(otlp_endpoint=otlp_grpc.url, otlp_protocol="grpc", capture_content=True),
        out=tmp_path,
        env={},
    )
    backend = FunctionBackend(policy, model="m", tokens=False)  # the fake tokenizer would dominate
    record = Orchestrator(
        backend,
        SwarmConfig(max_subagent_steps=20, max_critical_steps=40),
        tracer_provider=tracing.provider,
        capture_content=True,
    ).run_sync("go")
    assert tracing.shutdown() == []
    spans = otlp_grpc.received.spans()
    chats = [s for _, s in spans if s.name == "chat m"]
    assert len(chats) == len(record.turns) + sum(r.steps for r in record.subagent_results) > 300
    assert all("gen_ai.output.messages" in otlp_grpc.received.attrs(s) for s in chats)
    assert sum(otlp_grpc.received.sizes) > 8 * 2**20
    assert max(otlp_grpc.received.sizes) < 4 * 2**20


# -- configuration ------------------------------------------------------------------------------------


def test_endpoint_resolution_follows_the_otlp_exporter_spec() -> None:
    assert resolve_otlp(env={}) == OtlpTarget("http/protobuf", "http://localhost:4318/v1/traces", explicit=False)
    assert resolve_otlp(protocol="grpc", env={}) == OtlpTarget("grpc", "http://localhost:4317", explicit=False)
    generic = resolve_otlp(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"})
    assert generic == OtlpTarget("http/protobuf", "http://jaeger:4318/v1/traces", explicit=True)
    specific = resolve_otlp(env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c:443/custom/path"})
    assert specific is not None and specific.endpoint == "https://c:443/custom/path"
    flag = resolve_otlp("http://h:4317", "grpc", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:1"})
    assert flag == OtlpTarget("grpc", "http://h:4317", explicit=True)
    env_proto = resolve_otlp(env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "x"})
    assert env_proto is not None and env_proto.protocol == "grpc"
    assert resolve_otlp(env={"OTEL_TRACES_EXPORTER": "none"}) is None


@pytest.mark.parametrize(
    ("endpoint", "protocol", "env", "message"),
    [
        ("localhost", None, {}, "must be a URL"),
        ("http://h:99999", None, {}, "invalid port"),
        (None, "http/json", {}, "'http/json' is not supported"),
        (None, None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "jaeger:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        (None, None, {"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
    ],
)
def test_bad_otlp_settings_are_config_errors(endpoint: Any, protocol: Any, env: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolve_otlp(endpoint, protocol, env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_zero_config_uses_a_local_receiver_only_when_one_listens(tmp_path: Path) -> None:
    if receiver_listening(OtlpTarget("http/protobuf", "http://localhost:4318/v1/traces", explicit=False)):
        pytest.skip("something listens on localhost:4318 on this machine")
    notes: list[str] = []
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={}, note=notes.append)
    assert tracing.otlp is None and tracing.provider is not None
    assert len(notes) == 1 and "localhost:4318" in notes[0]
    record = run_demo(tracing)
    assert tracing.shutdown() == []
    assert (tmp_path / record.episode_id / TRACE_FILE).stat().st_size > 0


def test_receiver_probe(otlp_http: Any) -> None:
    assert receiver_listening(OtlpTarget("http/protobuf", otlp_http.url + "/v1/traces", explicit=True))
    assert not receiver_listening(OtlpTarget("http/protobuf", f"http://127.0.0.1:{_free_port()}", explicit=True))


def test_a_dead_explicit_endpoint_never_hangs_or_loses_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "2")  # so the abandoned retries end soon after
    port = _free_port()
    options = TracingOptions(otlp_endpoint=f"http://127.0.0.1:{port}", flush_timeout_s=0.5)
    notes: list[str] = []
    tracing = start_tracing(options, out=tmp_path, env={}, capture_logs=True, note=notes.append)
    assert notes == [f"the OTLP receiver at 127.0.0.1:{port} does not accept connections (yet); exporting anyway"]
    record = run_demo(tracing)
    t0 = time.monotonic()
    warnings = tracing.shutdown()
    assert time.monotonic() - t0 < 4.0
    assert f"127.0.0.1:{port}" in warnings[0] and "did not finish within 0.5s" in warnings[0]
    # the exporter's per-retry log lines were held back and summarised once
    assert len(warnings) == 2 and "export problem(s)" in warnings[1] and "refused" in warnings[1]
    lines = (tmp_path / record.episode_id / TRACE_FILE).read_text().splitlines()
    assert (
        sum(
            len(ss.spans) for line in lines for rs in TracesData.from_json(line).resource_spans for ss in rs.scope_spans
        )
        > 20
    )


def test_sdk_disabled_installs_nothing(tmp_path: Path) -> None:
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={"OTEL_SDK_DISABLED": "true"})
    assert tracing.provider is None and tracing.shutdown() == []
    nothing = start_tracing(TracingOptions(trace_file=False), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"})
    assert nothing.provider is None


def test_resource_names_the_service_unless_the_user_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(key, raising=False)
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.provider is not None
    assert tracing.provider.resource.attributes["service.name"] == "agent-swarm"
    assert tracing.provider.resource.attributes["service.version"]
    tracing.shutdown()
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-swarm")
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={**os.environ, "OTEL_TRACES_EXPORTER": "none"})
    assert tracing.provider is not None and tracing.provider.resource.attributes["service.name"] == "my-swarm"
    tracing.shutdown()


async def test_concurrent_episodes_under_one_caller_span_get_a_file_each(tmp_path: Path) -> None:
    """A rollout collector may run episodes concurrently inside its own span (one shared trace): each
    episode's file must hold exactly the spans that descend from its episode span."""
    import anyio

    tracing = start_tracing(TracingOptions(), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.provider is not None
    records: list[EpisodeRecord] = []

    async def one(name: str) -> None:
        d = demo(name, latency_s=0.001)
        o = Orchestrator(
            d.orchestrator_backend,
            d.config,
            tools=d.tools,
            subagent_backend=d.subagent_backend,
            tracer_provider=tracing.provider,
        )
        records.append(await o.run(d.task))

    with tracing.provider.get_tracer("collector").start_as_current_span("collect rollouts"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "capitals")
            tg.start_soon(one, "budget")
    tracing.shutdown()
    assert records[0].trace_id == records[1].trace_id  # one trace, shared through the caller's span
    seen: set[bytes] = set()
    for record in records:
        lines = (tmp_path / record.episode_id / TRACE_FILE).read_text().splitlines()
        spans = [
            s
            for line in lines
            for rs in TracesData.from_json(line).resource_spans
            for ss in rs.scope_spans
            for s in ss.spans
        ]
        ids = {s.span_id for s in spans}
        top = [s for s in spans if s.parent_span_id not in ids]
        assert [s.name for s in top] == ["invoke_agent orchestrator"]  # a closed tree under the episode span
        n_chats = len(record.turns) + sum(r.steps for r in record.subagent_results)
        assert sum(s.name.startswith("chat ") for s in spans) == n_chats
        assert not ids & seen
        seen |= ids
    assert tracing.files is not None and tracing.files.unrouted == 1  # the collector's own span


def test_a_second_ctrl_c_during_the_flush_abandons_it_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.files is not None

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tracing.files, "shutdown", interrupted)
    warnings = tracing.shutdown()
    assert len(warnings) == 1 and "interrupted" in warnings[0]
    assert tracing.shutdown() == []  # once only


def test_trace_file_lines_are_chunks_of_valid_otlp_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The router encodes an export batch in chunks (one JSON line each); nothing is lost or repeated."""
    from agent_swarm.orchestrator.cli import telemetry_setup

    monkeypatch.setattr(telemetry_setup, "ENCODE_CHUNK", 3)
    tracing = start_tracing(TracingOptions(), out=tmp_path, env={"OTEL_TRACES_EXPORTER": "none"})
    record = run_demo(tracing)
    tracing.shutdown()
    lines = (tmp_path / record.episode_id / TRACE_FILE).read_text(encoding="utf-8").splitlines()
    per_line = [
        [s for rs in TracesData.from_json(line).resource_spans for ss in rs.scope_spans for s in ss.spans]
        for line in lines
    ]
    assert len(lines) > 1 and all(1 <= len(spans) <= 3 for spans in per_line)
    ids = [s.span_id for spans in per_line for s in spans]
    assert len(ids) == len(set(ids)) and {s.trace_id.hex() for spans in per_line for s in spans} == {record.trace_id}
    assert sum(1 for spans in per_line for s in spans if not s.parent_span_id) == 1


def test_the_cli_resource_hashes_like_the_sdk_resource() -> None:
    """Encoders group spans by resource in a dict; the CLI's resource caches its hash, which must stay
    the SDK's (equal resources, equal hashes) so grouping is unchanged."""
    from opentelemetry.sdk.resources import Resource

    from agent_swarm.orchestrator.cli.telemetry_setup import _resource

    ours = _resource({})
    plain = Resource.create(dict(ours.attributes))
    assert ours == plain and hash(ours) == hash(plain) and {ours: 1}[plain] == 1
    assert ours.attributes["service.name"] == "agent-swarm"
