"""A real misbehaving server on loopback: errors that survive the retries become the calling
sub-agent's failure status; the episode and the healthy siblings carry on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import ModelRequest
from agent_swarm.swarm.backends.openai_http import OpenAIBackend, RetryPolicy
from agent_swarm.swarm.errors import BackendTimeoutError, BackendUnavailableError
from agent_swarm.swarm.messages import UserMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus
from agent_swarm.swarm.testing import ScriptedBackend, call

OK = {
    "model": "fault",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "all good"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}


class _Handler(BaseHTTPRequestHandler):
    hits: dict[str, int]

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    def do_POST(self) -> None:
        mode = self.path.split("/")[2]  # /mode/<name>/v1/chat/completions
        self.rfile.read(int(self.headers.get("content-length", 0)))
        n = self.hits[mode] = self.hits.get(mode, 0) + 1
        if mode == "429":
            return self._send(429, b'{"error": "rate limited"}', {"retry-after": "0"})
        if mode == "500":
            return self._send(500, b'{"error": "internal"}')
        if mode == "garbage":
            return self._send(200, b"\x00\x01 not json at all")
        if mode == "slow":
            time.sleep(1.0)
        if mode == "trickle":  # headers at once, then a byte every 0.1 s: no single read times out
            return self._trickle()
        if mode == "flaky" and n <= 2:
            return self._send(503, b"warming up")
        return self._send(200, json.dumps(OK).encode())

    def _trickle(self) -> None:
        try:
            self.send_response(200)
            self.send_header("content-length", "40")
            self.end_headers()
            for _ in range(40):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
            pass


@pytest.fixture
def fault_server() -> Iterator[tuple[str, dict[str, int]]]:
    hits: dict[str, int] = {}
    handler = type("H", (_Handler,), {"hits": hits})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", hits
    finally:
        server.shutdown()
        server.server_close()


def _backend(url: str, mode: str, timeout: float = 5.0) -> OpenAIBackend:
    return OpenAIBackend(f"{url}/mode/{mode}", "fault", retry=RetryPolicy(2, 0.01, 0.05), timeout=timeout)


REQ = ModelRequest(messages=(UserMessage(content="hi"),))


async def test_flaky_server_recovers_within_the_retries(fault_server: tuple[str, dict[str, int]]) -> None:
    url, hits = fault_server
    async with _backend(url, "flaky") as b:
        c = await b.complete(REQ)
    assert c.text == "all good" and hits["flaky"] == 3


@pytest.mark.parametrize(
    ("mode", "error"),
    [("429", BackendUnavailableError), ("500", BackendUnavailableError), ("slow", BackendTimeoutError)],
)
async def test_errors_that_survive_retries_are_raised_as_backend_errors(
    fault_server: tuple[str, dict[str, int]], mode: str, error: type[Exception]
) -> None:
    url, hits = fault_server
    async with _backend(url, mode, timeout=0.3) as b:
        with pytest.raises(error):
            await b.complete(REQ)
    assert hits[mode] == 3  # one try + two retries


async def test_a_trickling_answer_is_cut_at_the_timeout(fault_server: tuple[str, dict[str, int]]) -> None:
    """httpx's timeout bounds each read; the backend's bounds the whole attempt (hangs are bounded)."""
    url, hits = fault_server
    started = time.monotonic()
    async with _backend(url, "trickle", timeout=0.4) as b:
        with pytest.raises(BackendTimeoutError, match=r"after 3 attempt"):
            await b.complete(REQ)
    # 3 × 0.4 s, not 3 × the 4 s trickle (a margin that holds at load 4)
    assert hits["trickle"] == 3 and time.monotonic() - started < 6


async def test_failing_endpoints_are_subagent_failures_not_crashes(
    fault_server: tuple[str, dict[str, int]],
) -> None:
    url, _ = fault_server
    modes = ["ok", "429", "500", "garbage", "slow", "flaky"]
    policy = ScriptedBackend(
        [
            [call("create_subagent", name=m, system_prompt="answer", model=m) for m in modes]
            + [call("assign_task", agent=m, task="say something") for m in modes],
            "summarised",
        ]
    )
    # Only the slow endpoint needs a short per-attempt timeout; the others get the default 5 s, so that a
    # busy machine cannot turn the healthy and the flaky endpoints' answers into timeouts.
    backends = {m: _backend(url, m, timeout=0.3 if m == "slow" else 5.0) for m in modes}
    record = await Orchestrator(policy, SwarmConfig(max_subagent_steps=2), subagent_backends=backends).run("go")
    for b in backends.values():
        await b.aclose()
    policy.assert_consumed()
    assert record.status is EpisodeStatus.COMPLETED and record.answer == "summarised"
    by_name = {r.name: r for r in record.stages[0].subagents}
    assert by_name["ok"].status is AgentStatus.COMPLETED and by_name["ok"].report == "all good"
    assert by_name["flaky"].status is AgentStatus.COMPLETED
    for m, kind in [
        ("429", "BackendUnavailableError"),
        ("500", "BackendUnavailableError"),
        ("garbage", "BackendError"),
        ("slow", "BackendTimeoutError"),
    ]:
        r = by_name[m]
        assert r.status is AgentStatus.FAILED, m
        assert r.error_type == kind, (m, r.error)
    # The orchestrator saw every failure as a tool result it can react to.
    seen = policy.calls[1].messages[-len(modes) :]
    assert sum("failed" in getattr(msg, "content", "") for msg in seen) == 4
