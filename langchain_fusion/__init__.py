"""Hybrid retrieval for LangChain: FAISS vectors and BM25 keywords, fused correctly and fast.

Quick start::

    from langchain_fusion import FusionIndex

    index = FusionIndex.from_files(["report.pdf"])         # bundled local model by default
    retriever = index.as_retriever(k=4, alpha=0.5)           # alpha = weight of the vector side
    docs = retriever.invoke("what failed in July?")          # Documents with score provenance

Context windows, rerank and the RAG chain: :class:`ContextWindowRetriever`,
:class:`LLMReranker`, :class:`CrossEncoderReranker`, :class:`RerankRetriever`, :func:`build_rag_chain`.
Multi-query fusion (RAG-Fusion): :class:`MultiQueryFusionRetriever`. Contextual enrichment and hierarchical
(summary -> chunk) retrieval: :class:`ContextualEnricher`, :class:`PageSummarizer`,
:class:`HierarchicalIndex`, :class:`HierarchicalRetriever`. Where the rows live: a
:class:`FusionStore` (the in-process :class:`LocalStore` by default).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    __version__: str
    from langchain_fusion.chains import build_rag_chain, format_docs
    from langchain_fusion.errors import (
        EmbeddingsMismatchError,
        FusionError,
        IndexFormatError,
        InvalidParameterError,
        MissingCredentialsError,
        MissingDependencyError,
        ModelNotFoundError,
        UnknownDocumentError,
    )
    from langchain_fusion.index.fusion_index import FusionIndex
    from langchain_fusion.index.hierarchical import HierarchicalIndex
    from langchain_fusion.index.tenant_index import TenantIndex
    from langchain_fusion.ingest.enrichment import ContextualEnricher, with_context
    from langchain_fusion.ingest.loading import LoadResult, SkippedFile, SkippedFileWarning, load_files, split_documents
    from langchain_fusion.ingest.summaries import PageSummarizer
    from langchain_fusion.models.call_reports import LLMReport
    from langchain_fusion.models.chat import default_chat_model, resolve_chat_model
    from langchain_fusion.models.embeddings import LocalEmbeddings, default_embeddings, resolve_embeddings
    from langchain_fusion.models.retries import RetryPolicy
    from langchain_fusion.pipeline.composer import build as build_pipeline
    from langchain_fusion.pipeline.index_spec import IndexSpec
    from langchain_fusion.pipeline.indexing import IndexReport, build_index
    from langchain_fusion.pipeline.spec import PipelineSpec, ServeLimits
    from langchain_fusion.retrievers.cross_encoder import CrossEncoderReranker
    from langchain_fusion.retrievers.fusion import BM25Retriever, FusionRetriever, VectorRetriever
    from langchain_fusion.retrievers.hierarchical import HierarchicalRetriever
    from langchain_fusion.retrievers.multi_query import MultiQueryFusionRetriever
    from langchain_fusion.retrievers.rerank import LLMListwiseReranker, LLMReranker
    from langchain_fusion.retrievers.rerank_retriever import RerankRetriever
    from langchain_fusion.retrievers.vectorstore import VectorStoreFusionRetriever
    from langchain_fusion.retrievers.windows import ContextWindow, ContextWindowRetriever, expand_windows
    from langchain_fusion.search.explain import Explanation
    from langchain_fusion.search.fusion import FusionMethod, fuse
    from langchain_fusion.search.options import HierarchyOptions, SearchOptions
    from langchain_fusion.stores.analyzer import Analyzer
    from langchain_fusion.stores.base import FusionStore, StoreView, Where
    from langchain_fusion.stores.filters import MetadataFilter
    from langchain_fusion.stores.local.store import LocalStore
    from langchain_fusion.stores.settings import BM25Params, StoreSettings

# Public name -> module that defines it. Imported on first use (PEP 562), so that
# `import langchain_fusion.metadata` or the CLI does not pay for chains, LLM and server code.
_EXPORTS: dict[str, str] = {
    "build_rag_chain": "langchain_fusion.chains",
    "format_docs": "langchain_fusion.chains",
    "EmbeddingsMismatchError": "langchain_fusion.errors",
    "FusionError": "langchain_fusion.errors",
    "IndexFormatError": "langchain_fusion.errors",
    "InvalidParameterError": "langchain_fusion.errors",
    "MissingCredentialsError": "langchain_fusion.errors",
    "MissingDependencyError": "langchain_fusion.errors",
    "ModelNotFoundError": "langchain_fusion.errors",
    "UnknownDocumentError": "langchain_fusion.errors",
    "FusionIndex": "langchain_fusion.index.fusion_index",
    "HierarchicalIndex": "langchain_fusion.index.hierarchical",
    "TenantIndex": "langchain_fusion.index.tenant_index",
    "ContextualEnricher": "langchain_fusion.ingest.enrichment",
    "with_context": "langchain_fusion.ingest.enrichment",
    "LoadResult": "langchain_fusion.ingest.loading",
    "SkippedFile": "langchain_fusion.ingest.loading",
    "SkippedFileWarning": "langchain_fusion.ingest.loading",
    "load_files": "langchain_fusion.ingest.loading",
    "split_documents": "langchain_fusion.ingest.loading",
    "PageSummarizer": "langchain_fusion.ingest.summaries",
    "default_chat_model": "langchain_fusion.models.chat",
    "resolve_chat_model": "langchain_fusion.models.chat",
    "LocalEmbeddings": "langchain_fusion.models.embeddings",
    "default_embeddings": "langchain_fusion.models.embeddings",
    "resolve_embeddings": "langchain_fusion.models.embeddings",
    "LLMReport": "langchain_fusion.models.call_reports",
    "RetryPolicy": "langchain_fusion.models.retries",
    "CrossEncoderReranker": "langchain_fusion.retrievers.cross_encoder",
    "BM25Retriever": "langchain_fusion.retrievers.fusion",
    "FusionRetriever": "langchain_fusion.retrievers.fusion",
    "VectorRetriever": "langchain_fusion.retrievers.fusion",
    "HierarchicalRetriever": "langchain_fusion.retrievers.hierarchical",
    "MultiQueryFusionRetriever": "langchain_fusion.retrievers.multi_query",
    "LLMListwiseReranker": "langchain_fusion.retrievers.rerank",
    "LLMReranker": "langchain_fusion.retrievers.rerank",
    "RerankRetriever": "langchain_fusion.retrievers.rerank_retriever",
    "VectorStoreFusionRetriever": "langchain_fusion.retrievers.vectorstore",
    "ContextWindow": "langchain_fusion.retrievers.windows",
    "ContextWindowRetriever": "langchain_fusion.retrievers.windows",
    "expand_windows": "langchain_fusion.retrievers.windows",
    "PipelineSpec": "langchain_fusion.pipeline.spec",
    "ServeLimits": "langchain_fusion.pipeline.spec",
    "build_pipeline": "langchain_fusion.pipeline.composer",
    "IndexSpec": "langchain_fusion.pipeline.index_spec",
    "IndexReport": "langchain_fusion.pipeline.indexing",
    "build_index": "langchain_fusion.pipeline.indexing",
    "SearchOptions": "langchain_fusion.search.options",
    "HierarchyOptions": "langchain_fusion.search.options",
    "Explanation": "langchain_fusion.search.explain",
    "FusionMethod": "langchain_fusion.search.fusion",
    "fuse": "langchain_fusion.search.fusion",
    "Analyzer": "langchain_fusion.stores.analyzer",
    "FusionStore": "langchain_fusion.stores.base",
    "StoreView": "langchain_fusion.stores.base",
    "Where": "langchain_fusion.stores.base",
    "MetadataFilter": "langchain_fusion.stores.filters",
    "LocalStore": "langchain_fusion.stores.local.store",
    "BM25Params": "langchain_fusion.stores.settings",
    "StoreSettings": "langchain_fusion.stores.settings",
}

_ATTRIBUTE = {"build_pipeline": "build"}
"""Public names bound to another name in their module."""

__all__ = [
    "Analyzer",
    "HierarchyOptions",
    "IndexReport",
    "IndexSpec",
    "PipelineSpec",
    "SearchOptions",
    "ServeLimits",
    "__version__",
    "build_index",
    "build_pipeline",
    "BM25Params",
    "BM25Retriever",
    "ContextWindow",
    "ContextWindowRetriever",
    "ContextualEnricher",
    "CrossEncoderReranker",
    "EmbeddingsMismatchError",
    "Explanation",
    "FusionError",
    "FusionIndex",
    "FusionMethod",
    "FusionRetriever",
    "FusionStore",
    "HierarchicalIndex",
    "HierarchicalRetriever",
    "IndexFormatError",
    "InvalidParameterError",
    "LLMListwiseReranker",
    "LLMReport",
    "LLMReranker",
    "LoadResult",
    "LocalEmbeddings",
    "LocalStore",
    "MetadataFilter",
    "MissingCredentialsError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "MultiQueryFusionRetriever",
    "PageSummarizer",
    "RerankRetriever",
    "RetryPolicy",
    "SkippedFile",
    "SkippedFileWarning",
    "StoreSettings",
    "StoreView",
    "TenantIndex",
    "UnknownDocumentError",
    "VectorRetriever",
    "VectorStoreFusionRetriever",
    "Where",
    "build_rag_chain",
    "default_chat_model",
    "default_embeddings",
    "expand_windows",
    "format_docs",
    "fuse",
    "load_files",
    "resolve_chat_model",
    "resolve_embeddings",
    "split_documents",
    "with_context",
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access (and read ``__version__`` the first time it is asked)."""
    if name == "__version__":
        from langchain_fusion._version import library_version

        globals()[name] = version = library_version()
        return version
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'langchain_fusion' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _ATTRIBUTE.get(name, name))
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names, for completion."""
    return sorted(set(globals()) | set(__all__))
