"""A backend for any OpenAI-compatible chat-completions server: vLLM, llama.cpp, SGLang, OpenAI.

What it adds over a plain client, all outside the agent loop (features wrap the loop, never grow
inside it):

* **exact tokens**: with vLLM it asks for ``return_token_ids`` and ``return_tokens_as_token_ids``
  and records the server's ``prompt_token_ids`` / ``token_ids``; with llama.cpp it reads the sampled
  ids from ``logprobs.content[].id`` and gets the prompt ids from the server's own ``/apply-template``
  and ``/tokenize`` endpoints (same template, same tokenizer). Ids are never rebuilt by a client-side
  tokenizer;
* **tools**: tools, ``tool_choice`` and parallel tool calls go over the wire; when the server's
  parser found nothing (small models write fenced or bare JSON), the text is parsed tolerantly
  (:mod:`agent_swarm.swarm.backends.toolparse`); broken calls in the text set ``Completion.parse_error``, a call
  the server returned with broken arguments stays in the turn with its ``error``;
* **faults**: retries with exponential backoff (and ``Retry-After``) on 429, 5xx, connection
  errors, timeouts and 200s whose body is not a JSON object; a total per-attempt timeout; a
  concurrency cap per endpoint that only requests in flight hold (never a backoff sleep). What survives the retries is
  raised as :class:`~agent_swarm.swarm.errors.BackendError`, which the runtime records as the calling agent's
  failure;
* **rate limits and refusals** (:mod:`agent_swarm.swarm.backends.gate`): an optional launch ramp (a burst, then a
  rate); a 429 suspends the whole endpoint for its backoff, announced as an ``EndpointWaiting`` event;
  a 401, 403 or spent quota (402, or 429 ``insufficient_quota``) closes the endpoint for the run, and
  every call to it fails at once with :class:`~agent_swarm.swarm.errors.BackendRefusedError` instead of idling.

The ``httpx.AsyncClient`` is injectable: tests pass a real loopback server's URL or an
``httpx.MockTransport``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import anyio.lowlevel
import httpx

from agent_swarm.swarm.backend import Completion, FinishReason, ModelRequest, ToolSpec, Usage
from agent_swarm.swarm.backends.gate import EndpointGate, LaunchRamp, endpoint_gate
from agent_swarm.swarm.backends.toolparse import (
    action_schema,
    constrained_answer,
    new_call_id,
    parse_arguments,
    parse_tool_calls,
)
from agent_swarm.swarm.errors import (
    BackendError,
    BackendRefusedError,
    BackendTimeoutError,
    BackendUnavailableError,
    ConfigError,
    ModelOutputError,
)
from agent_swarm.swarm.limits import Limiter, endpoint_key, limiter
from agent_swarm.swarm.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolMessage,
    to_openai_messages,
)

__all__ = ["Flavour", "LaunchRamp", "OpenAIBackend", "RetryPolicy", "tools_system_prompt", "with_tools_in_prompt"]

_T = TypeVar("_T")

Flavour = Literal["auto", "vllm", "llamacpp", "openai"]
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_REFUSED_STATUS = frozenset({401, 402, 403})
_QUOTA_MARKS = ("insufficient_quota", "billing_hard_limit", "quota_exceeded")
"""Codes in a 429's body that mean the quota is spent (waiting cannot help), not a rate limit."""


class RetryPolicy:
    """Exponential backoff with jitter: ``base * 2**attempt`` capped at ``max_delay`` seconds; a
    server's ``Retry-After`` is honoured as sent, up to ``max_retry_after`` seconds."""

    def __init__(
        self, max_retries: int = 4, base_delay: float = 0.5, max_delay: float = 8.0, max_retry_after: float = 60.0
    ) -> None:
        if max_retries < 0 or base_delay < 0 or max_delay < 0 or max_retry_after < 0:
            raise ConfigError(
                f"retry settings must be >= 0, got {max_retries=}, {base_delay=}, {max_delay=}, {max_retry_after=}"
            )
        self.max_retries = max_retries
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.max_retry_after = max_retry_after

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        d: float = min(self.base_delay * (2**attempt), self.max_delay)
        return d * (0.5 + random.random() / 2)


def tools_system_prompt(tools: tuple[ToolSpec, ...] | list[ToolSpec]) -> str:
    """The hermes-style tools block, for chat templates that do not render tools themselves."""
    lines = "\n".join(json.dumps(t.to_openai(), ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


def with_tools_in_prompt(messages: tuple[Message, ...], tools: tuple[ToolSpec, ...]) -> list[dict[str, Any]]:
    """Messages for a template without tool support: tools go into the system prompt, tool calls and
    results become plain text in the hermes format the prompt asks for."""
    block = tools_system_prompt(tools) if tools else ""
    out: list[dict[str, Any]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            body = m.content
            for c in m.tool_calls:
                if c.raw_arguments is not None:  # what the model wrote, unparsed: back verbatim
                    call = f'{{"name": {json.dumps(c.name, ensure_ascii=False)}, "arguments": {c.raw_arguments}}}'
                else:
                    call = json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
                body += f"{chr(10) if body else ''}<tool_call>\n{call}\n</tool_call>"
            out.append({"role": "assistant", "content": body})
        elif isinstance(m, ToolMessage):
            out.append({"role": "user", "content": f"<tool_response>\n{m.content}\n</tool_response>"})
        else:
            out.append(m.to_openai())
    if block:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


class OpenAIBackend:
    """Chat completions against an OpenAI-compatible endpoint.

    Args:
        base_url: the server root, with or without ``/v1`` (``http://127.0.0.1:8000``).
        model: the served model name sent in each request and reported on records.
        flavour: ``vllm`` sends vLLM's token-id extras; ``llamacpp`` reads ids from logprobs and the
            tokenizer endpoints; ``openai`` sends only standard fields (and gets no token ids);
            ``auto`` sends the vLLM extras and takes ids from whichever fields come back.
        client: an ``httpx.AsyncClient`` to use (the caller owns it); by default one is created.
        timeout: seconds allowed for one request (connect + response).
        max_concurrency: requests in flight to this endpoint at once; more wait their turn.
        retry: backoff policy for 429 / 5xx / connection errors / timeouts.
        ramp: a launch ramp for this endpoint (``LaunchRamp(burst=5, per_second=1.4)``: 5 requests
            at once, then 1.4 a second); ``None`` starts requests as the concurrency cap allows.
        tools_in_prompt: render tools into the system prompt (for chat templates without tool support).
        constrain_actions: ask for a JSON-schema-constrained action (``response_format``) when tools
            are offered (llama.cpp honours it; vLLM via structured outputs).
        top_logprobs: alternatives per sampled token to request (0 = only the sampled token's).
        extra_body: extra fields merged into every request body.
    """

    def __init__(
        self,
        base_url: str,
        model: str = "default",
        *,
        flavour: Flavour = "auto",
        api_key: str | None = None,
        client: httpx.AsyncClient | None = None,
        timeout: float = 120.0,
        max_concurrency: int = 8,
        retry: RetryPolicy | None = None,
        ramp: LaunchRamp | None = None,
        tools_in_prompt: bool = False,
        constrain_actions: bool = False,
        top_logprobs: int = 0,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"base_url must start with http:// or https://, got {base_url!r}")
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if timeout <= 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        root = base_url.rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        self._model = model
        """The served model name; empty means: ask the server's ``/v1/models`` on first use."""
        self.flavour: Flavour = flavour
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.ramp = ramp
        self._api_key = api_key
        self._gate: EndpointGate | None = None
        self._gate_token: object = None
        self.max_concurrency = max_concurrency
        self.tools_in_prompt = tools_in_prompt
        self.constrain_actions = constrain_actions
        self.top_logprobs = top_logprobs
        self.extra_body = dict(extra_body or {})
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client
        self._own_client = client is None
        self._client_token: object = None

    @property
    def model(self) -> str:
        return self._model

    provider_name = "openai"
    """Traced as ``gen_ai.provider.name`` (what the official OpenAI instrumentation reports)."""

    @property
    def base_url(self) -> str:
        """The server root; traced as ``server.address``/``server.port`` on chat spans."""
        return self.root

    async def aclose(self) -> None:
        """Close the HTTP client if this backend created it."""
        if self._client is not None and self._own_client:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> OpenAIBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing -----------------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._own_client:
            # A client's connection pool belongs to one event loop; make one per loop (run_sync, tests).
            token = anyio.lowlevel.current_token()
            if self._client is None or self._client_token != token:
                # As many pooled connections as the limiter lets requests run: a request holding a
                # slot never waits for a connection (httpx's default pool is 100).
                limits = httpx.Limits(max_connections=max(100, self.max_concurrency))
                self._client = httpx.AsyncClient(timeout=self.timeout, limits=limits)
                self._client_token = token
        assert self._client is not None
        return self._client

    def limiter(self) -> Limiter:
        """The endpoint's request cap: shared by every backend on this server (see :mod:`agent_swarm.swarm.limits`:
        one per event loop by default, one per cluster under a cluster provider)."""
        return limiter(endpoint_key(self.root), self.max_concurrency)

    def gate(self) -> EndpointGate:
        """The endpoint's gate (ramp, 429 suspension, refusal): shared by every backend on this server
        with this API key in this event loop (:func:`agent_swarm.swarm.backends.gate.endpoint_gate`)."""
        token = anyio.lowlevel.current_token()
        if self._gate is None or self._gate_token != token:
            self._gate, self._gate_token = endpoint_gate(self.root, self._api_key, self.ramp), token
        return self._gate

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with retries; returns the decoded JSON object or raises a BackendError.

        Each attempt holds one of the endpoint's :meth:`limiter` slots only while its request is in
        flight, and is cut off after ``timeout`` seconds in total (httpx's own timeout bounds each
        read, so a server that trickles bytes could hold a slot forever). Backoff sleeps between
        attempts hold no slot. Retried: 429/5xx, connection errors, timeouts, and a 200 whose body
        is not a JSON object (a proxy's error page, a truncated body).
        """
        url = f"{self.root}{path}"
        return await self._retrying(url, lambda: self._attempt(url, body))

    async def post_stream(
        self, path: str, body: dict[str, Any], keep_going: Callable[[dict[str, Any]], bool]
    ) -> list[dict[str, Any]]:
        """POST a streaming request (server-sent events) and return its ``data:`` objects in order.

        Reading stops at the server's last event (``"stop": true`` or ``[DONE]``), or as soon as
        ``keep_going`` returns ``False`` for an event: the connection is then closed, which ends the
        server's generation (llama.cpp stops a slot whose client went away). Slots, the deadline and
        retries are those of :meth:`post_json`; a stream broken part-way is retried from the start
        (nothing of it was returned), one that is not JSON events fails like a bad body.
        """
        url = f"{self.root}{path}"
        return await self._retrying(url, lambda: self._stream_attempt(url, body, keep_going))

    async def _retrying(self, url: str, attempt: Callable[[], Awaitable[_T | _Failure]]) -> _T:
        """``attempt()`` until it succeeds, with the retry policy's backoff between failures; each
        attempt first passes the endpoint's gate. A 429's backoff suspends the whole endpoint (the
        next pass through the gate waits it out); a refusal closes it."""
        attempts = self.retry.max_retries + 1
        failure = _Failure("unavailable", "")
        gate = self.gate()
        for i in range(attempts):
            await gate.enter()
            out = await attempt()
            if not isinstance(out, _Failure):
                return out
            failure = out
            if failure.kind == "refused":
                gate.refuse(failure.status, failure.message)
                raise BackendRefusedError(gate.refused or failure.message)
            if failure.kind == "fatal":
                raise BackendError(failure.message)
            delay = self.retry.delay(i, failure.retry_after)
            if failure.kind == "rate_limited":
                gate.suspend(delay, failure.message)
            elif i + 1 < attempts:
                await anyio.sleep(delay)
        msg = f"{url} failed after {attempts} attempt(s); last error: {failure.message}"
        if failure.kind == "timeout":
            raise BackendTimeoutError(msg + "; raise the backend timeout or lower max_tokens")
        if failure.kind == "body":
            raise BackendError(msg + "; check that base_url points at an OpenAI-compatible server")
        if failure.kind == "rate_limited":
            raise BackendUnavailableError(
                msg + "; the server kept rate-limiting: lower max_concurrency, set a launch ramp, or raise max_retries"
            )
        raise BackendUnavailableError(msg + "; check that the server is up and not overloaded")

    async def _stream_attempt(
        self, url: str, body: dict[str, Any], keep_going: Callable[[dict[str, Any]], bool]
    ) -> list[dict[str, Any]] | _Failure:
        """One streaming request: its events, or why there are none."""
        async with self.limiter():
            if (closed := self._closed()) is not None:  # refused while this request waited for a slot
                return closed
            with anyio.move_on_after(self.timeout):
                try:
                    async with self._http().stream(
                        "POST", url, json=body, headers=self._headers, timeout=self.timeout
                    ) as resp:
                        if resp.status_code == 200:
                            out = await _read_events(resp, keep_going)
                        else:  # a non-200 is always a failure (retryable or not, as for post_json)
                            await resp.aread()
                            failed = _decode(url, resp)
                            out = failed if isinstance(failed, _Failure) else _Failure("body", "no event stream")
                    _release(resp)  # after the stream is closed: releasing it before would leak the connection
                    return out
                except httpx.TimeoutException as exc:
                    return _Failure("timeout", f"no answer within {self.timeout:g} s ({type(exc).__name__})")
                except httpx.TransportError as exc:
                    return _Failure("unavailable", f"connection failed: {type(exc).__name__}: {exc}")
        return _Failure("timeout", f"no complete answer within {self.timeout:g} s")

    async def _attempt(self, url: str, body: dict[str, Any]) -> dict[str, Any] | _Failure:
        """One request: a limiter slot and a total deadline for exactly as long as it is in flight."""
        async with self.limiter():
            if (closed := self._closed()) is not None:  # refused while this request waited for a slot
                return closed
            with anyio.move_on_after(self.timeout):
                try:
                    resp = await self._http().post(url, json=body, headers=self._headers, timeout=self.timeout)
                except httpx.TimeoutException as exc:
                    return _Failure("timeout", f"no answer within {self.timeout:g} s ({type(exc).__name__})")
                except httpx.TransportError as exc:
                    return _Failure("unavailable", f"connection failed: {type(exc).__name__}: {exc}")
                try:
                    return _decode(url, resp)
                finally:
                    _release(resp)
        return _Failure("timeout", f"no complete answer within {self.timeout:g} s")

    def _closed(self) -> _Failure | None:
        gate = self.gate()
        return None if gate.refused is None else _Failure("refused", gate.refused, status=gate.refused_status)

    # -- the request --------------------------------------------------------------------------------

    def _messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        if self.tools_in_prompt:
            return with_tools_in_prompt(request.messages, request.tools if request.tool_choice != "none" else ())
        return to_openai_messages(request.messages)

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The chat-completions body for ``request`` (public so tests and tools can inspect it)."""
        s = request.sampling
        body: dict[str, Any] = {
            "model": self._model,
            "messages": self._messages(request),
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
        }
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        if s.logprobs:
            body["logprobs"] = True
            # llama.cpp returns no logprobs (and so no token ids) for top_logprobs=0.
            body["top_logprobs"] = (
                self.top_logprobs if self.flavour in ("vllm", "openai") else max(1, self.top_logprobs)
            )
        if self.flavour == "llamacpp":
            # llama.cpp's default top_k=40 / min_p=0.05 would sample from a truncated distribution
            # while reporting untruncated logprobs; RL ratios need the sampler to match the policy.
            body["top_k"] = 0
            body["min_p"] = 0.0
        offered = request.tools and request.tool_choice != "none"
        if offered and not self.tools_in_prompt and not self.constrain_actions:
            body["tools"] = [t.to_openai() for t in request.tools]
            body["tool_choice"] = request.tool_choice
            body["parallel_tool_calls"] = request.parallel_tool_calls
        if self.constrain_actions and request.tools:
            # Tools disabled (the final turn): the schema allows only {"answer": ...}.
            schema = action_schema(
                request.offered(),  # allowed_tools narrows the schema
                allow_answer=request.tool_choice != "required",
                one_call=not request.parallel_tool_calls,
            )
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "action", "schema": schema},
            }
        if self.flavour in ("vllm", "auto"):
            body["return_token_ids"] = True
            if s.logprobs:
                body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    async def resolve_model(self) -> str:
        """The served model's name: the one given, else the first of the server's ``/v1/models``."""
        if self._model:
            return self._model
        url = f"{self.root}/v1/models"
        try:
            with anyio.fail_after(self.timeout):
                resp = await self._http().get(url, headers=self._headers, timeout=self.timeout)
        except (httpx.TimeoutException, TimeoutError):
            raise BackendTimeoutError(
                f"no model name was given and {url} did not answer within {self.timeout:g} s; "
                "check that the server is up, or pass --model NAME"
            ) from None
        except httpx.TransportError as exc:
            raise BackendUnavailableError(
                f"no model name was given and {url} could not be reached: {type(exc).__name__}: {exc}; "
                "check --base-url and that the server is up"
            ) from None
        if resp.status_code != 200:
            raise BackendError(
                f"no model name was given and {url} answered HTTP {resp.status_code}: {resp.text[:200]!r}; "
                "pass --model NAME"
            )
        try:
            models = resp.json().get("data")
            first = models[0].get("id") if isinstance(models, list) and models else None
        except (ValueError, AttributeError):
            raise BackendError(
                f"no model name was given and {url} did not answer with a model list: {resp.text[:200]!r}; "
                "check that base_url points at an OpenAI-compatible server, or pass --model NAME"
            ) from None
        if not isinstance(first, str) or not first:
            raise BackendError(f"no model name was given and {url} did not list one; pass --model NAME")
        self._model = first
        return first

    async def complete(self, request: ModelRequest) -> Completion:
        if not self._model:
            await self.resolve_model()
        body = self.build_body(request)
        data = await self.post_json("/v1/chat/completions", body)
        completion = self._parse(request, data)
        if completion.prompt_token_ids is None and self.flavour in ("llamacpp", "auto") and completion.token_ids:
            ids = await self._prompt_ids_from_server(body, completion.usage.prompt_tokens)
            if ids is not None:
                completion = dataclasses.replace(completion, prompt_token_ids=ids)
        return completion

    async def _prompt_ids_from_server(self, body: dict[str, Any], expected: int) -> tuple[int, ...] | None:
        """llama.cpp: render with the server's own template, tokenize with its own tokenizer.

        Returns ``None`` (never a guess) when the endpoints are missing or the count disagrees with
        the server's reported ``prompt_tokens``.
        """
        keys = ("messages", "tools", "tool_choice", "parallel_tool_calls", "response_format")
        try:
            tpl = await self.post_json("/apply-template", {k: body[k] for k in keys if k in body})
            prompt = tpl.get("prompt")
            if not isinstance(prompt, str):
                return None
            tok = await self.post_json("/tokenize", {"content": prompt, "add_special": True, "parse_special": True})
        except BackendError:
            return None
        ids = tok.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            return None
        if expected and len(ids) != expected:
            return None
        return tuple(ids)

    def _parse(self, request: ModelRequest, data: dict[str, Any]) -> Completion:
        try:
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (KeyError, IndexError, TypeError):
            raise BackendError(
                f"server answer has no choices[0]: {json.dumps(data)[:300]}; is this an OpenAI-compatible server?"
            ) from None
        text = message.get("content") or ""
        if not isinstance(text, str):
            raise BackendError(f"choices[0].message.content is not a string: {message.get('content')!r}")
        calls = _server_calls(message.get("tool_calls"))
        parse_error: str | None = None
        known = [t.name for t in request.tools]
        if not calls and parse_error is None and request.tools and request.tool_choice != "none" and text:
            parsed = parse_tool_calls(text, known, truncated=choice.get("finish_reason") == "length")
            calls = list(parsed.tool_calls)
            parse_error = parsed.parse_error
            if calls or parsed.answer is not None:
                text = parsed.text
        elif calls:
            text = text.strip()
        elif self.constrain_actions and request.tools and request.tool_choice == "none":
            text = constrained_answer(text)

        token_ids, logprobs = _tokens(choice)
        prompt_ids = data.get("prompt_token_ids")
        usage_raw = data.get("usage") or {}
        usage = Usage(
            prompt_tokens=int(usage_raw.get("prompt_tokens") or (len(prompt_ids) if prompt_ids else 0)),
            completion_tokens=int(usage_raw.get("completion_tokens") or (len(token_ids) if token_ids else 0)),
            cached_tokens=_cached_tokens(usage_raw),
        )
        finish = _finish(choice.get("finish_reason"), bool(calls))
        return Completion(
            text=text,
            tool_calls=tuple(calls),
            finish_reason=finish,
            usage=usage,
            model=self._model if self.flavour == "llamacpp" else str(data.get("model") or self._model),
            prompt_token_ids=tuple(int(i) for i in prompt_ids) if isinstance(prompt_ids, list) else None,
            token_ids=token_ids,
            logprobs=logprobs,
            parse_error=parse_error,
            weight_version=_weight_version(choice),
        )


def _server_calls(raw_calls: Any) -> list[ToolCall]:
    """The server's parsed tool calls. A call that does not parse stays in its place with ``error``
    set and its arguments text in ``raw_arguments``: the runtime answers it with that error as the
    call's tool message, and the call goes back to the model exactly as the server returned it. That
    holds when no call of the turn parsed too (the server did split them out: dropping them, or
    answering with a user message, would change what the model is told it said and make the next
    prompt's token ids drift)."""
    calls: list[ToolCall] = []
    for raw in raw_calls if isinstance(raw_calls, list) else []:
        raw = raw if isinstance(raw, dict) else {"function": raw}
        fn: dict[str, Any] = raw["function"] if isinstance(raw.get("function"), dict) else {}
        name, cid = fn.get("name"), str(raw.get("id") or new_call_id())
        try:
            if not isinstance(name, str) or not name:
                raise ModelOutputError("a tool call has no function name")
            calls.append(ToolCall(id=cid, name=name, arguments=parse_arguments(fn.get("arguments"), name)))
        except ModelOutputError as exc:
            wrote = json.dumps(raw, ensure_ascii=False)
            wrote = wrote if len(wrote) <= 300 else wrote[:300] + "…"
            bad = name if isinstance(name, str) else ""
            args = fn.get("arguments")
            raw_args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
            calls.append(ToolCall(id=cid, name=bad, error=f"{exc}; the call was: {wrote}", raw_arguments=raw_args))
    return calls


@dataclass(frozen=True, slots=True)
class _Failure:
    """Why one attempt failed: ``kind`` decides retry (all but ``fatal``) and the final error class."""

    kind: Literal["timeout", "unavailable", "rate_limited", "body", "fatal", "refused"]
    message: str
    retry_after: float | None = None
    status: int = 0


def _decode(url: str, resp: httpx.Response) -> dict[str, Any] | _Failure:
    """The JSON object of a 200, or why there is none (a non-retryable status is ``fatal``)."""
    if resp.status_code == 200:
        try:
            data = resp.json()
        except ValueError:
            return _Failure("body", f"HTTP 200 with a body that is not JSON: {resp.text[:200]!r}")
        if not isinstance(data, dict):
            return _Failure("body", f"HTTP 200 with JSON that is not an object: {resp.text[:200]!r}")
        return data
    code, detail = resp.status_code, resp.text[:300]
    if code in _REFUSED_STATUS or (code == 429 and any(m in detail for m in _QUOTA_MARKS)):
        why = "quota is spent" if code in (402, 429) else "credentials or permissions were refused"
        return _Failure(
            "refused",
            f"{url} refused service with HTTP {code} ({why}): {detail}; it takes no more requests in this run: "
            "check the API key, its permissions and its quota, then run again (swarm rollout retries these "
            "episodes on resume)",
            status=code,
        )
    if code not in _RETRY_STATUS:
        return _Failure("fatal", f"{url} rejected the request with HTTP {code}: {detail}")
    kind: Literal["rate_limited", "unavailable"] = "rate_limited" if code == 429 else "unavailable"
    return _Failure(kind, f"HTTP {code}: {detail}", _retry_after(resp.headers.get("retry-after")), status=code)


async def _read_events(
    resp: httpx.Response, keep_going: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]] | _Failure:
    """The ``data:`` objects of a server-sent-event stream, up to its last event or the first one
    ``keep_going`` refuses."""
    events: list[dict[str, Any]] = []
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        try:
            event = json.loads(payload)
        except ValueError:
            return _Failure("body", f"an event that is not JSON: {payload[:200]!r}")
        if not isinstance(event, dict):
            return _Failure("body", f"an event that is not a JSON object: {payload[:200]!r}")
        events.append(event)
        if event.get("stop") is True or not keep_going(event):
            break
    return events or _Failure("body", "the stream ended without an event")


def _release(resp: httpx.Response) -> None:
    """Break the cycle httpx (0.28) builds around every response (``response.stream`` is a
    ``BoundAsyncStream`` that holds the response), so a read response, its body and its request
    (the whole prompt) are freed as soon as we drop them instead of at the next cyclic-GC pass,
    which the CLI's GC settings make rare: at a 1,024-way fan-out they piled up (bench/README.md,
    Soak). The body is already read and the stream closed: nothing reads the stream again."""
    resp.stream = httpx.ByteStream(b"")


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _cached_tokens(usage: dict[str, Any]) -> int:
    """Prompt tokens the server served from its cache (OpenAI/vLLM ``prompt_tokens_details``)."""
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return int(cached) if isinstance(cached, int) and cached > 0 else 0


def _finish(raw: Any, has_calls: bool) -> FinishReason:
    if has_calls:
        return "tool_calls"
    if raw == "length":
        return "length"
    return "stop"


def _weight_version(choice: dict[str, Any]) -> str | None:
    wv = choice.get("weight_versions")
    if isinstance(wv, list) and wv:
        last = wv[-1]
        if isinstance(last, dict):
            v = last.get("weight_version", last.get("version"))
            return None if v is None else str(v)
        return str(last)
    return None


def _tokens(choice: dict[str, Any]) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """Sampled ids and their logprobs as the server reported them (vLLM or llama.cpp shapes)."""
    content = ((choice.get("logprobs") or {}).get("content")) or []
    logprobs: tuple[float, ...] | None = None
    ids_from_lp: list[int] = []
    if content:
        lps = []
        for entry in content:
            lp = entry.get("logprob")
            lps.append(float(lp) if isinstance(lp, int | float) and not math.isnan(lp) else float("-inf"))
            tid = entry.get("id")
            if isinstance(tid, int):
                ids_from_lp.append(tid)
            else:
                tok = entry.get("token")
                if isinstance(tok, str) and tok.startswith("token_id:"):
                    ids_from_lp.append(int(tok.split(":", 1)[1]))
        logprobs = tuple(lps)
    token_ids = choice.get("token_ids")
    if isinstance(token_ids, list):
        ids = tuple(int(i) for i in token_ids)
    elif content and len(ids_from_lp) == len(content):
        ids = tuple(ids_from_lp)
    else:
        return None, logprobs
    if logprobs is not None and len(logprobs) != len(ids):
        logprobs = None  # never pair misaligned lists; the trajectory layer refuses incomplete turns
    return ids, logprobs
