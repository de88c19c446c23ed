"""How many CPU threads the local engine decodes with: the cores other work leaves free."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Collection
from pathlib import Path

from agent_swarm.swarm._cgroup import cpu_quota

__all__ = ["MAX_SLOTS", "SLOTS_PER_CORE", "busy_cores", "default_threads", "slot_cap", "usable_cores"]

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
    cpus = cpus or usable_cores()
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
    cpus = cpus or usable_cores()
    return max(1, min(MAX_SLOTS, SLOTS_PER_CORE * cpus))


def usable_cores(proc: Path = Path("/proc/self")) -> int:
    """The cores this process may use: its CPU affinity (``taskset``, a cpuset), at most its cgroup's CPU
    quota rounded down (``docker --cpus``, a Kubernetes limit: :func:`~agent_swarm.swarm._cgroup.cpu_quota`),
    at least 1. ``os.cpu_count()`` counts the host's cores: a 2-CPU container on a 64-core host would
    decode on 64 threads, each spinning at llama.cpp's barrier for a core the quota does not give it.
    ``proc`` is where the cgroup layout is read (tests)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    quota = cpu_quota(proc)
    if quota is not None:
        cores = min(cores, math.floor(quota))
    return max(1, cores)


def busy_cores(interval: float = 0.25, stat: Path = Path("/proc/stat"), cpus: Collection[int] | None = None) -> float:
    """How many of this process's usable cores (:func:`usable_cores`) other work keeps busy now: the
    non-idle share of CPU time over ``interval`` seconds of ``/proc/stat`` times those cores, else the
    1-minute load average (other platforms), else 0. The share is of the cores in ``cpus`` (default: this
    process's affinity, a container's cpuset) when ``/proc/stat`` lists each, else of all.

    Not the load average where /proc/stat exists: it is the last minute's, so a ``swarm run`` started
    right after another (whose two decode threads leave a load of 1-2 for a minute) read its
    predecessor as a busy core and decoded on one thread of an idle 2-core machine, at half speed.
    """
    if cpus is None:
        try:
            cpus = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # not on Linux
            cpus = ()
    first = _cpu_times(stat, cpus)
    if first is not None:
        time.sleep(interval)
        second = _cpu_times(stat, cpus)
        if second is not None and second[0] > first[0]:
            total, idle = second[0] - first[0], second[1] - first[1]
            return usable_cores() * (total - idle) / total
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform
        return 0.0


def _cpu_times(stat: Path, cpus: Collection[int] = ()) -> tuple[int, int] | None:
    """(total, idle + iowait) jiffies from ``/proc/stat``: summed over the lines of ``cpus`` when each is
    there, else the first line's (all cores); ``None`` when unreadable."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    per_cpu = {fields[0]: times for line in lines if (fields := line.split()) and (times := _times(fields))}
    wanted = [per_cpu.get(f"cpu{n}") for n in cpus]
    if wanted and all(w is not None for w in wanted):
        return sum(w[0] for w in wanted if w), sum(w[1] for w in wanted if w)
    first = lines[0].split() if lines else []
    return _times(first) if first and first[0] == "cpu" else None


def _times(fields: list[str]) -> tuple[int, int] | None:
    """(total, idle + iowait) of one ``cpu``/``cpuN`` line's fields, or ``None``."""
    try:
        values = [int(v) for v in fields[1:9]]
    except ValueError:
        return None
    if not fields[0].startswith("cpu") or len(values) < 5:
        return None
    return sum(values), values[3] + values[4]
