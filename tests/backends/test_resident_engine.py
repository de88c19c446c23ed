"""The resident engine on the real engine: ``swarm serve`` in a background process, and runs that attach
to it sample exactly the ids and logprobs an engine of their own samples (the prompt prefix, the action
grammar and a second run on the same warm engine included); ``swarm serve --stop`` ends it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_swarm.orchestrator.backend_factory import build_backends
from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams, ToolSpec
from agent_swarm.swarm.backends.local import LocalBackend, engine_available, model_available
from agent_swarm.swarm.backends.local.resident import read_state, resident_dir
from agent_swarm.swarm.messages import SystemMessage, UserMessage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODEL = "smollm2-135m"  # shipped whole in its wheel: nothing to assemble into the test's own cache
SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: answer briefly and cite fact {i}." for i in range(15))
SAMPLING = SamplingParams(temperature=0.8, max_tokens=8, seed=7)  # sampled: logprobs are not all 0
LOOKUP = ToolSpec(
    name="lookup",
    description="look a fact up",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
ENV = {"SWARM_LOCAL_SLOTS": "2", "SWARM_LOCAL_CTX": "1024", "SWARM_LOCAL_THREADS": "2"}


def _requests() -> list[ModelRequest]:
    def ask(q: str, **kw: object) -> ModelRequest:
        return ModelRequest(messages=(SystemMessage(content=SYSTEM), UserMessage(content=q)), **kw)  # type: ignore[arg-type]

    greedy = SamplingParams(temperature=0.0, max_tokens=24)
    return [
        ask("What is 2+2?", sampling=SAMPLING),
        ask("Look up the capital of Peru.", tools=(LOOKUP,), sampling=greedy),
    ]


async def _answers(*, resident: bool = True) -> tuple[list[Completion], str]:
    orch, _ = build_backends("local", MODEL, resident=resident)
    assert isinstance(orch, LocalBackend)
    note = orch.engine.plan()
    async with orch:
        return [await orch.complete(r) for r in _requests()], note


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    if not engine_available() or not model_available(MODEL):
        pytest.skip(f"needs xllamacpp and {MODEL}")
    monkeypatch.setenv("SWARM_CACHE_DIR", str(tmp_path))  # its own resident engine, prefixes and hashes
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    yield tmp_path
    subprocess.run([sys.executable, "-m", "agent_swarm.orchestrator", "serve", "--stop"], check=False, timeout=60)


def _swarm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_swarm.orchestrator", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ.copy(),
    )


async def test_an_attached_run_samples_what_an_own_engine_samples(cache: Path) -> None:
    own, note = await _answers(resident=False)
    assert "attached" not in note
    started = _swarm("serve", "--idle", "120", "-m", MODEL)
    assert started.returncode == 0 and "resident engine ready" in started.stdout, started.stdout + started.stderr
    state = read_state(resident_dir())
    assert state is not None and (state.slots, state.ctx_per_slot, state.threads) == (2, 1024, 2)
    for _ in range(2):  # the second run finds the engine's slots holding the first run's tokens
        attached, note = await _answers()
        assert "attached to the resident engine" in note, note
        for a, b in zip(attached, own, strict=True):
            assert a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.text == b.text
            assert a.timings is not None and a.timings.model_load_s < 1.0  # no model was loaded
        assert attached[1].tool_calls == own[1].tool_calls
    assert "idle" in _swarm("serve", "--status").stdout
    stopped = _swarm("serve", "--stop")
    assert stopped.returncode == 0 and f"pid {state.pid}" in stopped.stdout
    assert read_state(resident_dir()) is None


def test_swarm_run_leaves_its_model_loaded_for_the_next_run(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``keep_alive``: the first ``swarm run`` loads the model in a background engine and attaches to it;
    the next run attaches to the same engine (no model load); the engine exits after its idle time."""
    monkeypatch.setenv("SWARM_LOCAL_KEEP_ALIVE", "20")
    task = ["run", "What is 2+2?", "-m", MODEL, "--max-critical-steps", "2", "-o", str(cache / "records")]
    first = _swarm(*task, "--no-trace-file")
    assert first.returncode in (0, 1), first.stderr  # answered or not: the small model's business
    assert "loaded in a background engine that stays 20 s after the run" in first.stderr, first.stderr
    state = read_state(resident_dir())
    assert state is not None and state.idle_s == 20 and (state.slots, state.ctx_per_slot) == (2, 1024)
    second = _swarm(*task, "--no-trace-file")
    assert f"attached to the resident engine of `swarm serve` (pid {state.pid})" in second.stderr, second.stderr
    assert read_state(resident_dir()) == state
    deadline = time.monotonic() + 60
    while read_state(resident_dir()) is not None:  # 20 s with no run attached, then it exits
        assert time.monotonic() < deadline, "the background engine outlived its keep-alive"
        time.sleep(0.5)
    monkeypatch.setenv("SWARM_LOCAL_KEEP_ALIVE", "0")
    third = _swarm(*task, "--no-trace-file")
    assert "background engine" not in third.stderr and read_state(resident_dir()) is None


def test_a_background_engine_that_cannot_start_leaves_the_run_its_own(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header promised a background engine; when it cannot start, the run says why in one line and
    loads the model itself, and answers as without keep-alive."""
    monkeypatch.setenv("SWARM_LOCAL_KEEP_ALIVE", "20")
    (cache / "serve").write_text("not a directory")  # where the background engine would publish itself
    done = _swarm("run", "What is 2+2?", "-m", MODEL, "--max-critical-steps", "2", "-o", str(cache / "records"))
    assert done.returncode in (0, 1), done.stderr
    assert "the background engine could not start: [Errno 17] File exists" in done.stderr, done.stderr
    assert "this run loads the model itself" in done.stderr
    assert list((cache / "records").glob("*/episode.json"))  # the episode ran and was recorded
