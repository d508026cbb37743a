"""FusionIndex: documents, vectors and BM25 weights in one row space.

Row i of the FAISS index, row i of the BM25 index and ``documents[i]`` are always the same
chunk, including after :meth:`FusionIndex.add_documents` and :meth:`FusionIndex.delete`.
Retrievers fuse on these row ids, never on positions in differently ordered result lists.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from numpy.typing import NDArray

from langchain_fusion import metadata as keys
from langchain_fusion.analyzer import Analyzer
from langchain_fusion.bm25 import BM25Index, BM25Params
from langchain_fusion.embeddings import default_embeddings, embeddings_id
from langchain_fusion.errors import FusionError, InvalidParameterError, UnknownDocumentError
from langchain_fusion.ingest import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, load_files, split_documents
from langchain_fusion.vector import FloatMatrix, VectorIndex, normalize_rows

if TYPE_CHECKING:
    from langchain_fusion.retrievers import FusionRetriever

ProgressCallback = Callable[[int], None]
"""Called with the number of texts just embedded, for progress bars."""

DEFAULT_EMBEDDING_BATCH_SIZE = 256

TextField = Literal["context", "content"]
"""A part of a chunk that can be indexed: ``context`` (the :data:`~langchain_fusion.metadata.CONTEXT`
metadata written by contextual enrichment) or ``content`` (``page_content``, the original text)."""

DEFAULT_TEXT_FIELDS: tuple[TextField, ...] = ("context", "content")
"""What both sides index by default: the context (when there is one), a blank line, the content."""

FIELD_SEPARATOR = "\n\n"
"""What joins the indexed fields of a chunk."""


def check_text_fields(fields: Any, name: str = "text fields") -> tuple[TextField, ...]:
    """Validate a tuple of :data:`TextField` names (non-empty, known, no repeats)."""
    allowed = get_args(TextField)
    if isinstance(fields, str) or not isinstance(fields, (tuple, list)):
        raise InvalidParameterError(f"{name} must be a tuple drawn from {allowed}; got {fields!r}")
    values = tuple(fields)
    if not values or any(f not in allowed for f in values) or len(set(values)) != len(values):
        raise InvalidParameterError(
            f"{name} must be a non-empty tuple of distinct fields from {allowed}; got {values!r}"
        )
    return values


def indexed_text(doc: Document, fields: Sequence[TextField] = DEFAULT_TEXT_FIELDS) -> str:
    """The text an index side sees for ``doc``: the chosen fields joined by a blank line.

    A field that is missing or blank (a chunk without context) is left out, so a document
    without context is indexed as exactly its ``page_content``. If no chosen field has text
    (``("context",)`` on a chunk without context), the ``page_content`` is used instead, so
    a row is never indexed as empty text when it has content.
    """
    parts = []
    for field in fields:
        if field == "content":
            value: Any = doc.page_content
        else:
            value = doc.metadata.get(keys.CONTEXT)
        if isinstance(value, str) and value.strip():
            parts.append(value)
    return FIELD_SEPARATOR.join(parts) if parts else doc.page_content


def content_id(doc: Document) -> str:
    """A deterministic id for a document that has none: a hash of its text and metadata."""
    payload = json.dumps([doc.page_content, doc.metadata], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


class FusionIndex:
    """Chunks indexed for both dense (FAISS) and keyword (BM25) retrieval, row-aligned.

    Build one with :meth:`from_documents` or :meth:`from_files`, query it through
    :meth:`as_retriever` (or the retrievers in :mod:`langchain_fusion.retrievers`), persist it
    with :meth:`save` and :meth:`load`. Reads are thread-safe; mutations are not, so do not
    add or delete while other threads query.
    """

    _chunk_table: tuple[list[Document], int, dict[tuple[str, int], int]] | None = None
    """Lookup table of :meth:`row_of_chunk`: the row list it was built from, its length, the table."""

    def __init__(
        self,
        embeddings: Embeddings | None = None,
        *,
        analyzer: Analyzer | None = None,
        bm25_params: BM25Params | None = None,
        vector_index: str = "Flat",
        vector_search_params: str | None = None,
        embedding_batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE,
        embed_fields: Sequence[TextField] = DEFAULT_TEXT_FIELDS,
        bm25_fields: Sequence[TextField] = DEFAULT_TEXT_FIELDS,
    ) -> None:
        """Create an empty index.

        Args:
            embeddings: any LangChain ``Embeddings``; default :func:`default_embeddings`.
            analyzer: how BM25 tokenizes text; default :class:`Analyzer` (stemmed words).
            bm25_params: BM25 ``k1``, ``b`` and variant; default :class:`BM25Params`.
            vector_index: FAISS factory string; ``"Flat"`` is exact, e.g. ``"HNSW32"`` is
                approximate and faster on large corpora.
            vector_search_params: FAISS search parameters for approximate indexes, e.g.
                ``"efSearch=128"`` or ``"nprobe=16"``.
            embedding_batch_size: texts per embedding call.
            embed_fields: what is embedded for each document (see :func:`indexed_text`):
                ``("context", "content")`` (default) embeds the enrichment context, a blank line
                and the original text; ``("content",)`` ignores the context.
            bm25_fields: what BM25 indexes for each document, in the same way.

        Whatever is indexed, retrievers return ``page_content`` (the original text) with the
        context in metadata. The field choices are saved with the index.
        """
        if embedding_batch_size < 1:
            raise InvalidParameterError(f"embedding_batch_size must be >= 1; got {embedding_batch_size}")
        self.embed_fields = check_text_fields(embed_fields, "embed_fields")
        self.bm25_fields = check_text_fields(bm25_fields, "bm25_fields")
        self.embeddings = embeddings if embeddings is not None else default_embeddings()
        self.embeddings_id = embeddings_id(self.embeddings)
        self.vector_factory = vector_index
        self.vector_search_params = vector_search_params
        self.embedding_batch_size = embedding_batch_size
        self.bm25 = BM25Index(analyzer, bm25_params)
        self.vectors: VectorIndex | None = None
        if vector_index != "Flat":
            # Fail on a bad factory string now, not at the first add; the real index is
            # created once the embedding dimension is known.
            VectorIndex(8, vector_index, None)
        self._documents: list[Document] = []
        self._rows: dict[str, int] = {}
        self._revision = 0

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

        Unreadable files are skipped with a :class:`~langchain_fusion.ingest.SkippedFileWarning`;
        use :func:`~langchain_fusion.ingest.load_files` directly for the full report.
        """
        loaded = load_files(paths)
        chunks = split_documents(loaded.documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        return cls.from_documents(chunks, embeddings, progress=progress, **kwargs)

    # --- the row space ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._documents)

    @property
    def documents(self) -> Sequence[Document]:
        """The indexed documents in row order (read-only; do not modify them)."""
        return tuple(self._documents)

    @property
    def dimension(self) -> int | None:
        """Embedding dimension, known once the first document is indexed."""
        return None if self.vectors is None else self.vectors.dimension

    @property
    def revision(self) -> int:
        """A number that changes whenever rows are added or deleted (for caches keyed on the rows)."""
        return self._revision

    def document(self, row: int) -> Document:
        """The document stored at ``row``."""
        return self._documents[row]

    def row_of(self, doc_id: str) -> int | None:
        """The row of the document with id ``doc_id``, or None."""
        return self._rows.get(doc_id)

    def get_by_ids(self, ids: Sequence[str]) -> list[Document]:
        """Copies of the documents with these ids, in the given order; unknown ids are skipped."""
        return [self._documents[r].model_copy(deep=True) for i in ids if (r := self._rows.get(i)) is not None]

    def row_of_chunk(self, source: str, chunk_index: int) -> int | None:
        """The row of chunk ``chunk_index`` of ``source`` (see :mod:`langchain_fusion.metadata`), or None.

        O(1): a table keyed by (source, chunk_index) is built on first use and rebuilt after
        the rows change. Rows without both keys are not in it; if two rows share a key, the
        first one wins.
        """
        table = self._chunk_table
        if table is None or table[0] is not self._documents or table[1] != len(self._documents):
            rows: dict[tuple[str, int], int] = {}
            for row, doc in enumerate(self._documents):
                source_key, position = doc.metadata.get(keys.SOURCE), doc.metadata.get(keys.CHUNK_INDEX)
                if source_key is not None and isinstance(position, int) and not isinstance(position, bool):
                    rows.setdefault((str(source_key), position), row)
            # Keyed on the row list's identity and length: add_documents extends it, delete and
            # load replace it, so either change invalidates the table.
            table = self._chunk_table = (self._documents, len(self._documents), rows)
        return table[2].get((source, chunk_index))

    # --- mutation ---------------------------------------------------------------------------

    def restore(self, documents: list[Document], vectors: VectorIndex | None, bm25: BM25Index) -> None:
        """Install already-built parts (used when loading a saved index); rows must be aligned."""
        if (0 if vectors is None else len(vectors)) != len(documents) or len(bm25) != len(documents):
            raise FusionError(
                f"index parts are not aligned: {len(documents)} documents, "
                f"{0 if vectors is None else len(vectors)} vectors, {len(bm25)} BM25 rows"
            )
        self._documents, self.vectors, self.bm25 = documents, vectors, bm25
        self._rows = {doc.id: row for row, doc in enumerate(documents) if doc.id is not None}
        self._revision += 1

    def add_documents(self, documents: Iterable[Document], *, progress: ProgressCallback | None = None) -> list[str]:
        """Embed and index documents as new rows; returns their ids.

        What each side indexes is :func:`indexed_text` of ``embed_fields`` / ``bm25_fields``
        (the original text alone for documents without a context). Documents without an id
        get a deterministic one (a hash of text and metadata). The given documents are
        copied, never modified. Nothing is added if any id is a duplicate or if embedding fails.
        """
        new_docs = [doc.model_copy(deep=True) for doc in documents]
        batch_rows: dict[str, int] = {}
        for position, doc in enumerate(new_docs):
            if doc.id is None:
                doc.id = content_id(doc)
            if doc.id in self._rows or doc.id in batch_rows:
                earlier = "already in the index" if doc.id in self._rows else f"also document {batch_rows[doc.id]}"
                raise FusionError(
                    f"duplicate document id {doc.id!r} (document {position} of this batch; {earlier}). "
                    "Ids must be unique: give documents distinct ids or drop the duplicates."
                )
            batch_rows[doc.id] = position
        if not new_docs:
            return []
        vectors = self._embed([indexed_text(doc, self.embed_fields) for doc in new_docs], progress)
        if self.vectors is None:
            self.vectors = VectorIndex(vectors.shape[1], self.vector_factory, self.vector_search_params)
        self.vectors.add(vectors)
        self.bm25.add([indexed_text(doc, self.bm25_fields) for doc in new_docs])
        start = len(self._documents)
        self._documents.extend(new_docs)
        self._rows.update({doc_id: start + pos for doc_id, pos in batch_rows.items()})
        self._revision += 1
        return list(batch_rows)

    def delete(self, ids: Sequence[str]) -> int:
        """Remove documents by id from every side; returns how many were removed.

        Raises KeyError (and removes nothing) if any id is unknown.
        """
        unknown = [i for i in ids if i not in self._rows]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise UnknownDocumentError(f"no document with id {shown}{more} in the index; nothing was deleted")
        rows = np.unique(np.fromiter((self._rows[i] for i in ids), dtype=np.int64, count=len(ids)))
        if rows.size == 0:
            return 0
        if self.vectors is not None:
            self.vectors.delete(rows)
        self.bm25.delete(rows)
        drop = set(rows.tolist())
        self._documents = [d for r, d in enumerate(self._documents) if r not in drop]
        self._rows = {d.id: r for r, d in enumerate(self._documents) if d.id is not None}
        self._revision += 1
        return int(rows.size)

    # --- embedding --------------------------------------------------------------------------

    def _embed(self, texts: list[str], progress: ProgressCallback | None) -> FloatMatrix:
        parts = []
        for start in range(0, len(texts), self.embedding_batch_size):
            batch = texts[start : start + self.embedding_batch_size]
            vectors = self.embeddings.embed_documents(batch)
            if len(vectors) != len(batch):
                raise FusionError(f"the embedding model returned {len(vectors)} vectors for {len(batch)} texts")
            parts.append(np.asarray(vectors, dtype=np.float32))
            if progress is not None:
                progress(len(batch))
        matrix = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
        dimension = self.dimension or (matrix.shape[1] if matrix.ndim == 2 else 0)
        return normalize_rows(matrix, dimension)

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

    def row_mask(self, predicate: Callable[[Document], bool]) -> NDArray[np.bool_]:
        """Boolean mask over rows of the documents for which ``predicate`` is true."""
        return np.fromiter((bool(predicate(d)) for d in self._documents), dtype=bool, count=len(self))

    # --- persistence ------------------------------------------------------------------------

    def save(self, folder: str | Path) -> Path:
        """Save to ``folder`` atomically (see :mod:`langchain_fusion.persistence`)."""
        from langchain_fusion.persistence import save_index

        return save_index(self, Path(folder))

    @classmethod
    def load(cls, folder: str | Path, embeddings: Embeddings | None = None) -> FusionIndex:
        """Load an index saved by :meth:`save`, verifying its manifest and checksums.

        ``embeddings`` must be the model that built the index; by default it is recreated
        from the manifest (the bundled local model, or OpenAI with ``OPENAI_API_KEY``).
        """
        from langchain_fusion.persistence import load_index

        return load_index(Path(folder), embeddings)

    # --- retrieval --------------------------------------------------------------------------

    def as_retriever(self, **kwargs: Any) -> FusionRetriever:
        """A :class:`~langchain_fusion.retrievers.FusionRetriever` over this index.

        Keyword arguments are its fields: ``k``, ``alpha``, ``fetch_k``, ``method``, ``filter``.
        """
        from langchain_fusion.retrievers import FusionRetriever

        return FusionRetriever(index=self, **kwargs)
