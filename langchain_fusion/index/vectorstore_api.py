"""LangChain's ``VectorStore`` interface over an index: texts in, deletes, documents by id, vector-side searches.

:class:`VectorStoreAPI` is the part of :class:`~langchain_fusion.index.fusion_index.FusionIndex` that
LangChain's ``VectorStore`` asks for beyond ``add_documents``: ``add_texts``, ``delete``,
``get_by_ids``, ``similarity_search*`` and ``max_marginal_relevance_search*``. The searches use the
vector side alone, with the same store view and the same MMR as the fused search
(``as_retriever(search_type="mmr", alpha=1)``), and return copies of the documents (no score
metadata) as LangChain's stores do. On a tenant-keyed index each takes ``tenant=`` (required by
the searches), so LangChain's indexing API and vector-store code can be scoped to one tenant.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from langchain_fusion._checks import check_k, check_no_extra, check_positive_int
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.index.documents import plain_copy
from langchain_fusion.search.diversity import check_lambda_mult
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView, Where
from langchain_fusion.stores.filters import check_filter
from langchain_fusion.stores.tenants import check_tenant, scoped


class VectorStoreAPI(VectorStore):
    """``add_texts``, ``delete``, ``get_by_ids``, ``similarity_search*`` and ``max_marginal_relevance_search*``."""

    store: FusionStore
    """Where the rows live."""

    def returned(self, doc: Document) -> Document:
        """The copy of a stored document the ``VectorStore`` methods return (no score metadata)."""
        return plain_copy(doc)

    @abstractmethod
    def view(self, tenant: str | None = None) -> StoreView:
        """A read view: of ``tenant``'s rows alone when given, else of every row."""

    @abstractmethod
    def search_view(self, tenant: str | None) -> StoreView:
        """The view a search reads (a tenant-keyed index needs its tenant)."""

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Index plain texts with optional metadata and ids (upsert by id); returns the ids.

        ``progress`` and ``batch_size`` are those of ``add_documents``.
        """
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise InvalidParameterError(f"got {len(metadatas)} metadatas for {len(texts)} texts; give one per text")
        documents = [
            Document(page_content=t, metadata=dict(metadatas[i]) if metadatas else {}) for i, t in enumerate(texts)
        ]
        return self.add_documents(documents, ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, *, tenant: str | None = None, **kwargs: Any) -> bool:
        """Remove the documents with these ids from every side (LangChain's ``VectorStore.delete``).

        Unknown ids are ignored; ``ids=None`` deletes every document (of ``tenant``, when given).
        On a tenant-keyed index, ``tenant`` limits the delete to that tenant's documents (ids are
        scoped by tenant); without it, the ids go from every tenant. Returns True. Use
        ``remove`` to be told about unknown ids and how many documents went.
        """
        check_no_extra("FusionIndex.delete", kwargs)
        if isinstance(ids, str):
            raise InvalidParameterError(f"delete takes a list of ids; got the string {ids!r}")
        if tenant is not None:
            tenant = check_tenant(tenant)
            assert tenant is not None
            ids = [doc.id or "" for doc in self.view(tenant).iter_documents()] if ids is None else ids
            scoped(self.store, tenant).delete_in(tenant, list(ids))
        elif ids is None:
            self.store.clear()
        else:
            self.store.delete(list(ids))
        return True

    @abstractmethod
    def embed_query(self, query: str) -> FloatMatrix:
        """The query's normalised embedding as a 1 x dimension matrix."""

    @abstractmethod
    def query_matrix(self, embedding: Sequence[float]) -> FloatMatrix:
        """An embedding given by the caller, normalised, as a 1 x dimension matrix."""

    def get_by_ids(self, ids: Sequence[str], *, tenant: str | None = None) -> list[Document]:
        """Copies of the documents with these ids, in the given order; unknown ids are skipped.

        On a tenant-keyed index, ``tenant`` reads only that tenant's documents.
        """
        view = self.view(check_tenant(tenant))
        found = view.keys_of(list(ids))
        return [self.returned(doc) for doc in view.documents(found[found >= 0])]

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
        self,
        query_vector: Callable[[], FloatMatrix],
        k: int,
        *,
        filter: Any = None,
        tenant: str | None = None,
        **kwargs: Any,
    ) -> list[tuple[Document, float]]:
        """The search of the ``similarity_search*`` methods (``query_vector`` is asked for when there are rows)."""
        check_no_extra("FusionIndex.similarity_search", kwargs)
        k = check_k(k)
        view = self.search_view(check_tenant(tenant))
        if view.known_empty():
            return []
        where = None if filter is None else Where(metadata=check_filter(filter))
        keys, scores = view.vector(query_vector()).top(k, where)
        return [(self.returned(doc), float(s)) for doc, s in zip(view.documents(keys), scores, strict=True)]

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
        tenant: str | None = None,
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
        view = self.search_view(check_tenant(tenant))
        if view.known_empty():
            return []
        hits = fused_search(view, query_scorers(view, "", query_vector()), options)
        keys = np.fromiter((hit.key for hit in hits), dtype=np.int64, count=len(hits))
        return [self.returned(doc) for doc in view.documents(keys)]


def cosine_relevance(similarity: float) -> float:
    """A cosine similarity in [-1, 1] as LangChain's relevance in [0, 1]."""
    return min(1.0, max(0.0, (1.0 + similarity) / 2.0))
