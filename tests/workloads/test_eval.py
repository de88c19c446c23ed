"""`swarm eval`, `swarm run --workload` and the rollout hook, driven as a user would."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.eval import EvalReport, run_eval, workload_orchestrator_factory
from agent_swarm.orchestrator.eval_raw import read_raw
from agent_swarm.orchestrator.rollout.collection import collect_rollouts
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.swarm.backend import Completion
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import BackendError, UnknownNameError
from agent_swarm.swarm.events import Event, StageStarted
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.rl.rewards import ParallelReward, r_parallel
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads import Episode, Score, episode_for, get_workload, workload_names

runner = CliRunner()


@pytest.mark.parametrize(
    "module",
    [
        "agent_swarm.workloads",
        "agent_swarm.workloads.base",
        "agent_swarm.workloads.bfcl",
        "agent_swarm.workloads.lookup",
        "agent_swarm.workloads.starter",
        "agent_swarm.workloads.tau2_airline",
        "agent_swarm.workloads.tau2_batch",
        "agent_swarm.workloads.tau2_common",
        "agent_swarm.workloads.tau2_retail",
        "agent_swarm.orchestrator.eval",
        "agent_swarm.orchestrator.eval_raw",
        "agent_swarm.orchestrator.eval_report",
        "agent_swarm.orchestrator.eval_stats",
        "agent_swarm.orchestrator.cli.eval",
    ],
)
def test_public_exports_are_unique_and_resolvable(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert len(names) == len(set(names))
    assert all(hasattr(mod, n) for n in names)


def test_the_package_exports_the_workload_interface_without_the_gold_policy_helpers() -> None:
    import agent_swarm.workloads as workloads

    assert sorted(workloads.__all__) == sorted(
        [
            *("MODES", "SPLITS", "WORKLOADS", "Episode", "GoldPolicy", "Knobs", "Mode", "Score", "Split"),
            *("Workload", "episode_for", "finish_rate", "get_workload", "register_workload", "workload_names"),
        ]
    )
    assert not hasattr(workloads, "user_text") and not hasattr(workloads, "tool_messages")


def test_a_one_agent_episode_gives_its_agent_every_tool_and_the_modes_instructions() -> None:
    def look(q: str) -> str:
        return q

    def read(doc: str) -> str:
        return doc

    tools = (Tool(look), Tool(read))
    config = SwarmConfig(max_critical_steps=5)
    for mode in ("swarm", "single"):
        ep = Episode.one_agent(
            Task(id="t", prompt="p"),
            mode,
            tools=tools,
            agent="reader",
            system_prompt="You read.",
            instructions={"swarm": "delegate", "single": "alone"},
            scorer=lambda record: Score(metric=1.0, success=True),
            config=config,
        )
        assert ep.tools == tools and ep.config is config and ep.mode == mode
        assert ep.instructions == {"swarm": "delegate", "single": "alone"}[mode]
        (agent,) = ep.agents
        assert (agent.name, agent.tools, agent.system_prompt) == ("reader", ("look", "read"), "You read.")


def test_registry_knows_every_workload_and_fails_loudly_on_unknown_names() -> None:
    assert workload_names() == [
        "bfcl-parallel",
        "controls",
        "deep-lookup",
        "deep-research",
        "starter",
        "tau2-batch",
        "train-mix",
        "wide-lookup",
        "wide-research",
    ]
    with pytest.raises(UnknownNameError, match="tau2-batch"):
        get_workload("tau3-batch")
    with pytest.raises(Exception, match="metadata"):
        episode_for(Task(prompt="hello"))


async def test_run_eval_gold_writes_report_rows_tasks_and_episodes(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(3, seed=0)

    policies: dict[str, list[FunctionBackend]] = {"swarm": [], "single": []}

    def gold(task: Task, mode: str) -> tuple[FunctionBackend, FunctionBackend]:
        p = wl.gold_policy(task, mode)  # type: ignore[arg-type]
        policies[mode].append(p.orchestrator)  # type: ignore[arg-type]
        return p.orchestrator, p.subagent  # type: ignore[return-value]

    report = await run_eval(wl, tasks, gold, out_dir=tmp_path, run_id="r1", backend_name="gold")
    offered = {m: {t.name for b in bs for r in b.calls for t in r.tools} for m, bs in policies.items()}
    # Only the swarm mode is offered the sub-agent actions; the single agent has the workload's tools alone.
    assert {"create_subagent", "assign_task"} <= offered["swarm"]
    assert offered["single"] and not {"create_subagent", "assign_task"} & offered["single"]
    root = tmp_path / "r1"
    assert EvalReport.model_validate_json((root / "report.json").read_text()) == report
    raw, damaged = read_raw(root / "episodes.jsonl.gz")
    assert len(raw) == 6 and damaged == 0 and {r.arm for r in raw} == {"swarm", "single"}
    assert len((root / "tasks.jsonl").read_text().splitlines()) == 3
    assert len(list((root / "episodes" / "swarm").glob("*/episode.json"))) == 3
    assert report.summaries["swarm"].metric == report.summaries["single"].metric == 1.0
    assert report.summaries["swarm"].finish_rate == 1.0 and report.summaries["single"].finish_rate is None
    # BFCL's single agent emits all calls in one turn; the swarm pays for its fan-out in critical steps.
    assert report.ratios["critical_steps"] == pytest.approx(2 / 4)
    assert report.summaries["swarm"].mean_width >= 2
    # Fan-out as a newcomer sees it: the share of episodes with two or more sub-agents in one stage.
    assert report.summaries["swarm"].fanout_rate == 1.0 and report.summaries["single"].fanout_rate == 0.0
    assert all(r.max_width >= 2 for r in report.rows if r.mode == "swarm")
    assert report.summaries["swarm"].median_wall_time_s > 0


async def test_a_failing_model_is_a_recorded_row_not_a_crash(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(2, seed=0)

    def broken(request: object) -> Completion:
        raise BackendError("model server is down")

    report = await run_eval(wl, tasks, lambda t, m: (FunctionBackend(broken), None), arms=["swarm"], out_dir=tmp_path)
    assert [r.status for r in report.rows] == ["failed", "failed"]
    assert all(r.metric == 0.0 and r.error and "down" in r.error for r in report.rows)
    assert report.summaries["swarm"].errors == 2 and report.ratios["critical_steps"] is None


async def test_a_runtime_crash_keeps_the_partial_record_of_the_episode(tmp_path: Path) -> None:
    """A bug in the runtime (here an observer that raises) is a ``crashed`` row; the record the episode
    ended with reaches the observers, so its wall time and its record on disk are kept."""
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(1, seed=0)

    def gold(task: Task, mode: str) -> tuple[FunctionBackend, FunctionBackend]:
        p = wl.gold_policy(task, mode)  # type: ignore[arg-type]
        return p.orchestrator, p.subagent  # type: ignore[return-value]

    def buggy(event: Event) -> None:
        if isinstance(event, StageStarted):
            raise RuntimeError("observer bug")

    report = await run_eval(wl, tasks, gold, arms=["swarm"], out_dir=tmp_path, run_id="r", observers=[buggy])
    (row,) = report.rows
    assert row.status == "crashed" and row.error and "observer bug" in row.error and row.wall_time_s > 0
    (saved,) = (tmp_path / "r" / "episodes" / "swarm").glob("*/episode.json")
    record = EpisodeRecord.model_validate_json(saved.read_text())
    assert record.status.value == "failed" and record.error and "observer bug" in record.error


def test_no_harness_subclasses_the_engine() -> None:
    """Harnesses build an Orchestrator per episode (an episode factory); none subclasses the engine."""
    import ast

    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("orchestrator", "workloads", "subagents", "tools", "swarm"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                    if "Orchestrator" in bases:
                        found.append(f"{path.relative_to(root)}:{node.name}")
    assert not found, f"engine subclasses in library code: {found}"


def test_cli_eval_table_json_and_errors(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "eval",
            "-w",
            "tau2-batch",
            "-b",
            "gold",
            "-n",
            "2",
            "--knob",
            "k=3",
            "--split",
            "train",
            "--json",
            "--out",
            str(tmp_path),
            "--run-id",
            "t",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["summaries"]["swarm"]["metric"] == 1.0 and data["summaries"]["single"]["success_rate"] == 1.0
    assert data["ratios"]["critical_steps"] > 1.5  # (Σ n_i + 1) / (max n_i + 3) with 3 tickets
    assert (tmp_path / "t" / "report.json").is_file()

    table = runner.invoke(
        app,
        [
            "eval",
            "-w",
            "wide-lookup",
            "--split",
            "train",
            "-b",
            "gold",
            "-n",
            "1",
            "--mode",
            "swarm",
            "--out",
            str(tmp_path),
        ],
    )
    assert table.exit_code == 0, table.output
    assert "item_f1" in table.stdout and "critical_steps" in table.stdout

    again = runner.invoke(
        app,
        [
            "eval",
            "-w",
            "tau2-batch",
            "-b",
            "gold",
            "-n",
            "1",
            "--split",
            "train",
            "--out",
            str(tmp_path),
            "--run-id",
            "t",
        ],
    )
    assert again.exit_code == 2 and "already exists" in again.output

    bad = runner.invoke(app, ["eval", "-w", "nope", "-b", "gold"])
    assert bad.exit_code == 2 and "tau2-batch" in bad.output
    bad = runner.invoke(app, ["eval", "-w", "tau2-batch", "-b", "gold", "--knob", "kk=1"])
    assert bad.exit_code == 2 and "Known knobs" in bad.output
    listing = runner.invoke(app, ["eval", "--list"])
    assert listing.exit_code == 0 and "wide-lookup" in listing.stdout and "distractors" in listing.stdout


def test_exported_tasks_run_with_swarm_run_workload(tmp_path: Path) -> None:
    tasks_file = tmp_path / "tasks.jsonl"
    result = runner.invoke(app, ["eval", "-w", "bfcl-parallel", "-n", "2", "--export-tasks", str(tasks_file)])
    assert result.exit_code == 0, result.output
    assert len(tasks_file.read_text().splitlines()) == 2
    run = runner.invoke(
        app,
        [
            "run",
            "--workload",
            "bfcl-parallel",
            "-f",
            str(tasks_file),
            "-b",
            "gold",
            "--mode",
            "single",
            "--json",
            "--out",
            str(tmp_path / "runs"),
        ],
    )
    assert run.exit_code == 0, run.output
    records = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(records) == 2 and all(r["reward"]["r_perf"] == 1.0 for r in records)
    assert len(list((tmp_path / "runs").glob("*/episode.json"))) == 2
    wrong = runner.invoke(app, ["run", "--workload", "tau2-batch", "-f", str(tasks_file), "-b", "gold"])
    assert wrong.exit_code == 2 and "tau2-batch task" in " ".join(wrong.output.split())


async def test_rollout_hook_builds_each_tasks_environment_and_scores_it(tmp_path: Path) -> None:
    wl = get_workload("tau2-batch")
    task = wl.tasks(1, seed=3, k=2)[0]
    gold = wl.gold_policy(task, "swarm")
    factory = workload_orchestrator_factory(gold.orchestrator, gold.subagent, mode="swarm")
    summary = await collect_rollouts([task], factory, out_dir=tmp_path, config=RolloutConfig(group_size=2))
    assert summary.mean_r_perf == 1.0
    entries = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert len(entries) == 2
    for e in entries:
        reward = e["record"]["reward"]
        assert reward["verifier"] == "workload:tau2-batch" and reward["details"]["exact_db"] is True
        assert reward["r_finish"] == 1.0  # PARL terms computed on top of the workload score


def test_a_malformed_workload_task_file_is_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"id": "x", "prompt": "p", "metadata": {"workload": "tau2-batch", "tickets": ["retail-99999"]}})
        + "\n"
    )
    result = runner.invoke(
        app, ["run", "--workload", "tau2-batch", "-f", str(bad), "-b", "gold", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and "retail-99999" in result.output
    assert not list(tmp_path.glob("*/episode.json"))


def test_sampling_flags_apply_on_top_of_a_config_file(tmp_path: Path, openai_script: Callable[..., Any]) -> None:
    cfg = tmp_path / "swarm.toml"
    cfg.write_text("[swarm]\norchestrator_sampling = { temperature = 0.3, max_tokens = 99, seed = 5 }\n")
    with openai_script(lambda body: ("done", [])) as srv:
        base = ["eval", "-w", "bfcl-parallel", "-b", "openai", "--base-url", srv.url, "-m", "m", "-n", "1"]
        base += ["--mode", "single", "--out", str(tmp_path)]

        def sampling(*extra: str) -> tuple[float, int, int | None]:
            srv.requests.clear()
            result = runner.invoke(app, [*base, *extra])
            assert result.exit_code == 0, result.output
            body = srv.requests[0]
            return body["temperature"], body["max_tokens"], body.get("seed")

        assert sampling("-c", str(cfg)) == (0.3, 99, 5)
        assert sampling("-c", str(cfg), "--max-tokens", "7") == (0.3, 7, 5)
        assert sampling("-c", str(cfg), "--temperature", "0") == (0.0, 99, 5)
        # no config: greedy, the eval seed, and the token cap `swarm run` gives the model's family
        assert sampling("--seed", "2") == (0.0, 1024, 2)
        # a config that says nothing of sampling leaves it as without one (it gave T = 1 before)
        other = tmp_path / "steps.toml"
        other.write_text("[swarm]\nmax_critical_steps = 4\n")
        assert sampling("-c", str(other), "--seed", "3") == (0.0, 1024, 3)
        # ... and a prompt profile the config names sets the cap, as in swarm run
        small = tmp_path / "small.toml"
        small.write_text('[swarm]\nprompt_profile = "small"\n')
        assert sampling("-c", str(small), "--seed", "3") == (0.0, 1280, 3)


def test_eval_gives_a_small_model_the_token_caps_swarm_run_gives_it(
    tmp_path: Path, openai_script: Callable[..., Any]
) -> None:
    """A 0.5B orchestrator gets 1,280 tokens per turn and its sub-agents 256, in eval as in run (eval
    gave both 512, so a looping small model ran longer in eval than for a user)."""

    def is_orchestrator(body: dict[str, Any]) -> bool:
        return any(t["function"]["name"] == "assign_task" for t in body.get("tools") or [])

    def policy(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
        if is_orchestrator(body) and body["messages"][-1]["role"] == "user":  # its first turn
            return "", [("assign_task", {"agent": "worker", "task": "What is the capital of France?"})]
        return "Paris", []

    with openai_script(policy) as srv:
        args = ["eval", "-w", "starter", "-b", "openai", "--base-url", srv.url, "-m", "qwen2.5-coder-0.5b"]
        result = runner.invoke(app, [*args, "-n", "1", "--mode", "swarm", "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
        orch = {b["max_tokens"] for b in srv.requests if is_orchestrator(b)}
        sub = {b["max_tokens"] for b in srv.requests if not is_orchestrator(b)}
    assert orch == {1280} and sub == {256}


@pytest.mark.parametrize(
    "name", ["bfcl-parallel", "deep-lookup", "deep-research", "starter", "tau2-batch", "wide-lookup", "wide-research"]
)
async def test_each_task_declares_the_parts_its_gold_swarm_fans_out_to(name: str, tmp_path: Path) -> None:
    """``metadata["parts"]`` is what the ``parts`` form of r_parallel pays for: one sub-agent per part."""
    wl = get_workload(name)
    knobs = {"wide-lookup": {"entities": 4, "attributes": 2}, "tau2-batch": {"k": 4}}.get(name, {})
    tasks = wl.tasks(2, seed=0, split="test", **knobs)
    report = await run_eval(
        wl, tasks, lambda t, m: gold_pair(wl, t, m), out_dir=tmp_path, run_id="p", backend_name="gold", arms=["swarm"]
    )
    parts = {t.id: t.metadata["parts"] for t in tasks}
    assert all(isinstance(p, int) and p >= 2 for p in parts.values())
    for path in (tmp_path / "p" / "episodes" / "swarm").glob("*/episode.json"):
        rec = EpisodeRecord.model_validate_json(path.read_text())
        assert rec.task.metadata["parts"] == parts[rec.task.id] == len(rec.subagent_results)
        assert r_parallel(rec, ParallelReward(form="parts")) == 1.0
    assert [r.metric for r in report.rows] == [1.0, 1.0]


def gold_pair(wl: Any, task: Task, mode: str) -> tuple[Any, Any]:
    p = wl.gold_policy(task, mode)
    return p.orchestrator, p.subagent


def test_a_workload_episode_config_overrides_only_the_fields_it_sets() -> None:
    """``Episode.config`` is a typed SwarmConfig; its defaults never override the run's own settings."""
    from agent_swarm.orchestrator.eval import episode_config
    from agent_swarm.swarm.config import SwarmConfig

    wl = get_workload("bfcl-parallel")
    ep = wl.episode(wl.tasks(1, seed=0)[0], "swarm")
    assert isinstance(ep.config, SwarmConfig) and "max_critical_steps" in ep.config.model_fields_set
    base = SwarmConfig(max_concurrency=3, max_critical_steps=99, max_report_chars=100)
    cfg = episode_config(ep, base, {"max_subagent_steps": 2})
    assert (cfg.max_concurrency, cfg.max_report_chars) == (3, 100)  # the run's, not SwarmConfig's defaults
    assert cfg.max_critical_steps == ep.config.max_critical_steps != 99  # the workload's budget
    assert cfg.max_subagent_steps == 2  # explicit overrides win over both
