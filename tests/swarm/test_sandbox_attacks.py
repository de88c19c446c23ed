"""Issue 18: the attacks of the outside security test, each performed for real against the sandbox.

Most of them matter when the agent runs as root (CI does): those are skipped for other users, whose
sandboxed code never had root to lose. Nothing here writes a sysctl: the core_pattern check only opens
the file for writing and closes it.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import pytest

from agent_swarm.swarm.sandbox import (
    BWRAP_ENV,
    ISOLATION_ENV,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    isolation_available,
    run_python,
)

ISOLATED, WHY_NOT = isolation_available()
ROOT = os.geteuid() == 0
pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="the sandbox targets Linux"),
    pytest.mark.skipif(not ISOLATED, reason=f"bubblewrap isolation unavailable: {WHY_NOT}"),
]
as_root = pytest.mark.skipif(not ROOT, reason="the attack needs the agent to run as root (CI runs as root)")
FAST = SandboxLimits(cpu_s=5, wall_s=20, memory_mb=256)
PLAIN = FAST.model_copy(update={"isolation": "none"})
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _dict(res: SandboxResult) -> dict[str, object]:
    lines = res.stdout.strip().splitlines()
    assert lines, res
    out = ast.literal_eval(lines[-1])
    assert isinstance(out, dict)
    return out


# -- 1. host root through a writable /proc/sys ------------------------------------------------------

SYSCTL_ATTACK = """
import os
out = {}
for p in ['/proc/sys/kernel/core_pattern', '/proc/sys/vm/overcommit_memory', '/proc/sys/fs/file-max']:
    try:
        fd = os.open(p, os.O_WRONLY)  # opened only, never written
    except OSError as exc:
        out[p] = type(exc).__name__
    else:
        os.close(fd)
        out[p] = 'OPENED FOR WRITING'
out['uid'] = os.getuid()
try:
    out['host_uid'] = int(open('/proc/self/uid_map').read().split()[1])
except (OSError, IndexError):
    out['host_uid'] = None
print(repr(out))
"""


@as_root
@pytest.mark.parametrize("limits", [FAST, PLAIN], ids=["isolated", "plain"])
async def test_core_pattern_and_sysctls_cannot_be_opened_for_writing(workspace: Path, limits: SandboxLimits) -> None:
    res = await run_python(SYSCTL_ATTACK, workspace=workspace, limits=limits)
    out = _dict(res)
    for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/vm/overcommit_memory", "/proc/sys/fs/file-max"):
        assert out[path] in ("PermissionError", "OSError"), (path, out)
    assert out["uid"] != 0
    if limits.isolation != "none":  # the sandbox's uid maps to an unprivileged host uid, never to root
        assert out["host_uid"] not in (0, None), out


# -- 3. isolation fails open ------------------------------------------------------------------------


async def test_a_program_over_16_mib_still_runs_isolated(workspace: Path) -> None:
    big = "blob = '" + "a" * (17 * 1024 * 1024) + "'\nprint(len(blob))\nprint(open('/etc/shadow').read())\n"
    res = await run_python(big, workspace=workspace, limits=FAST.model_copy(update={"memory_mb": 1024}))
    assert res.isolation == "isolated"
    assert res.stdout.splitlines()[0] == str(17 * 1024 * 1024), res
    assert "FileNotFoundError" in res.stderr and "root:" not in res.stdout
    after = await run_python("print(open('/etc/shadow').read())", workspace=workspace, limits=FAST)
    assert after.isolation == "isolated" and after.status == "error"


def _run_in_subprocess(
    env: dict[str, str], ws: Path, limits: str = "SandboxLimits()"
) -> subprocess.CompletedProcess[str]:
    script = (
        "import anyio, pathlib, sys\n"
        "from agent_swarm.swarm.sandbox import run_python, SandboxLimits, SandboxUnavailableError\n"
        "code = \"open('ran.txt', 'w').write('the code ran')\\nprint('ran')\"\n"
        "try:\n"
        f"    r = anyio.run(lambda: run_python(code, workspace=pathlib.Path({str(ws)!r}), limits={limits}))\n"
        "except SandboxUnavailableError as exc:\n"
        "    print('REFUSED', exc)\n"
        "else:\n"
        "    print('RESULT', r.model_dump_json())\n"
    )
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-c", script], env=full, capture_output=True, text=True, timeout=120)


def test_missing_bubblewrap_refuses_to_run_instead_of_running_plain(workspace: Path) -> None:
    out = _run_in_subprocess({BWRAP_ENV: "/nonexistent/bwrap"}, workspace)
    assert out.stdout.startswith("REFUSED"), out
    assert "install it" in out.stdout and "bubblewrap" in out.stdout
    assert not (workspace / "ran.txt").exists()


def test_bubblewrap_that_cannot_sandbox_refuses_to_run(workspace: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    for limits in ("SandboxLimits()", "SandboxLimits(isolation='required')"):
        out = _run_in_subprocess({BWRAP_ENV: str(fake)}, workspace, limits)
        assert out.stdout.startswith("REFUSED"), out
        assert "No permissions to create new namespace" in out.stdout
    assert not (workspace / "ran.txt").exists()


def test_plain_mode_only_when_explicitly_asked(workspace: Path) -> None:
    out = _run_in_subprocess({BWRAP_ENV: "/nonexistent/bwrap", ISOLATION_ENV: "none"}, workspace)
    assert out.stdout.startswith("RESULT"), out
    res = SandboxResult.model_validate_json(out.stdout.split(" ", 1)[1])
    assert res.isolation == "plain" and res.status == "ok"
    assert any(ISOLATION_ENV in n for n in res.notes)


# -- 4. a setuid binary made in the workspace -------------------------------------------------------

SETUID_ATTACK = """
import os, shutil
shutil.copy('/usr/bin/id', 'suid-id')
os.chmod('suid-id', 0o4755)
try:
    os.chown('suid-id', 0, 0)
    print('chown ok')
except OSError as exc:
    print('chown', type(exc).__name__)
"""


@as_root
@pytest.mark.parametrize("limits", [FAST, PLAIN], ids=["isolated", "plain"])
async def test_a_setuid_binary_from_the_sandbox_is_not_root_on_the_host(workspace: Path, limits: SandboxLimits) -> None:
    res = await run_python(SETUID_ATTACK, workspace=workspace, limits=limits)
    assert res.status == "ok", res
    assert res.stdout.strip() in ("chown PermissionError", "chown OSError")  # EPERM, or EINVAL: no uid 0 inside
    st = (workspace / "suid-id").stat()
    assert st.st_uid != 0  # a set-user-ID bit on it gives that unprivileged uid, never root
    run = await anyio.run_process([str(workspace / "suid-id"), "-u"], check=True)
    assert run.stdout.decode().strip() == str(st.st_uid)


# -- 5. the caller's secrets, ptrace and kill --------------------------------------------------------

CALLER_ATTACK = """
import ctypes, os
pid = {pid}
out = {{}}
try:
    out['environ'] = 'LEAKED' if b'SWARM_CALLER_SECRET' in open(f'/proc/{{pid}}/environ', 'rb').read() else 'absent'
except OSError as exc:
    out['environ'] = type(exc).__name__
try:
    open(f'/proc/{{pid}}/mem', 'rb').close()
    out['mem'] = 'OPENED'
except OSError as exc:
    out['mem'] = type(exc).__name__
try:
    os.kill(pid, 0)  # signal 0: only asks whether we could
    out['kill'] = 'ALLOWED'
except OSError as exc:
    out['kill'] = type(exc).__name__
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
    libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
    out['ptrace'] = 'ATTACHED'
else:
    out['ptrace'] = os.strerror(ctypes.get_errno())
try:
    out['shadow'] = 'READ' if open('/etc/shadow').read() else 'empty'
except OSError as exc:
    out['shadow'] = type(exc).__name__
print(repr(out))
"""


@as_root
@pytest.mark.parametrize("limits", [FAST, PLAIN], ids=["isolated", "plain"])
async def test_the_code_cannot_read_trace_or_kill_its_caller(
    workspace: Path, limits: SandboxLimits, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWARM_CALLER_SECRET", "hunter2")
    res = await run_python(CALLER_ATTACK.format(pid=os.getpid()), workspace=workspace, limits=limits)
    out = _dict(res)
    assert out["environ"] != "LEAKED" and out["mem"] != "OPENED", out
    assert out["kill"] in ("PermissionError", "ProcessLookupError"), out
    assert out["ptrace"] != "ATTACHED", out
    assert out["shadow"] in ("PermissionError", "FileNotFoundError"), out


@pytest.mark.parametrize("limits", [FAST, PLAIN], ids=["isolated", "plain"])
async def test_setsid_children_die_with_the_run(workspace: Path, limits: SandboxLimits) -> None:
    if limits.isolation == "none" and not ROOT:
        pytest.skip("plain mode as a normal user cannot contain a child that kills its supervisor")
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(1.5)\n"
        "        open('late.txt', 'w').write('escaped')\n"
        "    os._exit(0)\n"
        "print('parent done')\n"
    )
    res = await run_python(code, workspace=workspace, limits=limits)
    assert res.status == "ok" and res.duration_s < 5
    await anyio.sleep(2.5)
    assert not (workspace / "late.txt").exists()


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_killing_the_caller_kills_the_code(tmp_path: Path, isolation: str) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    code = "import time\nopen('started', 'w').close()\ntime.sleep(2)\nopen('late.txt', 'w').write('survived')\n"
    script = (
        "import anyio, pathlib\n"
        "from agent_swarm.swarm.sandbox import run_python, SandboxLimits\n"
        f"anyio.run(lambda: run_python({code!r}, workspace=pathlib.Path({str(ws)!r}), "
        f"limits=SandboxLimits(isolation={isolation!r}, wall_s=20)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    caller = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (ws / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (ws / "started").exists()
    finally:
        caller.kill()  # SIGKILL: no cleanup code of ours runs
        caller.wait()
    time.sleep(3)
    assert not (ws / "late.txt").exists()
    assert not list(Path(tempfile.gettempdir()).glob("swarm-sandbox-*/main.py"))  # no control files left


# -- 6. limits for the whole run --------------------------------------------------------------------

CHILDREN_MEMORY = """
import os, sys, time
held = 0
pids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        block = b'x' * (80 * 1024 * 1024)  # written, so every page is really held
        time.sleep(2)
        os._exit(0)
    pids.append(pid)
for pid in pids:
    _, status = os.waitpid(pid, 0)
    held += os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
print({'held': held})
"""

MEMFD_MEMORY = """
import os
held = 0
fds = []
try:
    for i in range(12):
        fd = os.memfd_create('m%d' % i)
        for _ in range(40):
            os.write(fd, b'x' * (1024 * 1024))
        fds.append(fd)
        held += 40
except OSError as exc:
    print({'held_mb': held, 'error': type(exc).__name__})
else:
    print({'held_mb': held})
"""


def _fallback(code: str, limits: str, ws: Path) -> SandboxResult:
    """Run in a fresh process with cgroups off: rlimits, the watchdog and seccomp must hold alone."""
    script = (
        "import anyio, pathlib\n"
        "from agent_swarm.swarm.sandbox import run_python, SandboxLimits\n"
        f"r = anyio.run(lambda: run_python({code!r}, workspace=pathlib.Path({str(ws)!r}), limits={limits}))\n"
        "print(r.model_dump_json())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWARM_SANDBOX_CGROUP": "off"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return SandboxResult.model_validate_json(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cgroup", ["auto", "off"])
async def test_memory_is_bounded_across_child_processes(workspace: Path, cgroup: str) -> None:
    limits = "SandboxLimits(cpu_s=10, wall_s=30, memory_mb=200)"
    if cgroup == "off":
        res = _fallback(CHILDREN_MEMORY, limits, workspace)
    else:
        limited = SandboxLimits(cpu_s=10, wall_s=30, memory_mb=200)
        res = await run_python(CHILDREN_MEMORY, workspace=workspace, limits=limited)
    assert res.status == "memory", res
    assert "{'held': 6}" not in res.stdout  # 6 x 80 MiB never held at once under a 200 MiB limit


@pytest.mark.parametrize("cgroup", ["auto", "off"])
async def test_memfds_cannot_hold_memory_past_the_limit(workspace: Path, cgroup: str) -> None:
    limits = "SandboxLimits(cpu_s=10, wall_s=30, memory_mb=128)"
    if cgroup == "off":  # no cgroup to account memfd pages: memfd_create is refused
        res = _fallback(MEMFD_MEMORY, limits, workspace)
        assert "'error': 'PermissionError'" in res.stdout, res
    else:
        limited = SandboxLimits(cpu_s=10, wall_s=30, memory_mb=128)
        res = await run_python(MEMFD_MEMORY, workspace=workspace, limits=limited)
        assert res.status == "memory", res
    assert "'held_mb': 480}" not in res.stdout


async def test_tmp_and_dev_shm_are_size_limited(workspace: Path) -> None:
    code = (
        "out = {}\n"
        "for p in ('/tmp/big', '/dev/shm/big'):\n"
        "    try:\n"
        "        with open(p, 'wb') as f:\n"
        "            for _ in range(40):\n"
        "                f.write(b'x' * (1024 * 1024))\n"
        "        out[p] = 'wrote 40 MiB'\n"
        "    except OSError as exc:\n"
        "        out[p] = exc.errno\n"
        "print(repr(out))\n"
    )
    limits = FAST.model_copy(update={"tmp_mb": 16, "shm_mb": 16})
    out = _dict(await run_python(code, workspace=workspace, limits=limits))
    assert out == {"/tmp/big": 28, "/dev/shm/big": 28}  # ENOSPC


def _usage(ws: Path) -> int:
    return sum(max(p.lstat().st_size, p.lstat().st_blocks * 512) for p in ws.rglob("*"))


async def test_workspace_quota_stops_many_files(workspace: Path) -> None:
    code = (
        "for i in range(200):\n"
        "    with open(f'f{i}.bin', 'wb') as f:\n"
        "        for _ in range(4):\n"
        "            f.write(b'x' * (1024 * 1024))\n"
        "print('wrote 800 MiB')\n"
    )
    limits = FAST.model_copy(update={"workspace_mb": 32, "max_file_mb": 64})
    res = await run_python(code, workspace=workspace, limits=limits)
    assert res.status == "killed" and any("quota" in n for n in res.notes), res
    assert "wrote 800 MiB" not in res.stdout
    assert _usage(workspace) < (32 + 64) * 2**20  # the quota, plus what one watchdog interval lets through
    again = await run_python("print('hi')", workspace=workspace, limits=limits)
    assert again.status == "killed" and "over its quota" in again.stderr  # refused until files go


async def test_sparse_files_count_and_fallocate_is_refused(workspace: Path) -> None:
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "fd = os.open('prealloc', os.O_CREAT | os.O_WRONLY)\n"
        "r = libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(32 * 1024 * 1024))\n"  # KEEP_SIZE
        "print('fallocate', r, ctypes.get_errno())\n"
        "for i in range(163):\n"
        "    with open(f's{i}', 'wb') as f:\n"
        "        f.truncate(63 * 1024 * 1024)\n"
        "import time; time.sleep(5)\n"
        "print('not stopped')\n"
    )
    limits = FAST.model_copy(update={"workspace_mb": 64})
    res = await run_python(code, workspace=workspace, limits=limits)
    assert res.stdout.splitlines()[0] == "fallocate -1 95", res  # EOPNOTSUPP
    assert res.status == "killed" and any("quota" in n for n in res.notes), res


async def test_no_descriptor_of_ours_reaches_the_code_and_open_files_are_capped(workspace: Path) -> None:
    leaked = []
    for _ in range(20):
        r, w = os.pipe()
        os.set_inheritable(r, True)
        os.set_inheritable(w, True)
        leaked += [r, w]
    code = (
        "import os\n"
        "print(sorted(int(f) for f in os.listdir('/proc/self/fd')))\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        os.open('/dev/null', os.O_RDONLY)\n"
        "        n += 1\n"
        "except OSError as exc:\n"
        "    print(n, exc.errno)\n"
    )
    try:
        res = await run_python(code, workspace=workspace, limits=FAST.model_copy(update={"max_open_files": 64}))
    finally:
        for fd in leaked:
            os.close(fd)
    first, second = res.stdout.splitlines()
    assert ast.literal_eval(first) == [0, 1, 2, 3]  # 3 is listdir's own
    n, err = second.split()
    assert int(n) == 64 - 3 and err == "24"  # EMFILE at the cap


async def test_channel_is_fd_3_and_comes_back(workspace: Path) -> None:
    code = "import os\nos.write(3, b'over the channel')\nprint(sorted(os.listdir('/proc/self/fd')))\n"
    res = await run_python(code, workspace=workspace, limits=FAST, channel=True)
    assert res.status == "ok" and res.channel == "over the channel"
    plain = await run_python("print(1)", workspace=workspace, limits=FAST)
    assert plain.channel is None


# -- 10. Python under /tmp ----------------------------------------------------------------------------


def test_an_interpreter_under_tmp_runs_code(tmp_path: Path) -> None:
    venv = tmp_path / "clone" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next(venv.glob("lib/python*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "swarm-deps.pth").write_text("\n".join([str(REPO), *deps]) + "\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    script = (
        "import anyio, pathlib, sys\n"
        "from agent_swarm.swarm.sandbox import run_python\n"
        f"r = anyio.run(lambda: run_python('import sys; print(sys.prefix)', workspace=pathlib.Path({str(ws)!r})))\n"
        "print(r.model_dump_json())\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    argv = [str(venv / "bin" / "python"), "-c", script]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    res = SandboxResult.model_validate_json(out.stdout.strip().splitlines()[-1])
    assert res.status == "ok", res
    assert res.isolation == "isolated"
    assert res.stdout.strip() == str(venv)


def test_refusal_is_a_config_error() -> None:
    from agent_swarm.swarm.errors import ConfigError

    assert issubclass(SandboxUnavailableError, ConfigError)
    assert json.loads(json.dumps(str(SandboxUnavailableError("x")))) == "x"
