"""LangChain's standard retriever test suite, run against every public retriever."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_fusion import BM25Retriever, FusionIndex, FusionRetriever, VectorRetriever, VectorStoreFusionRetriever
from tests.helpers.corpora import ANIMALS
from tests.helpers.embeddings import HashingEmbeddings


@lru_cache(maxsize=1)
def shared_index() -> FusionIndex:
    return FusionIndex.from_documents([Document(page_content=t) for t in ANIMALS], HashingEmbeddings())


class _OverSharedIndex(RetrieversIntegrationTests):
    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"index": shared_index()}

    @property
    def retriever_query_example(self) -> str:
        return "cat and dogs"  # BM25 matches at least three documents


class TestFusionRetrieverStandard(_OverSharedIndex):
    @property
    def retriever_constructor(self) -> type[FusionRetriever]:
        return FusionRetriever


class TestVectorRetrieverStandard(_OverSharedIndex):
    @property
    def retriever_constructor(self) -> type[VectorRetriever]:
        return VectorRetriever


class TestBM25RetrieverStandard(_OverSharedIndex):
    @property
    def retriever_constructor(self) -> type[BM25Retriever]:
        return BM25Retriever


class TestVectorStoreFusionRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[VectorStoreFusionRetriever]:
        return VectorStoreFusionRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        store = InMemoryVectorStore.from_texts(ANIMALS, HashingEmbeddings())
        return {"vectorstore": store}

    @property
    def retriever_query_example(self) -> str:
        return "cat and dog"
