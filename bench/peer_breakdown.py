"""Where the peer suite's CPU per sub-agent step goes (issue 30, item 6): one in-process breakdown per checkout.

The outside peer suite (``run_suite.py``, with ``bench/peer_adapter.py``) gives the headline figures. This
script splits them, on the same workload (3 stages, N sub-agents, 20 ms model, 2 ms tool, and its
0-latency variant), into what each part costs, by running variants of one adapter in one process,
interleaved round by round:

- ``suite``: the adapter exactly as the suite runs it (600 s sub-agent timeout, the tools' default 60 s);
- ``no_tool_deadline``: its tool without a timeout (no cancel scope and timer per tool call);
- ``no_subagent_deadline``: no sub-agent timeout (no cancel scope and timer per sub-agent);
- ``no_cyclic_gc``: ``suite`` with the cyclic GC off for the episode (a measurement only: the library never
  touches GC settings);
- ``floor``: no runtime at all, a bare anyio task group per stage doing exactly the adapter's own work per
  call (the same ``Completion``/``ToolCall``/message objects, the task text parsed on every call): what
  any runtime behind this adapter pays;
- ``floor_with_deadlines``: ``floor`` with the two deadlines as anyio ``move_on_after`` scopes.

``suite`` also records the cyclic GC's time per generation (``gc.callbacks``). Each checkout runs in its
own fresh process (its ``agent_swarm`` first on the path). Raw JSON per episode; ``--report`` prints the
table (median [range] over rounds, µs per sub-agent step).

    flock /work/heavy.lock python bench/peer_breakdown.py --suite ../shared/bench-peers \\
        --tree before=../before --tree head=. --rounds 5 --out bench/results/peer_breakdown.json
    python bench/peer_breakdown.py --report bench/results/peer_breakdown.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

VARIANTS = ("suite", "no_tool_deadline", "no_subagent_deadline", "no_cyclic_gc", "floor", "floor_with_deadlines")


def _parsed(msgs: Any) -> tuple[str, int, int, int, int]:
    """What the adapter's sub-agent model reads on every call: its task, (stage, agent, steps), steps done."""
    from workload import Workload  # type: ignore[import-not-found]

    task: str = next(m.content for m in msgs if m.role == "user")
    stage, agent, steps = Workload.parse_subagent_input(task)
    done = sum(1 for m in msgs if m.role == "assistant")
    return task, stage, agent, steps, done


def _suite_episode(variant: str) -> Any:
    """The suite's adapter (``bench/peer_adapter.py``) with the variant's deadlines."""
    from workload import Workload

    from agent_swarm.orchestrator import Orchestrator, SwarmConfig
    from agent_swarm.swarm.backend import Completion, ModelRequest
    from agent_swarm.swarm.messages import ToolCall
    from agent_swarm.swarm.records import AgentDefinition
    from agent_swarm.tools import Tool

    tool_timeout = None if variant == "no_tool_deadline" else 60.0
    subagent_timeout = None if variant == "no_subagent_deadline" else 600.0

    async def run_episode(w: Any, sim: Any) -> object:
        stage_no = [0]

        class Orch:
            model = "sim-orchestrator"

            async def complete(self, request: ModelRequest) -> Completion:
                t = stage_no[0]
                await sim.orchestrator_llm(t)
                stage_no[0] += 1
                if t >= w.stages:
                    return Completion(text="done")
                calls = tuple(
                    ToolCall(
                        id=f"c{t}_{i}", name="assign_task", arguments={"agent": "w", "task": w.subagent_input(t, i)}
                    )
                    for i in range(w.n_agents)
                )
                return Completion(tool_calls=calls)

        class Sub:
            model = "sim-subagent"

            async def complete(self, request: ModelRequest) -> Completion:
                task, stage, agent, steps, done = _parsed(request.messages)
                if done >= steps:
                    return Completion(text=f"report {stage}/{agent}")
                await sim.subagent_llm(stage, agent, done)
                return Completion(
                    tool_calls=(ToolCall(id=f"t{done}", name="work", arguments={"task": task, "step": done}),)
                )

        async def work(task: str, step: int) -> str:
            """One unit of simulated work."""
            stage, agent, _ = Workload.parse_subagent_input(task)
            return str(await sim.tool(stage, agent, step))

        cfg = SwarmConfig(
            max_critical_steps=100_000,
            max_subagents_per_stage=max(1, w.n_agents),
            max_concurrency=max(1, w.n_agents),
            max_subagent_steps=w.max_steps + 2,
            subagent_timeout_s=subagent_timeout,
        )
        orch = Orchestrator(
            Orch(),
            cfg,
            tools=[Tool(work, timeout_s=tool_timeout)],
            agents=[AgentDefinition(name="w", system_prompt="work", tools=("work",))],
            subagent_backend=Sub(),
        )
        return await orch.run("benchmark")

    return run_episode


def _floor_episode(variant: str) -> Any:
    """No runtime: a bare anyio task group per stage doing the adapter's own work per call, with the
    two deadlines as ``move_on_after`` scopes or without."""
    import anyio
    from workload import Workload

    from agent_swarm.swarm.backend import Completion
    from agent_swarm.swarm.messages import AssistantMessage, SystemMessage, ToolCall, ToolMessage, UserMessage

    deadlines = variant == "floor_with_deadlines"
    system = SystemMessage(content="work")

    async def run_episode(w: Any, sim: Any) -> object:
        async def tool_call(call: ToolCall) -> str:
            stage, agent, _ = Workload.parse_subagent_input(call.arguments["task"])
            return str(await sim.tool(stage, agent, call.arguments["step"]))

        async def loop(t: int, i: int) -> None:
            messages: list[Any] = [system, UserMessage(content=w.subagent_input(t, i))]
            while True:
                task, stage, agent, steps, done = _parsed(messages)
                if done >= steps:
                    messages.append(AssistantMessage(content=f"report {stage}/{agent}"))
                    return
                await sim.subagent_llm(stage, agent, done)
                call = ToolCall(id=f"t{done}", name="work", arguments={"task": task, "step": done})
                c = Completion(tool_calls=(call,))
                messages.append(AssistantMessage(content=c.text, tool_calls=c.tool_calls))
                if deadlines:
                    with anyio.move_on_after(60):
                        out = await tool_call(call)
                else:
                    out = await tool_call(call)
                messages.append(ToolMessage(tool_call_id=call.id, name=call.name, content=out))

        async def subagent(t: int, i: int) -> None:
            if deadlines:
                with anyio.move_on_after(600):
                    await loop(t, i)
            else:
                await loop(t, i)

        for t in range(w.stages):
            await sim.orchestrator_llm(t)
            async with anyio.create_task_group() as tg:
                for i in range(w.n_agents):
                    tg.start_soon(subagent, t, i)
        return await sim.orchestrator_llm(w.stages)

    return run_episode


def _episode(variant: str, n: int, latency: float) -> dict[str, Any]:
    from workload import Sim, Workload

    w = Workload(n_agents=n, llm_latency=latency, tool_latency=latency / 10)
    sim = Sim(w)
    run = _floor_episode(variant) if variant.startswith("floor") else _suite_episode(variant)
    spent: dict[int, list[float]] = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    began = [0.0]

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            s = spent[info["generation"]]
            s[0] += 1
            s[1] += time.perf_counter() - began[0]

    async def timed() -> tuple[float, float]:
        c0, t0 = time.process_time(), time.perf_counter()
        await run(w, sim)
        return time.perf_counter() - t0, time.process_time() - c0

    gc.collect()
    if variant == "no_cyclic_gc":
        gc.disable()
    elif variant == "suite":
        gc.callbacks.append(watch)
    try:
        wall, cpu = anyio.run(timed)  # asyncio, as the suite runs it
    finally:
        gc.enable()
        if watch in gc.callbacks:
            gc.callbacks.remove(watch)
    sim.verify()
    steps = w.total_subagent_steps
    rec: dict[str, Any] = {
        "variant": variant,
        "latency_s": latency,
        "n": n,
        "steps": steps,
        "wall_s": wall,
        "cpu_s": cpu,
        "ideal_s": w.ideal_critical_path(),
        "cpu_us_per_step": 1e6 * cpu / steps,
    }
    if variant == "suite":
        rec["gc"] = {f"gen{g}": {"collections": c, "us_per_step": 1e6 * s / steps} for g, (c, s) in spent.items()}
    return rec


def child(suite: Path, n: int, rounds: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(suite))
    for latency in (0.0, 0.02):
        for variant in VARIANTS:  # warm-up: imports, schema caches, the first event loop
            _episode(variant, 8, latency)
    records = []
    for r in range(rounds):
        for latency in (0.0, 0.02):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                rec = _episode(variant, n, latency)
                rec["round"] = r
                records.append(rec)
                print(
                    f"round {r} {latency * 1000:g} ms {variant}: {rec['cpu_us_per_step']:.1f} us/step", file=sys.stderr
                )
    return records


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def run(suite: Path, trees: list[tuple[str, Path]], n: int, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {"n": n, "rounds": rounds, "suite": str(suite), "trees": {}, "records": []}
    for name, tree in trees:
        tree = tree.resolve()
        commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True)
        before = _load()
        env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--suite", str(suite)]
        cmd += ["--n", str(n), "--rounds", str(rounds)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        out["trees"][name] = {
            "path": str(tree),
            "commit": commit.stdout.strip(),
            "load_before": before,
            "load_after": _load(),
        }
        for rec in json.loads(proc.stdout):
            rec["tree"] = name
            out["records"].append(rec)
    return out


def report(data: dict[str, Any]) -> str:
    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.1f} [{min(xs):.1f}, {max(xs):.1f}]" if xs else "-"

    lines = [f"N={data['n']}, {data['rounds']} rounds; CPU µs per sub-agent step, median [range]"]
    for name, t in data["trees"].items():
        lines.append(f"{name}: {t['commit'][:7]}, load {t['load_before']} -> {t['load_after']}")
    lines.append(f"{'variant':<22} " + " ".join(f"{f'{name} {ms} ms':>22}" for name in data["trees"] for ms in (0, 20)))
    rows = [*VARIANTS, "gc gen0", "gc gen1", "gc gen2"]
    for row in rows:
        cells = []
        for name in data["trees"]:
            for latency in (0.0, 0.02):
                rs = [r for r in data["records"] if r["tree"] == name and r["latency_s"] == latency]
                if row.startswith("gc "):
                    xs = [r["gc"][row[3:]]["us_per_step"] for r in rs if r["variant"] == "suite"]
                else:
                    xs = [r["cpu_us_per_step"] for r in rs if r["variant"] == row]
                cells.append(f"{cell(xs):>22}")
        lines.append(f"{row:<22} " + " ".join(cells))
    lines.append(f"wall/ideal at 20 ms: {'variant':<22} " + " ".join(f"{name:>22}" for name in data["trees"]))
    for variant in VARIANTS:
        walls = []
        for name in data["trees"]:
            rs = [r for r in data["records"] if r["tree"] == name and r["variant"] == variant and r["latency_s"]]
            xs = [r["wall_s"] / r["ideal_s"] for r in rs]
            walls.append(f"{statistics.median(xs):.3f} [{min(xs):.3f}, {max(xs):.3f}]" if xs else "-")
        lines.append(f"{'':<20} {variant:<22} " + " ".join(f"{w:>22}" for w in walls))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", type=Path, help="the peer suite's folder (its workload.py)")
    p.add_argument("--tree", action="append", default=[], help="NAME=CHECKOUT, one per checkout")
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path)
    p.add_argument("--report", type=Path, help="print the table of a results file and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.report:
        print(report(json.loads(args.report.read_text())))
        return 0
    if args.suite is None:
        p.error("--suite is needed to run")
    if args.child:
        print(json.dumps(child(args.suite, args.n, args.rounds)))
        return 0
    if not args.tree or args.out is None:
        p.error("--tree NAME=CHECKOUT (one or more) and --out are needed to run (or --report FILE)")
    trees = [(spec.partition("=")[0], Path(spec.partition("=")[2])) for spec in args.tree]
    data = run(args.suite, trees, args.n, args.rounds)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(report(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
