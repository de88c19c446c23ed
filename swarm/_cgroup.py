"""One cgroup per sandbox run: memory and task limits for the whole run, every process included; and
the CPU quota of our own cgroup (:func:`cpu_quota`), which the local engine's threads and slots obey.

The kernel does the accounting (page cache, tmpfs and memfd pages included) and the enforcing; this
module only finds where we may create a cgroup, makes one below our own, moves a process into it, reads
what happened and removes it. Both layouts are handled: cgroup v2 (a delegated or root subtree with the
``memory`` and ``pids`` controllers) and v1 (``memory`` and ``pids`` hierarchies). Where neither is
writable (an unprivileged user without delegation), :func:`available` says why and the sandbox falls
back to rlimits and its watchdog.

Blocking file I/O: call from a worker thread in async code.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CgroupStats", "RunCgroup", "available", "cpu_quota", "create"]

_lock = threading.Lock()
_layout: dict[str, object] = {}


@dataclass(frozen=True, slots=True)
class CgroupStats:
    oom_kills: int = 0
    pids_limit_hits: int = 0
    peak_bytes: int = 0


@dataclass(slots=True)
class RunCgroup:
    """A per-run cgroup: ``dirs`` holds one directory (v2) or the memory and pids ones (v1)."""

    version: int
    dirs: dict[str, Path] = field(default_factory=dict)

    def attach(self, pid: int) -> None:
        for d in self.dirs.values():
            (d / "cgroup.procs").write_text(str(pid))

    def stats(self) -> CgroupStats:
        if self.version == 2:
            d = self.dirs["unified"]
            mem = _keyed(d / "memory.events")
            peak = _int(d / "memory.peak")
            return CgroupStats(mem.get("oom_kill", 0), _keyed(d / "pids.events").get("max", 0), peak)
        oom = _keyed(self.dirs["memory"] / "memory.oom_control").get("oom_kill", 0)
        peak = _int(self.dirs["memory"] / "memory.max_usage_in_bytes")
        return CgroupStats(oom, _keyed(self.dirs["pids"] / "pids.events").get("max", 0), peak)

    def kill_and_remove(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process left in the cgroup and remove it (retrying while tasks exit)."""
        deadline = time.monotonic() + timeout_s
        for d in self.dirs.values():
            while True:
                if self.version == 2 and (d / "cgroup.kill").exists():
                    with contextlib.suppress(OSError):
                        (d / "cgroup.kill").write_text("1")
                with contextlib.suppress(OSError):
                    for line in (d / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError, ValueError):
                            os.kill(int(line), signal.SIGKILL)
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break  # left behind; empty cgroups cost nothing and are named swarm-sandbox-*
                    time.sleep(0.005)


def _int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _keyed(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out[parts[0]] = int(parts[1])
    return out


def _mounts(proc: Path = Path("/proc/self")) -> tuple[Path | None, dict[str, Path]]:
    """The cgroup2 mount point and the v1 mount point of each controller we use, from mountinfo."""
    v2: Path | None = None
    v1: dict[str, Path] = {}
    with open(proc / "mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, opts = [*right.split(), "", "", ""][:3]
            point = Path(left.split()[4].replace("\\040", " "))
            if fstype == "cgroup2" and v2 is None:
                v2 = point
            elif fstype == "cgroup":
                for opt in opts.split(","):
                    if opt in ("memory", "pids", "cpu"):
                        v1.setdefault(opt, point)
    return v2, v1


def _own_paths(proc: Path = Path("/proc/self")) -> dict[str, str]:
    """Our cgroup path per controller (``""`` is the v2 one), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with open(proc / "cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def cpu_quota(proc: Path = Path("/proc/self")) -> float | None:
    """The CPUs our cgroup's quota allows (``docker --cpus``, a Kubernetes limit): the least over our
    cgroup and those above it, v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``; ``None``
    for no quota or no readable layout. ``proc`` is where ``mountinfo`` and ``cgroup`` are read (tests).

    Our path is walked up to the mount point: inside a container's cgroup namespace it is ``/``, and a
    mount whose root is our own cgroup holds its files at the mount point itself."""
    try:
        v2, v1 = _mounts(proc)
        own = _own_paths(proc)
    except (OSError, ValueError, IndexError):  # unreadable, or a line not in the kernel's format
        return None
    places = []
    if v2 is not None and "" in own:
        places.append((v2, own[""], _v2_quota))
    if "cpu" in v1:
        places.append((v1["cpu"], own.get("cpu", "/"), _v1_quota))
    quotas: list[float] = []
    for mount, path, read in places:
        parts = [x for x in path.split("/") if x]
        for depth in range(len(parts), -1, -1):
            quota = read(mount.joinpath(*parts[:depth]))
            if quota is not None:
                quotas.append(quota)
    return min(quotas, default=None)


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" or int(period) <= 0 else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def _probe() -> tuple[dict[str, Path] | None, int, str]:
    if os.environ.get("SWARM_SANDBOX_CGROUP", "auto").strip().lower() in ("off", "0", "none"):
        return None, 0, "disabled by SWARM_SANDBOX_CGROUP=off"
    try:
        v2, v1 = _mounts()
        own = _own_paths()
    except OSError as exc:
        return None, 0, f"cannot read the cgroup layout: {exc}"
    reasons = []
    if v2 is not None and "" in own:
        base = v2 / own[""].lstrip("/")
        ctl = base / "cgroup.subtree_control"
        try:
            enabled = ctl.read_text().split()
            if not {"memory", "pids"} <= set(enabled):
                ctl.write_text("+memory +pids")  # works where the subtree is ours (root cgroup, delegation)
            if _try_mkdir({"unified": base}, ("memory.max", "pids.max")):
                return {"unified": base}, 2, ""
            reasons.append(f"v2: cannot create a cgroup with memory and pids below {base}")
        except OSError as exc:
            reasons.append(f"v2: {base}: {exc.strerror}")
    if {"memory", "pids"} <= v1.keys():
        bases = {c: v1[c] / own.get(c, "/").lstrip("/") for c in ("memory", "pids")}
        if _try_mkdir(bases, ("memory.limit_in_bytes", "pids.max")):
            return bases, 1, ""
        reasons.append(f"v1: cannot create cgroups below {bases['memory']} and {bases['pids']}")
    elif v2 is None:
        reasons.append("no cgroup v2 mount and no v1 memory and pids hierarchies")
    return None, 0, "; ".join(reasons)


def _try_mkdir(bases: dict[str, Path], files: tuple[str, ...]) -> bool:
    made = []
    try:
        for base in bases.values():
            d = base / f"swarm-probe-{secrets.token_hex(4)}"
            d.mkdir()
            made.append(d)
        return all(any((d / f).exists() for d in made) for f in files)
    except OSError:
        return False
    finally:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()


def available() -> tuple[bool, str]:
    """Whether per-run cgroups can be made here, and why not. Probed once per process."""
    with _lock:
        if "bases" not in _layout:
            _layout["bases"], _layout["version"], _layout["reason"] = _probe()
        return _layout["bases"] is not None, str(_layout["reason"])


def create(memory_bytes: int, max_tasks: int) -> RunCgroup | None:
    """A fresh cgroup below ours with the two limits set, or None where cgroups are unavailable.
    Raises OSError when the layout was usable but this cgroup could not be made."""
    ok, _ = available()
    if not ok:
        return None
    bases: dict[str, Path] = _layout["bases"]  # type: ignore[assignment]
    version = int(_layout["version"])  # type: ignore[call-overload]
    name = f"swarm-sandbox-{os.getpid()}-{secrets.token_hex(6)}"
    cg = RunCgroup(version)
    try:
        for key, base in bases.items():
            d = base / name
            d.mkdir()
            cg.dirs[key] = d
        if version == 2:
            d = cg.dirs["unified"]
            (d / "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):
                (d / "memory.swap.max").write_text("0")
            (d / "pids.max").write_text(str(max_tasks))
        else:
            mem = cg.dirs["memory"]
            (mem / "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # only with swap accounting; must follow the memory limit
                (mem / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            (cg.dirs["pids"] / "pids.max").write_text(str(max_tasks))
    except OSError:
        cg.kill_and_remove(timeout_s=0.5)
        raise
    return cg
