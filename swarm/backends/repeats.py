"""Stop a generation that has started repeating itself verbatim.

A small model decoding greedily falls into loops: a doc id written as ``1234567890123…`` or the same
sentence again and again, until the token cap. On a CPU that is minutes of decode per loop for
tokens nobody uses (a 1.5B sub-agent looped for 512 tokens, 150 s, in 7 of 15 steps of one wide
lookup). :class:`RepeatGuard` watches the sampled token ids as they stream in and says stop once
the last ``span`` (128) or more tokens are copies of one block of at most ``max_period`` (40) tokens. Output
that does not loop is never cut, so what a correct generation produces is unchanged.

Given the tool-call tags' token ids (``call_tags``), it also stops once two calls in a row each repeat,
token for token, a call written earlier in the same generation: a batch of three calls repeated until
the token cap is a period of about 75 tokens, beyond ``max_period`` (a 1.5B orchestrator wrote the same
3 calls 17 times over, 1,280 tokens, on a BFCL dev task). The repeated calls stay in what was generated
(they were emitted). One repeated call among new ones goes on: the calls after it are new work.
"""

from __future__ import annotations

from agent_swarm.swarm.errors import ConfigError

__all__ = ["RepeatGuard"]


class RepeatGuard:
    """Feed it token ids; :attr:`looped` turns true when the tail is ``span`` or more tokens of one
    repeated block (period 1 to ``max_period``, at least ``min_copies`` copies)."""

    __slots__ = (
        "_call_start",
        "_calls",
        "_checked",
        "_repeats",
        "call_tags",
        "ids",
        "looped",
        "max_period",
        "min_copies",
        "span",
    )

    def __init__(
        self, *, span: int = 128, max_period: int = 40, min_copies: int = 3, call_tags: tuple[int, int] | None = None
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
        self.call_tags = call_tags
        """The token ids that open and close a tool call (``None``: calls are not watched)."""
        self._calls: set[tuple[int, ...]] = set()
        self._call_start = -1
        self._repeats = 0  # calls in a row that repeat an earlier one

    def feed(self, ids: list[int] | tuple[int, ...]) -> bool:
        """Add sampled ids; ``True`` while the generation should go on."""
        start = len(self.ids)
        self.ids.extend(ids)
        if self.call_tags is not None:
            self._watch_calls(start)
        if not self.looped and len(self.ids) - self._checked >= 8:  # checked every 8 tokens: cheap
            self._checked = len(self.ids)
            self.looped = self.loops(self.ids)
        return not self.looped

    def _watch_calls(self, start: int) -> None:
        """Note the calls closed at or after ``start``; two in a row that were each written before are a
        loop (one repeated call among new ones is not: admission drops it, and the calls after it run)."""
        assert self.call_tags is not None
        opening, closing = self.call_tags
        for i in range(start, len(self.ids)):
            t = self.ids[i]
            if t == opening:
                self._call_start = i
            elif t == closing and self._call_start >= 0:
                call = tuple(self.ids[self._call_start + 1 : i])
                self._call_start = -1
                self._repeats = self._repeats + 1 if call in self._calls else 0
                self._calls.add(call)
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
