"""Stop a generation that has started repeating itself verbatim.

A small model decoding greedily falls into loops: a doc id written as ``1234567890123…`` or the same
sentence again and again, until the token cap. On a CPU that is minutes of decode per loop for
tokens nobody uses (a 1.5B sub-agent looped for 512 tokens, 150 s, in 7 of 15 steps of one wide
lookup). :class:`RepeatGuard` watches the sampled token ids as they stream in and says stop once
the last ``span`` (128) or more tokens are copies of one block of at most ``max_period`` (40) tokens. Output
that does not loop is never cut, so what a correct generation produces is unchanged.
"""

from __future__ import annotations

from agent_swarm.swarm.errors import ConfigError

__all__ = ["RepeatGuard"]


class RepeatGuard:
    """Feed it token ids; :attr:`looped` turns true when the tail is ``span`` or more tokens of one
    repeated block (period 1 to ``max_period``, at least ``min_copies`` copies)."""

    __slots__ = ("_checked", "ids", "looped", "max_period", "min_copies", "span")

    def __init__(self, *, span: int = 128, max_period: int = 40, min_copies: int = 3) -> None:
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

    def feed(self, ids: list[int] | tuple[int, ...]) -> bool:
        """Add sampled ids; ``True`` while the generation should go on."""
        self.ids.extend(ids)
        if not self.looped and len(self.ids) - self._checked >= 8:  # checked every 8 tokens: cheap
            self._checked = len(self.ids)
            self.looped = self.loops(self.ids)
        return not self.looped

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
