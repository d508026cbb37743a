"""FusionIndex: documents embedded and indexed for both sides, kept in one store.

The index owns the embedding model and what each side indexes of a document; the rows live in
a :class:`~langchain_fusion.stores.base.FusionStore` (in process by default). Every mutation is
all or nothing on every side, embedding happens before the store is touched (never under a
lock), and queries read an immutable view, so they may overlap with writes from other threads.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from langchain_fusion._checks import check_k, check_positive_int
from langchain_fusion.errors import (
    EmbeddingsMismatchError,
    FusionError,
    InvalidParameterError,
    ProviderError,
    UnknownDocumentError,
    describe_error,
)
from langchain_fusion.ingest.loading import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_CHARS,
    load_files,
    split_documents,
)
from langchain_fusion.metadata import (
    DEFAULT_TEXT_FIELDS,
    MAX_METADATA_DEPTH,
    TextField,
    check_text_fields,
    content_id,
    indexed_text,
)
from langchain_fusion.models import scripts
from langchain_fusion.models.embeddings import (
    aembed_queries,
    chunk_token_counter,
    default_embeddings,
    embed_queries,
    embeddings_from_id,
    embeddings_id,
)
from langchain_fusion.progress import ProgressCallback
from langchain_fusion.search.diversity import DEFAULT_MMR_WEIGHT, check_lambda_mult
from langchain_fusion.search.relevance import RELEVANCE_INFO_KEY, RelevanceModel, SavedModel, calibrate_search
from langchain_fusion.stores.analyzer import Analyzer
from langchain_fusion.stores.base import FloatMatrix, FusionStore, StoreView, Where
from langchain_fusion.stores.filters import check_filter
from langchain_fusion.stores.local.manifest import saved_index_reason
from langchain_fusion.stores.local.store import LocalStore
from langchain_fusion.stores.local.vectors import normalize_rows
from langchain_fusion.stores.settings import BM25Params

if TYPE_CHECKING:
    from langchain_fusion.evaluation.datasets import EvalDataset
    from langchain_fusion.retrievers.fusion import FusionRetriever
    from langchain_fusion.search.explain import Explanation

DEFAULT_EMBEDDING_BATCH_SIZE = 256

SEARCH_TYPES = ("fusion", "similarity", "mmr")
"""The ``search_type`` values of :meth:`FusionIndex.as_retriever`."""


class FusionIndex(VectorStore):
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
        self._embeddings = embeddings if embeddings is not None else default_embeddings()
        self._scripts = scripts.declared_scripts(self._embeddings)
        self.embeddings_id = embeddings_id(self._embeddings)
        self.embedding_batch_size = embedding_batch_size
        self.saved_info: dict[str, Any] = {}
        """The ``info`` given to :meth:`save`, as read back by :meth:`load` (empty otherwise); it also keeps the
        relevance model (:meth:`calibrate`)."""
        self._relevance = SavedModel()
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

        ``max_chunk_tokens`` also bounds each chunk in the bundled model's word pieces (at most
        its :attr:`~langchain_fusion.models.embeddings.LocalEmbeddings.max_word_pieces`, 254, to
        embed every chunk whole): see :func:`~langchain_fusion.ingest.loading.split_documents`.

        A file yielding more than ``max_file_chars`` characters is skipped (see
        :data:`~langchain_fusion.ingest.loading.DEFAULT_MAX_FILE_CHARS`).

        Unreadable files are skipped with a :class:`~langchain_fusion.ingest.loading.SkippedFileWarning`;
        use :func:`~langchain_fusion.ingest.loading.load_files` directly for the full report.
        A path that does not exist, or paths that hold no readable document at all, are a
        :class:`FusionError` (before anything is embedded).
        """
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        missing = [str(p) for p in paths if not Path(p).exists()]
        if missing:
            raise FusionError(f"no such file or directory: {', '.join(missing)}")
        loaded = load_files(paths, max_chars=max_file_chars, skip_folder=saved_index_reason)
        if not loaded.documents:
            reasons = "; ".join(f"{s.path}: {s.reason}" for s in loaded.skipped[:3]) or "no PDF, .txt or .md files"
            raise FusionError(f"no readable documents in {', '.join(map(str, paths))} ({reasons})")
        counter = None
        if max_chunk_tokens is not None:
            embeddings = embeddings if embeddings is not None else default_embeddings()
            counter = chunk_token_counter(embeddings)
        chunks = split_documents(
            loaded.documents,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            max_tokens=max_chunk_tokens,
            count_tokens=counter,
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
        return self._embeddings

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

    def reads(self, query: str) -> bool:
        """Whether the embedding model can read ``query`` (see :mod:`~langchain_fusion.models.scripts`).

        False when most of the query's letters are in scripts the model declares it was not trained
        on (the bundled model reads Latin script): the fused search then gives the vector side no
        weight for that query.
        """
        return scripts.reads(self._scripts, query)

    def view(self) -> StoreView:
        """A consistent read view of the rows (what one query sees)."""
        return self.store.view()

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

    def get_by_ids(self, ids: Sequence[str]) -> list[Document]:
        """Copies of the documents with these ids, in the given order; unknown ids are skipped."""
        view = self.store.view()
        found = view.keys_of(list(ids))
        return [doc.model_copy(deep=True) for doc in view.documents(found[found >= 0])]

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
        _no_extra_options("add_documents", kwargs)
        return self._write(documents, ids, progress, batch_size)

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict[str, Any]] | None = None,
        *,
        ids: list[str] | None = None,
        progress: ProgressCallback | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Index plain texts with optional metadata and ids (upsert by id); returns the ids."""
        batch_size = _batch_size(kwargs.pop("batch_size", None))
        _no_extra_options("add_texts", kwargs)
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise InvalidParameterError(f"got {len(metadatas)} metadatas for {len(texts)} texts; give one per text")
        documents = [
            Document(page_content=t, metadata=dict(metadatas[i]) if metadatas else {}) for i, t in enumerate(texts)
        ]
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
        new_docs = _prepared(documents, ids)
        if not new_docs:
            return []
        vectors = self._embed([indexed_text(doc, self.embed_fields) for doc in new_docs], progress, batch_size)
        self.store.upsert(new_docs, vectors, [indexed_text(doc, self.bm25_fields) for doc in new_docs])
        return [doc.id or "" for doc in new_docs]

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Remove the documents with these ids from every side (LangChain's ``VectorStore.delete``).

        Unknown ids are ignored; ``ids=None`` deletes every document. Returns True. Use
        :meth:`remove` to be told about unknown ids and how many documents went.
        """
        _no_extra_options("delete", kwargs)
        if isinstance(ids, str):
            raise InvalidParameterError(f"delete takes a list of ids; got the string {ids!r}")
        if ids is None:
            self.store.clear()
        else:
            self.store.delete(list(ids))
        return True

    def remove(self, ids: Sequence[str]) -> int:
        """Remove documents by id from every side; returns how many were removed.

        Raises :class:`~langchain_fusion.errors.UnknownDocumentError` (and removes nothing) if
        any id is unknown.
        """
        if isinstance(ids, str):
            raise InvalidParameterError(f"remove takes a list of ids; got the string {ids!r}")
        ids = list(ids)
        present = self.store.view().keys_of(ids)
        unknown = [i for i, key in zip(ids, present, strict=True) if key < 0]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5])
            more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
            raise UnknownDocumentError(f"no document with id {shown}{more} in the index; nothing was deleted")
        return self.store.delete(ids)

    # --- LangChain's vector-store searches (the vector side alone) --------------------------

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents most similar to ``query`` on the vector side (copies, no score metadata)."""
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        """(document, cosine similarity) pairs, best first; ``filter=`` restricts the documents."""
        return self.similarity_search_with_score_by_vector(self.embeddings.embed_query(query), k, **kwargs)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        """The ``k`` documents most similar to an embedding."""
        return [doc for doc, _ in self.similarity_search_with_score_by_vector(embedding, k, **kwargs)]

    def similarity_search_with_score_by_vector(
        self, embedding: Sequence[float], k: int = 4, *, filter: Any = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """(document, cosine similarity) pairs for an embedding, best first."""
        _no_extra_options("similarity_search", kwargs)
        k = check_k(k)
        view = self.store.view()
        if view.known_empty():
            return []
        where = None if filter is None else Where(metadata=check_filter(filter))
        keys, scores = view.vector(self._query_matrix(embedding)).top(k, where)
        return [(_plain_copy(doc), float(s)) for doc, s in zip(view.documents(keys), scores, strict=True)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        # Cosine similarity in [-1, 1] -> relevance in [0, 1].
        return _cosine_relevance

    def max_marginal_relevance_search(
        self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5, **kwargs: Any
    ) -> list[Document]:
        """Maximal marginal relevance over the ``fetch_k`` most similar documents (diverse results).

        The vector side of ``as_retriever(search_type="mmr", alpha=1)``: the same MMR (see
        :mod:`~langchain_fusion.search.diversity`), with relevance the candidates' cosine
        similarity min-max scaled over them; returns plain copies (no score metadata).
        """
        return self.max_marginal_relevance_search_by_vector(
            self.embeddings.embed_query(query), k, fetch_k, lambda_mult, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        *,
        filter: Any = None,
        **kwargs: Any,
    ) -> list[Document]:
        """MMR for an embedding: relevance to the query traded against similarity to what was picked."""
        from langchain_fusion.search.options import PoolOptions
        from langchain_fusion.search.pool import fused_search, query_scorers

        _no_extra_options("max_marginal_relevance_search", kwargs)
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
        hits = fused_search(view, query_scorers(view, "", self._query_matrix(embedding)), options)
        keys = np.fromiter((hit.key for hit in hits), dtype=np.int64, count=len(hits))
        return [_plain_copy(doc) for doc in view.documents(keys)]

    # --- embedding --------------------------------------------------------------------------

    def _embed(self, texts: list[str], progress: ProgressCallback | None, batch_size: int | None = None) -> FloatMatrix:
        dimension = self.dimension
        matrix: FloatMatrix | None = None
        step = batch_size or self.embedding_batch_size
        for start in range(0, len(texts), step):
            batch = texts[start : start + step]
            with self._provider_call():
                vectors = self.embeddings.embed_documents(batch)
            if not isinstance(vectors, Sized):
                raise FusionError(f"the embedding model returned {type(vectors).__name__}, not a list of vectors")
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
        with self._provider_call():
            vector = self.embeddings.embed_query(query)
        return self._query_matrix(vector)

    async def aembed_query(self, query: str) -> FloatMatrix:
        """Async twin of :meth:`embed_query` (uses the model's async API)."""
        with self._provider_call():
            vector = await self.embeddings.aembed_query(query)
        return self._query_matrix(vector)

    def embed_queries(self, queries: Sequence[str], *, max_concurrency: int | None = None) -> FloatMatrix:
        """Normalised embeddings of several queries, one row each, equal to :meth:`embed_query` of each.

        The bundled model embeds them in one call; other models get one call per query, at
        most ``max_concurrency`` at once (see :func:`~langchain_fusion.models.embeddings.embed_queries`).
        """
        with self._provider_call():
            vectors = embed_queries(self.embeddings, queries, max_concurrency)
        return self._query_rows(vectors, len(queries))

    async def aembed_queries(self, queries: Sequence[str], *, max_concurrency: int | None = None) -> FloatMatrix:
        """Async twin of :meth:`embed_queries`."""
        with self._provider_call():
            vectors = await aembed_queries(self.embeddings, queries, max_concurrency)
        return self._query_rows(vectors, len(queries))

    def _query_rows(self, vectors: Sequence[Any], expected: int) -> FloatMatrix:
        if len(vectors) != expected:
            raise FusionError(f"the embedding model returned {len(vectors)} vectors for {expected} queries")
        if self.dimension is None:
            raise FusionError("the index is empty: add documents before querying the vector side")
        return normalize_rows(vectors, self.dimension)

    @contextlib.contextmanager
    def _provider_call(self) -> Iterator[None]:
        """Turn the embedding model's own failures (bad key, no network, quota) into one ProviderError line."""
        try:
            yield
        except FusionError:
            raise
        except Exception as exc:
            raise ProviderError(f"the embedding model {self.embeddings_id} failed: {describe_error(exc)}") from exc

    def _query_matrix(self, vector: Sequence[float]) -> FloatMatrix:
        if self.dimension is None:
            raise FusionError("the index is empty: add documents before querying the vector side")
        return normalize_rows([vector], self.dimension)

    # --- calibrated relevance ----------------------------------------------------------------

    @property
    def relevance_model(self) -> RelevanceModel | None:
        """The calibrated relevance model (:meth:`calibrate`), saved with the index; None when not calibrated."""
        return self._relevance.of(self.saved_info.get(RELEVANCE_INFO_KEY))

    def calibrate(self, dataset: EvalDataset, *, k: int = 10, **options: Any) -> RelevanceModel:
        """Fit the index's relevance model on labelled queries; every result then carries ``metadata["relevance"]``.

        ``dataset``: queries with relevance labels over this index's documents, e.g.
        ``load_beir(folder, split="train")`` or ``load_labelled(path, documents)``; labels are
        matched by ``Document.id``. Each query's top ``k`` under the default search (or the
        search ``options`` given: those you will query with) is scored as
        :class:`~langchain_fusion.search.relevance.RelevanceModel` reads it, and the model is
        fitted (its held-out quality in ``model.quality``). It replaces any earlier model and is
        kept in :attr:`saved_info`: :meth:`save` (or a store's own persistence) keeps it with the index.
        """
        k = check_k(k)
        model = calibrate_search(self.as_retriever(k=k, **options), dataset, k=k)
        self.saved_info = {**self.saved_info, RELEVANCE_INFO_KEY: model.model_dump(mode="json")}
        return model

    def answerability(self, query: str, **options: Any) -> float:
        """How likely the index answers ``query``: the calibrated relevance of its best result (0.0 if none).

        A gate before answering: below a threshold (0.3 is a start; measure yours with ``eval``),
        say the documents do not cover the question instead of calling a model. ``options`` are
        search options (e.g. ``filter``). Needs a calibrated index (:meth:`calibrate`).
        """
        from langchain_fusion.search.relevance import top_relevance

        return top_relevance(self.as_retriever(k=1, **options), self.relevance_model, query)

    def explain(self, query: str, document: str | Document, **options: Any) -> Explanation:
        """Why ``document`` (a chunk's ``Document.id``, or the chunk) is or is not a result of searching ``query``.

        ``options`` are the search options of :meth:`as_retriever` (``k``, ``alpha``, ``fetch_k``,
        ``filter``, floors, the cap per source, maximal marginal relevance, ``duplicates``...). The answer
        (:class:`~langchain_fusion.search.explain.Explanation`) is read from the same search
        ``as_retriever(**options).invoke(query)`` runs: returned at which rank, or where it
        dropped out (filtered, outside both candidate pools with its rank on each side, below a
        floor, a duplicate, capped per source, not picked by MMR, below ``k``, below
        ``min_relevance``). ``print(index.explain(...))`` shows it in a sentence. An unknown id
        is an :class:`~langchain_fusion.errors.UnknownDocumentError`.
        """
        return self.as_retriever(**options).explain(query, document)

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
        settings = store.settings
        where = label or f"the {type(store).__name__}"
        if embeddings is None:
            recorded = settings.embeddings_id
            embeddings = default_embeddings() if recorded is None else embeddings_from_id(recorded)
        given_id = embeddings_id(embeddings)
        if settings.embeddings_id is not None and given_id != settings.embeddings_id:
            raise EmbeddingsMismatchError(
                f"{where} was built with embeddings {settings.embeddings_id!r} but was given {given_id!r}; "
                "query an index with the model that built it (or rebuild the index)"
            )
        if check_dimension and settings.dimension is not None:
            given_dimension = len(embeddings.embed_query("langchain-fusion dimension check"))
            if given_dimension != settings.dimension:
                raise EmbeddingsMismatchError(
                    f"{where} holds {settings.dimension}-dimensional vectors but the given embeddings make "
                    f"{given_dimension}-dimensional ones; use the model that built the index"
                )
        return cls(embeddings, store=store)

    # --- retrieval --------------------------------------------------------------------------

    def as_retriever(  # type: ignore[override]  # returns the fused retriever, not a VectorStoreRetriever
        self, *, search_type: str = "fusion", search_kwargs: dict[str, Any] | None = None, **kwargs: Any
    ) -> FusionRetriever:
        """A :class:`~langchain_fusion.retrievers.fusion.FusionRetriever` over this index.

        Keyword arguments (or LangChain's ``search_kwargs``) are its fields: the search options of
        :class:`~langchain_fusion.search.options.SearchOptions` (``k``, ``alpha``, ``fetch_k``,
        ``method``, ``filter``, relevance floors and diversity), and ``tags``, ``metadata``.
        ``search_type`` is ``"fusion"`` (the default), ``"similarity"`` (the vector side alone:
        ``alpha=1``) or ``"mmr"`` (the fused candidates re-ranked by maximal marginal relevance,
        whose weight of relevance defaults to 0.5; MMR chooses among the best ``fetch_k`` fused
        candidates). An unknown option or search type is an error that lists the valid ones.
        """
        from langchain_fusion.retrievers.fusion import FusionRetriever

        options = {**(search_kwargs or {}), **kwargs}
        valid = sorted(set(FusionRetriever.model_fields) - {"index", "callbacks", "verbose"})
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise InvalidParameterError(f"unknown retriever option(s) {unknown}; the options are {valid}")
        if search_type == "similarity":
            if options.get("alpha", 1.0) != 1.0:
                raise InvalidParameterError("search_type='similarity' is the vector side alone (alpha=1); drop alpha")
            options["alpha"] = 1.0
        elif search_type == "mmr":
            if options.setdefault("lambda_mult", DEFAULT_MMR_WEIGHT) is None:
                raise InvalidParameterError(
                    "search_type='mmr' needs a lambda_mult between 0 and 1; drop lambda_mult=None"
                )
        elif search_type not in SEARCH_TYPES:
            raise InvalidParameterError(f"search_type must be one of {list(SEARCH_TYPES)}; got {search_type!r}")
        return FusionRetriever(index=self, **options)


def _prepared(documents: Iterable[Document], ids: Sequence[str] | None = None) -> list[Document]:
    """Copies with ids (given, own, or content hashes); FusionError on ids repeated in the batch.

    The copies are shallow: their metadata is the caller's, which stores only read (and
    serialise) and never change.
    """
    new_docs = [doc.model_copy() for doc in documents]
    if ids is not None:
        if isinstance(ids, str) or len(ids) != len(new_docs):
            raise InvalidParameterError(f"give one id per document: {len(new_docs)} documents, ids={ids!r}")
        for doc, doc_id in zip(new_docs, ids, strict=True):
            if not isinstance(doc_id, str) or not doc_id:
                raise InvalidParameterError(f"ids must be non-empty strings; got {doc_id!r}")
            doc.id = doc_id
    seen: dict[str, int] = {}
    for position, doc in enumerate(new_docs):
        for where, value in (("id", doc.id), ("page_content", doc.page_content), ("metadata", doc.metadata)):
            try:
                bad = _lone_surrogate(value)
            except _NestedTooDeep:
                raise InvalidParameterError(
                    f"document {position} of this batch: its {where} nests mappings or lists more than "
                    f"{MAX_METADATA_DEPTH} levels deep (or contains itself), which cannot be saved; flatten it"
                ) from None
            if bad is not None:
                raise InvalidParameterError(
                    f"document {position} of this batch: its {where} holds a lone surrogate ({bad!r}), which is "
                    "not valid Unicode and cannot be saved; clean the text first (e.g. with "
                    "langchain_fusion.ingest.loading.valid_unicode)"
                )
        if doc.id is None:
            doc.id = content_id(doc)
        if doc.id in seen:
            raise FusionError(
                f"duplicate document id {doc.id!r} (document {position} of this batch; also document "
                f"{seen[doc.id]}). Ids must be unique: give documents distinct ids or drop the duplicates."
            )
        seen[doc.id] = position
    return new_docs


class _NestedTooDeep(Exception):
    """A value nests deeper than :data:`~langchain_fusion.metadata.MAX_METADATA_DEPTH` (or contains itself)."""


def _lone_surrogate(value: Any, depth: int = 0) -> str | None:
    """The first lone surrogate in a string or in the strings of a nested mapping or sequence, if any.

    Raises :class:`_NestedTooDeep` past :data:`~langchain_fusion.metadata.MAX_METADATA_DEPTH` levels, which
    is also where a mapping that contains itself ends up.
    """
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return value[exc.start]
        return None
    if isinstance(value, Mapping):
        items: Iterable[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        return None
    if depth >= MAX_METADATA_DEPTH:
        raise _NestedTooDeep
    for item in items:
        found = _lone_surrogate(item, depth + 1)
        if found is not None:
            return found
    return None


def _plain_copy(doc: Document) -> Document:
    return Document(id=doc.id, page_content=doc.page_content, metadata=copy.deepcopy(doc.metadata))


def _cosine_relevance(similarity: float) -> float:
    return min(1.0, max(0.0, (1.0 + similarity) / 2.0))


def _batch_size(value: Any) -> int | None:
    """LangChain's ``batch_size`` of ``add_documents``: texts per embedding call here."""
    return None if value is None else check_positive_int(value, "batch_size", "texts per embedding call")


def _no_extra_options(method: str, kwargs: dict[str, Any]) -> None:
    if kwargs:
        raise InvalidParameterError(f"FusionIndex.{method} got unexpected argument(s) {sorted(kwargs)}")


def _width(vectors: Sequence[Sequence[float]]) -> int:
    try:
        return len(vectors[0])
    except (TypeError, IndexError):
        raise FusionError(f"the embedding model returned {type(vectors[0]).__name__} instead of a vector") from None
