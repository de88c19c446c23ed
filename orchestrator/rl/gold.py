"""Gold swarm transcripts as exact tokens: the data of the SFT warm start.

A workload's gold scripted policy plays the orchestrator through the real engine — the same system
prompt, action tools, budgets, workload environment and sub-agents as a rollout — and
:class:`ForcedBackend` turns each of its actions into the tokens the policy model should sample:

* the **prompt ids** are rendered the way the policy's own backend renders them (the model's chat
  template with the request's tools, and a later turn continues the earlier turns' exact ids, see
  :class:`~agent_swarm.swarm.backends.continuation.TurnMemory`);
* the **response ids** are the chat template's own rendering of the gold assistant message (for
  Qwen: ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` per call, the format the action
  grammar and the tolerant parser read), up to and including the end-of-turn token; a template
  that drops tool calls (SmolLM2's) gets the hermes text its tools-in-prompt instructions ask for.
  The text must parse back into the gold calls, or the episode fails loudly.

Each gold episode's trajectory (``prompt_ids``, ``response_ids``, ``response_mask``: the
orchestrator's tokens only) is one SFT example. Since the episodes run through the engine of the
day, the data follows the current protocol whenever it is regenerated (``swarm train sft``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_swarm.orchestrator.eval import workload_orchestrator_factory
from agent_swarm.orchestrator.rollout.collection import collect_rollouts
from agent_swarm.orchestrator.rollout.config import RolloutConfig
from agent_swarm.swarm.backend import Completion, ModelBackend, ModelRequest, Usage
from agent_swarm.swarm.backends.openai_http import with_tools_in_prompt
from agent_swarm.swarm.backends.toolparse import parse_tool_calls
from agent_swarm.swarm.backends.transformers_backend import TransformersBackend, chat_dicts
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import AssistantMessage
from agent_swarm.swarm.records import Task
from agent_swarm.swarm.rl.export import read_jsonl
from agent_swarm.swarm.rl.trajectory import Trajectory
from agent_swarm.workloads import Mode, get_workload

__all__ = ["ForcedBackend", "SftExample", "WorkloadTasks", "gold_examples", "read_examples", "write_examples"]


class ForcedBackend(TransformersBackend):
    """A backend whose "samples" are a gold policy's actions, tokenized as the policy model would emit them.

    ``tokenizer`` is the policy model's (with its chat template). No model weights are needed.
    ``renderer`` is the serving backend of the policy (a :class:`~agent_swarm.swarm.backends.local.LocalBackend`
    for the llama.cpp engine): the prompt ids then come from it — its template engine, its
    tools-in-prompt rule for templates without tools, its continuation — so SFT sees exactly what
    rollouts will. Without it the tokenizer's template renders the prompts (the transformers engine's
    own path). Logprobs are reported as 0 (the gold policy is deterministic); ``weight_version`` is
    ``"gold"``.
    """

    def __init__(self, gold: ModelBackend, tokenizer: Any, *, name: str = "gold", renderer: Any = None) -> None:
        super().__init__(None, tokenizer, name=name)
        self.gold = gold
        self.renderer = renderer
        eos = tokenizer.eos_token
        if not isinstance(eos, str) or tokenizer.eos_token_id is None:
            raise ConfigError(f"tokenizer of {name!r} has no end-of-turn token; cannot end a forced turn")
        self._eos_text: str = eos
        self._eos_id: int = int(tokenizer.eos_token_id)

    def _target(self, request: ModelRequest, action: AssistantMessage) -> str:
        """The template's text of ``action`` after the generation prompt, before the end-of-turn token."""
        tools = [t.to_openai() for t in request.tools] or None
        prefix = self.tokenizer.apply_chat_template(
            chat_dicts(request.messages), tools=tools, tokenize=False, add_generation_prompt=True
        )
        full = self.tokenizer.apply_chat_template(chat_dicts([*request.messages, action]), tools=tools, tokenize=False)
        if not full.startswith(prefix):
            raise ConfigError(f"the chat template of {self.model!r} is not prefix-stable; cannot force a turn")
        body = full[len(prefix) :]
        end = body.find(self._eos_text)
        if end < 0:
            raise ConfigError(
                f"the chat template of {self.model!r} does not end an assistant turn with {self._eos_text!r}"
            )
        return str(body[:end])

    @staticmethod
    def _parses(text: str, request: ModelRequest, gold: Completion) -> bool:
        parsed = parse_tool_calls(text, [t.name for t in request.tools])
        return [(c.name, c.arguments) for c in parsed.tool_calls] == [(c.name, c.arguments) for c in gold.tool_calls]

    async def complete(self, request: ModelRequest) -> Completion:
        prompt = await self.renderer.prompt_ids(request) if self.renderer is not None else self.render(request)
        gold = await self.gold.complete(request)
        action = AssistantMessage(content=gold.text, tool_calls=gold.tool_calls)
        text = self._target(request, action)
        if gold.tool_calls and not self._parses(text, request, gold):
            # a template without tool calls (SmolLM2's): the hermes text the tools-in-prompt rule asks for
            hermes = with_tools_in_prompt((action,), ())[0]["content"]
            text = self._target(request, AssistantMessage(content=hermes))
            if not self._parses(text, request, gold):
                raise ConfigError(
                    f"the gold action rendered as {text[:200]!r} does not parse back into its calls; "
                    "the SFT target would teach a format the runtime cannot read"
                )
        ids = (*self._encode(text), self._eos_id)
        completion = Completion(
            text=gold.text,
            tool_calls=gold.tool_calls,
            finish_reason="tool_calls" if gold.tool_calls else "stop",
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids)),
            model=self.model,
            prompt_token_ids=tuple(prompt),
            token_ids=ids,
            logprobs=(0.0,) * len(ids),
            weight_version="gold",
        )
        memory = self.renderer.memory if self.renderer is not None else self.memory
        memory.remember(request.messages, completion, text, self._eos_text)
        return completion


class _Renamed:
    """A backend reporting another model name (the gold sub-agents stand in for the real frozen model,
    whose name the orchestrator's ``create_subagent`` schema lists: the SFT prompt must match RL's)."""

    def __init__(self, inner: ModelBackend, model: str) -> None:
        self.inner = inner
        self._model = model

    @property
    def model(self) -> str:
        return self._model

    async def complete(self, request: ModelRequest) -> Completion:
        c = await self.inner.complete(request)
        return dataclasses.replace(c, model=self._model)


class SftExample(BaseModel):
    """One training sequence: ``ids`` with ``mask[i] = 1`` where the orchestrator wrote ``ids[i]``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    workload: str
    ids: tuple[int, ...]
    mask: tuple[int, ...]
    r_perf: float

    @property
    def pair(self) -> tuple[list[int], list[int]]:
        return list(self.ids), list(self.mask)


class WorkloadTasks(BaseModel):
    """Tasks of one workload: ``n`` tasks of ``split`` (train for training, test held out) with ``knobs``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    workload: str
    n: int = 8
    split: str = "train"
    seed: int = 0
    mode: Mode = "swarm"
    knobs: dict[str, Any] = {}

    def tasks(self) -> list[Task]:
        return get_workload(self.workload).tasks(self.n, seed=self.seed, split=self.split, **self.knobs)


async def gold_examples(
    specs: Sequence[WorkloadTasks],
    tokenizer: Any,
    swarm: SwarmConfig,
    out_dir: Path,
    *,
    min_r_perf: float = 1.0,
    subagent_model: str | None = None,
    renderer: Any = None,
    policy_model: str = "gold",
) -> tuple[list[SftExample], dict[str, Any]]:
    """Run every task's gold policy through the engine (forced into ``tokenizer``'s tokens) and
    return the examples of episodes scoring ``r_perf ≥ min_r_perf``, with a summary.

    ``subagent_model`` is the name of the frozen sub-agent model RL will use: the gold sub-agents
    report it, so the orchestrator's prompt (its ``create_subagent`` schema lists the models) is the
    one it will see in RL. ``renderer``: see :class:`ForcedBackend`. ``policy_model`` is the name the
    policy's backend has in RL: the orchestrator's prompt profile is chosen by it
    (:func:`agent_swarm.orchestrator.prompts.profile_for`), so SFT sees RL's system prompt token for token.

    Episodes, trajectories and failures are kept under ``out_dir/<workload>`` (a rollout directory).
    """
    examples: list[SftExample] = []
    summary: dict[str, Any] = {}
    for spec in specs:
        wl = get_workload(spec.workload)
        tasks = spec.tasks()

        def resolve(task: Task, mode: Mode, wl: Any = wl) -> tuple[ModelBackend, ModelBackend]:
            gold = wl.gold_policy(task, mode)
            sub = gold.subagent if subagent_model is None else _Renamed(gold.subagent, subagent_model)
            return ForcedBackend(gold.orchestrator, tokenizer, name=policy_model, renderer=renderer), sub

        out = out_dir / spec.workload
        factory = workload_orchestrator_factory(resolve, mode=spec.mode)
        roll = await collect_rollouts(
            tasks,
            factory,
            out_dir=out,
            config=RolloutConfig(group_size=1, max_concurrent_episodes=4),
            swarm_config=swarm,
        )
        kept = _kept_examples(out / "trajectories.jsonl", spec.workload, min_r_perf)
        examples += kept
        summary[spec.workload] = {
            "tasks": len(tasks),
            "episodes": roll.episodes,
            "trajectories": roll.trajectories,
            "kept": len(kept),
            "mean_r_perf": roll.mean_r_perf,
        }
    return examples, summary


def _kept_examples(trajectories: Path, workload: str, min_r_perf: float) -> list[SftExample]:
    """The SFT examples of a workload's gold trajectories that score ``r_perf ≥ min_r_perf``."""
    return [
        SftExample(
            task_id=t.task_id,
            workload=workload,
            ids=t.prompt_ids + t.response_ids,
            mask=(0,) * len(t.prompt_ids) + t.response_mask,
            r_perf=t.reward.r_perf,
        )
        for t in read_jsonl(trajectories, Trajectory)
        if not t.reward.r_perf < min_r_perf
    ]


def write_examples(examples: Sequence[SftExample], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(e.model_dump_json() + "\n" for e in examples), encoding="utf-8")
    tmp.replace(path)
    return path


def read_examples(path: Path) -> list[SftExample]:
    if not path.is_file():
        raise ConfigError(f"no SFT data at {path}; run `swarm train sft --config FILE` first")
    return [
        SftExample.model_validate(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line
    ]
