"""FusionIndex: documents embedded and indexed for both sides, kept in one store.

The index owns the embedding model and what each side indexes of a document; the rows live in
a :class:`~langchain_fusion.stores.base.FusionStore` (in process by default). Every mutation is
all or nothing on every side, embedding happens before the store is touched (never under a
lock), and queries read an immutable view, so they may overlap with writes from other threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion._checks import check_no_extra, check_positive_int
from langchain_fusion.errors import EmbeddingsMismatchError, FusionError, InvalidParameterError, UnknownDocumentError
from langchain_fusion.index.documents import prepared_documents
from langchain_fusion.index.embedding import DEFAULT_EMBEDDING_BATCH_SIZE, IndexEmbedder, model_for_store
from langchain_fusion.index.retrieval import FusedRetrieval
from langchain_fusion.index.vectorstore_api import VectorStoreAPI
from langchain_fusion.ingest.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_CHARS,
    load_files,
    split_documents,
)
from langchain_fusion.metadata import DEFAULT_TEXT_FIELDS, TextField, check_text_fields, indexed_text
from langchain_fusion.models.embeddings import chunk_bound, default_embeddings
from langchain_fusion.progress import ProgressCallback
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY, SavedModel
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView
from langchain_fusion.stores.local.manifest import saved_index_reason
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.settings import BM25Params
from langchain_fusion.stores.tenants import SEARCH_NEEDS_TENANT, TenantScoped, check_tenant, check_tenant_key, scoped

if TYPE_CHECKING:
    from langchain_fusion.index.tenant_index import TenantIndex

__all__ = ["DEFAULT_EMBEDDING_BATCH_SIZE", "FusionIndex", "file_chunks"]


class FusionIndex(FusedRetrieval, VectorStoreAPI):
    """Chunks indexed for both dense (vector) and keyword (BM25) retrieval, in one store.

    Build one with :meth:`from_documents` or :meth:`from_files`, query it through
    :meth:`as_retriever` (or the retrievers in :mod:`langchain_fusion.retrievers`), persist the
    in-process store with :meth:`save` and :meth:`load`. Queries may run while other threads
    add, delete or save: each query sees the index before or after a mutation, never a mix.

    It is a LangChain ``VectorStore``: ``add_documents``/``add_texts`` upsert by id, ``delete``
    ignores unknown ids, ``similarity_search*`` and ``max_marginal_relevance_search`` use the
    vector side, and LangChain's indexing API (``langchain_core.indexing.index``) keeps it in
    sync with a document source. ``as_retriever`` returns the fused retriever.
    """

    def __init__(
        self,
        embeddings: Embeddings | None = None,
        *,
        store: FusionStore | None = None,
        analyzer: Analyzer | None = None,
        bm25_params: BM25Params | None = None,
        vector_index: str = "Flat",
        vector_search_params: str | None = None,
        embedding_batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE,
        embed_fields: Sequence[TextField] | None = None,
        bm25_fields: Sequence[TextField] | None = None,
        tenant_key: str | None = None,
    ) -> None:
        """Create an index, empty or over an existing store.

        Args:
            embeddings: any LangChain ``Embeddings``; default :func:`default_embeddings`.
            store: where the rows live; default a new in-process
                :class:`~langchain_fusion.stores.local.store.LocalStore`. A store that already
                holds rows must have been built with the same embedding model.
            analyzer: how BM25 tokenizes text (in-process store only; a remote store is
                created with its own); default :class:`Analyzer` (stemmed words).
            bm25_params: BM25 ``k1``, ``b`` and variant; default :class:`BM25Params`.
            vector_index: FAISS factory string; ``"Flat"`` is exact, e.g. ``"HNSW32"`` is
                approximate and faster on large corpora.
            vector_search_params: FAISS search parameters for approximate indexes, e.g.
                ``"efSearch=128"`` or ``"nprobe=16"``; for a graph also ``"efConstruction=N"``,
                the breadth it is built with (default 128).
            embedding_batch_size: texts per embedding call.
            embed_fields: what is embedded for each document (see
                :func:`~langchain_fusion.metadata.indexed_text`): ``("context", "content")``
                (default) embeds the enrichment context, a blank line and the original text;
                ``("content",)`` ignores the context.
            bm25_fields: what BM25 indexes for each document, in the same way.
            tenant_key: make a new in-process store tenant-keyed: each document's tenant is
                ``metadata[tenant_key]`` and every search names one (see
                :mod:`~langchain_fusion.stores.tenants`); a store given keeps its own (this must match it).

        Whatever is indexed, retrievers return ``page_content`` (the original text) with the
        context in metadata. The field choices are kept by the store.
        """
        self.store = _store(store, analyzer, bm25_params, vector_index, vector_search_params, tenant_key)
        self._embedder = IndexEmbedder(
            embeddings if embeddings is not None else default_embeddings(), embedding_batch_size
        )
        self.embeddings_id = self._embedder.id
        """The embedding model's id, as the store records it."""
        self.saved_info: dict[str, Any] = {}
        """The ``info`` given to :meth:`save`, as read back by :meth:`load` (empty otherwise); it also keeps the
        relevance model (:meth:`calibrate`)."""
        self._relevance = SavedModel()
        _bind(self.store, self.embeddings_id, embed_fields, bm25_fields)

    # --- construction -----------------------------------------------------------------------

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        embedding: Embeddings | None = None,
        *,
        progress: ProgressCallback | None = None,
        ids: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> FusionIndex:
        """Index ``documents`` as they are (one row each); see :meth:`__init__` for options.

        ``embedding`` (LangChain's name; ``embeddings=`` works too) defaults to the bundled model.
        """
        index = cls(kwargs.pop("embeddings", embedding), **kwargs)
        index.add_documents(documents, ids=ids, progress=progress)
        return index

    @classmethod
    def from_files(
        cls,
        paths: str | Path | Iterable[str | Path],
        embeddings: Embeddings | None = None,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        max_chunk_tokens: int | None = None,
        progress: ProgressCallback | None = None,
        max_file_chars: int = DEFAULT_MAX_FILE_CHARS,
        **kwargs: Any,
    ) -> FusionIndex:
        """Load PDFs, text and markdown (files or directories), split them and index the chunks.

        Chunks are also bounded in the model's tokens: by default to the model's own window when it
        declares one (the bundled model reads 254 word pieces: every chunk is embedded whole), or to
        ``max_chunk_tokens`` of them; a model that declares nothing gets chunks of ``chunk_size``
        characters (see :func:`~langchain_fusion.models.embeddings.chunk_bound` and
        :func:`~langchain_fusion.ingest.loading.split_documents`).

        A file yielding more than ``max_file_chars`` characters is skipped (see
        :data:`~langchain_fusion.ingest.loading.DEFAULT_MAX_FILE_CHARS`).

        Unreadable files are skipped with a :class:`~langchain_fusion.ingest.loading.SkippedFileWarning`;
        use :func:`~langchain_fusion.ingest.loading.load_files` directly for the full report.
        A path that does not exist, or paths that hold no readable document at all, are a
        :class:`FusionError` (before anything is embedded).
        """
        embeddings = embeddings if embeddings is not None else default_embeddings()
        if max_chunk_tokens is not None:
            check_positive_int(max_chunk_tokens, "max_chunk_tokens")
        bound = chunk_bound(embeddings, max_chunk_tokens)
        chunks = file_chunks(
            paths,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            max_chunk_tokens=bound[0] if bound is not None else None,
            count_tokens=bound[1] if bound is not None else None,
            max_file_chars=max_file_chars,
        )
        return cls.from_documents(chunks, embeddings, progress=progress, **kwargs)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> FusionIndex:
        """Index plain texts (LangChain's ``VectorStore.from_texts``); see :meth:`__init__` for options."""
        progress = kwargs.pop("progress", None)
        index = cls(embedding, **kwargs)
        index.add_texts(texts, metadatas, ids=ids, progress=progress)
        return index

    # --- what is indexed --------------------------------------------------------------------

    @property
    def embeddings(self) -> Embeddings:
        """The embedding model (the one that built the index)."""
        return self._embedder.embeddings

    @property
    def embedding_batch_size(self) -> int:
        """Texts per call to the model when documents are embedded."""
        return self._embedder.batch_size

    @property
    def embed_fields(self) -> tuple[TextField, ...]:
        """What is embedded for each document."""
        return self.store.settings.embed_fields

    @property
    def bm25_fields(self) -> tuple[TextField, ...]:
        """What BM25 indexes for each document."""
        return self.store.settings.bm25_fields

    @property
    def analyzer(self) -> Analyzer:
        """How BM25 tokenizes text."""
        return self.store.settings.analyzer

    @property
    def bm25_params(self) -> BM25Params:
        """BM25 parameters."""
        return self.store.settings.bm25_params

    @property
    def dimension(self) -> int | None:
        """Embedding dimension, known once the first document is indexed."""
        return self.store.settings.dimension

    # --- reading ----------------------------------------------------------------------------

    def view(self, tenant: str | None = None) -> StoreView:
        """A consistent read view of the rows (what one query sees); of ``tenant``'s rows alone when given.

        On a tenant-keyed index a view without a tenant lists every tenant's rows and refuses to search.
        """
        if tenant is None:
            return self.store.view()
        return scoped(self.store, tenant).tenant_view(tenant)

    def search_view(self, tenant: str | None) -> StoreView:
        """The view a search of ``tenant`` reads: a tenant-keyed index searches one tenant, another none."""
        if tenant is None and self.tenant_key is not None:
            raise FusionError(SEARCH_NEEDS_TENANT)
        return self.view(tenant)

    @property
    def tenant_key(self) -> str | None:
        """The metadata key that holds each document's tenant on a tenant-keyed index (None: one corpus)."""
        return self.store.settings.tenant_key

    def for_tenant(self, tenant: str) -> TenantIndex:
        """One tenant of this tenant-keyed index as a ``VectorStore`` of its own (see :mod:`.tenant_index`)."""
        from langchain_fusion.index.tenant_index import TenantIndex

        return TenantIndex(self, tenant)

    def tenants(self) -> list[str]:
        """The tenants that hold documents, sorted (empty on an index that is not tenant-keyed)."""
        store = self.store
        return store.tenants() if isinstance(store, TenantScoped) and self.tenant_key is not None else []

    def __len__(self) -> int:
        return len(self.store.view())

    def close(self) -> None:
        """Release the store's connection (a Milvus client; nothing in process). ``with FusionIndex(...) as index:``."""
        self.store.close()

    def __enter__(self) -> FusionIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def documents(self) -> tuple[Document, ...]:
        """The indexed documents in row order (shared objects: do not modify them)."""
        return tuple(self.store.view().iter_documents())

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and bool(self.store.view().keys_of([doc_id])[0] >= 0)

    # --- mutation ---------------------------------------------------------------------------

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        ids: Sequence[str] | None = None,
        progress: ProgressCallback | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Embed and index documents, replacing any indexed document with the same id; returns the ids.

        ``ids`` (one per document) override the documents' own ids. Documents without an id
        get a deterministic one (a hash of text and metadata). What each side indexes is
        :func:`~langchain_fusion.metadata.indexed_text` of ``embed_fields`` / ``bm25_fields``
        (the original text alone for documents without a context). The given documents are
        never modified. All or nothing: if an id repeats within the batch, or embedding or
        indexing fails, the index is left as it was.
        """
        batch_size = _batch_size(kwargs.pop("batch_size", None))
        check_no_extra("FusionIndex.add_documents", kwargs)
        return self._write(documents, ids, progress, batch_size)

    def upsert_documents(self, documents: Iterable[Document], *, progress: ProgressCallback | None = None) -> list[str]:
        """The same as :meth:`add_documents` (kept for readability where replacement is the point)."""
        return self._write(documents, None, progress)

    def _write(
        self,
        documents: Iterable[Document],
        ids: Sequence[str] | None,
        progress: ProgressCallback | None,
        batch_size: int | None = None,
    ) -> list[str]:
        new_docs = prepared_documents(documents, ids, self.tenant_key)
        if not new_docs:
            return []
        texts = [indexed_text(doc, self.embed_fields) for doc in new_docs]
        vectors = self._embedder.documents(texts, self.dimension, progress, batch_size)
        self.store.upsert(new_docs, vectors, [indexed_text(doc, self.bm25_fields) for doc in new_docs])
        return [doc.id or "" for doc in new_docs]

    def remove(self, ids: Sequence[str], *, tenant: str | None = None) -> int:
        """Remove documents by id from every side (of ``tenant`` only, when given); returns how many were removed.

        Raises :class:`~langchain_fusion.errors.UnknownDocumentError` (and removes nothing) if
        any id is unknown (to ``tenant``, when given).
        """
        if isinstance(ids, str):
            raise InvalidParameterError(f"remove takes a list of ids; got the string {ids!r}")
        ids = list(ids)
        tenant = check_tenant(tenant)
        present = self.view(tenant).keys_of(ids)
        unknown = [i for i, key in zip(ids, present, strict=True) if key < 0]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise UnknownDocumentError(f"no document with id {shown}{more} in the index; nothing was deleted")
        return self.store.delete(ids) if tenant is None else scoped(self.store, tenant).delete_in(tenant, ids)

    # --- embedding ---------------------------------------------------------------------------

    def embed_query(self, query: str) -> FloatMatrix:
        """The query's normalised embedding as a 1 x dimension matrix."""
        return self._embedder.query(query, self.dimension)

    async def aembed_query(self, query: str) -> FloatMatrix:
        """Async twin of :meth:`embed_query` (uses the model's async API)."""
        return await self._embedder.aquery(query, self.dimension)

    def embed_queries(self, queries: Sequence[str], *, max_concurrency: int | None = None) -> FloatMatrix:
        """Normalised embeddings of several queries, one row each, equal to :meth:`embed_query` of each.

        The bundled model embeds them in one call; other models get one call per query, at
        most ``max_concurrency`` at once (see :func:`~langchain_fusion.models.embeddings.embed_queries`).
        """
        return self._embedder.queries(queries, self.dimension, max_concurrency)

    async def aembed_queries(self, queries: Sequence[str], *, max_concurrency: int | None = None) -> FloatMatrix:
        """Async twin of :meth:`embed_queries`."""
        return await self._embedder.aqueries(queries, self.dimension, max_concurrency)

    def query_matrix(self, embedding: Sequence[float]) -> FloatMatrix:
        """An embedding given by the caller, normalised, as a 1 x dimension matrix."""
        return self._embedder.query_matrix(embedding, self.dimension)

    # --- persistence ------------------------------------------------------------------------

    def save(self, folder: str | Path, *, info: Mapping[str, Any] | None = None) -> Path:
        """Save to ``folder`` atomically and crash-safely (see :mod:`langchain_fusion.stores.local.saving`).

        Only the in-process store is saved as a folder; a remote store persists itself. ``info``
        (any JSON-able mapping, e.g. which files were indexed) is kept in the manifest and comes
        back as :attr:`saved_info` after :meth:`load`, with the relevance model of a calibrated index.
        """
        if not isinstance(self.store, LocalStore):
            raise FusionError(
                f"{type(self.store).__name__} keeps its rows on its engine; save() writes the in-process store only"
            )
        return self.store.save(Path(folder), {"info": self.info_to_save(info)})

    def info_to_save(self, info: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``info`` with what the index itself keeps there (its relevance model), as saving writes it."""
        kept = {RELEVANCE_INFO_KEY: self.saved_info[RELEVANCE_INFO_KEY]} if self.relevance_model is not None else {}
        return {**dict(info or {}), **kept}

    @classmethod
    def load(
        cls,
        folder: str | Path,
        embeddings: Embeddings | None = None,
        *,
        analyzer: Analyzer | None = None,
        lock: bool = True,
        check_dimension: bool = True,
    ) -> FusionIndex:
        """Load an index saved by :meth:`save`, verifying its manifest and checksums.

        ``embeddings`` must be the model that built the index; by default it is recreated
        from the manifest (the bundled local model, or OpenAI with ``OPENAI_API_KEY``).
        ``analyzer`` is needed only for an index built with a custom :class:`Analyzer` subclass.
        The folder is read under a shared lock so that a concurrent save waits (``lock=False``
        when the caller holds the lock of an enclosing folder). ``check_dimension=False`` skips
        embedding a probe text to compare dimensions (it loads the model); a mismatch is then
        reported at the first embedding instead.
        """
        folder = Path(folder).expanduser()
        store, manifest = LocalStore.load(folder, analyzer, lock=lock)
        loaded = cls.from_store(store, embeddings, check_dimension=check_dimension, label=str(folder))
        info = manifest.get("info", {})
        loaded.saved_info = info if isinstance(info, dict) else {}
        return loaded

    @classmethod
    def from_store(
        cls,
        store: FusionStore,
        embeddings: Embeddings | None = None,
        *,
        check_dimension: bool = True,
        label: str | None = None,
    ) -> FusionIndex:
        """An index over a store that already holds rows (e.g. a reopened Milvus collection).

        ``embeddings`` default to the model recorded in the store's settings (the bundled local
        model or OpenAI can be recreated by name; other models must be passed). A different
        model, or one with another dimension (unless ``check_dimension=False``, which saves
        loading the model), is an :class:`EmbeddingsMismatchError`. ``label`` names the store
        in error messages.
        """
        return cls(model_for_store(store, embeddings, check_dimension=check_dimension, label=label), store=store)


def _store(
    store: FusionStore | None,
    analyzer: Analyzer | None,
    bm25_params: BM25Params | None,
    vector_index: str,
    vector_search_params: str | None,
    tenant_key: str | None,
) -> FusionStore:
    """The store given (with no store settings beside it), or a new in-process one with those settings."""
    tenant_key = check_tenant_key(tenant_key)
    if store is None:
        return LocalStore(
            analyzer,
            bm25_params,
            vector_index=vector_index,
            vector_search_params=vector_search_params,
            tenant_key=tenant_key,
        )
    if tenant_key is not None and isinstance(store, FusionStore) and store.settings.tenant_key != tenant_key:
        kept = store.settings.tenant_key
        raise InvalidParameterError(
            f"tenant_key={tenant_key!r}, but the store given is keyed by {kept!r}: a store keeps the tenant key it "
            "was made with; drop tenant_key or give a store made with it"
        )
    if analyzer is not None or bm25_params is not None or vector_index != "Flat" or vector_search_params:
        raise InvalidParameterError(
            "analyzer, bm25_params, vector_index and vector_search_params belong to the store: "
            "set them when you create the store, not on FusionIndex(store=...)"
        )
    if not isinstance(store, FusionStore):
        raise InvalidParameterError(f"store must be a FusionStore; got {type(store).__name__}")
    return store


def _bind(
    store: FusionStore,
    model_id: str,
    embed_fields: Sequence[TextField] | None,
    bm25_fields: Sequence[TextField] | None,
) -> None:
    """Record the model and text fields in a new store; check them against a store that already has rows."""
    settings = store.settings
    fields = {
        "embed_fields": check_text_fields(embed_fields, "embed_fields") if embed_fields is not None else None,
        "bm25_fields": check_text_fields(bm25_fields, "bm25_fields") if bm25_fields is not None else None,
    }
    if settings.embeddings_id is None and not len(store.view()):
        update = {name: value or DEFAULT_TEXT_FIELDS for name, value in fields.items()}
        store.configure(settings.model_copy(update={"embeddings_id": model_id, **update}))
        return
    if settings.embeddings_id != model_id:
        raise EmbeddingsMismatchError(
            f"the store was built with embeddings {settings.embeddings_id!r} but was given "
            f"{model_id!r}; query an index with the model that built it (or rebuild it)"
        )
    for name, value in fields.items():
        if value is not None and value != getattr(settings, name):
            raise InvalidParameterError(
                f"{name}={value!r} differs from the store's {getattr(settings, name)!r}; "
                "a store keeps the fields it was built with"
            )


def file_chunks(
    paths: str | Path | Iterable[str | Path],
    *,
    chunk_size: int,
    chunk_overlap: int,
    max_chunk_tokens: int | None,
    count_tokens: Callable[[Sequence[str]], list[int]] | None,
    max_file_chars: int,
) -> list[Document]:
    """The chunks of the PDFs, text and markdown under ``paths`` (see :meth:`FusionIndex.from_files`).

    FusionError for a path that does not exist, or paths that hold no readable document at all.
    """
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise FusionError(f"no such file or directory: {', '.join(missing)}")
    loaded = load_files(paths, max_chars=max_file_chars, skip_folder=saved_index_reason)
    if not loaded.documents:
        reasons = "; ".join(f"{s.path}: {s.reason}" for s in loaded.skipped[:3]) or "no PDF, .txt or .md files"
        raise FusionError(f"no readable documents in {', '.join(map(str, paths))} ({reasons})")
    return split_documents(
        loaded.documents,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        max_tokens=max_chunk_tokens,
        count_tokens=count_tokens,
    )


def _batch_size(value: Any) -> int | None:
    """LangChain's ``batch_size`` of ``add_documents``: texts per embedding call here."""
    return None if value is None else check_positive_int(value, "batch_size", "texts per embedding call")
