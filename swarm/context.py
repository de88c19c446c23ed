"""Fitting an agent's conversation into its context: a recorded, deterministic rule.

Every agent (the orchestrator, a single agent, a sub-agent) knows its context window: the config's
``context_tokens``, else what its backend says (:func:`agent_swarm.swarm.backend.context_window`). Before each
turn, :func:`fit_context` checks the request against it (a conservative character estimate, and the
backend's own token count when the estimate does not fit). When the prompt would overflow:

1. tool results and sub-agent reports are shortened, oldest first, to a head/tail excerpt of
   :data:`EXCERPT_CHARS` characters (the call that made them stays whole), until the prompt is back
   under three quarters of its limit, so cuts come in rare batches rather than every turn; the
   results of the latest turn are cut last;
2. if all of them as excerpts still overflow, the context is exhausted: every result is cut to
   :data:`LAST_TURN_CHARS` and the agent gets one last turn, without tools, to answer from what fits
   (status ``context_exhausted``);
3. if not even that fits, the agent ends ``context_exhausted`` without another turn.

Each shortened message is recorded (:class:`~agent_swarm.swarm.records.ContextCut`) and replaced in the
conversation for good: later turns continue the shortened conversation, and the turn after a cut is
marked as a re-rendered prompt (``OrchestratorTurn.context_cut``), which RL never trains across.
The same conversation, window and token counts give the same cuts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from agent_swarm.swarm.backend import ModelRequest, estimate_tokens, prompt_tokens
from agent_swarm.swarm.messages import AssistantMessage, Message, ToolMessage
from agent_swarm.swarm.records import ContextCut

__all__ = [
    "EXCERPT_CHARS",
    "EXHAUSTED_NOTICE",
    "LAST_TURN_CHARS",
    "Fit",
    "excerpt",
    "fit_context",
    "prompt_limit",
]

EXCERPT_CHARS = 600
"""Characters a shortened tool result or report keeps (two thirds head, one third tail)."""
LAST_TURN_CHARS = 120
"""Characters each result keeps for the last turn of an exhausted context."""
_SLACK = 160
"""A message this much longer than an excerpt is not worth cutting (the marker costs ~60 characters)."""

EXHAUSTED_NOTICE = (
    "Your conversation no longer fits your context: earlier tool results were shortened. No more tool "
    "calls: answer now from what you have read, in the form your instructions ask for."
)


def excerpt(text: str, limit: int, *, why: str = "cut") -> str:
    """``text`` cut to about ``limit`` characters: its head and tail, with how much was cut between."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n…[{len(text) - limit} of {len(text)} characters {why}]…\n{text[len(text) - tail :]}"


def prompt_limit(window: int, max_tokens: int) -> int:
    """The prompt tokens a turn may use in ``window``: what is left after its completion (at most a
    quarter of the window) and a little template slack."""
    return window - min(max_tokens, window // 4) - 16


@dataclass(slots=True)
class Fit:
    """What :func:`fit_context` did: the cuts made now, whether the agent must answer now
    (``exhausted``: its last turn), and whether even that turn fits (``fits``)."""

    cuts: list[ContextCut] = field(default_factory=list)
    exhausted: bool = False
    fits: bool = True
    tokens: int = 0


class _Counter:
    """Prompt tokens of the conversation as it is cut: the backend's exact count once, then the
    character estimate scaled by the ratio that count showed (deterministic for one tokenizer)."""

    def __init__(self, request: ModelRequest, exact: int) -> None:
        self.request = request
        self.ratio = exact / max(1, estimate_tokens(request))

    def __call__(self, messages: Sequence[Message]) -> int:
        return round(estimate_tokens(replace(self.request, messages=tuple(messages))) * self.ratio)


def _cut_order(messages: Sequence[Message]) -> list[int]:
    """Tool results (and sub-agent reports), oldest first; those after the last assistant turn last."""
    last = max((i for i, m in enumerate(messages) if isinstance(m, AssistantMessage)), default=-1)
    tools = [i for i, m in enumerate(messages) if isinstance(m, ToolMessage)]
    return [i for i in tools if i < last] + [i for i in tools if i > last]


def _shorten(messages: list[Message], order: list[int], keep: int, turn: int, done: dict[int, ContextCut]) -> None:
    i = order.pop(0)
    m = messages[i]
    assert isinstance(m, ToolMessage)
    if len(m.content) <= keep + _SLACK:
        return
    new = excerpt(m.content, keep, why="cut to fit the context")
    messages[i] = ToolMessage(tool_call_id=m.tool_call_id, name=m.name, content=new, is_error=m.is_error)
    cut = len(m.content) - len(new)
    first = done.get(i)
    chars = first.chars if first is not None else len(m.content)
    tokens = (first.tokens_cut if first is not None else 0) + max(0, -(-cut // 3))
    done[i] = ContextCut(turn=turn, message=i, name=m.name, chars=chars, kept=keep, tokens_cut=tokens)


async def fit_context(backend: object, messages: list[Message], request: ModelRequest, limit: int, *, turn: int) -> Fit:
    """Shorten ``messages`` (the agent's conversation, which ``request`` was built from) in place
    until ``request`` fits ``limit`` prompt tokens (see the module docstring); ``turn`` is the turn
    about to run (recorded on each cut)."""
    if estimate_tokens(request) <= limit:
        return Fit()
    exact, _ = await prompt_tokens(backend, request)
    if exact <= limit:
        return Fit(tokens=exact)
    count = _Counter(request, exact)
    done: dict[int, ContextCut] = {}
    order = _cut_order(messages)
    target = limit * 3 // 4
    n = exact
    while order and n > target:
        _shorten(messages, order, EXCERPT_CHARS, turn, done)
        n = count(messages)
    exhausted = n > limit
    if exhausted:  # the last turn: room for its notice too
        last = limit - round((len(EXHAUSTED_NOTICE) + 16) / 3 * count.ratio)
        order = _cut_order(messages)
        while order and n > last:
            _shorten(messages, order, LAST_TURN_CHARS, turn, done)
            n = count(messages)
        limit = last
    return Fit(cuts=[done[i] for i in sorted(done)], exhausted=exhausted, fits=n <= limit, tokens=n)
