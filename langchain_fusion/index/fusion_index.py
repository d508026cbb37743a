"""FusionIndex: documents embedded and indexed for both sides, kept in one store.

The index owns the embedding model and what each side indexes of a document; the rows live in
a :class:`~langchain_fusion.stores.base.FusionStore` (in process by default). Every mutation is
all or nothing on every side, embedding happens before the store is touched (never under a
lock), and queries read an immutable view, so they may overlap with writes from other threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from langchain_fusion.errors import (
    EmbeddingsMismatchError,
    FusionError,
    InvalidParameterError,
    UnknownDocumentError,
)
from langchain_fusion.ingest.loading import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, load_files, split_documents
from langchain_fusion.metadata import DEFAULT_TEXT_FIELDS, TextField, check_text_fields, content_id, indexed_text
from langchain_fusion.models.embeddings import default_embeddings, embeddings_from_id, embeddings_id
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.local.vectors import normalize_rows
from langchain_fusion.stores.settings import BM25Params

if TYPE_CHECKING:
    from langchain_fusion.retrievers.fusion import FusionRetriever

ProgressCallback = Callable[[int], None]
"""Called with the number of texts just embedded, for progress bars."""

DEFAULT_EMBEDDING_BATCH_SIZE = 256


class FusionIndex:
    """Chunks indexed for both dense (vector) and keyword (BM25) retrieval, in one store.

    Build one with :meth:`from_documents` or :meth:`from_files`, query it through
    :meth:`as_retriever` (or the retrievers in :mod:`langchain_fusion.retrievers`), persist the
    in-process store with :meth:`save` and :meth:`load`. Queries may run while other threads
    add, delete or save: each query sees the index before or after a mutation, never a mix.
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
                ``"efSearch=128"`` or ``"nprobe=16"``.
            embedding_batch_size: texts per embedding call.
            embed_fields: what is embedded for each document (see
                :func:`~langchain_fusion.metadata.indexed_text`): ``("context", "content")``
                (default) embeds the enrichment context, a blank line and the original text;
                ``("content",)`` ignores the context.
            bm25_fields: what BM25 indexes for each document, in the same way.

        Whatever is indexed, retrievers return ``page_content`` (the original text) with the
        context in metadata. The field choices are kept by the store.
        """
        if (
            isinstance(embedding_batch_size, bool)
            or not isinstance(embedding_batch_size, int)
            or embedding_batch_size < 1
        ):
            raise InvalidParameterError(
                f"embedding_batch_size must be a whole number >= 1; got {embedding_batch_size!r}"
            )
        if store is None:
            store = LocalStore(
                analyzer, bm25_params, vector_index=vector_index, vector_search_params=vector_search_params
            )
        elif analyzer is not None or bm25_params is not None or vector_index != "Flat" or vector_search_params:
            raise InvalidParameterError(
                "analyzer, bm25_params, vector_index and vector_search_params belong to the store: "
                "set them when you create the store, not on FusionIndex(store=...)"
            )
        if not isinstance(store, FusionStore):
            raise InvalidParameterError(f"store must be a FusionStore; got {type(store).__name__}")
        self.store = store
        self.embeddings = embeddings if embeddings is not None else default_embeddings()
        self.embeddings_id = embeddings_id(self.embeddings)
        self.embedding_batch_size = embedding_batch_size
        settings = store.settings
        fields = {
            "embed_fields": check_text_fields(embed_fields, "embed_fields") if embed_fields is not None else None,
            "bm25_fields": check_text_fields(bm25_fields, "bm25_fields") if bm25_fields is not None else None,
        }
        if settings.embeddings_id is not None or len(store.view()):
            if settings.embeddings_id != self.embeddings_id:
                raise EmbeddingsMismatchError(
                    f"the store was built with embeddings {settings.embeddings_id!r} but was given "
                    f"{self.embeddings_id!r}; query an index with the model that built it (or rebuild it)"
                )
            for name, value in fields.items():
                if value is not None and value != getattr(settings, name):
                    raise InvalidParameterError(
                        f"{name}={value!r} differs from the store's {getattr(settings, name)!r}; "
                        "a store keeps the fields it was built with"
                    )
        else:
            store.configure(
                settings.model_copy(
                    update={
                        "embeddings_id": self.embeddings_id,
                        "embed_fields": fields["embed_fields"] or DEFAULT_TEXT_FIELDS,
                        "bm25_fields": fields["bm25_fields"] or DEFAULT_TEXT_FIELDS,
                    }
                )
            )

    # --- construction -----------------------------------------------------------------------

    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        embeddings: Embeddings | None = None,
        *,
        progress: ProgressCallback | None = None,
        **kwargs: Any,
    ) -> FusionIndex:
        """Index ``documents`` as they are (one row each); see :meth:`__init__` for options."""
        index = cls(embeddings, **kwargs)
        index.add_documents(documents, progress=progress)
        return index

    @classmethod
    def from_files(
        cls,
        paths: Iterable[str | Path],
        embeddings: Embeddings | None = None,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        progress: ProgressCallback | None = None,
        **kwargs: Any,
    ) -> FusionIndex:
        """Load PDFs, text and markdown (files or directories), split them and index the chunks.

        Unreadable files are skipped with a :class:`~langchain_fusion.ingest.loading.SkippedFileWarning`;
        use :func:`~langchain_fusion.ingest.loading.load_files` directly for the full report.
        """
        loaded = load_files(paths)
        chunks = split_documents(loaded.documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        return cls.from_documents(chunks, embeddings, progress=progress, **kwargs)

    # --- what is indexed --------------------------------------------------------------------

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

    def view(self) -> StoreView:
        """A consistent read view of the rows (what one query sees)."""
        return self.store.view()

    def __len__(self) -> int:
        return len(self.store.view())

    @property
    def documents(self) -> tuple[Document, ...]:
        """The indexed documents in row order (shared objects: do not modify them)."""
        return tuple(self.store.view().iter_documents())

    def get_by_ids(self, ids: Sequence[str]) -> list[Document]:
        """Copies of the documents with these ids, in the given order; unknown ids are skipped."""
        view = self.store.view()
        found = view.keys_of(list(ids))
        return [doc.model_copy(deep=True) for doc in view.documents(found[found >= 0])]

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and bool(self.store.view().keys_of([doc_id])[0] >= 0)

    # --- mutation ---------------------------------------------------------------------------

    def add_documents(self, documents: Iterable[Document], *, progress: ProgressCallback | None = None) -> list[str]:
        """Embed and index documents as new rows; returns their ids.

        What each side indexes is :func:`~langchain_fusion.metadata.indexed_text` of
        ``embed_fields`` / ``bm25_fields`` (the original text alone for documents without a
        context). Documents without an id get a deterministic one (a hash of text and
        metadata). The given documents are copied, never modified. Nothing is added if any id
        is already in the index or repeated in the batch, or if embedding or indexing fails.
        """
        return self._write(documents, progress, replace=False)

    def upsert_documents(self, documents: Iterable[Document], *, progress: ProgressCallback | None = None) -> list[str]:
        """Like :meth:`add_documents`, but a document whose id is already indexed replaces it."""
        return self._write(documents, progress, replace=True)

    def _write(self, documents: Iterable[Document], progress: ProgressCallback | None, *, replace: bool) -> list[str]:
        new_docs = _prepared(documents)
        if not new_docs:
            return []
        if not replace:
            present = self.store.view().keys_of([d.id or "" for d in new_docs])
            if (present >= 0).any():
                position = int(np.flatnonzero(present >= 0)[0])
                raise FusionError(
                    f"duplicate document id {new_docs[position].id!r} (document {position} of this batch; already "
                    "in the index). Ids must be unique: give documents distinct ids, drop the duplicates, or use "
                    "upsert_documents to replace them."
                )
        vectors = self._embed([indexed_text(doc, self.embed_fields) for doc in new_docs], progress)
        self.store.upsert(new_docs, vectors, [indexed_text(doc, self.bm25_fields) for doc in new_docs])
        return [doc.id or "" for doc in new_docs]

    def delete(self, ids: Sequence[str]) -> int:
        """Remove documents by id from every side; returns how many were removed.

        Raises :class:`~langchain_fusion.errors.UnknownDocumentError` (and removes nothing) if
        any id is unknown.
        """
        if isinstance(ids, str):
            raise InvalidParameterError(f"delete takes a list of ids; got the string {ids!r}")
        ids = list(ids)
        present = self.store.view().keys_of(ids)
        unknown = [i for i, key in zip(ids, present, strict=True) if key < 0]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise UnknownDocumentError(f"no document with id {shown}{more} in the index; nothing was deleted")
        return self.store.delete(ids)

    # --- embedding --------------------------------------------------------------------------

    def _embed(self, texts: list[str], progress: ProgressCallback | None) -> FloatMatrix:
        dimension = self.dimension
        matrix: FloatMatrix | None = None
        for start in range(0, len(texts), self.embedding_batch_size):
            batch = texts[start : start + self.embedding_batch_size]
            vectors = self.embeddings.embed_documents(batch)
            if len(vectors) != len(batch):
                raise FusionError(f"the embedding model returned {len(vectors)} vectors for {len(batch)} texts")
            part = normalize_rows(vectors, dimension if dimension is not None else _width(vectors))
            if matrix is None:
                dimension = part.shape[1]
                # One preallocated matrix: the build never holds a second copy of it.
                matrix = np.empty((len(texts), dimension), dtype=np.float32)
            matrix[start : start + len(batch)] = part
            if progress is not None:
                progress(len(batch))
        assert matrix is not None
        return matrix

    def embed_query(self, query: str) -> FloatMatrix:
        """The query's normalised embedding as a 1 x dimension matrix."""
        return self._query_matrix(self.embeddings.embed_query(query))

    async def aembed_query(self, query: str) -> FloatMatrix:
        """Async twin of :meth:`embed_query` (uses the model's async API)."""
        return self._query_matrix(await self.embeddings.aembed_query(query))

    def _query_matrix(self, vector: Sequence[float]) -> FloatMatrix:
        if self.dimension is None:
            raise FusionError("the index is empty: add documents before querying the vector side")
        return normalize_rows([vector], self.dimension)

    # --- persistence ------------------------------------------------------------------------

    def save(self, folder: str | Path) -> Path:
        """Save to ``folder`` atomically and crash-safely (see :mod:`langchain_fusion.stores.local.folder`).

        Only the in-process store is saved as a folder; a remote store persists itself.
        """
        if not isinstance(self.store, LocalStore):
            raise FusionError(
                f"{type(self.store).__name__} keeps its rows on its engine; save() writes the in-process store only"
            )
        return self.store.save(Path(folder))

    @classmethod
    def load(
        cls, folder: str | Path, embeddings: Embeddings | None = None, *, analyzer: Analyzer | None = None
    ) -> FusionIndex:
        """Load an index saved by :meth:`save`, verifying its manifest and checksums.

        ``embeddings`` must be the model that built the index; by default it is recreated
        from the manifest (the bundled local model, or OpenAI with ``OPENAI_API_KEY``).
        ``analyzer`` is needed only for an index built with a custom :class:`Analyzer` subclass.
        """
        folder = Path(folder).expanduser()
        store, _ = LocalStore.load(folder, analyzer)
        settings = store.settings
        if embeddings is None:
            embeddings = embeddings_from_id(settings.embeddings_id or "")
        given_id = embeddings_id(embeddings)
        if given_id != settings.embeddings_id:
            raise EmbeddingsMismatchError(
                f"{folder} was built with embeddings {settings.embeddings_id!r} but was given {given_id!r}; "
                "query an index with the model that built it (or rebuild the index)"
            )
        if settings.dimension is not None:
            given_dimension = len(embeddings.embed_query("langchain-fusion dimension check"))
            if given_dimension != settings.dimension:
                raise EmbeddingsMismatchError(
                    f"{folder} holds {settings.dimension}-dimensional vectors but the given embeddings make "
                    f"{given_dimension}-dimensional ones; use the model that built the index"
                )
        return cls(embeddings, store=store)

    # --- retrieval --------------------------------------------------------------------------

    def as_retriever(self, **kwargs: Any) -> FusionRetriever:
        """A :class:`~langchain_fusion.retrievers.fusion.FusionRetriever` over this index.

        Keyword arguments are its fields: ``k``, ``alpha``, ``fetch_k``, ``method``, ``filter``.
        """
        from langchain_fusion.retrievers.fusion import FusionRetriever

        return FusionRetriever(index=self, **kwargs)


def _prepared(documents: Iterable[Document]) -> list[Document]:
    """Copies with ids (content hashes for documents without one); FusionError on repeated ids."""
    new_docs = [doc.model_copy(deep=True) for doc in documents]
    seen: dict[str, int] = {}
    for position, doc in enumerate(new_docs):
        if doc.id is None:
            doc.id = content_id(doc)
        if doc.id in seen:
            raise FusionError(
                f"duplicate document id {doc.id!r} (document {position} of this batch; also document "
                f"{seen[doc.id]}). Ids must be unique: give documents distinct ids or drop the duplicates."
            )
        seen[doc.id] = position
    return new_docs


def _width(vectors: Sequence[Sequence[float]]) -> int:
    try:
        return len(vectors[0])
    except (TypeError, IndexError):
        raise FusionError(f"the embedding model returned {type(vectors[0]).__name__} instead of a vector") from None
