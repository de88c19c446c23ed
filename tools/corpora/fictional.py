"""Generated corpora of fictional companies, people and products: facts no model can know.

A :func:`fictional_world` is one small document collection, a pure function of its arguments (the same
key gives the same documents on every machine), made of:

* the *asked* entities, one document each, whose facts are drawn at random (a company's founding year,
  headquarters, chief executive, head count, ticker and best-known product; a person's birth year,
  home town, employer, role and e-mail; a product's maker, launch year, price, weight and SKU). Names
  are pseudo-words built from syllables ("Drari Robotics", "Velmora Tesk"), towns too, so neither the
  names nor the values exist anywhere a model was trained on;
* ``distractors`` documents per asked entity that are *not* it: its near-namesake (the name perturbed
  by one letter, or another model number, with its own facts) and news items that mention it beside
  another entity's numbers, years and towns — whoever reads the wrong document writes wrong values;
* ``missing`` names that are asked for but have no document, only a near-namesake;
* as many background entities as asked ones.

Asked and missing names pass the caller's ``accept`` test (the workloads accept only names of the
task's split, ``agent_swarm.workloads.splits.key_split``), so the same entity is never asked in two splits. The
documents carry ``fields`` = the record (the gold). Write one out for ``swarm run --tools search --search-corpus``
with ``python -m agent_swarm.tools.corpora.fictional OUT.jsonl --kind company --entities 8 --seed 3``.
"""

from __future__ import annotations

import argparse
import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.tools.builtin.search import Corpus, Document, _dump_jsonl

__all__ = [
    "ATTRIBUTES",
    "FICTIONAL_KINDS",
    "GENERATOR",
    "Accept",
    "FictionalKind",
    "World",
    "fictional_world",
    "main",
]

GENERATOR = "fictional-v2"
_WORLD_SALT = "fictional-v1"
"""Seeds every world's random draws. v2 changed titles only, so its worlds keep v1's entities and facts,
and a task measured before and after the change is the same task."""
"""The generator's version: a task records it, and a change to the documents must bump it."""

Accept = Callable[[str], bool]
"""Which names may be asked (a pure function of the name: the workloads accept one split's names)."""
FictionalKind = Literal["company", "person", "product"]
FICTIONAL_KINDS: tuple[FictionalKind, ...] = get_args(FictionalKind)
ATTRIBUTES: dict[FictionalKind, tuple[str, ...]] = {
    "company": ("founded", "headquarters", "ceo", "employees", "ticker", "flagship"),
    "person": ("born", "hometown", "employer", "role", "email"),
    "product": ("maker", "launched", "price", "weight_g", "sku"),
}

# Mostly open syllables of single letters: pronounceable made-up words ("Velamo", "Drari", "Kesuna").
_ONSETS: tuple[str, ...] = tuple("bdfgklmnprstvz") * 3 + ("br", "dr", "gr", "kr", "tr", "st", "th", "sh", "ch", "qu")
_VOWELS: tuple[str, ...] = tuple("aeiou") * 4 + ("ai", "ea", "io", "ou", "y")
_CODAS: tuple[str, ...] = ("",) * 12 + ("n", "r", "l", "s", "m", "x", "nd", "rk")
_INDUSTRIES: tuple[str, ...] = ("Robotics", "Foods", "Logistics", "Analytics", "Textiles", "Pharma", "Energy", "Mining")
_INDUSTRIES += ("Optics", "Software", "Ceramics", "Aerospace", "Biotech", "Shipping", "Audio", "Furniture")
_TOWN_SUFFIX: tuple[str, ...] = (
    "",
    "",
    "ford",
    "ville",
    " Falls",
    "port",
    "burg",
    "ton",
    " Harbor",
    "mouth",
    "field",
    " Cross",
)
_ROLES: tuple[str, ...] = (
    "architect",
    "biologist",
    "carpenter",
    "chemist",
    "data analyst",
    "dentist",
    "economist",
    "editor",
)
_ROLES += ("electrician", "engineer", "film editor", "geologist", "illustrator", "journalist", "lawyer", "librarian")
_ROLES += ("mechanic", "midwife", "nurse", "optician", "pharmacist", "photographer", "pilot", "plumber")
_ROLES += ("surveyor", "teacher", "translator", "urban planner", "veterinarian", "welder", "actuary", "archivist")
_CATEGORIES: tuple[str, ...] = (
    "kettle",
    "drone",
    "e-reader",
    "bicycle lamp",
    "coffee grinder",
    "label printer",
    "synthesizer",
)
_CATEGORIES += ("tent", "smartwatch", "air purifier", "desk lamp", "blender", "telescope", "robot vacuum")
_NEWS = (
    "{name} signs a supply deal with {other}",
    "{name} and {other} announce a joint venture",
    "Analysts compare {name} with {other}",
    "{other} wins a contract over {name}",
)


def _word(rng: random.Random, syllables: int) -> str:
    out = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
    return out[:1].upper() + out[1:]


def _perturb(word: str, rng: random.Random) -> str:
    """``word`` with one letter changed (a vowel for a vowel, a consonant for a consonant)."""
    for _ in range(50):
        i = rng.randrange(1, len(word)) if len(word) > 1 else 0
        pool = "aeiouy" if word[i].lower() in "aeiouy" else "bcdfghklmnprstvz"
        new = word[:i] + rng.choice(pool) + word[i + 1 :]
        if new != word:
            return new[:1].upper() + new[1:]
    return word + "e"


class _Names:
    """Fresh names, never the same twice in one world."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def take(self, make: Callable[[], str], accept: Accept | None = None) -> str:
        for _ in range(1000):
            name = make()
            if name.lower() not in self.used and (accept is None or accept(name)):
                self.used.add(name.lower())
                return name
        raise ConfigError("could not draw a fresh fictional name that the caller accepts")  # pragma: no cover

    def person(self, accept: Accept | None = None) -> str:
        return self.take(lambda: f"{_word(self.rng, 2)} {_word(self.rng, self.rng.choice((2, 3)))}", accept)

    def company(self, accept: Accept | None = None) -> str:
        return self.take(lambda: f"{_word(self.rng, self.rng.choice((2, 3)))} {self.rng.choice(_INDUSTRIES)}", accept)

    def product(self, accept: Accept | None = None) -> str:
        def make() -> str:
            return f"{_word(self.rng, 2)} {self.rng.choice(string.ascii_uppercase)}{self.rng.randint(2, 99)}"

        return self.take(make, accept)

    def town(self) -> str:
        return self.take(lambda: _word(self.rng, self.rng.choice((2, 3))) + self.rng.choice(_TOWN_SUFFIX))

    def of(self, kind: str, accept: Accept | None = None) -> str:
        return {"company": self.company, "person": self.person, "product": self.product}[kind](accept)

    def twin(self, kind: str, name: str) -> str:
        """A near-namesake: one letter of the made-up word changed, or another model number."""
        first, rest = name.split(" ", 1)
        if kind == "person":
            return self.take(lambda: f"{first} {_perturb(rest, self.rng)}")
        if kind == "product":
            return self.take(lambda: f"{first} {rest[0]}{self.rng.randint(2, 99)}")
        return self.take(lambda: f"{_perturb(first, self.rng)} {rest}")


def _record(kind: str, name: str, names: _Names) -> dict[str, Any]:
    rng = names.rng
    if kind == "company":
        return {
            "name": name,
            "industry": name.rsplit(" ", 1)[-1],
            "founded": rng.randint(1921, 2019),
            "headquarters": names.town(),
            "ceo": names.person(),
            "employees": int(10 ** rng.uniform(1.5, 5.2)),
            "ticker": "".join(rng.choice(string.ascii_uppercase) for _ in range(4)),
            "flagship": names.product(),
        }
    if kind == "person":
        first, last = name.split(" ", 1)
        return {
            "name": name,
            "born": rng.randint(1941, 2003),
            "hometown": names.town(),
            "employer": names.company(),
            "role": rng.choice(_ROLES),
            "email": f"{first[0].lower()}.{last.lower()}{rng.randint(1, 99)}@{_word(rng, 2).lower()}.example",
        }
    return {
        "name": name,
        "category": rng.choice(_CATEGORIES),
        "maker": names.company(),
        "launched": rng.randint(1996, 2024),
        "price": round(rng.uniform(9, 1999), 2),
        "weight_g": rng.randint(40, 9000),
        "sku": f"{name[:2].upper()}-{rng.randint(10000, 99999)}",
    }


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _own_text(kind: str, r: dict[str, Any]) -> str:
    if kind == "company":
        return (
            f"{r['name']} is {_a(r['industry'].lower())} company founded in {r['founded']} and headquartered in "
            f"{r['headquarters']}. Its chief executive is {r['ceo']}. The company employs {r['employees']:,} people, "
            f"and its shares trade under the ticker {r['ticker']}.\nIts best-known product is the {r['flagship']}."
        )
    if kind == "person":
        return (
            f"{r['name']} (born {r['born']}) is {_a(r['role'])} from {r['hometown']}.\n"
            f"{r['name'].split(' ')[0]} works at {r['employer']}.\nEmail: {r['email']}"
        )
    return (
        f"The {r['name']} is {_a(r['category'])} made by {r['maker']}, first sold in {r['launched']}.\n"
        f"It is priced at ${r['price']:.2f} and weighs {r['weight_g']:,} grams. SKU: {r['sku']}"
    )


def _doc(kind: str, r: dict[str, Any]) -> Document:
    return Document(
        id=f"{kind}/{_slug(r['name'])}",
        title=r["name"],  # the id says the kind: a "Name (kind)" title was copied into answers' key cells
        text=_own_text(kind, r),
        kind=kind,
        source=GENERATOR,
        fields=r,
    )


def _slug(name: str) -> str:
    return "-".join("".join(c for c in w.lower() if c.isalnum()) for w in name.split())


def _news(kind: str, r: dict[str, Any], other: dict[str, Any], no: int, rng: random.Random) -> Document:
    """A news item naming ``r`` beside ``other``'s facts (years, towns, numbers that are not ``r``'s)."""
    headline = rng.choice(_NEWS).format(name=r["name"], other=other["name"])
    facts = _own_text(kind, other).replace("\n", " ")
    text = (
        f"{headline}. Reporting from {rng.choice(('the trade press', 'a local paper', 'a newsletter'))}.\n"
        f"The announcement concerns {r['name']} and {other['name']}. About the latter: {facts}\n"
        f"Neither side disclosed the value of the deal, estimated at {rng.randint(2, 900)} million."
    )
    return Document(
        id=f"news/{_slug(r['name'])}-{no}",
        title=headline,
        text=text,
        kind="news",
        source=GENERATOR,
        fields={"mentions": [r["name"], other["name"]]},
    )


@dataclass(frozen=True, slots=True)
class World:
    """One generated collection: the asked entities' records (the gold), the names asked that have no
    document, and every document."""

    key: str
    kind: FictionalKind
    entities: tuple[dict[str, Any], ...]
    missing: tuple[str, ...]
    documents: tuple[Document, ...]

    def corpus(self) -> Corpus:
        return Corpus(self.documents, name=f"fictional:{self.key}")


def fictional_world(
    key: str,
    kind: FictionalKind,
    entities: int,
    *,
    distractors: int = 2,
    missing: int = 0,
    accept: Accept | None = None,
    linked: bool = False,
) -> World:
    """The world of ``key``: ``entities`` asked entities of ``kind``, ``distractors`` documents about each
    that are not it, ``missing`` asked names without a document, and as many background entities as
    asked ones. Asked and missing names pass ``accept``. Deterministic in its arguments (``accept``
    must be a pure function of the name).

    ``linked`` (companies only) adds the second hop of a chain: each asked company's chief executive
    gets a person document (working at that company), and a near-namesake of theirs one too."""
    if kind not in FICTIONAL_KINDS:
        raise ConfigError(f"unknown fictional kind {kind!r}; known: {', '.join(FICTIONAL_KINDS)}")
    if entities < 1 or distractors < 0 or missing < 0:
        raise ConfigError(
            f"entities must be ≥ 1, distractors and missing ≥ 0; got {entities}, {distractors}, {missing}"
        )
    rng = random.Random(f"{_WORLD_SALT}:{key}:{kind}:{entities}:{distractors}:{missing}")
    names = _Names(rng)
    asked = [_record(kind, names.of(kind, accept), names) for _ in range(entities)]
    absent = [names.of(kind, accept) for _ in range(missing)]
    background = [_record(kind, names.of(kind), names) for _ in range(entities)]
    docs = [_doc(kind, r) for r in [*asked, *background]]
    for name in absent:  # only a near-namesake of a missing name is in the collection
        docs.append(_doc(kind, _record(kind, names.twin(kind, name), names)))
    for r in asked:
        for j in range(distractors):
            if j == 0:
                docs.append(_doc(kind, _record(kind, names.twin(kind, r["name"]), names)))
            else:
                docs.append(_news(kind, r, _record(kind, names.of(kind), names), j, rng))
    if linked:
        docs += _linked(kind, asked, names)
    rng.shuffle(docs)
    return World(key=key, kind=kind, entities=tuple(asked), missing=tuple(absent), documents=tuple(docs))


def _linked(kind: str, asked: Sequence[dict[str, Any]], names: _Names) -> list[Document]:
    if kind != "company":
        raise ConfigError(f"linked worlds chain a company to its chief executive; kind {kind!r} has no such link")
    docs = []
    for r in asked:
        ceo = {**_record("person", r["ceo"], names), "employer": r["name"]}
        twin = _record("person", names.twin("person", r["ceo"]), names)
        docs += [_doc("person", ceo), _doc("person", twin)]
    return docs


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m agent_swarm.tools.corpora.fictional OUT.jsonl``: write one world as a JSONL corpus and print
    its question."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("out", type=Path, help="the JSONL (or .jsonl.gz) file to write")
    p.add_argument("--kind", choices=FICTIONAL_KINDS, default="company")
    p.add_argument("--entities", type=int, default=8)
    p.add_argument("--distractors", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    world = fictional_world(f"cli:{args.seed}", args.kind, args.entities, distractors=args.distractors)
    _dump_jsonl(world.documents, args.out)
    attrs = ", ".join(ATTRIBUTES[args.kind][:2])
    print(
        f"wrote {len(world.documents)} documents to {args.out}. Ask, with --tools search --search-corpus {args.out}:\n"
        f"Make a table of {attrs} for: {', '.join(r['name'] for r in world.entities)}"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
