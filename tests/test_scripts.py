"""A query the embedding model cannot read gets no vector weight in fused search; every other query is unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from langchain_core.documents import Document

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever
from langchain_fusion.evaluation import EvalDataset, sweep_alpha
from langchain_fusion.models.embeddings import CachedEmbeddings, LocalEmbeddings
from langchain_fusion.models.scripts import declared_scripts, reads
from langchain_fusion.search.fusion import fuse_pool
from tests.helpers.embeddings import EnglishOnlyEmbeddings, HashingEmbeddings
from tests.store_contract import CJK, corpus

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
