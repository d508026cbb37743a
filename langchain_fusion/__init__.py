"""Hybrid retrieval for LangChain: FAISS vectors and BM25 keywords, fused correctly and fast.

Quick start::

    from langchain_fusion import FusionIndex

    index = FusionIndex.from_files(["report.pdf"])         # bundled local model by default
    retriever = index.as_retriever(k=4, alpha=0.5)           # alpha = weight of the vector side
    docs = retriever.invoke("what failed in July?")          # Documents with score provenance

Context windows, LLM rerank and the RAG chain: :class:`ContextWindowRetriever`,
:class:`LLMReranker`, :func:`build_rag_chain`. Contextual enrichment and hierarchical
(summary -> chunk) retrieval: :class:`ContextualEnricher`, :class:`PageSummarizer`,
:class:`HierarchicalIndex`, :class:`HierarchicalRetriever`.
"""

from langchain_fusion.analyzer import Analyzer
from langchain_fusion.bm25 import BM25Params
from langchain_fusion.chains import build_rag_chain, format_docs
from langchain_fusion.context_window import ContextWindow, ContextWindowRetriever, expand_windows
from langchain_fusion.embeddings import LocalEmbeddings, default_embeddings, resolve_embeddings
from langchain_fusion.enrichment import ContextualEnricher, with_context
from langchain_fusion.errors import (
    EmbeddingsMismatchError,
    FusionError,
    IndexFormatError,
    MissingCredentialsError,
    MissingDependencyError,
)
from langchain_fusion.filters import MetadataFilter
from langchain_fusion.fusion import FusionMethod, fuse
from langchain_fusion.hierarchical import HierarchicalIndex, HierarchicalRetriever, PageSummarizer
from langchain_fusion.index import FusionIndex
from langchain_fusion.ingest import LoadResult, SkippedFile, SkippedFileWarning, load_files, split_documents
from langchain_fusion.llm import default_chat_model, resolve_chat_model
from langchain_fusion.llm_calls import LLMReport, RetryPolicy
from langchain_fusion.rerank import LLMListwiseReranker, LLMReranker, RerankRetriever
from langchain_fusion.retrievers import BM25Retriever, FusionRetriever, VectorRetriever
from langchain_fusion.vectorstore import VectorStoreFusionRetriever

__all__ = [
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
