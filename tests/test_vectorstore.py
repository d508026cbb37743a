"""Fusing an existing LangChain vector store with BM25, aligned by document identity."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_fusion import FusionError, FusionIndex, FusionRetriever, VectorStoreFusionRetriever
from langchain_fusion import metadata as keys
from langchain_fusion.stores.local.store import LocalStore
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    community = pytest.importorskip("langchain_community.vectorstores")
    from langchain_community.vectorstores.utils import DistanceStrategy

QUERIES = ["cat", "dog friends", "sunlight energy", "human speech parrots"]


def docs() -> list[Document]:
    return [Document(page_content=t, metadata={"i": i}) for i, t in enumerate(ANIMALS)]


def ranked(results: list[Document]) -> list[tuple[str, float]]:
    return [(d.page_content, round(d.metadata[keys.FUSION_SCORE], 5)) for d in results]


class TestVectorStoreFusionRetriever:
    def test_in_memory_store_matches_fusion_index(self) -> None:
        embeddings = HashingEmbeddings()
        store = InMemoryVectorStore.from_documents(docs(), embeddings)
        ours = FusionRetriever(index=FusionIndex.from_documents(docs(), embeddings), k=5, fetch_k=None)
        theirs = VectorStoreFusionRetriever(vectorstore=store, k=5, fetch_k=None)
        for query in QUERIES:
            assert ranked(theirs.invoke(query)) == ranked(ours.invoke(query))

    @pytest.mark.parametrize("strategy", [DistanceStrategy.EUCLIDEAN_DISTANCE, DistanceStrategy.MAX_INNER_PRODUCT])
    def test_community_faiss_matches_fusion_index(self, strategy: DistanceStrategy) -> None:
        # Unit vectors: L2 distance is a decreasing function of cosine, and min-max
        # normalisation makes negated squared distances and cosines fuse identically.
        embeddings = HashingEmbeddings()
        store = community.FAISS.from_documents(docs(), embeddings, distance_strategy=strategy)
        ours = FusionRetriever(index=FusionIndex.from_documents(docs(), embeddings), k=5, fetch_k=None)
        theirs = VectorStoreFusionRetriever(vectorstore=store, k=5, fetch_k=None)
        for query in QUERIES:
            assert [d.page_content for d in theirs.invoke(query)] == [d.page_content for d in ours.invoke(query)]
            if strategy == DistanceStrategy.MAX_INNER_PRODUCT:
                assert ranked(theirs.invoke(query)) == ranked(ours.invoke(query))

    def test_alignment_does_not_depend_on_store_order(self) -> None:
        embeddings = HashingEmbeddings()
        store = InMemoryVectorStore.from_documents(list(reversed(docs())), embeddings)
        retriever = VectorStoreFusionRetriever(vectorstore=store, documents=docs(), k=8, fetch_k=None)
        index = FusionIndex.from_documents(docs(), embeddings)
        store = index.store
        assert isinstance(store, LocalStore)
        bm25 = store.snapshot.bm25_scores_all("cat dog")  # row order = docs() order
        results = retriever.invoke("cat dog")
        assert results
        for doc in results:
            row = doc.metadata["i"]
            assert doc.metadata[keys.BM25_SCORE] == pytest.approx(float(bm25[row]))

    def test_bm25_candidate_outside_store_results(self) -> None:
        embeddings = HashingEmbeddings()
        store = InMemoryVectorStore.from_documents(docs(), embeddings)
        retriever = VectorStoreFusionRetriever(vectorstore=store, k=1, fetch_k=1)
        results = [d for query in QUERIES for d in retriever.invoke(query, k=2)]
        missing = [d for d in results if d.metadata[keys.VECTOR_SCORE] is None]
        assert missing, "a BM25-only candidate should have no observed vector score"
        assert all(d.metadata[keys.VECTOR_RANK] is None and d.metadata[keys.BM25_SCORE] > 0 for d in missing)

    def test_documents_must_be_given_for_opaque_stores(self) -> None:
        class Opaque(InMemoryVectorStore):
            @property
            def store(self):  # type: ignore[no-untyped-def,override]
                return None

            @store.setter
            def store(self, value) -> None:  # type: ignore[no-untyped-def]
                pass

        with pytest.raises(FusionError, match="pass documents="):
            VectorStoreFusionRetriever(vectorstore=Opaque(HashingEmbeddings()))

    def test_per_call_options_and_degenerate_inputs(self) -> None:
        store = InMemoryVectorStore.from_documents(docs(), HashingEmbeddings())
        retriever = VectorStoreFusionRetriever(vectorstore=store, k=3)
        assert len(retriever.invoke("cat", k=1)) == 1
        assert retriever.invoke("cat", alpha=0.0)[0].metadata[keys.BM25_RANK] == 1
        assert retriever.invoke("") == []
        with pytest.raises(ValueError, match="alpha must be"):
            retriever.invoke("cat", alpha=3)

    async def test_async(self) -> None:
        store = InMemoryVectorStore.from_documents(docs(), HashingEmbeddings())
        retriever = VectorStoreFusionRetriever(vectorstore=store, k=3)
        assert await retriever.ainvoke("cat") == retriever.invoke("cat")

    def test_scores_are_finite(self) -> None:
        store = InMemoryVectorStore.from_documents(docs(), HashingEmbeddings())
        for doc in VectorStoreFusionRetriever(vectorstore=store, k=8, method="zscore").invoke("xylophone"):
            assert np.isfinite(doc.metadata[keys.FUSION_SCORE])
