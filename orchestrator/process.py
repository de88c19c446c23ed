"""Process-wide settings that entry points apply (the CLI, and the Ray actors that stand in for it).

Like the tracing SDK, they belong to entry points, never to library code: :func:`tune_gc` is called by
``swarm`` (:func:`agent_swarm.orchestrator.cli.main`) and by each cluster actor
(:mod:`agent_swarm.orchestrator.cluster.slots`).
"""

from __future__ import annotations

import gc

__all__ = ["GC_THRESHOLD", "tune_gc"]

# A wide fan-out allocates hundreds of thousands of short-lived objects per stage; with CPython's
# default gen-0 threshold (700) the cyclic GC runs thousands of times per stage and costs ~20% of
# the runtime's CPU per sub-agent step (bench/bench_runtime.py --gc-threshold).
# gc.freeze() then moves everything imported so far (tens of thousands of module, class and
# pydantic-schema objects) out of the collector's reach: full collections stop re-scanning them,
# which cuts another ~15% of the CPU per step at a 1,000-way fan-out.
GC_THRESHOLD = (50_000, 20, 20)


def tune_gc() -> None:
    """The CLI's process-wide GC settings (the benchmark's ``--cli-gc`` applies the same)."""
    gc.collect()
    gc.set_threshold(*GC_THRESHOLD)
    gc.freeze()
