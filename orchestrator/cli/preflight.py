"""Checks a command makes once before its first episode: can it write where its results go, and is
each model server reachable at all?

An output folder that cannot be written would otherwise fail only when the first record is written,
after the model's work. A server that refuses connections would otherwise fail every episode after the backend's retries
(several seconds per task, per retry); one ``GET /v1/models`` per distinct server answers in
milliseconds. Only "could not connect" fails the check: any HTTP answer (401, 404) means a server is
there, and the episodes report what it says.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import httpx

from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.backends.openai_http import OpenAIBackend
from agent_swarm.swarm.errors import UserError

__all__ = ["PROBE_TIMEOUT_S", "unreachable_servers", "writable_dir"]

PROBE_TIMEOUT_S = 5.0


async def _probe(client: httpx.AsyncClient, root: str) -> str | None:
    url = f"{root}/v1/models"
    try:
        await client.get(url)
    except httpx.TimeoutException:
        return f"{url} did not answer within {PROBE_TIMEOUT_S:g} s"
    except httpx.TransportError as exc:
        return f"{url} could not be reached ({type(exc).__name__}: {exc or 'no detail'})"
    return None


async def unreachable_servers(backends: Iterable[ModelBackend | None]) -> list[str]:
    """One line per OpenAI-compatible server among ``backends`` that cannot be reached (empty: all fine)."""
    roots = sorted({b.base_url for b in backends if isinstance(b, OpenAIBackend)})
    problems: list[str] = []
    if not roots:
        return problems
    async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
        for root in roots:
            problem = await _probe(client, root)
            if problem is not None:
                problems.append(problem)
    return problems


def writable_dir(path: Path, option: str) -> Path:
    """Create ``path`` (and its parents) and check a file can be written in it; :class:`UserError`
    naming ``option`` and the reason otherwise. Returns ``path``."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".swarm-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"cannot write results to {path} ({reason}); choose a writable folder with {option}") from None
    return path
