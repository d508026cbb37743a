"""HierarchicalRetriever: summaries first, then the best chunks of the selected pages.

The chunk search is **restricted to the chunks of the selected pages** (a restriction applied
to both sides before ranking), so a selected page always yields up to ``k`` chunks, unlike a
post-filter of a global top-n, which returns fewer or none. Each chunk's score combines both
levels::

    hierarchical_score = summary_weight * summary_score + (1 - summary_weight) * fusion_score

where ``summary_score`` is the fused score of the chunk's summary among the summary candidates
and ``fusion_score`` the chunk's fused score among the chunks of the selected pages (both with
the retriever's ``alpha`` and ``method``). Results are one global top ``k`` by that score.
"""

from __future__ import annotations

import numpy as np
from langchain_core.documents import Document

from langchain_fusion import metadata as keys
from langchain_fusion.index.fusion_index import FusionIndex
from langchain_fusion.index.hierarchical import HIERARCHICAL_KIND, HierarchicalIndex
from langchain_fusion.retrievers.base import PreparedQuery, SearchRetriever
from langchain_fusion.search.diversity import pick_in_order
from langchain_fusion.search.duplicates import copies_entry, copies_of, duplicate_groups
from langchain_fusion.search.options import HierarchicalSearchOptions, PoolOptions
from langchain_fusion.search.pool import Hit, fused_search, query_scorers, scored_copy
from langchain_fusion.search.relevance import with_relevance
from langchain_fusion.stores.base import FloatMatrix, StoreView, Where


class HierarchicalRetriever(HierarchicalSearchOptions, SearchRetriever[HierarchicalSearchOptions]):
    """Summaries first, then the best chunks of the selected pages; one global top ``k``.

    For a query: the ``k_summaries`` best summaries by fused score; the chunks of their pages;
    a fused search of the chunks restricted to those (both sides, before ranking); each chunk
    scored ``summary_weight * summary_score + (1 - summary_weight) * fusion_score``; the ``k``
    best. A chunk covered by several selected summaries counts once, under the best-ranked one.
    Returned chunks carry the usual score provenance plus
    :data:`~langchain_fusion.metadata.HIERARCHICAL_KEYS`. ``alpha`` and ``method`` apply to both
    searches and default to :class:`~langchain_fusion.retrievers.fusion.FusionRetriever`'s;
    ``fetch_k`` is the summary search's pool (the chunk search always considers every chunk of
    the selected pages). Every field can be overridden per call (``invoke(q, k=3, k_summaries=1)``).

    With ``alpha=0`` (BM25 only), only chunks containing a query term are candidates, as with
    the BM25 retriever. ``filter`` restricts the chunks, and the summaries to those covering a
    matching chunk. ``duplicates`` returns copies of one text once, as fused search does (the best
    chunk by the combined score, its copies in ``also_in``).

    On an index calibrated for hierarchical search (:meth:`HierarchicalIndex.calibrate
    <langchain_fusion.index.hierarchical.HierarchicalIndex.calibrate>`) every result carries its
    ``relevance`` and ``min_relevance`` leaves out those below it; without that calibration a
    floor is an error (the chunk index's own flat calibration does not apply to these ranks).
    """

    index: HierarchicalIndex
    """The summary and chunk indexes."""

    @classmethod
    def options_model(cls) -> type[HierarchicalSearchOptions]:
        """:class:`~langchain_fusion.search.options.HierarchicalSearchOptions`."""
        return HierarchicalSearchOptions

    def _embedder(self) -> FusionIndex:
        return self.index.chunks

    def _is_empty(self, options: HierarchicalSearchOptions) -> bool:
        tenant = options.tenant
        return (
            self.index.chunks.search_view(tenant).known_empty()
            or self.index.summaries.search_view(tenant).known_empty()
        )

    def _search(
        self,
        query: str,
        query_vector: FloatMatrix | None,
        options: HierarchicalSearchOptions,
        prepared: PreparedQuery | None = None,
    ) -> list[Document]:
        ranked = self._ranked(query, query_vector, options)
        return with_relevance(ranked, self.index.relevance_model, options.min_relevance, HIERARCHICAL_KIND)

    def _ranked(
        self, query: str, query_vector: FloatMatrix | None, options: HierarchicalSearchOptions
    ) -> list[Document]:
        """The hierarchical results before the ``min_relevance`` floor."""
        # A batch prepares the embeddings only: the two indexes are scored per query.
        assert query_vector is not None
        tenant = options.tenant  # on a tenant-keyed index, both levels are that tenant's alone
        chunks, summaries = self.index.chunks.search_view(tenant), self.index.summaries.search_view(tenant)
        spec = options.filter
        covering = None
        if spec is not None:
            matching = chunks.documents(chunks.select(Where(metadata=spec)))
            allowed_ids = {doc.id for doc in matching}
            covering = frozenset(
                doc.id or ""
                for doc in summaries.iter_documents()
                if any(i in allowed_ids for i in doc.metadata[keys.SUMMARY_CHUNK_IDS])
            )
        method, alpha = options.method, options.alpha
        evidence = self.index.chunks.reads(query)
        # Both searches are plain fused searches: every copy kept (duplicates are collapsed by the combined score).
        summary_options = PoolOptions.model_construct(
            k=options.k_summaries, alpha=alpha, fetch_k=options.fetch_k, method=method, duplicates="keep"
        )
        summary_scorers = query_scorers(summaries, query, query_vector, evidence)
        summary_hits = fused_search(summaries, summary_scorers, summary_options, within=covering)
        summary_docs = summaries.documents(np.fromiter((h.key for h in summary_hits), np.int64, len(summary_hits)))
        leader: dict[str, tuple[int, Hit, Document]] = {}
        for rank, (summary, summary_doc) in enumerate(zip(summary_hits, summary_docs, strict=True), 1):
            for chunk_id in summary_doc.metadata[keys.SUMMARY_CHUNK_IDS]:
                leader.setdefault(chunk_id, (rank, summary, summary_doc))  # the best-ranked summary leads
        selected = frozenset(leader)
        allowed = int(chunks.select(Where(metadata=spec, ids=selected)).size)
        if allowed == 0:
            return []
        # k and fetch_k = every allowed row: the pool is every chunk of the selected pages (on the vector
        # side; with alpha=0, those containing a query term), and only those rows are scored.
        chunk_options = PoolOptions.model_construct(
            k=allowed, alpha=alpha, fetch_k=allowed, method=method, filter=spec, duplicates="keep"
        )
        chunk_scorers = query_scorers(chunks, query, query_vector, evidence)
        chunk_hits = fused_search(chunks, chunk_scorers, chunk_options, within=selected)
        chunk_docs = chunks.documents(np.fromiter((h.key for h in chunk_hits), np.int64, len(chunk_hits)))
        weight = options.summary_weight
        scored = []
        for hit, chunk_doc in zip(chunk_hits, chunk_docs, strict=True):
            rank, summary, summary_doc = leader[chunk_doc.id or ""]
            combined = weight * float(summary.fused or 0.0) + (1 - weight) * float(hit.fused or 0.0)
            scored.append((combined, rank, summary, summary_doc, hit, chunk_doc))
        scored.sort(key=lambda s: (-s[0], s[1], -(s[4].fused or 0.0), s[4].key))
        chosen, copies = _first_copies(chunks, [s[4].key for s in scored], [s[5] for s in scored], options)
        results = []
        for position, others in zip(chosen, copies, strict=True):
            combined, rank, summary, summary_doc, hit, chunk_doc = scored[position]
            doc = scored_copy(chunk_doc, hit, method)
            doc.metadata[keys.HIERARCHICAL_SCORE] = combined
            doc.metadata[keys.SUMMARY_ID] = summary_doc.id
            doc.metadata[keys.SUMMARY_SCORE] = summary.fused
            doc.metadata[keys.SUMMARY_RANK] = rank
            if others:
                doc.metadata[keys.ALSO_IN] = [copies_entry(scored[i][5]) for i in others]
            results.append(doc)
        return results


def _first_copies(
    view: StoreView, chunk_keys: list[int], documents: list[Document], options: HierarchicalSearchOptions
) -> tuple[list[int], list[list[int]]]:
    """The positions of the ``k`` results among ranked chunks, copies collapsed, and each one's copies' positions."""
    k = options.k
    if not options.collapses_copies:
        return list(range(min(k, len(documents)))), [[] for _ in documents[:k]]
    vectors = view.vectors(np.asarray(chunk_keys, dtype=np.int64)) if options.copies_by_vector else None
    groups = duplicate_groups([doc.page_content for doc in documents], vectors, options.near_duplicate_similarity)
    chosen = pick_in_order(len(documents), k, copies=groups).positions
    return chosen.tolist(), copies_of(groups, chosen)
