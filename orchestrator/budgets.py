"""Tree-wide budgets with reservation and refund, and the episode's breadth cap.

Beside critical steps, an episode may cap what its whole tree of agents spends: tokens (uncached
input, cached input, output, and all of them together), model turns, wall time, and cost from a
per-model price table (:class:`Budgets`, ``SwarmConfig.budgets``). ``SwarmConfig.max_subagents_per_episode``
caps how many sub-agents it runs over its whole life.

One object owns them for an episode, the :class:`BudgetLedger`, and the engine consults it at four
points, as it does the critical-step ledger:

* **before each orchestrator turn** (:meth:`BudgetLedger.final_reason`): a turn may call tools only
  if, after it, one more turn to answer still fits; otherwise it is the last turn (tools withdrawn),
  so the episode always keeps enough to answer;
* **after each orchestrator turn** (:meth:`BudgetLedger.charge_turn`);
* **at admission** (:meth:`BudgetLedger.reserve`): what is left, less what the answer turn will need,
  is split into equal shares, one per admitted sub-agent, reserved before any starts; an
  ``assign_task`` that cannot get a share worth one step, or that would pass the breadth cap, is
  refused with the numbers;
* **when a stage ends** (:meth:`BudgetLedger.settle`): what each sub-agent used is charged and the
  rest of its share refunded.

A running sub-agent spends from its :class:`Share` after each model call; when the share cannot cover
another step it ends ``budget_exhausted`` with its partial report (``agent_swarm.subagents.loop``). Turns become
its step cap; wall time, a deadline on the episode clock that also ends it ``budget_exhausted``
(apart from its own ``subagent_timeout_s``, which ends it ``timeout``). With no budget set there is
no ledger at all: nothing is checked and nothing costs.

Token estimates (a prompt not yet sent) count one token per three characters, more than real
tokenizers produce on text, so reserves err on the safe side; spends are the servers' own counts.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_swarm.orchestrator.admission import Assignment
from agent_swarm.swarm.backend import Usage
from agent_swarm.swarm.config import Budgets, Price, SwarmConfig
from agent_swarm.swarm.errors import ConfigError, ErrorType
from agent_swarm.swarm.messages import Message
from agent_swarm.swarm.records import BudgetLine, SubagentResult

__all__ = [
    "BudgetLedger",
    "Reservation",
    "Share",
    "Spend",
    "budget_attributes",
    "budget_overrides",
    "estimate_tokens",
    "new_ledger",
]

CHARS_PER_TOKEN = 3
"""Characters per token in estimates (real tokenizers average 3.5-4.5 on English: this overestimates)."""

_NAMES = ("tokens", "input_tokens", "cached_tokens", "output_tokens", "turns", "cost")


def estimate_tokens(*texts: str) -> int:
    """A safe-side token count of ``texts`` (see :data:`CHARS_PER_TOKEN`)."""
    return sum(len(t) for t in texts) // CHARS_PER_TOKEN + 1


@dataclass(slots=True)
class Spend:
    """Amounts of every budgeted quantity (``tokens`` is derived: input + cached + output)."""

    input_tokens: float = 0.0
    cached_tokens: float = 0.0
    output_tokens: float = 0.0
    turns: float = 0.0
    cost: float = 0.0

    @property
    def tokens(self) -> float:
        return self.input_tokens + self.cached_tokens + self.output_tokens

    def get(self, name: str) -> float:
        return float(getattr(self, name))

    def add(self, other: Spend, k: float = 1.0) -> None:
        self.input_tokens += k * other.input_tokens
        self.cached_tokens += k * other.cached_tokens
        self.output_tokens += k * other.output_tokens
        self.turns += k * other.turns
        self.cost += k * other.cost

    @classmethod
    def of(cls, usage: Usage, turns: int, price: Price | None) -> Spend:
        return cls(
            input_tokens=usage.prompt_tokens - usage.cached_tokens,
            cached_tokens=usage.cached_tokens,
            output_tokens=usage.completion_tokens,
            turns=turns,
            cost=price.cost(usage) if price is not None else 0.0,
        )


def _need(prompt: int, output: int, price: Price | None) -> Spend:
    """What one model turn may spend at most: ``prompt`` tokens in (counted against the uncached and
    the cached limit alike: either could take them all) and ``output`` out."""
    usage = Usage(prompt_tokens=prompt, completion_tokens=output)
    return Spend(prompt, prompt, output, 1, price.cost(usage) if price is not None else 0.0)


def _total_need(need: Spend) -> float:
    return need.input_tokens + need.output_tokens  # a prompt is cached or not, never both


@dataclass(slots=True)
class Share:
    """One sub-agent's reservation: its limits (``None``: unlimited) and what it has spent so far."""

    limits: dict[str, float]
    price: Price | None
    output_cap: int
    spent: Spend = field(default_factory=Spend)
    _next_prompt: int = 0  # the next step's prompt is at least the last prompt plus its completion

    def spend(self, usage: Usage) -> None:
        """Charge one model call (the loop calls this after each step's generation)."""
        self.spent.add(Spend.of(usage, 1, self.price))
        self._next_prompt = usage.prompt_tokens + usage.completion_tokens

    def exhausted(self) -> str | None:
        """Why another step would overrun the share, or ``None`` while one fits."""
        need = _need(self._next_prompt, self.output_cap, self.price)
        for name, limit in self.limits.items():
            used = self.spent.tokens if name == "tokens" else self.spent.get(name)
            step = _total_need(need) if name == "tokens" else need.get(name)
            if used + step > limit:
                return (
                    f"its {_label(name)} share is spent: {_fmt(used)} of {_fmt(limit)} used, "
                    f"and another step needs up to {_fmt(step)}"
                )
        return None


def _label(name: str) -> str:
    return name.replace("_", " ")


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v == int(v) and abs(v) < 1e15 else f"{v:,.4g}"


@dataclass(slots=True)
class Reservation:
    """What :meth:`BudgetLedger.reserve` decided for one stage's admitted assignments."""

    admitted: list[Assignment] = field(default_factory=list)
    """The assignments that got a share (step caps lowered to the turns share)."""
    shares: dict[str, Share] = field(default_factory=dict)
    """Agent id -> its share."""
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    wall_deadline: float | None = None
    """When the sub-agents' wall-time share ends (the episode clock's seconds), when the wall budget is
    set: a sub-agent still running then ends ``budget_exhausted`` (``SubagentRun.wall_deadline``)."""


def _chars(messages: Sequence[Message]) -> int:
    n = 0
    for m in messages:
        n += len(m.content)
        for c in getattr(m, "tool_calls", ()):
            n += len(c.name) + len(str(c.arguments))
    return n


class BudgetLedger:
    """The budget owner of one episode (see the module docstring). Times are the episode clock's seconds."""

    def __init__(
        self,
        budgets: Budgets,
        *,
        orchestrator_model: str,
        subagent_model: str,
        answer_tokens: int,
        subagent_tokens: int,
        report_chars: int,
        max_subagents: int | None = None,
    ) -> None:
        self.budgets = budgets
        self.max_subagents = max_subagents
        self._orch_price = budgets.prices.get(orchestrator_model)
        self._subagent_model = subagent_model
        self._answer_tokens = answer_tokens
        self._subagent_tokens = subagent_tokens
        self._report_chars = report_chars
        self._ratio = 1.0 / CHARS_PER_TOKEN  # tokens per character, learnt from the orchestrator's prompts
        self._next_prompt = 0  # the orchestrator's last prompt + completion: its next prompt is longer
        self._last_turn_s = 0.0
        self._open: list[Share] = []  # shares of the running stage
        self.used = Spend()
        self.subagents_run = 0
        b = budgets
        self._limits: dict[str, float] = {
            name: float(v)
            for name, v in (
                ("tokens", b.max_tokens),
                ("input_tokens", b.max_input_tokens),
                ("cached_tokens", b.max_cached_tokens),
                ("output_tokens", b.max_output_tokens),
                ("turns", b.max_turns),
                ("cost", b.max_cost),
            )
            if v is not None
        }
        self.reserved: dict[str, float] = dict.fromkeys(self._limits, 0.0)

    def _used(self, name: str) -> float:
        return self.used.tokens if name == "tokens" else self.used.get(name)

    def _left(self, name: str) -> float:
        return self._limits[name] - self._used(name) - self.reserved[name]

    @staticmethod
    def _amount(need: Spend, name: str) -> float:
        return _total_need(need) if name == "tokens" else need.get(name)

    def _estimate(self, chars: int) -> int:
        return math.ceil(chars * self._ratio) + 1

    # -- the orchestrator's turns -----------------------------------------------------------------

    def final_reason(self, messages: Sequence[Message], elapsed: float) -> str | None:
        """Why the next orchestrator turn (on ``messages``) must be the last: after it as a tool turn,
        an answer turn would no longer fit. ``None`` while it may call tools."""
        prompt = max(self._estimate(_chars(messages)), self._next_prompt)
        need = _need(prompt, self._answer_tokens, self._orch_price)
        for name in self._limits:
            left, one = self._left(name), self._amount(need, name)
            if left < 2 * one:
                return (
                    f"{_label(name)} budget: {_fmt(max(left, 0))} of {_fmt(self._limits[name])} left, "
                    f"kept for the answer (a turn needs up to {_fmt(one)})"
                )
        wall = self.budgets.max_wall_s
        if wall is not None and wall - elapsed < 2 * max(self._last_turn_s, 0.25):
            return f"wall-time budget: {max(wall - elapsed, 0):.1f} of {wall:g} s left, kept for the answer"
        return None

    def charge_turn(self, usage: Usage, seconds: float, messages: Sequence[Message]) -> None:
        """Charge one orchestrator generation on ``messages`` (and learn its tokens per character)."""
        self.used.add(Spend.of(usage, 1, self._orch_price))
        self._last_turn_s = seconds
        chars = _chars(messages)
        if chars and usage.prompt_tokens:
            self._ratio = max(self._ratio, usage.prompt_tokens / chars)
        self._next_prompt = usage.prompt_tokens + usage.completion_tokens

    # -- sub-agents -------------------------------------------------------------------------------

    def reserve(self, assignments: Sequence[Assignment], elapsed: float) -> Reservation:
        """Reserve a share for each of ``assignments`` (in order) that the budgets and the breadth
        cap allow; refuse the rest with the numbers."""
        out = Reservation()
        n = len(assignments)
        if self.max_subagents is not None:
            n = min(n, max(self.max_subagents - self.subagents_run, 0))
        for a in assignments[n:]:
            out.refused[a.call.id] = (
                f"episode limit of {self.max_subagents} sub-agents reached (max_subagents_per_episode; "
                f"{self.subagents_run} run so far); this assignment was not run. Answer with the results you have.",
                ErrorType.WIDTH_LIMIT,
            )
        first = {a.agent_id: self._estimate(len(a.definition.system_prompt) + len(a.task)) for a in assignments[:n]}
        prices = {a.agent_id: self.budgets.prices.get(a.definition.model or self._subagent_model) for a in assignments}
        k, why = self._fit(assignments[:n], first, prices)
        for a in assignments[k:n]:
            out.refused[a.call.id] = (f"{why}; this assignment was not run.", ErrorType.BUDGET_EXHAUSTED)
        if k == 0:
            return out
        spendable = self._spendable(k)
        wall = self.budgets.max_wall_s
        if wall is not None:
            out.wall_deadline = max(wall - 2 * max(self._last_turn_s, 0.25), elapsed + 0.001)
        for a in assignments[:k]:
            limits = {name: v / k for name, v in spendable.items()}
            share = Share(limits=limits, price=prices[a.agent_id], output_cap=self._subagent_tokens)
            share._next_prompt = first[a.agent_id]
            cap = min(a.step_cap, int(limits["turns"])) if "turns" in limits else a.step_cap
            out.admitted.append(dataclasses.replace(a, step_cap=cap))
            out.shares[a.agent_id] = share
            self._open.append(share)
            for name, v in limits.items():
                self.reserved[name] += v
        self.subagents_run += k
        return out

    def _spendable(self, k: int) -> dict[str, float]:
        """What ``k`` sub-agents may share: what is left, less the answer turn (whose prompt grows by
        ``k`` reports)."""
        prompt = self._next_prompt + self._estimate(k * self._report_chars)
        answer = _need(prompt, self._answer_tokens, self._orch_price)
        return {name: self._left(name) - self._amount(answer, name) for name in self._limits}

    def _fit(
        self, assignments: Sequence[Assignment], first: Mapping[str, int], prices: Mapping[str, Price | None]
    ) -> tuple[int, str]:
        """How many of ``assignments`` get a share worth one step each, and why the rest do not."""
        why = ""
        for k in range(len(assignments), 0, -1):
            spendable = self._spendable(k)
            steps = [_need(first[a.agent_id], self._subagent_tokens, prices[a.agent_id]) for a in assignments[:k]]
            short = None
            for name, v in spendable.items():
                one = max(self._amount(s, name) for s in steps)
                if v / k < one:
                    short = (name, v, one)
                    break
            if short is None:
                return k, why
            if not why:
                name, v, one = short
                left = max(self._left(name), 0)
                why = (
                    f"the {_label(name)} budget cannot cover another sub-agent: {_fmt(left)} of "
                    f"{_fmt(self._limits[name])} left, {_fmt(min(left, left - v))} of it kept for the answer, "
                    f"and one sub-agent step needs up to {_fmt(one)}"
                )
        return 0, why

    def settle(self, results: Iterable[SubagentResult]) -> None:
        """The stage ended with ``results`` (backups and cut stragglers included): release its shares
        and charge what each sub-agent used (the rest of its share is refunded). Charged from the
        results, so sub-agents a placement ran elsewhere are counted too."""
        self._open.clear()  # every share of the stage: nothing stays reserved (no float residue either)
        self.reserved = dict.fromkeys(self._limits, 0.0)
        for r in results:
            self.used.add(Spend.of(r.usage, r.steps, self.budgets.prices.get(r.model)))

    # -- reporting --------------------------------------------------------------------------------

    def report(self, elapsed: float) -> dict[str, BudgetLine]:
        """Each budget set: its limit, what was used, what is reserved now, and what is left."""
        out: dict[str, BudgetLine] = {}
        for name in _NAMES:
            if name in self._limits:
                used, reserved, limit = self._used(name), self.reserved[name], self._limits[name]
                out[name] = BudgetLine(limit=limit, used=used, reserved=reserved, left=limit - used - reserved)
        wall = self.budgets.max_wall_s
        if wall is not None:
            out["wall_s"] = BudgetLine(limit=wall, used=elapsed, left=wall - elapsed)
        if self.max_subagents is not None:
            m = float(self.max_subagents)
            out["subagents"] = BudgetLine(limit=m, used=self.subagents_run, left=m - self.subagents_run)
        return out


def new_ledger(config: SwarmConfig, orchestrator_model: str, subagent_model: str) -> BudgetLedger | None:
    """The ledger of one episode, or ``None`` when ``config`` sets no budget and no breadth cap."""
    if not (config.budgets.active or config.max_subagents_per_episode is not None):
        return None
    return BudgetLedger(
        config.budgets,
        orchestrator_model=orchestrator_model,
        subagent_model=subagent_model,
        answer_tokens=config.orchestrator_sampling.max_tokens,
        subagent_tokens=config.subagent_sampling.max_tokens,
        report_chars=config.max_report_chars,
        max_subagents=config.max_subagents_per_episode,
    )


def budget_attributes(lines: Mapping[str, BudgetLine]) -> dict[str, float]:
    """The budgets as span attributes: ``swarm.budget.<name>.{limit,used,reserved,left}``."""
    out: dict[str, float] = {}
    for name, line in lines.items():
        for part in ("limit", "used", "reserved", "left"):
            out[f"swarm.budget.{name}.{part}"] = float(getattr(line, part))
    return out


_FLAG_KEYS = {
    "tokens": "max_tokens",
    "input_tokens": "max_input_tokens",
    "cached_tokens": "max_cached_tokens",
    "output_tokens": "max_output_tokens",
    "turns": "max_turns",
    "wall_s": "max_wall_s",
    "cost": "max_cost",
}


def budget_overrides(flags: Sequence[str] | None) -> dict[str, Any]:
    """``--budget KEY=VALUE`` flags as :class:`~agent_swarm.swarm.config.SwarmConfig` overrides: ``tokens``,
    ``input_tokens``, ``cached_tokens``, ``output_tokens``, ``turns``, ``wall_s``, ``cost`` (into
    ``budgets``, merged with the config file's) and ``subagents`` (``max_subagents_per_episode``).
    Empty without flags; values are checked where the config is validated."""
    out: dict[str, Any] = {}
    budgets: dict[str, float] = {}
    known = ", ".join([*_FLAG_KEYS, "subagents"])
    for flag in flags or ():
        key, sep, raw = flag.partition("=")
        key = key.strip()
        if not sep:
            raise ConfigError(f"--budget {flag!r} must be KEY=VALUE, e.g. --budget tokens=200000; keys: {known}")
        if key != "subagents" and key not in _FLAG_KEYS:
            raise ConfigError(f"unknown budget {key!r} in --budget {flag!r}; known: {known}")
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"--budget {flag!r}: {raw!r} is not a number") from None
        if key == "subagents":
            out["max_subagents_per_episode"] = int(value)
        else:
            budgets[_FLAG_KEYS[key]] = value if key in ("wall_s", "cost") else int(value)
    if budgets:
        out["budgets"] = budgets
    return out
