"""The soak's checker (``bench/soak_check.py``) fails on each planted defect's signature and names the
stop that excuses what it excuses; and, slow, the real 2-minute CI soak fails ``--check`` with each of
the three defects planted in its rollout process (``SWARM_SOAK_PLANT``).

The fast tests feed the checker small hand-made logs of three rollout processes (kill -9, kill -9,
final SIGINT): the server's requests per episode and what the rollout recorded."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_check", ROOT / "bench" / "soak_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak_check"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


sc = _load()
LIFETIMES = [
    {"started": 0.0, "ended": 40.0, "stopped_by": "kill -9"},
    {"started": 41.0, "ended": 80.0, "stopped_by": "kill -9"},
    {"started": 81.0, "ended": 120.0, "stopped_by": "SIGINT"},
]
START = 1000.0
KEYS = [(f"t{n}", j) for n in range(6) for j in range(2)]  # file order: t0/0, t0/1, t1/0, ...
ORDER = {k: i for i, k in enumerate(KEYS)}
SEED = {100 + i: k for i, k in enumerate(KEYS)}


def req(t: float, key: tuple[str, int], fault: str = "", h: str | None = None, kind: str = "o") -> dict[str, Any]:
    return {"t": START + t, "k": kind, "h": h or f"{key}-{t}", "seed": 100 + ORDER[key], "f": fault}


def clean_run() -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Process 0 records episodes 0-3 and is killed in 4-5; process 1 reruns 4-5 and records them,
    records 6-7 and is killed in 8; process 2 reruns 8, records it, and the SIGINT cuts 9."""
    runs = {0: [0, 1, 2, 3, 4, 5], 1: [4, 5, 6, 7, 8], 2: [8, 9]}
    span = {0: 0.0, 1: 41.0, 2: 81.0}
    reqs = [req(span[p] + 1 + 2 * n, KEYS[i]) for p, idx in runs.items() for n, i in enumerate(idx)]
    return reqs, [KEYS[i] for i in (0, 1, 2, 3, 4, 5, 6, 7, 8)]


def episodes(reqs: list[dict[str, Any]], entries: list[tuple[str, int]], failed: frozenset[Any] = frozenset()) -> Any:
    lives = sc.Lives.of(START, LIFETIMES)
    ledger = sc.Ledger.of(reqs, SEED, ORDER, lives)
    return sc.check_episodes(ledger, lives, entries, set(failed), 2)


def test_a_clean_run_passes_and_each_cut_episode_names_its_stop() -> None:
    reqs, entries = clean_run()
    problems, excused = episodes(reqs, entries)
    assert problems == []
    assert excused == [{"episode": ["t4", 1], "cut_by": "the final SIGINT at +120s"}]


def test_an_episode_dropped_on_resume_fails() -> None:
    reqs, entries = clean_run()
    # process 1 skips episode 4 (cut by kill #1): it runs 5, 6, 7, 8 and 4 is never recorded
    reqs = [r for r in reqs if not (r["seed"] == 104 and r["t"] > START + 41)]
    entries.remove(KEYS[4])
    problems, _ = episodes(reqs, entries)
    assert len(problems) == 1 and "dropped on resume" in problems[0] and "t2" in problems[0]
    assert "kill -9 #2" in problems[0]  # the process that overtook it


def test_a_lost_duplicated_or_phantom_episode_fails() -> None:
    reqs, entries = clean_run()
    problems, _ = episodes(reqs, [*entries, KEYS[3]])
    assert problems and "written twice" in problems[0]
    problems, _ = episodes(reqs, [*entries, KEYS[11]])
    assert problems and "never reached the server" in problems[0]
    exited = [*LIFETIMES[:2], {**LIFETIMES[2], "stopped_by": "exited"}]
    lives = sc.Lives.of(START, exited)
    problems, _ = sc.check_episodes(sc.Ledger.of(reqs, SEED, ORDER, lives), lives, entries, set(), 2)
    assert problems and "exited by itself" in problems[0]


def record(status: str = "completed", started: float = 0.0, subs: tuple[tuple[str, str], ...] = ()) -> Any:
    return SimpleNamespace(
        status=SimpleNamespace(value=status),
        started_at=START + started,
        subagent_results=[SimpleNamespace(task=t, status=SimpleNamespace(value=s)) for t, s in subs],
    )


def retries(reqs: list[dict[str, Any]], recorded_by: dict[Any, Any]) -> Any:
    lives = sc.Lives.of(START, LIFETIMES)
    ledger = sc.Ledger.of([r for r in reqs if r["k"] == "o"], SEED, ORDER, lives)
    return sc.check_retries(reqs, ledger, lives, recorded_by, 6)


def test_a_429_never_retried_in_an_episode_its_process_recorded_fails() -> None:
    key = KEYS[0]
    fault = req(5, key, "429", h="a")
    problems, _, figures = retries([fault, req(6, key, h="b")], {(key, 0): record()})
    assert problems and "never retried" in problems[0]
    assert figures["by_kind"]["429"] == {"injected": 1, "retried": 0}
    problems, _, figures = retries([fault, req(5.1, key, h="a")], {(key, 0): record()})  # retried
    assert problems == [] and figures["by_kind"]["429"] == {"injected": 1, "retried": 1}


def test_every_excused_fault_names_its_cause() -> None:
    cut = req(39, KEYS[4], "500", h="cut")  # process 0 was killed before it recorded episode 4
    spent = [req(60 + n, KEYS[6], "500", h="spent") for n in range(7)]  # 7 attempts: the retries ran out
    worker = {**req(62, KEYS[7], "hang", h="w", kind="s"), "i": 3}
    recorded = {
        (KEYS[6], 1): record(started=50),
        (KEYS[7], 1): record(started=50, subs=(("item 3: multiply 2 by 3", "timeout"),)),
        (KEYS[4], 1): record(started=45),
    }
    problems, excused, _ = retries([cut, *spent, worker, req(70, KEYS[7])], recorded)
    assert problems == []
    assert [e["excused_by"] for e in excused] == [
        "kill -9 #1 at +40s",
        "its call gave up after 7 attempts (the retries ran out)",
        "its sub-agent (item 3) ended timeout",
    ]
    # the same worker fault, its sub-agent completed: not excused
    recorded[KEYS[7], 1] = record(started=50, subs=(("item 3: multiply 2 by 3", "completed"),))
    problems, _, _ = retries([worker], recorded)
    assert problems and "never retried" in problems[0]


def test_statuses_are_bounded_by_the_fault_rates() -> None:
    assert sc.status_bound(100, 5, 0.1, 6) == 1  # 5e-5 expected failures: one is allowed
    assert sc.status_bound(10_000, 4, 0.5, 6) > 300  # q^7 = 0.8 %: ~310 expected
    done = [record() for _ in range(20)]
    assert sc.check_statuses(done, 0.1, 6, 5, 4)[0] == []
    problems, figures = sc.check_statuses([record("failed") for _ in range(20)], 0.1, 6, 5, 4)
    assert problems and "20 of 20 episodes did not complete" in problems[0] and figures["allowed"] == 1
    subs = [record(subs=tuple((f"item {i}: x", "failed") for i in range(5))) for _ in range(4)]
    problems, _ = sc.check_statuses(subs, 0.1, 6, 5, 4)
    assert problems and "20 of 20 sub-agents failed" in problems[0]


def samples(n: int, kind: Any, fds: Any = lambda i: 80, rss: Any = lambda i: 300.0) -> list[dict[str, Any]]:
    return [
        {
            "up_s": 2.0 * i,
            "by_kind": {"_run_limited": (i % 3) * 1024, **kind(i)},  # a 1,024-wide stage coming and going
            "fds": fds(i),
            "rss_mb": rss(i),
        }
        for i in range(n)
    ]


def resources(per_life: list[list[dict[str, Any]]], min_minutes: float = 3.0) -> Any:
    return sc.check_resources(per_life, 10.0, 60.0, 3.0, min_minutes, lambda pts: _slope(pts), 2, 1024)


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mx, my = sum(p[0] for p in points) / n, sum(p[1] for p in points) / n
    return 60 * sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def test_a_task_leaked_per_episode_or_a_growing_fd_count_fails_and_a_wide_stage_does_not() -> None:
    flat = samples(20, lambda i: {"Orchestrator.run": 2 - (i % 3 == 0) * 2 + (i % 5 == 0)})  # 0 to 3
    assert resources([flat])[0] == []
    leak = samples(20, lambda i: {"Orchestrator.run": 2, "Event.wait": i // 2})  # one more per episode
    problems, _ = resources([flat, leak])
    assert (
        len(problems) == 1 and problems[0].startswith("process 1: tasks kept growing") and "Event.wait" in problems[0]
    )
    short = samples(12, lambda i: {"Orchestrator.run": 2, "Event.wait": 2 + (i > 7) + (i > 9)})  # two episodes
    problems, _ = resources([short])
    assert len(problems) == 1 and "'Event.wait': (2, 4)" in problems[0]
    fds = samples(20, lambda i: {}, fds=lambda i: 80 + i)
    problems, rows = resources([fds])
    assert problems and "open fds kept growing" in problems[0] and rows[0]["fds_judged"] is True


def test_fds_are_judged_only_with_five_settled_samples_per_third() -> None:
    # fds follow the connections in flight: 16-50 within one process of the CI soak. Three samples in a
    # lull, then three in a busy moment, are not a leak; fifteen against fifteen that grow are.
    noisy = [30, 31, 29, 44, 35, 40, 38, 33, 40, 38, 50]  # 11 settled samples: 3 per third
    short = samples(16, lambda i: {}, fds=lambda i: noisy[i - 5] if i >= 5 else 30)
    problems, rows = resources([short])
    assert problems == [] and rows[0]["fds_judged"] is False
    assert sc._grows([float(x) for x in noisy], sc.FD_SLACK, monotone=False) == (31, 38)  # what it read before
    growing = samples(20, lambda i: {}, fds=lambda i: 30 + 2 * i)  # 15 settled samples: 5 per third
    problems, rows = resources([growing])
    assert len(problems) == 1 and "open fds kept growing" in problems[0] and rows[0]["fds_judged"] is True


def test_a_stage_sampled_in_its_tail_then_in_its_middle_is_not_a_leak_but_a_leak_past_half_a_stage_is() -> None:
    # CI, commit 12ca457: a 31-second process sampled three times in a stage's tail (at most 51 sub-agents
    # left), then three times in the next stage's middle (73 or more) read as "tasks kept growing".
    stage = [1900, 1400, 900, 400, 200, 51, 30, 12, 900, 400, 950, 420, 980, 300, 73, 80]  # settled from the 6th
    short = [{"up_s": 2.0 * i, "by_kind": {"_run_limited": v}, "fds": 80, "rss_mb": 300.0} for i, v in enumerate(stage)]
    problems, rows = resources([short])
    assert problems == [] and rows[0]["fan_out_kinds_not_judged"] == ["_run_limited"]
    # A kind is a stage's sub-agents because it fell by more than half a stage, not by its name: one that
    # only grows (a leak, past 512) is judged, and a 1,024-wide kind elsewhere in the run does not excuse it.
    leak = samples(20, lambda i: {"Orchestrator.run": 2, "Event.wait": 100 * i})
    problems, rows = resources([leak])
    assert len(problems) == 1 and "'Event.wait': (900, 1500)" in problems[0]
    assert rows[0]["fan_out_kinds_not_judged"] == ["_run_limited"]
    dipping = samples(20, lambda i: {"Event.wait": 2 + i if i != 14 else 2})  # fell by 14: still judged
    problems, _ = resources([dipping])
    assert len(problems) == 1 and "Event.wait" in problems[0]
    assert sc.fan_out_kinds([short], 1024) == {"_run_limited"} and sc.fan_out_kinds([short], 4000) == set()


def test_rss_is_held_to_a_slope_after_warm_up_in_processes_long_enough() -> None:
    growing = samples(200, lambda i: {}, rss=lambda i: 300 + 0.2 * i)  # 6 MB/min over 5.6 min after warm-up
    problems, rows = resources([growing])
    assert problems and "RSS grew 6.00 MB/min" in problems[0] and rows[0]["rss_slope_checked_over_min"] == 5.6
    short = samples(60, lambda i: {}, rss=lambda i: 300 + 0.2 * i)  # 1.9 min: not long enough to judge
    problems, rows = resources([short])
    assert problems == [] and rows[0]["rss_slope_checked_over_min"] is None


# -- the real soak, with each defect planted (2 minutes, 3 kills each: the CI run) ---------------------

PLANTED = {
    "drop-on-resume": "dropped on resume",
    "no-retry-429": "retryable faults were never retried",
    "leak-task": "tasks kept growing",
}


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(600)
@pytest.mark.parametrize("plant", sorted(PLANTED))
def test_the_ci_soak_fails_with_each_planted_defect(tmp_path: Path, plant: str) -> None:
    env = {**os.environ, "SWARM_SOAK_PLANT": plant, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "bench" / "soak.py"), "--minutes", "2", "--kills", "3", "--check"]
    proc = subprocess.run([*cmd, "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=580)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, report["problems"]
    assert any(PLANTED[plant] in p for p in report["problems"]), report["problems"]
