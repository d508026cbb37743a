"""One immutable state of the in-process store: segments of rows, tombstones, live statistics.

A :class:`Snapshot` is never modified. A mutation builds a new snapshot that shares every
untouched part (segments, documents) with the old one, and the store publishes it with one
reference assignment. Readers that hold the old snapshot keep a complete, consistent state;
a mutation that fails half way leaves nothing behind but garbage for the collector.

Rows are numbered 0..n-1 across segments in insertion order. Deleting a row marks it dead
(a tombstone) and removes its terms from the live document frequencies; its postings and
vector stay until a compaction rewrites the segments without the dead rows. Statistics
(row count, average length, document frequencies) count live rows only, so scores equal a
fresh build over the live documents.

This module holds the state and its reads: rows and their documents, live statistics, filter
masks, and each side's scores over the segments. The mutations that build new snapshots are in
:mod:`~langchain_fusion.stores.local.mutations`; the read view and the per-query scorers in
:mod:`~langchain_fusion.stores.local.view` and :mod:`~langchain_fusion.stores.local.scorers`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, cast

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys_
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.stores.base import FloatMatrix, Keys, Where
from langchain_fusion.stores.local.bm25 import QueryWeights
from langchain_fusion.stores.local.documents import DocumentBlock
from langchain_fusion.stores.local.mapped import MappedFiles
from langchain_fusion.stores.local.postings import Postings
from langchain_fusion.stores.local.pruning import pruned_top
from langchain_fusion.stores.local.term_weights import COMMON_WEIGHTS_BUDGET, TermWeights
from langchain_fusion.stores.local.tokens import query_term_counts
from langchain_fusion.stores.local.vector_top import Contenders, batch_contenders, squared_norm_bound
from langchain_fusion.stores.local.vectors import AnnIndex, ProductsAt, inner_products, product_error, products_at
from langchain_fusion.stores.settings import StoreSettings

PRUNED_TOP_MIN_POSTINGS = 1 << 16
"""A BM25 top-k is found by pruning when the query's terms hold this many postings (fewer: weighing them all
is cheaper than pruning's fixed cost; chosen on each corpus shape of ``benchmarks/scale.py``)."""

BATCH_EVERY_ROW_MAX_ROWS = 1 << 18
"""In a batch, a BM25 top-k scores every row (with the batch's shared term weights) up to this many rows, where
a query's score array (1 MB) stays in a core's cache; see
:class:`~langchain_fusion.stores.local.scorers.LocalBM25Scorer`."""

BATCH_EVERY_ROW_POSTINGS_SHARE = 4
"""...and on more rows when the query's terms hold at most 1/this as many postings as there are rows."""

_FILTER_CACHE = 16
"""Metadata filter masks remembered per snapshot (filters repeat across queries)."""


@dataclass(frozen=True, eq=False)
class Segment:
    """Rows ``start .. start + len(vectors) - 1``: their documents, vectors, postings and optional ANN index."""

    start: int
    """Global row of the segment's first row."""
    vectors: FloatMatrix
    """Unit vectors, one per row (read-only)."""
    postings: Postings
    """BM25 term postings of the rows (local row numbers)."""
    documents: DocumentBlock
    """The rows' documents, kept compactly (materialised only when returned)."""
    ann: AnnIndex | None = None
    """Approximate index over ``vectors``, when configured and the segment is large enough."""

    @property
    def size(self) -> int:
        """Number of rows, dead ones included."""
        return int(self.vectors.shape[0])

    @property
    def stop(self) -> int:
        """Global row after the segment's last row."""
        return self.start + self.size

    @cached_property
    def squared_norm_bound(self) -> float:
        """The largest squared norm of the rows' vectors (computed on first use): bounds a scan's rounding."""
        return squared_norm_bound(self.vectors)


_PER_SEGMENT_CACHE = frozenset({"starts", "common_term_weights"})
"""Keys of :attr:`Snapshot._cache` laid out per segment, dropped when segments merge."""


@dataclass(frozen=True, eq=False)
class Snapshot:
    """An immutable state of the store; see the module docstring."""

    settings: StoreSettings
    """How the rows were indexed."""
    vector_index: str
    """FAISS factory string of the approximate index, or ``Flat`` for exact search only."""
    vector_search_params: str | None
    """FAISS search parameters of the approximate index."""
    vocabulary: Mapping[str, int]
    """BM25 token -> term id (never modified once published)."""
    segments: tuple[Segment, ...] = ()
    """The rows, in order (dead rows keep their documents and vectors until compaction)."""
    lengths: NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, np.int32))
    """BM25 tokens per row."""
    dead: NDArray[np.bool_] | None = None
    """Tombstones: True for deleted rows; None when no row is dead."""
    document_frequency: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """Live rows containing each term."""
    live_length: int = 0
    """Total BM25 tokens of live rows."""
    mapped: MappedFiles | None = None
    """The memory-mapped files of the folder the rows were loaded from, checked before serving; None if none."""
    _cache: dict[Any, Any] = field(default_factory=dict, init=False, repr=False)
    """Derived data computed on first use (safe: the snapshot never changes); a new snapshot starts empty."""

    def __getstate__(self) -> dict[str, Any]:
        """The snapshot for ``pickle`` and ``copy.deepcopy``, without its derived data (computed again on use)."""
        return {**self.__dict__, "_cache": {}}

    def cached(self) -> dict[Any, Any]:
        """The data derived so far and kept with this snapshot (a copy of the mapping; see :mod:`footprint`)."""
        return dict(self._cache)

    # --- shape -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Rows, dead ones included (the key space of a view)."""
        return int(self.lengths.size)

    def rows_of(self, ids: Sequence[str]) -> Keys:
        """The live row of each of ``ids`` (-1 where none): each block's ids looked up by their sorted hashes."""
        out = np.full(len(ids), -1, dtype=np.int64)
        live = self.live_mask()
        for segment in self.segments:
            positions, local = segment.documents.ids.matches(ids)
            rows = local + segment.start
            if live is not None:
                alive = live[rows]
                positions, rows = positions[alive], rows[alive]
            out[positions] = rows
        return out

    @property
    def live_count(self) -> int:
        """Live rows."""
        if self.dead is None:
            return self.size
        count = self._cache.get("live_count")
        if count is None:
            count = self._cache["live_count"] = self.size - int(np.count_nonzero(self.dead))
        return int(count)

    @property
    def approximate(self) -> bool:
        """Whether some segment proposes vector candidates from an ANN index (the others are scanned exactly)."""
        return any(segment.ann is not None for segment in self.segments)

    @property
    def dead_count(self) -> int:
        """Dead rows awaiting compaction."""
        return self.size - self.live_count

    def live_mask(self) -> NDArray[np.bool_] | None:
        """True for live rows, or None when every row is live."""
        if self.dead is None:
            return None
        cached = self._cache.get("live")
        if cached is None:
            cached = self._cache["live"] = ~self.dead
        return cached

    def average_length(self) -> float:
        """The live rows' average BM25 length (1 when there is none)."""
        return (self.live_length / self.live_count if self.live_count else 1.0) or 1.0

    def relative_lengths(self) -> NDArray[np.float32]:
        """Each row's BM25 length divided by the live average (computed once per snapshot)."""
        cached = self._cache.get("relative_lengths")
        if cached is None:
            relative = self.lengths.astype(np.float32) / np.float32(self.average_length())
            cached = self._cache["relative_lengths"] = cast("NDArray[np.float32]", relative)  # numpy's 3.10 stubs: Any
        return cached

    def check_aligned(self) -> None:
        """FusionError unless every side holds the same rows (documents, vectors, BM25 lengths, ids)."""
        vectors = sum(segment.size for segment in self.segments)
        documents = sum(len(segment.documents) for segment in self.segments)
        starts = [segment.start for segment in self.segments]
        expected_starts = [int(s) for s in np.cumsum([0] + [segment.size for segment in self.segments])[:-1]]
        problems = []
        if not (documents == vectors == self.lengths.size):
            problems.append(f"{documents} documents, {vectors} vectors, {self.lengths.size} BM25 rows")
        if starts != expected_starts:
            problems.append("segments are not contiguous")
        if self.dead is not None and self.dead.size != self.size:
            problems.append("tombstones do not cover the rows")
        if problems:
            raise FusionError(f"index parts are not aligned ({'; '.join(problems)}); refusing to use them")

    def with_segments(self, segments: tuple[Segment, ...]) -> Snapshot:
        """The same rows laid out in ``segments`` (merged, or given ANN indexes), keeping what was derived from them."""
        # Row-based derived data stays valid; the segment starts and the weights kept per segment do not once
        # segments merged. Readers may be adding to the cache: copy it in one step before reading it.
        cache = dict(self._cache)
        if len(segments) != len(self.segments):
            cache = {key: value for key, value in cache.items() if key not in _PER_SEGMENT_CACHE}
        new = replace(self, segments=segments)
        new._cache.update(cache)
        return new

    # --- reads -------------------------------------------------------------------------------

    def _starts(self) -> NDArray[np.int64]:
        starts = self._cache.get("starts")
        if starts is None:
            starts = self._cache["starts"] = np.asarray([s.start for s in self.segments], dtype=np.int64)
        return starts

    def _located(self, row: int) -> tuple[Segment, int]:
        """The segment holding global ``row`` and the row's position in it."""
        segment = self.segments[int(np.searchsorted(self._starts(), row, side="right")) - 1]
        return segment, row - segment.start

    def _located_many(self, rows: Keys) -> list[tuple[Segment, int]]:
        """:meth:`_located` of each of ``rows`` (one search for them all)."""
        rows = np.asarray(rows, dtype=np.int64)
        which = np.searchsorted(self._starts(), rows, side="right") - 1
        return [
            (segment, row - segment.start)
            for segment, row in zip((self.segments[i] for i in which.tolist()), rows.tolist(), strict=True)
        ]

    def id_of(self, row: int) -> str:
        """The document id of ``row``."""
        segment, local = self._located(row)
        return segment.documents.ids[local]

    def document(self, row: int) -> Document:
        """A new ``Document`` for ``row``."""
        segment, local = self._located(row)
        return segment.documents.document(local)

    def texts_of(self, rows: Keys) -> list[str]:
        """The ``page_content`` of ``rows``, in order."""
        return [segment.documents.text(local) for segment, local in self._located_many(rows)]

    def ids_of(self, rows: Keys) -> list[str]:
        """The document ids of ``rows``, in order (no document is built)."""
        return [segment.documents.ids[local] for segment, local in self._located_many(rows)]

    def documents_of(self, rows: Keys) -> list[Document]:
        """New ``Document`` objects for ``rows``, in order."""
        return [segment.documents.document(local) for segment, local in self._located_many(rows)]

    def iter_rows(self) -> Iterator[tuple[int, Segment, int]]:
        """``(row, segment, local row)`` of every live row, in row order."""
        live = self.live_mask()
        for segment in self.segments:
            for local in range(segment.size):
                row = segment.start + local
                if live is None or live[row]:
                    yield row, segment, local

    def vectors_of(self, rows: Keys) -> FloatMatrix:
        """The stored vectors of ``rows``, in order."""
        dimension = self.settings.dimension or 0
        if len(self.segments) == 1 and self.segments[0].vectors.shape[1] == dimension:
            segment = self.segments[0]
            return np.take(segment.vectors, rows - segment.start, axis=0)
        out = np.empty((rows.size, dimension), dtype=np.float32)
        for segment, inside, local in self._rows_by_segment(rows):
            out[inside] = segment.vectors[local]
        return out

    def _rows_by_segment(self, rows: Keys) -> Iterator[tuple[Segment, NDArray[np.bool_], Keys]]:
        """For each segment holding some of ``rows``: which of ``rows`` it holds, and their rows in it."""
        for segment in self.segments:
            inside = (rows >= segment.start) & (rows < segment.stop)
            if inside.any():
                yield segment, inside, rows[inside] - segment.start

    def products_at(self, rows: Keys, vector: NDArray[np.float32]) -> ProductsAt:
        """Float32 inner products of ``rows`` with ``vector`` and bounds on their rounding (:func:`products_at`)."""
        if len(self.segments) == 1:
            return products_at(self.segments[0].vectors, rows - self.segments[0].start, vector)
        products, error = np.zeros(rows.size, dtype=np.float64), np.full(rows.size, np.inf)  # no segment: unsure
        for segment, inside, local in self._rows_by_segment(rows):
            found = products_at(segment.vectors, local, vector)
            products[inside], error[inside] = found.products, found.error
        return ProductsAt(products, error)

    def vector_scores_all(self, query: FloatMatrix) -> NDArray[np.float32]:
        """Exact similarity of the query to every row."""
        vector = np.ascontiguousarray(query[0], dtype=np.float32)
        if len(self.segments) == 1:
            return inner_products(self.segments[0].vectors, vector)
        out = np.empty(self.size, dtype=np.float32)
        for segment in self.segments:
            out[segment.start : segment.stop] = inner_products(segment.vectors, vector)
        return out

    def vector_error(self, query: FloatMatrix) -> float:
        """A bound on how far any row's float32 product with ``query`` (1 x dimension) is from its float64 one."""
        bound = max((segment.squared_norm_bound for segment in self.segments), default=0.0)
        return float(product_error(np.float32(bound), query[0], query.shape[1]))

    def vector_contenders_many(self, queries: FloatMatrix, depth: int, where: Where | None) -> list[Contenders]:
        """For each query (a row), the rows ``where`` allows that may be among its ``depth`` most similar: one pass."""
        errors = np.array([self.vector_error(queries[i : i + 1]) for i in range(queries.shape[0])])
        parts = [(segment.start, segment.vectors) for segment in self.segments]
        return batch_contenders(parts, queries, depth, errors, self.allowed(where))

    def vector_scores_many(self, queries: FloatMatrix) -> NDArray[np.float32]:
        """Exact similarity of each query (a row of ``queries``) to every row: one pass over the vectors."""
        out = np.empty((queries.shape[0], self.size), dtype=np.float32)
        for segment in self.segments:
            # One matrix product reads the segment once for all queries.
            np.matmul(queries, segment.vectors.T, out=out[:, segment.start : segment.stop])
        return out

    def bm25_scores_all(
        self, query: str | QueryWeights | None, shared: TermWeights | None = None
    ) -> NDArray[np.float32]:
        """BM25 score of every row for ``query`` (or its weighting; None: no live row holds a term).

        Dead rows get meaningless values. ``shared``: term weights computed for other queries of a
        batch, reused and added to; None: the snapshot's own (:meth:`common_term_weights`).
        """
        out = np.zeros(self.size, dtype=np.float32)
        weights = self.bm25_weights(query) if isinstance(query, str) else query
        if weights is not None:
            weights.add_scores(out, self.bm25_blocks(), shared if shared is not None else self.common_term_weights())
        return out

    def common_term_weights(self) -> TermWeights:
        """The weights of common terms kept for every query of this snapshot (made on first use).

        A term held by a third or more of a segment's rows is weighed once per snapshot, kept as
        one float32 array over the segment, and added as one vector by each query scoring every
        row (at most :data:`~langchain_fusion.stores.local.term_weights.COMMON_WEIGHTS_BUDGET` bytes),
        several times cheaper than weighing them per query (``docs/benchmarks.md``). A change to the
        index makes a new snapshot, whose statistics (and weights) are new.
        """
        kept = self._cache.get("common_term_weights")
        if kept is None:
            kept = self._cache.setdefault("common_term_weights", TermWeights(COMMON_WEIGHTS_BUDGET, common_only=True))
        return kept  # type: ignore[no-any-return]

    def bm25_weights(self, query: str) -> QueryWeights | None:
        """The weighting of ``query``'s terms under the live statistics; None when no live row holds one."""
        if self.live_count == 0:
            return None
        terms = query_term_counts(self.settings.analyzer, self.vocabulary, query)
        if not terms:
            return None
        params, average = self.settings.bm25_params, self.average_length()
        weights = QueryWeights(
            params, terms, self.document_frequency, self.live_count, self.relative_lengths(), average
        )
        return weights if weights.terms else None

    def bm25_blocks(self) -> list[tuple[Postings, int]]:
        """Every segment's postings and first row."""
        return [(s.postings, s.start) for s in self.segments]

    def bm25_top(
        self, weights: QueryWeights, k: int, allowed: NDArray[np.bool_] | None, in_batch: bool = False
    ) -> tuple[Keys, NDArray[np.float32]] | None:
        """The exact BM25 top ``k`` found by pruning (see :func:`pruned_top`); None where it does not pay.

        ``in_batch``: the query's term weights are shared with a batch's other queries, which makes
        scoring every row cheaper than pruning on small corpora and for queries of rare terms.
        """
        blocks = self.bm25_blocks()
        postings = weights.postings_count(blocks)
        if postings < PRUNED_TOP_MIN_POSTINGS:
            return None
        if in_batch and (
            self.size <= BATCH_EVERY_ROW_MAX_ROWS or postings * BATCH_EVERY_ROW_POSTINGS_SHARE <= self.size
        ):
            return None
        return pruned_top(weights, self.size, blocks, k, allowed)

    def allowed(self, where: Where | None) -> NDArray[np.bool_] | None:
        """Rows a search may return: live and matching ``where``; None when that is every row."""
        mask = self.live_mask()
        if where is None or where.is_empty:
            return mask
        if where.metadata is not None:
            meta_mask = self._metadata_mask(where.metadata)
            mask = meta_mask if mask is None else mask & meta_mask
        if where.ids is not None:
            id_mask = np.zeros(self.size, dtype=bool)
            found = self.rows_of(list(where.ids))
            id_mask[found[found >= 0]] = True
            mask = id_mask if mask is None else mask & id_mask
        return mask

    def _metadata_mask(self, spec: Any) -> NDArray[np.bool_]:
        key = _filter_key(spec)
        masks: dict[str, NDArray[np.bool_]] = self._cache.get("filters", {})
        if key is not None and key in masks:
            return masks[key]
        mask = self._mapping_mask(spec) if isinstance(spec, Mapping) else self._callable_mask(spec)
        if key is not None:
            # Readers share this cache: replace the dict, never change one another thread may be reading.
            updated = dict(masks)
            while len(updated) >= _FILTER_CACHE:
                updated.pop(next(iter(updated)))
            updated[key] = mask
            self._cache["filters"] = updated
        return mask

    def _mapping_mask(self, spec: Mapping[str, Any]) -> NDArray[np.bool_]:
        """Rows whose metadata has every key of ``spec`` equal to its value (a list: any of them).

        Each key is a column of codes per segment (see :class:`DocumentBlock`), so this costs a
        comparison of small integers per row, not a parse of every row's metadata.
        """
        mask = np.ones(self.size, dtype=bool)
        for key, value in spec.items():
            wanted = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
            for segment in self.segments:
                mask[segment.start : segment.stop] &= segment.documents.column(key).matching(wanted)
        return mask

    def _callable_mask(self, spec: Any) -> NDArray[np.bool_]:
        """Rows for which ``spec(metadata)`` is true (every row's metadata is parsed: the slow path)."""
        if not callable(spec):
            raise InvalidParameterError(
                "filter must be a mapping of metadata key to value, or a callable taking metadata; "
                f"got {type(spec).__name__}"
            )
        values = (bool(spec(metadata)) for s in self.segments for metadata in s.documents.iter_metadata())
        return np.fromiter(values, dtype=bool, count=self.size)

    def chunk_rows(self) -> dict[tuple[str, int], int]:
        """Live row of each (source, chunk_index); the first row wins when two share a key."""
        table = self._cache.get("chunks")
        if table is None:
            table = {}
            live = self.live_mask()
            for segment in self.segments:
                sources = segment.documents.column(keys_.SOURCE)
                indexes = segment.documents.column(keys_.CHUNK_INDEX)
                source_of = {code: value for value, code in sources.values.items()}
                index_of = {code: value for value, code in indexes.values.items()}
                for local, (source, index) in enumerate(
                    zip(sources.codes.tolist(), indexes.codes.tolist(), strict=True)
                ):
                    row = segment.start + local
                    if (live is not None and not live[row]) or source < 0 or index < 0:
                        continue
                    value = index_of[index]
                    if source_of[source] is not None and isinstance(value, int) and not isinstance(value, bool):
                        table.setdefault((str(source_of[source]), value), row)
            self._cache["chunks"] = table
        return table


def empty_snapshot(settings: StoreSettings, vector_index: str, vector_search_params: str | None) -> Snapshot:
    """A snapshot with no rows."""
    return Snapshot(
        settings=settings, vector_index=vector_index, vector_search_params=vector_search_params, vocabulary={}
    )


def _filter_key(spec: Any) -> str | None:
    """A cache key for a mapping filter, or None (callables are not cached)."""
    if not isinstance(spec, Mapping):
        return None
    # Only plain JSON values: anything else (sets, objects) is not cached, so two filters never share a key.
    try:
        return json.dumps(spec, sort_keys=True)
    except (TypeError, ValueError):
        return None
