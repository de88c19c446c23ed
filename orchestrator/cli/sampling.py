"""The one sampling resolver of ``swarm run``, ``swarm eval`` and ``swarm rollout``.

Each role (orchestrator, sub-agents) samples as the config file says where it sets that role; any other
role starts from the command's declared default (:data:`SamplingStart`); the flags given
(``--temperature``, ``--max-tokens``, ``--seed``; ``None`` = not given) go on top. The commands differ
only in that declared start, which is their contract:

- ``family`` (``swarm run``): the model family's sampling (:func:`agent_swarm.orchestrator.prompts.profile_for`).
- ``greedy`` (``swarm eval``): temperature 0 with the run seed and the family's token cap (512 without
  one), so arms compare on reproducible episodes.
- ``config`` (``swarm rollout``, and a scripted policy in every command): the config as it is
  (``SwarmConfig``'s defaults where no file sets it), since RL samples at the policy's own temperature.

Each command's start is declared once, in :data:`agent_swarm.orchestrator.cli.settings.COMMANDS`, and applied by
:meth:`agent_swarm.orchestrator.cli.settings.Settings.sampling`. ``tests/core/test_cli_drift.py`` runs the three
commands on the same flags, config file and environment.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from pydantic import ValidationError

from agent_swarm.swarm.backend import SamplingParams
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import UserError

__all__ = ["ROLES", "SamplingStart", "resolve_sampling", "with_sampling"]

SamplingStart = Literal["family", "greedy", "config"]
ROLES = ("orchestrator_sampling", "subagent_sampling")
GREEDY_MAX_TOKENS = 512
"""``greedy``'s token cap for a model with no family cap."""


def _start(config: SwarmConfig, role: str, start: SamplingStart, model: str | None, seed: int | None) -> dict[str, Any]:
    if start == "config":
        return getattr(config, role).model_dump()  # type: ignore[no-any-return]
    from agent_swarm.orchestrator.prompts import profile_for

    try:
        profile = profile_for(model or "", config.prompt_profile) if model or start == "family" else None
    except UserError as exc:
        raise UserError(f"prompt_profile in the config: {exc}") from None
    if profile is not None and start == "family":
        return getattr(profile, role).model_dump()  # type: ignore[no-any-return]
    cap = getattr(profile, role).max_tokens if profile is not None else None
    return {"temperature": 0.0, "max_tokens": cap or GREEDY_MAX_TOKENS, "seed": seed}


def resolve_sampling(
    config: SwarmConfig,
    *,
    file_sets: Collection[str],
    start: SamplingStart,
    flags: Mapping[str, Any],
    model: str | None = None,
    seed: int | None = None,
) -> dict[str, SamplingParams]:
    """Both roles' sampling: ``config``'s for a role in ``file_sets`` (the fields the config file set),
    else ``start``'s (``model`` picks the family; ``seed`` is ``greedy``'s seed), with the non-``None``
    ``flags`` on top. Raises :class:`UserError` for a bad value."""
    change = {k: v for k, v in flags.items() if v is not None}
    out: dict[str, SamplingParams] = {}
    for role in ROLES:
        begin = getattr(config, role).model_dump() if role in file_sets else _start(config, role, start, model, seed)
        try:
            out[role] = SamplingParams.model_validate({**begin, **change})
        except ValidationError as exc:
            raise UserError(f"invalid sampling option: {exc}") from None
    return out


def with_sampling(config: SwarmConfig, sampling: Mapping[str, SamplingParams]) -> SwarmConfig:
    """``config`` with :func:`resolve_sampling`'s ``sampling`` (``config`` itself when that changes nothing)."""
    if all(getattr(config, role) == params for role, params in sampling.items()):
        return config
    data = {**config.model_dump(), **{role: s.model_dump() for role, s in sampling.items()}}
    try:
        return SwarmConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"invalid sampling option: {exc}") from None
