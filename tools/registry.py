"""Typed tools: a Python function (sync or async) becomes a model-callable tool.

The JSON schema, name and description come from the type hints and the docstring (Google-style
``Args:`` sections give per-argument descriptions). Arguments are validated with pydantic before the
call. Every failure — unknown tool, invalid arguments, an exception inside the tool, a timeout —
becomes a :class:`~agent_swarm.swarm.records.ToolResult` with ``is_error=True`` that the model sees and can
recover from; nothing a tool does can kill the agent or the episode.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import time
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints, overload

import anyio
import anyio.to_thread
from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_jsonable_python

from agent_swarm.swarm.backend import ToolSpec
from agent_swarm.swarm.errors import (
    ConfigError,
    ErrorType,
    ToolError,
    ToolTimeoutError,
    UnknownNameError,
    validation_problems,
)
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import ToolResult

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TOOL_TIMEOUT_S",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "Toolset",
    "execute_tool",
    "tool",
    "truncate",
]


class _Unset:
    """Marker for "argument not given" where None is a meaningful value (no timeout)."""


_UNSET = _Unset()
DEFAULT_TOOL_TIMEOUT_S = 60.0
DEFAULT_MAX_OUTPUT_CHARS = 16_000
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,63}$")


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about its caller. Declare a ``ctx: ToolContext`` parameter to get it;
    it is never part of the schema the model sees."""

    episode_id: str = ""
    agent_id: str = ""
    workspace: Path | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)

    def workspace_path(self) -> Path:
        """The episode workspace, created on first use. Raises ToolError when none is configured."""
        if self.workspace is None:
            raise ToolError("this episode has no workspace directory; configure workspace_root")
        self.workspace.mkdir(parents=True, exist_ok=True)
        return self.workspace


def _is_context(ann: Any) -> bool:
    """``ToolContext`` or an optional/union of it: injected by the runtime, never shown to the model."""
    if ann is ToolContext:
        return True
    return get_origin(ann) in (Union, types.UnionType) and ToolContext in get_args(ann)


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """Split a docstring into (description, {arg: description}) from a Google-style ``Args:``."""
    desc: list[str] = []
    args: dict[str, str] = {}
    section = "desc"
    arg_indent: int | None = None
    current: str | None = None
    for line in (inspect.getdoc(fn) or "").splitlines():
        stripped = line.strip()
        if re.match(r"^(Args|Arguments|Parameters):$", stripped):
            section, arg_indent, current = "args", None, None
            continue
        if re.match(r"^(Returns|Raises|Yields|Examples?|Notes?):$", stripped):
            section = "other"
            continue
        if section == "desc":
            desc.append(line)
        elif section == "args" and stripped:
            indent = len(line) - len(line.lstrip())
            m = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if m and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = m.group(1)
                args[current] = m.group(2)
            elif current is not None:
                args[current] = f"{args[current]} {stripped}".strip()
    return "\n".join(desc).strip(), args


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` substituted for its ``#/$defs/…`` references.

    A tool's parameters get embedded in larger schemas (the constrained-decoding grammar of an
    action, a provider's function list), where a reference to the tool schema's own top level no
    longer resolves. Recursive definitions cannot be inlined: those references stay, and so does
    ``$defs``.
    """
    defs = schema.get("$defs")
    if not isinstance(defs, dict) or not defs:
        return schema
    recursive = False

    def walk(node: Any, expanding: frozenset[str]) -> Any:
        nonlocal recursive
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                name = ref.removeprefix("#/$defs/")
                if name in defs and name not in expanding:
                    merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
                    return walk(merged, expanding | {name})
                recursive = True
                return node
            return {k: walk(v, expanding) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v, expanding) for v in node]
        return node

    out: dict[str, Any] = walk(schema, frozenset())
    if recursive:
        out["$defs"] = defs
    return out


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters with a marker saying how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n…[output truncated: {len(text) - limit} of {len(text)} characters dropped]"


def _stringify(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


class Tool:
    """A callable tool. Build with :meth:`from_function` or the :func:`tool` decorator."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | None = DEFAULT_TOOL_TIMEOUT_S,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        blocking: bool | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        if not _NAME_RE.match(self.name):
            raise ConfigError(
                f"tool name {self.name!r} is invalid: use letters, digits, '_' or '-', at most 64 characters"
            )
        doc_desc, arg_docs = _doc_parts(fn)
        self.description = description if description is not None else doc_desc
        self.timeout_s = timeout_s
        self.max_output_chars = max_output_chars
        self.is_async = inspect.iscoroutinefunction(fn)
        # Sync tools run in a worker thread unless declared non-blocking (cheap, CPU-trivial).
        self.blocking = (not self.is_async) if blocking is None else blocking
        self._ctx_param: str | None = None
        self._model: type[BaseModel] | None = None
        if parameters is not None:
            self.parameters = parameters
        else:
            self._model = self._build_model(fn, arg_docs)
            schema = self._model.model_json_schema()
            schema.pop("title", None)
            self.parameters = inline_refs(schema)
        self._fields = tuple(self._model.model_fields) if self._model is not None else ()
        self._no_params = self._model is not None and not self._fields

    def _build_model(self, fn: Callable[..., Any], arg_docs: dict[str, str]) -> type[BaseModel]:
        from pydantic import Field

        sig = inspect.signature(fn)
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        for pname, param in sig.parameters.items():
            ann = hints.get(pname, Any)
            if _is_context(ann):
                self._ctx_param = pname
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(f"tool {self.name!r}: *args/**kwargs parameters cannot be described to a model")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (ann, Field(default, description=arg_docs.get(pname)))
        return create_model(f"{self.name}_args", __config__=ConfigDict(extra="forbid"), **fields)

    @classmethod
    def from_function(cls, fn: Callable[..., Any], **kwargs: Any) -> Tool:
        return cls(fn, **kwargs)

    def replace(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_s: float | _Unset | None = _UNSET,
        max_output_chars: int | None = None,
    ) -> Tool:
        """A copy with another name, description, timeout or output limit (e.g. to tighten a
        built-in tool for one agent); the original is unchanged."""
        new = copy.copy(self)
        if name is not None:
            if not _NAME_RE.match(name):
                raise ConfigError(
                    f"tool name {name!r} is invalid: use letters, digits, '_' or '-', at most 64 characters"
                )
            new.name = name
        if description is not None:
            new.description = description
        if not isinstance(timeout_s, _Unset):
            if timeout_s is not None and timeout_s <= 0:
                raise ConfigError(f"tool {new.name!r}: timeout_s must be positive or None, got {timeout_s}")
            new.timeout_s = timeout_s
        if max_output_chars is not None:
            if max_output_chars < 1:
                raise ConfigError(f"tool {new.name!r}: max_output_chars must be at least 1, got {max_output_chars}")
            new.max_output_chars = max_output_chars
        return new

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and coerce arguments; raises ToolError with a model-readable message."""
        if self._model is None:
            return dict(arguments)
        if not arguments and self._no_params:
            return {}  # the common no-argument call skips pydantic entirely
        try:
            parsed = self._model.__pydantic_validator__.validate_python(
                arguments if type(arguments) is dict else dict(arguments)
            )
        except ValidationError as exc:
            problems = validation_problems(exc, "(arguments)")
            raise ToolError(f"invalid arguments for tool {self.name!r}: {problems}") from None
        # Exactly the fields (the model forbids extras); the instance is dropped here, so its dict is ours.
        kwargs: dict[str, Any] = parsed.__dict__
        return kwargs

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        """Validate, call (within ``timeout_s``, an anyio cancel scope) and stringify.
        Raises ToolError/ToolTimeoutError."""
        kwargs = self.validate(arguments)
        if self._ctx_param is not None:
            kwargs[self._ctx_param] = ctx
        work: Awaitable[Any]
        if self.is_async:
            work = self.fn(**kwargs)
        elif self.blocking:
            work = anyio.to_thread.run_sync(lambda: self.fn(**kwargs), abandon_on_cancel=True)
        else:
            # A non-blocking sync tool runs inline and never yields, so no deadline could interrupt
            # it: none is armed (a cancel scope with a deadline is the costliest part of a cheap call).
            out = self.fn(**kwargs)
            if not inspect.isawaitable(out):
                return truncate(_stringify(out), self.max_output_chars)
            work = out
        if self.timeout_s is None:
            return truncate(_stringify(await work), self.max_output_chars)
        with anyio.move_on_after(self.timeout_s) as scope:
            out = await work
        if scope.cancelled_caught:
            raise self._timed_out()
        return truncate(_stringify(out), self.max_output_chars)

    def _timed_out(self) -> ToolTimeoutError:
        # Only our own deadline counts as a timeout (not a TimeoutError raised inside the tool).
        return ToolTimeoutError(f"tool {self.name!r} timed out after {self.timeout_s:g}s; try a smaller input")

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = DEFAULT_TOOL_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    blocking: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float | None = DEFAULT_TOOL_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    blocking: bool | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Decorator: ``@tool`` or ``@tool(timeout_s=5)`` turns a typed function into a :class:`Tool`."""

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(
            f,
            name=name,
            description=description,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
            blocking=blocking,
        )

    return wrap(fn) if fn is not None else wrap


@dataclass(frozen=True)
class Toolset:
    """A named group of tools; agent specs grant toolsets or single tools by name."""

    name: str
    tools: tuple[Tool, ...]

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ConfigError(f"toolset {self.name!r} has duplicate tool names: {sorted(dupes)}")


class ToolRegistry:
    """All tools an episode may use, addressable by tool name or toolset name."""

    def __init__(self, items: Iterable[Tool | Toolset] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._sets: dict[str, tuple[str, ...]] = {}
        for item in items:
            self.add(item)

    def add(self, item: Tool | Toolset | Callable[..., Any]) -> None:
        if isinstance(item, Toolset):
            if item.name in self._sets or item.name in self._tools:
                raise ConfigError(f"name {item.name!r} is already registered")
            for t in item.tools:
                self._add_tool(t)
            self._sets[item.name] = tuple(t.name for t in item.tools)
        elif isinstance(item, Tool):
            self._add_tool(item)
        elif callable(item):
            self._add_tool(Tool(item))
        else:
            raise ConfigError(f"cannot register {item!r} as a tool")

    def _add_tool(self, t: Tool) -> None:
        existing = self._tools.get(t.name)
        if existing is not None and existing is not t:
            raise ConfigError(f"two different tools are named {t.name!r}; rename one")
        if t.name in self._sets:
            raise ConfigError(f"tool name {t.name!r} clashes with a toolset name")
        self._tools[t.name] = t

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    @property
    def toolsets(self) -> Mapping[str, tuple[str, ...]]:
        return dict(self._sets)

    def __contains__(self, name: object) -> bool:
        return name in self._tools or name in self._sets

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool:
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownNameError("tool", name, self._tools) from None

    def resolve(self, names: Iterable[str]) -> dict[str, Tool]:
        """Expand tool and toolset names into ``{tool name: Tool}``; unknown names raise UnknownNameError."""
        out: dict[str, Tool] = {}
        for n in names:
            if n in self._sets:
                for tn in self._sets[n]:
                    out[tn] = self._tools[tn]
            elif n in self._tools:
                out[n] = self._tools[n]
            else:
                raise UnknownNameError("tool or toolset", n, [*self._tools, *self._sets])
        return out


async def execute_tool(
    call: ToolCall,
    tools: Mapping[str, Tool],
    ctx: ToolContext,
    clock: Callable[[], float] = time.perf_counter,
) -> ToolResult:
    """Run one tool call; every failure becomes an error result the model can read."""
    started = clock()
    if call.error is not None:  # the backend could not parse this call: tell the model, run nothing
        return ToolResult(
            call=call,
            content=f"error: this tool call could not be parsed and was not run ({call.error}). "
            "Call the tool again with its arguments as one JSON object.",
            is_error=True,
            error_type=ErrorType.MODEL_OUTPUT,
            started=started,
            ended=clock(),
        )
    t = tools.get(call.name)
    if t is None:
        available = ", ".join(sorted(tools)) or "(none)"
        return ToolResult(
            call=call,
            content=f"error: unknown tool {call.name!r}; available tools: {available}",
            is_error=True,
            error_type=ErrorType.UNKNOWN_TOOL,
            started=started,
            ended=clock(),
        )
    try:
        content = await t.invoke(call.arguments, ctx)
    except Exception as exc:  # a tool that raises is the model's problem to route around, not ours
        said = str(exc) if isinstance(exc, ToolError) else f"tool {call.name!r} raised {type(exc).__name__}: {exc}"
        return ToolResult(
            call=call,
            content=f"error: {said}",
            is_error=True,
            error_type=ErrorType.of(exc),
            started=started,
            ended=clock(),
        )
    return ToolResult(call=call, content=content, started=started, ended=clock())


ToolFn = Callable[..., Any] | Callable[..., Awaitable[Any]]
