"""Chat messages and tool calls: tagged, with one validating adapter for the message union.

All are plain slotted dataclasses, built several per sub-agent step from values that are already
validated. System and user messages are frozen (one system prompt is shared by every sub-agent of a
type); the assistant and tool messages and tool calls built at every step are not (a frozen
dataclass's ``__init__`` sets each field through ``object.__setattr__``, the costly part).
A :class:`ToolCall` is what a backend parses out of a model's output, so it validates itself when
built from anything but the declared types; messages are validated where they enter as data
(:data:`MessageAdapter`, and every pydantic model holding them)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter

__all__ = [
    "AssistantMessage",
    "Message",
    "MessageAdapter",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "to_openai_messages",
]


_CONFIG = ConfigDict(extra="forbid")
_STR = frozenset((str,))


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        adapter = _ADAPTERS[cls] = TypeAdapter(cls)
    return adapter


def validate_fields(obj: Any) -> None:
    """Validate a dataclass's fields with pydantic and keep the validated values.

    The ``__post_init__`` of a type built both by the runtime (from values that are already of the
    declared types) and by outside code (dicts, lists, JSON-decoded values, a model's output) calls
    this when a cheap exact-type check fails: the one validator where data enters.
    """
    cls = type(obj)
    names = [f.name for f in fields(cls)]
    checked = _adapter(cls).validate_python({n: getattr(obj, n) for n in names})
    for n in names:
        object.__setattr__(obj, n, getattr(checked, n))  # works for frozen dataclasses too


@dataclass(slots=True, kw_only=True)
class ToolCall:
    """One tool call emitted by a model: ``arguments`` is the parsed JSON object.

    ``error`` is set on a call the backend could not parse (its arguments are not a JSON object, it
    has no name) while other calls of the same turn parsed: the call stays in the turn (and in the
    record, with what the model wrote quoted in ``error``) and the runtime answers it with that
    error instead of running it, so the model is told and the transcript keeps every call it made.

    Backends build calls from what a model wrote, so a call is validated when it is built (values
    not of the declared types raise ``pydantic.ValidationError``). The call keeps the ``arguments``
    dict it is given.

    ``raw_arguments`` is the arguments text exactly as the model wrote it when it did not parse: the
    call goes back to the model with that text, not with ``{}``, so the next prompt extends what the
    model produced (its token ids do not drift) and the model sees its own mistake. Left out of
    records when unset.
    """

    __pydantic_config__ = _CONFIG
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    raw_arguments: Annotated[str | None, Field(exclude_if=lambda v: v is None)] = None

    def __post_init__(self) -> None:
        if not (
            type(self.id) is str
            and type(self.name) is str
            and type(self.arguments) is dict
            and (self.error is None or type(self.error) is str)
            and (self.raw_arguments is None or type(self.raw_arguments) is str)
            and _STR.issuperset(map(type, self.arguments))
        ):
            validate_fields(self)

    def to_openai(self) -> dict[str, Any]:
        raw = self.raw_arguments
        args = raw if raw is not None else json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


# The four message kinds are plain slotted dataclasses (as pydantic-ai's messages are): the runtime
# builds several per sub-agent step from values that are already validated, and a message is held in
# every transcript. The shared ones (system prompts, task texts) are frozen; the per-step ones are
# not, and the runtime never changes a message once built. They are validated where data enters:
# ``MessageAdapter`` (and every pydantic model holding messages, e.g. a request or a record read back
# from JSON) checks dicts and JSON against these field types, and records are checked again when written out
# (:func:`agent_swarm.swarm.records.dump_record`).
@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessage:
    __pydantic_config__ = _CONFIG
    role: Literal["system"] = "system"
    content: str

    def to_openai(self) -> dict[str, Any]:
        return {"role": "system", "content": self.content}


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    __pydantic_config__ = _CONFIG
    role: Literal["user"] = "user"
    content: str

    def to_openai(self) -> dict[str, Any]:
        return {"role": "user", "content": self.content}


@dataclass(slots=True, kw_only=True)
class AssistantMessage:
    __pydantic_config__ = _CONFIG
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return out


@dataclass(slots=True, kw_only=True)
class ToolMessage:
    """The result of one tool call, as the model will see it. ``is_error`` marks a recoverable failure."""

    __pydantic_config__ = _CONFIG
    role: Literal["tool"] = "tool"
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False

    def to_openai(self) -> dict[str, Any]:
        return {"role": "tool", "tool_call_id": self.tool_call_id, "name": self.name, "content": self.content}


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]
MessageAdapter: TypeAdapter[Message] = TypeAdapter(Message)


def to_openai_messages(messages: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    """Render messages in the OpenAI chat-completions wire format."""
    return [m.to_openai() for m in messages]
