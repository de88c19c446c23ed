"""A :class:`~agent_swarm.swarm.backend.ModelBackend` over any engine that takes token ids and returns token ids.

RL engines expose generation at the token level: verl's server manager
(``generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput``), a vLLM engine, our
own transformers decoder. :class:`TokenEngineBackend` puts the chat layer on top of such an engine,
the same way for all of them:

* the prompt is the model's chat template rendered with the request's messages and tools,
  tokenized once; a turn that continues an earlier generation reuses that generation's exact prompt
  + sampled ids (:class:`~agent_swarm.swarm.backends.continuation.TurnMemory`), so no turn re-tokenizes what the
  model sampled (no drift across turns);
* the completion carries the engine's sampled ids and logprobs untouched; its text is decoded from
  them (without the end-of-turn token) and tool calls are read with the tolerant parser
  (:mod:`agent_swarm.swarm.backends.toolparse`); broken call JSON becomes ``parse_error``.

:class:`ChatTokens` is that chat layer on its own (the transformers backend uses it too), and
:class:`TokenEngine` is the one method an engine implements.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agent_swarm.swarm.backend import Completion, FinishReason, ModelRequest, SamplingParams, Usage
from agent_swarm.swarm.backends.continuation import TurnMemory
from agent_swarm.swarm.backends.toolparse import parse_tool_calls
from agent_swarm.swarm.errors import BackendError, ConfigError
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolMessage

__all__ = ["ChatTokens", "TokenEngine", "TokenEngineBackend", "TokenOutput", "chat_dicts"]


def chat_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
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


@dataclass(frozen=True, slots=True)
class TokenOutput:
    """What a token engine sampled for one prompt: the ids (the end-of-turn token included when the
    model emitted it), their logprobs (``None`` when the engine gave none) and the version of the
    weights that sampled them (``None`` when unknown)."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...] | None = None
    weight_version: str | None = None


@runtime_checkable
class TokenEngine(Protocol):
    """Token ids in, token ids out: ``await engine.generate_tokens(prompt_ids, sampling)``."""

    async def generate_tokens(self, prompt_ids: Sequence[int], sampling: SamplingParams) -> TokenOutput:
        """Sample a continuation of ``prompt_ids`` (at most ``sampling.max_tokens`` ids)."""
        ...


def _stop_ids(tokenizer: Any, extra: Iterable[int]) -> frozenset[int]:
    eos = tokenizer.eos_token_id
    ids = {eos} if isinstance(eos, int) else set(eos or ())
    return frozenset(ids | {int(i) for i in extra})


class ChatTokens:
    """The chat layer of a token-level engine: render prompts (with continuation), build completions.

    ``tokenizer`` is a transformers tokenizer with a chat template; ``stop_ids`` are the ids that end
    a turn besides the tokenizer's EOS (a generation config's extra end-of-turn ids).
    """

    def __init__(self, tokenizer: Any, *, name: str, stop_ids: Iterable[int] = ()) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError(
                f"tokenizer of model {name!r} has no chat template; set tokenizer.chat_template "
                "(a Jinja ChatML template) before serving it"
            )
        self.tokenizer = tokenizer
        self.name = name
        self.stop_ids = _stop_ids(tokenizer, stop_ids)
        self.memory = TurnMemory()

    def template(self, messages: Sequence[Message], request: ModelRequest) -> str:
        """The chat template's text of ``messages`` with the request's tools and a generation prompt."""
        tools = [t.to_openai() for t in request.tools] or None
        try:
            text = self.tokenizer.apply_chat_template(
                chat_dicts(messages), tools=tools, tokenize=False, add_generation_prompt=True
            )
        except Exception as exc:  # a template that rejects the conversation is the developer's problem
            raise ConfigError(f"chat template of {self.name!r} failed to render the request: {exc}") from exc
        return str(text)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids

    def render(self, request: ModelRequest) -> list[int]:
        """The prompt token ids of a request (chat template + tokenization, no special tokens added).

        A turn that extends an earlier generation continues that generation's exact prompt + sampled
        ids (:class:`~agent_swarm.swarm.backends.continuation.TurnMemory`), so re-rendering the model's own
        output (e.g. fenced JSON recorded as a parsed call) never changes its tokens.
        """
        cont = self.memory.continuation(request.messages)
        if cont is not None:
            suffix = cont.suffix(self.template(cont.probe, request))
            if suffix is not None:
                self.memory.continued += 1
                return [*cont.base_ids, *self.encode(suffix)]
        return self.encode(self.template(request.messages, request))

    def completion(
        self,
        request: ModelRequest,
        prompt: Sequence[int],
        ids: Sequence[int],
        logprobs: Sequence[float] | None,
        *,
        max_new: int,
        weight_version: str | None,
    ) -> Completion:
        """The completion of ``ids`` sampled for ``prompt``, remembered for the next turn's continuation."""
        ended = bool(ids) and ids[-1] in self.stop_ids
        body = list(ids[:-1] if ended else ids)
        text = str(self.tokenizer.decode(body, skip_special_tokens=False))
        pad = self.tokenizer.pad_token
        if pad:
            text = text.replace(pad, "")
        finish: FinishReason = "stop" if ended or len(ids) < max_new else "length"
        raw = text
        calls: tuple[Any, ...] = ()
        parse_error = None
        if request.tools and request.tool_choice != "none":
            parsed = parse_tool_calls(text, [t.name for t in request.tools], truncated=finish == "length")
            calls, parse_error = parsed.tool_calls, parsed.parse_error
            if calls:
                text = parsed.text
                finish = "tool_calls"
        completion = Completion(
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(ids)),
            model=self.name,
            prompt_token_ids=tuple(int(i) for i in prompt),
            token_ids=tuple(int(i) for i in ids),
            logprobs=None if logprobs is None else tuple(float(x) for x in logprobs),
            parse_error=parse_error,
            weight_version=weight_version,
        )
        eog = str(self.tokenizer.decode([ids[-1]], skip_special_tokens=False)) if ended else ""
        self.memory.remember(request.messages, completion, raw, eog)
        return completion


class TokenEngineBackend:
    """A model backend on a :class:`TokenEngine`: ``TokenEngineBackend(engine, tokenizer, name=...)``.

    ``max_context`` (tokens) refuses a prompt that leaves no room to generate, with the numbers,
    instead of sending it. Concurrency is the engine's business: this object holds only the turn
    memory, so build one per episode (or share one: the memory is keyed by conversation).
    """

    def __init__(
        self,
        engine: TokenEngine,
        tokenizer: Any,
        *,
        name: str,
        stop_ids: Iterable[int] = (),
        max_context: int | None = None,
    ) -> None:
        self.engine = engine
        self.chat = ChatTokens(tokenizer, name=name, stop_ids=stop_ids)
        self.max_context = max_context

    @property
    def model(self) -> str:
        return self.chat.name

    async def complete(self, request: ModelRequest) -> Completion:
        prompt = self.chat.render(request)
        max_new = request.sampling.max_tokens
        if self.max_context is not None:
            if len(prompt) >= self.max_context:
                raise BackendError(
                    f"prompt of {len(prompt)} tokens does not fit model {self.model!r} "
                    f"(context {self.max_context}); shorten the conversation or raise the context length"
                )
            max_new = min(max_new, self.max_context - len(prompt))
        sampling = request.sampling.model_copy(update={"max_tokens": max_new})
        out = await self.engine.generate_tokens(prompt, sampling)
        if out.logprobs is not None and len(out.logprobs) != len(out.token_ids):
            raise BackendError(
                f"engine of {self.model!r} returned {len(out.token_ids)} ids but {len(out.logprobs)} logprobs"
            )
        return self.chat.completion(
            request, prompt, out.token_ids, out.logprobs, max_new=max_new, weight_version=out.weight_version
        )
