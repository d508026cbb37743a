"""Score fusion as pure functions over aligned arrays.

Every function here takes arrays that are aligned element by element: position i of the
vector array and position i of the BM25 array are the same candidate. The retrievers build
those arrays from row ids, which is what makes the fusion correct by construction (the
widely copied tutorial adds arrays that are sorted in different orders).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Literal, TypeVar, cast, get_args

import numpy as np
from numpy.typing import NDArray

from langchain_fusion._checks import is_real_number
from langchain_fusion.errors import InvalidParameterError
from langchain_fusion.stores.ranking import at_least_kth

RRF_RANK_CONSTANT = 60
"""The rank constant of reciprocal rank fusion (Cormack et al., 2009)."""

FusionMethod = Literal["weighted", "zscore", "rrf"]
"""``weighted``: min-max normalise each side, then ``alpha * v + (1 - alpha) * b``.
``zscore``: the same convex combination of z-scores. ``rrf``: weighted reciprocal rank
fusion, ``alpha / (60 + rank_v) + (1 - alpha) / (60 + rank_b)``."""

FUSION_METHODS: tuple[str, ...] = get_args(FusionMethod)
"""The accepted values of ``method``."""


def check_alpha(alpha: Any) -> float:
    """The weight of the vector side: a number in [0, 1]."""
    if not is_real_number(alpha) or not 0.0 <= float(alpha) <= 1.0:
        raise InvalidParameterError(
            f"alpha must be a number between 0 and 1 (the weight of the vector side); got {alpha!r}"
        )
    return float(alpha)


def check_method(method: Any) -> FusionMethod:
    """A known fusion method."""
    if not isinstance(method, str) or method not in FUSION_METHODS:
        raise InvalidParameterError(f"method must be one of {', '.join(FUSION_METHODS)}; got {method!r}")
    return cast(FusionMethod, method)


__all__ = [
    "FUSE_BLOCK_ROWS",
    "FUSION_METHODS",
    "RRF_RANK_CONSTANT",
    "AffineScale",
    "FusedScores",
    "FusedPool",
    "FusedTop",
    "FusionMethod",
    "GivenScale",
    "SideScale",
    "check_alpha",
    "check_method",
    "fuse",
    "fuse_pool",
    "fuse_top",
    "min_max",
    "rank_of",
    "ranks",
    "weighted_rrf",
    "z_score",
]

FloatArray = NDArray[np.float64]

Rows = slice | NDArray[np.int64] | EllipsisType
"""Which scores of a side to read: a block, positions, or ``...`` for all (any shape)."""


@dataclass(frozen=True)
class AffineScale:
    """One side's normalised scores as ``(raw - shift) / spread``, computed for the rows read.

    ``spread`` 0: the side cannot tell candidates apart and every score becomes ``constant``.
    Each score is computed alone from its raw score, so a block, a gather and the whole array
    give the same bits: a pool of a whole corpus is normalised in cache-sized blocks, and only
    the returned rows are normalised again for their metadata.
    """

    raw: NDArray[np.floating]
    """The side's raw scores (float32 or float64; each is widened to float64 exactly)."""
    shift: float = 0.0
    """Subtracted from every raw score (min-max: the minimum; z-score: the mean)."""
    spread: float = 1.0
    """What the shifted scores are divided by (min-max: max - min; z-score: the standard deviation)."""
    constant: float = 0.0
    """Every normalised score when ``spread`` is 0."""

    def part(self, rows: Rows) -> FloatArray:
        """The normalised scores of ``rows``: a new float64 array."""
        if self.spread == 0:
            return np.full(self.raw[rows].shape, self.constant)
        values = self.raw[rows].astype(np.float64)  # always a copy: the raw scores stay untouched
        values -= self.shift
        values /= self.spread
        return values


@dataclass(frozen=True)
class GivenScale:
    """One side's normalised scores computed in full beforehand (RRF's reciprocal ranks)."""

    values: FloatArray
    """The normalised score of every candidate."""

    def part(self, rows: Rows) -> FloatArray:
        """The normalised scores of ``rows``: a new float64 array."""
        return np.array(self.values[rows], dtype=np.float64)


SideScale = AffineScale | GivenScale
"""How one side's raw scores become normalised scores."""


def _float_scores(scores: NDArray[np.floating]) -> NDArray[np.floating]:
    """``scores`` as an array of float32 or float64 (as given when it is one already: no copy)."""
    values = np.asarray(scores)
    return values if values.dtype in (np.float32, np.float64) else values.astype(np.float64)


def _min_max_scale(values: NDArray[np.floating]) -> AffineScale:
    """:func:`min_max` of ``values`` as a scale (the minimum and maximum widened to float64)."""
    if values.size == 0:
        return AffineScale(values)
    low, high = float(values.min()), float(values.max())
    if high > low:
        return AffineScale(values, shift=low, spread=high - low)
    return AffineScale(values, spread=0.0, constant=1.0 if high > 0 else 0.0)


def _z_score_scale(values: NDArray[np.floating]) -> AffineScale:
    """:func:`z_score` of ``values`` as a scale (statistics of the scores widened to float64)."""
    wide = np.asarray(values, dtype=np.float64)
    if wide.size == 0:
        return AffineScale(values)
    std = float(wide.std())
    if std > 0:
        return AffineScale(values, shift=float(wide.mean()), spread=std)
    return AffineScale(values, spread=0.0)


def min_max(scores: NDArray[np.floating]) -> FloatArray:
    """Scale scores linearly to [0, 1]: ``(s - min) / (max - min)``.

    When every score is equal the side cannot tell candidates apart: the result is all 1.0 if
    that score is positive (everything matched equally) and all 0.0 otherwise.
    """
    values = _float_scores(scores)
    return _min_max_scale(values).part(...)


def z_score(scores: NDArray[np.floating]) -> FloatArray:
    """Standardise scores: ``(s - mean) / std``; all zeros when every score is equal."""
    values = _float_scores(scores)
    return _z_score_scale(values).part(...)


def ranks(scores: NDArray[np.floating], valid: NDArray[np.bool_] | None = None) -> NDArray[np.int64]:
    """1-based ranks by descending score; tied scores share the best of their ranks ("1224"). Invalid entries get 0.

    A rank is one plus the number of (valid) scores above it, so it never depends on the order the
    rows come in: an engine's tie order cannot change a rank, nor the RRF score made of it.
    """
    values = np.asarray(scores, dtype=np.float64)
    result = np.zeros(values.size, dtype=np.int64)
    counted = np.arange(values.size) if valid is None else np.flatnonzero(valid)
    if counted.size == 0:
        return result
    ordered = np.sort(-values[counted])  # ascending negatives: descending scores
    result[counted] = 1 + np.searchsorted(ordered, -values[counted], side="left")
    return result


def rank_of(
    scores: NDArray[np.floating], positions: NDArray[np.int64], valid: NDArray[np.bool_] | None = None
) -> NDArray[np.int64]:
    """The ranks :func:`ranks` gives ``positions``, without sorting ``scores`` (a NaN score: rank 1, see below).

    Only rows scoring above the lowest of the asked positions can be above any of them: one pass
    over ``scores`` finds those, and each position is counted among them alone (for the few
    returned results of a whole corpus, a few hundred rows rather than every row). A few such rows
    are compared with every position at once; many, one position at a time. Positions that are
    not ``valid`` get 0.
    """
    values = np.asarray(scores)
    positions = np.asarray(positions, dtype=np.int64)
    result = np.zeros(positions.size, dtype=np.int64)
    counted = np.arange(positions.size) if valid is None else np.flatnonzero(valid[positions])
    asked = positions[counted]
    asked_values = values[asked]
    known = asked_values[~np.isnan(asked_values)]  # NaN is above and tied with nothing (rank 1)
    if known.size:
        near = values > known.min()
        if valid is not None:
            near &= valid
        rows = np.flatnonzero(near)
    else:
        rows = np.zeros(0, dtype=np.int64)
    near_values = values[rows]
    if asked.size * rows.size <= _RANK_AT_ONCE:
        result[counted] = 1 + np.count_nonzero(near_values > asked_values[:, None], axis=1)
        return result
    for i, value in zip(counted.tolist(), asked_values.tolist(), strict=True):
        result[i] = 1 + np.count_nonzero(near_values > value)
    return result


_RANK_AT_ONCE = 1 << 16
"""Up to this many comparisons (positions x rows), :func:`rank_of` compares every position at once."""


Normalised = tuple[SideScale, SideScale, NDArray[np.int64] | None, NDArray[np.int64] | None]
"""Each side's scale, and every candidate's rank on each side when the method computed them."""


def _by_min_max(vector: NDArray[np.floating], bm25: NDArray[np.floating]) -> Normalised:
    return _min_max_scale(vector), _min_max_scale(bm25), None, None


def _by_z_score(vector: NDArray[np.floating], bm25: NDArray[np.floating]) -> Normalised:
    return _z_score_scale(vector), _z_score_scale(bm25), None, None


def _by_reciprocal_rank(vector: NDArray[np.floating], bm25: NDArray[np.floating]) -> Normalised:
    matched = _matched(bm25)
    vector_rank, bm25_rank = ranks(vector), ranks(bm25, valid=matched)
    v_norm = 1.0 / (RRF_RANK_CONSTANT + vector_rank)
    b_norm = np.where(matched, 1.0 / (RRF_RANK_CONSTANT + np.maximum(bm25_rank, 1)), 0.0)
    return GivenScale(v_norm), GivenScale(b_norm), vector_rank, bm25_rank


NORMALISERS: dict[str, Callable[[NDArray[np.floating], NDArray[np.floating]], Normalised]] = {
    "weighted": _by_min_max,
    "zscore": _by_z_score,
    "rrf": _by_reciprocal_rank,
}
"""How each fusion method puts the two sides on one scale (RRF also returns the ranks it needs them all for)."""


def _aligned(
    vector_scores: NDArray[np.floating], bm25_scores: NDArray[np.floating]
) -> tuple[NDArray[np.floating], NDArray[np.floating]]:
    vector, bm25 = _float_scores(vector_scores), _float_scores(bm25_scores)
    if vector.shape != bm25.shape:
        raise ValueError(f"vector and BM25 score arrays must be aligned; got shapes {vector.shape} and {bm25.shape}")
    return vector, bm25


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
    pool = fuse_pool(vector_scores, bm25_scores, alpha, method)
    vector_rank, bm25_rank = pool.vector_rank, pool.bm25_rank
    if vector_rank is None or bm25_rank is None:  # only RRF ranks every candidate: rank them here
        vector_rank, bm25_rank = ranks(pool.vector), ranks(pool.bm25, valid=pool.matched)
    return FusedScores(pool.fused, pool.vector_normalized, pool.bm25_normalized, vector_rank, bm25_rank)


@dataclass(frozen=True)
class FusedTop:
    """The best ``k`` candidates of a pool after fusion: positions in the pool, best first, and their scores."""

    positions: NDArray[np.int64]
    """Positions in the input arrays, best first."""
    fused: FloatArray
    """Fused score of each returned candidate."""
    vector_normalized: FloatArray
    """Normalised vector score of each returned candidate."""
    bm25_normalized: FloatArray
    """Normalised BM25 score of each returned candidate."""
    vector_rank: NDArray[np.int64]
    """1-based vector rank of each returned candidate within the pool."""
    bm25_rank: NDArray[np.int64]
    """1-based BM25 rank within the pool; 0 where the BM25 score is not positive."""


_Memo = TypeVar("_Memo")


@dataclass(frozen=True)
class FusedPool:
    """A fused candidate pool, from which any ranking prefix or set of positions is read cheaply.

    Build it with :func:`fuse_pool`. :meth:`order` selects winners with a partition and sorts
    only them; :meth:`at` reads the scores and ranks of given positions. The raw score arrays
    are the caller's, not copies: they must not change while the pool is read.
    """

    vector: NDArray[np.floating]
    """Raw vector scores, aligned with the pool (float32 or float64, as given)."""
    bm25: NDArray[np.floating]
    """Raw BM25 scores, aligned with the pool (float32 or float64, as given)."""
    fused: FloatArray
    """Fused score of every candidate."""
    vector_scale: SideScale
    """How the vector side's raw scores are normalised."""
    bm25_scale: SideScale
    """How the BM25 side's raw scores are normalised."""
    heavier: NDArray[np.floating]
    """Raw scores of the side with the larger weight (the first tie-break)."""
    tie_break: NDArray[np.int64]
    """The last tie-break, ascending is better (default: position)."""
    vector_rank: NDArray[np.int64] | None
    """Every candidate's vector rank, when the method computed them all (RRF)."""
    bm25_rank: NDArray[np.int64] | None
    """Every candidate's BM25 rank, when the method computed them all (RRF)."""

    @property
    def size(self) -> int:
        """Number of candidates."""
        return int(self.fused.size)

    @property
    def matched(self) -> NDArray[np.bool_]:
        """Candidates with a positive BM25 score (a query term matched)."""
        return self._memo("_matched", lambda: _matched(self.bm25))

    @property
    def vector_normalized(self) -> FloatArray:
        """Normalised vector score of every candidate."""
        return self._memo("_vector_normalized", lambda: self.vector_scale.part(...))

    @property
    def bm25_normalized(self) -> FloatArray:
        """Normalised BM25 score of every candidate."""
        return self._memo("_bm25_normalized", lambda: self.bm25_scale.part(...))

    def _memo(self, name: str, compute: Callable[[], _Memo]) -> _Memo:
        # Not functools.cached_property: before Python 3.12 it holds one lock for every instance of the class.
        found: _Memo | None = self.__dict__.get(name)
        if found is None:
            found = compute()
            object.__setattr__(self, name, found)  # two threads may both compute it: equal arrays, one kept
        return found

    def order(self, k: int | None, eligible: NDArray[np.bool_] | None = None) -> NDArray[np.int64]:
        """Positions of the best ``k`` candidates (None: all), best first, among the ``eligible`` ones.

        Order: fused score, then the heavier side's raw score, then ``tie_break``. Candidates
        that are not eligible are never returned but keep their part in the normalisation.
        """
        fused = self.fused
        eligible_rows = None if eligible is None else np.flatnonzero(eligible)
        values = fused if eligible_rows is None else fused[eligible_rows]
        wanted = values.size if k is None else max(k, 0)
        # Ties at the k-th score are all kept for the sort.
        picked = at_least_kth(values, wanted, None) if 0 < wanted < values.size else np.arange(values.size)
        candidates = picked if eligible_rows is None else eligible_rows[picked]
        keys_ = (self.tie_break[candidates], -self.heavier[candidates], -fused[candidates])
        return candidates[np.lexsort(keys_)][:wanted].astype(np.int64)

    def at(self, positions: NDArray[np.int64]) -> FusedTop:
        """The scores and ranks of the candidates at ``positions``, in that order."""
        return FusedTop(
            positions=positions,
            fused=self.fused[positions],
            vector_normalized=self.vector_scale.part(positions),
            bm25_normalized=self.bm25_scale.part(positions),
            vector_rank=self.vector_rank[positions]
            if self.vector_rank is not None
            else rank_of(self.vector, positions),
            bm25_rank=(
                self.bm25_rank[positions] if self.bm25_rank is not None else rank_of(self.bm25, positions, self.matched)
            ),
        )


def fuse_pool(
    vector_scores: NDArray[np.floating],
    bm25_scores: NDArray[np.floating],
    alpha: float,
    method: FusionMethod,
    tie_break: NDArray[np.int64] | None = None,
    vector_evidence: bool = True,
) -> FusedPool:
    """Normalise and fuse one pool (the scores of :func:`fuse`), ready to be ranked (:class:`FusedPool`).

    ``vector_evidence`` False (the embedding model cannot read the query, see
    :mod:`~langchain_fusion.models.scripts`) gives the vector side no part in the fused score: every
    normalised vector score is 0 and the BM25 side has all the weight, so the pool is fused as with
    ``alpha`` 0 and each fused score is its normalised BM25 score, on the full scale (a side with no
    weight does not halve it). With ``alpha`` 1, vector only, nothing changes.

    The raw scores are kept as given (float32 stays float32, no copy: they must not change while
    the pool is read) and fused in blocks of :data:`FUSE_BLOCK_ROWS`. For min-max and z-score,
    the normalised scores of a whole corpus never exist as whole arrays, only the fused ones do;
    each returned candidate's are computed again from its raw scores (same bits).
    """
    alpha = check_alpha(alpha)
    check_method(method)
    vector, bm25 = _aligned(vector_scores, bm25_scores)
    v_scale, b_scale, vector_rank, bm25_rank = NORMALISERS[method](vector, bm25)
    if not vector_evidence and alpha < 1:  # vector only (alpha 1) keeps its own ranking
        v_scale, alpha = AffineScale(vector, spread=0.0), 0.0
    fused = np.empty(vector.size, dtype=np.float64)
    for start in range(0, vector.size, FUSE_BLOCK_ROWS):
        block = slice(start, start + FUSE_BLOCK_ROWS)
        v_part, b_part = v_scale.part(block), b_scale.part(block)
        v_part *= alpha
        b_part *= 1.0 - alpha
        np.add(v_part, b_part, out=fused[block])
    return FusedPool(
        vector=vector,
        bm25=bm25,
        fused=fused,
        vector_scale=v_scale,
        bm25_scale=b_scale,
        heavier=vector if alpha >= 0.5 else bm25,
        tie_break=np.arange(fused.size, dtype=np.int64) if tie_break is None else tie_break,
        vector_rank=vector_rank,
        bm25_rank=bm25_rank,
    )


FUSE_BLOCK_ROWS = 1 << 15
"""Rows fused at a time: each block's normalised scores (256 KB a side) stay in a core's cache."""


def _matched(bm25: NDArray[np.floating]) -> NDArray[np.bool_]:
    """Candidates whose BM25 score is positive (a query term matched)."""
    return np.asarray(bm25 > 0)


def fuse_top(
    vector_scores: NDArray[np.floating],
    bm25_scores: NDArray[np.floating],
    alpha: float,
    method: FusionMethod,
    k: int,
    tie_break: NDArray[np.int64] | None = None,
) -> FusedTop:
    """The top ``k`` of :func:`fuse` for one pool, without sorting the pool.

    Order: fused score, then the raw score of the side with the larger weight, then
    ``tie_break`` (default: position), all as :func:`fuse` ranks them. The winners are
    selected with a partition and only they are sorted and ranked, so a pool of a whole
    corpus costs a few passes over its scores (RRF, whose scores are ranks, sorts each side once).
    """
    pool = fuse_pool(vector_scores, bm25_scores, alpha, method, tie_break)
    return pool.at(pool.order(k))


def weighted_rrf(list_ranks: NDArray[np.integer], weights: NDArray[np.floating]) -> FloatArray:
    """Weighted reciprocal rank fusion of several ranked lists over one set of candidates.

    ``list_ranks[i, j]`` is candidate ``j``'s 1-based rank in list ``i`` (0: not in that list);
    the fused score of ``j`` is ``sum_i weights[i] / (60 + list_ranks[i, j])`` over the lists
    that hold it.
    """
    ranked = np.asarray(list_ranks, dtype=np.int64)
    w = np.asarray(weights, dtype=np.float64)
    if ranked.ndim != 2 or w.shape != (ranked.shape[0],):
        raise ValueError(f"need one weight per list; got ranks of shape {ranked.shape} and weights {w.shape}")
    terms = np.where(ranked > 0, w[:, None] / (RRF_RANK_CONSTANT + np.maximum(ranked, 1)), 0.0)
    return np.asarray(terms.sum(axis=0), dtype=np.float64)
