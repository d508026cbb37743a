"""LangChain retrievers over a FusionIndex: vector-only, BM25-only and fused.

All three follow LangChain's conventions: ``invoke``/``ainvoke``/``batch``, ``k`` at
construction and per call (``invoke(query, k=3)``), callbacks and tracing through
``BaseRetriever``, and their fields work with ``configurable_fields``. They return copies of
the indexed documents with the score provenance of :mod:`langchain_fusion.metadata`.
Their option fields are :mod:`langchain_fusion.search.options`' (a ``FusionRetriever`` is a
:class:`~langchain_fusion.search.options.SearchOptions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.errors import InvalidParameterError, UnknownDocumentError
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.retrievers.base import PreparedQuery, SearchRetriever
from langchain_fusion.search.explain import Explanation, SearchRecord, explain
from langchain_fusion.search.options import (
    FilterOption,
    FusionOptions,
    HierarchicalSearchOptions,
    PoolOptions,
    ResultsOption,
    SearchOptions,
    TenantOption,
)
from langchain_fusion.search.pool import (
    QueryScorers,
    SearchTrace,
    batch_reach,
    bm25_scorers,
    bm25_search,
    contender_scores,
    fused_search,
    hits_to_documents,
    queries_per_pass,
    query_scorers,
    vector_scorers,
    vector_search,
)
from langchain_fusion.search.relevance import with_relevance
from langchain_fusion.stores.base import BatchScorer, ConcurrentSides, FloatMatrix, StoreView, Where

__all__ = ["BM25Retriever", "FusionRetriever", "SearchRetriever", "VectorRetriever", "vector_unread"]


BATCH_QUERIES = 1024
"""Queries of a batch prepared in one pass over an in-process view (embedded together, vectors read once)."""


class SideOptions(FilterOption, TenantOption, ResultsOption):
    """The options of a single-side search: how many results, and which documents it may return."""


IndexOptionsT = TypeVar("IndexOptionsT", bound=TenantOption)
"""The options of a retriever over one index (they name the tenant searched on a tenant-keyed index)."""


class _IndexRetriever(SearchRetriever[IndexOptionsT]):
    """What the retrievers over one FusionIndex share: the index, batches scored in one pass."""

    index: FusionIndex
    """The index to search."""

    def _embedder(self) -> FusionIndex:
        return self.index

    def _view(self, options: IndexOptionsT) -> StoreView:
        """The view a search with ``options`` reads (the tenant's, on a tenant-keyed index; refused without one)."""
        return self.index.search_view(options.tenant)

    def _is_empty(self, options: IndexOptionsT) -> bool:
        return self._view(options).known_empty()

    def _batch_step(self, options: IndexOptionsT | None) -> int:
        view = self.index.view(self.tenant if isinstance(self, TenantOption) else None)
        if not isinstance(view, BatchScorer):
            return super()._batch_step(options)
        if options is None:
            return BATCH_QUERIES  # nothing is prepared: each invoke reports the bad option itself
        # A view that scores a batch in one pass keeps per query its vector contenders (about `depth` rows), and its
        # score arrays only while the query runs (PreparedQuery.release).
        depth, _ = self._vector_reach(options)
        return min(BATCH_QUERIES, queries_per_pass(contender_scores(len(view), depth)))

    def _vector_reach(self, options: IndexOptionsT) -> tuple[int | None, Where | None]:
        """How deep a batch's vector pass goes for ``options``, and under which filter (None: every row's score)."""
        return batch_reach([options]) if isinstance(options, PoolOptions) else (None, None)

    def _prepared_runs_inline(self, prepared: Mapping[tuple[int, str], PreparedQuery]) -> bool:
        # A view that scores a batch in one pass is in process; one whose sides search side by side (a graph
        # search on each query, a server) has waits that a pool overlaps.
        view = next(iter(prepared.values())).view
        return isinstance(view, BatchScorer) and not (
            isinstance(view, ConcurrentSides) and view.sides_in_parallel(None)
        )

    def _score_many(self, texts: list[str], vectors: FloatMatrix | None, options: IndexOptionsT) -> list[PreparedQuery]:
        view = self._view(options)
        bm25 = bm25_scorers(view, texts)
        if vectors is None:
            return [PreparedQuery(None, view, bm25=side) for side in bm25]
        if isinstance(options, FusionOptions) and options.fetch_k is None:
            # The whole corpus is normalised with the scan's float32 scores, whose last bits depend on the
            # kernel: each query keeps its own scan, so a batch returns exactly what invoke returns.
            vector = [view.vector(vectors[i : i + 1]) for i in range(len(texts))]
        else:
            vector = vector_scorers(view, vectors, *self._vector_reach(options))
        return [PreparedQuery(vectors[i : i + 1], view, vector=vector[i], bm25=bm25[i]) for i in range(len(texts))]


def _where(options: FilterOption) -> Where | None:
    return None if options.filter is None else Where(metadata=options.filter)


class VectorRetriever(SideOptions, _IndexRetriever[SideOptions]):
    """Dense retrieval only: cosine similarity over the index's vector side.

    Returned documents carry ``vector_score`` and ``vector_rank``. Options: ``k`` and ``filter``.
    """

    @classmethod
    def options_model(cls) -> type[SideOptions]:
        """:class:`SideOptions`."""
        return SideOptions

    def _vector_reach(self, options: SideOptions) -> tuple[int | None, Where | None]:
        return options.k, _where(options)  # vector_search reads its top k, no row past it

    def _score_many(self, texts: list[str], vectors: FloatMatrix | None, options: SideOptions) -> list[PreparedQuery]:
        assert vectors is not None
        view = self._view(options)
        vector = vector_scorers(view, vectors, *self._vector_reach(options))
        return [PreparedQuery(vectors[i : i + 1], view, vector=vector[i]) for i in range(len(texts))]

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: SideOptions,
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        assert query_vector is not None
        view = prepared.view if prepared is not None and prepared.view is not None else self._view(options)
        scorer = prepared.vector if prepared is not None else None
        hits = vector_search(view, query_vector, options.k, _where(options), scorer=scorer)
        return hits_to_documents(view, hits)


class BM25Retriever(SideOptions, _IndexRetriever[SideOptions]):
    """Keyword retrieval only: BM25 over the index's analyzer; never embeds the query.

    Only documents that contain at least one query term are returned. Returned documents
    carry ``bm25_score`` and ``bm25_rank``. Options: ``k`` and ``filter``.
    """

    @classmethod
    def options_model(cls) -> type[SideOptions]:
        """:class:`SideOptions`."""
        return SideOptions

    def _needs_vector(self, options: SideOptions) -> bool:
        return False

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: SideOptions,
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        view = prepared.view if prepared is not None and prepared.view is not None else self._view(options)
        scorer = prepared.bm25 if prepared is not None else None
        return hits_to_documents(view, bm25_search(view, query, options.k, _where(options), scorer=scorer))


class FusionRetriever(SearchOptions, _IndexRetriever[SearchOptions]):
    """Hybrid retrieval: vector and BM25 scores normalised and fused per document.

    For every candidate found by either side, the other side's real score is looked up by
    row. ``alpha`` is the weight of the vector side (1 = pure vector, 0 = pure BM25).
    Relevance floors leave out candidates no side finds relevant, so a query may get fewer
    than ``k`` results, or none; maximal marginal relevance and a cap per source spread the
    results. Its options are the fields of
    :class:`~langchain_fusion.search.options.SearchOptions`; each can be set here, per call
    (``invoke(q, k=3, alpha=0.7)``) or through ``configurable_fields``. Returned documents
    carry the full score provenance, and on a calibrated index (:meth:`FusionIndex.calibrate`)
    their relevance, which ``min_relevance`` floors.
    """

    @classmethod
    def options_model(cls) -> type[SearchOptions]:
        """:class:`~langchain_fusion.search.options.SearchOptions`."""
        return SearchOptions

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: SearchOptions,
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        assert query_vector is not None
        view = self._view(options)
        unread = vector_unread(self.index, query, options)
        if prepared is not None and prepared.view is not None and prepared.vector and prepared.bm25:
            view = prepared.view
            scorers = QueryScorers(prepared.vector, prepared.bm25, unread)
        else:
            scorers = query_scorers(view, query, query_vector, unread)
        documents = self._fused(view, scorers, options)
        return with_relevance(documents, self.index.relevance_model, options.min_relevance)

    def _fused(
        self, view: StoreView, scorers: QueryScorers, options: SearchOptions, trace: SearchTrace | None = None
    ) -> list[Document]:
        """The fused results on ``view`` before the ``min_relevance`` floor (``trace``: filled by the search)."""
        return hits_to_documents(view, fused_search(view, scorers, options, trace), options.method)

    def explain(self, query: str, document: str | Document, **options: Any) -> Explanation:
        """Where ``document`` (a chunk's id, or the chunk) ends up when this retriever searches ``query``, and why.

        ``options`` override the retriever's search options for this call, as ``invoke``'s do.
        The search is the one ``invoke`` runs (same code, same view), recorded on the way, so
        the verdict agrees with what ``invoke`` returns: "returned" at ``rank`` exactly when
        ``invoke(query, **options)`` holds the document at that rank. See
        :class:`~langchain_fusion.search.explain.Explanation` for the verdicts. An id that is not
        in the index is an :class:`~langchain_fusion.errors.UnknownDocumentError`.
        """
        resolved = self._options(options)
        if not self._checked_query(query).strip():
            raise InvalidParameterError("the query is empty: give the words or question to search for")
        doc_id = document.id if isinstance(document, Document) else document
        if not isinstance(doc_id, str) or not doc_id:
            raise InvalidParameterError(
                f"explain needs a document id (a string) or a Document with one; got {doc_id!r}"
            )
        view = self._view(resolved)  # a tenant's: another tenant's id is as unknown as any
        key = int(view.keys_of([doc_id])[0])
        if key < 0:
            raise UnknownDocumentError(unknown_id_message(view, doc_id))
        scorers = query_scorers(view, query, self.index.embed_query(query), vector_unread(self.index, query, resolved))
        trace = SearchTrace()
        scored = self._fused(view, scorers, resolved, trace)
        returned = with_relevance(list(scored), self.index.relevance_model, resolved.min_relevance)
        return explain(SearchRecord(view, scorers, trace, scored, returned, resolved), query, doc_id, key)


def vector_unread(index: FusionIndex, query: str, options: PoolOptions | HierarchicalSearchOptions) -> str | None:
    """Why the vector side gets no weight for ``query`` under ``options`` (the model cannot read it), or None.

    Only a search that fuses (``0 < alpha < 1``) asks: vector only and BM25 only never need a probe.
    """
    if not 0 < options.alpha < 1:
        return None
    unread = index.unread(query, options.unread_queries)
    return None if unread is None else str(unread)


def unknown_id_message(view: StoreView, doc_id: str) -> str:
    """Why ``doc_id`` is not a document of ``view``, and what to give instead (a chunk id when it names a source)."""
    chunks = view.documents(view.select(Where(metadata={keys.SOURCE: doc_id}))[:3])
    if chunks:
        shown = ", ".join(repr(d.id) for d in chunks)
        return f"no document with id {doc_id!r}; it is a source: give the id of one of its chunks (such as {shown})"
    return f"no document with id {doc_id!r} in the index; ids are Document.id of each chunk (see query --json)"
