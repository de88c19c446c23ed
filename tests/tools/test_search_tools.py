"""Offline BM25 search: corpus loading, ranking, the search/open tools, and the packaged τ² corpus."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("bm25s")  # the 'search' extra; .ci/run installs it

from agent_swarm.swarm.errors import ConfigError
from agent_swarm.swarm.messages import ToolCall
from agent_swarm.tools.builtin import Corpus, Document, SearchIndex, search_toolset
from agent_swarm.tools.corpora import TAU2_DOCUMENTS, TAU2_KINDS, load_tau2, tau2_index, tau2_records
from agent_swarm.tools.registry import ToolContext, ToolRegistry, execute_tool


def _docs() -> list[Document]:
    return [
        Document(id="a", title="Blue water bottle", text="A glass water bottle, 1000ml, blue."),
        Document(id="b", title="Office chair", text="Fabric office chair with fixed armrest."),
        Document(id="c", title="Hiking boots", text="Leather boots, waterproof, size 10."),
    ]


def test_bm25_ranks_the_matching_document_first() -> None:
    ix = SearchIndex(Corpus(_docs()))
    hits = ix.search("glass bottle", k=3)
    assert hits[0].id == "a"
    assert all(h.id != "b" for h in hits)  # no shared terms: score 0 is not a hit
    assert ix.search("zebra unicorn") == []
    assert ix.search("   ") == []
    assert "glass" in hits[0].snippet


def test_corpus_from_directory_and_jsonl(tmp_path: Path) -> None:
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "intro.md").write_text("# Getting started\nInstall the package.")
    (tmp_path / "docs" / "sub" / "faq.txt").write_text("Why?\nBecause.")
    lines = [json.dumps(d.model_dump()) for d in _docs()]
    with gzip.open(tmp_path / "docs" / "more.jsonl.gz", "wt") as f:
        f.write("\n".join(lines) + "\n")
    c = Corpus.from_directory(tmp_path / "docs")
    assert set(c.ids) == {"intro.md", "sub/faq.txt", "a", "b", "c"}
    assert c.get("intro.md").title == "Getting started"
    hits = SearchIndex(c).search("install package", 2)
    assert hits[0].id == "intro.md"


def test_bad_corpus_files_name_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text('{"id": "x", "text": "ok"}\n{"id": "y"}\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2: .*text"):
        Corpus.from_jsonl(p)
    p.write_text('{"id": "x", "text": "ok"}\n{"id": "x", "text": "again"}\n')
    with pytest.raises(ConfigError, match="duplicate document id 'x'"):
        Corpus.from_jsonl(p)
    with pytest.raises(ConfigError, match="does not exist"):
        Corpus.from_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="empty"):
        SearchIndex(Corpus([]))


async def test_search_and_open_tools() -> None:
    tools = ToolRegistry([search_toolset(SearchIndex(Corpus(_docs())), max_k=5)]).resolve(["search"])
    ctx = ToolContext()
    r = await execute_tool(ToolCall(id="1", name="search", arguments={"query": "leather boots", "k": 2}), tools, ctx)
    assert not r.is_error and r.content.startswith("doc_id: c | Hiking boots")
    # each hit names its id as open's argument is named, with no rank a small model could open instead
    hits = [line for line in r.content.splitlines() if line.startswith("doc_id")]
    ids = [line.split(" | ")[0].removeprefix("doc_id: ") for line in hits]
    assert ids[0] == "c" and "[" not in r.content.split("\n")[0]
    for i, doc_id in enumerate(ids):
        opened = await execute_tool(ToolCall(id=f"o{i}", name="open", arguments={"doc_id": doc_id}), tools, ctx)
        assert not opened.is_error and opened.content.splitlines()[1] == f"doc_id: {doc_id}"
    r = await execute_tool(ToolCall(id="2", name="open", arguments={"doc_id": "c"}), tools, ctx)
    assert "Leather boots, waterproof" in r.content
    # a whole document says it ended (a small model paged on through one it had read whole); a cut one
    # says how to read on
    assert r.content.endswith("\n[end of document]")
    short = ToolRegistry([search_toolset(SearchIndex(Corpus(_docs())), open_chars=10)]).resolve(["search"])
    r = await execute_tool(ToolCall(id="5", name="open", arguments={"doc_id": "c"}), short, ctx)
    assert "more characters; call open with offset=10]" in r.content and "[end of document]" not in r.content
    r = await execute_tool(ToolCall(id="3", name="open", arguments={"doc_id": "nope"}), tools, ctx)
    assert r.is_error and "no document with id 'nope'" in r.content
    r = await execute_tool(ToolCall(id="4", name="search", arguments={"query": "x", "k": 50}), tools, ctx)
    assert r.is_error and "1..5" in r.content


def test_tau2_corpus_has_stable_ids_records_and_closed_references() -> None:
    c = load_tau2()
    assert set(c.kinds()) == set(TAU2_KINDS)
    assert len(tau2_records("retail_product")) == 50
    assert len(tau2_records("airline_flight")) == 300
    shirt = c.get("retail/product/9523456873")
    assert shirt.fields["name"] == "T-Shirt" and "item 9612497925" in shirt.text
    # Multi-hop questions must resolve inside the corpus: every order's user and every
    # reservation's flights are present.
    for order in tau2_records("retail_order"):
        assert f"retail/user/{order['user_id']}" in c
        for item in order["items"]:
            assert f"retail/product/{item['product_id']}" in c
    for res in tau2_records("airline_reservation"):
        assert f"airline/user/{res['user_id']}" in c
        for fl in res["flights"]:
            assert f"airline/flight/{fl['flight_number']}" in c
    with pytest.raises(KeyError, match="unknown tau2 record kind"):
        tau2_records("nope")


def test_tau2_search_finds_records_by_id_and_policy_by_topic() -> None:
    ix = tau2_index()
    assert ix.search("HAT001", 3)[0].id == "airline/flight/HAT001"
    assert ix.search("cancel flight refund", 3)[0].id.startswith("airline/policy/")


def test_tau2_corpus_files_ship_with_license() -> None:
    here = TAU2_DOCUMENTS.parent
    assert "MIT License" in (here / "LICENSE").read_text()
    assert "tau2-bench" in (here / "SOURCE.md").read_text()


_COMPANY = (
    "Venkreaba Shipping is a shipping company founded in 1958 and headquartered in Brukemouth. "
    "Its chief executive is Seli Kirkse. The company employs 36 people, and its shares trade under "
    "the ticker NRAY. Its best-known product is the Gouxte Y25."
)


def test_a_snippet_never_cuts_a_value_in_two() -> None:
    # 245 characters: a snippet cut at a fixed width showed "the Gouxte Y2…", which agents copied.
    ix = SearchIndex(Corpus([Document(id="company/v", title="Venkreaba Shipping (company)", text=_COMPANY)]))
    (hit,) = ix.search("Venkreaba Shipping")
    assert hit.snippet == _COMPANY  # short enough to show whole
    long = _COMPANY + " " + " ".join(f"The company opened office number {i} in Brukemouth." for i in range(20))
    ix = SearchIndex(Corpus([Document(id="company/v", title="Venkreaba Shipping (company)", text=long)]))
    (hit,) = ix.search("Venkreaba Shipping best-known product")
    assert "Its best-known product is the Gouxte Y25." in hit.snippet
    assert hit.snippet.endswith(" …") and len(hit.snippet) <= 300 + 4


def test_a_snippet_shows_whole_sentences_matching_the_query_first_in_document_order() -> None:
    filler = " ".join(f"Filler sentence number {i} says nothing at all." for i in range(30))
    text = f"Acme Corp makes anvils. {filler} Its chief executive is Wile Coyote. {filler}"
    ix = SearchIndex(Corpus([Document(id="acme", title="Acme", text=text)]))
    (hit,) = ix.search("Acme chief executive")
    sentences = [s.strip() for s in hit.snippet.split("…") if s.strip()]
    assert sentences[0].startswith("Acme Corp makes anvils.")  # document order
    assert any(s.startswith("Its chief executive is Wile Coyote.") for s in sentences)
    assert " … Its chief executive is Wile Coyote." in hit.snippet  # the gap is marked
    words = set(text.split())
    assert all(w in words for w in hit.snippet.split() if w != "…")  # nothing cut inside a word


def test_one_sentence_longer_than_the_snippet_is_cut_between_words_around_the_match() -> None:
    text = "intro " * 100 + "the target value here " + "tail " * 100
    ix = SearchIndex(Corpus([Document(id="x", title="X", text=text)]))
    (hit,) = ix.search("target")
    assert "the target value here" in hit.snippet
    assert hit.snippet.startswith("… ") and hit.snippet.endswith(" …")
    assert {w for w in hit.snippet.split() if w != "…"} <= {"intro", "the", "target", "value", "here", "tail"}


def test_named_snippets_show_the_text_of_a_hit_the_query_names_only() -> None:
    corpus = Corpus(
        [
            Document(id="c/drari", title="Drari Robotics", text="Drari Robotics was founded in 1971."),
            Document(id="c/drari2", title="Drari Robotix", text="Drari Robotix was founded in 1999."),
            Document(id="n/1", title="News: Drari Robotics and Kel Foods", text="Drari Robotics hired 40 people."),
        ]
    )
    index = SearchIndex(corpus)
    search = {t.name: t for t in search_toolset(index, snippets="named").tools}["search"]
    out = search.fn("drari  robotics", 5)
    assert "1971" in out and "1999" not in out  # its own record, and a title holding the name as a phrase
    assert "hired 40" in out
    assert "1971" not in search.fn("Drari Robotics Kel Foods", 5)  # a query naming two: titles only
    assert "was founded" not in {t.name: t for t in search_toolset(index, snippets="none").tools}["search"].fn(
        "Drari Robotics", 5
    )
    assert "1999" in {t.name: t for t in search_toolset(index).tools}["search"].fn("Drari Robotics", 5)
    with pytest.raises(ConfigError, match="snippets='some'"):
        search_toolset(index, snippets="some")  # type: ignore[arg-type]
