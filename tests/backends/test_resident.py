"""The resident engine's protocol without a model: which engine a run attaches to (exact model file,
sha256 and settings; a live server), stale state cleaned up, one client at a time, the idle timer,
SIGTERM, and ``swarm serve --status/--stop``. The real engine: test_resident_engine.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.cli import app
from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine, file_sha256
from agent_swarm.swarm.backends.local.resident import (
    STATE_FILE,
    EngineRequest,
    FileIdentity,
    ResidentServer,
    ResidentState,
    client_attached,
    engine_version,
    read_state,
    resident_dir,
    stop_resident,
)
from agent_swarm.swarm.errors import ConfigError

runner = CliRunner()
REQUEST = EngineRequest(slots=4, fit_slots=False, ctx=4096, threads=2)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF not a real model")
    return path


def _state(model: Path, *, pid: int | None = None, request: EngineRequest = REQUEST) -> ResidentState:
    return ResidentState(
        model=model.stem,
        file=FileIdentity.of(model),
        sha256=file_sha256(model),
        request=request,
        slots=3,  # what the server resolved; an attached client adopts it
        ctx_per_slot=2048,
        pool=4096,
        threads=2,
        context_note="2048 tokens per slot x 3 slots",
        engine_version=engine_version(),
        base_url="http://127.0.0.1:9",
        pid=pid or os.getpid(),
        idle_s=600.0,
        started=time.time(),
    )


def _serving(directory: Path, model: Path, **kw: object) -> ResidentServer:
    server = ResidentServer.claim(directory)
    server.publish(_state(model, **kw))  # type: ignore[arg-type]
    return server


def _engine(model: Path, directory: Path, **kw: int) -> LocalEngine:
    settings = {"slots": 4, "ctx_per_slot": 4096, "threads": 2, **kw}
    return LocalEngine(str(model), resident=directory, **settings)  # type: ignore[arg-type]


def test_a_run_attaches_to_a_live_engine_of_the_same_file_and_settings(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    engine = _engine(model, d)
    note = engine.plan()
    assert engine.attached is not None and "attached to the resident engine" in note and str(os.getpid()) in note
    # the server's layout; its one client at a time counts the room of its shared cache
    assert (engine.slots, engine.ctx_per_slot, engine.pool) == (3, 2048, 4096)
    assert client_attached(d)
    engine.close()
    assert not client_attached(d) and read_state(d) is not None  # the server goes on
    server.withdraw()
    server.release()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("touch", "as it is now"),
        ("slots", "slots=8"),
        ("threads", "threads=auto"),
    ],
)
def test_a_changed_file_or_other_settings_start_their_own_engine(
    tmp_path: Path, model: Path, change: str, why: str
) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    if change == "touch":
        os.utime(model, ns=(time.time_ns(), time.time_ns() + 10**9))
    if change == "threads":
        engine = LocalEngine(str(model), resident=d, slots=4, ctx_per_slot=4096)
    else:
        engine = _engine(model, d, slots=8) if change == "slots" else _engine(model, d)
    note = engine.plan()
    assert engine.attached is None and "was not used" in note and why in note, note
    assert read_state(d) is not None and not client_attached(d)  # a live server keeps its state
    server.withdraw()
    server.release()


def test_a_dead_servers_state_is_removed_and_ignored(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    server.release()  # dies without withdrawing: its state file stays behind
    assert (d / STATE_FILE).is_file()
    engine = _engine(model, d)
    note = engine.plan()
    assert engine.attached is None and "resident" not in note
    assert not (d / STATE_FILE).is_file() and read_state(d) is None


def test_one_client_at_a_time(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    first, second = _engine(model, d), _engine(model, d)
    first.plan()
    note = second.plan()
    assert first.attached is not None and second.attached is None
    assert "another run is attached" in note
    first.close()
    third = _engine(model, d)
    third.plan()
    assert third.attached is not None
    third.close()
    server.withdraw()
    server.release()


def test_a_second_server_is_refused(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    with pytest.raises(ConfigError, match=r"already running \(pid \d+, tiny\).*swarm serve --stop"):
        ResidentServer.claim(d)
    server.withdraw()
    server.release()
    ResidentServer.claim(d).release()


def test_the_idle_timer_counts_only_time_without_a_client(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    engine = _engine(model, d)
    engine.plan()
    assert engine.attached is not None
    threading.Timer(0.6, engine.close).start()
    began = time.monotonic()
    assert server.wait(0.3, poll_s=0.02, model=model) == "idle"
    assert time.monotonic() - began >= 0.85  # 0.6 s attached, then 0.3 s idle (less a poll)
    server.withdraw()
    # Stopping: the state is gone and the client lock held, so no run attaches any more.
    late = _engine(model, d)
    late.plan()
    assert late.attached is None and read_state(d) is None
    server.release()


def test_the_server_stops_on_request_and_when_its_model_file_changes(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    server = _serving(d, model)
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    assert server.wait(60, poll_s=0.02, stop=stop, model=model) == "stopped"
    model.write_bytes(b"GGUF another model")
    assert server.wait(60, poll_s=0.02, model=model) == "model changed"
    server.withdraw()
    server.release()
    assert read_state(d) is None


def test_the_backend_factory_lets_local_runs_attach_unless_told_not_to(model: Path) -> None:
    orch, _ = build_backends("local", str(model), slots=4, ctx=4096)
    assert isinstance(orch, LocalBackend) and orch.engine.resident == resident_dir()
    off, _ = build_backends("local", str(model), slots=4, ctx=4096, resident=False)
    assert isinstance(off, LocalBackend) and off.engine.resident is None


_SERVER = """
import os, signal, sys, threading
from pathlib import Path
from agent_swarm.swarm.backends.local.resident import ResidentServer, ResidentState
server = ResidentServer.claim(Path(sys.argv[1]))
state = ResidentState.model_validate_json(sys.argv[2])
server.publish(state.model_copy(update={"pid": os.getpid()}))
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
print(server.wait(600, poll_s=0.02, stop=stop), flush=True)
server.withdraw()
server.release()
"""


def test_swarm_serve_status_and_stop(model: Path) -> None:
    d = resident_dir()  # the test's own cache directory (conftest)
    r = runner.invoke(app, ["serve", "--status"])
    assert r.exit_code == 1 and "no resident engine is running" in r.stdout
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(d), _state(model, pid=1).model_dump_json()],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while read_state(d) is None:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        r = runner.invoke(app, ["serve", "--status"])
        assert r.exit_code == 0 and "resident engine: tiny" in r.stdout and "idle" in r.stdout, r.output
        r = runner.invoke(app, ["serve"])
        assert r.exit_code == 2 and "already running" in r.output
        r = runner.invoke(app, ["serve", "--stop"])
        assert r.exit_code == 0 and f"stopped the resident engine (pid {proc.pid}, tiny)" in r.stdout, r.output
        ResidentServer.claim(d).release()  # --stop returned once the server let go of its lock
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0 and out.strip() == "stopped"
        assert read_state(d) is None and stop_resident(d) is None
    finally:
        proc.kill()
        shutil.rmtree(d, ignore_errors=True)  # the test cache holds no model or engine state after it
        proc.communicate()


class _Engine:
    """A servable engine with no model: records what ``serve_engine`` asks of it, in order."""

    name = "fake"
    slots, ctx_per_slot, pool, context_note = 4, 4096, 0, ""
    request = REQUEST
    resident: Path | None = None
    lora_adapters: tuple[Path, ...] = ()
    threads = 2
    base_url = "http://127.0.0.1:1"

    def __init__(self, path: Path) -> None:
        self.path: Path | None = path
        self.calls: list[str] = []

    def start(self) -> _Engine:
        self.calls.append("start")
        return self

    def warm_up(self) -> None:
        self.calls.append("warm_up")

    def close(self) -> None:
        self.calls.append("close")

    def model_sha256(self) -> str:
        return "0" * 64


def test_the_engine_is_warmed_up_before_clients_may_attach(tmp_path: Path, model: Path) -> None:
    """The first request of a new llama.cpp server sets up its grammar engine (0.7-1.1 s); ``swarm serve``
    pays it before it publishes its state, so no client's first turn waits for it."""
    from agent_swarm.swarm.backends.local.resident import serve_engine

    engine, stop = _Engine(model), threading.Event()

    def ready(state: ResidentState) -> None:
        engine.calls.append("published")
        stop.set()

    assert serve_engine(engine, 60, directory=tmp_path, stop=stop, ready=ready, poll_s=0.01) == "stopped"
    assert engine.calls == ["start", "warm_up", "published", "close"]
