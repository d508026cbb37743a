"""Hierarchical retrieval: summaries, the real restriction, score combination, provenance, the LLM calls."""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_fusion import (
    FusionIndex,
    HierarchicalIndex,
    HierarchicalRetriever,
    PageSummarizer,
    RetryPolicy,
)
from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.ingest.summaries import page_units, summary_id
from langchain_fusion.search.fusion import min_max
from langchain_fusion.stores.local.store import LocalStore
from tests.helpers.embeddings import HashingEmbeddings
from tests.helpers.fake_chat_models import Gate, RateLimitError, RatingModel, flaky

QUERY = "solar battery warranty"
DISTRACTOR = [
    "Solar battery warranty register {i}: solar panels and battery packs under warranty review.",
    "Warranty paperwork for solar battery kits in shipment {i}, solar and battery warranty.",
    "Battery and solar warranty counts at depot {i}; more battery warranty and solar forms.",
]
TARGET = [
    "The guarantee covers the storage cells for ten years from installation.",
    "Claims must be filed with the cooperative office in writing.",
    "Replacement cells ship within thirty days of an approved claim.",
    "Keep the proof of purchase; it is needed for every claim.",
]
TARGET_SUMMARY = "This page explains the solar battery warranty: what it covers and how to claim."
OTHER_SUMMARY = "A page of cooking recipes and garden vegetables."


def make_chunks(pages: dict[tuple[str, int | None], list[str]]) -> list[Document]:
    """Chunks as ingestion makes them: paragraphs of each page, with source, page, offsets and ids."""
    chunks = []
    next_index: dict[str, int] = {}
    for (source, page), paragraphs in pages.items():
        offset = 0
        for text in paragraphs:
            position = next_index.get(source, 0)
            next_index[source] = position + 1
            meta: dict[str, Any] = {keys.SOURCE: source, keys.CHUNK_INDEX: position, keys.START_INDEX: offset}
            if page is not None:
                meta[keys.PAGE] = page
            chunks.append(Document(id=f"{source}#{position}", page_content=text, metadata=meta))
            offset += len(text) + 2
    return chunks


def all_bm25_scores(index: FusionIndex, query: str) -> np.ndarray:
    """BM25 score of every row of an in-process index (row order = ``index.documents`` with no deletes)."""
    store = index.store
    assert isinstance(store, LocalStore)
    return store.snapshot.bm25_scores_all(query)


def stored_document(index: FusionIndex, doc_id: str) -> Document:
    """The index's own (shared) document with this id."""
    view = index.view()
    [key] = view.keys_of([doc_id])
    assert key >= 0, doc_id
    return view.documents(np.array([key]))[0]


def restriction_corpus(distractor_pages: int = 9) -> list[Document]:
    pages: dict[tuple[str, int | None], list[str]] = {
        ("distractors.pdf", p): [t.format(i=p) for t in DISTRACTOR] for p in range(1, distractor_pages + 1)
    }
    pages[("target.pdf", 1)] = TARGET
    return make_chunks(pages)


def text_in(prompt: str) -> str:
    """The text part of a summary or reduce prompt."""
    return prompt.split('">\n', 1)[1].split("\n</", 1)[0]


def restriction_rule(prompt: str) -> str:
    return TARGET_SUMMARY if "guarantee" in prompt else OTHER_SUMMARY


def echo_rule(prompt: str) -> str:
    """A summary naming the first words of the text (a reduce keeps the first part's)."""
    text = text_in(prompt).removeprefix("Part 1: ")
    return "Summary: " + " ".join(text.split()[:8])


def model(rule: Any = echo_rule, **kwargs: Any) -> RatingModel:
    return RatingModel(rule=rule, structured=False, **kwargs)


def summarizer(llm: Any, **kwargs: Any) -> PageSummarizer:
    kwargs.setdefault("retry", RetryPolicy(sleep=lambda s: None, seed=1))
    return PageSummarizer(llm=llm, **kwargs)


def build(chunks: list[Document], rule: Any = echo_rule, **index_options: Any) -> HierarchicalIndex:
    index = FusionIndex.from_documents(chunks, HashingEmbeddings(), **index_options)
    return HierarchicalIndex.build(index, summarizer(model(rule)))


@pytest.fixture(scope="module")
def restriction_index() -> HierarchicalIndex:
    return build(restriction_corpus(), restriction_rule)


MIXED_PAGES: dict[tuple[str, int | None], list[str]] = {
    ("report.pdf", 1): [
        "Solar arrays on every hut roof feed the village microgrid.",
        "The battery cabinet stores the solar energy for the night.",
        "Panels are cleaned monthly to keep the solar yield high.",
    ],
    ("report.pdf", 2): [
        "The July flood reached three huts after the river overflowed.",
        "Battery racks stood high, so no battery cell was flooded.",
    ],
    ("report.pdf", 3): [
        "Tariffs are a flat monthly fee paid at the cooperative office.",
        "Late fees are waived during the harvest months.",
    ],
    ("handbook.md", None): [
        "Torque busbar bolts to twelve newton metres.",
        "Replace inverter fan filters when they turn grey.",
        "Log every lockout with the date and the technician.",
    ],
}


@pytest.fixture(scope="module")
def mixed_index() -> HierarchicalIndex:
    return build(make_chunks(MIXED_PAGES))


def page_of(doc: Document) -> tuple[str, Any]:
    return doc.metadata[keys.SOURCE], doc.metadata.get(keys.PAGE)


class TestRestriction:
    def test_a_page_outside_the_global_top_20_still_yields_k_chunks(self, restriction_index: HierarchicalIndex) -> None:
        chunks = restriction_index.chunks
        target_ids = {d.id for d in chunks.documents if d.metadata[keys.SOURCE] == "target.pdf"}
        # The global fused top 20 holds none of the target page's chunks ...
        top20 = chunks.as_retriever(k=20, fetch_k=None).invoke(QUERY)
        assert len(top20) == 20
        assert not target_ids & {d.id for d in top20}
        # ... but the target page's summary is the best summary.
        best = restriction_index.summaries.as_retriever(k=1).invoke(QUERY)[0]
        assert best.metadata[keys.SOURCE] == "target.pdf"
        # The tutorial's post-filter (global top 20, then keep the chosen page) returns nothing.
        assert [d for d in top20 if page_of(d) == ("target.pdf", 1)] == []
        # The restriction is real: k chunks of the chosen page.
        docs = restriction_index.as_retriever(k=3, k_summaries=1).invoke(QUERY)
        assert len(docs) == 3
        assert {d.id for d in docs} <= target_ids
        for doc in docs:
            assert doc.metadata[keys.SUMMARY_ID] == summary_id("target.pdf", 1, None)
            assert doc.metadata[keys.SUMMARY_RANK] == 1
        # Up to k: the page has 4 chunks.
        assert {d.id for d in restriction_index.as_retriever(k=10, k_summaries=1).invoke(QUERY)} == target_ids

    @pytest.mark.parametrize("alpha", [1.0, 0.5, 0.2])
    @pytest.mark.parametrize("vector_index", ["Flat", "HNSW16"])
    def test_with_any_alpha_and_an_approximate_index(self, alpha: float, vector_index: str) -> None:
        hierarchical = build(restriction_corpus(), restriction_rule, vector_index=vector_index)
        docs = hierarchical.as_retriever(k=3, k_summaries=1, alpha=alpha).invoke(QUERY)
        assert len(docs) == 3
        assert {d.metadata[keys.SOURCE] for d in docs} == {"target.pdf"}

    def test_bm25_only_returns_only_matching_chunks(self, restriction_index: HierarchicalIndex) -> None:
        # alpha=0 is pure BM25: like the BM25 retriever, chunks without a query term are not candidates.
        assert restriction_index.as_retriever(k=3, k_summaries=1, alpha=0.0).invoke(QUERY) == []
        docs = restriction_index.as_retriever(k=3, k_summaries=1, alpha=0.0).invoke(QUERY + " claim")
        assert docs and all("claim" in d.page_content.lower() for d in docs)

    def test_more_summaries_give_chunks_of_more_pages(self, restriction_index: HierarchicalIndex) -> None:
        docs = restriction_index.as_retriever(k=30, k_summaries=3).invoke(QUERY)
        assert len({page_of(d) for d in docs}) == 3
        assert len(docs) == 4 + 3 + 3


class TestScores:
    def test_formula_order_and_provenance(self, mixed_index: HierarchicalIndex) -> None:
        retriever = mixed_index.as_retriever(k=20, k_summaries=3, summary_weight=0.3)
        docs = retriever.invoke("solar battery flood")
        assert docs
        summaries = {d.id: d for d in mixed_index.summaries.documents}
        for doc in docs:
            meta = doc.metadata
            expected = 0.3 * meta[keys.SUMMARY_SCORE] + 0.7 * meta[keys.FUSION_SCORE]
            assert meta[keys.HIERARCHICAL_SCORE] == pytest.approx(expected)
            summary = summaries[meta[keys.SUMMARY_ID]]
            assert doc.id in summary.metadata[keys.SUMMARY_CHUNK_IDS]
            assert page_of(summary) == page_of(doc)
            assert meta[keys.FUSION_METHOD] == "weighted"
            assert {keys.VECTOR_SCORE, keys.BM25_SCORE, keys.VECTOR_RANK} <= set(meta)
        scores = [d.metadata[keys.HIERARCHICAL_SCORE] for d in docs]
        assert scores == sorted(scores, reverse=True)
        assert len({d.id for d in docs}) == len(docs)
        assert {d.metadata[keys.SUMMARY_RANK] for d in docs} == {1, 2, 3}
        # The results come from the three selected pages only.
        assert len({page_of(d) for d in docs}) == 3

    @pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
    def test_against_a_brute_force_reference(self, mixed_index: HierarchicalIndex, alpha: float) -> None:
        query, weight, k_summaries = "battery solar flood tariffs", 0.4, 2
        embeddings = HashingEmbeddings()
        q = np.asarray(embeddings.embed_query(query))

        # Rows are positions in ``index.documents`` (nothing is deleted from these indexes).
        def fused(index: FusionIndex, rows: np.ndarray) -> np.ndarray:
            documents = index.documents
            vectors = np.asarray(embeddings.embed_documents([documents[r].page_content for r in rows]))
            vector = vectors @ q
            bm25 = all_bm25_scores(index, query)[rows].astype(np.float64)
            return alpha * min_max(vector) + (1 - alpha) * min_max(bm25)

        summaries, chunks = mixed_index.summaries, mixed_index.chunks
        chunk_row = {doc.id: row for row, doc in enumerate(chunks.documents)}
        all_summaries = np.arange(len(summaries))
        if alpha == 0.0:
            all_summaries = all_summaries[all_bm25_scores(summaries, query) > 0]
        summary_scores = fused(summaries, all_summaries)
        order = sorted(range(len(all_summaries)), key=lambda i: -summary_scores[i])[:k_summaries]
        selected = {int(all_summaries[i]): summary_scores[i] for i in order}
        rows, leaders = [], {}
        for row, score in selected.items():
            for chunk_id in summaries.documents[row].metadata[keys.SUMMARY_CHUNK_IDS]:
                rows.append(chunk_row[chunk_id])
                leaders[chunk_row[chunk_id]] = score
        pool = np.asarray(sorted(rows))
        if alpha == 0.0:
            pool = pool[all_bm25_scores(chunks, query)[pool] > 0]
        chunk_scores = fused(chunks, pool)
        expected = {
            chunks.documents[int(r)].id: weight * leaders[int(r)] + (1 - weight) * s
            for r, s in zip(pool, chunk_scores, strict=True)
        }
        docs = mixed_index.as_retriever(
            k=50, k_summaries=k_summaries, alpha=alpha, summary_weight=weight, fetch_k=None
        ).invoke(query)
        assert {d.id: d.metadata[keys.HIERARCHICAL_SCORE] for d in docs} == pytest.approx(expected)

    def test_summary_weight_limits(self, mixed_index: HierarchicalIndex) -> None:
        query = "solar battery flood"
        by_summary = mixed_index.as_retriever(k=20, summary_weight=1.0).invoke(query)
        ranks = [d.metadata[keys.SUMMARY_RANK] for d in by_summary]
        assert ranks == sorted(ranks)
        for rank in set(ranks):  # within a page, the chunk's fused score decides
            fused = [d.metadata[keys.FUSION_SCORE] for d in by_summary if d.metadata[keys.SUMMARY_RANK] == rank]
            assert fused == sorted(fused, reverse=True)
        by_chunk = mixed_index.as_retriever(k=20, summary_weight=0.0).invoke(query)
        fused = [d.metadata[keys.FUSION_SCORE] for d in by_chunk]
        assert fused == sorted(fused, reverse=True)
        assert {d.id for d in by_chunk} == {d.id for d in by_summary}

    def test_one_global_top_k_across_pages(self, mixed_index: HierarchicalIndex) -> None:
        everything = mixed_index.as_retriever(k=50, k_summaries=3).invoke("solar battery flood")
        top = mixed_index.as_retriever(k=3, k_summaries=3).invoke("solar battery flood")
        assert [d.id for d in top] == [d.id for d in everything[:3]]

    def test_a_chunk_under_two_summaries_counts_once_under_the_best(self) -> None:
        chunks = make_chunks(MIXED_PAGES)
        index = FusionIndex.from_documents(chunks, HashingEmbeddings())
        shared = chunks[0].id
        summaries = [
            Document(
                id="best",
                page_content="solar solar solar roofs",
                metadata={keys.SOURCE: "report.pdf", keys.SUMMARY_CHUNK_IDS: [shared, chunks[1].id]},
            ),
            Document(
                id="second",
                page_content="solar cabinets",
                metadata={keys.SOURCE: "report.pdf", keys.SUMMARY_CHUNK_IDS: [chunks[2].id, shared]},
            ),
            Document(id="other", page_content="tariffs", metadata={keys.SOURCE: "x", keys.SUMMARY_CHUNK_IDS: []}),
        ]
        hierarchical = HierarchicalIndex.from_summaries(index, summaries)
        docs = hierarchical.as_retriever(k=10, k_summaries=2, alpha=0.0).invoke("solar")
        ids = [d.id for d in docs]
        assert ids.count(shared) == 1
        shared_doc = docs[ids.index(shared)]
        assert shared_doc.metadata[keys.SUMMARY_ID] == "best" and shared_doc.metadata[keys.SUMMARY_RANK] == 1

    def test_other_methods(self, mixed_index: HierarchicalIndex) -> None:
        for method in ("rrf", "zscore"):
            docs = mixed_index.as_retriever(k=5, method=method).invoke("solar battery")
            assert len(docs) == 5
            for doc in docs:
                meta = doc.metadata
                assert meta[keys.FUSION_METHOD] == method
                expected = 0.5 * meta[keys.SUMMARY_SCORE] + 0.5 * meta[keys.FUSION_SCORE]
                assert meta[keys.HIERARCHICAL_SCORE] == pytest.approx(expected)
                assert math.isfinite(meta[keys.HIERARCHICAL_SCORE])

    def test_filter_restricts_chunks_and_summaries(self, mixed_index: HierarchicalIndex) -> None:
        docs = mixed_index.as_retriever(k=10, k_summaries=1, filter={keys.SOURCE: "handbook.md"}).invoke(
            "solar battery"
        )
        assert docs and {d.metadata[keys.SOURCE] for d in docs} == {"handbook.md"}
        one_page = mixed_index.as_retriever(k=10, filter=lambda m: m.get(keys.PAGE) == 2).invoke("solar battery")
        assert {page_of(d) for d in one_page} == {("report.pdf", 2)}
        assert mixed_index.as_retriever(filter={keys.SOURCE: "nowhere"}).invoke("solar") == []

    def test_results_are_copies(self, mixed_index: HierarchicalIndex) -> None:
        doc = mixed_index.as_retriever(k=1).invoke("solar")[0]
        stored = stored_document(mixed_index.chunks, doc.id or "")
        assert keys.HIERARCHICAL_SCORE not in stored.metadata
        assert doc.page_content == stored.page_content


class TestRetriever:
    def test_defaults_follow_the_fusion_retriever(self, mixed_index: HierarchicalIndex) -> None:
        from langchain_fusion import FusionRetriever

        retriever = HierarchicalRetriever(index=mixed_index)
        assert (retriever.k, retriever.k_summaries, retriever.summary_weight) == (4, 3, 0.5)
        fusion = FusionRetriever(index=mixed_index.chunks)
        assert (retriever.alpha, retriever.fetch_k, retriever.method) == (fusion.alpha, fusion.fetch_k, fusion.method)

    def test_per_call_options(self, mixed_index: HierarchicalIndex) -> None:
        retriever = mixed_index.as_retriever()
        assert len(retriever.invoke("solar battery", k=2)) == 2
        one_page = retriever.invoke("solar battery", k=10, k_summaries=1)
        assert len({page_of(d) for d in one_page}) == 1
        weighted = retriever.invoke("solar battery", summary_weight=1.0, alpha=0.7, method="rrf", fetch_k=5)
        assert all(d.metadata[keys.FUSION_METHOD] == "rrf" for d in weighted)

    @pytest.mark.parametrize(
        ("option", "value", "message"),
        [
            ("k", 0, "k must be a positive whole number"),
            ("k_summaries", 0, "k_summaries must be a positive whole number"),
            ("k_summaries", True, "k_summaries must be a positive whole number"),
            ("summary_weight", 1.5, "summary_weight must be a number between 0 and 1"),
            ("alpha", -0.1, "alpha must be a number between 0 and 1"),
            ("method", "max", "method must be one of"),
        ],
    )
    def test_invalid_per_call_options(
        self, mixed_index: HierarchicalIndex, option: str, value: Any, message: str
    ) -> None:
        with pytest.raises(InvalidParameterError, match=message):
            mixed_index.as_retriever().invoke("solar", **{option: value})

    def test_unknown_option(self, mixed_index: HierarchicalIndex) -> None:
        with pytest.raises(InvalidParameterError, match="per-call options are"):
            mixed_index.as_retriever().invoke("solar", top_n=3)

    @pytest.mark.parametrize(("field", "value"), [("k_summaries", 0), ("summary_weight", 2.0), ("alpha", 3.0)])
    def test_invalid_fields(self, mixed_index: HierarchicalIndex, field: str, value: Any) -> None:
        with pytest.raises(InvalidParameterError):
            HierarchicalRetriever(index=mixed_index, **{field: value})

    def test_degenerate_inputs(self, mixed_index: HierarchicalIndex) -> None:
        retriever = mixed_index.as_retriever()
        assert retriever.invoke("   ") == []
        assert len(retriever.invoke("zebra xylophone", k=3)) == 3  # no known term: the vector side decides
        empty = HierarchicalIndex(FusionIndex(HashingEmbeddings()), FusionIndex(HashingEmbeddings()))
        assert empty.as_retriever().invoke("solar") == []

    async def test_async_twin(self, mixed_index: HierarchicalIndex) -> None:
        retriever = mixed_index.as_retriever(k=5)
        assert await retriever.ainvoke("solar battery flood") == retriever.invoke("solar battery flood")
        assert await retriever.ainvoke("solar", k_summaries=1, k=2) == retriever.invoke("solar", k_summaries=1, k=2)


class TestHierarchicalIndex:
    def test_embeddings_must_match(self) -> None:
        with pytest.raises(InvalidParameterError, match="both must use the same model"):
            HierarchicalIndex(FusionIndex(HashingEmbeddings()), FusionIndex(HashingEmbeddings(model="other")))

    def test_summaries_must_link_to_chunks(self) -> None:
        summaries = FusionIndex.from_documents([Document(id="s", page_content="no links")], HashingEmbeddings())
        with pytest.raises(InvalidParameterError, match=r"summary 's' has no list of chunk ids"):
            HierarchicalIndex(FusionIndex(HashingEmbeddings()), summaries)

    def test_links_follow_changes_of_the_chunk_index(self) -> None:
        chunks = make_chunks(MIXED_PAGES)
        hierarchical = build(chunks)
        # Summaries link to chunk ids (not rows): together they cover every chunk exactly once.
        linked = [i for doc in hierarchical.summaries.documents for i in doc.metadata[keys.SUMMARY_CHUNK_IDS]]
        assert sorted(linked) == sorted(c.id or "" for c in chunks)
        assert (hierarchical.chunks.view().keys_of(linked) >= 0).all()
        retriever = hierarchical.as_retriever(k=len(chunks), k_summaries=4)
        assert {d.id for d in retriever.invoke("solar roof")} == set(linked)
        hierarchical.chunks.delete([chunks[0].id])  # type: ignore[list-item]
        # The links resolve against the current chunk index: the deleted chunk is gone from them...
        assert int((hierarchical.chunks.view().keys_of(linked) >= 0).sum()) == len(chunks) - 1
        docs = retriever.invoke("solar roof")
        assert chunks[0].id not in {d.id for d in docs}
        assert {d.id for d in docs} == set(linked) - {chunks[0].id}
        # ...and comes back when the chunk is indexed again (at a new row).
        hierarchical.chunks.add_documents([chunks[0]])
        assert {d.id for d in retriever.invoke("solar roof")} == set(linked)

    def test_summary_index_settings(self) -> None:
        from langchain_fusion import Analyzer, BM25Params

        analyzer, params = Analyzer(stemmer=None), BM25Params(k1=1.2, b=0.6)
        index = FusionIndex.from_documents(
            make_chunks(MIXED_PAGES), HashingEmbeddings(), analyzer=analyzer, bm25_params=params, vector_index="HNSW16"
        )
        hierarchical = HierarchicalIndex.build(index, summarizer(model()))
        assert hierarchical.summaries.analyzer == analyzer
        assert hierarchical.summaries.bm25_params == params
        summary_store = hierarchical.summaries.store
        assert isinstance(summary_store, LocalStore) and summary_store.vector_index == "Flat"
        assert hierarchical.summaries.embeddings is index.embeddings
        assert hierarchical.summary_report is not None and hierarchical.summary_report.items == 4


class TestSummaries:
    def test_one_summary_per_page_and_per_section(self) -> None:
        chunks = make_chunks(MIXED_PAGES)
        llm = model()
        documents, report = summarizer(llm).summarize(chunks)
        assert [
            (d.metadata[keys.SOURCE], d.metadata.get(keys.PAGE), d.metadata.get(keys.SECTION)) for d in documents
        ] == [
            ("report.pdf", 1, None),
            ("report.pdf", 2, None),
            ("report.pdf", 3, None),
            ("handbook.md", None, 1),
        ]
        assert [d.id for d in documents] == [
            summary_id("report.pdf", 1, None),
            summary_id("report.pdf", 2, None),
            summary_id("report.pdf", 3, None),
            summary_id("handbook.md", None, 1),
        ]
        page_1 = [c.id for c in chunks if page_of(c) == ("report.pdf", 1)]
        assert documents[0].metadata[keys.SUMMARY_CHUNK_IDS] == page_1
        assert all(d.metadata[keys.SUMMARY_FALLBACK] is False for d in documents)
        assert documents[0].page_content == "Summary: Solar arrays on every hut roof feed the"
        assert (report.items, report.calls, report.cached, report.failed) == (4, 4, 0, [])
        assert report.summary().startswith("summaries (rating-fake): 4 pages and sections, 4 model calls")
        # The prompt names the source and where the text is, and holds the page's original text.
        prompt = next(p for p in llm.calls if "Tariffs" in p)
        assert '<text source="report.pdf" location="page 3">' in prompt
        assert text_in(prompt) == "\n\n".join(MIXED_PAGES[("report.pdf", 3)])
        assert any('location="the whole file"' in p for p in llm.calls)

    def test_large_text_files_are_cut_into_sections(self) -> None:
        paragraphs = [f"Paragraph {i} of the long handbook describes procedure {i} in detail." for i in range(40)]
        chunks = make_chunks({("long.md", None): paragraphs})
        units = page_units(chunks, section_chars=600)
        total = sum(len(p) for p in paragraphs)
        assert len(units) == math.ceil(total / 600)
        assert [c.id for u in units for c in u.chunks] == [c.id for c in chunks]  # contiguous, complete
        sizes = [sum(len(c.page_content) for c in u.chunks) for u in units]
        assert max(sizes) - min(sizes) <= 2 * max(len(p) for p in paragraphs)  # balanced
        assert [u.location for u in units][:2] == [f"section 1 of {len(units)}", f"section 2 of {len(units)}"]
        assert units[0].label == f"long.md section 1/{len(units)}"
        assert len(page_units(chunks, section_chars=100_000)) == 1
        with pytest.raises(InvalidParameterError):
            page_units(chunks, section_chars=0)

    def test_long_pages_are_summarised_map_reduce(self) -> None:
        paragraphs = [f"Part {i} of the long page: sentence about topic {i} and its details." for i in range(20)]
        chunks = make_chunks({("long.pdf", 7): paragraphs})
        llm = model()
        documents, report = summarizer(llm, piece_token_budget=100).summarize(chunks)  # 400 characters a piece
        maps = [p for p in llm.calls if "<text " in p]
        reduces = [p for p in llm.calls if "<summaries " in p]
        assert len(maps) > 3
        maps.sort(key=lambda p: int(p.split(", part ", 1)[1].split(" ", 1)[0]))  # they ran concurrently
        assert all(f'location="page 7, part {i} of {len(maps)}"' in p for i, p in enumerate(maps, 1))
        assert all(len(text_in(p)) <= 400 for p in maps)
        assert "".join(text_in(p) for p in maps).replace("\n", "") == "".join(paragraphs).replace("\n", "")
        assert reduces and 'location="page 7"' in reduces[-1]
        assert text_in(reduces[-1]).startswith("Part 1: Summary:")
        assert [d.page_content for d in documents] == ["Summary: Summary: Part 0 of the long page: sentence"]
        assert report.calls == len(maps) + len(reduces)
        assert report.items == 1

    def test_reduce_rounds_shrink_until_one_summary(self) -> None:
        paragraphs = [f"Section {i} holds a long explanation of subject {i}." for i in range(60)]
        chunks = make_chunks({("huge.pdf", 1): paragraphs})
        llm = model(lambda prompt: "Summary " + hashlib.sha256(prompt.encode()).hexdigest())  # all distinct
        documents, report = summarizer(llm, piece_token_budget=40).summarize(chunks)  # 160 characters
        reduces = [p for p in llm.calls if "<summaries " in p]
        assert len(reduces) > 2  # several rounds
        assert len(documents) == 1 and report.failed == []

    def test_cache_second_run_makes_no_calls(self, tmp_path: Path) -> None:
        paragraphs = [f"Part {i} of the long page: sentence about topic {i}." for i in range(12)]
        chunks = make_chunks({**MIXED_PAGES, ("long.pdf", 1): paragraphs})
        first, report = summarizer(model(), cache_dir=tmp_path, piece_token_budget=50).summarize(chunks)
        assert report.calls > report.items  # map-reduce calls included
        idle = model(lambda prompt: AssertionError("called despite the cache"))
        second, again = summarizer(idle, cache_dir=tmp_path, piece_token_budget=50).summarize(chunks)
        assert idle.calls == [] and again.calls == 0 and again.cached == report.requests
        assert second == first

    def test_retries_on_rate_limits(self) -> None:
        chunks = make_chunks(MIXED_PAGES)
        llm = model(flaky(echo_rule, failures=2))
        delays: list[float] = []
        documents, report = summarizer(llm, retry=RetryPolicy(sleep=delays.append)).summarize(chunks)
        assert (report.calls, report.retries, report.failed) == (12, 8, [])
        assert len(delays) == 8
        assert all(not d.metadata[keys.SUMMARY_FALLBACK] for d in documents)

    def test_failures_are_reported_and_not_fatal(self, caplog: pytest.LogCaptureFixture) -> None:
        chunks = restriction_corpus(distractor_pages=3)

        def rule(prompt: str) -> Any:
            return ValueError("content filter") if "guarantee" in prompt else OTHER_SUMMARY

        documents, report = summarizer(model(rule)).summarize(chunks)
        [failure] = report.failed
        assert failure.label == "target.pdf p. 1"
        assert failure.item == summary_id("target.pdf", 1, None)
        assert failure.error == "ValueError: content filter"
        target = next(d for d in documents if d.metadata[keys.SOURCE] == "target.pdf")
        assert target.metadata[keys.SUMMARY_FALLBACK] is True
        assert target.page_content == "\n\n".join(TARGET)  # the page's own text stands in
        assert "summaries failed for 1 of 4" in caplog.text
        # The page stays reachable through its stand-in summary.
        hierarchical = HierarchicalIndex.from_summaries(
            FusionIndex.from_documents(chunks, HashingEmbeddings()), documents
        )
        docs = hierarchical.as_retriever(k=2, k_summaries=1).invoke("guarantee storage cells claims")
        assert {d.metadata[keys.SOURCE] for d in docs} == {"target.pdf"}

    def test_an_oversized_summary_fails_only_its_page(self) -> None:
        """A summary answer longer than max_answer_chars is refused: the page's own text stands in."""
        chunks = restriction_corpus(distractor_pages=3)

        def rule(prompt: str) -> Any:
            return "y" * 1_000_000 if "guarantee" in prompt else OTHER_SUMMARY

        documents, report = summarizer(model(rule)).summarize(chunks)
        [failure] = report.failed
        assert failure.label == "target.pdf p. 1"
        assert failure.error.startswith("AnswerTooLongError: the answer has 1,000,000 characters, more than")
        target = next(d for d in documents if d.metadata[keys.SOURCE] == "target.pdf")
        assert target.metadata[keys.SUMMARY_FALLBACK] is True and target.page_content == "\n\n".join(TARGET)
        assert max(len(d.page_content) for d in documents) < 8_000

    def test_a_failed_piece_fails_its_page_only(self) -> None:
        paragraphs = [f"Part {i} of the long page: sentence about topic {i}." for i in range(12)]
        chunks = make_chunks({**MIXED_PAGES, ("long.pdf", 1): paragraphs})

        def rule(prompt: str) -> Any:
            return RateLimitError("quota") if "Part 5 of" in prompt else echo_rule(prompt)

        policy = RetryPolicy(max_attempts=2, sleep=lambda s: None)
        llm = model(rule)
        documents, report = summarizer(llm, piece_token_budget=50, retry=policy).summarize(chunks)
        assert [f.label for f in report.failed] == ["long.pdf p. 1"]
        assert report.failed[0].attempts == 2
        assert [d.metadata[keys.SUMMARY_FALLBACK] for d in documents] == [False, False, False, False, True]
        assert not any("<summaries " in p for p in llm.calls)  # no reduce for a page with a failed piece
        assert documents[-1].page_content.startswith("Part 0 of the long page")

    def test_concurrency_bound_and_progress(self) -> None:
        pages = {("many.pdf", p): [f"Page {p} says something about item {p}."] for p in range(1, 13)}
        chunks = make_chunks(pages)
        llm = model(gates={"<text ": Gate(crowd=3)})  # opens only once three calls are in flight together
        ticks: list[int] = []
        summarizer(llm, max_concurrency=3).summarize(chunks, progress=ticks.append)
        assert llm.max_active == 3
        assert sum(ticks) == 12

    def test_progress_counts_pages_with_map_reduce_and_failures(self) -> None:
        paragraphs = [f"Part {i} of the long page: sentence about topic {i}." for i in range(12)]
        chunks = make_chunks({**MIXED_PAGES, ("long.pdf", 1): paragraphs})

        def rule(prompt: str) -> Any:
            return ValueError("no") if "Tariffs" in prompt else echo_rule(prompt)

        ticks: list[int] = []
        summarizer(model(rule), piece_token_budget=50).summarize(chunks, progress=ticks.append)
        assert sum(ticks) == 5

    async def test_async_twin(self) -> None:
        chunks = make_chunks(MIXED_PAGES)
        expected, _ = summarizer(model()).summarize(chunks)
        llm = model(gates={"<text ": Gate(crowd=2)})
        got, report = await summarizer(llm, max_concurrency=2).asummarize(chunks)
        assert got == expected
        assert llm.async_calls == 4 and llm.sync_calls == 0 and llm.max_active == 2
        assert report.calls == 4

    def test_chunks_need_ids(self) -> None:
        with pytest.raises(InvalidParameterError, match=r"chunk 0 has none"):
            summarizer(model()).summarize([Document(page_content="no id", metadata={keys.SOURCE: "x"})])

    def test_prompts_must_take_source_location_and_text(self) -> None:
        bad = ChatPromptTemplate.from_messages([("human", "{text}")])
        with pytest.raises(InvalidParameterError, match="location"):
            PageSummarizer(llm=model(), prompt=bad)
        with pytest.raises(InvalidParameterError, match="location"):
            PageSummarizer(llm=model(), reduce_prompt=bad)

    def test_empty_corpus(self) -> None:
        documents, report = summarizer(model()).summarize([])
        assert documents == [] and report.items == 0 and report.calls == 0


@lru_cache(maxsize=1)
def shared_hierarchical() -> HierarchicalIndex:
    return build(make_chunks(MIXED_PAGES))


class TestHierarchicalRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[HierarchicalRetriever]:
        return HierarchicalRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": shared_hierarchical()}

    @property
    def retriever_query_example(self) -> str:
        return "solar battery"


def test_async_summaries_feed_an_index() -> None:
    chunks = make_chunks(MIXED_PAGES)
    index = FusionIndex.from_documents(chunks, HashingEmbeddings())
    documents, _ = asyncio.run(summarizer(model()).asummarize(index.documents))
    hierarchical = HierarchicalIndex.from_summaries(index, documents)
    assert len(hierarchical.summaries) == 4
    assert hierarchical.as_retriever(k=2).invoke("flood")


@pytest.mark.integration
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="needs OPENAI_API_KEY (calls the OpenAI API)")
def test_real_model_summaries(tmp_path: Path) -> None:
    from langchain_fusion.models.chat import default_chat_model

    index = FusionIndex.from_documents(make_chunks(MIXED_PAGES), HashingEmbeddings())
    hierarchical = HierarchicalIndex.build(index, PageSummarizer(llm=default_chat_model(), cache_dir=tmp_path))
    report = hierarchical.summary_report
    assert report is not None and report.failed == [] and report.calls == 4
    assert all(20 < len(d.page_content) < 1500 for d in hierarchical.summaries.documents)
    docs = hierarchical.as_retriever(k=2, k_summaries=1).invoke("What happened in the July flood?")
    assert {(d.metadata[keys.SOURCE], d.metadata.get(keys.PAGE)) for d in docs} == {("report.pdf", 2)}
