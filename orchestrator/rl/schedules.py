"""Step schedules (temperature decay, and any coefficient that anneals over training steps).

A schedule goes from ``start`` at step 0 to ``end`` at step ``steps`` and stays at ``end`` after.
K2 (seed 002 §4.3) decays the sampling temperature from high (exploration) to low (convergence);
PARL anneals λ1, λ2 to 0 (seed 004 §3). Shapes are chosen by name from :data:`SCHEDULES`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.rl.registry import Registry

__all__ = ["SCHEDULES", "Schedule", "ScheduleFn"]

ScheduleFn = Callable[[float, float, float], float]
"""``fn(start, end, progress)`` with ``progress`` in [0, 1]."""

SCHEDULES: Registry[ScheduleFn] = Registry("schedule")

_EXP_RATE = 5.0  # exponential: e^-5 ≈ 0.7 % of the way left at the end, then snapped to ``end``


@SCHEDULES.register("constant")
def _constant(start: float, end: float, p: float) -> float:
    return start


@SCHEDULES.register("linear")
def _linear(start: float, end: float, p: float) -> float:
    return start + (end - start) * p


@SCHEDULES.register("cosine")
def _cosine(start: float, end: float, p: float) -> float:
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * p))


@SCHEDULES.register("exponential")
def _exponential(start: float, end: float, p: float) -> float:
    # Rescaled so it reaches ``end`` exactly at p = 1 (a plain exponential never does).
    w = (math.exp(-_EXP_RATE * p) - math.exp(-_EXP_RATE)) / (1.0 - math.exp(-_EXP_RATE))
    return end + (start - end) * w


class Schedule(BaseModel):
    """``Schedule(kind="linear", start=1.0, end=0.7, steps=100).value(step)``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str = "constant"
    start: float = 1.0
    end: float = 0.0
    steps: int = Field(1, ge=1, description="steps to go from start to end")

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        SCHEDULES.get(v)  # raises UnknownNameError listing the known shapes
        return v

    def value(self, step: int) -> float:
        p = min(max(step, 0) / self.steps, 1.0)
        return SCHEDULES.get(self.kind)(self.start, self.end, p)
