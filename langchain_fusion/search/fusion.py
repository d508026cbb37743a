"""Score fusion as pure functions over aligned arrays.

Every function here takes arrays that are aligned element by element: position i of the
vector array and position i of the BM25 array are the same candidate. The retrievers build
those arrays from row ids, which is what makes the fusion correct by construction (the
widely copied tutorial adds arrays that are sorted in different orders).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from langchain_fusion._checks import FUSION_METHODS, FusionMethod, check_alpha, check_method

RRF_RANK_CONSTANT = 60
"""The rank constant of reciprocal rank fusion (Cormack et al., 2009)."""

__all__ = ["FUSION_METHODS", "RRF_RANK_CONSTANT", "FusedScores", "FusionMethod", "fuse", "min_max", "ranks", "z_score"]

FloatArray = NDArray[np.float64]


def min_max(scores: NDArray[np.floating]) -> FloatArray:
    """Scale scores linearly to [0, 1]: ``(s - min) / (max - min)``.

    When every score is equal the side cannot tell candidates apart: the result is all 1.0 if
    that score is positive (everything matched equally) and all 0.0 otherwise.
    """
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high = values.min(), values.max()
    if high > low:
        return np.asarray((values - low) / (high - low), dtype=np.float64)
    return np.full_like(values, 1.0 if high > 0 else 0.0)


def z_score(scores: NDArray[np.floating]) -> FloatArray:
    """Standardise scores: ``(s - mean) / std``; all zeros when every score is equal."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    std = values.std()
    if std > 0:
        return np.asarray((values - values.mean()) / std, dtype=np.float64)
    return np.zeros_like(values)


def ranks(scores: NDArray[np.floating], valid: NDArray[np.bool_] | None = None) -> NDArray[np.int64]:
    """1-based ranks by descending score; ties keep input order. Invalid entries get 0."""
    values = np.asarray(scores, dtype=np.float64)
    order = np.argsort(-values, kind="stable")
    result = np.zeros(values.size, dtype=np.int64)
    if valid is not None:
        order = order[valid[order]]
    result[order] = np.arange(1, order.size + 1)
    return result


@dataclass(frozen=True)
class FusedScores:
    """Fusion output for a candidate pool, aligned with the input arrays."""

    fused: FloatArray
    """The fused score of each candidate (higher is better)."""
    vector_normalized: FloatArray
    """Each candidate's vector score after normalisation (RRF: its reciprocal-rank term)."""
    bm25_normalized: FloatArray
    """Each candidate's BM25 score after normalisation (RRF: its reciprocal-rank term)."""
    vector_rank: NDArray[np.int64]
    """1-based rank of each candidate on the vector side."""
    bm25_rank: NDArray[np.int64]
    """1-based rank on the BM25 side; 0 where the BM25 score is not positive (no match)."""


def fuse(
    vector_scores: NDArray[np.floating],
    bm25_scores: NDArray[np.floating],
    alpha: float,
    method: FusionMethod = "weighted",
) -> FusedScores:
    """Fuse aligned vector and BM25 scores of one candidate pool.

    ``alpha`` is the weight of the vector side and ``1 - alpha`` that of BM25. A candidate
    whose BM25 score is not positive matched no query term: it has no BM25 rank and gets no
    RRF credit from that side. Input order is the tie-break order of the ranks.
    """
    check_alpha(alpha)
    check_method(method)
    vector = np.asarray(vector_scores, dtype=np.float64)
    bm25 = np.asarray(bm25_scores, dtype=np.float64)
    if vector.shape != bm25.shape:
        raise ValueError(f"vector and BM25 score arrays must be aligned; got shapes {vector.shape} and {bm25.shape}")
    matched = bm25 > 0
    vector_rank = ranks(vector)
    bm25_rank = ranks(bm25, valid=matched)
    if method == "weighted":
        v_norm, b_norm = min_max(vector), min_max(bm25)
    elif method == "zscore":
        v_norm, b_norm = z_score(vector), z_score(bm25)
    else:
        v_norm = 1.0 / (RRF_RANK_CONSTANT + vector_rank)
        b_norm = np.where(matched, 1.0 / (RRF_RANK_CONSTANT + np.maximum(bm25_rank, 1)), 0.0)
    fused = alpha * v_norm + (1.0 - alpha) * b_norm
    return FusedScores(fused, v_norm, b_norm, vector_rank, bm25_rank)
