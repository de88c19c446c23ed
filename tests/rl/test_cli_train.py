"""`swarm train --config` end to end on a tiny model, and `swarm train plot`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from orchestrator.cli import app

runner = CliRunner()


def test_train_from_a_config_file_then_resume_and_plot(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        '{"id": "a", "prompt": "say yes", "verifier": "exact", "verifier_args": {"expected": "yes"}}\n'
        '{"id": "b", "prompt": "say no", "verifier": "exact", "verifier_args": {"expected": "no"}}\n'
    )
    cfg = tmp_path / "train.toml"
    cfg.write_text(
        'run_dir = "run"\ntasks_file = "tasks.jsonl"\nsteps = 1\ntasks_per_step = 2\n'
        "[tiny]\nhidden_size = 32\nintermediate_size = 64\n"
        "[rollout]\ngroup_size = 2\n"
        "[swarm]\nmax_critical_steps = 2\nmax_malformed_retries = 0\n"
        "[swarm.orchestrator_sampling]\nmax_tokens = 8\n"
    )
    result = runner.invoke(app, ["train", "--config", str(cfg), "--no-progress"])
    assert result.exit_code == 0, result.output
    run = tmp_path / "run"
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0]
    assert (run / "init-policy" / "config.json").is_file() and (run / "checkpoints" / "step-000001").is_dir()
    # one more step resumes from the checkpoint instead of starting over
    result = runner.invoke(app, ["train", "--config", str(cfg), "--steps", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]

    result = runner.invoke(app, ["train", "plot", str(run)])
    assert result.exit_code == 0, result.output
    pngs = {Path(p).name for p in result.output.split()}
    assert {"summary.png", "reward.png", "lambdas.png", "steps.png", "width.png"} <= pngs
    assert (run / "plots" / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_train_errors_are_one_line_messages(tmp_path: Path) -> None:
    result = runner.invoke(app, ["train"])
    assert result.exit_code == 2 and "--config" in result.output
    result = runner.invoke(app, ["train", "--config", str(tmp_path / "missing.toml")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(app, ["train", "plot", str(tmp_path)])
    assert result.exit_code == 2 and "no metrics" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('run_dir = "r"\nadvantage = "gae"\n')
    result = runner.invoke(app, ["train", "--config", str(bad)])
    assert result.exit_code == 2 and "group_mean" in result.output


def test_a_bad_training_config_names_the_key_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('run_dir = "r"\nstepz = 3\n')
    result = runner.invoke(app, ["train", "--config", str(bad)])
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert "unknown key stepz (did you mean 'steps'?)" in said
    assert "validation error" not in said and "pydantic" not in said  # not pydantic's raw report


SMOKE = Path(__file__).resolve().parents[2] / "experiments" / "train_smoke.toml"


def test_the_smoke_config_loads() -> None:
    from orchestrator.rl.trainer import load_train_config

    cfg = load_train_config(SMOKE)
    assert cfg.tiny is not None and cfg.steps == 2 and cfg.sft.steps == 2 and cfg.workloads


@pytest.mark.slow
def test_the_smoke_config_runs_sft_then_two_parl_steps(tmp_path: Path) -> None:
    run = tmp_path / "run"
    sft = runner.invoke(app, ["train", "sft", "-c", str(SMOKE), "--run-dir", str(run), "--no-progress"])
    assert sft.exit_code == 0, sft.output
    assert (run / "sft" / "policy").is_dir()
    rl = runner.invoke(app, ["train", "-c", str(SMOKE), "--run-dir", str(run), "--no-progress"])
    assert rl.exit_code == 0, rl.output
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]
