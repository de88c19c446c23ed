"""Rate limits and refusals against a real server on loopback: the launch ramp, an endpoint-wide
suspension on 429 that is announced (never silent), and a 401/403/quota answer that closes the
endpoint so a swarm fails fast instead of idling (and `swarm rollout` runs those episodes again)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.orchestrator.backend_factory import build_backend
from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.live import EventLines, LiveState
from agent_swarm.orchestrator.rollout.episodes import RolloutFailure, infrastructure_failure
from agent_swarm.swarm.backend import ModelRequest
from agent_swarm.swarm.backends.openai_http import LaunchRamp, OpenAIBackend, RetryPolicy
from agent_swarm.swarm.errors import BackendRefusedError, BackendUnavailableError, ConfigError, ErrorType
from agent_swarm.swarm.events import EndpointRefused, EndpointWaiting, Event, observing
from agent_swarm.swarm.messages import UserMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeStatus
from agent_swarm.swarm.rl.export import read_jsonl
from agent_swarm.swarm.testing import ScriptedBackend, call

OK = {
    "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
}
REQ = ModelRequest(messages=(UserMessage(content="hi"),))
FAST = RetryPolicy(max_retries=3, base_delay=0.01, max_delay=0.05)


@dataclass
class Script:
    """What the server answers: the first ``burst`` requests get ``code`` (with ``retry_after``),
    the rest 200 (or ``code`` forever when ``burst`` is None)."""

    code: int = 200
    burst: int | None = 0
    retry_after: str | None = None
    body: str = '{"error": {"message": "slow down", "type": "rate_limit"}}'
    seen: list[tuple[float, int]] = field(default_factory=list)  # (monotonic time, status answered)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Handler(BaseHTTPRequestHandler):
    script: Script

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        sc = self.script
        with sc.lock:
            n = len(sc.seen)
            fail = sc.code != 200 and (sc.burst is None or n < sc.burst)
            code = sc.code if fail else 200
            sc.seen.append((time.monotonic(), code))
        body = (sc.body if fail else json.dumps(OK)).encode()
        self.send_response(code)
        if fail and sc.retry_after is not None:
            self.send_header("retry-after", sc.retry_after)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Handler,), {"script": script}))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", script
    finally:
        srv.shutdown()
        srv.server_close()


def _backend(url: str, **kw: object) -> OpenAIBackend:
    kw.setdefault("retry", FAST)
    return OpenAIBackend(url, "m", flavour="openai", **kw)  # type: ignore[arg-type]


# -- 429: the whole endpoint waits, and says so ---------------------------------------------------------


async def test_a_429_suspends_every_request_to_the_endpoint_for_its_retry_after(server: tuple[str, Script]) -> None:
    url, script = server
    script.code, script.burst, script.retry_after = 429, 1, "0.6"
    events: list[Event] = []
    b = _backend(url, max_concurrency=8)
    t0 = time.monotonic()

    async def ask() -> None:
        assert (await b.complete(REQ)).text == "4"

    suspended = anyio.Event()

    def watch(e: Event) -> None:
        events.append(e)
        if isinstance(e, EndpointWaiting):
            suspended.set()

    with observing([watch]):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            await suspended.wait()  # the 429 is back: the others must wait for the endpoint, not fire
            for _ in range(4):
                tg.start_soon(ask)
    await b.aclose()
    (first_429, code), *rest = script.seen
    assert code == 429 and len(rest) == 5 and all(c == 200 for _, c in rest)
    # Nothing was sent while the endpoint was suspended: the other four waited for the Retry-After
    # (0.6 s, above the policy's 0.05 s max_delay: a server's Retry-After is honoured as sent).
    assert min(t for t, _ in rest) - first_429 >= 0.55
    assert time.monotonic() - t0 < 3
    waits = [e for e in events if isinstance(e, EndpointWaiting)]
    assert len(waits) == 1  # announced once per suspension and observer set, not once per request
    assert waits[0].message == "waiting for rate limit, 1 s" and 0.4 < waits[0].wait_s <= 0.6
    assert "HTTP 429" in waits[0].reason and waits[0].endpoint == url


async def test_gate_status_reads_as_the_wait_left(server: tuple[str, Script]) -> None:
    url, script = server
    script.code, script.burst, script.retry_after = 429, 1, "12"
    b = _backend(url)
    async with anyio.create_task_group() as tg:
        tg.start_soon(b.complete, REQ)
        await anyio.sleep(0.3)
        assert b.gate().status() == "waiting for rate limit, 12 s"
        tg.cancel_scope.cancel()
    await b.aclose()


async def test_an_endpoint_that_keeps_answering_429_fails_the_call_after_the_retries(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.code, script.burst, script.retry_after = 429, None, "0"
    b = _backend(url)
    with pytest.raises(BackendUnavailableError, match=r"after 4 attempt.*HTTP 429.*kept rate-limiting"):
        await b.complete(REQ)
    await b.aclose()
    assert len(script.seen) == 4


# -- the launch ramp ------------------------------------------------------------------------------------


async def test_the_launch_ramp_starts_a_burst_then_one_request_per_interval(server: tuple[str, Script]) -> None:
    url, script = server
    b = _backend(url, ramp=LaunchRamp(burst=2, per_second=5.0), max_concurrency=8)
    await b.complete(REQ)  # the client's first request (its setup) out of the timing
    await anyio.sleep(0.5)  # a quiet endpoint earns its burst back
    del script.seen[:]
    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(b.complete, REQ)
    await b.aclose()
    sent = [t - script.seen[0][0] for t, _ in script.seen]
    # two at once, then one every 0.2 s: the fifth is not sent before 0.6 s
    assert sent[1] < 0.1 and sent[2] >= 0.15 and sent[3] >= 0.35 and sent[4] >= 0.55, sent


def test_a_ramp_from_the_config_table_and_its_errors() -> None:
    b = build_backend("openai", "m", "http://127.0.0.1:9", launch_burst=5, launch_rate=1.4)
    assert isinstance(b, OpenAIBackend) and b.ramp == LaunchRamp(burst=5, per_second=1.4)
    with pytest.raises(ConfigError, match="both launch_burst and launch_rate"):
        build_backend("openai", "m", "http://127.0.0.1:9", launch_burst=5)
    with pytest.raises(ConfigError, match="rate must be > 0"):
        LaunchRamp(burst=5, per_second=0)
    with pytest.raises(ConfigError, match="burst must be >= 1"):
        LaunchRamp(burst=0, per_second=1)


# -- 401/403/quota: the endpoint is closed, nobody idles -----------------------------------------------


@pytest.mark.parametrize(
    ("code", "body"),
    [
        (403, '{"error": {"message": "forbidden"}}'),
        (401, '{"error": {"message": "invalid api key"}}'),
        (429, '{"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}'),
    ],
)
async def test_a_refusal_closes_the_endpoint_and_every_caller_fails_at_once(
    server: tuple[str, Script], code: int, body: str
) -> None:
    url, script = server
    script.code, script.burst, script.body = code, None, body
    events: list[Event] = []
    b = _backend(url, max_concurrency=1)  # one slot: the others queue behind the refused request
    errors: list[str] = []

    async def ask() -> None:
        with pytest.raises(BackendRefusedError) as err:
            await b.complete(REQ)
        errors.append(str(err.value))

    t0 = time.monotonic()
    with observing([events.append]):
        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(ask)
        with pytest.raises(BackendRefusedError):  # a later call is not even sent
            await b.complete(REQ)
    await b.aclose()
    assert time.monotonic() - t0 < 1.0
    assert len(script.seen) == 1  # never retried, and nobody else tried after it
    assert len(errors) == 6 and all(f"HTTP {code}" in e and "API key" in e for e in errors)
    refused = [e for e in events if isinstance(e, EndpointRefused)]
    assert len(refused) == 1 and refused[0].status == code
    assert (b.gate().status() or "").startswith("endpoint refused:")


async def test_a_refused_endpoint_fails_its_subagents_fast_and_the_episode_is_retryable(
    server: tuple[str, Script],
) -> None:
    """The sub-agents' endpoint answers 403: each fails at once with the reason, nothing is retried,
    and rollout would run the episode again."""
    url, script = server
    script.code, script.burst, script.body = 403, None, '{"error": "forbidden"}'
    policy = ScriptedBackend(
        [
            [call("assign_task", agent="worker", task=f"part {i}") for i in range(4)],
            "done",
        ]
    )
    sub = _backend(url)
    t0 = time.monotonic()
    record = await Orchestrator(policy, SwarmConfig(), subagent_backend=sub).run("go")
    await sub.aclose()
    assert time.monotonic() - t0 < 2
    subs = record.stages[0].subagents
    assert [s.status for s in subs] == [AgentStatus.FAILED] * 4
    assert all(s.error_type == ErrorType.BACKEND_REFUSED and "HTTP 403" in (s.error or "") for s in subs)
    assert len(script.seen) <= 4  # the requests in flight together when the 403 came: none retried
    assert "refused service" in (infrastructure_failure(record) or "")


async def test_an_orchestrator_on_a_refused_endpoint_ends_the_episode_with_the_reason(
    server: tuple[str, Script],
) -> None:
    url, script = server
    script.code, script.burst, script.body = 401, None, '{"error": "bad key"}'
    b = _backend(url)
    record = await Orchestrator(b, SwarmConfig()).run("go")
    await b.aclose()
    assert record.status is EpisodeStatus.FAILED and record.error_type == ErrorType.BACKEND_REFUSED
    assert "HTTP 401" in (record.error or "") and "bad key" in (record.error or "")
    assert infrastructure_failure(record) is not None


def test_rollout_marks_refused_episodes_for_a_rerun(tmp_path: Path, server: tuple[str, Script]) -> None:
    url, script = server
    script.code, script.burst, script.body = 403, None, '{"error": "quota"}'
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "prompt": "2+2?", "verifier": "exact", "verifier_args": {"expected": "4"}}))
    config = tmp_path / "c.toml"
    config.write_text("[backend]\nmax_retries = 1\nretry_base_delay = 0.01\ntimeout = 2\n")
    out = tmp_path / "out"
    args = ["rollout", "-b", "openai", "--base-url", url, "-m", "m", "-t", str(tasks), "-c", str(config)]
    r = CliRunner().invoke(app, [*args, "-o", str(out), "-k", "2", "-q", "--json"])
    assert r.exit_code == 1 and "HTTP 403" in r.stderr
    failures = read_jsonl(out / "failures.jsonl", RolloutFailure)
    assert [f.kind for f in failures] == ["infrastructure"] * 2
    assert all(f.error_type == ErrorType.BACKEND_REFUSED for f in failures)


def test_swarm_runs_views_show_the_wait_and_the_refusal() -> None:
    state = LiveState(budget=10)
    state(EndpointWaiting(endpoint="http://x", wait_s=12.0, reason="HTTP 429", message="waiting for rate limit, 12 s"))
    console = Console(record=True, width=140, force_terminal=False)
    console.print(state)
    assert "waiting for rate limit, 12 s" in console.export_text()
    lines: list[str] = []
    log = EventLines(lines.append)
    log(EndpointWaiting(endpoint="http://x", wait_s=3.0, message="waiting for rate limit, 3 s"))
    log(EndpointRefused(endpoint="http://x", status=403, reason="HTTP 403: forbidden"))
    assert "http://x: waiting for rate limit, 3 s" in lines[0] and "refused service: HTTP 403" in lines[1]


async def test_after_a_refusal_the_episode_admits_nothing_more_and_ends_with_the_reason(
    server: tuple[str, Script],
) -> None:
    """The orchestrator's own endpoint is healthy; the sub-agents' refuses: the next turn is the last
    (tools withdrawn), the episode ends failed with the reason, and nothing idles."""
    url, script = server
    script.code, script.burst, script.body = 403, None, '{"error": "forbidden"}'
    policy = ScriptedBackend([[call("assign_task", agent="worker", task=f"part {i}") for i in range(3)], "partial"])
    sub = _backend(url)
    record = await Orchestrator(policy, SwarmConfig(), subagent_backend=sub).run("go")
    await sub.aclose()
    policy.assert_consumed()
    assert record.status is EpisodeStatus.FAILED and record.error_type == ErrorType.BACKEND_REFUSED
    assert "stopped admitting" in (record.error or "") and "HTTP 403" in (record.error or "")
    assert record.answer == "partial" and not record.turns[-1].tools_enabled
    assert "refused service" in policy.calls[-1].messages[-1].content


async def test_cached_prompt_tokens_are_read_from_the_usage_details() -> None:
    body = {
        **OK,
        "usage": {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 64}},
    }
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200, json=body)))
    b = OpenAIBackend("http://cache.test", "m", flavour="openai", client=client)
    usage = (await b.complete(REQ)).usage
    await client.aclose()
    assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (100, 64, 5)
    assert (usage + usage).cached_tokens == 128
