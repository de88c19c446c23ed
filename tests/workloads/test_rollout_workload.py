"""`swarm rollout --workload`: rollouts over a workload's tasks with its environment and reward."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.eval import BackendPair, run_eval, workload_orchestrator_factory
from agent_swarm.orchestrator.rollout.collection import collect_rollouts
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.swarm.backend import Completion
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.export import read_jsonl, read_trajectories
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.workloads import get_workload

runner = CliRunner()


def rollout(*args: str) -> Result:
    return runner.invoke(app, ["rollout", "--quiet", *args])


def last_json(stdout: str) -> dict[str, object]:
    return json.loads(stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_gold_rollouts_write_trajectories_scored_by_the_workload_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ("-w", "bfcl-parallel", "-b", "gold", "-n", "3", "-k", "2", "--seed", "1", "--out", str(out), "--json")
    r = rollout(*args)
    assert r.exit_code == 0, r.output
    s = last_json(r.stdout)
    assert (s["tasks"], s["episodes"], s["trajectories"], s["groups_complete"]) == (3, 6, 6, 3)
    assert s["mean_r_perf"] == 1.0 and s["reward_errors"] == 0

    # The same tasks as `swarm eval` generates for these flags, in the same environment and budgets.
    ev = runner.invoke(
        app,
        [
            "eval",
            "-w",
            "bfcl-parallel",
            "-b",
            "gold",
            "-n",
            "3",
            "--seed",
            "1",
            "--split",
            "train",
            "--mode",
            "swarm",
            "--json",
        ],
    )
    assert ev.exit_code == 0, ev.output
    rows = {row["task_id"]: row for row in json.loads(ev.stdout)["rows"]}
    trajs = read_trajectories(out / "trajectories.jsonl")
    assert {t.group_id for t in trajs} == set(rows)
    entries = read_jsonl(out / "episodes.jsonl")
    for e in entries:
        rec, row = e["record"], rows[e["group_id"]]
        assert rec["reward"]["verifier"] == "workload:bfcl-parallel"
        assert rec["reward"]["r_perf"] == row["metric"]
        assert rec["reward"]["details"]["call_f1"] == row["details"]["call_f1"]
        assert rec["dag"]["critical_steps"] == row["critical_steps"]
    # Gold episodes of one task are identical, so every advantage is 0 and the reward holds the PARL terms.
    assert all(t.advantage == 0.0 and t.reward.total >= t.reward.r_perf for t in trajs)

    again = rollout(*args)
    assert again.exit_code == 0, again.output
    resumed = last_json(again.stdout)
    assert (resumed["episodes_run"], resumed["episodes_resumed"]) == (0, 6)

    other_mode = rollout(*args, "--mode", "single")
    assert other_mode.exit_code == 2 and 'mode "swarm" → "single"' in other_mode.stderr


def test_single_mode_rollouts_offer_no_subagents(tmp_path: Path) -> None:
    r = rollout("-w", "deep-lookup", "-b", "gold", "-n", "2", "-k", "1", "--mode", "single", "--out", str(tmp_path))
    assert r.exit_code == 0, r.output
    entries = read_jsonl(tmp_path / "episodes.jsonl")
    assert len(entries) == 2
    for e in entries:
        rec = e["record"]
        assert rec["reward"]["r_perf"] == 1.0 and rec["config"]["subagents"] is False
        assert rec["dag"]["subagent_steps"] == 0 and rec["dag"]["critical_steps"] == rec["dag"]["total_steps"] > 4


def test_rollout_over_a_task_file_written_by_swarm_eval(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    exp = runner.invoke(
        app, ["eval", "-w", "wide-lookup", "-n", "2", "--knob", "entities=4", "--export-tasks", str(tasks)]
    )
    assert exp.exit_code == 0, exp.output
    r = rollout("-w", "wide-lookup", "-b", "gold", "-t", str(tasks), "-k", "1", "--out", str(tmp_path / "o"), "--json")
    assert r.exit_code == 0, r.output
    assert last_json(r.stdout)["mean_r_perf"] == 1.0

    wrong = rollout("-w", "deep-lookup", "-b", "gold", "-t", str(tasks), "--out", str(tmp_path / "x"))
    assert wrong.exit_code == 2 and "not a deep-lookup task" in " ".join(wrong.stderr.split())
    mixed = rollout("-w", "wide-lookup", "-b", "gold", "-t", str(tasks), "-n", "3", "--out", str(tmp_path / "x"))
    assert mixed.exit_code == 2 and "leave them out" in mixed.stderr
    assert not (tmp_path / "x").exists()


def test_bad_workload_input_is_a_one_line_error_and_exit_2(tmp_path: Path) -> None:
    bad = rollout("-w", "tau3-batch", "-b", "gold", "--out", str(tmp_path / "o"))
    assert bad.exit_code == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "tau3-batch" in lines[0] and "tau2-batch" in lines[0]
    knob = rollout("-w", "tau2-batch", "-b", "gold", "--knob", "kk=1", "--out", str(tmp_path / "o"))
    assert knob.exit_code == 2 and "Known knobs" in knob.stderr
    gold = rollout("-b", "gold", "-t", str(tmp_path / "t.jsonl"), "--out", str(tmp_path / "o"))
    assert gold.exit_code == 2 and "--workload" in gold.stderr
    mode = rollout("-w", "bfcl-parallel", "-b", "gold", "--mode", "both", "--out", str(tmp_path / "o"))
    assert mode.exit_code == 2 and "swarm or single" in mode.stderr
    assert not (tmp_path / "o").exists()


async def test_per_task_backends_route_each_episode_and_its_reward_is_the_workloads(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(2, seed=0)
    quitter = FunctionBackend(lambda request: Completion(text="I cannot help with that."))

    def resolve(task: Task, mode: str) -> BackendPair:
        if task.id == tasks[0].id:
            gold = wl.gold_policy(task, "swarm")
            return gold.orchestrator, gold.subagent
        return quitter, None

    factory = workload_orchestrator_factory(resolve, mode="swarm")
    summary = await collect_rollouts(tasks, factory, out_dir=tmp_path / "r", config=RolloutConfig(group_size=2))
    perf = {e["group_id"]: e["record"]["reward"]["r_perf"] for e in read_jsonl(tmp_path / "r" / "episodes.jsonl")}
    report = await run_eval(wl, tasks, resolve, arms=["swarm"])
    assert perf == {row.task_id: row.metric for row in report.rows} == {tasks[0].id: 1.0, tasks[1].id: 0.0}
    assert summary.mean_r_perf == 0.5 and summary.crashed_episodes == 0
