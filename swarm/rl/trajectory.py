"""The orchestrator-only trajectory: what an RL trainer consumes for one episode (the trained
policy's tokens have mask 1; tool and sub-agent output is observation, mask 0).

Built from an :class:`~agent_swarm.swarm.records.EpisodeRecord`'s ``turns`` — the exact prompt and response
token ids and logprobs of each orchestrator generation, as the engine sampled them. Text is never
re-tokenized (re-rendering changes ids and corrupts importance ratios), so a turn without ids, or a
turn whose prompt does not extend the previous prompt + response (drift), is refused with
:class:`TrajectoryError`.

The flattened view is what verl's ``AgentLoopOutput`` and TRL's ``rollout_func`` take:

* ``prompt_ids`` — the first turn's prompt;
* ``response_ids`` — turn 0's response, then for each later turn the *observation* tokens the engine
  inserted (``prompt[t][len(prompt[t-1]) + len(response[t-1]):]``: tool results, sub-agent reports,
  chat-template glue) followed by that turn's response;
* ``response_mask`` — 1 for tokens the orchestrator sampled, 0 for observation tokens;
* ``response_logprobs`` — sampling-time logprobs for mask-1 tokens, 0.0 for mask-0 tokens.

Every :class:`Trajectory` is validated on construction (also when loaded from JSONL):
lengths agree, the mask has exactly the turns' response tokens, and each turn's prompt is the
flattened prefix before it (:func:`validate_trajectory`). Sub-agent transcripts ride along in
``side`` as non-trainable data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.errors import UserError
from agent_swarm.swarm.records import EpisodeRecord, OrchestratorTurn, RewardRecord, SubagentResult

__all__ = [
    "SCHEMA_VERSION",
    "SubagentSide",
    "Trajectory",
    "TrajectoryError",
    "TrajectoryTurn",
    "build_trajectory",
    "flatten_turns",
    "validate_trajectory",
]

SCHEMA_VERSION = 1


class TrajectoryError(UserError):
    """An episode cannot become a trainable trajectory (missing ids, drift) or a trajectory is invalid."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrajectoryTurn(_Frozen):
    """One orchestrator generation with its exact tokens."""

    index: int
    stage: int
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_logprobs: tuple[float, ...]
    finish_reason: str = "stop"
    weight_version: str | None = None
    tool_calls: tuple[str, ...] = ()
    tools_enabled: bool = True


class SubagentSide(_Frozen):
    """A sub-agent's result as non-trainable side data (its transcript rides along, never trained on)."""

    result: SubagentResult
    stage: int


class Trajectory(_Frozen):
    """One episode, orchestrator tokens only, ready for a trainer (what verl, TRL and JSONL/Parquet consumers load).

    ``advantage`` is filled by rollout collection once the whole group is in (``r − group mean``).
    """

    schema_version: int = SCHEMA_VERSION
    episode_id: str
    group_id: str
    task_id: str
    prompt: str
    sample_index: int = 0
    policy_version: str | None = None
    model: str = ""
    sampling: SamplingParams = SamplingParams()
    turns: tuple[TrajectoryTurn, ...]
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    response_mask: tuple[int, ...]
    response_logprobs: tuple[float, ...]
    reward: RewardRecord
    advantage: float | None = None
    status: str
    answer: str | None = None
    truncated: bool = False
    critical_steps: int = 0
    total_steps: int = 0
    stage_widths: tuple[int, ...] = ()
    subagent_statuses: tuple[str, ...] = ()
    wall_time_s: float = 0.0
    trace_id: str | None = None
    side: tuple[SubagentSide, ...] = ()
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @model_validator(mode="after")
    def _valid(self) -> Trajectory:
        problems = validate_trajectory(self)
        if problems:
            raise ValueError("invalid trajectory: " + "; ".join(problems))
        return self


def validate_trajectory(t: Trajectory) -> list[str]:
    """Problems with a trajectory's token layout (empty list when it is valid).

    Checks: ``response_ids``, ``response_mask`` and ``response_logprobs`` have equal lengths; the mask
    holds only 0/1 and its 1s are exactly the turns' response tokens, in order; ``prompt_ids`` is the
    first turn's prompt; each later turn's prompt equals ``prompt_ids`` + the flattened tokens before
    that turn's response (token continuity); logprobs of mask-0 tokens are 0.0.
    """
    problems = _layout_problems(t)
    return problems if problems else _continuity_problems(t)


def _layout_problems(t: Trajectory) -> list[str]:
    """Lengths, mask values and per-turn shapes; the continuity walk needs these to hold."""
    problems: list[str] = []
    n = len(t.response_ids)
    if len(t.response_mask) != n or len(t.response_logprobs) != n:
        problems.append(
            f"lengths differ: response_ids {n}, response_mask {len(t.response_mask)}, "
            f"response_logprobs {len(t.response_logprobs)}"
        )
        return problems
    if any(m not in (0, 1) for m in t.response_mask):
        problems.append("response_mask holds values other than 0 and 1")
        return problems
    if not t.turns:
        problems.append("a trajectory needs at least one orchestrator turn")
        return problems
    if t.prompt_ids != t.turns[0].prompt_ids:
        problems.append("prompt_ids is not the first turn's prompt")
    for turn in t.turns:
        if len(turn.response_logprobs) != len(turn.response_ids):
            problems.append(
                f"turn {turn.index}: {len(turn.response_ids)} response ids but {len(turn.response_logprobs)} logprobs"
            )
    return problems


def _continuity_problems(t: Trajectory) -> list[str]:
    """Each turn's prompt continues the flattened tokens before it; observations masked 0, responses 1."""
    problems: list[str] = []
    pos = 0
    for k, turn in enumerate(t.turns):
        if k > 0:
            ctx = t.prompt_ids + t.response_ids[:pos]
            n_obs = len(turn.prompt_ids) - len(ctx)
            if n_obs < 0 or turn.prompt_ids[: len(ctx)] != ctx:
                problems.append(f"turn {turn.index}: its prompt does not continue the previous turns' tokens")
                return problems
            obs = slice(pos, pos + n_obs)
            if t.response_ids[obs] != turn.prompt_ids[len(ctx) :] or any(t.response_mask[obs]):
                problems.append(
                    f"turn {turn.index}: observation tokens before it differ from its prompt or are not masked 0"
                )
                return problems
            if any(lp != 0.0 for lp in t.response_logprobs[obs]):
                problems.append(f"turn {turn.index}: observation tokens carry non-zero logprobs")
            pos += n_obs
        r = slice(pos, pos + len(turn.response_ids))
        if t.response_ids[r] != turn.response_ids or t.response_mask[r] != (1,) * len(turn.response_ids):
            problems.append(f"turn {turn.index}: its response tokens are not in the flattened view with mask 1")
            return problems
        if t.response_logprobs[r] != turn.response_logprobs:
            problems.append(f"turn {turn.index}: flattened logprobs differ from the turn's")
        pos += len(turn.response_ids)
    if pos != len(t.response_ids):
        problems.append(f"{len(t.response_ids) - pos} trailing tokens after the last turn's response")
    return problems


def flatten_turns(
    turns: tuple[TrajectoryTurn, ...],
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
    """(prompt_ids, response_ids, response_mask, response_logprobs) of consecutive turns.

    Raises :class:`TrajectoryError` when a turn's prompt does not extend the previous prompt + response.
    """
    if not turns:
        raise TrajectoryError("no orchestrator turns to flatten")
    prompt = turns[0].prompt_ids
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    prev = turns[0]
    for k, turn in enumerate(turns):
        if k > 0:
            ctx_len = len(prev.prompt_ids) + len(prev.response_ids)
            if turn.prompt_ids[:ctx_len] != prev.prompt_ids + prev.response_ids:
                raise TrajectoryError(
                    f"turn {turn.index} drifted: its prompt token ids do not extend turn {prev.index}'s "
                    "prompt + response (the chat template re-rendered earlier text); refusing to "
                    "re-tokenize. Use a backend/template that keeps prior tokens stable."
                )
            obs = turn.prompt_ids[ctx_len:]
            ids.extend(obs)
            mask.extend([0] * len(obs))
            lps.extend([0.0] * len(obs))
        ids.extend(turn.response_ids)
        mask.extend([1] * len(turn.response_ids))
        lps.extend(turn.response_logprobs)
        prev = turn
    return prompt, tuple(ids), tuple(mask), tuple(lps)


def _trainable_turn(eid: str, turn: OrchestratorTurn) -> TrajectoryTurn:
    """The trajectory turn of one recorded orchestrator turn; raises :class:`TrajectoryError` when
    the turn cannot be trained on (no token ids or logprobs, mismatched lengths, a context cut, drift)."""
    if turn.prompt_token_ids is None or turn.response_token_ids is None:
        raise TrajectoryError(
            f"episode {eid} turn {turn.index} has no token ids: the orchestrator backend did not "
            "return prompt/response token ids; use a backend that does (vLLM, llama.cpp with "
            "return_tokens) rather than re-tokenizing text"
        )
    if turn.response_logprobs is None:
        raise TrajectoryError(
            f"episode {eid} turn {turn.index} has no logprobs: request them "
            "(SamplingParams(logprobs=True)) from a backend that returns them"
        )
    if len(turn.response_logprobs) != len(turn.response_token_ids):
        raise TrajectoryError(
            f"episode {eid} turn {turn.index}: {len(turn.response_token_ids)} response ids but "
            f"{len(turn.response_logprobs)} logprobs"
        )
    if turn.context_cut:
        raise TrajectoryError(
            f"episode {eid} turn {turn.index}: earlier tool results were shortened to fit the context "
            f"before it (record.context_cuts), so its prompt is not the previous turn's tokens plus new "
            "ones; refusing to train across it (raise [swarm] context_tokens or the engine's context)"
        )
    if turn.drift:
        raise TrajectoryError(
            f"episode {eid} turn {turn.index} drifted (the engine flagged its prompt "
            "as not extending the previous turn's tokens); refusing to re-tokenize"
        )
    return TrajectoryTurn(
        index=turn.index,
        stage=turn.stage,
        prompt_ids=turn.prompt_token_ids,
        response_ids=turn.response_token_ids,
        response_logprobs=turn.response_logprobs,
        finish_reason=turn.finish_reason,
        weight_version=turn.weight_version,
        tool_calls=tuple(c.name for c in turn.tool_calls),
        tools_enabled=turn.tools_enabled,
    )


def _trainable_turns(record: EpisodeRecord) -> tuple[TrajectoryTurn, ...]:
    """The turns of an episode; raises :class:`TrajectoryError` when it has no orchestrator turns
    or a turn :func:`_trainable_turn` refuses."""
    eid = record.episode_id
    if not record.turns:
        raise TrajectoryError(
            f"episode {eid} has no orchestrator turns (status {record.status.value}): "
            f"nothing to train on; {record.error or ''}".rstrip("; ")
        )
    return tuple(_trainable_turn(eid, turn) for turn in record.turns)


def _subagent_sides(record: EpisodeRecord, *, include_transcripts: bool) -> tuple[SubagentSide, ...]:
    """Every sub-agent result of the episode as non-trainable side data, transcripts optional."""
    return tuple(
        SubagentSide(stage=s.index, result=r if include_transcripts else dataclasses.replace(r, transcript=()))
        for s in record.stages
        for r in s.subagents
    )


def build_trajectory(
    record: EpisodeRecord,
    *,
    group_id: str | None = None,
    sample_index: int = 0,
    sampling: SamplingParams | None = None,
    advantage: float | None = None,
    include_transcripts: bool = True,
    metadata: dict[str, Any] | None = None,
) -> Trajectory:
    """The trajectory of one scored episode.

    Raises :class:`TrajectoryError` when the episode has no reward, no orchestrator turns, a turn
    without token ids or logprobs (the backend did not return them), logprobs of the wrong length,
    or a turn that drifted. ``sampling`` defaults to the orchestrator sampling in the record's config.
    """
    eid = record.episode_id
    if record.reward is None:
        raise TrajectoryError(f"episode {eid} has no reward; run it with a reward_fn (e.g. PARLReward)")
    turns = _trainable_turns(record)
    prompt_ids, response_ids, mask, lps = flatten_turns(turns)
    if sampling is None:
        raw = record.config.get("orchestrator_sampling")
        sampling = SamplingParams.model_validate(raw) if raw else SamplingParams()
    versions = [t.weight_version for t in turns if t.weight_version is not None]
    truncated = record.status.value == "budget_exhausted" or turns[-1].finish_reason == "length"
    return Trajectory(
        episode_id=eid,
        group_id=group_id or record.task.id or eid,
        task_id=record.task.id,
        prompt=record.task.prompt,
        sample_index=sample_index,
        policy_version=versions[-1] if versions else None,
        model=record.model,
        sampling=sampling,
        turns=turns,
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_mask=mask,
        response_logprobs=lps,
        reward=record.reward,
        advantage=advantage,
        status=record.status.value,
        answer=record.answer,
        truncated=truncated,
        critical_steps=record.dag.critical_steps,
        total_steps=record.dag.total_steps,
        stage_widths=record.dag.stage_widths,
        subagent_statuses=tuple(r.status.value for r in record.subagent_results),
        wall_time_s=record.wall_time_s,
        trace_id=record.trace_id,
        side=_subagent_sides(record, include_transcripts=include_transcripts),
        metadata=dict(metadata or {}),
    )
