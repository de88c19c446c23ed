"""`swarm eval` as a measuring tool: arms, workload budgets, raw data with provenance, resume,
episodes in parallel, a banner with a k/N count, a trace per episode."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app
from agent_swarm.orchestrator.cli.eval import provenance
from agent_swarm.orchestrator.eval import EvalReport, Progress, parse_arms, run_eval
from agent_swarm.orchestrator.eval_raw import RAW_FILE, read_manifest, read_raw, settings_diff
from agent_swarm.orchestrator.eval_report import load_runs, render_report
from agent_swarm.swarm.backend import Completion, SamplingParams
from agent_swarm.swarm.backends.local.catalogue import LOCAL_MODELS
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.testing import FunctionBackend
from agent_swarm.workloads import Mode, get_workload

runner = CliRunner()


def gold(wl: Any, latency: float = 0.0, calls: list[str] | None = None) -> Any:
    def resolve(task: Task, mode: Mode) -> tuple[Any, Any]:
        if calls is not None:
            calls.append(f"{task.id}/{mode}")
        p = wl.gold_policy(task, mode, latency_s=latency)
        return p.orchestrator, p.subagent

    return resolve


def test_arms_parse_lists_groups_and_refuse_unknown_names() -> None:
    assert parse_arms("both") == ("swarm", "single")
    assert parse_arms("all") == ("swarm", "single", "single-parallel")
    assert parse_arms("single, swarm,single") == ("single", "swarm")
    with pytest.raises(ConfigError, match="unknown arm 'singel'"):
        parse_arms("swarm,singel")


def test_a_budget_below_the_gold_policys_needs_is_refused_before_anything_runs(tmp_path: Path) -> None:
    args = ["eval", "-w", "deep-lookup", "-b", "gold", "-n", "2", "-o", str(tmp_path), "--run-id", "r"]
    r = runner.invoke(app, [*args, "--max-subagent-steps", "3"])
    assert r.exit_code == 2
    msg = " ".join(r.output.split())
    assert "--max-subagent-steps 3 is below the 5 steps per sub-agent deep-lookup's gold policy needs" in msg
    assert "deep-lookup-dev-s0-0" in msg and "own budget is 10" in msg and "drop the flag" in msg
    assert not (tmp_path / "r").exists()
    # the critical-step budget of the single agent, which works one step after another, is checked too
    r = runner.invoke(app, [*args, "--max-critical-steps", "8"])
    assert r.exit_code == 2 and "single arm" in " ".join(r.output.split())
    # lowered but still enough: runs
    ok = runner.invoke(app, [*args, "--max-subagent-steps", "5", "--mode", "swarm", "-q"])
    assert ok.exit_code == 0, ok.output


async def test_raw_rows_hold_answers_scores_tokens_provenance_and_config(tmp_path: Path) -> None:
    wl = get_workload("wide-lookup")
    tasks = wl.tasks(2, seed=0, entities=2, attributes=2)
    report = await run_eval(wl, tasks, gold(wl), out_dir=tmp_path, run_id="r", backend_name="gold", seed=0)
    root = tmp_path / "r"
    rows, bad = read_raw(root / RAW_FILE)
    assert bad == 0 and [(r.task_id, r.arm) for r in rows] == [(t.id, a) for t in tasks for a in ("swarm", "single")]
    for raw in rows:
        assert raw.answer and raw.status == "completed" and raw.metric == 1.0 and raw.success
        assert raw.scores["item_f1"] == 1.0 and raw.split == "train" and raw.seed == 0
        assert raw.items is not None and len(raw.items) == 4 and set(raw.items.values()) == {1.0}  # 2 x 2 cells
        assert raw.tokens["orchestrator"].prompt > 0 and raw.total_tokens > 0
        assert raw.config["max_critical_steps"] >= raw.critical_steps and raw.config["subagents"] == (
            raw.arm == "swarm"
        )
        assert raw.provenance.backend == "gold" and raw.wall_time_s > 0
    swarm = [r for r in rows if r.arm == "swarm"]
    assert all(r.tokens["subagent"].completion > 0 and r.subagents == 2 for r in swarm)
    # the provenance of the code: this checkout's commit
    assert rows[0].provenance.commit is None or len(rows[0].provenance.commit) == 40
    manifest = read_manifest(root)
    assert manifest.task_ids == tuple(t.id for t in tasks) and manifest.arms == ("swarm", "single")
    assert manifest.settings["knobs"] == {} and manifest.settings["workload"] == "wide-lookup"
    # plain gzip readers see one JSON line per episode
    with gzip.open(root / RAW_FILE, "rt") as f:
        assert len(f.read().splitlines()) == 4
    assert EvalReport.model_validate_json((root / "report.json").read_text()) == report


async def test_an_interrupted_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(3, seed=0)
    first: list[str] = []
    with anyio.CancelScope() as scope:

        def stop_after_two(p: Progress) -> None:
            if p.done == 2:
                scope.cancel()  # as Ctrl-C would: the episode running then leaves no row

        await run_eval(wl, tasks, gold(wl, calls=first), out_dir=tmp_path, run_id="r", on_row=stop_after_two)
    assert len(read_raw(tmp_path / "r" / RAW_FILE)[0]) == 2 and len(first) == 3
    # a kill mid-write leaves a torn gzip member at the end: dropped on resume
    with (tmp_path / "r" / RAW_FILE).open("ab") as f:
        f.write(gzip.compress(b'{"half": ')[:15])
    assert read_raw(tmp_path / "r" / RAW_FILE)[1] == 1
    with pytest.raises(ConfigError, match="already exists; pass --resume"):
        await run_eval(wl, tasks, gold(wl), out_dir=tmp_path, run_id="r")
    stale = tmp_path / "r" / "episodes" / "swarm" / f"{tasks[1].id}-swarm" / "trace.jsonl"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("spans of the interrupted attempt\n")
    second: list[str] = []
    started: list[tuple[int, int]] = []
    report = await run_eval(
        wl,
        tasks,
        gold(wl, calls=second),
        out_dir=tmp_path,
        run_id="r",
        resume=True,
        on_start=lambda resumed, todo, configs: started.append((resumed, todo)),
    )
    assert started == [(2, 4)] and len(second) == 4  # only the 4 episodes without a row ran
    rows, bad = read_raw(tmp_path / "r" / RAW_FILE)
    assert bad == 0 and sorted((r.task_id, r.arm) for r in rows) == sorted(
        (t.id, a) for t in tasks for a in ("swarm", "single")
    )
    assert len(report.rows) == 6 and report.summaries["single"].metric == 1.0
    assert len(read_manifest(tmp_path / "r").resumed_at) == 1
    assert not stale.exists() and (stale.parent / "episode.json").is_file()  # the rerun's files only
    # a resume with other settings is refused, naming what differs
    with pytest.raises(ConfigError, match=r"differ in .*overrides\.max_critical_steps"):
        await run_eval(
            wl, tasks, gold(wl), out_dir=tmp_path, run_id="r", resume=True, overrides={"max_critical_steps": 20}
        )
    with pytest.raises(ConfigError, match=r"differ in seed"):
        await run_eval(wl, tasks, gold(wl), out_dir=tmp_path, run_id="r", resume=True, seed=1)


def test_settings_diff_names_nested_keys() -> None:
    old = {"a": 1, "b": {"c": [1, 2], "d": 0}, "e": "x"}
    new = {"a": 1, "b": {"c": (1, 2), "d": 1}, "f": "y"}
    assert settings_diff(old, new) == ["b.d", "e", "f"]


async def test_episodes_run_in_parallel_when_asked(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(3, seed=0)

    def overlaps(k: int) -> int:
        rows = read_raw(tmp_path / f"k{k}" / RAW_FILE)[0]
        spans = sorted((r.started_at, r.started_at + r.wall_time_s) for r in rows)
        return sum(b[0] < a[1] for a, b in itertools.pairwise(spans))

    for k in (1, 3):
        report = await run_eval(
            wl, tasks, gold(wl, latency=0.05), arms=["single"], out_dir=tmp_path, run_id=f"k{k}", concurrent_episodes=k
        )
        assert [r.task_id for r in report.rows] == [t.id for t in tasks]  # the report keeps task order
    assert overlaps(1) == 0 and overlaps(3) >= 1
    assert {r.concurrent_episodes for r in read_raw(tmp_path / "k3" / RAW_FILE)[0]} == {3}


def test_cli_banner_progress_traces_resume_and_report(tmp_path: Path) -> None:
    args = ["eval", "-w", "bfcl-parallel", "-b", "gold", "-n", "2", "-o", str(tmp_path), "--run-id", "c", "--seed", "3"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    err = " ".join(r.stderr.split())
    assert "swarm eval · bfcl-parallel · split dev · seed 3 · n 2 · arms swarm,single" in err
    assert "budgets swarm: critical 12, sub-agent steps 4; single: critical 12" in err
    assert "[1/4]" in err and "[4/4]" in err and "ETA" in err and "commit" in err
    assert "| swarm vs single | 2 |" in r.stdout and "not a headline" in r.stdout  # the paired comparison
    traces = sorted((tmp_path / "c" / "episodes").glob("*/*/trace.jsonl"))
    assert len(traces) == 4 and all(p.stat().st_size > 0 for p in traces)
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    assert "run c: 0 episode(s) to run" in again.stderr and "4 already done" in again.stderr
    other = runner.invoke(app, [*args, "--resume", "--max-critical-steps", "30"])
    assert other.exit_code == 2 and "overrides.max_critical_steps" in other.output
    report = runner.invoke(app, ["eval", "--report", str(tmp_path / "c")])
    assert report.exit_code == 0, report.output
    assert "## bfcl-parallel · dev split · seeds 3" in report.stdout and "| swarm vs single | 2 |" in report.stdout
    missing = runner.invoke(app, ["eval", "--report", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a swarm eval run directory" in missing.output
    parsed = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert parsed["split"] == "dev" and parsed["seed"] == 3


async def test_samples_repeat_each_task_with_moved_sampling_seeds(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(2, seed=0)
    sampling = SamplingParams(temperature=0.7, seed=5)
    over = {"orchestrator_sampling": sampling, "subagent_sampling": sampling}
    report = await run_eval(
        wl, tasks, gold(wl), arms=["single"], out_dir=tmp_path, run_id="s", samples=3, overrides=over
    )
    rows = read_raw(tmp_path / "s" / RAW_FILE)[0]
    assert sorted((r.task_id, r.sample) for r in rows) == sorted((t.id, i) for t in tasks for i in range(3))
    assert {r.episode_id for r in rows if r.sample == 2} == {f"{t.id}-single-r2" for t in tasks}
    assert {r.config["orchestrator_sampling"]["seed"] for r in rows} == {5, 6, 7}
    assert len(report.rows) == 6 and read_manifest(tmp_path / "s").samples == 3
    text = render_report(load_runs([tmp_path / "s"]))
    assert "(repeats 1.000–1.000, 3 repeats; 0 of 2 tasks differ)" in text


def test_a_test_seed_is_used_once_when_a_ledger_is_kept(tmp_path: Path) -> None:
    ledger = tmp_path / "test_seeds.jsonl"
    args = ["eval", "-w", "bfcl-parallel", "-b", "gold", "-n", "1", "--split", "test", "--seed", "4", "-q"]
    args += ["--mode", "single", "-o", str(tmp_path), "--test-seed-ledger", str(ledger)]
    first = runner.invoke(app, [*args, "--run-id", "a"])
    assert first.exit_code == 0, first.output
    assert [json.loads(line)["seed"] for line in ledger.read_text().splitlines()] == [4]
    again = runner.invoke(app, [*args, "--run-id", "b"])
    said = " ".join(again.output.split())
    assert again.exit_code == 2 and "test seed 4 of bfcl-parallel with knobs" in said and "already used" in said
    resumed = runner.invoke(app, [*args, "--run-id", "a", "--resume"])  # the run that used it may go on
    assert resumed.exit_code == 0, resumed.output
    assert len(ledger.read_text().splitlines()) == 1


def test_a_test_seed_is_burnt_for_its_knobs_only(tmp_path: Path) -> None:
    """A width curve runs one seed at several widths: each width's tasks are fresh, a repeat is not."""
    ledger = tmp_path / "test_seeds.jsonl"
    args = ["eval", "-w", "wide-research", "-b", "gold", "-n", "1", "--split", "test", "--seed", "3", "-q"]
    args += ["--mode", "single", "-o", str(tmp_path), "--test-seed-ledger", str(ledger)]
    assert runner.invoke(app, [*args, "--knob", "entities=2", "--run-id", "n2"]).exit_code == 0
    assert runner.invoke(app, [*args, "--knob", "entities=3", "--run-id", "n3"]).exit_code == 0
    again = runner.invoke(app, [*args, "--knob", "entities=2", "--run-id", "n2b"])
    assert again.exit_code == 2 and "test seed 3 of wide-research with knobs" in " ".join(again.output.split())
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["seed"], e["knobs"]["entities"]) for e in entries] == [(3, 2), (3, 3)]
    # Which search hits show a snippet changes the tools, not the tasks: the seed's tasks are used.
    tools = runner.invoke(app, [*args, "--knob", "entities=2", "--knob", "snippets=all", "--run-id", "n2c"])
    assert tools.exit_code == 2 and "already used" in " ".join(tools.output.split())
    assert all("snippets" not in e["knobs"] for e in entries)


async def test_each_arm_runs_its_own_protocol_on_the_same_tasks(tmp_path: Path) -> None:
    """single: one direct call per turn; single-parallel: every call of a turn; both without sub-agents,
    whatever a config or flag says (the arm defines it)."""
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(2, seed=0)
    over = {"parallel_tool_calls": True}  # a flag cannot turn the single arm into the other one
    report = await run_eval(wl, tasks, gold(wl), arms=parse_arms("all"), out_dir=tmp_path, run_id="a", overrides=over)
    rows = read_raw(tmp_path / "a" / RAW_FILE)[0]
    protocol = {(r.arm, r.config["subagents"], r.config["parallel_tool_calls"]) for r in rows}
    assert protocol == {("swarm", True, True), ("single", False, False), ("single-parallel", False, True)}
    assert {r.task_id for r in rows if r.arm == "single-parallel"} == {t.id for t in tasks}
    assert list(report.summaries) == ["swarm", "single", "single-parallel"]
    assert all(s.metric == 1.0 for s in report.summaries.values())


async def test_one_run_is_written_by_one_process_at_a_time(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(2, seed=0)
    errors: list[str] = []
    async with anyio.create_task_group() as tg:
        holding = anyio.Event()  # on_start: the first run holds the directory

        async def first() -> None:
            slow = gold(wl, latency=0.2)
            await run_eval(
                wl, tasks, slow, arms=["single"], out_dir=tmp_path, run_id="r", on_start=lambda *_: holding.set()
            )

        tg.start_soon(first)
        with anyio.fail_after(10):
            await holding.wait()
        try:
            await run_eval(wl, tasks, gold(wl), arms=["single"], out_dir=tmp_path, run_id="r", resume=True)
        except ConfigError as exc:
            errors.append(str(exc))
    assert errors and "in use by another swarm eval" in errors[0]
    rows = read_raw(tmp_path / "r" / RAW_FILE)[0]
    assert sorted(r.task_id for r in rows) == sorted(t.id for t in tasks)  # written once each
    again = await run_eval(wl, tasks, gold(wl), arms=["single"], out_dir=tmp_path, run_id="r", resume=True)
    assert len(again.rows) == 2  # the lock went with the first run


def test_provenance_names_the_model_and_adapter_files(tmp_path: Path) -> None:
    adapter = tmp_path / "adapter.gguf"
    adapter.write_bytes(b"lora weights")
    pair = (FunctionBackend(lambda r: Completion(text=""), model="qwen2.5-coder-0.5b"), None)
    p = provenance("local", pair, {"backend": {"orchestrator_adapter": str(adapter)}})
    assert p.model_sha256 == LOCAL_MODELS["qwen2.5-coder-0.5b"].sha256 == p.subagent_model_sha256
    assert p.adapter == str(adapter)
    assert p.adapter_sha256 == hashlib.sha256(b"lora weights").hexdigest()
    none = provenance("local", pair, {"backend": {"orchestrator_adapter": "none"}})
    assert none.adapter is None and none.adapter_sha256 is None
    scripted = provenance("gold", pair, {})
    assert scripted.model_sha256 is None and scripted.backend == "gold"


def _terminated_after_an_episode(args: list[str], raw: Path) -> str:
    """``swarm eval ARGS`` in a process of its own, sent SIGTERM (as `timeout` sends) once ``raw`` holds
    an episode; asserts it exits 130 and returns its stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not (raw.exists() and read_raw(raw)[0]) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    return stderr


def test_a_terminated_cli_run_keeps_its_episodes_and_resumes(tmp_path: Path) -> None:
    """SIGTERM (as `timeout` sends) mid-run: exit 130 with the resume hint; --resume runs the rest once."""
    args = ["eval", "-w", "bfcl-parallel", "-b", "gold", "--latency", "0.3", "-n", "4", "--mode", "single"]
    args += ["-o", str(tmp_path), "--run-id", "t", "-q"]
    raw = tmp_path / "t" / RAW_FILE
    stderr = _terminated_after_an_episode(args, raw)
    assert "--run-id t --resume" in " ".join(stderr.split())
    kept = read_raw(raw)[0]
    assert 1 <= len(kept) < 4
    again = runner.invoke(app, [*args, "--resume"])
    assert again.exit_code == 0, again.output
    rows, bad = read_raw(raw)
    assert bad == 0 and sorted(r.task_id for r in rows) == sorted({r.task_id for r in rows}) and len(rows) == 4
    assert rows[: len(kept)] == kept  # the finished episodes were not run again


def test_a_test_seed_is_burnt_when_its_run_starts_not_when_it_ends(tmp_path: Path) -> None:
    """A test run stopped half-way (SIGTERM, as `timeout` sends) has used its seed: another run of it is
    refused, and only its own --resume goes on."""
    ledger = tmp_path / "test_seeds.jsonl"
    args = ["eval", "-w", "bfcl-parallel", "-b", "gold", "--latency", "0.3", "-n", "4", "--mode", "single"]
    args += ["--split", "test", "--seed", "9", "-o", str(tmp_path), "--test-seed-ledger", str(ledger), "-q"]
    _terminated_after_an_episode([*args, "--run-id", "t"], tmp_path / "t" / RAW_FILE)
    assert [json.loads(line)["seed"] for line in ledger.read_text().splitlines()] == [9]
    other = runner.invoke(app, [*args, "--run-id", "u"])
    assert other.exit_code == 2 and "already used" in " ".join(other.output.split())
    resumed = runner.invoke(app, [*args, "--run-id", "t", "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert len(ledger.read_text().splitlines()) == 1


async def test_a_config_field_added_by_a_later_commit_does_not_stop_a_resume(tmp_path: Path) -> None:
    wl = get_workload("bfcl-parallel")
    tasks = wl.tasks(2, seed=0)
    await run_eval(wl, tasks, gold(wl), arms=["single"], out_dir=tmp_path, run_id="r")
    path = tmp_path / "r" / "manifest.json"
    old = json.loads(path.read_text())
    # as written by code without SwarmConfig.coach: no such key, and another full-config digest
    del old["settings"]["base_config"]["coach"]
    old["settings"]["episode_configs_sha256"] = "0" * 64
    path.write_text(json.dumps(old))
    again = await run_eval(wl, tasks, gold(wl), arms=["single"], out_dir=tmp_path, run_id="r", resume=True)
    assert len(again.rows) == 2
    old["settings"]["episode_configs_nondefault_sha256"] = "0" * 64  # a value that differs still does
    path.write_text(json.dumps(old))
    with pytest.raises(ConfigError, match="episode_configs_nondefault_sha256"):
        await run_eval(wl, tasks, gold(wl), arms=["single"], out_dir=tmp_path, run_id="r", resume=True)


async def test_concurrent_episodes_share_one_subagent_cap(tmp_path: Path) -> None:
    wl = get_workload("wide-lookup")
    tasks = wl.tasks(3, seed=0)
    now = peak = 0

    def resolve(task: Task, mode: Mode) -> tuple[Any, Any]:
        p = wl.gold_policy(task, mode, latency_s=0.02)

        async def gauged(request: Any) -> Completion:
            nonlocal now, peak
            now += 1
            peak = max(peak, now)
            try:
                return await p.subagent.complete(request)
            finally:
                now -= 1

        return p.orchestrator, FunctionBackend(gauged, model=p.subagent.model)

    report = await run_eval(wl, tasks, resolve, arms=["swarm"], overrides={"max_concurrency": 2}, concurrent_episodes=3)
    assert all(r.error is None for r in report.rows)
    assert peak == 2  # three episodes at once, one cap of 2 over all their sub-agents
