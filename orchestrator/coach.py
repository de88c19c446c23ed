"""Coaching: the tactics a model needs beside the protocol, as one object with hooks the engine calls.

The engine (:mod:`agent_swarm.orchestrator.engine`) runs the protocol — turns, stages, admission, budgets — for the
swarm arm (an orchestrator with sub-agents) and the single arm (``SwarmConfig.subagents = False``)
alike. At five fixed points it asks its :class:`Coach`:

- :meth:`Coach.before_turn` — the turn's tool choice, the notices the model reads first, whether it
  may propose several direct calls, and whether this is the episode's last turn (an :class:`Ending`:
  the budget is spent, or an earlier verdict stopped the episode);
- :meth:`Coach.review` — which of the turn's proposed calls do not run, before admission (a finished
  task assigned again, a copy within one turn, a whole list handed to one sub-agent, a single agent's
  calls after its first);
- :meth:`Coach.after_stage` — what the model is shown for each call (a repeated failure or a repeat
  of a call that already returned says so), and the verdict: everything was already done, or the
  model is stuck repeating itself;
- :meth:`Coach.review_answer` — whether a turn's answer goes back to the model once, with a notice
  (a small model's table that names at most half of the items the task lists);
- :attr:`Coach.subagents` — the :class:`~agent_swarm.subagents.coach.StepCoach` of its sub-agents.

Its state lives in one :class:`CoachState` per episode (:meth:`Coach.start`). :class:`NoCoach` (capable
models) keeps only the guards every model gets: the last-turn notice, repeat and stuck detection, no
rerun of finished work. :class:`SmallModelCoach` (sub-3B models) adds the tactics: act first where
the task lists several items or tools exist, one ``assign_task`` per list item, each task once per
turn, and tool-first, one-call-per-turn steps for its sub-agents and for a single agent. Which coach
an episode gets follows its prompt profile (:func:`coach_for`), or ``SwarmConfig.coach``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agent_swarm.orchestrator.admission import ASSIGN, CREATE, resolve_agent
from agent_swarm.orchestrator.prompts import WORKER
from agent_swarm.subagents.coach import (
    NoStepCoach,
    Refusal,
    SmallModelStepCoach,
    StepCoach,
    ToolChoice,
    hold_after_first,
)
from agent_swarm.subagents.turns import call_signature, repeat_notice
from agent_swarm.swarm.errors import ErrorType
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.swarm.records import AgentDefinition, EpisodeStatus
from agent_swarm.swarm.registry import Registry

__all__ = [
    "COACHES",
    "SPLIT_NOTICE",
    "CallOutcome",
    "Coach",
    "CoachState",
    "Ending",
    "NoCoach",
    "ReviewView",
    "SmallModelCoach",
    "TurnAdvice",
    "TurnView",
    "coach_for",
    "listed_items",
    "lists_items",
    "one_part",
    "split_calls",
    "split_items",
    "split_notice",
]

# -- what the engine shows the coach, and what it gets back -----------------------------------------


@dataclass(frozen=True, slots=True)
class TurnView:
    """The episode as a coach sees it before a turn."""

    task: str
    stages: int  # stages recorded so far (retries of malformed output included)
    subagents_ran: bool  # a sub-agent has run
    subagents: bool  # the swarm arm (sub-agent actions offered) or the single arm
    has_tools: bool  # tools of its own: direct ones, or (swarm) ones it can grant
    last: bool  # the critical-step budget leaves this turn only: it must answer
    direct_tools: bool = False  # tools it calls itself (not only ones it can grant)
    agents: tuple[str, ...] = ()  # the sub-agent types it may assign tasks to, in the prompt's order
    width: int = 16  # the most sub-agents a stage admits (SwarmConfig.max_subagents_per_stage)


@dataclass(frozen=True, slots=True)
class Ending:
    """The turn is the episode's last (tools withdrawn): the status its answer ends with."""

    status: EpisodeStatus
    error: str | None = None
    error_type: str | None = None


@dataclass(frozen=True, slots=True)
class TurnAdvice:
    """What a turn's request carries: tool choice, notices (user turns before it), several direct
    calls or one, ``ending`` when it is the last turn, and the tools ``withheld`` from this turn's
    choice (still listed in the prompt; a call to one is refused by :meth:`Coach.review`)."""

    tool_choice: ToolChoice = "auto"
    notices: tuple[str, ...] = ()
    parallel_tool_calls: bool = True
    ending: Ending | None = None
    withheld: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ReviewView:
    """The episode as a coach sees it when reviewing a turn's calls."""

    task: str
    agents: Mapping[str, AgentDefinition]
    subagents: bool
    subagents_ran: bool
    width: int = 16  # the most sub-agents a stage admits (SwarmConfig.max_subagents_per_stage)


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One call of a finished stage, as the model would see it. ``assignment`` is the ``(type, task)``
    a sub-agent ran (``None`` for tool calls and refusals)."""

    call: ToolCall
    content: str
    is_error: bool
    error_type: str | None = None
    assignment: tuple[str, str] | None = None


@dataclass(slots=True)
class CoachState:
    """A coach's memory of one episode."""

    failed: set[str] = field(default_factory=set)  # signatures of calls that failed
    returned: dict[str, str] = field(default_factory=dict)  # signature -> result of a call that succeeded
    completed: dict[tuple[str, str], str] = field(default_factory=dict)  # (type, task) -> report shown
    repeat_turns: int = 0  # turns in a row that only repeated earlier calls
    split_nudged: bool = False  # a whole list task given to one sub-agent was refused once
    must_act: bool = False  # the next turn must call a tool (it was just shown the calls to make)
    direct: bool = False  # the last stage ran direct tool calls (not sub-agents)
    results: int = 0  # how many results (a tool's or a sub-agent's, not errors) the last stage returned
    looked: bool = False  # a stage ran its own tool calls (not sub-agents)
    answer_reviewed: bool = False  # an answer was sent back once (:meth:`Coach.review_answer`)
    withheld: frozenset[str] = frozenset()  # tools withheld from the turn under review
    withheld_why: str = ""  # what a call to one of them is told
    stop: Ending | None = None  # a verdict: the next turn is the last one
    stop_notice: str = ""


# -- notices ----------------------------------------------------------------------------------------

_ANSWER_NOW = "Answer the user now with the results you have, in the form the task asks for."
_BUDGET_NOTICE = {
    True: "No budget is left for tools or sub-agents. " + _ANSWER_NOW,
    False: "No budget is left for tool calls. " + _ANSWER_NOW,
}
_STUCK_NOTICE = "Stop calling tools: your last calls repeated failed ones. " + _ANSWER_NOW
_DONE_NOTICE = (
    "Every task you assigned has already completed; the results are above. "
    "Answer the user now with those results, in the form the task asks for."
)
_RETURNED_NOTICE = (
    "Stop calling tools: your last calls repeated earlier ones and returned the same results, shown above. "
    "Answer the user now with those results, in the form the task asks for."
)
_QUESTION_NOTICE = 'If the results above answer the question "{task}", answer it now in plain text.'
"""Told a small model after its own tool calls on a one-part task. Without it, Qwen2.5-Coder-1.5B opened the
document holding the answer again and again (controls, dev), and once told its call repeated one that
returned the same result, answered "I'm sorry, but I can't assist with that request." or "No new
information to provide." instead (test split, seed 1126)."""
_TASK_NOTICE = (
    'The results above are in. If they answer every part of the task "{task}", answer it now in plain text, in the '
    "form it asks for; call a tool only for a part they do not answer."
)
"""Told a small model after a stage that returned several results at once (sub-agents' reports, or parallel
tool calls) on a task of several parts. Without it, Qwen2.5-Coder-1.5B answered a wide-research table task
with "Name: born (year) 1987, employer …" prose, or a table without the key column, after its four
sub-agents' reports. After a stage of one result it is not told: a single agent running one call per turn,
told so (in this or a neutral wording) after its first look-up, answered at once and invented the rest (dev).
Worded "If the results above answer every part of the task …, answer it now, in the form it asks for." until
2026-11-28: after its first batch of direct calls, single-parallel sent the same batch again in 8 of 9 replayed BFCL
dev turns (the form a request asks for is its calls), and in 0 of 9 told "The results above are in. Answer the user
now in plain text if they cover every part of the task …; call a tool only for a part they do not cover." (this
wording keeps "in the form it asks for", which the tables need; on 10 BFCL dev tasks single-parallel then emitted 42
calls for 30 gold, against 66; experiments/results/yardstick-dev/bfcl-notice-replay-dev, bfcl-request-only-dev)."""
_NAMES_NOTICE = (
    "Your table names {named} of the {total} items the task lists ({items}). Answer the task again, in the "
    "form it asks for, with each item written as the task gives it beside its own results."
)
"""Told a small model once when its table answering a task of several named items names at most half of them.
Qwen2.5-Coder-1.5B wrote wide-research tables whose key column held a value instead of the entity
(``| Pharmacist | b.landsou18@… |`` under ``| person | role | email |``), copied from sub-agents' reports
that had no name column (dev seed 1); the scorer matches rows by their key, so every row was lost."""
_SPLIT_FIRST = (
    "This task lists several items. Sub-agents run in parallel: give each item its own assign_task call, "
    "all in one message, each task complete on its own. For this task, send these calls in one message:\n{calls}"
)
"""Shown a small orchestrator before its first turn on a task that lists items. Without it,
Qwen2.5-Coder-1.5B handed the whole list to one sub-agent on the first turn of every wide-research task
(dev seed 3: 10 of 10), which the split refusal sent back with these calls: a turn (about 11 s and a
critical step) spent on every such episode."""
_ANSWER_ITSELF = 'Answer this yourself now, in plain text: "{task}"'
"""Told a small orchestrator whose one-part task nobody has tools for (delegation withheld). Without it,
Qwen2.5-Coder-1.5B under the team-lead prompt answered "Who wrote the book Dracula?" with "1897." and
refused a one-word translation as needing a sub-agent (controls, dev seed 0)."""
_WITHHELD = "not run: {name} is not offered on this turn. This task asks one thing, which you can do yourself: "
_LOOK_FIRST = "look it up with your own tools first, then answer, or assign it if the results do not answer it."
_ANSWER_IT = "answer it now in plain text."
_SAME_RESULT = (
    "You already made exactly this call and it returned the same result as before, repeated below. "
    "Do not repeat it: answer the user now if you have what you need.\n\n"
)


# -- the coaches ------------------------------------------------------------------------------------


class Coach:
    """The hooks the engine calls (see the module docstring); :class:`NoCoach` implements them."""

    name: str
    subagents: StepCoach

    def start(self) -> CoachState:
        raise NotImplementedError

    def before_turn(self, state: CoachState, view: TurnView) -> TurnAdvice:
        raise NotImplementedError

    def review(self, state: CoachState, calls: Sequence[ToolCall], view: ReviewView) -> dict[str, Refusal]:
        raise NotImplementedError

    def after_stage(self, state: CoachState, outcomes: Sequence[CallOutcome]) -> list[str]:
        raise NotImplementedError

    def review_answer(self, state: CoachState, answer: str, task: str) -> str | None:
        """A notice that sends ``answer`` back to the model for one more turn, or ``None`` to accept it
        (the engine never asks about a last turn's answer: no budget is left for another)."""
        raise NotImplementedError


class NoCoach(Coach):
    """Capable models: no tactics, only the guards every model gets.

    - The last turn (budget spent, or a verdict) is told why, and to answer.
    - A finished ``assign_task`` is not run again; the model is shown its report.
    - A repeated failed call, or one that returns what it returned before, says so; ``max_repeats``
      turns in a row that only repeat earlier calls stop the episode (``stuck`` when they failed).
    - A turn that only re-assigns finished tasks is followed by the answer turn.
    - A single agent runs its turn's direct calls together, or, with ``parallel_tool_calls=False``,
      the first one only (the ``single`` arm; ``True`` is ``single-parallel``).
    """

    name = "none"

    def __init__(self, *, max_repeats: int = 2, parallel_tool_calls: bool | None = None) -> None:
        self.max_repeats = max_repeats
        self.parallel = True if parallel_tool_calls is None else parallel_tool_calls
        self.subagents = NoStepCoach()

    def start(self) -> CoachState:
        return CoachState()

    def before_turn(self, state: CoachState, view: TurnView) -> TurnAdvice:
        state.withheld = frozenset()
        if state.stop is not None:
            return TurnAdvice("none", (state.stop_notice,), ending=state.stop)
        if view.last:
            ending = Ending(EpisodeStatus.BUDGET_EXHAUSTED)
            return TurnAdvice("none", (_BUDGET_NOTICE[view.subagents],), ending=ending)
        return TurnAdvice("auto", parallel_tool_calls=view.subagents or self.parallel)

    def review_answer(self, state: CoachState, answer: str, task: str) -> str | None:
        return None

    def review(self, state: CoachState, calls: Sequence[ToolCall], view: ReviewView) -> dict[str, Refusal]:
        if not view.subagents:
            return {} if self.parallel else hold_after_first(calls)
        return self._review_assignments(state, calls, view, distinct=False)

    @staticmethod
    def _withheld(state: CoachState, calls: Sequence[ToolCall]) -> dict[str, Refusal]:
        """Calls to a tool this turn withheld (a backend that cannot narrow the choice let them through)."""
        return {
            c.id: (_WITHHELD.format(name=c.name) + state.withheld_why, ErrorType.TOOL_WITHHELD)
            for c in calls
            if c.name in state.withheld
        }

    def _review_assignments(
        self, state: CoachState, calls: Sequence[ToolCall], view: ReviewView, *, distinct: bool
    ) -> dict[str, Refusal]:
        """Finished tasks assigned again, and (``distinct``) copies of one task within the turn."""
        refused: dict[str, Refusal] = {}
        seen: set[tuple[str, str]] = set()
        for c in calls:
            key = assignment_key(c, view.agents)
            if key is None:
                continue
            if distinct:
                folded = (key[0], key[1].casefold())
                if folded in seen:
                    refused[c.id] = (
                        "the same task was already assigned in this message and runs once; this copy was not run.",
                        ErrorType.DUPLICATE_TASK,
                    )
                    continue
                seen.add(folded)
            if key in state.completed:
                refused[c.id] = (
                    f"this exact task already completed; its result: {state.completed[key]}\n"
                    "Do not assign it again: answer the user now if you have every part.",
                    ErrorType.ALREADY_DONE,
                )
        return refused

    def after_stage(self, state: CoachState, outcomes: Sequence[CallOutcome]) -> list[str]:
        shown: list[str] = []
        ran = repeats = failed_again = done_again = 0
        for o in outcomes:
            content = o.content
            held = o.error_type == ErrorType.ONE_CALL_PER_TURN  # not run: the model was told to send it again
            ran += not held
            if o.assignment is not None:  # a sub-agent's report (a 1,000-way stage: no signature needed)
                if not o.is_error:
                    state.completed[o.assignment] = content
            elif o.error_type == ErrorType.ALREADY_DONE:
                repeats, done_again = repeats + 1, done_again + 1
            elif o.is_error and not held:
                sig = call_signature(o.call)
                if sig in state.failed:
                    repeats, failed_again = repeats + 1, failed_again + 1
                    content = repeat_notice(content)
                state.failed.add(sig)
            elif not held:
                sig = call_signature(o.call)
                if state.returned.get(sig) == content:
                    repeats += 1
                    content = _SAME_RESULT + content  # the result stays in view (a 1.5B lost it)
                state.returned[sig] = o.content
            shown.append(content)
        self._verdict(state, outcomes, ran, repeats, failed_again, done_again)
        return shown

    def _verdict(
        self, state: CoachState, outcomes: Sequence[CallOutcome], ran: int, repeats: int, failed_again: int, done: int
    ) -> None:
        """A turn that only re-assigned finished tasks is followed by the answer turn; ``max_repeats``
        turns in a row that only repeat earlier calls (failed again, or returning what they did) end
        the episode: ``stuck`` when the last one repeated failures, else ``completed``."""
        if ran and done == ran and state.stop is None:  # it has every result: the next turn answers
            state.stop, state.stop_notice = Ending(EpisodeStatus.COMPLETED), _DONE_NOTICE
        state.repeat_turns = state.repeat_turns + 1 if ran and repeats == ran else 0
        if state.repeat_turns < self.max_repeats:
            return
        if failed_again:
            state.stop_notice = _STUCK_NOTICE
            state.stop = Ending(
                EpisodeStatus.STUCK,
                f"stopped after {state.repeat_turns} turns in a row that only repeated failed calls "
                f"(last: {call_signature(outcomes[-1].call)[:200]})",
                ErrorType.ACTION_LOOP,
            )
        elif state.stop is None:
            state.stop, state.stop_notice = Ending(EpisodeStatus.COMPLETED), _RETURNED_NOTICE


class SmallModelCoach(NoCoach):
    """Sub-3B models (Qwen2.5-Coder-0.5B/1.5B, SmolLM2): :class:`NoCoach`'s guards, plus:

    - The first turn must act (``tool_choice="required"``) where acting is needed: the task lists
      several items (swarm: one sub-agent each), or the agent has tools (else a small model answers
      from its own weak recall). A one-fact question without tools may be answered directly.
    - Before a swarm's first turn on a list task that does not ask for sub-agents in words it is shown
      one ``assign_task`` call per item, to its one defined sub-agent type or the worker
      (:func:`split_calls`; with several defined types, none); a whole list task handed to one
      sub-agent is still refused once, with the calls to send instead (:func:`split_notice`); the next
      turn must act.
    - Copies of one task within a turn run once (a small model loops on the same call to its cap).
    - After its own tool calls on a one-part task, it is asked the question again: answer it now if the
      results answer it (a small model otherwise keeps calling tools, or loses the question).
    - After a stage that returned several results at once on a task of several parts, it is given the
      task again, to answer in the form it asks for (never after one result: a single agent answered early).
    - An orchestrator does a one-part task itself first where a sub-agent could do no more (unless the
      task asks for sub-agents in words): with
      tools of its own it looks it up (``assign_task`` and ``create_subagent`` are withheld from its
      choice until a stage has run its own calls or a sub-agent has run); with no tools anywhere it
      answers. With no tools of its own while sub-agents have some, it may delegate at once. (The 1.5B handed 40 % of
      one-fact controls to a sub-agent, and re-assigned the same look-up when a review refused it.)
    - A table answering a task that lists named items, naming at most half of them, goes back once with
      a notice to answer again with each item beside its results (its tables dropped the key column).
    - Its sub-agents, and a single agent, call a tool first, answer on their last step, and run one
      call per turn (:class:`~agent_swarm.subagents.coach.SmallModelStepCoach`).
    """

    name = "small"

    def __init__(self, *, max_repeats: int = 2, parallel_tool_calls: bool | None = None) -> None:
        super().__init__(max_repeats=max_repeats, parallel_tool_calls=bool(parallel_tool_calls))
        self.subagents = SmallModelStepCoach(one_part=one_part)

    def before_turn(self, state: CoachState, view: TurnView) -> TurnAdvice:
        advice = super().before_turn(state, view)
        notice = self._again(state, view.task)
        if notice:
            advice = TurnAdvice(
                advice.tool_choice, (*advice.notices, notice), advice.parallel_tool_calls, advice.ending
            )
        if advice.ending is not None:
            return advice
        if self._itself(state, view):
            state.withheld = frozenset((ASSIGN, CREATE))
            state.withheld_why = _LOOK_FIRST if view.direct_tools else _ANSWER_IT
            if view.direct_tools:  # it looks the task up with its own tools
                return TurnAdvice("required", advice.notices, advice.parallel_tool_calls, withheld=state.withheld)
            notice = _ANSWER_ITSELF.format(task=" ".join(view.task.split()))  # no tools anywhere: it answers
            return TurnAdvice("auto", (*advice.notices, notice), advice.parallel_tool_calls, withheld=state.withheld)
        if not self._must_act(state, view):
            return advice
        split = self._split_first(view)
        notices = (*advice.notices, split) if split else advice.notices
        return TurnAdvice("required", notices, advice.parallel_tool_calls)

    @staticmethod
    def _split_first(view: TurnView) -> str:
        """On the first turn of a swarm whose task lists items and does not say how to use sub-agents:
        the calls that give each item its own sub-agent (the one type a user or workload defined, else
        the built-in worker), shown before it acts; else ``""``: with several defined types, and where
        the task asks for sub-agents in words (it says how already, and the calls would cost their
        prefill: the README command's)."""
        if not (view.subagents and view.agents and view.stages == 0) or _ASKS_FOR_SUBAGENTS.search(view.task):
            return ""
        own = [a for a in view.agents if a != WORKER]  # the types a user or workload defined
        if len(own) > 1:
            return ""  # which type suits is the model's choice: the refusal names the calls for the one it picks
        calls = split_calls(view.task, own[0] if own else WORKER, view.width)
        return _SPLIT_FIRST.format(calls=calls) if calls else ""

    @staticmethod
    def _again(state: CoachState, task: str) -> str:
        """The task again, after the results of its own tool calls (a one-part task) or of a stage that
        returned several (a task of several parts, in the form it asks for); else ``""``."""
        if one_part(task):
            return _QUESTION_NOTICE.format(task=" ".join(task.split())) if state.direct else ""
        return _TASK_NOTICE.format(task=" ".join(task.split())) if state.results > 1 else ""

    @staticmethod
    def _itself(state: CoachState, view: TurnView) -> bool:
        """A one-part task that a sub-agent could do no better (the orchestrator has tools of its own,
        or nobody has any), that does not ask for sub-agents, and nothing looked up or delegated yet."""
        return (
            view.subagents
            and (view.direct_tools or not view.has_tools)
            and not state.looked
            and not view.subagents_ran
            and one_part(view.task)
            and _ASKS_FOR_SUBAGENTS.search(view.task) is None
        )

    def after_stage(self, state: CoachState, outcomes: Sequence[CallOutcome]) -> list[str]:
        state.direct = any(o.call.name not in (ASSIGN, CREATE) for o in outcomes)
        state.looked = state.looked or state.direct
        state.results = sum(not o.is_error for o in outcomes)
        return super().after_stage(state, outcomes)

    @staticmethod
    def _must_act(state: CoachState, view: TurnView) -> bool:
        if state.must_act:
            return True
        if view.stages:
            return False
        return view.has_tools or (view.subagents and lists_items(view.task))

    def review(self, state: CoachState, calls: Sequence[ToolCall], view: ReviewView) -> dict[str, Refusal]:
        if not view.subagents:
            return super().review(state, calls, view)
        refused = self._review_assignments(state, calls, view, distinct=True) | self._withheld(state, calls)
        state.must_act = False
        if state.split_nudged or view.subagents_ran:
            return refused
        runs = [c for c in calls if c.id not in refused and assignment_key(c, view.agents) is not None]
        if len(runs) == 1 and lists_items(view.task) and lists_items(str(runs[0].arguments["task"])):
            agent, _ = resolve_agent(runs[0].arguments.get("agent"), view.agents)
            refused[runs[0].id] = (split_notice(view.task, agent or "", view.width), ErrorType.SPLIT_TASK)
            state.must_act = state.split_nudged = True
        return refused

    def review_answer(self, state: CoachState, answer: str, task: str) -> str | None:
        if state.answer_reviewed:
            return None
        items = [i for i in listed_items(task) if any(ch.isalpha() for ch in i)]
        if len(items) < 2 or _TABLE_ROW.search(answer) is None:
            return None  # prose is left alone: a bare "done" after tool calls, "Paris and Tokyo"
        text = _folded(answer)
        named = sum(_folded(i) in text for i in items)
        if 2 * named > len(items):
            return None
        state.answer_reviewed = True
        state.results, state.direct = 0, False  # the notice replaces the task-again notices of the last stage
        return _NAMES_NOTICE.format(named=named, total=len(items), items=", ".join(items))


def assignment_key(c: ToolCall, agents: Mapping[str, AgentDefinition]) -> tuple[str, str] | None:
    """``(type, task)`` of an ``assign_task`` call that admission would run, else ``None``."""
    if c.name != ASSIGN or c.error is not None:
        return None
    name, _ = resolve_agent(c.arguments.get("agent"), agents)
    task = c.arguments.get("task")
    if name is None or not isinstance(task, str) or not task.strip():
        return None
    return name, task.strip()


CoachFactory = Callable[..., Coach]
COACHES: Registry[CoachFactory] = Registry("coach")
COACHES.add(NoCoach.name, NoCoach)
COACHES.add(SmallModelCoach.name, SmallModelCoach)


def coach_for(name: str, *, max_repeats: int = 2, parallel_tool_calls: bool | None = None) -> Coach:
    """The coach registered as ``name`` (``none``, ``small``); unknown names fail with the known ones."""
    return COACHES.get(name)(max_repeats=max_repeats, parallel_tool_calls=parallel_tool_calls)


# -- list tasks: recognising and splitting them -----------------------------------------------------

# A bulleted or numbered list of two or more lines.
_BULLETS = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+.+\n\s*(?:[-*•]|\d+[.)])\s+", re.M)

SPLIT_NOTICE = (
    "not run yet: this task lists several items, and one sub-agent would do them one after another. "
    "Give each item its own assign_task call, all in one message (they run in parallel), each task "
    "complete on its own. If the task really cannot be split, assign it again unchanged."
)

# A name, a number, a quoted or bracketed word, an operator.
_ITEM_START = re.compile(r"^(?:[A-Z0-9'\"‘“(\[]|[-+*/×=]$)")
# Capitalised, but no item: "I prefer a SUV and I will pick it up" lists nothing (BFCL dev, 2026-11-28).
_PRONOUNS = frozenset({"I", "I'm", "I'd", "I'll", "I've", "I’m", "I’d", "I’ll", "I’ve"})
_CONNECTORS = frozenset({"and", "of", "the", "de", "la", "du", "y"})  # inside names: Crime and Punishment
_SENTENCE_END = re.compile(r"[.?!;]")
_SENTENCES = re.compile(r".+?(?:[.?!;](?=\s|$)|$)")  # "3.5" and "v1.2" do not end a sentence
# "these 6 customers: Ava Lopez." and "both France." misstate one item's task: the count goes.
_COUNT = re.compile(
    r"\b(these|those|the|all|following)\s+(?:\d+|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)\s+"
    r"|\bboth\s+$",
    re.I,
)
_ASKS_FOR_SUBAGENTS = re.compile(r"\bsub-?agents?\b|create_subagent|assign_task|\bdelegate\b", re.I)
"""A task that asks for sub-agents in words ("Use a sub-agent to …") gets them even when it is one part."""
_PER_ITEM = re.compile(r"^for (?:each|every)\b", re.I)  # "For each one give: zip, orders."


# One name, not a list: a title in quotes ("'War and Peace'"), a run of names right after a singular
# head noun ("the book Pride and Prejudice", "the company Procter & Gamble"), or after a singular head and
# "of" in a question with a singular verb ("What is the capital of Trinidad and Tobago?"); a plural head
# ("the books Emma and Dracula", "What are the capitals of France and Japan?") keeps its list.
_QUOTED = re.compile(r"(?<!\w)([\"“‘'])[^\"“”‘’']*?[\"”’'](?!\w)")
_GLUE = "\x00"  # joins a quoted title's words (not whitespace to str.split)
_COMMA = "\x01"  # a comma inside brackets or quotes (no list separator)
_BRACKETED = re.compile(r"\[[^\[\]]*\]|\([^()]*\)")  # one level: "[1, 2, 3]", "(Los Angeles, CA)"
_EXAMPLES = re.compile(r"^(?:etc\b|and so on\b|and more\b)", re.I)  # "like Director, Cast, Awards etc.": examples
_DETERMINERS = frozenset({"the", "a", "an", "this", "that"})
_NOT_HEADS = frozenset({"of", "in", "for", "to", "from", "with", "by", "on", "at", "as", "about", "between", "and"})
_SINGULAR_S = ("ss", "us", "is")  # business, campus, analysis
_SINGULAR = frozenset({"series", "species", "news"})
_PLURAL = frozenset({"people", "men", "women", "children", "data"})


def _singular_head(words: Sequence[str]) -> bool:
    """Whether ``words`` end in a determiner and a singular common noun (``… the book``, ``a film``)."""
    if len(words) < 2 or words[-2].lower() not in _DETERMINERS:
        return False
    head = words[-1]
    if not head.isalpha() or not head.islower() or head in _NOT_HEADS or head in _PLURAL:
        return False
    return head in _SINGULAR or not head.endswith("s") or head.endswith(_SINGULAR_S)


def _singular_of(words: Sequence[str]) -> bool:
    """Whether ``words`` end in ``… is/was the <singular noun> of``: one thing of one name follows
    (``What is the capital of Trinidad and Tobago?``), where ``What are the capitals of`` lists."""
    if len(words) < 4 or words[-1].lower() != "of" or not _singular_head(words[:-1]):
        return False
    return any(w.lower() in ("is", "was") or w.lower().endswith(("'s", "’s")) for w in words[:-3])


def _item_word(word: str) -> bool:
    """Whether ``word`` can be (part of) a listed item: a name, a number, a quoted or bracketed word or an
    operator, not the pronoun ``I``."""
    return _ITEM_START.match(word) is not None and word not in _PRONOUNS


def lists_items(text: str) -> bool:
    """Whether a task names several items: ``France and Japan``, ``sodium, zinc, iron`` (the lists
    :func:`split_items` reads, of any length), or a bulleted list. A title is one item (``the book
    Pride and Prejudice``, ``'War and Peace'``), and so is a phrase of verbs (``write code and test it``)."""
    return _BULLETS.search(text) is not None or _longest_list(text) is not None


def _name(words: Sequence[str]) -> bool:
    """Whether ``words`` read as one name: capitalised words, numbers or quoted words, and connectors
    between them (``The Adventures of Tom Sawyer``)."""
    return bool(words) and all(
        _item_word(w) or (0 < i < len(words) - 1 and w.lower() in _CONNECTORS) for i, w in enumerate(words)
    )


def _list_around(left: str, right: str, min_items: int) -> tuple[str, list[str], str] | None:
    """``(prefix, items, rest)`` of the list whose last separator sits between ``left`` and ``right``
    (one sentence cut at its last "and"/"&" or, for a list of commas only, at its last comma)."""
    pieces = [p.strip() for p in left.split(",")]
    head, middle = pieces[0], pieces[1:]
    if any(not p or (len(p.split()) > 4 and not _name(p.split())) for p in middle):
        return None  # not a list of short items or names
    words = head[head.rfind(":") + 1 :].split()
    run: list[str] = []
    for w in reversed(words[1:] if head.rfind(":") < 0 else words):  # never the sentence's first word
        if not _item_word(w):
            break
        run.insert(0, w)
    rwords = right.split()
    last: list[str] = []
    for i, w in enumerate(rwords):
        following = rwords[i + 1] if i + 1 < len(rwords) else ""
        if _item_word(w) or (last and w.lower() in _CONNECTORS and _item_word(following)):
            last.append(w)
        else:
            break
    listed = head.rfind(":") >= 0 and 0 < len(words) <= 4 and 0 < len(rwords) <= 4  # "elements: tin and zinc"
    if not middle and not (run and last) and not listed:
        return None  # "X and Y" is a list only of names, numbers or quoted words ("write code and test it" is not)
    if not middle and run and (_singular_head(before := left.split()[: -len(run)]) or _singular_of(before)):
        return None  # one title or name: "the book Pride and Prejudice", "is the capital of Trinidad and Tobago"
    sizes = sorted(len(p.split()) for p in middle) or [len(rwords)]
    k = sizes[len(sizes) // 2]
    first = " ".join(run or words[-k:])
    prefix = head[: head.rfind(first)] if first else ""
    last = last or rwords[:k]
    items = [first, *middle, " ".join(last)]
    rest = " ".join(rwords[len(last) :])
    if not prefix.strip() or not first or not last or len(items) < min_items or _EXAMPLES.match(rest):
        return None
    if prefix.split()[-1].lower() == "between":
        return None  # one pair: "the distance between [1, 2] and [3, 4]", "between Paris and Rome"
    return prefix, items, rest


def _lists_in(sentence: str) -> list[tuple[str, list[str], str]]:
    """Every list in one sentence (no end mark): around each "and"/"&", and a list of commas only
    (three or more items: ``customers: Ava Lopez, Ava Hernandez, Amelia Rossi``; two after a colon)."""
    found = []
    # A quoted title is one word here ("'War and Peace'" lists nothing, "'New York, NY'" is one item), and
    # so is a bracketed value ("[40.7128, -74.0060]", "(Los Angeles, CA)"); both come back at the end.
    sentence = _QUOTED.sub(lambda m: m[0].replace(" ", _GLUE).replace(",", _COMMA), sentence)
    sentence = _BRACKETED.sub(lambda m: m[0].replace(" ", _GLUE).replace(",", _COMMA), sentence)
    for m in re.finditer(r"\s(?:and|&)\s", sentence):
        got = _list_around(sentence[: m.start()].rstrip(","), sentence[m.end() :], 2)
        if got is not None:
            found.append(got)
    commas = sentence.count(",")
    colon = 0 <= sentence.find(":") < sentence.find(",")
    if not found and (commas >= 2 or (commas == 1 and colon)):
        left, _, right = sentence.rpartition(",")
        got = _list_around(left, right, 3 if commas >= 2 else 2)  # two after a colon: "companies: A, B"
        if got is not None:
            found.append(got)

    def back(text: str) -> str:
        return text.replace(_GLUE, " ").replace(_COMMA, ",")

    return [(back(p), [back(i) for i in items], back(r)) for p, items, r in found]


def _sentences(task: str) -> list[str]:
    return [s for s in _SENTENCES.findall(" ".join(task.split())) if s.strip()]


def _longest_list(task: str) -> tuple[int, tuple[str, list[str], str], str] | None:
    """``(sentence index, (prefix, items, rest), end mark)`` of the longest list in ``task``, or ``None``."""
    best: tuple[int, tuple[str, list[str], str], str] | None = None
    for i, sentence in enumerate(_sentences(task)):
        if _PER_ITEM.match(sentence.strip()):
            continue  # what to give for each item ("For each one give: zip, orders.") lists no items
        body = sentence.rstrip()
        mark = body[-1] if body and _SENTENCE_END.match(body[-1]) else ""
        body = body[: len(body) - len(mark)]
        for got in _lists_in(body):
            if best is None or len(got[1]) > len(best[1][1]):
                best = (i, got, mark)
    return best


def one_part(task: str) -> bool:
    """Whether a task asks for one thing: it lists no items (:func:`lists_items`)."""
    return not lists_items(task)


def listed_items(task: str) -> list[str]:
    """The items of the longest list in ``task`` as written there (``[]`` when it lists none):
    ``Find the capitals of India, Kenya and Chile.`` gives ``India``, ``Kenya``, ``Chile``."""
    best = _longest_list(task)
    return [] if best is None else best[1][1]


def split_items(task: str, max_items: int = 16) -> list[str] | None:
    """One self-contained task per item of the longest list in ``task``, or ``None`` when no list of
    2 to ``max_items`` items is found: ``Find the capitals of India, Kenya and Chile.`` gives ``Find
    the capitals of India.``, ``… of Kenya.``, ``… of Chile.``. The sentence holding the list is kept,
    with the sentences after it that say what to do for each item (``For each one give: zip,
    orders.``); the rest of the task (how to format the whole answer) is the orchestrator's. A
    suggestion shown to the model, never run by itself."""
    sentences, best = _sentences(task), _longest_list(task)
    if best is None:
        return None
    i, (prefix, items, rest), mark = best
    if len(items) > max_items:
        return None
    per_item = [s.strip() for s in sentences[i + 1 :] if _PER_ITEM.match(s.strip())]
    suffix = (f" {rest}" if rest else "") + mark + "".join(f" {s}" for s in per_item)
    prefix = _COUNT.sub(lambda m: f"{m[1]} " if m[1] else "", prefix)
    return [f"{prefix}{item}{suffix}".strip() for item in items]


_TABLE_ROW = re.compile(r"^\s*\|.*\|", re.M)  # a markdown table row


def _folded(text: str) -> str:
    """``text`` for a loose containment test: lower case, quotes dropped, runs of spaces as one."""
    return " ".join(re.sub(r"[\"“”‘’']", "", text).lower().split())


def split_calls(task: str, agent: str, max_items: int = 16) -> str:
    """One ``assign_task`` call per item of the list in ``task`` to ``agent``, a JSON object a line
    (:func:`split_items`); ``""`` when no list of at most ``max_items`` (what one stage admits) can be read
    from the task. The cap was a fixed 8 until 2026-11-28: on 16-entity wide-research tasks the 1.5B was shown
    no calls, handed the whole list to one sub-agent in 28 of 30 (test seed 2011) and scored 0.14 item-F1."""
    parts = split_items(task, max_items)
    if parts is None:
        return ""
    return "\n".join(
        json.dumps({"name": ASSIGN, "arguments": {"agent": agent, "task": p}}, ensure_ascii=False) for p in parts
    )


def split_notice(task: str, agent: str, max_items: int = 16) -> str:
    """The refusal of a whole list task given to one sub-agent, with the calls to send instead when
    the list can be read from the task (small models copy a concrete call far better than they
    follow a description)."""
    calls = split_calls(task, agent, max_items)
    return f"{SPLIT_NOTICE}\nFor this task, send these calls in one message:\n{calls}" if calls else SPLIT_NOTICE
