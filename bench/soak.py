"""Soak: `swarm rollout` at 1,024-way fan-out against a fault-injecting server, killed and resumed.

    nice -n 10 python bench/soak.py --minutes 30 --out /tmp/soak      # the full soak (figures in README)
    python bench/soak.py --minutes 2 --check                           # CI: fail on a broken invariant

What runs: ``bench/fault_server.py`` (a separate process, the model) answers every chat request with a
fresh fan-out policy and injects faults (5 % HTTP 500, 2 % 429, 2 % non-JSON 200 bodies, 2 % malformed
tool calls, 1 % hangs past the client's timeout). ``swarm rollout`` (the real CLI: ``orchestrator.cli.main``
in a child process, with a probe thread sampling RSS, the allocators' counts and GC passes (see
``_MemoryProbe``), open fds, threads and asyncio tasks) collects K episodes per task into one output
directory; each episode's first stage assigns ``--fanout`` tasks at once. At ``--kills`` random
moments the child gets ``kill -9`` and the same command is started again (resume); at the end it gets
SIGINT (Ctrl-C) and stops as a user's run would.

What is checked (``--check`` exits 1 when one fails; the report is JSON on stdout and in OUT/report.json):

* every episode the server saw start is recorded (episodes.jsonl or failures.jsonl with a reason) or
  was in flight when a kill or the final stop came (it runs again on resume); none is written twice;
* every entry written before a kill is still there after the resume; every trajectory is valid or its
  failure is recorded with a reason; the CLI never crashed (only the kills and the final Ctrl-C ended it);
* every retryable fault (500, 429, bad body, hang) was retried (the same request body came again)
  unless a kill or the stop cut it; every hang ended within the client's timeout (+1 s, + the event
  loop's lag, which a probe thread measures: a timer cannot fire while the loop does not run);
* RSS slope after warm-up, open fds and asyncio tasks by kind over time (reported; ``--check`` fails
  on fds or sub-agent tasks that keep growing).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "fault_server.py"
ORCHESTRATOR_PROMPT = (
    "You are the orchestrator of a swarm of sub-agents (soak test). Split the work into assign_task calls "
    "that run in parallel, then answer with the total."
)


# -- the child: `swarm rollout` with a probe -----------------------------------------------------------


def _child(probe_path: str, interval: float, argv: list[str]) -> None:
    """Run the swarm CLI with ``argv``; a thread samples the process every ``interval`` seconds."""
    loops: list[asyncio.AbstractEventLoop] = []

    class Recording(asyncio.DefaultEventLoopPolicy):  # see the loop anyio.run creates
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            loop = super().new_event_loop()
            loops.append(loop)
            return loop

    asyncio.set_event_loop_policy(Recording())
    out = open(probe_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - lives as long as the process
    t0 = time.time()
    memory = _MemoryProbe()

    def sample() -> None:
        while True:
            time.sleep(interval)
            memory.intervene()
            status = Path("/proc/self/status").read_text()
            rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:")) / 1024
            kinds: Counter[str] = Counter()
            loop = loops[-1] if loops else None
            if loop is not None and not loop.is_closed():
                for _ in range(3):  # the loop's thread changes the set while we copy it
                    try:
                        tasks = list(asyncio.all_tasks(loop))
                        break
                    except RuntimeError:
                        continue
                else:
                    tasks = []
                for task in tasks:
                    kinds[_task_kind(task)] += 1
            line = {
                "t": round(time.time(), 2),
                "up_s": round(time.time() - t0, 1),
                "rss_mb": round(rss, 1),
                **memory.sample(),
                "fds": len(os.listdir("/proc/self/fd")),
                "threads": threading.active_count(),
                "tasks": sum(kinds.values()),
                "by_kind": dict(kinds.most_common(8)),
            }
            out.write(json.dumps(line) + "\n")

    def lag() -> None:  # how late the event loop runs a callback: a timeout cannot fire any earlier
        lag_out = open(probe_path + ".lag", "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        while True:
            time.sleep(0.25)
            loop = loops[-1] if loops else None
            if loop is None or loop.is_closed():
                continue
            asked = time.time()
            ran = threading.Event()
            try:
                loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # closed meanwhile
                continue
            ran.wait(60.0)
            if time.time() - asked > 0.5:
                lag_out.write(json.dumps({"t": round(asked, 2), "lag_s": round(time.time() - asked, 2)}) + "\n")

    threading.Thread(target=sample, daemon=True).start()
    threading.Thread(target=lag, daemon=True).start()
    sys.argv = ["swarm", *argv]
    from orchestrator.cli import main

    main()


def _glibc() -> Any:
    """glibc through ctypes (``None`` elsewhere), with ``mallinfo2`` and ``malloc_trim`` typed."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "mallinfo2"):
        return None

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                         "fordblks", "keepcost")
        ]  # fmt: skip

    libc.mallinfo2.restype = MallInfo2
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    return libc


class _MemoryProbe:
    """What the allocators hold, sampled from the probe thread: glibc's heap over all arenas (in use,
    free, mmapped blocks: ``mallinfo2``), the process's anonymous memory (smaps_rollup), CPython's
    allocated blocks, and every cyclic-GC pass by generation with the objects it freed (garbage that
    reference counting could not free and that lives until such a pass comes).

    Two diagnostics, off unless set in the environment: ``SWARM_SOAK_TRIM_S=N`` calls glibc's
    ``malloc_trim(0)`` every N s (tells freed heap the allocator keeps from live native memory) and
    ``SWARM_SOAK_COLLECT_S=N`` runs a full collection every N s (tells cyclic garbage from live objects).
    """

    def __init__(self) -> None:
        self.libc = _glibc()
        self.trim_s = float(os.environ.get("SWARM_SOAK_TRIM_S", "0") or 0)
        self.collect_s = float(os.environ.get("SWARM_SOAK_COLLECT_S", "0") or 0)
        self.trimmed = self.collected = time.time()
        self.passes, self.freed = [0, 0, 0], [0, 0, 0]
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            self.passes[info["generation"]] += 1
            self.freed[info["generation"]] += info["collected"]

    def intervene(self) -> None:
        now = time.time()
        if self.collect_s and now - self.collected >= self.collect_s:
            self.collected = now
            gc.collect()
        if self.trim_s and self.libc is not None and now - self.trimmed >= self.trim_s:
            self.trimmed = now
            self.libc.malloc_trim(0)

    def sample(self) -> dict[str, Any]:
        info: dict[str, Any] = {"py_blocks": sys.getallocatedblocks()}
        if self.libc is not None:
            m = self.libc.mallinfo2()
            mb = 1024 * 1024
            info.update(
                heap_mb=round(m.arena / mb, 1),
                heap_used_mb=round(m.uordblks / mb, 1),
                heap_free_mb=round(m.fordblks / mb, 1),
                mmapped_mb=round(m.hblkhd / mb, 1),
            )
        try:
            rollup = Path("/proc/self/smaps_rollup").read_text().splitlines()
            info["anon_mb"] = round(next(int(x.split()[1]) for x in rollup if x.startswith("Anonymous:")) / 1024, 1)
        except (OSError, StopIteration):
            pass
        info.update(gc_passes=list(self.passes), gc_freed=list(self.freed))
        return info


def _task_kind(task: asyncio.Task[Any]) -> str:
    """The first coroutine of ours a task runs (anyio wraps each in ``TaskHandle._run_coro``)."""
    coro: Any = task.get_coro()
    for _ in range(4):
        name = getattr(coro, "__qualname__", type(coro).__name__)
        if not name.startswith("TaskHandle.") or getattr(coro, "cr_await", None) is None:
            return str(name)
        coro = coro.cr_await
    return str(getattr(coro, "__qualname__", type(coro).__name__))


# -- the parent: server, tasks, lifetimes, kills ----------------------------------------------------------


def _tasks(path: Path, n: int, fanout: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    expected = {}
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            tid = f"soak-{i:05d}"
            pairs = [(rng.randint(-999, 999), rng.randint(-999, 999)) for _ in range(fanout)]
            total = sum(a * b for a, b in pairs)
            expected[tid] = total
            prompt = f"[task {tid}] multiply these pairs and add up the products: " + ",".join(
                f"{a}x{b}" for a, b in pairs
            )
            task = {"id": tid, "prompt": prompt, "verifier": "numeric", "verifier_args": {"expected": total}}
            f.write(json.dumps(task) + "\n")
    return expected


def _config(path: Path, url: str, fanout: int, timeout: float) -> None:
    path.write_text(
        f"""[swarm]
system_prompt = {json.dumps(ORCHESTRATOR_PROMPT)}
max_subagents_per_stage = {fanout}
max_concurrency = {fanout}
max_critical_steps = 16
max_subagent_steps = 4
subagent_timeout_s = 120
max_report_chars = 200

[backend]
kind = "openai"
base_url = "{url}"
model = "soak"
flavour = "vllm"
timeout = {timeout}
max_retries = 6
retry_base_delay = 0.05
max_concurrency = 64
""",
        encoding="utf-8",
    )


def _entry_keys(path: Path) -> list[tuple[str, int]]:
    """(group, sample) of every complete line of episodes.jsonl (a half-written tail is skipped)."""
    keys: list[tuple[str, int]] = []
    if not path.exists():
        return keys
    with path.open("rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            head = raw[:400].decode("utf-8", "replace")  # group_id and sample_index come first
            try:
                group = head.split('"group_id":"', 1)[1].split('"', 1)[0]
                sample = int(head.split('"sample_index":', 1)[1].split(",", 1)[0])
            except (IndexError, ValueError):
                continue
            keys.append((group, sample))
    return keys


def run(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out or tempfile.mkdtemp(prefix="swarm-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    run_dir, server_log, probe = out / "rollout", out / "server.jsonl", out / "probe.jsonl"
    for p in (server_log, probe, Path(f"{probe}.lag")):
        p.unlink(missing_ok=True)
    server = subprocess.Popen(
        [
            sys.executable,
            str(SERVER),
            "--log",
            str(server_log),
            "--fanout",
            str(args.fanout),
            "--seed",
            str(args.seed),
            "--hang-s",
            str(args.hang_s),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    n_tasks = max(4, int(args.minutes * args.tasks_per_minute))
    expected = _tasks(out / "tasks.jsonl", n_tasks, args.fanout, args.seed)
    _config(out / "soak.toml", url, args.fanout, args.timeout)
    cmd = [
        "rollout", "-t", str(out / "tasks.jsonl"), "-o", str(run_dir), "-c", str(out / "soak.toml"),
        "-k", str(args.group_size), "--concurrent-episodes", str(args.concurrent_episodes),
        "--seed", str(args.seed), "-q", "--json",
    ]  # fmt: skip
    rng = random.Random(args.seed)
    start = time.time()
    deadline = start + args.minutes * 60
    kills = sorted(start + rng.uniform(0.15, 0.85) * args.minutes * 60 for _ in range(args.kills))
    lifetimes: list[dict[str, Any]] = []
    kept_checks: list[dict[str, Any]] = []
    before_kill: list[tuple[str, int]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    try:
        while True:
            stderr_path = out / f"child-{len(lifetimes)}.stderr"
            with stderr_path.open("w") as err:
                child = subprocess.Popen(
                    [sys.executable, __file__, "--child", str(probe), "--probe-interval", str(args.probe_interval),
                     "--", *cmd],
                    stdout=subprocess.PIPE, stderr=err, env=env, text=True,
                )  # fmt: skip
                began = time.time()
                if before_kill:  # resumed: what was on disk before the kill must still be there
                    time.sleep(min(5.0, max(0.0, deadline - time.time())))
                    now = set(_entry_keys(run_dir / "episodes.jsonl"))
                    kept_checks.append({"before": len(before_kill), "missing": len(set(before_kill) - now)})
                stop_at = kills.pop(0) if kills else deadline
                while child.poll() is None and time.time() < stop_at:
                    time.sleep(0.2)
                how = "exited"
                if child.poll() is None:
                    if stop_at < deadline:
                        before_kill = _entry_keys(run_dir / "episodes.jsonl")
                        child.kill()  # kill -9
                        how = "kill -9"
                    else:
                        child.send_signal(signal.SIGINT)
                        how = "SIGINT"
                try:
                    stdout, _ = child.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    child.kill()
                    stdout, _ = child.communicate()
                    how += " (then kill: did not stop in 120 s)"
            lifetimes.append(
                {
                    "started": began - start,
                    "ended": time.time() - start,
                    "stopped_by": how,
                    "returncode": child.returncode,
                    "stderr": stderr_path.name,
                    "summary": _last_json(stdout),
                }
            )
            if how != "kill -9" or time.time() >= deadline:
                break
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    stop_times = [start + life["ended"] for life in lifetimes]
    return _report(out, args, expected, lifetimes, kept_checks, stop_times)


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed((text or "").splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


# -- the report ---------------------------------------------------------------------------------------------


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope (per minute) of (seconds, value) points."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    var = sum((p[0] - mx) ** 2 for p in points)
    return None if var == 0 else 60 * sum((p[0] - mx) * (p[1] - my) for p in points) / var


def _malformed_answered(records: list[Any]) -> int:
    """Malformed tool calls the runtime answered (orchestrator and sub-agents) plus unparsed turns."""
    return (
        sum(1 for r in records for st in r.stages for tr in st.tool_results if tr.error_type == "ModelOutputError")
        + sum(
            1
            for r in records
            for s in r.subagent_results
            for step in s.step_records
            if step.error and step.error.startswith("malformed output")
        )
        + sum(
            1
            for r in records
            for s in r.subagent_results
            for step in s.step_records
            for tr in step.tool_results
            if tr.error_type == "ModelOutputError"
        )
        + sum(1 for r in records for t in r.turns if t.parse_error)
    )


def _memory(out: Path, args: argparse.Namespace, problems: list[str]) -> list[dict[str, Any]]:
    """The probe's samples per process lifetime: RSS and fd slopes after warm-up, tasks by kind (problems
    found are appended to ``problems``)."""
    samples = [json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines() if x.strip()]
    per_life: list[list[dict[str, Any]]] = []
    for s in samples:
        if not per_life or s["up_s"] < per_life[-1][-1]["up_s"]:
            per_life.append([])
        per_life[-1].append(s)
    memory = []
    for run_samples in per_life:
        warm = [s for s in run_samples if s["up_s"] >= args.warmup_s]
        sub_tasks = [s["by_kind"].get("Orchestrator._subagent", 0) for s in run_samples]
        memory.append(
            {
                "minutes": round(run_samples[-1]["up_s"] / 60, 1),
                "rss_mb_first_last_max": [
                    run_samples[0]["rss_mb"],
                    run_samples[-1]["rss_mb"],
                    max(s["rss_mb"] for s in run_samples),
                ],
                "rss_slope_mb_per_min_after_warmup": _round(_slope([(s["up_s"], s["rss_mb"]) for s in warm])),
                "fds_first_last_max": [
                    run_samples[0]["fds"],
                    run_samples[-1]["fds"],
                    max(s["fds"] for s in run_samples),
                ],
                "fds_slope_per_min_after_warmup": _round(_slope([(s["up_s"], s["fds"]) for s in warm])),
                "threads_max": max(s["threads"] for s in run_samples),
                "tasks_first_last_max": [
                    run_samples[0]["tasks"],
                    run_samples[-1]["tasks"],
                    max(s["tasks"] for s in run_samples),
                ],
                "subagent_tasks_max": max(sub_tasks, default=0),
            }
        )
        if max(sub_tasks, default=0) > args.fanout * args.concurrent_episodes:
            problems.append(f"more sub-agent tasks alive than can run: {max(sub_tasks)}")
        if max(s["fds"] for s in run_samples) > 64 + 200:
            problems.append(f"open fds reached {max(s['fds'] for s in run_samples)} (pool of 64 connections)")
    return memory


def _episode_requests(
    reqs: list[dict[str, Any]], seed_of: dict[int, tuple[str, int]]
) -> tuple[dict[tuple[str, int], list[float]], dict[tuple[str, int], float]]:
    """Per (task, sample): when its episode's requests started, and its orchestrator's last request."""
    started: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in reqs:
        if r.get("task") and r.get("seed") in seed_of:
            started[seed_of[r["seed"]]].append(r["t"])
    last_request: dict[tuple[str, int], float] = {}
    for r in reqs:
        if r["k"] == "o" and r.get("seed") in seed_of:
            key = seed_of[r["seed"]]
            last_request[key] = max(last_request.get(key, 0.0), r["t"])
    return started, last_request


def _lifetime_problems(out: Path, lifetimes: list[dict[str, Any]]) -> list[str]:
    """Rollout processes that ended other than by a kill, Ctrl-C or exit, or left a traceback."""
    problems: list[str] = []
    for life in lifetimes:
        if life["stopped_by"] not in ("kill -9", "SIGINT", "exited") or (
            life["stopped_by"] == "SIGINT" and life["returncode"] not in (130, 0, 1)
        ):
            problems.append(f"a rollout process ended unexpectedly: {life}")
        text = (out / life["stderr"]).read_text(errors="replace")
        if "Traceback" in text:
            problems.append(f"{life['stderr']} holds a traceback")
    return problems


def _report(
    out: Path,
    args: argparse.Namespace,
    expected: dict[str, int],
    lifetimes: list[dict[str, Any]],
    kept_checks: list[dict[str, Any]],
    stop_times: list[float],
) -> dict[str, Any]:
    from orchestrator.rollout import EpisodeEntry, RolloutFailure, episode_seed
    from swarm.rl.export import read_jsonl
    from swarm.rl.trajectory import Trajectory

    run_dir = out / "rollout"
    problems: list[str] = []
    # -- the server's view: requests, faults, retries, hangs, episodes started
    requests = [json.loads(x) for x in (out / "server.jsonl").read_text().splitlines() if x.strip()]
    reqs = [r for r in requests if "f" in r]
    hang_ends = [r for r in requests if "hang_end" in r]
    by_hash: dict[str, list[float]] = defaultdict(list)
    for r in reqs:
        by_hash[r["h"]].append(r["t"])
    faults = Counter(r["f"] or "none" for r in reqs)
    retryable = [r for r in reqs if r["f"] in ("500", "429", "body", "hang")]
    # A retry comes after the backoff (a few seconds at most here), then waits for one of the endpoint's
    # 64 request slots behind the rest of a 1,024-wide stage (~15 s at the soak's request rate on 2
    # busy cores): a fault closer than that before a kill or the final stop may have had no chance.
    cut = args.timeout + 30

    def before_stop(t: float, window: float) -> bool:
        return any(0 <= s - t <= window for s in stop_times)

    unretried = [r for r in retryable if not any(t > r["t"] for t in by_hash[r["h"]])]
    unexplained = [r for r in unretried if not before_stop(r["t"], cut)]
    if unexplained:
        problems.append(f"{len(unexplained)} retryable faults were never retried (e.g. {unexplained[0]})")
    # A hang the client gave up on ends within its timeout; one ended by a kill/stop says nothing.
    # The client's timeout is a timer on its event loop: it cannot fire while the loop is not running
    # (a niced process on busy cores), so a hang may outlast the timeout by the loop's lag then (the
    # probe measures it every 0.25 s); beyond that, the timeout did not work.
    closed = [h for h in hang_ends if h["client_closed"] and not before_stop(h["t"], 2.0)]
    hang_max = max((h["after_s"] for h in closed), default=0.0)
    lag_path = out / "probe.jsonl.lag"
    lags = [json.loads(x) for x in lag_path.read_text().splitlines() if x.strip()] if lag_path.exists() else []

    def lag_during(t0: float, t1: float) -> float:
        return max((g["lag_s"] for g in lags if t0 - 1 <= g["t"] <= t1), default=0.0)

    late = [h for h in closed if h["after_s"] > args.timeout + 1.0 + lag_during(h["t"] - h["after_s"], h["t"])]
    if late:
        problems.append(
            f"{len(late)} hung requests outlasted the {args.timeout:g}s timeout by more than 1 s plus the "
            f"event loop's lag (longest {max(h['after_s'] for h in late):.1f}s)"
        )
    open_hangs = [h for h in hang_ends if not h["client_closed"]]
    if open_hangs:
        problems.append(f"{len(open_hangs)} hung requests were never given up by the client")
    seed_of = {episode_seed(args.seed, tid, j): (tid, j) for tid in expected for j in range(args.group_size)}
    started, last_request = _episode_requests(reqs, seed_of)
    # -- the rollout directory
    entries = read_jsonl(run_dir / "episodes.jsonl", EpisodeEntry)
    keys = [(e.group_id, e.sample_index) for e in entries]
    dupes = len(keys) - len(set(keys))
    if dupes:
        problems.append(f"{dupes} episodes were written twice")
    failures = read_jsonl(run_dir / "failures.jsonl", RolloutFailure) if (run_dir / "failures.jsonl").exists() else []
    failed_keys = {(f.group_id, f.sample_index) for f in failures if f.kind != "trajectory"}
    recorded = set(keys) | failed_keys
    lost = [
        k for k in started if k not in recorded and not any(0 <= s - last_request.get(k, 0) <= 300 for s in stop_times)
    ]
    if lost:
        problems.append(f"{len(lost)} started episodes are neither recorded nor cut by a kill/stop: {lost[:3]}")
    for c in kept_checks:
        if c["missing"]:
            problems.append(f"{c['missing']} of {c['before']} episodes on disk before a kill -9 were gone after it")
    trajectories = read_jsonl(run_dir / "trajectories.jsonl", Trajectory)
    t_keys = [(t.group_id, t.sample_index) for t in trajectories]
    if len(t_keys) != len(set(t_keys)):
        problems.append(f"{len(t_keys) - len(set(t_keys))} trajectories were written twice")
    t_fail = [f for f in failures if f.kind == "trajectory"]
    groups = Counter(g for g, _ in set(keys))
    complete = {g for g, n in groups.items() if n == args.group_size}
    exported = {k for k in t_keys} | {(f.group_id, f.sample_index) for f in t_fail}
    missing_t = [k for k in set(keys) if k[0] in complete and k not in exported]
    if missing_t:
        problems.append(f"{len(missing_t)} episodes of complete groups have neither a trajectory nor a failure")
    records = [e.record for e in entries]
    statuses = Counter(r.status.value for r in records)
    sub = Counter(s.status.value for r in records for s in r.subagent_results)
    malformed_answered = _malformed_answered(records)
    widths = Counter(max(r.dag.stage_widths, default=0) for r in records)
    r_perf = [r.reward.r_perf for r in records if r.reward is not None]
    problems.extend(_lifetime_problems(out, lifetimes))
    memory = _memory(out, args, problems)
    report = {
        "command": " ".join(sys.argv),
        "start_time": stop_times[0] - lifetimes[0]["ended"] if lifetimes else None,
        "minutes": args.minutes,
        "fanout": args.fanout,
        "load_average": os.getloadavg(),
        "lifetimes": lifetimes,
        "server": {
            "requests": len(reqs),
            "faults": dict(faults),
            "retryable_faults": len(retryable),
            "retried": len(retryable) - len(unretried),
            "by_kind": {  # per fault kind: injected, then retried (the same request body came again)
                kind: {
                    "injected": faults.get(kind, 0),
                    "retried": sum(1 for r in retryable if r["f"] == kind)
                    - sum(1 for r in unretried if r["f"] == kind),
                }
                for kind in ("500", "429", "body", "hang")
            },
            "cut_by_kill_or_stop": len(unretried) - len(unexplained),
            "hangs_closed_by_client": len(closed),
            "hang_max_s": hang_max,
            "hangs_over_timeout_plus_1s": sum(1 for h in closed if h["after_s"] > args.timeout + 1.0),
            "hangs_late_beyond_loop_lag": len(late),
            "loop_lag_max_s": max((g["lag_s"] for g in lags), default=0.0),
            "loop_lags_over_1s": sum(1 for g in lags if g["lag_s"] > 1.0),
            "episodes_started": len(started),
        },
        "rollout": {
            "episodes": len(entries),
            "unique": len(set(keys)),
            "statuses": dict(statuses),
            "failures": dict(Counter(f.kind for f in failures)),
            "failure_reasons": dict(Counter(f.error[:120] for f in failures).most_common(5)),
            "trajectories": len(trajectories),
            "trajectory_failures": len(t_fail),
            "subagent_statuses": dict(sub),
            "widest_stage": dict(widths),
            "malformed_calls_answered": malformed_answered,
            "r_perf_1_fraction": round(sum(1 for x in r_perf if x == 1.0) / len(r_perf), 4) if r_perf else None,
            "kept_after_kill": kept_checks,
        },
        "memory": memory,
        "problems": problems,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _rereport(args: argparse.Namespace) -> dict[str, Any]:
    """The report of a finished run in ``--report-from`` (same ``--seed``/``--group-size``/``--timeout``),
    recomputed from its files with this version of the checks."""
    out = args.report_from
    old = json.loads((out / "report.json").read_text())
    lifetimes = old["lifetimes"]
    start = old.get("start_time")
    if start is None:  # reports before start_time: the first probe sample's clock less its uptime
        first = json.loads((out / "probe.jsonl").open().readline())
        start = first["t"] - first["up_s"] - lifetimes[0]["started"]
    expected = {
        t["id"]: t["verifier_args"]["expected"] for t in map(json.loads, (out / "tasks.jsonl").read_text().splitlines())
    }
    kept = old["rollout"]["kept_after_kill"]
    report = _report(out, args, expected, lifetimes, kept, [start + life["ended"] for life in lifetimes])
    report.update(command=old["command"], load_average=old["load_average"], start_time=start)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        interval = float(sys.argv[sys.argv.index("--probe-interval") + 1])
        _child(sys.argv[i + 1], interval, sys.argv[sys.argv.index("--") + 1 :])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--fanout", type=int, default=1024)
    p.add_argument("--kills", type=int, default=3)
    p.add_argument("--group-size", type=int, default=2)
    p.add_argument("--concurrent-episodes", type=int, default=2)
    p.add_argument("--tasks-per-minute", type=float, default=20.0, help="tasks in the file (more than can run)")
    p.add_argument("--timeout", type=float, default=5.0, help="the backend's per-request timeout (s)")
    p.add_argument("--hang-s", type=float, default=30.0, help="how long the server leaves a hung request")
    p.add_argument("--warmup-s", type=float, default=60.0)
    p.add_argument("--probe-interval", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--check", action="store_true", help="exit 1 when an invariant failed")
    p.add_argument("--report-from", type=Path, default=None, help="recompute the report of a finished run in DIR")
    args = p.parse_args()
    report = run(args) if args.report_from is None else _rereport(args)
    print(json.dumps(report, indent=2))
    if args.check and report["problems"]:
        print("soak FAILED: " + "; ".join(report["problems"]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
