"""Fixtures of the CLI tests.

``openai_script``: a scripted OpenAI-compatible server that ``swarm run -b openai --base-url URL``
talks to over real HTTP, and a policy function of the request body decides each reply (text or
tool calls).

The policy sees the parsed chat-completions body and returns ``(text, [(tool, arguments), ...])``;
the server replies in the OpenAI wire format with native ``tool_calls``. ``requests`` keeps every
body, so a test can check what the model was shown (system prompt, tools).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

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
