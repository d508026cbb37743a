"""One tenant of a tenant-keyed index, as a LangChain ``VectorStore`` of its own: :meth:`FusionIndex.for_tenant`.

Everything goes to the shared index with the tenant bound: documents added get the tenant
(a document of another tenant is refused), deletes, reads and searches touch that tenant only.
So code written for one ``VectorStore`` (LangChain's indexing API with a record manager per
tenant, a retriever factory, a chain) serves one tenant of a shared index unchanged. Its
``VectorStore`` methods (``similarity_search*``, ``max_marginal_relevance_search*``,
``get_by_ids``) return documents without the tenant key, as they were added; the fused
retriever's documents keep it beside the other provenance metadata.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.index.documents import plain_copy
from langchain_fusion.index.vectorstore_api import VectorStoreAPI
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView
from langchain_fusion.stores.tenants import check_tenant

if TYPE_CHECKING:
    from langchain_fusion.index.fusion_index import FusionIndex
    from langchain_fusion.retrievers.fusion import FusionRetriever
    from langchain_fusion.search.explain import Explanation


class TenantIndex(VectorStoreAPI):
    """A tenant-keyed :class:`FusionIndex` seen as one tenant's index (made by ``index.for_tenant(tenant)``)."""

    def __init__(self, index: FusionIndex, tenant: str) -> None:
        self.index = index
        """The shared, tenant-keyed index."""
        self.tenant = check_tenant(tenant) or ""
        """The tenant bound."""
        index.view(self.tenant)  # an index that is not tenant-keyed is refused now
        self.store: FusionStore = index.store

    def returned(self, doc: Document) -> Document:
        """A copy of a stored document without the tenant key (every document here is the tenant's)."""
        return plain_copy(doc, without=self.index.tenant_key)

    @property
    def embeddings(self) -> Embeddings:
        """The shared index's embedding model."""
        return self.index.embeddings

    def view(self, tenant: str | None = None) -> StoreView:
        """The tenant's read view (another tenant is refused)."""
        return self.index.view(self._own(tenant))

    def search_view(self, tenant: str | None) -> StoreView:
        """The tenant's read view, for a search."""
        return self.index.view(self._own(tenant))

    def _own(self, tenant: str | None) -> str:
        asked = check_tenant(tenant)
        if asked is not None and asked != self.tenant:
            raise InvalidParameterError(f"this is tenant {self.tenant!r}'s index; got tenant={asked!r}")
        return self.tenant

    def __len__(self) -> int:
        return len(self.view())

    @property
    def documents(self) -> tuple[Document, ...]:
        """The tenant's documents (shared objects: do not modify them)."""
        return tuple(self.view().iter_documents())

    def add_documents(self, documents: Iterable[Document], **kwargs: Any) -> list[str]:
        """Add the tenant's documents (each given the tenant; one of another tenant is refused, nothing added)."""
        key = self.index.tenant_key or ""
        stamped = []
        for position, doc in enumerate(documents):
            own = check_tenant(doc.metadata.get(key)) if doc.metadata.get(key) is not None else None
            if own is not None and own != self.tenant:
                raise InvalidParameterError(
                    f"document {position} of this batch belongs to tenant {own!r}, not {self.tenant!r}: nothing "
                    "was added"
                )
            stamped.append(doc.model_copy(update={"metadata": {**doc.metadata, key: self.tenant}}))
        return self.index.add_documents(stamped, **kwargs)

    def upsert_documents(self, documents: Iterable[Document], **kwargs: Any) -> list[str]:
        """The same as :meth:`add_documents`."""
        return self.add_documents(documents, **kwargs)

    def delete(self, ids: list[str] | None = None, *, tenant: str | None = None, **kwargs: Any) -> bool:
        """Remove the tenant's documents with these ids (all of them with ``ids=None``)."""
        return self.index.delete(ids, tenant=self._own(tenant), **kwargs)

    def remove(self, ids: Sequence[str]) -> int:
        """Remove the tenant's documents by id; UnknownDocumentError (nothing removed) if one is not the tenant's."""
        return self.index.remove(ids, tenant=self.tenant)

    def embed_query(self, query: str) -> FloatMatrix:
        """The query's normalised embedding."""
        return self.index.embed_query(query)

    def query_matrix(self, embedding: Sequence[float]) -> FloatMatrix:
        """An embedding given by the caller, normalised."""
        return self.index.query_matrix(embedding)

    def as_retriever(self, **kwargs: Any) -> FusionRetriever:  # type: ignore[override]
        """The fused retriever of the shared index, bound to the tenant (see ``FusionIndex.as_retriever``)."""
        return self.index.as_retriever(tenant=self._own(kwargs.pop("tenant", None)), **kwargs)

    def explain(self, query: str, document: str | Document, **options: Any) -> Explanation:
        """Why ``document`` is or is not a result of the tenant's search for ``query`` (see ``FusionIndex.explain``)."""
        return self.index.explain(query, document, tenant=self._own(options.pop("tenant", None)), **options)

    @classmethod
    def from_texts(
        cls, texts: list[str], embedding: Embeddings, metadatas: list[dict[str, Any]] | None = None, **kwargs: Any
    ) -> TenantIndex:
        """Not available: a tenant's index is made from a shared one (``FusionIndex.for_tenant``)."""
        raise InvalidParameterError("a TenantIndex is one tenant of a shared index: use index.for_tenant(tenant)")
