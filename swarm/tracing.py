"""Tracing helpers on the OpenTelemetry *API* only (the CLI installs the SDK).

The runtime opens spans through a :class:`Telemetry` object; its context managers start spans as
*current* in the calling task, so anyio children started inside them inherit the right parent
(contextvars are copied at ``start_soon``). Span names and attributes follow the GenAI semantic
conventions (``invoke_agent``, ``chat``, ``execute_tool``) plus ``swarm.*`` attributes for stages,
DAG statistics and rewards.

When tracing is off (no provider passed and none installed globally) a :class:`Telemetry` with
``enabled=False`` costs one attribute check per call site.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

__all__ = ["CONTENT_LIMIT", "SpanHandle", "Telemetry", "attr"]

INSTRUMENTATION_NAME = "agent-swarm"
CONTENT_LIMIT = 16_384
"""Max characters of one content attribute when content capture is on (keeps exports < 4 MiB)."""


class attr:  # noqa: N801 - a namespace of attribute-name constants
    """Attribute names (GenAI conventions moved out of the semconv package; keep them here)."""

    OPERATION = "gen_ai.operation.name"
    PROVIDER = "gen_ai.provider.name"
    AGENT_NAME = "gen_ai.agent.name"
    AGENT_ID = "gen_ai.agent.id"
    CONVERSATION_ID = "gen_ai.conversation.id"
    REQUEST_MODEL = "gen_ai.request.model"
    REQUEST_TEMPERATURE = "gen_ai.request.temperature"
    REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
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
    SERVER_ADDRESS = "server.address"
    SERVER_PORT = "server.port"
    ERROR_TYPE = "error.type"
    STAGE_INDEX = "swarm.stage.index"
    STAGE_WIDTH = "swarm.stage.width"
    STAGE_KIND = "swarm.stage.kind"
    STAGE_CRITICAL = "swarm.stage.critical_steps"
    CRITICAL_SO_FAR = "swarm.stage.critical_steps_so_far"
    AGENT_STATUS = "swarm.agent.status"
    AGENT_STEPS = "swarm.agent.steps"
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
        if self._span is not None:
            for k, v in values.items():
                if v is not None:
                    self._span.set_attribute(k, v)

    def fail(self, error_type: str, description: str = "") -> None:
        """Mark the span as failed without an exception object (e.g. a recorded agent failure)."""
        if self._span is not None:
            self._span.set_attribute(attr.ERROR_TYPE, error_type)
            self._span.set_status(Status(StatusCode.ERROR, description[:512]))

    def trace_id(self) -> str | None:
        if self._span is None:
            return None
        ctx = self._span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else None


_NULL = SpanHandle(None)


def _cap(text: str) -> str:
    return text if len(text) <= CONTENT_LIMIT else text[:CONTENT_LIMIT] + f"…[truncated {len(text)} chars]"


class Telemetry:
    """Opens the runtime's spans. ``provider=None`` uses the globally installed provider, if any."""

    def __init__(
        self,
        provider: TracerProvider | None = None,
        *,
        capture_content: bool = False,
        enabled: bool | None = None,
    ) -> None:
        if enabled is None:
            enabled = provider is not None or _global_provider_installed()
        self.enabled = enabled
        self.capture_content = capture_content
        self._tracer = trace.get_tracer(INSTRUMENTATION_NAME, tracer_provider=provider) if enabled else None

    # -- spans --------------------------------------------------------------------------------------

    @contextmanager
    def _span(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> Iterator[SpanHandle]:
        if self._tracer is None:
            yield _NULL
            return
        with self._tracer.start_as_current_span(
            name, kind=kind, attributes={k: v for k, v in attributes.items() if v is not None},
            record_exception=True, set_status_on_exception=True,
        ) as span:
            handle = SpanHandle(span)
            try:
                yield handle
            except BaseException as exc:
                span.set_attribute(attr.ERROR_TYPE, type(exc).__qualname__)
                raise

    def episode(self, *, episode_id: str, model: str, task_id: str) -> Any:
        return self._span(
            "invoke_agent orchestrator",
            SpanKind.INTERNAL,
            {
                attr.OPERATION: "invoke_agent",
                attr.PROVIDER: "swarm",
                attr.AGENT_NAME: "orchestrator",
                attr.AGENT_ID: f"{episode_id}/orchestrator",
                attr.CONVERSATION_ID: episode_id,
                attr.REQUEST_MODEL: model,
                attr.TASK_ID: task_id,
            },
        )

    def stage(self, *, index: int, kind: str, width: int, critical_so_far: int) -> Any:
        return self._span(
            f"stage {index}",
            SpanKind.INTERNAL,
            {
                attr.STAGE_INDEX: index,
                attr.STAGE_KIND: kind,
                attr.STAGE_WIDTH: width,
                attr.CRITICAL_SO_FAR: critical_so_far,
            },
        )

    def agent(self, *, name: str, agent_id: str, model: str, episode_id: str) -> Any:
        return self._span(
            f"invoke_agent {name}",
            SpanKind.INTERNAL,
            {
                attr.OPERATION: "invoke_agent",
                attr.PROVIDER: "swarm",
                attr.AGENT_NAME: name,
                attr.AGENT_ID: agent_id,
                attr.CONVERSATION_ID: episode_id,
                attr.REQUEST_MODEL: model,
            },
        )

    def chat(self, *, model: str, provider: str = "swarm", server_address: str | None = None,
             server_port: int | None = None, temperature: float | None = None,
             max_tokens: int | None = None) -> Any:
        return self._span(
            f"chat {model}",
            SpanKind.CLIENT,
            {
                attr.OPERATION: "chat",
                attr.PROVIDER: provider,
                attr.REQUEST_MODEL: model,
                attr.SERVER_ADDRESS: server_address,
                attr.SERVER_PORT: server_port,
                attr.REQUEST_TEMPERATURE: temperature,
                attr.REQUEST_MAX_TOKENS: max_tokens,
            },
        )

    def tool(self, *, name: str, call_id: str) -> Any:
        return self._span(
            f"execute_tool {name}",
            SpanKind.INTERNAL,
            {
                attr.OPERATION: "execute_tool",
                attr.TOOL_NAME: name,
                attr.TOOL_TYPE: "function",
                attr.TOOL_CALL_ID: call_id,
            },
        )

    # -- content ------------------------------------------------------------------------------------

    def content(self, handle: SpanHandle, key: str, value: str | Sequence[Any] | Mapping[str, Any]) -> None:
        """Attach prompt/completion/tool content, only when capture is on; size-capped."""
        if not self.capture_content or not handle.recording:
            return
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        handle.set(key, _cap(text))


def _global_provider_installed() -> bool:
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
