"""The store contract on the in-process store (the reference engine), exact and with ANN segments."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_fusion import Analyzer, BM25Params
from langchain_fusion.stores.base import FusionStore, StoreView
from langchain_fusion.stores.local import mutations, postings
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.local.view import LocalView
from langchain_fusion.testing import CJK, StoreContract, corpus


class TestLocalStoreContract(StoreContract):
    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        return LocalStore(analyzer, bm25_params)


class TestLocalStoreContractCJK(TestLocalStoreContract):
    """The whole contract on Chinese, Japanese and Korean text (as the Milvus store runs it)."""

    language = CJK


class TestLocalStoreWithSmallSegmentsContract(StoreContract):
    """Many small segments and frequent compactions: the same results."""

    @pytest.fixture(autouse=True)
    def _small_segments(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(postings, "TOKENIZE_BATCH", 7)
        monkeypatch.setattr(mutations, "MERGE_FACTOR", 1)
        monkeypatch.setattr(mutations, "COMPACT_DEAD_RATIO", 0.05)

    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        return LocalStore(analyzer, bm25_params)


class TestLocalStoreWithAnnSegmentsContract(StoreContract):
    """HNSW candidates on every segment (exact scores from the stored vectors): the same results."""

    @pytest.fixture(autouse=True)
    def _ann_everywhere(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(mutations, "ANN_MIN_ROWS", 1)

    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        return LocalStore(analyzer, bm25_params, vector_index="HNSW32", vector_search_params="efSearch=256")

    def test_segments_have_ann_indexes(self) -> None:
        index = self.new_index(corpus(20, 50))
        assert all(segment.ann is not None for segment in index.store.snapshot.segments)  # type: ignore[attr-defined]


class _SeamOnlyScorer:
    """A side with only the seam's two operations (no whole-corpus capability), as a remote store has."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def top(self, k: int | None, where: Any = None) -> Any:
        return self.inner.top(k, where)

    def scores(self, keys: Any) -> Any:
        return self.inner.scores(keys)


class _SeamOnlyView(LocalView):
    ids = StoreView.ids  # the generic path: ids read through documents

    def vector(self, query_vector: Any) -> Any:  # type: ignore[override]
        return _SeamOnlyScorer(super().vector(query_vector))

    def bm25(self, query: str) -> Any:  # type: ignore[override]
        return _SeamOnlyScorer(super().bm25(query))


class _SeamOnlyStore(LocalStore):
    def view(self) -> LocalView:
        return _SeamOnlyView(self.snapshot)


class TestSeamOnlyContract(StoreContract):
    """The generic search path (top-k, then completion by key) gives the same results as the fast path."""

    def make_store(self, analyzer: Analyzer, bm25_params: BM25Params) -> FusionStore:
        return _SeamOnlyStore(analyzer, bm25_params)
