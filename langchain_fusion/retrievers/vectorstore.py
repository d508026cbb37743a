"""Fusing an existing LangChain vector store with BM25 over the same documents.

For users who already built a store (``langchain_community``'s ``FAISS``, core's
``InMemoryVectorStore``, or a store on a cluster: anything with
``similarity_search_with_score``) and want fusion without re-embedding. Results of the two
sides are aligned by document identity (``Document.id``, else text and metadata), never by
list position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr

from langchain_fusion.errors import FusionError
from langchain_fusion.metadata import content_id
from langchain_fusion.retrievers.base import per_call_options
from langchain_fusion.search.options import FusionOptions
from langchain_fusion.search.pool import rank_pool, scored_copy
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.local.bm25 import BM25Corpus
from langchain_fusion.stores.ranking import top_rows
from langchain_fusion.stores.settings import BM25Params

ScoreKind = Literal["auto", "similarity", "distance"]
"""How to read the store's scores: ``similarity`` (higher is better), ``distance`` (lower is
better) or ``auto`` (from the store's ``distance_strategy``; similarity when it has none)."""

_PER_CALL = tuple(FusionOptions.model_fields)
"""The options ``invoke`` takes per call: those of :class:`~langchain_fusion.search.options.FusionOptions`."""

_SIMILARITY_STRATEGIES = frozenset({"MAX_INNER_PRODUCT", "DOT_PRODUCT"})
_UNIT_DISTANCE_STRATEGIES = frozenset({"COSINE", "JACCARD"})


def store_documents(vectorstore: VectorStore) -> list[Document]:
    """All documents held by a store that exposes them (community FAISS, InMemoryVectorStore)."""
    docstore = getattr(vectorstore, "docstore", None)
    order = getattr(vectorstore, "index_to_docstore_id", None)
    if docstore is not None and isinstance(order, dict):
        documents = []
        for position in sorted(order):
            doc_id = order[position]
            found = docstore.search(doc_id)
            if isinstance(found, Document):
                documents.append(
                    Document(id=found.id or doc_id, page_content=found.page_content, metadata=dict(found.metadata))
                )
        return documents
    records = getattr(vectorstore, "store", None)
    if isinstance(records, dict):
        return [
            Document(id=doc_id, page_content=rec["text"], metadata=dict(rec.get("metadata") or {}))
            for doc_id, rec in records.items()
        ]
    raise FusionError(
        f"cannot list the documents of a {type(vectorstore).__name__}: pass documents=[...] "
        "(the same documents the store holds) to VectorStoreFusionRetriever"
    )


def _similarity_converter(vectorstore: VectorStore, kind: ScoreKind) -> tuple[float, float]:
    """(offset, sign) such that similarity = offset + sign * store_score."""
    if kind == "similarity":
        return 0.0, 1.0
    strategy = getattr(vectorstore, "distance_strategy", None)
    name = str(getattr(strategy, "value", strategy) or "").upper()
    if kind == "auto":
        if not name or name in _SIMILARITY_STRATEGIES:
            return 0.0, 1.0
        if name in _UNIT_DISTANCE_STRATEGIES:
            return 1.0, -1.0
        return 0.0, -1.0
    return (1.0, -1.0) if name in _UNIT_DISTANCE_STRATEGIES else (0.0, -1.0)


class VectorStoreFusionRetriever(FusionOptions, BaseRetriever):
    """Fuse any LangChain vector store with BM25 over the same documents.

    The store is asked for ``fetch_k`` results (every document when ``fetch_k`` is None);
    BM25 scores every document exactly. Store scores are converted once, here, to
    similarities (higher is better; distances are negated, or ``1 - d`` for cosine and
    Jaccard distances). A BM25 candidate that the store did not return within ``fetch_k``
    has no observed vector score: it is fused with the lowest similarity the store did
    return (an upper bound of its true one) and reported with ``vector_score`` None. Use
    ``fetch_k=None`` for exact scores on both sides.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    """The store to query; it must hold the same documents as ``documents``."""
    documents: list[Document] = Field(default_factory=list)
    """The BM25 corpus; by default read from the store (community FAISS, InMemoryVectorStore)."""
    score_kind: ScoreKind = "auto"
    """Whether the store returns similarities or distances; ``auto`` reads its distance_strategy."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the store's ``similarity_search_with_score`` (e.g. a filter)."""
    analyzer: Analyzer = Field(default_factory=Analyzer)
    """The BM25 analyzer."""
    bm25_params: BM25Params = Field(default_factory=BM25Params)
    """The BM25 parameters."""

    _bm25: BM25Corpus = PrivateAttr()
    _by_id: dict[str, int] = PrivateAttr()
    _by_content: dict[str, int] = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        """Read the documents from the store if none were given, and build the BM25 side."""
        if not self.documents:
            self.documents = store_documents(self.vectorstore)
        self._bm25 = BM25Corpus([doc.page_content for doc in self.documents], self.analyzer, self.bm25_params)
        self._by_id = {doc.id: row for row, doc in enumerate(self.documents) if doc.id is not None}
        self._by_content = {content_id(doc): row for row, doc in enumerate(self.documents)}

    def _row_of(self, doc: Document) -> int | None:
        if doc.id is not None and doc.id in self._by_id:
            return self._by_id[doc.id]
        return self._by_content.get(content_id(Document(page_content=doc.page_content, metadata=doc.metadata)))

    def _options(self, overrides: dict[str, Any]) -> FusionOptions:
        return FusionOptions.model_construct(**per_call_options(self, _PER_CALL, overrides))

    def _store_k(self, options: FusionOptions) -> int:
        return len(self.documents) if options.fetch_k is None else max(options.fetch_k, options.k)

    def _fuse(self, query: str, results: Sequence[tuple[Document, float]], options: FusionOptions) -> list[Document]:
        alpha, k, fetch_k = options.alpha, options.k, options.fetch_k
        offset, sign = _similarity_converter(self.vectorstore, self.score_kind)
        bm25_all = self._bm25.scores(query).astype(np.float64)
        # Candidates are keyed by row in self.documents; store hits not in the corpus get extra rows.
        extra: list[Document] = []
        observed: dict[int, float] = {}
        for doc, score in results:
            row = self._row_of(doc)
            if row is None:
                row = len(self.documents) + len(extra)
                extra.append(doc)
            observed.setdefault(row, offset + sign * float(score))
        parts = [np.fromiter(observed, dtype=np.int64)] if alpha > 0 else []
        if alpha < 1:
            pool_size = int(np.count_nonzero(bm25_all)) if fetch_k is None else max(fetch_k, k)
            parts.append(top_rows(bm25_all, pool_size, above=0.0))
        pool = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        if pool.size == 0:
            return []
        known = np.array([row in observed for row in pool.tolist()], dtype=bool)
        floor = min(observed.values()) if observed else 0.0
        vector_scores = np.array([observed.get(row, floor) for row in pool.tolist()], dtype=np.float64)
        bm25_scores = np.array([bm25_all[row] if row < bm25_all.size else 0.0 for row in pool.tolist()])
        hits = rank_pool(pool, vector_scores, bm25_scores, options, vector_known=known)
        everything = [*self.documents, *extra]
        return [scored_copy(everything[hit.key], hit, options.method) for hit in hits]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not query.strip() or not self.documents:
            return []
        results = self.vectorstore.similarity_search_with_score(query, k=self._store_k(options), **self.search_kwargs)
        return self._fuse(query, results, options)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        options = self._options(kwargs)
        if not query.strip() or not self.documents:
            return []
        results = await self.vectorstore.asimilarity_search_with_score(
            query, k=self._store_k(options), **self.search_kwargs
        )
        return await run_in_executor(None, self._fuse, query, results, options)
