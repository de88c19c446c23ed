"""The narrow model backend protocol: one request type in, one completion type out.

A completion carries what RL needs: the exact prompt token ids and sampled token ids as the engine
produced them, their logprobs, the finish reason, token usage and the parsed tool calls. Backends
that cannot give token ids leave them ``None``; the trajectory layer then refuses to build a
trainable record rather than re-tokenizing text (re-rendering changes ids and corrupts ratios).

Features (retries, tracing, fallbacks, concurrency caps) wrap a backend; they never grow inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    validate_fields,
)

__all__ = [
    "CHARS_PER_TOKEN",
    "Completion",
    "FinishReason",
    "ModelBackend",
    "ModelRequest",
    "SamplingParams",
    "TimeParts",
    "Timings",
    "ToolSpec",
    "Usage",
    "context_window",
    "estimate_tokens",
    "parallel_slots",
    "prompt_tokens",
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


_MESSAGE_TYPES = frozenset((SystemMessage, UserMessage, AssistantMessage, ToolMessage))
_TOOL_SPEC = frozenset((ToolSpec,))
_TOOL_CHOICES = ("auto", "none", "required")
_DEFAULT_SAMPLING = SamplingParams()


@dataclass(slots=True, kw_only=True)
class ModelRequest:
    """Everything a backend needs for one generation.

    ``agent_id`` / ``agent_name`` identify the calling agent; real backends may ignore them (or use
    them for slot affinity), test backends route scripted turns on them.

    The runtime builds one per model call from parts that are already validated (its messages,
    the tool specs, the config's sampling), so a request is a plain slotted dataclass with one
    validator where data enters: a request whose fields are not exactly those types (dicts, lists,
    JSON-decoded values) is validated into them by pydantic when it is built.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    sampling: SamplingParams = _DEFAULT_SAMPLING
    tool_choice: Literal["auto", "none", "required"] = "auto"
    parallel_tool_calls: bool = True
    """``False``: at most one tool call in the reply (OpenAI's ``parallel_tool_calls``; the local
    backend's action grammar admits one call)."""
    allowed_tools: tuple[str, ...] | None = None
    """The names of the tools the reply may call, where that is fewer than ``tools`` (OpenAI's
    ``allowed_tools`` choice): the prompt still lists every tool, so a cached prefix stays valid, while
    an action grammar or schema admits only these (:meth:`offered`). ``None``: every tool. Backends that
    cannot restrict the choice leave it to the caller, which refuses a call to a tool not allowed."""
    agent_id: str = ""
    agent_name: str = ""

    def __post_init__(self) -> None:
        if not (
            type(self.messages) is tuple
            and type(self.tools) is tuple
            and type(self.sampling) is SamplingParams
            and self.tool_choice in _TOOL_CHOICES
            and type(self.parallel_tool_calls) is bool
            and (self.allowed_tools is None or (type(self.allowed_tools) is tuple and _all_str(self.allowed_tools)))
            and type(self.agent_id) is str
            and type(self.agent_name) is str
            and _MESSAGE_TYPES.issuperset(map(type, self.messages))
            and _TOOL_SPEC.issuperset(map(type, self.tools))
        ):
            validate_fields(self)

    def offered(self) -> tuple[ToolSpec, ...]:
        """The tools the reply may call: none when ``tool_choice`` is ``"none"``, else ``tools``
        narrowed to ``allowed_tools``."""
        if self.tool_choice == "none":
            return ()
        if self.allowed_tools is None:
            return self.tools
        return tuple(t for t in self.tools if t.name in self.allowed_tools)


def _all_str(items: tuple[object, ...]) -> bool:
    return all(type(i) is str for i in items)


_RECORD_CONFIG = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens of one generation (or a sum of them).

    A plain frozen, slotted dataclass: every backend builds one per response and every record holds
    them. Built from anything but ints (a server's JSON, floats, strings), it is validated by
    pydantic like any backend output."""

    __pydantic_config__ = _RECORD_CONFIG
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    """Of ``prompt_tokens``, those the server read from its prompt cache (0 when it does not say)."""

    def __post_init__(self) -> None:
        if not (
            type(self.prompt_tokens) is int and type(self.completion_tokens) is int and type(self.cached_tokens) is int
        ):
            validate_fields(self)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeParts:
    """The measured parts of model time (seconds; token counts): one call's (:class:`Timings`), or an
    episode's over its calls (:class:`agent_swarm.swarm.timings.EpisodeTimings`).

    ``startup_s`` is an engine start: finding and hash-checking the model (``hash_check_s``), then
    loading it (``model_load_s``). ``queue_s`` is the wait for a free slot, ``prefill_s`` computing
    ``prefill_tokens`` prompt tokens, ``decode_s`` sampling ``decode_tokens``; ``cached_tokens`` of
    the prompt were reused from the KV cache instead of being computed, ``restored_tokens`` of them
    restored from the on-disk prefix cache.
    """

    startup_s: float = 0.0
    hash_check_s: float = 0.0
    model_load_s: float = 0.0
    queue_s: float = 0.0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    restored_tokens: int = 0
    prefill_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Timings(TimeParts):
    """Where one model call's time went, as the backend measured it (seconds; token counts).

    ``call_s`` is the call once its engine was up. Inside it: ``queue_s`` waiting for a free slot,
    ``prefill_s`` computing ``prefill_tokens`` prompt tokens, ``decode_s`` sampling ``decode_tokens``;
    ``cached_tokens`` of the prompt were reused from the KV cache instead of being computed,
    ``restored_tokens`` of them restored from the on-disk prefix cache. The rest (:attr:`other_s`)
    is the backend's own work: chat template, tokenizer, transport. ``startup_s`` is an engine start
    (finding and hash-checking the model, ``hash_check_s``, then loading it, ``model_load_s``),
    reported by the first call after each start, outside ``call_s``. A backend that measures none of
    this leaves :attr:`Completion.timings` ``None``.
    """

    __pydantic_config__ = _RECORD_CONFIG
    call_s: float = 0.0

    @property
    def other_s(self) -> float:
        """``call_s`` less the parts measured inside it (never negative)."""
        return max(0.0, self.call_s - self.queue_s - self.prefill_s - self.decode_s)


FinishReason = Literal["stop", "length", "tool_calls", "error"]
_FINISH_REASONS = frozenset(("stop", "length", "tool_calls", "error"))
_NO_USAGE = Usage()
_INT = frozenset((int,))
_FLOAT = frozenset((float,))
_TOOL_CALL = frozenset((ToolCall,))


def _ids_ok(ids: object, item: frozenset[type]) -> bool:
    return ids is None or (type(ids) is tuple and item.issuperset(map(type, ids)))


@dataclass(slots=True, kw_only=True)
class Completion:
    """One generation.

    ``parse_error`` is set when the model produced tool-call text the backend could not parse
    (broken JSON, unknown shape); the agent loop feeds it back to the model as a recoverable error.

    A plain slotted dataclass (a backend builds one per response, the runtime reads it once, never changes it)
    with one validator where it enters: built from anything but exactly the declared types (lists,
    dicts, a server's JSON values), it is validated and coerced by pydantic.
    """

    __pydantic_config__ = _RECORD_CONFIG
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: FinishReason = "stop"
    usage: Usage = _NO_USAGE
    model: str = ""
    prompt_token_ids: tuple[int, ...] | None = None
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    parse_error: str | None = None
    weight_version: str | None = None
    timings: Timings | None = None

    def __post_init__(self) -> None:
        if not (
            type(self.text) is str
            and type(self.tool_calls) is tuple
            and _TOOL_CALL.issuperset(map(type, self.tool_calls))
            and type(self.finish_reason) is str
            and self.finish_reason in _FINISH_REASONS
            and type(self.usage) is Usage
            and type(self.model) is str
            and _ids_ok(self.prompt_token_ids, _INT)
            and _ids_ok(self.token_ids, _INT)
            and _ids_ok(self.logprobs, _FLOAT)
            and (self.parse_error is None or type(self.parse_error) is str)
            and (self.weight_version is None or type(self.weight_version) is str)
            and (self.timings is None or type(self.timings) is Timings)
        ):
            validate_fields(self)


@runtime_checkable
class ModelBackend(Protocol):
    """Tokens in, tokens out. Implementations must be safe to call concurrently from many tasks."""

    @property
    def model(self) -> str:
        """The model name reported on records and spans."""
        ...

    async def complete(self, request: ModelRequest) -> Completion:
        """Generate one completion. Raise :class:`agent_swarm.swarm.errors.BackendError` subclasses on failure."""
        ...


# -- optional capabilities -----------------------------------------------------------------------
# A backend MAY also say (the protocol stays tokens in, tokens out; callers ask through the functions
# below, which answer ``None`` or an estimate for a backend that does not):
#   ``parallel_slots: int``   requests it decodes at once; more wait in its queue
#   ``context_window: int``   tokens one request's prompt and completion hold together
#   ``async count_tokens(request) -> int``   the exact prompt tokens of a request (its tokenizer)

CHARS_PER_TOKEN = 3
"""Characters per token of the conservative estimate (real tokenizers give 3.5-4.5 on English and JSON)."""


def _positive_int(value: object) -> int | None:
    return value if type(value) is int and value >= 1 else None


def parallel_slots(backend: object) -> int | None:
    """How many requests ``backend`` serves at once, if it says (``None``: unknown, no cap)."""
    return _positive_int(getattr(backend, "parallel_slots", None))


def context_window(backend: object) -> int | None:
    """The tokens one request of ``backend`` may hold (prompt and completion), if it says."""
    return _positive_int(getattr(backend, "context_window", None))


def estimate_tokens(request: ModelRequest) -> int:
    """A conservative token count of a request's prompt: its characters (contents, tool calls, tool
    specs) over :data:`CHARS_PER_TOKEN`, plus a few tokens of chat template per message."""
    chars = 0
    for m in request.messages:
        chars += len(m.content) + 16
        if isinstance(m, AssistantMessage):
            chars += sum(len(c.name) + len(repr(c.arguments)) + 16 for c in m.tool_calls)
    chars += sum(len(t.name) + len(t.description) + len(repr(t.parameters)) for t in request.tools)
    return -(-chars // CHARS_PER_TOKEN)


async def prompt_tokens(backend: object, request: ModelRequest) -> tuple[int, bool]:
    """(tokens of ``request``'s prompt, whether exact): the backend's own count where it offers
    ``count_tokens``, else :func:`estimate_tokens`. A count that fails falls back to the estimate."""
    count = getattr(backend, "count_tokens", None)
    if count is not None:
        try:
            n = await count(request)
        except Exception:  # a tokenizer that fails costs exactness, never the turn
            n = None
        if type(n) is int and n >= 0:
            return n, True
    return estimate_tokens(request), False
