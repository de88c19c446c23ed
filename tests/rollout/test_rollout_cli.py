"""`swarm rollout` end to end on the scripted demo policy (no model needed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.rl.export import read_jsonl, read_trajectories

runner = CliRunner()

GOOD = [
    {
        "id": "table",
        "prompt": "capitals",  # the scripted backend plays the built-in demo tasks only
        "verifier": "instructions",
        "verifier_args": {"constraints": [{"type": "contains", "phrases": ["Paris"]}, {"type": "bullets", "min": 1}]},
    },
    {"id": "exact", "prompt": "capitals", "verifier": "exact", "verifier_args": {"expected": "nope"}},
]


def task_file(tmp_path: Path, extra_lines: tuple[str, ...] = ()) -> Path:
    p = tmp_path / "tasks.jsonl"
    p.write_text("\n".join([json.dumps(GOOD[0]), *extra_lines, json.dumps(GOOD[1])]) + "\n")
    return p


def rollout(*args: str) -> Result:
    return runner.invoke(app, ["rollout", "--backend", "scripted", "--quiet", *args])


def test_rollout_writes_trajectories_and_a_summary_then_resumes(tmp_path: Path) -> None:
    tasks, out = task_file(tmp_path), tmp_path / "out"
    r = rollout("--tasks", str(tasks), "--group-size", "3", "--out", str(out), "--json", "--parquet")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert (summary["tasks"], summary["episodes"], summary["trajectories"]) == (2, 6, 6)
    # r_parallel's default form (coverage): these tasks name no parts, so the target (4) stands in; nine
    # distinct sub-tasks in one stage, eight finished: (min(8, 4) - 0.5 * 5 invented) / 4
    assert summary["mean_r_parallel"] == pytest.approx(0.375) and summary["mean_parallel_width"] > 1
    trajs = read_trajectories(out / "trajectories.jsonl")
    assert {t.group_id for t in trajs} == {"table", "exact"} and all(t.advantage is not None for t in trajs)
    assert (out / "trajectories.parquet").exists() and (out / "summary.json").exists()
    again = rollout("--tasks", str(tasks), "-k", "3", "--out", str(out), "--json")
    assert again.exit_code == 0
    resumed = json.loads(again.stdout.strip().splitlines()[-1])
    assert (resumed["episodes_run"], resumed["episodes_resumed"]) == (0, 6)
    assert len(read_jsonl(out / "episodes.jsonl")) == 6


def test_lambda_options_reach_the_reward_records(tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = rollout(
        "--tasks",
        str(task_file(tmp_path)),
        "-k",
        "1",
        "--out",
        str(out),
        "--schedule",
        "cosine",
        "--lambda1",
        "0.4",
        "--lambda2",
        "0.2",
        "--lambda-steps",
        "10",
        "--step",
        "5",
        "--parallel-form",
        "any",
    )
    assert r.exit_code == 0, r.output
    rw = read_trajectories(out / "trajectories.jsonl")[0].reward
    assert (rw.lambda1, rw.lambda2, rw.step, rw.r_parallel) == (pytest.approx(0.2), pytest.approx(0.1), 5, 1.0)


def test_malformed_lines_are_skipped_or_fail_the_run_per_flag(tmp_path: Path) -> None:
    tasks = task_file(tmp_path, ("{broken", json.dumps({"id": "z", "prompt": "p", "verifier": "nope"})))
    ok = rollout("--tasks", str(tasks), "-k", "1", "--out", str(tmp_path / "a"), "--json")
    assert ok.exit_code == 0
    assert "tasks.jsonl:2: invalid JSON" in ok.stderr and "tasks.jsonl:3: unknown verifier 'nope'" in ok.stderr
    assert [p["line"] for p in json.loads(ok.stdout.strip().splitlines()[-1])["skipped_lines"]] == [2, 3]
    bad = rollout("--tasks", str(tasks), "-k", "1", "--out", str(tmp_path / "b"), "--on-malformed", "fail")
    assert bad.exit_code == 2 and "tasks.jsonl:2: invalid JSON" in bad.stderr
    assert not (tmp_path / "b").exists()


def test_bad_options_exit_2_with_a_message(tmp_path: Path) -> None:
    tasks = task_file(tmp_path)
    r = rollout("--tasks", str(tasks), "--out", str(tmp_path / "o"), "--schedule", "sqrt")
    assert r.exit_code == 2 and "unknown schedule 'sqrt'" in r.stderr
    r = rollout("--tasks", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "does not exist" in r.stderr
    rollout("--tasks", str(tasks), "-k", "1", "--out", str(tmp_path / "o"))
    r = rollout("--tasks", str(tasks), "-k", "2", "--out", str(tmp_path / "o"))
    assert r.exit_code == 2 and "group_size 1 → 2" in r.stderr


def _sigint_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # how a non-interactive shell starts `cmd &`


@pytest.mark.parametrize(("sig", "ignored"), [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)])
def test_interrupt_keeps_finished_episodes_and_a_rerun_resumes(
    tmp_path: Path, sig: signal.Signals, ignored: bool
) -> None:

    tasks, out = task_file(tmp_path), tmp_path / "out"
    args = [
        sys.executable,
        "-m",
        "orchestrator",
        "rollout",
        "--backend",
        "scripted",
        "-q",
        "--tasks",
        str(tasks),
        "--out",
        str(out),
        "-k",
        "6",
        "--concurrent-episodes",
        "2",
    ]
    env = {**os.environ, "SWARM_DEMO_LATENCY": "0.2", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        args,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_ignored if ignored else None,
    )
    episodes = out / "episodes.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until some, not all, episodes are on disk
        if episodes.exists() and episodes.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("no episode finished")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "re-run the same command to resume" in stderr
    kept = read_jsonl(episodes)  # every line is a whole record
    assert 2 <= len(kept) < 12
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == len(kept)
    resumed = subprocess.run(
        [*args, "--json"], env={**env, "SWARM_DEMO_LATENCY": "0"}, capture_output=True, text=True, timeout=120
    )
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (final["episodes_resumed"], final["episodes_run"], final["trajectories"]) == (len(kept), 12 - len(kept), 12)
