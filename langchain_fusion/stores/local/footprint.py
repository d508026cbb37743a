"""What an in-process index keeps in memory, structure by structure.

:func:`footprint` counts every structure a :class:`~langchain_fusion.stores.local.snapshot.Snapshot`
holds: per segment (vectors, the approximate index, postings, documents (texts and metadata as
kept, compressed or mapped), ids and their lookup once built, the bitmaps and block bounds kept
for queries) and per snapshot (row lengths and statistics, the vocabulary, the common terms'
weights and the other derived data it caches). Python objects are
counted with ``sys.getsizeof`` (containers and their keys and values, not shared small objects);
arrays by their bytes. Memory-mapped arrays of a loaded folder are counted too, though the page
cache may hold them instead of the process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from langchain_fusion.stores.local.snapshot import Snapshot
from langchain_fusion.stores.local.term_weights import TermWeights


def footprint(snapshot: Snapshot) -> dict[str, int]:
    """Bytes held by each structure of ``snapshot``, largest first (see the module docstring)."""
    parts: dict[str, int] = {}

    def add(name: str, size: int) -> None:
        parts[name] = parts.get(name, 0) + int(size)

    for segment in snapshot.segments:
        vectors = segment.vectors
        if segment.ann is not None and segment.ann.shared_vectors is not None:
            add("ann index (holding the vectors)", segment.ann.nbytes)
        else:
            add("vectors", vectors.nbytes)
            if segment.ann is not None:
                add("ann index", segment.ann.nbytes)
        postings = segment.postings
        add("bm25 postings", postings.indptr.nbytes + postings.rows.nbytes + postings.tf.nbytes)
        add("bm25 presence bitmaps (kept)", postings.presence.nbytes)
        add("bm25 block bounds (kept)", postings.block_maxima.nbytes)
        documents = segment.documents
        add("documents: texts and metadata", documents.nbytes)
        add("documents: ids", documents.ids.nbytes)
        add("id table", documents.ids.lookup_nbytes)
        columns = documents.columns()
        add("documents: filter columns", sum(column.codes.nbytes + _mapping(column.values) for column in columns))
    add("bm25 lengths and statistics", snapshot.lengths.nbytes + snapshot.document_frequency.nbytes)
    if snapshot.dead is not None:
        add("tombstones", snapshot.dead.nbytes)
    add("bm25 vocabulary", _mapping(snapshot.vocabulary))
    for key, value in snapshot.cached().items():
        add(_CACHE_NAMES.get(key, "other cached data"), _sized(value))
    return dict(sorted(parts.items(), key=lambda item: -item[1]))


_CACHE_NAMES = {
    "common_term_weights": "bm25 common terms' weights (kept)",
    "relative_lengths": "bm25 lengths and statistics",
    "filters": "filter masks",
    "chunks": "chunk table",
}


def _sized(value: Any) -> int:
    """Bytes of a cached value: arrays, term weights, containers of them."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, TermWeights):
        return sum(weights.nbytes for _, weights in value.parts())
    if isinstance(value, Mapping):
        return _mapping(value, _sized)
    return sys.getsizeof(value)


def _mapping(mapping: Mapping[Any, Any], value_size: Callable[[Any], int] = sys.getsizeof) -> int:
    """A mapping's own size plus its keys' and values'."""
    return sys.getsizeof(mapping) + sum(sys.getsizeof(key) + value_size(value) for key, value in mapping.items())
