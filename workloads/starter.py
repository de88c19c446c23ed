"""Starter: the small wide tasks a newcomer tries first, answered item by item.

Each task asks for 2–6 independent facts of one kind — capital cities, chemical symbols, authors of
books, currencies, official languages, continents, translations into Spanish or French, and
arithmetic (with a ``calculator`` tool, because a small model cannot multiply three-digit numbers in
its head) — phrased the way people type them ("What are the capital cities of France, Japan and
Kenya?"). The answer is free text; each item is checked on its own:

* an item is right only when its value is *attributed to its own key*
  (:mod:`agent_swarm.swarm.verifiers.attribution`): a unit of the answer — a line, a sentence, a clause — names
  the key and holds one of the item's accepted answers (aliases, accents and case ignored, whole
  words only; chemical symbols case-sensitive; numbers by value), and no unit naming the key hedges
  (``or``, ``maybe``, ``?``, ``A/B``) or holds another answer of the same kind (another country's
  capital; for arithmetic any number but the operands and the result). So ``France: Tokyo``,
  ``Japan: yen, dollar or euro``, ``Maybe Paris or Lyon`` and a dump of every number are wrong,
  while a key's line is never spoiled by another key's line (``Germany: Berlin`` after the items);
* "keys … values" in one sentence (``The capitals of France and Japan are Paris and Tokyo``) pair
  in order; an answer that names no key at all counts only as exactly one value per unit, in the
  asked order (``Paris\nTokyo``, ``4697, 5600``), or as exactly one unit per item, in that order,
  where some unit holds no value the kind lists (``George Bernard Shaw, Mark Twain``: the first is
  wrong, the second right);
* the metric is the fraction of items right; success is every item right.

Splits: every third item of each kind is held out for ``test``; tasks are drawn from the split's
items, one kind after another, so ``-n 27`` covers each kind three times. Arithmetic tasks come with
the ``calculator`` in both modes (the other tasks with no tools, as in a plain ``swarm run``); in
swarm mode the built-in ``worker`` type is the sub-agent, and the workload adds no instructions —
what a newcomer gets from ``swarm run``. The gold policies ask one sub-agent per item (swarm) or
answer alone (single), calling the calculator for arithmetic.
"""

from __future__ import annotations

import ast
import itertools
import math
import operator
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import Field

from agent_swarm.swarm.backend import Completion, ModelRequest
from agent_swarm.swarm.config import SwarmConfig
from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.swarm.function_backend import FunctionBackend, call
from agent_swarm.swarm.records import EpisodeRecord, Task
from agent_swarm.swarm.verifiers.attribution import clauses, find_all, fold, hedged, segments
from agent_swarm.tools.registry import Tool
from agent_swarm.workloads.base import Episode, GoldPolicy, Knobs, Mode, Score, Workload, tool_messages, user_text
from agent_swarm.workloads.splits import item_split, pool_splits

__all__ = ["KINDS", "StarterKnobs", "StarterWorkload", "calculator", "fact_items", "fact_question", "score_answer"]

NAME = "starter"
Kind = Literal["capital", "symbol", "author", "currency", "language", "continent", "spanish", "french", "arithmetic"]
KINDS: tuple[Kind, ...] = (
    "capital",
    "symbol",
    "author",
    "currency",
    "language",
    "continent",
    "spanish",
    "french",
    "arithmetic",
)

# -- the facts: key -> accepted answers (the first is how the gold policy writes it) ------------------

_CAPITALS: dict[str, tuple[str, ...]] = {
    "France": ("Paris",),
    "Japan": ("Tokyo",),
    "Kenya": ("Nairobi",),
    "Peru": ("Lima",),
    "Canada": ("Ottawa",),
    "Australia": ("Canberra",),
    "Egypt": ("Cairo",),
    "Brazil": ("Brasília", "Brasilia"),
    "Germany": ("Berlin",),
    "Italy": ("Rome", "Roma"),
    "Spain": ("Madrid",),
    "Norway": ("Oslo",),
    "Thailand": ("Bangkok",),
    "Argentina": ("Buenos Aires",),
    "India": ("New Delhi",),
    "China": ("Beijing", "Peking"),
    "Russia": ("Moscow",),
    "Turkey": ("Ankara",),
    "South Korea": ("Seoul",),
    "Vietnam": ("Hanoi",),
    "Portugal": ("Lisbon",),
    "Greece": ("Athens",),
    "Poland": ("Warsaw",),
    "Sweden": ("Stockholm",),
    "Ireland": ("Dublin",),
    "Morocco": ("Rabat",),
    "Nigeria": ("Abuja",),
    "Chile": ("Santiago",),
    "Colombia": ("Bogotá", "Bogota"),
    "Indonesia": ("Jakarta",),
    "Cuba": ("Havana",),
    "Austria": ("Vienna",),
    "Hungary": ("Budapest",),
    "Finland": ("Helsinki",),
    "Denmark": ("Copenhagen",),
    "Switzerland": ("Bern", "Berne"),
    "New Zealand": ("Wellington",),
    "Iran": ("Tehran",),
    "Ethiopia": ("Addis Ababa",),
    "Ukraine": ("Kyiv", "Kiev"),
}
# Two-letter symbols only: one-letter ones ("I", "O") are ordinary words in an answer.
_SYMBOLS: dict[str, tuple[str, ...]] = {
    "gold": ("Au",),
    "silver": ("Ag",),
    "iron": ("Fe",),
    "sodium": ("Na",),
    "copper": ("Cu",),
    "lead": ("Pb",),
    "tin": ("Sn",),
    "mercury": ("Hg",),
    "helium": ("He",),
    "calcium": ("Ca",),
    "zinc": ("Zn",),
    "neon": ("Ne",),
    "chlorine": ("Cl",),
    "magnesium": ("Mg",),
    "platinum": ("Pt",),
    "silicon": ("Si",),
    "lithium": ("Li",),
    "aluminium": ("Al",),
    "nickel": ("Ni",),
    "argon": ("Ar",),
    "titanium": ("Ti",),
    "manganese": ("Mn",),
    "bromine": ("Br",),
    "krypton": ("Kr",),
}
_AUTHORS: dict[str, tuple[str, ...]] = {
    "Hamlet": ("William Shakespeare", "Shakespeare"),
    "Don Quixote": ("Miguel de Cervantes", "Cervantes"),
    "War and Peace": ("Leo Tolstoy", "Tolstoy", "Tolstoi"),
    "Pride and Prejudice": ("Jane Austen", "Austen"),
    "1984": ("George Orwell", "Orwell"),
    "Moby-Dick": ("Herman Melville", "Melville"),
    "The Odyssey": ("Homer",),
    "Crime and Punishment": ("Fyodor Dostoevsky", "Dostoevsky", "Dostoyevsky"),
    "The Divine Comedy": ("Dante Alighieri", "Dante"),
    "Faust": ("Johann Wolfgang von Goethe", "Goethe"),
    "Les Misérables": ("Victor Hugo", "Hugo"),
    "Oliver Twist": ("Charles Dickens", "Dickens"),
    "The Great Gatsby": ("F. Scott Fitzgerald", "Fitzgerald"),
    "Frankenstein": ("Mary Shelley", "Shelley"),
    "The Adventures of Tom Sawyer": ("Mark Twain", "Twain"),
    "One Hundred Years of Solitude": ("Gabriel García Márquez", "García Márquez", "Marquez"),
    "The Old Man and the Sea": ("Ernest Hemingway", "Hemingway"),
    "Alice's Adventures in Wonderland": ("Lewis Carroll", "Carroll"),
    "Dracula": ("Bram Stoker", "Stoker"),
    "The Hobbit": ("J. R. R. Tolkien", "Tolkien"),
    "Jane Eyre": ("Charlotte Brontë", "Bronte"),
    "Madame Bovary": ("Gustave Flaubert", "Flaubert"),
    "The Metamorphosis": ("Franz Kafka", "Kafka"),
    "Ulysses": ("James Joyce", "Joyce"),
}
# One country per currency name (several countries use a "peso", a "franc" or a "dollar").
_CURRENCIES: dict[str, tuple[str, ...]] = {
    "Japan": ("yen", "JPY"),
    "Mexico": ("Mexican peso", "peso", "MXN"),
    "Switzerland": ("Swiss franc", "franc", "CHF"),
    "the United Kingdom": ("pound sterling", "pound", "GBP"),
    "the United States": ("US dollar", "dollar", "USD"),
    "India": ("Indian rupee", "rupee", "INR"),
    "China": ("renminbi", "yuan", "RMB", "CNY"),
    "Russia": ("Russian ruble", "ruble", "rouble", "RUB"),
    "Germany": ("euro", "EUR"),
    "Turkey": ("Turkish lira", "lira", "TRY"),
    "South Africa": ("rand", "ZAR"),
    "Thailand": ("baht", "THB"),
    "Sweden": ("Swedish krona", "krona", "kronor", "SEK"),
    "Poland": ("złoty", "zloty", "PLN"),
    "Israel": ("shekel", "new shekel", "ILS"),
    "Vietnam": ("đồng", "dong", "VND"),
    "Nigeria": ("naira", "NGN"),
    "Saudi Arabia": ("riyal", "SAR"),
    "Indonesia": ("rupiah", "IDR"),
    "Kenya": ("Kenyan shilling", "shilling", "KES"),
    "Hungary": ("forint", "HUF"),
    "Norway": ("Norwegian krone", "krone", "NOK"),
}
# Countries with one official language.
_LANGUAGES: dict[str, tuple[str, ...]] = {
    "Brazil": ("Portuguese",),
    "Egypt": ("Arabic",),
    "Iran": ("Persian", "Farsi"),
    "Mexico": ("Spanish",),
    "Germany": ("German",),
    "Japan": ("Japanese",),
    "China": ("Mandarin Chinese", "Chinese", "Mandarin"),
    "Russia": ("Russian",),
    "Greece": ("Greek",),
    "Turkey": ("Turkish",),
    "Thailand": ("Thai",),
    "Vietnam": ("Vietnamese",),
    "Poland": ("Polish",),
    "the Netherlands": ("Dutch",),
    "Sweden": ("Swedish",),
    "Israel": ("Hebrew",),
    "Italy": ("Italian",),
    "Hungary": ("Hungarian",),
    "Ethiopia": ("Amharic",),
    "Indonesia": ("Indonesian", "Bahasa Indonesia"),
    "South Korea": ("Korean",),
    "Ukraine": ("Ukrainian",),
}
# Countries that lie on one continent; the adjective names it too ("on the North American continent",
# "an African country"), and is a rival of every other continent's answer.
_CONTINENTS: dict[str, tuple[str, ...]] = {
    "Peru": ("South America", "South American"),
    "Kenya": ("Africa", "African"),
    "Nepal": ("Asia", "Asian"),
    "Canada": ("North America", "North American"),
    "Italy": ("Europe", "European"),
    "Brazil": ("South America", "South American"),
    "Japan": ("Asia", "Asian"),
    "Mexico": ("North America", "North American"),
    "Chile": ("South America", "South American"),
    "Norway": ("Europe", "European"),
    "Vietnam": ("Asia", "Asian"),
    "Morocco": ("Africa", "African"),
    "Argentina": ("South America", "South American"),
    "Germany": ("Europe", "European"),
    "Thailand": ("Asia", "Asian"),
    "Nigeria": ("Africa", "African"),
    "Colombia": ("South America", "South American"),
    "Poland": ("Europe", "European"),
    "India": ("Asia", "Asian"),
    "Ghana": ("Africa", "African"),
    "the United States": ("North America", "North American"),
}
_SPANISH: dict[str, tuple[str, ...]] = {
    "dog": ("perro",),
    "cat": ("gato",),
    "house": ("casa",),
    "water": ("agua",),
    "book": ("libro",),
    "bread": ("pan",),
    "sun": ("sol",),
    "moon": ("luna",),
    "tree": ("árbol", "arbol"),
    "apple": ("manzana",),
    "red": ("rojo",),
    "milk": ("leche",),
    "city": ("ciudad",),
    "horse": ("caballo",),
    "school": ("escuela",),
    "flower": ("flor",),
    "window": ("ventana",),
    "chair": ("silla",),
    "cheese": ("queso",),
    "bird": ("pájaro", "pajaro", "ave"),
    "table": ("mesa",),
}
_FRENCH: dict[str, tuple[str, ...]] = {
    "dog": ("chien",),
    "cat": ("chat",),
    "house": ("maison",),
    "water": ("eau",),
    "book": ("livre",),
    "bread": ("pain",),
    "sun": ("soleil",),
    "moon": ("lune",),
    "tree": ("arbre",),
    "apple": ("pomme",),
    "red": ("rouge",),
    "milk": ("lait",),
    "city": ("ville", "cité"),
    "horse": ("cheval",),
    "school": ("école", "ecole"),
    "flower": ("fleur",),
    "window": ("fenêtre", "fenetre"),
    "chair": ("chaise",),
    "cheese": ("fromage",),
    "bird": ("oiseau",),
    "table": ("table",),
}
# Arithmetic is generated: a small model cannot do these in its head, the calculator can.
_OPS: dict[str, Callable[[int, int], int]] = {"*": operator.mul, "+": operator.add, "-": operator.sub}


@dataclass(frozen=True)
class _Kind:
    facts: dict[str, tuple[str, ...]]
    prompts: tuple[str, ...]  # {items}: "A, B and C"
    question: str  # one item, as the gold orchestrator asks a sub-agent: {key}
    case_sensitive: bool = False


_KIND: dict[str, _Kind] = {
    "capital": _Kind(
        _CAPITALS,
        ("What are the capital cities of {items}?", "Find the capitals of {items}."),
        "What is the capital city of {key}?",
    ),
    "symbol": _Kind(
        _SYMBOLS,
        ("What are the chemical symbols of {items}?", "Give the chemical symbol for each of these elements: {items}."),
        "What is the chemical symbol of {key}?",
        case_sensitive=True,
    ),
    "author": _Kind(
        _AUTHORS,
        ("Who wrote {items}?", "Name the author of each of these books: {items}."),
        "Who wrote the book {key}?",
    ),
    "currency": _Kind(
        _CURRENCIES,
        ("Which currency is used in each of these countries: {items}?", "What are the currencies of {items}?"),
        "What is the currency of {key}?",
    ),
    "language": _Kind(
        _LANGUAGES,
        (
            "What is the official language of each of these countries: {items}?",
            "Which languages are spoken in {items}?",
        ),
        "What is the official language of {key}?",
    ),
    "continent": _Kind(
        _CONTINENTS,
        ("On which continent is each of these countries: {items}?", "Which continents are {items} in?"),
        "On which continent is {key}?",
    ),
    "spanish": _Kind(
        _SPANISH,
        ("Translate these English words into Spanish: {items}.", "How do you say {items} in Spanish?"),
        "Translate the English word '{key}' into Spanish.",
    ),
    "french": _Kind(
        _FRENCH,
        ("Translate these English words into French: {items}.", "What are the French words for {items}?"),
        "Translate the English word '{key}' into French.",
    ),
}


# -- the calculator -------------------------------------------------------------------------------------

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod) and right == 0:
            raise ToolError("division by zero")
        result = _BINARY[type(node.op)](left, right)
        if abs(result) > 1e15:
            raise ToolError("the result is too large")
        return result  # type: ignore[no-any-return]
    raise ToolError("only numbers, + - * / // % and parentheses are allowed")


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly: numbers, + - * / (also × ÷ x) and parentheses.

    Args:
        expression: e.g. "17 * 23" or "(144 / 12) + 3".
    """
    text = expression.replace("×", "*").replace("÷", "/").replace("−", "-").replace(",", "")
    text = re.sub(r"(?<=\d)\s*[xX]\s*(?=\d)", "*", text)
    if len(text) > 200:
        raise ToolError("the expression is too long (200 characters at most)")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse {expression!r}; write it like 17 * 23") from None
    value = _evaluate(tree.body)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(round(value, 6) if isinstance(value, float) else value)


def _calculator_tool() -> Tool:
    return Tool(calculator, blocking=False, timeout_s=5.0)


# -- matching -----------------------------------------------------------------------------------------


_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")
_OPERATOR_WORDS = (
    (re.compile(r"(?<=\d)\s*[xX×]\s*(?=\d)|\btimes\b|\bmultiplied by\b"), " * "),
    (re.compile(r"\bplus\b"), " + "),
    (re.compile(r"\bminus\b|[−–]"), " - "),
)


def _numbers(text: str) -> list[float]:
    out = []
    for m in _NUMBER_RE.finditer(text.replace("−", "-")):
        try:
            out.append(float(m.group(0).replace(",", "")))
        except ValueError:
            continue
    return out


def _key(key: str) -> str:
    """An item's key as matched in an answer: folded, without a leading "the"."""
    return fold(re.sub(r"^the\s+", "", key, flags=re.IGNORECASE))


def _spans(text: str, needles: Sequence[str]) -> list[tuple[int, int, int]]:
    """Non-overlapping whole-word mentions ``(start, end, needle index)`` in folded ``text``, longest first."""
    found = sorted(
        ((pos, pos + len(n) - 1, j) for j, n in enumerate(needles) for pos in find_all(text, n)),
        key=lambda s: (s[0] - s[1], s[0]),
    )
    kept: list[tuple[int, int, int]] = []
    for s in found:
        if all(s[1] <= k[0] or s[0] >= k[1] for k in kept):
            kept.append(s)
    return sorted(kept)


@dataclass(frozen=True, slots=True)
class _Facts:
    """One task's matching tables: keys (the items' first, then the kind's other keys) and values."""

    keys: tuple[str, ...]  # folded, lower case
    values: tuple[str, ...]  # folded (case kept for a case-sensitive kind): every answer of the kind
    own: tuple[frozenset[str], ...]  # per item, its accepted answers, folded
    case_sensitive: bool

    def key_ids(self, unit: str) -> list[int]:
        """Distinct keys a raw unit names, in order of first mention."""
        ids: list[int] = []
        for _, _, j in _spans(fold(unit), self.keys):
            if j not in ids:
                ids.append(j)
        return ids

    def value_ids(self, unit: str) -> list[int]:
        """The kind's values a raw unit contains, in order (indices into ``values``)."""
        return [j for _, _, j in _spans(fold(unit, case_sensitive=self.case_sensitive), self.values)]

    def verdict(self, i: int, units: Sequence[str]) -> bool:
        """Item ``i`` is right when a unit attributed to it holds one of its answers and none of
        them hedges or holds another answer of the kind (one that is no alias of its own)."""
        own = self.own[i]
        rivals = [v for v in self.values if not any(v in o or o in v for o in own)]
        texts = [fold(u, case_sensitive=self.case_sensitive) for u in units]
        return (
            any(o in t for o in own for t in texts)
            and not any(hedged(u) for u in units)
            and not any(r in t for r in rivals for t in texts)
        )


_QUESTION = re.compile(
    r"^\W*(?:what|which|who|whose|where|when|how|why|is|are|do|does|did|can|could)\b[^?]*\?\s*$", re.IGNORECASE
)


def _respectively(seg: str, ids: list[int], facts: _Facts) -> list[tuple[int, str]] | None:
    """``France, Japan and Kenya: Paris, Tokyo and Nairobi``: as many keys as values, all keys before
    all values or after them, pair in order. None when the segment is not of that shape."""
    keys = [(s, j) for s, _, j in _spans(fold(seg), facts.keys)]
    vals = [(s, j) for s, _, j in _spans(fold(seg, case_sensitive=facts.case_sensitive), facts.values)]
    if len(keys) != len(ids) or len(vals) != len(keys):
        return None
    if not (keys[-1][0] < vals[0][0] or vals[-1][0] < keys[0][0]):
        return None
    return [(k, facts.values[v].strip()) for (_, k), (_, v) in zip(keys, vals, strict=True)]


def _attributed(answer: str, facts: _Facts) -> tuple[dict[int, list[str]], bool]:
    """Units of text per key index (item keys first), and whether the answer names any key at all.

    A segment naming one key is that key's; one naming several is paired in order when it reads
    "keys … values" (or the reverse), else cut into clauses (never inside a key: ``War and Peace``), and
    a clause still naming several keys is cut at each mention (the text up to the next mention belongs
    to the key it starts with). A hedging segment that names no key (``France: Paris. Or Rome.``)
    belongs to the keys before it; so do the segments under a key named alone with no value, up to the
    next key (``**Israel**:`` then ``- Currency: shekel``)."""
    out: dict[int, list[str]] = {}
    named = False
    last: list[int] = []
    heading: int | None = None  # a key named alone with no value: the lines under it are its own
    for seg in segments(answer):
        if _QUESTION.match(seg):  # the question restated ("What are the capitals of France and Japan?")
            continue
        ids = facts.key_ids(seg)
        named = named or bool(ids)
        if not ids and hedged(seg):
            for k in last:
                out.setdefault(k, []).append(seg)
        elif not ids and heading is not None:
            out.setdefault(heading, []).append(seg)
        if ids:
            heading = ids[0] if len(ids) == 1 and not facts.value_ids(seg) else None
        last = ids or last
        if len(ids) == 1:
            out.setdefault(ids[0], []).append(seg)
            continue
        pairs = _respectively(seg, ids, facts) if ids else None
        if pairs is not None:
            for k, value in pairs:
                out.setdefault(k, []).append(f"{value}?" if hedged(seg) else value)
            continue
        for clause in clauses(seg, facts.keys) if ids else ():
            for k, piece in _pieces(clause, facts):
                out.setdefault(k, []).append(f"{piece}?" if hedged(clause) else piece)
    return out, named


def _pieces(clause: str, facts: _Facts) -> list[tuple[int, str]]:
    """``(key, text)`` per key mention of a clause: from each mention to the next (the first from the
    clause's start), folded with the kind's case kept (``the symbol for zinc is Zn``)."""
    kept = fold(clause, case_sensitive=facts.case_sensitive)
    folded = kept.casefold()
    text = kept if len(kept) == len(folded) else folded  # casefold lengthened it (ß): case is lost
    spans = _spans(folded, facts.keys)
    return [
        (k, text[0 if n == 0 else start : spans[n + 1][0] if n + 1 < len(spans) else len(text)])
        for n, (start, _, k) in enumerate(spans)
    ]


def _positional(units: Sequence[str], n: int, value_of: Callable[[str], list[Any]]) -> list[Any] | None:
    """Answers given in the asked order without their keys (``Paris, Tokyo and Nairobi``): each unit
    that holds a value holds exactly one and no hedge, and there are exactly ``n``; else None."""
    found = []
    for unit in units:
        values = value_of(unit)
        if not values:
            continue
        if len(values) != 1 or hedged(unit):
            return None
        found.append(values[0])
    return found if len(found) == n else None


def _one_per_unit(units: Sequence[str], n: int, value_of: Callable[[str], list[Any]]) -> list[Any] | None:
    """Answers given in the asked order without their keys, one unit each, some of them no value the
    scorer knows (``George Bernard Shaw, Mark Twain`` for Madame Bovary and Tom Sawyer: Shaw is no
    author it lists): exactly ``n`` units, none hedged or holding two values; each unit's value, or
    None where it holds none (that item is wrong, the others are still read in order)."""
    if len(units) != n:
        return None
    found = []
    for unit in units:
        values = value_of(unit)
        if len(values) > 1 or hedged(unit):
            return None
        found.append(values[0] if values else None)
    return found


def _score_text(answer: str, items: Sequence[dict[str, Any]], spec: _Kind) -> list[bool]:
    item_keys = [_key(it["key"]) for it in items]
    cs = spec.case_sensitive
    facts = _Facts(
        keys=(*item_keys, *(k for k in map(_key, spec.facts) if k not in item_keys)),
        values=tuple(sorted({fold(a, case_sensitive=cs) for v in spec.facts.values() for a in v})),
        own=tuple(frozenset(fold(a, case_sensitive=cs) for a in it["answer"]) for it in items),
        case_sensitive=cs,
    )
    units, named = _attributed(answer, facts)
    if named:
        return [facts.verdict(i, units.get(i, [])) for i in range(len(items))]
    parts = [c for seg in segments(answer) for c in clauses(seg)]

    def value_of(unit: str) -> list[str]:
        return [facts.values[j] for j in facts.value_ids(unit)]

    found = _positional(parts, len(items), value_of)
    if found is None:  # as many units as items, one of them a value the kinds do not list
        listed = [p for p in parts if p.strip(" .,;!") and not (p.rstrip().endswith(":") and not value_of(p))]
        found = _one_per_unit(listed, len(items), value_of)  # a heading ("Here they are:") is no unit
    return [found is not None and found[i] in facts.own[i] for i in range(len(items))]


def _expression(key: str) -> re.Pattern[str]:
    a, op, b = key.split()
    return re.compile(rf"(?<![\d.]){a}\s*{re.escape(op)}\s*{b}(?![\d.])")


def _operators(text: str) -> str:
    for pattern, op in _OPERATOR_WORDS:
        text = pattern.sub(op, text)
    return text


def _arithmetic_units(
    part: str, patterns: Sequence[re.Pattern[str]], operands: Sequence[tuple[float, ...]]
) -> list[tuple[int, str]]:
    """(item, unit) pairs of one segment: the text from each expression named to the next; with several
    expressions named first and as many numbers after the last (``… for 61 * 77 and 80 * 70 are 4697
    and 5600``), each expression with its number in order; with none, the item whose two operands
    start the segment (``the product of 61 and 77 is 4697``)."""
    found = sorted((m.start(), m.end(), i) for i, p in enumerate(patterns) for m in p.finditer(part))
    if not found:
        lead = tuple(_numbers(part)[:2])
        owners = [i for i, o in enumerate(operands) if o == lead]
        return [(owners[0], part)] if len(owners) == 1 else []
    tail = _numbers(part[found[-1][1] :])
    between = [_numbers(part[a[1] : b[0]]) for a, b in itertools.pairwise(found)]
    if len(found) > 1 and len(tail) == len(found) and not any(between) and not hedged(part):
        return [(i, f"{operands[i][0]} {operands[i][1]} = {x}") for (_, _, i), x in zip(found, tail, strict=True)]
    ends = [s for s, _, _ in found[1:]] + [len(part)]
    return [
        (i, part[0 if n == 0 else start : end]) for n, ((start, _, i), end) in enumerate(zip(found, ends, strict=True))
    ]


def _score_arithmetic(answer: str, items: Sequence[dict[str, Any]]) -> list[bool]:
    """Per item: a unit names its expression (``61 * 77``, ``61 × 77``, ``61 times 77``) or starts with
    its two operands (or sits under a line naming it alone), holds its value, and no number but the
    operands and the value; else, with no expression named anywhere, one number per unit in the asked
    order."""
    patterns = [_expression(it["key"]) for it in items]
    operands = [tuple(float(x) for x in it["key"].split()[::2]) for it in items]
    values = [float(it["answer"][0]) for it in items]
    units: dict[int, list[str]] = {}
    last: list[int] = []
    heading: int | None = None  # an expression named alone with no result: the lines under it are its own
    for part in map(_operators, segments(answer)):
        found = _arithmetic_units(part, patterns, operands)
        if found:
            (i, unit), *more = found
            heading = None if more or any(x not in operands[i] for x in _numbers(unit)) else i
        elif heading is not None and not hedged(part):
            found = [(heading, part)]  # "**61 * 77**:" then "- Answer: 4697"
        for i, unit in found or [(i, part) for i in last if hedged(part)]:  # "= 4697. Or 4700." is 61 * 77's
            units.setdefault(i, []).append(unit)
        last = [i for i, _ in found] or last
    if not units:
        given = _positional([c for seg in segments(answer) for c in clauses(seg)], len(items), _numbers)
        return [given is not None and math.isclose(given[i], values[i], abs_tol=1e-6) for i in range(len(items))]

    def clean(i: int, unit: str) -> tuple[bool, bool]:
        rest = [x for x in _numbers(unit) if x not in operands[i]]
        return bool(rest) and not hedged(unit), all(math.isclose(x, values[i], abs_tol=1e-6) for x in rest)

    out = []
    for i in range(len(items)):
        checks = [clean(i, u) for u in units.get(i, [])]
        out.append(any(has for has, _ in checks) and all(ok for _, ok in checks) and bool(checks))
    return out


def score_answer(answer: str, items: Sequence[dict[str, Any]], kind: str) -> list[bool]:
    """Per item, whether ``answer`` gets it right (see the module docstring)."""
    if kind == "arithmetic":
        return _score_arithmetic(answer, items)
    return _score_text(answer, items, _KIND[kind])


# -- the workload -----------------------------------------------------------------------------------


class StarterKnobs(Knobs):
    min_items: int = Field(2, ge=2, le=6, description="fewest items in a task")
    max_items: int = Field(6, ge=2, le=6, description="most items in a task")
    kinds: tuple[Kind, ...] = Field(KINDS, min_length=1, description="which kinds of facts to ask for")


def _join(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


@cache
def _pool(kind: str, split: str) -> tuple[str, ...]:
    keys = sorted(_KIND[kind].facts)
    splits = pool_splits(keys, [j % 3 == 2 for j in range(len(keys))])  # every 3rd held out, a quarter of the rest dev
    return tuple(k for k, s in zip(keys, splits, strict=True) if s == split)


def fact_items(kind: str, split: str) -> list[dict[str, Any]]:
    """The items (``{"key", "answer"}``) of a fact kind in ``split``: one-fact questions (``controls``)."""
    return [{"key": k, "answer": list(_KIND[kind].facts[k])} for k in _pool(kind, split)]


def fact_question(kind: str, key: str) -> str:
    """One fact asked on its own: "What is the capital city of Portugal?"."""
    return _KIND[kind].question.format(key=key)


def _arithmetic_items(rng: random.Random, n: int, split: str) -> list[dict[str, Any]]:
    """Expressions a small model gets wrong in its head; test uses other operand ranges than train and
    dev, which share theirs and split its expressions by a hash (``item_split``)."""
    lo, hi = (61, 98) if split == "test" else (12, 59)
    items: list[dict[str, Any]] = []
    seen: set[int] = set()
    while len(items) < n:
        op = rng.choice(sorted(_OPS))
        a, b = (rng.randint(lo, hi), rng.randint(lo, hi)) if op == "*" else (rng.randint(101, 999), rng.randint(lo, hi))
        value = _OPS[op](a, b)
        if value in seen or value in (a, b) or item_split(f"{a} {op} {b}", test=split == "test") != split:
            continue
        seen.add(value)
        items.append({"key": f"{a} {op} {b}", "answer": [str(value)]})
    return items


class StarterWorkload(Workload):
    name = NAME
    metric = "item_accuracy"
    description = "2-6 independent facts per task (capitals, symbols, authors, ...); answers checked per item"
    knobs_model = StarterKnobs

    def tasks(self, n: int, *, seed: int = 0, split: str = "train", **knobs: Any) -> list[Task]:
        kn = self.request(n, split, knobs, StarterKnobs)
        if kn.min_items > kn.max_items:
            raise ConfigError(f"min_items={kn.min_items} is more than max_items={kn.max_items}")
        rng = random.Random(f"{self.name}:{split}:{seed}")
        order = list(kn.kinds)
        rng.shuffle(order)
        out = []
        for i in range(n):
            kind = order[i % len(order)]
            size = rng.randint(kn.min_items, kn.max_items)
            if kind == "arithmetic":
                items = _arithmetic_items(rng, size, split)
                keys = [it["key"] for it in items]
                prompt = rng.choice(("What is {items}?", "Compute {items}.")).format(items=_join(keys))
            else:
                spec = _KIND[kind]
                pool = _pool(kind, split)
                keys = rng.sample(pool, min(size, len(pool)))
                items = [{"key": k, "answer": list(spec.facts[k])} for k in keys]
                shown = [f"'{k}'" if kind in ("spanish", "french") else k for k in keys]
                prompt = rng.choice(spec.prompts).format(items=_join(shown))
            out.append(
                Task(
                    id=f"{self.name}-{split}-s{seed}-{i}",
                    prompt=prompt,
                    metadata={
                        "workload": self.name,
                        "kind": kind,
                        "items": items,
                        "parts": len(items),
                        "split": split,
                        "seed": seed,
                        "knobs": kn.model_dump(mode="json"),
                    },
                )
            )
        return out

    def episode(self, task: Task, mode: Mode) -> Episode:
        self.check_task(task)
        items: list[dict[str, Any]] = list(task.metadata["items"])
        kind: str = task.metadata["kind"]

        def scorer(record: EpisodeRecord) -> Score:
            right = score_answer(record.answer or "", items, kind)
            widths = record.dag.stage_widths
            return Score(
                metric=sum(right) / len(right),
                success=all(right),
                details={
                    "n_items": len(items),
                    "right": sum(right),
                    "per_item": {it["key"]: ok for it, ok in zip(items, right, strict=True)},
                    "max_width": max(widths, default=0),
                    "kind": kind,
                },
                items={it["key"]: float(ok) for it, ok in zip(items, right, strict=True)},
            )

        instructions = (
            ""
            if mode == "swarm"
            else "You are a helpful assistant. Answer every part of the question."
            + (" Use the calculator for arithmetic." if kind == "arithmetic" else "")
        )
        return Episode(
            task=task,
            mode=mode,
            # The tools a task needs, as a user would give them: a calculator for arithmetic only
            # (offered everywhere, a small model calls it for translations too).
            tools=(_calculator_tool(),) if kind == "arithmetic" else (),
            agents=(),
            instructions=instructions,
            scorer=scorer,
            config=SwarmConfig(max_critical_steps=8, max_subagent_steps=3, max_subagents_per_stage=8),
        )

    def gold_policy(self, task: Task, mode: Mode, *, latency_s: float = 0.0) -> GoldPolicy:
        self.check_task(task)
        items: list[dict[str, Any]] = list(task.metadata["items"])
        kind: str = task.metadata["kind"]
        if mode == "swarm":
            orch = FunctionBackend(lambda r: _gold_swarm(r, items, kind), model="gold-orchestrator", delay=latency_s)
        else:
            orch = FunctionBackend(lambda r: _gold_single(r, items, kind), model="gold-single", delay=latency_s)
        sub = FunctionBackend(lambda r: _gold_worker(r, items, kind), model="gold-subagent", delay=latency_s)
        return GoldPolicy(orch, sub)


def _question(item: dict[str, Any], kind: str) -> str:
    if kind == "arithmetic":
        return f"Compute {item['key']} with the calculator."
    return _KIND[kind].question.format(key=item["key"])


def _lines(items: Sequence[dict[str, Any]], values: Sequence[str]) -> str:
    return "\n".join(f"{it['key']}: {v}" for it, v in zip(items, values, strict=True))


def _gold_swarm(request: ModelRequest, items: Sequence[dict[str, Any]], kind: str) -> Completion:
    reports = tool_messages(request, "assign_task")
    if reports or request.tool_choice == "none":
        values = [m.content.rsplit("report:\n", 1)[-1].strip() if not m.is_error else "?" for m in reports]
        values += ["?"] * (len(items) - len(values))
        return Completion(text=_lines(items, values))
    calls = [call("assign_task", agent="worker", task=_question(it, kind)) for it in items]
    return Completion(tool_calls=tuple(calls))


def _gold_worker(request: ModelRequest, items: Sequence[dict[str, Any]], kind: str) -> Completion:
    task = user_text(request)
    item = next((it for it in items if _question(it, kind) == task), None)
    if item is None:
        return Completion(text="I cannot tell which item this task is about.")
    if kind != "arithmetic":
        return Completion(text=str(item["answer"][0]))
    seen = tool_messages(request, "calculator")
    if not seen:
        return Completion(tool_calls=(call("calculator", expression=item["key"]),))
    return Completion(text=seen[-1].content)


def _gold_single(request: ModelRequest, items: Sequence[dict[str, Any]], kind: str) -> Completion:
    if kind != "arithmetic":
        return Completion(text=_lines(items, [str(it["answer"][0]) for it in items]))
    seen = tool_messages(request, "calculator")
    if len(seen) < len(items) and request.tool_choice != "none":  # one call per turn, as the protocol allows
        return Completion(tool_calls=(call("calculator", expression=items[len(seen)]["key"]),))
    values = [m.content for m in seen] + ["?"] * (len(items) - len(seen))
    return Completion(text=_lines(items, values))
