"""Shared limits: one sub-agent cap across episodes, one request cap per endpoint, pluggable providers."""

from __future__ import annotations

import socket
from typing import Any

import anyio
import httpx
import pytest

from orchestrator import Orchestrator, SwarmConfig
from swarm.backend import Completion, ModelRequest
from swarm.backends.openai_http import OpenAIBackend
from swarm.limits import Limiter, LocalLimits, current_limits, endpoint_key, limiter, subagent_key, use_limits
from swarm.messages import UserMessage
from swarm.records import EpisodeRecord
from swarm.testing import FunctionBackend, call


class Gauge:
    """Counts calls in flight and remembers the peak."""

    def __init__(self) -> None:
        self.now = self.peak = 0

    async def hold(self, seconds: float) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await anyio.sleep(seconds)
        finally:
            self.now -= 1


def fan_out_policy(width: int) -> FunctionBackend:
    def policy(request: ModelRequest) -> Completion:
        if len(request.messages) > 2:
            return Completion(text="done")
        calls = [call("create_subagent", name="w", system_prompt="work")]
        calls += [call("assign_task", agent="w", task=f"part {i}") for i in range(width)]
        return Completion(tool_calls=tuple(calls))

    return FunctionBackend(policy)


async def test_the_subagent_cap_holds_across_concurrent_orchestrators() -> None:
    gauge = Gauge()

    async def work(request: ModelRequest) -> Completion:
        await gauge.hold(0.02)
        return Completion(text="ok")

    cfg = SwarmConfig(max_concurrency=8, max_subagents_per_stage=16)
    records: list[EpisodeRecord] = []

    async def run(o: Orchestrator) -> None:
        records.append(await o.run("go"))

    orchestrators = [Orchestrator(fan_out_policy(16), cfg, subagent_backend=FunctionBackend(work)) for _ in range(3)]
    async with anyio.create_task_group() as tg:
        for o in orchestrators:
            tg.start_soon(run, o)
    assert gauge.peak == 8
    assert len(records) == 3 and all(r.dag.subagent_steps == 16 for r in records)


async def test_different_caps_are_different_limiters() -> None:
    assert limiter(subagent_key(4), 4) is limiter(subagent_key(4), 4)
    assert limiter(subagent_key(4), 4) is not limiter(subagent_key(5), 5)


def test_each_event_loop_has_its_own_limiters() -> None:
    seen: list[Limiter] = []

    async def grab() -> None:
        seen.append(limiter("k", 2))

    anyio.run(grab)
    anyio.run(grab)
    assert seen[0] is not seen[1]


async def test_two_backends_on_one_server_share_its_request_cap() -> None:
    gauge = Gauge()

    async def handler(r: httpx.Request) -> httpx.Response:
        await gauge.hold(0.02)
        body: dict[str, Any] = {
            "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    a = OpenAIBackend("http://srv.test/v1", "m", client=client, max_concurrency=3)
    b = OpenAIBackend("http://srv.test", "m", client=client, max_concurrency=3)
    req = ModelRequest(messages=(UserMessage(content="x"),))
    async with anyio.create_task_group() as tg:
        for i in range(12):
            tg.start_soon((a if i % 2 else b).complete, req)
    assert gauge.peak == 3


def test_loopback_endpoints_are_told_apart_by_machine() -> None:
    here = socket.gethostname()
    assert endpoint_key("http://127.0.0.1:8080/v1") == f"endpoint/http://127.0.0.1:8080@{here}"
    assert endpoint_key("http://localhost:8080") == f"endpoint/http://localhost:8080@{here}"
    assert endpoint_key("https://Api.Example.com/v1") == "endpoint/https://api.example.com"


async def test_a_provider_installed_with_use_limits_hands_out_the_limiters() -> None:
    asked: list[tuple[str, int]] = []

    class Recording(LocalLimits):
        def limiter(self, key: str, capacity: int) -> Limiter:
            asked.append((key, capacity))
            return super().limiter(key, capacity)

    default = current_limits()
    with use_limits(Recording()):
        worker = FunctionBackend(lambda r: Completion(text="ok"))
        await Orchestrator(fan_out_policy(2), SwarmConfig(max_concurrency=5), subagent_backend=worker).run("go")
    assert current_limits() is default
    assert asked == [(subagent_key(5), 5)]


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        limiter("k", 0)
