"""LangChain's vector-store reads: documents by id, and searches of the vector side alone (similarity, MMR).

:class:`VectorSideSearches` is the part of :class:`~langchain_fusion.index.fusion_index.FusionIndex`
that LangChain's ``VectorStore`` interface asks for beyond adding and deleting: the same store
view and the same MMR as the fused search (``as_retriever(search_type="mmr", alpha=1)``), returning
copies of the documents (no score metadata) as LangChain's stores do.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from langchain_fusion._checks import check_k, check_no_extra, check_positive_int
from langchain_fusion.index.documents import plain_copy
from langchain_fusion.search.diversity import check_lambda_mult
from langchain_fusion.stores.base import FloatMatrix, FusionStore, Where
from langchain_fusion.stores.filters import check_filter


class VectorSideSearches(VectorStore):
    """``get_by_ids``, ``similarity_search*`` and ``max_marginal_relevance_search*`` over a store."""

    store: FusionStore
    """Where the rows live."""

    @abstractmethod
    def embed_query(self, query: str) -> FloatMatrix:
        """The query's normalised embedding as a 1 x dimension matrix."""

    @abstractmethod
    def query_matrix(self, embedding: Sequence[float]) -> FloatMatrix:
        """An embedding given by the caller, normalised, as a 1 x dimension matrix."""

    def get_by_ids(self, ids: Sequence[str]) -> list[Document]:
        """Copies of the documents with these ids, in the given order; unknown ids are skipped."""
        view = self.store.view()
        found = view.keys_of(list(ids))
        return [doc.model_copy(deep=True) for doc in view.documents(found[found >= 0])]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents most similar to ``query`` on the vector side (copies, no score metadata)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """(document, cosine similarity) pairs, best first; ``filter=`` restricts the documents."""
        return self._with_score(lambda: self.embed_query(query), k, **kwargs)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents most similar to an embedding."""
        return [doc for doc, _ in self.similarity_search_with_score_by_vector(embedding, k, **kwargs)]

    def similarity_search_with_score_by_vector(
        self, embedding: Sequence[float], k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(document, cosine similarity) pairs for an embedding, best first."""
        return self._with_score(lambda: self.query_matrix(embedding), k, **kwargs)

    def _with_score(
        self, query_vector: Callable[[], FloatMatrix], k: int, *, filter: Any = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The search of the ``similarity_search*`` methods (``query_vector`` is asked for when there are rows)."""
        check_no_extra("FusionIndex.similarity_search", kwargs)
        k = check_k(k)
        view = self.store.view()
        if view.known_empty():
            return []
        where = None if filter is None else Where(metadata=check_filter(filter))
        keys, scores = view.vector(query_vector()).top(k, where)
        return [(plain_copy(doc), float(s)) for doc, s in zip(view.documents(keys), scores, strict=True)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return cosine_relevance

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Maximal marginal relevance over the ``fetch_k`` most similar documents (diverse results).

        The vector side of ``as_retriever(search_type="mmr", alpha=1)``: the same MMR (see
        :mod:`~langchain_fusion.search.diversity`), with relevance the candidates' cosine
        similarity min-max scaled over them; returns plain copies (no score metadata).
        """
        return self._mmr(lambda: self.embed_query(query), k, fetch_k, lambda_mult, **kwargs)

    def max_marginal_relevance_search_by_vector(
        self, embedding: list[float], k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """MMR for an embedding: relevance to the query traded against similarity to what was picked."""
        return self._mmr(lambda: self.query_matrix(embedding), k, fetch_k, lambda_mult, **kwargs)

    def _mmr(
        self,
        query_vector: Callable[[], FloatMatrix],
        k: int,
        fetch_k: int,
        lambda_mult: float,
        *,
        filter: Any = None,
        **kwargs: Any,
    ) -> list[Document]:
        """The search of the ``max_marginal_relevance_search*`` methods (``query_vector``: see :meth:`_with_score`)."""
        from langchain_fusion.search.options import PoolOptions
        from langchain_fusion.search.pool import fused_search, query_scorers

        check_no_extra("FusionIndex.max_marginal_relevance_search", kwargs)
        options = PoolOptions.model_construct(
            k=check_k(k),
            alpha=1.0,  # the vector side alone: BM25 has no weight (and no text to score)
            fetch_k=check_positive_int(fetch_k, "fetch_k"),
            filter=None if filter is None else check_filter(filter),
            lambda_mult=check_lambda_mult(lambda_mult, optional=False),
            duplicates="keep",  # LangChain's searches return every copy
        )
        view = self.store.view()
        if view.known_empty():
            return []
        hits = fused_search(view, query_scorers(view, "", query_vector()), options)
        keys = np.fromiter((hit.key for hit in hits), dtype=np.int64, count=len(hits))
        return [plain_copy(doc) for doc in view.documents(keys)]


def cosine_relevance(similarity: float) -> float:
    """A cosine similarity in [-1, 1] as LangChain's relevance in [0, 1]."""
    return min(1.0, max(0.0, (1.0 + similarity) / 2.0))
