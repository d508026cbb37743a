"""Hybrid retrieval for LangChain: FAISS vectors and BM25 keywords, fused correctly and fast.

Quick start::

    from langchain_fusion import FusionIndex

    index = FusionIndex.from_files(["report.pdf"])         # bundled local model by default
    retriever = index.as_retriever(k=4, alpha=0.5)           # alpha = weight of the vector side
    docs = retriever.invoke("what failed in July?")          # Documents with score provenance

Context windows, LLM rerank and the RAG chain: :class:`ContextWindowRetriever`,
:class:`LLMReranker`, :func:`build_rag_chain`. Contextual enrichment and hierarchical
(summary -> chunk) retrieval: :class:`ContextualEnricher`, :class:`PageSummarizer`,
:class:`HierarchicalIndex`, :class:`HierarchicalRetriever`. Where the rows live: a
:class:`FusionStore` (the in-process :class:`LocalStore` by default).
"""

from langchain_fusion.chains import build_rag_chain, format_docs
from langchain_fusion.errors import (
    EmbeddingsMismatchError,
    FusionError,
    IndexFormatError,
    InvalidParameterError,
    MissingCredentialsError,
    MissingDependencyError,
    UnknownDocumentError,
)
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HierarchicalIndex
from langchain_fusion.ingest.enrichment import ContextualEnricher, with_context
from langchain_fusion.ingest.loading import LoadResult, SkippedFile, SkippedFileWarning, load_files, split_documents
from langchain_fusion.ingest.summaries import PageSummarizer
from langchain_fusion.models.chat import default_chat_model, resolve_chat_model
from langchain_fusion.models.embeddings import LocalEmbeddings, default_embeddings, resolve_embeddings
from langchain_fusion.models.llm_calls import LLMReport, RetryPolicy
from langchain_fusion.retrievers.fusion import BM25Retriever, FusionRetriever, VectorRetriever
from langchain_fusion.retrievers.hierarchical import HierarchicalRetriever
from langchain_fusion.retrievers.rerank import LLMListwiseReranker, LLMReranker, RerankRetriever
from langchain_fusion.retrievers.vectorstore import VectorStoreFusionRetriever
from langchain_fusion.retrievers.windows import ContextWindow, ContextWindowRetriever, expand_windows
from langchain_fusion.search.fusion import FusionMethod, fuse
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FusionStore, StoreView, Where
from langchain_fusion.stores.filters import MetadataFilter
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.settings import BM25Params, StoreSettings

__all__ = [
    "InvalidParameterError",
    "UnknownDocumentError",
    "Where",
    "StoreView",
    "StoreSettings",
    "LocalStore",
    "FusionStore",
    "Analyzer",
    "BM25Params",
    "BM25Retriever",
    "ContextWindow",
    "ContextWindowRetriever",
    "ContextualEnricher",
    "EmbeddingsMismatchError",
    "FusionError",
    "FusionIndex",
    "FusionMethod",
    "FusionRetriever",
    "HierarchicalIndex",
    "HierarchicalRetriever",
    "IndexFormatError",
    "LLMListwiseReranker",
    "LLMReport",
    "LLMReranker",
    "LoadResult",
    "LocalEmbeddings",
    "MetadataFilter",
    "MissingCredentialsError",
    "MissingDependencyError",
    "PageSummarizer",
    "RerankRetriever",
    "RetryPolicy",
    "SkippedFile",
    "SkippedFileWarning",
    "VectorRetriever",
    "VectorStoreFusionRetriever",
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
