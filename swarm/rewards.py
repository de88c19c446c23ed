"""The PARL reward (SPEC §5) and the λ schedules that anneal its auxiliary terms.

``r_PARL = λ1 · r_parallel + λ2 · r_finish + r_perf``

* ``r_perf`` — the task's verifier score in [0, 1] (:mod:`swarm.verifiers`);
* ``r_parallel`` — the instantiation reward against *serial collapse*; its form is chosen by
  :class:`ParallelReward` (bounded in [0, 1]):

  - ``"any"``: 1 if at least one sub-agent ran in the episode, else 0;
  - ``"count"`` (default): ``min(1, sub-agents run / target)``;
  - ``"width"``: ``min(1, widest stage / target)``;

  a sub-agent *ran* when it was admitted (non-zero step cap): assignments refused for lack of
  budget do not count as instantiation;
* ``r_finish`` — the sub-agent finish rate against *spurious parallelism*:
  ``completed / assigned``, where *assigned* counts every sub-agent result of the episode and, with
  ``count_rejected`` (default), also every ``assign_task`` call the engine refused (unknown agent,
  stage width limit). An episode that assigned nothing gets ``empty_value`` (default 0: not assigning
  is not rewarded as a perfect finish rate).

λ1 and λ2 follow :class:`LambdaSchedule` objects evaluated at the trainer step, so the final policy
optimises ``r_perf`` alone. :class:`PARLReward` plugs into ``Orchestrator(reward_fn=...)`` and the
:class:`~swarm.records.RewardRecord` it returns keeps every component, both λs and the step.

:func:`group_advantages` turns the K rewards of one task into ``r − mean`` (optionally divided by the
group's standard deviation), the advantage of SPEC §7.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from swarm.backend import ModelBackend
from swarm.errors import ConfigError, UnknownNameError
from swarm.records import AgentStatus, EpisodeRecord, RewardRecord
from swarm.verifiers import VerifierContext, get_verifier, validate_verifier_args, verify

__all__ = [
    "ConstantSchedule",
    "CosineSchedule",
    "ExponentialSchedule",
    "FinishReward",
    "LambdaSchedule",
    "LinearSchedule",
    "PARLReward",
    "ParallelReward",
    "RewardConfig",
    "group_advantages",
    "make_schedule",
    "parl_total",
    "r_finish",
    "r_parallel",
]


# -- λ schedules ------------------------------------------------------------------------------------


class _Schedule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    start: float = Field(0.1, ge=0.0, description="λ at step 0")
    steps: int = Field(1000, ge=1, description="training steps over which λ reaches 0")

    def _check(self, step: int) -> None:
        if step < 0:
            raise ConfigError(f"trainer step must be >= 0, got {step}")

    def __call__(self, step: int) -> float:
        return self.value(step)

    def value(self, step: int) -> float:
        raise NotImplementedError


class ConstantSchedule(_Schedule):
    """λ = start at every step (``steps`` is ignored): no annealing."""

    kind: Literal["constant"] = "constant"

    def value(self, step: int) -> float:
        self._check(step)
        return self.start


class LinearSchedule(_Schedule):
    """λ = start · (1 − step/steps), 0 from ``steps`` on."""

    kind: Literal["linear"] = "linear"

    def value(self, step: int) -> float:
        self._check(step)
        return self.start * max(0.0, 1.0 - step / self.steps)


class CosineSchedule(_Schedule):
    """λ = start · (1 + cos(π · step/steps)) / 2, 0 from ``steps`` on."""

    kind: Literal["cosine"] = "cosine"

    def value(self, step: int) -> float:
        self._check(step)
        if step >= self.steps:
            return 0.0
        return self.start * 0.5 * (1.0 + math.cos(math.pi * step / self.steps))


class ExponentialSchedule(_Schedule):
    """λ = start · exp(−rate · step/steps) before ``steps``, exactly 0 from ``steps`` on.

    ``rate`` = 5 leaves ~0.7 % of ``start`` just before the cut-off.
    """

    kind: Literal["exponential"] = "exponential"
    rate: float = Field(5.0, gt=0.0)

    def value(self, step: int) -> float:
        self._check(step)
        if step >= self.steps:
            return 0.0
        return self.start * math.exp(-self.rate * step / self.steps)


LambdaSchedule = Annotated[
    ConstantSchedule | LinearSchedule | CosineSchedule | ExponentialSchedule, Field(discriminator="kind")
]
_SCHEDULES: dict[str, type[_Schedule]] = {
    "constant": ConstantSchedule,
    "linear": LinearSchedule,
    "cosine": CosineSchedule,
    "exponential": ExponentialSchedule,
}


def make_schedule(kind: str, **kwargs: Any) -> ConstantSchedule | LinearSchedule | CosineSchedule | ExponentialSchedule:
    """A schedule by name: ``make_schedule("cosine", start=0.2, steps=500)``."""
    cls = _SCHEDULES.get(kind)
    if cls is None:
        raise UnknownNameError("lambda schedule", kind, _SCHEDULES)
    return cls(**kwargs)  # type: ignore[return-value]


# -- the auxiliary terms (pure) ---------------------------------------------------------------------


class ParallelReward(BaseModel):
    """Form of ``r_parallel`` (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    form: Literal["any", "count", "width"] = "count"
    target: int = Field(4, ge=1, description="sub-agents (count) or stage width (width) that earn 1.0")


class FinishReward(BaseModel):
    """Form of ``r_finish`` (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    count_rejected: bool = True
    empty_value: float = Field(0.0, ge=0.0, le=1.0)


def _ran(record: EpisodeRecord) -> list[int]:
    """Per stage, the number of sub-agents that were admitted and started."""
    return [sum(1 for r in s.subagents if r.step_cap > 0 or r.steps > 0) for s in record.stages]


def r_parallel(record: EpisodeRecord, form: ParallelReward | None = None) -> float:
    """The instantiation reward of an episode, in [0, 1]."""
    form = form or ParallelReward()
    per_stage = _ran(record)
    if form.form == "any":
        return float(sum(per_stage) > 0)
    n = sum(per_stage) if form.form == "count" else max(per_stage, default=0)
    return min(1.0, n / form.target)


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
    return completed / assigned if assigned else form.empty_value


def parl_total(r_perf: float, r_parallel: float, r_finish: float, lambda1: float, lambda2: float) -> float:
    """``λ1 · r_parallel + λ2 · r_finish + r_perf``."""
    return lambda1 * r_parallel + lambda2 * r_finish + r_perf


def group_advantages(rewards: Sequence[float], *, normalize: bool = False, eps: float = 1e-6) -> list[float]:
    """``r − mean(r)`` over one group (K samples of a task); divided by ``std + eps`` with ``normalize``.

    The standard deviation is the population one (as GRPO implementations use for the group).
    A group of one has advantage 0.
    """
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    adv = [r - mean for r in rewards]
    if normalize:
        std = math.sqrt(sum(a * a for a in adv) / len(adv))
        adv = [a / (std + eps) for a in adv]
    return adv


# -- configuration and the reward function ----------------------------------------------------------


class RewardConfig(BaseModel):
    """Everything that defines the PARL reward except the verifier (which comes from each task).

    Defaults follow K2.5's intent: small auxiliary weights that anneal to 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    lambda1: LambdaSchedule = Field(default_factory=lambda: LinearSchedule(start=0.1, steps=1000))
    lambda2: LambdaSchedule = Field(default_factory=lambda: LinearSchedule(start=0.1, steps=1000))
    parallel: ParallelReward = ParallelReward()
    finish: FinishReward = FinishReward()
    default_verifier: str | None = Field(None, description="used for tasks that name no verifier")
    default_verifier_args: dict[str, Any] = Field(default_factory=dict)


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
        rp = r_parallel(record, self.config.parallel)
        completed, assigned = finish_counts(record, self.config.finish)
        rf = completed / assigned if assigned else self.config.finish.empty_value
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
