"""Chat messages and tool calls: frozen, tagged pydantic models with one adapter for the union."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

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


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool call emitted by a model: ``arguments`` is the parsed JSON object.

    ``error`` is set on a call the backend could not parse (its arguments are not a JSON object, it
    has no name) while other calls of the same turn parsed: the call stays in the turn (and in the
    record, with what the model wrote quoted in ``error``) and the runtime answers it with that
    error instead of running it, so the model is told and the transcript keeps every call it made.

    ``raw_arguments`` is the arguments text exactly as the model wrote it when it did not parse: the
    call goes back to the model with that text, not with ``{}``, so the next prompt extends what the
    model produced (its token ids do not drift) and the model sees its own mistake. Left out of
    records when unset.
    """

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    raw_arguments: str | None = Field(default=None, exclude_if=lambda v: v is None)

    def to_openai(self) -> dict[str, Any]:
        raw = self.raw_arguments
        args = raw if raw is not None else json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


class SystemMessage(_Frozen):
    role: Literal["system"] = "system"
    content: str

    def to_openai(self) -> dict[str, Any]:
        return {"role": "system", "content": self.content}


class UserMessage(_Frozen):
    role: Literal["user"] = "user"
    content: str

    def to_openai(self) -> dict[str, Any]:
        return {"role": "user", "content": self.content}


class AssistantMessage(_Frozen):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()

    def to_openai(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return out


class ToolMessage(_Frozen):
    """The result of one tool call, as the model will see it. ``is_error`` marks a recoverable failure."""

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
