"""How the in-process store changes: each mutation builds a new :class:`Snapshot` from the current one.

An upsert appends a segment (tombstoning the live rows it replaces), a delete tombstones rows and
takes them out of the live statistics, and after either the merge policy runs: small trailing
segments merge into their predecessor, the segments are rewritten without dead rows once many are
dead (a compaction), and segments grown large enough get an approximate index. The old snapshot
is never touched: a mutation that fails half way leaves it as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion.errors import FusionError
from langchain_fusion.phases import phase
from langchain_fusion.stores.base import FloatMatrix, Keys
from langchain_fusion.stores.local.documents import DocumentBlock
from langchain_fusion.stores.local.postings import merge_postings, postings_of_texts
from langchain_fusion.stores.local.snapshot import Segment, Snapshot
from langchain_fusion.stores.local.vectors import AnnIndex, check_vector_index

MERGE_FACTOR = 4
"""A segment is merged into its predecessor once it holds at least 1/MERGE_FACTOR of its rows."""

COMPACT_DEAD_RATIO = 0.25
"""Segments are rewritten without dead rows once this share of all rows is dead."""

ANN_MIN_ROWS = 4096
"""Segments smaller than this are scanned exactly even when an approximate index is configured."""


def upserted(
    snapshot: Snapshot, documents: Sequence[Document], vectors: FloatMatrix, bm25_texts: Sequence[str]
) -> Snapshot:
    """A snapshot with these rows added, replacing live rows with the same ids."""
    if not documents:
        return snapshot
    ids = [doc.id for doc in documents]
    if any(not isinstance(i, str) or not i for i in ids) or len(set(ids)) != len(ids):
        raise FusionError("every row needs a distinct, non-empty string id; got repeated or missing ids")
    dimension = int(vectors.shape[1])
    settings = snapshot.settings
    if settings.dimension is None:
        settings = settings.model_copy(update={"dimension": dimension})
    elif settings.dimension != dimension:
        raise FusionError(
            f"expected vectors of dimension {settings.dimension}; got {dimension}. "
            "Every text must be embedded by the same model that built the index."
        )
    found = snapshot.rows_of([doc.id or "" for doc in documents])
    replaced = found[found >= 0]
    state = _without_rows(snapshot, replaced) if replaced.size else snapshot
    vocabulary = dict(state.vocabulary)
    with phase("bm25"):
        postings, lengths = postings_of_texts(settings.analyzer, bm25_texts, vocabulary)
    start = state.size
    block = DocumentBlock.from_documents(documents)
    with phase("vectors"):
        segment = Segment(start=start, vectors=_read_only(vectors), postings=postings, documents=block)
    frequency = _padded(state.document_frequency, len(vocabulary)) + postings.document_frequencies(len(vocabulary))
    dead = None if state.dead is None else np.concatenate((state.dead, np.zeros(len(documents), dtype=bool)))
    new = replace(
        state,
        settings=settings,
        vocabulary=vocabulary,
        segments=(*state.segments, segment),
        lengths=np.concatenate((state.lengths, lengths)),
        dead=dead,
        document_frequency=frequency,
        live_length=state.live_length + int(lengths.sum()),
    )
    return maintained(new)


def deleted(snapshot: Snapshot, ids: Sequence[str]) -> tuple[Snapshot, int]:
    """A snapshot without the live rows of these ids (unknown ids are ignored), and how many went."""
    rows = snapshot.rows_of(ids)
    found = np.unique(rows[rows >= 0])
    if found.size == 0:
        return snapshot, 0
    return maintained(_without_rows(snapshot, found)), int(found.size)


def _without_rows(snapshot: Snapshot, rows: Keys) -> Snapshot:
    """Tombstone live ``rows`` and take them out of the statistics."""
    flagged = np.zeros(snapshot.size, dtype=bool)
    flagged[rows] = True
    frequency = snapshot.document_frequency.copy()
    for segment in snapshot.segments:
        local = flagged[segment.start : segment.stop]
        if local.any():
            frequency -= np.bincount(segment.postings.terms_of_rows(local), minlength=frequency.size)
    dead = flagged if snapshot.dead is None else snapshot.dead | flagged
    return replace(
        snapshot,
        dead=dead,
        document_frequency=frequency,
        live_length=snapshot.live_length - int(snapshot.lengths[rows].sum()),
    )


def maintained(snapshot: Snapshot) -> Snapshot:
    """Merge small trailing segments, compact when many rows are dead, build ANN indexes."""
    state = snapshot
    if state.dead_count and state.dead_count >= COMPACT_DEAD_RATIO * state.size:
        state = compacted(state)
    segments = list(state.segments)
    while len(segments) >= 2 and segments[-2].size <= MERGE_FACTOR * segments[-1].size:
        last = segments.pop()
        segments[-1] = _merged(state, segments[-1], last)
    segments = [_with_ann(state, s) for s in segments]
    return state.with_segments(tuple(segments))


def _merged(snapshot: Snapshot, first: Segment, second: Segment) -> Segment:
    vocabulary_size = len(snapshot.vocabulary)
    with phase("bm25"):
        postings = merge_postings([(first.postings, first.start), (second.postings, second.start)], vocabulary_size)
    with phase("vectors"):
        vectors = np.concatenate((first.vectors, second.vectors))
    documents = DocumentBlock.concatenated([first.documents, second.documents])
    return Segment(start=first.start, vectors=_read_only(vectors), postings=postings, documents=documents)


def _with_ann(snapshot: Snapshot, segment: Segment) -> Segment:
    # A segment too small for the index (or to train it: IVF needs a row per list) is scanned exactly.
    if snapshot.vector_index == "Flat" or segment.ann is not None or segment.size < ann_min_rows(snapshot.vector_index):
        return segment
    with phase("vectors"):
        ann = AnnIndex.build(
            np.ascontiguousarray(segment.vectors), snapshot.vector_index, snapshot.vector_search_params
        )
    shared = ann.shared_vectors  # a graph index holds the vectors itself: keep that one copy only
    return replace(segment, ann=ann, vectors=shared if shared is not None else segment.vectors)


def compacted(snapshot: Snapshot) -> Snapshot:
    """The same live rows in one segment with no tombstones (rows renumbered, order kept)."""
    if snapshot.dead is None and len(snapshot.segments) <= 1:
        return snapshot
    keep = np.ones(snapshot.size, dtype=bool) if snapshot.dead is None else ~snapshot.dead
    new_row = np.cumsum(keep, dtype=np.int64) - 1
    vocabulary_size = len(snapshot.vocabulary)
    postings = merge_postings(
        [(s.postings, s.start) for s in snapshot.segments], vocabulary_size, keep=keep, new_row=new_row
    )
    vectors = (
        np.concatenate([s.vectors[keep[s.start : s.stop]] for s in snapshot.segments]) if snapshot.segments else None
    )
    documents = DocumentBlock.concatenated([s.documents.kept(keep[s.start : s.stop]) for s in snapshot.segments])
    segments: tuple[Segment, ...] = ()
    if vectors is not None and vectors.shape[0]:
        segments = (Segment(start=0, vectors=_read_only(vectors), postings=postings, documents=documents),)
    return replace(snapshot, segments=segments, lengths=snapshot.lengths[keep], dead=None)


def ann_min_rows(vector_index: str) -> int:
    """Rows a segment needs before it gets an approximate index of this kind."""
    return max(ANN_MIN_ROWS, check_vector_index(vector_index, None))


def _padded(array: NDArray[np.int64], size: int) -> NDArray[np.int64]:
    if array.size >= size:
        return np.copy(array)
    return np.concatenate((array, np.zeros(size - array.size, dtype=array.dtype)))


def _read_only(array: FloatMatrix) -> FloatMatrix:
    array = np.ascontiguousarray(array, dtype=np.float32)
    array.flags.writeable = False
    return array
