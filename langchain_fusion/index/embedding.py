"""The index's embedding model: documents in batches, queries one by one or together, always normalised.

:class:`IndexEmbedder` is what a :class:`~langchain_fusion.index.fusion_index.FusionIndex` asks for
vectors. It turns the model's own failures (a bad key, no network, a quota) into one
:class:`~langchain_fusion.errors.ProviderError` line, checks what the model returns (one vector
per text, all of one width), and L2-normalises every row, so the vector side can score with an
inner product. :func:`model_for_store` picks (or checks) the model an existing store must be
read with.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence, Sized
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

from langchain_fusion._checks import check_positive_int
from langchain_fusion.errors import EmbeddingsMismatchError, FusionError, ProviderError, describe_error
from langchain_fusion.models import scripts
from langchain_fusion.models.embeddings import (
    aembed_queries,
    default_embeddings,
    embed_queries,
    embeddings_from_id,
    embeddings_id,
)
from langchain_fusion.phases import phase
from langchain_fusion.progress import ProgressCallback
from langchain_fusion.stores.base import FloatMatrix, FusionStore
from langchain_fusion.stores.local.vectors import normalize_rows

DEFAULT_EMBEDDING_BATCH_SIZE = 256
"""Texts per call to the model when documents are embedded."""

EMPTY_INDEX = "the index is empty: add documents before querying the vector side"
"""Why a query cannot be embedded before the index knows its dimension."""


class IndexEmbedder:
    """One embedding model as an index uses it: normalised rows, checked answers, provider errors in one line."""

    def __init__(self, embeddings: Embeddings, batch_size: int = DEFAULT_EMBEDDING_BATCH_SIZE) -> None:
        self.embeddings = embeddings
        """The LangChain model."""
        self.id = embeddings_id(embeddings)
        """The model's id, as a saved index records it."""
        self.batch_size = check_positive_int(batch_size, "embedding_batch_size", "texts per embedding call")
        """Texts per call when documents are embedded."""
        self._reader = scripts.ScriptReader(embeddings)

    def unread(self, query: str, *, probe: bool = True) -> scripts.Unread | None:
        """Why the model cannot read ``query``, or None (see :class:`~langchain_fusion.models.scripts.ScriptReader`).

        A probe the query needs is one call to the model, whose failures are :meth:`provider_call`'s.
        """
        with self.provider_call():
            return self._reader.unread(query, probe=probe)

    def documents(
        self,
        texts: list[str],
        dimension: int | None,
        progress: ProgressCallback | None = None,
        batch_size: int | None = None,
    ) -> FloatMatrix:
        """The normalised vectors of ``texts`` (one row each), ``batch_size`` texts per call to the model.

        ``dimension`` is the index's (None for a new index: the model's first answer sets it);
        ``progress`` is called with the number of texts of each batch once it is embedded.
        """
        matrix: FloatMatrix | None = None
        step = batch_size or self.batch_size
        for start in range(0, len(texts), step):
            batch = texts[start : start + step]
            with self.provider_call(), phase("embed"):
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

    def query(self, query: str, dimension: int | None) -> FloatMatrix:
        """The query's normalised embedding as a 1 x dimension matrix."""
        with self.provider_call():
            vector = self.embeddings.embed_query(query)
        return self.query_matrix(vector, dimension)

    async def aquery(self, query: str, dimension: int | None) -> FloatMatrix:
        """Async twin of :meth:`query` (uses the model's async API)."""
        with self.provider_call():
            vector = await self.embeddings.aembed_query(query)
        return self.query_matrix(vector, dimension)

    def queries(self, queries: Sequence[str], dimension: int | None, max_concurrency: int | None) -> FloatMatrix:
        """Normalised embeddings of several queries, one row each (see :func:`~.embeddings.embed_queries`)."""
        with self.provider_call():
            vectors = embed_queries(self.embeddings, queries, max_concurrency)
        return _query_rows(vectors, len(queries), dimension)

    async def aqueries(self, queries: Sequence[str], dimension: int | None, max_concurrency: int | None) -> FloatMatrix:
        """Async twin of :meth:`queries`."""
        with self.provider_call():
            vectors = await aembed_queries(self.embeddings, queries, max_concurrency)
        return _query_rows(vectors, len(queries), dimension)

    @staticmethod
    def query_matrix(vector: Sequence[float], dimension: int | None) -> FloatMatrix:
        """One query vector, normalised, as a 1 x ``dimension`` matrix (FusionError on an empty index)."""
        if dimension is None:
            raise FusionError(EMPTY_INDEX)
        return normalize_rows([vector], dimension)

    @contextlib.contextmanager
    def provider_call(self) -> Iterator[None]:
        """Turn the model's own failures (bad key, no network, quota) into one ProviderError line."""
        try:
            yield
        except FusionError:
            raise
        except Exception as exc:
            raise ProviderError(f"the embedding model {self.id} failed: {describe_error(exc)}") from exc


def model_for_store(
    store: FusionStore, embeddings: Embeddings | None, *, check_dimension: bool = True, label: str | None = None
) -> Embeddings:
    """The model to read ``store`` with: ``embeddings``, checked against what built it, or the recorded one.

    The recorded model is recreated by name (the bundled local model, OpenAI); others must be
    passed. A different model, or one with another dimension (unless ``check_dimension=False``,
    which saves loading the model), is an :class:`EmbeddingsMismatchError`. ``label`` names the
    store in the messages.
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
    return embeddings


def _query_rows(vectors: Sequence[Any], expected: int, dimension: int | None) -> FloatMatrix:
    if len(vectors) != expected:
        raise FusionError(f"the embedding model returned {len(vectors)} vectors for {expected} queries")
    if dimension is None:
        raise FusionError(EMPTY_INDEX)
    return normalize_rows(vectors, dimension)


def _width(vectors: Sequence[Sequence[float]]) -> int:
    try:
        return len(vectors[0])
    except (TypeError, IndexError):
        raise FusionError(f"the embedding model returned {type(vectors[0]).__name__} instead of a vector") from None
