"""Guards every test shares, and fixtures of the CLI tests.

Hermetic by default: a test sees an empty model cache (``SWARM_CACHE_DIR`` points at a temporary
directory), so a model the developer once assembled into ``~/.cache/swarm`` can neither make a skip
guard pass nor change which model is the default. A test may not load a real model nor call a server
off this machine unless it is marked ``integration`` (or ``vllm``/``gpu``): those are the tests that
use the installed local models, and they see the user's cache as the CLI would. Everything else
scripts its model (:mod:`agent_swarm.swarm.testing`, or a scripted OpenAI-compatible server on loopback).

``openai_script``: a scripted OpenAI-compatible server that ``swarm run -b openai --base-url URL``
talks to over real HTTP, and a policy function of the request body decides each reply (text or
tool calls).

The policy sees the parsed chat-completions body and returns ``(text, [(tool, arguments), ...])``;
the server replies in the OpenAI wire format with native ``tool_calls``. ``requests`` keeps every
body, so a test can check what the model was shown (system prompt, tools).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import itertools
import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from agent_swarm.swarm.backends.local import LocalEngine

REAL_BACKEND_MARKERS = ("integration", "vllm", "gpu")
"""Markers that allow a test to load a real model or reach a real server (and see the user's model cache)."""


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


_now: dict[str, Any] = {"test": "", "real": True}
"""The running test and whether its markers allow real backends (set before its fixtures are)."""


def pytest_runtest_setup(item: pytest.Item) -> None:
    # Runs before the item's fixtures are set up, so a session fixture that starts a model while an
    # unmarked test asked for it is caught too.
    _now["test"] = item.nodeid
    _now["real"] = any(item.get_closest_marker(m) for m in REAL_BACKEND_MARKERS)


def _forbidden(what: str) -> None:
    pytest.fail(
        f"{_now['test']} {what} but is not marked {' / '.join(REAL_BACKEND_MARKERS)}: script the model "
        "(agent_swarm.swarm.testing, a scripted server on 127.0.0.1 or an httpx.MockTransport) or mark the test",
        pytrace=False,
    )


@pytest.fixture(scope="session", autouse=True)
def _real_backend_guard() -> Iterator[None]:
    """Fail any unmarked test that loads a real model or calls a server off this machine."""
    mp = pytest.MonkeyPatch()
    real_start = LocalEngine.start
    real_send = httpx.AsyncHTTPTransport.handle_async_request

    def start(self: LocalEngine) -> LocalEngine:
        if not _now["real"]:
            _forbidden(f"loads the real model {self.requested!r} (LocalEngine.start)")
        return real_start(self)

    async def send(self: httpx.AsyncHTTPTransport, req: httpx.Request) -> httpx.Response:
        if not _now["real"] and not _loopback(req.url.host):
            _forbidden(f"calls {req.url.host} over the network")
        return await real_send(self, req)

    mp.setattr(LocalEngine, "start", start)
    mp.setattr(httpx.AsyncHTTPTransport, "handle_async_request", send)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def hermetic_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The empty model cache every unmarked test sees as ``SWARM_CACHE_DIR``."""
    return tmp_path_factory.mktemp("swarm-cache")


@pytest.fixture(autouse=True)
def _hermetic_cache(monkeypatch: pytest.MonkeyPatch, hermetic_cache_dir: Path) -> None:
    """Unmarked tests never see the user's model cache (integration tests do, as the CLI would)."""
    if not _now["real"]:
        monkeypatch.setenv("SWARM_CACHE_DIR", str(hermetic_cache_dir))


@pytest.fixture(autouse=True)
def _hermetic_user_dirs(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads or writes the user's records or config (``swarm run``'s defaults live there)."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("SWARM_RECORDS_DIR", str(home / "records"))
    monkeypatch.setenv("SWARM_CONFIG_DIR", str(home / "config"))


@pytest.fixture(autouse=True)
def _no_background_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test's ``swarm run`` leaves a model loaded in a background engine (``keep_alive``) unless it
    sets ``SWARM_LOCAL_KEEP_ALIVE`` itself: an engine left behind would serve later tests' runs."""
    monkeypatch.setenv("SWARM_LOCAL_KEEP_ALIVE", "0")


Reply = tuple[str, list[tuple[str, dict[str, Any]]]]
Policy = Callable[[dict[str, Any]], Reply]


@dataclass
class ScriptServer:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


def system_text(body: dict[str, Any]) -> str:
    return next((m.get("content") or "" for m in body["messages"] if m["role"] == "system"), "")


def is_orchestrator(body: dict[str, Any]) -> bool:
    return any(t["function"]["name"] == "assign_task" for t in body.get("tools") or [])


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


@contextmanager
def script_server(policy: Policy) -> Iterator[ScriptServer]:
    ids = itertools.count()
    lock = threading.Lock()
    state = ScriptServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            with lock:
                state.requests.append(body)
            text, calls = policy(body)
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                message["tool_calls"] = [
                    {"id": f"call_{next(ids)}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                    for n, a in calls
                ]
            out = json.dumps(
                {
                    "model": body.get("model", "m"),
                    "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 7},
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{srv.server_address[1]}"
    try:
        yield state
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def openai_script() -> Callable[[Policy], Any]:
    """``with openai_script(policy) as srv: ... srv.url ...``"""
    return script_server


@pytest.fixture(scope="session")
def repo_script() -> Callable[[str], ModuleType]:
    """Load a script of the repository that is not a package (``experiments/rescore.py``) as a module,
    registered in ``sys.modules`` under its stem (dataclasses look their module up while built)."""

    def load(path: str) -> ModuleType:
        where = Path(__file__).resolve().parents[1] / path
        spec = importlib.util.spec_from_file_location(where.stem, where)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[where.stem] = module
        spec.loader.exec_module(module)
        return module

    return load
