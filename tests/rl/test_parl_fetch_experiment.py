"""The parl_fetch experiment measures fan-out honestly."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent_swarm.orchestrator.engine import Orchestrator
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import BackendError
from agent_swarm.swarm.messages import ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord
from agent_swarm.swarm.rl.rewards import RewardConfig
from agent_swarm.swarm.testing import FunctionBackend, call

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


@pytest.fixture(scope="module")
def pf(repo_script: Callable[[str], ModuleType]) -> Any:
    return repo_script("experiments/parl_fetch.py")


async def _fetch(pf: Any, task: str) -> str:
    req = ModelRequest(messages=(UserMessage(content=task),))
    text: str = (await pf.fetcher().complete(req)).text
    return text


async def test_the_fetcher_fails_parts_that_do_not_exist(pf: Any) -> None:
    name, k = next(iter(pf.TRAIN_FILES.items()))
    assert await _fetch(pf, f"{name} part {k}") == f"fetched {name} part {k}"
    for bad in (f"{name} part {k + 1}", f"{name} part 0", "nosuchfile part 1", f"part {k}"):
        with pytest.raises(BackendError):
            await _fetch(pf, bad)


def test_training_and_held_out_files_are_disjoint(pf: Any) -> None:
    train, test = pf.tasks("train"), pf.tasks("test")
    assert len(train) == 24 and len(test) == 12
    assert not {t.id for t in train} & {t.id for t in test}
    assert {t.metadata["parts"] for t in test} == set(pf.PARTS)
    env = pf.environment(pf.load_train_config(EXPERIMENTS / "parl_fetch.toml"), None)
    assert [t.id for t in env.tasks] == [t.id for t in train]


def _policy(pf: Any, parts: range | None = None) -> FunctionBackend:
    """Assign ``parts`` (default: exactly the file's K parts) in one turn, then answer."""

    def act(req: ModelRequest) -> Completion:
        if any(isinstance(m, ToolMessage) for m in req.messages):
            return Completion(text="done")
        user = next(m.content for m in req.messages if isinstance(m, UserMessage))
        name, k = user.split()[1].rstrip(":"), int(user.split()[4])
        todo = parts or range(1, k + 1)
        return Completion(tool_calls=tuple(call("assign_task", agent="w", task=f"{name} part {i}") for i in todo))

    return FunctionBackend(act, model="scripted")


async def _episode(pf: Any, policy: FunctionBackend, k: int = 3) -> EpisodeRecord:
    task = next(t for t in pf.tasks("train") if t.metadata["parts"] == k)
    cfg = SwarmConfig(max_critical_steps=5, max_subagent_steps=1, max_subagents_per_stage=16)
    reward = pf.FetchReward(RewardConfig())
    orch = Orchestrator(policy, cfg, agents=[pf.AGENT], subagent_backend=pf.fetcher(), reward_fn=reward)
    return await orch.run(task)


async def test_exact_fan_out_and_over_assignment_are_reported(pf: Any) -> None:
    exact = await _episode(pf, _policy(pf))
    assert exact.reward is not None and exact.reward.r_perf == 1.0
    assert exact.reward.details["exact_fanout"] is True and exact.reward.details["over_assigned"] == 0
    # sending 9 sub-agents to a 3-part file gets every part too, but it is not a parallel decomposition:
    # the 6 extra sub-agents fail and are counted as over-assignment
    wide = await _episode(pf, _policy(pf, range(1, 10)))
    assert wide.reward is not None and wide.reward.r_perf == 1.0
    assert wide.reward.details["exact_fanout"] is False and wide.reward.details["over_assigned"] == 6
    assert sum(s.status is AgentStatus.FAILED for s in wide.subagent_results) == 6
    assert wide.reward.r_finish == pytest.approx(3 / 9)
    stats = pf.summarise([exact, wide])
    assert stats["exact_fanout"] == 0.5 and stats["over_assignment"] == 0.5
    assert stats["over_assigned_per_episode"] == 3.0 and stats["finish_rate"] == pytest.approx(6 / 12)


def test_intervals_over_seeds(pf: Any) -> None:
    m, h = pf.interval([0.5, 0.6, 0.7])
    assert m == pytest.approx(0.6) and h == pytest.approx(4.303 * 0.1 / 3**0.5)
