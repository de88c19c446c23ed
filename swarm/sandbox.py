"""Run untrusted Python in a separate, limited process (bubblewrap namespaces, rlimits, a cgroup).

Used by the ``python`` tool and by code verifiers. :func:`run_python` never raises for anything the
code does — crashes, timeouts, memory exhaustion, fork bombs, a full workspace and blocked syscalls all
come back as a :class:`SandboxResult` with a ``status`` and human-readable ``notes``. It raises
:class:`SandboxUnavailableError` when isolation was asked for (the default) and cannot be had: it never
quietly runs the code with less protection than was asked for.

The mechanism is bubblewrap (``bwrap``), the sandbox Flatpak runs on; this module only sets policy:

* **isolated** (the default, ``isolation="auto"`` or ``"required"``): every namespace unshared (user,
  PID, mount, network, IPC, UTS, cgroup), all capabilities dropped, ``no_new_privs``, a new session,
  ``--die-with-parent``; the code runs as an unprivileged uid that is not root on the host even when
  we run as root (we drop to it with ``setpriv`` before bubblewrap starts, so nothing in the sandbox
  maps to host root), ``/proc/sys`` is read-only, nested user namespaces are refused. The filesystem is
  a new root holding read-only system and Python directories, size-limited private ``/tmp`` and
  ``/dev/shm``, and the workspace as the only writable persistent directory; ``/etc/passwd``, home
  directories and the repository are not there at all. No network (only a downed loopback) unless
  ``network=True``.
* **plain** (only when asked for: ``isolation="none"`` or ``SWARM_SANDBOX_ISOLATION=none``): no
  namespaces. The rlimits, the watchdog, the wall-time kill and a scrubbed environment apply; started
  by root, the code also runs as the unprivileged uid with ``no_new_privs``. It can read every file and
  reach every host that uid can, and as a normal user it runs as you (it can signal or trace your
  processes). README's "Sandbox strength" says exactly what each mode guarantees.

Limits hold for the whole run: with a cgroup (v2, or v1's memory and pids hierarchies, where we may
create one — as root, or under delegation) the kernel bounds the memory of all processes together
(tmpfs and memfd pages included) and their number; without one, per-process rlimits plus the
supervisor's watchdog (process count, summed resident memory). Either way: CPU time and file size
rlimits, open files (``RLIMIT_NOFILE``, no inherited descriptors), the workspace quota (checked before
the run and watched during it) and the wall-time kill.

It is not a VM: the code shares the host kernel, so a kernel exploit escapes either mode.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import anyio
import anyio.to_thread
from anyio.abc import Process
from pydantic import BaseModel, ConfigDict, Field

from agent_swarm.swarm import _cgroup, _seccomp
from agent_swarm.swarm.errors import ConfigError

__all__ = [
    "BWRAP_ENV",
    "ISOLATION_ENV",
    "SANDBOX_UID",
    "SandboxLimits",
    "SandboxResult",
    "SandboxUnavailableError",
    "isolation_available",
    "run_python",
]

_BOOT = Path(__file__).with_name("_sandbox_boot.py")
# A fork or thread the process limit refused, fatal to the code (its traceback's last lines).
_FORK_REFUSED_RE = re.compile(r"fork\(.*\n.*BlockingIOError: \[Errno 11\]|RuntimeError: can't start new thread")
_MEMORY_RE = re.compile(r"^[\w.]*MemoryError\b", re.MULTILINE)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_DRAIN_GRACE_S = 2.0
_MIB = 1024 * 1024
# What the sandbox's own processes (gate, bubblewrap, supervisor) take on top of the code's limits.
_OVERHEAD_BYTES = 48 * _MIB
_OVERHEAD_TASKS = 8
_INSIDE = "/sandbox"  # where the supervisor and the code appear inside the sandbox

ISOLATION_ENV = "SWARM_SANDBOX_ISOLATION"
"""Environment variable: ``auto`` (default: isolated or refuse) or ``none`` (every run in plain mode,
for a machine without bubblewrap where you accept what plain mode does not protect)."""
BWRAP_ENV = "SWARM_SANDBOX_BWRAP"
"""Environment variable: the bubblewrap executable to use (default: ``bwrap`` from the system PATH)."""
SANDBOX_UID = 65534
"""The uid (and gid) code runs as when we run as root and the workspace belongs to root ("nobody")."""


class SandboxUnavailableError(ConfigError):
    """Isolation was asked for and cannot be set up here; the message says what is missing."""


class SandboxLimits(BaseModel):
    """Resource limits for one run. Defaults suit a tool call; verifiers may tighten them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_s: float = Field(10, gt=0, description="CPU seconds (RLIMIT_CPU, whole seconds, rounded up)")
    wall_s: float = Field(30, gt=0, description="wall-clock seconds before everything is killed")
    memory_mb: int = Field(
        512,
        ge=32,
        description="memory for the whole run: all processes together, with /tmp, /dev/shm and memfd "
        "contents, where a cgroup is available; each process's address space is capped at it too",
    )
    max_output_chars: int = Field(16000, ge=0, description="stdout and stderr are each cut to this")
    network: bool = Field(False, description="True leaves the network reachable (no network namespace)")
    max_processes: int = Field(32, ge=1, description="processes/threads the code may have at once")
    max_file_mb: int = Field(64, ge=1, description="largest file the code may write (RLIMIT_FSIZE)")
    tmp_mb: int = Field(64, ge=1, description="size of the private /tmp (isolated mode)")
    shm_mb: int = Field(64, ge=1, description="size of the private /dev/shm (isolated mode)")
    workspace_mb: int = Field(
        1024, ge=1, description="quota for everything in the workspace; a run that passes it is stopped"
    )
    max_open_files: int = Field(256, ge=16, description="open file descriptors per process (RLIMIT_NOFILE)")
    isolation: Literal["auto", "required", "none"] = Field(
        "auto",
        description="auto/required: bubblewrap isolation, or SandboxUnavailableError where it cannot be "
        "set up (never a silent fallback); none: plain mode, explicitly (see README)",
    )


_Status = Literal["ok", "error", "timeout", "memory", "killed"]


class SandboxResult(BaseModel):
    """What happened. ``status``: ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (CPU or
    wall limit), ``memory`` (memory limit), ``killed`` (process limit, workspace quota, a signal, or
    sandbox setup failure). ``channel`` holds what the code wrote to fd 3 when ``channel=True``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stdout: str
    stderr: str
    exit_code: int | None
    status: _Status
    duration_s: float
    network_isolated: bool
    notes: tuple[str, ...] = ()
    isolation: Literal["isolated", "plain"] = "plain"
    cpu_s: float = 0.0
    channel: str | None = None


# --------------------------------------------------------------------------------------------------
# what is available


_probe_lock = threading.Lock()
_probe_state: dict[str, tuple[bool, str]] = {}


def _tool(name: str) -> str | None:
    if name == "bwrap" and os.environ.get(BWRAP_ENV):
        forced = os.environ[BWRAP_ENV]
        return forced if os.access(forced, os.X_OK) else None
    return shutil.which(name, path=_SAFE_PATH + ":/usr/sbin:/sbin")


def isolation_available() -> tuple[bool, str]:
    """Whether bubblewrap isolation works here, and why not. Probed once per process (a few ms)."""
    with _probe_lock:
        if "bwrap" not in _probe_state:
            _probe_state["bwrap"] = _probe()
        return _probe_state["bwrap"]


def _probe() -> tuple[bool, str]:
    if sys.platform != "linux":
        return False, f"the sandbox needs Linux (this is {sys.platform})"
    if _tool("bwrap") is None:
        where = f" ({BWRAP_ENV}={os.environ[BWRAP_ENV]} is not executable)" if os.environ.get(BWRAP_ENV) else ""
        install = "install it (Debian/Ubuntu: apt-get install bubblewrap)"
        return False, f"bubblewrap (`bwrap`) is not installed{where}: {install}"
    if os.geteuid() == 0 and _tool("setpriv") is None:
        return False, "`setpriv` (util-linux) is not installed; as root it is needed to drop to an unprivileged uid"
    probe_ws = tempfile.mkdtemp(prefix="swarm-sandbox-probe-")
    try:
        os.chmod(probe_ws, 0o755)
        uid = SANDBOX_UID if os.geteuid() == 0 else os.geteuid()
        plan = _Plan(Path(probe_ws), SandboxLimits(), code_fd=-1, uid=uid)
        argv = plan.bwrap_argv(["/bin/true"])
        proc = subprocess.run(argv, capture_output=True, timeout=20, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bwrap could not run: {exc}"
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(probe_ws)
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        return False, (
            f"bwrap cannot create a sandbox here ({err}); it needs unprivileged user namespaces "
            "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0, or an AppArmor "
            "profile for bwrap) or root"
        )
    return True, ""


def _mode(limits: SandboxLimits) -> tuple[bool, str]:
    """(isolated?, why plain). Raises SandboxUnavailableError when isolation is wanted but missing."""
    env = os.environ.get(ISOLATION_ENV, "auto").strip().lower() or "auto"
    if limits.isolation == "none":
        return False, "isolation='none' was requested"
    if env in ("none", "off", "plain") and limits.isolation == "auto":
        return False, f"{ISOLATION_ENV}={env}"
    ok, reason = isolation_available()
    if not ok:
        raise SandboxUnavailableError(
            f"the code sandbox cannot isolate code here: {reason}. Nothing was run. To run without "
            f"isolation anyway, ask for it: SandboxLimits(isolation='none') or {ISOLATION_ENV}=none "
            "(README: what plain mode does not protect)"
        )
    return True, ""


# --------------------------------------------------------------------------------------------------
# the policy: what the sandbox holds


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/ssl", "/etc/alternatives")
_NETWORK_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/host.conf")


def _python_dirs() -> list[str]:
    """Where the interpreter and its libraries live, outside the system directories (any path: under
    /tmp too, since these are bound after the private /tmp is mounted)."""
    found: list[str] = []
    for p in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        for q in (os.path.abspath(p), os.path.realpath(p)):
            if q != "/" and os.path.isdir(q) and not any(_under(q, s) for s in _SYSTEM_DIRS):
                found.append(q)
    found = sorted(set(found))
    return [p for p in found if not any(p != q and _under(p, q) for q in found)]


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@dataclass
class _Plan:
    """Everything one isolated run binds, and the argv that asks bubblewrap for it."""

    workspace: Path
    limits: SandboxLimits
    code_fd: int
    uid: int
    env: dict[str, str] = field(default_factory=dict)
    seccomp_fd: int = -1

    def view_ops(self, *, privileged: bool) -> list[str]:
        """The sandbox's filesystem, in mount order. ``privileged``: built by root in the first stage
        (so source paths that the sandbox uid could not traverse, such as /root/.pyenv, still bind)."""
        lim = self.limits
        ops = ["--bind", "/proc", "/proc"] if privileged else ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
        ops += ["--dev", "/dev"]
        ops += ["--perms", "1777", "--size", str(lim.tmp_mb * _MIB), "--tmpfs", "/tmp"]
        ops += ["--perms", "1777", "--size", str(lim.shm_mb * _MIB), "--tmpfs", "/dev/shm"]
        binds: list[tuple[str, str]] = []
        for d in _SYSTEM_DIRS:
            if os.path.islink(d):
                ops += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                binds.append((d, "ro"))
        binds += [(f, "ro") for f in _ETC + (_NETWORK_FILES if lim.network else ()) if os.path.exists(f)]
        ws = str(self.workspace)
        binds += [(p, "ro") for p in _python_dirs() if not _under(p, ws)] + [(ws, "rw")]
        made: set[str] = {"/", "/tmp", "/dev", "/dev/shm", "/proc", *_SYSTEM_DIRS}
        for path, _ in binds:  # parents the sandbox uid can traverse, whatever they are on the host
            for parent in reversed(Path(path).parents):
                if str(parent) not in made:
                    made.add(str(parent))
                    ops += ["--perms", "0755", "--dir", str(parent)]
        for path, how in binds:
            ops += ["--ro-bind" if how == "ro" else "--bind", path, path]
        ops += ["--perms", "0755", "--dir", _INSIDE, "--ro-bind", str(_BOOT), f"{_INSIDE}/supervisor.py"]
        if self.code_fd >= 0:
            ops += ["--perms", "0444", "--ro-bind-data", str(self.code_fd), f"{_INSIDE}/main.py"]
        return [*ops, "--remount-ro", "/"]

    def ns_ops(self) -> list[str]:
        ops = ["--unshare-all", "--unshare-user", "--disable-userns"]
        if self.limits.network:
            ops.append("--share-net")
        ops += ["--uid", str(self.uid), "--gid", str(self.uid), "--cap-drop", "ALL", "--hostname", "sandbox"]
        ops += ["--die-with-parent", "--new-session", "--as-pid-1", "--chdir", str(self.workspace), "--clearenv"]
        if self.seccomp_fd >= 0:
            ops += ["--seccomp", str(self.seccomp_fd)]
        for k, v in self.env.items():
            ops += ["--setenv", k, v]
        return ops

    def bwrap_argv(self, command: list[str]) -> list[str]:
        bwrap = _tool("bwrap") or "bwrap"
        setpriv = _tool("setpriv")
        # bubblewrap's monitor does not die with its parent: setpriv makes it. (A parent's death is not
        # passed from the root stage to the unprivileged one either: the supervisor's lifeline pipe is.)
        die = [setpriv, "--pdeathsig", "KILL"] if setpriv else []
        if os.geteuid() != 0:
            return [*die, bwrap, *self.ns_ops(), *self.view_ops(privileged=False), "--", *command]
        # Root: stage one (root, mount namespace only) builds the view; stage two runs as the
        # unprivileged uid, so its user namespace maps to that uid on the host, never to root.
        drop = [setpriv or "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--inh-caps=-all"]
        drop += ["--bounding-set=-all", "--no-new-privs", "--pdeathsig", "KILL"]
        # --dev-bind: the device nodes stage one made must stay usable; nothing else there is a device.
        inner = [bwrap, *self.ns_ops(), "--dev-bind", "/", "/", "--proc", "/proc"]
        inner += ["--ro-bind", "/proc/sys", "/proc/sys", "--remount-ro", "/", "--", *command]
        return [*die, bwrap, "--die-with-parent", *self.view_ops(privileged=True), "--", *drop, *inner]


def _env(workspace: Path) -> dict[str, str]:
    return {
        "PATH": _SAFE_PATH,
        "HOME": str(workspace),
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


# --------------------------------------------------------------------------------------------------
# the workspace: who owns it, how full it is


def _prepare_workspace(ws: Path) -> tuple[int, int]:
    """(uid the code runs as, bytes the workspace holds now).

    As root the code must not run as root, yet must write the workspace: it runs as the workspace's
    owner when that is not root, else as :data:`SANDBOX_UID`, which then gets the root-owned directory
    and the root-owned single-link regular files and directories in it (never following a symlink:
    every step is relative to a directory descriptor). As anyone else, the code runs as that user.
    """
    root = os.geteuid() == 0
    top = os.open(ws, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(top)
        uid = (st.st_uid if st.st_uid != 0 else SANDBOX_UID) if root else os.geteuid()
        gid = (st.st_gid if st.st_uid != 0 else SANDBOX_UID) if root else os.getegid()
        if root and st.st_uid == 0:
            os.fchown(top, uid, gid)
        used = 0
        for _, dirs, files, dfd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
            for name in (*dirs, *files):
                with contextlib.suppress(OSError):
                    est = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                    used += max(est.st_size, est.st_blocks * 512)
                    own = root and est.st_uid == 0
                    if own and (stat.S_ISDIR(est.st_mode) or (stat.S_ISREG(est.st_mode) and est.st_nlink == 1)):
                        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        return uid, used
    finally:
        os.close(top)


# --------------------------------------------------------------------------------------------------
# running


@dataclass
class _Capture:
    """What was read from one stream so far (kept even when reading is cut short)."""

    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0


async def _read_fd(fd: int, keep: int, sink: _Capture) -> None:
    """Read a pipe to EOF without blocking the event loop, keeping the first ``keep`` bytes."""
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            await anyio.wait_readable(fd)
            continue
        if not chunk:
            return
        room = keep - len(sink.data)
        if room > 0:
            sink.data += chunk[:room]
        sink.dropped += max(0, len(chunk) - max(room, 0))


async def _feed(fd: int, data: bytes) -> None:
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                n = os.write(fd, view[:65536])
            except BlockingIOError:
                await anyio.wait_writable(fd)
                continue
            view = view[n:]
    except (BrokenPipeError, OSError):
        pass  # the code exited (or was killed) without reading all of its input


def _decode(sink: _Capture, limit: int) -> tuple[str, bool]:
    dropped = sink.dropped
    text = bytes(sink.data).decode("utf-8", errors="replace")
    if len(text) > limit or dropped:
        total = len(text) + dropped
        text = text[:limit] + f"\n…[output truncated: about {total - limit} of {total} characters dropped]"
        return text, True
    return text, False


def _kill_group(proc: Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


@dataclass
class _Run:
    """One run's file descriptors and what came back through them."""

    fds: dict[str, int] = field(default_factory=dict)  # ours
    child_fds: dict[str, int] = field(default_factory=dict)  # the sandbox's ends
    out: _Capture = field(default_factory=_Capture)
    err: _Capture = field(default_factory=_Capture)
    report: _Capture = field(default_factory=_Capture)
    channel: _Capture = field(default_factory=_Capture)
    cgroup: _cgroup.RunCgroup | None = None
    child_fds_used: tuple[str, ...] = ()
    stats: _cgroup.CgroupStats = field(default_factory=_cgroup.CgroupStats)
    had_cgroup: bool = False
    timed_out: bool = False
    duration: float = 0.0

    def pipe(self, name: str, *, to_child: bool = False) -> None:
        r, w = os.pipe2(os.O_CLOEXEC)
        self.fds[name], self.child_fds[name] = (w, r) if to_child else (r, w)

    def close_child_ends(self) -> None:
        self.child_fds_used += tuple(self.child_fds)
        for fd in self.child_fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds.clear()

    def cgroup_finish(self) -> None:
        """Read what the kernel counted, then kill what is left and remove the cgroup."""
        if self.cgroup is not None:
            self.stats = self.cgroup.stats()
            self.cgroup.kill_and_remove()
            self.cgroup = None

    def close(self) -> None:
        self.close_child_ends()
        for fd in self.fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


def _supervisor_cfg(run: _Run, limits: SandboxLimits, *, isolated: bool, uid: int, used: int, ws: Path) -> list[str]:
    quota = limits.workspace_mb * _MIB
    code_fd = run.child_fds["code"]
    cfg = {
        "report": run.child_fds["report"],
        "stdin": run.child_fds.get("stdin", -1),
        "channel": run.child_fds.get("channel", -1),
        "life": run.child_fds["life"],
        # Plain mode reads the code through its descriptor: nothing is left on disk to clean up.
        "code": -1 if isolated else code_fd,
        "main": f"{_INSIDE}/main.py" if isolated else f"/proc/self/fd/{code_fd}",
        "plain": 0 if isolated else 1,
        "python": sys.executable,
        "cpu": max(1, int(-(-limits.cpu_s // 1))),
        "as": limits.memory_mb * _MIB,
        "fsize": max(4096, min(limits.max_file_mb * _MIB, quota - used)),
        "nofile": limits.max_open_files,
        "nproc": limits.max_processes,
        # RLIMIT_NPROC counts per user namespace: exact in a sandbox, host-wide without one.
        "nproc_rlimit": 1 if isolated else 0,
        "mem": 0 if run.had_cgroup else limits.memory_mb * _MIB,
        "quota": quota,
        "ws": ws,
        "drop": f"{_tool('setpriv') or 'setpriv'}:{uid}" if not isolated and os.geteuid() == 0 else "",
    }
    return [f"{k}={v}" for k, v in cfg.items()]


def _prepare(
    code: str, ws: Path, limits: SandboxLimits, stdin: str | None, channel: bool, isolated: bool
) -> tuple[_Run, list[str], int, int]:
    """Blocking setup (worker thread): workspace, pipes, code, cgroup and the argv. Returns the run,
    the argv, the uid the code runs as and the workspace's current size."""
    uid, used = _prepare_workspace(ws)
    run = _Run()
    try:
        for name in ("out", "err", "report"):
            run.pipe(name)
        if channel:
            run.pipe("channel")
        if stdin is not None:
            run.pipe("stdin", to_child=True)
        run.pipe("life", to_child=True)  # we hold the write end until the run is over
        code_fd = os.memfd_create("swarm-sandbox-code", os.MFD_CLOEXEC)
        run.child_fds["code"] = code_fd
        os.write(code_fd, code.encode("utf-8"))
        os.lseek(code_fd, 0, os.SEEK_SET)
        if os.geteuid() == 0:
            run.cgroup = _cgroup.create(
                limits.memory_mb * _MIB + _OVERHEAD_BYTES, limits.max_processes + _OVERHEAD_TASKS
            )
        if run.cgroup is not None:
            run.had_cgroup = True
            run.pipe("gate", to_child=True)
        bpf = _seccomp.program(deny_memfd=not run.had_cgroup) if isolated else None
        if bpf is not None:
            run.child_fds["seccomp"] = seccomp_fd = os.memfd_create("swarm-seccomp", os.MFD_CLOEXEC)
            os.write(seccomp_fd, bpf)
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
    except BaseException:
        run.close()
        if run.cgroup is not None:
            run.cgroup.kill_and_remove(timeout_s=0.5)
        raise
    cfg = _supervisor_cfg(run, limits, isolated=isolated, uid=uid, used=used, ws=ws)
    boot = [sys.executable, "-I", "-S"]
    if isolated:
        plan = _Plan(ws, limits, code_fd, uid, _env(ws), run.child_fds.get("seccomp", -1))
        argv = plan.bwrap_argv([*boot, f"{_INSIDE}/supervisor.py", *cfg])
    else:
        argv = [*boot, str(_BOOT), *cfg]
    if run.cgroup is not None:  # held at the gate until it is inside its cgroup
        argv = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "swarm-sandbox-gate", *argv]
    return run, argv, uid, used


async def _start(argv: list[str], run: _Run, ws: Path, isolated: bool) -> Process:
    inherit = [fd for name, fd in run.child_fds.items() if name not in ("out", "err", "gate")]
    for fd in inherit:
        os.set_inheritable(fd, True)
    proc = await anyio.open_process(
        argv,
        stdin=run.child_fds.get("gate", subprocess.DEVNULL),
        stdout=run.child_fds["out"],
        stderr=run.child_fds["err"],
        cwd="/" if isolated else str(ws),
        env=_env(ws) if not isolated else {"PATH": _SAFE_PATH},
        start_new_session=True,
        pass_fds=inherit,
    )
    run.close_child_ends()
    if run.cgroup is not None:
        try:
            await anyio.to_thread.run_sync(run.cgroup.attach, proc.pid)
        except OSError:
            _kill_group(proc)  # the gate never opens: the code does not run outside its cgroup
            raise
        os.write(run.fds["gate"], b"go\n")
        os.close(run.fds.pop("gate"))
    return proc


async def _execute(
    code: str, ws: Path, limits: SandboxLimits, stdin: str | None, channel: bool, isolated: bool
) -> tuple[_Run, int, list[str]] | SandboxResult:
    run, argv, uid, used = await anyio.to_thread.run_sync(_prepare, code, ws, limits, stdin, channel, isolated)
    if used >= limits.workspace_mb * _MIB:
        run.close()
        if run.cgroup is not None:
            await anyio.to_thread.run_sync(run.cgroup.kill_and_remove)
        note = (
            f"not run: the workspace holds {used / _MIB:.1f} MiB, at or over its quota of {limits.workspace_mb} "
            "MiB; delete files from it first"
        )
        return _result_without_run(note, isolated, limits)
    keep = limits.max_output_chars * 4 + 4096
    started = time.perf_counter()
    try:
        proc = await _start(argv, run, ws, isolated)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read_fd, run.fds["out"], keep, run.out)
                tg.start_soon(_read_fd, run.fds["err"], keep, run.err)
                tg.start_soon(_read_fd, run.fds["report"], 4096, run.report)
                if channel:
                    tg.start_soon(_read_fd, run.fds["channel"], 16 * _MIB, run.channel)
                if stdin is not None:
                    tg.start_soon(_feed_and_close, run, stdin.encode("utf-8"))
                with anyio.move_on_after(limits.wall_s) as scope:
                    await proc.wait()
                run.timed_out = scope.cancelled_caught
                _kill_group(proc)
                if run.cgroup is not None:  # everything the run started, wherever it went
                    await anyio.to_thread.run_sync(run.cgroup_finish)
                # A process that escaped (plain mode) may still hold the pipes: stop reading after a grace.
                tg.cancel_scope.deadline = anyio.current_time() + _DRAIN_GRACE_S
        finally:
            with anyio.CancelScope(shield=True):
                _kill_group(proc)
                await proc.wait()
                await proc.aclose()
        run.duration = time.perf_counter() - started
    finally:
        with anyio.CancelScope(shield=True):
            run.close()
            if run.cgroup is not None:
                await anyio.to_thread.run_sync(run.cgroup_finish)
    layers = []
    if isolated:
        layers.append("seccomp filter" if "seccomp" in run.child_fds_used else "no seccomp (libseccomp missing)")
        layers.append("cgroup limits" if run.had_cgroup else "rlimits + watchdog (no cgroup)")
    return run, uid, layers


async def _feed_and_close(run: _Run, data: bytes) -> None:
    fd = run.fds["stdin"]
    try:
        await _feed(fd, data)
    finally:
        with contextlib.suppress(OSError):
            os.close(run.fds.pop("stdin"))


async def run_python(
    code: str,
    *,
    workspace: Path,
    limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen model, safe as a default
    stdin: str | None = None,
    channel: bool = False,
) -> SandboxResult:
    """Run ``code`` with ``python -I`` in ``workspace`` (its working directory) under ``limits``.

    ``workspace`` must be an existing directory; it is the only persistent place the code can write in
    isolated mode. With ``channel=True`` the code gets a pipe as file descriptor 3 whose contents come
    back in ``SandboxResult.channel`` (no other descriptor of ours reaches the code). Never raises for
    anything the code does; raises ``ValueError`` for a missing workspace and
    :class:`SandboxUnavailableError` when isolation is wanted but cannot be set up.
    """
    workspace = await anyio.to_thread.run_sync(Path(workspace).resolve)
    if not await anyio.to_thread.run_sync(workspace.is_dir):
        raise ValueError(f"sandbox workspace {workspace} is not an existing directory; create it first")
    isolated, why_plain = await anyio.to_thread.run_sync(_mode, limits)  # probes once, blocking
    executed = await _execute(code, workspace, limits, stdin, channel, isolated)
    if isinstance(executed, SandboxResult):
        return executed
    run, uid, layers = executed
    return _result(run, limits, isolated=isolated, why_plain=why_plain, uid=uid, channel=channel, layers=layers)


def _parse_report(run: _Run) -> dict[str, str] | None:
    text = bytes(run.report.data).decode(errors="replace")
    if not text.endswith("\n"):
        return None
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _isolation_notes(
    limits: SandboxLimits, *, isolated: bool, why_plain: str, uid: int, layers: list[str]
) -> list[str]:
    """What the run was isolated from (the first notes of every result)."""
    notes: list[str] = []
    if isolated:
        notes.append(
            f"isolated (bubblewrap): own user/PID/mount/network namespaces, uid {uid}, no capabilities, "
            f"only the workspace writable; {', '.join(layers)}"
        )
    else:
        who = f"uid {uid}" if uid != os.geteuid() else "your own user"
        notes.append(f"plain: no isolation, the code runs as {who} and can read what it can ({why_plain})")
    if limits.network:
        notes.append("network access allowed by the limits (network=True)")
    elif not isolated:
        notes.append("network NOT isolated: the code can open sockets (plain mode)")
    return notes


def _result(
    run: _Run, limits: SandboxLimits, *, isolated: bool, why_plain: str, uid: int, channel: bool, layers: list[str]
) -> SandboxResult:
    notes = _isolation_notes(limits, isolated=isolated, why_plain=why_plain, uid=uid, layers=layers)
    stdout, cut_out = _decode(run.out, limits.max_output_chars)
    stderr, cut_err = _decode(run.err, limits.max_output_chars)
    if cut_out or cut_err:
        notes.append(f"output truncated to {limits.max_output_chars} characters per stream")
    stats = run.stats
    report = _parse_report(run)
    exit_code: int | None = None
    cpu = 0.0
    status: _Status
    if run.timed_out:
        status = "timeout"
        notes.append(f"wall-time limit of {limits.wall_s:g}s reached; everything was killed")
    elif report is None:
        status = "memory" if stats.oom_kills else "killed"
        setup = [ln for ln in stderr.splitlines() if ln.startswith("bwrap:")]
        if setup:
            notes.append(f"the sandbox could not be set up, nothing ran: {setup[-1]}")
        else:
            notes.append("the sandbox process died before reporting (killed from outside, or out of memory?)")
    else:
        exit_code = int(report["exit"]) if report.get("exit") else None
        cpu = float(report.get("cpu") or 0.0)
        status, why = _reported_status(report, exit_code, cpu, stats, limits, stderr, cut_err=cut_err)
        if why is not None:
            notes.append(why)
    if stats.pids_limit_hits and status != "ok":
        notes.append(f"the process limit ({limits.max_processes}) refused {stats.pids_limit_hits} fork(s)")
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        status=status,
        duration_s=round(run.duration, 4),
        network_isolated=isolated and not limits.network,
        notes=tuple(notes),
        isolation="isolated" if isolated else "plain",
        cpu_s=round(cpu, 4),
        channel=bytes(run.channel.data).decode("utf-8", errors="replace") if channel else None,
    )


def _reported_status(
    report: dict[str, str],
    exit_code: int | None,
    cpu: float,
    stats: _cgroup.CgroupStats,
    limits: SandboxLimits,
    stderr: str,
    *,
    cut_err: bool,
) -> tuple[_Status, str | None]:
    """The status of a run whose supervisor reported its end, and the note that explains it (none for
    a plain exit): which limit killed it, else a signal, else its exit code."""
    sig = int(report["signal"]) if report.get("signal") else None
    killed = report.get("killed", "")
    if killed == "processes":
        return "killed", f"process limit of {limits.max_processes} reached (fork bomb?); all killed"
    if killed == "disk":
        return "killed", f"workspace quota of {limits.workspace_mb} MiB exceeded; the run was stopped"
    if killed == "memory" or stats.oom_kills:
        return "memory", f"memory limit of {limits.memory_mb} MiB for the whole run reached; killed"
    if sig in (signal.SIGXCPU, signal.SIGKILL) and cpu >= limits.cpu_s - 0.5:
        return "timeout", f"CPU-time limit of {limits.cpu_s:g}s reached"
    if _MEMORY_RE.search(stderr[-2000:] if not cut_err else stderr):
        return "memory", f"memory limit of {limits.memory_mb} MiB reached (MemoryError)"
    if sig is not None:
        return "killed", f"killed by signal {signal.Signals(sig).name}"
    if exit_code != 0 and _FORK_REFUSED_RE.search(stderr[-2000:]):
        return "killed", f"process limit of {limits.max_processes} reached: a fork was refused and the code died of it"
    return ("ok" if exit_code == 0 else "error"), None


def _result_without_run(note: str, isolated: bool, limits: SandboxLimits) -> SandboxResult:
    return SandboxResult(
        stdout="",
        stderr=f"sandbox: {note}",
        exit_code=None,
        status="killed",
        duration_s=0.0,
        network_isolated=isolated and not limits.network,
        notes=(note,),
        isolation="isolated" if isolated else "plain",
    )
