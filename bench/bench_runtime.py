"""Runtime overhead benchmark: the full swarm runtime against bare asyncio and anyio task groups.

The default workload is the realistic one (what a user's run looks like, not a best case):

* ``T=3`` stages; in each the orchestrator makes one model call that fans out ``N`` sub-agents with
  ``assign_task``, each with its own task text (no two alike);
* sub-agent ``i`` runs ``1 + i % 5`` steps: a simulated 20 ms model call, then (except on the
  answering step) a 2 ms call of a typed tool, ``lookup(customer: int, record: int, field: Literal)``,
  whose arguments differ on every call and are validated like any model-emitted call;
* every model call returns a **freshly built** completion (a new ``Completion`` with new
  ``ToolCall``s and usage, as a real backend parses one per response), never a shared object;
* the same workload with nothing but a bare ``asyncio.TaskGroup`` and a bare anyio task group (a
  transcript list per agent, a fresh dict per model response, the tool called directly) runs in the
  same benchmark, interleaved with the runtime.

Reported per N: wall / ideal critical path (20 ms latency), CPU µs per sub-agent step (0 latency:
pure overhead) and RSS KiB per sub-agent (transcript and records alive), each also as a ratio to
the bare anyio task group of the same run. Every cell runs in a fresh process; ``--repeat`` rounds
are interleaved (asyncio, anyio, runtime, asyncio, …) and the median is reported.

``--workload canned`` is the old best case, kept as a labelled extra: one shared canned completion
per turn kind and a tool with no arguments. It measures nothing a user sees.

    python bench/bench_runtime.py                          # N = 64, 256, 1024; realistic; median of 3
    python bench/bench_runtime.py --n 1024 --json
    python bench/bench_runtime.py --cli-gc                 # the swarm CLI's GC settings
    python bench/bench_runtime.py --workload canned        # the old canned best case
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

import anyio

from agent_swarm.orchestrator import Orchestrator, SwarmConfig
from agent_swarm.swarm.backend import Completion, ModelRequest, Usage
from agent_swarm.swarm.messages import ToolCall, UserMessage
from agent_swarm.swarm.records import AgentDefinition, EpisodeRecord
from agent_swarm.swarm.tracing import Telemetry
from agent_swarm.tools import Tool

LLM_S = 0.020
TOOL_S = 0.002
PAGE = os.sysconf("SC_PAGE_SIZE")
IMPLS = ("asyncio", "anyio", "runtime")
FIELDS = ("total", "count", "mean")


def steps_of(i: int) -> int:
    return 1 + i % 5


def task_text(stage: int, i: int) -> str:
    """A unique task per sub-agent; the bracket tells the simulated model how many steps it takes."""
    return (
        f"[{steps_of(i)}] Stage {stage}: look up customer {100_000 + 7 * i + stage} and report the "
        f"{FIELDS[i % 3]} of their open orders since week {i % 52} ({i}/{stage})."
    )


def steps_in(task: str) -> int:
    return int(task[1 : task.index("]")])


def customer_in(task: str) -> int:
    start = task.index("customer ") + len("customer ")
    return int(task[start : task.index(" ", start)])


def ideal_critical_s(stages: int, n: int, latency: bool) -> float:
    """The longest path: per stage one orchestrator call + the longest sub-agent; then the answer."""
    if not latency:
        return 0.0
    k = max(steps_of(i) for i in range(n))
    stage = LLM_S + k * LLM_S + (k - 1) * TOOL_S
    return stages * stage + LLM_S


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@dataclass
class Measure:
    impl: str
    n: int
    stages: int
    latency: bool
    wall_s: float
    cpu_s: float
    rss_delta_b: int
    subagent_steps: int
    ideal_s: float

    @property
    def cpu_us_per_step(self) -> float:
        return 1e6 * self.cpu_s / max(1, self.subagent_steps)

    @property
    def rss_kib_per_subagent(self) -> float:
        return self.rss_delta_b / 1024 / (self.n * self.stages)

    @property
    def wall_over_ideal(self) -> float:
        return self.wall_s / self.ideal_s if self.ideal_s else float("nan")

    def row(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            cpu_us_per_step=self.cpu_us_per_step,
            rss_kib_per_subagent=self.rss_kib_per_subagent,
            wall_over_ideal=self.wall_over_ideal,
        )
        return d


# -- the simulated model's responses (fresh objects per call) --------------------------------------


def lookup_text(customer: int, record: int, field: str) -> str:
    return f"customer {customer} record {record}: {field} = {(customer * 31 + record * 17) % 10_000 / 100:.2f}"


def report_text(task: str, done: int) -> str:
    return f"Customer {customer_in(task)}: {done} records read; the figures are in the tool results above."


# -- the bare references ----------------------------------------------------------------------------


def _bare(sleep: Callable[[float], Awaitable[None]], latency: bool, run_group: Any) -> Any:
    """The workload as a bare task group: ``run_group(coros)`` runs a stage's coroutines in parallel."""

    async def lookup(customer: int, record: int, field: str) -> str:
        if latency:
            await sleep(TOOL_S)
        return lookup_text(customer, record, field)

    async def sub(agent: int, task: str, out: list[list[dict[str, Any]]]) -> None:
        k = steps_in(task)
        transcript: list[dict[str, Any]] = [{"role": "system", "content": "work"}, {"role": "user", "content": task}]
        for s in range(k):
            if latency:
                await sleep(LLM_S)
            if s < k - 1:
                args = {"customer": customer_in(task), "record": s, "field": FIELDS[(agent + s) % 3]}
                reply = {
                    "role": "assistant",
                    "tool_calls": [{"id": f"call_{agent}_{s}", "name": "lookup", "arguments": args}],
                }
                transcript.append(reply)
                transcript.append({"role": "tool", "content": await lookup(**args)})
            else:
                transcript.append({"role": "assistant", "content": report_text(task, s)})
        out.append(transcript)

    async def main(stages: int, n: int) -> list[list[list[dict[str, Any]]]]:
        episode = []
        for stage in range(stages):
            if latency:
                await sleep(LLM_S)
            tasks = [task_text(stage, i) for i in range(n)]
            out: list[list[dict[str, Any]]] = []
            await run_group([sub(i, t, out) for i, t in enumerate(tasks)])
            episode.append(out)
        if latency:
            await sleep(LLM_S)
        return episode

    return main


async def _asyncio_group(coros: list[Any]) -> None:
    async with asyncio.TaskGroup() as tg:
        for c in coros:
            tg.create_task(c)


async def _anyio_group(coros: list[Any]) -> None:
    async def run(c: Any) -> None:
        await c

    async with anyio.create_task_group() as tg:
        for c in coros:
            tg.start_soon(run, c)


# -- the full runtime -------------------------------------------------------------------------------


class SimBackend:
    """A backend that answers from a function after a fixed simulated latency (no token ids)."""

    def __init__(self, fn: Callable[[ModelRequest], Completion], model: str, latency: bool) -> None:
        self._fn, self._model, self._delay = fn, model, (LLM_S if latency else 0.0)

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest) -> Completion:
        if self._delay:
            await anyio.sleep(self._delay)
        return self._fn(request)


def realistic_backends(stages: int, n: int, latency: bool) -> tuple[SimBackend, SimBackend, Tool]:
    """Fresh completions per call, unique tasks and a typed tool with per-call arguments."""

    def orch(request: ModelRequest) -> Completion:
        stage = sum(1 for m in request.messages if m.role == "assistant")
        if stage >= stages:
            return Completion(
                text="All customers are reported above.", usage=Usage(prompt_tokens=900, completion_tokens=12)
            )
        calls = tuple(
            ToolCall(
                id=f"assign_{stage}_{i}", name="assign_task", arguments={"agent": "w", "task": task_text(stage, i)}
            )
            for i in range(n)
        )
        return Completion(
            tool_calls=calls, finish_reason="tool_calls", usage=Usage(prompt_tokens=800, completion_tokens=40 * n)
        )

    def worker(request: ModelRequest) -> Completion:
        msgs = request.messages  # [system, user(task), (assistant, tool)*]
        task = msgs[1].content if isinstance(msgs[1], UserMessage) else "[1]"
        done = (len(msgs) - 2) // 2
        usage = Usage(prompt_tokens=200 + 60 * done, completion_tokens=30)
        if done + 1 >= steps_in(task):
            return Completion(text=report_text(task, done), usage=usage)
        args = {"customer": customer_in(task), "record": done, "field": FIELDS[(len(task) + done) % 3]}
        call = ToolCall(id=f"call_{request.agent_id}_{done}", name="lookup", arguments=args)
        return Completion(tool_calls=(call,), finish_reason="tool_calls", usage=usage)

    async def lookup(customer: int, record: int, field: Literal["total", "count", "mean"]) -> str:
        """Look up one record of a customer.

        Args:
            customer: the customer number
            record: which record
            field: the figure to read
        """
        if latency:
            await anyio.sleep(TOOL_S)
        return lookup_text(customer, record, field)

    return (
        SimBackend(orch, "sim-orchestrator", latency),
        SimBackend(worker, "sim-subagent", latency),
        Tool(lookup),
    )


def canned_backends(stages: int, n: int, latency: bool) -> tuple[SimBackend, SimBackend, Tool]:
    """The old best case: one shared canned completion per turn kind, a tool without arguments."""
    assign = tuple(
        ToolCall(id=f"c{i}", name="assign_task", arguments={"agent": "w", "task": f"[{steps_of(i)}]"}) for i in range(n)
    )
    stage_turn, final_turn = Completion(tool_calls=assign), Completion(text="done")
    tool_turn, report_turn = (
        Completion(tool_calls=(ToolCall(id="w", name="lookup", arguments={}),)),
        Completion(text="report"),
    )

    def orch(request: ModelRequest) -> Completion:
        return final_turn if sum(1 for m in request.messages if m.role == "assistant") >= stages else stage_turn

    def worker(request: ModelRequest) -> Completion:
        msgs = request.messages
        need = steps_in(msgs[1].content) if isinstance(msgs[1], UserMessage) else 1
        return report_turn if (len(msgs) - 2) // 2 + 1 >= need else tool_turn

    async def lookup() -> str:
        if latency:
            await anyio.sleep(TOOL_S)
        return "ok"

    return SimBackend(orch, "sim-orchestrator", latency), SimBackend(worker, "sim-subagent", latency), Tool(lookup)


def make_runtime(
    stages: int, n: int, latency: bool, workload: str, telemetry: Telemetry | None = None
) -> Callable[[], Awaitable[EpisodeRecord]]:
    build = realistic_backends if workload == "realistic" else canned_backends
    orch, worker, lookup = build(stages, n, latency)
    cfg = SwarmConfig(
        max_critical_steps=10_000,
        max_subagents_per_stage=n,
        max_concurrency=n,
        max_subagent_steps=8,
        subagent_timeout_s=600,
    )
    orch_ = Orchestrator(
        orch,
        cfg,
        tools=[lookup],
        agents=[AgentDefinition(name="w", system_prompt="work", tools=("lookup",))],
        subagent_backend=worker,
        telemetry=telemetry,
    )
    return lambda: orch_.run("Report every customer's open-order figures.")


def measure(
    impl: str, stages: int, n: int, latency: bool, workload: str = "realistic", telemetry: Telemetry | None = None
) -> tuple[Measure, object]:
    """One run of one implementation (``telemetry``: the runtime's, e.g. the CLI's tracing; default:
    whatever is installed globally, so off unless a provider is)."""
    expected = stages * sum(steps_of(i) for i in range(n))
    run = make_runtime(stages, n, latency, workload, telemetry) if impl == "runtime" else None
    gc.collect()
    rss0 = rss_bytes()
    c0, w0 = time.process_time(), time.perf_counter()
    result: object
    if impl == "asyncio":
        result = asyncio.run(_bare(asyncio.sleep, latency, _asyncio_group)(stages, n))
        steps = expected
    elif impl == "anyio":
        result = anyio.run(_bare(anyio.sleep, latency, _anyio_group), stages, n)
        steps = expected
    else:
        assert run is not None  # built outside the timed region: tool schemas, prompts
        box: list[EpisodeRecord] = []

        async def go() -> None:  # not returned through anyio.run (see Orchestrator.run_sync)
            box.append(await run())

        anyio.run(go)
        record = box[0]
        steps = record.dag.subagent_steps
        failed = sum(r.status.value != "completed" for r in record.subagent_results)
        if steps != expected or record.status.value != "completed" or failed:
            raise SystemExit(f"benchmark run went wrong: {record.status} {steps} != {expected}, {failed} failed")
        result = record
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss = rss_bytes() - rss0  # the result is still alive: records and transcripts count
    return Measure(impl, n, stages, latency, wall, cpu, rss, steps, ideal_critical_s(stages, n, latency)), result


def _one(impl: str, stages: int, n: int, latency: bool, workload: str, gc_args: list[str]) -> Measure:
    cmd = [sys.executable, __file__, "--one", impl, str(n), str(stages), "1" if latency else "0", workload, *gc_args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return Measure(**json.loads(out))


def _median(runs: list[Measure]) -> Measure:
    m = runs[0]
    return Measure(
        m.impl,
        m.n,
        m.stages,
        m.latency,
        statistics.median(r.wall_s for r in runs),
        statistics.median(r.cpu_s for r in runs),
        int(statistics.median(r.rss_delta_b for r in runs)),
        m.subagent_steps,
        m.ideal_s,
    )


def _apply_gc(args: argparse.Namespace) -> None:
    if args.gc_threshold:
        gc.set_threshold(*args.gc_threshold)
    if args.cli_gc:
        from agent_swarm.orchestrator.cli import tune_gc

        tune_gc()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="*", default=[64, 256, 1024])
    p.add_argument("--stages", type=int, default=3)
    p.add_argument("--workload", choices=("realistic", "canned"), default="realistic")
    p.add_argument("--json", action="store_true")
    p.add_argument("--repeat", type=int, default=3, help="interleaved fresh-process rounds per cell; median reported")
    p.add_argument("--impl", nargs="*", choices=IMPLS, default=list(IMPLS), help="which implementations to run")
    p.add_argument("--latency", choices=("both", "20ms", "0"), default="both")
    p.add_argument(
        "--gc-threshold",
        type=int,
        nargs=3,
        metavar=("G0", "G1", "G2"),
        help="set gc thresholds first (the swarm CLI uses 50000 20 20); default: CPython's",
    )
    p.add_argument(
        "--cli-gc", action="store_true", help="the swarm CLI's GC settings: threshold 50000 20 20, then gc.freeze()"
    )
    p.add_argument("--one", nargs=5, metavar=("IMPL", "N", "STAGES", "LATENCY", "WORKLOAD"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:  # child process: one measurement, as JSON
        _apply_gc(args)
        impl, n, stages, lat, workload = args.one
        m, _result = measure(impl, int(stages), int(n), lat == "1", workload)
        print(json.dumps(asdict(m)))
        return 0
    gc_args = [
        *(["--gc-threshold", *map(str, args.gc_threshold)] if args.gc_threshold else []),
        *(["--cli-gc"] if args.cli_gc else []),
    ]
    latencies = {"both": (True, False), "20ms": (True,), "0": (False,)}[args.latency]
    rows = []
    for latency in latencies:
        for n in args.n:
            runs: dict[str, list[Measure]] = {impl: [] for impl in args.impl}
            for _ in range(args.repeat):  # interleaved: drift in the machine's load hits every impl alike
                for impl in args.impl:
                    runs[impl].append(_one(impl, args.stages, n, latency, args.workload, gc_args))
            med = {impl: _median(r) for impl, r in runs.items()}
            ref = med.get("anyio")
            row: dict[str, Any] = {"n": n, "latency": latency, "workload": args.workload}
            for impl, m in med.items():
                row[impl] = m.row()
                if ref is not None:
                    row[impl]["x_anyio_cpu"] = m.cpu_us_per_step / max(ref.cpu_us_per_step, 1e-9)
                    row[impl]["x_anyio_wall"] = m.wall_s / ref.wall_s
                    row[impl]["x_anyio_rss"] = m.rss_kib_per_subagent / max(ref.rss_kib_per_subagent, 1e-9)
            rows.append(row)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    print(f"workload: {args.workload}, {args.stages} stages, median of {args.repeat} interleaved runs")
    print("×: ratio to the bare anyio task group of the same run")
    print(
        f"{'N':>5} {'lat':>4} {'impl':>8} | {'wall/ideal':>10} {'×':>5} | {'CPU µs/step':>11} {'×':>5} | "
        f"{'RSS KiB/agent':>13} {'×':>5}"
    )
    for r in rows:
        for impl in args.impl:
            a = r[impl]
            wi = f"{a['wall_over_ideal']:.3f}" if r["latency"] else "-"
            wx = f"{a.get('x_anyio_wall', float('nan')):.2f}" if r["latency"] else "-"
            print(
                f"{r['n']:>5} {'20ms' if r['latency'] else '0':>4} {impl:>8} | {wi:>10} {wx:>5} | "
                f"{a['cpu_us_per_step']:>11.1f} {a.get('x_anyio_cpu', float('nan')):>5.2f} | "
                f"{a['rss_kib_per_subagent']:>13.2f} {a.get('x_anyio_rss', float('nan')):>5.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
