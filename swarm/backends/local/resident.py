"""A resident engine: one ``swarm serve`` process keeps a model loaded for the runs that follow.

The server (:class:`ResidentServer`, driven by :func:`serve_engine`) holds an exclusive ``flock`` on
``server.lock`` for as long as it lives and publishes what it serves in ``engine.json`` beside it
(:class:`ResidentState`: the model file's identity and sha256, the engine's settings as asked and as
resolved, its loopback URL, pid and idle timeout), under :func:`resident_dir`.

A client (a :class:`~agent_swarm.swarm.backends.local.engine.LocalEngine` given ``resident=``) uses it
only when everything matches (:func:`attach`): the server is alive (its lock is held), the model file
is the same file as when it loaded (path, size, mtime, inode) with the same sha256, the engine
settings were asked for alike and the engine version is the same. It then holds an exclusive
``flock`` on ``client.lock`` while attached, so one client at a time uses the engine; a second
concurrent client finds the lock taken and starts its own engine, as it would without a server.

The server counts idle time while no client holds ``client.lock`` and exits after ``idle_s`` of it,
on SIGTERM (``swarm serve --stop``), or as soon as its model file changes (it never serves a stale
model). On the way out it takes ``client.lock`` first, so no client attaches to an engine that is
stopping, and removes ``engine.json``. A state file whose server is gone (its lock is free) is stale:
the next client or ``swarm serve --status`` removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from agent_swarm.swarm.backends.local.catalogue import cache_dir
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "CLIENT_LOCK",
    "SERVER_LOCK",
    "STATE_FILE",
    "Attachment",
    "EngineRequest",
    "FileIdentity",
    "ResidentServer",
    "ResidentState",
    "Servable",
    "attach",
    "client_attached",
    "engine_version",
    "read_state",
    "resident_dir",
    "serve_engine",
    "stop_resident",
]

STATE_FILE = "engine.json"
SERVER_LOCK = "server.lock"
CLIENT_LOCK = "client.lock"

ExitReason = Literal["idle", "stopped", "model changed"]


def resident_dir() -> Path:
    """Where the resident engine's state and locks live: ``cache_dir()/serve``."""
    return cache_dir() / "serve"


def engine_version() -> str:
    """The installed llama.cpp engine's version (``""`` when it is not installed)."""
    try:
        return importlib.metadata.version("xllamacpp")
    except importlib.metadata.PackageNotFoundError:
        return ""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileIdentity(_Frozen):
    """Which file a path names now: resolved path, size, mtime and inode (a rewrite, copy or touch changes it)."""

    path: str
    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileIdentity:
        st = path.stat()
        return cls(path=str(path.resolve()), size=st.st_size, mtime_ns=st.st_mtime_ns, inode=st.st_ino)


class EngineRequest(_Frozen):
    """The engine settings as asked (``None``: sized at start), compared between a client and the server."""

    slots: int
    fit_slots: bool
    ctx: int | None
    threads: int | None


class ResidentState(_Frozen):
    """What a resident engine serves (``engine.json``)."""

    format: Literal[1] = 1
    model: str
    file: FileIdentity
    sha256: str
    request: EngineRequest
    slots: int
    ctx_per_slot: int
    pool: int = 0
    """Tokens of the KV cache its slots share (0: each its own); the one client counts them."""
    threads: int
    context_note: str
    engine_version: str
    base_url: str
    pid: int
    idle_s: float
    started: float
    """Unix time the engine was ready."""

    def mismatch(self, file: FileIdentity, sha256: str, request: EngineRequest, version: str) -> str | None:
        """Why a client asking for this model file, settings and engine version may not use this
        engine, or ``None`` when it may."""
        if file != self.file:
            return f"it serves {self.file.path} as it was when loaded, not {file.path} as it is now"
        if sha256 != self.sha256:
            return f"its model's sha256 is {self.sha256[:12]}…, this run's {sha256[:12]}…"
        if request != self.request:
            return f"it was started with {_settings(self.request)}, this run asks for {_settings(request)}"
        if version != self.engine_version:
            return f"it runs xllamacpp {self.engine_version}, this run {version}"
        return None


def _settings(r: EngineRequest) -> str:
    ctx = "auto" if r.ctx is None else str(r.ctx)
    return f"slots={r.slots}{' (fit)' if r.fit_slots else ''} ctx={ctx} threads={r.threads or 'auto'}"


def read_state(directory: Path | None = None) -> ResidentState | None:
    """The live resident engine's state, or ``None``; a state file whose server is gone is removed."""
    d = directory or resident_dir()
    state = _load(d)
    if state is None:
        return None
    fd = _try_lock(d / SERVER_LOCK)
    if fd is None:
        return state
    try:  # nobody holds the server lock: the server is gone (holding it, no new server can publish)
        if _load(d) == state:
            (d / STATE_FILE).unlink(missing_ok=True)
    finally:
        os.close(fd)
    return None


def client_attached(directory: Path | None = None) -> bool:
    """Whether a client holds the resident engine now."""
    fd = _try_lock((directory or resident_dir()) / CLIENT_LOCK)
    if fd is None:
        return True
    os.close(fd)
    return False


def _load(directory: Path) -> ResidentState | None:
    try:
        return ResidentState.model_validate_json((directory / STATE_FILE).read_bytes())
    except (OSError, ValueError, ValidationError):
        return None


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive ``flock`` on ``path`` (created if missing), or ``None`` if it is held."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


class Attachment:
    """A client's hold on a resident engine (the client lock), until :meth:`close` or garbage collection."""

    def __init__(self, state: ResidentState, directory: Path, fd: int) -> None:
        self.state = state
        self.directory = directory
        self._fd: int | None = fd
        self._finalizer = weakref.finalize(self, _close_fd, fd)

    @property
    def listening_address(self) -> str:
        """The engine's URL (what an in-process server is asked for)."""
        return self.state.base_url

    def alive(self) -> bool:
        """Whether the server still runs and still publishes this state."""
        return read_state(self.directory) == self.state

    def close(self) -> None:
        """Let the server count idle time again (and another client attach)."""
        self._finalizer()


def attach(
    directory: Path, *, file: FileIdentity, sha256: str, request: EngineRequest, wait_s: float = 1.0
) -> tuple[Attachment | None, str]:
    """Hold the resident engine in ``directory`` if it serves exactly this model file and settings.

    Returns ``(attachment, "")``, or ``(None, why)``: ``why`` is ``""`` when no resident engine runs,
    else the reason this one was not used (another model or settings, or another client holds it).
    The client lock is retried for ``wait_s`` (the server takes it for an instant every poll)."""
    state = read_state(directory)
    if state is None:
        return None, ""
    why = state.mismatch(file, sha256, request, engine_version())
    if why is not None:
        return None, f"the resident engine (pid {state.pid}) was not used: {why}"
    deadline = time.monotonic() + wait_s
    while (fd := _try_lock(directory / CLIENT_LOCK)) is None:
        if time.monotonic() >= deadline:
            return None, f"the resident engine (pid {state.pid}) was not used: another run is attached to it"
        time.sleep(0.02)
    if read_state(directory) != state:  # it stopped (or restarted) while we waited
        os.close(fd)
        return None, ""
    return Attachment(state, directory, fd), ""


class ResidentServer:
    """The serving side of a resident engine: the server lock, the published state and the idle timer."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._server_fd: int | None = fd
        self._client_fd: int | None = None
        self.state: ResidentState | None = None

    @classmethod
    def claim(cls, directory: Path | None = None) -> ResidentServer:
        """Become the one resident engine of ``directory``; one already running raises :class:`ConfigError`."""
        d = directory or resident_dir()
        fd = _try_lock(d / SERVER_LOCK)
        if fd is None:
            state = _load(d)
            who = f" (pid {state.pid}, {state.model})" if state is not None else ""
            raise ConfigError(f"a resident engine is already running{who}; stop it with `swarm serve --stop`")
        (d / STATE_FILE).unlink(missing_ok=True)  # a dead server's
        return cls(d, fd)

    def publish(self, state: ResidentState) -> None:
        """Write ``engine.json`` atomically: clients may attach from now on."""
        target = self.directory / STATE_FILE
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(state.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(target)
        self.state = state

    def wait(
        self, idle_s: float, *, poll_s: float = 0.5, stop: threading.Event | None = None, model: Path | None = None
    ) -> ExitReason:
        """Block until ``idle_s`` seconds pass with no client attached, ``stop`` is set, or the file
        ``model`` is no longer the one published; returns which. On ``idle`` the client lock stays held."""
        stop = stop or threading.Event()
        idle_since = time.monotonic()
        while not stop.wait(poll_s):
            if model is not None and self.state is not None and not _same_file(model, self.state.file):
                return "model changed"
            fd = _try_lock(self.directory / CLIENT_LOCK)
            if fd is None:  # a client is attached
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since >= idle_s:
                self._client_fd = fd
                return "idle"
            else:
                os.close(fd)
        return "stopped"

    def withdraw(self) -> None:
        """Stop taking clients: hold the client lock if free and remove ``engine.json``."""
        if self._client_fd is None:
            self._client_fd = _try_lock(self.directory / CLIENT_LOCK)
        if _load(self.directory) == self.state:
            (self.directory / STATE_FILE).unlink(missing_ok=True)

    def release(self) -> None:
        """Let go of both locks (after the engine stopped)."""
        for fd in (self._client_fd, self._server_fd):
            if fd is not None:
                _close_fd(fd)
        self._client_fd = self._server_fd = None


def _same_file(path: Path, identity: FileIdentity) -> bool:
    try:
        return FileIdentity.of(path) == identity
    except OSError:
        return False


class Servable(Protocol):
    """What :func:`serve_engine` needs of an engine (:class:`~agent_swarm.swarm.backends.local.LocalEngine`)."""

    name: str
    path: Path | None
    slots: int
    ctx_per_slot: int
    pool: int
    context_note: str
    request: EngineRequest
    resident: Path | None
    lora_adapters: tuple[Path, ...]

    @property
    def threads(self) -> int: ...
    @property
    def base_url(self) -> str: ...
    def start(self) -> Any: ...
    def warm_up(self) -> None: ...
    def close(self) -> None: ...
    def model_sha256(self) -> str: ...


def serve_engine(
    engine: Servable,
    idle_s: float,
    *,
    directory: Path | None = None,
    stop: threading.Event | None = None,
    ready: Callable[[ResidentState], None] | None = None,
    poll_s: float = 0.5,
) -> ExitReason:
    """Start ``engine`` as the resident engine and serve until idle, stopped or its model file changes.

    Blocks; the engine is closed and ``engine.json`` removed on the way out, whatever the reason. An
    engine with LoRA adapters is refused (runs that apply one start their own engine)."""
    if engine.lora_adapters:
        raise ConfigError("a resident engine serves the base model; runs with an orchestrator adapter start their own")
    server = ResidentServer.claim(directory)
    engine.resident = None  # the resident engine itself never attaches to another
    try:
        engine.start()
        engine.warm_up()  # what the first request of a new server costs, paid before a client waits for it
        assert engine.path is not None
        state = ResidentState(
            model=engine.name,
            file=FileIdentity.of(engine.path),
            sha256=engine.model_sha256(),
            request=engine.request,
            slots=engine.slots,
            ctx_per_slot=engine.ctx_per_slot,
            pool=engine.pool,
            threads=engine.threads,
            context_note=engine.context_note,
            engine_version=engine_version(),
            base_url=engine.base_url,
            pid=os.getpid(),
            idle_s=idle_s,
            started=time.time(),
        )
        server.publish(state)
        if ready is not None:
            ready(state)
        return server.wait(idle_s, poll_s=poll_s, stop=stop, model=engine.path)
    finally:
        server.withdraw()
        engine.close()
        server.release()


def stop_resident(directory: Path | None = None, *, timeout: float = 30.0) -> ResidentState | None:
    """Send the live resident engine SIGTERM and wait until it has closed its engine (its server lock is
    free); its state, or ``None`` if none ran."""
    d = directory or resident_dir()
    state = read_state(d)
    if state is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while (fd := _try_lock(d / SERVER_LOCK)) is None:  # released once the engine is closed
        if time.monotonic() >= deadline:
            raise ConfigError(f"the resident engine (pid {state.pid}) did not stop within {timeout:.0f} s; kill it")
        time.sleep(0.1)
    os.close(fd)
    return state
