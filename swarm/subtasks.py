"""What a sub-task (or a report, or an answer) says, as the monitors and the PARL reward compare them.

Two sub-tasks are the same work when they have the same content words: case, punctuation, word order
and filler words aside ("Find the capital of France." and "france capital, please" are one sub-task).
:mod:`agent_swarm.swarm.monitors` counts a stage's duplicates and a report's findings with these; the ``coverage``
form of ``r_parallel`` (:mod:`agent_swarm.swarm.rl.rewards`) counts an episode's distinct sub-tasks with them.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterator
from itertools import repeat

__all__ = ["content_words", "task_content", "words"]

_PUNCTUATION = string.punctuation
_FILLER = frozenset(
    {
        "a",
        "an",
        "the",
        "please",
        "of",
        "for",
        "to",
        "in",
        "on",
        "and",
        "or",
        "me",
        "us",
        "you",
        "your",
        "this",
        "that",
        "these",
        "those",
        "its",
        "it",
        "is",
        "are",
        "be",
        "find",
        "look",
        "up",
        "get",
        "give",
        "tell",
        "what",
        "which",
        "who",
        "whose",
        "how",
        "kindly",
        "can",
        "could",
        "would",
        "just",
    }
)
"""Words whose presence or absence does not make a sub-task different work ("find the capital of
France" and "please look up France's capital" are the same task)."""
_FILLER_OR_EMPTY = _FILLER | {""}


def _stripped(text: str) -> Iterator[str]:
    """The lower-cased whitespace-separated tokens of ``text`` with the punctuation around them
    stripped (a token of punctuation alone becomes ``""``)."""
    return map(str.strip, text.lower().split(), repeat(_PUNCTUATION))


def words(text: str) -> list[str]:
    """Lower-cased whitespace-separated words with the punctuation around them stripped ("Paris." and
    "paris," are one word; "user@example.com" stays one). The cheapest tokeniser found that treats the
    answer, reports and tasks alike (monitors run on every episode; a wide stage has 1,000 sub-tasks)."""
    return [w for w in _stripped(text) if w]


def content_words(text: str) -> frozenset[str]:
    """The words of ``text`` that make it different work: :func:`words` less the filler words."""
    return frozenset(_stripped(text)) - _FILLER_OR_EMPTY


task_content = functools.lru_cache(maxsize=4096)(content_words)
"""Sub-task texts are read twice per episode (duplicates, findings) and repeat across a group's samples."""
