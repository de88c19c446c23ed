"""A :class:`~agent_swarm.swarm.backend.ModelBackend` on a local transformers model (CPU or GPU), for RL.

The same object serves rollouts and is trained in place (the *colocated* engine): the trainer holds
:meth:`TransformersBackend.paused` while it updates the weights, then bumps
:attr:`TransformersBackend.weight_version`, which every later completion carries.

What a completion carries, exactly as sampled:

* ``prompt_token_ids`` — the model's own chat template rendered with the request's messages and
  tools, tokenized once (the tools are rendered even with ``tool_choice="none"`` so the prompt
  prefix stays identical from turn to turn); a turn that continues an earlier generation reuses
  that generation's exact prompt + sampled ids (:class:`~agent_swarm.swarm.backends.continuation.TurnMemory`);
* ``token_ids`` — the sampled ids, including the end-of-turn token when the model emitted it;
* ``logprobs`` — ``log softmax(logits / T)`` of each sampled id: the temperature-scaled
  distribution, before top-p truncation (what a trainer recomputes; use ``top_p=1`` for exact
  importance ratios);
* tool calls parsed from the text with the tolerant parser (:mod:`agent_swarm.swarm.backends.toolparse`);
  broken tool-call JSON becomes ``parse_error``, which the agent loop feeds back to the model.

Concurrent requests are decoded together as one left-padded batch with a KV cache (each with its
own seeded sampler). torch and transformers are imported lazily (the ``rl`` extra).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from agent_swarm.swarm.backend import Completion, ModelRequest, SamplingParams
from agent_swarm.swarm.backends.continuation import TurnMemory
from agent_swarm.swarm.backends.token_engine import ChatTokens, TokenOutput, chat_dicts
from agent_swarm.swarm.errors import BackendError, ConfigError
from agent_swarm.swarm.messages import Message

__all__ = ["TransformersBackend", "chat_dicts"]


@dataclass(eq=False)
class _Job:
    """One request in the decode queue; the decoding thread fills ids/logprobs or error, then sets done."""

    prompt: list[int]
    sampling: SamplingParams
    max_new: int
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    version: int = 0
    error: BackendError | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def seed(self) -> int | None:
        return self.sampling.seed


def _top_p(probs: Any, top_p: float) -> Any:
    """Nucleus filtering of one probability vector (renormalised)."""
    import torch

    sorted_p, idx = torch.sort(probs, descending=True)
    keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p
    keep[0] = True
    out = torch.zeros_like(probs)
    out[idx[keep]] = sorted_p[keep]
    return out / out.sum()


def _generator(seed: int | None) -> Any:
    """A CPU random generator for one job's sampling: seeded with ``seed``, else with a random seed."""
    import torch

    g = torch.Generator(device="cpu")
    g.manual_seed(seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item()))
    return g


def _sample(logits: Any, sampling: SamplingParams, gen: Any) -> tuple[int, float]:
    """(token id, its logprob) drawn from one logit vector: greedy at temperature 0, else sampled at
    the temperature from the top-p nucleus. The logprob is of the tempered distribution."""
    import torch

    temp = sampling.temperature if sampling.temperature > 0 else 1.0
    logp = torch.log_softmax(logits / temp, dim=-1).cpu()
    if sampling.temperature == 0:
        tok = int(torch.argmax(logp))
    else:
        probs = logp.exp()
        if sampling.top_p < 1.0:
            probs = _top_p(probs, sampling.top_p)
        tok = int(torch.multinomial(probs, 1, generator=gen))
    return tok, float(logp[tok])


class TransformersBackend:
    """``TransformersBackend.from_pretrained(path)`` or ``TransformersBackend(model, tokenizer)``.

    Safe to call concurrently: requests that arrive together are decoded as one left-padded batch
    (up to ``max_batch``) in a worker thread, under the lock :meth:`paused` also takes, so an update
    never races a generation. Each request samples with its own generator (seeded from
    ``SamplingParams.seed`` when given), so a seeded request gives the same tokens in any batch.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "transformers",
        weight_version: int = 0,
        max_batch: int = 16,
        batch_wait_s: float = 0.002,
    ) -> None:
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        extra_stops = [gen_eos] if isinstance(gen_eos, int) else list(gen_eos or ())
        self.chat = ChatTokens(tokenizer, name=name, stop_ids=extra_stops)
        self.hf_model = model
        self.tokenizer = tokenizer
        self._name = name
        self.weight_version = weight_version
        self._lock = threading.Lock()  # held while decoding and while weights change
        self._queue_lock = threading.Lock()
        self._pending: list[_Job] = []
        self.max_batch = max_batch
        self.batch_wait_s = batch_wait_s
        self._stop_ids: set[int] = set(self.chat.stop_ids)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._stop_ids, default=0)

    @property
    def memory(self) -> TurnMemory:
        """The turn memory of the chat layer (prompt continuation across turns)."""
        return self.chat.memory

    @memory.setter
    def memory(self, memory: TurnMemory) -> None:
        self.chat.memory = memory

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        name: str | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        weight_version: int = 0,
    ) -> TransformersBackend:
        """Load a local model directory (never the hub: ``local_files_only``)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        p = Path(path)
        if not (p / "config.json").is_file():
            raise ConfigError(f"{p} is not a transformers model directory (no config.json); build or convert one")
        torch_dtype = getattr(torch, dtype, None)
        if not isinstance(torch_dtype, torch.dtype):
            raise ConfigError(f"unknown torch dtype {dtype!r}; use float32, bfloat16 or float16")
        tok = AutoTokenizer.from_pretrained(p, local_files_only=True)
        model: Any = AutoModelForCausalLM.from_pretrained(p, local_files_only=True, dtype=torch_dtype)
        model = model.to(device)
        model.eval()
        return cls(model, tok, name=name or p.name, weight_version=weight_version)

    # -- ModelBackend --------------------------------------------------------------------------------

    @property
    def model(self) -> str:
        return self._name

    def _template(self, messages: tuple[Message, ...], request: ModelRequest) -> str:
        return self.chat.template(messages, request)

    def _encode(self, text: str) -> list[int]:
        return self.chat.encode(text)

    def render(self, request: ModelRequest) -> list[int]:
        """The prompt token ids of a request (chat template + tokenization, no special tokens added);
        a turn that extends an earlier generation continues its exact ids (:class:`ChatTokens`)."""
        return self.chat.render(request)

    async def complete(self, request: ModelRequest) -> Completion:
        prompt = self.render(request)
        limit = getattr(self.hf_model.config, "max_position_embeddings", None)
        if limit is not None and len(prompt) >= limit:
            raise BackendError(
                f"prompt of {len(prompt)} tokens does not fit model {self._name!r} "
                f"(max_position_embeddings={limit}); shorten the conversation or the reports"
            )
        max_new = request.sampling.max_tokens
        if limit is not None:
            max_new = min(max_new, limit - len(prompt))
        out = await self._generate(prompt, request.sampling, max_new)
        return self.chat.completion(
            request, prompt, out.token_ids, out.logprobs, max_new=max_new, weight_version=out.weight_version
        )

    async def generate_tokens(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> TokenOutput:
        """Token ids in, token ids out (:class:`~agent_swarm.swarm.backends.token_engine.TokenEngine`): up to
        ``sampling.max_tokens`` ids after ``prompt_ids``, with their logprobs and the weight version."""
        return await self._generate(list(prompt_ids), sampling, sampling.max_tokens)

    async def _generate(self, prompt: list[int], sampling: SamplingParams, max_new: int) -> TokenOutput:
        job = _Job(prompt=prompt, sampling=sampling, max_new=max_new)
        await anyio.to_thread.run_sync(self._run_job, job)
        if job.error is not None:
            raise job.error
        return TokenOutput(tuple(job.ids), tuple(job.logprobs), str(job.version))

    # -- generation ----------------------------------------------------------------------------------

    def _run_job(self, job: _Job) -> _Job:
        """Runs in a worker thread: queue the job, then either lead a batch or wait for a leader.

        Concurrent requests are decoded together in one batch (continuous batching without
        preemption): whichever waiting thread takes the generation lock decodes every queued job
        (up to ``max_batch``), so N parallel sub-agents cost about one decode, not N.
        """
        with self._queue_lock:
            self._pending.append(job)
        while not job.done.is_set():
            if self._lock.acquire(timeout=0.02):
                try:
                    if job.done.is_set():
                        break
                    if self.batch_wait_s:
                        time.sleep(self.batch_wait_s)  # let requests issued in the same tick join
                    with self._queue_lock:
                        batch = self._pending[: self.max_batch]
                        del self._pending[: len(batch)]
                    if batch:
                        self._decode(batch)
                finally:
                    self._lock.release()
            else:
                job.done.wait(0.02)
        return job

    def _decode(self, jobs: list[_Job]) -> None:
        """Decode a batch (left-padded, KV cache); every job gets its result or the error."""
        try:
            self._decode_batch(jobs)
        except Exception as exc:
            err = BackendError(f"generation failed in model {self._name!r}: {type(exc).__name__}: {exc}")
            for j in jobs:
                if not j.done.is_set():
                    j.error = err
        finally:
            for j in jobs:
                j.done.set()

    def _decode_batch(self, jobs: list[_Job]) -> None:
        import torch

        model = self.hf_model
        device = next(model.parameters()).device
        n = len(jobs)
        ids, mask = self._left_padded(jobs)
        ids, mask = ids.to(device), mask.to(device)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        gens = [_generator(j.seed) for j in jobs]
        version = self.weight_version
        active = [True] * n
        steps = max(j.max_new for j in jobs)
        with torch.inference_mode():
            out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            last_pos = pos[:, -1]
            for _ in range(steps):
                nxt = torch.full((n,), self._pad_id, dtype=torch.long)
                for i, j in enumerate(jobs):
                    if not active[i]:
                        continue
                    tok, logp = _sample(logits[i], j.sampling, gens[i])
                    j.ids.append(tok)
                    j.logprobs.append(logp)
                    nxt[i] = tok
                    if tok in self._stop_ids or len(j.ids) >= j.max_new or self._hit_stop(j):
                        active[i] = False
                if not any(active):
                    break
                mask = torch.cat([mask, torch.ones((n, 1), dtype=torch.long, device=device)], dim=1)
                last_pos = last_pos + 1
                out = model(
                    input_ids=nxt[:, None].to(device),
                    attention_mask=mask,
                    position_ids=last_pos[:, None],
                    past_key_values=past,
                    use_cache=True,
                )
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
        for j in jobs:
            j.version = version

    def _left_padded(self, jobs: list[_Job]) -> tuple[Any, Any]:
        """(input ids, attention mask) of the jobs' prompts as one batch, left-padded to the longest."""
        import torch

        n = len(jobs)
        width = max(len(j.prompt) for j in jobs)
        ids = torch.full((n, width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, j in enumerate(jobs):
            ids[i, width - len(j.prompt) :] = torch.tensor(j.prompt)
            mask[i, width - len(j.prompt) :] = 1
        return ids, mask

    def _hit_stop(self, job: _Job) -> bool:
        stops = job.sampling.stop
        if not stops:
            return False
        tail = self.tokenizer.decode(job.ids[-64:], skip_special_tokens=False)
        return any(x in tail for x in stops)

    # -- serving-engine side of training -------------------------------------------------------------

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold generation while the weights change (colocated training)."""
        with self._lock:
            yield

    def load_weights(self, state_dict: dict[str, Any], version: int) -> None:
        """Push new weights (a state dict from a separate trainer copy) and set the weight version."""
        with self.paused():
            missing, unexpected = self.hf_model.load_state_dict(state_dict, strict=False)
            if unexpected or [k for k in missing if not k.endswith("lm_head.weight")]:
                raise ConfigError(
                    f"weights do not match model {self._name!r}: missing {list(missing)[:5]}, "
                    f"unexpected {list(unexpected)[:5]}"
                )
            self.weight_version = version
