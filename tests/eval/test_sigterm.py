"""SIGTERM stops a long CLI run (``swarm eval``, ``swarm rollout``) from inside its event loop."""

from __future__ import annotations

import os
import signal
import threading
import time

import anyio
import pytest

from agent_swarm.orchestrator.cli.interrupt import run_until_stopped


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "AnyIO worker thread" and t.is_alive()]


def test_sigterm_cancels_the_run_lets_a_shielded_section_finish_and_stops_the_worker_threads() -> None:
    done: list[str] = []

    async def main() -> str:
        await anyio.to_thread.run_sync(time.sleep, 0.01)  # a worker thread now exists
        with anyio.CancelScope(shield=True):  # a record being written
            os.kill(os.getpid(), signal.SIGTERM)
            await anyio.sleep(0.2)
            done.append("shielded section")
        try:
            await anyio.sleep(30)
        finally:
            done.append("cleanup")
        return "finished"

    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt):
        run_until_stopped(main)
    assert done == ["shielded section", "cleanup"]  # a KeyboardInterrupt from a handler aborted the first
    deadline = time.monotonic() + 5
    while _workers() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _workers()  # told to stop: nothing left for the interpreter to wait for at exit
    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_run_that_ends_or_fails_is_unchanged() -> None:
    async def value() -> int:
        return 7

    async def failing() -> int:
        raise ValueError("bad input")

    assert run_until_stopped(value) == 7
    with pytest.raises(ValueError, match="bad input"):  # as it is, not in an exception group
        run_until_stopped(failing)
