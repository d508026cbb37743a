"""Tenants: one store holding many tenants' rows, each tenant searched as if its rows were the whole store.

A tenant-keyed store (``tenant_key``, recorded in its :class:`~langchain_fusion.stores.settings.StoreSettings`)
keeps each tenant's rows in a store of their own (:class:`TenantSet`): a tenant's BM25 statistics (document
count, document frequencies, average length), its vector side and every key of its view are its own, so a
search of one tenant is, by construction, the search of an index built from that tenant's documents alone,
and reaches no row of another tenant. Each document's tenant is ``metadata[tenant_key]`` (a string, or an
integer read as its decimal string); a batch with a document without one is refused whole.

Document ids are scoped by tenant: two tenants may each hold a document ``"doc-1"``. Reads and writes given a
tenant touch only that tenant; a view without one (:class:`UnionView`) lists every tenant's rows for
administration (counts, documents, ids) and refuses to search: a search names its tenant.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, Protocol, runtime_checkable

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys
from langchain_fusion._checks import is_whole_number
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.stores.base import FloatMatrix, FusionStore, IdsBySource, Keys, SideScorer, StoreView, Where
from langchain_fusion.stores.settings import StoreSettings
from langchain_fusion.threads import CopiesWithoutLock

LOCAL_KEY_BITS = 40
"""Bits of a union view's key that hold the key within its tenant's view (the rest: the tenant's ordinal)."""

SEARCH_NEEDS_TENANT = (
    "this index is tenant-keyed: every search names its tenant (tenant=...); a search across tenants is refused"
)
"""Why a view of every tenant does not search."""


def check_tenant_key(value: Any) -> str | None:
    """A tenant key: the metadata key that holds each document's tenant (None: not tenant-keyed)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise InvalidParameterError(
            f"tenant_key must be the metadata key that holds each document's tenant, e.g. 'tenant'; got {value!r}"
        )
    return value


def check_tenant(value: Any) -> str | None:
    """A tenant: a non-empty string, or a whole number read as its decimal string (None: no tenant)."""
    if value is None:
        return None
    if is_whole_number(value):
        return str(int(value))
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(f"tenant must be a non-empty string (or a whole number); got {value!r}")
    return value


def tenant_of(document: Document, tenant_key: str, position: int) -> str:
    """The tenant of ``document`` (document ``position`` of its batch); InvalidParameterError when it has none."""
    value = document.metadata.get(tenant_key)
    try:
        tenant = check_tenant(value)
    except InvalidParameterError:
        tenant = None
    if tenant is None:
        raise InvalidParameterError(
            f"document {position} of this batch ({document.id!r}) has no tenant: this index is tenant-keyed, so "
            f"every document needs metadata[{tenant_key!r}] (a non-empty string); got {value!r}. Nothing of the "
            "batch was added"
        )
    return tenant


@runtime_checkable
class StagedWrites(Protocol):
    """Optional capability of a store: a write prepared first and made visible later, so several publish at once."""

    def staged_upsert(
        self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]
    ) -> Callable[[], None]:
        """The upsert prepared (nothing visible yet); calling the result makes it visible.

        Nothing else may write to the store in between.
        """
        ...

    def staged_delete(self, ids: Sequence[str]) -> tuple[int, Callable[[], None]]:
        """How many rows the delete removes, and what makes it visible (see :meth:`staged_upsert`)."""
        ...


@runtime_checkable
class TenantScoped(Protocol):
    """Optional capability of a store: it can be tenant-keyed (its ``settings.tenant_key`` says whether it is)."""

    def tenant_view(self, tenant: str) -> StoreView:
        """A view of ``tenant``'s rows alone (an empty one for a tenant without rows)."""
        ...

    def delete_in(self, tenant: str, ids: Sequence[str]) -> int:
        """Remove ``tenant``'s rows with these ids; returns how many went."""
        ...

    def tenants(self) -> list[str]:
        """The tenants that hold rows, sorted."""
        ...


def scoped(store: FusionStore, tenant: str) -> TenantScoped:
    """``store`` as a tenant-keyed store; InvalidParameterError when it is not one."""
    if store.settings.tenant_key is None or not isinstance(store, TenantScoped):
        raise InvalidParameterError(f"this index is not tenant-keyed: use it without a tenant; got tenant={tenant!r}")
    return store


class TenantSet(CopiesWithoutLock):
    """The tenants of a tenant-keyed store: one store each, made alike; see the module docstring.

    ``make`` makes an empty store with the shared settings (the engine's own kind: in process, or a
    collection of a server). Writes that span tenants are all or nothing where the tenants' stores
    stage their writes (:class:`StagedWrites`, the in-process store); otherwise tenant by tenant.
    """

    def __init__(
        self,
        tenant_key: str,
        make: Callable[[str], FusionStore],
        settings: StoreSettings,
        stores: Mapping[str, FusionStore] | None = None,
    ) -> None:
        self.tenant_key = check_tenant_key(tenant_key) or ""
        """The metadata key that holds each document's tenant."""
        self._make = make
        self._settings = settings.model_copy(update={"tenant_key": self.tenant_key})
        self._stores: dict[str, FusionStore] = dict(stores or {})
        self._lock = threading.Lock()

    @property
    def settings(self) -> StoreSettings:
        """The settings every tenant's store shares (with ``tenant_key``)."""
        return self._settings

    @property
    def stores(self) -> Mapping[str, FusionStore]:
        """Each tenant's store, by tenant (a copy: the set may change)."""
        return dict(self._stores)

    def configure(self, settings: StoreSettings) -> None:
        """Record the settings in every tenant's store (and the stores made later)."""
        settings = settings.model_copy(update={"tenant_key": self.tenant_key})
        with self._lock:
            for store in self._stores.values():
                store.configure(settings.model_copy(update={"dimension": store.settings.dimension}))
            self._settings = settings

    def view(self, tenant: str) -> StoreView:
        """A view of ``tenant``'s rows alone (empty for a tenant with none)."""
        store = self._stores.get(tenant)
        if store is None:
            return _EmptyView(self._settings)
        return store.view()

    def union_view(self) -> UnionView:
        """A view of every tenant's rows, for listing; it refuses to search."""
        stores = self._stores
        return UnionView(self._settings, {tenant: stores[tenant].view() for tenant in sorted(stores)})

    def tenants(self) -> list[str]:
        """The tenants that hold rows, sorted."""
        return sorted(tenant for tenant, store in self._stores.items() if len(store.view()))

    def restore(self, stores: Mapping[str, FusionStore]) -> None:
        """Hold these tenants' stores (a tenant-keyed store read back from its saved form)."""
        with self._lock:
            self._stores = dict(stores)

    def upsert(self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]) -> None:
        """Insert each document into its tenant's store (replacing that tenant's row with the same id)."""
        groups: dict[str, list[int]] = {}
        for position, document in enumerate(documents):
            groups.setdefault(tenant_of(document, self.tenant_key, position), []).append(position)
        with self._lock:
            stores = {tenant: self._store(tenant) for tenant in groups}
            parts = [
                (stores[tenant], [documents[i] for i in rows], vectors[rows], [bm25_texts[i] for i in rows])
                for tenant, rows in groups.items()
            ]
            staging = [store for store, *_ in parts if isinstance(store, StagedWrites)]
            if len(staging) == len(parts):  # all prepared first, then all published: all or nothing
                publish = [
                    store.staged_upsert(docs, vecs, texts)
                    for store, (_, docs, vecs, texts) in zip(staging, parts, strict=True)
                ]
                for step in publish:
                    step()
            else:
                for store, docs, vecs, texts in parts:
                    store.upsert(docs, vecs, texts)
            self._stores = {**self._stores, **stores}  # a new mapping: readers iterate the one they took
            if self._settings.dimension is None and len(documents):
                self._settings = self._settings.model_copy(update={"dimension": int(vectors.shape[1])})

    def delete(self, ids: Sequence[str], tenant: str | None = None) -> int:
        """Remove the rows with these ids from ``tenant`` (None: from every tenant); returns how many went."""
        with self._lock:
            if tenant is None:
                stores = list(self._stores.values())
            else:
                stores = [self._stores[tenant]] if tenant in self._stores else []
            staging = [store for store in stores if isinstance(store, StagedWrites)]
            if len(staging) == len(stores):
                staged = [store.staged_delete(ids) for store in staging]
                for _, publish in staged:
                    publish()
                return sum(removed for removed, _ in staged)
            return sum(store.delete(ids) for store in stores)

    def _store(self, tenant: str) -> FusionStore:
        store = self._stores.get(tenant)
        if store is None:
            store = self._make(tenant)
            store.configure(self._settings)
        return store


class _EmptyView(StoreView):
    """The view of a tenant with no rows: every search finds nothing."""

    def __init__(self, settings: StoreSettings) -> None:
        self._settings = settings

    @property
    def settings(self) -> StoreSettings:
        """The shared settings."""
        return self._settings

    def __len__(self) -> int:
        return 0

    def vector(self, query_vector: FloatMatrix) -> SideScorer:
        """Never called: a search of an empty view returns before scoring."""
        return _NoRows()

    def bm25(self, query: str) -> SideScorer:
        """Never called: a search of an empty view returns before scoring."""
        return _NoRows()

    def documents(self, keys: Keys) -> list[Document]:
        """No documents."""
        return []

    def vectors(self, keys: Keys) -> FloatMatrix:
        """No vectors."""
        return np.zeros((0, self._settings.dimension or 0), dtype=np.float32)

    def keys_of(self, ids: Sequence[str]) -> Keys:
        """Every id is absent."""
        return np.full(len(ids), -1, dtype=np.int64)

    def select(self, where: Where) -> Keys:
        """No rows."""
        return np.zeros(0, dtype=np.int64)

    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """No chunks."""
        return {}

    def iter_documents(self) -> Iterator[Document]:
        """No documents."""
        return iter(())


class _NoRows:
    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Any]:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)

    def scores(self, keys: Keys) -> Any:
        return np.zeros(len(keys), dtype=np.float64)


class UnionView(StoreView):
    """Every tenant's rows, for listing and administration: a key is the tenant's ordinal and its key within it.

    It counts, lists and reads documents, ids and vectors; it refuses to search (a search names its tenant).
    """

    def __init__(self, settings: StoreSettings, views: Mapping[str, StoreView]) -> None:
        self._settings = settings
        self._views = list(views.values())
        self.tenants = list(views)
        """The tenants, in the order of their ordinals."""

    @property
    def settings(self) -> StoreSettings:
        """The shared settings."""
        return self._settings

    def __len__(self) -> int:
        return sum(len(view) for view in self._views)

    def known_empty(self) -> bool:
        """True when every tenant's view is known to be empty."""
        return all(view.known_empty() for view in self._views)

    def mask_capable(self) -> bool:
        """Whether every tenant's view takes callables as filters."""
        return all(view.mask_capable() for view in self._views)

    def vector(self, query_vector: FloatMatrix) -> SideScorer:
        """Refused: a search names its tenant."""
        raise FusionError(SEARCH_NEEDS_TENANT)

    def bm25(self, query: str) -> SideScorer:
        """Refused: a search names its tenant."""
        raise FusionError(SEARCH_NEEDS_TENANT)

    def _split(self, keys: Keys) -> list[tuple[int, NDArray[np.int64], Keys]]:
        """(ordinal, positions in ``keys``, local keys) for each tenant that ``keys`` name."""
        keys = np.asarray(keys, dtype=np.int64)
        ordinals = keys >> LOCAL_KEY_BITS
        local = keys & ((1 << LOCAL_KEY_BITS) - 1)
        return [(int(o), (where := np.flatnonzero(ordinals == o)), local[where]) for o in np.unique(ordinals)]

    def documents(self, keys: Keys) -> list[Document]:
        """The documents of ``keys``, in order."""
        found: list[Document | None] = [None] * len(keys)
        for ordinal, positions, local in self._split(keys):
            for position, document in zip(positions.tolist(), self._views[ordinal].documents(local), strict=True):
                found[position] = document
        return [document for document in found if document is not None]

    def ids(self, keys: Keys) -> list[str]:
        """The ids of ``keys``, in order."""
        found = [""] * len(keys)
        for ordinal, positions, local in self._split(keys):
            for position, doc_id in zip(positions.tolist(), self._views[ordinal].ids(local), strict=True):
                found[position] = doc_id
        return found

    def vectors(self, keys: Keys) -> FloatMatrix:
        """The stored vectors of ``keys``, in order."""
        out = np.zeros((len(keys), self._settings.dimension or 0), dtype=np.float32)
        for ordinal, positions, local in self._split(keys):
            out[positions] = self._views[ordinal].vectors(local)
        return out

    def keys_of(self, ids: Sequence[str]) -> Keys:
        """The key of each id in the first tenant (by ordinal) that holds it; -1 where none does."""
        keys = np.full(len(ids), -1, dtype=np.int64)
        for ordinal, view in enumerate(self._views):
            missing = np.flatnonzero(keys < 0)
            if missing.size == 0:
                break
            local = view.keys_of([ids[i] for i in missing.tolist()])
            hit = local >= 0
            keys[missing[hit]] = (ordinal << LOCAL_KEY_BITS) | local[hit]
        return keys

    def select(self, where: Where) -> Keys:
        """Every allowed row of every tenant, ascending."""
        parts = [(ordinal << LOCAL_KEY_BITS) | view.select(where) for ordinal, view in enumerate(self._views)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """Refused: a source's chunks belong to one tenant, so their view is that tenant's."""
        raise FusionError(SEARCH_NEEDS_TENANT)

    def iter_documents(self) -> Iterator[Document]:
        """Every tenant's documents, tenant by tenant."""
        return chain.from_iterable(view.iter_documents() for view in self._views)

    def ids_by_source(self) -> dict[str, set[str]]:
        """Every row's id under its source, over every tenant."""
        table: dict[str, set[str]] = {}
        for view in self._views:
            if isinstance(view, IdsBySource):
                part = view.ids_by_source()
            else:
                part = {}
                for doc in view.iter_documents():
                    part.setdefault(str(doc.metadata.get(keys.SOURCE, "")), set()).add(doc.id or "")
            for source, ids in part.items():
                table.setdefault(source, set()).update(ids)
        return table
