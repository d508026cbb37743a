"""MilvusStore: the store seam on one Milvus collection (see the package docstring for how it differs)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from langchain_fusion._version import library_version
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.phases import phase
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView
from langchain_fusion.stores.milvus import info, reads, writes
from langchain_fusion.stores.milvus.connection import (
    CONNECT_TIMEOUT,
    MilvusConnection,
    consistency_level,
    require_pymilvus,
)
from langchain_fusion.stores.milvus.schema import (
    LITE_INDEXES,
    CollectionRecord,
    DenseIndex,
    collection_layout,
    create_loaded_collection,
)
from langchain_fusion.stores.milvus.view import MilvusView
from langchain_fusion.stores.settings import BM25Params, StoreSettings
from langchain_fusion.stores.tenants import TenantSet, check_tenant_key

TENANT_SEPARATOR = "__t"
"""What joins a tenant-keyed store's name and a tenant's digest in the name of the tenant's collection."""

SUMMARIES_SUFFIX = "__summaries"
"""``<collection>__summaries`` holds a hierarchical index's page summaries (:meth:`MilvusStore.summaries_store`)."""

logger = logging.getLogger(__name__)


class MilvusStore(FusionStore):
    """Rows in a Milvus collection (Milvus Lite file, standalone server or cluster).

    ``uri`` is a local file (``"./index.db"``, Milvus Lite in process) or a server address
    (``"http://localhost:19530"``); ``connection`` options (``token``, ``db_name``, ...) go to
    pymilvus's ``MilvusClient``. A server that does not answer within ``connect_timeout`` seconds
    is a one-line FusionError naming the URI; each later call may take ``timeout`` seconds.
    An existing collection is reopened with its settings (no re-embedding); ``analyzer``,
    ``bm25_params`` and ``vector_index`` apply to a new one (``vector_index`` and
    ``vector_search_params`` take the in-process store's FAISS names, mapped by
    :class:`~langchain_fusion.stores.milvus.schema.DenseIndex`; Milvus Lite builds only
    :data:`~langchain_fusion.stores.milvus.schema.LITE_INDEXES` and falls back to ``FLAT``
    for others, saying so in one warning). ``consistency`` is the Milvus consistency level of
    queries (see :data:`~langchain_fusion.stores.milvus.connection.CONSISTENCY_LEVELS`).
    :meth:`close` releases the connection.

    With ``tenant_key`` the store is tenant-keyed (:mod:`~langchain_fusion.stores.tenants`): each
    tenant's rows are a collection of their own, ``<collection_name>__t<digest of the tenant>``, so
    Milvus's BM25 statistics are the tenant's; ``collection_name`` itself holds no rows. Reopening
    ``collection_name`` finds its tenants' collections (and their key) by itself. ``share`` gives
    another store whose connection this one uses (one client for many collections).
    """

    def __init__(
        self,
        uri: str,
        collection_name: str,
        *,
        analyzer: Analyzer | None = None,
        bm25_params: BM25Params | None = None,
        vector_index: str | None = None,
        vector_search_params: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = CONNECT_TIMEOUT,
        consistency: str = "Strong",
        tenant_key: str | None = None,
        share: MilvusStore | None = None,
        **connection: Any,
    ) -> None:
        """Connect, and read the collection's settings if it exists."""
        require_pymilvus()
        if bm25_params is not None and bm25_params.method != "lucene":
            raise InvalidParameterError(
                f"Milvus computes the lucene BM25 variant only; got method={bm25_params.method!r}"
            )
        self.collection_name = collection_name
        self.consistency = consistency_level(consistency)
        self.dense = DenseIndex.parse(vector_index, vector_search_params)
        self._requested = vector_index or "Flat"
        self.tenant: str | None = None
        """The tenant whose collection this is, within a tenant-keyed store (None: a store of its own)."""
        self._tenants: TenantSet | None = None
        self.connection: MilvusConnection
        if share is not None:
            self.connection = share.connection
            exists = bool(self.call("has_collection", collection_name=collection_name))
        else:
            self.connection = MilvusConnection(
                uri, timeout=timeout, connect_timeout=connect_timeout, options=dict(connection)
            )
            exists = self.connection.connect(collection_name)
        self._settings = StoreSettings(analyzer=analyzer or Analyzer(), bm25_params=bm25_params or BM25Params())
        self._created = exists
        self.record: CollectionRecord | None = None
        """The collection's version record (None until the collection exists)."""
        self.null_keys = True
        """Whether the collection has the ``null_keys`` field that filters on None read (format 1 on)."""
        if not exists and self.is_lite and self.dense.index_type not in LITE_INDEXES:
            logger.warning(
                "Milvus Lite builds only %s indexes: vector_index %r falls back to exact FLAT (a server builds %s)",
                ", ".join(LITE_INDEXES),
                vector_index,
                self.dense.index_type,
            )
            self.dense = DenseIndex()
        self._info = info.InfoRecord(self)
        self.holds_summaries = False
        """Whether this store holds the page summaries of another (:meth:`summaries_store`)."""
        if exists:
            self._reopen(analyzer, bm25_params, vector_index, vector_search_params)
        if share is None:
            self._find_tenants(tenant_key, vector_search_params)

    # --- tenants ---------------------------------------------------------------------------------

    def _find_tenants(self, tenant_key: str | None, vector_search_params: str | None) -> None:
        """Make this store tenant-keyed when asked, or when the collections of its tenants exist."""
        tenant_key = check_tenant_key(tenant_key)
        found = {} if self._created else self._tenant_collections(vector_search_params)
        if self._created and tenant_key is not None:
            raise FusionError(
                f"collection {self.collection_name!r} is not tenant-keyed: open it without tenant_key, or choose "
                "a new collection_name for a tenant-keyed store"
            )
        if found or tenant_key is not None:
            self._start_tenants(tenant_key, found)

    def tenant_collection(self, tenant: str) -> str:
        """The collection of ``tenant``'s rows (a digest of the tenant: any string names a valid collection)."""
        return f"{self.collection_name}{TENANT_SEPARATOR}{hashlib.sha256(tenant.encode()).hexdigest()[:20]}"

    def _tenant_collections(self, vector_search_params: str | None) -> dict[str, MilvusStore]:
        """The tenants' collections of a tenant-keyed store at this name, by tenant (none: not tenant-keyed)."""
        prefix = f"{self.collection_name}{TENANT_SEPARATOR}"
        names = [str(name) for name in self.call("list_collections") if str(name).startswith(prefix)]
        found: dict[str, MilvusStore] = {}
        for name in names:
            if any(name.endswith(suffix) for suffix in (info.RECORD_SUFFIX, info.INFO_SUFFIX)):
                continue
            store = MilvusStore(self.uri, name, vector_search_params=vector_search_params, share=self)
            if store.record is not None and store.record.tenant is not None:
                store.tenant = store.record.tenant
                found[store.record.tenant] = store
        return found

    def _start_tenants(self, tenant_key: str | None, found: dict[str, MilvusStore]) -> None:
        recorded = {store.settings.tenant_key for store in found.values()}
        if len(recorded) > 1 or (tenant_key is not None and recorded and recorded != {tenant_key}):
            raise FusionError(
                f"the tenants of {self.collection_name!r} are keyed by {sorted(map(str, recorded))}, not "
                f"{tenant_key!r}: open it without tenant_key"
            )
        key = tenant_key or str(next(iter(recorded)))
        settings = next(iter(found.values())).settings if found else self._settings

        def make(tenant: str) -> MilvusStore:
            store = MilvusStore(self.uri, self.tenant_collection(tenant), vector_index=self._requested, share=self)
            store.tenant = tenant
            return store

        self._tenants = TenantSet(key, make, settings, found)

    @property
    def tenant_set(self) -> TenantSet | None:
        """The tenants of a tenant-keyed store (None: one corpus)."""
        return self._tenants

    def tenant_view(self, tenant: str) -> StoreView:
        """A view of ``tenant``'s rows alone (InvalidParameterError on a store that is not tenant-keyed)."""
        return self._keyed(tenant).view(tenant)

    def delete_in(self, tenant: str, ids: Sequence[str]) -> int:
        """Remove ``tenant``'s rows with these ids; unknown ids are ignored."""
        return self._keyed(tenant).delete(ids, tenant)

    def tenants(self) -> list[str]:
        """The tenants that hold rows, sorted (empty when not tenant-keyed)."""
        return [] if self._tenants is None else self._tenants.tenants()

    def _keyed(self, tenant: str) -> TenantSet:
        if self._tenants is None:
            raise InvalidParameterError(f"this index is not tenant-keyed: use it without a tenant; got {tenant!r}")
        return self._tenants

    def _reopen(
        self,
        analyzer: Analyzer | None,
        bm25_params: BM25Params | None,
        vector_index: str | None,
        vector_search_params: str | None,
    ) -> None:
        """Take the settings the existing collection records; refuse options that contradict them."""
        described = self.call("describe_collection", collection_name=self.collection_name)
        self.record = CollectionRecord.read(described, self.collection_name)
        self.record.check(self.collection_name, analyzer=analyzer, bm25_params=bm25_params, vector_index=vector_index)
        self.null_keys = self.record.format >= 1
        self._requested = self.record.requested
        self.dense = DenseIndex.recorded(self.record.dense, vector_search_params)
        self._settings = self.record.settings

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Refused: ``pickle`` and ``copy.deepcopy`` cannot carry a connection to a server."""
        raise FusionError(
            f"the Milvus store of {self.collection_name!r} holds a connection to {self.uri!r} and cannot be pickled "
            f"or deep-copied: open it again where it is needed, MilvusStore({self.uri!r}, {self.collection_name!r}) "
            "(or its location, milvus://...)"
        )

    # --- page summaries -----------------------------------------------------------------------------

    def summaries_store(self) -> MilvusStore:
        """The store of this index's page summaries (a hierarchical index): collection ``<collection>__summaries``.

        It shares this store's connection, analyzer and BM25 parameters, and is tenant-keyed by the same key
        (each tenant's summaries in a collection of their own, ``<collection>__summaries__t<digest>``). It is
        made by its first upsert and dropped with this store (:meth:`drop`).
        """
        settings = self.settings
        store = MilvusStore(
            self.uri,
            self.collection_name + SUMMARIES_SUFFIX,
            analyzer=settings.analyzer,
            bm25_params=settings.bm25_params,
            share=self,
        )
        store.holds_summaries = True
        store._find_tenants(settings.tenant_key, None)
        return store

    # --- the connection --------------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """Where the store connects: a server address or a Milvus Lite file."""
        return self.connection.uri

    @property
    def is_lite(self) -> bool:
        """Whether the store is a Milvus Lite file (one process at a time) rather than a server."""
        return self.connection.is_lite

    @property
    def timeout(self) -> float:
        """Seconds each call may take."""
        return self.connection.timeout

    @property
    def connect_timeout(self) -> float:
        """Seconds to wait for the server's connection (and a health check's answer)."""
        return self.connection.connect_timeout

    @property
    def client(self) -> Any:
        """The pymilvus ``MilvusClient`` (replaceable, e.g. by a test's recorder)."""
        return self.connection.client

    @client.setter
    def client(self, client: Any) -> None:
        self.connection.client = client

    def call(self, method: str, **kwargs: Any) -> Any:
        """``client.method(**kwargs)`` within :attr:`timeout`; a failure is one FusionError naming the collection."""
        return self.connection.call(method, self.collection_name, **kwargs)

    def close(self) -> None:
        """Release the connection (shared with the store's tenants); later calls fail in one line."""
        self.connection.close()

    def check_reachable(self) -> None:
        """A FusionError naming the URI unless the server answers within :attr:`connect_timeout` seconds."""
        try:
            self.call("has_collection", collection_name=self.collection_name, timeout=self.connect_timeout)
        except FusionError as exc:
            raise FusionError(f"Milvus at {self.uri!r} does not answer: {exc}") from None

    # --- settings --------------------------------------------------------------------------------

    @property
    def settings(self) -> StoreSettings:
        """How the rows were (or will be) indexed."""
        return self._settings if self._tenants is None else self._tenants.settings

    @property
    def vector_index(self) -> str:
        """The dense index as built (or to be built), e.g. ``FLAT`` or ``HNSW M=32 efConstruction=128, ef=128``."""
        return self.dense.describe()

    def configure(self, settings: StoreSettings) -> None:
        """Record the settings; refused once the collection exists with other ones."""
        if self._tenants is not None:
            self._tenants.configure(settings)
            return
        if self._created and settings.model_copy(update={"dimension": self._settings.dimension}) != self._settings:
            raise FusionError(f"collection {self.collection_name!r} holds rows indexed with other settings")
        if settings.bm25_params.method != "lucene":
            raise InvalidParameterError("Milvus computes the lucene BM25 variant only")
        self._settings = settings.model_copy(update={"dimension": self._settings.dimension})

    def _create(self, dimension: int) -> None:
        settings = self._settings.model_copy(update={"dimension": dimension})
        dense = {**self.dense.record(), "requested": self._requested}
        record = CollectionRecord(settings, dense, library_version(), tenant=self.tenant)
        schema, index = collection_layout(self.client, record)
        create_loaded_collection(self.call, self.collection_name, schema, index, self.timeout)
        self._settings, self._created, self.record = settings, True, record

    @property
    def exists(self) -> bool:
        """Whether the collection exists (it is created by the first upsert; tenant-keyed: a tenant's is)."""
        if self._tenants is not None:
            return any(isinstance(s, MilvusStore) and s.exists for s in self._tenants.stores.values())
        return bool(self._created)

    def drop(self) -> None:
        """Delete the collection (tenant-keyed: every tenant's), its record and its page summaries (irreversible)."""
        if not self.holds_summaries and self.tenant is None:
            self.summaries_store().drop()
        stores = [] if self._tenants is None else list(self._tenants.stores.values())
        tenants = [s.collection_name for s in stores if isinstance(s, MilvusStore)]
        for name in (self.collection_name, *tenants, *info.side_collections(self.collection_name)):
            if self.call("has_collection", collection_name=name):
                self.call("drop_collection", collection_name=name)
        self._created, self.record, self._info = False, None, info.InfoRecord(self)
        self._settings = StoreSettings(analyzer=self._settings.analyzer, bm25_params=self._settings.bm25_params)

    # --- the info record -------------------------------------------------------------------------

    def read_info(self) -> dict[str, Any]:
        """The record kept beside the collection (``{}`` if none; see :mod:`~langchain_fusion.stores.milvus.info`)."""
        return self._info.read()

    def write_info(self, record: Mapping[str, Any]) -> None:
        """Make the record ``record`` (JSON-able), writing only the entries that changed since it was read.

        Entries another writer added since are kept (two ``index`` runs never tear each other's record).
        """
        self._info.write(record)

    def write_info_entry(self, path: Sequence[str], value: Any) -> None:
        """Write one entry of the record now, e.g. ``("files", "by_path", "a.pdf")`` (``None`` deletes it)."""
        self._info.write_entry(tuple(path), value)

    # --- the seam ------------------------------------------------------------------------------------

    def view(self) -> StoreView:
        """A view: searches and reads by id at the store's consistency level (tenant-keyed: listing only)."""
        if self._tenants is not None:
            return self._tenants.union_view()
        return MilvusView(self)

    def upsert(self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]) -> None:
        """Upsert rows (never insert: Milvus keeps duplicate keys on insert); tenant-keyed: each tenant's, in turn."""
        if not documents:
            return
        if self._tenants is not None:
            self._tenants.upsert(documents, vectors, bm25_texts)
            return
        writes.check_ids(documents, self.is_lite)
        dimension = int(vectors.shape[1])
        if self._settings.dimension is not None and self._settings.dimension != dimension:
            raise FusionError(f"expected vectors of dimension {self._settings.dimension}; got {dimension}")
        with phase("bm25"):  # our analyzer's tokens, which Milvus indexes as they are
            data = writes.columns(documents, vectors, bm25_texts, self._settings.analyzer, self.null_keys)
        with phase("store"):
            if not self._created:
                self._create(dimension)
            writes.upsert(self, data)

    def delete(self, ids: Sequence[str]) -> int:
        """Delete rows by id (tenant-keyed: of every tenant); returns how many existed."""
        if self._tenants is not None:
            return self._tenants.delete(ids)
        if not self._created or not ids:
            return 0
        return writes.delete(self, ids)

    def clear(self) -> int:
        """Delete every row with one delete by expression (the collection, its settings and record stay)."""
        if self._tenants is not None:
            return sum(store.clear() for store in self._tenants.stores.values())
        if not self._created:
            return 0
        return writes.clear(self)

    def count(self, expression: str = "") -> int:
        """Rows in the collection (those matching the Milvus ``expression`` when one is given)."""
        if not self._created:
            return 0
        return reads.count_rows(self, expression)

    def read_all(self, expression: str, fields: list[str]) -> list[Any]:
        """Every row matching ``expression`` ('' for all), checked against a count: a short read is an error."""
        if not self._created:
            return []
        return reads.read_all(self, expression, fields)
