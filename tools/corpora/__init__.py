"""Packaged document corpora for offline search, tests and demos.

``tau2``: 871 documents built from the τ²-bench retail and airline domains (MIT, Sierra Research;
see ``tau2/LICENSE`` and ``tau2/SOURCE.md``): policy sections, products, flights, and 60 users per
domain with all their orders and reservations. Every document has a stable id
(``retail/product/<product_id>``, ``retail/user/<user_id>``, ``retail/order/<order id without #>``,
``airline/flight/<flight_number>``, ``airline/user/<user_id>``, ``airline/reservation/<id>``,
``<domain>/policy/<section>``), a ``kind`` and ``fields`` = the source record, so workloads can
generate table and multi-hop questions whose answers are computed from :func:`tau2_records`.

``fictional`` (:mod:`agent_swarm.tools.corpora.fictional`): generated, not packaged — small collections of made-up
companies, people and products with random facts, near-namesakes and news items, one per task of the
``wide-research``/``controls``/``train-mix`` workloads (``python -m agent_swarm.tools.corpora.fictional OUT.jsonl``
writes one for ``--search-corpus``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from agent_swarm.tools.builtin.search import Corpus, SearchIndex, Snippets, search_toolset
from agent_swarm.tools.registry import Toolset

__all__ = ["TAU2_DOCUMENTS", "TAU2_KINDS", "load_tau2", "tau2_index", "tau2_records", "tau2_search_toolset"]

TAU2_DOCUMENTS = Path(__file__).with_name("tau2") / "documents.jsonl.gz"
TAU2_KINDS = (
    "airline_flight",
    "airline_reservation",
    "airline_user",
    "policy",
    "retail_order",
    "retail_product",
    "retail_user",
)


@functools.cache
def load_tau2() -> Corpus:
    """The packaged τ² corpus (loaded once per process; documents are frozen)."""
    return Corpus.from_jsonl(TAU2_DOCUMENTS, name="tau2")


def tau2_records(kind: str | None = None) -> list[dict[str, Any]]:
    """Source records of one kind (see ``TAU2_KINDS``), e.g. ``tau2_records("retail_product")``."""
    if kind is not None and kind not in TAU2_KINDS:
        raise KeyError(f"unknown tau2 record kind {kind!r}; known: {', '.join(TAU2_KINDS)}")
    return load_tau2().records(kind)


@functools.cache
def tau2_index() -> SearchIndex:
    """A BM25 index over the τ² corpus (built once per process, about half a second)."""
    return SearchIndex(load_tau2())


def tau2_search_toolset(name: str = "search", *, snippets: Snippets = "all") -> Toolset:
    """``search``/``open`` tools over the τ² corpus (``snippets``: which hits show one, :data:`Snippets`)."""
    return search_toolset(tau2_index(), name=name, snippets=snippets)
