"""The store seam: the few operations the fused search needs from wherever the rows live.

Everything above this module (fusion, retrievers, windows, rerank, chains, server, CLI) talks
to rows only through :class:`FusionStore` and the read views it hands out; nothing above it
knows which engine holds them. A store keeps, for every row, its id, its document, its vector
and the text its BM25 side indexed, and describes itself with a
:class:`~langchain_fusion.stores.settings.StoreSettings`.

Reads go through a :class:`StoreView`: one consistent state of the store. The in-process store
gives an immutable snapshot (a query never sees half of a mutation); a remote store gives the
engine's own consistency. A view names rows by **keys**: int64 handles valid within that view
only (row numbers in process, handles assigned on first sight by a remote store). Keys let the
search build its candidate pool with NumPy; ids are the stable names outside a view.

Scores follow one convention on every store: vector scores are cosine similarities (higher is
better) and BM25 scores are on the in-process scale (see :mod:`langchain_fusion.stores.local.bm25`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion.stores.filters import MetadataFilter
from langchain_fusion.stores.settings import StoreSettings

Keys = NDArray[np.int64]
"""Row keys of one view (see the module docstring)."""

Scores = NDArray[np.float64]
"""Scores aligned with a :data:`Keys` array."""

FloatMatrix = NDArray[np.float32]
"""A float32 matrix of row vectors."""


@dataclass(frozen=True)
class Where:
    """Which rows a search may return, decided before ranking (never a post-filter)."""

    metadata: MetadataFilter | None = None
    """Metadata conditions (see :mod:`langchain_fusion.stores.filters`), or None."""
    ids: frozenset[str] | None = None
    """Only rows with these document ids, or None for any id."""

    @property
    def is_empty(self) -> bool:
        """True when nothing is restricted."""
        return self.metadata is None and self.ids is None


class SideScorer(Protocol):
    """One query on one side (vector or BM25) of a view."""

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` best rows allowed by ``where``, best first, ties by key.

        ``k=None`` returns every allowed row (vector side) or every allowed row that matches
        a query term (BM25 side), in any order. The BM25 side returns only rows with a
        positive score.
        """
        ...

    def scores(self, keys: Keys) -> Scores:
        """The exact scores of ``keys`` (BM25: with the statistics of the whole store, whatever the filter)."""
        ...


@runtime_checkable
class WholeCorpusScorer(Protocol):
    """Optional capability: a side that scores every row at once (for ``fetch_k=None``)."""

    def all_scores(self) -> Scores:
        """The score of every key 0..n_keys-1 of the view (tombstones and filters not applied)."""
        ...


@runtime_checkable
class BatchScorer(Protocol):
    """Optional capability of a view: score many queries at once (one pass over vectors and postings)."""

    def vector_many(
        self, query_vectors: FloatMatrix, depth: int | None = None, where: Where | None = None
    ) -> Sequence[SideScorer]:
        """The vector side for each normalised query vector (one per row of ``query_vectors``).

        ``depth``: the deepest top-k the batch will ask for under ``where`` (a hint: a view may
        prepare that much and answer anything else as it would alone).
        """
        ...

    def bm25_many(self, queries: Sequence[str]) -> Sequence[SideScorer]:
        """The BM25 side for each query text."""
        ...


@runtime_checkable
class ConcurrentSides(Protocol):
    """Optional capability of a view: its two sides may search at the same time, from two threads."""

    def sides_in_parallel(self, where: Where | None) -> bool:
        """Whether searching the sides under ``where`` side by side pays for handing one to another thread."""
        ...


@runtime_checkable
class ReleasableScorer(Protocol):
    """Optional capability of a side scorer: drop what it computed for its query alone once that query is done."""

    def release(self) -> None:
        """Forget the score arrays computed for this query (computed again if it is searched again)."""
        ...


@runtime_checkable
class ConcurrentWholeCorpus(Protocol):
    """Optional capability of a view: both sides may score every row at the same time, from two threads."""

    def whole_corpus_in_parallel(self, where: Where | None) -> bool:
        """Whether scoring every row of the two sides (``fetch_k=None``) side by side pays for a second thread."""
        ...


@runtime_checkable
class JointCompletion(Protocol):
    """Optional capability of a view: complete both sides' missing scores of one query in one request."""

    def complete_both(
        self, vector: SideScorer, vector_keys: Keys, bm25: SideScorer, bm25_keys: Keys
    ) -> tuple[Scores, Scores]:
        """``vector.scores(vector_keys)`` and ``bm25.scores(bm25_keys)``, equal to asking each side."""
        ...


@runtime_checkable
class TextReader(Protocol):
    """Optional capability of a view: rows' texts read without building their documents (in process: cheaper)."""

    def texts(self, keys: Keys) -> list[str]:
        """The ``page_content`` of ``keys``, in order."""
        ...


@runtime_checkable
class IdsBySource(Protocol):
    """Optional capability of a view: which chunk ids each source has, without reading texts or vectors."""

    def ids_by_source(self) -> dict[str, set[str]]:
        """Every live row's id under its source (``str`` of its source metadata, '' when it has none)."""
        ...


class StoreView(ABC):
    """A consistent read view of a store: what one query (or one batch) sees."""

    documents_are_new: ClassVar[bool] = False
    """True when :meth:`documents` builds a new object for every key on every call (its metadata too, nothing
    nested shared with the store), which the caller may change."""

    @property
    @abstractmethod
    def settings(self) -> StoreSettings:
        """How the rows were indexed."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of live rows."""

    def known_empty(self) -> bool:
        """True when the view is known to hold no rows, answered without a round trip to an engine.

        Exact in process. A remote store answers from what it knows (no collection yet) and says
        False for an existing collection, which may be empty: searching it then finds nothing.
        """
        return len(self) == 0

    @abstractmethod
    def vector(self, query_vector: FloatMatrix) -> SideScorer:
        """The vector side for one normalised query vector (1 x dimension)."""

    @abstractmethod
    def bm25(self, query: str) -> SideScorer:
        """The BM25 side for one query text (the store applies its analyzer)."""

    @abstractmethod
    def documents(self, keys: Keys) -> list[Document]:
        """The stored documents of ``keys`` in order (shared: copy them first, unless :attr:`documents_are_new`)."""

    def ids(self, keys: Keys) -> list[str]:
        """The document ids of ``keys``, in order ('' for a document without one).

        This reads whole documents; stores that can read ids alone override it (an evaluation
        sweep needs only the ids of thousands of results).
        """
        return [doc.id or "" for doc in self.documents(keys)]

    @abstractmethod
    def vectors(self, keys: Keys) -> FloatMatrix:
        """The stored unit vectors of ``keys``, in order (for diversity re-ranking)."""

    @abstractmethod
    def keys_of(self, ids: Sequence[str]) -> Keys:
        """The keys of the documents with these ids; -1 where an id is not in the view."""

    @abstractmethod
    def select(self, where: Where) -> Keys:
        """The keys of every live row allowed by ``where``, ascending."""

    @abstractmethod
    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """The chunks of ``source`` at these ``chunk_index`` positions that exist (shared objects)."""

    @abstractmethod
    def iter_documents(self) -> Iterator[Document]:
        """Every live document, in row order where the store has one (shared objects)."""

    def mask_capable(self) -> bool:
        """True when callables work as metadata filters (in process); remote stores refuse them."""
        return True


class FusionStore(ABC):
    """Where the rows live: upsert, delete, and consistent read views. See the module docstring.

    Mutations are all or nothing: a failure at any point (including ``KeyboardInterrupt`` and
    ``MemoryError``) leaves the store exactly as it was. Views taken before a mutation keep
    seeing the state before it.
    """

    @property
    @abstractmethod
    def settings(self) -> StoreSettings:
        """How the rows were (or will be) indexed."""

    @abstractmethod
    def configure(self, settings: StoreSettings) -> None:
        """Record the settings an index will write with; refuses a change once rows exist."""

    @abstractmethod
    def view(self) -> StoreView:
        """A consistent read view of the current state."""

    @abstractmethod
    def upsert(self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]) -> None:
        """Insert rows, replacing any row with the same id; documents must carry unique ids.

        ``vectors`` are normalised (one row per document) and ``bm25_texts`` are what the BM25
        side indexes for each document.
        """

    @abstractmethod
    def delete(self, ids: Sequence[str]) -> int:
        """Remove the rows with these ids (unknown ids are ignored); returns how many were removed."""

    def clear(self) -> int:
        """Remove every row; returns how many were removed (an engine may do it in one operation)."""
        return self.delete([doc.id or "" for doc in self.view().iter_documents()])

    def check_reachable(self) -> None:
        """A FusionError when the engine cannot be reached (a remote store's health check; in process: never)."""
        return None

    def close(self) -> None:
        """Release the engine's connection (nothing to release in process); the store is unusable afterwards."""
        return None

    def describe(self) -> Mapping[str, Any]:
        """A JSON-able description for health checks and logs (engine, counts, settings)."""
        view = self.view()
        return {"engine": type(self).__name__, "rows": len(view), **self.settings.model_dump(mode="json")}
