"""`swarm train --config` end to end on a tiny model, and `swarm train plot`."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, EpisodeJob
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord
from agent_swarm.swarm.rl.export import read_jsonl
from agent_swarm.swarm.rl.trajectory import Trajectory
from agent_swarm.swarm.testing import FunctionBackend, call
from agent_swarm.workloads.base import tool_messages

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

from agent_swarm.orchestrator.cli import app

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
    from agent_swarm.orchestrator.rl.config import load_train_config

    cfg = load_train_config(SMOKE)
    assert cfg.tiny is not None and cfg.steps == 2 and cfg.workloads
    assert cfg.environment == "agent_swarm.orchestrator.rl.scripted:scripted_subagent_environment"


def _lookup(label: str) -> FunctionBackend:
    """An orchestrator that assigns one look-up of ``label`` and answers with the report it gets."""

    def act(request: ModelRequest) -> Completion:
        reports = tool_messages(request, "assign_task")
        if reports:
            return Completion(text=reports[0].content)
        task = f"Look up the flight '{label}' and report: departure."
        return Completion(tool_calls=(call("assign_task", agent="researcher", task=task),))

    return FunctionBackend(act, model="lookup")


def test_the_smoke_sub_agents_are_each_task_s_scripted_researcher_on_the_real_tools() -> None:
    from agent_swarm.orchestrator.rl.config import load_train_config
    from agent_swarm.orchestrator.rl.scripted import scripted_subagent_environment
    from agent_swarm.workloads import get_workload

    cfg = load_train_config(SMOKE)
    env = scripted_subagent_environment(cfg, None)
    assert env.factory is not None and env.reward is not None
    task = env.tasks[0]
    gold = get_workload("wide-lookup").gold_policy(task, "swarm").orchestrator
    for engine, r_perf in ((gold, 1.0), (_lookup("ZZ999"), 0.0)):
        job = EpisodeJob(task=task, sample_index=0, seed=0)
        record = anyio.run(env.factory(engine, None)(job, cfg.swarm, env.reward).run, task)
        subs = record.subagent_results
        assert subs and all(s.status is AgentStatus.COMPLETED and s.steps >= 1 for s in subs), subs
        assert record.reward is not None and record.reward.r_perf == r_perf
        assert record.reward.r_parallel > 0 and record.reward.r_finish > 0
    # the researcher searched the corpus for what it was given, and reports what it found (or not)
    assert [s.report.splitlines()[0] for s in subs] == ["flight: ZZ999"] and "NOT FOUND" in subs[0].report


def _records(run: Path) -> list[EpisodeRecord]:
    return [
        e.record
        for step in sorted((run / "rollouts").glob("step-*"))
        for e in read_jsonl(step / "episodes.jsonl", EpisodeEntry)
    ]


def _saw_the_reports(record: EpisodeRecord) -> bool:
    """A later orchestrator turn's exact prompt tokens hold every completed sub-agent's report."""
    from agent_swarm.orchestrator.rl.tiny import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    later = [t for t in record.turns if t.index > 0 and t.prompt_token_ids]
    done = [s.report for s in record.subagent_results if s.status is AgentStatus.COMPLETED]
    return bool(later and done) and all(r in tok.decode(list(later[-1].prompt_token_ids or ())) for r in done)


@pytest.mark.slow
def test_the_smoke_config_shows_fan_out_rewards_the_update_checkpoints_and_resume(tmp_path: Path) -> None:
    """`swarm train sft` then `swarm train` with experiments/train_smoke.toml: the warm-started tiny policy
    fans out in its PARL rollouts, the scripted sub-agents run and report back, rewards and group
    advantages are not all 0, the update trains on orchestrator tokens, and a re-run resumes."""
    run = tmp_path / "run"
    sft = runner.invoke(app, ["train", "sft", "-c", str(SMOKE), "--run-dir", str(run), "--no-progress"])
    assert sft.exit_code == 0, sft.output
    assert (run / "sft" / "policy" / "config.json").is_file()
    rl = runner.invoke(app, ["train", "-c", str(SMOKE), "--run-dir", str(run), "--no-progress"])
    assert rl.exit_code == 0, rl.output
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]

    records = _records(run)
    fanned = [r for r in records if r.subagent_results]
    assert fanned, "no PARL rollout assigned a sub-agent"
    assert any(_saw_the_reports(r) for r in fanned), "no orchestrator turn saw its sub-agents' reports"
    assert any(r.reward is not None and r.reward.r_parallel > 0 and r.reward.r_finish > 0 for r in fanned)
    trajectories = [
        t
        for step in sorted((run / "rollouts").glob("step-*"))
        for t in read_jsonl(step / "trajectories.jsonl", Trajectory)
    ]
    assert any(t.reward.total != 0 for t in trajectories)
    assert any(t.advantage for t in trajectories), "every group advantage is 0: nothing to learn from"
    assert all(m["trained_tokens"] > 0 and m["grad_norm"] > 0 for m in metrics)
    assert any(m["r_parallel"] > 0 and m["reward"] > 0 for m in metrics)
    assert [m["weight_version"] for m in metrics] == [1, 2]
    assert (run / "checkpoints" / "step-000002" / "state.json").is_file()

    # one more step resumes from the step-2 checkpoint (the policy it trained), not from the start
    more = runner.invoke(app, ["train", "-c", str(SMOKE), "--run-dir", str(run), "--steps", "3", "--no-progress"])
    assert more.exit_code == 0, more.output
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(m["step"], m["weight_version"]) for m in metrics] == [(0, 1), (1, 2), (2, 3)]
    assert (run / "checkpoints" / "step-000003" / "state.json").is_file()
