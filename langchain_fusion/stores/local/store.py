"""The in-process store: FAISS-compatible unit vectors and BM25 postings, row-aligned, in snapshots.

The reference implementation of the store seam and the default engine. Writers are serialised
by a lock and publish a new immutable :class:`~langchain_fusion.stores.local.snapshot.Snapshot`;
readers take the current snapshot without any lock, so queries run while another thread adds,
deletes or saves, and each sees the store entirely before or entirely after a mutation.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from langchain_core.documents import Document

from langchain_fusion.errors import FusionError, IndexFormatError, InvalidParameterError
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView
from langchain_fusion.stores.local import folder as fmt
from langchain_fusion.stores.local import saving, snapshot_folder, tenant_folder
from langchain_fusion.stores.local.manifest import read_manifest
from langchain_fusion.stores.local.mutations import compacted, deleted, maintained, upserted
from langchain_fusion.stores.local.snapshot import Snapshot, empty_snapshot
from langchain_fusion.stores.local.vectors import check_vector_index
from langchain_fusion.stores.local.view import LocalView
from langchain_fusion.stores.settings import BM25Params, StoreSettings
from langchain_fusion.stores.tenants import TenantSet, check_tenant_key

logger = logging.getLogger(__name__)


class LocalStore(FusionStore):
    """Rows in this process: exact vector scans (optionally FAISS ANN candidates) and BM25 postings.

    ``vector_index`` is a FAISS factory string: ``"Flat"`` (the default) scans every vector
    exactly; e.g. ``"HNSW32"`` or ``"IVF1024,Flat"`` proposes candidates from an approximate
    index on segments of at least a few thousand rows (their exact scores still come from the
    stored vectors). ``vector_search_params`` tunes it (``"efSearch=128"``, ``"nprobe=16"``,
    ``"efConstruction=200,efSearch=128"`` for a graph built wider).

    With ``tenant_key``, the store is tenant-keyed (:mod:`~langchain_fusion.stores.tenants`): each
    tenant's rows (``metadata[tenant_key]``) are a store of their own, searched through
    :meth:`tenant_view`; :meth:`view` then lists every tenant's rows and refuses to search.
    """

    def __init__(
        self,
        analyzer: Analyzer | None = None,
        bm25_params: BM25Params | None = None,
        *,
        vector_index: str = "Flat",
        vector_search_params: str | None = None,
        tenant_key: str | None = None,
    ) -> None:
        """Create an empty store (tenant-keyed with ``tenant_key``)."""
        if not isinstance(vector_index, str) or not vector_index.strip():
            raise InvalidParameterError(
                f"vector_index must be a FAISS factory string such as 'Flat'; got {vector_index!r}"
            )
        if vector_search_params is not None and not isinstance(vector_search_params, str):
            raise InvalidParameterError(f"vector_search_params must be a string or None; got {vector_search_params!r}")
        if analyzer is not None and not isinstance(analyzer, Analyzer):
            raise InvalidParameterError(f"analyzer must be an Analyzer; got {type(analyzer).__name__}")
        if bm25_params is not None and not isinstance(bm25_params, BM25Params):
            raise InvalidParameterError(f"bm25_params must be a BM25Params; got {type(bm25_params).__name__}")
        check_vector_index(vector_index, vector_search_params)
        settings = StoreSettings(analyzer=analyzer or Analyzer(), bm25_params=bm25_params or BM25Params())
        self._write_lock = threading.Lock()
        self._snapshot = empty_snapshot(settings, vector_index, vector_search_params)
        self._tenants = None if check_tenant_key(tenant_key) is None else self._tenant_set(str(tenant_key))

    def _tenant_set(self, tenant_key: str) -> TenantSet:
        """The tenants of a tenant-keyed store: each an in-process store with this store's settings."""
        make = functools.partial(_tenant_store, self.vector_index, self.vector_search_params)
        return TenantSet(tenant_key, make, self._snapshot.settings)

    @property
    def tenant_set(self) -> TenantSet | None:
        """The tenants of a tenant-keyed store (None: one corpus)."""
        return self._tenants

    def tenants(self) -> list[str]:
        """The tenants that hold rows, sorted (empty when not tenant-keyed)."""
        return [] if self._tenants is None else self._tenants.tenants()

    def tenant_view(self, tenant: str) -> StoreView:
        """A view of ``tenant``'s rows alone (InvalidParameterError on a store that is not tenant-keyed)."""
        return self._keyed(tenant).view(tenant)

    def delete_in(self, tenant: str, ids: Sequence[str]) -> int:
        """Remove ``tenant``'s rows with these ids; unknown ids are ignored. All or nothing."""
        return self._keyed(tenant).delete(ids, tenant)

    def _keyed(self, tenant: str) -> TenantSet:
        if self._tenants is None:
            raise InvalidParameterError(f"this index is not tenant-keyed: use it without a tenant; got {tenant!r}")
        return self._tenants

    def __getstate__(self) -> dict[str, Any]:
        """The store for ``pickle`` and ``copy.deepcopy``: snapshot and tenants, not the lock (a copy gets its own)."""
        return {"_snapshot": self._snapshot, "_tenants": self._tenants}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._write_lock = threading.Lock()
        self._snapshot = state["_snapshot"]
        self._tenants = state.get("_tenants")

    # --- the seam ------------------------------------------------------------------------------

    @property
    def settings(self) -> StoreSettings:
        """How the rows were (or will be) indexed."""
        return self._snapshot.settings if self._tenants is None else self._tenants.settings

    @property
    def vector_index(self) -> str:
        """The FAISS factory string (``Flat``: exact search only)."""
        return self._snapshot.vector_index

    @property
    def vector_search_params(self) -> str | None:
        """FAISS search parameters of the approximate index."""
        return self._snapshot.vector_search_params

    def configure(self, settings: StoreSettings) -> None:
        """Record the index's settings; only the embeddings id may be filled in once rows exist."""
        if self._tenants is not None:
            self._tenants.configure(settings)
            return
        with self._write_lock:
            current = self._snapshot
            if (
                current.size
                and settings.model_copy(update={"dimension": current.settings.dimension}) != current.settings
            ):
                raise FusionError("the store already holds rows indexed with other settings; use a new store")
            self._snapshot = _replace_settings(
                current, settings.model_copy(update={"dimension": current.settings.dimension})
            )

    def view(self) -> StoreView:
        """The current snapshot, for reading (tenant-keyed: every tenant's rows, for listing: :meth:`tenant_view`)."""
        if self._tenants is not None:
            return self._tenants.union_view()
        return LocalView(self.snapshot)

    @property
    def snapshot(self) -> Snapshot:
        """The current immutable snapshot; IndexFormatError if files it maps changed on disk since loading."""
        if self._tenants is not None:
            raise FusionError("a tenant-keyed store keeps a snapshot per tenant: read them through tenant_view")
        snapshot = self._snapshot
        if snapshot.mapped is not None:
            snapshot.mapped.check()
        return snapshot

    def upsert(self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]) -> None:
        """Add rows, replacing live rows with the same ids; all or nothing."""
        if not (len(documents) == vectors.shape[0] == len(bm25_texts)):
            raise FusionError(
                f"upsert needs one vector and one text per document; got {len(documents)} documents, "
                f"{vectors.shape[0]} vectors, {len(bm25_texts)} texts"
            )
        if self._tenants is not None:
            self._tenants.upsert(documents, vectors, bm25_texts)
            return
        with self._write_lock:
            self._snapshot = upserted(self.snapshot, documents, vectors, bm25_texts)

    def delete(self, ids: Sequence[str]) -> int:
        """Remove the rows with these ids (every tenant's, when tenant-keyed), ignoring unknown ids; all or nothing."""
        if self._tenants is not None:
            return self._tenants.delete(ids)
        with self._write_lock:
            self._snapshot, removed = deleted(self.snapshot, ids)
        return removed

    def staged_upsert(
        self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]
    ) -> Callable[[], None]:
        """The upsert prepared on the current snapshot; the result publishes it (``stores.tenants.StagedWrites``)."""
        base = self.snapshot
        return partial(self._publish, base, upserted(base, documents, vectors, bm25_texts))

    def staged_delete(self, ids: Sequence[str]) -> tuple[int, Callable[[], None]]:
        """The delete prepared on the current snapshot: rows removed, and what publishes it."""
        base = self.snapshot
        new, removed = deleted(base, ids)
        return removed, partial(self._publish, base, new)

    def _publish(self, base: Snapshot, new: Snapshot) -> None:
        with self._write_lock:
            if self._snapshot is not base:
                raise FusionError("the store changed while a write to it was prepared; write through one store")
            self._snapshot = new

    def compact(self) -> None:
        """Rewrite the rows into one segment without tombstones (saves do this on their copy)."""
        if self._tenants is not None:
            for store in self._tenants.stores.values():
                if isinstance(store, LocalStore):
                    store.compact()
            return
        with self._write_lock:
            self._snapshot = maintained(compacted(self.snapshot))

    # --- the folder format -----------------------------------------------------------------------

    def save(self, folder: Path, extra: dict[str, Any] | None = None) -> Path:
        """Save the current snapshot to ``folder`` atomically (see :mod:`~langchain_fusion.stores.local.saving`)."""
        return saving.save_folder(folder, self.writer(extra or {}))

    def writer(self, extra: dict[str, Any]) -> Callable[[Path], None]:
        """What writes the current state into a folder (``extra`` in its manifest); the state is taken now."""
        if self._tenants is not None:
            snapshots = {
                tenant: store.snapshot
                for tenant, store in self._tenants.stores.items()
                if isinstance(store, LocalStore) and store.snapshot.live_count
            }
            keyed = self._tenants
            saved = tenant_folder.TenantFolder(
                keyed.tenant_key, keyed.settings, self.vector_index, self.vector_search_params, snapshots
            )
            return tenant_folder.writer(saved, extra)
        snapshot = self.snapshot  # a consistent state, whatever writers do meanwhile
        return lambda staging: snapshot_folder.write_snapshot(snapshot, staging, extra)

    @classmethod
    def load(
        cls, folder: Path, analyzer: Analyzer | None = None, *, lock: bool = True
    ) -> tuple[LocalStore, dict[str, Any]]:
        """Read a store saved by :meth:`save`; returns it and the manifest.

        An index built with a custom :class:`Analyzer` subclass needs an instance of that class
        as ``analyzer`` (its configuration must match the manifest's). The folder is read under
        a shared lock (``lock``), so a save to the same path waits instead of swapping files
        under the reader; a caller that already holds the lock of an enclosing folder passes False.
        """
        saving.recover(folder)
        try:
            with saving.load_lock(folder) if lock else contextlib.nullcontext():
                return cls.read_unlocked(folder, analyzer)
        except OSError as exc:
            raise IndexFormatError(f"cannot read the index at {folder}: {exc.strerror or exc}") from None

    @classmethod
    def read_unlocked(cls, folder: Path, analyzer: Analyzer | None) -> tuple[LocalStore, dict[str, Any]]:
        """:meth:`load` without the lock (the caller holds it, or that of an enclosing folder) or recovery."""
        manifest = read_manifest(folder)
        if isinstance(manifest, dict) and manifest.get("format") == tenant_folder.FORMAT_NAME:
            saved = tenant_folder.read(folder, manifest, analyzer)
            store = cls(
                vector_index=saved.vector_index,
                vector_search_params=saved.vector_search_params,
                tenant_key=saved.tenant_key,
            )
            assert store.tenant_set is not None
            store.configure(saved.settings)
            store.tenant_set.restore({tenant: cls.over(snapshot) for tenant, snapshot in saved.snapshots.items()})
            return store, manifest
        if isinstance(manifest, dict) and manifest.get("format") == fmt.HIERARCHICAL_FORMAT_NAME:
            raise IndexFormatError(
                f"{folder} is a hierarchical index (page summaries and chunks): load it with "
                "HierarchicalIndex.load, or its chunks/ folder with FusionIndex.load"
            )
        snapshot, manifest = snapshot_folder.read_folder(folder, manifest, analyzer)
        return cls.over(snapshot), manifest

    @classmethod
    def over(cls, snapshot: Snapshot) -> LocalStore:
        """A store whose current state is ``snapshot`` (one read back from a folder)."""
        store = cls.__new__(cls)
        store._write_lock = threading.Lock()
        store._snapshot = snapshot
        store._tenants = None
        return store


def _replace_settings(snapshot: Snapshot, settings: StoreSettings) -> Snapshot:
    return replace(snapshot, settings=settings)


def _tenant_store(vector_index: str, vector_search_params: str | None, tenant: str) -> LocalStore:
    """An empty store for one tenant of a tenant-keyed store (a module function: the set pickles)."""
    return LocalStore(vector_index=vector_index, vector_search_params=vector_search_params)
