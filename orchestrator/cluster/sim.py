"""A simulated swarm workload: check a cluster, or benchmark the runtime, without a model.

A task asks for the sum of ``width`` products (``"Add up these products: 517*3, 82*1, ..."``). The
simulated orchestrator creates a ``multiplier`` sub-agent type with the typed tool ``add(a: int,
b: int)``, assigns one product to each sub-agent in one stage, and answers the sum of their reports
(the numeric verifier checks it, so every report must come back right). The sub-agent for ``a*k``
calls ``add`` ``k - 1`` times, carrying its running total, then reports: ``k`` steps (``k = 1 + i %
max_steps`` for the i-th product).

Like a real model, every call sleeps ``latency`` seconds and returns a freshly built completion: new
call ids, arguments read from the conversation, token ids and logprobs from the prefix-stable byte
template of :mod:`agent_swarm.swarm.function_backend` (so trajectories are real and trainable). The tool sleeps
``tool_latency``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import anyio

from agent_swarm.orchestrator.cluster.recipe import FactoryRecipe, Recipe, remote_factory
from agent_swarm.orchestrator.placement import SubagentKit
from agent_swarm.orchestrator.rollout.episodes import EpisodeFactory, orchestrator_factory
from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.function_backend import call, complete_with_tokens
from agent_swarm.swarm.messages import ToolMessage, UserMessage
from agent_swarm.swarm.records import Task
from agent_swarm.tools.registry import Tool

__all__ = ["SimBackend", "sim_factory", "sim_subagents", "sim_tasks", "subagent_policy"]

_PRODUCT = re.compile(r"(\d+)\*(\d+)")
_REPORT = re.compile(r"(\d+)\*(\d+) = (-?\d+)")


def sim_tasks(n: int, *, width: int = 16, max_steps: int = 3, seed: int = 0, prefix: str = "sim") -> list[Task]:
    """``n`` distinct tasks of ``width`` products each; product i takes ``1 + i % max_steps`` steps."""
    rng = random.Random(seed)
    tasks = []
    for t in range(n):
        products = [(rng.randint(2, 999), 1 + i % max_steps) for i in range(width)]
        tasks.append(
            Task(
                id=f"{prefix}-{t}",
                prompt="Add up these products: " + ", ".join(f"{a}*{k}" for a, k in products),
                verifier="numeric",
                verifier_args={"expected": sum(a * k for a, k in products)},
            )
        )
    return tasks


class SimBackend:
    """A model backend that answers ``fn(request)`` after ``latency`` seconds, with token ids; it keeps
    no record of the requests (runs of any length)."""

    def __init__(self, fn: Callable[[ModelRequest], Completion], *, model: str, latency: float) -> None:
        self._fn, self._model, self.latency = fn, model, latency

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest) -> Completion:
        if self.latency:
            await anyio.sleep(self.latency)
        return complete_with_tokens(request, self._fn(request), self._model)


def orchestrator_policy(request: ModelRequest) -> Completion:
    """Fan the products out in one stage, then answer the sum of the reports."""
    results = [m for m in request.messages if isinstance(m, ToolMessage) and m.name == "assign_task"]
    if not results:
        task = next(m.content for m in request.messages if isinstance(m, UserMessage))
        products = _PRODUCT.findall(task)
        calls = [call("create_subagent", name="multiplier", system_prompt="Multiply by adding.", tools=["add"])]
        calls += [
            call("assign_task", agent="multiplier", task=f"Compute {a}*{k} by adding {a} repeatedly.")
            for a, k in products
        ]
        return Completion(text=f"Splitting the {len(products)} products over sub-agents.", tool_calls=tuple(calls))
    total = sum(int(m.group(3)) for r in results if (m := _REPORT.search(r.content)))
    return Completion(text=f"The sum is {total}")


def subagent_policy(request: ModelRequest) -> Completion:
    """Compute ``a*k``: ``k - 1`` calls of ``add`` carrying the running total, then the report."""
    msgs = request.messages
    m = _PRODUCT.search(msgs[1].content)
    a, k = (int(m.group(1)), int(m.group(2))) if m else (0, 1)
    done = [x for x in msgs if isinstance(x, ToolMessage)]
    total = int(done[-1].content) if done and done[-1].content.lstrip("-").isdigit() else a
    if len(done) < k - 1:
        return Completion(tool_calls=(call("add", a=total, b=a),))
    return Completion(text=f"{a}*{k} = {total}")


def add_tool(tool_latency: float) -> Tool:
    async def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: the first addend
            b: the second addend
        """
        if tool_latency:
            await anyio.sleep(tool_latency)
        return a + b

    return Tool(add)


def build_sim_factory(latency: float, tool_latency: float) -> EpisodeFactory:
    return orchestrator_factory(
        SimBackend(orchestrator_policy, model="sim-orchestrator", latency=latency),
        subagent_backend=SimBackend(subagent_policy, model="sim-subagent", latency=latency),
        tools=[add_tool(tool_latency)],
    )


def sim_factory(latency: float = 0.02, tool_latency: float = 0.002) -> FactoryRecipe:
    """The simulated workload's orchestrator factory, built in each process that runs it."""
    return remote_factory(build_sim_factory, latency, tool_latency)


def build_sim_subagents(latency: float, tool_latency: float) -> tuple[dict[str, SimBackend], list[Tool]]:
    return {"sim-subagent": SimBackend(subagent_policy, model="sim-subagent", latency=latency)}, [
        add_tool(tool_latency)
    ]


def sim_subagents(latency: float = 0.02, tool_latency: float = 0.002) -> Recipe[SubagentKit]:
    """The simulated sub-agents' backends and tools, for a placement that runs them elsewhere."""
    return Recipe[SubagentKit](build_sim_subagents, latency, tool_latency)
