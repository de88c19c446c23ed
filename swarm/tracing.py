"""Tracing helpers on the OpenTelemetry *API* only (the CLI installs the SDK).

The runtime opens spans through a :class:`Telemetry` object. Its methods return context managers that
start a span as *current* in the calling task, so anyio children started inside them inherit the right
parent (contextvars are copied at ``start_soon``): every sub-agent's spans sit under its own stage span.

Span names and attributes follow the OpenTelemetry GenAI semantic conventions (Development status,
now kept in ``open-telemetry/semantic-conventions-genai``)::

    invoke_agent orchestrator      INTERNAL  gen_ai.conversation.id=<episode id>, swarm.dag.*, swarm.reward.*
    ├─ chat <model>                CLIENT    usage, finish reasons, server.address/port
    └─ stage <n>                   INTERNAL  swarm.stage.index/kind/width/critical_steps(_so_far)
       ├─ execute_tool <tool>      INTERNAL  the orchestrator's direct tool calls
       └─ invoke_agent <name>      INTERNAL  gen_ai.agent.id, swarm.agent.status
          ├─ chat <model>
          └─ execute_tool <tool>   (MCP client spans nest here)

Failures set span status ERROR and ``error.type``. Message content (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``, tool arguments and results) is recorded only
with ``capture_content=True``, in the conventions' JSON ``parts`` shape, and capped at
:data:`CONTENT_LIMIT` UTF-8 bytes per attribute so an export batch stays under receivers' 4 MiB limit.

A disabled :class:`Telemetry` (no provider given and none installed globally) returns one shared
no-op context manager: no span, no attribute dict, no content serialisation.

A backend may expose two optional attributes that end up on its ``chat`` spans: ``base_url`` (e.g.
``"http://gpu-box:8000/v1"``, giving ``server.address``/``server.port``) and ``provider_name`` (the
``gen_ai.provider.name`` value, e.g. ``"openai"`` for an OpenAI-compatible vLLM server).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from agent_swarm.swarm.backend import Completion, SamplingParams
from agent_swarm.swarm.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage

__all__ = [
    "CONTENT_LIMIT",
    "SpanHandle",
    "SpanScope",
    "Telemetry",
    "attr",
    "cap_content",
    "genai_input_messages",
    "genai_output_messages",
    "server_of",
]

INSTRUMENTATION_NAME = "agent-swarm"
CONTENT_LIMIT = 16_384
"""Max UTF-8 bytes of one content attribute when content capture is on.

At most two content attributes sit on a span; the CLI caps export batches at 64 spans when content is
captured, so one OTLP request stays near 2 MiB, under the 4 MiB default of gRPC receivers."""

DEFAULT_PROVIDER = "swarm"
"""``gen_ai.provider.name`` when the backend does not say (custom values are allowed by the spec)."""


class attr:  # a namespace of attribute-name constants
    """Attribute names (the GenAI conventions left the semconv package; keep the strings here)."""

    OPERATION = "gen_ai.operation.name"
    PROVIDER = "gen_ai.provider.name"
    AGENT_NAME = "gen_ai.agent.name"
    AGENT_ID = "gen_ai.agent.id"
    CONVERSATION_ID = "gen_ai.conversation.id"
    REQUEST_MODEL = "gen_ai.request.model"
    REQUEST_TEMPERATURE = "gen_ai.request.temperature"
    REQUEST_TOP_P = "gen_ai.request.top_p"
    REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
    REQUEST_SEED = "gen_ai.request.seed"
    REQUEST_STOP = "gen_ai.request.stop_sequences"
    RESPONSE_MODEL = "gen_ai.response.model"
    FINISH_REASONS = "gen_ai.response.finish_reasons"
    INPUT_TOKENS = "gen_ai.usage.input_tokens"
    OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
    TOOL_NAME = "gen_ai.tool.name"
    TOOL_TYPE = "gen_ai.tool.type"
    TOOL_CALL_ID = "gen_ai.tool.call.id"
    TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
    TOOL_RESULT = "gen_ai.tool.call.result"
    INPUT_MESSAGES = "gen_ai.input.messages"
    OUTPUT_MESSAGES = "gen_ai.output.messages"
    SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
    SERVER_ADDRESS = "server.address"
    SERVER_PORT = "server.port"
    ERROR_TYPE = "error.type"
    STAGE_INDEX = "swarm.stage.index"
    STAGE_WIDTH = "swarm.stage.width"
    STAGE_KIND = "swarm.stage.kind"
    STAGE_CRITICAL = "swarm.stage.critical_steps"
    CRITICAL_SO_FAR = "swarm.stage.critical_steps_so_far"
    STAGE_FAILED = "swarm.stage.failed_subagents"
    AGENT_STATUS = "swarm.agent.status"
    AGENT_INDEX = "swarm.agent.index"
    AGENT_STAGE_WIDTH = "swarm.agent.stage_width"
    AGENT_STEPS = "swarm.agent.steps"
    EPISODE_ID = "swarm.episode.id"
    EPISODE_STATUS = "swarm.episode.status"
    TASK_ID = "swarm.task.id"


class SpanHandle:
    """A thin wrapper so call sites stay identical when tracing is off."""

    __slots__ = ("_span",)

    def __init__(self, span: Span | None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        return self._span is not None and self._span.is_recording()

    def set(self, key: str, value: Any) -> None:
        if self._span is not None and value is not None:
            self._span.set_attribute(key, value)

    def set_many(self, values: Mapping[str, Any]) -> None:
        """Set several attributes at once (``None`` values are skipped): one SDK call, so one lock and
        one validation pass instead of one per attribute."""
        if self._span is not None:
            self._span.set_attributes({k: v for k, v in values.items() if v is not None})

    def _set_all(self, values: Mapping[str, AttributeValue]) -> None:
        """:meth:`set_many` for values known to hold no ``None``."""
        if self._span is not None:
            self._span.set_attributes(values)

    def fail(self, error_type: str, description: str = "") -> None:
        """Mark the span as failed without an exception object (e.g. a recorded agent failure)."""
        if self._span is not None:
            self._span.set_attribute(attr.ERROR_TYPE, error_type or "_OTHER")
            self._span.set_status(Status(StatusCode.ERROR, description[:512]))

    def trace_id(self) -> str | None:
        """The W3C trace id (32 hex digits); ``None`` when tracing is off or the trace was not sampled
        (an id no backend will ever hold is worse than none)."""
        if self._span is None:
            return None
        ctx = self._span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid and ctx.trace_flags.sampled else None

    def span_id(self) -> str | None:
        if self._span is None:
            return None
        ctx = self._span.get_span_context()
        return format(ctx.span_id, "016x") if ctx.is_valid else None


_NULL = SpanHandle(None)


class SpanScope(Protocol):
    """What every :class:`Telemetry` span method returns: ``with telemetry.chat(...) as span:``."""

    def __enter__(self) -> SpanHandle: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class _NullScope:
    """The shared scope of a disabled Telemetry: costs one method call on enter and exit."""

    __slots__ = ()

    def __enter__(self) -> SpanHandle:
        return _NULL

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


_NULL_SCOPE = _NullScope()


class _Scope(SpanHandle):
    """Starts a span as current on enter; on exit records an escaping exception and ends it.

    The scope is its own :class:`SpanHandle` (one object per span, not two). ``attributes`` must hold
    no ``None`` values, and may be a dict shared between spans: the SDK copies it at span start.
    """

    __slots__ = ("_attributes", "_kind", "_name", "_token", "_tracer")

    def __init__(self, tracer: Tracer, name: str, kind: SpanKind, attributes: Mapping[str, Any]) -> None:
        self._span = None
        self._tracer, self._name, self._kind, self._attributes = tracer, name, kind, attributes

    def __enter__(self) -> SpanHandle:
        span = self._tracer.start_span(self._name, kind=self._kind, attributes=self._attributes)
        self._span = span
        # Current for the body: tool implementations (MCP clients) and backends (HTTP clients, an
        # OpenAI instrumentation, traceparent injection) open their spans under it. Costs ~1 µs.
        self._token = otel_context.attach(trace.set_span_in_context(span))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        span = self._span
        assert span is not None
        try:
            if exc is not None and span.is_recording():
                span.set_attribute(attr.ERROR_TYPE, type(exc).__qualname__)
                if isinstance(exc, Exception):
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:512]))
                else:  # cancellation (Ctrl-C, a deadline, a sibling's failure) ends the span as an error
                    span.set_status(Status(StatusCode.ERROR, "cancelled"))
        finally:
            otel_context.detach(self._token)
            span.end()


def _present(attributes: dict[str, Any]) -> dict[str, Any]:
    """The attributes without ``None`` values (the SDK rejects them with a warning)."""
    return {k: v for k, v in attributes.items() if v is not None}


# -- content ----------------------------------------------------------------------------------------


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def _tool_call_part(c: ToolCall) -> dict[str, Any]:
    return {"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments}


def genai_input_messages(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system_instructions, input_messages)`` in the GenAI conventions' JSON ``parts`` shape."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, SystemMessage):
            system.append(_text(m.content))
        elif isinstance(m, AssistantMessage):
            parts = [_text(m.content)] if m.content else []
            parts += [_tool_call_part(c) for c in m.tool_calls]
            out.append({"role": "assistant", "parts": parts})
        elif isinstance(m, ToolMessage):
            out.append(
                {
                    "role": "tool",
                    "parts": [{"type": "tool_call_response", "id": m.tool_call_id, "result": m.content}],
                }
            )
        else:
            out.append({"role": m.role, "parts": [_text(m.content)]})
    return system, out


def genai_output_messages(completion: Completion) -> list[dict[str, Any]]:
    """The completion as ``gen_ai.output.messages``."""
    parts = [_text(completion.text)] if completion.text else []
    parts += [_tool_call_part(c) for c in completion.tool_calls]
    return [{"role": "assistant", "parts": parts, "finish_reason": completion.finish_reason}]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _truncate(text: str, max_bytes: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    marker = f"…[truncated {len(data)} bytes]"
    keep = max(0, max_bytes - len(marker.encode("utf-8")))
    return data[:keep].decode("utf-8", errors="ignore") + marker


def _shrink_parts(messages: list[dict[str, Any]], per_part: int) -> list[dict[str, Any]]:
    out = []
    for m in messages:
        parts = []
        for p in m.get("parts", ()):
            q = dict(p)
            for key in ("content", "result"):
                if isinstance(q.get(key), str):
                    q[key] = _truncate(q[key], per_part)
            if "arguments" in q and not isinstance(q["arguments"], str):
                args = _dumps(q["arguments"])
                if len(args.encode("utf-8")) > per_part:
                    q["arguments"] = _truncate(args, per_part)
            parts.append(q)
        out.append({**m, "parts": parts})
    return out


def cap_content(value: Any, limit: int = CONTENT_LIMIT) -> str:
    """Serialise content to JSON (strings stay as they are) within ``limit`` UTF-8 bytes.

    A list of GenAI messages stays *valid JSON*: long parts are truncated first, then the oldest
    messages are dropped (the latest turns matter most), with a marker saying how many.
    """
    if isinstance(value, str):
        return _truncate(value, limit)
    text = _dumps(value)
    if len(text.encode("utf-8")) <= limit:
        return text
    if not (isinstance(value, list) and all(isinstance(m, dict) and "parts" in m for m in value)):
        return _truncate(text, limit)
    n_parts = max(1, sum(len(m["parts"]) for m in value))
    messages = _shrink_parts(value, max(256, limit // (n_parts + 1)))
    # Drop the oldest messages until the rest fits: sizes are measured once (linear, not quadratic).
    sizes = [len(_dumps(m).encode("utf-8")) + 2 for m in messages]  # + ", " separator
    marker_room = 120
    total, keep_from = sum(sizes) + 2, 0
    while keep_from < len(messages) and total + (marker_room if keep_from else 0) > limit:
        total -= sizes[keep_from]
        keep_from += 1
    while keep_from <= len(messages):
        kept = messages[keep_from:]
        marker = [{"role": "system", "parts": [_text(f"[{keep_from} earlier message(s) omitted: size cap]")]}]
        text = _dumps(marker + kept if keep_from else kept)
        if len(text.encode("utf-8")) <= limit:
            return text
        keep_from += 1
    return _dumps([{"role": "system", "parts": [_text(f"[{len(messages)} message(s) omitted: size cap]")]}])


def _optional_attr(obj: object, name: str) -> object:
    try:
        return getattr(obj, name, None)
    except Exception:  # a property that cannot answer yet (e.g. a server not started) is no value
        return None


def server_of(backend: object) -> tuple[str | None, int | None]:
    """``(server.address, server.port)`` from a backend's optional ``base_url`` attribute."""
    return _server_of_url(_optional_attr(backend, "base_url"))


def _server_of_url(url: object) -> tuple[str | None, int | None]:
    if not isinstance(url, str) or not url:
        return None, None
    parts = urlsplit(url if "//" in url else f"//{url}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None and parts.scheme in ("http", "https"):
        port = 443 if parts.scheme == "https" else 80
    return parts.hostname or None, port


_CACHE_LIMIT = 1024
"""Entries per attribute cache of a Telemetry (distinct models x backends x sampling, or tool names);
a cache that outgrows it is cleared, never grown without bound."""


class Telemetry:
    """Opens the runtime's spans. ``provider=None`` uses the globally installed provider, if any.

    Cost (see ``bench/README.md``, "Tracing overhead"): every attribute known at span start is passed to
    ``start_span`` (one SDK validation pass instead of one locked ``set_attribute`` per key), the
    constant attributes of ``chat`` spans (per model, backend and sampling object) and of
    ``execute_tool`` spans (per tool name) are built once and reused, and content is only serialised
    when capture is on.
    """

    def __init__(
        self,
        provider: TracerProvider | None = None,
        *,
        capture_content: bool = False,
        enabled: bool | None = None,
        follow_parent_sampling: bool = False,
    ) -> None:
        if enabled is None:
            enabled = provider is not None or _global_provider_installed()
        self.enabled = enabled
        self.capture_content = capture_content and enabled
        self.follow_parent_sampling = follow_parent_sampling
        """Open no span under a span of this process that was sampled out (what a parent-based
        sampler decides for it anyway, without the SDK's work for a span nobody records: a sampled-out
        sub-agent of a wide stage then costs one non-recording span, not one per step). Set it only
        with a sampler that drops the children of sampled-out local parents (the SDK's default
        ``parentbased_*`` samplers do; the CLI's does)."""
        self._tracer: Tracer | None = (
            trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=provider) if enabled else None
        )
        # (model, base_url, provider_name, explicit args, id(sampling)) -> (sampling, chat attributes)
        self._chat_attrs: dict[tuple[Any, ...], tuple[SamplingParams | None, dict[str, Any]]] = {}
        self._tool_attrs: dict[str, dict[str, Any]] = {}  # tool name -> constant execute_tool attributes

    # -- spans --------------------------------------------------------------------------------------

    def episode(self, *, episode_id: str, model: str, task_id: str) -> SpanScope:
        """``invoke_agent orchestrator``: the root span of one episode."""
        if self._tracer is None or (self.follow_parent_sampling and _under_sampled_out()):
            return _NULL_SCOPE
        return _Scope(
            self._tracer,
            "invoke_agent orchestrator",
            SpanKind.INTERNAL,
            _present(
                {
                    attr.OPERATION: "invoke_agent",
                    attr.PROVIDER: DEFAULT_PROVIDER,
                    attr.AGENT_NAME: "orchestrator",
                    attr.AGENT_ID: f"{episode_id}/orchestrator",
                    attr.CONVERSATION_ID: episode_id,
                    attr.EPISODE_ID: episode_id,
                    attr.REQUEST_MODEL: model,
                    attr.TASK_ID: task_id or None,
                }
            ),
        )

    def stage(self, *, index: int, kind: str, width: int, critical_so_far: int) -> SpanScope:
        """``stage <index>``: one orchestrator turn's stage (direct tools and sub-agents in parallel)."""
        if self._tracer is None or (self.follow_parent_sampling and _under_sampled_out()):
            return _NULL_SCOPE
        return _Scope(
            self._tracer,
            f"stage {index}",
            SpanKind.INTERNAL,
            _present(
                {
                    attr.STAGE_INDEX: index,
                    attr.STAGE_KIND: kind,
                    attr.STAGE_WIDTH: width,
                    attr.CRITICAL_SO_FAR: critical_so_far,
                }
            ),
        )

    def agent(
        self,
        *,
        name: str,
        agent_id: str,
        model: str,
        episode_id: str,
        index: int | None = None,
        width: int | None = None,
    ) -> SpanScope:
        """``invoke_agent <name>``: one sub-agent instance; ``index`` is its place among its stage's
        ``width`` sub-agents (``swarm.agent.index``, ``swarm.agent.stage_width``: what a sampler that keeps
        a sample of a very wide stage decides on)."""
        if self._tracer is None or (self.follow_parent_sampling and _under_sampled_out()):
            return _NULL_SCOPE
        attributes: dict[str, Any] = {
            attr.OPERATION: "invoke_agent",
            attr.PROVIDER: DEFAULT_PROVIDER,
            attr.AGENT_NAME: name,
            attr.AGENT_ID: agent_id,
            attr.REQUEST_MODEL: model,
        }
        if episode_id:
            attributes[attr.CONVERSATION_ID] = episode_id
        if index is not None and width is not None:
            attributes[attr.AGENT_INDEX] = index
            attributes[attr.AGENT_STAGE_WIDTH] = width
        return _Scope(self._tracer, f"invoke_agent {name}", SpanKind.INTERNAL, _present(attributes))

    def chat(
        self,
        *,
        model: str,
        backend: object = None,
        sampling: SamplingParams | None = None,
        messages: Sequence[Message] | None = None,
        provider: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> SpanScope:
        """``chat <model>``: one LLM call. ``messages`` are recorded only when content capture is on."""
        if self._tracer is None or (self.follow_parent_sampling and _under_sampled_out()):
            return _NULL_SCOPE
        url = name = None
        if backend is not None:  # read every call: a local server's address may appear only once started
            if server_address is None and isinstance(found := _optional_attr(backend, "base_url"), str):
                url = found
            if provider is None and isinstance(found := _optional_attr(backend, "provider_name"), str):
                name = found
        key = (model, url, name, provider, server_address, server_port, temperature, max_tokens, id(sampling))
        hit = self._chat_attrs.get(key)
        if hit is not None and hit[0] is sampling:
            attributes = hit[1]
        else:
            attributes = self._chat_attributes(
                model, url, name, sampling, provider, server_address, server_port, temperature, max_tokens
            )
            if len(self._chat_attrs) >= _CACHE_LIMIT:
                self._chat_attrs.clear()
            self._chat_attrs[key] = (sampling, attributes)
        if self.capture_content and messages is not None:
            system, inputs = genai_input_messages(messages)
            attributes = {**attributes, attr.INPUT_MESSAGES: cap_content(inputs)}
            if system:
                attributes[attr.SYSTEM_INSTRUCTIONS] = cap_content(system)
        return _Scope(self._tracer, f"chat {model}", SpanKind.CLIENT, attributes)

    @staticmethod
    def _chat_attributes(
        model: str,
        url: str | None,
        name: str | None,
        sampling: SamplingParams | None,
        provider: str | None,
        server_address: str | None,
        server_port: int | None,
        temperature: float | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        if server_address is None and url is not None:
            server_address, port = _server_of_url(url)
            server_port = server_port if server_port is not None else port
        if provider is None:
            provider = name or None
        attributes: dict[str, Any] = {
            attr.OPERATION: "chat",
            attr.PROVIDER: provider or DEFAULT_PROVIDER,
            attr.REQUEST_MODEL: model,
            attr.SERVER_ADDRESS: server_address,
            attr.SERVER_PORT: server_port,
            attr.REQUEST_TEMPERATURE: temperature,
            attr.REQUEST_MAX_TOKENS: max_tokens,
        }
        if sampling is not None:
            attributes[attr.REQUEST_TEMPERATURE] = sampling.temperature
            attributes[attr.REQUEST_TOP_P] = sampling.top_p
            attributes[attr.REQUEST_MAX_TOKENS] = sampling.max_tokens
            attributes[attr.REQUEST_SEED] = sampling.seed
            if sampling.stop:
                attributes[attr.REQUEST_STOP] = sampling.stop
        return _present(attributes)

    def tool(self, *, name: str, call_id: str, arguments: Mapping[str, Any] | None = None) -> SpanScope:
        """``execute_tool <name>``: one tool call (arguments recorded only with content capture)."""
        if self._tracer is None or (self.follow_parent_sampling and _under_sampled_out()):
            return _NULL_SCOPE
        base = self._tool_attrs.get(name)
        if base is None:
            if len(self._tool_attrs) >= _CACHE_LIMIT:
                self._tool_attrs.clear()
            base = self._tool_attrs[name] = {
                attr.OPERATION: "execute_tool",
                attr.TOOL_NAME: name,
                attr.TOOL_TYPE: "function",
            }
        attributes = {**base, attr.TOOL_CALL_ID: call_id} if call_id is not None else base
        if self.capture_content and arguments:
            attributes = {**attributes, attr.TOOL_ARGUMENTS: cap_content(dict(arguments))}
        return _Scope(self._tracer, f"execute_tool {name}", SpanKind.INTERNAL, attributes)

    # -- results ------------------------------------------------------------------------------------

    def completion(self, span: SpanHandle, completion: Completion) -> None:
        """Record a finished LLM call on its ``chat`` span: usage, response model, finish reason."""
        if not span.recording:
            return
        usage = completion.usage
        values: dict[str, Any] = {
            attr.INPUT_TOKENS: usage.prompt_tokens,
            attr.OUTPUT_TOKENS: usage.completion_tokens,
            attr.FINISH_REASONS: (completion.finish_reason,),
        }
        if completion.model:
            values[attr.RESPONSE_MODEL] = completion.model
        if completion.parse_error is not None:
            values["swarm.response.parse_error"] = completion.parse_error[:512]
        if self.capture_content:
            values[attr.OUTPUT_MESSAGES] = cap_content(genai_output_messages(completion))
        span._set_all(values)

    def agent_result(self, span: SpanHandle, *, status: str, steps: int, input_tokens: int, output_tokens: int) -> None:
        """Record how a sub-agent ended on its ``invoke_agent`` span (one SDK call for all four)."""
        if span.recording:
            span._set_all(
                {
                    attr.AGENT_STATUS: status,
                    attr.AGENT_STEPS: steps,
                    attr.INPUT_TOKENS: input_tokens,
                    attr.OUTPUT_TOKENS: output_tokens,
                }
            )

    def content(self, handle: SpanHandle, key: str, value: Any | Callable[[], Any]) -> None:
        """Attach content only when capture is on; ``value`` may be a zero-argument callable so
        nothing is serialised when capture is off. Size-capped (see :func:`cap_content`)."""
        if not self.capture_content or not handle.recording:
            return
        if callable(value):
            value = value()
        handle.set(key, cap_content(value))


def _under_sampled_out() -> bool:
    """The current span is a sampled-out span of this process (not a remote parent, not "none")."""
    ctx = trace.get_current_span().get_span_context()
    return ctx.is_valid and not ctx.trace_flags.sampled and not ctx.is_remote


def _global_provider_installed() -> bool:
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
