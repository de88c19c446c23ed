"""Run untrusted Python in a separate, limited process (SPEC §8).

Used by the ``python`` tool and by code verifiers. :func:`run_python` never raises for anything the
code does — crashes, timeouts, memory exhaustion, fork bombs and blocked syscalls all come back as a
:class:`SandboxResult` with a ``status`` and human-readable ``notes``.

How strong it is depends on what the OS allows, and the result says which one you got:

* **isolated** (Linux, root or unprivileged user namespaces; checked at run time): the code runs in
  new PID, mount, network, IPC and UTS namespaces (``unshare``), chrooted into a throw-away root that
  holds read-only system/Python directories, a private ``/tmp`` and ``/proc``, and the workspace as
  the only writable persistent directory (``/etc/passwd``, home directories and the repository are
  not there at all). Every capability is dropped and ``no_new_privs`` is set; the network namespace
  has only a downed loopback, so no socket reaches anything. rlimits cap CPU time, address space,
  file size and processes; the namespace's init kills everything when the process count passes the
  limit and when the code exits. ``network_isolated=True``.
* **plain** (no namespaces): only the rlimits, the wall-time kill of the process group, the
  scrubbed environment and the workspace as working directory apply. The code can read every file
  and reach every host the user running us can; ``network_isolated=False`` and a note says so.

It is not a VM: the code shares the host kernel, so a kernel exploit escapes either mode. Do not run
hostile code on a machine that matters without an outer VM/container.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.to_thread
from anyio.abc import ByteReceiveStream, ByteSendStream, Process
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["NAMESPACES_ENV", "SandboxLimits", "SandboxResult", "isolation_available", "run_python"]

_BOOT = Path(__file__).with_name("_sandbox_boot.py")
_MEMORY_RE = re.compile(r"^[\w.]*MemoryError\b", re.MULTILINE)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_DRAIN_GRACE_S = 2.0
NAMESPACES_ENV = "SWARM_SANDBOX_NAMESPACES"
"""Environment variable: ``auto`` (default: as root plain ``unshare``, else a user namespace),
``user`` (always a user namespace), ``root`` or ``off`` (plain mode). Read once per process."""


class SandboxLimits(BaseModel):
    """Resource limits for one run. Defaults suit a tool call; verifiers may tighten them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_s: float = Field(10, gt=0, description="CPU seconds (RLIMIT_CPU, whole seconds, rounded up)")
    wall_s: float = Field(30, gt=0, description="wall-clock seconds before the process group is killed")
    memory_mb: int = Field(512, ge=32, description="address-space limit (RLIMIT_AS) in MiB")
    max_output_chars: int = Field(16000, ge=0, description="stdout and stderr are each cut to this")
    network: bool = Field(False, description="True leaves the network reachable (no network namespace)")
    max_processes: int = Field(32, ge=1, description="processes/threads the code may have at once")
    max_file_mb: int = Field(64, ge=1, description="largest file the code may write (RLIMIT_FSIZE)")
    tmp_mb: int = Field(64, ge=1, description="size of the private /tmp in isolated mode")
    isolation: Literal["auto", "required", "none"] = Field(
        "auto",
        description="auto: namespaces when the OS allows, else plain; required: refuse to run "
        "(status 'killed') without them; none: always plain",
    )


class SandboxResult(BaseModel):
    """What happened. ``status``: ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (CPU or
    wall limit), ``memory`` (memory limit), ``killed`` (process limit, a signal, or setup failure)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stdout: str
    stderr: str
    exit_code: int | None
    status: Literal["ok", "error", "timeout", "memory", "killed"]
    duration_s: float
    network_isolated: bool
    notes: tuple[str, ...] = ()
    isolation: Literal["isolated", "plain"] = "plain"
    cpu_s: float = 0.0


# --------------------------------------------------------------------------------------------------
# isolation detection

_iso_lock = threading.Lock()
_iso_state: dict[str, Any] = {}


def _unshare_prefix(limits: SandboxLimits, with_user: bool) -> list[str]:
    exe = shutil.which("unshare")
    assert exe is not None
    argv = [exe, "--mount", "--pid", "--ipc", "--uts", "--fork", "--kill-child"]
    if not limits.network:
        argv.append("--net")
    if with_user:
        argv += ["--user", "--map-root-user"]
    return argv


def _probe(only: str | None = None) -> tuple[str | None, str]:
    """Which unshare flavour works here: (None | "root" | "user", reason when none)."""
    if sys.platform != "linux":
        return None, f"namespaces need Linux (this is {sys.platform})"
    if shutil.which("unshare") is None:
        return None, "the `unshare` program (util-linux) is not installed"
    reasons = []
    candidates = ("root", "user") if os.geteuid() == 0 else ("user",)
    for flavour in candidates if only is None else (only,):
        argv = [*_unshare_prefix(SandboxLimits(), flavour == "user"), "true"]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reasons.append(f"{flavour}: {exc}")
            continue
        if proc.returncode == 0:
            return flavour, ""
        reasons.append(f"{flavour}: {proc.stderr.decode(errors='replace').strip()}")
    return None, "unshare failed (" + "; ".join(reasons) + ")"


def _isolation() -> tuple[str | None, str]:
    with _iso_lock:
        if "flavour" not in _iso_state:
            choice = os.environ.get(NAMESPACES_ENV, "auto").strip().lower() or "auto"
            if choice in ("off", "none", "0"):
                _iso_state["flavour"], _iso_state["reason"] = None, f"disabled by {NAMESPACES_ENV}={choice}"
            else:
                only = choice if choice in ("root", "user") else None
                _iso_state["flavour"], _iso_state["reason"] = _probe(only)
        return _iso_state["flavour"], _iso_state["reason"]


def _mark_unavailable(reason: str) -> None:
    with _iso_lock:
        _iso_state["flavour"], _iso_state["reason"] = None, reason


def isolation_available() -> tuple[bool, str]:
    """Whether namespaces can be used here, and why not. Probed once per process."""
    flavour, reason = _isolation()
    return flavour is not None, reason


# --------------------------------------------------------------------------------------------------
# running


_NETWORK_FILES = ["/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/host.conf"]


def _ro_paths(network: bool) -> list[str]:
    paths = [
        "/usr",
        "/bin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/sbin",
        "/etc/ld.so.cache",
        "/etc/ld.so.conf",
        "/etc/ld.so.conf.d",
        "/etc/localtime",
        "/etc/ssl",
        "/etc/alternatives",
    ]
    for p in (
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        real = os.path.realpath(p)
        if real not in paths and real != "/":
            paths.append(real)
        if p not in paths and p != "/":
            paths.append(p)
    if network:  # name resolution needs these; without network they would only leak host details
        paths += _NETWORK_FILES
    return paths


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


@dataclass
class _Capture:
    """What was read from one stream so far (kept even when reading is cut short)."""

    data: bytearray = field(default_factory=bytearray)
    dropped: int = 0


async def _read_capped(stream: ByteReceiveStream | None, keep: int, sink: _Capture) -> None:
    """Read a stream to EOF, keeping the first ``keep`` bytes and counting the rest."""
    if stream is None:
        return
    async for chunk in stream:
        room = keep - len(sink.data)
        if room > 0:
            sink.data += chunk[:room]
        sink.dropped += max(0, len(chunk) - max(room, 0))


async def _feed(stream: ByteSendStream, data: bytes) -> None:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass  # the code exited (or was killed) without reading all of its input
    finally:
        await stream.aclose()


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


def _prepare(code: str, workspace: Path, limits: SandboxLimits, flavour: str | None) -> tuple[Path, list[str]]:
    ctl = Path(tempfile.mkdtemp(prefix="swarm-sandbox-"))
    (ctl / "main.py").write_text(code, encoding="utf-8")
    (ctl / "root").mkdir()
    config = {
        "isolated": flavour is not None,
        "workspace": str(workspace),
        "code_path": str(ctl / "main.py"),
        "python": sys.executable,
        "ro_paths": _ro_paths(limits.network),
        "env": _env(workspace),
        "cpu_s": max(1, math.ceil(limits.cpu_s)),
        "memory_mb": limits.memory_mb,
        "max_file_mb": limits.max_file_mb,
        "max_processes": limits.max_processes,
        "tmp_mb": limits.tmp_mb,
    }
    (ctl / "config.json").write_text(json.dumps(config), encoding="utf-8")
    boot = [sys.executable, "-I", "-S", str(_BOOT), str(ctl)]
    argv = boot if flavour is None else [*_unshare_prefix(limits, flavour == "user"), *boot]
    return ctl, argv


def _collect(ctl: Path) -> dict[str, Any] | None:
    """Read the bootstrap's report and remove the control directory."""
    try:
        loaded = json.loads((ctl / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # the bootstrap was killed before or while writing
        loaded = None
    shutil.rmtree(ctl, ignore_errors=True)
    return loaded if isinstance(loaded, dict) else None


async def _run_once(
    code: str, workspace: Path, limits: SandboxLimits, stdin: str | None, flavour: str | None
) -> tuple[dict[str, Any] | None, _Capture, _Capture, bool, float]:
    ctl, argv = await anyio.to_thread.run_sync(_prepare, code, workspace, limits, flavour)
    out, err = _Capture(), _Capture()
    keep = limits.max_output_chars * 4 + 4096
    timed_out = False
    started = time.perf_counter()
    try:
        proc = await anyio.open_process(
            argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=str(workspace),
            env=_env(workspace),
            start_new_session=True,
        )
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read_capped, proc.stdout, keep, out)
                tg.start_soon(_read_capped, proc.stderr, keep, err)
                if stdin is not None and proc.stdin is not None:
                    # Fed concurrently: code that never reads a large input must still time out.
                    tg.start_soon(_feed, proc.stdin, stdin.encode("utf-8"))
                with anyio.move_on_after(limits.wall_s) as scope:
                    await proc.wait()
                if scope.cancelled_caught:
                    timed_out = True
                # Kill what is left (grandchildren keeping the pipes open would block the readers).
                _kill_group(proc)
                # In plain mode a process that escaped the group (setsid) may still hold the pipes:
                # stop reading after a grace period instead of waiting for it.
                tg.cancel_scope.deadline = anyio.current_time() + _DRAIN_GRACE_S
        finally:
            with anyio.CancelScope(shield=True):
                _kill_group(proc)
                await proc.wait()
                await proc.aclose()
        duration = time.perf_counter() - started
    finally:
        with anyio.CancelScope(shield=True):
            boot_result = await anyio.to_thread.run_sync(_collect, ctl)
    return boot_result, out, err, timed_out, duration


async def run_python(
    code: str,
    *,
    workspace: Path,
    limits: SandboxLimits = SandboxLimits(),  # noqa: B008 - frozen model, safe as a default
    stdin: str | None = None,
) -> SandboxResult:
    """Run ``code`` with ``python -I`` in ``workspace`` (its working directory) under ``limits``.

    ``workspace`` must be an existing directory; it is the only persistent place the code can write
    in isolated mode. Never raises for anything the code does; raises ``ValueError`` only for a
    missing workspace.
    """
    workspace = await anyio.to_thread.run_sync(Path(workspace).resolve)
    if not await anyio.to_thread.run_sync(workspace.is_dir):
        raise ValueError(f"sandbox workspace {workspace} is not an existing directory; create it first")
    notes: list[str] = []
    flavour, reason = await anyio.to_thread.run_sync(_isolation)  # probes once, blocking
    if limits.isolation == "none":
        flavour, reason = None, "isolation='none' was requested"
    if limits.isolation == "required" and flavour is None:
        return _refused(reason, limits)
    boot, out, err, timed_out, duration = await _run_once(code, workspace, limits, stdin, flavour)
    if flavour is not None and boot is not None and boot.get("setup_error"):
        reason = f"namespace setup failed: {boot['setup_error']}"
        _mark_unavailable(reason)
        if limits.isolation == "required":
            return _refused(reason, limits)
        flavour = None
        boot, out, err, timed_out, duration = await _run_once(code, workspace, limits, stdin, None)
    isolated = flavour is not None
    if isolated:
        notes.append(
            "isolated: own PID/mount/network namespaces, chroot with only the workspace "
            "writable, all capabilities dropped"
        )
    else:
        notes.append(f"plain: rlimits only, the code can read any file this user can ({reason})")
    network_isolated = isolated and not limits.network
    if limits.network:
        notes.append("network access allowed by the limits (network=True)")
    elif not isolated:
        notes.append("network NOT isolated: the code can open sockets (plain mode)")
    stdout, cut_out = _decode(out, limits.max_output_chars)
    stderr, cut_err = _decode(err, limits.max_output_chars)
    if cut_out or cut_err:
        notes.append(f"output truncated to {limits.max_output_chars} characters per stream")
    exit_code: int | None = None
    cpu = 0.0
    status: Literal["ok", "error", "timeout", "memory", "killed"]
    if timed_out:
        status = "timeout"
        notes.append(f"wall-time limit of {limits.wall_s:g}s reached; the process group was killed")
    elif boot is None:
        status = "killed"
        notes.append("the sandbox process died before reporting (killed from outside?)")
    else:
        exit_code = boot.get("exit_code")
        sig = boot.get("signal")
        cpu = float(boot.get("cpu_s") or 0.0)
        if boot.get("killed_reason") == "processes":
            status = "killed"
            notes.append(f"process limit of {limits.max_processes} exceeded (fork bomb?); all killed")
        elif sig in (signal.SIGXCPU, signal.SIGKILL) and cpu >= limits.cpu_s - 0.5:
            status = "timeout"
            notes.append(f"CPU-time limit of {limits.cpu_s:g}s reached")
        elif _MEMORY_RE.search(stderr[-2000:] if not cut_err else stderr):
            status = "memory"
            notes.append(f"memory limit of {limits.memory_mb} MiB reached (MemoryError)")
        elif sig is not None:
            status = "memory" if sig == signal.SIGSEGV and _looks_oom(boot, limits) else "killed"
            notes.append(f"killed by signal {signal.Signals(sig).name}")
        elif exit_code == 0:
            status = "ok"
        else:
            status = "error"
    return SandboxResult(
        stdout=stdout,
        stderr=stderr,
        exit_code=exit_code,
        status=status,
        duration_s=round(duration, 4),
        network_isolated=network_isolated,
        notes=tuple(notes),
        isolation="isolated" if isolated else "plain",
        cpu_s=round(cpu, 4),
    )


def _refused(reason: str, limits: SandboxLimits) -> SandboxResult:
    return SandboxResult(
        stdout="",
        stderr=f"sandbox: isolation is required but unavailable here: {reason}",
        exit_code=None,
        status="killed",
        duration_s=0.0,
        network_isolated=False,
        notes=(f"not run: isolation='required' but {reason}",),
    )


def _looks_oom(boot: dict[str, Any], limits: SandboxLimits) -> bool:
    return int(boot.get("max_rss_kb") or 0) >= limits.memory_mb * 1024 * 0.8
