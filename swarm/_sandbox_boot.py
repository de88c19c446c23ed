"""Sandbox supervisor: the first process of a sandbox. Standard library only; never imports our code.

Started as ``python -I -S _sandbox_boot.py key=value ...`` by :mod:`agent_swarm.swarm.sandbox`. In isolated mode it
runs as PID 1 of the bubblewrap sandbox (``bwrap --as-pid-1``), so the code cannot stop or kill it
(signals from inside the namespace to its init are ignored), and it makes itself non-dumpable, so the
code (same uid) cannot ptrace it or open its file descriptors through ``/proc``. It

1. forks the code's process, which takes its standard input and (optionally) the caller's channel
   (as fd 3), closes every other descriptor, sets the rlimits and ``exec``\\s ``python -I`` on the code;
2. reaps children and watches the run: it kills everything when the processes reach the limit, when
   the summed resident memory passes the limit (only when no cgroup bounds it), or when the
   workspace grows past its quota;
3. when the code's process ends, kills whatever it left behind and writes ``key=value`` lines to the
   report descriptor: exit code or signal, CPU seconds, peak RSS, and why it killed (if it did).

In plain mode (``plain=1``: no namespaces) it is not PID 1. It becomes a child subreaper, so every
process the code starts stays its descendant (``setsid`` and double forks included), and it counts and
kills descendants instead of using ``kill(-1)``, which would reach every process of the user. When
``drop=`` names ``setpriv`` and a uid (plain mode started by root), the code's process runs as that
unprivileged uid with ``no_new_privs``, while the supervisor stays out of its reach.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sys
import time

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
_PROC_EVERY_S = 0.005
_MEM_EVERY_S = 0.02
_DISK_MIN_EVERY_S = 0.01


def _prctl(*args: int) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(*args, 0, 0, 0)


def _child(cfg: dict[str, str]) -> None:
    try:
        os.close(int(cfg["report"]))
        stdin_fd, channel = int(cfg["stdin"]), int(cfg["channel"])
        if stdin_fd >= 0:
            os.dup2(stdin_fd, 0)
        else:
            null = os.open("/dev/null", os.O_RDONLY)
            os.dup2(null, 0)
        if channel >= 0:
            os.dup2(channel, 3)
        first, code = (4 if channel >= 0 else 3), int(cfg["code"])
        top = resource.getrlimit(resource.RLIMIT_NOFILE)[0] + 1
        if code >= first:  # plain mode: the code is read from this descriptor, which must stay open
            os.closerange(first, code)
            os.closerange(code + 1, top)
            os.set_inheritable(code, True)
        else:
            os.closerange(first, top)
        limit = resource.setrlimit
        cpu = int(cfg["cpu"])
        limit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        limit(resource.RLIMIT_FSIZE, (int(cfg["fsize"]),) * 2)
        limit(resource.RLIMIT_NOFILE, (int(cfg["nofile"]),) * 2)
        limit(resource.RLIMIT_CORE, (0, 0))
        if int(cfg["as"]) > 0:
            limit(resource.RLIMIT_AS, (int(cfg["as"]),) * 2)
        if cfg["nproc_rlimit"] == "1":
            # Counted per user namespace (Linux >= 5.14): in a sandbox, only the sandbox's processes.
            limit(resource.RLIMIT_NPROC, (int(cfg["nproc"]) + 1,) * 2)
        os.umask(0o022)
        # Slightly below normal priority: a busy program yields to the supervisor and the agent (19 made
        # even print(1) take 3x longer on a loaded machine).
        os.nice(5)
        # -I ignores PYTHON* variables, so their effects are asked for by flag: unbuffered output (what
        # was printed survives a kill) and no bytecode files in the workspace.
        argv = [cfg["python"], "-I", "-B", "-u", cfg["main"]]
        if cfg.get("drop"):  # plain mode as root: setpriv PATH:UID
            setpriv, uid = cfg["drop"].split(":")
            ids = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
            argv = [setpriv, *ids, "--bounding-set=-all", "--no-new-privs", "--pdeathsig", "KILL", *argv]
        elif cfg["plain"] == "1":
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the supervisor (kept across exec)
        os.execv(argv[0], argv)
    except BaseException as exc:  # report and die; never fall through into the supervisor's loop
        os.write(2, f"sandbox: could not start the code: {exc}\n".encode())
    os._exit(126)


def _pids() -> list[int]:
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _descendants(me: int) -> list[int]:
    """Plain mode: every process below us (we are a subreaper, so orphans stay below us)."""
    children: dict[int, list[int]] = {}
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [me]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _resident_bytes(pids: list[int], page: int) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, IndexError, ValueError):
            continue
    return total


def _disk_bytes(root: str, stop_at: int) -> int:
    """Bytes the workspace holds: apparent size or allocated blocks, whichever is larger (sparse and
    preallocated files both count). Stops early once past ``stop_at``."""
    total = 0
    stack = [root]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for entry in it:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += max(st.st_size, st.st_blocks * 512)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
        if total > stop_at:
            break
    return total


class _Watch:
    def __init__(self, cfg: dict[str, str], code_pid: int) -> None:
        self.plain = cfg["plain"] == "1"
        self.code_pid = code_pid
        self.nproc = int(cfg["nproc"])
        self.mem = int(cfg["mem"])
        self.quota = int(cfg["quota"])
        # Lifeline: a pipe whose write end only the caller holds. EOF means the caller died (even by
        # SIGKILL): nothing of the run may outlive it.
        self.life = int(cfg.get("life", "-1"))
        if self.life >= 0:
            os.set_blocking(self.life, False)
        self.ws = cfg["ws"]
        self.me = os.getpid()
        self.page = os.sysconf("SC_PAGE_SIZE")
        now = time.monotonic()
        self.next_proc = self.next_mem = now
        self.next_disk = now + _DISK_MIN_EVERY_S
        self.disk_every = _DISK_MIN_EVERY_S

    def others(self) -> list[int]:
        if self.plain:
            return _descendants(self.me)
        return [p for p in _pids() if p != self.me]

    def over_processes(self) -> bool:
        return self.nproc > 0 and len(self.others()) >= self.nproc

    def check(self) -> str | None:
        """Why the run must be stopped now, if it must."""
        now = time.monotonic()
        if self.life >= 0:
            try:
                if os.read(self.life, 64) == b"":
                    return "caller"
            except BlockingIOError:
                pass
        if self.nproc > 0 and now >= self.next_proc:
            self.next_proc = now + (_PROC_EVERY_S if not self.plain else 4 * _PROC_EVERY_S)
            if self.over_processes():
                return "processes"
        if self.mem > 0 and now >= self.next_mem:
            self.next_mem = now + _MEM_EVERY_S
            if _resident_bytes(self.others(), self.page) > self.mem:
                return "memory"
        if self.quota > 0 and now >= self.next_disk:
            used = _disk_bytes(self.ws, self.quota)
            took = time.monotonic() - now
            # A big workspace is walked less often, so the watchdog never eats the run's CPU.
            self.disk_every = max(_DISK_MIN_EVERY_S, 10 * took)
            self.next_disk = time.monotonic() + self.disk_every
            if used > self.quota:
                return "disk"
        return None

    def kill_all(self) -> None:
        if not self.plain:
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)  # from PID 1: every other process of the sandbox
            return
        for _ in range(3):  # plain: every descendant (a forking one may add more while we kill)
            for pid in _descendants(self.me):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def main() -> None:
    cfg = dict(arg.split("=", 1) for arg in sys.argv[1:])
    report = int(cfg["report"])
    _prctl(_PR_SET_DUMPABLE, 0)  # the code (same uid in a sandbox) cannot ptrace us or read our fds
    if cfg["plain"] == "1":
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        # Plain mode has no --die-with-parent: if whoever started us dies, so do we, and so the code.
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the caller stops a sandbox with SIGKILL only
    pid = os.fork()
    if pid == 0:
        _child(cfg)
    for fd in (int(cfg["stdin"]), int(cfg["channel"]), int(cfg["code"])):
        if fd >= 0:
            os.close(fd)  # the code holds them now; our copies would hide its EOF
    watch = _Watch(cfg, pid)
    result: dict[str, object] = {"exit": "", "signal": "", "cpu": 0.0, "rss_kb": 0, "killed": ""}
    while True:
        try:
            wpid, status, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if wpid == pid:
            result["cpu"] = ru.ru_utime + ru.ru_stime
            result["rss_kb"] = ru.ru_maxrss
            if os.WIFSIGNALED(status):
                result["signal"] = os.WTERMSIG(status)
            else:
                result["exit"] = os.WEXITSTATUS(status)
            # A fork bomb whose first process died (a fork refused, between two polls) leaves its
            # children over the limit: that is the process limit, not the code's own error.
            if watch.over_processes():
                result["killed"] = "processes"
            break
        if wpid != 0:
            continue  # reaped an orphan; look again at once
        reason = watch.check()
        if reason is not None:
            result["killed"] = reason
            watch.kill_all()
            try:
                _, status, ru = os.wait4(pid, 0)
                result["cpu"] = ru.ru_utime + ru.ru_stime
                result["rss_kb"] = ru.ru_maxrss
                result["signal"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else ""
            except ChildProcessError:
                pass
            break
        time.sleep(0.002)
    watch.kill_all()  # nothing the code started outlives it
    os.write(report, "".join(f"{k}={v}\n" for k, v in result.items()).encode())
    os.close(report)
    os._exit(0)


if __name__ == "__main__":
    main()
