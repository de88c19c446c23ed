"""``swarm_k25`` takes π_old from the rollout servers' logprobs, through verl's own classes (CI's verl venv).

The recipe's verl config is composed by hydra from verl's ``ppo_trainer.yaml`` with the overrides
``examples/verl/run_main_ppo.sh`` passes to ``main_ppo``; a batch whose actor-recomputed ``old_log_probs``
differ from its ``rollout_log_probs`` then goes through what verl's (legacy) trainer does between the
rollout and the loss: ``compute_rollout_correction_and_add_to_batch`` with the config's
``algorithm.rollout_correction``, the actor's no-padding layout, and the worker's ``ppo_loss`` with the
actor config. The loss must equal K2.5 against the rollout's logprobs, not against the recomputed ones.
No model, no Ray: CPU, seconds. Skipped without verl (the main venv).
"""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")

import torch
import verl
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.workers.utils.losses import ppo_loss
from verl.workers.utils.padding import left_right_2_no_padding

from agent_swarm.orchestrator.rl import verl_loop
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.rl.losses import LossInputs, LossParams, k25_loss

RECIPE = Path(__file__).parents[2] / "examples" / "verl" / "run_main_ppo.sh"
PROMPT, RESPONSE = 4, 6
# prompt lengths (left-padded) and response masks (1: the orchestrator's sampled tokens, 0: observations,
# then right padding): the shapes an episode's AgentLoopOutput takes in verl's batch
PROMPT_LENS = (4, 2, 3)
RESPONSE_MASKS = ((1, 1, 0, 0, 1, 1), (1, 1, 1, 1, 0, 0), (0, 1, 1, 0, 1, 0))
RESPONSE_LENS = (6, 4, 5)


def recipe_overrides(*, placeholders: bool = False) -> list[str]:
    """The hydra overrides ``run_main_ppo.sh`` passes to ``verl.trainer.main_ppo``: those without shell
    expansions (paths and sizes keep verl's defaults, which do not bear on π_old), or all of them with
    each expansion replaced by ``1``."""
    block = RECIPE.read_text().split("python -m verl.trainer.main_ppo", 1)[1].split('"$@"', 1)[0]
    if placeholders:
        block = re.sub(r"\$\(\([^)]*\)\)", "1", block)  # $((A + B))
        block = re.sub(r'"\$\([^)]*\)"', "1", block)  # "$(basename "$RUN_DIR")"
        block = re.sub(r'"[^"]*\$[^"]*"', "1", block)  # "$RUN_DIR/data/train.parquet"
    words = shlex.split(block.replace("\\\n", " "))
    return [w for w in words if "=" in w and "$" not in w]


@pytest.fixture(scope="module")
def recipe_config() -> DictConfig:
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=recipe_overrides())


def test_every_override_of_the_recipe_is_a_key_of_verls_config() -> None:
    """hydra refuses an unknown key (without ``+``) as ``main_ppo`` would, before anything starts."""
    overrides = recipe_overrides(placeholders=True)
    assert len(overrides) > len(recipe_overrides()) + 10
    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    assert cfg.data.train_files == 1 and cfg.actor_rollout_ref.rollout.max_model_len == 1


def test_the_recipes_config_passes_verls_own_validation(recipe_config: DictConfig) -> None:
    """What ``main_ppo`` checks first; sizes as ``gpu_check.sh`` sets the shell variables."""
    sizes = {
        "data__train_batch_size": 4,
        "actor_rollout_ref__actor__ppo_mini_batch_size": 4,
        "actor_rollout_ref__rollout__n": 4,
        "data__max_prompt_length": 3072,
        "data__max_response_length": 2048,
        "actor_rollout_ref__rollout__max_model_len": 5120,
    }
    cfg = _with(recipe_config, **sizes)
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def _with(config: DictConfig, **updates: Any) -> DictConfig:
    changed = copy.deepcopy(config)
    for key, value in updates.items():
        OmegaConf.update(changed, key.replace("__", "."), value, force_add=True)
    return changed


def _batch(rollout: torch.Tensor, recomputed: torch.Tensor, advantages: torch.Tensor) -> DataProto:
    """A left/right-padded batch as verl's trainer holds it after the actor recomputed ``old_log_probs``."""
    b = len(PROMPT_LENS)
    prompt_mask = torch.tensor([[0] * (PROMPT - p) + [1] * p for p in PROMPT_LENS])
    response_attn = torch.tensor([[1] * n + [0] * (RESPONSE - n) for n in RESPONSE_LENS])
    attention_mask = torch.cat([prompt_mask, response_attn], dim=1)
    input_ids = torch.randint(5, 100, (b, PROMPT + RESPONSE)) * attention_mask
    response_mask = torch.tensor(RESPONSE_MASKS)
    return DataProto.from_dict(
        tensors={
            "prompts": input_ids[:, :PROMPT],
            "responses": input_ids[:, PROMPT:],
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "rollout_log_probs": rollout * response_mask,
            "old_log_probs": recomputed * response_mask,
            "advantages": advantages[:, None].expand(b, RESPONSE) * response_mask,
        }
    )


def _model_log_probs(new: torch.Tensor) -> torch.Tensor:
    """The actor's forward output in verl's no-padding layout: per sequence, position j holds the logprob of
    token j + 1, so response token k sits at ``prompt_len − 1 + k``."""
    pieces = []
    for i, (p, n) in enumerate(zip(PROMPT_LENS, RESPONSE_LENS, strict=True)):
        pieces += [torch.zeros(p - 1), new[i, :n], torch.zeros(1)]
    return torch.cat(pieces)


def test_the_recipe_trains_swarm_k25_against_the_rollouts_logprobs(recipe_config: DictConfig) -> None:
    cfg = recipe_config
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == verl_loop.LOSS_NAME
    assert cfg.trainer.use_v1 is False  # the trainer SwarmAgentLoopManager plugs into
    verl_loop.check_k25_config(cfg)

    torch.manual_seed(0)
    b = len(PROMPT_LENS)
    rollout = -0.2 - 2.5 * torch.rand(b, RESPONSE)  # what the rollout servers sampled with (vLLM, bf16)
    # the actor's recomputation differs (precision, kernels); some tokens by more than K2.5's band ln 2
    recomputed = rollout + 0.4 * torch.randn(b, RESPONSE)
    recomputed[0, 1] = rollout[0, 1] + 1.5
    recomputed[2, 2] = rollout[2, 2] - 1.2
    new = (rollout + 0.3 * torch.randn(b, RESPONSE)).requires_grad_(True)  # π_θ during the update
    advantages = torch.tensor([0.8, -0.5, 0.3])

    # the driver (ray_trainer.fit, decoupled mode): IS weights and rejection from algorithm.rollout_correction
    batch, corr_metrics = compute_rollout_correction_and_add_to_batch(
        _batch(rollout, recomputed, advantages), cfg.algorithm.rollout_correction
    )
    assert "rollout_is_weights" in batch.batch and "rollout_corr/rollout_is_mean" in corr_metrics
    mask = batch.batch["response_mask"]
    assert mask.tolist() == [list(m) for m in RESPONSE_MASKS]  # no rejection sampling

    # the worker: verl's update_actor layout, the engine's batch info, the actor config's ppo_loss
    data = left_right_2_no_padding(batch.to_tensordict())
    tu.assign_non_tensor(data, batch_num_tokens=int(mask.sum()), dp_size=1, global_batch_size=b)
    actor_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    loss, metrics = ppo_loss(actor_config, {"log_probs": _model_log_probs(new)}, data)

    against_rollout = k25_loss(LossInputs(new, rollout, advantages, mask.float()), LossParams())
    against_recomputed = k25_loss(LossInputs(new, recomputed, advantages, mask.float()), LossParams())
    assert (
        abs(float(against_rollout.loss.detach() - against_recomputed.loss.detach())) > 0.05
    )  # the batch tells them apart
    assert float(loss.detach()) == pytest.approx(float(against_rollout.loss.detach()), rel=1e-5, abs=1e-6)
    (g_verl,) = torch.autograd.grad(loss, new)
    (g_ours,) = torch.autograd.grad(against_rollout.loss, new)
    assert torch.allclose(g_verl, g_ours, atol=1e-6)
    # the masked fraction is K2.5's band against the rollout: the two far-off tokens count only against recomputed
    masked = metrics["actor/k25_masked_token_frac"].values[0]
    assert masked == pytest.approx(against_rollout.metrics["masked_token_frac"])
    assert masked != pytest.approx(against_recomputed.metrics["masked_token_frac"])


def test_rollout_log_prob_recovers_the_rollouts_logprobs_from_verls_weights(recipe_config: DictConfig) -> None:
    """Numerically, through verl's weight computation (float32 exp and log): to ~1e-6 nats."""
    torch.manual_seed(1)
    b = len(PROMPT_LENS)
    rollout = -0.01 - 12.0 * torch.rand(b, RESPONSE)
    recomputed = rollout + 3.0 * torch.randn(b, RESPONSE)
    batch, _ = compute_rollout_correction_and_add_to_batch(
        _batch(rollout, recomputed, torch.zeros(b)), recipe_config.algorithm.rollout_correction
    )
    mask = batch.batch["response_mask"].bool()
    recovered = verl_loop.rollout_log_prob(batch.batch["old_log_probs"], batch.batch["rollout_is_weights"], mask)
    assert torch.isfinite(recovered).all()
    assert (recovered - rollout)[mask].abs().max() < 2e-6
    assert torch.equal(recovered[~mask], batch.batch["old_log_probs"][~mask])  # off the mask: untouched


def test_swarm_k25_refuses_to_run_without_the_rollouts_logprobs() -> None:
    loss_fn = get_policy_loss_fn(verl_loop.LOSS_NAME)
    old, new, mask = torch.full((1, 3), -1.0), torch.full((1, 3), -1.1), torch.ones(1, 3)
    adv = torch.ones(1, 3)
    cfg = OmegaConf.create({"global_batch_info": {}})
    with pytest.raises(ConfigError, match=r"no rollout_is_weights.*rollout_is=token"):
        loss_fn(old, new, adv, mask, "token-mean", cfg)  # bypass mode, or decoupled without IS weights
    icepop = torch.tensor([[1.0, 0.0, 1.0]])  # IcePop zeroes weights outside its band
    with pytest.raises(ConfigError, match=r"1 response tokens have an IS weight of 0\.0"):
        loss_fn(old, new, adv, mask, "token-mean", cfg, rollout_is_weights=icepop)


@pytest.mark.parametrize(
    ("update", "names"),
    [
        ({"algorithm__rollout_correction__bypass_mode": True}, "bypass_mode=True"),
        ({"algorithm__rollout_correction__rollout_is": None}, "rollout_is=None"),
        ({"algorithm__rollout_correction__rollout_is": "sequence"}, "rollout_is='sequence'"),
        ({"algorithm__rollout_correction__rollout_is_threshold": 2.0}, "rollout_is_threshold=2.0"),
        ({"algorithm__rollout_correction__rollout_is_threshold": "0.5_1e9"}, "rollout_is_threshold='0.5_1e9'"),
        ({"algorithm__rollout_correction__rollout_is_batch_normalize": True}, "rollout_is_batch_normalize=True"),
        ({"algorithm__rollout_correction__rollout_rs": "token_k1"}, "rollout_rs='token_k1'"),
        ({"actor_rollout_ref__rollout__calculate_log_probs": False}, "calculate_log_probs=False"),
    ],
)
def test_a_config_that_hides_the_rollouts_logprobs_is_refused_with_the_fix(
    recipe_config: DictConfig, update: dict[str, Any], names: str
) -> None:
    with pytest.raises(ConfigError, match=rf"{names}.*rollout_is_threshold=1e9"):
        verl_loop.check_k25_config(_with(recipe_config, **update))
    # another loss: not ours to police
    other = _with(recipe_config, actor_rollout_ref__actor__policy_loss__loss_mode="vanilla", **update)
    verl_loop.check_k25_config(other)


def test_the_manager_checks_the_config_before_any_rollout(recipe_config: DictConfig) -> None:
    manager = verl_loop.SwarmAgentLoopManager(config=recipe_config, llm_client=None)  # workers start in create()
    assert manager.config is recipe_config
    with pytest.raises(ConfigError, match=r"trainer\.use_v1=False"):
        verl_loop.SwarmAgentLoopManager(config=_with(recipe_config, trainer__use_v1=True), llm_client=None)
    with pytest.raises(ConfigError, match="bypass_mode=True"):
        verl_loop.SwarmAgentLoopManager(
            config=_with(recipe_config, algorithm__rollout_correction__bypass_mode=True), llm_client=None
        )
