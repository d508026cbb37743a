"""BM25 postings over random term-id corpora, for tests of the local store's BM25 internals."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from langchain_fusion.stores.local.bm25 import QueryWeights
from langchain_fusion.stores.local.postings import Postings, build_postings
from langchain_fusion.stores.settings import BM25Params

Blocks = list[tuple[Postings, int]]
"""Postings blocks, each with the row its first document is at (the segments of a living index)."""


def zipf_corpus(rng: np.random.Generator, rows: int, vocabulary: int, duplicates: int) -> list[NDArray[np.int64]]:
    """Rows of Zipf-drawn term ids (the commonest in most rows); ``duplicates`` rows copy others (ties)."""
    p = 1.0 / np.arange(1, vocabulary + 1) ** 1.07
    p /= p.sum()
    docs = [rng.choice(vocabulary, size=int(rng.integers(3, 30)), p=p).astype(np.int64) for _ in range(rows)]
    for row in rng.choice(rows, size=duplicates, replace=False).tolist():
        docs[row] = docs[int(rng.integers(0, rows))].copy()
    return docs


def blocks_of(docs: Sequence[NDArray[np.int64]], vocabulary: int, cuts: Sequence[int]) -> Blocks:
    """Postings blocks over ``docs`` split at ``cuts`` (segments of a living index)."""
    edges = [0, *cuts, len(docs)]
    return [(build_postings(docs[lo:hi], vocabulary), lo) for lo, hi in itertools.pairwise(edges) if hi > lo]


def weights_for(
    params: BM25Params, docs: Sequence[NDArray[np.int64]], query: Counter[int], live: NDArray[np.bool_] | None = None
) -> QueryWeights:
    """Query weights under the statistics of the (live) rows."""
    alive = np.ones(len(docs), dtype=bool) if live is None else live
    sizes = np.array([d.size for d in docs], dtype=np.int64)
    terms = np.concatenate(docs)
    rows = np.repeat(np.arange(len(docs)), sizes)
    width = int(terms.max()) + 1
    kept = alive[rows]
    distinct = np.unique(rows[kept] * width + terms[kept])  # each (row, term) once: a row counts once per term
    frequency = np.bincount(distinct % width, minlength=width)
    lengths = np.array([d.size for d in docs], dtype=np.float32)
    average = float(lengths[alive].mean()) or 1.0
    return QueryWeights(params, query, frequency, int(alive.sum()), lengths / np.float32(average), average)
