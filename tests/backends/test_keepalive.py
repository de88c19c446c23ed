"""A run that keeps its model loaded, without a model: the background process's request is exactly the
engine's settings, it is waited for until it serves and never forever, a failure is one line and the
run then starts its own engine, and who gets which keep-alive (``swarm run`` 300 s, ``eval``,
``rollout`` and the library none, the config and ``SWARM_LOCAL_KEEP_ALIVE`` over both). The real
engine: test_resident_engine.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.orchestrator.cli.settings import COMMANDS, RUN_KEEP_ALIVE_S
from agent_swarm.swarm.backends.local import LocalBackend, LocalEngine, file_sha256
from agent_swarm.swarm.backends.local.keepalive import LOG_FILE, ServeRequest, spawn_resident
from agent_swarm.swarm.backends.local.resident import (
    EngineRequest,
    FileIdentity,
    ResidentServer,
    ResidentState,
    engine_version,
    read_state,
    stop_resident,
)
from agent_swarm.swarm.errors import ConfigError


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"GGUF not a real model")
    return path


def _engine(model: Path, directory: Path, keep_alive: float = 300.0) -> LocalEngine:
    return LocalEngine(str(model), slots=3, ctx_per_slot=2048, threads=2, resident=directory, keep_alive=keep_alive)


# A stand-in for the background engine: claims the directory and publishes the state the request asks
# for (no model loads), then serves until SIGTERM.
_FAKE = """
import json, os, signal, sys, threading, time
from pathlib import Path
from agent_swarm.swarm.backends.local.keepalive import ServeRequest
from agent_swarm.swarm.backends.local.resident import ResidentServer, ResidentState
request = ServeRequest.model_validate_json(sys.argv[1])
print("loading", flush=True)
if sys.argv[2] == "fail":
    print("error: the model file is not a GGUF model", flush=True)
    sys.exit(2)
if sys.argv[2] == "hang":
    time.sleep(600)
server = ResidentServer.claim(Path(request.directory))
server.publish(ResidentState.model_validate_json(sys.argv[3]).model_copy(update={"pid": os.getpid()}))
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
server.wait(request.idle_s, poll_s=0.02, stop=stop)
server.withdraw()
server.release()
"""


def _state(model: Path, request: EngineRequest) -> ResidentState:
    return ResidentState(
        model=model.stem,
        file=FileIdentity.of(model),
        sha256=file_sha256(model),
        request=request,
        slots=3,
        ctx_per_slot=2048,
        threads=2,
        context_note="2048 tokens per slot x 3 slots (set)",
        engine_version=engine_version(),
        base_url="http://127.0.0.1:9",
        pid=1,
        idle_s=300.0,
        started=time.time(),
    )


def _fake(request: ServeRequest, how: str, state: ResidentState | None = None) -> list[str]:
    return [sys.executable, "-c", _FAKE, request.model_dump_json(), how, state.model_dump_json() if state else ""]


def test_the_background_engine_is_asked_for_exactly_this_engines_settings(tmp_path: Path, model: Path) -> None:
    engine = _engine(model, tmp_path / "serve")
    request = engine.serve_request(42.0)
    assert request.directory == str(tmp_path / "serve") and request.idle_s == 42.0
    assert request.model == str(model)
    again = LocalEngine.serving(ServeRequest.model_validate_json(request.model_dump_json()))
    assert again.request == engine.request and again.requested == engine.requested
    assert (again.pool, again.use_prefix_cache, again.resident, again.keep_alive) == (0, True, None, 0.0)
    assert request.command()[1:3] == ["-m", "agent_swarm.swarm.backends.local"]


def test_spawn_waits_until_it_serves_and_the_engine_then_attaches(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    engine = _engine(model, d)
    request = engine.serve_request(300.0)
    state, why = spawn_resident(request, command=_fake(request, "serve", _state(model, engine.request)))
    try:
        assert why == "" and state is not None and state.pid != os.getpid() and read_state(d) == state
        # A later run of the same model and settings attaches instead of starting a background engine.
        later = _engine(model, d)
        assert "attached to the resident engine" in later.plan() and later.attached is not None
        later.attached.close()
    finally:
        assert stop_resident(d) is not None
    assert read_state(d) is None


def test_a_background_engine_that_fails_says_why_in_one_line(tmp_path: Path, model: Path) -> None:
    request = _engine(model, tmp_path / "serve").serve_request(300.0)
    state, why = spawn_resident(request, command=_fake(request, "fail"))
    assert state is None
    assert why == (
        f"the background engine exited: the model file is not a GGUF model (log: {tmp_path / 'serve' / LOG_FILE})"
    )


def test_a_background_engine_that_never_serves_is_stopped_at_the_timeout(tmp_path: Path, model: Path) -> None:
    request = _engine(model, tmp_path / "serve").serve_request(300.0)
    started = time.monotonic()
    state, why = spawn_resident(request, timeout_s=1.0, command=_fake(request, "hang"))
    assert state is None and why.startswith("the background engine did not serve within 1 s")
    assert time.monotonic() - started < 10


def test_a_directory_or_process_that_cannot_be_made_is_one_line(tmp_path: Path, model: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    request = _engine(model, tmp_path / "file" / "serve").serve_request(300.0)
    state, why = spawn_resident(request)
    assert state is None and why.startswith("the background engine could not start: [Errno 20] Not a directory")
    request = _engine(model, tmp_path / "serve").serve_request(300.0)
    state, why = spawn_resident(request, command=[str(tmp_path / "no-such-python")])
    assert state is None and why.startswith("the background engine could not start: [Errno 2]")


def test_the_background_process_refuses_a_directory_another_engine_serves(tmp_path: Path, model: Path) -> None:
    """The real entry point: a second background engine claims nothing and exits 2 with the reason."""
    d = tmp_path / "serve"
    server = ResidentServer.claim(d)
    try:
        request = _engine(model, d).serve_request(300.0)
        done = subprocess.run(request.command(), capture_output=True, text=True, timeout=120)
    finally:
        server.release()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: a resident engine is already running" in done.stdout


def test_the_run_header_says_the_model_stays_loaded_and_for_how_long(tmp_path: Path, model: Path) -> None:
    d = tmp_path / "serve"
    note = _engine(model, d, keep_alive=300).plan()
    assert "loaded in a background engine that stays 300 s after the run" in note
    assert "background engine" not in _engine(model, d, keep_alive=0).plan()
    assert "background engine" not in LocalEngine(str(model), ctx_per_slot=2048, keep_alive=300).plan()  # no resident
    # An engine of other settings runs there: never a second one, and the header says why it is not used.
    server = ResidentServer.claim(d)
    server.publish(_state(model, EngineRequest(slots=8, fit_slots=False, ctx=2048, threads=2)))
    try:
        note = _engine(model, d).plan()
    finally:
        server.release()
    assert "was not used: it was started with slots=8" in note and "background engine" not in note
    with pytest.raises(ConfigError, match=r"keep_alive must be 0 \(off\) or a number of seconds, not -1"):
        _engine(model, d, keep_alive=-1)


def test_swarm_run_keeps_its_model_loaded_and_other_commands_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWARM_LOCAL_KEEP_ALIVE")  # the test suite's own guard (conftest)
    assert COMMANDS["run"].keep_alive == COMMANDS["run -w"].keep_alive == RUN_KEEP_ALIVE_S == 300
    assert COMMANDS["eval"].keep_alive == COMMANDS["rollout"].keep_alive == 0

    def keep(**kw: object) -> float:
        orch, _ = build_backends("local", "smollm2-135m", **kw)  # type: ignore[arg-type]
        assert isinstance(orch, LocalBackend)
        return orch.engine.keep_alive

    assert keep() == 0  # the library, eval and rollout
    assert keep(default_keep_alive=300.0) == 300  # swarm run
    assert keep(default_keep_alive=300.0, keep_alive=0) == 0  # [backend] keep_alive over the command
    assert keep(keep_alive=60) == 60
    monkeypatch.setenv("SWARM_LOCAL_KEEP_ALIVE", "30")
    assert keep(default_keep_alive=300.0) == 30  # the variable over the command
    assert keep(default_keep_alive=300.0, keep_alive=5) == 5  # the option over the variable
    monkeypatch.setenv("SWARM_LOCAL_KEEP_ALIVE", "-1")
    with pytest.raises(ConfigError, match=r"SWARM_LOCAL_KEEP_ALIVE='-1' \(backend option keep_alive\) is invalid"):
        keep()
    # Another model's sub-agents start their own engine: one resident engine, the orchestrator's.
    monkeypatch.delenv("SWARM_LOCAL_KEEP_ALIVE")
    orch, sub = build_backends("local", "smollm2-135m", subagent_model="qwen2.5-coder-0.5b", default_keep_alive=300.0)
    assert isinstance(orch, LocalBackend) and isinstance(sub, LocalBackend)
    assert (orch.engine.keep_alive, sub.engine.keep_alive) == (300, 0)
