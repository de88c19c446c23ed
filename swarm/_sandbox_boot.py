"""Sandbox bootstrap: runs as the first process of a sandbox and never imports our packages.

Invoked as ``python -I -S _sandbox_boot.py CONTROL_DIR`` (stdlib only, before any user code). The
control directory holds ``config.json`` and ``main.py``; the result is written to ``result.json``.

In ``isolated`` mode it runs as PID 1 of fresh PID/mount/network namespaces (``unshare``) and:

1. builds a new root on a tmpfs that contains only read-only binds of the system and Python
   directories, a few device nodes, a private ``/proc`` and ``/tmp``, and the workspace (read-write,
   at its real path), then ``chroot``\\s into it — ``/etc/passwd``, ``/home``, the repository and every
   other file outside the workspace simply do not exist inside;
2. forks the user process, which drops every capability (bounding set, effective, permitted,
   inheritable, ambient; ``no_new_privs``), sets rlimits and ``exec``\\s Python on the code;
3. acts as init: reaps children, kills the whole namespace when the process count passes the limit
   (a fork bomb) and when the user process exits (nothing survives it).

In ``plain`` mode (no namespaces available) only step 2's rlimits apply.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
# statvfs f_flag bits -> mount flags that a bind remount must keep (locked flags in user namespaces).
_ST_TO_MS = {
    1: MS_RDONLY,
    2: MS_NOSUID,
    4: MS_NODEV,
    8: MS_NOEXEC,
    1024: MS_NOATIME,
    2048: MS_NODIRATIME,
    4096: MS_RELATIME,
}

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = [None if v is None else v.encode() for v in (src, dst, fstype, data)]
    _check(_libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]), f"mount {src} on {dst}")


def _bind(src: str, dst: str, *, readonly: bool) -> None:
    _mount(src, dst, None, MS_BIND | MS_REC)
    keep = 0
    f_flag = os.statvfs(src).f_flag
    for st, ms in _ST_TO_MS.items():
        if f_flag & st:
            keep |= ms
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | keep
    if readonly:
        flags |= MS_RDONLY
    _mount(None, dst, None, flags)


def _build_root(cfg: dict[str, object], root: str) -> None:
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates to the host
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    for path in cfg["ro_paths"]:  # type: ignore[attr-defined]
        if not os.path.exists(path):
            continue
        target = root + path
        if os.path.islink(path) and os.path.isfile(path):
            path = os.path.realpath(path)  # e.g. /etc/resolv.conf -> a file under /run: bind the file
        elif os.path.islink(path):
            if not os.path.lexists(target):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.symlink(os.readlink(path), target)
            continue
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        _bind(path, target, readonly=True)
    os.makedirs(root + "/dev", exist_ok=True)
    for dev in ("null", "zero", "random", "urandom"):
        open(f"{root}/dev/{dev}", "a").close()
        _mount(f"/dev/{dev}", f"{root}/dev/{dev}", None, MS_BIND)
    os.makedirs(root + "/dev/shm", exist_ok=True)
    _mount("tmpfs", root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=1777")
    os.makedirs(root + "/tmp", exist_ok=True)
    _mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['tmp_mb']}m,mode=1777")
    os.makedirs(root + "/proc", exist_ok=True)
    _mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    ws = str(cfg["workspace"])
    os.makedirs(root + ws, exist_ok=True)
    _bind(ws, root + ws, readonly=False)
    os.makedirs(root + "/.sandbox", exist_ok=True)
    with open(root + "/.sandbox/main.py", "wb") as dst, open(str(cfg["code_path"]), "rb") as src:
        dst.write(src.read())
    # The root tmpfs itself becomes read-only: only the workspace and /tmp can be written.
    _mount(None, root, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY)
    os.chroot(root)
    os.chdir(ws)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_privileges(last_cap: int) -> None:
    for cap in range(last_cap + 1):
        _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(hdr), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _child(cfg: dict[str, object], isolated: bool, last_cap: int) -> None:
    import resource

    try:
        if isolated:
            _drop_privileges(last_cap)
        cpu = int(cfg["cpu_s"])  # type: ignore[call-overload]
        mem = int(cfg["memory_mb"]) * 1024 * 1024  # type: ignore[call-overload]
        fsize = int(cfg["max_file_mb"]) * 1024 * 1024  # type: ignore[call-overload]
        nproc = int(cfg["max_processes"])  # type: ignore[call-overload]
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.umask(0o022)
        # Lowest CPU priority: the code (and a fork bomb) must not starve the watchdog or the host.
        os.nice(19)
        code_path = "/.sandbox/main.py" if isolated else str(cfg["code_path"])
        env = {str(k): str(v) for k, v in cfg["env"].items()}  # type: ignore[attr-defined]
        os.execve(str(cfg["python"]), [str(cfg["python"]), "-I", code_path], env)
    except BaseException as exc:  # report and die; never fall through into the parent's code
        os.write(2, f"sandbox: could not start the code: {exc}\n".encode())
    os._exit(126)


def _too_many_processes(isolated: bool, sid: int, limit: int) -> bool:
    """Whether the sandbox has more than ``limit`` processes: all of the PID namespace, or (plain
    mode) all of our session. Stops reading as soon as the answer is known."""
    pids = [d for d in os.listdir("/proc") if d.isdigit()]
    if isolated:
        return len(pids) > limit
    n = 0
    for d in pids:
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and int(fields[3]) == sid:
            n += 1
            if n > limit:
                return True
    return False


def _kill_all() -> None:
    """From PID 1 of a PID namespace, kill(-1) reaches every other process in it."""
    with contextlib.suppress(ProcessLookupError):  # nothing else is running
        os.kill(-1, signal.SIGKILL)


def main() -> None:
    ctl = sys.argv[1]
    with open(os.path.join(ctl, "config.json")) as f:
        cfg = json.load(f)
    isolated = bool(cfg["isolated"])
    result: dict[str, object] = {
        "setup_error": None,
        "exit_code": None,
        "signal": None,
        "killed_reason": None,
        "cpu_s": 0.0,
        "max_rss_kb": 0,
    }
    out = os.open(os.path.join(ctl, "result.json"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def finish(code: int) -> None:
        os.write(out, json.dumps(result).encode())
        os.close(out)
        os._exit(code)

    last_cap = 40
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last_cap = int(f.read())
    except OSError:
        pass
    if isolated:
        try:
            _build_root(cfg, os.path.join(ctl, "root"))
        except OSError as exc:
            result["setup_error"] = str(exc)
            finish(0)
    pid = os.fork()
    if pid == 0:
        os.close(out)
        _child(cfg, isolated, last_cap)
    max_procs = int(cfg["max_processes"]) + 1  # + this process
    sid = os.getsid(0)
    # Plain mode scans all of /proc, so it looks less often than isolated mode (its own /proc).
    scan_every = 0.005 if isolated else 0.02
    next_scan = 0.0
    signal.signal(signal.SIGTERM, lambda *_: None)  # the parent kills with SIGKILL; ignore politeness
    while True:
        try:
            wpid, status, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if wpid == pid:
            result["cpu_s"] = ru.ru_utime + ru.ru_stime
            result["max_rss_kb"] = ru.ru_maxrss
            if os.WIFSIGNALED(status):
                result["signal"] = os.WTERMSIG(status)
            else:
                result["exit_code"] = os.WEXITSTATUS(status)
            break
        if wpid != 0:
            continue  # reaped an orphan
        now = time.monotonic()
        if now >= next_scan:
            next_scan = now + scan_every
            if _too_many_processes(isolated, sid, max_procs):
                result["killed_reason"] = "processes"
                if not isolated:  # RLIMIT_NPROC does not bind root: kill our whole process group
                    os.write(out, json.dumps(result).encode())
                    os.killpg(os.getpgid(0), signal.SIGKILL)
                _kill_all()
                with contextlib.suppress(ChildProcessError):
                    _, status, ru = os.wait4(pid, 0)
                    result["cpu_s"] = ru.ru_utime + ru.ru_stime
                    result["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
                break
        time.sleep(0.005)
    if isolated:
        _kill_all()  # as PID 1: every process left in the namespace dies with the code
    finish(0)


if __name__ == "__main__":
    main()
