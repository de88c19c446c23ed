"""Tracing overhead: CPU µs per sub-agent step with tracing off and on, the increment and the ratio.

Workload: the runtime benchmark's own fan-out (``bench/bench_runtime.py``: ``T`` stages, each one
orchestrator call fanning out ``N`` sub-agents of 1-5 steps, a tool call between steps), run with
0 latency so only CPU is measured. Per sub-agent step the runtime makes 2.0 spans on average: one
``chat``, 2/3 of an ``execute_tool`` and 1/3 of an ``invoke_agent``. Variants, each in a fresh
subprocess, interleaved, repeated (median and minimum kept):

- ``off``     no SDK installed: the runtime's Telemetry is disabled (the library default);
- ``memory``  the CLI's provider (resource, ``BatchSpanProcessor`` with the CLI's queue) into an
  in-memory exporter;
- ``file``    exactly what ``swarm run`` installs with no OTLP receiver: ``start_tracing`` writing the
  per-episode OTLP JSON-lines file (``BatchSpanProcessor`` + the maintained ``FileSpanExporter``),
  its sampler tracing at most ``DEFAULT_TRACED_SUBAGENTS`` sub-agents of a wider stage, and the
  runtime's ``Telemetry`` from ``Tracing.telemetry()``;
- ``file_all`` the same with every sub-agent traced (``swarm run --trace-subagents 0``);
- ``sampled_out`` the same with ``OTEL_TRACES_SAMPLER=always_off`` (what ratio sampling costs for
  the episodes it drops).

CPU is ``time.process_time`` of the whole process (so the batch exporter's thread counts) and includes
the final flush, so encoding and writing every span is paid for. Each variant runs under CPython's
default GC thresholds (a library user) and under the CLI's (``agent_swarm.orchestrator.cli.GC_THRESHOLD``, what
``swarm run`` sets); the cyclic GC is the largest amplifier of tracing's cost.

``--breakdown`` adds single-thread micro-benchmarks of where a traced step's CPU goes (GC off, best
of several repeats): a sampled-out span, the raw SDK span with our attributes, the same through
``Telemetry``, the batch processor's ``on_end``, the trace-file router, and encoding + writing a span.

    python bench/bench_tracing.py                        # N = 64, 256, 1024; 3 repetitions; both GCs
    python bench/bench_tracing.py --n 1024 --reps 5 --gc cli --breakdown
    python bench/bench_tracing.py --n 1024 --reps 3 --gc default --latency 20ms   # wall, flush included
    python bench/bench_tracing.py --json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ("off", "memory", "file_all", "file", "sampled_out")
GCS = ("default", "cli")


def _child(variant: str, ns: list[int], stages: int, gc_mode: str, latency: bool = False) -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    import bench_runtime  # the runtime benchmark's workload and measurement

    from agent_swarm.swarm.tracing import Telemetry

    if gc_mode == "cli":
        from agent_swarm.orchestrator.cli import GC_THRESHOLD

        gc.set_threshold(*GC_THRESHOLD)
    flush: Callable[[], object] | None = None
    telemetry: Telemetry | None = None  # None: the globally installed provider, as a library user gets
    per_stage: int | None = None
    out_dir = Path(tempfile.mkdtemp(prefix="bench-tracing-"))
    if variant == "memory":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from agent_swarm.orchestrator.cli.telemetry_setup import QUEUE_SIZE, _resource

        provider = TracerProvider(resource=_resource({}))
        provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter(), max_queue_size=QUEUE_SIZE))
        trace.set_tracer_provider(provider)
        flush = provider.force_flush
    elif variant in ("file", "file_all", "sampled_out"):  # the sampler comes from OTEL_TRACES_SAMPLER (set by main)
        from agent_swarm.orchestrator.cli.telemetry_setup import DEFAULT_TRACED_SUBAGENTS, TracingOptions, start_tracing

        per_stage = None if variant == "file_all" else DEFAULT_TRACED_SUBAGENTS
        tracing = start_tracing(
            TracingOptions(traced_subagents=per_stage),
            out=out_dir,
            env={"OTEL_TRACES_EXPORTER": "none"},
            capture_logs=False,
        )
        assert tracing.provider is not None and tracing.files is not None
        flush = tracing.provider.force_flush
        telemetry = tracing.telemetry()  # exactly what `swarm run` hands its Orchestrator

    bench_runtime.measure("runtime", stages, 8, False, telemetry=telemetry)  # warm-up: imports, caches
    if flush is not None:
        flush()
    rows = []
    for n in ns:
        load = os.getloadavg()[0]
        m, record = bench_runtime.measure("runtime", stages, n, latency, telemetry=telemetry)
        c0, w0 = time.process_time(), time.perf_counter()
        if flush is not None:
            flush()
        cpu = m.cpu_s + (time.process_time() - c0)
        wall = m.wall_s + (time.perf_counter() - w0)
        trace_id = getattr(record, "trace_id", None)
        if (variant in ("off", "sampled_out")) != (trace_id is None):
            raise SystemExit(f"variant {variant!r} ran with trace id {trace_id!r}: tracing was not as intended")
        file_bytes = sum(p.stat().st_size for p in (out_dir / str(getattr(record, "episode_id", ""))).glob("*.jsonl"))
        if variant in ("file", "file_all"):  # outside the timing: every span sampled must be in the file
            written = _spans_in(out_dir / str(getattr(record, "episode_id", "")))
            expected = _expected_spans(record, per_stage)
            if written != expected:
                raise SystemExit(f"the trace file holds {written} spans, expected {expected}")
        rows.append(
            {
                "variant": variant,
                "gc": gc_mode,
                "n": n,
                "stages": stages,
                "steps": m.subagent_steps,
                "cpu_us_per_step": 1e6 * cpu / m.subagent_steps,
                "wall_s": wall,
                "file_bytes": file_bytes,
                "load_avg_1min": load,
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


def _expected_spans(record: Any, per_stage: int | None = None) -> int:
    """Spans of the benchmark episode: root, orchestrator chats, stage spans, and per traced sub-agent
    its invoke_agent span, one chat per step and one execute_tool per tool call (``per_stage``: the
    CLI's :class:`WideStageSampler` keeps every ``ceil(width / per_stage)``-th sub-agent of a wider stage)."""
    subs = []
    for s in record.stages:
        width = len(s.subagents)
        stride = -(-width // per_stage) if per_stage is not None and width > per_stage else 1
        subs += [r for i, r in enumerate(s.subagents) if i % stride == 0]
    per_agent: int = sum(1 + r.steps + sum(len(st.tool_results) for st in r.step_records) for r in subs)
    stage_spans = sum(1 for s in record.stages if s.kind not in ("answer", "retry"))
    return 1 + len(record.turns) + stage_spans + per_agent


# -- breakdown (single thread, GC off, best of repeats) ---------------------------------------------


def _best_us(fn: Callable[[], object], reps: int, rounds: int = 15) -> float:
    """Best CPU µs per call of ``fn`` over ``rounds`` rounds of ``reps`` calls, GC off (the minimum
    over many short rounds is the estimate least inflated by other jobs on a shared machine)."""
    fn()
    best = float("inf")
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            c0 = time.process_time()
            for _ in range(reps):
                fn()
            best = min(best, (time.process_time() - c0) / reps * 1e6)
    finally:
        gc.enable()
    return best


def _raw_step(raw: Any, chat_attrs: Any, done_attrs: Any, tool_attrs: Any, agent_attrs: Any) -> Callable[[], None]:
    """The spans of one traced step through the bare SDK API: 3 chats, 2 tools, 1 agent."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.util.types import AnyValue

    def raw_span(name: str, kind: SpanKind, attributes: dict[str, AnyValue], done: dict[str, AnyValue]) -> None:
        span = raw.start_span(name, kind=kind, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        if done:
            span.set_attributes(done)
        otel_context.detach(token)
        span.end()

    def raw_step() -> None:  # the spans of `step` through the bare SDK API: 3 chats, 2 tools, 1 agent
        span = raw.start_span("invoke_agent w", kind=SpanKind.INTERNAL, attributes=agent_attrs)
        token = otel_context.attach(trace.set_span_in_context(span))
        for i in range(3):
            raw_span("chat m", SpanKind.CLIENT, chat_attrs, done_attrs)
            if i < 2:
                raw_span("execute_tool work", SpanKind.INTERNAL, tool_attrs, {})
        span.set_attributes(done_attrs)
        otel_context.detach(token)
        span.end()

    return raw_step


def _traced_step(t: Any, backend: Any, sampling: Any, completion: Any) -> Callable[[], None]:
    """One average sub-agent step of the benchmark: a chat, 2/3 of a tool call, 1/3 of an agent."""
    from agent_swarm.swarm.tracing import attr

    def chat() -> None:
        with t.chat(model="m", backend=backend, sampling=sampling, messages=()) as span:
            t.completion(span, completion)

    def tool() -> None:
        with t.tool(name="work", call_id="w", arguments={}) as span:
            t.content(span, attr.TOOL_RESULT, "ok")

    def one() -> None:  # 3 steps: 3 chats, 2 tools, 1 agent
        with t.agent(name="w", agent_id="w-0", model="m", episode_id="e") as span:
            chat()
            tool()
            chat()
            tool()
            chat()
            t.agent_result(span, status="completed", steps=3, input_tokens=300, output_tokens=60)

    return one


def _breakdown(reps: int = 1500) -> dict[str, float]:
    """µs per span (or per step) of each piece a traced sub-agent step pays for."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.json.file.trace_exporter import FileSpanExporter
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from opentelemetry.trace import SpanKind
    from opentelemetry.util.types import AnyValue

    from agent_swarm.orchestrator.cli.telemetry_setup import ENCODE_CHUNK, EpisodeTraceFiles, _resource
    from agent_swarm.swarm.backend import Completion, SamplingParams, Usage
    from agent_swarm.swarm.tracing import Telemetry, attr

    resource = _resource({})
    sampling = SamplingParams()
    completion = Completion(text="x", usage=Usage(prompt_tokens=100, completion_tokens=20), model="m")
    chat_attrs: dict[str, AnyValue] = {
        attr.OPERATION: "chat",
        attr.PROVIDER: "swarm",
        attr.REQUEST_MODEL: "m",
        attr.REQUEST_TEMPERATURE: 1.0,
        attr.REQUEST_TOP_P: 1.0,
        attr.REQUEST_MAX_TOKENS: 1024,
    }
    done_attrs: dict[str, AnyValue] = {
        attr.INPUT_TOKENS: 100,
        attr.OUTPUT_TOKENS: 20,
        attr.FINISH_REASONS: ("stop",),
        attr.RESPONSE_MODEL: "m",
    }

    class Backend:
        model = "m"

    backend = Backend()

    def provider(*processors: SpanProcessor, sampled: bool = True) -> TracerProvider:
        p = TracerProvider(resource=resource, sampler=None if sampled else ALWAYS_OFF)
        for sp in processors:
            p.add_span_processor(sp)
        return p

    def step(t: Telemetry) -> Callable[[], None]:
        return _traced_step(t, backend, sampling, completion)

    out: dict[str, float] = {}
    raw = provider().get_tracer("bench")

    def raw_chat() -> None:
        span = raw.start_span("chat m", kind=SpanKind.CLIENT, attributes=chat_attrs)
        span.set_attributes(done_attrs)
        span.end()

    def raw_chat_current() -> None:
        span = raw.start_span("chat m", kind=SpanKind.CLIENT, attributes=chat_attrs)
        token = otel_context.attach(trace.set_span_in_context(span))
        span.set_attributes(done_attrs)
        otel_context.detach(token)
        span.end()

    tool_attrs: dict[str, AnyValue] = {
        attr.OPERATION: "execute_tool",
        attr.TOOL_NAME: "work",
        attr.TOOL_TYPE: "function",
        attr.TOOL_CALL_ID: "w",
    }
    agent_attrs: dict[str, AnyValue] = {
        attr.OPERATION: "invoke_agent",
        attr.PROVIDER: "swarm",
        attr.AGENT_NAME: "w",
        attr.AGENT_ID: "w-0",
        attr.REQUEST_MODEL: "m",
        attr.CONVERSATION_ID: "e",
    }

    raw_step = _raw_step(raw, chat_attrs, done_attrs, tool_attrs, agent_attrs)

    out["sdk_chat_span_us"] = _best_us(raw_chat, reps)
    out["sdk_chat_span_current_us"] = _best_us(raw_chat_current, reps)
    out["sdk_step_us"] = _best_us(raw_step, reps // 3) / 3
    out["telemetry_step_us"] = _best_us(step(Telemetry(provider())), reps // 3) / 3
    out["telemetry_step_sampled_out_us"] = _best_us(step(Telemetry(provider(sampled=False))), reps // 3) / 3
    out["disabled_step_us"] = _best_us(step(Telemetry(enabled=False)), reps // 3) / 3

    quiet: dict[str, Any] = {  # a batch queue whose worker never exports during the timing
        "max_queue_size": 2_000_000,
        "max_export_batch_size": 2_000_000,
        "schedule_delay_millis": 1e9,
    }
    batch = BatchSpanProcessor(InMemorySpanExporter(), **quiet)
    out["batch_on_end_step_us"] = _best_us(step(Telemetry(provider(batch))), reps // 3) / 3 - out["telemetry_step_us"]
    batch.shutdown()  # type: ignore[no-untyped-call]
    files = EpisodeTraceFiles(Path(tempfile.mkdtemp(prefix="bench-tracing-")), **quiet)
    t = Telemetry(provider(files))
    with t.episode(episode_id="e", model="m", task_id="t"):  # the router's on_start / on_end, same queue
        routed = _best_us(step(t), reps // 3) / 3
    out["file_router_step_us"] = routed - out["telemetry_step_us"] - out["batch_on_end_step_us"]
    files.shutdown()

    memory = InMemorySpanExporter()
    t = Telemetry(provider(SimpleSpanProcessor(memory)))
    for _ in range(300):
        step(t)()
    spans: list[ReadableSpan] = list(memory.get_finished_spans())  # 3 chats : 2 tools : 1 agent
    exporter = FileSpanExporter(Path(tempfile.mkdtemp(prefix="bench-tracing-")) / "trace.jsonl")

    def encode_file() -> None:
        for i in range(0, len(spans), ENCODE_CHUNK):
            exporter.export(spans[i : i + ENCODE_CHUNK])

    def encode_protobuf() -> None:
        for i in range(0, len(spans), 512):
            encode_spans(spans[i : i + 512]).SerializeToString()

    out["file_encode_write_span_us"] = _best_us(encode_file, 1) / len(spans)
    out["otlp_protobuf_encode_span_us"] = _best_us(encode_protobuf, 1) / len(spans)
    exporter.shutdown()
    out["spans_per_step"] = len(spans) / (3 * 300)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="*", default=[64, 256, 1024])
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--gc", choices=[*GCS, "both"], default="both")
    p.add_argument("--breakdown", action="store_true", help="also run the per-span micro-benchmarks")
    p.add_argument(
        "--latency",
        choices=("0", "20ms"),
        default="0",
        help="simulated model/tool latency; with 20ms the wall time (flush included) is compared too",
    )
    p.add_argument("--variants", nargs="*", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        json.dump(_child(args.child, args.n, args.stages, args.gc, args.latency == "20ms"), sys.stdout)
        return 0

    gcs = GCS if args.gc == "both" else (args.gc,)
    variants = [v for v in VARIANTS if v in args.variants or v == "off"]
    samples: dict[tuple[str, str, int], list[float]] = {}
    walls: dict[tuple[str, str, int], list[float]] = {}
    loads: dict[tuple[str, int], list[float]] = {}
    bytes_per_step: dict[int, float] = {}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    for _ in range(args.reps):
        for g in gcs:
            for variant in variants:  # interleaved, so drift in machine load hits every variant alike
                env = dict(base_env, OTEL_TRACES_SAMPLER="always_off") if variant == "sampled_out" else base_env
                cmd = [sys.executable, __file__, "--child", variant, "--gc", g, "--stages", str(args.stages)]
                cmd += ["--latency", args.latency]
                out = subprocess.run(
                    [*cmd, "--n", *map(str, args.n)], check=True, capture_output=True, text=True, env=env
                )
                for r in json.loads(out.stdout):
                    samples.setdefault((g, variant, r["n"]), []).append(r["cpu_us_per_step"])
                    walls.setdefault((g, variant, r["n"]), []).append(r["wall_s"])
                    loads.setdefault((g, r["n"]), []).append(r["load_avg_1min"])
                    if variant == "file":
                        bytes_per_step[r["n"]] = r["file_bytes"] / r["steps"]
    breakdown = _breakdown() if args.breakdown else None
    table = []
    for g in gcs:
        for n in args.n:
            med = {v: statistics.median(samples[(g, v, n)]) for v in variants}
            low = {v: min(samples[(g, v, n)]) for v in variants}
            wall = {v: statistics.median(walls[(g, v, n)]) for v in variants}
            table.append(
                {
                    "gc": g,
                    "n": n,
                    "cpu_us_per_step": med,
                    "cpu_us_per_step_min": low,
                    "increment_us_per_step": {v: med[v] - med["off"] for v in variants if v != "off"},
                    "ratio_vs_off": {v: med[v] / med["off"] for v in variants if v != "off"},
                    "wall_s": wall,
                    "wall_ratio_vs_off": {v: wall[v] / wall["off"] for v in variants if v != "off"},
                    "file_bytes_per_step": bytes_per_step.get(n),
                    "load_avg_1min": (min(loads[(g, n)]), max(loads[(g, n)])),
                }
            )
    if args.json:
        doc = {
            "reps": args.reps,
            "stages": args.stages,
            "latency": args.latency,
            "cpus": os.cpu_count(),
            "rows": table,
            "breakdown": breakdown,
        }
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 0
    print(
        f"CPU µs per sub-agent step, {args.latency}-latency fan-out, {args.stages} stages, median of {args.reps} "
        f"runs (min in brackets); + = increment over off; × = ratio to off; {os.cpu_count()} CPUs"
    )
    for r in table:
        c, lo, inc, x = r["cpu_us_per_step"], r["cpu_us_per_step_min"], r["increment_us_per_step"], r["ratio_vs_off"]
        cells = [f"off {c['off']:.0f} [{lo['off']:.0f}]"]
        cells += [f"{v} {c[v]:.0f} [{lo[v]:.0f}] +{inc[v]:.0f} {x[v]:.2f}×" for v in variants if v != "off"]
        la = r["load_avg_1min"]
        print(f"gc={r['gc']:<7} N={r['n']:>5} | " + " | ".join(cells) + f" | load {la[0]:.1f}-{la[1]:.1f}")
        if args.latency != "0":
            w, wx = r["wall_s"], r["wall_ratio_vs_off"]
            cells = [f"off {w['off']:.3f} s"] + [f"{v} {w[v]:.3f} s {wx[v]:.2f}×" for v in variants if v != "off"]
            print("   wall (flush included)    | " + " | ".join(cells))
    if bytes_per_step:
        print("trace file bytes per step: " + ", ".join(f"N={n}: {b:.0f}" for n, b in bytes_per_step.items()))
    if breakdown is not None:
        print(f"\nbreakdown (single thread, GC off, best of 15; load {os.getloadavg()[0]:.1f}):")
        for k, v in breakdown.items():
            print(f"  {k:<32} {v:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
