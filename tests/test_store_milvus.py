"""The store contract on Milvus (milvus-lite in process; a real server when MILVUS_URI is set)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from langchain_fusion import Analyzer, BM25Params, FusionIndex, InvalidParameterError
from langchain_fusion.stores.base import FusionStore
from tests.conftest import HashingEmbeddings
from tests.store_contract import QUERIES, Reference, StoreContract, corpus, results

pytest.importorskip("pymilvus")
if not os.environ.get("MILVUS_URI"):
    pytest.importorskip("milvus_lite")

pytestmark = pytest.mark.milvus


@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return os.environ.get("MILVUS_URI") or str(tmp_path_factory.mktemp("milvus") / "contract.db")


class TestMilvusStoreContract(StoreContract):
    whole_corpus = 1000  # fetch_k=None is refused on Milvus; a pool larger than the corpus is the same

    @pytest.fixture(autouse=True)
    def _uri(self, milvus_uri: str) -> None:
        self.uri = milvus_uri

    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        from langchain_fusion.stores.milvus import MilvusStore

        return MilvusStore(self.uri, f"c{uuid.uuid4().hex[:12]}", analyzer=analyzer, bm25_params=bm25_params)

    @pytest.mark.parametrize("method", ["weighted", "zscore", "rrf"])
    def test_fused_results_equal_the_reference(self, method: str) -> None:
        """RRF ranks exact ties of a raw score by key, which Milvus assigns on first sight: compare its top sets."""
        if method != "rrf":
            super().test_fused_results_equal_the_reference(method)
            return
        docs = corpus(1, 90)
        index = self.new_index(docs)
        reference = Reference(docs, HashingEmbeddings(), self.params)
        agree = total = 0
        for query in QUERIES:
            for alpha in (0.3, 0.5, 0.8):
                expected = {i for i, _ in reference.search(query, k=8, alpha=alpha, method="rrf")}
                got = {i for i, _ in results(index, query, k=8, alpha=alpha, method="rrf", fetch_k=self.whole_corpus)}
                agree += len(expected & got)
                total += len(expected)
        assert agree >= 0.9 * total


class TestMilvusSpecifics:
    def test_reopening_needs_no_reembedding(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        name = f"r{uuid.uuid4().hex[:12]}"
        first = FusionIndex.from_documents(corpus(1, 30), HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        again = FusionIndex(HashingEmbeddings(), store=MilvusStore(milvus_uri, name))
        assert len(again) == 30
        assert [d.id for d in again.as_retriever(k=5).invoke("w1 w2")] == [
            d.id for d in first.as_retriever(k=5).invoke("w1 w2")
        ]

    def test_callable_filters_and_whole_corpus_are_refused(self, milvus_uri: str) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        index = FusionIndex.from_documents(
            corpus(2, 10), HashingEmbeddings(), store=MilvusStore(milvus_uri, f"f{uuid.uuid4().hex[:12]}")
        )
        with pytest.raises(InvalidParameterError, match="callable cannot run on a Milvus server"):
            index.as_retriever(filter=lambda m: True).invoke("w1")
        with pytest.raises(InvalidParameterError, match="fetch_k=None"):
            index.as_retriever(fetch_k=None).invoke("w1")

    def test_other_bm25_variants_are_refused(self, milvus_uri: str, tmp_path: Path) -> None:
        from langchain_fusion.stores.milvus import MilvusStore

        with pytest.raises(InvalidParameterError, match="lucene"):
            MilvusStore(milvus_uri, "x", bm25_params=BM25Params(method="bm25+"))
