"""The verifier registry: small scoring functions chosen by name.

A verifier maps an answer (and the task's ``verifier_args``) to a :class:`Verdict` with a score in
[0, 1]. Each is registered under a name with a pydantic model of its arguments, so a task file with a
misspelt verifier or argument fails loudly before any episode runs::

    verdict = await verify("numeric", "the total is 41.9", {"expected": 42, "rel_tol": 0.01})
    verdict.score  # 1.0

Verifiers that need resources (an LLM judge, a workspace for the code sandbox) get them from the
:class:`VerifierContext`; the pure ones ignore it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_swarm.swarm.backend import ModelBackend
from agent_swarm.swarm.errors import ConfigError, validation_problems
from agent_swarm.swarm.registry import Registry

__all__ = [
    "VERIFIERS",
    "Verdict",
    "VerifierArgs",
    "VerifierContext",
    "VerifierSpec",
    "get_verifier",
    "register_verifier",
    "validate_verifier_args",
    "verifier_names",
    "verify",
]


class Verdict(BaseModel):
    """The outcome of one verification.

    ``score`` is ``r_perf`` in [0, 1]; ``passed`` is the verifier's notion of full success (exact
    match, all tests passed, table success); ``error`` is set when the verification itself could not
    be carried out (judge output unparseable, sandbox missing) — the score is then 0 *and* the failure
    is on record, never a silent default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float = Field(ge=0.0, le=1.0)
    passed: bool = False
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class VerifierArgs(BaseModel):
    """Base of every verifier's argument model: unknown arguments are an error."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class VerifierContext:
    """Resources a verifier may need. ``prompt`` is the task text (judges score against it)."""

    prompt: str = ""
    judge: ModelBackend | None = None
    workspace: Path | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


A = TypeVar("A", bound=VerifierArgs)
VerifierFn = Callable[[str, A, VerifierContext], "Verdict | Awaitable[Verdict]"]


@dataclass(frozen=True, slots=True)
class VerifierSpec(Generic[A]):
    name: str
    fn: VerifierFn[A]
    args_model: type[A]
    description: str = ""


VERIFIERS: Registry[VerifierSpec[Any]] = Registry("verifier")
"""Every verifier by name (task files name them in ``verifier``)."""


def register_verifier(
    name: str, args_model: type[A], *, replace: bool = False
) -> Callable[[VerifierFn[A]], VerifierFn[A]]:
    """Decorator: register ``fn(answer, args, ctx) -> Verdict`` (sync or async) under ``name``."""

    def deco(fn: VerifierFn[A]) -> VerifierFn[A]:
        doc = inspect.getdoc(fn) or ""
        spec = VerifierSpec(name=name, fn=fn, args_model=args_model, description=doc.split("\n")[0])
        VERIFIERS.add(name, spec, replace=replace)
        return fn

    return deco


def verifier_names() -> list[str]:
    """Names of all registered verifiers, sorted."""
    return list(VERIFIERS.names)


def get_verifier(name: str) -> VerifierSpec[Any]:
    """Look a verifier up; an unknown name raises :class:`UnknownNameError` listing the known ones."""
    return VERIFIERS.get(name)


def validate_verifier_args(name: str, args: Mapping[str, Any]) -> VerifierArgs:
    """Parse ``args`` with the verifier's argument model; bad arguments raise :class:`ConfigError`."""
    spec = get_verifier(name)
    try:
        parsed: VerifierArgs = spec.args_model.model_validate(dict(args))
        return parsed
    except ValidationError as exc:
        raise ConfigError(f"invalid arguments for verifier {name!r}: {validation_problems(exc, '(args)')}") from None


async def verify(
    name: str,
    answer: str,
    args: Mapping[str, Any] | VerifierArgs | None = None,
    ctx: VerifierContext | None = None,
) -> Verdict:
    """Run verifier ``name`` on ``answer``. Developer mistakes (unknown name, bad args) raise."""
    spec = get_verifier(name)
    parsed = args if isinstance(args, VerifierArgs) else validate_verifier_args(name, args or {})
    if not isinstance(parsed, spec.args_model):
        raise ConfigError(f"verifier {name!r} takes {spec.args_model.__name__}, got {type(parsed).__name__}")
    out = spec.fn(answer, parsed, ctx or VerifierContext())
    if inspect.isawaitable(out):
        out = await out
    if not isinstance(out, Verdict):
        raise TypeError(f"verifier {name!r} returned {type(out).__name__}, expected Verdict")
    return out
