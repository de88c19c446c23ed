"""What the τ²-bench domains (retail, airline) share: the packaged databases, the base of a mutable
domain database, and the two generic tools.

A domain database is one dict of tables (``{table: {record id: record}}``) loaded from
``workloads/data/tau2_<domain>/db.json.gz``. A subclass of :class:`Tau2DB` adds the domain's look-ups
and says which records a tool call touches (:meth:`Tau2DB.touched`), which τ²-batch uses to keep the
tickets of one batch on disjoint records.
"""

from __future__ import annotations

import gzip
import json
import pickle
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from importlib import resources
from typing import Any, ClassVar, Self

from agent_swarm.swarm.errors import ToolError
from agent_swarm.tools.registry import Tool

__all__ = [
    "Record",
    "Tau2DB",
    "calculate",
    "data_file",
    "domain_tools",
    "load_db",
    "transfer_to_human_agents",
]

Record = tuple[str, str]  # (table, record id)


def data_file(domain: str, name: str) -> str:
    """The text of a packaged data file of ``domain`` (``policy.md``, ``tasks.json`` …)."""
    return (resources.files("agent_swarm.workloads") / "data" / f"tau2_{domain}" / name).read_text("utf-8")


@cache
def _db_pickle(domain: str) -> bytes:
    ref = resources.files("agent_swarm.workloads") / "data" / f"tau2_{domain}" / "db.json.gz"
    # Parsed once; fresh copies come from a pickle round trip (several times faster than json or deepcopy).
    return pickle.dumps(json.loads(gzip.decompress(ref.read_bytes())), protocol=pickle.HIGHEST_PROTOCOL)


def load_db(domain: str) -> dict[str, Any]:
    """A fresh copy of the initial database of ``domain``."""
    data: dict[str, Any] = pickle.loads(_db_pickle(domain))
    return data


class Tau2DB:
    """The mutable database of one episode of a τ² domain."""

    domain: ClassVar[str]
    owned: ClassVar[tuple[str, str]]  # (argument naming a record a user owns, its table): ("order_id", "orders")

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = data if data is not None else load_db(self.domain)

    def copy(self) -> Self:
        return type(self)(pickle.loads(pickle.dumps(self.data, protocol=pickle.HIGHEST_PROTOCOL)))

    def get(self, table: str, key: str, what: str, hint: str = "") -> dict[str, Any]:
        """The record ``key`` of ``table``; a missing one raises ToolError naming ``what`` (+ ``hint``)."""
        try:
            rec: dict[str, Any] = self.data[table][key]
        except KeyError:
            raise ToolError(f"{what} not found: {key!r}{hint}") from None
        return rec

    def payment_method(self, user_id: str, payment_id: str) -> dict[str, Any]:
        """One of the saved payment methods of user ``user_id``; a missing one raises ToolError listing them."""
        methods = self.get("users", user_id, "user")["payment_methods"]
        if payment_id not in methods:
            raise ToolError(
                f"payment method {payment_id!r} not found for user {user_id!r}; "
                f"their methods: {', '.join(sorted(methods))}"
            )
        pm: dict[str, Any] = methods[payment_id]
        return pm

    def touched(self, name: str, args: Mapping[str, Any], result: str | None) -> set[Record]:
        """The records a call of tool ``name`` with ``args`` reads or writes, judged right after the
        call ran on this database (``result``: its output, or None when it failed).

        Here: the user a ``user_id`` argument names, and the record the :attr:`owned` argument names
        with the user who owns it; a domain adds what its own tools touch."""
        recs: set[Record] = set()
        if "user_id" in args:
            recs.add(("users", args["user_id"]))
        key, table = self.owned
        if key in args:
            recs.add((table, args[key]))
            rec = self.data[table].get(args[key])
            if rec is not None:
                recs.add(("users", rec["user_id"]))
        return recs


def calculate(expression: str) -> str:
    """Calculate an arithmetic expression (numbers, + - * / and parentheses).

    Args:
        expression: e.g. "2 * (3.5 + 4)".
    """
    if not re.fullmatch(r"[0-9+\-*/(). ]+", expression):
        raise ToolError("invalid characters in expression; only numbers, + - * / ( ) are allowed")
    try:
        value = eval(expression, {"__builtins__": {}}, {})
    except (SyntaxError, ZeroDivisionError, TypeError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from None
    return str(round(float(value), 2))


def transfer_to_human_agents(summary: str) -> str:
    """Transfer the user to a human agent, with a summary of the issue (only when the request
    cannot be handled with the other tools).

    Args:
        summary: a summary of the user's issue.
    """
    return "Transfer successful"


def domain_tools(fns: Iterable[Callable[..., Any]]) -> tuple[Tool, ...]:
    """The domain tools ``fns`` plus the generic ones, sorted by name (schemas are self-contained).

    Non-blocking: each call runs to completion on the event loop, so a write is atomic and parallel
    sub-agents never interleave inside one."""
    every = sorted((*fns, calculate, transfer_to_human_agents), key=lambda f: f.__name__)
    return tuple(Tool(f, blocking=False, timeout_s=10.0) for f in every)
