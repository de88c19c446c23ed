"""How long a user waits for the first answer: the README command and a small wide task, cold and warm.

Each run is a new ``swarm run`` process (what a user types), timed from spawn to exit; its episode
record gives the breakdown (:func:`agent_swarm.swarm.timings.episode_timings`: engine start with the model
check, prefill, cached and restored prefix tokens, decode, queueing, the runtime's own time). An
*arm* is one checkout of the code: this one (``after``) and, with ``--before PATH``, another (e.g. a
worktree of the commit before a change), run the same way in the same invocation. Per arm:

* ``cold``: an empty model cache (``SWARM_CACHE_DIR``): the model is assembled from its wheels and
  hash-checked, no prefix state exists (the first run after install, less ``pip install``);
* ``warm`` ×N: the same cache again (the second run and after);
* ``wide``: a four-country task, warm.

Each arm runs its whole plan in turn, and a background engine it kept loaded (``swarm run``'s
``keep_alive``, docs/serve.md) is stopped before the other arm runs, so one engine holds the memory at a
time, as a user has it; ``--rounds R`` repeats this with a new cache each round and the arms' order
alternating, so a change of the machine's load weighs on both alike.

``--resident N`` measures the resident engine instead (``swarm serve``, docs/serve.md): in one cache, a
first run (assembling the model and its prefix state; not reported), then N pairs of warm README runs
in alternating order: one that attaches to a ``swarm serve`` started with the same environment just
before it and stopped after it (``resident``; the serve start is timed apart), and one that starts its
own engine (``in-process``: ``[backend] resident = false``)::

    flock /work/heavy.lock python bench/bench_first_answer.py --resident 3 \\
        --out bench/results/first_answer_resident.json

``--per-serve K`` runs the README command K times on each started ``swarm serve``: the first is
``resident`` as above (its slots hold nothing yet), the others ``resident-again`` (the second run and
after on a running resident engine, as a user who keeps it up has them; llama.cpp reuses what its slots
still hold where the prompt is the same).

It also measures the physical floor of this machine: the model's prefill and single-stream decode
tokens/s at the thread count the runs use, and the import time of the CLI. Raw results go to
``--out`` as JSON (commit, model sha256, load average before and after, every run's answer, status,
times and breakdown)::

    flock /work/heavy.lock python bench/bench_first_answer.py --before ../main-before \\
        --out bench/results/first_answer.json
    python bench/bench_first_answer.py --report bench/results/first_answer.json   # the table again

Run it on an idle machine: other work on the cores slows llama.cpp's threads several-fold.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README_TASK = "Find the capital cities of France and Japan. Give each country to its own sub-agent."
WIDE_TASK = "Find the capital cities of France, Japan, Brazil and Kenya. Give each country to its own sub-agent."
BUDGET = ["--max-critical-steps", "6", "--max-subagent-steps", "2"]


def _git(root: Path, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def _env(root: Path, cache: Path, args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *args.extra_path])
    env["SWARM_CACHE_DIR"] = str(cache)
    env["SWARM_LOCAL_THREADS"] = str(args.threads)
    if getattr(args, "layout", None):  # the resident comparison pins the slots both arms run
        env["SWARM_LOCAL_SLOTS"], env["SWARM_LOCAL_CTX"] = (str(n) for n in args.layout)
    return env


SWARM = [sys.executable, "-c", "from agent_swarm.orchestrator.cli import main; main()"]


def _run(
    root: Path,
    task: str,
    cache: Path,
    out: Path,
    args: argparse.Namespace,
    extra_path: list[str],
    config: Path | None = None,
) -> dict[str, Any]:
    """One ``swarm run`` process of the checkout at ``root`` (with ``config``, ``-c``); its wall time and record."""
    env = _env(root, cache, args)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [*SWARM, "run", task, *BUDGET, "-m", args.model, "-q", "-o", str(out), "--no-trace-file"]
    cmd += ["-c", str(config)] if config is not None else []
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=args.run_timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "process_wall_s": round(time.perf_counter() - started, 3), "error": "timeout"}
    wall = time.perf_counter() - started
    row: dict[str, Any] = {"exit_code": proc.returncode, "process_wall_s": round(wall, 3)}
    records = sorted(out.glob("*/episode.json"), key=lambda p: p.stat().st_mtime)
    if not records:
        row["error"] = proc.stderr[-2000:]
        return row
    from agent_swarm.swarm.records import EpisodeRecord
    from agent_swarm.swarm.timings import episode_timings

    record = EpisodeRecord.model_validate_json(records[-1].read_text(encoding="utf-8"))
    t = episode_timings(record)
    turns = [
        asdict(s.timings) if s.timings is not None else None for st in record.stages for s in st.orchestrator_steps
    ]
    row.update(
        episode_id=record.episode_id,
        status=record.status.value,
        answer=record.answer,
        episode_wall_s=round(record.wall_time_s, 3),
        stages=len(record.stages),
        subagents=len(record.subagent_results),
        critical_steps=record.dag.critical_steps,
        prompt_tokens=record.usage.prompt_tokens + record.subagent_usage.prompt_tokens,
        completion_tokens=record.usage.completion_tokens + record.subagent_usage.completion_tokens,
        timings=asdict(t) if t.measured_calls else None,
        orchestrator_turns=turns,
    )
    return row


def _runs(arms: dict[str, Path], args: argparse.Namespace, work: Path, save: Callable[[dict[str, Any]], None]) -> None:
    """Every scenario of one arm, then of the next (a background engine the arm kept is stopped between
    arms), in ``args.rounds`` rounds of new caches whose arm order alternates."""
    imports = {name: round(_import_time(root), 3) for name, root in arms.items()}
    print(f"CLI import (best of 3): {imports}", flush=True)
    plan = [("readme", "cold", README_TASK)] + [("readme", "warm", README_TASK)] * args.warm
    plan += [("wide", "warm", WIDE_TASK)] * args.wide
    for r in range(args.rounds):
        order = list(arms.items()) if r % 2 == 0 else list(arms.items())[::-1]
        for name, root in order:
            cache = work / f"round{r}" / name / "cache"
            try:
                for i, (scenario, kind, task) in enumerate(plan):
                    row = _run(root, task, cache, work / f"round{r}" / name / f"out{i}", args, args.extra_path)
                    row.update(arm=name, commit=_git(root, "rev-parse", "HEAD"), scenario=scenario, kind=kind)
                    row.update(run=i, round=r, cli_import_s=imports[name])
                    print(
                        f"{name:>6} {scenario:>6} {kind:>4}  process {row['process_wall_s']:7.2f}s  "
                        f"episode {row.get('episode_wall_s', float('nan')):7.2f}s  {row.get('status', 'no record')}",
                        flush=True,
                    )
                    save(row)
            finally:  # the arm's kept-alive engine, if any, goes before the next arm runs
                env = _env(root, cache, args)
                subprocess.run([*SWARM, "serve", "--stop"], cwd=root, env=env, capture_output=True, check=False)


def _resident_runs(args: argparse.Namespace, work: Path, save: Callable[[dict[str, Any]], None]) -> None:
    """The warm README command attached to ``swarm serve`` (``resident``) against starting its own
    engine (``in-process``), in pairs whose order alternates, in one cache that a first run filled.

    One engine at a time, as a user has it: the resident engine is started before each resident run
    (timed apart, ``serve_start_s``) and stopped after it. Both arms run the layout a default run plans
    now: a shared KV cache as planned (its size does not depend on the free memory once that holds
    it), else its slots and context pinned (a prefix state is kept per layout, and two engines of 16
    own 32,768-token caches, 14 GiB each, do not fit this machine's memory at once)."""
    from agent_swarm.swarm.backends.local import LocalEngine

    planned = LocalEngine(args.model, slots=16, fit_slots=True, ctx_per_slot=None, threads=args.threads)
    print(f"layout pinned for both arms: {planned.plan()}", flush=True)
    args.layout = None if planned.pool else (planned.slots, planned.ctx_per_slot)
    layout = [planned.slots, planned.ctx_per_slot, planned.pool]
    cache = work / "cache"
    configs = {}
    for arm, attach in (("in-process", "false"), ("resident", "true")):
        configs[arm] = work / f"{arm}.toml"
        configs[arm].write_text(f"[backend]\nresident = {attach}\n", encoding="utf-8")
    first = _run(ROOT, README_TASK, cache, work / "first", args, args.extra_path, configs["in-process"])
    print(f"first run (fills the cache, not reported): {first['process_wall_s']:.1f}s", flush=True)
    env = _env(ROOT, cache, args)
    for i in range(args.resident):
        for arm in ("in-process", "resident") if i % 2 == 0 else ("resident", "in-process"):
            serve_s = _serve(env, configs[arm], args.model) if arm == "resident" else None
            rows = []
            try:
                for k in range(args.per_serve if arm == "resident" else 1):
                    out = work / arm / f"out{i}-{k}"
                    rows.append(_run(ROOT, README_TASK, cache, out, args, args.extra_path, configs[arm]))
                    rows[-1].update(arm=arm if k == 0 else "resident-again", serve_run=k)
            finally:
                if arm == "resident":
                    subprocess.run([*SWARM, "serve", "--stop"], cwd=ROOT, env=env, check=False)
            for row in rows:
                row.update(commit=_git(ROOT, "rev-parse", "HEAD"), scenario="readme", kind="warm", run=i)
                row["serve_start_s"], row["layout"] = serve_s, layout
                print(
                    f"{row['arm']:>14} readme warm  process {row['process_wall_s']:7.2f}s  {row.get('status')}",
                    flush=True,
                )
                save(row)


def _serve(env: dict[str, str], config: Path, model: str) -> float:
    """Start ``swarm serve`` (waits until it serves); the seconds that took."""
    started = time.perf_counter()
    cmd = [*SWARM, "serve", "-m", model, "-c", str(config), "--idle", "600"]
    serve = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    took = round(time.perf_counter() - started, 3)
    print(f"swarm serve: {took}s: {serve.stdout.strip()} {serve.stderr.strip()[-500:]}", flush=True)
    if serve.returncode != 0:
        raise SystemExit("swarm serve failed; see above")
    return took


def _floor(args: argparse.Namespace) -> dict[str, Any]:
    """Prefill and single-stream decode tokens/s of the model on this machine at ``args.threads``."""
    import httpx

    from agent_swarm.swarm.backends.local import LocalEngine

    engine = LocalEngine(args.model, slots=1, ctx_per_slot=4096, threads=args.threads, prefix_cache=False)
    started = time.perf_counter()
    engine.start()
    load_s = time.perf_counter() - started
    try:
        with httpx.Client(base_url=engine.base_url, timeout=600) as c:
            text = " ".join(f"item {i} is a plain word list entry." for i in range(120))
            ids = c.post("/tokenize", json={"content": text, "add_special": True}).json()["tokens"][:1024]
            body = {"prompt": ids, "n_predict": 1, "cache_prompt": False, "temperature": 0.0}
            pre = c.post("/completion", json=body).json()["timings"]
            body = {"prompt": ids[:16], "n_predict": 64, "ignore_eos": True, "cache_prompt": False, "temperature": 0.0}
            dec = c.post("/completion", json=body).json()["timings"]
    finally:
        engine.close()
    return {
        "threads": args.threads,
        "model_load_s": round(load_s, 3),
        "prefill_tokens": pre["prompt_n"],
        "prefill_tok_s": round(pre["prompt_n"] / (pre["prompt_ms"] / 1e3), 2),
        "decode_tokens": dec["predicted_n"],
        "decode_tok_s": round(dec["predicted_n"] / (dec["predicted_ms"] / 1e3), 2),
        "cli_import_s": round(_import_time(ROOT), 3),
    }


def _import_time(root: Path) -> float:
    """Seconds to start Python and import ``swarm run`` of the checkout at ``root`` (best of three): the run
    command's module and everything it imports. Since the CLI imports each command when it is looked up,
    the CLI package alone is less than a run imports; before that, the two were the same."""
    env = dict(os.environ, PYTHONPATH=str(root))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import agent_swarm.orchestrator.cli.run"], env=env, check=True, cwd=root)
        best = min(best, time.perf_counter() - started)
    return best


def _summary(runs: list[dict[str, Any]], floor: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in runs:
        key = f"{r['arm']}/{r['scenario']}/{r['kind']}"
        out.setdefault(key, []).append(r["process_wall_s"])
    # The floor of a warm README run: load the model (unless a resident engine has it loaded), compute
    # what was not cached, decode what was decoded.
    for arm in ("after", "in-process", "resident", "resident-again"):
        warm = [r for r in runs if r["arm"] == arm and r["kind"] == "warm" and r["scenario"] == "readme"]
        if warm and warm[-1].get("timings"):
            t = warm[-1]["timings"]
            load = 0.0 if arm.startswith("resident") else floor["model_load_s"]
            out[f"{arm}/readme/warm floor_s"] = round(
                floor["cli_import_s"]
                + load
                + t["prefill_tokens"] / floor["prefill_tok_s"]
                + t["decode_tokens"] / floor["decode_tok_s"],
                2,
            )
    return out


def _paired(result: dict[str, Any]) -> list[str]:
    """The resident comparison: each pair's in-process minus resident wall time, and against the 10 s target."""
    walls: dict[tuple[str, int], float] = {(r["arm"], r["run"]): r["process_wall_s"] for r in result["runs"]}
    pairs = sorted(i for arm, i in walls if arm == "resident" and ("in-process", i) in walls)
    if not pairs:
        return []
    diffs = [walls[("in-process", i)] - walls[("resident", i)] for i in pairs]
    resident = sorted(walls[("resident", i)] for i in pairs)
    n, wins = len(diffs), sum(d > 0 for d in diffs)
    p = min(1.0, 2 * sum(math.comb(n, k) for k in range(max(wins, n - wins), n + 1)) / 2**n)
    rows = [r for r in result["runs"] if r["arm"].startswith("resident")]
    attached = sum(bool(r.get("timings")) and r["timings"]["startup_s"] < 2.0 for r in rows)
    first = [r for r in rows if r["arm"] == "resident"]
    starts = ", ".join(f"{r['serve_start_s']:.1f}" for r in first if r.get("serve_start_s") is not None)
    lines = [
        f"resident runs attached (engine start under 2 s): {attached}/{len(rows)}; swarm serve took {starts} s",
        f"paired (n = {n}): in-process minus resident {', '.join(f'{d:.1f}' for d in diffs)} s; "
        f"resident faster in {wins}/{n} (two-sided sign test p = {p:.3f})",
        _target("resident", resident),
    ]
    again = sorted(r["process_wall_s"] for r in rows if r["arm"] == "resident-again")
    return [*lines, _target("resident-again (a later run on the same swarm serve)", again)] if again else lines


def _target(arm: str, walls: list[float]) -> str:
    """Where the median of ``walls`` (sorted) stands against the 10 s target, with their range."""
    n = len(walls)
    median = walls[n // 2] if n % 2 else (walls[n // 2 - 1] + walls[n // 2]) / 2
    return (
        f"target 10 s: {arm} median {median:.1f} s (range {walls[0]:.1f}-{walls[-1]:.1f}), {median - 10:+.1f} s from it"
    )


def report(result: dict[str, Any]) -> str:
    """The table of a results file: every run's process wall time per arm and scenario (range and
    median, never the best alone), the breakdown of each run that has one, and the floor."""
    lines = [
        f"model {result['model']} ({result['model_sha256'] or 'unpinned'}), commit {result['commit'][:10]}, "
        f"{result['cpus']} cores, load {result['loadavg_before'][0]:.2f} -> {result['loadavg_after'][0]:.2f}",
    ]
    f = result["floor"]
    lines.append(
        f"floor at {f['threads']} thread(s): prefill {f['prefill_tok_s']} tok/s, decode {f['decode_tok_s']} tok/s, "
        f"model load {f['model_load_s']}s, CLI import {f['cli_import_s']}s"
    )
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in result["runs"]:
        groups.setdefault((r["arm"], r["scenario"], r["kind"]), []).append(r)
    lines.append(f"{'arm':<11}{'task':<8}{'cache':<7}{'n':>2}  {'process wall s (each run)':<30}{'median':>7}")
    for (arm, scenario, kind), rows in groups.items():
        walls = sorted(r["process_wall_s"] for r in rows)
        each = ", ".join(f"{r['process_wall_s']:.1f}" for r in rows)
        lines.append(f"{arm:<11}{scenario:<8}{kind:<7}{len(rows):>2}  {each:<30}{walls[len(walls) // 2]:>7.1f}")
    lines += _paired(result)
    lines.append("breakdown of each run (seconds; tokens):")
    for r in result["runs"]:
        t = r.get("timings")
        if not t:
            continue
        lines.append(
            f"  {r['arm']} {r['scenario']} {r['kind']}: process {r['process_wall_s']:.1f}, episode {t['wall_s']:.1f}, "
            f"start {t['startup_s']:.1f} (check {t['hash_check_s']:.1f}, load {t['model_load_s']:.1f}), "
            f"prefill {t['prefill_tokens']} in {t['prefill_s']:.1f}, cached {t['cached_tokens']}/restored "
            f"{t['restored_tokens']}, decode {t['decode_tokens']} in {t['decode_s']:.1f}, "
            f"runtime {t['runtime_s']:.2f}, {r['status']}: {(r.get('answer') or '')[:60]!r}"
        )
    return "\n".join(lines)


def main() -> None:
    from agent_swarm.swarm.backends.local import LOCAL_MODELS, default_model, default_threads

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", type=Path, help="print the table of a results file and exit (no runs)")
    ap.add_argument("--before", type=Path, help="a checkout of the code before the change (the 'before' arm)")
    ap.add_argument("--model", default=None, help="local model (default: the best installed, as swarm run picks)")
    ap.add_argument("--threads", type=int, default=None, help="decode threads for every run (default: free cores now)")
    ap.add_argument("--resident", type=int, default=0, help="N: the resident-engine comparison instead (see above)")
    ap.add_argument("--per-serve", type=int, default=1, help="K: README runs on each started swarm serve (see above)")
    ap.add_argument("--warm", type=int, default=2, help="warm README runs per arm")
    ap.add_argument("--wide", type=int, default=1, help="warm wide-task runs per arm")
    ap.add_argument("--rounds", type=int, default=1, help="R: the arms' plans R times, new caches each round")
    ap.add_argument("--run-timeout", type=float, default=300.0)
    ap.add_argument("--extra-path", action="append", default=[], help="more PYTHONPATH entries (model wheels)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "first_answer.json")
    args = ap.parse_args()
    if args.report is not None:
        print(report(json.loads(args.report.read_text(encoding="utf-8"))))
        return
    args.model = args.model or default_model()
    args.threads = args.threads or default_threads()
    load_before = os.getloadavg()
    floor = _floor(args)
    print(f"floor: {floor}", flush=True)
    runs: list[dict[str, Any]] = []
    entry = LOCAL_MODELS.get(args.model)
    result = {
        "bench": "first_answer",
        "commit": _git(ROOT, "rev-parse", "HEAD"),
        "model": args.model,
        "model_sha256": entry.sha256 if entry else None,
        "cpus": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "readme_task": README_TASK,
        "wide_task": WIDE_TASK,
        "budget": BUDGET,
        "floor": floor,
        "summary": {},
        "runs": runs,
    }

    def save(row: dict[str, Any]) -> None:  # after every run: a run cut short keeps what it measured
        runs.append(row)
        result["loadavg_after"] = os.getloadavg()
        result["summary"] = _summary(runs, floor)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")

    arms = {"before": args.before.resolve()} if args.before is not None else {}
    arms["after"] = ROOT
    with tempfile.TemporaryDirectory(prefix="swarm-bench-") as tmp:
        if args.resident:
            _resident_runs(args, Path(tmp), save)
        else:
            _runs(arms, args, Path(tmp), save)
    print(report(result))
    print(f"raw results: {args.out}; the table again: python bench/bench_first_answer.py --report {args.out}")


if __name__ == "__main__":
    main()
