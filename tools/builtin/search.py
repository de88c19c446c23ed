"""Offline search over a local document collection: BM25 (``bm25s``) plus ``search``/``open`` tools.

A :class:`Corpus` is a list of :class:`Document` s with stable ids, titles, text and optional
structured ``fields`` (the source record). Load one from JSONL (one document object per line) or
from a directory (``*.txt``/``*.md`` files become documents named by their relative path, ``*.jsonl``
files are read as JSONL). :class:`SearchIndex` ranks documents with BM25 via the maintained
``bm25s`` library (extra ``search``); :func:`search_toolset` exposes ``search(query, k)`` and
``open(doc_id)`` to agents.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_swarm.swarm.errors import ConfigError, ToolError
from agent_swarm.tools.registry import Tool, Toolset

__all__ = ["Corpus", "Document", "SearchHit", "SearchIndex", "search_toolset"]


class Document(BaseModel):
    """One searchable document. ``id`` is stable across builds; ``fields`` holds the structured
    source record where there is one (e.g. a product with its variants)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    title: str = ""
    text: str
    kind: str = ""
    source: str = ""
    fields: dict[str, Any] = Field(default_factory=dict)


class SearchHit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    title: str
    score: float
    snippet: str


def _open_text(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        yield from f


class Corpus:
    """An ordered, id-addressable collection of documents."""

    def __init__(self, documents: Iterable[Document], *, name: str = "corpus") -> None:
        self.name = name
        self._docs: dict[str, Document] = {}
        for d in documents:
            if d.id in self._docs:
                raise ConfigError(f"corpus {name!r}: duplicate document id {d.id!r}; ids must be unique")
            self._docs[d.id] = d

    @classmethod
    def from_jsonl(cls, path: str | Path, *, name: str | None = None) -> Corpus:
        """Read ``{"id", "text", "title"?, "kind"?, "source"?, "fields"?}`` objects, one per line
        (``.jsonl`` or ``.jsonl.gz``). A bad line raises ConfigError naming the file and line."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"corpus file {path} does not exist")
        return cls(_read_jsonl(path), name=name or path.name.split(".")[0])

    @classmethod
    def from_directory(cls, root: str | Path, *, name: str | None = None) -> Corpus:
        """Every ``*.txt``/``*.md`` file (id = relative path, title = first heading or line) and every
        ``*.jsonl``/``*.jsonl.gz`` file below ``root``."""
        root = Path(root)
        if not root.is_dir():
            raise ConfigError(f"corpus directory {root} does not exist")
        docs: list[Document] = []
        for p in sorted(root.rglob("*")):
            if not p.is_file():
                continue
            rel = p.relative_to(root).as_posix()
            if p.suffix in (".txt", ".md"):
                text = p.read_text(encoding="utf-8", errors="replace")
                first = next((ln.strip() for ln in text.splitlines() if ln.strip()), p.stem)
                title = first.lstrip("#").strip()[:200]
                docs.append(Document(id=rel, title=title, text=text, kind=p.suffix[1:], source=rel))
            elif p.name.endswith((".jsonl", ".jsonl.gz")):
                docs.extend(_read_jsonl(p))
        if not docs:
            raise ConfigError(f"corpus directory {root} has no .txt, .md or .jsonl documents")
        return cls(docs, name=name or root.name)

    def __len__(self) -> int:
        return len(self._docs)

    def __iter__(self) -> Iterator[Document]:
        return iter(self._docs.values())

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._docs

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self._docs)

    def get(self, doc_id: str) -> Document:
        """The document with this id; raises KeyError naming the corpus if there is none."""
        try:
            return self._docs[doc_id]
        except KeyError:
            raise KeyError(f"no document {doc_id!r} in corpus {self.name!r}") from None

    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({d.kind for d in self._docs.values()}))

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Structured records (each document's ``fields``), optionally of one ``kind``."""
        return [dict(d.fields) for d in self._docs.values() if kind is None or d.kind == kind]

    def documents(self, kind: str | None = None) -> list[Document]:
        return [d for d in self._docs.values() if kind is None or d.kind == kind]


def _read_jsonl(path: Path) -> Iterator[Document]:
    for no, line in enumerate(_open_text(path), 1):
        if not line.strip():
            continue
        try:
            yield Document.model_validate_json(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(line)"
            raise ConfigError(f"{path}:{no}: not a valid document ({where}: {first['msg']})") from None


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_SNIPPET_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "what",
        "which",
        "who",
        "with",
    ]
)


def _sentences(text: str) -> list[str]:
    """``text`` as whole sentences (or lines), whitespace collapsed, empty pieces dropped."""
    return [p for piece in _SENTENCE_END.split(text) if (p := " ".join(piece.split()))]


def _snippet(text: str, terms: Sequence[str], width: int = 300) -> str:
    """Whole sentences of ``text`` within ``width`` characters, never a word or a value cut in two:
    first the sentences that hold the most query ``terms``, then the others in document order while
    they fit; shown in document order, with "…" where sentences are left out. A single sentence
    longer than ``width`` is cut at a word boundary around the first term it holds."""
    parts = _sentences(text)
    if not parts:
        return ""
    words = {t for t in terms if t not in _SNIPPET_STOPWORDS}
    hits = [len(words & set(re.findall(r"\w\w+", p.lower()))) for p in parts]
    order = sorted(range(len(parts)), key=lambda i: (-hits[i], i))
    chosen: list[int] = []
    used = 0
    for i in order:
        cost = len(parts[i]) + (1 if chosen else 0)
        if used + cost <= width:
            chosen.append(i)
            used += cost
    if not chosen:
        return _cut_sentence(parts[order[0]], words, width)
    chosen.sort()
    out = "" if chosen[0] == 0 else "… "
    for prev, i in zip([None, *chosen], chosen, strict=False):
        out += parts[i] if prev is None else (" " if i == prev + 1 else " … ") + parts[i]
    return out + ("" if chosen[-1] == len(parts) - 1 else " …")


def _cut_sentence(sentence: str, words: set[str], width: int) -> str:
    """A window of whole words of one long ``sentence``, around its first query word, marked with "…"."""
    low = sentence.lower()
    pos = min((i for w in words if (i := low.find(w)) >= 0), default=0)
    start = max(0, pos - width // 3)
    if start:
        start = sentence.find(" ", start) + 1 or start
    end = start + width
    if end < len(sentence):
        end = sentence.rfind(" ", start, end) if sentence.rfind(" ", start, end) > start else end
    return ("… " if start else "") + sentence[start:end].strip() + (" …" if end < len(sentence) else "")


class SearchIndex:
    """BM25 over a corpus (title + text). Build once, query from any thread."""

    def __init__(self, corpus: Corpus, *, stopwords: str | None = "en") -> None:
        try:
            import bm25s
            from bm25s.tokenization import Tokenizer
        except ImportError as exc:  # pragma: no cover - exercised only without the extra
            raise ConfigError("offline search needs the 'search' extra: pip install 'agent-swarm[search]'") from exc
        if len(corpus) == 0:
            raise ConfigError(f"corpus {corpus.name!r} is empty; nothing to index")
        self.corpus = corpus
        self._ids = corpus.ids
        self._tokenizer = Tokenizer(stopwords=stopwords or [])
        # The id and the title count twice: a lookup by name or id should find the record itself
        # before the longer documents that merely mention it.
        texts = [f"{d.id.replace('/', ' ')} {d.title}\n{d.title}\n{d.text}" for d in corpus]
        tokens = self._tokenizer.tokenize(texts, return_as="ids", show_progress=False)
        self._bm25 = bm25s.BM25()
        self._bm25.index(tokens, show_progress=False)
        self._lock = threading.Lock()  # the tokenizer is not documented as thread-safe

    def search(self, query: str, k: int = 5) -> list[SearchHit]:
        """The top ``k`` documents with a positive BM25 score, best first."""
        if not query.strip():
            return []
        k = max(1, min(k, len(self._ids)))
        with self._lock:
            q = self._tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)
            docs, scores = self._bm25.retrieve(q, k=k, show_progress=False, n_threads=1)
        terms = [t for t in re.findall(r"\w\w+", query.lower())]
        hits: list[SearchHit] = []
        for idx, score in zip(docs[0].tolist(), scores[0].tolist(), strict=True):
            if score <= 0:
                continue
            d = self.corpus.get(self._ids[int(idx)])
            hits.append(
                SearchHit(id=d.id, title=d.title, score=round(float(score), 4), snippet=_snippet(d.text, terms))
            )
        return hits


_END = "\n[end of document]"


Snippets = Literal["all", "named", "none"]
"""Which search hits show a snippet: every one; only a hit whose title names the query as a phrase (a
look-up by name: ``Drari Robotics`` shows the record titled so, a query naming two entities shows none);
or none (ids and titles only, the text read with ``open``)."""


def _named(query: str, title: str) -> bool:
    """Whether ``title`` holds the whole ``query`` as a phrase (case, spacing and punctuation aside)."""
    words = re.findall(r"\w+", query.lower())
    return bool(words) and re.search(r"\b" + r"\W+".join(map(re.escape, words)) + r"\b", title.lower()) is not None


def search_toolset(
    index: SearchIndex,
    *,
    name: str = "search",
    max_k: int = 20,
    open_chars: int = 8000,
    snippets: Snippets = "all",
) -> Toolset:
    """``search(query, k)`` and ``open(doc_id)`` over ``index`` as a toolset named ``name``. ``snippets``
    (:data:`Snippets`) other than ``"all"`` is for benchmarks of short records, whose snippet is the whole
    record: one search naming all N entities of a wide-research table returned every fact (N = 16 in one
    call). With ``"named"`` each entity costs a look-up of its own; a query naming several shows titles."""
    if snippets not in ("all", "named", "none"):
        raise ConfigError(f"snippets={snippets!r} is not one of 'all', 'named', 'none'")

    def search(query: str, k: int = 5) -> str:
        """Search the document collection; returns ids, titles and snippets of the best matches.
        Call open with an id to read a whole document.

        Args:
            query: keywords to look for (names, ids, places, product words).
            k: how many results to return.
        """
        if not 1 <= k <= max_k:
            raise ToolError(f"k={k} is out of range; use 1..{max_k}")
        hits = index.search(query, k)
        if not hits:
            return f"no documents match {query!r}; try other keywords"
        # "doc_id: X", the name of open's argument, and no rank: small models opened "1" (the rank of
        # "[1] X") and copied a document's "id: retail/user/x" where its user id was asked for.
        shown = (h for h in hits if snippets == "all" or (snippets == "named" and _named(query, h.title)))
        text = {h.id: f"\n    {h.snippet}" for h in shown}
        return "\n".join(f"doc_id: {h.id} | {h.title} | score {h.score:.2f}{text.get(h.id, '')}" for h in hits)

    def open(doc_id: str, offset: int = 0) -> str:
        """Open a document from the collection by its id (as returned by search).

        Args:
            doc_id: the document id.
            offset: character offset to continue reading a long document.
        """
        try:
            d = index.corpus.get(doc_id.strip())
        except KeyError:
            raise ToolError(f"no document with id {doc_id!r}; use an id exactly as search returned it") from None
        body = d.text[max(0, offset) : max(0, offset) + open_chars]
        rest = len(d.text) - max(0, offset) - len(body)
        # The end is said too: told nothing of where a document ends, a small model paged through one it
        # had read whole (offset 100, 200, ... 500 of a 300-character document) instead of answering.
        more = f"\n…[{rest} more characters; call open with offset={offset + len(body)}]" if rest > 0 else _END
        return f"{d.title}\ndoc_id: {d.id}\n\n{body}{more}"

    blocking = dict(blocking=True)  # BM25 scoring is CPU work: keep it off the event loop
    find = Tool(search, **blocking)  # type: ignore[arg-type]
    if snippets != "all":
        named = "ids and titles, with a snippet where a title holds the whole query"
        what = "the ids and titles" if snippets == "none" else named
        find = find.replace(description=find.description.replace("ids, titles and snippets", what))
    return Toolset(name, (find, Tool(open, **blocking)))  # type: ignore[arg-type]


def _dump_jsonl(docs: Iterable[Document], path: Path) -> None:
    """Write documents as (gzip-compressed when ``path`` ends in .gz) JSONL, byte-reproducibly."""
    lines = "".join(json.dumps(d.model_dump(), ensure_ascii=False, sort_keys=True) + "\n" for d in docs)
    data = lines.encode("utf-8")
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=9, mtime=0)
    path.write_bytes(data)
