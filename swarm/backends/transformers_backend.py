"""A :class:`~swarm.backend.ModelBackend` on a local transformers model (CPU or GPU), for RL.

The same object serves rollouts and is trained in place (the *colocated* engine): the trainer holds
:meth:`TransformersBackend.paused` while it updates the weights, then bumps
:attr:`TransformersBackend.weight_version`, which every later completion carries.

What a completion carries, exactly as sampled:

* ``prompt_token_ids`` — the model's own chat template rendered with the request's messages and
  tools, tokenized once (the tools are rendered even with ``tool_choice="none"`` so the prompt
  prefix stays identical from turn to turn);
* ``token_ids`` — the sampled ids, including the end-of-turn token when the model emitted it;
* ``logprobs`` — ``log softmax(logits / T)`` of each sampled id: the temperature-scaled
  distribution, before top-p truncation (what a trainer recomputes; use ``top_p=1`` for exact
  importance ratios);
* tool calls parsed from the text with the tolerant parser (:mod:`swarm.backends.toolparse`);
  broken tool-call JSON becomes ``parse_error``, which the agent loop feeds back to the model.

torch and transformers are imported lazily (the ``rl`` extra).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread

from swarm.backend import Completion, FinishReason, ModelRequest, Usage
from swarm.backends.toolparse import parse_tool_calls
from swarm.errors import BackendError, ConfigError
from swarm.messages import AssistantMessage, Message, ToolMessage

__all__ = ["TransformersBackend", "chat_dicts"]


def chat_dicts(messages: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    """Messages as the dicts HF chat templates expect (tool-call arguments as dicts, not JSON strings)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            d: dict[str, Any] = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                d["tool_calls"] = [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                    for c in m.tool_calls
                ]
            out.append(d)
        elif isinstance(m, ToolMessage):
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "name": m.name, "content": m.content})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


class TransformersBackend:
    """``TransformersBackend.from_pretrained(path)`` or ``TransformersBackend(model, tokenizer)``.

    Safe to call concurrently: generations run one at a time in a worker thread under a lock (the
    same lock :meth:`paused` takes), so an update never races a generation.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "transformers",
        weight_version: int = 0,
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError(
                f"tokenizer of model {name!r} has no chat template; set tokenizer.chat_template "
                "(a Jinja ChatML template) before serving it"
            )
        self.hf_model = model
        self.tokenizer = tokenizer
        self._name = name
        self.weight_version = weight_version
        self._lock = threading.Lock()
        eos = tokenizer.eos_token_id
        self._stop_ids: set[int] = {eos} if isinstance(eos, int) else set(eos or ())
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if isinstance(gen_eos, int):
            self._stop_ids.add(gen_eos)
        elif gen_eos:
            self._stop_ids.update(gen_eos)
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self._stop_ids, default=0)

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

    def render(self, request: ModelRequest) -> list[int]:
        """The prompt token ids of a request (chat template + tokenization, no special tokens added)."""
        tools = [t.to_openai() for t in request.tools] or None
        try:
            text = self.tokenizer.apply_chat_template(
                chat_dicts(request.messages), tools=tools, tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:  # a template that rejects the conversation is the developer's problem
            raise ConfigError(f"chat template of {self._name!r} failed to render the request: {exc}") from exc
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

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
        ids, lps, version = await anyio.to_thread.run_sync(self._generate, prompt, request, max_new)
        return self._completion(request, prompt, ids, lps, version, max_new)

    # -- generation ----------------------------------------------------------------------------------

    def _generate(self, prompt: list[int], request: ModelRequest, max_new: int) -> tuple[list[int], list[float], int]:
        import torch

        s = request.sampling
        greedy = s.temperature == 0.0
        with self._lock, torch.inference_mode():
            if s.seed is not None:
                torch.manual_seed(s.seed)
            device = next(self.hf_model.parameters()).device
            input_ids = torch.tensor([prompt], dtype=torch.long, device=device)
            kwargs: dict[str, Any] = {
                "max_new_tokens": max_new,
                "do_sample": not greedy,
                "output_logits": True,
                "return_dict_in_generate": True,
                "eos_token_id": sorted(self._stop_ids),
                "pad_token_id": self._pad_id,
                "attention_mask": torch.ones_like(input_ids),
            }
            if not greedy:
                kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=0)
            if s.stop:
                kwargs.update(stop_strings=list(s.stop), tokenizer=self.tokenizer)
            try:
                out = self.hf_model.generate(input_ids, **kwargs)
            except Exception as exc:
                raise BackendError(f"generation failed in model {self._name!r}: {type(exc).__name__}: {exc}") from exc
            new = out.sequences[0, len(prompt) :].tolist()
            temp = 1.0 if greedy else s.temperature
            lps: list[float] = []
            for tok, logits in zip(new, out.logits, strict=False):
                logp = torch.log_softmax(logits[0].float() / temp, dim=-1)
                lps.append(float(logp[tok]))
            # generate() pads finished rows; a single row stops at its first stop id
            for i, tok in enumerate(new):
                if tok in self._stop_ids:
                    new, lps = new[: i + 1], lps[: i + 1]
                    break
            return new, lps, self.weight_version

    def _completion(
        self, request: ModelRequest, prompt: list[int], ids: list[int], lps: list[float], version: int, max_new: int
    ) -> Completion:
        ended = bool(ids) and ids[-1] in self._stop_ids
        body = ids[:-1] if ended else ids
        text = self.tokenizer.decode(body, skip_special_tokens=False)
        for special in (self.tokenizer.pad_token,):
            if special:
                text = text.replace(special, "")
        finish: FinishReason = "stop" if ended or len(ids) < max_new else "length"
        calls: tuple[Any, ...] = ()
        parse_error = None
        if request.tools and request.tool_choice != "none":
            parsed = parse_tool_calls(text, [t.name for t in request.tools])
            calls, parse_error = parsed.tool_calls, parsed.parse_error
            if calls:
                text = parsed.text
                finish = "tool_calls"
        return Completion(
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids)),
            model=self._name,
            prompt_token_ids=tuple(prompt),
            token_ids=tuple(ids),
            logprobs=tuple(lps),
            parse_error=parse_error,
            weight_version=str(version),
        )

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
