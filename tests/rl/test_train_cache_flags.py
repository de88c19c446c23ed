"""`swarm train --subagent-cache DIR` / `--no-subagent-cache` reach the training config (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from agent_swarm.orchestrator.cli import app

runner = CliRunner()
REFUSED = "subagent_cache needs sub-agents whose weights are pinned by hash"


def config(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "tasks.jsonl").write_text(
        '{"id": "a", "prompt": "say yes", "verifier": "exact", "verifier_args": {"expected": "yes"}}\n'
    )
    cfg = tmp_path / "train.toml"
    cfg.write_text(
        f'run_dir = "run"\ntasks_file = "tasks.jsonl"\nsteps = 1\ntasks_per_step = 1\n{extra}'
        "[tiny]\nhidden_size = 32\nintermediate_size = 64\n"
        "[rollout]\ngroup_size = 2\n"
        "[swarm]\nmax_critical_steps = 2\nmax_malformed_retries = 0\n"
        "[swarm.orchestrator_sampling]\nmax_tokens = 8\n"
    )
    return cfg


def test_the_flag_sets_the_cache_and_its_negation_clears_a_configs(tmp_path: Path) -> None:
    plain = config(tmp_path)
    # a tiny transformers policy has no hash-pinned sub-agents: the cache the flag asks for is refused
    r = runner.invoke(app, ["train", "-c", str(plain), "--no-progress", "--subagent-cache", str(tmp_path / "c")])
    assert r.exit_code == 2 and REFUSED in r.output
    cached = config(tmp_path, 'subagent_cache = "cache"\n')
    r = runner.invoke(app, ["train", "-c", str(cached), "--no-progress"])
    assert r.exit_code == 2 and REFUSED in r.output
    r = runner.invoke(app, ["train", "-c", str(cached), "--no-progress", "--no-subagent-cache"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "run" / "metrics.jsonl").is_file()
    both = ["train", "-c", str(cached), "--subagent-cache", "c", "--no-subagent-cache"]
    r = runner.invoke(app, both)
    assert r.exit_code == 2 and "contradict each other" in r.output
