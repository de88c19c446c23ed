"""Trusted construction of frozen models on the runtime's hot path.

Every public record and message type validates on construction, which is what a user building one
by hand wants. The runtime builds the same objects thousands of times per stage (a request, an
assistant message, a tool result, a tool message and a step record per sub-agent step) from values
that are already validated: fields of a validated completion, a tool call, a clock reading. There
validation is pure overhead (3-10 µs per object, the largest share of the per-step cost), and
pydantic's own ``model_construct`` is slower still. :func:`maker` returns a constructor that fills
defaults and sets the fields directly, producing an instance equal to the validated one.

Set ``SWARM_VALIDATE_RECORDS=1`` to make every maker validate instead (a debugging aid; the test
suite checks both paths build equal records).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import MISSING, fields, is_dataclass
from types import MemberDescriptorType
from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

__all__ = ["maker", "validating"]

T = TypeVar("T")

_new = object.__new__
_set = object.__setattr__
_MODEL_SLOTS = ("__dict__", "__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__")
_NOARG = object()  # "not passed" marker for fields with a default_factory


def validating() -> bool:
    """Whether makers validate (``SWARM_VALIDATE_RECORDS=1``), read when a maker is created."""
    return os.environ.get("SWARM_VALIDATE_RECORDS", "") not in ("", "0")


def _signature(owner: str, specs: list[tuple[str, Any, Any]], missing: Any) -> tuple[str, dict[str, Any]]:
    """Keyword-only parameters: required first-class, defaults bound by name, factories called lazily."""
    params: list[str] = []
    env: dict[str, Any] = {}
    for name, default, factory in specs:
        if not name.isidentifier():
            raise TypeError(f"{owner}: field name {name!r} is not an identifier")
        _check_immutable_default(owner, name, default)
        if factory is not None and factory is not MISSING:
            env[f"_f_{name}"] = factory
            params.append(f"{name}=_NOARG")
        elif default is missing:
            params.append(name)
        else:
            env[f"_d_{name}"] = default
            params.append(f"{name}=_d_{name}")
    return ", ".join(params), env


def _factory_lines(specs: list[tuple[str, Any, Any]]) -> list[str]:
    return [
        f"    if {name} is _NOARG: {name} = _f_{name}()"
        for name, _, factory in specs
        if factory is not None and factory is not MISSING
    ]


def _check_immutable_default(owner: str, name: str, value: Any) -> None:
    # Defaults are shared by every instance built here, so they must not be mutable containers.
    if isinstance(value, list | dict | set):
        raise TypeError(f"{owner}.{name}: a mutable default needs a default_factory")


def maker(cls: type[T]) -> Callable[..., T]:
    """A keyword-only constructor of ``cls`` (a pydantic model or dataclass) that skips validation.

    Missing fields take their defaults; a missing required field raises ``TypeError``. Callers pass
    only values of the declared types (the point is to not check them again). Instances count every
    field as explicitly set (``model_fields_set``); nothing in swarm dumps with ``exclude_unset``.
    Instances of a frozen model share that set object; do not mutate it.
    """
    if validating():
        return cls
    env: dict[str, Any] = {"_cls": cls, "_new": _new, "_set": _set, "_NOARG": _NOARG}
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        if cls.__private_attributes__ or cls.model_config.get("extra") == "allow":
            raise TypeError(f"{cls.__name__}: trusted construction supports no private attributes or extras")
        if any(f.default_factory_takes_validated_data for f in cls.model_fields.values()):
            raise TypeError(f"{cls.__name__}: default factories that take the validated data are not supported")
        specs: list[tuple[str, Any, Any]] = [(n, f.default, f.default_factory) for n, f in cls.model_fields.items()]
        params, defaults = _signature(cls.__name__, specs, PydanticUndefined)
        names = [n for n, _, _ in specs]
        # BaseModel's own slots, set through their descriptors (no attribute lookup by name).
        env.update({f"_s{i}": BaseModel.__dict__[slot].__set__ for i, slot in enumerate(_MODEL_SLOTS)})
        env["_FIELDS_SET"] = set(names)
        body = [
            *_factory_lines(specs),
            "    m = _new(_cls)",
            "    _s0(m, {" + ", ".join(f"{n!r}: {n}" for n in names) + "})",
            # Frozen models never change their fields-set in place (model_copy copies it first), so
            # every instance shares one: ~200 bytes and a set construction saved per object.
            "    _s1(m, _FIELDS_SET)" if cls.model_config.get("frozen") else "    _s1(m, set(_FIELDS_SET))",
            "    _s2(m, None)",
            "    _s3(m, None)",
            "    return m",
        ]
    elif is_dataclass(cls):
        specs = [(f.name, f.default, f.default_factory) for f in fields(cls)]
        params, defaults = _signature(cls.__name__, specs, MISSING)
        setters = []
        for n, _, _ in specs:
            slot = getattr(cls, "__dict__", {}).get(n)
            if isinstance(slot, MemberDescriptorType):  # a slot: set it through its descriptor
                env[f"_s_{n}"] = slot.__set__
                setters.append(f"    _s_{n}(o, {n})")
            else:
                setters.append(f"    _set(o, {n!r}, {n})")
        body = [*_factory_lines(specs), "    o = _new(_cls)", *setters, "    return o"]
    else:
        raise TypeError(f"maker() needs a pydantic model or a dataclass, got {cls!r}")
    env.update(defaults)
    src = f"def make(*, {params}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<maker {cls.__name__}>", "exec"), env)  # generated from field names only
    make: Callable[..., T] = env["make"]
    make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    return make
