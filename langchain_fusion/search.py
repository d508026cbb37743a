"""Scoring one query against a FusionIndex: single-side top-k and fused top-k over row ids.

The fused search builds a candidate pool from both sides (``fetch_k`` rows each, or every
row when ``fetch_k`` is None), then looks up each candidate's real score on *both* sides by
row id before normalising and fusing. Nothing is ever combined by list position.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
from langchain_core.documents import Document
from numpy.typing import NDArray

from langchain_fusion import metadata as keys
from langchain_fusion.fusion import FusionMethod, fuse
from langchain_fusion.index import FusionIndex
from langchain_fusion.vector import FloatMatrix

Rows = NDArray[np.int64]


@dataclass(frozen=True)
class Hit:
    """One ranked result: its row and the score provenance the retrievers put in metadata."""

    row: int
    """Row of the chunk in the index."""
    fused: float | None = None
    """Fused score (fused search only)."""
    vector_score: float | None = None
    """Raw cosine similarity, when the vector side was consulted."""
    vector_normalized: float | None = None
    """Normalised vector score (fused search only)."""
    vector_rank: int | None = None
    """1-based rank on the vector side among the candidates."""
    bm25_score: float | None = None
    """Raw BM25 score, when the BM25 side was consulted."""
    bm25_normalized: float | None = None
    """Normalised BM25 score (fused search only)."""
    bm25_rank: int | None = None
    """1-based rank on the BM25 side; None when no query term matched."""


def top_rows(scores: NDArray[np.floating], k: int, valid: NDArray[np.bool_] | None = None) -> Rows:
    """Rows of the ``k`` highest scores (among ``valid`` rows), best first, ties by row id."""
    candidates = np.flatnonzero(valid) if valid is not None else None
    values = scores[candidates] if candidates is not None else scores
    if k <= 0 or values.size == 0:
        return np.zeros(0, dtype=np.int64)
    if k < values.size:
        kth = np.partition(values, values.size - k)[values.size - k]
        picked = np.flatnonzero(values >= kth)  # may hold more than k when scores tie at kth
    else:
        picked = np.arange(values.size)
    picked = picked[np.lexsort((picked, -values[picked]))][:k]
    rows = candidates[picked] if candidates is not None else picked
    return rows.astype(np.int64)


def vector_search(index: FusionIndex, query_vector: FloatMatrix, k: int, mask: NDArray[np.bool_] | None) -> list[Hit]:
    """Top ``k`` rows by cosine similarity (exact on a flat index), restricted to ``mask``."""
    if index.vectors is None or len(index) == 0:
        return []
    if index.vectors.is_exact:
        scores = index.vectors.scores_all(query_vector)
        rows = top_rows(scores, k, mask)
        row_scores = scores[rows]
    else:
        allowed = None if mask is None else np.flatnonzero(mask).astype(np.int64)
        rows, row_scores = index.vectors.search(query_vector, k, allowed)
    return [
        Hit(row=int(r), vector_score=float(s), vector_rank=rank)
        for rank, (r, s) in enumerate(zip(rows, row_scores, strict=True), start=1)
    ]


def bm25_search(index: FusionIndex, query: str, k: int, mask: NDArray[np.bool_] | None) -> list[Hit]:
    """Top ``k`` rows by BM25 among rows that match at least one query term."""
    scores = index.bm25.scores(query)
    matched = scores > 0
    if mask is not None:
        matched &= mask
    rows = top_rows(scores, k, matched)
    return [Hit(row=int(r), bm25_score=float(scores[r]), bm25_rank=rank) for rank, r in enumerate(rows, start=1)]


@dataclass(frozen=True)
class QueryScores:
    """One query's scores on both sides, computed once and reusable across fusion settings."""

    query_vector: FloatMatrix
    """The normalised query embedding (1 x dimension)."""
    bm25: NDArray[np.float32]
    """BM25 score of every row (0 outside the mask)."""
    vector: NDArray[np.float32] | None
    """Cosine similarity of every row, when it was cheap or required (flat index or fetch_k=None)."""
    mask: NDArray[np.bool_] | None
    """Rows the query may return, or None for all."""


def score_query(
    index: FusionIndex,
    query: str,
    query_vector: FloatMatrix,
    *,
    fetch_k: int | None,
    mask: NDArray[np.bool_] | None = None,
) -> QueryScores:
    """Score ``query`` on both sides of ``index`` (all rows on BM25; all vector rows when exact)."""
    bm25_all = index.bm25.scores(query)
    if mask is not None:
        bm25_all = np.where(mask, bm25_all, np.float32(0))
    vector_all = None
    if index.vectors is not None and (index.vectors.is_exact or fetch_k is None):
        vector_all = index.vectors.scores_all(query_vector)
    return QueryScores(query_vector, bm25_all, vector_all, mask)


def fused_search(
    index: FusionIndex,
    query: str,
    query_vector: FloatMatrix,
    *,
    k: int,
    alpha: float,
    fetch_k: int | None,
    method: FusionMethod,
    mask: NDArray[np.bool_] | None,
    scores: QueryScores | None = None,
) -> list[Hit]:
    """Top ``k`` rows by fused score; see the module docstring for the candidate pool.

    A side whose weight is zero (``alpha`` 0 or 1) adds no candidates, so the limits give
    exactly the single-side rankings. Ties are broken by the raw score of the side with the
    larger weight, then by row id. ``scores`` (from :func:`score_query` with the same query,
    ``fetch_k`` and ``mask``) skips re-scoring when several settings are tried for one query.
    """
    n = len(index)
    if n == 0 or index.vectors is None:
        return []
    if scores is None:
        scores = score_query(index, query, query_vector, fetch_k=fetch_k, mask=mask)
    use_vector, use_bm25 = alpha > 0, alpha < 1
    bm25_all, vector_all = scores.bm25, scores.vector

    parts: list[Rows] = []
    if fetch_k is None:
        if use_vector:
            parts.append(np.arange(n, dtype=np.int64) if mask is None else np.flatnonzero(mask))
        if use_bm25:
            parts.append(np.flatnonzero(bm25_all > 0))
    else:
        pool_size = max(fetch_k, k)
        if use_vector and vector_all is not None:
            parts.append(top_rows(vector_all, pool_size, mask))
        elif use_vector:
            allowed = None if mask is None else np.flatnonzero(mask).astype(np.int64)
            parts.append(index.vectors.search(query_vector, pool_size, allowed)[0])
        if use_bm25:
            parts.append(top_rows(bm25_all, pool_size, bm25_all > 0))
    pool = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    if pool.size == 0:
        return []

    if vector_all is not None:
        vector_pool = vector_all[pool].astype(np.float64)
    else:
        vector_pool = index.vectors.scores_for(query_vector, pool).astype(np.float64)
    bm25_pool = bm25_all[pool].astype(np.float64)
    return rank_pool(pool, vector_pool, bm25_pool, alpha=alpha, method=method, k=k)


def rank_pool(
    rows: Rows,
    vector_scores: NDArray[np.float64],
    bm25_scores: NDArray[np.float64],
    *,
    alpha: float,
    method: FusionMethod,
    k: int,
    vector_known: NDArray[np.bool_] | None = None,
) -> list[Hit]:
    """Fuse an aligned candidate pool and return its top ``k`` as hits.

    ``rows`` must be sorted ascending (it is the final tie-break). ``vector_known`` marks the
    candidates whose vector score was actually observed; the others are reported with no
    vector score or rank (their placeholder score still takes part in normalisation).
    """
    fused = fuse(vector_scores, bm25_scores, alpha, method)
    heavier = vector_scores if alpha >= 0.5 else bm25_scores
    order = np.lexsort((rows, -heavier, -fused.fused))[:k]
    hits = []
    for i in order:
        known = vector_known is None or bool(vector_known[i])
        hits.append(
            Hit(
                row=int(rows[i]),
                fused=float(fused.fused[i]),
                vector_score=float(vector_scores[i]) if known else None,
                vector_normalized=float(fused.vector_normalized[i]),
                vector_rank=int(fused.vector_rank[i]) if known else None,
                bm25_score=float(bm25_scores[i]),
                bm25_normalized=float(fused.bm25_normalized[i]),
                bm25_rank=int(fused.bm25_rank[i]) or None,
            )
        )
    return hits


def scored_copy(document: Document, hit: Hit, method: str | None = None) -> Document:
    """A copy of ``document`` whose metadata also holds the hit's score provenance."""
    meta = copy.deepcopy(document.metadata)
    fused = hit.fused is not None
    if fused:
        meta[keys.FUSION_SCORE] = hit.fused
        meta[keys.FUSION_METHOD] = method
        meta[keys.VECTOR_SCORE] = hit.vector_score
        meta[keys.VECTOR_SCORE_NORMALIZED] = hit.vector_normalized
        meta[keys.VECTOR_RANK] = hit.vector_rank
        meta[keys.BM25_SCORE] = hit.bm25_score
        meta[keys.BM25_SCORE_NORMALIZED] = hit.bm25_normalized
        meta[keys.BM25_RANK] = hit.bm25_rank
    elif hit.vector_score is not None:
        meta[keys.VECTOR_SCORE] = hit.vector_score
        meta[keys.VECTOR_RANK] = hit.vector_rank
    else:
        meta[keys.BM25_SCORE] = hit.bm25_score
        meta[keys.BM25_RANK] = hit.bm25_rank
    return Document(id=document.id, page_content=document.page_content, metadata=meta)
