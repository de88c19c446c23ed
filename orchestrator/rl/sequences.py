"""Training sequences: a rollout's episodes (and SFT conversations) as token ids with the orchestrator's
sampled tokens masked in — the batch :func:`agent_swarm.orchestrator.rl.update.update_policy` trains on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent_swarm.swarm.backend import ToolSpec
from agent_swarm.swarm.backends.transformers_backend import chat_dicts
from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import Message
from agent_swarm.swarm.records import EpisodeRecord
from agent_swarm.swarm.rl.trajectory import TrajectoryError, build_trajectory

__all__ = ["TrainingSequence", "sft_example", "training_sequences"]


@dataclass(frozen=True, slots=True)
class TrainingSequence:
    """One training sequence: ``ids`` = prompt + response, ``mask[i] = 1`` where the orchestrator
    sampled ``ids[i]``, ``behaviour_logprobs[i]`` its sampling-time logprob (0 elsewhere)."""

    ids: tuple[int, ...]
    mask: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    advantage: float
    temperature: float


def sft_example(
    tokenizer: Any, messages: Sequence[Message], tools: Sequence[ToolSpec] = ()
) -> tuple[list[int], list[int]]:
    """(ids, mask) of a conversation with mask 1 on the assistant's tokens (for SFT and PTX).

    Each assistant message's tokens are the ones the template adds after the generation prompt, so
    the mask matches exactly what the model would sample at that turn.
    """
    specs = [t.to_openai() for t in tools] or None
    dicts = chat_dicts(list(messages))
    ids: list[int] = []
    mask: list[int] = []
    for i, m in enumerate(dicts):
        if m["role"] != "assistant":
            continue
        prefix = tokenizer.apply_chat_template(dicts[:i], tools=specs, tokenize=False, add_generation_prompt=True)
        full = tokenizer.apply_chat_template(dicts[: i + 1], tools=specs, tokenize=False)
        if not full.startswith(prefix):
            raise ConfigError("chat template is not prefix-stable; cannot build an SFT mask")
        p_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
        f_ids = tokenizer(full, add_special_tokens=False)["input_ids"]
        if f_ids[: len(p_ids)] != p_ids or p_ids[: len(ids)] != ids:
            raise ConfigError("tokenization is not prefix-stable; cannot build an SFT mask")
        obs = p_ids[len(ids) :]
        ids += obs
        mask += [0] * len(obs)
        # the sampled part ends at the end-of-turn token; the template's trailing newline is context
        resp = f_ids[len(p_ids) :]
        eos = tokenizer.eos_token_id
        cut = resp.index(eos) + 1 if eos in resp else len(resp)
        ids += resp[:cut]
        mask += [1] * cut
    if not any(mask):
        raise ConfigError("SFT conversation has no assistant message to learn from")
    return ids, mask


def training_sequences(
    records: Sequence[EpisodeRecord], advantages: Sequence[float], temperature: float
) -> tuple[list[TrainingSequence], int, int]:
    """Training sequences of the episodes: (sequences, dropped episodes, episodes split per turn).

    An episode becomes one sequence (its flattened trajectory: observations masked out). When its
    turns do not chain (drift: the template re-rendered earlier text differently), each turn
    becomes its own sequence — still the exact sampled ids, never re-tokenized text. Episodes
    without token ids or logprobs are dropped and counted.
    """
    temp = temperature if temperature > 0 else 1.0  # greedy turns report T=1 logprobs
    seqs: list[TrainingSequence] = []
    dropped = split = 0
    for rec, adv in zip(records, advantages, strict=True):
        try:
            traj = build_trajectory(rec, advantage=adv, include_transcripts=False)
        except TrajectoryError:
            turns = [
                t
                for t in rec.turns
                if t.prompt_token_ids is not None
                and t.response_token_ids
                and t.response_logprobs is not None
                and len(t.response_logprobs) == len(t.response_token_ids)
            ]
            if not turns or len(turns) != len(rec.turns):
                dropped += 1
                continue
            split += 1
            for t in turns:
                assert t.prompt_token_ids is not None and t.response_token_ids is not None
                assert t.response_logprobs is not None
                n_p, n_r = len(t.prompt_token_ids), len(t.response_token_ids)
                seqs.append(
                    TrainingSequence(
                        ids=t.prompt_token_ids + t.response_token_ids,
                        mask=(0,) * n_p + (1,) * n_r,
                        behaviour_logprobs=(0.0,) * n_p + t.response_logprobs,
                        advantage=adv,
                        temperature=temp,
                    )
                )
            continue
        ids = traj.prompt_ids + traj.response_ids
        mask = (0,) * len(traj.prompt_ids) + traj.response_mask
        lps = (0.0,) * len(traj.prompt_ids) + traj.response_logprobs
        seqs.append(TrainingSequence(ids=ids, mask=mask, behaviour_logprobs=lps, advantage=adv, temperature=temp))
    return seqs, dropped, split
