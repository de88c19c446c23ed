"""Starter: the small wide tasks a newcomer tries first, answered item by item.

Each task asks for 2–6 independent facts of one kind — capital cities, chemical symbols, authors of
books, currencies, official languages, continents, translations into Spanish or French, and
arithmetic (with a ``calculator`` tool, because a small model cannot multiply three-digit numbers in
its head) — phrased the way people type them ("What are the capital cities of France, Japan and
Kenya?"). The answer is free text; each item is checked on its own:

* an item is right when one of its accepted answers (aliases, accents and case ignored, whole words
  only; chemical symbols case-sensitive; numbers by value) appears in the answer, and no *other*
  answer of the same kind (another country's capital, another book's author) appears in the text
  that follows the item's own mention up to the next item's mention — so a hedged
  ``Japan: yen, dollar, euro`` or a swapped ``France: Tokyo`` is wrong;
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
import math
import operator
import random
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import Field

from swarm.backend import Completion, ModelRequest
from swarm.errors import ConfigError, ToolError
from swarm.records import EpisodeRecord, Task
from swarm.testing import FunctionBackend, call
from tools.registry import Tool
from workloads.base import Episode, GoldPolicy, Knobs, Mode, Score, Workload, tool_messages, user_text

__all__ = ["KINDS", "StarterKnobs", "StarterWorkload", "calculator", "score_answer"]

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
# Countries that lie on one continent.
_CONTINENTS: dict[str, tuple[str, ...]] = {
    "Peru": ("South America",),
    "Kenya": ("Africa",),
    "Nepal": ("Asia",),
    "Canada": ("North America",),
    "Italy": ("Europe",),
    "Brazil": ("South America",),
    "Japan": ("Asia",),
    "Mexico": ("North America",),
    "Chile": ("South America",),
    "Norway": ("Europe",),
    "Vietnam": ("Asia",),
    "Morocco": ("Africa",),
    "Argentina": ("South America",),
    "Germany": ("Europe",),
    "Thailand": ("Asia",),
    "Nigeria": ("Africa",),
    "Colombia": ("South America",),
    "Poland": ("Europe",),
    "India": ("Asia",),
    "Ghana": ("Africa",),
    "the United States": ("North America",),
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


def _fold(text: str, *, case_sensitive: bool = False) -> str:
    """Accents stripped, punctuation to spaces, spaces collapsed; lower case unless case_sensitive."""
    s = unicodedata.normalize("NFKD", text)
    s = "".join(ch for ch in s if not unicodedata.combining(ch))
    s = s.replace("đ", "d").replace("Đ", "D").replace("ł", "l").replace("Ł", "L")
    s = re.sub(r"[^\w]+", " ", s)
    s = s if case_sensitive else s.casefold()
    return f" {' '.join(s.split())} "


def _find(haystack: str, needle: str) -> list[int]:
    """Start offsets of ``needle`` (already folded, space-padded) in ``haystack``."""
    out, i = [], haystack.find(needle)
    while i >= 0:
        out.append(i)
        i = haystack.find(needle, i + 1)
    return out


_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?")


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
    return _fold(re.sub(r"^the\s+", "", key, flags=re.IGNORECASE))


def score_answer(answer: str, items: Sequence[dict[str, Any]], kind: str) -> list[bool]:
    """Per item, whether ``answer`` gets it right (see the module docstring)."""
    if kind == "arithmetic":
        found = _numbers(answer)
        return [any(math.isclose(x, float(it["answer"][0]), abs_tol=1e-6) for x in found) for it in items]
    spec = _KIND[kind]
    raw = _fold(answer, case_sensitive=True)
    lowered = raw.lower()  # same offsets: keys are found here, values in `text`
    text = raw if spec.case_sensitive else lowered

    def norm(value: str) -> str:
        return _fold(value, case_sensitive=spec.case_sensitive)

    keys = [_key(it["key"]) for it in items]
    mentions = sorted((pos, i) for i, k in enumerate(keys) for pos in _find(lowered, k))
    everything = {norm(a) for values in spec.facts.values() for a in values}
    out = []
    for i, it in enumerate(items):
        own = {norm(a) for a in it["answer"]}
        if not any(_find(text, a) for a in own):
            out.append(False)
            continue
        # Another answer of the same kind in this item's own stretch of text: hedged or swapped.
        others = [a for a in everything if not any(a in o or o in a for o in own)]
        ok = True
        for k, (pos, who) in enumerate(mentions):
            if who != i:
                continue
            end = mentions[k + 1][0] + 1 if k + 1 < len(mentions) else len(text)
            segment = text[pos + len(keys[i]) - 1 : end]
            if any(_find(segment, a) for a in others):
                ok = False
                break
        out.append(ok)
    return out


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
    return tuple(k for j, k in enumerate(keys) if (j % 3 == 2) == (split == "test"))


def _arithmetic_items(rng: random.Random, n: int, split: str) -> list[dict[str, Any]]:
    """Expressions a small model gets wrong in its head; the two splits use different operand ranges."""
    lo, hi = (12, 59) if split == "train" else (61, 98)
    items: list[dict[str, Any]] = []
    seen: set[int] = set()
    while len(items) < n:
        op = rng.choice(sorted(_OPS))
        a, b = (rng.randint(lo, hi), rng.randint(lo, hi)) if op == "*" else (rng.randint(101, 999), rng.randint(lo, hi))
        value = _OPS[op](a, b)
        if value in seen or value in (a, b):
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
        kn = self.knobs(knobs)
        assert isinstance(kn, StarterKnobs)
        self.check_request(n, split)
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
                    "items": len(items),
                    "right": sum(right),
                    "per_item": {it["key"]: ok for it, ok in zip(items, right, strict=True)},
                    "max_width": max(widths, default=0),
                    "kind": kind,
                },
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
            config={"max_critical_steps": 8, "max_subagent_steps": 3, "max_subagents_per_stage": 8},
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
    if not seen and request.tool_choice != "none":
        return Completion(tool_calls=tuple(call("calculator", expression=it["key"]) for it in items))
    values = [m.content for m in seen] + ["?"] * (len(items) - len(seen))
    return Completion(text=_lines(items, values))
