"""Issue 18: sandboxed code races the file tools (symlink swaps), plants FIFOs and hard links."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from agent_swarm.swarm.errors import ToolError
from agent_swarm.swarm.sandbox import SandboxLimits, isolation_available, run_python
from agent_swarm.tools.builtin.files import list_files, read_file, search_files, write_file
from agent_swarm.tools.registry import ToolContext

ISOLATED, WHY_NOT = isolation_available()
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="renameat2 and the sandbox are Linux")

SWAPPER = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
os.makedirs('race', exist_ok=True)
open('race/f', 'w').write('harmless inside text')
os.symlink({secret!r}, 'race/f_swap')
os.mkdir('race/d')
os.symlink({outside!r}, 'race/d_swap')
open('ready', 'w').close()
end, n = time.time() + {seconds}, 0
while time.time() < end:
    libc.renameat2(AT_FDCWD, b'race/f', AT_FDCWD, b'race/f_swap', RENAME_EXCHANGE)
    libc.renameat2(AT_FDCWD, b'race/d', AT_FDCWD, b'race/d_swap', RENAME_EXCHANGE)
    n += 1
print('swaps', n)
"""


@pytest.mark.skipif(not ISOLATED, reason=f"bubblewrap isolation unavailable: {WHY_NOT}")
async def test_symlink_swap_race_never_reaches_outside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "marker-outside.txt").write_text("x")
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    ctx = ToolContext(episode_id="e", agent_id="a", workspace=ws)
    code = SWAPPER.format(secret=str(secret), outside=str(outside), seconds=4)
    leaks: list[str] = []
    tries = {"read": 0, "write": 0, "search": 0, "list": 0}

    async def attack() -> None:
        res = await run_python(code, workspace=ws, limits=SandboxLimits(cpu_s=10, wall_s=20))
        assert res.status == "ok", res
        assert int(res.stdout.split()[-1]) > 1000, res.stdout  # it really raced

    def victim() -> None:
        while not (ws / "ready").exists():
            time.sleep(0.01)
        end = time.monotonic() + 3.5
        i = 0
        while time.monotonic() < end:
            i += 1
            for name, call in (
                ("read", lambda: read_file(ctx, "race/f")),
                ("write", lambda i=i: write_file(ctx, f"race/d/new{i}.txt", "planted")),
                ("search", lambda: search_files(ctx, "SECRETHASH", "race")),
                ("list", lambda: list_files(ctx, "race/d")),
            ):
                tries[name] += 1
                try:
                    out = call()
                except ToolError:
                    continue
                if out != "no matches for 'SECRETHASH'" and ("SECRETHASH" in out or "marker-outside" in out):
                    leaks.append(f"{name}: {out[:80]}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(attack)
        await anyio.to_thread.run_sync(victim)
    assert all(n > 50 for n in tries.values()), tries
    assert leaks == []
    assert sorted(os.listdir(outside)) == ["marker-outside.txt"]  # nothing was created outside
    assert secret.read_text().startswith("root:$6$SECRETHASH")


async def test_fifo_is_refused_at_once(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.mkfifo(ws / "pipe")
    ctx = ToolContext(workspace=ws)
    started = time.monotonic()
    for call in (lambda: write_file(ctx, "pipe", "x"), lambda: read_file(ctx, "pipe")):
        with pytest.raises(ToolError, match="not a regular file"):
            await anyio.to_thread.run_sync(call)
    assert search_files(ctx, "x") == "no matches for 'x'"
    assert time.monotonic() - started < 10  # opening a FIFO would block for ever; load 4 costs seconds


async def test_hard_link_to_an_outside_file_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("do not touch")
    os.link(outside, ws / "hl")
    ctx = ToolContext(workspace=ws)
    for call in (lambda: read_file(ctx, "hl"), lambda: write_file(ctx, "hl", "pwned")):
        with pytest.raises(ToolError, match="hard link"):
            call()
    assert search_files(ctx, "touch") == "no matches for 'touch'"
    assert outside.read_text() == "do not touch"  # not even truncated


@pytest.mark.skipif(not ISOLATED, reason=f"bubblewrap isolation unavailable: {WHY_NOT}")
async def test_files_written_by_the_tools_stay_editable_by_the_code(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    ctx = ToolContext(workspace=ws)
    write_file(ctx, "notes/a.txt", "from the tool\n")
    code = "open('notes/a.txt', 'a').write('from the code\\n')\nopen('notes/b.txt', 'w').write('b')\n"
    res = await run_python(code, workspace=ws, limits=SandboxLimits(cpu_s=5, wall_s=20))
    assert res.status == "ok", res
    write_file(ctx, "notes/c.txt", "after the run")
    res = await run_python("open('notes/c.txt', 'a').write('!')", workspace=ws, limits=SandboxLimits(cpu_s=5))
    assert res.status == "ok", res
    assert read_file(ctx, "notes/a.txt") == "from the tool\nfrom the code\n"
    assert read_file(ctx, "notes/c.txt") == "after the run!"
    if os.geteuid() == 0:  # as root, everything belongs to the sandbox's unprivileged uid
        assert {p.stat().st_uid for p in [ws, *ws.rglob("*")]} == {ws.stat().st_uid} != {0}
