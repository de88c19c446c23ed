"""A long CLI run (``swarm eval``, ``swarm rollout``) stopped by SIGTERM as by Ctrl-C, from inside its
event loop."""

from __future__ import annotations

import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

__all__ = ["run_until_stopped"]

T = TypeVar("T")


class _Stopped(Exception):
    """SIGTERM ended the run: raised inside the event loop, a KeyboardInterrupt outside it."""


def run_until_stopped(main: Callable[[], Awaitable[T]]) -> T:
    """``anyio.run(main)``, SIGTERM (``timeout``, a scheduler's stop) ending it as Ctrl-C does: the run is
    cancelled, then :class:`KeyboardInterrupt` is raised here.

    The signal cancels the run from inside the event loop (anyio's signal receiver), so every task's
    cleanup runs there, a shielded section (a record being written) finishes, and the loop ends as
    usual, telling anyio's worker threads to stop. A KeyboardInterrupt raised by a signal handler instead
    lands wherever the loop is: a 1.5B ``swarm eval`` so stopped by ``timeout 900`` once waited at exit,
    for 19 minutes until killed, for three idle worker threads that were never told to stop. Outside the
    main thread signals cannot be received: plain ``anyio.run``. The SIGTERM handler in place before is
    in place again after."""
    if threading.current_thread() is not threading.main_thread():
        return anyio.run(main)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        return anyio.run(_until_stopped, main)
    except _Stopped:
        raise KeyboardInterrupt from None
    finally:
        signal.signal(signal.SIGTERM, previous)


async def _until_stopped(main: Callable[[], Awaitable[T]]) -> T:
    result: list[T] = []
    error: Exception | None = None
    stopped = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal stopped
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                stopped = True
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        try:
            result.append(await main())
        except Exception as exc:  # raised again below as it is (a task group wraps its body's errors in a group)
            error = exc
        finally:
            tg.cancel_scope.cancel()
    if error is not None:
        raise error
    if stopped and not result:
        raise _Stopped
    return result[0]
