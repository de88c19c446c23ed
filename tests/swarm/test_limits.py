"""Limits: the sub-agent cap is an object that episodes given it share; one request cap per endpoint,
from pluggable providers."""

from __future__ import annotations

import pickle
import socket
from typing import Any

import anyio
import httpx
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.backends.openai_http import OpenAIBackend
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.events import Event, SubagentFinished, SubagentStarted
from agent_swarm.swarm.limits import (
    CapacityLimit,
    Limiter,
    LocalLimits,
    current_limits,
    endpoint_key,
    limiter,
    use_limits,
)
from agent_swarm.swarm.messages import UserMessage
from agent_swarm.swarm.records import EpisodeRecord
from agent_swarm.swarm.testing import FunctionBackend, call


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


def gauged_worker(gauge: Gauge, parallel_slots: int | None = None) -> FunctionBackend:
    async def work(request: ModelRequest) -> Completion:
        await gauge.hold(0.02)
        return Completion(text="ok")

    return FunctionBackend(work, parallel_slots=parallel_slots)


async def run_all(runs: list[tuple[Orchestrator, CapacityLimit | None]]) -> list[EpisodeRecord]:
    records: list[EpisodeRecord] = []

    async def run(o: Orchestrator, limit: CapacityLimit | None) -> None:
        records.append(await o.run("go", subagent_limit=limit))

    async with anyio.create_task_group() as tg:
        for o, limit in runs:
            tg.start_soon(run, o, limit)
    return records


CFG = SwarmConfig(max_concurrency=8, max_subagents_per_stage=16)


async def test_episodes_given_one_limit_share_its_cap() -> None:
    gauge = Gauge()
    shared = CapacityLimit()
    worker = gauged_worker(gauge)
    records = await run_all(
        [(Orchestrator(fan_out_policy(16), CFG, subagent_backend=worker), shared) for _ in range(3)]
    )
    assert gauge.peak == 8
    assert len(records) == 3 and all(r.dag.subagent_steps == 16 for r in records)


async def test_episodes_given_different_limits_do_not_wait_for_each_other() -> None:
    """Fails where the cap is found by its number (one limiter per max_concurrency): the peak is then 8."""
    gauge = Gauge()
    worker = gauged_worker(gauge)
    orchestrators = [Orchestrator(fan_out_policy(16), CFG, subagent_backend=worker) for _ in range(2)]
    await run_all([(o, CapacityLimit()) for o in orchestrators])
    assert gauge.peak == 16
    gauge.peak = 0
    await run_all([(o, None) for o in orchestrators])  # none given: each orchestrator's own
    assert gauge.peak == 16


async def test_an_orchestrators_own_limit_is_shared_by_its_concurrent_runs() -> None:
    gauge = Gauge()
    o = Orchestrator(fan_out_policy(16), CFG, subagent_backend=gauged_worker(gauge))
    await run_all([(o, None), (o, None)])
    assert gauge.peak == 8


async def test_a_limit_is_no_wider_than_its_capacity_or_the_width_asked_for() -> None:
    gauge = Gauge()
    worker = gauged_worker(gauge)
    await run_all([(Orchestrator(fan_out_policy(16), CFG, subagent_backend=worker), CapacityLimit(5))])
    assert gauge.peak == 5  # the object's capacity
    running = Gauge()  # sub-agents started and not yet finished

    def watch(event: Event) -> None:
        if isinstance(event, SubagentStarted):
            running.now += 1
            running.peak = max(running.peak, running.now)
        elif isinstance(event, SubagentFinished):
            running.now -= 1

    slots = gauged_worker(Gauge(), parallel_slots=3)
    o = Orchestrator(fan_out_policy(16), CFG, subagent_backend=slots, observers=[watch])
    await run_all([(o, CapacityLimit())])
    assert running.peak == 3  # the sub-agents' backend serves 3 at once: the rest wait unstarted
    lim = CapacityLimit()
    assert lim.limiter(4) is lim.limiter(6)  # one limiter; its width follows the ask
    assert lim.limiter(6).available_tokens == 6


def test_a_pickled_limit_arrives_fresh_with_its_capacity() -> None:
    copy = pickle.loads(pickle.dumps(CapacityLimit(3)))
    assert isinstance(copy, CapacityLimit) and copy.capacity == 3
    with pytest.raises(ConfigError, match="capacity >= 1"):
        CapacityLimit(0)


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


async def test_a_provider_installed_with_use_limits_hands_out_the_endpoint_limiters() -> None:
    asked: list[tuple[str, int]] = []

    class Recording(LocalLimits):
        def limiter(self, key: str, capacity: int) -> Limiter:
            asked.append((key, capacity))
            return super().limiter(key, capacity)

    def handler(r: httpx.Request) -> httpx.Response:
        message = {"role": "assistant", "content": "ok"}
        body = {"choices": [{"message": message, "finish_reason": "stop"}], "usage": {}}
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    worker = OpenAIBackend("http://srv.test/v1", "m", client=client, max_concurrency=5)
    default = current_limits()
    with use_limits(Recording()):
        await Orchestrator(fan_out_policy(2), SwarmConfig(max_concurrency=5), subagent_backend=worker).run("go")
    assert current_limits() is default
    assert set(asked) == {(endpoint_key("http://srv.test"), 5)}  # the sub-agent cap is not the provider's


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        limiter("k", 0)
