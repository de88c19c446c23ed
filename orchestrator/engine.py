"""The episode engine: one loop over orchestrator turns, each opening one stage.

A turn returns a tagged next step — answer, retry (malformed output), run a stage, or fail — and the
driver only dispatches. Stages run direct tool calls and sub-agents together in one anyio task
group, sub-agents under the shared sub-agent cap (or on the placement that takes a stage that wide);
admission derives each sub-agent's step cap from the remaining critical-step budget so the episode can
never exceed ``max_critical_steps``.
"""

from __future__ import annotations

import time
import uuid
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import anyio
from opentelemetry.trace import TracerProvider

from agent_swarm.orchestrator.admission import ASSIGN, CREATE, Assignment, admit
from agent_swarm.orchestrator.budgets import BudgetLedger, Share, budget_attributes, new_ledger
from agent_swarm.orchestrator.coach import CallOutcome, CoachState, Ending, ReviewView, TurnAdvice, TurnView, coach_for
from agent_swarm.orchestrator.hedging import run_hedged
from agent_swarm.orchestrator.placement import PlacedRun, StageBatch, SubagentPlacement
from agent_swarm.orchestrator.prompts import WORKER, action_specs, format_subagent_result, profile_for
from agent_swarm.orchestrator.tasks import LARGE_TASK_CHARS, large_task_warning
from agent_swarm.subagents.loop import SubagentRun, SubagentRuntime, run_subagents
from agent_swarm.subagents.turns import call_model, retry_malformed, run_tool_calls
from agent_swarm.swarm._aio import running_loop
from agent_swarm.swarm.backend import (
    Completion,
    ModelBackend,
    ModelRequest,
    ToolSpec,
    Usage,
    context_window,
    parallel_slots,
)
from agent_swarm.swarm.backends.toolparse import clean_answer
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.context import EXHAUSTED_NOTICE, fit_context, prompt_limit
from agent_swarm.swarm.dag import dag_stats
from agent_swarm.swarm.errors import (
    BackendRefusedError,
    ConfigError,
    ErrorType,
    LargeInputWarning,
    ModelOutputError,
    UnknownNameError,
    UserError,
)
from agent_swarm.swarm.events import (
    ActionResolved,
    EpisodeFinished,
    EpisodeStarted,
    Event,
    Observer,
    StageFinished,
    StageStarted,
    SubagentFinished,
    SubagentStarted,
    TurnFinished,
    observing,
)
from agent_swarm.swarm.limits import CapacityLimit, ConcurrencyLimit, Limiter
from agent_swarm.swarm.messages import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from agent_swarm.swarm.monitors import declared_parts, episode_monitors, monitor_attributes
from agent_swarm.swarm.records import (
    AgentDefinition,
    AgentStatus,
    ContextCut,
    EpisodeRecord,
    EpisodeStatus,
    OrchestratorTurn,
    RewardRecord,
    StageKind,
    StageRecord,
    StepRecord,
    SubagentResult,
    Task,
    ToolResult,
)
from agent_swarm.swarm.rl.rewards import RewardFn
from agent_swarm.swarm.tracing import Telemetry, attr
from agent_swarm.tools.registry import Tool, ToolContext, ToolRegistry, Toolset

__all__ = ["Orchestrator", "RewardFn"]

ORCHESTRATOR_ID = "orchestrator"
REFUSED_NOTICE = (
    "The sub-agents' model server refused service (credentials or quota), so no more sub-agents can run. "
    "Answer the user now with the results you have, in the form the task asks for."
)
SINGLE_AGENT_PROMPT = "You are a helpful assistant. Use your tools when they help, then answer in plain text."


# -- tagged next steps ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Answer:
    text: str
    status: EpisodeStatus
    error: str | None = None
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class _Retry:
    """The turn is asked again: its output was malformed, or its coach sent its answer back."""

    error: str


@dataclass(frozen=True, slots=True)
class _Stage:
    completion: Completion


@dataclass(frozen=True, slots=True)
class _Fail:
    error: str
    error_type: str


_Next = _Answer | _Retry | _Stage | _Fail


# -- episode state ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _EpisodeState:
    """All run state of one episode, in one object."""

    episode_id: str
    task: Task
    t0: float
    started_at: float
    messages: list[Message]
    agents: dict[str, AgentDefinition]
    max_critical: int
    subagent_limit: ConcurrencyLimit  # the sub-agent cap this episode shares (agent_swarm.swarm.limits)
    turns: list[OrchestratorTurn] = field(default_factory=list)
    stages: list[StageRecord] = field(default_factory=list)
    critical_used: int = 0
    malformed: int = 0
    usage: Usage = field(default_factory=Usage)
    subagent_usage: Usage = field(default_factory=Usage)
    drift_count: int = 0
    status: EpisodeStatus | None = None
    answer: str | None = None
    error: str | None = None
    error_type: str | None = None
    trace_id: str | None = None
    reward: RewardRecord | None = None
    last_ids: tuple[int, ...] | None = None
    coaching: CoachState = field(default_factory=CoachState)  # the coach's memory of this episode
    budget: BudgetLedger | None = None  # the tree-wide budgets and breadth cap, when any is set
    refused: str | None = None  # a sub-agent's endpoint refused service (401/403/quota): why
    context_cuts: list[ContextCut] = field(
        default_factory=list
    )  # messages shortened to fit (agent_swarm.swarm.context)
    context_cut: bool = False  # the next turn's prompt is a shortened (re-rendered) conversation

    def clock(self) -> float:
        return time.perf_counter() - self.t0

    def charge(self, steps: int) -> None:
        """Spend critical steps: the one place the episode's critical-step budget changes (an
        orchestrator generation costs 1, a stage adds its slowest sub-agent's steps)."""
        self.critical_used += steps

    @property
    def critical_left(self) -> int:
        return self.max_critical - self.critical_used

    def finish(
        self, status: EpisodeStatus, answer: str | None = None, error: str | None = None, error_type: str | None = None
    ) -> None:
        if self.status is None:
            self.status, self.answer, self.error, self.error_type = status, answer, error, error_type


@dataclass(slots=True)
class _TurnOutcome:
    """A finished orchestrator generation before its stage has run."""

    step_started: float
    step_ended: float
    completion: Completion | None
    error: str | None = None
    error_type: str = ErrorType.BACKEND


@dataclass(slots=True)
class _StagePlan:
    """What one turn's calls became at admission: sub-agent runs (with the call that assigned each),
    direct tool calls, results already known (created types, refusals) and notes for the model."""

    index: int
    calls: tuple[ToolCall, ...]
    runs: list[tuple[ToolCall, SubagentRun]] = field(default_factory=list)
    direct: list[ToolCall] = field(default_factory=list)
    results: dict[str, ToolResult] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    discarded: list[SubagentResult] = field(default_factory=list)  # hedged backups that lost


def _checked_backend(backend: object, name: str) -> ModelBackend:
    """``backend`` if it is a model backend (``.model`` and an async ``.complete``); else a one-line UserError."""
    if isinstance(getattr(backend, "model", None), str) and callable(getattr(backend, "complete", None)):
        return cast("ModelBackend", backend)
    raise UserError(
        f"{name} must be a model backend (a .model name and an async .complete(request)), got {type(backend).__name__}"
        "; build one with agent_swarm.orchestrator.build_backends or use agent_swarm.swarm.testing.ScriptedBackend"
    )


def _checked_task(task: object) -> Task:
    """A :class:`Task` from a task or its text; an empty text or another type is a one-line UserError."""
    if isinstance(task, Task):
        return task
    if not isinstance(task, str):
        raise UserError(f"task must be a str or a Task, got {type(task).__name__}")
    if not task.strip():
        raise UserError("task is empty; give the task in words")
    return Task(prompt=task)


class Orchestrator:
    """Runs episodes: ``record = await Orchestrator(backend).run("task")``.

    ``backend`` is the orchestrator policy (the object RL trains). Sub-agents run on
    ``subagent_backend`` (default: the same backend, used frozen) or, when ``create_subagent`` names
    a ``model``, on ``subagent_backends[model]``. ``agents`` predefines sub-agent types the
    orchestrator can assign tasks to without creating them. ``observers`` receive progress events.
    ``placement`` runs the sub-agents of stages it takes (very wide ones) elsewhere, e.g. on Ray
    actors (:class:`agent_swarm.orchestrator.cluster.RayPlacement`); admission, budgets and records are the same.
    """

    def __init__(
        self,
        backend: ModelBackend,
        config: SwarmConfig | None = None,
        *,
        tools: ToolRegistry | Iterable[Tool | Toolset] | None = None,
        agents: Iterable[AgentDefinition] = (),
        subagent_backend: ModelBackend | None = None,
        subagent_backends: Mapping[str, ModelBackend] | None = None,
        tracer_provider: TracerProvider | None = None,
        capture_content: bool = False,
        telemetry: Telemetry | None = None,
        observers: Iterable[Observer] = (),
        reward_fn: RewardFn | None = None,
        placement: SubagentPlacement | None = None,
    ) -> None:
        self.backend = _checked_backend(backend, "backend")
        if config is not None and not isinstance(config, SwarmConfig):
            raise UserError(
                f"config must be a SwarmConfig, got {type(config).__name__}; build one with SwarmConfig(**settings)"
            )
        self.config = config or SwarmConfig()
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools or ())
        self.subagent_backend = _checked_backend(subagent_backend, "subagent_backend") if subagent_backend else backend
        self.subagent_backends: dict[str, ModelBackend] = dict(subagent_backends or {})
        self.subagent_backends.setdefault(self.subagent_backend.model, self.subagent_backend)
        self.telemetry = telemetry or Telemetry(tracer_provider, capture_content=capture_content)
        self.observers: list[Observer] = list(observers)
        self.reward_fn = reward_fn
        self.placement = placement
        self._subagent_limit: ConcurrencyLimit = CapacityLimit()
        cfg = self.config
        try:
            # None: every registered tool; an empty list: none
            names = self.tools.names
            self._direct = self.tools.resolve(names if cfg.orchestrator_tools is None else cfg.orchestrator_tools)
            self._grantable = self.tools.resolve(names if cfg.subagent_tools is None else cfg.subagent_tools)
        except UnknownNameError as exc:
            raise ConfigError(f"tool allow-list in the config names an unregistered tool: {exc}") from None
        clash = {CREATE, ASSIGN} & set(self.tools.names)
        if clash:
            raise ConfigError(f"tool names {sorted(clash)} are reserved for the orchestrator's actions")
        # Toolsets whose every tool may be granted can be granted by name (e.g. "files", an MCP server).
        self._grantable_sets = {
            name: members for name, members in self.tools.toolsets.items() if all(m in self._grantable for m in members)
        }
        self._presets = self._check_presets(agents)
        self._set_up_protocol(cfg)
        cfg.budgets.check_prices({self.backend.model, *self.subagent_backends})

    def _check_presets(self, agents: Iterable[AgentDefinition]) -> dict[str, AgentDefinition]:
        """Predefined sub-agent types by name, their toolsets expanded; a grant or model the episode
        does not offer fails now."""
        presets: dict[str, AgentDefinition] = {}
        for a in agents:
            expanded, bad = self._expand_grant(a.tools)
            if bad:
                raise ConfigError(f"predefined agent {a.name!r} grants tools the episode does not allow: {bad}")
            a = a.model_copy(update={"tools": expanded})
            if a.model is not None and a.model not in self.subagent_backends:
                raise ConfigError(
                    f"predefined agent {a.name!r} uses model {a.model!r}; known: {sorted(self.subagent_backends)}"
                )
            presets[a.name] = a
        return presets

    def _set_up_protocol(self, cfg: SwarmConfig) -> None:
        """The prompt profile, the built-in worker, the action specs, the system prompt, the worked
        example and the coach of this orchestrator's episodes."""
        try:
            self.profile = profile_for(self.backend.model, cfg.prompt_profile)
        except UnknownNameError as exc:
            raise ConfigError(f"prompt_profile in the config: {exc}") from None
        if cfg.subagents and cfg.builtin_worker and WORKER not in self._presets:
            self._presets[WORKER] = self.profile.worker(tuple(self._grantable))
        actions = (
            action_specs(
                sorted([*self._grantable, *self._grantable_sets]), sorted(self.subagent_backends), self.profile
            )
            if cfg.subagents
            else ()
        )
        self._specs: tuple[ToolSpec, ...] = (*actions, *(t.spec for t in self._direct.values()))
        if not cfg.subagents:
            base = cfg.system_prompt or SINGLE_AGENT_PROMPT
            self._system = f"{base}\n\n{cfg.extra_instructions}" if cfg.extra_instructions else base
        elif cfg.system_prompt is not None:
            self._system = "\n\n".join(p for p in (cfg.system_prompt, cfg.extra_instructions) if p)
        else:
            self._system = self.profile.orchestrator_prompt(list(self._presets.values()), cfg.extra_instructions)
        # The profile's worked example, with the first sub-agent type on offer (a workload's own type
        # before the built-in worker), when this episode runs the profile's protocol prompt.
        first = next(iter(self._presets), WORKER)
        use_example = cfg.subagents and cfg.system_prompt is None
        self._example = self.profile.example_messages(first) if use_example else ()
        # The coach follows the profile, unless a swarm run replaces the protocol prompt its tactics assume.
        name = cfg.coach or (self.profile.coach if use_example or not cfg.subagents else "none")
        try:
            self.coach = coach_for(
                name, max_repeats=cfg.max_repeated_failures, parallel_tool_calls=cfg.parallel_tool_calls
            )
        except UnknownNameError as exc:
            raise ConfigError(f"coach in the config: {exc}") from None
        self._has_tools = bool(self._direct or (cfg.subagents and self._grantable))

    # -- public API ---------------------------------------------------------------------------------

    def add_observer(self, observer: Observer) -> None:
        self.observers.append(observer)

    async def run(
        self, task: Task | str, *, episode_id: str | None = None, subagent_limit: ConcurrencyLimit | None = None
    ) -> EpisodeRecord:
        """Run one episode to an ending and return its record.

        ``subagent_limit``: the sub-agent cap (``max_concurrency``) this episode shares with every
        other episode given the same object (:class:`agent_swarm.swarm.limits.CapacityLimit`; a rollout's and an
        eval's concurrent episodes share their runner's); ``None``: this orchestrator's own, shared
        only by its own concurrent runs.

        If the caller cancels (Ctrl-C, an outer deadline), every sub-agent is cancelled, the record is
        built with status ``cancelled`` and delivered to observers (``EpisodeFinished``), then the
        cancellation propagates; so is the partial record of an episode the runtime fails on before
        the exception propagates.
        """
        task = _checked_task(task)
        if len(task.prompt) > LARGE_TASK_CHARS and (note := large_task_warning(task)):
            warnings.warn(LargeInputWarning(note), stacklevel=2)
        st = self._new_episode(task, episode_id or uuid.uuid4().hex[:16], subagent_limit)
        eid = st.episode_id
        self._emit_lazy(lambda: EpisodeStarted(episode_id=eid, task=task.prompt, parts=declared_parts(task)))
        # Backends announce endpoint waits and refusals to the observers installed here (agent_swarm.swarm.events).
        with (
            observing(self.observers),
            self.telemetry.episode(episode_id=eid, model=self.backend.model, task_id=task.id) as span,
        ):
            st.trace_id = span.trace_id()
            try:
                await self._drive_in_time(st)
            except anyio.get_cancelled_exc_class():
                st.finish(
                    EpisodeStatus.CANCELLED, self._partial_answer(st), "episode was cancelled", ErrorType.CANCELLED
                )
                self._close(st, span)
                raise
            except Exception as exc:
                # A bug in the runtime or a tool layer: keep everything that ran, then raise.
                st.finish(EpisodeStatus.FAILED, None, f"{type(exc).__name__}: {exc}", ErrorType.of(exc))
                self._close(st, span)
                raise
            if self.reward_fn is not None:
                st.reward = await self._score(st, span)
            return self._close(st, span)

    def _new_episode(self, task: Task, eid: str, subagent_limit: ConcurrencyLimit | None) -> _EpisodeState:
        """The state of a fresh episode: the opening messages, the preset agents, its budget ledger and
        coaching, and the sub-agent cap it shares (this orchestrator's own unless one is given)."""
        return _EpisodeState(
            episode_id=eid,
            task=task,
            t0=time.perf_counter(),
            started_at=time.time(),
            messages=[SystemMessage(content=self._system), *self._example, UserMessage(content=task.prompt)],
            agents=dict(self._presets),
            max_critical=self.config.max_critical_steps,
            subagent_limit=self._subagent_limit if subagent_limit is None else subagent_limit,
            coaching=self.coach.start(),
            budget=new_ledger(self.config, self.backend.model, self.subagent_backend.model),
        )

    async def _drive_in_time(self, st: _EpisodeState) -> None:
        """Drive the episode to an ending; past ``episode_timeout_s`` it ends ``timeout`` with a partial answer."""
        timeout = self.config.episode_timeout_s
        if timeout is None:
            await self._drive(st)
            return
        with anyio.move_on_after(timeout) as scope:
            await self._drive(st)
        if scope.cancelled_caught:
            st.finish(
                EpisodeStatus.TIMEOUT,
                self._partial_answer(st),
                f"episode timed out after {timeout:g}s",
                ErrorType.TIMEOUT,
            )

    async def _score(self, st: _EpisodeState, span: Any) -> RewardRecord:
        """Score the finished episode (verifier + PARL terms); a failing scorer is recorded, not raised."""
        assert self.reward_fn is not None
        draft = self._build(st)
        try:
            reward = await self.reward_fn(draft)
        except Exception as exc:
            reward = RewardRecord(total=0.0, r_perf=0.0, error=f"reward function raised {type(exc).__name__}: {exc}")
        span.set_many(
            {
                "swarm.reward.total": reward.total,
                "swarm.reward.r_perf": reward.r_perf,
                "swarm.reward.r_parallel": reward.r_parallel,
                "swarm.reward.r_finish": reward.r_finish,
                "swarm.reward.lambda1": reward.lambda1,
                "swarm.reward.lambda2": reward.lambda2,
            }
        )
        return reward

    def run_sync(self, task: Task | str, *, episode_id: str | None = None) -> EpisodeRecord:
        """Blocking convenience for scripts: runs :meth:`run` in a fresh event loop. Inside a running
        loop (Jupyter, an async function) it raises :class:`~agent_swarm.swarm.errors.UserError`:
        ``await orch.run(task)``."""
        if running_loop() is not None:
            raise UserError(
                "run_sync cannot start an event loop inside a running one (Jupyter, an async function); "
                "use `record = await orch.run(task)` there"
            )

        out: list[EpisodeRecord] = []

        async def main() -> None:
            # Not returned through anyio.run: on Python 3.11 asyncio's SIGINT handling repr()s the
            # main task's result, which for a large record costs seconds.
            out.append(await self.run(task, episode_id=episode_id))

        anyio.run(main)
        return out[0]

    # -- the loop -----------------------------------------------------------------------------------

    async def _drive(self, st: _EpisodeState) -> None:
        while st.status is None:
            advice = self._before_turn(st)
            st.messages.extend(UserMessage(content=n) for n in advice.notices)
            advice = await self._fit_context(st, advice)
            if st.status is not None:
                break
            outcome = await self._generate(st, advice)
            nxt = self._decide(st, outcome, advice.ending)
            if isinstance(nxt, _Stage):
                await self._run_stage(st, outcome, nxt.completion)
                continue
            kind: StageKind = "retry" if isinstance(nxt, _Retry) else "answer"
            self._record_stage(st, outcome, kind, (), ())
            if isinstance(nxt, _Answer):
                st.finish(nxt.status, nxt.text, nxt.error, nxt.error_type)
            elif isinstance(nxt, _Fail):
                st.finish(EpisodeStatus.FAILED, None, nxt.error, nxt.error_type)

    def _before_turn(self, st: _EpisodeState) -> TurnAdvice:
        """The coach's advice for the next turn; the last one the budget allows always ends the episode,
        and so does the turn after an endpoint refused service to a sub-agent (nothing more is admitted)."""
        if st.refused is not None:
            ending = Ending(EpisodeStatus.FAILED, st.refused, ErrorType.BACKEND_REFUSED)
            return TurnAdvice("none", (REFUSED_NOTICE,), ending=ending)
        last = st.critical_left <= 1
        why = None if last or st.budget is None else st.budget.final_reason(st.messages, st.clock())
        last = last or why is not None
        view = TurnView(
            task=st.task.prompt,
            stages=len(st.stages),
            subagents_ran=self._subagents_ran(st),
            subagents=self.config.subagents,
            has_tools=self._has_tools,
            last=last,
            direct_tools=bool(self._direct),
            agents=tuple(st.agents),
            width=self.config.max_subagents_per_stage,
        )
        advice = self.coach.before_turn(st.coaching, view)
        if last and (advice.ending is None or (why and advice.ending.status is EpisodeStatus.BUDGET_EXHAUSTED)):
            ending = Ending(EpisodeStatus.BUDGET_EXHAUSTED, why, ErrorType.BUDGET_EXHAUSTED if why else None)
            return TurnAdvice("none", advice.notices, ending=ending)
        return advice

    @property
    def context_tokens(self) -> int | None:
        """The orchestrator's context window: the config's ``context_tokens``, else the backend's."""
        return self.config.context_tokens or context_window(self.backend)

    async def _fit_context(self, st: _EpisodeState, advice: TurnAdvice) -> TurnAdvice:
        """Fit the next turn's prompt to the context (:mod:`agent_swarm.swarm.context`): old tool results and
        reports shortened and recorded; when that is not enough, this turn is the last (tools
        withdrawn, ``context_exhausted``); when not even that fits, the episode ends without it."""
        window = self.context_tokens
        if window is None:
            return advice
        request = self._request(st, advice)
        limit = prompt_limit(window, request.sampling.max_tokens)
        fit = await fit_context(self.backend, st.messages, request, limit, turn=len(st.turns))
        st.context_cuts.extend(fit.cuts)
        st.context_cut = st.context_cut or bool(fit.cuts)
        why = f"the conversation outgrew the context of {window} tokens ({fit.tokens} needed)"
        if not fit.fits:
            st.finish(EpisodeStatus.CONTEXT_EXHAUSTED, self._partial_answer(st), why, ErrorType.CONTEXT_EXHAUSTED)
        elif fit.exhausted and advice.ending is None:
            st.messages.append(UserMessage(content=EXHAUSTED_NOTICE))
            ending = Ending(
                EpisodeStatus.CONTEXT_EXHAUSTED, f"{why}; answered from what fits", ErrorType.CONTEXT_EXHAUSTED
            )
            return TurnAdvice("none", advice.notices, ending=ending)
        return advice

    def _request(self, st: _EpisodeState, advice: TurnAdvice) -> ModelRequest:
        """The next orchestrator request, from the conversation as it stands."""
        final = advice.ending is not None
        return ModelRequest(
            messages=tuple(st.messages),
            tools=self._specs,
            sampling=self.config.orchestrator_sampling,
            tool_choice="none" if final else advice.tool_choice,
            parallel_tool_calls=advice.parallel_tool_calls,
            allowed_tools=self._allowed(advice.withheld),
            agent_id=ORCHESTRATOR_ID,
            agent_name=ORCHESTRATOR_ID,
        )

    def _allowed(self, withheld: frozenset[str]) -> tuple[str, ...] | None:
        """The tools a turn may call when its coach withheld some (``None``: every tool)."""
        return tuple(t.name for t in self._specs if t.name not in withheld) if withheld else None

    async def _generate(self, st: _EpisodeState, advice: TurnAdvice) -> _TurnOutcome:
        """One orchestrator generation (one main step)."""
        final = advice.ending is not None
        request = self._request(st, advice)
        started = st.clock()
        completion: Completion | Exception
        try:
            completion = await call_model(self.backend, request, self.telemetry, st.messages)
        except Exception as exc:  # a failed generation is an outcome of the turn (below)
            completion = exc
        st.charge(1)
        if isinstance(completion, Exception):
            failed = f"{type(completion).__name__}: {completion}"
            refused = isinstance(completion, BackendRefusedError)  # retrying the endpoint cannot help
            kind = ErrorType.BACKEND_REFUSED if refused else ErrorType.BACKEND
            return _TurnOutcome(started, st.clock(), None, failed, kind)
        st.usage = st.usage + completion.usage
        if st.budget is not None:
            st.budget.charge_turn(completion.usage, st.clock() - started, st.messages)
        drift = self._check_drift(st, completion)
        cut, st.context_cut = st.context_cut, False
        if cut and not drift:  # a shortened conversation is never an exact continuation
            drift = True
            st.drift_count += 1
        st.turns.append(
            OrchestratorTurn(
                index=len(st.turns),
                stage=len(st.stages),
                text=completion.text,
                tool_calls=completion.tool_calls,
                finish_reason=completion.finish_reason,
                usage=completion.usage,
                prompt_token_ids=completion.prompt_token_ids,
                response_token_ids=completion.token_ids,
                response_logprobs=completion.logprobs,
                parse_error=completion.parse_error,
                drift=drift,
                context_cut=cut,
                tools_enabled=not final,
                weight_version=completion.weight_version,
            )
        )
        self._emit_lazy(
            lambda: TurnFinished(
                index=len(st.turns) - 1,
                text=completion.text,
                tool_calls=tuple(c.name for c in completion.tool_calls),
                call_ids=tuple(c.id for c in completion.tool_calls),
            )
        )
        return _TurnOutcome(started, st.clock(), completion)

    def _check_drift(self, st: _EpisodeState, c: Completion) -> bool:
        """A turn drifts when its prompt ids do not extend the previous prompt + response ids."""
        drift = False
        if c.prompt_token_ids is not None and st.last_ids is not None:
            prev = st.last_ids
            drift = c.prompt_token_ids[: len(prev)] != prev
            st.drift_count += drift
        if c.prompt_token_ids is not None and c.token_ids is not None:
            st.last_ids = c.prompt_token_ids + c.token_ids
        else:
            st.last_ids = None
        return drift

    def _decide(self, st: _EpisodeState, outcome: _TurnOutcome, ending: Ending | None) -> _Next:
        c = outcome.completion
        if c is None:
            return _Fail(f"orchestrator model call failed: {outcome.error}", outcome.error_type)
        if ending is not None:
            # Tools are disabled on the last turn: whatever it says is the answer.
            return _Answer(clean_answer(c.text), ending.status, ending.error, ending.error_type)
        if c.parse_error is not None:
            st.malformed += 1
            failure = retry_malformed(
                st.messages,
                c,
                max_tokens=self.config.orchestrator_sampling.max_tokens,
                retries=st.malformed,
                max_retries=self.config.max_malformed_retries,
                who="orchestrator",
            )
            return _Retry(c.parse_error) if failure is None else _Fail(failure, ErrorType.MODEL_OUTPUT)
        if not c.tool_calls:
            st.messages.append(AssistantMessage(content=c.text))
            again = self.coach.review_answer(st.coaching, c.text, st.task.prompt)
            if again is not None:  # sent back (a last turn never is: it has an ending): it answers again, told why
                st.messages.append(UserMessage(content=again))
                return _Retry(again)
            return _Answer(clean_answer(c.text), EpisodeStatus.COMPLETED)
        return _Stage(c)

    # -- stages -------------------------------------------------------------------------------------

    def _limiter_now(self, st: _EpisodeState) -> Limiter:
        """The episode's sub-agent cap (``max_concurrency``, shared with the episodes given the same
        limit), no wider than the requests the sub-agents' backend serves at once: the rest wait
        unstarted, their timeouts not yet running, instead of timing out in the engine's queue."""
        cap = min(self.config.max_concurrency, parallel_slots(self.subagent_backend) or self.config.max_concurrency)
        return st.subagent_limit.limiter(cap)

    def _expand_grant(self, names: Sequence[str]) -> tuple[tuple[str, ...], list[str]]:
        """Expand toolset names into tools; returns (granted tool names, names that may not be granted)."""
        out: dict[str, None] = {}
        bad: list[str] = []
        for n in names:
            if n in self._grantable_sets:
                out.update(dict.fromkeys(self._grantable_sets[n]))
            elif n in self._grantable:
                out[n] = None
            else:
                bad.append(n)
        return tuple(out), bad

    def _create(self, st: _EpisodeState, call: ToolCall) -> str:
        """Handle create_subagent; returns the tool message text or raises ModelOutputError (the model's mistake)."""
        a = call.arguments
        name, prompt = a.get("name"), a.get("system_prompt")
        if not isinstance(name, str) or not name.strip():
            raise ModelOutputError("create_subagent needs a non-empty string 'name'")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ModelOutputError("create_subagent needs a non-empty string 'system_prompt'")
        name = name.strip()
        if name in st.agents:
            raise ModelOutputError(f"a sub-agent named {name!r} already exists; assign tasks to it or pick a new name")
        tools = a.get("tools") or []
        if isinstance(tools, str):
            tools = [tools]
        if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
            raise ModelOutputError("'tools' must be a list of tool names")
        expanded, bad = self._expand_grant(tools)
        if bad:
            allowed = ", ".join(sorted([*self._grantable, *self._grantable_sets])) or "(none)"
            raise ModelOutputError(f"tools {bad} cannot be granted in this episode; allowed: {allowed}")
        model = a.get("model")
        if model is not None and model not in self.subagent_backends:
            raise ModelOutputError(f"unknown model {model!r}; available: {', '.join(sorted(self.subagent_backends))}")
        st.agents[name] = AgentDefinition(name=name, system_prompt=prompt, tools=expanded, model=model)
        granted = ", ".join(expanded) or "no tools"
        return f"created sub-agent {name!r} ({granted})"

    async def _run_stage(self, st: _EpisodeState, outcome: _TurnOutcome, completion: Completion) -> None:
        """One stage: decide what the turn's calls become, run them, show the results to the model."""
        plan = self._admit(st, completion.tool_calls)
        done = await self._execute(st, outcome, plan)
        self._observe(st, completion, plan.results, done, plan.notes)

    def _admit(self, st: _EpisodeState, calls: tuple[ToolCall, ...]) -> _StagePlan:
        """Classify the turn's calls before anything runs: new sub-agent types are created, every
        ``assign_task`` is admitted as a run (its step cap from the remaining critical budget) or
        refused, and the rest are direct tool calls (:func:`agent_swarm.orchestrator.admission.admit`)."""
        cfg = self.config
        index = len(st.stages)
        plan = _StagePlan(index=index, calls=calls)
        width = cfg.max_subagents_per_stage
        view = ReviewView(st.task.prompt, st.agents, cfg.subagents, self._subagents_ran(st), width)
        coached = self.coach.review(st.coaching, calls, view)
        for c in calls:
            if c.name == CREATE and cfg.subagents and c.error is None:
                try:
                    now = st.clock()
                    plan.results[c.id] = ToolResult(call=c, content=self._create(st, c), started=now, ended=st.clock())
                except ModelOutputError as exc:
                    plan.results[c.id] = self._error_result(st, c, str(exc), ErrorType.INVALID_ACTION)
        admission = admit(
            [c for c in calls if c.id not in coached] if coached else calls,
            st.agents,
            stage=index,
            step_cap=min(cfg.max_subagent_steps, st.critical_left - 1),
            max_width=cfg.max_subagents_per_stage,
            subagents=cfg.subagents,
            budget_note=f" ({st.critical_used} of {cfg.max_critical_steps} critical steps used)",
        )
        refused = {**coached, **admission.refused}
        assignments, shares, wall_deadline = self._reserve(st, admission.assignments, refused)
        by_id: dict[str, ToolCall] = {}
        for c in calls if refused else ():
            by_id.setdefault(c.id, c)  # the first call with an id, as admission saw it
        for call_id, (message, error_type) in refused.items():
            plan.results[call_id] = self._error_result(st, by_id[call_id], message, error_type)
        plan.direct = admission.direct
        runtimes: dict[str | None, SubagentRuntime] = {}
        width = len(assignments)
        for position, a in enumerate(assignments):
            rt = runtimes.get(a.definition.model)
            if rt is None:
                rt = runtimes[a.definition.model] = self._runtime(st, a.definition.model)
            if a.note:
                plan.notes[a.call.id] = a.note
            run = SubagentRun(
                definition=a.definition,
                task=a.task,
                agent_id=a.agent_id,
                stage=index,
                step_cap=a.step_cap,
                timeout_s=cfg.subagent_timeout_s,
                rt=rt,
                index=position,
                width=width,
                budget=shares.get(a.agent_id),
                wall_deadline=wall_deadline,
            )
            plan.runs.append((a.call, run))
        return plan

    def _reserve(
        self, st: _EpisodeState, assignments: list[Assignment], refused: dict[str, tuple[str, str]]
    ) -> tuple[list[Assignment], dict[str, Share], float | None]:
        """The tree-wide budgets' say on the admitted assignments (:meth:`BudgetLedger.reserve`): the
        ones with a share, the shares, and when their wall-time share ends; refusals are added to ``refused``."""
        if st.budget is None or not assignments:
            return assignments, {}, None
        r = st.budget.reserve(assignments, st.clock())
        refused.update(r.refused)
        return r.admitted, r.shares, r.wall_deadline

    @staticmethod
    def _error_result(st: _EpisodeState, c: ToolCall, text: str, error_type: str) -> ToolResult:
        now = st.clock()
        return ToolResult(
            call=c, content=f"error: {text}", is_error=True, error_type=error_type, started=now, ended=now
        )

    async def _execute(self, st: _EpisodeState, outcome: _TurnOutcome, plan: _StagePlan) -> dict[str, SubagentResult]:
        """Run the stage's direct calls and sub-agents together and record the stage (also when the
        episode is cancelled mid-stage: unfinished sub-agents are recorded as cancelled)."""
        index, runs, direct, results = plan.index, plan.runs, plan.direct, plan.results
        width = len(runs)
        kind: StageKind = "mixed" if width and direct else ("subagents" if width else "tools")
        done: dict[str, SubagentResult] = {}
        self._emit_lazy(lambda: StageStarted(index=index, kind=kind, width=width, critical_so_far=st.critical_used))
        for r in list(results.values()):  # created sub-agent types and refused actions are known already
            self._emit_action(index, r)
        with self.telemetry.stage(index=index, kind=kind, width=width, critical_so_far=st.critical_used) as span:
            try:
                async with anyio.create_task_group() as tg:
                    if direct:
                        tg.start_soon(self._direct_calls, st, direct, results)
                    if runs:
                        tg.start_soon(self._fan_out, st, plan, done)
            except anyio.get_cancelled_exc_class():
                for c, run in runs:
                    if c.id not in done:
                        done[c.id] = run.result(
                            AgentStatus.CANCELLED, error="cancelled with the episode", error_type=ErrorType.CANCELLED
                        )
                subs = (*(done[c.id] for c in plan.calls if c.id in done), *plan.discarded)
                self._record_stage(st, outcome, kind, tuple(results.values()), subs, span)
                raise
            subs = (*(done[c.id] for c in plan.calls if c.id in done), *plan.discarded)
            tool_results = tuple(results[c.id] for c in plan.calls if c.id in results)
            stage = self._record_stage(st, outcome, kind, tool_results, subs, span)
        self._emit_lazy(
            lambda: StageFinished(index=index, critical_steps=stage.critical_steps, critical_so_far=st.critical_used)
        )
        return done

    def _observe(
        self,
        st: _EpisodeState,
        completion: Completion,
        results: Mapping[str, ToolResult],
        done: Mapping[str, SubagentResult],
        notes: Mapping[str, str],
    ) -> None:
        """The stage's observations for the next turn, in call order: sub-agent results, tool
        results and refusals, as the coach shows them (it names repeats, and its verdict may make
        the next turn the last)."""
        cfg = self.config
        calls = completion.tool_calls
        st.messages.append(AssistantMessage(content=completion.text, tool_calls=calls))
        outcomes: list[CallOutcome] = []
        for c in calls:
            r = done.get(c.id)
            if r is not None:
                content = format_subagent_result(r, cfg.max_report_chars)
                failed = r.status is not AgentStatus.COMPLETED
                outcomes.append(CallOutcome(c, content, failed, r.error_type, (r.name, r.task.strip())))
            else:
                tr = results[c.id]
                outcomes.append(CallOutcome(c, tr.content, tr.is_error, tr.error_type))
        shown = self.coach.after_stage(st.coaching, outcomes)
        for o, content in zip(outcomes, shown, strict=True):
            c = o.call
            if c.id in notes:
                content = f"note: {notes[c.id]}\n{content}"
            st.messages.append(ToolMessage(tool_call_id=c.id, name=c.name, content=content, is_error=o.is_error))
        if completion.finish_reason == "length":
            st.messages.append(
                UserMessage(
                    content=f"Your last message was cut off at the limit of {cfg.orchestrator_sampling.max_tokens} "
                    "tokens; anything after the last complete call was lost. Keep calls short."
                )
            )

    @staticmethod
    def _subagents_ran(st: _EpisodeState) -> bool:
        return any(s.subagents for s in st.stages)

    def _runtime(self, st: _EpisodeState, model: str | None) -> SubagentRuntime:
        cfg = self.config
        backend = self.subagent_backends[model] if model is not None else self.subagent_backend
        observer = self._emit if self.observers else None
        return SubagentRuntime(
            backend=backend,
            tools=self._grantable,
            telemetry=self.telemetry,
            episode_id=st.episode_id,
            sampling=cfg.subagent_sampling,
            clock=st.clock,
            workspace=self._workspace(st),
            max_malformed=cfg.max_malformed_retries,
            max_completion_tokens=cfg.max_subagent_completion_tokens,
            context_tokens=cfg.context_tokens,
            observer=observer,
            coach=self.coach.subagents,
        )

    def _workspace(self, st: _EpisodeState) -> Path | None:
        root = self.config.workspace_root
        return None if root is None else root / st.episode_id

    async def _direct_calls(self, st: _EpisodeState, calls: Sequence[ToolCall], out: dict[str, ToolResult]) -> None:
        ctx = ToolContext(episode_id=st.episode_id, agent_id=ORCHESTRATOR_ID, workspace=self._workspace(st))
        for r in await run_tool_calls(calls, self._direct, ctx, self.telemetry, st.clock):
            out[r.call.id] = r
            self._emit_action(len(st.stages), r)

    def _emit_action(self, stage: int, r: ToolResult) -> None:
        """Tell observers how a non-sub-agent action ended (see :class:`~agent_swarm.swarm.events.ActionResolved`)."""
        if not self.observers:
            return
        target: object = ""
        if r.call.name in (ASSIGN, CREATE):
            target = r.call.arguments.get("agent" if r.call.name == ASSIGN else "name", "")
        text = r.content[7:] if r.is_error and r.content.startswith("error: ") else r.content
        self._emit(
            ActionResolved(
                stage=stage,
                call_id=r.call.id,
                name=r.call.name,
                target=target if isinstance(target, str) else repr(target),
                ok=not r.is_error,
                detail=text if len(text) <= 300 else text[:299] + "…",
                error_type=r.error_type,
            )
        )

    async def _fan_out(self, st: _EpisodeState, plan: _StagePlan, done: dict[str, SubagentResult]) -> None:
        """Run the stage's admitted sub-agents: here (hedged when the config says so), or where the
        placement puts a stage this wide."""
        index, runs = plan.index, plan.runs
        call_of = {run.agent_id: c.id for c, run in runs}

        # Called per sub-agent: events are built only for observers, without a closure per call.
        def started(run: SubagentRun) -> None:
            if self.observers:
                self._emit(
                    SubagentStarted(
                        agent_id=run.agent_id, name=run.definition.name, task=run.task, step_cap=run.step_cap
                    )
                )

        def finished(run: SubagentRun, result: SubagentResult) -> None:
            done[call_of[run.agent_id]] = result
            if self.observers:
                self._emit(SubagentFinished(agent_id=run.agent_id, status=result.status, result=result))

        def discarded(run: SubagentRun, result: SubagentResult) -> None:
            plan.discarded.append(result)
            if self.observers:
                self._emit(SubagentFinished(agent_id=run.agent_id, status=result.status, result=result))

        placement, hedge, local = self.placement, self.config.hedge, [run for _, run in runs]
        if placement is None or not placement.takes(len(runs)):
            if hedge is not None and hedge.takes(len(runs)):
                await run_hedged(
                    local, self._limiter_now(st), finished, started, hedge, discarded=discarded, clock=st.clock
                )
            else:
                await run_subagents(local, self._limiter_now(st), finished, started)
            return
        by_agent = {run.agent_id: run for _, run in runs}
        for _, run in runs:
            started(run)
        await placement.run(self._batch(st, index, runs), lambda agent_id, r: finished(by_agent[agent_id], r))

    def _batch(self, st: _EpisodeState, index: int, runs: list[tuple[ToolCall, SubagentRun]]) -> StageBatch:
        cfg = self.config
        return StageBatch(
            episode_id=st.episode_id,
            stage=index,
            runs=tuple(
                PlacedRun(r.agent_id, r.definition, r.task, r.step_cap, r.timeout_s, r.wall_deadline) for _, r in runs
            ),
            default_model=self.subagent_backend.model,
            sampling=cfg.subagent_sampling,
            epoch=time.time() - st.clock(),
            max_concurrency=cfg.max_concurrency,
            max_malformed=cfg.max_malformed_retries,
            max_completion_tokens=cfg.max_subagent_completion_tokens,
            workspace=self._workspace(st),
        )

    def _record_stage(
        self,
        st: _EpisodeState,
        outcome: _TurnOutcome,
        kind: StageKind,
        tool_results: tuple[ToolResult, ...],
        subs: tuple[SubagentResult, ...],
        span: Any = None,
    ) -> StageRecord:
        c = outcome.completion
        index = len(st.stages)
        # The step ends with its generation: its direct tool calls ran beside the stage's sub-agents
        # and carry their own times (the DAG counts them as a parallel branch, see agent_swarm.swarm.dag).
        step = StepRecord(
            agent_id=ORCHESTRATOR_ID,
            index=index,
            kind="orchestrator",
            stage=index,
            started=outcome.step_started,
            ended=outcome.step_ended,
            prompt_tokens=c.usage.prompt_tokens if c else 0,
            completion_tokens=c.usage.completion_tokens if c else 0,
            tool_results=tool_results,
            error=outcome.error or (f"malformed output: {c.parse_error}" if c and c.parse_error else None),
            timings=c.timings if c else None,
        )
        # The stage waited for every sub-agent but the stragglers hedging cut (agent_swarm.orchestrator.hedging).
        sub_max = max((r.steps for r in subs if r.error_type != ErrorType.HEDGED), default=0)
        st.charge(sub_max)
        if st.budget is not None:
            st.budget.settle(subs)
        for r in subs:
            st.subagent_usage = st.subagent_usage + r.usage
            if r.error_type == ErrorType.BACKEND_REFUSED and st.refused is None:
                st.refused = f"stopped admitting: sub-agent {r.agent_id}'s endpoint refused service: {r.error}"
        stage = StageRecord(
            index=index,
            kind=kind,
            started=outcome.step_started,
            ended=st.clock(),
            orchestrator_steps=(step,),
            tool_results=tool_results,
            subagents=subs,
            critical_steps=1 + sub_max,
        )
        st.stages.append(stage)
        if span is not None:
            span.set(attr.STAGE_CRITICAL, stage.critical_steps)
            failed = sum(r.status is not AgentStatus.COMPLETED for r in subs)
            span.set("swarm.stage.failed_subagents", failed)
        return stage

    # -- endings ------------------------------------------------------------------------------------

    @staticmethod
    def _partial_answer(st: _EpisodeState) -> str | None:
        return next((clean_answer(t.text) for t in reversed(st.turns) if t.text), None)

    def _build(self, st: _EpisodeState) -> EpisodeRecord:
        record = EpisodeRecord(
            episode_id=st.episode_id,
            task=st.task,
            status=st.status or EpisodeStatus.FAILED,
            answer=st.answer,
            error=st.error,
            error_type=st.error_type,
            model=self.backend.model,
            started_at=st.started_at,
            wall_time_s=st.clock(),
            stages=tuple(st.stages),
            turns=tuple(st.turns),
            agents=tuple(st.agents.values()),
            dag=dag_stats(st.stages),
            usage=st.usage,
            subagent_usage=st.subagent_usage,
            drift_count=st.drift_count,
            context_tokens=self.context_tokens,
            context_cuts=tuple(st.context_cuts),
            trace_id=st.trace_id,
            reward=st.reward,
            config=self.config.model_dump(mode="json"),
            budgets=st.budget.report(st.clock()) if st.budget is not None else {},
        )
        return record.model_copy(update={"monitors": episode_monitors(record)})

    def _close(self, st: _EpisodeState, span: Any) -> EpisodeRecord:
        record = self._build(st)
        status, stats = record.status, record.dag
        span.set(attr.EPISODE_STATUS, status.value)
        span.set(attr.INPUT_TOKENS, st.usage.prompt_tokens)
        span.set(attr.OUTPUT_TOKENS, st.usage.completion_tokens)
        span.set_many(
            {
                "swarm.dag.critical_steps": stats.critical_steps,
                "swarm.dag.total_steps": stats.total_steps,
                "swarm.dag.speedup": stats.speedup,
                "swarm.dag.wall_critical_path_s": stats.wall_critical_path_s,
                "swarm.episode.drift_count": st.drift_count,
            }
        )
        if record.monitors is not None:
            span.set_many(monitor_attributes(record.monitors))
        if record.budgets:
            span.set_many(budget_attributes(record.budgets))
        if status in (EpisodeStatus.FAILED, EpisodeStatus.TIMEOUT, EpisodeStatus.CANCELLED):
            span.fail(st.error_type or status.value, st.error or "")
        self._emit_lazy(lambda: EpisodeFinished(record=record))
        return record

    # -- events -------------------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        for o in self.observers:
            o(event)

    def _emit_lazy(self, make: Any) -> None:
        if self.observers:
            self._emit(make())
