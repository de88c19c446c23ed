"""A short training run on the tiny model: weights move, sub-agents stay frozen, metrics and resume work."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent_swarm.orchestrator.rl.checkpoint import state_checksum  # noqa: E402
from agent_swarm.orchestrator.rl.config import OptimConfig, PtxConfig, ToggleConfig, TrainConfig, load_train_config  # noqa: E402
from agent_swarm.orchestrator.rl.environment import Environment  # noqa: E402
from agent_swarm.orchestrator.rl.sequences import TrainingSequence, training_sequences  # noqa: E402
from agent_swarm.orchestrator.rl.tiny import TinyModelSpec, build_tiny_model  # noqa: E402
from agent_swarm.orchestrator.rl.trainer import Trainer  # noqa: E402
from agent_swarm.orchestrator.rollout.config import RolloutConfig  # noqa: E402
from agent_swarm.swarm.backend import SamplingParams  # noqa: E402
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend  # noqa: E402
from agent_swarm.swarm.config import SwarmConfig  # noqa: E402
from agent_swarm.swarm.errors import ConfigError, UnknownNameError  # noqa: E402
from agent_swarm.swarm.messages import AssistantMessage, UserMessage  # noqa: E402
from agent_swarm.swarm.records import AgentDefinition, EpisodeRecord, Task  # noqa: E402
from agent_swarm.swarm.rl.rewards import PARLReward, RewardConfig, Schedule  # noqa: E402


class HashReward(PARLReward):
    """A deterministic, answer-dependent r_perf in [0, 1] so groups have non-zero advantages."""

    async def r_perf(self, record: EpisodeRecord):  # type: ignore[no-untyped-def]
        answer = record.answer or ""
        return hashlib.sha256(answer.encode()).digest()[0] / 255, "hash", {}, None


class EpisodeReward(PARLReward):
    """r_perf from the episode id: distinct advantages even when every sample is the same text."""

    async def r_perf(self, record: EpisodeRecord):  # type: ignore[no-untyped-def]
        return hashlib.sha256(record.episode_id.encode()).digest()[0] / 255, "hash", {}, None


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return build_tiny_model(root / "policy", TinyModelSpec(seed=1)), build_tiny_model(
        root / "sub", TinyModelSpec(seed=2)
    )


def _config(run_dir: Path, steps: int) -> TrainConfig:
    sampling = SamplingParams(temperature=1.0, max_tokens=12)
    return TrainConfig(
        run_dir=run_dir,
        steps=steps,
        tasks_per_step=2,
        rollout=RolloutConfig(group_size=2, max_concurrent_episodes=4),
        swarm=SwarmConfig(
            max_critical_steps=4,
            max_malformed_retries=0,
            orchestrator_sampling=sampling,
            subagent_sampling=sampling,
            max_subagent_steps=1,
        ),
        optim=OptimConfig(lr=1e-2, micro_batch=4),
        reward=RewardConfig(),
        checkpoint_every=1,
    )


def _trainer(cfg: TrainConfig, dirs: tuple[Path, Path]) -> tuple[Trainer, TransformersBackend]:
    policy = TransformersBackend.from_pretrained(dirs[0], name="orchestrator")
    sub = TransformersBackend.from_pretrained(dirs[1], name="subagent")
    for p in sub.hf_model.parameters():
        p.requires_grad_(False)
    tasks = [Task(id="t1", prompt="count to three"), Task(id="t2", prompt="name a colour")]
    env = Environment(
        tasks=tasks,
        subagent_backend=sub,
        reward=HashReward(cfg.reward),
        agents=[AgentDefinition(name="worker", system_prompt="do it")],
        sft=[[UserMessage(content="count to three"), AssistantMessage(content="one two three")]],
    )
    return Trainer(cfg, policy, env), sub


def test_three_steps_train_the_orchestrator_only_and_resume(model_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    run = tmp_path / "run"
    trainer, sub = _trainer(_config(run, steps=3), model_dirs)
    policy_before = state_checksum(trainer.model)
    sub_before = state_checksum(sub.hf_model)
    metrics = trainer.run()

    assert [m.step for m in metrics] == [0, 1, 2]
    assert state_checksum(trainer.model) != policy_before, "orchestrator weights did not change"
    assert state_checksum(sub.hf_model) == sub_before, "sub-agent weights changed"
    assert trainer.policy.weight_version == 3
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2]
    for x in lines:
        assert x["episodes"] == 4
        assert x["trained_tokens"] > 0
        assert {
            "loss",
            "reward",
            "r_perf",
            "lambda1",
            "lambda2",
            "mean_critical_steps",
            "mean_parallel_width",
            "finish_rate",
            "masked_token_frac",
            "ratio_mismatch",
        } <= set(x)
        assert x["ratio_mismatch"] < 1e-3  # same weights, same maths: engine and trainer logprobs agree
        assert "spurious_parallelism" in x["monitors"]  # the collapse monitors, per step
    ckpt = trainer.latest_checkpoint()
    assert ckpt is not None and ckpt.name == "step-000003"
    assert len(list((run / "checkpoints").glob("step-*"))) == 2  # keep_checkpoints

    # a fresh process resumes from the checkpoint: same weights, continues at step 3
    trainer2, _ = _trainer(_config(run, steps=4), model_dirs)
    assert trainer2.resume() == 3
    assert state_checksum(trainer2.model) == state_checksum(trainer.model)
    assert trainer2.policy.weight_version == 3
    more = trainer2.run()
    assert [m.step for m in more] == [3]
    lines = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines == [0, 1, 2, 3]


def test_resume_after_a_kill_drops_metrics_of_uncheckpointed_steps(
    model_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Also runs Toggle (m=1: phases alternate each step) and the PTX loss on a fixed SFT set."""
    run = tmp_path / "run"
    toggle = ToggleConfig(m=1, lam=0.0, p=50, correct_at=0.0)
    cfg = _config(run, steps=2).model_copy(
        update={"checkpoint_every": 5, "toggle": toggle, "ptx": PtxConfig(coef=0.5, batch_size=2)}
    )
    trainer, _ = _trainer(cfg, model_dirs)
    trainer.train_step()  # step 0 logged, not checkpointed (as if killed before step 1 finished)
    trainer.save_checkpoint()  # checkpoint after step 1 of 2
    trainer.train_step()  # logged but the final checkpoint...
    ckpt = run / "checkpoints" / "step-000002"
    assert ckpt.is_dir()
    import shutil

    shutil.rmtree(ckpt)  # ...is lost, as if the process died while writing it
    first = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["toggle_phase"] for m in first] == [0, 1]
    assert first[0]["ptx_loss"] is not None and first[0]["ptx_loss"] > 0
    assert trainer.budgets is not None and set(trainer.budgets) == {"t1", "t2"}
    again, _ = _trainer(cfg, model_dirs)
    assert again.resume() == 1
    assert again.budgets == trainer.budgets  # estimated once, kept across a resume
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0]
    again.run()
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_config_file_validation(tmp_path: Path) -> None:
    p = tmp_path / "train.toml"
    p.write_text('run_dir = "out"\nloss = "grpo"\n')
    with pytest.raises(UnknownNameError, match="k25"):
        load_train_config(p)
    p.write_text('run_dir = "out"\nsteps = 0\n')
    with pytest.raises(ConfigError, match="steps"):
        load_train_config(p)
    p.write_text('run_dir = "out"\n[tiny]\nhidden_size = 32\n')
    cfg = load_train_config(p)
    assert cfg.run_dir == tmp_path / "out"
    with pytest.raises(ConfigError, match="environment"):
        Trainer.from_config(cfg)
    # the sub-agent replay cache only where the sub-agents' weights are pinned by hash
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "prompt": "hi"}\n')
    p.write_text('run_dir = "out"\nsubagent_cache = "cache"\ntasks_file = "tasks.jsonl"\n[tiny]\nhidden_size = 32\n')
    cfg = load_train_config(p)
    assert cfg.subagent_cache == tmp_path / "cache"
    with pytest.raises(ConfigError, match="pinned by hash: set engine = 'llamacpp'"):
        Trainer.from_config(cfg)


def test_drifted_episodes_train_turn_by_turn_on_exact_ids() -> None:
    from agent_swarm.swarm.records import EpisodeStatus, OrchestratorTurn, RewardRecord

    t0 = OrchestratorTurn(
        index=0, stage=0, prompt_token_ids=(1, 2), response_token_ids=(3, 4), response_logprobs=(-0.1, -0.2)
    )
    t1 = OrchestratorTurn(
        index=1,
        stage=1,
        prompt_token_ids=(1, 2, 9, 9, 5),
        response_token_ids=(6,),
        response_logprobs=(-0.3,),
        drift=True,
    )
    rec = EpisodeRecord(
        episode_id="e",
        task=Task(id="t1", prompt="p"),
        status=EpisodeStatus.COMPLETED,
        turns=(t0, t1),
        reward=RewardRecord(total=1.0, r_perf=1.0),
    )
    no_ids = rec.model_copy(update={"turns": (t0.model_copy(update={"response_token_ids": None}),)})
    seqs, dropped, split = training_sequences([rec, no_ids], [0.5, -0.5], 1.0)
    assert (dropped, split) == (1, 1)
    assert [(s.ids, s.mask, s.behaviour_logprobs) for s in seqs] == [
        ((1, 2, 3, 4), (0, 0, 1, 1), (0.0, 0.0, -0.1, -0.2)),
        ((1, 2, 9, 9, 5, 6), (0, 0, 0, 0, 0, 1), (0.0, 0.0, 0.0, 0.0, 0.0, -0.3)),
    ]
    chained = rec.model_copy(
        update={"turns": (t0, t1.model_copy(update={"prompt_token_ids": (1, 2, 3, 4, 5), "drift": False}))}
    )
    seqs, _, split = training_sequences([chained], [0.5], 1.0)
    assert split == 0 and [(s.ids, s.mask) for s in seqs] == [((1, 2, 3, 4, 5, 6), (0, 0, 1, 1, 0, 1))]


def test_muon_optimizes_hidden_matrices_and_adamw_the_rest(model_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    if not hasattr(torch.optim, "Muon"):
        pytest.skip("this torch has no torch.optim.Muon")
    cfg = _config(tmp_path / "run", steps=1).model_copy(update={"optim": OptimConfig(name="muon", lr=1e-2)})
    trainer, _ = _trainer(cfg, model_dirs)
    muon, adamw = trainer.optimizers
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    emb = trainer.model.get_input_embeddings().weight
    assert all(p.dim() == 2 and p is not emb for g in muon.param_groups for p in g["params"])
    assert any(p is emb for g in adamw.param_groups for p in g["params"])


def test_rollouts_from_a_separate_serving_engine_that_receives_each_update(
    model_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """The vLLM shape on CPU: sample from a separate engine, push weights to it after every update."""
    from agent_swarm.orchestrator.rl.serving import TransformersWeightSync

    cfg = _config(tmp_path / "run", steps=2)
    trainer, _ = _trainer(cfg, model_dirs)
    serving = TransformersBackend.from_pretrained(model_dirs[0], name="serving")
    with pytest.raises(ConfigError, match="WeightSync"):
        Trainer(cfg, trainer.policy, trainer.env, engine=serving)
    trainer = Trainer(cfg, trainer.policy, trainer.env, engine=serving, sync=TransformersWeightSync(serving))
    before = state_checksum(serving.hf_model)
    trainer.run()
    assert serving.weight_version == trainer.policy.weight_version == 2
    assert state_checksum(serving.hf_model) == state_checksum(trainer.model) != before
    # step 1 sampled from the serving engine holding the weights pushed after step 0
    episodes = (tmp_path / "run" / "rollouts" / "step-000001" / "episodes.jsonl").read_text().splitlines()
    versions = {t["weight_version"] for e in episodes for t in json.loads(e)["record"]["turns"]}
    assert versions == {"1"}
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(x["ratio_mismatch"] < 1e-3 for x in lines)


# -- regressions of the trainer ----------------------------------------------------------------------


def _scored(task: str, perf: float, length: int, total: float) -> EpisodeRecord:
    from agent_swarm.swarm.records import EpisodeStatus, OrchestratorTurn, RewardRecord

    turn = OrchestratorTurn(
        index=0, stage=0, prompt_token_ids=(1,), response_token_ids=(2,) * length, response_logprobs=(-0.1,) * length
    )
    return EpisodeRecord(
        episode_id=f"{task}-{perf}-{length}",
        task=Task(id=task, prompt=task),
        status=EpisodeStatus.COMPLETED,
        turns=(turn,),
        reward=RewardRecord(total=total, r_perf=perf, r_parallel=1.0, r_finish=1.0, lambda1=0.3, lambda2=0.3),
    )


def test_trainer_toggle_uses_r_perf_and_budgets_tasks_first_seen_later(
    model_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Defects 1 and 2: accuracy from r_perf, not the PARL total; every task gets a budget."""
    cfg = _config(tmp_path / "run", steps=3).model_copy(update={"toggle": ToggleConfig(m=1, lam=0.5, p=50)})
    trainer, _ = _trainer(cfg, model_dirs)
    trainer.budgets = {"t1": 20.0}  # as estimated earlier in the run
    # step 0 (budget-limited phase), the case: r_perf (1, 0, 0, 0), lengths (50, 10, 10, 10),
    # λ1 = λ2 = 0.3 with r_parallel = r_finish = 1; the only right answer must stay the best one
    step0 = [_scored("t1", 1.0, 50, 1.6)] + [_scored("t1", 0.0, 10, 0.6) for _ in range(3)]
    rewards, phase, zeroed = trainer.shape_rewards(0, step0)
    assert phase == 0 and zeroed == 0 and rewards == [1.6, 0.6, 0.6, 0.6]
    assert trainer.budgets == {"t1": 20.0}
    # step 1 (free phase) samples only t2, which is solved: it gets its own budget now
    step1 = [_scored("t2", 1.0, 10, 1.6), _scored("t2", 1.0, 30, 1.6)]
    assert trainer.shape_rewards(1, step1)[1:] == (1, 0)
    assert trainer.budgets == {"t1": 20.0, "t2": 20.0}
    # step 2 (budget-limited): t2 is length-limited by the budget set at step 1
    step2 = [_scored("t2", 1.0, 10, 1.6), _scored("t2", 1.0, 40, 1.6)]
    rewards, phase, zeroed = trainer.shape_rewards(2, step2)
    assert (phase, zeroed, rewards) == (0, 1, [1.6, 0.0])


def _sequences_off_policy(trainer: Trainer, shift: float) -> list:  # type: ignore[type-arg]
    """Two sequences whose behaviour logprobs differ from the current policy's by ``shift`` on every
    other response token, and whose advantages are 0 (only the τ term can move the weights)."""
    from agent_swarm.swarm.rl.losses import masked_logprobs

    tok = trainer.policy.tokenizer
    seqs = []
    for text in ("one two three", "red green blue"):
        prompt = tok("<|im_start|>user\ncount<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)[
            "input_ids"
        ]
        resp = tok(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + resp])
        with torch.no_grad():
            lp = masked_logprobs(trainer.model, ids, torch.ones(1, ids.shape[1] - 1), torch.ones(1))[0].tolist()
        beh = [0.0] * len(prompt) + [lp[len(prompt) - 1 + i] + (shift if i % 2 else 0.0) for i in range(len(resp))]
        seqs.append(
            TrainingSequence(
                ids=tuple(prompt + resp),
                mask=(0,) * len(prompt) + (1,) * len(resp),
                behaviour_logprobs=tuple(beh),
                advantage=0.0,
                temperature=1.0,
            )
        )
    return seqs


@pytest.mark.parametrize("old_logprobs", ["behaviour", "recompute"])
def test_pi_old_from_the_sampler_makes_the_k25_mask_and_tau_term_act(
    model_dirs: tuple[Path, Path], tmp_path: Path, old_logprobs: str
) -> None:
    """Defect 3: with π_old recomputed from the current weights (one minibatch, one epoch) the
    log-ratio is exactly 0, so neither the mask nor the τ penalty ever acts. The sampler's logprobs
    as π_old expose the engine/trainer gap the K2.5 mask exists for."""
    cfg = _config(tmp_path / "run", steps=1).model_copy(update={"old_logprobs": old_logprobs})
    trainer, _ = _trainer(cfg, model_dirs)
    before = state_checksum(trainer.model)
    upd = trainer.update(_sequences_off_policy(trainer, shift=1.5))  # 1.5 > ln 2: those tokens are masked
    assert upd["ratio_mismatch"] > 0.5
    if old_logprobs == "behaviour":
        assert 0.3 < upd["masked_token_frac"] < 0.7
        assert upd["grad_norm"] > 0 and state_checksum(trainer.model) != before
    else:
        assert upd["masked_token_frac"] == 0.0
        assert upd["grad_norm"] == 0.0 and state_checksum(trainer.model) == before


def test_advantages_and_schedules_have_one_home(tmp_path: Path) -> None:
    """Defect 8: rollouts and the trainer use one advantage registry and one schedule class."""
    import importlib.util

    from agent_swarm.orchestrator.rollout.config import RolloutConfig
    from agent_swarm.swarm.rl.rewards import SCHEDULES, Schedule

    assert TrainConfig.model_fields["temperature"].annotation is Schedule
    assert RewardConfig.model_fields["lambda1"].annotation is Schedule
    assert importlib.util.find_spec("agent_swarm.orchestrator.rl.advantages") is None
    assert importlib.util.find_spec("agent_swarm.orchestrator.rl.schedules") is None
    with pytest.raises(UnknownNameError, match="group_mean, group_normalized"):
        RolloutConfig(advantage="grpo")
    # "exponential" means one thing: λ and temperature follow the same curve
    lam = RewardConfig(lambda1=Schedule(kind="exponential", start=0.5, steps=10)).lambda1
    temp = Schedule(kind="exponential", start=1.5, end=1.0, steps=10)
    assert SCHEDULES.names == ("constant", "cosine", "exponential", "linear")
    for t in range(12):
        assert lam.value(t) / 0.5 == pytest.approx((temp.value(t) - 1.0) / 0.5)


def _assigning_policy(model_dir: Path, out: Path, swarm: SwarmConfig) -> Path:
    """The tiny policy fine-tuned (SFT, exact tokens through the engine) to assign one sub-agent task."""
    import anyio

    from agent_swarm.orchestrator.engine import Orchestrator
    from agent_swarm.orchestrator.rl.gold import ForcedBackend
    from agent_swarm.orchestrator.rl.sft import sft_train
    from agent_swarm.swarm.rl.trajectory import build_trajectory
    from agent_swarm.swarm.testing import FunctionBackend, call

    policy = TransformersBackend.from_pretrained(model_dir, name="orchestrator")

    from agent_swarm.swarm.backend import Completion
    from agent_swarm.swarm.messages import ToolMessage

    def gold(req):  # type: ignore[no-untyped-def]
        if any(isinstance(m, ToolMessage) for m in req.messages):
            return Completion(text="done")
        return Completion(tool_calls=(call("assign_task", agent="worker", task="go"),))

    async def transcript() -> tuple[list[int], list[int]]:
        forced = ForcedBackend(FunctionBackend(gold, model="gold"), policy.tokenizer)
        sub = FunctionBackend(lambda r: Completion(text="ok"), model="sub")
        agents = [AgentDefinition(name="worker", system_prompt="do it")]
        orch = Orchestrator(forced, swarm, agents=agents, subagent_backend=sub, reward_fn=PARLReward())
        rec = await orch.run(Task(id="t", prompt="count to three"))
        traj = build_trajectory(rec)
        return list(traj.prompt_ids + traj.response_ids), [0] * len(traj.prompt_ids) + list(traj.response_mask)

    example = anyio.run(transcript)
    losses = sft_train(policy.hf_model, [example], steps=600, lr=1e-2, batch_size=1, stop_below=0.002)
    assert losses[-1] < 0.002
    policy.hf_model.save_pretrained(out)
    policy.tokenizer.save_pretrained(out)
    return out


@pytest.mark.slow
def test_subagents_run_and_come_from_the_frozen_model_only(model_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    """Defect 6: the orchestrator (SFT'd to delegate) assigns tasks every step; each sub-agent's steps come
    from the frozen initial checkpoint (not the live policy), whose weights never move while the policy's do."""
    base = _config(tmp_path / "run", steps=2)
    sampling = base.swarm.orchestrator_sampling.model_copy(update={"max_tokens": 120})
    swarm = base.swarm.model_copy(update={"system_prompt": "Delegate.", "orchestrator_sampling": sampling})
    cfg = base.model_copy(
        update={"temperature": Schedule(kind="constant", start=0.3), "swarm": swarm, "optim": OptimConfig(lr=1e-4)}
    )
    policy_dir = _assigning_policy(model_dirs[0], tmp_path / "sft", cfg.swarm)
    policy = TransformersBackend.from_pretrained(policy_dir, name="orchestrator")
    env = Environment(
        tasks=[Task(id="t1", prompt="count to three"), Task(id="t2", prompt="count to three!")],
        reward=EpisodeReward(cfg.reward),
        agents=[AgentDefinition(name="worker", system_prompt="do it")],
    )
    trainer = Trainer(cfg, policy, env)
    frozen = trainer.env.subagent_backend
    assert isinstance(frozen, TransformersBackend) and frozen is not policy
    start = state_checksum(trainer.model)
    assert state_checksum(frozen.hf_model) == start  # the frozen copy is the initial policy
    trainer.run()
    assert state_checksum(trainer.model) != start
    assert state_checksum(frozen.hf_model) == start
    for step in (0, 1):
        lines = (tmp_path / "run" / "rollouts" / f"step-{step:06d}" / "episodes.jsonl").read_text().splitlines()
        records = [EpisodeRecord.model_validate(json.loads(x)["record"]) for x in lines]
        subs = [s for r in records for s in r.subagent_results]
        assert len(subs) > 0, f"step {step}: the orchestrator never delegated"
        assert {s.model for s in subs} == {frozen.model} != {policy.model}
        assert all(s.steps > 0 for s in subs)


def test_cached_frozen_subagents_are_counted_in_each_steps_metrics(
    model_dirs: tuple[Path, Path], tmp_path: Path
) -> None:
    """Issue 28: sub-agents behind the replay cache; each step's metrics sum its episodes' hits and misses,
    and the frozen model computes only the misses (the K samples and later steps share a sub-task)."""
    from agent_swarm.swarm.backend import Completion
    from agent_swarm.swarm.backends.replay_cache import CachedBackend, ReplayCache
    from agent_swarm.swarm.testing import FunctionBackend

    base = _config(tmp_path / "run", steps=2)
    sampling = base.swarm.orchestrator_sampling.model_copy(update={"max_tokens": 120})
    greedy = SamplingParams(temperature=0.0, max_tokens=12)
    swarm = base.swarm.model_copy(
        update={"system_prompt": "Delegate.", "orchestrator_sampling": sampling, "subagent_sampling": greedy}
    )
    cfg = base.model_copy(
        update={"temperature": Schedule(kind="constant", start=0.3), "swarm": swarm, "optim": OptimConfig(lr=1e-4)}
    )
    policy = TransformersBackend.from_pretrained(_assigning_policy(model_dirs[0], tmp_path / "sft", swarm))
    worker = FunctionBackend(lambda r: Completion(text="ok"), model="frozen")
    env = Environment(
        tasks=[Task(id="t1", prompt="count to three"), Task(id="t2", prompt="count to three!")],
        subagent_backend=CachedBackend(worker, ReplayCache(tmp_path / "cache"), model_id="frozen"),
        reward=EpisodeReward(cfg.reward),
        agents=[AgentDefinition(name="worker", system_prompt="do it")],
    )
    Trainer(cfg, policy, env).run()
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for step, m in enumerate(metrics):
        lines = (tmp_path / "run" / "rollouts" / f"step-{step:06d}" / "episodes.jsonl").read_text().splitlines()
        per_episode = [json.loads(x)["record"]["metadata"].get("subagent_cache", {}) for x in lines]
        assert m["subagent_cache"] == {k: sum(c.get(k, 0) for c in per_episode) for k in ("hits", "misses", "bypassed")}
    totals = {k: sum(m["subagent_cache"][k] for m in metrics) for k in ("hits", "misses", "bypassed")}
    assert totals["hits"] > 0 and totals["bypassed"] == 0
    assert len(worker.calls) == totals["misses"]
