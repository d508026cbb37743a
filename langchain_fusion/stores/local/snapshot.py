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
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys_
from langchain_fusion.errors import FusionError, InvalidParameterError
from langchain_fusion.stores.base import FloatMatrix, Keys, Scores, StoreView, Where
from langchain_fusion.stores.local.bm25 import (
    COMMON_WEIGHTS_BUDGET,
    Postings,
    QueryWeights,
    TermWeights,
    merge_postings,
    postings_of_texts,
)
from langchain_fusion.stores.local.documents import DocumentBlock
from langchain_fusion.stores.local.mapped import MappedFiles
from langchain_fusion.stores.local.tokens import query_term_counts
from langchain_fusion.stores.local.vectors import (
    AnnIndex,
    ProductsAt,
    check_vector_index,
    exact_products,
    inner_products,
    products_at,
)
from langchain_fusion.stores.ranking import top_rows
from langchain_fusion.stores.settings import StoreSettings
from langchain_fusion.threads import usable_cores

MERGE_FACTOR = 4
"""A segment is merged into its predecessor once it holds at least 1/MERGE_FACTOR of its rows."""

COMPACT_DEAD_RATIO = 0.25
"""Segments are rewritten without dead rows once this share of all rows is dead."""

PARALLEL_SIDES_MIN_ROWS = 1 << 16
"""From this many rows a fused query searches its vector and BM25 sides in two threads."""

_MANY_CORES = usable_cores() > 1

CONTENDERS_MIN_RATIO = 2
"""ANN candidates are narrowed by float32 products with error bounds before the float64 rescoring when there are
more than this many per wanted row (indexes of compressed codes propose ``k_factor`` of them, 10 by default, and
several segments each their own)."""

PRUNED_TOP_MIN_POSTINGS = 1 << 16
"""A BM25 top-k is found by pruning when the query's terms hold this many postings (fewer: weighing them all
is cheaper than pruning's fixed cost; measured at 100k rows of each benchmark corpus shape)."""

BATCH_EVERY_ROW_MAX_ROWS = 1 << 18
"""In a batch, a BM25 top-k scores every row (with the batch's shared term weights) up to this many rows, where
a query's score array (1 MB) stays in a core's cache; see :class:`LocalBM25Scorer`."""

BATCH_EVERY_ROW_POSTINGS_SHARE = 4
"""...and on more rows when the query's terms hold at most 1/this as many postings as there are rows."""

FEW_ROWS_SHARE = 16
"""BM25 scores of fewer than 1/this of the rows are looked up in the postings rather than computed for every row."""

ANN_MIN_ROWS = 4096
"""Segments smaller than this are scanned exactly even when an approximate index is configured."""

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
    id_table: Mapping[str, int] | None = field(default_factory=dict)
    """Live document id -> row; None until first needed (a loaded snapshot builds it from the ids)."""
    document_frequency: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))
    """Live rows containing each term."""
    live_length: int = 0
    """Total BM25 tokens of live rows."""
    mapped: MappedFiles | None = None
    """The memory-mapped files of the folder the rows were loaded from, checked before serving; None if none."""
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)
    """Derived data computed on first use (safe: the snapshot never changes)."""

    # --- shape -------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Rows, dead ones included (the key space of a view)."""
        return int(self.lengths.size)

    @property
    def rows(self) -> Mapping[str, int]:
        """Live document id -> row (built on first use when the snapshot was loaded)."""
        if self.id_table is not None:
            return self.id_table
        table = self._cache.get("rows")
        if table is None:
            ids = (i for segment in self.segments for i in segment.documents.ids)
            table = dict(zip(ids, range(self.size), strict=True))
            if self.dead is not None:
                for row in np.flatnonzero(self.dead).tolist():
                    table.pop(self.id_of(row), None)
            self._cache["rows"] = table
        return table

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

    def relative_lengths(self) -> NDArray[np.float32]:
        """Each row's BM25 length divided by the live average (computed once per snapshot)."""
        cached = self._cache.get("relative_lengths")
        if cached is None:
            average = self.live_length / self.live_count if self.live_count else 1.0
            relative = self.lengths.astype(np.float32) / np.float32(average or 1.0)
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
        if not problems and any(self.id_of(row) != doc_id for doc_id, row in self.rows.items()):
            problems.append("the id table points at other documents")
        if problems:
            raise FusionError(f"index parts are not aligned ({'; '.join(problems)}); refusing to use them")

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

    def vector_scores_many(self, queries: FloatMatrix) -> NDArray[np.float32]:
        """Exact similarity of each query (a row of ``queries``) to every row: one pass over the vectors."""
        out = np.empty((queries.shape[0], self.size), dtype=np.float32)
        for segment in self.segments:
            # One matrix product reads the segment once for all queries.
            np.matmul(queries, segment.vectors.T, out=out[:, segment.start : segment.stop])
        return out

    def bm25_scores_all(self, query: str, shared: TermWeights | None = None) -> NDArray[np.float32]:
        """BM25 score of every row for ``query`` (dead rows get meaningless values).

        ``shared``: term weights computed for other queries of a batch, reused and added to;
        None: the snapshot's own (:meth:`common_term_weights`).
        """
        out = np.zeros(self.size, dtype=np.float32)
        weights = self.bm25_weights(query)
        if weights is not None:
            weights.add_scores(out, self.bm25_blocks(), shared if shared is not None else self.common_term_weights())
        return out

    def common_term_weights(self) -> TermWeights:
        """The weights of common terms kept for every query of this snapshot (made on first use).

        A term held by a third or more of a segment's rows is weighed once per snapshot, kept as
        one float32 array over the segment, and added as one vector by each query scoring every
        row (at most :data:`~langchain_fusion.stores.local.bm25.COMMON_WEIGHTS_BUDGET` bytes).
        100k zipf chunks, every row's BM25 score: 2.54 -> 0.49 ms a query. A change to the
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
        weights = QueryWeights(
            self.settings.bm25_params, terms, self.document_frequency, self.live_count, self.relative_lengths()
        )
        return weights if weights.terms else None

    def bm25_blocks(self) -> list[tuple[Postings, int]]:
        """Every segment's postings and first row."""
        return [(s.postings, s.start) for s in self.segments]

    def bm25_top(
        self, weights: QueryWeights, k: int, allowed: NDArray[np.bool_] | None, in_batch: bool = False
    ) -> tuple[Keys, NDArray[np.float32]] | None:
        """The exact BM25 top ``k`` found by pruning (see :meth:`QueryWeights.top`); None where it does not pay.

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
        return weights.top(self.size, blocks, k, allowed)

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
            found = [row for i in where.ids if (row := self.rows.get(i)) is not None]
            id_mask[np.asarray(found, dtype=np.int64)] = True
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

    # --- mutations (each returns a new snapshot) ---------------------------------------------

    def upserted(self, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]) -> Snapshot:
        """A snapshot with these rows added, replacing live rows with the same ids."""
        if not documents:
            return self
        ids = [doc.id for doc in documents]
        if any(not isinstance(i, str) or not i for i in ids) or len(set(ids)) != len(ids):
            raise FusionError("every row needs a distinct, non-empty string id; got repeated or missing ids")
        dimension = int(vectors.shape[1])
        settings = self.settings
        if settings.dimension is None:
            settings = settings.model_copy(update={"dimension": dimension})
        elif settings.dimension != dimension:
            raise FusionError(
                f"expected vectors of dimension {settings.dimension}; got {dimension}. "
                "Every text must be embedded by the same model that built the index."
            )
        replaced = np.asarray([r for d in documents if (r := self.rows.get(d.id or "")) is not None], dtype=np.int64)
        state = self._without_rows(replaced) if replaced.size else self
        vocabulary = dict(state.vocabulary)
        postings, lengths = postings_of_texts(settings.analyzer, bm25_texts, vocabulary)
        start = state.size
        block = DocumentBlock.from_documents(documents)
        segment = Segment(start=start, vectors=_read_only(vectors), postings=postings, documents=block)
        frequency = _padded(state.document_frequency, len(vocabulary)) + postings.document_frequencies(len(vocabulary))
        rows = dict(state.rows)
        rows.update({doc.id or "": start + position for position, doc in enumerate(documents)})
        dead = None if state.dead is None else np.concatenate((state.dead, np.zeros(len(documents), dtype=bool)))
        new = replace(
            state,
            settings=settings,
            vocabulary=vocabulary,
            segments=(*state.segments, segment),
            lengths=np.concatenate((state.lengths, lengths)),
            dead=dead,
            id_table=rows,
            document_frequency=frequency,
            live_length=state.live_length + int(lengths.sum()),
            _cache={},
        )
        return new._maintained()

    def deleted(self, ids: Sequence[str]) -> tuple[Snapshot, int]:
        """A snapshot without the live rows of these ids (unknown ids are ignored), and how many went."""
        found = np.unique(np.asarray([r for i in ids if (r := self.rows.get(i)) is not None], dtype=np.int64))
        if found.size == 0:
            return self, 0
        return self._without_rows(found)._maintained(), int(found.size)

    def _without_rows(self, rows: Keys) -> Snapshot:
        """Tombstone live ``rows`` and take them out of the statistics."""
        flagged = np.zeros(self.size, dtype=bool)
        flagged[rows] = True
        frequency = self.document_frequency.copy()
        for segment in self.segments:
            local = flagged[segment.start : segment.stop]
            if local.any():
                frequency -= np.bincount(segment.postings.terms_of_rows(local), minlength=frequency.size)
        dead = flagged if self.dead is None else self.dead | flagged
        remaining = dict(self.rows)
        for row in rows.tolist():
            remaining.pop(self.id_of(row), None)
        return replace(
            self,
            dead=dead,
            id_table=remaining,
            document_frequency=frequency,
            live_length=self.live_length - int(self.lengths[rows].sum()),
            _cache={},
        )

    def _maintained(self) -> Snapshot:
        """Merge small trailing segments, compact when many rows are dead, build ANN indexes."""
        state = self
        if state.dead_count and state.dead_count >= COMPACT_DEAD_RATIO * state.size:
            state = state.compacted()
        segments = list(state.segments)
        while len(segments) >= 2 and segments[-2].size <= MERGE_FACTOR * segments[-1].size:
            last = segments.pop()
            segments[-1] = state._merge(segments[-1], last)
        segments = [state._with_ann(s) for s in segments]
        # Row-based derived data stays valid; the segment starts and the weights kept per segment do not once
        # segments merged. Readers may be adding to the cache: copy it in one step before reading it.
        cache = dict(state._cache)
        if len(segments) != len(state.segments):
            cache = {key: value for key, value in cache.items() if key not in _PER_SEGMENT_CACHE}
        return replace(state, segments=tuple(segments), _cache=cache)

    def _merge(self, first: Segment, second: Segment) -> Segment:
        vocabulary_size = len(self.vocabulary)
        postings = merge_postings([(first.postings, first.start), (second.postings, second.start)], vocabulary_size)
        vectors = np.concatenate((first.vectors, second.vectors))
        documents = DocumentBlock.concatenated([first.documents, second.documents])
        return Segment(start=first.start, vectors=_read_only(vectors), postings=postings, documents=documents)

    def _with_ann(self, segment: Segment) -> Segment:
        # A segment too small for the index (or to train it: IVF needs a row per list) is scanned exactly.
        if self.vector_index == "Flat" or segment.ann is not None or segment.size < ann_min_rows(self.vector_index):
            return segment
        ann = AnnIndex.build(np.ascontiguousarray(segment.vectors), self.vector_index, self.vector_search_params)
        shared = ann.shared_vectors  # a graph index holds the vectors itself: keep that one copy only
        return replace(segment, ann=ann, vectors=shared if shared is not None else segment.vectors)

    def compacted(self) -> Snapshot:
        """The same live rows in one segment with no tombstones (rows renumbered, order kept)."""
        if self.dead is None and len(self.segments) <= 1:
            return self
        keep = np.ones(self.size, dtype=bool) if self.dead is None else ~self.dead
        new_row = np.cumsum(keep, dtype=np.int64) - 1
        vocabulary_size = len(self.vocabulary)
        postings = merge_postings(
            [(s.postings, s.start) for s in self.segments], vocabulary_size, keep=keep, new_row=new_row
        )
        vectors = np.concatenate([s.vectors[keep[s.start : s.stop]] for s in self.segments]) if self.segments else None
        documents = DocumentBlock.concatenated([s.documents.kept(keep[s.start : s.stop]) for s in self.segments])
        segments: tuple[Segment, ...] = ()
        if vectors is not None and vectors.shape[0]:
            segments = (Segment(start=0, vectors=_read_only(vectors), postings=postings, documents=documents),)
        rows = dict(zip(documents.ids, range(len(documents)), strict=True))
        return replace(
            self,
            segments=segments,
            lengths=self.lengths[keep],
            dead=None,
            id_table=rows,
            _cache={},
        )


def ann_min_rows(vector_index: str) -> int:
    """Rows a segment needs before it gets an approximate index of this kind."""
    return max(ANN_MIN_ROWS, check_vector_index(vector_index, None))


def empty_snapshot(settings: StoreSettings, vector_index: str, vector_search_params: str | None) -> Snapshot:
    """A snapshot with no rows."""
    return Snapshot(
        settings=settings, vector_index=vector_index, vector_search_params=vector_search_params, vocabulary={}
    )


def _padded(array: NDArray[np.int64], size: int) -> NDArray[np.int64]:
    if array.size >= size:
        return np.copy(array)
    return np.concatenate((array, np.zeros(size - array.size, dtype=array.dtype)))


def _read_only(array: FloatMatrix) -> FloatMatrix:
    array = np.ascontiguousarray(array, dtype=np.float32)
    array.flags.writeable = False
    return array


def _filter_key(spec: Any) -> str | None:
    """A cache key for a mapping filter, or None (callables are not cached)."""
    if not isinstance(spec, Mapping):
        return None
    # Only plain JSON values: anything else (sets, objects) is not cached, so two filters never share a key.
    try:
        return json.dumps(spec, sort_keys=True)
    except (TypeError, ValueError):
        return None


# --- the read view -------------------------------------------------------------------------


class LocalView(StoreView):
    """A read view of one :class:`Snapshot`: keys are its row numbers."""

    documents_are_new = True  # materialised from the compact store on every call

    def __init__(self, snapshot: Snapshot) -> None:
        """View ``snapshot`` (which never changes)."""
        self.snapshot = snapshot

    @property
    def settings(self) -> StoreSettings:
        """How the rows were indexed."""
        return self.snapshot.settings

    def __len__(self) -> int:
        return self.snapshot.live_count

    def vector(self, query_vector: FloatMatrix) -> LocalVectorScorer:
        """The vector side for one query."""
        return LocalVectorScorer(self.snapshot, query_vector)

    def bm25(self, query: str) -> LocalBM25Scorer:
        """The BM25 side for one query."""
        return LocalBM25Scorer(self.snapshot, query)

    def sides_in_parallel(self, where: Where | None) -> bool:
        """True for a large snapshot searched through ANN indexes, on a machine with a second core.

        A graph search runs on one core while BM25 takes milliseconds on another. An exact scan
        already spreads over every core (see :func:`inner_products`): a second thread for BM25
        only competes with it (measured at 100k rows: no gain for a query, 10-20% slower batches).
        """
        return self._second_thread_pays(where) and self.snapshot.approximate

    def whole_corpus_in_parallel(self, where: Where | None) -> bool:
        """True for a large snapshot on a machine with a second core, exact or not.

        Scoring every row differs from a top-k of each side: BM25 over every row costs a fifth to a
        half of the scan, which waits on memory, and the two overlap (1M zipf chunks: 167 -> 128 ms a
        query; 100k: no change).
        """
        return self._second_thread_pays(where)

    def _second_thread_pays(self, where: Where | None) -> bool:
        # A callable metadata filter keeps both sides in the caller's thread: each side evaluates it, and
        # user code must not run twice at once, nor outside the caller's thread.
        if where is not None and where.metadata is not None and not isinstance(where.metadata, Mapping):
            return False
        return _MANY_CORES and self.snapshot.size >= PARALLEL_SIDES_MIN_ROWS

    def vector_many(self, query_vectors: FloatMatrix) -> list[LocalVectorScorer]:
        """The vector side for each query vector (a row), scored in one pass over the vectors when exact."""
        queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
        scorers = [LocalVectorScorer(self.snapshot, queries[i : i + 1]) for i in range(queries.shape[0])]
        if not self.snapshot.approximate:
            for scorer, scores in zip(scorers, self.snapshot.vector_scores_many(queries), strict=True):
                scorer.preset(scores)
        return scorers

    def bm25_many(self, queries: Sequence[str]) -> list[LocalBM25Scorer]:
        """The BM25 side for each query; where every row's score is needed, each distinct term is weighed once.

        One distinct query has no weights to share: it is searched as alone (see :class:`LocalBM25Scorer`).
        """
        shared = TermWeights(parent=self.snapshot.common_term_weights()) if len(set(queries)) > 1 else None
        return [LocalBM25Scorer(self.snapshot, query, shared) for query in queries]

    def documents(self, keys: Keys) -> list[Document]:
        """The documents of ``keys`` (materialised from the compact store)."""
        return self.snapshot.documents_of(keys)

    def texts(self, keys: Keys) -> list[str]:
        """The texts of ``keys`` (no document is built)."""
        return self.snapshot.texts_of(keys)

    def ids(self, keys: Keys) -> list[str]:
        """The ids of ``keys`` (no document is built)."""
        return self.snapshot.ids_of(keys)

    def vectors(self, keys: Keys) -> FloatMatrix:
        """The stored vectors of ``keys``."""
        return self.snapshot.vectors_of(np.asarray(keys, dtype=np.int64))

    def keys_of(self, ids: Sequence[str]) -> Keys:
        """Rows of these ids (-1 when absent)."""
        rows = self.snapshot.rows
        return np.fromiter((rows.get(i, -1) for i in ids), dtype=np.int64, count=len(ids))

    def select(self, where: Where) -> Keys:
        """Live rows allowed by ``where``."""
        allowed = self.snapshot.allowed(where)
        if allowed is None:
            return np.arange(self.snapshot.size, dtype=np.int64)
        return np.flatnonzero(allowed).astype(np.int64)

    def neighbours(self, source: str, chunk_indexes: Sequence[int]) -> dict[int, Document]:
        """Chunks of ``source`` at these positions."""
        table = self.snapshot.chunk_rows()
        return {i: self.snapshot.document(row) for i in chunk_indexes if (row := table.get((source, i))) is not None}

    def iter_documents(self) -> Iterator[Document]:
        """Live documents in row order."""
        return (segment.documents.document(local) for _, segment, local in self.snapshot.iter_rows())

    @property
    def key_count(self) -> int:
        """Size of the key space (rows including dead ones): the length of ``all_scores``."""
        return self.snapshot.size


class _LocalScorer(ABC):
    """Shared top-k over a lazily computed whole-corpus score array."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._all: NDArray[np.float32] | None = None

    @abstractmethod
    def _compute(self) -> NDArray[np.float32]:
        """The score of every row for this scorer's query."""

    def preset(self, scores: NDArray[np.float32]) -> None:
        """Use ``scores`` (computed for this query with others in a batch) as the score of every row."""
        self._all = scores

    def all_scores(self) -> NDArray[np.float32]:
        """The score of every row (computed once)."""
        if self._all is None:
            self._all = self._compute()
        return self._all

    def scores(self, keys: Keys) -> Scores:
        """Exact scores of ``keys``."""
        return self.all_scores()[keys].astype(np.float64)

    def _top_of(
        self, scores: NDArray[np.float32], k: int | None, valid: NDArray[np.bool_] | None
    ) -> tuple[Keys, Scores]:
        if k is None:
            rows = np.arange(scores.size, dtype=np.int64) if valid is None else np.flatnonzero(valid)
        else:
            rows = top_rows(scores, k, valid)
        return rows, scores[rows].astype(np.float64)


class LocalVectorScorer(_LocalScorer):
    """Cosine similarity of one query vector: exact scans, or ANN candidates on large segments.

    A scan (or an approximate index) selects the candidates; the scores reported for them are
    float64 dot products of the stored vectors, so a row's score is the same bits whichever
    kernel scanned it (FAISS for one query, a matrix product for a batch). Only ``k=None`` (the
    whole corpus) reports the scan's float32 scores.
    """

    def __init__(self, snapshot: Snapshot, query_vector: FloatMatrix) -> None:
        super().__init__(snapshot)
        self.query_vector = query_vector

    def _compute(self) -> NDArray[np.float32]:
        return self.snapshot.vector_scores_all(self.query_vector)

    def _exact(self, keys: Keys) -> Scores:
        return exact_products(self.snapshot.vectors_of(np.asarray(keys, dtype=np.int64)), self.query_vector[0])

    def scores(self, keys: Keys) -> Scores:
        """Exact similarity of ``keys`` (float64 dot products of the stored vectors)."""
        return self._exact(keys)

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` most similar allowed rows (exact unless a segment has an ANN index)."""
        allowed = self.snapshot.allowed(where)
        if k is None:
            return self._top_of(self.all_scores(), None, allowed)
        if self.snapshot.approximate:
            candidates = self._ann_candidates(k, allowed)
            if candidates.size > CONTENDERS_MIN_RATIO * k:
                # Many candidates (compressed codes propose k_factor per wanted row, and each segment its own):
                # float32 products with error bounds rule most of them out, and only the rest are rescored in
                # float64 (the same top k, the same bits).
                candidates = candidates[self.snapshot.products_at(candidates, self.query_vector[0]).contenders(k)]
        else:
            candidates = top_rows(self.all_scores(), k, allowed)
        exact = self._exact(candidates)
        best = np.lexsort((candidates, -exact))[:k]
        return candidates[best], exact[best]

    def _ann_candidates(self, k: int, allowed: NDArray[np.bool_] | None) -> Keys:
        """Per segment: up to ``k_factor * k`` candidates from its ANN index, or ``k`` from an exact scan."""
        found: list[Keys] = []
        for segment in self.snapshot.segments:
            local = None if allowed is None else allowed[segment.start : segment.stop]
            if segment.ann is not None:
                rows, _ = segment.ann.search(self.query_vector, k, local)
                wanted = min(k, segment.size if local is None else int(np.count_nonzero(local)))
                if rows.size < wanted:
                    # A graph index can miss allowed rows under a selector: scan the segment exactly.
                    rows = top_rows(inner_products(segment.vectors, self.query_vector[0]), k, local)
                found.append(rows + segment.start)
            else:
                found.append(top_rows(inner_products(segment.vectors, self.query_vector[0]), k, local) + segment.start)
        return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


class LocalBM25Scorer(_LocalScorer):
    """BM25 of one query text over the live statistics of the snapshot.

    A top-k is found by pruning where it pays (:meth:`Snapshot.bm25_top`), and the scores of a
    few rows are looked up in the postings; the score of every row is computed only when asked
    for (a whole-corpus search) or where a batch makes it cheaper than pruning: the batch's
    queries share their term weights, each common term weighed once and added as one vector.
    BM25 top-100 per query, 100k zipf chunks: 1.61 ms pruned; every row 1.79 ms alone, 1.60
    shared by 2 queries, 1.20 by 8, 0.66 by 64. 1M, 64 queries in passes of 16: topics 213
    against 315 ms pruned, but zipf 848 against 671 ms: its common terms make every row's
    score cost more than pruning once the score array outgrows the cache. (Measured before the
    snapshot kept its common terms' weights for every query, :meth:`Snapshot.common_term_weights`:
    every row alone now costs 0.5 ms at 100k zipf, and the pruning thresholds were not re-tuned.)
    Every path gives the same float32 scores.
    """

    def __init__(self, snapshot: Snapshot, query: str, shared: TermWeights | None = None) -> None:
        """BM25 of ``query``; ``shared``: term weights of a batch (see :meth:`QueryWeights.add_scores`)."""
        super().__init__(snapshot)
        self.query = query
        self._shared = shared
        self._weights: QueryWeights | bool | None = False  # False: not computed yet

    def _compute(self) -> NDArray[np.float32]:
        return self.snapshot.bm25_scores_all(self.query, self._shared)

    def _query_weights(self) -> QueryWeights | None:
        if self._weights is False:
            self._weights = self.snapshot.bm25_weights(self.query)
        return self._weights  # type: ignore[return-value]

    def scores(self, keys: Keys) -> Scores:
        """Exact BM25 scores of ``keys``: looked up for a few rows, read from the whole array once it exists."""
        if self._all is not None or keys.size * FEW_ROWS_SHARE > self.snapshot.size:
            return super().scores(keys)
        weights = self._query_weights()
        if weights is None:
            return np.zeros(keys.size, dtype=np.float64)
        order = np.argsort(keys, kind="stable")
        rows = keys[order]
        first = np.concatenate(([True], rows[1:] != rows[:-1])) if rows.size else np.zeros(0, dtype=bool)
        found = weights.row_scores(rows[first], self.snapshot.bm25_blocks())
        out = np.empty(keys.size, dtype=np.float64)
        out[order] = found[np.cumsum(first) - 1]
        return out

    def top(self, k: int | None, where: Where | None = None) -> tuple[Keys, Scores]:
        """The ``k`` best allowed rows among those that match a query term."""
        allowed = self.snapshot.allowed(where)
        if k is not None and self._all is None:
            weights = self._query_weights()
            if weights is None:
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
            found = self.snapshot.bm25_top(weights, k, allowed, in_batch=self._shared is not None)
            if found is not None:
                return found[0], found[1].astype(np.float64)
        scores = self.all_scores()
        if k is None:
            return self._top_of(scores, None, scores > 0 if allowed is None else allowed & (scores > 0))
        rows = top_rows(scores, k, allowed, above=0.0)
        return rows, scores[rows].astype(np.float64)
