"""The narrow model backend protocol: one request type in, one completion type out.

A completion carries what RL needs: the exact prompt token ids and sampled token ids as the engine
produced them, their logprobs, the finish reason, token usage and the parsed tool calls. Backends
that cannot give token ids leave them ``None``; the trajectory layer then refuses to build a
trainable record rather than re-tokenizing text (re-rendering changes ids and corrupts ratios).

Features (retries, tracing, fallbacks, concurrency caps) wrap a backend; they never grow inside it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidatorFunctionWrapHandler, WrapValidator

from swarm._fast import maker
from swarm.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage

__all__ = [
    "Completion",
    "FinishReason",
    "ModelBackend",
    "ModelRequest",
    "SamplingParams",
    "ToolSpec",
    "Usage",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolSpec(_Frozen):
    """A tool as a model sees it: name, description and a JSON schema for its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI function-tool format that vLLM and llama.cpp servers accept."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class SamplingParams(_Frozen):
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(1024, ge=1)
    seed: int | None = None
    logprobs: bool = True
    stop: tuple[str, ...] = ()


_MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolMessage)


def _messages(value: Any, handler: ValidatorFunctionWrapHandler) -> tuple[Message, ...]:
    if isinstance(value, tuple) and all(type(m) in _MESSAGE_TYPES for m in value):
        return value
    out: tuple[Message, ...] = handler(value)
    return out


class ModelRequest(_Frozen):
    """Everything a backend needs for one generation.

    ``agent_id`` / ``agent_name`` identify the calling agent; real backends may ignore them (or use
    them for slot affinity), test backends route scripted turns on them.
    """

    # Messages are usually frozen, already-validated models: re-validating the whole transcript on
    # every step is O(transcript) per model call on the runtime's hottest path, so instances pass
    # through and only dicts (e.g. from JSON) are validated.
    messages: Annotated[tuple[Message, ...], WrapValidator(_messages)]
    tools: tuple[ToolSpec, ...] = ()
    sampling: SamplingParams = SamplingParams()
    tool_choice: Literal["auto", "none", "required"] = "auto"
    agent_id: str = ""
    agent_name: str = ""


class Usage(_Frozen):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return _usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


_usage = maker(Usage)  # sums of validated non-negative ints need no re-validation

FinishReason = Literal["stop", "length", "tool_calls", "error"]


class Completion(_Frozen):
    """One generation.

    ``parse_error`` is set when the model produced tool-call text the backend could not parse
    (broken JSON, unknown shape); the agent loop feeds it back to the model as a recoverable error.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: FinishReason = "stop"
    usage: Usage = Usage()
    model: str = ""
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    parse_error: str | None = None
    weight_version: str | None = None


@runtime_checkable
class ModelBackend(Protocol):
    """Tokens in, tokens out. Implementations must be safe to call concurrently from many tasks."""

    @property
    def model(self) -> str:
        """The model name reported on records and spans."""
        ...

    async def complete(self, request: ModelRequest) -> Completion:
        """Generate one completion. Raise :class:`swarm.errors.BackendError` subclasses on failure."""
        ...
