"""The PARL reward (Kimi K2.5 report, arXiv 2602.02276 §3) and the λ schedules that anneal its auxiliary terms.

``r_PARL = λ1 · r_parallel + λ2 · r_finish + r_perf``

* ``r_perf`` — the task's verifier score in [0, 1] (:mod:`agent_swarm.swarm.verifiers`);
* ``r_parallel`` — the instantiation reward against *serial collapse*; its form is chosen by name
  from :data:`PARALLEL_FORMS` through :class:`ParallelReward` (bounded in [0, 1]):

  - ``"coverage"`` (default): the parts of the task covered *in one stage*, against the task's own
    number of independent parts ``P`` (``task.metadata["parts"]``, which the workloads set; ``target``
    when a task does not say). With ``w`` the most distinct sub-tasks that *finished* in one stage
    (sub-tasks compared by their content words, as the monitors compare them: case, punctuation,
    word order and filler words aside, :mod:`agent_swarm.swarm.subtasks`), ``d`` the sub-agents run on a sub-task
    already run in the episode (duplicates) and ``x`` the distinct sub-tasks beyond ``P`` (invented
    items): ``max(0, (min(w, P) − β · (d + x)) / P)`` with ``β`` = ``overassign`` (default 0.5), and
    **0 whenever P = 1** (a control: nothing to parallelise, so delegating earns nothing over answering
    directly). Serial collapse (one sub-agent per stage, or one doing everything) earns ``1/P``;
    exact fan-out earns 1; a duplicate or invented sub-task never earns and costs half a covered part;
    a sub-agent that failed covers nothing (``r_finish`` counts it);
  - ``"any"``: 1 if at least one sub-agent ran in the episode, else 0;
  - ``"count"``: ``min(1, sub-agents run / target)``;
  - ``"width"``: ``min(1, widest stage / target)``;
  - ``"parts"``: ``max(0, (min(n, P) − max(0, n − P)) / P)`` for ``n`` sub-agents run.

  Why the default changed (issue 28): ``count`` pays width up to ``target`` whatever the task needs;
  trained with it, the 0.5B orchestrator assigned invented items (France and Japan asked, five
  countries assigned). ``parts`` counts sub-agents over all stages, so serial collapse earns it in full,
  and a control (P = 1) delegating its one question earns 1.0 over a direct answer's 0; its full
  take-back per extra sub-agent made "assign one item, then answer" the safe mode of a 0.5B policy.

  A sub-agent *ran* when it was admitted (non-zero step cap) or took a step: assignments refused for
  lack of budget do not count as instantiation;
* ``r_finish`` — the sub-agent finish rate against *spurious parallelism*:
  ``completed / assigned``, where *assigned* counts every sub-agent result of the episode and, with
  ``count_rejected`` (default), also every ``assign_task`` call the engine refused (unknown agent,
  stage width limit). An episode that assigned nothing gets ``empty_value`` (default 0: not assigning
  is not rewarded as a perfect finish rate), except on a task declaring ``parts = 1``, where answering
  directly is the right call and gets ``control_value`` (default 1.0, what a delegation that finished
  gets: on a control, delegating earns nothing over answering).

λ1 and λ2 follow :class:`Schedule` objects (shapes by name from :data:`SCHEDULES`) evaluated at the
trainer step, so the final policy optimises ``r_perf`` alone. :class:`PARLReward` plugs into
``Orchestrator(reward_fn=...)`` and the :class:`~agent_swarm.swarm.records.RewardRecord` it returns keeps every
component, both λs and the step.

:data:`ADVANTAGES` holds PARL's group advantage estimators (Kimi K2.5 report §4.4.2) (``r − r̄``, optionally divided by
the group's standard deviation), by name. This module is the one home of schedules and advantages:
rollout collection (``agent_swarm.orchestrator.rollout.collection``) and the trainer
(``agent_swarm.orchestrator.rl``) both use it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.errors import ConfigError, UnknownNameError
from agent_swarm.swarm.records import AgentStatus, EpisodeRecord, RewardRecord, SubagentResult, Task
from agent_swarm.swarm.registry import Registry
from agent_swarm.swarm.subtasks import task_content

__all__ = [
    "ADVANTAGES",
    "PARALLEL_FORMS",
    "SCHEDULES",
    "AdvantageFn",
    "FinishReward",
    "PARLReward",
    "ParallelCounts",
    "ParallelFormFn",
    "ParallelReward",
    "RewardConfig",
    "RewardFn",
    "Schedule",
    "ScheduleFn",
    "group_mean",
    "group_mean_baseline",
    "group_normalized",
    "parallel_counts",
    "parl_total",
    "r_finish",
    "r_parallel",
    "task_parts",
]


RewardFn = Callable[[EpisodeRecord], Awaitable[RewardRecord]]
"""Scores a finished episode: ``Orchestrator(reward_fn=...)``, a :class:`PARLReward`, a workload's
``Episode.reward`` or ``Episode.reward_with(parl)``."""


# -- schedules (λ1, λ2, sampling temperature, any coefficient annealed over trainer steps) -------------

ScheduleFn = Callable[[float, float], float]
"""``shape(progress, rate) -> w``: the fraction of the way from ``end`` back to ``start`` that is left
at ``progress`` in [0, 1]; ``w(0) = 1`` and ``w(1) = 0`` (``constant`` keeps ``w = 1``)."""

SCHEDULES: Registry[ScheduleFn] = Registry("schedule")


@SCHEDULES.register("constant")
def _constant(p: float, rate: float) -> float:
    return 1.0


@SCHEDULES.register("linear")
def _linear(p: float, rate: float) -> float:
    return 1.0 - p


@SCHEDULES.register("cosine")
def _cosine(p: float, rate: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * p))


@SCHEDULES.register("exponential")
def _exponential(p: float, rate: float) -> float:
    # e^(−rate·p), rescaled so it is exactly 0 at p = 1 (a plain exponential never arrives, and
    # cutting it off at the last step would jump): continuous, strictly decreasing, ends at ``end``.
    return (math.exp(-rate * p) - math.exp(-rate)) / (1.0 - math.exp(-rate))


class Schedule(BaseModel):
    """A value that goes from ``start`` at step 0 to ``end`` at step ``steps`` and stays there.

    ``value(step) = end + (start − end) · shape(min(step / steps, 1))`` with the shape chosen by
    ``kind`` from :data:`SCHEDULES` (``constant`` stays at ``start``). PARL's λ1, λ2 anneal to 0
    (``end`` = 0, the default); K2 decays the sampling temperature (``start=1.0, end=0.7``).
    ``rate`` shapes ``exponential`` only (``e^(−rate·p)`` rescaled to reach ``end``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = "linear"
    start: float = Field(0.1, description="value at step 0")
    end: float = Field(0.0, description="value from step `steps` on")
    steps: int = Field(1000, ge=1, description="trainer steps from start to end")
    rate: float = Field(5.0, gt=0.0, description="exponential only: decay rate over the whole schedule")

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        SCHEDULES.get(v)  # raises UnknownNameError listing the known shapes
        return v

    def value(self, step: int) -> float:
        if step < 0:
            raise ConfigError(f"trainer step must be >= 0, got {step}")
        p = min(step / self.steps, 1.0)
        if p >= 1.0 and self.kind != "constant":
            return self.end
        return self.end + (self.start - self.end) * SCHEDULES.get(self.kind)(p, self.rate)

    def __call__(self, step: int) -> float:
        return self.value(step)


# -- group advantages (PARL, K2.5 §4.4.2) ---------------------------------------------------------------------

AdvantageFn = Callable[[Sequence[float], Sequence[Hashable]], list[float]]
"""``fn(rewards, group_ids) -> advantages``: ``rewards[i]`` belongs to group ``group_ids[i]`` (the K
samples of one task). Rollout collection and the trainer both pick one by name from :data:`ADVANTAGES`."""

ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")


def _check_rewards(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> None:
    if len(rewards) != len(group_ids):
        raise ConfigError(f"{len(rewards)} rewards but {len(group_ids)} group ids; pass one group id per reward")
    bad = [r for r in rewards if not math.isfinite(r)]
    if bad:
        raise ConfigError(f"rewards must be finite numbers, got {bad[:3]}")


def group_mean(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> dict[Hashable, float]:
    """``r̄(x)``: the mean reward of each group."""
    _check_rewards(rewards, group_ids)
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, group_ids, strict=True):
        groups[g].append(r)
    return {g: sum(v) / len(v) for g, v in groups.items()}


@ADVANTAGES.register("group_mean")
def group_mean_baseline(rewards: Sequence[float], group_ids: Sequence[Hashable]) -> list[float]:
    """``A_j = r(x, y_j) − r̄(x)`` (the K2.5 objective's advantage). A group of one gets 0."""
    means = group_mean(rewards, group_ids)
    return [r - means[g] for r, g in zip(rewards, group_ids, strict=True)]


@ADVANTAGES.register("group_normalized")
def group_normalized(rewards: Sequence[float], group_ids: Sequence[Hashable], eps: float = 1e-6) -> list[float]:
    """``(r − r̄) / (std_group(r) + eps)`` with the population std (GRPO's normalised variant).

    A group whose rewards are all equal gets advantages of exactly 0 (no signal, no blow-up).
    """
    means = group_mean(rewards, group_ids)
    sq: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, group_ids, strict=True):
        sq[g].append((r - means[g]) ** 2)
    stds = {g: math.sqrt(sum(v) / len(v)) for g, v in sq.items()}
    return [(r - means[g]) / (stds[g] + eps) for r, g in zip(rewards, group_ids, strict=True)]


# -- the auxiliary terms (pure) ---------------------------------------------------------------------


ParallelFormFn = Callable[[EpisodeRecord, "ParallelReward"], float]
"""``form(record, config) -> r_parallel`` in [0, 1]; registered by name in :data:`PARALLEL_FORMS`."""

PARALLEL_FORMS: Registry[ParallelFormFn] = Registry("r_parallel form")


class ParallelReward(BaseModel):
    """Form of ``r_parallel``: a name from :data:`PARALLEL_FORMS` and its parameters (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    form: str = "coverage"
    target: int = Field(
        4,
        ge=1,
        description="sub-agents (count), stage width (width), or parts of a task that names none (parts, coverage)",
    )
    overassign: float = Field(
        0.5,
        ge=0.0,
        description="coverage: what each duplicate or invented sub-task takes back, in covered parts",
    )

    @field_validator("form")
    @classmethod
    def _known(cls, v: str) -> str:
        PARALLEL_FORMS.get(v)  # raises UnknownNameError listing the known forms
        return v


class FinishReward(BaseModel):
    """Form of ``r_finish`` (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count_rejected: bool = True
    empty_value: float = Field(0.0, ge=0.0, le=1.0)
    control_value: float = Field(
        1.0, ge=0.0, le=1.0, description="a task of one part (metadata parts = 1) answered without sub-agents"
    )


def _ran_results(record: EpisodeRecord) -> list[list[SubagentResult]]:
    """Per stage, the sub-agents that were admitted (non-zero step cap) or took a step."""
    return [[r for r in s.subagents if r.step_cap > 0 or r.steps > 0] for s in record.stages]


def _ran(record: EpisodeRecord) -> list[int]:
    """Per stage, the number of sub-agents that were admitted and started."""
    return [len(rs) for rs in _ran_results(record)]


@dataclass(frozen=True, slots=True)
class ParallelCounts:
    """What the ``coverage`` form reads from an episode (and what a curve of over-assignment plots)."""

    ran: int
    """Sub-agents run (admitted or stepped), over all stages."""
    distinct: int
    """Distinct sub-tasks among them: different content words (:mod:`agent_swarm.swarm.subtasks`)."""
    finished_width: int
    """The most distinct sub-tasks that finished (status completed) in one stage."""

    @property
    def duplicates(self) -> int:
        """Sub-agents run on a sub-task already run in the episode."""
        return self.ran - self.distinct

    def extras(self, parts: int) -> int:
        """Distinct sub-tasks beyond the task's ``parts`` (invented items)."""
        return max(0, self.distinct - parts)


def parallel_counts(record: EpisodeRecord) -> ParallelCounts:
    """The sub-agents an episode ran, its distinct sub-tasks and its widest stage of finished distinct ones."""
    stages = _ran_results(record)
    ran = [r for rs in stages for r in rs]
    finished = [{task_content(r.task) for r in rs if r.status is AgentStatus.COMPLETED} for rs in stages]
    return ParallelCounts(
        ran=len(ran),
        distinct=len({task_content(r.task) for r in ran}),
        finished_width=max(map(len, finished), default=0),
    )


def _parts_or_target(record: EpisodeRecord, form: ParallelReward) -> int:
    return task_parts(record.task) or form.target


@PARALLEL_FORMS.register("coverage")
def _coverage(record: EpisodeRecord, form: ParallelReward) -> float:
    parts = _parts_or_target(record, form)
    if parts <= 1:  # a control: nothing to parallelise, so no sub-agent earns anything
        return 0.0
    c = parallel_counts(record)
    wasted = c.duplicates + c.extras(parts)
    return max(0.0, (min(c.finished_width, parts) - form.overassign * wasted) / parts)


@PARALLEL_FORMS.register("any")
def _any(record: EpisodeRecord, form: ParallelReward) -> float:
    return float(sum(_ran(record)) > 0)


@PARALLEL_FORMS.register("count")
def _count(record: EpisodeRecord, form: ParallelReward) -> float:
    return min(1.0, sum(_ran(record)) / form.target)


@PARALLEL_FORMS.register("width")
def _width(record: EpisodeRecord, form: ParallelReward) -> float:
    return min(1.0, max(_ran(record), default=0) / form.target)


@PARALLEL_FORMS.register("parts")
def _parts(record: EpisodeRecord, form: ParallelReward) -> float:
    parts = _parts_or_target(record, form)
    n = sum(_ran(record))
    return max(0.0, (min(n, parts) - max(0, n - parts)) / parts)


def r_parallel(record: EpisodeRecord, form: ParallelReward | None = None) -> float:
    """The instantiation reward of an episode, in [0, 1], in the form ``form`` names."""
    form = form or ParallelReward()
    return PARALLEL_FORMS.get(form.form)(record, form)


def task_parts(task: Task) -> int | None:
    """The number of independent parts ``task`` declares (``metadata["parts"]``, a positive int), or ``None``."""
    parts = task.metadata.get("parts")
    if parts is None:
        return None
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise ConfigError(
            f"task {task.id!r} has metadata parts={parts!r}; it must be a positive integer "
            "(the number of independent sub-tasks) or be left out"
        )
    return parts


def _rejected_assignments(record: EpisodeRecord) -> int:
    return sum(1 for s in record.stages for t in s.tool_results if t.call.name == "assign_task" and t.is_error)


def finish_counts(record: EpisodeRecord, form: FinishReward | None = None) -> tuple[int, int]:
    """(completed, assigned) sub-tasks of an episode under ``form``."""
    form = form or FinishReward()
    results = record.subagent_results
    completed = sum(r.status is AgentStatus.COMPLETED for r in results)
    assigned = len(results) + (_rejected_assignments(record) if form.count_rejected else 0)
    return completed, assigned


def r_finish(record: EpisodeRecord, form: FinishReward | None = None) -> float:
    """Completed assigned sub-tasks / assigned sub-tasks, in [0, 1]."""
    form = form or FinishReward()
    completed, assigned = finish_counts(record, form)
    return completed / assigned if assigned else _empty_finish(record, form)


def _empty_finish(record: EpisodeRecord, form: FinishReward) -> float:
    """``r_finish`` of an episode that assigned nothing: right on a control, not a perfect rate elsewhere."""
    return form.control_value if task_parts(record.task) == 1 else form.empty_value


def parl_total(r_perf: float, r_parallel: float, r_finish: float, lambda1: float, lambda2: float) -> float:
    """``λ1 · r_parallel + λ2 · r_finish + r_perf``."""
    return lambda1 * r_parallel + lambda2 * r_finish + r_perf


# -- configuration and the reward function ----------------------------------------------------------


class RewardConfig(BaseModel):
    """Everything that defines the PARL reward except the verifier (which comes from each task).

    Defaults follow K2.5's intent: small auxiliary weights that anneal to 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lambda1: Schedule = Schedule(kind="linear", start=0.1, steps=1000)
    lambda2: Schedule = Schedule(kind="linear", start=0.1, steps=1000)
    parallel: ParallelReward = ParallelReward()
    finish: FinishReward = FinishReward()
    default_verifier: str | None = Field(None, description="used for tasks that name no verifier")
    default_verifier_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _nonnegative_lambdas(self) -> RewardConfig:
        for name in ("lambda1", "lambda2"):
            s: Schedule = getattr(self, name)
            if s.start < 0 or s.end < 0:
                raise ValueError(f"{name} must stay >= 0 (start {s.start}, end {s.end}): it weighs a reward term")
        return self


class PARLReward:
    """The reward hook: ``Orchestrator(backend, reward_fn=PARLReward(config, step=0))``.

    ``step`` is the trainer step the λ schedules are read at; set it as training advances
    (``reward.step = n``). ``judge`` is the LLM backend for rubric verifiers. Verification problems
    (unknown verifier, bad arguments, a failed judgement, a missing answer) give ``r_perf = 0`` with
    the reason in ``RewardRecord.error``; the auxiliary terms are still computed.
    """

    def __init__(
        self,
        config: RewardConfig | None = None,
        *,
        step: int = 0,
        judge: ModelBackend | None = None,
        workspace: Path | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        self.config = config or RewardConfig()
        self.step = step
        self.judge = judge
        self.workspace = workspace
        self.context = dict(context or {})
        if self.config.default_verifier is not None:
            # Imported with the first reward: a run without one never needs the verifiers.
            from agent_swarm.swarm.verifiers import get_verifier

            get_verifier(self.config.default_verifier)  # fail at construction, not per episode

    def lambdas(self, step: int | None = None) -> tuple[float, float]:
        s = self.step if step is None else step
        return self.config.lambda1.value(s), self.config.lambda2.value(s)

    async def r_perf(self, record: EpisodeRecord) -> tuple[float, str | None, dict[str, Any], str | None]:
        """(score, verifier name, details, error) of the episode's answer."""
        task = record.task
        name = task.verifier or self.config.default_verifier
        if name is None:
            return 0.0, None, {}, "task has no verifier and the reward config sets no default_verifier"
        args = task.verifier_args if task.verifier else self.config.default_verifier_args
        if record.answer is None:
            return 0.0, name, {}, f"episode ended without an answer (status {record.status.value})"
        from agent_swarm.swarm.verifiers import VerifierContext, validate_verifier_args, verify

        ctx = VerifierContext(prompt=task.prompt, judge=self.judge, workspace=self.workspace, extra=self.context)
        try:
            parsed = validate_verifier_args(name, args)
            verdict = await verify(name, record.answer, parsed, ctx)
        except (ConfigError, UnknownNameError) as exc:
            return 0.0, name, {}, str(exc)
        except Exception as exc:  # a verifier bug must not cost the episode its auxiliary reward terms
            return 0.0, name, {}, f"verifier {name!r} raised {type(exc).__name__}: {exc}"
        details = {"passed": verdict.passed, **verdict.details}
        return verdict.score, name, details, verdict.error

    async def __call__(self, record: EpisodeRecord) -> RewardRecord:
        perf, name, details, error = await self.r_perf(record)
        try:
            rp = r_parallel(record, self.config.parallel)
        except ConfigError as exc:  # bad task metadata: a recorded failure of this term, not a crashed episode
            rp, error = 0.0, "; ".join(e for e in (error, f"r_parallel: {exc}") if e)
        completed, assigned = finish_counts(record, self.config.finish)
        try:
            rf = completed / assigned if assigned else _empty_finish(record, self.config.finish)
        except ConfigError:  # bad parts metadata, recorded above: not a control
            rf = self.config.finish.empty_value
        l1, l2 = self.lambdas()
        details = {**details, "subagents_completed": completed, "subagents_assigned": assigned}
        return RewardRecord(
            total=parl_total(perf, rp, rf, l1, l2),
            r_perf=perf,
            r_parallel=rp,
            r_finish=rf,
            lambda1=l1,
            lambda2=l2,
            step=self.step,
            verifier=name,
            details=details,
            error=error,
        )
