"""The embedded default backend: a :class:`~agent_swarm.swarm.backends.local.engine.LocalEngine` behind the
ModelBackend protocol, tokens in and tokens out (see :mod:`agent_swarm.swarm.backends.local`)."""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from agent_swarm.swarm.backend import Completion, FinishReason, ModelRequest, Timings, ToolSpec, Usage
from agent_swarm.swarm.backends.continuation import TurnMemory
from agent_swarm.swarm.backends.local.catalogue import Progress
from agent_swarm.swarm.backends.local.engine import EngineStartup, LocalEngine
from agent_swarm.swarm.backends.local.prefix import MIN_PREFIX_TOKENS, PrefixWork, Slot, common_prefix
from agent_swarm.swarm.backends.openai_http import OpenAIBackend, RetryPolicy, with_tools_in_prompt
from agent_swarm.swarm.backends.repeats import RepeatGuard
from agent_swarm.swarm.backends.toolparse import action_grammar, constrained_answer, parse_tool_calls
from agent_swarm.swarm.errors import BackendError, ConfigError
from agent_swarm.swarm.messages import Message, UserMessage, to_openai_messages

__all__ = ["LocalBackend"]


class LocalBackend:
    """The embedded default backend: a :class:`LocalEngine` behind the ModelBackend protocol.

    The engine starts on first use (or ``await backend.start()``) in a worker thread; :meth:`aclose`
    (or ``async with``) stops it when this backend created it. Safe to call concurrently: up to
    ``slots`` requests decode together, the rest queue.

    Args:
        model, slots, fit_slots, ctx_per_slot, threads, progress, resident, keep_alive: see
            :class:`LocalEngine` (ignored when ``engine`` is given).
        engine: share an engine (e.g. between tests, or between orchestrator and sub-agents).
        constrain_actions: constrain tool-using turns to the JSON action schema (grammar sampling).
        timeout: seconds allowed for one generation.
        lora_scale: apply the engine's first LoRA adapter at this scale to every request of this
            backend (the trained orchestrator), and carry the engine's ``adapter_version`` as each
            completion's ``weight_version``; ``None`` (default) serves the base model (sub-agents).
        owns_engine: whether :meth:`aclose` stops the engine (default: when this backend created it;
            pass ``True`` to hand a shared engine's lifetime to this backend).
        stop_repeats: stream each generation and stop it once it repeats one block of tokens
            verbatim for 128 tokens (:class:`~agent_swarm.swarm.backends.repeats.RepeatGuard`); the turn ends
            as if cut at the token cap (``finish_reason="length"``). Output that does not loop is
            unchanged. ``False`` decodes to the cap.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        engine: LocalEngine | None = None,
        slots: int = 4,
        fit_slots: bool = False,
        ctx_per_slot: int | None = 4096,
        threads: int | None = None,
        constrain_actions: bool = False,
        timeout: float = 600.0,
        progress: Progress | None = None,
        lora_scale: float | None = None,
        owns_engine: bool | None = None,
        stop_repeats: bool = True,
        resident: Path | None = None,
        keep_alive: float = 0.0,
    ) -> None:
        self._own_engine = engine is None if owns_engine is None else owns_engine
        self.engine = engine or LocalEngine(
            model,
            slots=slots,
            fit_slots=fit_slots,
            ctx_per_slot=ctx_per_slot,
            threads=threads,
            progress=progress,
            resident=resident,
            keep_alive=keep_alive,
        )
        self.constrain_actions = constrain_actions
        self.timeout = timeout
        self.lora_scale = lora_scale
        self.stop_repeats = stop_repeats
        self.repeats_stopped = 0
        """Generations stopped because they repeated themselves."""
        self._http: OpenAIBackend | None = None
        self._generation = 0
        self.memory = TurnMemory()
        """Earlier generations, so a later turn continues their exact ids (see continuation.py)."""

    @property
    def model(self) -> str:
        return self.engine.name or (self.engine.requested or "local")

    @property
    def continued_turns(self) -> int:
        """Turns whose prompt continued an earlier turn's exact ids (the rest were rendered fresh)."""
        return self.memory.continued

    @property
    def ctx_per_slot(self) -> int:
        return self.engine.ctx_per_slot

    @property
    def context_window(self) -> int:
        """Tokens one request holds, prompt and completion (a slot's context; agent_swarm.swarm.backend capability)."""
        return self.engine.ctx_per_slot

    @property
    def parallel_slots(self) -> int:
        """Requests of this backend's kind (with or without the adapter) the engine decodes at once."""
        e = self.engine
        if not e.lora_adapters:
            return e.slots
        return e.adapter_slots if self.lora_scale is not None else e.slots - e.adapter_slots

    async def count_tokens(self, request: ModelRequest) -> int:
        """The exact prompt tokens of ``request`` (the engine's chat template and tokenizer)."""
        if self._http is None or self._generation != self.engine.generation:
            await self.start()
        assert self._http is not None
        return len((await self._prompt_ids(self._http, request))[0])

    async def start(self) -> None:
        """Start the engine (if needed) and connect to it; idempotent."""
        if not self.engine.started:
            await anyio.to_thread.run_sync(self.engine.start)
        stale = self._http if self._generation != self.engine.generation else None
        if stale is not None:  # the engine was restarted (new adapter): connect to its new port
            self._http = None
        if self._http is None:
            self._generation = self.engine.generation
            self._http = OpenAIBackend(
                self.engine.base_url,
                self.engine.name,
                flavour="llamacpp",
                timeout=self.timeout,
                max_concurrency=self.engine.slots,
                retry=RetryPolicy(max_retries=1, base_delay=0.2),
                tools_in_prompt=self.engine.tools_in_prompt,
            )
        if stale is not None:
            await stale.aclose()

    async def complete(self, request: ModelRequest) -> Completion:
        startup = await self._started()
        began = time.perf_counter()  # the call's own time starts once the engine is up
        http = self._http
        assert http is not None
        offered = bool(request.tools) and request.tool_choice != "none"
        prompt_ids, continued = await self._prompt_ids(http, request)
        body = self._body(request, prompt_ids)
        if self.constrain_actions and request.tools:
            grammar = await self._grammar(
                http,
                request.offered(),  # allowed_tools narrows the grammar; the prompt lists every tool
                request.tool_choice,
                body.get("lora"),
                one_call=not request.parallel_tool_calls,
            )
            if grammar is not None:
                body["grammar"] = grammar
        prefix = await self._fixed_prefix(http, request, prompt_ids, continued)
        waiting = time.perf_counter()
        async with self.engine.slot(bool(self.lora_scale), prompt_ids, len(prompt_ids) + body["n_predict"]) as slot:
            queue_s = time.perf_counter() - waiting
            work = await self._prepare(http, slot, prefix, body.get("lora"))
            body["id_slot"] = slot.id
            data = await (self._stream(http, body) if self.stop_repeats else http.post_json("/completion", body))
            slot.held = prompt_ids + tuple(t for t in data.get("tokens") or () if isinstance(t, int))
        eog = await self._eog_text(http, data)
        completion = self._parse(request, prompt_ids, data, offered)
        timings = _timings(data, began, startup, queue_s, work)
        update: dict[str, Any] = {"timings": timings}
        if self.lora_scale is not None:
            update["weight_version"] = self.engine.adapter_version
        completion = replace(completion, **update)
        self.memory.remember(request.messages, completion, str(data.get("content")), eog)
        self.memory.continued += continued
        return completion

    async def _started(self) -> EngineStartup | None:
        """Connect (starting the engine if needed); the engine's start cost if no completion has
        reported it yet (one completion per start carries it)."""
        if self._http is None or self._generation != self.engine.generation:
            await self.start()
        return self.engine.take_startup()

    def _body(self, request: ModelRequest, prompt_ids: tuple[int, ...]) -> dict[str, Any]:
        """The ``/completion`` body of a request, without its grammar and slot."""
        room = self.engine.ctx_per_slot - len(prompt_ids)
        if room < 1:
            raise BackendError(
                f"the prompt has {len(prompt_ids)} tokens, which fills the slot's context of "
                f"{self.engine.ctx_per_slot}; raise ctx_per_slot ([backend] ctx in the config file, or "
                "SWARM_LOCAL_CTX) or shorten the conversation"
            )
        s = request.sampling
        body: dict[str, Any] = {
            "prompt": list(prompt_ids),
            "n_predict": min(s.max_tokens, room),
            "temperature": s.temperature,
            "top_p": s.top_p,
            # No hidden truncation: llama.cpp's default top_k=40 / min_p=0.05 would cut the
            # distribution behind the caller's back.
            "top_k": 0,
            "min_p": 0.0,
            "return_tokens": True,
            "cache_prompt": True,
        }
        if s.temperature > 0:
            # The sampled token's probability under the distribution it was actually drawn from (after
            # temperature, top-p and the grammar), not the raw softmax: at T != 1 the raw one is not the
            # behaviour policy, and RL importance ratios need the real one. Greedy decoding picks with
            # probability 1 (logprob 0, as llama.cpp reports it), so it asks for none: llama.cpp sorts the
            # whole vocabulary per token to give them, 8 % of greedy decode time (bench_decode_path.py).
            body["n_probs"] = 1
            body["post_sampling_probs"] = True
        if s.seed is not None:
            body["seed"] = s.seed
        if self.lora_scale is not None:
            if not self.engine.lora_adapters:
                raise ConfigError("lora_scale is set but the local engine was started without a LoRA adapter")
            body["lora"] = [{"id": 0, "scale": self.lora_scale}]
        if s.stop:
            body["stop"] = list(s.stop)
        return body

    # -- fixed prefixes -----------------------------------------------------------------------------

    @property
    def _adapter_key(self) -> str:
        return self.engine.adapter_key if self.lora_scale else ""

    async def _fixed_prefix(
        self, http: OpenAIBackend, request: ModelRequest, prompt_ids: tuple[int, ...], continued: bool
    ) -> tuple[int, ...] | None:
        """The fixed prefix of this prompt whose KV state is cached: a known one, else (first turns
        only) the ids before the last user message's text, found by rendering the same messages with
        another text there. ``None`` when the prefix cache is off or the prefix is short."""
        cache = self.engine.prefixes
        if cache is None:
            return None
        known = cache.match(prompt_ids, self._adapter_key)
        if known is not None or continued:
            return known
        last_user = max((i for i, m in enumerate(request.messages) if isinstance(m, UserMessage)), default=None)
        if last_user is None:
            return None
        probe = list(request.messages[: last_user + 1])
        probe[last_user] = UserMessage(content=_PROBE_TEXT)
        try:
            rendered = await http.post_json("/apply-template", self._wire(probe, request))
            ids = await self._tokenize(http, str(rendered.get("prompt", "")), first=True)
        except BackendError:  # no cached prefix for this request; the request itself goes on
            return None
        n = min(common_prefix(ids, prompt_ids), len(prompt_ids) - 1)
        return prompt_ids[:n] if n >= MIN_PREFIX_TOKENS else None

    async def _prepare(self, http: OpenAIBackend, slot: Slot, prefix: tuple[int, ...] | None, lora: Any) -> PrefixWork:
        cache = self.engine.prefixes
        if cache is None or prefix is None:
            return PrefixWork()
        return await cache.prepare(http, slot, prefix, self._adapter_key, lora)

    # -- constrained actions ------------------------------------------------------------------------

    async def _grammar(
        self,
        http: OpenAIBackend,
        tools: tuple[ToolSpec, ...],
        choice: str,
        lora: Any = None,
        *,
        one_call: bool = False,
    ) -> str | None:
        """The action grammar for this turn, or ``None`` when llama.cpp cannot enforce it.

        llama.cpp's llguidance sampler *silently ignores* a grammar it fails to compile (an
        unsupported schema feature), so each tool set is checked once per engine: its calls-only
        grammar must force the first sampled token to open a call. A grammar that fails the check
        is dropped with a warning and the turn is decoded freely (the tolerant parser still reads it).
        """
        open_tag, close_tag = self.engine.tool_tags
        grammar = action_grammar(
            tools, allow_answer=choice != "required", open_tag=open_tag, close_tag=close_tag, one_call=one_call
        )
        if not tools:
            return grammar
        forced = action_grammar(tools, allow_answer=False, open_tag=open_tag, close_tag=close_tag)
        key = hashlib.sha256(forced.encode()).hexdigest()
        ok = self.engine.grammars.get(key)
        if ok is None:
            probe = {
                "prompt": "Hi",
                "n_predict": 1,
                "temperature": 0.0,
                "return_tokens": True,
                "cache_prompt": False,
                "grammar": forced,
            }
            if lora is not None:
                probe["lora"] = lora
            async with self.engine.slot(bool(self.lora_scale), tokens=8) as slot:
                probe["id_slot"] = slot.id
                slot.held = ()  # the probe replaces what the slot held
                data = await http.post_json("/completion", probe)
            first = (data.get("tokens") or [None])[0]
            text = str(data.get("content", ""))
            ok = first == open_tag or (bool(text) and text[0] in "{<")
            self.engine.remember_grammar(key, ok)
            if not ok:
                warnings.warn(
                    "llama.cpp could not compile the action grammar for tools "
                    f"{sorted(t.name for t in tools)} (an unsupported JSON-schema feature?); "
                    "those turns are decoded without constraints",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return grammar if ok else None

    # -- exact tokens -------------------------------------------------------------------------------

    async def prompt_ids(self, request: ModelRequest) -> tuple[int, ...]:
        """The prompt ids :meth:`complete` would send for ``request`` (template, tokenizer, continuation).

        Used to build training data in exactly the tokens this backend gives the model (SFT warm start).
        """
        if self._http is None or self._generation != self.engine.generation:
            await self.start()
        assert self._http is not None
        ids, _ = await self._prompt_ids(self._http, request)
        return ids

    def _wire(self, messages: tuple[Message, ...] | list[Message], request: ModelRequest) -> dict[str, Any]:
        """The /apply-template body: messages (and tools, natively or in the system prompt)."""
        assert self._http is not None
        tools = request.tools
        if self.engine.tools_in_prompt:
            return {"messages": with_tools_in_prompt(tuple(messages), tools)}
        body: dict[str, Any] = {"messages": to_openai_messages(list(messages))}
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        return body

    async def _tokenize(self, http: OpenAIBackend, text: str, *, first: bool) -> tuple[int, ...]:
        out = await http.post_json("/tokenize", {"content": text, "add_special": first, "parse_special": True})
        ids = out.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise BackendError(f"llama.cpp /tokenize answered without a token list: {json.dumps(out)[:200]}")
        return tuple(ids)

    async def _prompt_ids(self, http: OpenAIBackend, request: ModelRequest) -> tuple[tuple[int, ...], bool]:
        """Prompt ids, and whether they continue an earlier turn's exact ids."""
        cont = self.memory.continuation(request.messages)
        if cont is not None:
            rendered = await http.post_json("/apply-template", self._wire(cont.probe, request))
            suffix = cont.suffix(str(rendered.get("prompt", "")))
            if suffix is not None:
                return cont.base_ids + await self._tokenize(http, suffix, first=False), True
        rendered = await http.post_json("/apply-template", self._wire(request.messages, request))
        prompt = rendered.get("prompt")
        if not isinstance(prompt, str):
            raise BackendError(f"llama.cpp /apply-template answered without a prompt: {json.dumps(rendered)[:200]}")
        return await self._tokenize(http, prompt, first=True), False

    async def _stream(self, http: OpenAIBackend, body: dict[str, Any]) -> dict[str, Any]:
        """``/completion`` streamed and stopped by a :class:`RepeatGuard` (a verbatim loop, or a tool call
        written twice), merged into the shape of one non-streamed answer (a stopped loop reads
        ``stop_type: "limit"``, like the token cap)."""
        guard = RepeatGuard(watch_calls=True)

        def keep_going(event: dict[str, Any]) -> bool:
            tokens, text = event.get("tokens"), event.get("content")
            return guard.feed(tokens, text if isinstance(text, str) else "") if isinstance(tokens, list) else True

        # timings_per_token: every event carries the timings so far, so a stream stopped early has them.
        events = await http.post_stream("/completion", {**body, "stream": True, "timings_per_token": True}, keep_going)
        last = events[-1]
        probs: list[Any] = []
        for e in events:
            probs.extend(e.get("completion_probabilities") or ())
        merged = {
            **last,
            "content": "".join(str(e.get("content") or "") for e in events),
            "tokens": [t for e in events for t in (e.get("tokens") or ())],
            "completion_probabilities": probs,
        }
        if guard.looped:
            self.repeats_stopped += 1
            merged["stop_type"] = "limit"
        elif last.get("stop") is not True:
            raise BackendError("llama.cpp's stream ended before its last event; the generation is incomplete")
        return merged

    def _parse(
        self, request: ModelRequest, prompt_ids: tuple[int, ...], data: dict[str, Any], offered: bool
    ) -> Completion:
        text = data.get("content")
        tokens = data.get("tokens")
        probs = data.get("completion_probabilities") or []
        if not isinstance(text, str) or not isinstance(tokens, list):
            raise BackendError(f"llama.cpp /completion answered without content/tokens: {json.dumps(data)[:200]}")
        ids = tuple(int(t) for t in tokens)
        lps: tuple[float, ...] | None
        if request.sampling.temperature <= 0:  # greedy: every token with probability 1 (none asked for)
            lps = (0.0,) * len(ids)
        else:
            # llama.cpp leaves out the entry of a token that ends mid-character (one byte of a multi-byte
            # UTF-8 character); such a turn carries no logprobs rather than misaligned ones.
            lps = tuple(_logprob(p) for p in probs)
            aligned = len(probs) == len(ids) and all(
                not isinstance(p, dict) or p.get("id", t) == t for p, t in zip(probs, ids, strict=True)
            )
            if not aligned:
                lps = None
        calls: tuple[Any, ...] = ()
        parse_error = None
        if offered:
            parsed = parse_tool_calls(text, [t.name for t in request.tools], truncated=data.get("stop_type") == "limit")
            calls, parse_error = parsed.tool_calls, parsed.parse_error
            if calls or parsed.answer is not None:
                text = parsed.text
        elif self.constrain_actions and request.tools:
            text = constrained_answer(text)
        stop = data.get("stop_type")
        finish: FinishReason = "tool_calls" if calls else ("length" if stop == "limit" else "stop")
        return Completion(
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            model=self.model,
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(ids)),
            prompt_token_ids=prompt_ids,
            token_ids=ids,
            logprobs=lps,
            parse_error=parse_error,
        )

    async def _eog_text(self, http: OpenAIBackend, data: dict[str, Any]) -> str:
        """The template text of the end-of-generation token the model sampled, or ``""``.

        llama.cpp reports an EOG token's text as ``""`` (in ``content`` and in its probabilities),
        so it is read back by id; without it the next turn's template text would add a second
        ``<|im_end|>`` after the one already among the sampled ids.
        """
        tokens = data.get("tokens") or []
        if data.get("stop_type") != "eos" or not tokens or not isinstance(tokens[-1], int):
            return ""
        last = tokens[-1]
        text = self.engine.pieces.get(last)
        if text is None:
            out = await http.post_json("/detokenize", {"tokens": [last]})
            text = self.engine.pieces[last] = str(out.get("content", ""))
        return text

    async def aclose(self) -> None:
        """Close the connection, and stop the engine if this backend created it."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._own_engine:
            await anyio.to_thread.run_sync(self.engine.close)

    async def __aenter__(self) -> LocalBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


_PROBE_TEXT = "\u2063swarm prefix probe\u2063"
"""Stands in for the last user message's text to find where a prompt's fixed part ends."""


def _timings(
    data: dict[str, Any], began: float, startup: EngineStartup | None, queue_s: float, work: PrefixWork
) -> Timings:
    """The call's :class:`~agent_swarm.swarm.backend.Timings` from llama.cpp's ``timings`` and our own clocks."""
    t = data.get("timings")
    t = t if isinstance(t, dict) else {}
    return Timings(
        call_s=time.perf_counter() - began,
        startup_s=startup.total_s if startup is not None else 0.0,
        hash_check_s=startup.hash_check_s if startup is not None else 0.0,
        model_load_s=startup.model_load_s if startup is not None else 0.0,
        queue_s=queue_s,
        prefill_tokens=int(t.get("prompt_n") or 0) + work.prefill_tokens,
        cached_tokens=max(0, int(t.get("cache_n") or 0) - work.prefill_tokens),  # the primed prefix is prefill
        restored_tokens=work.restored_tokens,
        prefill_s=float(t.get("prompt_ms") or 0.0) / 1e3 + work.prefill_s,
        decode_tokens=int(t.get("predicted_n") or 0),
        decode_s=float(t.get("predicted_ms") or 0.0) / 1e3,
    )


def _logprob(entry: Any) -> float:
    if isinstance(entry, dict):
        lp = entry.get("logprob")
        if isinstance(lp, int | float):
            return float(lp)
        p = entry.get("prob")
        if isinstance(p, int | float) and p > 0:
            return math.log(p)
    return float("-inf")
