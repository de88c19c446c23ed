"""RL maths against slow, loop-by-loop references (to 1e-6)."""

from __future__ import annotations

import inspect
import itertools
import math
import random
from typing import Any

import pytest

from agent_swarm.swarm.errors import ConfigError, UnknownNameError
from agent_swarm.swarm.rl.rewards import ADVANTAGES, Schedule, group_mean_baseline, group_normalized
from agent_swarm.swarm.rl.toggle import estimate_budgets, percentile, toggle_phase, toggle_rewards, update_budgets

torch = pytest.importorskip("torch")

from agent_swarm.swarm.rl.losses import (  # noqa: E402
    LOSSES,
    LossInputs,
    LossParams,
    gather_logprobs,
    k2_squared_loss,
    k25_loss,
    ppo_clip_loss,
    ptx_loss,
)


def _batch(
    seed: int = 0, b: int = 5, t: int = 7
) -> tuple[list[list[float]], list[list[float]], list[float], list[list[float]]]:
    rng = random.Random(seed)
    lp = [[-rng.uniform(0.05, 3.0) for _ in range(t)] for _ in range(b)]
    # old logprobs near the new ones, some far enough to leave [alpha, beta]
    old = [[x + rng.choice([rng.uniform(-0.3, 0.3), rng.uniform(-2.0, 2.0)]) for x in row] for row in lp]
    adv = [rng.uniform(-1, 1) for _ in range(b)]
    mask = [[float(rng.random() < 0.7) for _ in range(t)] for _ in range(b)]
    mask[-1] = [0.0] * t  # a sequence without orchestrator tokens
    return lp, old, adv, mask


def _tensors(
    lp: list[list[float]], old: list[list[float]], adv: list[float], mask: list[list[float]]
) -> tuple[Any, Any, Any, Any]:  # torch tensors (torch is imported by importorskip)
    return (
        torch.tensor(lp, dtype=torch.float64, requires_grad=True),
        torch.tensor(old, dtype=torch.float64),
        torch.tensor(adv, dtype=torch.float64),
        torch.tensor(mask, dtype=torch.float64),
    )


# -- advantages ---------------------------------------------------------------------------------------


def test_group_mean_advantage_matches_loop() -> None:
    rng = random.Random(1)
    groups = [f"t{rng.randrange(4)}" for _ in range(30)]
    rewards = [rng.random() for _ in groups]
    got = group_mean_baseline(rewards, groups)
    for i, (r, g) in enumerate(zip(rewards, groups, strict=True)):
        members = [rewards[j] for j in range(len(groups)) if groups[j] == g]
        assert got[i] == pytest.approx(r - sum(members) / len(members), abs=1e-12)


def test_group_normalized_matches_loop_and_is_zero_for_flat_groups() -> None:
    rewards = [1.0, 0.0, 0.5, 1.0, 0.3, 0.3, 0.3]
    groups = ["a", "a", "a", "a", "b", "b", "b"]
    got = group_normalized(rewards, groups)
    a = rewards[:4]
    mean = sum(a) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / 4)
    for i in range(4):
        assert got[i] == pytest.approx((a[i] - mean) / (std + 1e-6), abs=1e-9)
    assert got[4:] == [0.0, 0.0, 0.0]


def test_advantage_registry_fails_loudly_on_unknown_name() -> None:
    assert ADVANTAGES.get("group_mean") is group_mean_baseline
    with pytest.raises(UnknownNameError, match="group_mean, group_normalized"):
        ADVANTAGES.get("grpo-typo")


def test_advantages_reject_mismatched_lengths_and_nan() -> None:
    with pytest.raises(ConfigError, match="group id"):
        group_mean_baseline([1.0, 2.0], ["a"])
    with pytest.raises(ConfigError, match="finite"):
        group_mean_baseline([float("nan")], ["a"])


# -- losses -------------------------------------------------------------------------------------------


def _k25_ref(lp, old, adv, mask, p: LossParams) -> float:  # type: ignore[no-untyped-def]
    total, n = 0.0, 0.0
    for i in range(len(lp)):
        for j in range(len(lp[i])):
            if not mask[i][j]:
                continue
            n += 1
            lr = lp[i][j] - old[i][j]
            clip = math.exp(lr) * adv[i] if p.alpha <= lr <= p.beta else 0.0
            total += clip - p.tau * lr * lr
    return -total / max(n, 1.0)


def _k25_grad_ref(lp, old, adv, mask, p: LossParams) -> list[list[float]]:  # type: ignore[no-untyped-def]
    n = max(sum(sum(row) for row in mask), 1.0)
    g = []
    for i in range(len(lp)):
        row = []
        for j in range(len(lp[i])):
            lr = lp[i][j] - old[i][j]
            d = 0.0
            if mask[i][j]:
                if p.alpha <= lr <= p.beta:
                    d += math.exp(lr) * adv[i]
                d -= 2 * p.tau * lr
            row.append(-d / n)
        g.append(row)
    return g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_k25_loss_and_gradient_match_loop_reference(seed: int) -> None:
    lp, old, adv, mask = _batch(seed)
    params = LossParams(alpha=-0.5, beta=0.4, tau=0.05)
    t_lp, t_old, t_adv, t_mask = _tensors(lp, old, adv, mask)
    out = k25_loss(LossInputs(t_lp, t_old, t_adv, t_mask), params)
    assert out.loss.item() == pytest.approx(_k25_ref(lp, old, adv, mask, params), abs=1e-6)
    out.loss.backward()
    ref = _k25_grad_ref(lp, old, adv, mask, params)
    assert t_lp.grad is not None
    for i, row in enumerate(ref):
        for j, g in enumerate(row):
            assert t_lp.grad[i, j].item() == pytest.approx(g, abs=1e-6)


def test_k25_masks_out_of_range_tokens_whatever_the_advantage_sign() -> None:
    params = LossParams(alpha=-0.2, beta=0.2, tau=0.0)
    # token 0 inside the band, token 1 above it, token 2 below it; both advantage signs
    for a in (1.0, -1.0):
        lp = torch.tensor([[-1.0, -1.0, -1.0]], dtype=torch.float64, requires_grad=True)
        old = torch.tensor([[-1.1, -2.0, 0.0]], dtype=torch.float64)
        inputs = LossInputs(lp, old, torch.tensor([a], dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64))
        out = k25_loss(inputs, params)
        out.loss.backward()
        assert lp.grad is not None
        assert lp.grad[0, 0].item() != 0.0
        assert lp.grad[0, 1].item() == 0.0
        assert lp.grad[0, 2].item() == 0.0
        assert out.metrics["masked_token_frac"] == pytest.approx(2 / 3)


def test_k25_num_tokens_makes_micro_batches_sum_to_the_full_batch_gradient() -> None:
    lp, old, adv, mask = _batch(3, b=6)
    params = LossParams(tau=0.1)
    full = _tensors(lp, old, adv, mask)
    k25_loss(LossInputs(*full), params).loss.backward()
    n = sum(sum(r) for r in mask)
    grads = []
    for sl in (slice(0, 3), slice(3, 6)):
        part = _tensors(lp[sl], old[sl], adv[sl], mask[sl])
        k25_loss(LossInputs(*part, num_tokens=n), params).loss.backward()
        grads.append(part[0].grad)
    assert full[0].grad is not None
    assert torch.allclose(torch.cat(grads), full[0].grad, atol=1e-12)


def test_k2_squared_loss_matches_loop_reference() -> None:
    lp, old, adv, mask = _batch(4)
    params = LossParams(tau=0.3)
    t = _tensors(lp, old, adv, mask)
    out = k2_squared_loss(LossInputs(*t), params)
    errs = []
    for i in range(len(lp)):
        if not any(mask[i]):
            continue
        s = sum((lp[i][j] - old[i][j]) for j in range(len(lp[i])) if mask[i][j])
        errs.append((adv[i] - params.tau * s) ** 2)
    assert out.loss.item() == pytest.approx(sum(errs) / len(errs), abs=1e-6)


def test_ppo_clip_matches_loop_reference() -> None:
    lp, old, adv, mask = _batch(5)
    params = LossParams(clip_low=0.2, clip_high=0.28)
    t = _tensors(lp, old, adv, mask)
    out = ppo_clip_loss(LossInputs(*t), params)
    total, n = 0.0, 0
    for i in range(len(lp)):
        for j in range(len(lp[i])):
            if mask[i][j]:
                r = math.exp(lp[i][j] - old[i][j])
                total += min(r * adv[i], min(max(r, 0.8), 1.28) * adv[i])
                n += 1
    assert out.loss.item() == pytest.approx(-total / n, abs=1e-6)


def test_on_policy_k25_gradient_is_the_policy_gradient() -> None:
    # With π_θ = π_old the ratio is 1 and the penalty's gradient is 0: grad = −A/N per token.
    lp = torch.tensor([[-0.5, -1.5], [-2.0, -0.1]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([0.5, -0.25], dtype=torch.float64)
    on_policy = LossInputs(lp, lp.detach().clone(), adv, torch.ones(2, 2, dtype=torch.float64))
    k25_loss(on_policy, LossParams(tau=1.0)).loss.backward()
    assert lp.grad is not None
    assert torch.allclose(lp.grad, torch.tensor([[-0.125, -0.125], [0.0625, 0.0625]], dtype=torch.float64))


def test_losses_registry_and_shape_errors() -> None:
    assert set(LOSSES.names) == {"k2", "k25", "ppo_clip"}
    with pytest.raises(UnknownNameError, match="known: k2, k25, ppo_clip"):
        LOSSES.get("grpo")
    with pytest.raises(ConfigError, match="one per sequence"):
        LossInputs(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="alpha"):
        LossParams(alpha=0.1)


def test_each_registered_loss_has_the_loss_signature_and_its_own_name_and_doc() -> None:
    params = ["inputs", "params"]
    for name, fn in (("k25", k25_loss), ("k2", k2_squared_loss), ("ppo_clip", ppo_clip_loss)):
        assert LOSSES.get(name) is fn
        assert list(inspect.signature(fn).parameters) == params
        assert fn.__module__ == "agent_swarm.swarm.rl.losses"
        assert getattr(fn, "__name__", None) in {"k25_loss", "k2_squared_loss", "ppo_clip_loss"}
    assert "K2.5 eq. (1)" in (k25_loss.__doc__ or "")


def test_empty_mask_gives_zero_loss_not_nan() -> None:
    z = torch.zeros(2, 3, requires_grad=True)
    for name in LOSSES.names:
        out = LOSSES.get(name)(LossInputs(z, torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3)), LossParams())
        assert out.loss.item() == 0.0


def test_ptx_and_gather_logprobs_match_loops() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11, dtype=torch.float64)
    ids = torch.randint(0, 11, (2, 5))
    got = gather_logprobs(logits, ids, temperature=0.7)
    for b in range(2):
        for i in range(4):
            row = [x / 0.7 for x in logits[b, i].tolist()]
            lse = math.log(sum(math.exp(x) for x in row))
            assert got[b, i].item() == pytest.approx(row[int(ids[b, i + 1])] - lse, abs=1e-6)
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1]])
    ref = -sum(got[b, i].item() for b in range(2) for i in range(4) if mask[b, i]) / 5
    assert ptx_loss(got, mask).item() == pytest.approx(ref, abs=1e-6)


def test_masked_logprobs_equal_the_full_computation_where_the_mask_is_set(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Only trained positions go through the output head; their values are unchanged, per-row temperatures too."""
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from agent_swarm.orchestrator.rl.tiny import TinyModelSpec, build_tiny_model
    from agent_swarm.swarm.rl.losses import masked_logprobs

    model = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "m", TinyModelSpec(seed=3)))
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 250, (3, 17), generator=gen)
    mask = (torch.rand(3, 16, generator=gen) < 0.4).float()
    mask[2] = 0.0  # a row with nothing to train on
    temps = torch.tensor([1.0, 0.7, 1.3])
    got = masked_logprobs(model, ids, mask, temps)
    logits = model(input_ids=ids).logits
    for b in range(3):
        ref = gather_logprobs(logits[b : b + 1], ids[b : b + 1], float(temps[b]))[0]
        assert torch.allclose(got[b], ref * mask[b], atol=1e-5)
    assert got.shape == (3, 16) and bool((got[mask == 0] == 0).all())
    got.sum().backward()  # differentiable through the kept positions
    assert any(p.grad is not None for p in model.parameters())


# -- Toggle -------------------------------------------------------------------------------------------


def test_percentile_matches_linear_interpolation() -> None:
    assert percentile([10, 20, 30, 40], 50) == pytest.approx(25.0)
    assert percentile([5], 90) == 5
    assert percentile([1, 2, 3, 4, 5], 90) == pytest.approx(4.6)
    with pytest.raises(ConfigError):
        percentile([], 50)


def test_budgets_use_only_correct_responses() -> None:
    rewards = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0]
    lengths = [100, 200, 5, 300, 50, 60]
    tasks = ["x", "x", "x", "x", "y", "y"]
    budgets = estimate_budgets(rewards, lengths, tasks, p=50)
    assert budgets == {"x": 200.0}  # y has no correct response: no budget


def test_toggle_phase_alternates_every_m_iterations() -> None:
    assert [toggle_phase(t, 3) for t in range(9)] == [0, 0, 0, 1, 1, 1, 0, 0, 0]


def test_toggle_rewards_zero_over_budget_only_on_solved_tasks_in_phase0() -> None:
    rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    lengths = [10, 50, 20, 99, 50, 10, 10, 10]
    tasks = ["a", "a", "a", "a", "b", "b", "b", "b"]  # acc(a)=0.75, acc(b)=0.25
    budgets = {"a": 20.0, "b": 20.0}
    phase0 = toggle_rewards(rewards, rewards, lengths, tasks, budgets, iteration=0, m=2, lam=0.5)
    assert phase0 == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]  # b is below λ: its long answer keeps 1
    phase1 = toggle_rewards(rewards, rewards, lengths, tasks, budgets, iteration=2, m=2, lam=0.5)
    assert phase1 == rewards


def test_toggle_judges_group_accuracy_on_r_perf_not_on_the_parl_total() -> None:
    """Issue 19 defect 1: one right answer (long) among three wrong ones (short), PARL terms all 1."""
    perf = [1.0, 0.0, 0.0, 0.0]
    lengths = [50, 10, 10, 10]
    lam1 = lam2 = 0.3
    totals = [p + lam1 * 1.0 + lam2 * 1.0 for p in perf]  # 1.6, 0.6, 0.6, 0.6: mean 0.85 ≥ λ_toggle
    out = toggle_rewards(totals, perf, lengths, ["t"] * 4, {"t": 20.0}, iteration=0, m=1, lam=0.5)
    # group accuracy is 0.25 < 0.5: nothing is length-limited and the right answer stays the best one
    assert out == totals
    assert max(range(4), key=lambda i: out[i]) == 0
    # once the task is solved (accuracy ≥ λ), the over-budget right answer loses its reward
    perf2 = [1.0, 1.0, 1.0, 0.0]
    totals2 = [p + 0.6 for p in perf2]
    out2 = toggle_rewards(totals2, perf2, [50, 10, 10, 10], ["t"] * 4, {"t": 20.0}, iteration=0, m=1, lam=0.5)
    assert out2 == [0.0, 1.6, 1.6, 0.6]


def test_budgets_are_set_per_task_on_first_correct_response_and_then_kept() -> None:
    """Issue 19 defect 2: tasks first sampled (or first solved) after step 0 get a budget too."""
    b = update_budgets(None, [1.0, 1.0, 0.0], [10, 30, 5], ["a", "a", "b"], p=50)
    assert b == {"a": 20.0}  # b has no correct response yet
    b = update_budgets(b, [1.0, 1.0], [100, 100], ["a", "a"], p=50)
    assert b == {"a": 20.0}  # fixed once set
    b = update_budgets(b, [1.0, 0.0, 1.0], [8, 1, 12], ["b", "b", "c"], p=50)
    assert b == {"a": 20.0, "b": 8.0, "c": 12.0}


# -- schedules -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["linear", "cosine", "exponential"])
def test_schedules_go_from_start_to_end_monotonically(kind: str) -> None:
    s = Schedule(kind=kind, start=1.0, end=0.7, steps=10)
    vals = [s.value(t) for t in range(15)]
    assert vals[0] == pytest.approx(1.0)
    assert vals[10] == pytest.approx(0.7)
    assert vals[14] == pytest.approx(0.7)
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(vals))
    assert Schedule(kind="linear", start=1.0, end=0.0, steps=4).value(1) == pytest.approx(0.75)


def test_unknown_schedule_fails_loudly() -> None:
    with pytest.raises(UnknownNameError, match="cosine"):
        Schedule(kind="cosin")
