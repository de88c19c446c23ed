"""`swarm rollout --ray` end to end on the scripted demo policy: same files as without Ray; Ctrl-C
stops the actors and keeps every finished episode; a re-run resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.cli import app, optional_value
from agent_swarm.swarm.rl.export import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.integration]

TASKS = [
    {
        "id": "a",
        "prompt": "capitals",  # the scripted backend plays the built-in demo tasks only
        "verifier": "instructions",
        "verifier_args": {"constraints": [{"type": "contains", "phrases": ["Paris"]}]},
    },
    {"id": "b", "prompt": "capitals", "verifier": "exact", "verifier_args": {"expected": "nope"}},
]


def task_file(tmp_path: Path) -> Path:
    p = tmp_path / "tasks.jsonl"
    p.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    return p


def test_a_bare_ray_flag_means_a_local_ray() -> None:
    argv = ["swarm", "rollout", "-t", "x", "--ray"]
    assert optional_value(argv, "rollout", "--ray", "local") == [*argv, "local"]
    argv = ["swarm", "rollout", "--ray", "-t", "x"]
    assert optional_value(argv, "rollout", "--ray", "local") == ["swarm", "rollout", "--ray", "local", "-t", "x"]
    argv = ["swarm", "rollout", "--ray", "auto", "-t", "x"]
    assert optional_value(argv, "rollout", "--ray", "local") == argv
    assert optional_value(["swarm", "run", "--ray"], "rollout", "--ray", "local") == ["swarm", "run", "--ray"]


def test_rollout_on_ray_writes_what_a_rollout_without_it_writes(tmp_path: Path, ray: Any) -> None:
    runner = CliRunner()
    tasks = task_file(tmp_path)
    common = ["rollout", "--backend", "scripted", "-q", "--tasks", str(tasks), "-k", "3", "--json"]
    plain = runner.invoke(app, [*common, "--out", str(tmp_path / "plain")])
    on_ray = runner.invoke(app, [*common, "--out", str(tmp_path / "ray"), "--ray", "local", "--ray-actors", "2"])
    assert plain.exit_code == 0 and on_ray.exit_code == 0, on_ray.output
    a, b = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (plain, on_ray))
    for k in ("episodes", "trajectories", "mean_reward", "mean_critical_steps", "statuses", "groups_complete"):
        assert a[k] == b[k], k
    assert b["episodes"] == 6


def _sigint_default() -> None:
    # A background job of a non-interactive shell inherits SIGINT ignored (then Python installs no
    # KeyboardInterrupt handler); this test is about the driver's reaction, so it gets a normal one.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_the_driver_stops_the_actors_and_keeps_finished_episodes(
    tmp_path: Path, sig: signal.Signals
) -> None:
    out = tmp_path / "out"
    args = [sys.executable, "-m", "orchestrator", "rollout", "--backend", "scripted", "-q"]
    args += ["--tasks", str(task_file(tmp_path)), "--out", str(out), "-k", "8", "--concurrent-episodes", "2"]
    args += ["--ray", "--ray-actors", "2"]  # a bare --ray: a local Ray of this run's own
    env = {**os.environ, "SWARM_DEMO_LATENCY": "0.3", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default
    )
    episodes = out / "episodes.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # wait until some, not all, episodes are on disk
        if episodes.exists() and episodes.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"no episode finished: {proc.communicate()[1][-2000:]}")
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-3000:]
    assert "re-run the same command to resume" in stderr
    kept = read_jsonl(episodes)  # every line a whole record, none twice
    assert 2 <= len(kept) < 16
    assert max(Counter((e["group_id"], e["sample_index"]) for e in kept).values()) == 1
    assert json.loads((out / "summary.json").read_text())["episodes"] == len(kept)
    # The run's local Ray and its actors are gone with it.
    time.sleep(1.0)
    ps = subprocess.run(["ps", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout
    assert f" {proc.pid} " not in ps
    assert "ray::EpisodeWorker" not in ps
    if sig is signal.SIGTERM:
        return  # resuming on Ray is the same for both signals: checked once
    resumed = subprocess.run(
        [*args, "--json"], env={**env, "SWARM_DEMO_LATENCY": "0"}, capture_output=True, text=True, timeout=180
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (final["episodes_resumed"], final["episodes_run"], final["trajectories"]) == (len(kept), 16 - len(kept), 16)


def test_a_local_ray_runs_its_workers_at_the_drivers_priority() -> None:
    """Ray starts workers 15 nice levels below the raylet by default, so on a shared machine the actors,
    which do all the episodes' work, were starved while the driver, which only writes files, was not
    (`nice -n 5 swarm rollout --ray` ran its actors at nice 19)."""
    code = (
        "import os, ray\n"
        "from agent_swarm.orchestrator.cluster import RayCluster\n"
        "os.nice(5)\n"
        "RayCluster(num_cpus=1).connect()\n"
        "level = ray.remote(num_cpus=0)(lambda: os.nice(0))\n"
        "print(os.nice(0), ray.get(level.remote()))\n"
        "ray.shutdown()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    driver, worker = map(int, out.stdout.split()[-2:])
    assert worker == driver >= 5
