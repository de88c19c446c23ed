"""The sub-agent loop: one state object, one step function returning a tagged next step.

A sub-agent runs on its own (frozen) backend with its own system prompt and tool allow-list until it
answers without tool calls, spends its step cap, times out, fails or is cancelled. Every ending is a
:class:`~agent_swarm.swarm.records.SubagentResult`; only cancellation propagates (after the result is recorded),
so a failing sub-agent never cancels its siblings.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import anyio

from agent_swarm.subagents.coach import NoStepCoach, StepCoach, StepView
from agent_swarm.subagents.turns import call_model, call_signature, repeat_notice, retry_malformed, run_tool_calls
from agent_swarm.swarm.backend import (
    Completion,
    ModelBackend,
    ModelRequest,
    SamplingParams,
    ToolSpec,
    Usage,
    context_window,
)
from agent_swarm.swarm.backends.toolparse import clean_answer
from agent_swarm.swarm.context import EXHAUSTED_NOTICE, excerpt, fit_context, prompt_limit
from agent_swarm.swarm.errors import BackendError, ErrorType
from agent_swarm.swarm.events import Observer, SubagentStep
from agent_swarm.swarm.limits import Limiter
from agent_swarm.swarm.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.records import AgentDefinition, AgentStatus, ContextCut, StepRecord, SubagentResult, ToolResult
from agent_swarm.swarm.tracing import SpanHandle, Telemetry, attr
from agent_swarm.tools.registry import Tool, ToolContext

__all__ = [
    "StepBudget",
    "SubagentRun",
    "SubagentRuntime",
    "partial_report",
    "run_subagents",
]


class StepBudget(Protocol):
    """A sub-agent's share of the episode's tree-wide budgets (``agent_swarm.orchestrator.budgets.Share``)."""

    def spend(self, usage: Usage) -> None:
        """Charge one model call."""
        ...

    def exhausted(self) -> str | None:
        """Why another step would overrun the share, or ``None`` while one fits."""
        ...


_NO_USAGE = Usage()
_COMPLETED = AgentStatus.COMPLETED
_INTERRUPTED = "interrupted {} (the sub-agent's timeout or wall-time budget share, or the episode's cancellation)"


PARTIAL_RESULTS = 3
"""Tool results a partial report keeps (the latest ones)."""
PARTIAL_CHARS = 1200
"""Characters kept of each tool result in a partial report (head and tail)."""


def partial_report(messages: Sequence[Message], status: AgentStatus) -> str:
    """The report of an agent that ended before its answer, built from its transcript: the last thing
    it wrote (beside a tool call, or a malformed attempt), then its latest successful tool results as
    head/tail excerpts. Never empty: an agent that found nothing says so."""
    said = next((m.content for m in reversed(messages) if isinstance(m, AssistantMessage) and m.content), "")
    results = [m for m in messages if isinstance(m, ToolMessage) and not m.is_error][-PARTIAL_RESULTS:]
    said = clean_answer(said)
    if not results:
        return said or f"(no findings: the sub-agent ended {status.value} before any tool returned a result)"
    parts = [said] if said else []
    parts.append(f"(the sub-agent ended {status.value} before its answer; its latest tool results follow)")
    parts.extend(f"[{m.name} result]\n{excerpt(m.content, PARTIAL_CHARS)}" for m in results)
    return "\n".join(parts)


@functools.lru_cache(maxsize=1024)
def _system_message(prompt: str) -> SystemMessage:
    """Frozen messages are shared: a 1,000-way fan-out of one sub-agent type holds one system prompt."""
    return SystemMessage(content=prompt)


@dataclass(frozen=True, slots=True)
class SubagentRuntime:
    """What all sub-agents of an episode share (backends are frozen; never the trained policy)."""

    backend: ModelBackend
    tools: Mapping[str, Tool]
    telemetry: Telemetry
    episode_id: str = ""
    sampling: SamplingParams = field(default_factory=SamplingParams)
    clock: Callable[[], float] = time.perf_counter
    workspace: Path | None = None
    max_malformed: int = 2
    max_completion_tokens: int | None = None
    observer: Observer | None = None
    # The tool choice, notices and calls run at each step (agent_swarm.subagents.coach): a small model's tactics.
    coach: StepCoach = field(default_factory=NoStepCoach)
    # The context window in tokens (the config's context_tokens); None: what the backend says, if anything.
    context_tokens: int | None = None
    # (tool allow-list, sub-agent timeout) -> (tools, specs), shared by every instance of a sub-agent type.
    _granted: dict[tuple[tuple[str, ...], float | None], tuple[Mapping[str, Tool], tuple[ToolSpec, ...]]] = field(
        default_factory=dict
    )
    # The context window the steps fit their prompts to: context_tokens, else the backend's (read once).
    window: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "window", self.context_tokens or context_window(self.backend))

    def granted(
        self, names: tuple[str, ...], within: float | None = None
    ) -> tuple[Mapping[str, Tool], tuple[ToolSpec, ...]]:
        """The tools an allow-list grants here and their specs (built once per allow-list and timeout).

        ``within``: the timeout of the sub-agent that calls them. A tool whose own timeout is no
        shorter runs without one: the sub-agent's deadline (at most ``within`` after it started, so no
        later than any call's own) always ends the call first, as its timeout, so a cancel scope and an
        event-loop timer per call would buy nothing.
        """
        key = (names, within)
        hit = self._granted.get(key)
        if hit is None:
            tools = {n: _under(self.tools[n], within) for n in names if n in self.tools}
            hit = self._granted[key] = (tools, tuple(t.spec for t in tools.values()))
        return hit


def _under(tool: Tool, within: float | None) -> Tool:
    """``tool`` as a sub-agent with timeout ``within`` runs it (see :meth:`SubagentRuntime.granted`)."""
    if within is None or tool.timeout_s is None or tool.timeout_s < within:
        return tool
    return tool.replace(timeout_s=None)


@dataclass(frozen=True, slots=True)
class _Continue:
    pass


@dataclass(frozen=True, slots=True)
class _Finish:
    report: str
    status: AgentStatus = AgentStatus.COMPLETED
    error: str | None = None


@dataclass(frozen=True, slots=True)
class _Fail:
    status: AgentStatus
    error: str
    error_type: str


_Next = _Continue | _Finish | _Fail
_CONTINUE = _Continue()
_NO_SCOPE = contextlib.nullcontext()


@dataclass(slots=True)
class SubagentRun:
    """One sub-agent instance: its state, and the loop that advances it.

    The caller keeps the object, so when the episode is cancelled mid-run it can still build the
    ``cancelled`` result from :meth:`result` with everything the agent did so far.
    """

    definition: AgentDefinition
    task: str
    agent_id: str
    stage: int
    step_cap: int
    timeout_s: float | None
    rt: SubagentRuntime
    # Defaults are shared constants, not factories: __post_init__ sets the real values once.
    messages: list[Message] = field(default=None)  # type: ignore[arg-type]
    steps: list[StepRecord] = field(default=None)  # type: ignore[arg-type]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    malformed: int = 0
    _failed: set[str] | None = None  # signatures of failed calls (made on the first failure)
    started: float = 0.0
    _tool_specs: tuple[ToolSpec, ...] = ()
    _tools: Mapping[str, Tool] = field(default=None)  # type: ignore[arg-type]
    _ctx: ToolContext = field(default=None)  # type: ignore[assignment]
    # Its place among its stage's sub-agents, when the caller knows (traced, for samplers of wide stages).
    index: int | None = None
    width: int | None = None
    # Its share of the episode's tree-wide budgets: spent after each model call, checked before each step.
    budget: StepBudget | None = None
    # When its wall-time budget share ends (the episode clock): still running then, it ends budget_exhausted.
    wall_deadline: float | None = None
    # Set by a runner that may cut it (hedging) before run_subagents runs it: cancelling it ends the
    # run quietly (see :meth:`cut`). Other runs have none: a scope per sub-agent is not free.
    scope: anyio.CancelScope | None = None
    # Messages shortened to fit the context (agent_swarm.swarm.context); set: the next step is its last
    # (context_exhausted).
    _cuts: tuple[ContextCut, ...] = ()
    _exhausted: str | None = None

    def __post_init__(self) -> None:
        self.messages = [_system_message(self.definition.system_prompt), UserMessage(content=self.task)]
        self.steps = []
        self._tools, self._tool_specs = self.rt.granted(self.definition.tools, self.timeout_s)
        self._ctx = ToolContext(episode_id=self.rt.episode_id, agent_id=self.agent_id, workspace=self.rt.workspace)

    async def run(self) -> SubagentResult:
        """Run to an ending. Cancellation propagates; every other ending is a result."""
        rt = self.rt
        self.started = rt.clock()
        with rt.telemetry.agent(
            name=self.definition.name,
            agent_id=self.agent_id,
            model=rt.backend.model,
            episode_id=rt.episode_id,
            index=self.index,
            width=self.width,
        ) as span:
            outcome: _Finish | _Fail | None = None
            share = None if self.wall_deadline is None else max(self.wall_deadline - self.started, 0.0)
            by_share = share is not None and (self.timeout_s is None or share <= self.timeout_s)
            limit = share if by_share else self.timeout_s
            try:
                if limit is None:  # no deadline: no scope
                    outcome = await self._loop()
                else:  # only this scope's deadline means a timeout; a cancellation from outside propagates
                    with anyio.move_on_after(limit):
                        outcome = await self._loop()
            except anyio.get_cancelled_exc_class():
                span.set(attr.AGENT_STATUS, AgentStatus.CANCELLED.value)
                raise
            if outcome is None:
                outcome = self._wall_share_spent() if by_share else self._timeout()
            return self._end(span, outcome)

    def cut(self) -> None:
        """End the run from outside, without a result of its own (hedging cuts a straggler, or the
        loser of a run and its copy, and records that result itself). Only a run given a
        :attr:`scope` before :func:`run_subagents` starts it can be cut."""
        if self.scope is not None:
            self.scope.cancel()

    @property
    def usage(self) -> Usage:
        """Tokens spent so far (summed per step; one :class:`Usage` is built when asked for)."""
        if not (self.prompt_tokens or self.completion_tokens):
            return _NO_USAGE
        return Usage(
            prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens, cached_tokens=self.cached_tokens
        )

    def _timeout(self) -> _Fail:
        return _Fail(
            AgentStatus.TIMEOUT,
            f"sub-agent timed out after {self.timeout_s:g}s ({len(self.steps)} steps done)",
            ErrorType.TIMEOUT,
        )

    def _wall_share_spent(self) -> _Fail:
        return _Fail(
            AgentStatus.BUDGET_EXHAUSTED,
            f"budget share reached: its wall-time share is spent: {self.rt.clock() - self.started:.2f} s run, "
            f"its share ended at {self.wall_deadline:.2f} s on the episode clock (started at {self.started:.2f} s; "
            f"{len(self.steps)} steps done)",
            ErrorType.STEP_BUDGET,
        )

    def _end(self, span: SpanHandle, outcome: _Finish | _Fail) -> SubagentResult:
        if isinstance(outcome, _Finish):
            kind = None if outcome.error is None else ErrorType.CONTEXT_EXHAUSTED
            result = self.result(outcome.status, report=outcome.report, error=outcome.error, error_type=kind)
        else:
            result = self.result(outcome.status, error=outcome.error, error_type=outcome.error_type)
            span.fail(outcome.error_type, outcome.error)
        self.rt.telemetry.agent_result(
            span,
            status=result.status.value,
            steps=result.steps,
            input_tokens=result.usage.prompt_tokens,
            output_tokens=result.usage.completion_tokens,
        )
        return result

    def result(
        self,
        status: AgentStatus,
        *,
        report: str | None = None,
        error: str | None = None,
        error_type: str | None = None,
    ) -> SubagentResult:
        """The result as of now (used for normal endings and for cancellation)."""
        if report is None and not self.steps and not self.started:  # never held a slot
            report = f"(not started: it was queued for a free slot when it ended {status.value})"
        elif report is None:  # not finished (timeout, cancellation, a spent budget): keep what it found
            report = partial_report(self.messages, status)
        return SubagentResult(
            agent_id=self.agent_id,
            name=self.definition.name,
            task=self.task,
            status=status,
            steps=len(self.steps),
            report=report,
            error=error,
            error_type=error_type,
            started=self.started,
            ended=self.rt.clock(),
            usage=self.usage,
            model=self.rt.backend.model,
            step_cap=self.step_cap,
            step_records=tuple(self.steps),
            transcript=tuple(self.messages),
            context_cuts=self._cuts,
        )

    async def _loop(self) -> _Finish | _Fail:
        while True:
            if len(self.steps) >= self.step_cap:
                return _Fail(
                    AgentStatus.BUDGET_EXHAUSTED,
                    f"step cap of {self.step_cap} reached before the sub-agent answered",
                    ErrorType.STEP_BUDGET,
                )
            if self.budget is not None and (why := self.budget.exhausted()) is not None:
                return _Fail(AgentStatus.BUDGET_EXHAUSTED, f"budget share reached: {why}", ErrorType.STEP_BUDGET)
            nxt = await self._step()
            if not isinstance(nxt, _Continue):
                return nxt
            limit = self.rt.max_completion_tokens
            if limit is not None and self.completion_tokens >= limit:
                return _Fail(
                    AgentStatus.BUDGET_EXHAUSTED,
                    f"completion-token limit of {limit} reached ({self.completion_tokens} used)",
                    ErrorType.STEP_BUDGET,
                )

    def _record(
        self,
        started: float,
        completion: Completion | None,
        results: tuple[ToolResult, ...] = (),
        error: str | None = None,
    ) -> None:
        usage = completion.usage if completion is not None else _NO_USAGE
        self.steps.append(
            StepRecord(
                agent_id=self.agent_id,
                index=len(self.steps),
                kind="subagent",
                stage=self.stage,
                started=started,
                ended=self.rt.clock(),
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                tool_results=results,
                error=error,
                timings=completion.timings if completion is not None else None,
            )
        )
        if self.rt.observer is not None:
            failed = next((r.content for r in results if r.is_error), None)
            self.rt.observer(
                SubagentStep(
                    agent_id=self.agent_id,
                    step=len(self.steps),
                    tools=tuple(r.call.name for r in results),
                    error=error if error is not None else failed,
                )
            )

    def _request(self) -> ModelRequest:
        """This step's model request, with the tool choice and any notices the coach gives."""
        rt = self.rt
        coach = rt.coach
        view = StepView(
            len(self.steps),
            self.step_cap,
            bool(self._tool_specs),
            isinstance(self.messages[-1], ToolMessage),
            self.task,
        )
        choice = coach.tool_choice(view)
        notices = coach.notices(view, choice)
        if notices:
            self.messages.extend(UserMessage(content=n) for n in notices)
        return ModelRequest(
            messages=tuple(self.messages),
            tools=self._tool_specs,
            sampling=rt.sampling,
            tool_choice=choice,
            parallel_tool_calls=coach.parallel_tool_calls,
            agent_id=self.agent_id,
            agent_name=self.definition.name,
        )

    async def _step(self) -> _Next:
        rt = self.rt
        started = rt.clock()
        request = self._request()
        window = rt.window
        if window is not None:
            fitted = await self._fit(request, window)
            if isinstance(fitted, _Fail):
                return fitted
            request = fitted
        try:
            completion = await call_model(rt.backend, request, rt.telemetry, self.messages)
        except anyio.get_cancelled_exc_class():
            self._record(started, None, error=_INTERRUPTED.format("during its model call"))
            raise
        except Exception as exc:  # a failing model is this agent's failure, never its siblings'
            kind = ErrorType.of(exc)
            self._record(started, None, error=f"{kind}: {exc}")
            what = "model call failed" if isinstance(exc, BackendError) else "model backend raised"
            return _Fail(AgentStatus.FAILED, f"{what}: {kind}: {exc}", kind)
        del request  # its message tuple need not live through the tool calls' awaits (fewer objects the GC sees)
        if self._exhausted is not None:  # its last turn: whatever it says is its report
            self.messages.append(AssistantMessage(content=completion.text))
            self._record(started, completion)
            report = clean_answer(completion.text) or partial_report(self.messages, AgentStatus.CONTEXT_EXHAUSTED)
            return _Finish(report, AgentStatus.CONTEXT_EXHAUSTED, self._exhausted)
        self._spend(completion.usage)
        if completion.parse_error is not None:
            return self._malformed(started, completion)
        if not completion.tool_calls:
            return self._answer(started, completion)
        # The step's tool calls the coach lets through run here, not in a coroutine of their own: one
        # awaitable less between the task and the tool on every step.
        calls, held = self._propose(completion)
        try:
            results = await run_tool_calls(calls, self._tools, self._ctx, rt.telemetry, rt.clock)
        except anyio.get_cancelled_exc_class():  # the model call's tokens are spent: keep the step
            self._record(started, completion, error=_INTERRUPTED.format("while its tool calls ran"))
            raise
        self._observe(started, completion, results, held)
        return _CONTINUE

    def _spend(self, usage: Usage) -> None:
        """Count one model call's tokens against this agent and its budget share."""
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cached_tokens += usage.cached_tokens
        if self.budget is not None:
            self.budget.spend(usage)

    def _malformed(self, started: float, completion: Completion) -> _Next:
        """Record a step whose output did not parse and ask again, or fail once retries run out."""
        rt = self.rt
        self.malformed += 1
        failure = retry_malformed(
            self.messages,
            completion,
            max_tokens=rt.sampling.max_tokens,
            retries=self.malformed,
            max_retries=rt.max_malformed,
        )
        self._record(started, completion, error=f"malformed output: {completion.parse_error}")
        if failure is not None:
            return _Fail(AgentStatus.FAILED, failure, ErrorType.MODEL_OUTPUT)
        return _CONTINUE

    def _answer(self, started: float, completion: Completion) -> _Finish:
        """A step without tool calls: its text is the report (marked when cut off at the token limit)."""
        self.messages.append(AssistantMessage(content=completion.text))
        self._record(started, completion)
        report = clean_answer(completion.text)
        if completion.finish_reason == "length":
            report += f" [cut off at the {self.rt.sampling.max_tokens}-token limit]"
        return _Finish(report)

    async def _fit(self, request: ModelRequest, window: int) -> ModelRequest | _Fail:
        """``request`` fitted to the context (:func:`agent_swarm.swarm.context.fit_context`): old tool results
        shortened and recorded; when even that overflows, the last turn (tools withdrawn, told why),
        or the end when not even that fits."""
        limit = prompt_limit(window, request.sampling.max_tokens)
        fit = await fit_context(self.rt.backend, self.messages, request, limit, turn=len(self.steps))
        self._cuts += tuple(fit.cuts)
        why = f"its conversation outgrew the context of {window} tokens ({fit.tokens} needed)"
        if not fit.fits:
            return _Fail(AgentStatus.CONTEXT_EXHAUSTED, why, ErrorType.CONTEXT_EXHAUSTED)
        if fit.exhausted:
            self._exhausted = f"{why}; it answered from what fits"
            self.messages.append(UserMessage(content=EXHAUSTED_NOTICE))
            return replace(request, messages=tuple(self.messages), tool_choice="none")
        return replace(request, messages=tuple(self.messages)) if fit.cuts else request

    def _propose(self, completion: Completion) -> tuple[Sequence[ToolCall], Mapping[str, tuple[str, str]]]:
        """Add the step's tool calls to the transcript; the calls to run, and those the coach holds back."""
        calls = completion.tool_calls
        self.messages.append(AssistantMessage(content=completion.text, tool_calls=calls))
        held = self.rt.coach.review(calls)
        return ([c for c in calls if c.id not in held] if held else calls), held

    def _observe(
        self,
        started: float,
        completion: Completion,
        results: list[ToolResult],
        held: Mapping[str, tuple[str, str]],
    ) -> None:
        """Show every result of the step's calls to the model (held-back calls answered "not run"), and
        record the step."""
        if held:
            results = _with_held(completion.tool_calls, results, held, self.rt.clock())
        for r in results:
            content = r.content
            if r.is_error and r.call.id not in held:  # a repeated failure is named so
                failed = self._failed if self._failed is not None else set()
                self._failed = failed
                sig = call_signature(r.call)
                content = repeat_notice(content) if sig in failed else content
                failed.add(sig)
            self.messages.append(
                ToolMessage(tool_call_id=r.call.id, name=r.call.name, content=content, is_error=r.is_error)
            )
        self._record(started, completion, tuple(results))


def _with_held(
    calls: Sequence[ToolCall], ran: Sequence[ToolResult], held: Mapping[str, tuple[str, str]], now: float
) -> list[ToolResult]:
    """The turn's results in call order: those that ran, and the held-back calls answered "not run"."""
    by_id = {r.call.id: r for r in ran}
    out = []
    for c in calls:
        if c.id in held:
            message, error_type = held[c.id]
            out.append(
                ToolResult(
                    call=c, content=f"error: {message}", is_error=True, error_type=error_type, started=now, ended=now
                )
            )
        elif c.id in by_id:
            out.append(by_id[c.id])
    return out


async def run_subagents(
    runs: Sequence[SubagentRun],
    limiter: Limiter,
    finished: Callable[[SubagentRun, SubagentResult], None],
    started: Callable[[SubagentRun], None] | None = None,
) -> None:
    """Run one stage's sub-agents in parallel, each in its own task, under ``limiter``.

    Every ending — an answer, a failure, a spent budget, its own timeout (a cancel scope in
    :meth:`SubagentRun.run`) — goes to ``finished`` as a result; a cancellation from outside cancels
    them all and propagates (the caller builds their results from the runs). A run with a
    :attr:`~SubagentRun.scope` runs inside it, and a cut one ends there without a result. The
    engine's in-process stages and a placement's remote batches both run through here.
    """
    async with anyio.create_task_group() as tg:
        for run in runs:
            tg.start_soon(_run_limited, run, limiter, finished, started)


async def _run_limited(
    run: SubagentRun,
    limiter: Limiter,
    finished: Callable[[SubagentRun, SubagentResult], None],
    started: Callable[[SubagentRun], None] | None,
) -> None:
    scope = run.scope
    try:
        with scope if scope is not None else _NO_SCOPE:  # a cut run ends here, quietly
            # A free token is taken without anyio's fairness checkpoint (two shielded cancel scopes per
            # sub-agent on a 1,000-way fan-out); a full limiter waits its turn as usual.
            if limiter.available_tokens >= 1:
                limiter.acquire_nowait()
            else:
                await limiter.acquire()
            try:
                if started is not None:
                    started(run)
                result = await run.run()
            finally:
                limiter.release()
            finished(run, result)
    finally:
        run.scope = None  # the run outlives its task (the stage keeps it): drop its scope now
