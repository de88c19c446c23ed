"""MCP servers as tools (official ``mcp`` SDK 2.x, extra ``mcp``).

Configuration uses the common ``mcpServers`` JSON shape::

    {"mcpServers": {
        "calc":  {"command": "python", "args": ["calc_server.py"], "env": {"KEY": "v"}},
        "files": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer …"}}
    }}

Each tool of server ``calc`` becomes a :class:`~agent_swarm.tools.registry.Tool` named ``calc__<tool>`` with the
server's input schema. Use :class:`MCPServers` as an async context manager around the episode or
the process::

    async with MCPServers(load_mcp_config("mcp.json")) as servers:
        orch = Orchestrator(backend, config, tools=[*my_tools, *servers.toolsets()])
        await orch.run(task)

Every server connection is owned by one long-lived task (the SDK's client must be entered and left
in the same task): calls travel to that task over memory streams, so tools can be called from any
task. A server that cannot connect is reported in :attr:`MCPServers.status` and contributes no tools.
A call that hangs past ``timeout_s`` or hits a crash becomes a tool error (``is_error``) the model can
read; after a crash the owner reconnects (``max_restarts`` times, then the server's tools answer
"unavailable"). None of it raises into the episode. Leaving the context (or cancelling it) closes
every connection.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TextIO

import anyio
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_swarm.swarm.errors import ConfigError, ToolError, ToolTimeoutError
from agent_swarm.tools.registry import DEFAULT_MAX_OUTPUT_CHARS, Tool, Toolset

if TYPE_CHECKING:
    from mcp import Client

__all__ = [
    "HttpServerConfig",
    "MCPConfig",
    "MCPServers",
    "ServerStatus",
    "StdioServerConfig",
    "load_mcp_config",
    "parse_mcp_config",
    "public_tool_name",
    "result_to_text",
]

_SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_CLOSE_GRACE_S = 10.0
_CONNECTION_CLOSED = -32000  # mcp_types.CONNECTION_CLOSED


class _ServerBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    timeout_s: float = Field(60, gt=0, description="per tool call")
    connect_timeout_s: float = Field(30, gt=0, description="connect + list tools")
    max_restarts: int = Field(2, ge=0, description="reconnects after the connection is lost")
    enabled: bool = True


class StdioServerConfig(_ServerBase):
    """A server started as a subprocess speaking MCP over stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None


class HttpServerConfig(_ServerBase):
    """A server reached over streamable HTTP."""

    type: Literal["http", "streamable-http", "streamable_http"] = "http"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        if not re.match(r"^https?://", v):
            raise ValueError(f"url {v!r} must start with http:// or https://")
        return v


class MCPConfig(BaseModel):
    """The ``{"mcpServers": {name: server}}`` document."""

    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    servers: dict[str, StdioServerConfig | HttpServerConfig] = Field(alias="mcpServers")

    @field_validator("servers", mode="before")
    @classmethod
    def _shape(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise ValueError("mcpServers must be an object mapping server names to server configs")
        out: dict[str, Any] = {}
        for name, spec in v.items():
            if not _SERVER_NAME_RE.match(str(name)):
                raise ValueError(f"server name {name!r} must be 1-40 letters, digits, '_' or '-'")
            if isinstance(spec, Mapping) and "type" not in spec:
                if "command" in spec:
                    spec = {**spec, "type": "stdio"}
                elif "url" in spec:
                    spec = {**spec, "type": "http"}
                else:
                    raise ValueError(f"server {name!r} needs either 'command' (stdio) or 'url' (HTTP)")
            if isinstance(spec, Mapping) and spec.get("type") == "sse":
                raise ValueError(f"server {name!r}: the legacy SSE transport is not supported; use streamable HTTP")
            out[str(name)] = spec
        return out


def load_mcp_config(path: str | Path) -> MCPConfig:
    """Read an ``mcpServers`` JSON file; a missing file, bad JSON or a bad entry raises ConfigError."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"MCP config {p} does not exist") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"MCP config {p} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_mcp_config(raw, source=str(p))


def parse_mcp_config(raw: Any, *, source: str = "MCP config") -> MCPConfig:
    if not isinstance(raw, Mapping) or "mcpServers" not in raw:
        raise ConfigError(f'{source}: expected an object with an "mcpServers" key')
    try:
        return MCPConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False))
        raise ConfigError(f"{source}: {problems}") from None


class ServerStatus(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    transport: Literal["stdio", "http"]
    connected: bool
    error: str | None = None
    tools: tuple[str, ...] = ()
    server_info: str | None = None
    restarts: int = 0


# --------------------------------------------------------------------------------------------------
# results


def result_to_text(result: Any) -> tuple[str, bool]:
    """Map a ``CallToolResult`` to (tool-message text, is_error)."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} content: {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[binary resource {res.uri}]")
        else:
            parts.append(f"[{kind or type(block).__name__} content]")
    structured = getattr(result, "structured_content", None)
    if structured is not None and not any(p.strip() for p in parts):
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    is_error = bool(getattr(result, "is_error", False))
    if not text:
        text = "(the tool returned an error without a message)" if is_error else "(no output)"
    return text, is_error


# --------------------------------------------------------------------------------------------------
# connections


@dataclass
class _Request:
    tool: str
    arguments: dict[str, Any]
    reply: MemoryObjectSendStream[tuple[str, bool]]


@dataclass
class _Connection:
    name: str
    config: StdioServerConfig | HttpServerConfig
    send: MemoryObjectSendStream[_Request]
    recv: MemoryObjectReceiveStream[_Request]
    tools: list[Any] = field(default_factory=list)
    error: str | None = None
    connected: bool = False
    server_info: str | None = None
    restarts: int = 0

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if isinstance(self.config, StdioServerConfig) else "http"


def _describe(exc: BaseException) -> str:
    """One line for an exception, looking inside exception groups for the real cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    msg = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {msg}" if type(exc).__name__ not in msg else msg


STDERR_TAIL_LINES = 5
"""Lines of a stdio server's stderr quoted when it fails to connect."""


def _stdio_hint(cfg: StdioServerConfig | HttpServerConfig, errlog: TextIO | None) -> str:
    """What to add to a stdio server's connect error: where its ``command`` resolved on PATH, and the
    last lines it wrote to stderr (an import error, a usage message). Empty for HTTP servers."""
    if not isinstance(cfg, StdioServerConfig):
        return ""
    path = (cfg.env or {}).get("PATH") or os.environ.get("PATH")
    found = shutil.which(cfg.command, path=path)
    where = f"resolved on PATH to {found}" if found else "not found on PATH"
    hint = f"; `command` {cfg.command!r} is {where} (give a full path, e.g. the Python that has the server's packages)"
    tail: list[str] = []
    if errlog is not None:
        with contextlib.suppress(OSError, ValueError):
            errlog.flush()
            errlog.seek(0)
            tail = [line.rstrip() for line in errlog.read().splitlines() if line.strip()][-STDERR_TAIL_LINES:]
    if tail:
        hint += "; the server's last stderr lines: " + " | ".join(tail)
    return hint


def public_tool_name(server: str, tool: str, taken: Container[str] = ()) -> str:
    """``server__tool`` made valid for OpenAI-style tool names (``^[A-Za-z0-9_-]{1,64}$``): other
    characters become ``_``; a name too long or already taken gets a short stable hash suffix."""
    base = f"{server}__{re.sub(r'[^A-Za-z0-9_-]', '_', tool)}"
    if len(base) <= 64 and base not in taken:
        return base
    digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{base[:55]}_{digest}"


def _is_disconnect(exc: BaseException) -> bool:
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
        return True
    return getattr(exc, "code", None) == _CONNECTION_CLOSED


class MCPServers:
    """Connections to the configured MCP servers and their tools. Enter and exit in one task."""

    def __init__(
        self,
        config: MCPConfig,
        *,
        max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
        server_stderr: TextIO | None = None,
    ) -> None:
        """``server_stderr``: where stdio servers' logs go (a real file; default: our stderr)."""
        self.config = config
        self.max_output_chars = max_output_chars
        self.server_stderr = server_stderr
        self._conns: dict[str, _Connection] = {}
        self._tg: TaskGroup | None = None
        self._tools: dict[str, Tool] = {}

    # lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> MCPServers:
        try:
            import mcp  # noqa: F401
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ConfigError("MCP servers need the 'mcp' extra: pip install 'agent-swarm[mcp]'") from exc
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        try:
            async with anyio.create_task_group() as starting:
                for name, cfg in self.config.servers.items():
                    if not cfg.enabled:
                        continue
                    send, recv = anyio.create_memory_object_stream[_Request](64)
                    conn = _Connection(name, cfg, send, recv)
                    self._conns[name] = conn
                    starting.start_soon(self._start, conn)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        self._build_tools()
        return self

    async def _start(self, conn: _Connection) -> None:
        assert self._tg is not None
        await self._tg.start(self._own, conn)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        for conn in self._conns.values():
            conn.send.close()  # each owner's request loop ends, then it leaves its client context
        tg, self._tg = self._tg, None
        if tg is None:
            return None
        # Owners normally leave at once; one whose server will not close is cancelled after a grace
        # period. (The group's own scope is the only one we may touch: scopes exit in LIFO order.)
        tg.cancel_scope.deadline = anyio.current_time() + _CLOSE_GRACE_S
        # The body's own exception (if any) propagates unchanged: it is not handed to the group.
        await tg.__aexit__(None, None, None)
        return None

    async def _own(self, conn: _Connection, *, task_status: TaskStatus[None]) -> None:
        """The one task that enters, uses and leaves this server's client (and reconnects it)."""
        started = False
        try:
            while True:
                lost = anyio.Event()
                shutdown = False
                with self._errlog(conn) as errlog:
                    try:
                        # The deadline covers connecting and listing only; it is lifted once connected.
                        deadline = anyio.current_time() + conn.config.connect_timeout_s
                        with anyio.CancelScope(deadline=deadline) as scope:
                            async with self._client(conn, errlog) as client:
                                listed = await client.list_tools()
                                scope.deadline = math.inf
                                if not started:  # the tool list agents see is fixed at the first connect
                                    conn.tools = list(listed.tools)
                                    info = client.server_info
                                    if info is not None:
                                        conn.server_info = f"{info.name} {info.version}".strip()
                                conn.connected, conn.error = True, None
                                if not started:
                                    started = True
                                    task_status.started()
                                shutdown = await self._serve(conn, client, lost)
                        if scope.cancelled_caught and not conn.connected:
                            conn.error = f"connect timed out after {conn.config.connect_timeout_s:g}s"
                    except Exception as exc:
                        if conn.error is None or conn.connected:
                            prefix = "connection lost: " if conn.connected else "connect failed: "
                            conn.error = prefix + _describe(exc)
                    if not conn.connected and conn.error is not None and conn.error.startswith("connect"):
                        conn.error += _stdio_hint(conn.config, errlog)
                conn.connected = False
                if shutdown or not started or conn.restarts >= conn.config.max_restarts:
                    break
                conn.restarts += 1
                await anyio.sleep(min(0.5 * conn.restarts, 5))
        finally:
            conn.connected = False
            # Calls queued while we were reconnecting get a closed reply stream (an immediate error)
            # instead of waiting for their timeout.
            with contextlib.suppress(anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                while True:
                    conn.recv.receive_nowait().reply.close()
            conn.recv.close()
            if not started:
                task_status.started()

    @contextlib.contextmanager
    def _errlog(self, conn: _Connection) -> Iterator[TextIO | None]:
        """A stdio server's stderr for one connection: a temporary file (so a failed connect can quote
        its last lines), copied to ``server_stderr`` (default: our stderr) when the connection ends."""
        if not isinstance(conn.config, StdioServerConfig):
            yield None
            return
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as log:
            try:
                yield log
            finally:
                with contextlib.suppress(OSError, ValueError):
                    log.seek(0)
                    text = log.read()
                    if text:
                        sink = self.server_stderr or sys.stderr
                        sink.write(text)
                        sink.flush()

    def _client(self, conn: _Connection, errlog: TextIO | None = None) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        cfg = conn.config
        if isinstance(cfg, StdioServerConfig):
            params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=cfg.env, cwd=cfg.cwd)
            return Client(stdio_client(params, errlog=errlog or self.server_stderr or sys.stderr))
        return Client(_HttpTransport(cfg.url, cfg.headers))

    async def _serve(self, conn: _Connection, client: Client, lost: anyio.Event) -> bool:
        """Serve calls until shutdown (True) or until the connection is lost (False)."""

        async def watch() -> None:
            await lost.wait()
            calls.cancel_scope.cancel()  # in-flight calls end as errors; queued ones wait

        async with anyio.create_task_group() as calls:
            calls.start_soon(watch)
            async for req in conn.recv:
                calls.start_soon(self._handle, conn, client, req, lost)
            calls.cancel_scope.cancel()  # shutting down: in-flight calls end as errors
        return not lost.is_set()

    async def _handle(self, conn: _Connection, client: Client, req: _Request, lost: anyio.Event) -> None:
        with req.reply:
            try:
                result = await client.call_tool(req.tool, req.arguments)
                reply = result_to_text(result)
            except Exception as exc:
                reply = (f"MCP server {conn.name!r} failed on {req.tool!r}: {_describe(exc)}", True)
                if _is_disconnect(exc) and not lost.is_set():
                    # The server died: the owner reconnects (up to max_restarts) or gives up.
                    conn.error = f"connection lost during {req.tool!r}: {_describe(exc)}"
                    lost.set()
            with contextlib.suppress(anyio.BrokenResourceError, anyio.WouldBlock):
                req.reply.send_nowait(reply)  # suppressed: the caller gave up (timeout)

    # tools -------------------------------------------------------------------------------------

    def _build_tools(self) -> None:
        for conn in self._conns.values():
            for t in conn.tools:
                public = public_tool_name(conn.name, t.name, taken=self._tools)
                self._tools[public] = self._make_tool(conn, t, public)

    def _make_tool(self, conn: _Connection, t: Any, public: str) -> Tool:
        schema = dict(t.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        timeout = conn.config.timeout_s

        async def call(**arguments: Any) -> str:
            send, recv = anyio.create_memory_object_stream[tuple[str, bool]](1)
            with recv:
                try:
                    conn.send.send_nowait(_Request(t.name, arguments, send))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.WouldBlock):
                    send.close()
                    why = conn.error or "it is not connected"
                    raise ToolError(f"MCP server {conn.name!r} is unavailable ({why}); use other tools") from None
                try:
                    with anyio.fail_after(timeout):
                        text, is_error = await recv.receive()
                except TimeoutError:
                    raise ToolTimeoutError(
                        f"MCP tool {public!r} did not answer within {timeout:g}s; the server may be stuck"
                    ) from None
                except anyio.EndOfStream:
                    why = conn.error or "the connection closed"
                    raise ToolError(f"MCP server {conn.name!r} went away during the call ({why})") from None
            if is_error:
                raise ToolError(text)
            return text

        # The per-call timeout is enforced above (the owner task keeps running); no second timer.
        return Tool(
            call,
            name=public,
            description=t.description or f"{t.name} (MCP server {conn.name})",
            parameters=schema,
            timeout_s=None,
            max_output_chars=self.max_output_chars,
        )

    @property
    def tools(self) -> list[Tool]:
        """Every exposed tool, named ``server__tool``."""
        return list(self._tools.values())

    def toolsets(self) -> list[Toolset]:
        """One toolset per connected server, named after the server (grant ``"calc"`` to an agent)."""
        out = []
        for name in self._conns:
            members = tuple(t for n, t in self._tools.items() if n.startswith(f"{name}__"))
            if members:
                out.append(Toolset(name, members))
        return out

    @property
    def status(self) -> list[ServerStatus]:
        return [
            ServerStatus(
                name=c.name,
                transport=c.transport,
                connected=c.connected,
                error=c.error,
                tools=tuple(t.name for t in c.tools),
                server_info=c.server_info,
                restarts=c.restarts,
            )
            for c in self._conns.values()
        ]

    def tool_descriptions(self, server: str) -> list[tuple[str, str]]:
        conn = self._conns[server]
        return [(t.name, t.description or "") for t in conn.tools]


class _HttpTransport:
    """Streamable HTTP with custom headers: an httpx2 client owned by the same task as the session."""

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        self.url = url
        self.headers = dict(headers)
        self._stack: Any = None

    async def __aenter__(self) -> Any:
        from contextlib import AsyncExitStack

        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        self._stack = AsyncExitStack()
        await self._stack.__aenter__()
        try:
            http = await self._stack.enter_async_context(
                httpx2.AsyncClient(headers=self.headers, timeout=httpx2.Timeout(30, read=300))
            )
            return await self._stack.enter_async_context(streamable_http_client(self.url, http_client=http))
        except BaseException:
            await self._stack.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._stack.__aexit__(*exc)  # type: ignore[no-any-return]
