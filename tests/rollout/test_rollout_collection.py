"""Rollout collection: K seeded episodes per task, concurrency limit, advantages, resume, failures."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from agent_swarm.orchestrator import (
    Orchestrator,
    PARLReward,
    RolloutConfig,
    SwarmConfig,
    collect_rollouts,
    load_task_file,
    orchestrator_factory,
)
from agent_swarm.orchestrator.engine import RewardFn
from agent_swarm.orchestrator.rollout.collection import RolloutProgress
from agent_swarm.orchestrator.rollout.episodes import (
    EpisodeEntry,
    EpisodeFactory,
    EpisodeJob,
    RolloutFailure,
    episode_seed,
)
from agent_swarm.orchestrator.rollout.trl import trl_rollout_func
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.errors import ConfigError, TaskFileError
from agent_swarm.swarm.limits import ConcurrencyLimit
from agent_swarm.swarm.messages import ToolMessage
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.rl.export import read_jsonl, read_trajectories
from agent_swarm.swarm.testing import FunctionBackend, call


class Policy:
    """Fans out to two sub-agents, then answers the parity of its sampling seed; tracks concurrency."""

    def __init__(self, delay: float = 0.0, tokens: bool = True) -> None:
        self.seeds: list[int | None] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.backend = FunctionBackend(self._turn, model="policy", tokens=tokens)
        self.delay = delay

    async def _turn(self, request: ModelRequest) -> Completion:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        if not any(isinstance(m, ToolMessage) for m in request.messages):
            self.seeds.append(request.sampling.seed)
            return Completion(
                tool_calls=(
                    call("create_subagent", name="w", system_prompt="s"),
                    call("assign_task", agent="w", task="a"),
                    call("assign_task", agent="w", task="b"),
                )
            )
        return Completion(text=f"Answer: {(request.sampling.seed or 0) % 2}")


def workers() -> FunctionBackend:
    return FunctionBackend(lambda r: Completion(text="done"), model="worker")


TASKS = [
    Task(id="even", prompt="is it even?", verifier="numeric", verifier_args={"expected": 0}),
    Task(id="odd", prompt="is it odd?", verifier="numeric", verifier_args={"expected": 1}),
]


def factory_of(policy: Policy) -> EpisodeFactory:
    return orchestrator_factory(policy.backend, subagent_backend=workers())


async def test_k_seeded_episodes_per_task_with_group_advantages(tmp_path: Path) -> None:
    policy = Policy()
    progress: list[RolloutProgress] = []
    summary = await collect_rollouts(
        TASKS,
        factory_of(policy),
        out_dir=tmp_path,
        config=RolloutConfig(group_size=4, seed=3),
        progress=progress.append,
    )
    assert (summary.episodes, summary.episodes_run, summary.trajectories, summary.groups_complete) == (8, 8, 8, 2)
    # Each sample sampled with its own seed, stable across runs.
    seeds = [s for s in policy.seeds if s is not None]
    assert len(seeds) == len(policy.seeds)  # every request carried a sampling seed
    assert sorted(seeds) == sorted(episode_seed(3, t.id, j) for t in TASKS for j in range(4))
    assert len(set(policy.seeds)) == 8
    assert [p.done for p in progress] == list(range(1, 9)) and progress[-1].total == 8
    trajs = read_trajectories(tmp_path / "trajectories.jsonl")
    for group in ("even", "odd"):
        g = [t for t in trajs if t.group_id == group]
        rewards = [t.reward.total for t in g]
        mean = sum(rewards) / len(rewards)
        assert sorted(t.sample_index for t in g) == [0, 1, 2, 3]
        assert [t.advantage for t in g] == pytest.approx([r - mean for r in rewards])
        assert all(t.metadata["seed"] == t.sampling.seed for t in g)
    assert summary.mean_r_parallel == pytest.approx(0.5) and summary.finish_rate == 1.0
    assert summary.mean_parallel_width == 2.0 and summary.statuses == {"completed": 8}
    assert summary.mean_reward == pytest.approx(sum(t.reward.total for t in trajs) / 8)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["episodes"] == 8 and on_disk["trajectories"] == 8


async def test_normalised_advantages_have_unit_spread(tmp_path: Path) -> None:
    cfg = RolloutConfig(group_size=6, advantage="group_normalized")
    await collect_rollouts(TASKS[:1], factory_of(Policy()), out_dir=tmp_path, config=cfg)
    advs = [t.advantage or 0.0 for t in read_trajectories(tmp_path / "trajectories.jsonl")]
    assert sum(advs) == pytest.approx(0.0, abs=1e-9)
    assert sum(a * a for a in advs) / len(advs) == pytest.approx(1.0, rel=1e-3)


async def test_episodes_run_concurrently_under_the_global_limit(tmp_path: Path) -> None:
    policy = Policy(delay=0.05)
    await collect_rollouts(
        TASKS, factory_of(policy), out_dir=tmp_path, config=RolloutConfig(group_size=5, max_concurrent_episodes=3)
    )
    assert policy.max_in_flight == 3


async def test_rerun_resumes_without_redoing_finished_episodes(tmp_path: Path) -> None:
    cfg = RolloutConfig(group_size=3)
    first = Policy()
    await collect_rollouts(TASKS, factory_of(first), out_dir=tmp_path, config=cfg)
    # Simulate a run killed mid-way: 2 whole episode records, a half-written third, no trajectories yet.
    ep = tmp_path / "episodes.jsonl"
    lines = ep.read_bytes().splitlines(keepends=True)
    ep.write_bytes(lines[0] + lines[1] + lines[2][:100])
    (tmp_path / "trajectories.jsonl").unlink()
    kept = {(e.group_id, e.sample_index) for e in read_jsonl(ep, EpisodeEntry, on_error="skip")}
    again = Policy()
    summary = await collect_rollouts(TASKS, factory_of(again), out_dir=tmp_path, config=cfg)
    assert (summary.episodes_resumed, summary.episodes_run, summary.episodes) == (2, 4, 6)
    assert len(again.seeds) == 4
    assert set(again.seeds).isdisjoint(episode_seed(0, g, j) for g, j in kept)
    entries = read_jsonl(ep, EpisodeEntry)
    assert sorted((e.group_id, e.sample_index) for e in entries) == sorted((t.id, j) for t in TASKS for j in range(3))
    trajs = read_trajectories(tmp_path / "trajectories.jsonl")
    assert len(trajs) == 6 and len({t.episode_id for t in trajs}) == 6
    # A third run has nothing left to do.
    idle = Policy()
    done = await collect_rollouts(TASKS, factory_of(idle), out_dir=tmp_path, config=cfg)
    assert idle.seeds == [] and done.episodes_run == 0 and done.trajectories == 6


async def test_resume_with_other_group_size_is_refused(tmp_path: Path) -> None:
    await collect_rollouts(TASKS[:1], factory_of(Policy()), out_dir=tmp_path, config=RolloutConfig(group_size=2))
    with pytest.raises(ConfigError, match=r"group_size 2 → 3"):
        await collect_rollouts(TASKS[:1], factory_of(Policy()), out_dir=tmp_path, config=RolloutConfig(group_size=3))


class Crashy(Orchestrator):
    async def run(
        self, task: Task | str, *, episode_id: str | None = None, subagent_limit: ConcurrencyLimit | None = None
    ) -> EpisodeRecord:
        if episode_id and episode_id.endswith("-s1"):
            raise RuntimeError("runtime bug in a tool layer")
        return await super().run(task, episode_id=episode_id, subagent_limit=subagent_limit)


async def test_a_crashing_episode_is_recorded_and_retried_on_resume(tmp_path: Path) -> None:
    policy = Policy()

    def crashy(job: EpisodeJob, cfg: SwarmConfig, reward: RewardFn) -> Orchestrator:
        return Crashy(policy.backend, cfg, subagent_backend=workers(), reward_fn=reward)

    cfg = RolloutConfig(group_size=3)
    s = await collect_rollouts(TASKS[:1], crashy, out_dir=tmp_path, config=cfg)
    assert (s.episodes, s.crashed_episodes, s.groups_incomplete, s.trajectories) == (2, 1, 1, 0)
    failures = read_jsonl(tmp_path / "failures.jsonl", RolloutFailure)
    assert failures[0].kind == "episode" and "runtime bug" in failures[0].error and failures[0].sample_index == 1
    s2 = await collect_rollouts(TASKS[:1], factory_of(Policy()), out_dir=tmp_path, config=cfg)
    assert (s2.episodes_run, s2.groups_complete, s2.trajectories, s2.crashed_episodes) == (1, 1, 3, 0)


async def test_episodes_without_token_ids_are_kept_but_reported_untrainable(tmp_path: Path) -> None:
    s = await collect_rollouts(
        TASKS[:1], factory_of(Policy(tokens=False)), out_dir=tmp_path, config=RolloutConfig(group_size=2)
    )
    assert (s.episodes, s.trajectories, s.trajectory_failures) == (2, 0, 2)
    f = read_jsonl(tmp_path / "failures.jsonl", RolloutFailure)
    assert {x.kind for x in f} == {"trajectory"} and "no token ids" in f[0].error


# -- task files -------------------------------------------------------------------------------------


def write_tasks(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_task_file_reports_bad_lines_by_number(tmp_path: Path) -> None:
    p = write_tasks(
        tmp_path / "tasks.jsonl",
        [
            json.dumps(
                {"id": "a", "prompt": "p", "verifier": "exact", "verifier_args": {"expected": "x"}, "split": "dev"}
            ),
            "{not json",
            json.dumps({"id": "b"}),
            json.dumps({"id": "c", "prompt": "p", "verifier": "exactt"}),
            json.dumps({"id": "d", "prompt": "p", "verifier": "numeric", "verifier_args": {"expected": "many"}}),
            json.dumps({"id": "a", "prompt": "again"}),
            "",
            json.dumps({"prompt": "no id"}),
        ],
    )
    tasks, problems = load_task_file(p)
    assert [t.id for t in tasks] == ["a", "tasks-8"]
    assert tasks[0].metadata == {"split": "dev"}
    assert [q.line for q in problems] == [2, 3, 4, 5, 6]
    msgs = [q.error for q in problems]
    assert "invalid JSON" in msgs[0] and "prompt" in msgs[1] and "unknown verifier 'exactt'" in msgs[2]
    assert "invalid arguments for verifier 'numeric'" in msgs[3] and "duplicate task id 'a'" in msgs[4]
    with pytest.raises(TaskFileError, match=r"tasks\.jsonl:2: invalid JSON"):
        load_task_file(p, on_malformed="fail")


def test_task_file_with_nothing_usable_fails(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="no usable tasks"):
        load_task_file(write_tasks(tmp_path / "t.jsonl", ["{", "[]"]))
    with pytest.raises(TaskFileError, match="does not exist"):
        load_task_file(tmp_path / "missing.jsonl")


async def test_progress_and_rewards_use_the_reward_step(tmp_path: Path) -> None:
    reward = PARLReward(step=10_000)  # past annealing: λ = 0, total = r_perf
    await collect_rollouts(
        TASKS[:1], factory_of(Policy()), out_dir=tmp_path, reward=reward, config=RolloutConfig(group_size=2)
    )
    trajs = read_trajectories(tmp_path / "trajectories.jsonl")
    assert all(t.reward.step == 10_000 and t.reward.total == t.reward.r_perf for t in trajs)


async def test_a_group_export_cut_by_a_crash_is_completed_on_resume(tmp_path: Path) -> None:
    cfg = RolloutConfig(group_size=3)
    await collect_rollouts(TASKS[:1], factory_of(Policy()), out_dir=tmp_path, config=cfg)
    tr = tmp_path / "trajectories.jsonl"
    before = read_trajectories(tr)
    first = tr.read_bytes().splitlines(keepends=True)[0]
    tr.write_bytes(first)  # killed after writing the first of the group's three trajectories
    idle = Policy()
    s = await collect_rollouts(TASKS[:1], factory_of(idle), out_dir=tmp_path, config=cfg)
    assert idle.seeds == [] and s.trajectories == 3
    after = read_trajectories(tr)
    assert sorted(t.sample_index for t in after) == [0, 1, 2]
    assert sorted(after, key=lambda t: t.sample_index) == sorted(before, key=lambda t: t.sample_index)


async def test_a_broken_factory_fails_once_before_anything_runs(tmp_path: Path) -> None:
    policy = Policy()

    def broken(job: EpisodeJob, cfg: SwarmConfig, reward: RewardFn) -> Orchestrator:
        # A config naming a tool nobody registered: the Orchestrator refuses it.
        return Orchestrator(policy.backend, cfg.model_copy(update={"orchestrator_tools": ("nope",)}), reward_fn=reward)

    with pytest.raises(ConfigError, match="unregistered tool"):
        await collect_rollouts(TASKS[:1], broken, out_dir=tmp_path / "o", config=RolloutConfig(group_size=2))
    assert not (tmp_path / "o").exists() and policy.seeds == []


async def test_the_factory_gets_each_job_and_checks_the_first_task_before_anything_runs(tmp_path: Path) -> None:
    """The episode factory takes the job (task, sample, seed): a per-task environment needs no engine
    subclass. The first task's episode is built once up front (the check), then each job's."""
    seen: list[tuple[str, int, int, int | None]] = []
    build = factory_of(Policy())

    def per_task(job: EpisodeJob, cfg: SwarmConfig, reward: RewardFn) -> Orchestrator:
        seen.append((job.task.id, job.sample_index, job.seed, cfg.orchestrator_sampling.seed))
        return build(job, cfg, reward)

    cfg = RolloutConfig(group_size=2, seed=5)
    await collect_rollouts(TASKS, per_task, out_dir=tmp_path, config=cfg)
    assert seen[0] == ("even", 0, 0, None)  # the check, before any episode
    expected = {(t.id, j, episode_seed(5, t.id, j), episode_seed(5, t.id, j)) for t in TASKS for j in range(2)}
    assert len(seen) == 5 and set(seen[1:]) == expected


async def test_episodes_whose_model_servers_failed_are_retried_on_resume(tmp_path: Path) -> None:
    """Every sub-agent's server failing (or the orchestrator's) says nothing about the policy: such
    episodes go to failures.jsonl with their record and run again on resume."""
    from agent_swarm.swarm.errors import BackendUnavailableError

    def down(r: ModelRequest) -> Completion:
        raise BackendUnavailableError("http://w/v1/chat/completions failed after 5 attempt(s)")

    dead = orchestrator_factory(Policy().backend, subagent_backend=FunctionBackend(down, model="worker"))
    cfg = RolloutConfig(group_size=2)
    s = await collect_rollouts(TASKS[:1], dead, out_dir=tmp_path, config=cfg)
    assert (s.episodes, s.infrastructure_failures, s.groups_incomplete) == (0, 2, 1)
    assert any("every sub-agent's model call failed" in k for k in s.failure_reasons)
    failures = read_jsonl(tmp_path / "failures.jsonl", RolloutFailure)
    assert [f.kind for f in failures] == ["infrastructure"] * 2 and all(f.record for f in failures)
    s2 = await collect_rollouts(TASKS[:1], factory_of(Policy()), out_dir=tmp_path, config=cfg)
    assert (s2.episodes_run, s2.groups_complete, s2.trajectories, s2.infrastructure_failures) == (2, 1, 2, 0)
    # Kept on request: recorded as finished, so the group completes without them running again.
    kept = RolloutConfig(group_size=2, retry_infrastructure_failures=False)
    s3 = await collect_rollouts(TASKS[1:], dead, out_dir=tmp_path / "kept", config=kept)
    assert (s3.episodes, s3.infrastructure_failures, s3.groups_complete) == (2, 2, 1)


class InFlight:
    """A sub-agent backend counting its calls in flight (each takes 20 ms); ``peak``: the most at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.backend = FunctionBackend(self.work)

    async def work(self, request: ModelRequest) -> Completion:
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await anyio.sleep(0.02)
        finally:
            self.now -= 1
        return Completion(text="done")


def fan_out_4(request: ModelRequest) -> Completion:
    if any(isinstance(m, ToolMessage) for m in request.messages):
        return Completion(text="Answer: 0")
    calls = [call("create_subagent", name="w", system_prompt="s")]
    return Completion(tool_calls=(*calls, *(call("assign_task", agent="w", task=f"{i}") for i in range(4))))


async def test_max_concurrency_caps_subagents_over_all_episodes_of_a_rollout(tmp_path: Path) -> None:
    """Regression: the cap was per Orchestrator, so `--concurrent-episodes 4` episodes
    with max_concurrency=4 ran 16 sub-agents at once."""
    subs = InFlight()
    factory = orchestrator_factory(FunctionBackend(fan_out_4), subagent_backend=subs.backend)
    await collect_rollouts(
        TASKS,
        factory,
        out_dir=tmp_path,
        config=RolloutConfig(group_size=2, max_concurrent_episodes=4),
        swarm_config=SwarmConfig(max_concurrency=4),
    )
    assert subs.peak == 4


def test_the_trl_rollout_funcs_concurrent_episodes_share_one_subagent_cap() -> None:
    subs = InFlight()
    factory = orchestrator_factory(FunctionBackend(fan_out_4), subagent_backend=subs.backend)
    rollout = trl_rollout_func(factory, swarm_config=SwarmConfig(max_concurrency=4), max_concurrent_episodes=4)
    out = rollout(["a", "a", "b", "b"], None)
    assert len(out["reward"]) == 4 and subs.peak == 4  # 4 episodes of 4 sub-agents each, one cap of 4


def test_swarm_rollout_takes_max_concurrency(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent_swarm.orchestrator.cli import app

    tasks = tmp_path / "t.jsonl"
    tasks.write_text(json.dumps({"id": "a", "prompt": "capitals"}) + "\n")
    args = ["rollout", "-b", "scripted", "-t", str(tasks), "-o", str(tmp_path / "o"), "-k", "2", "-q"]
    r = CliRunner().invoke(app, [*args, "--concurrent-episodes", "2", "--max-concurrency", "3"])
    assert r.exit_code == 0, r.output
    entries = read_jsonl(tmp_path / "o" / "episodes.jsonl", EpisodeEntry)
    assert [e.record.config["max_concurrency"] for e in entries] == [3, 3]
