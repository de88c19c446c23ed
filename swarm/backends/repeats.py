"""Stop a generation that has started repeating itself verbatim.

A small model decoding greedily falls into loops: a doc id written as ``1234567890123…`` or the same
sentence again and again, until the token cap. On a CPU that is minutes of decode per loop for
tokens nobody uses (a 1.5B sub-agent looped for 512 tokens, 150 s, in 7 of 15 steps of one wide
lookup). :class:`RepeatGuard` watches the sampled token ids as they stream in and says stop once
the last ``span`` (128) or more tokens are copies of one block of at most ``max_period`` (40) tokens. Output
that does not loop is never cut, so what a correct generation produces is unchanged.

With ``watch_calls``, it also reads the generated text and stops once two tool calls in a row each repeat,
character for character, a call written earlier in the same generation (a call is a top-level JSON
object, bare or between ``<tool_call>`` tags): a batch of three calls repeated until the token cap is a
period of about 75 tokens, beyond ``max_period`` (a 1.5B orchestrator wrote the same 3 calls 17 times
over, 1,280 tokens, on a BFCL dev task). The repeated calls stay in what was generated (they were
emitted). One repeated call among new ones goes on: the calls after it are new work.
"""

from __future__ import annotations

import json

from agent_swarm.swarm.errors import ConfigError

__all__ = ["RepeatGuard"]


class RepeatGuard:
    """Feed it token ids; :attr:`looped` turns true when the tail is ``span`` or more tokens of one
    repeated block (period 1 to ``max_period``, at least ``min_copies`` copies)."""

    __slots__ = (
        "_calls",
        "_checked",
        "_depth",
        "_escape",
        "_in_string",
        "_object",
        "_repeats",
        "ids",
        "looped",
        "max_period",
        "min_copies",
        "span",
        "watch_calls",
    )

    def __init__(
        self, *, span: int = 128, max_period: int = 40, min_copies: int = 3, watch_calls: bool = False
    ) -> None:
        if span < 2 or max_period < 1 or min_copies < 2:
            raise ConfigError(
                f"RepeatGuard needs span >= 2, max_period >= 1, min_copies >= 2; got {span}, {max_period}, {min_copies}"
            )
        self.span = span
        self.max_period = max_period
        self.min_copies = min_copies
        self.ids: list[int] = []
        self.looped = False
        self._checked = 0
        self.watch_calls = watch_calls
        """Whether the text is read for tool calls written again (:meth:`feed`'s ``text``)."""
        self._calls: set[str] = set()
        self._object: list[str] = []  # the top-level JSON object being written
        self._depth = 0
        self._in_string = self._escape = False
        self._repeats = 0  # calls in a row that repeat an earlier one

    def feed(self, ids: list[int] | tuple[int, ...], text: str = "") -> bool:
        """Add sampled ids and the text they decode to; ``True`` while the generation should go on."""
        self.ids.extend(ids)
        if self.watch_calls and text:
            self._read_calls(text)
        if not self.looped and len(self.ids) - self._checked >= 8:  # checked every 8 tokens: cheap
            self._checked = len(self.ids)
            self.looped = self.loops(self.ids)
        return not self.looped

    def _read_calls(self, text: str) -> None:
        """Follow the top-level JSON objects in ``text``; two closed in a row that were each written
        before are a loop (one repeated call among new ones is not: admission drops it, and the calls
        after it run)."""
        for ch in text:
            if self._depth == 0:
                if ch != "{":
                    continue
                self._object = []
            self._object.append(ch)
            if self._in_string:
                if self._escape:
                    self._escape = False
                elif ch == "\\":
                    self._escape = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch == "{":
                self._depth += 1
            elif ch == "}":
                self._depth -= 1
                if self._depth == 0:
                    self._closed("".join(self._object))

    def _closed(self, text: str) -> None:
        """A top-level object ended: a tool call (a JSON object with a ``name``) counts towards a loop;
        anything else (``{}`` in code, ``{ return 0; }``) is no call and ends the run of repeats."""
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict) or "name" not in obj:
            self._repeats = 0
            return
        self._repeats = self._repeats + 1 if text in self._calls else 0
        self._calls.add(text)
        if self._repeats >= 2:
            self.looped = True

    def loops(self, ids: list[int]) -> bool:
        """Whether ``ids`` ends in ``span`` or more tokens that repeat one block."""
        n = len(ids)
        if n < self.span:
            return False
        tail = ids[n - self.span :]
        for p in range(1, min(self.max_period, self.span // self.min_copies) + 1):
            if tail[-1] != tail[-1 - p]:
                continue
            if tail[p:] == tail[:-p]:  # tail[i] == tail[i + p] for every i: period p over the whole span
                return True
        return False
