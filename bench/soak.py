"""Soak: `swarm rollout` at 1,024-way fan-out against a fault-injecting server, killed and resumed.

    nice -n 10 python bench/soak.py --minutes 30 --out /tmp/soak      # the full soak (figures in README)
    python bench/soak.py --minutes 2 --check                           # CI: fail on a broken invariant

What runs: ``bench/fault_server.py`` (a separate process, the model) answers every chat request with a
fresh fan-out policy and injects faults (5 % HTTP 500, 2 % 429, 2 % non-JSON 200 bodies, 2 % malformed
tool calls, 1 % hangs past the client's timeout). ``swarm rollout`` (the real CLI: ``agent_swarm.orchestrator.cli.main``
in a child process, with a probe thread sampling RSS, the allocators' counts and GC passes (see
``_MemoryProbe``), open fds, threads and asyncio tasks) collects K episodes per task into one output
directory; each episode's first stage assigns ``--fanout`` tasks at once. At ``--kills`` random
moments the child gets ``kill -9`` and the same command is started again (resume); at the end it gets
SIGINT (Ctrl-C) and stops as a user's run would.

What is checked (``--check`` exits 1 when one fails; the report is JSON on stdout and in OUT/report.json):
see ``bench/soak_check.py``. In short: every episode the server's request log saw is recorded once, or
the kill or final Ctrl-C that stopped its process is named; none is skipped on resume or written twice;
every entry on disk before a kill is still there after the resume; every retryable fault was retried,
or its excuse is named; hangs end within the client's timeout (+1 s + the event loop's measured lag);
episodes not completed and sub-agents failed are within what the fault rates allow; task kinds and fds
stay flat in each process; RSS grows at most ``--rss-slope-max`` MB/min after warm-up; no crash, and
Ctrl-C exits 130. ``SWARM_SOAK_PLANT`` plants a defect in the rollout process (see :func:`_plant`) to
prove a check bites.
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
from collections import Counter
from pathlib import Path
from typing import Any

import soak_check  # beside this file (bench/ is on sys.path when this runs as a script)

Key = tuple[str, int]
ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "bench" / "fault_server.py"
MAX_RETRIES = 6  # the backend's, in the soak's config
FAULTS = {"500": 0.05, "429": 0.02, "body": 0.02, "malformed": 0.02, "hang": 0.01}  # the server's rates
PLANTS = ("drop-on-resume", "no-retry-429", "leak-task")
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
                "by_kind": dict(kinds),
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
    if os.environ.get("SWARM_SOAK_PLANT"):
        _plant(os.environ["SWARM_SOAK_PLANT"])
    sys.argv = ["swarm", *argv]
    from agent_swarm.orchestrator.cli import main

    main()


_LEAKED: list[asyncio.Task[Any]] = []


def _plant(name: str) -> None:
    """A planted defect in this rollout process only (``SWARM_SOAK_PLANT``), to prove that ``--check``
    catches it (``tests/rollout/test_soak_check.py``); never set in a real soak. It wraps the CLI's
    code from outside: nothing in the package knows about it.

    ``drop-on-resume``: a resumed run forgets the first episode it should run again. ``no-retry-429``:
    the backend treats 429 as fatal. ``leak-task``: every episode leaves a task behind that never ends.
    """
    if name == "drop-on-resume":
        from agent_swarm.orchestrator.rollout import collection

        pending = collection._Run.pending

        def dropping(self: Any) -> list[Any]:
            jobs = pending(self)
            return jobs[1:] if self.resumed and jobs else jobs

        collection._Run.pending = dropping  # type: ignore[method-assign]
    elif name == "no-retry-429":
        from agent_swarm.swarm.backends import openai_http

        openai_http._RETRY_STATUS = openai_http._RETRY_STATUS - {429}
    elif name == "leak-task":
        from agent_swarm.orchestrator.rollout.executors import EpisodeRunner

        run = EpisodeRunner.run

        async def leaking(self: Any, job: Any) -> Any:
            _LEAKED.append(asyncio.get_running_loop().create_task(asyncio.Event().wait()))
            return await run(self, job)

        EpisodeRunner.run = leaking  # type: ignore[method-assign]
    else:
        raise SystemExit(f"SWARM_SOAK_PLANT={name!r} is not one of {', '.join(PLANTS)}")


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
max_retries = {MAX_RETRIES}
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
    load_before = os.getloadavg()
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
            *(f"--p{kind}={p}" for kind, p in FAULTS.items()),
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
    report = _report(out, args, expected, lifetimes, kept_checks, start)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    report.update(
        commit=commit + ("+dirty" if dirty.stdout.strip() else ""), load_before_after=[load_before, os.getloadavg()]
    )
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def keep(out: Path, dest: Path) -> None:
    """The run in ``out`` as the files bench/soak_figures.py reads, compressed, in ``dest``: the report,
    the server's and the probe's logs, and one line per recorded episode (not the full records)."""
    import gzip
    import shutil

    from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry
    from agent_swarm.swarm.rl.export import iter_jsonl

    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(out / "report.json", dest / "report.json")
    for name in ("server.jsonl", "probe.jsonl"):
        with (out / name).open("rb") as src, gzip.open(dest / f"{name}.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    with gzip.open(dest / "episodes.jsonl.gz", "wt", encoding="utf-8", compresslevel=9) as f:
        for e in iter_jsonl(out / "rollout" / "episodes.jsonl", EpisodeEntry):
            r = e.record
            line = {
                "group_id": e.group_id,
                "sample_index": e.sample_index,
                "seed": e.seed,
                "status": r.status.value,
                "r_perf": r.reward.r_perf if r.reward is not None else None,
                "critical_steps": r.dag.critical_steps,
                "total_steps": r.dag.total_steps,
                "widest_stage": max(r.dag.stage_widths, default=0),
                "tokens": sum(u.prompt_tokens + u.completion_tokens for u in (r.usage, r.subagent_usage)),
                "started_at": r.started_at,
                "wall_time_s": r.wall_time_s,
                "subagents": dict(Counter(s.status.value for s in r.subagent_results)),
            }
            f.write(json.dumps(line) + "\n")


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


def _per_life(out: Path) -> list[list[dict[str, Any]]]:
    """The probe's samples, one list per rollout process (uptime restarts at each)."""
    samples = [json.loads(x) for x in (out / "probe.jsonl").read_text().splitlines() if x.strip()]
    per_life: list[list[dict[str, Any]]] = []
    for s in samples:
        if not per_life or s["up_s"] < per_life[-1][-1]["up_s"]:
            per_life.append([])
        per_life[-1].append(s)
    return per_life


def _memory(per_life: list[list[dict[str, Any]]], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Per rollout process: RSS, fds, threads and tasks over its life (the figures; checks are in
    :func:`soak_check.check_resources`)."""
    memory = []
    fan_out = soak_check.fan_out_kinds(per_life, args.fanout)  # a stage's sub-agents, one task each
    for run_samples in per_life:
        warm = [s for s in run_samples if s["up_s"] >= args.warmup_s]

        def first_last_max(name: str, samples: list[dict[str, Any]] = run_samples) -> list[float]:
            return [samples[0][name], samples[-1][name], max(s[name] for s in samples)]

        memory.append(
            {
                "minutes": round(run_samples[-1]["up_s"] / 60, 1),
                "rss_mb_first_last_max": first_last_max("rss_mb"),
                "rss_slope_mb_per_min_after_warmup": _round(_slope([(s["up_s"], s["rss_mb"]) for s in warm])),
                "fds_first_last_max": first_last_max("fds"),
                "fds_slope_per_min_after_warmup": _round(_slope([(s["up_s"], s["fds"]) for s in warm])),
                "threads_max": max(s["threads"] for s in run_samples),
                "tasks_first_last_max": first_last_max("tasks"),
                "subagent_tasks_max": max(sum(s["by_kind"].get(k, 0) for k in fan_out) for s in run_samples),
            }
        )
    return memory


def _lifetime_problems(out: Path, lifetimes: list[dict[str, Any]]) -> list[str]:
    """Rollout processes that ended other than by a kill, Ctrl-C (exit 130) or a clean exit (0), or left
    a traceback."""
    problems: list[str] = []
    for life in lifetimes:
        how, rc = life["stopped_by"], life["returncode"]
        if how not in ("kill -9", "SIGINT", "exited") or (how == "SIGINT" and rc != 130) or (how == "exited" and rc):
            problems.append(f"a rollout process ended unexpectedly: {life}")
        text = (out / life["stderr"]).read_text(errors="replace")
        if "Traceback" in text:
            problems.append(f"{life['stderr']} holds a traceback")
    return problems


def _hangs(
    out: Path, args: argparse.Namespace, requests: list[dict[str, Any]], lives: Any
) -> tuple[list[str], dict[str, Any]]:
    """Every hang ended within the client's timeout, unless a stop closed it (named)."""
    problems: list[str] = []
    hang_ends = [r for r in requests if "hang_end" in r]

    def stopped_by(h: dict[str, Any]) -> str | None:
        # A kill closes every connection of the process at once: a hang that ended within 2 s of its
        # process's stop (on the server's clock) was ended by that stop, and says nothing of the timeout.
        i = lives.at(h["t"])
        return lives.names[i] if lives.stopped(i) and abs(lives.ends[i] - h["t"]) <= 2.0 else None

    by_stop = Counter(name for h in hang_ends if (name := stopped_by(h)))
    closed = [h for h in hang_ends if h["client_closed"] and stopped_by(h) is None]
    lag_path = out / "probe.jsonl.lag"
    lags = [json.loads(x) for x in lag_path.read_text().splitlines() if x.strip()] if lag_path.exists() else []

    def lag_during(t0: float, t1: float) -> float:
        return max((g["lag_s"] for g in lags if t0 - 1 <= g["t"] <= t1), default=0.0)

    # The client's timeout is a timer on its event loop: it cannot fire while the loop does not run (a
    # niced process on busy cores), so a hang may outlast it by the loop's lag (the probe measures it).
    late = [h for h in closed if h["after_s"] > args.timeout + 1.0 + lag_during(h["t"] - h["after_s"], h["t"])]
    if late:
        problems.append(
            f"{len(late)} hung requests outlasted the {args.timeout:g}s timeout by more than 1 s plus the "
            f"event loop's lag (longest {max(h['after_s'] for h in late):.1f}s)"
        )
    open_hangs = [h for h in hang_ends if not h["client_closed"]]
    if open_hangs:
        problems.append(f"{len(open_hangs)} hung requests were never given up by the client")
    return problems, {
        "hangs_closed_by_client": len(closed),
        "hangs_ended_by_stop": dict(by_stop),
        "hang_max_s": max((h["after_s"] for h in closed), default=0.0),
        "hangs_late_beyond_loop_lag": len(late),
        "loop_lag_max_s": max((g["lag_s"] for g in lags), default=0.0),
        "loop_lags_over_1s": sum(1 for g in lags if g["lag_s"] > 1.0),
    }


def _rollout_files(run_dir: Path) -> tuple[list[Any], list[Any], list[Any]]:
    from agent_swarm.orchestrator.rollout.episodes import EpisodeEntry, RolloutFailure
    from agent_swarm.swarm.rl.export import read_jsonl
    from agent_swarm.swarm.rl.trajectory import Trajectory

    entries = read_jsonl(run_dir / "episodes.jsonl", EpisodeEntry)
    fail_path = run_dir / "failures.jsonl"
    failures = read_jsonl(fail_path, RolloutFailure) if fail_path.exists() else []
    trajectories = read_jsonl(run_dir / "trajectories.jsonl", Trajectory)
    return entries, failures, trajectories


def _trajectory_problems(keys: list[Key], failures: list[Any], trajectories: list[Any], k: int) -> list[str]:
    problems = []
    t_keys = [(t.group_id, t.sample_index) for t in trajectories]
    if len(t_keys) != len(set(t_keys)):
        problems.append(f"{len(t_keys) - len(set(t_keys))} trajectories were written twice")
    groups = Counter(g for g, _ in set(keys))
    complete = {g for g, n in groups.items() if n == k}
    exported = set(t_keys) | {(f.group_id, f.sample_index) for f in failures if f.kind == "trajectory"}
    missing_t = [x for x in set(keys) if x[0] in complete and x not in exported]
    if missing_t:
        problems.append(f"{len(missing_t)} episodes of complete groups have neither a trajectory nor a failure")
    return problems


def _report(
    out: Path,
    args: argparse.Namespace,
    expected: dict[str, int],
    lifetimes: list[dict[str, Any]],
    kept_checks: list[dict[str, Any]],
    start: float,
) -> dict[str, Any]:
    from agent_swarm.orchestrator.rollout.episodes import episode_seed

    requests = [json.loads(x) for x in (out / "server.jsonl").read_text().splitlines() if x.strip()]
    reqs = [r for r in requests if "f" in r]
    lives = soak_check.Lives.of(start, lifetimes)
    order = {(tid, j): n * args.group_size + j for n, tid in enumerate(expected) for j in range(args.group_size)}
    seed_of = {episode_seed(args.seed, tid, j): (tid, j) for tid, j in order}
    ledger = soak_check.Ledger.of(reqs, seed_of, order, lives)
    entries, failures, trajectories = _rollout_files(out / "rollout")
    keys = [(e.group_id, e.sample_index) for e in entries]
    failed = {(f.group_id, f.sample_index) for f in failures if f.kind != "trajectory"}
    problems, cut_episodes = soak_check.check_episodes(ledger, lives, keys, failed, args.concurrent_episodes)
    problems += [
        f"{c['missing']} of {c['before']} episodes on disk before a kill -9 were gone after it"
        for c in kept_checks
        if c["missing"]
    ]
    recorded_by = {((e.group_id, e.sample_index), lives.at(e.record.started_at)): e.record for e in entries}
    recorded_by |= {
        ((f.group_id, f.sample_index), lives.at(f.record.started_at)): f.record
        for f in failures
        if f.record is not None
    }
    retry_problems, excused_faults, retry_figures = soak_check.check_retries(
        reqs, ledger, lives, recorded_by, MAX_RETRIES
    )
    hang_problems, hang_figures = _hangs(out, args, requests, lives)
    records = [e.record for e in entries]
    q = sum(FAULTS[k] for k in soak_check.RETRYABLE)
    status_problems, status_figures = soak_check.check_statuses(records, q, MAX_RETRIES, 5, 4)
    per_life = _per_life(out)
    resource_problems, resource_rows = soak_check.check_resources(
        per_life,
        args.settle_s,
        args.warmup_s,
        args.rss_slope_max,
        args.rss_min_minutes,
        _slope,
        args.concurrent_episodes,
        args.fanout,
    )
    problems += retry_problems + hang_problems + status_problems + resource_problems
    problems += _trajectory_problems(keys, failures, trajectories, args.group_size)
    problems += _lifetime_problems(out, lifetimes)
    report = {
        "command": " ".join(sys.argv),
        "start_time": start,
        "minutes": args.minutes,
        "fanout": args.fanout,
        "load_average": os.getloadavg(),
        "lifetimes": lifetimes,
        "server": {
            "requests": len(reqs),
            "faults": dict(Counter(r["f"] or "none" for r in reqs)),
            **retry_figures,
            **hang_figures,
            "episodes_started": len(ledger.lives_of),
        },
        "rollout": {
            "episodes": len(entries),
            "unique": len(set(keys)),
            "statuses": dict(Counter(r.status.value for r in records)),
            **status_figures,
            "episodes_cut_by_a_stop": cut_episodes,
            "failures": dict(Counter(f.kind for f in failures)),
            "failure_reasons": dict(Counter(f.error[:120] for f in failures).most_common(5)),
            "trajectories": len(trajectories),
            "trajectory_failures": sum(1 for f in failures if f.kind == "trajectory"),
            "subagent_statuses": dict(Counter(s.status.value for r in records for s in r.subagent_results)),
            "widest_stage": dict(Counter(max(r.dag.stage_widths, default=0) for r in records)),
            "malformed_calls_answered": _malformed_answered(records),
            "r_perf_1_fraction": _fraction([r.reward.r_perf == 1.0 for r in records if r.reward is not None]),
            "kept_after_kill": kept_checks,
        },
        "excused_faults": excused_faults,
        "memory": _memory(per_life, args),
        "resource_checks": resource_rows,
        "problems": problems,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def _fraction(flags: list[bool]) -> float | None:
    return round(sum(flags) / len(flags), 4) if flags else None


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
    report = _report(out, args, expected, lifetimes, kept, start)
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
    p.add_argument("--warmup-s", type=float, default=60.0, help="RSS slope is measured after this uptime")
    p.add_argument("--settle-s", type=float, default=10.0, help="tasks and fds are held flat after this uptime")
    p.add_argument("--rss-slope-max", type=float, default=3.0, help="MB/min allowed after warm-up")
    p.add_argument("--rss-min-minutes", type=float, default=3.0, help="RSS slope checked over at least this")
    p.add_argument("--probe-interval", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--check", action="store_true", help="exit 1 when an invariant failed")
    p.add_argument("--report-from", type=Path, default=None, help="recompute the report of a finished run in DIR")
    p.add_argument("--keep", type=Path, nargs=2, metavar=("OUT", "DEST"), help="compress run OUT's raw files into DEST")
    args = p.parse_args()
    if args.keep:
        keep(*args.keep)
        return
    report = run(args) if args.report_from is None else _rereport(args)
    print(json.dumps(report, indent=2))
    if args.check and report["problems"]:
        print("soak FAILED: " + "; ".join(report["problems"]), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
