"""`swarm train sft`: gold transcripts through the engine as exact tokens, training, resume, hand-over to RL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")
pytest.importorskip("peft")

from agent_swarm.orchestrator.cli import app  # noqa: E402
from agent_swarm.orchestrator.rl.checkpoint import state_checksum  # noqa: E402
from agent_swarm.orchestrator.rl.config import load_train_config  # noqa: E402
from agent_swarm.orchestrator.rl.gold import read_examples  # noqa: E402
from agent_swarm.orchestrator.rl.policy import build_policy  # noqa: E402
from agent_swarm.orchestrator.rl.sft import run_sft  # noqa: E402

runner = CliRunner()

CONFIG = """
run_dir = "run"
steps = 1
tasks_per_step = 1
[tiny]
hidden_size = 32
intermediate_size = 64
[[workloads]]
workload = "bfcl-parallel"
n = 2
[sft]
steps = 4
batch_size = 2
checkpoint_every = 2
lr = 1e-3
[rollout]
group_size = 2
[swarm]
max_critical_steps = 3
max_malformed_retries = 0
[swarm.orchestrator_sampling]
max_tokens = 16
[swarm.subagent_sampling]
max_tokens = 8
"""


def test_sft_data_is_the_orchestrators_exact_tokens_and_rl_starts_from_it(tmp_path: Path) -> None:
    cfg_file = tmp_path / "train.toml"
    cfg_file.write_text(CONFIG)
    result = runner.invoke(app, ["train", "sft", "--config", str(cfg_file), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "2 gold examples" in result.output
    sft = tmp_path / "run" / "sft"
    examples = read_examples(sft / "data.jsonl")
    assert len(examples) == 2 and all(e.workload == "bfcl-parallel" and e.r_perf == 1.0 for e in examples)
    cfg = load_train_config(cfg_file)
    tok = build_policy(cfg)[0].tokenizer
    for e in examples:
        assert len(e.ids) == len(e.mask) and 0 < sum(e.mask) < len(e.mask)
        trained = tok.decode([i for i, m in zip(e.ids, e.mask, strict=True) if m])
        context = tok.decode([i for i, m in zip(e.ids, e.mask, strict=True) if not m])
        # the orchestrator's own turns are trained on: its calls in the template's format, each turn ending
        # with the end-of-turn token; the system prompt, task and sub-agent reports are context only
        assert '<tool_call>{"name": "assign_task"' in trained and trained.count("<|im_end|>") >= 2
        assert "status: completed" not in trained and "status: completed" in context
        assert tok.decode(list(e.ids)).startswith("<|im_start|>tools")
    assert [json.loads(x)["step"] for x in (sft / "log.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    assert (sft / "policy" / "config.json").is_file() and not (sft / "checkpoint").exists()

    # RL starts from the SFT result
    trainer_policy = build_policy(cfg)[0]
    sft_policy = build_policy(cfg, warm_start=False)[0]
    assert state_checksum(trainer_policy.hf_model) != state_checksum(sft_policy.hf_model)
    from transformers import AutoModelForCausalLM

    assert state_checksum(trainer_policy.hf_model) == state_checksum(
        AutoModelForCausalLM.from_pretrained(sft / "policy")
    )
    result = runner.invoke(app, ["train", "--config", str(cfg_file), "--no-progress"])
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "run" / "rollouts" / "step-000000" / "episodes.jsonl").read_text().splitlines()
    records = [json.loads(x)["record"] for x in lines]
    assert len(records) == 2 and all(r["task"]["metadata"]["workload"] == "bfcl-parallel" for r in records)
    # the SFT context is the one RL sees: same system prompt, tools (sub-agent model names included),
    # task and template, token for token
    by_task = {e.task_id: e for e in examples}
    for r in records:
        first = r["turns"][0]["prompt_token_ids"]
        assert list(by_task[r["task"]["id"]].ids[: len(first)]) == first


def test_an_interrupted_sft_resumes_from_its_checkpoint_on_the_same_data(tmp_path: Path) -> None:
    cfg_file = tmp_path / "train.toml"
    cfg_file.write_text(CONFIG)
    cfg = load_train_config(cfg_file)

    class Killed(Exception):
        pass

    def die_at_3(step: int, loss: float) -> None:
        if step == 2:
            raise Killed

    with pytest.raises(Killed):
        run_sft(cfg, on_step=die_at_3)
    sft = tmp_path / "run" / "sft"
    assert json.loads((sft / "checkpoint" / "state.json").read_text()) == {"step": 2}
    data = (sft / "data.jsonl").read_bytes()
    summary = run_sft(cfg)
    assert summary["resumed_at"] == 2 and summary["steps_run"] == 2
    assert (sft / "data.jsonl").read_bytes() == data  # not regenerated mid-run
    steps = [json.loads(x)["step"] for x in (sft / "log.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 2, 3]  # step 2 ran again after the checkpoint of step 2


def test_sft_without_workloads_is_a_clear_error(tmp_path: Path) -> None:
    cfg_file = tmp_path / "train.toml"
    cfg_file.write_text('run_dir = "run"\n[tiny]\nhidden_size = 32\n')
    result = runner.invoke(app, ["train", "sft", "--config", str(cfg_file), "--no-progress"])
    assert result.exit_code == 2 and "workloads" in result.output
