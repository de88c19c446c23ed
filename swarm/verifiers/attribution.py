"""Attributing values in a free-text answer to the keys they answer: the strict half of every scorer.

An answer's value counts for a key only when it sits in a *unit* of text that names that key — a line,
a sentence or a clause — and nothing in that unit competes with it. This module holds the shared
pieces: folding text for matching, cutting an answer into units, finding whole-word mentions, and
spotting hedges ("Paris or Lyon", "maybe Tokyo", "Osaka?"). Scorers (``agent_swarm.workloads.starter``, the
table scorer's list fallback) decide what a value and a competitor are.

Units, from coarse to fine:

* :func:`segments` — lines (list markers such as ``-``, ``*``, ``1.`` dropped), each cut at ``;``,
  a spaced `` / ``, and sentence ends (``.``, ``!``, ``?`` before a space or the end, but not after
  an initial: ``J. R. R. Tolkien`` stays whole);
* :func:`clauses` — a segment cut at commas and at the word ``and`` (used when a segment names
  several keys: ``France: Paris, Japan: Tokyo``), never inside a key (``War and Peace``).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

__all__ = ["clauses", "find_all", "fold", "hedged", "segments"]

_LIST_MARKER = re.compile(r"^\s*(?:[-*•+]|\d{1,2}[.)])\s+")
# A cut: ';', a spaced slash, or a sentence end (not after a lone capital, i.e. an initial).
_SEGMENT_CUT = re.compile(r";|\s/\s|(?<!\b[A-Z][.!?])(?<=[.!?])(?=\s|$)")
_CLAUSE_CUT = re.compile(r"(,(?!\d{3}\b)|\band\b|&)")  # captured: a cut inside a whole phrase is undone
# Whole words, not inside an identifier, an e-mail address or a host name ("ava.or@x.com", "www.or.at").
_HEDGE_WORDS = re.compile(
    r"(?<![\w@.\-])(?:or|maybe|perhaps|possibly|probably|either|alternatively|unsure|not sure|uncertain|might be|"
    r"could be|likely)(?![\w@\-]|\.\w)",
    re.IGNORECASE,
)
_ALTERNATIVE = re.compile(r"[^\W\d_]/[^\W\d_]")  # "Paris/Lyon"


def fold(text: str, *, case_sensitive: bool = False) -> str:
    """Accents stripped, punctuation to spaces, spaces collapsed, padded with one space each side;
    lower case unless ``case_sensitive``. Whole-word matching is then a substring search."""
    s = unicodedata.normalize("NFKD", text)
    s = "".join(ch for ch in s if not unicodedata.combining(ch))
    s = s.replace("đ", "d").replace("Đ", "D").replace("ł", "l").replace("Ł", "L")
    s = re.sub(r"[^\w]+", " ", s)
    s = s if case_sensitive else s.casefold()
    return f" {' '.join(s.split())} "


def find_all(haystack: str, needle: str) -> list[int]:
    """Start offsets of ``needle`` (folded, space-padded) in ``haystack`` (folded), overlaps included."""
    out, i = [], haystack.find(needle)
    while i >= 0:
        out.append(i)
        i = haystack.find(needle, i + 1)
    return out


def segments(text: str) -> list[str]:
    """The answer cut into lines, then at ``;``, spaced slashes and sentence ends (see the module doc)."""
    out: list[str] = []
    for line in text.splitlines():
        line = _LIST_MARKER.sub("", line)
        out += [s for s in _SEGMENT_CUT.split(line) if s.strip()]
    return out


def clauses(segment: str, whole: Sequence[str] = ()) -> list[str]:
    """A segment cut at commas (not thousands separators) and at the word ``and``, but never inside a
    mention of one of ``whole`` (folded phrases: a title key such as ``War and Peace``)."""
    bits = _CLAUSE_CUT.split(segment)
    out = [bits[0]]
    for cut, text in zip(bits[1::2], bits[2::2], strict=True):
        joined = out[-1] + cut + text
        if whole and _mentions(joined, whole) > _mentions(out[-1], whole) + _mentions(text, whole):
            out[-1] = joined
        else:
            out.append(text)
    return [c for c in out if c.strip()]


def _mentions(text: str, phrases: Sequence[str]) -> int:
    folded = fold(text)
    return sum(len(find_all(folded, p)) for p in phrases)


def hedged(unit: str) -> bool:
    """Whether a unit offers several candidates or doubts its value: ``or``, ``maybe``, ``perhaps``,
    ``either``, … as words, a question mark, or ``A/B`` alternatives."""
    return "?" in unit or bool(_HEDGE_WORDS.search(unit)) or bool(_ALTERNATIVE.search(unit))
