"""A query the embedding model cannot read gets no vector weight in fused search; every other query is unchanged.

What the model reads is its declaration, or, for a model that declares nothing, a probe of it
(:mod:`langchain_fusion.models.scripts`). The fakes: :class:`EnglishOnlyEmbeddings` declares Latin;
:class:`ScriptBlindEmbeddings` declares nothing and carries no signal for Chinese, Japanese and Korean;
:class:`HashingEmbeddings` declares nothing and matches words, not meaning (the probe gives it no verdict).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import regex
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, HierarchicalIndex, VectorRetriever
from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError, ProviderError
from langchain_fusion.evaluation import EvalDataset, sweep_alpha
from langchain_fusion.models.embeddings import CachedEmbeddings, LocalEmbeddings
from langchain_fusion.models.probe_texts import PROBES
from langchain_fusion.models.scripts import (
    PROBED_SCRIPTS,
    READ_SEPARATION,
    ScriptReader,
    declared_scripts,
    letters_by_script,
    probe_scripts,
    reads,
)
from langchain_fusion.search.fusion import fuse_pool
from langchain_fusion.testing import CJK, corpus
from tests.helpers.embeddings import CJK_SCRIPTS, EnglishOnlyEmbeddings, HashingEmbeddings, ScriptBlindEmbeddings
from tests.helpers.shared_vectors import shared_model_vectors

LATIN = frozenset({"Latin"})
ENGLISH = ["the cat sat on the mat", "dogs chase cats in the yard", "a mat for the cat", "birds sing at dawn"]


class TestReads:
    @pytest.mark.parametrize(
        "text",
        ["how do I restart the inverter?", "α-synuclein aggregation", "Москва and London", "3300", "", "KV-3300 東京"],
    )
    def test_a_latin_model_reads_text_mostly_in_latin_letters(self, text: str) -> None:
        assert reads(LATIN, text)

    @pytest.mark.parametrize(
        "text", ["東京は日本の首都", "电池在洪水中完好无损", "KV3300データ検索", "Москва и Россия", "ภาษาไทย"]
    )
    def test_not_text_mostly_in_other_scripts(self, text: str) -> None:
        assert not reads(LATIN, text)

    def test_a_model_that_declares_nothing_reads_everything(self) -> None:
        assert reads(None, "東京は日本の首都")
        assert declared_scripts(HashingEmbeddings()) is None

    def test_the_bundled_model_reads_latin_also_behind_a_cache(self, tmp_path: object) -> None:
        assert declared_scripts(LocalEmbeddings()) == LATIN
        assert declared_scripts(CachedEmbeddings(LocalEmbeddings(), str(tmp_path))) == LATIN


class TestFusePool:
    def test_no_vector_evidence_ranks_by_bm25(self) -> None:
        rng = np.random.default_rng(3)
        vector, bm25 = rng.random(50), np.where(rng.random(50) < 0.3, 0.0, rng.random(50) * 5)
        for method in ("weighted", "zscore", "rrf"):
            pool = fuse_pool(vector, bm25, 0.5, method, vector_evidence=False)  # type: ignore[arg-type]
            assert not pool.vector_normalized.any()
            order = pool.order(20)
            assert np.all(np.diff(pool.bm25_normalized[order]) <= 0), method

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    @pytest.mark.parametrize("alpha", [0.0, 0.3, 0.5, 0.9])
    def test_a_side_with_no_weight_does_not_halve_the_scale(self, method: str, alpha: float) -> None:
        # The BM25 side has all the weight: the fused score is its normalised score, on the full scale.
        rng = np.random.default_rng(5)
        vector, bm25 = rng.random(40), np.where(rng.random(40) < 0.3, 0.0, rng.random(40) * 5)
        pool = fuse_pool(vector, bm25, alpha, method, vector_evidence=False)  # type: ignore[arg-type]
        bm25_only = fuse_pool(vector, bm25, 0.0, method)  # type: ignore[arg-type]
        assert pool.fused.tolist() == pool.bm25_normalized.tolist() == bm25_only.fused.tolist()
        assert pool.order(40).tolist() == bm25_only.order(40).tolist()

    def test_vector_only_keeps_its_ranking(self) -> None:
        rng = np.random.default_rng(4)
        vector, bm25 = rng.random(30), rng.random(30)
        with_evidence = fuse_pool(vector, bm25, 1.0, "weighted")
        without = fuse_pool(vector, bm25, 1.0, "weighted", vector_evidence=False)
        assert without.order(10).tolist() == with_evidence.order(10).tolist()
        assert without.fused.tolist() == with_evidence.fused.tolist()


@pytest.fixture(scope="module")
def cjk_index() -> FusionIndex:
    return FusionIndex.from_documents(corpus(21, 120, language=CJK) + _english(), EnglishOnlyEmbeddings())


def _english() -> list[Document]:
    return [Document(id=f"en{i}", page_content=text) for i, text in enumerate(ENGLISH)]


class TestRetrievers:
    @pytest.mark.parametrize("query", ["東京の首都", "电池", "KV3300データ検索"])
    def test_a_query_the_model_cannot_read_gets_the_bm25_ranking(self, cjk_index: FusionIndex, query: str) -> None:
        fused = FusionRetriever(index=cjk_index, k=8).invoke(query)
        bm25 = BM25Retriever(index=cjk_index, k=8).invoke(query)
        assert len(bm25) == 8
        assert [d.id for d in fused] == [d.id for d in bm25]
        assert {d.metadata["vector_score_normalized"] for d in fused} == {0.0}
        # A side with no weight does not halve the scale: the best BM25 hit is a perfect fused score.
        assert fused[0].metadata["fusion_score"] == 1.0
        assert [d.metadata["fusion_score"] for d in fused] == [d.metadata["bm25_score_normalized"] for d in fused]
        # Vector only is still the vector ranking.
        assert [d.id for d in FusionRetriever(index=cjk_index, k=8, alpha=1.0).invoke(query)] == [
            d.id for d in VectorRetriever(index=cjk_index, k=8).invoke(query)
        ]

    def test_a_query_it_reads_is_fused_as_before(self, cjk_index: FusionIndex) -> None:
        same_vectors = FusionIndex.from_documents(cjk_index.documents, HashingEmbeddings())  # declares nothing
        for query in ("cat on the mat", "get logger"):
            expected = FusionRetriever(index=same_vectors, k=6).invoke(query)
            got = FusionRetriever(index=cjk_index, k=6).invoke(query)
            assert [(d.id, d.metadata["fusion_score"]) for d in got] == [
                (d.id, d.metadata["fusion_score"]) for d in expected
            ]

    def test_batch_and_async_agree(self, cjk_index: FusionIndex) -> None:
        retriever = FusionRetriever(index=cjk_index, k=5)
        queries = ["東京の首都", "cat on the mat", "电池"]
        expected = [[d.id for d in retriever.invoke(q)] for q in queries]
        assert [[d.id for d in docs] for docs in retriever.batch(queries)] == expected
        assert [[d.id for d in docs] for docs in _gather(retriever, queries)] == expected

    def test_evaluation_scores_what_the_retriever_returns(self, cjk_index: FusionIndex) -> None:
        queries = {"q1": "東京の首都", "q2": "电池", "q3": "cat on the mat"}
        found = {qid: FusionRetriever(index=cjk_index, k=10).invoke(text) for qid, text in queries.items()}
        # Label each query's second result relevant: only an identical ranking scores exactly 1/log2(3).
        qrels = {qid: {docs[1].id or "": 1} for qid, docs in found.items()}
        dataset = EvalDataset(name="cjk", queries=queries, qrels=qrels, corpus=list(cjk_index.documents))
        sweep = sweep_alpha(cjk_index, dataset, [0.5], ["weighted"], ["mrr@10"], progress=False)
        assert sweep.result("weighted@0.5").means["mrr@10"] == pytest.approx(0.5)


def _gather(retriever: FusionRetriever, queries: list[str]) -> list[list[Document]]:
    import asyncio

    async def run() -> list[list[Document]]:
        return list(await asyncio.gather(*(retriever.ainvoke(q) for q in queries)))

    return asyncio.run(run())


CJK_QUERIES = ["東京の首都", "电池", "KV3300データ検索", "서울 도착"]
"""Queries mostly in the scripts :class:`ScriptBlindEmbeddings` cannot read."""
LATIN_QUERIES = ["cat on the mat", "get logger", "KV-3300 東京"]
"""Queries mostly in Latin letters (the last with a few Han ones)."""


class TestProbe:
    def test_the_probe_texts(self) -> None:
        assert next(probe.scripts[0] for probe in PROBES) == "Latin"
        assert len(PROBED_SCRIPTS) == len(set(PROBED_SCRIPTS)) == 11
        for probe in PROBES:
            assert len(probe.pairs) == 12, probe.language
            texts = [text for pair in probe.pairs for text in pair]
            assert len(set(texts)) == len(texts), probe.language
            allowed = {*probe.scripts, "Han"} if probe.language == "Japanese" else set(probe.scripts)
            for text in texts:  # every letter is in the scripts its probe tests (Japanese: and kanji, and ー)
                counts, letters = letters_by_script(text), regex.findall(r"\p{L}", text)
                assert set(counts) <= allowed and sum(counts.values()) == len(letters) - text.count("ー"), text

    def test_a_model_blind_to_some_scripts_reads_the_others(self) -> None:
        found = probe_scripts(ScriptBlindEmbeddings())
        assert found.unread == CJK_SCRIPTS
        assert min(found.separations[s] for s in PROBED_SCRIPTS if s not in CJK_SCRIPTS) > 5 * READ_SEPARATION
        assert max(found.separations[s] for s in CJK_SCRIPTS) < READ_SEPARATION / 2
        assert probe_scripts(ScriptBlindEmbeddings(frozenset({"Cyrillic"}))).unread == {"Cyrillic"}

    @pytest.mark.parametrize("size", [8, 16, 64])
    def test_a_model_that_does_not_read_english_gets_no_verdict(self, size: int) -> None:
        found = probe_scripts(HashingEmbeddings(size))  # matches words; the pairs share none
        assert found.unread is None
        assert found.separations["Latin"] < READ_SEPARATION

    def test_one_vector_for_every_text_separates_nothing(self) -> None:
        class Constant(HashingEmbeddings):
            def _embed(self, text: str) -> list[float]:
                return [1.0] + [0.0] * (self.size - 1)

        found = probe_scripts(Constant())
        assert set(found.separations.values()) == {0.0} and found.unread is None

    def test_only_the_scripts_asked_for_and_english_in_one_call(self) -> None:
        model = ScriptBlindEmbeddings()
        found = probe_scripts(model, ["Han"])
        assert set(found.separations) == {"Latin", "Han"} and found.unread == {"Han"}
        assert (model.document_calls, model.documents) == (1, 48)

    def test_a_model_returning_too_few_vectors_is_an_error(self) -> None:
        class Short(HashingEmbeddings):
            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return super().embed_documents(texts[1:])

        with pytest.raises(Exception, match="vectors for 48 probe texts"):
            probe_scripts(Short(), ["Han"])


class TestScriptReader:
    def test_each_script_is_probed_once_when_a_query_needs_it(self) -> None:
        model = ScriptBlindEmbeddings()
        reader = ScriptReader(model)
        for query in [*LATIN_QUERIES, "Москва и Россия"]:  # Latin, or a script it reads
            if query != "Москва и Россия":
                assert reader.unread(query) is None
                assert model.document_calls == 0, query  # a query mostly in Latin never probes
        assert reader.unread("Москва и Россия") is None
        assert model.document_calls == 1  # English and Cyrillic, in one call
        unread = reader.unread("東京は日本の首都")
        assert unread is not None and unread.source == "probed"
        assert unread.scripts == ("Han", "Hiragana")
        assert str(unread) == "the embedding model does not read Han, Hiragana (as a probe of it found)"
        assert model.document_calls == 2
        for query in ["首都", "東京は日本の首都", "Москва"]:
            reader.unread(query)
        assert model.document_calls == 2  # already probed
        assert reader.unread("東京は日本の首都", probe=False) is None

    def test_the_verdict_does_not_depend_on_the_queries_seen_before(self) -> None:
        queries = ["東京は日本の首都", "Москва и Россия", "서울 도착", "ภาษาไทย", "KV3300データ検索", "电池"]
        first = [ScriptReader(ScriptBlindEmbeddings()).unread(q) for q in queries]
        reader = ScriptReader(ScriptBlindEmbeddings())
        assert [reader.unread(q) for q in reversed(queries)] == list(reversed(first))
        assert [u is None for u in first] == [False, True, False, True, False, False]

    def test_a_declared_model_is_never_probed(self) -> None:
        model = ScriptBlindEmbeddings()
        model.scripts = frozenset({"Latin"})  # type: ignore[attr-defined]
        reader = ScriptReader(model)
        unread = reader.unread("Москва и Россия")
        assert unread is not None and unread.source == "declared" and unread.scripts == ("Cyrillic",)
        assert str(unread) == "the embedding model does not read Cyrillic (as it declares)"
        assert str(reader.unread("ქართული ენა")).startswith("the embedding model does not read other scripts")
        assert model.document_calls == 0

    def test_queries_arriving_together_wait_for_one_probe(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        model = ScriptBlindEmbeddings()
        reader = ScriptReader(model)
        with ThreadPoolExecutor(4) as pool:
            found = list(pool.map(reader.unread, ["東京の首都"] * 16))
        assert len(set(found)) == 1 and found[0] is not None
        assert model.document_calls == 1


@pytest.fixture(scope="module")
def blind_index() -> FusionIndex:
    return FusionIndex.from_documents(corpus(21, 120, language=CJK) + _english(), ScriptBlindEmbeddings())


def _ids(docs: list[Document]) -> list[str | None]:
    return [d.id for d in docs]


class TestUndeclaredModel:
    @pytest.mark.parametrize("query", CJK_QUERIES)
    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_a_query_it_cannot_read_gets_the_bm25_ranking(
        self, blind_index: FusionIndex, query: str, method: str
    ) -> None:
        fused = FusionRetriever(index=blind_index, k=8, method=method).invoke(query)
        bm25 = BM25Retriever(index=blind_index, k=8).invoke(query)
        assert len(bm25) == 8 and _ids(fused) == _ids(bm25)
        assert {d.metadata["vector_score_normalized"] for d in fused} == {0.0}
        for doc in fused:
            assert "as a probe of it found" in doc.metadata[keys.VECTOR_DROPPED]
        # Fused as before when asked to, and then the vector side moves the ranking.
        fuse = FusionRetriever(index=blind_index, k=8, method=method, unread_queries="fuse")
        assert all(keys.VECTOR_DROPPED not in d.metadata for d in fuse.invoke(query))
        assert any(_ids(fuse.invoke(q)) != _ids(BM25Retriever(index=blind_index, k=8).invoke(q)) for q in CJK_QUERIES)

    def test_declared_only_never_probes(self) -> None:
        model = ScriptBlindEmbeddings()
        index = FusionIndex.from_documents(corpus(21, 60, language=CJK), model)
        calls = model.document_calls
        for query in CJK_QUERIES:
            declared = FusionRetriever(index=index, k=6, unread_queries="declared").invoke(query)
            fused = FusionRetriever(index=index, k=6, unread_queries="fuse").invoke(query)
            assert [(d.id, d.metadata) for d in declared] == [(d.id, d.metadata) for d in fused]
        assert model.document_calls == calls
        assert index.unread("東京の首都", "declared") is None and index.unread("東京の首都", "fuse") is None
        assert index.unread("東京の首都") is not None and model.document_calls == calls + 1

    @pytest.mark.parametrize("query", LATIN_QUERIES)
    def test_a_query_it_reads_is_fused_as_before(self, blind_index: FusionIndex, query: str) -> None:
        expected = FusionRetriever(index=blind_index, k=6, unread_queries="fuse").invoke(query)
        got = FusionRetriever(index=blind_index, k=6).invoke(query)
        assert [(d.id, d.metadata) for d in got] == [(d.id, d.metadata) for d in expected]
        assert all(keys.VECTOR_DROPPED not in d.metadata for d in got)

    def test_single_sides_and_their_limits_never_probe(self) -> None:
        model = ScriptBlindEmbeddings()
        index = FusionIndex.from_documents(corpus(21, 60, language=CJK), model)
        calls = model.document_calls
        for alpha in (0.0, 1.0):
            docs = FusionRetriever(index=index, k=5, alpha=alpha).invoke("東京の首都")
            assert docs and all(keys.VECTOR_DROPPED not in d.metadata for d in docs)
        VectorRetriever(index=index, k=5).invoke("東京の首都")
        BM25Retriever(index=index, k=5).invoke("東京の首都")
        assert model.document_calls == calls
        # Vector only is still the vector ranking.
        assert _ids(FusionRetriever(index=index, k=8, alpha=1.0).invoke("東京の首都")) == _ids(
            VectorRetriever(index=index, k=8).invoke("東京の首都")
        )

    def test_a_model_without_a_verdict_fuses_every_query(self) -> None:
        index = FusionIndex.from_documents(corpus(21, 60, language=CJK), HashingEmbeddings())
        for query in CJK_QUERIES:
            assert index.reads(query)
            got = FusionRetriever(index=index, k=6).invoke(query)
            expected = FusionRetriever(index=index, k=6, unread_queries="fuse").invoke(query)
            assert [(d.id, d.metadata) for d in got] == [(d.id, d.metadata) for d in expected]

    def test_batch_and_async_agree(self, blind_index: FusionIndex) -> None:
        retriever = FusionRetriever(index=blind_index, k=5)
        queries = ["東京の首都", "cat on the mat", "电池"]
        expected = [[(d.id, d.metadata) for d in retriever.invoke(q)] for q in queries]
        assert [[(d.id, d.metadata) for d in docs] for docs in retriever.batch(queries)] == expected
        assert [[(d.id, d.metadata) for d in docs] for docs in _gather(retriever, queries)] == expected

    def test_explain_says_why_the_vector_side_has_no_weight(self, blind_index: FusionIndex) -> None:
        retriever = FusionRetriever(index=blind_index, k=5)
        [first, *_] = retriever.invoke("東京の首都")
        explained = retriever.explain("東京の首都", first)
        assert explained.verdict == "returned" and explained.vector_dropped == first.metadata[keys.VECTOR_DROPPED]
        assert explained.message.endswith(f"the vector side has no weight for this query: {explained.vector_dropped}")
        other = retriever.explain("cat on the mat", first)
        assert other.vector_dropped is None and "no weight for this query" not in other.message

    def test_hierarchical_search_drops_it_too(self, blind_index: FusionIndex) -> None:
        ids = [d.id for d in blind_index.documents]
        summary = Document(page_content="東京 电池 cat", metadata={keys.SOURCE: "all", keys.SUMMARY_CHUNK_IDS: ids})
        hierarchy = HierarchicalIndex.from_summaries(blind_index, [summary])
        docs = hierarchy.as_retriever(k=4).invoke("東京の首都")
        assert docs and all("as a probe of it found" in d.metadata[keys.VECTOR_DROPPED] for d in docs)
        assert all(keys.VECTOR_DROPPED not in d.metadata for d in hierarchy.as_retriever(k=4).invoke("cat"))

    def test_a_failing_probe_is_a_provider_error_and_is_tried_again(self) -> None:
        class Flaky(ScriptBlindEmbeddings):
            failures = 1

            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                if texts[0] == PROBES[0].pairs[0][0] and self.failures:
                    self.failures -= 1
                    raise ConnectionError("no network")
                return super().embed_documents(texts)

        index = FusionIndex.from_documents(corpus(21, 30, language=CJK), Flaky())
        with pytest.raises(ProviderError, match="no network"):
            FusionRetriever(index=index, k=3).invoke("東京の首都")
        assert FusionRetriever(index=index, k=3).invoke("東京の首都")[0].metadata[keys.VECTOR_DROPPED]

    def test_the_option_is_checked(self, blind_index: FusionIndex) -> None:
        with pytest.raises(InvalidParameterError, match="unread_queries must be one of auto, declared, fuse"):
            FusionRetriever(index=blind_index).invoke("東京", unread_queries="never")


class TestDeclaredModel:
    """A model that declares its scripts behaves as before the probe existed: declared, never probed."""

    def test_unchanged_and_never_probed(self) -> None:
        class DeclaredBlind(ScriptBlindEmbeddings):
            scripts = frozenset({"Latin"})

        model = DeclaredBlind()
        index = FusionIndex.from_documents(corpus(21, 60, language=CJK) + _english(), model)
        calls = model.document_calls
        for query in CJK_QUERIES:
            fused = FusionRetriever(index=index, k=6).invoke(query)
            assert _ids(fused) == _ids(BM25Retriever(index=index, k=6).invoke(query))
            assert all("(as it declares)" in d.metadata[keys.VECTOR_DROPPED] for d in fused)
            declared = FusionRetriever(index=index, k=6, unread_queries="declared").invoke(query)
            assert [(d.id, d.metadata) for d in declared] == [(d.id, d.metadata) for d in fused]
        assert model.document_calls == calls


@pytest.mark.local_model
class TestBundledModelUndeclared:
    """The bundled model's vectors behind a class that declares nothing: the probe finds it reads Latin only."""

    def test_the_probe_finds_what_it_declares(self, model_vectors: Path) -> None:
        class Plain(Embeddings):
            def __init__(self) -> None:
                self.model = LocalEmbeddings()

            def embed_documents(self, texts: list[str]) -> list[list[float]]:
                return self.model.embed_documents(texts)

            def embed_query(self, text: str) -> list[float]:
                return self.model.embed_query(text)

        with shared_model_vectors(model_vectors):
            found = probe_scripts(Plain())
        assert found.unread == frozenset(PROBED_SCRIPTS) - {"Latin"}
        assert found.separations["Latin"] > 5 and max(found.separations[s] for s in found.unread) < 0.8


@pytest.mark.milvus
class TestOnMilvus:
    def test_the_same_fused_results_as_in_process(self, tmp_path: Path) -> None:
        import os
        import uuid

        pytest.importorskip("pymilvus")
        if not os.environ.get("MILVUS_URI"):
            pytest.importorskip("milvus_lite")
        from langchain_fusion.stores.milvus import MilvusStore

        uri = os.environ.get("MILVUS_URI") or str(tmp_path / "scripts.db")
        docs = corpus(21, 60, language=CJK) + _english()
        local = FusionIndex.from_documents(docs, ScriptBlindEmbeddings())
        store = MilvusStore(uri, f"s{uuid.uuid4().hex[:12]}")
        remote = FusionIndex.from_documents(docs, ScriptBlindEmbeddings(), store=store)
        dropped = 0
        for query in CJK_QUERIES + LATIN_QUERIES:
            expected = FusionRetriever(index=local, k=6).invoke(query)
            got = FusionRetriever(index=remote, k=6).invoke(query)
            assert _ids(got) == _ids(expected), query
            assert [d.metadata.get(keys.VECTOR_DROPPED) for d in got] == [
                d.metadata.get(keys.VECTOR_DROPPED) for d in expected
            ]
            assert [d.metadata[keys.FUSION_SCORE] for d in got] == pytest.approx(
                [d.metadata[keys.FUSION_SCORE] for d in expected], abs=1e-5
            )
            dropped += keys.VECTOR_DROPPED in expected[0].metadata
        assert dropped == len(CJK_QUERIES)
