"""How many CPU threads the local engine decodes with: the cores other work leaves free."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

__all__ = ["MAX_SLOTS", "SLOTS_PER_CORE", "busy_cores", "default_threads", "slot_cap"]

MAX_SLOTS = 16
"""The most slots an automatic plan starts (each reserves its own KV cache)."""
SLOTS_PER_CORE = 4
"""Automatic slots per core: on 2 cores, 8 slots start the 1.5B's engine 20-25 s sooner than 16 (their
own KV caches are memory llama.cpp clears at start), while 16 requests at once decode 1.31x the
tokens/s of 8 (bench/README.md, "Slots and the engine start")."""


def default_threads(cpus: int | None = None, load: float | None = None) -> int:
    """Decode threads for a machine with ``cpus`` cores of which ``load`` are busy with other work
    (both read from the system when not given, see :func:`busy_cores`): one per core that other work
    leaves free, at least 1.

    llama.cpp's threads meet at a spinning barrier several times per token; when another process
    holds one of their cores, the others spin until it is scheduled again. Measured on 2 cores at
    load 14 (Qwen2.5-Coder-0.5B, 48 tokens): 4 tok/s with 1 thread, 0.3-0.5 tok/s with 2. On an
    idle machine every core is used.
    """
    cpus = cpus or os.cpu_count() or 2
    if load is None:
        load = busy_cores()
    return max(1, min(cpus, math.floor(cpus - load + 0.5)))


def slot_cap(cpus: int | None = None) -> int:
    """The most slots an automatic plan starts on a machine with ``cpus`` cores (read from the system
    when not given): :data:`SLOTS_PER_CORE` per core, at most :data:`MAX_SLOTS`. Each slot's own cache is
    memory llama.cpp clears at every engine start (16 slots of 32,768 tokens are 14 GiB on the 1.5B:
    27-33 s of a start on 2 cores, against 7-8 s for 8); the sub-agents beyond the slots wait unstarted,
    so a stage wider than the slots runs in waves (its decoding about a quarter slower at 16 wide than
    with 16 slots). Set slots are not capped."""
    cpus = cpus or os.cpu_count() or 2
    return max(1, min(MAX_SLOTS, SLOTS_PER_CORE * cpus))


def busy_cores(interval: float = 0.25, stat: Path = Path("/proc/stat")) -> float:
    """How many cores other work keeps busy now: non-idle CPU time over ``interval`` seconds of
    ``/proc/stat``, else the 1-minute load average (other platforms), else 0.

    Not the load average where /proc/stat exists: it is the last minute's, so a ``swarm run`` started
    right after another (whose two decode threads leave a load of 1-2 for a minute) read its
    predecessor as a busy core and decoded on one thread of an idle 2-core machine, at half speed.
    """
    first = _cpu_times(stat)
    if first is not None:
        time.sleep(interval)
        second = _cpu_times(stat)
        if second is not None and second[0] > first[0]:
            total, idle = second[0] - first[0], second[1] - first[1]
            return (os.cpu_count() or 1) * (total - idle) / total
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return 0.0


def _cpu_times(stat: Path) -> tuple[int, int] | None:
    """(total, idle + iowait) jiffies of all cores from ``/proc/stat``'s first line, or ``None``."""
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
        values = [int(v) for v in fields[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    if fields[0] != "cpu" or len(values) < 5:
        return None
    return sum(values), values[3] + values[4]
