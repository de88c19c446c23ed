"""Tracing overhead: CPU per sub-agent step with tracing on vs off, as a ratio.

Workload: the runtime benchmark's own fan-out (``bench/bench_runtime.py``: ``T`` stages, each one
orchestrator call fanning out ``N`` sub-agents of 1-5 steps, a tool call between steps), run with
0 latency so only CPU is measured. Variants, each in a fresh subprocess, repeated and the median kept:

- ``off``     no SDK installed: the runtime's Telemetry is disabled (the library default);
- ``memory``  SDK + ``BatchSpanProcessor`` + in-memory exporter;
- ``file``    SDK + the CLI's per-episode OTLP JSON-lines file (``BatchSpanProcessor`` + the maintained
  ``FileSpanExporter``), i.e. what ``swarm run`` does with no receiver listening;
- ``sampled_out`` the same SDK with a sampler that drops the episode (what ``OTEL_TRACES_SAMPLER``
  ratio sampling costs for the episodes it does not keep).

CPU is ``time.process_time`` of the whole process (so the batch exporter's thread counts) and includes
the final flush, so encoding and writing every span is paid for. The same workload with the runtime
benchmark's simulated latencies (20 ms LLM, 2 ms tool) gives wall time / ideal critical path per variant.
A micro-benchmark also reports what a *disabled* Telemetry costs per sub-agent step (its share of the
``off`` CPU per step).

    python bench/bench_tracing.py                    # N = 64, 256, 1024; 3 repetitions
    python bench/bench_tracing.py --n 1024 --reps 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ("off", "memory", "file", "sampled_out")


def _child(variant: str, ns: list[int], stages: int) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    import bench_runtime  # the runtime benchmark's workload and measurement

    flush = None
    out_dir = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    if variant != "off":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

        from orchestrator.telemetry_setup import QUEUE_SIZE, EpisodeTraceFiles

        provider = TracerProvider(sampler=ALWAYS_OFF if variant == "sampled_out" else ALWAYS_ON)
        if variant == "memory":
            provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=QUEUE_SIZE))
        else:  # what `swarm run` installs
            provider.add_span_processor(EpisodeTraceFiles(out_dir, max_queue_size=QUEUE_SIZE))
        # make_runtime() builds its Orchestrator without a provider: Telemetry picks up the global one.
        trace.set_tracer_provider(provider)
        flush = provider.force_flush

    bench_runtime.measure("runtime", stages, 8, False)  # warm-up: imports, caches
    if flush is not None:
        flush()
    rows = []
    for n in ns:
        m, record = bench_runtime.measure("runtime", stages, n, False)
        c0 = time.process_time()
        if flush is not None:
            flush()
        cpu = m.cpu_s + (time.process_time() - c0)
        trace_id = getattr(record, "trace_id", None)
        if (variant in ("off", "sampled_out")) != (trace_id is None):
            raise SystemExit(f"variant {variant!r} ran with trace id {trace_id!r}: tracing was not as intended")
        files = sum(p.stat().st_size for p in out_dir.rglob("*.jsonl"))
        if variant == "file":  # outside the timing: every span must be in the file (none dropped)
            written, expected = _spans_in(out_dir / str(getattr(record, "episode_id", ""))), _expected_spans(record)
            if written != expected:
                raise SystemExit(f"the trace file holds {written} spans, expected {expected}")
        # the same workload with the simulated 20 ms LLM / 2 ms tool latencies: wall / ideal critical path
        lat, _ = bench_runtime.measure("runtime", stages, n, True)
        if flush is not None:
            flush()
        rows.append(
            {
                "variant": variant,
                "n": n,
                "stages": stages,
                "steps": m.subagent_steps,
                "cpu_us_per_step": 1e6 * cpu / m.subagent_steps,
                "wall_over_ideal": lat.wall_over_ideal,
                "file_bytes_total": files,
            }
        )
    return rows


def _spans_in(episode_dir: Path) -> int:
    return sum(
        len(ss["spans"])
        for line in (episode_dir / "trace.jsonl").read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
    )


def _expected_spans(record: Any) -> int:
    """Spans of the benchmark episode: root, orchestrator chats, stage spans, and per sub-agent its
    invoke_agent span, one chat per step and one execute_tool per tool call."""
    subs = [r for s in record.stages for r in s.subagents]
    per_agent = sum(1 + r.steps + sum(len(st.tool_results) for st in r.step_records) for r in subs)
    stage_spans = sum(1 for s in record.stages if s.kind not in ("answer", "retry"))
    return 1 + len(record.turns) + stage_spans + per_agent


def _disabled_cost_ns() -> float:
    """Nanoseconds a disabled Telemetry adds per sub-agent step (over an empty loop): one agent scope,
    one chat scope + completion(), one tool scope + content(). The agent scope really is paid once per
    agent, not per step, so this overstates the cost."""
    from swarm.backend import Completion
    from swarm.tracing import Telemetry

    t = Telemetry(enabled=False)
    c = Completion(text="x")
    reps = 200_000
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        pass
    empty = time.perf_counter_ns() - t0
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        with t.agent(name="w", agent_id="w-0", model="m", episode_id="e"):
            pass
        with t.chat(model="m", backend=None, sampling=None, messages=None) as span:
            t.completion(span, c)
        with t.tool(name="work", call_id="w", arguments=None) as span:
            t.content(span, "k", "v")
    return (time.perf_counter_ns() - t0 - empty) / reps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="*", default=[64, 256, 1024])
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        json.dump(_child(args.child, args.n, args.stages), sys.stdout)
        return 0

    load_before = os.getloadavg()[0]
    samples: dict[tuple[str, int], list[float]] = {}
    walls: dict[tuple[str, int], list[float]] = {}
    bytes_per_step: dict[int, float] = {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for _ in range(args.reps):
        for variant in VARIANTS:  # interleaved, so drift in machine load hits every variant alike
            cmd = [sys.executable, __file__, "--child", variant, "--stages", str(args.stages), "--n", *map(str, args.n)]
            rows = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)
            for r in rows:
                samples.setdefault((variant, r["n"]), []).append(r["cpu_us_per_step"])
                walls.setdefault((variant, r["n"]), []).append(r["wall_over_ideal"])
                if variant == "file":
                    bytes_per_step[r["n"]] = r["file_bytes_total"] / r["steps"]
    disabled_ns = _disabled_cost_ns()
    load = (load_before, os.getloadavg()[0])
    table = []
    for n in args.n:
        med = {v: statistics.median(samples[(v, n)]) for v in VARIANTS}
        table.append(
            {
                "n": n,
                "cpu_us_per_step": med,
                "wall_over_ideal": {v: statistics.median(walls[(v, n)]) for v in VARIANTS},
                "ratio_memory_vs_off": med["memory"] / med["off"],
                "ratio_file_vs_off": med["file"] / med["off"],
                "ratio_sampled_out_vs_off": med["sampled_out"] / med["off"],
                "file_bytes_per_step": bytes_per_step.get(n),
                "disabled_telemetry_us_per_step": disabled_ns / 1000,
                "disabled_share_of_off": disabled_ns / 1000 / med["off"],
            }
        )
    if args.json:
        json.dump(
            {"reps": args.reps, "stages": args.stages, "load_avg_1min": load, "cpus": os.cpu_count(), "rows": table},
            sys.stdout,
            indent=1,
        )
        print()
        return 0
    print(f"CPU µs per sub-agent step, 0-latency fan-out, {args.stages} stages, median of {args.reps} runs")
    print(
        f"{'N':>5} | {'off':>7} {'memory':>7} {'file':>7} {'unsamp.':>7} | {'mem/off':>7} {'file/off':>8} "
        f"{'unsamp./off':>11} | {'file B/step':>11}"
    )
    for r in table:
        c = r["cpu_us_per_step"]
        print(
            f"{r['n']:>5} | {c['off']:>7.1f} {c['memory']:>7.1f} {c['file']:>7.1f} {c['sampled_out']:>7.1f} | "
            f"{r['ratio_memory_vs_off']:>7.2f} {r['ratio_file_vs_off']:>8.2f} {r['ratio_sampled_out_vs_off']:>11.2f} | "
            f"{r['file_bytes_per_step'] or 0:>11.0f}"
        )
    print(f"\nwall / ideal critical path with 20 ms LLM and 2 ms tool latency (median of {args.reps})")
    print(
        f"(1-min load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} CPUs; "
        "wall figures need an idle machine)"
    )
    print(f"{'N':>5} | {'off':>7} {'memory':>7} {'file':>7} {'unsamp.':>7}")
    for r in table:
        w = r["wall_over_ideal"]
        print(f"{r['n']:>5} | {w['off']:>7.3f} {w['memory']:>7.3f} {w['file']:>7.3f} {w['sampled_out']:>7.3f}")
    r0 = table[-1]
    print(
        f"disabled Telemetry: {r0['disabled_telemetry_us_per_step']:.2f} µs per step "
        f"({100 * r0['disabled_share_of_off']:.1f}% of the untraced CPU per step at N={r0['n']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
